//! `uhca-collective` on bare metal: its `no_std` + `alloc` core over [`RANKS`] functions of
//! this guest, one rank per function. The ranks' addresses (QP numbers, PSNs, inboxes,
//! rkeys) are exchanged in memory, since all ranks are in this guest. One CPU runs every
//! rank: each collective runs on [`fiber`](crate::fiber)s, one per rank, which switch at
//! the collective's `idle` hook (a rank waiting for a peer lets the peer run). Checked:
//! all-reduce by recursive doubling (small) and by the ring (large), all-gather and
//! broadcast, every element of every rank's result.

use alloc::vec;
use alloc::vec::Vec;

use uhca_collective::{Communicator, Config, Endpoint, Error, PortAddr, ReduceOp};
use uhca_driver::Hca;

use crate::platform::{self, BareMetal};
use crate::{Addr, Res, check, fiber, ms};

/// Ranks (functions) the collective runs over.
pub const RANKS: usize = 4;

type Comm<'p> = Communicator<&'p BareMetal>;

pub fn config() -> Config {
    Config {
        chunk_bytes: 16 << 10,
        window: 4,
        small_bytes: 4096,
        stall_timeout_ns: 5_000_000_000,
        idle: Some(fiber::idle),
        ..Config::default()
    }
}

/// Creates a communicator on every function and connects them all to all.
fn connect<'p>(hcas: &mut [&mut (Hca<&'p BareMetal>, Addr)]) -> Res<Vec<Comm<'p>>> {
    let n = hcas.len();
    let mut pending = Vec::with_capacity(n);
    for (rank, (hca, a)) in hcas.iter_mut().map(|x| &mut **x).enumerate() {
        let addr = PortAddr {
            gid: a.gid,
            mac: a.mac,
            lid: a.lid,
        };
        pending.push(
            Communicator::create(hca, rank, n, addr, config())
                .map_err(|e| msg!("rank {rank}: create: {e}"))?,
        );
    }
    let endpoints: Vec<Vec<Endpoint>> = (0..n)
        .map(|me| {
            (0..n)
                .map(|peer| {
                    // Ignored by `connect` (no QP to oneself); any endpoint will do.
                    let from = if peer == me { (me + 1) % n } else { peer };
                    pending[from].endpoint(me)
                })
                .collect()
        })
        .collect();
    let mut comms = Vec::with_capacity(n);
    for ((rank, p), eps) in pending.into_iter().enumerate().zip(endpoints) {
        let (hca, _) = &mut *hcas[rank];
        comms.push(
            p.connect(hca, &eps)
                .map_err(|e| msg!("rank {rank}: connect: {e}"))?,
        );
    }
    Ok(comms)
}

/// Runs `op` on every rank at once (a fiber each) with that rank's buffer; the first
/// rank's error, if any.
pub fn on_all<T>(
    comms: &mut [Comm<'_>],
    bufs: &mut [Vec<T>],
    op: impl Fn(&mut Comm<'_>, &mut [T]) -> Result<(), Error>,
) -> Res<u64> {
    let mut results: Vec<Result<(), Error>> = comms.iter().map(|_| Ok(())).collect();
    let op = &op;
    let mut tasks: Vec<_> = comms
        .iter_mut()
        .zip(bufs.iter_mut())
        .zip(results.iter_mut())
        .map(|((c, b), r)| move || *r = op(c, b))
        .collect();
    let mut refs: Vec<&mut dyn FnMut()> = tasks.iter_mut().map(|t| t as &mut dyn FnMut()).collect();
    let t0 = platform::now_ns();
    fiber::run(&mut refs);
    let took = platform::now_ns() - t0;
    drop(refs);
    drop(tasks);
    for (rank, r) in results.into_iter().enumerate() {
        r.map_err(|e| msg!("rank {rank}: {e}"))?;
    }
    Ok(took)
}

/// Rank `r`'s element `i` (distinct per rank and position, sums stay in range).
pub fn value(r: usize, i: usize) -> i32 {
    (r as i32 + 1) * 1_000_003 + (i as i32 * 7919) % 65_521 - 30_000
}

fn verify(bufs: &[Vec<i32>], want: impl Fn(usize) -> i32) -> Res<()> {
    for (rank, b) in bufs.iter().enumerate() {
        if let Some(i) = (0..b.len()).find(|&i| b[i] != want(i)) {
            return Err(msg!(
                "rank {rank}: element {i} of {} is {}, expected {}",
                b.len(),
                b[i],
                want(i)
            ));
        }
    }
    Ok(())
}

fn all_reduce(comms: &mut [Comm<'_>], len: usize) -> Res<u64> {
    let n = comms.len();
    let mut bufs: Vec<Vec<i32>> = (0..n)
        .map(|r| (0..len).map(|i| value(r, i)).collect())
        .collect();
    let t = on_all(comms, &mut bufs, |c, b| c.all_reduce(b, ReduceOp::Sum))?;
    verify(&bufs, |i| (0..n).map(|r| value(r, i)).sum())?;
    Ok(t)
}

fn all_gather(comms: &mut [Comm<'_>], block: usize) -> Res<u64> {
    let n = comms.len();
    let mut bufs: Vec<Vec<i32>> = (0..n)
        .map(|r| {
            let mut b = vec![0; n * block];
            for (i, x) in b[r * block..(r + 1) * block].iter_mut().enumerate() {
                *x = value(r, i);
            }
            b
        })
        .collect();
    let t = on_all(comms, &mut bufs, |c, b| c.all_gather(b))?;
    verify(&bufs, |i| value(i / block, i % block))?;
    Ok(t)
}

fn broadcast(comms: &mut [Comm<'_>], len: usize, root: usize) -> Res<u64> {
    let n = comms.len();
    let mut bufs: Vec<Vec<i32>> = (0..n)
        .map(|r| {
            if r == root {
                (0..len).map(|i| value(root, i)).collect()
            } else {
                vec![-1; len]
            }
        })
        .collect();
    let t = on_all(comms, &mut bufs, |c, b| c.broadcast(b, root))?;
    verify(&bufs, |i| value(root, i))?;
    Ok(t)
}

fn timed(what: &str, bytes: usize, r: Option<u64>) {
    if let Some(ns) = r {
        println!(
            "  {what}: {bytes} B per rank in {} us ({} ms)",
            ns / 1000,
            ms(ns)
        );
    }
}

/// The collective's checks over the first [`RANKS`] functions (six PASS/FAIL lines).
pub fn run(link: &str, hcas: &mut [&mut (Hca<&BareMetal>, Addr)]) {
    let Some(mut comms) = check(
        format_args!(
            "collective ({link}): {} ranks on {} functions, communicators connected all to all",
            hcas.len(),
            hcas.len()
        ),
        if hcas.len() == RANKS {
            connect(hcas)
        } else {
            Err(msg!("{} functions up, {RANKS} needed", hcas.len()))
        },
    ) else {
        return;
    };
    let small = 256; // 1 KiB: recursive doubling
    let large = 24 << 10; // 96 KiB: the ring, 6 chunks
    let r = check(
        format_args!(
            "collective ({link}): all-reduce (sum, recursive doubling) of {small} i32, every element of every rank"
        ),
        all_reduce(&mut comms, small),
    );
    timed("all-reduce (recursive doubling)", small * 4, r);
    let r = check(
        format_args!(
            "collective ({link}): all-reduce (sum, ring) of {large} i32, every element of every rank"
        ),
        all_reduce(&mut comms, large),
    );
    timed("all-reduce (ring)", large * 4, r);
    let block = 4 << 10;
    let r = check(
        format_args!(
            "collective ({link}): all-gather of {RANKS} blocks of {block} i32, every block of every rank"
        ),
        all_gather(&mut comms, block),
    );
    timed("all-gather", RANKS * block * 4, r);
    let r = check(
        format_args!(
            "collective ({link}): broadcast of {large} i32 from rank 2, every rank's copy"
        ),
        broadcast(&mut comms, large, 2),
    );
    timed("broadcast", large * 4, r);
    check(
        format_args!("collective ({link}): communicators destroyed"),
        comms
            .into_iter()
            .zip(hcas.iter_mut())
            .enumerate()
            .try_for_each(|(rank, (c, h))| {
                c.destroy(&mut h.0)
                    .map_err(|e| msg!("rank {rank}: destroy: {e}"))
            }),
    );
}
