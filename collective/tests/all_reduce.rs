//! Ring and recursive-doubling all-reduce on mock ranks: every rank ends with the
//! reduction of every rank's buffer, for sizes that do not divide by the number of ranks
//! or by the chunk size.

mod common;

use common::*;
use uhca_collective::{Element, ReduceOp};

fn ring_all_reduce<T: Element>(n: usize, count: usize, op: ReduceOp, seed: u64) {
    let mut c = cluster(n, small_chunks());
    let inputs: Vec<Vec<T>> = (0..n).map(|r| input(seed, r, count)).collect();
    let want = reference(&inputs, op);
    let out = c.run(|comm| {
        let mut v = inputs[comm.rank()].clone();
        comm.all_reduce_ring(&mut v, op).map(|()| v)
    });
    let first = out[0].as_ref().unwrap().clone();
    for (rank, got) in out.into_iter().enumerate() {
        let got = got.unwrap_or_else(|e| panic!("rank {rank}: {e}"));
        assert_eq!(
            wrong(&got, &want, op, n),
            0,
            "rank {rank}, n {n}, count {count}"
        );
        assert_eq!(got, first, "every rank holds the same bits");
    }
    c.close().unwrap();
}

#[test]
fn ring_sums_f32_over_three_ranks() {
    ring_all_reduce::<f32>(3, 1000, ReduceOp::Sum, 1);
}

#[test]
fn ring_sums_i32_over_four_ranks_exactly() {
    ring_all_reduce::<i32>(4, 999, ReduceOp::Sum, 2);
}

#[test]
fn ring_sums_over_two_ranks() {
    ring_all_reduce::<i32>(2, 333, ReduceOp::Sum, 3);
    ring_all_reduce::<f32>(2, 64, ReduceOp::Sum, 3);
}

#[test]
fn ring_with_fewer_elements_than_ranks() {
    ring_all_reduce::<i32>(5, 3, ReduceOp::Sum, 4);
}
