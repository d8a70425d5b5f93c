//! Every collective, every element type and every reduction on mock ranks, N from 2 to
//! 16, with counts that divide neither by N nor by the chunk size: integers, max and min
//! exact, float sums within the reduction-order tolerance (N × EPSILON × Σ|xᵢ|), and
//! every rank holding the same bits.

mod common;

use common::*;
use uhca_collective::mock::MockCluster;
use uhca_collective::{Bf16, Element, F16, ReduceOp};

/// Elements per rank in the all-reduce and broadcast cases (and blocks of
/// reduce-scatter and all-gather): 1001 = 7 × 11 × 13, no power of two, and not a
/// multiple of any chunk's elements.
const COUNT: usize = 1001;
const BLOCK: usize = 77;

fn all_reduce<T: Element>(c: &mut MockCluster, seed: u64, op: ReduceOp, rd: bool) {
    let n = c.ranks.len();
    let inputs: Vec<Vec<T>> = (0..n).map(|r| input(seed, r, COUNT)).collect();
    let want = reference(&inputs, op);
    let out = c.run(|comm| {
        let mut v = inputs[comm.rank()].clone();
        let r = if rd {
            comm.all_reduce_recursive_doubling(&mut v, op)
        } else {
            comm.all_reduce_ring(&mut v, op)
        };
        r.map(|()| v)
    });
    let what = format!("all_reduce rd={rd} {:?} {op:?} n={n}", T::DATATYPE);
    let first = out[0].clone().unwrap_or_else(|e| panic!("{what}: {e}"));
    for (rank, got) in out.into_iter().enumerate() {
        let got = got.unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(wrong(&got, &want, op, n), 0, "{what}: rank {rank}");
        assert_eq!(got, first, "{what}: rank {rank} has other bits than rank 0");
    }
}

fn reduce_scatter<T: Element>(c: &mut MockCluster, seed: u64, op: ReduceOp) {
    let n = c.ranks.len();
    let inputs: Vec<Vec<T>> = (0..n).map(|r| input(seed, r, n * BLOCK)).collect();
    let want = reference(&inputs, op);
    let out = c.run(|comm| {
        let mut v = inputs[comm.rank()].clone();
        comm.reduce_scatter(&mut v, op).map(|()| v)
    });
    for (rank, got) in out.into_iter().enumerate() {
        let got = got.unwrap_or_else(|e| panic!("reduce_scatter n={n}: {e}"));
        let mine = rank * BLOCK..(rank + 1) * BLOCK;
        assert_eq!(
            wrong(&got[mine.clone()], &want[mine], op, n),
            0,
            "reduce_scatter {:?} {op:?} n={n}: rank {rank}",
            T::DATATYPE
        );
    }
}

fn all_gather<T: Element>(c: &mut MockCluster, seed: u64) {
    let n = c.ranks.len();
    let blocks: Vec<Vec<T>> = (0..n).map(|r| input(seed, r, BLOCK)).collect();
    let want: Vec<T> = blocks.concat();
    let out = c.run(|comm| {
        let r = comm.rank();
        // The other blocks hold garbage the gather must overwrite.
        let mut v: Vec<T> = input(seed + 99, r, n * BLOCK);
        v[r * BLOCK..(r + 1) * BLOCK].copy_from_slice(&blocks[r]);
        comm.all_gather(&mut v).map(|()| v)
    });
    for (rank, got) in out.into_iter().enumerate() {
        let got = got.unwrap_or_else(|e| panic!("all_gather n={n}: {e}"));
        assert!(
            got == want,
            "all_gather {:?} n={n}: rank {rank}",
            T::DATATYPE
        );
    }
}

fn broadcast<T: Element>(c: &mut MockCluster, seed: u64, root: usize) {
    let n = c.ranks.len();
    let want: Vec<T> = input(seed, root, COUNT);
    let out = c.run(|comm| {
        let r = comm.rank();
        let mut v = if r == root {
            want.clone()
        } else {
            input(seed + 7, r, COUNT)
        };
        comm.broadcast(&mut v, root).map(|()| v)
    });
    for (rank, got) in out.into_iter().enumerate() {
        let got = got.unwrap_or_else(|e| panic!("broadcast n={n}: {e}"));
        assert!(
            got == want,
            "broadcast {:?} root {root} n={n}: rank {rank}",
            T::DATATYPE
        );
    }
}

fn every_op<T: Element>(c: &mut MockCluster, seed: u64) {
    let n = c.ranks.len();
    for (i, op) in ReduceOp::ALL.into_iter().enumerate() {
        let s = seed + i as u64 * 10;
        all_reduce::<T>(c, s, op, false);
        all_reduce::<T>(c, s + 1, op, true);
        reduce_scatter::<T>(c, s + 2, op);
    }
    all_gather::<T>(c, seed + 3);
    broadcast::<T>(c, seed + 4, 0);
    broadcast::<T>(c, seed + 5, (n / 2 + 1) % n);
}

fn everything(n: usize) {
    let mut c = cluster(n, small_chunks());
    every_op::<f32>(&mut c, 100);
    every_op::<F16>(&mut c, 200);
    every_op::<Bf16>(&mut c, 300);
    every_op::<i32>(&mut c, 400);
    every_op::<u8>(&mut c, 500);
    c.close().unwrap();
}

#[test]
fn every_collective_type_and_op_over_2_ranks() {
    everything(2);
}

#[test]
fn every_collective_type_and_op_over_3_ranks() {
    everything(3);
}

#[test]
fn every_collective_type_and_op_over_5_ranks() {
    everything(5);
}

#[test]
fn every_collective_type_and_op_over_8_ranks() {
    everything(8);
}

#[test]
fn every_collective_type_and_op_over_16_ranks() {
    everything(16);
}

#[test]
fn all_reduce_is_exact_on_both_sides_of_the_small_message_threshold() {
    // Up to `small_bytes` (4096: 1024 i32) recursive doubling, above it the ring.
    let mut c = cluster(6, small_chunks());
    for count in [1, 5, 1024, 1025, 5000] {
        let inputs: Vec<Vec<i32>> = (0..6).map(|r| input(count as u64, r, count)).collect();
        let want = reference(&inputs, ReduceOp::Sum);
        let out = c.run(|comm| {
            let mut v = inputs[comm.rank()].clone();
            comm.all_reduce(&mut v, ReduceOp::Sum).map(|()| v)
        });
        for got in out {
            assert_eq!(
                wrong(&got.unwrap(), &want, ReduceOp::Sum, 6),
                0,
                "count {count}"
            );
        }
    }
    c.close().unwrap();
}

#[test]
fn one_rank_is_a_copy() {
    let mut c = cluster(1, small_chunks());
    let out = c.run(|comm| {
        let mut v = vec![1.5f32, -2.0];
        comm.all_reduce(&mut v, ReduceOp::Sum).map(|()| v)
    });
    assert_eq!(out[0].as_ref().unwrap(), &[1.5, -2.0]);
    c.close().unwrap();
}

#[test]
fn bad_arguments_are_refused_before_anything_moves() {
    let mut c = cluster(3, small_chunks());
    let out = c.run(|comm| {
        let mut v = vec![0i32; 10]; // not 3 blocks
        (
            comm.reduce_scatter(&mut v, ReduceOp::Sum),
            comm.all_gather(&mut v),
            comm.broadcast(&mut v, 3),
            comm.is_broken(),
        )
    });
    for (rs, ag, bc, broken) in out {
        assert!(matches!(
            rs,
            Err(uhca_collective::Error::InvalidArgument(_))
        ));
        assert!(matches!(
            ag,
            Err(uhca_collective::Error::InvalidArgument(_))
        ));
        // The root, the value given and the largest root there is.
        let Err(uhca_collective::Error::InvalidArgument(e)) = bc else {
            panic!("{bc:?}")
        };
        assert_eq!(
            (e.arg, e.given, e.limit),
            (
                uhca_collective::Arg::Root,
                3,
                uhca_collective::Limit::Max(2)
            )
        );
        assert_eq!(e.to_string(), "invalid argument root: 3 given, at most 2");
        assert!(!broken);
    }
    c.close().unwrap();
}

#[test]
fn mock_ranks_get_an_idle_hook_that_shares_the_cpus() {
    // Ranks are threads that may outnumber the CPUs: a rank that spins without yielding
    // holds back the rank whose step it waits for (8 ranks on 2 CPUs took 30 ms per
    // 16-element all-reduce, 0.5 ms with the hook).
    let c = cluster(2, small_chunks());
    assert!(c.ranks.iter().all(|r| r.comm.config().idle.is_some()));
    let custom = cluster(
        2,
        uhca_collective::Config {
            idle: Some(|_| {}),
            ..small_chunks()
        },
    );
    assert!(custom.ranks.iter().all(|r| r.comm.config().idle.is_some()));
    c.close().unwrap();
    custom.close().unwrap();
}

#[test]
fn collectives_over_infiniband() {
    let mut c = MockCluster::new(4, uhca_mock::LinkLayer::InfiniBand, small_chunks())
        .expect("the cluster comes up");
    all_reduce::<f32>(&mut c, 900, ReduceOp::Sum, false);
    all_reduce::<i32>(&mut c, 901, ReduceOp::Max, true);
    reduce_scatter::<u8>(&mut c, 902, ReduceOp::Sum);
    all_gather::<Bf16>(&mut c, 903);
    broadcast::<F16>(&mut c, 904, 3);
    c.close().unwrap();
}
