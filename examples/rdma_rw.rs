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

#[path = "common/mod.rs"]
#[macro_use] // println!/eprintln! that stay quiet on a closed pipe (common/print.rs)
mod common;

use common::{Res, Side};
use uhca::driver::Hca;
use uhca::driver::verbs::{Rc, SendOp, SendWr, Sge, WcStatus, WorkCompletion};
use uhca::fwif::consts::AccessFlags;
use uhca::hal::{DmaMem, Platform};
use uhca::oob::Session;

const WRITE_WRID: u64 = 1;
const READ_WRID: u64 = 2;

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
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let spec = common::Spec {
        cq_depth: 16,
        mr_len: 3 * size,
        access,
        send_wr: 4,
        recv_wr: 1,
        qkey: 0,
    };
    let (pd, mut cq, mut mr, qp) = common::open_objects::<_, Rc>(hca, args, &spec)?;
    mr.mem_mut().fill(0, 3 * size, 0);
    let me = common::my_rdma_dest(hca, args, qp.qpn(), common::random_psn(), &mr, 3 * size)?;
    println!("  local:  {}", String::from_utf8_lossy(&me.to_wire()[..86]));
    let (peer, mut sess, mut qp) = common::exchange_rc(hca, &mut side, &me, qp, 1)?;
    println!(
        "  remote: {}",
        String::from_utf8_lossy(&peer.to_wire()[..86])
    );
    if (peer.len as usize) < 3 * size {
        return Err(format!(
            "the peer's buffer ({} B) is smaller than 3 x {size}",
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
    common::take_down(hca, qp, cq, mr, pd)
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
