//! Error paths of the datapath, driven with raw PRM bytes: RNR (then success, then
//! exhaustion), transport retry exhaustion, remote access violations (nothing written),
//! local errors, flush, CQ overrun, duplicates at the responder.

mod common;

use common::verbs::{Conn, Node, Pair, wr};
use uhca_fwif::consts::*;
use uhca_mock::{FaultConfig, LinkLayer};

#[test]
fn rnr_then_retry_succeeds_once_a_receive_is_posted() {
    let mut p = Pair::rc(LinkLayer::Ethernet);
    let amr = p.a.mr(4096);
    let bmr = p.b.mr(4096);
    p.a.write(&amr, 0, b"late");
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 4));
    // rnr_retry 7: retried for ever while no receive WQE is posted.
    p.fabric.run_for(50_000_000);
    assert!(p.b.h.hca.datapath_counters().rnr_naks_sent >= 2);
    assert!(p.a.poll_all(&mut p.acq).is_empty());
    assert_eq!(p.a.qp_state(&p.aqp), QpState::Rts);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 64)]);
    p.run();
    let wc = p.a.poll_all(&mut p.acq);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].opcode, CqeOpcode::Req);
    assert_eq!(p.b.poll_all(&mut p.bcq)[0].byte_cnt(), 4);
    assert_eq!(p.b.read(&bmr, 0, 4), b"late");
}

#[test]
fn rnr_retry_exhaustion_moves_the_qp_to_error_and_flushes() {
    let c = Conn {
        rnr_retry: 2,
        ..Conn::default()
    };
    let mut p = Pair::new(LinkLayer::Ethernet, QpServiceType::Rc, c, c);
    let amr = p.a.mr(4096);
    // A receive WQE on the requester side too: it is flushed when the QP fails.
    p.a.post_recv(&mut p.aqp, &[(amr.key, amr.iova + 1024, 64)]);
    let first = p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 4));
    let second = p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 4));
    p.run();
    assert_eq!(
        p.b.h.hca.datapath_counters().rnr_naks_sent,
        3,
        "1 + 2 retries"
    );
    let wc = p.a.poll_all(&mut p.acq);
    assert_eq!(wc[0].opcode, CqeOpcode::ReqErr);
    assert_eq!(wc[0].syndrome(), CqeSyndrome::RnrRetryExcErr);
    assert_eq!(wc[0].err.wqe_counter.get(), first);
    assert_eq!(p.a.qp_state(&p.aqp), QpState::Err);
    // Everything else is flushed: the second send and the receive.
    let flushed: Vec<_> = wc[1..].iter().map(|w| (w.opcode, w.syndrome())).collect();
    assert!(flushed.contains(&(CqeOpcode::ReqErr, CqeSyndrome::WrFlushErr)));
    assert!(flushed.contains(&(CqeOpcode::RespErr, CqeSyndrome::WrFlushErr)));
    assert!(
        wc.iter()
            .any(|w| w.err.wqe_counter.get() == second && w.syndrome() == CqeSyndrome::WrFlushErr)
    );
    // A WQE posted in the error state completes with a flush error too.
    let late = p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 4));
    let wc = p.a.poll_all(&mut p.acq);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].syndrome(), CqeSyndrome::WrFlushErr);
    assert_eq!(wc[0].err.wqe_counter.get(), late);
}

#[test]
fn transport_retry_exhaustion_with_every_packet_dropped() {
    use uhca_fwif::cmd::*;
    let c = Conn {
        retry_count: 3,
        ack_timeout: 10,
        // Counter sets are numbered from 1 on each HCA.
        counter_set_id: 1,
        ..Conn::default()
    };
    let mut p = Pair::new_with(LinkLayer::InfiniBand, QpServiceType::Rc, c, c, |n| {
        let id = n.h.ok(&AllocQCounterIn::new_cmd(), &[]).counter_set_id();
        assert_eq!(id, 1);
    });
    p.fabric.set_faults(FaultConfig::drop_all());
    let amr = p.a.mr(4096);
    let bmr = p.b.mr(4096);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 64)]);
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 4));
    let mut w = wr(WqeOpcode::RdmaWrite, &amr, 0, 8);
    w.raddr = Some((bmr.iova, bmr.key));
    p.a.post_send(&mut p.aqp, &w);
    let t0 = p.fabric.now_ns();
    p.run();
    let c = p.a.h.hca.datapath_counters();
    assert_eq!(c.timeouts, 4, "the first try and 3 retries time out");
    // 4.096 µs × 2^10 per try.
    assert!(p.fabric.now_ns() - t0 >= 4 * 4096 * 1024);
    let wc = p.a.poll_all(&mut p.acq);
    assert_eq!(wc[0].syndrome(), CqeSyndrome::TransportRetryExcErr);
    assert_eq!(wc[1].syndrome(), CqeSyndrome::WrFlushErr);
    assert_eq!(p.a.qp_state(&p.aqp), QpState::Err);
    assert!(p.b.poll_all(&mut p.bcq).is_empty());
    // QUERY_Q_COUNTER reports the same story.
    let mut q = QueryQCounterIn::new_cmd();
    q.set_counter_set_id(1);
    let o = p.a.h.ok(&q, &[]);
    assert_eq!(o.local_ack_timeout_err(), 4);
    assert_eq!(o.req_transport_retries_exceeded(), 1);
    assert_eq!(o.req_cqe_error(), 1, "flushes are not errors");
}

/// What a remote access check is given.
enum Violation {
    WrongRkey,
    OutOfBounds,
    NoRemoteWrite,
    NoRemoteRead,
    NoRemoteAtomic,
    OtherPd,
    Destroyed,
    Unaligned,
}

fn violation(v: Violation) {
    let mut p = Pair::rc(LinkLayer::Ethernet);
    let amr = p.a.mr(4096);
    p.a.write(&amr, 0, &[0xaa; 64]);
    let (rw, rr, a) = match v {
        Violation::NoRemoteWrite => (false, true, true),
        Violation::NoRemoteRead => (true, false, true),
        Violation::NoRemoteAtomic => (true, true, false),
        _ => (true, true, true),
    };
    let pd = if matches!(v, Violation::OtherPd) {
        p.b.h.alloc_pd()
    } else {
        p.b.pd
    };
    let bmr = p.b.mr_in(pd, 4096, rw, rr, a);
    let mut rkey = bmr.key;
    let mut va = bmr.iova;
    let mut op = WqeOpcode::RdmaWrite;
    match v {
        Violation::WrongRkey => rkey ^= 0x100,
        Violation::OutOfBounds => va += 4096 - 32,
        Violation::NoRemoteRead => op = WqeOpcode::RdmaRead,
        Violation::NoRemoteAtomic => op = WqeOpcode::AtomicFa,
        Violation::Destroyed => p.b.destroy_mr(&bmr),
        Violation::Unaligned => {
            op = WqeOpcode::AtomicCs;
            va += 4;
        }
        _ => {}
    }
    let mut w = wr(op, &amr, 0, 64);
    if matches!(op, WqeOpcode::AtomicFa | WqeOpcode::AtomicCs) {
        w.sges = vec![(amr.key, amr.iova + 512, 8)];
        w.atomic = Some((1, 0));
    }
    w.raddr = Some((va, rkey));
    p.a.post_send(&mut p.aqp, &w);
    p.run();
    let wc = p.a.poll_all(&mut p.acq);
    assert_eq!(wc[0].opcode, CqeOpcode::ReqErr);
    let want = if matches!(v, Violation::Unaligned) {
        CqeSyndrome::RemoteInvalReqErr
    } else {
        CqeSyndrome::RemoteAccessErr
    };
    assert_eq!(wc[0].syndrome(), want);
    assert_eq!(p.a.qp_state(&p.aqp), QpState::Err);
    assert_eq!(
        p.b.qp_state(&p.bqp),
        QpState::Err,
        "the responder fails too"
    );
    if !matches!(v, Violation::Destroyed) {
        assert_eq!(p.b.read(&bmr, 0, 4096), vec![0u8; 4096], "nothing written");
    }
    // The responder reports the error on its event queue, naming its QP.
    let ev = if matches!(v, Violation::Unaligned) {
        EventType::WqInvalReqError
    } else {
        EventType::WqAccessError
    };
    let eqes = p.b.events(ev);
    assert_eq!(eqes.len(), 1);
    let d: &uhca_fwif::eqe::EqeQpSrq = eqes[0].data_as();
    assert_eq!(d.qp_srq_n.get() & 0xff_ffff, p.bqp.qpn);
    assert_eq!(p.a.read(&amr, 512, 8), vec![0u8; 8], "no result written");
}

#[test]
fn remote_access_wrong_rkey() {
    violation(Violation::WrongRkey);
}
#[test]
fn remote_access_out_of_bounds() {
    violation(Violation::OutOfBounds);
}
#[test]
fn remote_access_without_remote_write() {
    violation(Violation::NoRemoteWrite);
}
#[test]
fn remote_access_without_remote_read() {
    violation(Violation::NoRemoteRead);
}
#[test]
fn remote_access_without_remote_atomic() {
    violation(Violation::NoRemoteAtomic);
}
#[test]
fn remote_access_other_pd() {
    violation(Violation::OtherPd);
}
#[test]
fn remote_access_destroyed_mkey() {
    violation(Violation::Destroyed);
}
#[test]
fn unaligned_atomic_is_an_invalid_request() {
    violation(Violation::Unaligned);
}

#[test]
fn local_protection_and_length_errors() {
    let mut p = Pair::rc(LinkLayer::Ethernet);
    let amr = p.a.mr(4096);
    let bmr = p.b.mr(4096);
    // An lkey that does not exist.
    let mut w = wr(WqeOpcode::Send, &amr, 0, 16);
    w.sges[0].0 = 0x7777_7742;
    p.a.post_send(&mut p.aqp, &w);
    let wc = p.a.poll_all(&mut p.acq);
    assert_eq!(wc[0].syndrome(), CqeSyndrome::LocalProtErr);
    assert_eq!(p.a.qp_state(&p.aqp), QpState::Err);
    // Responder: a receive buffer too small is a local length error there and an invalid
    // request at the requester.
    drop((p, bmr));
    let mut q = Pair::rc(LinkLayer::Ethernet);
    let qa = q.a.mr(4096);
    let qb = q.b.mr(4096);
    q.b.post_recv(&mut q.bqp, &[(qb.key, qb.iova, 8)]);
    q.a.post_send(&mut q.aqp, &wr(WqeOpcode::Send, &qa, 0, 100));
    q.run();
    let wc = q.b.poll_all(&mut q.bcq);
    assert_eq!(wc[0].opcode, CqeOpcode::RespErr);
    assert_eq!(wc[0].syndrome(), CqeSyndrome::LocalLengthErr);
    let wc = q.a.poll_all(&mut q.acq);
    assert_eq!(wc[0].syndrome(), CqeSyndrome::RemoteInvalReqErr);
}

#[test]
fn cq_overrun_raises_a_cq_error_event() {
    let fabric = uhca_mock::Fabric::ethernet();
    let mut a = Node::new(&fabric, LinkLayer::Ethernet, 1);
    let mut b = Node::new(&fabric, LinkLayer::Ethernet, 2);
    let mut acq = a.cq(1); // two CQEs
    let bcq = b.cq(6);
    let mut aqp = a.qp(QpServiceType::Rc, &acq, &acq);
    let bqp = b.qp(QpServiceType::Rc, &bcq, &bcq);
    a.connect(&aqp, &b, bqp.qpn, Conn::default());
    b.connect(&bqp, &a, aqp.qpn, Conn::default());
    let amr = a.mr(4096);
    let bmr = b.mr(4096);
    for _ in 0..3 {
        let mut w = wr(WqeOpcode::RdmaWrite, &amr, 0, 8);
        w.raddr = Some((bmr.iova, bmr.key));
        a.post_send(&mut aqp, &w);
    }
    assert!(fabric.run_until_idle());
    assert_eq!(a.h.hca.datapath_counters().cq_overruns, 1);
    let eqes = a.events(EventType::CqError);
    assert_eq!(eqes.len(), 1);
    let e: &uhca_fwif::eqe::EqeCqErr = eqes[0].data_as();
    assert_eq!(e.cqn.get() & 0xff_ffff, acq.cqn);
    assert_eq!(e.syndrome, 1);
    assert_eq!(a.poll_all(&mut acq).len(), 2);
}

#[test]
fn a_duplicate_atomic_returns_the_saved_result_without_executing_again() {
    let mut p = Pair::rc(LinkLayer::Ethernet);
    let amr = p.a.mr(4096);
    let bmr = p.b.mr(4096);
    p.b.write(&bmr, 0, &10u64.to_be_bytes());
    let mut w = wr(WqeOpcode::AtomicFa, &amr, 0, 8);
    w.raddr = Some((bmr.iova, bmr.key));
    w.atomic = Some((5, 0));
    p.a.post_send(&mut p.aqp, &w);
    let req = p.a.h.hca.take_tx_frames();
    assert_eq!(req.len(), 1);
    // The request arrives twice (a retransmission after a lost ACK).
    p.b.h.hca.receive_frames(&[req[0].clone(), req[0].clone()]);
    assert_eq!(p.b.read(&bmr, 0, 8), 15u64.to_be_bytes(), "executed once");
    let acks = p.b.h.hca.take_tx_frames();
    assert_eq!(acks.len(), 2);
    for f in &acks {
        let r = uhca_mock::wire::RoceV2Repr::parse(f).unwrap();
        assert_eq!(
            r.transport.bth.opcode,
            uhca_mock::wire::Opcode::RcAtomicAcknowledge
        );
        assert_eq!(r.transport.atomic_ack_eth.unwrap().orig_rem_dt, 10);
    }
    assert_eq!(p.b.h.hca.datapath_counters().rx_duplicates, 1);
    p.a.h.hca.receive_frames(&acks);
    assert_eq!(p.a.poll_all(&mut p.acq).len(), 1);
    assert_eq!(p.a.read(&amr, 0, 8), 10u64.to_be_bytes());
}

#[test]
fn a_duplicate_read_is_executed_again_and_a_gap_is_nakked_once() {
    let mut p = Pair::rc(LinkLayer::Ethernet);
    let amr = p.a.mr(4096);
    let bmr = p.b.mr(4096);
    p.b.write(&bmr, 0, b"first");
    let mut w = wr(WqeOpcode::RdmaRead, &amr, 0, 5);
    w.raddr = Some((bmr.iova, bmr.key));
    p.a.post_send(&mut p.aqp, &w);
    let req = p.a.h.hca.take_tx_frames();
    p.b.h.hca.receive_frames(&req);
    p.b.write(&bmr, 0, b"again");
    p.b.h.hca.receive_frames(&req);
    let resp = p.b.h.hca.take_tx_frames();
    assert_eq!(resp.len(), 2);
    let r = uhca_mock::wire::RoceV2Repr::parse(&resp[1]).unwrap();
    assert_eq!(r.transport.payload, b"again", "read memory again");
    // Two sends; the first is lost: one sequence NAK, then the retransmission completes.
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova + 100, 64)]);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova + 200, 64)]);
    p.a.h.hca.receive_frames(&resp);
    p.a.poll_all(&mut p.acq);
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 4));
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 4));
    let mut sends = p.a.h.hca.take_tx_frames();
    sends.remove(0);
    p.b.h.hca.receive_frames(&sends);
    p.b.h.hca.receive_frames(&sends);
    let c = p.b.h.hca.datapath_counters();
    assert_eq!(c.rx_out_of_sequence, 2);
    assert_eq!(c.naks_sent, 1, "one NAK per gap");
    p.run();
    assert_eq!(p.a.poll_all(&mut p.acq).len(), 2);
    assert_eq!(p.b.poll_all(&mut p.bcq).len(), 2);
}

#[test]
fn malformed_frames_are_dropped_and_counted() {
    let mut p = Pair::rc(LinkLayer::Ethernet);
    p.b.h
        .hca
        .receive_frames(&[vec![], vec![0xff; 7], vec![0u8; 200]]);
    let amr = p.a.mr(64);
    let bmr = p.b.mr(64);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 64)]);
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 8));
    // A good frame with a flipped payload bit fails its ICRC.
    let mut f = p.a.h.hca.take_tx_frames();
    let n = f[0].len();
    f[0][n - 10] ^= 1;
    p.b.h.hca.receive_frames(&f);
    assert_eq!(p.b.h.hca.datapath_counters().rx_malformed, 4);
    assert!(p.b.poll_all(&mut p.bcq).is_empty());
    assert_eq!(p.b.qp_state(&p.bqp), QpState::Rts);
}

/// Random well-formed packets (good ICRC) with random opcodes, PSNs, keys, addresses and
/// lengths, aimed at live QPs: the engine must never panic, and the QP pair keeps working
/// or fails with a CQE.
#[test]
fn random_packets_at_live_qps_never_panic() {
    use uhca_mock::wire::{
        BthRepr, EthernetRepr, IbTransportRepr, IpRepr, Ipv4Repr, Opcode, RoceV2Repr,
    };
    let mut p = Pair::rc(LinkLayer::Ethernet);
    let bmr = p.b.mr(4096);
    for _ in 0..8 {
        p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 4096)]);
    }
    let mut x: u64 = 0x1234_5678_9abc_def1;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let payload = vec![0x5au8; 2048];
    let mut resets = 0;
    for i in 0..20_000 {
        if i % 32 == 0 {
            // Serve both EQs (QP events), as a driver would, or they overrun.
            let _ = p.a.events(EventType::CommEst);
            let _ = p.b.events(EventType::CommEst);
        }
        if i % 100 == 0 && p.b.qp_state(&p.bqp) == QpState::Err {
            // Back to RTS with a fresh receive queue.
            use uhca_fwif::cmd::*;
            let mut r = Qp2rstIn::new_cmd();
            r.set_qpn(p.bqp.qpn);
            p.b.h.ok(&r, &[]);
            p.bqp.rq_pi = 0;
            assert!(p.b.h.hca.host_write(p.bqp.dbr, &[0; 8]));
            p.b.connect(&p.bqp, &p.a, p.aqp.qpn, Conn::default());
            for _ in 0..8 {
                p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 4096)]);
            }
            resets += 1;
        }
        let op = Opcode::ALL[(rnd() % Opcode::ALL.len() as u64) as usize];
        let Some(h) = op.headers() else { continue };
        let mut bth = BthRepr::new(op, p.bqp.qpn, (0x10 + rnd() % 8) as u32);
        bth.ack_req = rnd() % 2 == 0;
        let n = if h.payload {
            (rnd() % 1100) as usize
        } else {
            0
        };
        let mut t = IbTransportRepr::new(bth, &payload[..n]);
        let key = if rnd() % 2 == 0 {
            bmr.key
        } else {
            rnd() as u32
        };
        let va = if rnd() % 2 == 0 {
            bmr.iova + rnd() % 4200
        } else {
            rnd()
        };
        if h.deth {
            t = t.with_deth(rnd() as u32, rnd() as u32);
        }
        if h.xrceth {
            t = t.with_xrceth(rnd() as u32);
        }
        if h.reth {
            t = t.with_reth(va, key, (rnd() % 5000) as u32);
        }
        if h.atomic_eth {
            t = t.with_atomic_eth(va, key, rnd(), rnd());
        }
        if h.aeth {
            t = t.with_aeth(
                uhca_mock::wire::AethSyndrome::from(rnd() as u8),
                rnd() as u32,
            );
        }
        if h.atomic_ack_eth {
            t = t.with_atomic_ack_eth(rnd());
        }
        if h.imm_dt {
            t = t.with_imm_dt(rnd() as u32);
        }
        if h.ieth {
            t = t.with_ieth(rnd() as u32);
        }
        let r = RoceV2Repr {
            eth: EthernetRepr {
                dst: p.b.mac,
                src: p.a.mac,
                vlan: None,
            },
            ip: IpRepr::Ipv4(Ipv4Repr::new(p.a.ip, p.b.ip)),
            udp_src_port: 0xc000,
            transport: t,
        };
        let mut f = vec![0u8; r.buffer_len()];
        if r.emit(&mut f).is_err() {
            continue;
        }
        p.b.h.hca.receive_frames(&[f]);
        p.b.h.hca.take_tx_frames();
        p.b.h.hca.service();
    }
    // Whatever happened, the CQ holds well-formed CQEs only.
    for w in p.b.poll_all(&mut p.bcq) {
        assert!(matches!(
            w.opcode,
            CqeOpcode::RespSend
                | CqeOpcode::RespSendImm
                | CqeOpcode::RespWrImm
                | CqeOpcode::RespErr
        ));
    }
    assert!(
        resets > 10,
        "errors were reached and recovered from: {resets}"
    );
}

#[test]
fn a_ud_send_error_stops_only_the_send_queue() {
    use uhca_fwif::cmd::*;
    let fabric = uhca_mock::Fabric::ethernet();
    let mut a = Node::new(&fabric, LinkLayer::Ethernet, 1);
    let mut b = Node::new(&fabric, LinkLayer::Ethernet, 2);
    let mut acq = a.cq(6);
    let mut bcq = b.cq(6);
    let mut aqp = a.qp(QpServiceType::Ud, &acq, &acq);
    let mut bqp = b.qp(QpServiceType::Ud, &bcq, &bcq);
    a.ud_ready(&aqp, 7);
    b.ud_ready(&bqp, 7);
    let amr = a.mr(4096);
    let bmr = b.mr(4096);
    let mut w = wr(WqeOpcode::Send, &amr, 0, 8);
    w.av = Some(a.av_to(&b, bqp.qpn, 7));
    let mut bad = w.clone();
    bad.sges[0].0 ^= 0x100;
    a.post_send(&mut aqp, &bad);
    assert_eq!(a.qp_state(&aqp), QpState::Sqer);
    a.post_send(&mut aqp, &w);
    let wc = a.poll_all(&mut acq);
    assert_eq!(wc[0].syndrome(), CqeSyndrome::LocalProtErr);
    assert_eq!(wc[1].syndrome(), CqeSyndrome::WrFlushErr);
    // The receive queue still works.
    a.post_recv(&mut aqp, &[(amr.key, amr.iova + 1024, 256)]);
    let mut back = wr(WqeOpcode::Send, &bmr, 0, 4);
    back.av = Some(b.av_to(&a, aqp.qpn, 7));
    b.post_send(&mut bqp, &back);
    assert!(fabric.run_until_idle());
    assert_eq!(a.poll_all(&mut acq)[0].opcode, CqeOpcode::RespSend);
    // SQERR2RTS resumes sending.
    let mut r = Sqerr2rtsQpIn::new_cmd();
    r.set_qpn(aqp.qpn);
    a.h.ok(&r, &[]);
    b.post_recv(&mut bqp, &[(bmr.key, bmr.iova, 256)]);
    a.post_send(&mut aqp, &w);
    assert!(fabric.run_until_idle());
    assert_eq!(a.poll_all(&mut acq)[0].opcode, CqeOpcode::Req);
    assert_eq!(
        b.poll_all(&mut bcq).len(),
        2,
        "b's own send and the datagram"
    );
}

#[test]
fn a_port_that_is_down_neither_sends_nor_receives() {
    let c = Conn {
        retry_count: 1,
        ack_timeout: 8,
        ..Conn::default()
    };
    let mut p = Pair::new(LinkLayer::Ethernet, QpServiceType::Rc, c, c);
    let amr = p.a.mr(64);
    let bmr = p.b.mr(64);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 64)]);
    p.b.h.hca.set_port_up(false);
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 8));
    p.run();
    assert!(p.b.h.hca.datapath_counters().port_down_drops >= 2);
    assert_eq!(
        p.a.poll_all(&mut p.acq)[0].syndrome(),
        CqeSyndrome::TransportRetryExcErr
    );
    assert!(p.b.poll_all(&mut p.bcq).is_empty());
}

/// Garbage in the send and receive queues, the doorbell records and the CQ's consumer
/// index: the engine reports errors (CQEs, notes, IOMMU faults) and never panics.
#[test]
fn garbage_work_queues_never_panic() {
    use uhca_fwif::cmd::*;
    let c = Conn {
        rnr_retry: 2,
        retry_count: 2,
        ack_timeout: 8,
        ..Conn::default()
    };
    let mut p = Pair::new(LinkLayer::Ethernet, QpServiceType::Rc, c, c);
    let amr = p.a.mr(4096);
    let mut x: u64 = 0xfeed_f00d_1234_5678;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let sq_base = p.aqp.buf + (1u64 << p.aqp.log_rq) * (16u64 << p.aqp.log_stride);
    let mut seen = std::collections::BTreeMap::new();
    let mut jumped = false;
    for round in 0..300 {
        if p.a.qp_state(&p.aqp) != QpState::Rts || std::mem::take(&mut jumped) {
            let mut r = Qp2rstIn::new_cmd();
            r.set_qpn(p.aqp.qpn);
            p.a.h.ok(&r, &[]);
            assert!(p.a.h.hca.host_write(p.aqp.dbr, &[0; 8]));
            p.aqp.sq_pi = 0;
            p.aqp.rq_pi = 0;
            p.a.connect(&p.aqp, &p.b, p.bqp.qpn, c);
        }
        // A random WQE (three times in four with a plausible control segment).
        let mut wqe = [0u8; 256];
        for b in wqe.iter_mut() {
            *b = rnd() as u8;
        }
        if round % 4 != 0 {
            let ops = [0x0a, 0x0b, 0x08, 0x09, 0x10, 0x11, 0x12, 0x00, 0x01, 0x25];
            wqe[3] = ops[(rnd() % ops.len() as u64) as usize];
            wqe[1..3].copy_from_slice(&p.aqp.sq_pi.to_be_bytes());
            let ds = (rnd() % 16) as u32;
            wqe[4..8].copy_from_slice(&((p.aqp.qpn << 8) | ds).to_be_bytes());
            // Sometimes a real lkey.
            if rnd() % 2 == 0 {
                wqe[20..24].copy_from_slice(&amr.key.to_be_bytes());
                wqe[24..32].copy_from_slice(&amr.iova.to_be_bytes());
            }
        }
        let slot = p.aqp.sq_pi & 63;
        for (k, bb) in wqe.chunks(64).enumerate() {
            let s = (slot + k as u16) & 63;
            assert!(p.a.h.hca.host_write(sq_base + s as u64 * 64, bb));
        }
        p.aqp.sq_pi = p.aqp.sq_pi.wrapping_add(if rnd() % 8 == 0 {
            // A counter far ahead of the SQ: noted and ignored; the test resets the QP.
            jumped = true;
            rnd() as u16
        } else {
            (rnd() % 4) as u16 + 1
        });
        assert!(
            p.a.h
                .hca
                .host_write(p.aqp.dbr + 4, &(p.aqp.sq_pi as u32).to_be_bytes())
        );
        let mut rq = [0u8; 64];
        for b in rq.iter_mut() {
            *b = rnd() as u8;
        }
        assert!(p.b.h.hca.host_write(p.bqp.buf + (round % 64) * 64, &rq));
        assert!(
            p.b.h
                .hca
                .host_write(p.bqp.dbr, &(rnd() as u32 & 0xffff).to_be_bytes())
        );
        // The CQ's consumer index: usually right, sometimes garbage (an overrun).
        let ci = if rnd() % 8 == 0 {
            rnd() as u32
        } else {
            p.acq.ci & 0xff_ffff
        };
        assert!(p.a.h.hca.host_write(p.acq.dbr, &ci.to_be_bytes()));
        use uhca_hal::Bar;
        p.a.h.p.write64(
            p.a.uar as usize * 4096 + BF_OFFSET,
            u64::from_ne_bytes(wqe[..8].try_into().unwrap()),
        );
        p.fabric.run_until_idle_within(1_000_000_000);
        for w in p.a.poll_all(&mut p.acq) {
            *seen.entry((w.opcode.raw(), w.err.syndrome)).or_insert(0u32) += 1;
        }
        p.b.poll_all(&mut p.bcq);
    }
    // The garbage reached the engine: several kinds of completions came back.
    assert!(
        seen.len() >= 3,
        "{seen:?} {:?} {:?}",
        p.a.h.hca.datapath_counters(),
        p.a.h.hca.notes().iter().rev().take(5).collect::<Vec<_>>()
    );
}

/// A request frame from `p.a` (or from `src` instead of its address) to `p.b`'s RC QP at
/// the PSN it expects: `op` with `payload`, and a RETH for the first `bmr` bytes when the
/// opcode has one.
fn crafted(
    p: &Pair,
    op: uhca_mock::wire::Opcode,
    src: [u8; 4],
    reth: Option<(u64, u32, u32)>,
    payload: &[u8],
) -> Vec<u8> {
    use uhca_mock::wire::{BthRepr, EthernetRepr, IbTransportRepr, IpRepr, Ipv4Repr, RoceV2Repr};
    let mut bth = BthRepr::new(op, p.bqp.qpn, Conn::default().psn);
    bth.ack_req = true;
    let mut t = IbTransportRepr::new(bth, payload);
    if let Some((va, key, len)) = reth {
        t = t.with_reth(va, key, len);
    }
    let r = RoceV2Repr {
        eth: EthernetRepr {
            dst: p.b.mac,
            src: p.a.mac,
            vlan: None,
        },
        ip: IpRepr::Ipv4(Ipv4Repr::new(src, p.b.ip)),
        udp_src_port: 0xc000,
        transport: t,
    };
    let mut f = vec![0u8; r.buffer_len()];
    r.emit(&mut f).unwrap();
    f
}

/// The AETH syndromes of what `p.b` sent.
fn aeths(p: &Pair) -> Vec<uhca_mock::wire::AethSyndrome> {
    p.b.h
        .hca
        .take_tx_frames()
        .iter()
        .filter_map(|f| uhca_mock::wire::RoceV2Repr::parse(f).ok())
        .filter_map(|r| r.transport.aeth.map(|a| a.syndrome))
        .collect()
}

#[test]
fn a_write_longer_than_the_path_mtu_is_an_invalid_request_and_writes_nothing() {
    use uhca_mock::wire::{AethSyndrome, NakCode, Opcode};
    // IB spec vol. 1, 9.7.5.1 (length check): an ONLY or LAST packet carries at most the
    // path MTU (1024 here), a FIRST or MIDDLE exactly that, whatever the RETH says.
    for (op, n, reth) in [
        (Opcode::RcRdmaWriteOnly, 1088, true),
        (Opcode::RcSendOnly, 1088, false),
        (Opcode::RcRdmaWriteFirst, 1000, true),
    ] {
        let mut p = Pair::rc(LinkLayer::Ethernet);
        let bmr = p.b.mr(4096);
        p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova + 2048, 2048)]);
        let reth = reth.then_some((bmr.iova, bmr.key, n as u32));
        let f = crafted(&p, op, p.a.ip, reth, &vec![0x5a; n]);
        p.b.h.hca.receive_frames(&[f]);
        p.b.h.hca.service();
        assert_eq!(
            aeths(&p),
            vec![AethSyndrome::Nak(NakCode::InvalidRequest)],
            "{op:?} of {n} bytes"
        );
        assert_eq!(p.b.qp_state(&p.bqp), QpState::Err, "{op:?}");
        assert_eq!(
            p.b.read(&bmr, 0, 4096),
            vec![0u8; 4096],
            "{op:?}: nothing written"
        );
    }
    // The same WRITE at the path MTU is executed.
    let mut p = Pair::rc(LinkLayer::Ethernet);
    let bmr = p.b.mr(4096);
    let f = crafted(
        &p,
        Opcode::RcRdmaWriteOnly,
        p.a.ip,
        Some((bmr.iova, bmr.key, 1024)),
        &[0x5a; 1024],
    );
    p.b.h.hca.receive_frames(&[f]);
    p.b.h.hca.service();
    assert_eq!(p.b.read(&bmr, 0, 1024), vec![0x5a; 1024]);
    assert_eq!(p.b.qp_state(&p.bqp), QpState::Rts);
}

#[test]
fn a_connected_qp_drops_packets_from_another_source_than_its_peer() {
    use uhca_mock::wire::Opcode;
    // IB spec vol. 1, 9.6 (header validation): a connected QP takes packets from the peer
    // its path names; on RoCE the source IP is the peer's GID. Anything else is dropped
    // silently: no ACK or NAK, nothing written, the QP stays in RTS.
    let mut p = Pair::rc(LinkLayer::Ethernet);
    let bmr = p.b.mr(4096);
    let mut forged = p.a.ip;
    forged[3] ^= 0x40;
    let f = crafted(
        &p,
        Opcode::RcRdmaWriteOnly,
        forged,
        Some((bmr.iova, bmr.key, 64)),
        &[0x5a; 64],
    );
    let before = p.b.h.hca.datapath_counters().rx_discarded;
    p.b.h.hca.receive_frames(&[f]);
    p.b.h.hca.service();
    assert!(aeths(&p).is_empty(), "no answer");
    assert_eq!(p.b.read(&bmr, 0, 64), vec![0u8; 64], "nothing written");
    assert_eq!(p.b.qp_state(&p.bqp), QpState::Rts);
    assert_eq!(p.b.h.hca.datapath_counters().rx_discarded, before + 1);
    // From the peer's address, the same packet is executed.
    let f = crafted(
        &p,
        Opcode::RcRdmaWriteOnly,
        p.a.ip,
        Some((bmr.iova, bmr.key, 64)),
        &[0x5a; 64],
    );
    p.b.h.hca.receive_frames(&[f]);
    p.b.h.hca.service();
    assert_eq!(p.b.read(&bmr, 0, 64), vec![0x5a; 64]);
}

#[test]
fn a_uc_write_longer_than_the_path_mtu_is_dropped_and_writes_nothing() {
    use uhca_mock::wire::{BthRepr, EthernetRepr, IbTransportRepr, IpRepr, Ipv4Repr, Opcode};
    // UC answers nothing: the malformed packet is dropped, the QP stays in RTS.
    let mut p = Pair::new(
        LinkLayer::Ethernet,
        QpServiceType::Uc,
        Conn::default(),
        Conn::default(),
    );
    let bmr = p.b.mr(4096);
    let payload = vec![0x5a; 1088];
    let mut bth = BthRepr::new(Opcode::UcRdmaWriteOnly, p.bqp.qpn, Conn::default().psn);
    bth.ack_req = false;
    let t = IbTransportRepr::new(bth, &payload).with_reth(bmr.iova, bmr.key, 1088);
    let r = uhca_mock::wire::RoceV2Repr {
        eth: EthernetRepr {
            dst: p.b.mac,
            src: p.a.mac,
            vlan: None,
        },
        ip: IpRepr::Ipv4(Ipv4Repr::new(p.a.ip, p.b.ip)),
        udp_src_port: 0xc000,
        transport: t,
    };
    let mut f = vec![0u8; r.buffer_len()];
    r.emit(&mut f).unwrap();
    p.b.h.hca.receive_frames(&[f]);
    p.b.h.hca.service();
    assert!(p.b.h.hca.take_tx_frames().is_empty(), "UC answers nothing");
    assert_eq!(p.b.read(&bmr, 0, 4096), vec![0u8; 4096], "nothing written");
    assert_eq!(p.b.qp_state(&p.bqp), QpState::Rts);
}

/// A retransmission reads the message from memory again, through its lkey, as the
/// hardware does (the model keeps no copy of the payload): a memory key destroyed while its
/// WRITE waits for an ACK fails the WQE with LOCAL_PROT_ERR when the timer resends it, and
/// nothing reaches the target.
#[test]
fn a_retransmission_reads_memory_again_through_its_key() {
    let mut p = Pair::rc(LinkLayer::Ethernet);
    let src = p.a.mr(4096);
    let dst = p.b.mr(4096);
    p.a.write(&src, 0, &[0x5a; 4096]);
    let mut w = wr(WqeOpcode::RdmaWrite, &src, 0, 4096);
    w.raddr = Some((dst.iova, dst.key));
    p.a.post_send(&mut p.aqp, &w);
    // The packets are lost: taken off the port before the fabric moves them.
    assert_eq!(p.a.h.hca.take_tx_frames().len(), 4, "4 packets at MTU 1024");
    p.a.destroy_mr(&src);
    p.run();
    let wc = p.a.poll_all(&mut p.acq);
    assert_eq!(wc.len(), 1, "{wc:?}");
    assert_eq!(wc[0].opcode, CqeOpcode::ReqErr);
    assert_eq!(wc[0].syndrome(), CqeSyndrome::LocalProtErr);
    assert_eq!(p.a.qp_state(&p.aqp), QpState::Err);
    assert_eq!(p.a.h.hca.datapath_counters().timeouts, 1);
    assert_eq!(p.b.read(&dst, 0, 4096), vec![0u8; 4096]);
}

/// The responder checks every packet of an RDMA WRITE against its memory key: a key
/// destroyed after the message's first packet was placed fails the next packet (remote
/// access error, nothing more written), even though the first packet's check of the whole
/// range passed.
#[test]
fn a_write_whose_key_is_destroyed_mid_message_fails_at_the_next_packet() {
    let mut p = Pair::rc(LinkLayer::Ethernet);
    let amr = p.a.mr(4096);
    let bmr = p.b.mr(4096);
    p.a.write(&amr, 0, &[7u8; 3000]);
    let mut w = wr(WqeOpcode::RdmaWrite, &amr, 0, 3000);
    w.raddr = Some((bmr.iova, bmr.key));
    p.a.post_send(&mut p.aqp, &w);
    // MTU 1024: First, Middle, Last.
    let frames = p.a.h.hca.take_tx_frames();
    assert_eq!(frames.len(), 3);
    p.b.h.hca.receive_frames(&frames[..1]);
    assert_eq!(p.b.read(&bmr, 0, 1024), vec![7u8; 1024]);
    p.b.destroy_mr(&bmr);
    p.b.h.hca.receive_frames(&frames[1..]);
    assert_eq!(p.b.qp_state(&p.bqp), QpState::Err);
    assert_eq!(p.b.events(EventType::WqAccessError).len(), 1);
    // The key's memory past the first packet is untouched.
    assert_eq!(p.b.read(&bmr, 1024, 2048), vec![0u8; 2048]);
    p.run();
    let wc = p.a.poll_all(&mut p.acq);
    assert_eq!(wc[0].opcode, CqeOpcode::ReqErr);
    assert_eq!(wc[0].syndrome(), CqeSyndrome::RemoteAccessErr);
}
