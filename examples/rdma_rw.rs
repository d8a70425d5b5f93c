//! `rdma_rw`: RDMA WRITE and RDMA READ in both directions between two RC queue pairs, with
//! the data checked, for interoperability tests against an rdma-core peer
//! (`tests/vm/src/rdma_rw.c` speaks the same protocol over libibverbs).
//!
//! ```sh
//! cargo run --example rdma_rw -- --mock                        # both sides in one process
//! cargo run --example rdma_rw -- --udp 10.0.0.2                # server, RoCEv2 over UDP
//! rdma_rw -d rxe0 -g 1 10.0.0.2                                # the rdma-core client
//! cargo run --features vfio --example rdma_rw -- --device 0000:03:00.0 --ip 10.0.0.2
//! ```
//!
//! Each side registers a buffer of `3 * size` bytes (default 65536) for remote reads and
//! writes: `A` (the peer writes it), `B` (this side's pattern, the peer reads it) and `C`
//! (where this side's READ lands). The exchange is [`uhca::oob::rdma_client_exchange`]'s
//! (TCP port 18515 unless `-p`; the peer's QP, rkey, buffer address and length), then, for
//! each of `iters` rounds (default 10): both fill `B` with the round's pattern and meet
//! (`ready`); each posts an RDMA WRITE of its `B` to the peer's `A` and an RDMA READ of
//! the peer's `B` into its `C` and waits for both completions; they meet (`done`), each
//! checks `A` and `C` against the peer's pattern and they compare verdicts (`ok`/`bad`).
//!
//! Then one round of atomics, whose values differ byte by byte, so that the byte order the
//! two HCAs agree on shows: past `C`, each side's `D` holds two 8-byte words written in the
//! host's byte order, 0x1122334455667788 and 0x00000000ffffffff; both meet (`atomic
//! ready`), each posts a compare-and-swap of the peer's first word (compare
//! 0x1122334455667788, swap 0x8877665544332211) and a fetch-and-add of 1 to its second,
//! the fetched values landing in its own `E`; they meet (`atomic done`) and each checks, in
//! the host's byte order, its `D` (swapped, 0x0000000100000000) and its `E` (the peer's
//! first values) and they compare verdicts. A responder that worked on a big-endian word
//! would miss the compare and leave `ff ff ff ff 00 00 00 01` after the add.

#[path = "common/mod.rs"]
#[macro_use] // println!/eprintln! that stay quiet on a closed pipe (common/print.rs)
mod common;

use common::{Res, Side};
use uhca::driver::Hca;
use uhca::driver::verbs::{Cq, Mr, Rc, SendOp, SendWr, Sge, WcStatus, WorkCompletion};
use uhca::fwif::consts::AccessFlags;
use uhca::hal::{DmaMem, Platform};
use uhca::oob::{RdmaDest, Session};

const WRITE_WRID: u64 = 1;
const READ_WRID: u64 = 2;
const CAS_WRID: u64 = 4;
const FAA_WRID: u64 = 8;
/// The atomics' words (host byte order), see the module's documentation.
const CAS_FIRST: u64 = 0x1122_3344_5566_7788;
const CAS_SWAP: u64 = 0x8877_6655_4433_2211;
const FAA_FIRST: u64 = 0x0000_0000_ffff_ffff;
/// `D` (two words) and `E` (two words) past `A`, `B` and `C`.
const ATOMIC_AREA: usize = 32;

/// Byte `i` of the pattern a side (`client`) puts in `B` in `round`; the C peer computes
/// the same.
fn pattern(client: bool, round: u64, i: usize) -> u8 {
    let seed: u32 = if client { 0x5a } else { 0xa5 };
    (((i as u32).wrapping_mul(7) + (i as u32 >> 8) + seed + round as u32 * 13) & 0xff) as u8
}

/// One side of the test on an HCA that is up (`side`: client or server).
fn rw<P: Platform>(hca: &mut Hca<P>, mut side: Side<'_>) -> Res<()> {
    let args = side.args;
    let client = side.is_client();
    let size = args.size;
    if !size.is_multiple_of(8) {
        return Err("the size must be a multiple of 8 (the atomics' words follow C)".into());
    }
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let len = 3 * size + ATOMIC_AREA;
    let spec = common::Spec {
        cq_depth: 16,
        mr_len: len,
        access,
        send_wr: 4,
        recv_wr: 1,
        qkey: 0,
    };
    let (pd, mut cq, mut mr, qp) = common::open_objects::<_, Rc>(hca, args, &spec)?;
    mr.mem_mut().fill(0, len, 0);
    let me = common::my_rdma_dest(hca, args, qp.qpn(), common::random_psn(), &mr, len)?;
    println!("  local:  {}", String::from_utf8_lossy(&me.to_wire()[..86]));
    let (peer, mut sess, mut qp) = common::exchange_rc(hca, &mut side, &me, qp, 1)?;
    println!(
        "  remote: {}",
        String::from_utf8_lossy(&peer.to_wire()[..86])
    );
    if (peer.len as usize) < len {
        return Err(format!(
            "the peer's buffer ({} B) is smaller than 3 x {size} + {ATOMIC_AREA}",
            peer.len
        )
        .into());
    }
    let (a, b, c) = (0, size, 2 * size);
    let start = std::time::Instant::now();
    let mut got = vec![0u8; size];
    for round in 0..args.iters {
        let mine: Vec<u8> = (0..size).map(|i| pattern(client, round, i)).collect();
        let theirs: Vec<u8> = (0..size).map(|i| pattern(!client, round, i)).collect();
        mr.mem_mut().write_bytes(b, &mine);
        mr.mem_mut().fill(c, size, 0);
        meet(&mut sess, &format!("ready {round}"))?;
        let src = [Sge {
            addr: mr.iova() + b as u64,
            len: size as u32,
            lkey: mr.lkey(),
        }];
        let dst = [Sge {
            addr: mr.iova() + c as u64,
            len: size as u32,
            lkey: mr.lkey(),
        }];
        let write = SendWr::new(
            WRITE_WRID,
            SendOp::RdmaWrite {
                remote_addr: peer.addr,
                rkey: peer.rkey,
            },
            &src,
        );
        let read = SendWr::new(
            READ_WRID,
            SendOp::RdmaRead {
                remote_addr: peer.addr + size as u64,
                rkey: peer.rkey,
            },
            &dst,
        );
        qp.post_send(&[write, read])
            .map_err(|e| format!("couldn't post: {e:?}"))?;
        let mut pending = WRITE_WRID | READ_WRID;
        let mut wc = [WorkCompletion::default(); 4];
        let t = std::time::Instant::now();
        while pending != 0 {
            let n = cq.poll(&mut wc)?;
            for w in &wc[..n] {
                if w.status != WcStatus::Success {
                    return Err(format!(
                        "round {round}: status {:?} for wr_id {}",
                        w.status, w.wr_id
                    )
                    .into());
                }
                pending &= !w.wr_id;
            }
            if n == 0 && t.elapsed() > common::OOB_TIMEOUT {
                return Err(format!("round {round}: no completion (pending {pending})").into());
            }
        }
        meet(&mut sess, &format!("done {round}"))?;
        let mut bad = Vec::new();
        mr.mem().read_bytes(a, &mut got);
        if got != theirs {
            bad.push(format!(
                "A (written by the peer) differs at byte {}",
                first_diff(&got, &theirs)
            ));
        }
        mr.mem().read_bytes(c, &mut got);
        if got != theirs {
            bad.push(format!(
                "C (read from the peer) differs at byte {}",
                first_diff(&got, &theirs)
            ));
        }
        let verdict = if bad.is_empty() { "ok" } else { "bad" };
        let peer_verdict = sess.exchange_line(&format!("{verdict} {round}"))?;
        if !bad.is_empty() {
            return Err(format!("round {round}: {}", bad.join("; ")).into());
        }
        if peer_verdict != format!("ok {round}") {
            return Err(format!("round {round}: the peer says {peer_verdict:?}").into());
        }
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "rdma_rw: {} rounds of RDMA WRITE {size} B + RDMA READ {size} B each way, data verified on both sides, in {secs:.2} s",
        args.iters
    );
    atomics(&mut qp, &mut cq, &mut mr, &mut sess, &peer, 3 * size)?;
    common::take_down(hca, qp, cq, mr, pd)
}

/// The round of atomics (the module's documentation): `d` is the offset of `D` in `mr`
/// (`E` follows it), the same in the peer's buffer.
fn atomics<P: Platform>(
    qp: &mut common::RcRts<P>,
    cq: &mut Cq<P>,
    mr: &mut Mr<P>,
    sess: &mut Session,
    peer: &RdmaDest,
    d: usize,
) -> Res<()> {
    let e = d + 16;
    mr.mem_mut().write_bytes(d, &CAS_FIRST.to_ne_bytes());
    mr.mem_mut().write_bytes(d + 8, &FAA_FIRST.to_ne_bytes());
    mr.mem_mut().fill(e, 16, 0);
    meet(sess, "atomic ready")?;
    let cas_to = [mr.sge(e, 8)?];
    let faa_to = [mr.sge(e + 8, 8)?];
    let cas = SendOp::AtomicCmpSwap {
        remote_addr: peer.addr + d as u64,
        rkey: peer.rkey,
        compare: CAS_FIRST,
        swap: CAS_SWAP,
    };
    let faa = SendOp::AtomicFetchAdd {
        remote_addr: peer.addr + d as u64 + 8,
        rkey: peer.rkey,
        add: 1,
    };
    qp.post_send(&[
        SendWr::new(CAS_WRID, cas, &cas_to),
        SendWr::new(FAA_WRID, faa, &faa_to),
    ])
    .map_err(|e| format!("couldn't post the atomics: {e:?}"))?;
    let mut pending = CAS_WRID | FAA_WRID;
    let mut wc = [WorkCompletion::default(); 4];
    let t = std::time::Instant::now();
    while pending != 0 {
        let n = cq.poll(&mut wc)?;
        for w in &wc[..n] {
            if w.status != WcStatus::Success {
                return Err(format!("atomics: status {:?} for wr_id {}", w.status, w.wr_id).into());
            }
            pending &= !w.wr_id;
        }
        if n == 0 && t.elapsed() > common::OOB_TIMEOUT {
            return Err(format!("atomics: no completion (pending {pending})").into());
        }
    }
    meet(sess, "atomic done")?;
    let mut words = [0u8; 32];
    mr.mem().read_bytes(d, &mut words);
    let word = |i: usize| u64::from_ne_bytes(words[8 * i..8 * i + 8].try_into().unwrap_or([0; 8]));
    let got = [word(0), word(1), word(2), word(3)];
    let want = [CAS_SWAP, FAA_FIRST + 1, CAS_FIRST, FAA_FIRST];
    println!(
        "  atomics: D (swapped, added to by the peer) {:016x} {:016x}, E (fetched from the peer) {:016x} {:016x}; bytes {:02x?}",
        got[0],
        got[1],
        got[2],
        got[3],
        &words[..16]
    );
    let verdict = if got == want { "ok" } else { "bad" };
    let peer_verdict = sess.exchange_line(&format!("{verdict} atomics"))?;
    if got != want {
        return Err(format!(
            "atomics: D and E in host order are {got:016x?}, expected {want:016x?}"
        )
        .into());
    }
    if peer_verdict != "ok atomics" {
        return Err(format!("atomics: the peer says {peer_verdict:?}").into());
    }
    println!(
        "rdma_rw: compare-and-swap and fetch-and-add each way, on host-order words, verified on both sides"
    );
    Ok(())
}

fn meet(sess: &mut Session, line: &str) -> Res<()> {
    let theirs = sess.exchange_line(line)?;
    if theirs != line {
        return Err(format!("out of step: sent {line:?}, the peer sent {theirs:?}").into());
    }
    Ok(())
}

fn first_diff(x: &[u8], y: &[u8]) -> usize {
    x.iter().zip(y).position(|(p, q)| p != q).unwrap_or(x.len())
}

fn main() {
    let args = common::parse_args("rdma_rw", 65536, 10);
    common::run_modes!("rdma_rw", args, rw);
}
