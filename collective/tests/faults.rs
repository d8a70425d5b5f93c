//! Collectives on a fabric that drops, duplicates and reorders frames (seeded): RC
//! retransmission hides the faults, and the results are as exact as on a clean fabric.
//! A fabric that drops everything ends every rank's collective with an error that names
//! the rank and the step, within the QPs' retry time, and the communicator refuses
//! further work.

mod common;

use std::time::{Duration, Instant};

use common::*;
use uhca_collective::mock::MockCluster;
use uhca_collective::{Collective, Config, Element, Error, F16, ReduceOp};
use uhca_driver::verbs::WcStatus;
use uhca_mock::FaultConfig;

/// A short ACK timeout (4.096 µs × 2^10 ≈ 4 ms) so a lost packet costs little.
fn lossy_config() -> Config {
    Config {
        ack_timeout: 10,
        ..small_chunks()
    }
}

fn check_everything<T: Element>(c: &mut MockCluster, seed: u64) {
    let n = c.ranks.len();
    for op in ReduceOp::ALL {
        let inputs: Vec<Vec<T>> = (0..n).map(|r| input(seed, r, 1001)).collect();
        let want = reference(&inputs, op);
        let blocks: Vec<Vec<T>> = (0..n).map(|r| input(seed + 1, r, n * 37)).collect();
        let want_rs = reference(&blocks, op);
        let out = c.run(|comm| {
            let r = comm.rank();
            let mut ring = inputs[r].clone();
            let mut rd = inputs[r].clone();
            let mut rs = blocks[r].clone();
            let mut ag: Vec<T> = input(seed + 2, r, n * 37);
            let mine: Vec<T> = input(seed + 3, r, 37);
            ag[r * 37..(r + 1) * 37].copy_from_slice(&mine);
            let mut bc: Vec<T> = input(seed + 4, r, 999);
            comm.all_reduce_ring(&mut ring, op)?;
            comm.all_reduce_recursive_doubling(&mut rd, op)?;
            comm.reduce_scatter(&mut rs, op)?;
            comm.all_gather(&mut ag)?;
            comm.broadcast(&mut bc, n - 1)?;
            Ok::<_, Error>((ring, rd, rs, ag, bc))
        });
        let gathered: Vec<T> = (0..n).flat_map(|r| input::<T>(seed + 3, r, 37)).collect();
        let root: Vec<T> = input(seed + 4, n - 1, 999);
        for (rank, got) in out.into_iter().enumerate() {
            let (ring, rd, rs, ag, bc) = got.unwrap_or_else(|e| panic!("n={n} {op:?}: {e}"));
            assert_eq!(wrong(&ring, &want, op, n), 0, "ring, rank {rank}");
            assert_eq!(
                wrong(&rd, &want, op, n),
                0,
                "recursive doubling, rank {rank}"
            );
            let mine = rank * 37..(rank + 1) * 37;
            assert_eq!(
                wrong(&rs[mine.clone()], &want_rs[mine], op, n),
                0,
                "reduce_scatter, rank {rank}"
            );
            assert!(ag == gathered, "all_gather, rank {rank}");
            assert!(bc == root, "broadcast, rank {rank}");
        }
    }
}

fn lossy(n: usize, seed: u64) {
    let mut c = cluster(n, lossy_config());
    c.set_faults(FaultConfig::lossy(seed, 20));
    check_everything::<i32>(&mut c, seed);
    check_everything::<f32>(&mut c, seed + 50);
    check_everything::<F16>(&mut c, seed + 60);
    check_everything::<u8>(&mut c, seed + 70);
    let k = c.fabric.counters();
    assert!(
        k.dropped > 0 && k.duplicated > 0 && k.delayed > 0,
        "the faults happened: {k:?}"
    );
    c.fabric.set_faults(FaultConfig::default());
    c.close().unwrap();
}

#[test]
fn every_collective_is_exact_on_a_lossy_fabric_over_4_ranks() {
    lossy(4, 11);
}

#[test]
fn every_collective_is_exact_on_a_lossy_fabric_over_7_ranks() {
    lossy(7, 12);
}

#[test]
fn a_dead_fabric_ends_every_rank_with_an_error_naming_it_and_the_step() {
    // ACK timeout ≈ 1 ms, 2 retries: the QPs give up after a few ms; a rank that waits on
    // a peer that stopped sending gives up after the stall timeout.
    let cfg = Config {
        ack_timeout: 8,
        retry_cnt: 2,
        stall_timeout_ns: 1_000_000_000,
        ..small_chunks()
    };
    let mut c = cluster(4, cfg);
    // One clean run, so the failure below is the fabric's.
    let ok = c.run(|comm| comm.all_reduce_ring(&mut vec![1i32; 500], ReduceOp::Sum));
    assert!(ok.iter().all(|r| r.is_ok()));
    c.set_faults(FaultConfig::drop_all());
    let start = Instant::now();
    let out = c.run(|comm| {
        let mut v = vec![1i32; 500];
        let first = comm.all_reduce_ring(&mut v, ReduceOp::Sum);
        let again = comm.all_reduce_ring(&mut v, ReduceOp::Sum);
        (first, again, comm.is_broken())
    });
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "no hang: {:?}",
        start.elapsed()
    );
    for (rank, (first, again, broken)) in out.into_iter().enumerate() {
        let e = first.expect_err("nothing gets through");
        eprintln!("{e}");
        assert_eq!(e.rank(), Some(rank), "{e}");
        let step = e.step().expect("the error names the step");
        assert_eq!(step.collective, Collective::AllReduceRing, "{e}");
        assert!(step.step < 6, "a ring of 4 has 6 steps: {e}");
        match e {
            Error::Completion { status, .. } => assert!(
                matches!(status, WcStatus::RetryExceeded | WcStatus::WrFlushed),
                "{e}"
            ),
            Error::Timeout { .. } => {}
            other => panic!("rank {rank}: unexpected {other}"),
        }
        assert!(
            e.to_string().contains(&format!("rank {rank}")),
            "the message names the rank: {e}"
        );
        assert_eq!(again, Err(Error::Broken { rank }));
        assert!(broken);
    }
    c.fabric.set_faults(FaultConfig::default());
    c.close().unwrap();
}

#[test]
fn a_rank_that_never_joins_ends_the_others_with_a_timeout() {
    let cfg = Config {
        stall_timeout_ns: 300_000_000,
        ..small_chunks()
    };
    let mut c = cluster(3, cfg);
    let start = Instant::now();
    let out = c.run(|comm| {
        if comm.rank() == 2 {
            return Ok(());
        }
        comm.all_reduce_ring(&mut vec![1.0f32; 5000], ReduceOp::Sum)
    });
    assert!(start.elapsed() < Duration::from_secs(10), "no hang");
    for (rank, got) in out.iter().enumerate().take(2) {
        match *got {
            Err(Error::Timeout { rank: r, step, .. }) => {
                assert_eq!(r, rank);
                assert_eq!(step.collective, Collective::AllReduceRing);
            }
            ref other => panic!("rank {rank}: {other:?}"),
        }
    }
    c.close().unwrap();
}
