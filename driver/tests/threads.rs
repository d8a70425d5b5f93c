//! Threads on the datapath, on two mock HCAs connected by the mock fabric (pumped in real
//! time): N QP/CQ pairs of one HCA driven by N threads with no lock; one QP's send side on
//! one thread and its receive side on another ([`Qp::split`]); one CQ shared by several
//! QPs, polled by one thread while the QPs post on others. All data is checked, and every
//! thread gives up with a message after a deadline instead of hanging.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use uhca_driver::verbs::{
    Cq, Mr, Qp, Rc, RecvQueue, RecvWr, RtsAttr, SendFlags, SendOp, SendQueue, SendWr, Sge, Srq,
    WcOpcode, WcStatus, WorkCompletion, WrError,
};
use uhca_fwif::consts::AccessFlags;
use uhca_hal::DmaMem;
use uhca_mock::{Fabric, LinkLayer};

mod common;

use common::{Node, P, RcRts, connect, node, rc_qp_on};

/// How long any one test may run before its threads give up.
const DEADLINE: Duration = Duration::from_secs(120);

const ACCESS: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);

/// Two QPs connected to each other: `qa` of `a` on CQs (`sa`, `ra`), `qb` of `b` on
/// (`sb`, `rb`).
fn pair(
    fabric: &Fabric,
    a: &mut Node,
    b: &mut Node,
    (sa, ra): (&Cq<P>, &Cq<P>),
    (sb, rb): (&Cq<P>, &Cq<P>),
) -> (RcRts, RcRts) {
    let qa = rc_qp_on(&mut a.hca, &a.pd, sa, ra);
    let qb = rc_qp_on(&mut b.hca, &b.pd, sb, rb);
    let (na, nb) = (qa.qpn(), qb.qpn());
    let rts = RtsAttr::default();
    (
        connect(fabric, a, qa, b, nb, rts),
        connect(fabric, b, qb, a, na, rts),
    )
}

/// The bytes of message `k` of stream `s` (`len` of them).
fn pattern(s: u64, k: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (s.wrapping_mul(131) ^ k.wrapping_mul(31) ^ i.wrapping_mul(7)) as u8)
        .collect()
}

/// What the threads of one test share to give up together: the start, and whether one of
/// them failed.
struct Watch {
    start: Instant,
    failed: AtomicBool,
}

impl Watch {
    fn new() -> Self {
        Watch {
            start: Instant::now(),
            failed: AtomicBool::new(false),
        }
    }

    /// Fails the calling thread with `what` once the deadline has passed or another
    /// thread of the test has failed.
    fn check(&self, what: impl FnOnce() -> String) {
        if self.failed.load(Ordering::Relaxed) {
            panic!("stopped, another thread failed: {}", what());
        }
        if self.start.elapsed() > DEADLINE {
            panic!("gave up after {DEADLINE:?}: {}", what());
        }
    }

    /// A guard that marks the test failed if the thread panics while it lives.
    fn guard(&self) -> WatchGuard<'_> {
        WatchGuard(self)
    }
}

struct WatchGuard<'a>(&'a Watch);

impl Drop for WatchGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.failed.store(true, Ordering::Relaxed);
        }
    }
}

/// Polls `cq` once into `wc`, checking that nothing it reports failed.
fn poll_ok<'w>(
    cq: &mut Cq<P>,
    wc: &'w mut [WorkCompletion; 16],
    who: &str,
) -> &'w [WorkCompletion] {
    let n = cq
        .poll(wc)
        .unwrap_or_else(|e| panic!("{who}: a CQE did not match what was posted: {e:?}"));
    for c in &wc[..n] {
        assert_eq!(c.status, WcStatus::Success, "{who}: {c:?}");
    }
    &wc[..n]
}

/// Messages of each kind per stream.
const MSGS: u64 = 1000;
/// Bytes reserved per message in the memory regions.
const SLOT: usize = 128;
/// Requests in flight per queue.
const WINDOW: u64 = 16;

fn send_len(k: u64) -> usize {
    32 + (k % 5) as usize * 16
}

/// Inline SENDs: up to 64 bytes (the QPs' `max_inline_data`).
fn inline_len(k: u64) -> usize {
    1 + (k % 4) as usize * 21
}

/// What one thread of `n_pairs_on_n_threads` owns: a QP on A with its CQ, its peer on B
/// with its CQ, a source region on A and a target region on B.
struct Stream {
    id: u64,
    qa: RcRts,
    cqa: Cq<P>,
    qb: RcRts,
    cqb: Cq<P>,
    src: Mr<P>,
    dst: Mr<P>,
}

/// Region layout: the source holds SEND k at `k * SLOT` and WRITE k at `(MSGS + k) *
/// SLOT`; the target holds receive buffers at `(k % WINDOW) * SLOT` and WRITE k at
/// `(WINDOW + k) * SLOT`.
const REGION: usize = (2 * MSGS as usize + WINDOW as usize) * SLOT;

/// One thread's traffic: MSGS SENDs from `qa` to `qb` and MSGS RDMA WRITEs, at most
/// WINDOW of each outstanding; every received SEND checked as it arrives, every WRITE at
/// the end.
fn drive_stream(st: &mut Stream, watch: &Watch) {
    let _guard = watch.guard();
    let who = format!("stream {}", st.id);
    let (sl, dl) = (st.src.lkey(), st.dst.lkey());
    let (si, di, rkey) = (st.src.iova(), st.dst.iova(), st.dst.rkey());
    let (mut recv_posted, mut recv_done) = (0u64, 0u64);
    let (mut sent, mut writes, mut send_done, mut write_done) = (0u64, 0u64, 0u64, 0u64);
    let mut wc = [WorkCompletion::default(); 16];
    while recv_done < MSGS || send_done < MSGS || write_done < MSGS {
        watch.check(|| {
            format!("{who}: {recv_done} receives, {send_done} SENDs, {write_done} WRITEs done")
        });
        // Receives on B, a window ahead.
        while recv_posted < MSGS && recv_posted - recv_done < WINDOW {
            let sge = [Sge {
                addr: di + (recv_posted % WINDOW) * SLOT as u64,
                len: SLOT as u32,
                lkey: dl,
            }];
            st.qb
                .post_recv(&[RecvWr {
                    wr_id: recv_posted,
                    sg_list: &sge,
                }])
                .unwrap_or_else(|e| panic!("{who}: post_recv: {e:?}"));
            recv_posted += 1;
        }
        // SENDs only into posted receives; WRITEs a window ahead.
        if sent < recv_posted && sent - send_done < WINDOW {
            let sge = [Sge {
                addr: si + sent * SLOT as u64,
                len: send_len(sent) as u32,
                lkey: sl,
            }];
            st.qa
                .post_send(&[SendWr::new(sent, SendOp::Send, &sge)])
                .unwrap_or_else(|e| panic!("{who}: post_send SEND {sent}: {e:?}"));
            sent += 1;
        }
        if writes < MSGS && writes - write_done < WINDOW {
            let sge = [Sge {
                addr: si + (MSGS + writes) * SLOT as u64,
                len: SLOT as u32,
                lkey: sl,
            }];
            let op = SendOp::RdmaWrite {
                remote_addr: di + (WINDOW + writes) * SLOT as u64,
                rkey,
            };
            st.qa
                .post_send(&[SendWr::new(MSGS + writes, op, &sge)])
                .unwrap_or_else(|e| panic!("{who}: post_send WRITE {writes}: {e:?}"));
            writes += 1;
        }
        for c in poll_ok(&mut st.cqa, &mut wc, &who) {
            // SENDs and WRITEs complete in the order they were posted, each kind in its
            // own sequence.
            if c.opcode == WcOpcode::Send {
                assert_eq!(c.wr_id, send_done, "{who}: SEND completions out of order");
                send_done += 1;
            } else {
                assert_eq!(c.opcode, WcOpcode::RdmaWrite, "{who}: {c:?}");
                assert_eq!(c.wr_id, MSGS + write_done, "{who}: WRITE out of order");
                write_done += 1;
            }
        }
        for c in poll_ok(&mut st.cqb, &mut wc, &who) {
            let k = recv_done;
            assert_eq!(c.wr_id, k, "{who}: receives out of order");
            assert_eq!(c.opcode, WcOpcode::Recv, "{who}: {c:?}");
            assert_eq!(
                c.byte_len as usize,
                send_len(k),
                "{who}: receive {k} length"
            );
            let mut got = vec![0u8; send_len(k)];
            st.dst
                .mem()
                .read_bytes((k % WINDOW) as usize * SLOT, &mut got);
            assert_eq!(got, pattern(st.id, k, send_len(k)), "{who}: SEND {k} data");
            recv_done += 1;
        }
        std::thread::yield_now();
    }
    for k in 0..MSGS {
        let mut got = vec![0u8; SLOT];
        st.dst
            .mem()
            .read_bytes((WINDOW + k) as usize * SLOT, &mut got);
        assert_eq!(got, pattern(st.id, MSGS + k, SLOT), "{who}: WRITE {k} data");
    }
}

/// N QP/CQ pairs of one HCA, each with its peer on the other HCA, on N threads: each
/// thread posts and polls only its own objects, with no lock and no `Hca`, and every
/// byte arrives where it was sent.
#[test]
fn n_qp_cq_pairs_on_n_threads() {
    const N: u64 = 4;
    let fabric = Fabric::new(LinkLayer::Ethernet);
    let mut a = node(&fabric, 1);
    let mut b = node(&fabric, 2);
    let mut streams: Vec<Stream> = (0..N)
        .map(|id| {
            let cqa = a.hca.create_cq(127).unwrap();
            let cqb = b.hca.create_cq(127).unwrap();
            let (qa, qb) = pair(&fabric, &mut a, &mut b, (&cqa, &cqa), (&cqb, &cqb));
            let mut src = a.hca.alloc_mr(&a.pd, REGION, ACCESS).unwrap();
            let dst = b.hca.alloc_mr(&b.pd, REGION, ACCESS).unwrap();
            for k in 0..MSGS {
                src.mem_mut()
                    .write_bytes(k as usize * SLOT, &pattern(id, k, send_len(k)));
                src.mem_mut()
                    .write_bytes((MSGS + k) as usize * SLOT, &pattern(id, MSGS + k, SLOT));
            }
            Stream {
                id,
                qa,
                cqa,
                qb,
                cqb,
                src,
                dst,
            }
        })
        .collect();
    let pump = fabric.start_pump(20);
    let watch = Watch::new();
    let watch = &watch;
    std::thread::scope(|s| {
        for st in streams.iter_mut() {
            s.spawn(move || drive_stream(st, watch));
        }
    });
    pump.stop();
}

/// Receives posted on B for what A sends (`MSGS` of them, a window ahead of A), by the
/// thread that drives B; and what it sends to A.
struct Peer {
    qb: RcRts,
    cqb: Cq<P>,
    mr: Mr<P>,
}

/// One QP's send side on one thread and its receive side on another: A's QP is split;
/// thread 1 sends inline SENDs to B and polls A's send CQ, thread 2 posts A's receives,
/// polls A's receive CQ and checks what B sent; thread 3 drives B's QP (receives, checks
/// and sends back). The two halves of A's QP never wait for each other.
#[test]
fn a_qps_send_and_receive_sides_on_two_threads() {
    let fabric = Fabric::new(LinkLayer::Ethernet);
    let mut a = node(&fabric, 1);
    let mut b = node(&fabric, 2);
    let (mut sa, mut ra) = (a.hca.create_cq(63).unwrap(), a.hca.create_cq(63).unwrap());
    let cqb = b.hca.create_cq(127).unwrap();
    let (mut qa, qb) = pair(&fabric, &mut a, &mut b, (&sa, &ra), (&cqb, &cqb));
    let mut mra = a
        .hca
        .alloc_mr(&a.pd, WINDOW as usize * SLOT, ACCESS)
        .unwrap();
    let mr = b
        .hca
        .alloc_mr(&b.pd, WINDOW as usize * SLOT, ACCESS)
        .unwrap();
    let mut peer = Peer { qb, cqb, mr };
    // Receives posted so far on each side (a SEND is posted only into a posted receive).
    let a_recvs = AtomicU64::new(0);
    let b_recvs = AtomicU64::new(0);
    let pump = fabric.start_pump(20);
    let watch = Watch::new();
    let watch = &watch;
    {
        let (mut tx, mut rx): (SendQueue<'_, P, Rc>, RecvQueue<'_, P, Rc>) = qa.split();
        let (a_recvs, b_recvs) = (&a_recvs, &b_recvs);
        std::thread::scope(|s| {
            // A's send side.
            let sa = &mut sa;
            s.spawn(move || {
                let _guard = watch.guard();
                let mut wc = [WorkCompletion::default(); 16];
                let (mut sent, mut done) = (0u64, 0u64);
                while done < MSGS {
                    watch.check(|| format!("A's sender: {done} of {MSGS} SENDs"));
                    if sent < MSGS && sent < b_recvs.load(Ordering::Acquire) && sent - done < WINDOW
                    {
                        let data = pattern(1, sent, inline_len(sent));
                        let wr = SendWr::new(sent, SendOp::Send, &[])
                            .with_inline(&data)
                            .with_flags(SendFlags::SIGNALED);
                        tx.post_send(&[wr])
                            .unwrap_or_else(|e| panic!("A's sender, SEND {sent}: {e:?}"));
                        sent += 1;
                    }
                    for c in poll_ok(sa, &mut wc, "A's sender") {
                        assert_eq!((c.wr_id, c.opcode), (done, WcOpcode::Send), "A's sender");
                        done += 1;
                    }
                    std::thread::yield_now();
                }
            });
            // A's receive side.
            let (ra, mra) = (&mut ra, &mut mra);
            s.spawn(move || {
                let _guard = watch.guard();
                let (lkey, iova) = (mra.lkey(), mra.iova());
                let mut wc = [WorkCompletion::default(); 16];
                let (mut posted, mut done) = (0u64, 0u64);
                while done < MSGS {
                    watch.check(|| format!("A's receiver: {done} of {MSGS}"));
                    while posted < MSGS && posted - done < WINDOW {
                        let sge = [Sge {
                            addr: iova + (posted % WINDOW) * SLOT as u64,
                            len: SLOT as u32,
                            lkey,
                        }];
                        rx.post_recv(&[RecvWr {
                            wr_id: posted,
                            sg_list: &sge,
                        }])
                        .unwrap_or_else(|e| panic!("A's receiver, receive {posted}: {e:?}"));
                        posted += 1;
                        a_recvs.store(posted, Ordering::Release);
                    }
                    for c in poll_ok(ra, &mut wc, "A's receiver") {
                        let k = done;
                        assert_eq!((c.wr_id, c.opcode), (k, WcOpcode::Recv), "A's receiver");
                        assert_eq!(c.byte_len as usize, inline_len(k));
                        let mut got = vec![0u8; inline_len(k)];
                        mra.mem().read_bytes((k % WINDOW) as usize * SLOT, &mut got);
                        assert_eq!(got, pattern(2, k, inline_len(k)), "B's SEND {k} at A");
                        done += 1;
                    }
                    std::thread::yield_now();
                }
            });
            // B, unsplit, on a third thread.
            let peer = &mut peer;
            s.spawn(move || {
                let _guard = watch.guard();
                let (lkey, iova) = (peer.mr.lkey(), peer.mr.iova());
                let mut wc = [WorkCompletion::default(); 16];
                let (mut posted, mut received, mut sent, mut send_done) = (0u64, 0, 0u64, 0);
                while received < MSGS || send_done < MSGS {
                    watch.check(|| format!("B: {received} received, {send_done} sent of {MSGS}"));
                    while posted < MSGS && posted - received < WINDOW {
                        let sge = [Sge {
                            addr: iova + (posted % WINDOW) * SLOT as u64,
                            len: SLOT as u32,
                            lkey,
                        }];
                        peer.qb
                            .post_recv(&[RecvWr {
                                wr_id: posted,
                                sg_list: &sge,
                            }])
                            .unwrap();
                        posted += 1;
                        b_recvs.store(posted, Ordering::Release);
                    }
                    if sent < MSGS
                        && sent < a_recvs.load(Ordering::Acquire)
                        && sent - send_done < WINDOW
                    {
                        let data = pattern(2, sent, inline_len(sent));
                        let wr = SendWr::new(MSGS + sent, SendOp::Send, &[])
                            .with_inline(&data)
                            .with_flags(SendFlags::SIGNALED);
                        peer.qb.post_send(&[wr]).unwrap();
                        sent += 1;
                    }
                    for c in poll_ok(&mut peer.cqb, &mut wc, "B") {
                        if c.opcode == WcOpcode::Send {
                            assert_eq!(c.wr_id, MSGS + send_done, "B's SENDs in order");
                            send_done += 1;
                        } else {
                            let k = received;
                            assert_eq!((c.wr_id, c.opcode), (k, WcOpcode::Recv), "B");
                            let mut got = vec![0u8; inline_len(k)];
                            peer.mr
                                .mem()
                                .read_bytes((k % WINDOW) as usize * SLOT, &mut got);
                            assert_eq!(got, pattern(1, k, inline_len(k)), "A's SEND {k} at B");
                            received += 1;
                        }
                    }
                    std::thread::yield_now();
                }
            });
        });
    }
    pump.stop();
    // The QP carries on where its halves left off.
    qa.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &[Sge {
            addr: mra.iova(),
            len: 1,
            lkey: mra.lkey(),
        }],
    }])
    .expect("the whole QP posts again after the split");
}

/// Writes per QP of the shared-CQ test.
const SHARED_WRITES: u64 = 1500;
/// QPs on the shared CQ.
const SHARED_QPS: u64 = 3;

/// One CQ shared by several QPs, polled by one thread while each QP posts RDMA WRITEs on
/// its own thread: every completion reaches the poller in each QP's order, the posters
/// see the room the poller frees, and every byte lands.
#[test]
fn one_cq_shared_by_qps_posting_on_other_threads() {
    let fabric = Fabric::new(LinkLayer::Ethernet);
    let mut a = node(&fabric, 1);
    let mut b = node(&fabric, 2);
    let mut shared = a.hca.create_cq(255).unwrap();
    let cqb = b.hca.create_cq(255).unwrap();
    let len = (SHARED_QPS * SHARED_WRITES) as usize * 64;
    let mut src = a.hca.alloc_mr(&a.pd, len, ACCESS).unwrap();
    let dst = b.hca.alloc_mr(&b.pd, len, ACCESS).unwrap();
    let mut qps = Vec::new();
    let mut peers = Vec::new();
    for j in 0..SHARED_QPS {
        let (qa, qb) = pair(&fabric, &mut a, &mut b, (&shared, &shared), (&cqb, &cqb));
        qps.push(qa);
        peers.push(qb);
        for k in 0..SHARED_WRITES {
            let off = ((j * SHARED_WRITES + k) * 64) as usize;
            src.mem_mut().write_bytes(off, &pattern(10 + j, k, 64));
        }
    }
    let (si, di, lkey, rkey) = (src.iova(), dst.iova(), src.lkey(), dst.rkey());
    let qpns: Vec<u32> = qps.iter().map(|q| q.qpn()).collect();
    let pump = fabric.start_pump(20);
    let watch = Watch::new();
    let watch = &watch;
    std::thread::scope(|s| {
        for (j, qp) in qps.iter_mut().enumerate() {
            let j = j as u64;
            s.spawn(move || {
                let _guard = watch.guard();
                let mut k = 0u64;
                while k < SHARED_WRITES {
                    watch.check(|| format!("poster {j}: {k} of {SHARED_WRITES}"));
                    let off = (j * SHARED_WRITES + k) * 64;
                    let sge = [Sge {
                        addr: si + off,
                        len: 64,
                        lkey,
                    }];
                    let op = SendOp::RdmaWrite {
                        remote_addr: di + off,
                        rkey,
                    };
                    match qp.post_send(&[SendWr::new(k, op, &sge)]) {
                        Ok(()) => k += 1,
                        // The poller has not retired enough yet: try again.
                        Err(e) if e.error == WrError::QueueFull => std::thread::yield_now(),
                        Err(e) => panic!("poster {j}, WRITE {k}: {e:?}"),
                    }
                }
            });
        }
        let shared = &mut shared;
        let qpns = &qpns;
        s.spawn(move || {
            let _guard = watch.guard();
            let mut next = vec![0u64; SHARED_QPS as usize];
            let mut wc = [WorkCompletion::default(); 16];
            while next.iter().any(|&n| n < SHARED_WRITES) {
                watch.check(|| format!("poller: completions {next:?}"));
                for c in poll_ok(shared, &mut wc, "poller") {
                    let j = qpns
                        .iter()
                        .position(|&q| q == c.qp_num)
                        .unwrap_or_else(|| panic!("poller: a completion of QP {:#x}", c.qp_num));
                    assert_eq!(c.opcode, WcOpcode::RdmaWrite);
                    assert_eq!(c.wr_id, next[j], "poller: QP {j}'s completions in order");
                    next[j] += 1;
                }
                std::thread::yield_now();
            }
        });
    });
    pump.stop();
    for j in 0..SHARED_QPS {
        for k in 0..SHARED_WRITES {
            let off = ((j * SHARED_WRITES + k) * 64) as usize;
            let mut got = [0u8; 64];
            dst.mem().read_bytes(off, &mut got);
            assert_eq!(got.to_vec(), pattern(10 + j, k, 64), "QP {j}'s WRITE {k}");
        }
    }
}

/// The datapath's objects can be moved to other threads (checked when this compiles).
#[test]
fn datapath_objects_are_send() {
    fn is_send<T: Send>() {}
    is_send::<Qp<P, Rc>>();
    is_send::<Qp<P, Rc>>();
    is_send::<Cq<P>>();
    is_send::<Srq<P>>();
    is_send::<SendQueue<'static, P, Rc>>();
    is_send::<RecvQueue<'static, P, Rc>>();
}
