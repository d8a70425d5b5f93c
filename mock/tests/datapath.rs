//! The datapath between two mock HCAs on a fabric, driven with raw PRM bytes (no driver):
//! every RC opcode over RoCEv2 and native InfiniBand, multi-packet messages, UD with GRH
//! and Q_Key, UC, completion events.

mod common;

use common::verbs::{Conn, Pair, Wr, wr};
use uhca_fwif::consts::*;
use uhca_mock::LinkLayer;

fn rc_every_opcode(link: LinkLayer) {
    let mut p = Pair::rc(link);
    let amr = p.a.mr(8192);
    let bmr = p.b.mr(8192);
    // SEND: b posts a receive, a sends. (b's first packet in RTR would raise COMM_EST;
    // b is in RTS already.)
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 4096)]);
    p.a.write(&amr, 0, b"hello, responder");
    let idx = p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 16));
    p.run();
    let wc = p.a.poll_all(&mut p.acq);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].opcode, CqeOpcode::Req);
    assert_eq!(wc[0].wqe_counter(), idx);
    assert_eq!(wc[0].qpn(), p.aqp.qpn);
    let wc = p.b.poll_all(&mut p.bcq);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].opcode, CqeOpcode::RespSend);
    assert_eq!(wc[0].byte_cnt(), 16);
    assert_eq!(wc[0].qpn(), p.bqp.qpn);
    assert!(wc[0].cqe.timestamp() > 0, "free-running timestamp");
    assert_eq!(wc[0].wqe_counter(), 0);
    assert_eq!(p.b.read(&bmr, 0, 16), b"hello, responder");

    // SEND with immediate.
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova + 100, 64)]);
    let mut w = wr(WqeOpcode::SendImm, &amr, 0, 5);
    w.imm = 0xdead_beef;
    p.a.post_send(&mut p.aqp, &w);
    p.run();
    assert_eq!(p.a.poll_all(&mut p.acq).len(), 1);
    let wc = p.b.poll_all(&mut p.bcq);
    assert_eq!(wc[0].opcode, CqeOpcode::RespSendImm);
    assert_eq!(wc[0].imm(), 0xdead_beef);
    assert_eq!(wc[0].byte_cnt(), 5);
    assert_eq!(p.b.read(&bmr, 100, 5), b"hello");

    // RDMA WRITE: no receive CQE at b.
    p.a.write(&amr, 200, &[7u8; 300]);
    let mut w = wr(WqeOpcode::RdmaWrite, &amr, 200, 300);
    w.raddr = Some((bmr.iova + 1000, bmr.key));
    p.a.post_send(&mut p.aqp, &w);
    p.run();
    assert_eq!(p.a.poll_all(&mut p.acq)[0].opcode, CqeOpcode::Req);
    assert!(p.b.poll_all(&mut p.bcq).is_empty());
    assert_eq!(p.b.read(&bmr, 1000, 300), vec![7u8; 300]);

    // RDMA WRITE with immediate consumes a receive WQE.
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 16)]);
    let mut w = wr(WqeOpcode::RdmaWriteImm, &amr, 0, 8);
    w.raddr = Some((bmr.iova + 2000, bmr.key));
    w.imm = 0x1234;
    p.a.post_send(&mut p.aqp, &w);
    p.run();
    let wc = p.b.poll_all(&mut p.bcq);
    assert_eq!(wc[0].opcode, CqeOpcode::RespWrImm);
    assert_eq!(wc[0].imm(), 0x1234);
    assert_eq!(wc[0].byte_cnt(), 8);
    assert_eq!(p.b.read(&bmr, 2000, 8), b"hello, r");
    assert_eq!(p.a.poll_all(&mut p.acq).len(), 1);

    // RDMA READ.
    p.b.write(&bmr, 3000, b"remote data!");
    let mut w = wr(WqeOpcode::RdmaRead, &amr, 4000, 12);
    w.raddr = Some((bmr.iova + 3000, bmr.key));
    p.a.post_send(&mut p.aqp, &w);
    p.run();
    let wc = p.a.poll_all(&mut p.acq);
    assert_eq!(wc[0].opcode, CqeOpcode::Req);
    assert_eq!(wc[0].byte_cnt(), 12);
    assert_eq!(p.a.read(&amr, 4000, 12), b"remote data!");

    // Compare-and-swap (hit, then miss) and fetch-and-add.
    p.b.write(&bmr, 4096, &100u64.to_be_bytes());
    let mut w = wr(WqeOpcode::AtomicCs, &amr, 5000, 8);
    w.raddr = Some((bmr.iova + 4096, bmr.key));
    w.atomic = Some((555, 100));
    p.a.post_send(&mut p.aqp, &w);
    p.run();
    assert_eq!(p.a.poll_all(&mut p.acq)[0].byte_cnt(), 8);
    assert_eq!(p.a.read(&amr, 5000, 8), 100u64.to_be_bytes());
    assert_eq!(p.b.read(&bmr, 4096, 8), 555u64.to_be_bytes());
    w.atomic = Some((777, 100));
    p.a.post_send(&mut p.aqp, &w);
    p.run();
    p.a.poll_all(&mut p.acq);
    assert_eq!(
        p.a.read(&amr, 5000, 8),
        555u64.to_be_bytes(),
        "original value"
    );
    assert_eq!(p.b.read(&bmr, 4096, 8), 555u64.to_be_bytes(), "no swap");
    let mut w = wr(WqeOpcode::AtomicFa, &amr, 5008, 8);
    w.raddr = Some((bmr.iova + 4096, bmr.key));
    w.atomic = Some((45, 0));
    p.a.post_send(&mut p.aqp, &w);
    p.run();
    assert_eq!(p.a.poll_all(&mut p.acq).len(), 1);
    assert_eq!(p.a.read(&amr, 5008, 8), 555u64.to_be_bytes());
    assert_eq!(p.b.read(&bmr, 4096, 8), 600u64.to_be_bytes());

    // Unsignalled WQEs produce no CQE; a later signalled one does.
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 64)]);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova + 64, 64)]);
    let mut w = wr(WqeOpcode::Send, &amr, 0, 4);
    w.signaled = false;
    p.a.post_send(&mut p.aqp, &w);
    let last = p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 4));
    p.run();
    let wc = p.a.poll_all(&mut p.acq);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].wqe_counter(), last);
    assert_eq!(p.b.poll_all(&mut p.bcq).len(), 2);

    // Inline data.
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova + 6000, 64)]);
    let w = Wr {
        opcode: Some(WqeOpcode::Send),
        inline: Some(b"inline!".to_vec()),
        signaled: true,
        ..Wr::default()
    };
    p.a.post_send(&mut p.aqp, &w);
    p.run();
    assert_eq!(p.b.poll_all(&mut p.bcq)[0].byte_cnt(), 7);
    assert_eq!(p.b.read(&bmr, 6000, 7), b"inline!");
    // QUERY_QP shows the PSNs moved on: 11 requests from PSN 0x10 (the READ used one).
    {
        use uhca_fwif::cmd::*;
        let mut q = QueryQpIn::new_cmd();
        q.set_qpn(p.aqp.qpn);
        let o = p.a.h.ok(&q, &[]);
        assert_eq!(o.qpc().next_send_psn(), 0x10 + 11);
        assert_eq!(o.qpc().hw_sq_wqebb_counter(), p.aqp.sq_pi);
        let mut q = QueryQpIn::new_cmd();
        q.set_qpn(p.bqp.qpn);
        let o = p.b.h.ok(&q, &[]);
        assert_eq!(o.qpc().next_rcv_psn(), 0x10 + 11);
    }
    assert_eq!(p.a.h.hca.datapath_counters().rx_malformed, 0);
    assert_eq!(p.b.h.hca.datapath_counters().rx_malformed, 0);
    assert!(p.a.h.hca.iommu_faults().is_empty());
    assert!(p.b.h.hca.iommu_faults().is_empty());
}

#[test]
fn rc_every_opcode_over_roce() {
    rc_every_opcode(LinkLayer::Ethernet);
}

#[test]
fn rc_every_opcode_over_infiniband() {
    rc_every_opcode(LinkLayer::InfiniBand);
}

fn multi_packet(link: LinkLayer) {
    let mut p = Pair::new(
        link,
        QpServiceType::Rc,
        Conn {
            mtu: IbMtu::Mtu256,
            ..Conn::default()
        },
        Conn {
            mtu: IbMtu::Mtu256,
            ..Conn::default()
        },
    );
    let amr = p.a.mr(1 << 16);
    let bmr = p.b.mr(1 << 16);
    let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
    p.a.write(&amr, 0, &data);
    // SEND of 5000 bytes (20 packets) into two SGEs.
    p.b.post_recv(
        &mut p.bqp,
        &[(bmr.key, bmr.iova, 1000), (bmr.key, bmr.iova + 8192, 8000)],
    );
    let sent_before = p.a.h.hca.datapath_counters().tx_packets;
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 5000));
    p.run();
    assert!(p.a.h.hca.datapath_counters().tx_packets - sent_before >= 20);
    let wc = p.b.poll_all(&mut p.bcq);
    assert_eq!(wc[0].byte_cnt(), 5000);
    assert_eq!(p.b.read(&bmr, 0, 1000), &data[..1000]);
    assert_eq!(p.b.read(&bmr, 8192, 4000), &data[1000..]);
    // WRITE and READ of 5000 bytes.
    let mut w = wr(WqeOpcode::RdmaWrite, &amr, 0, 5000);
    w.raddr = Some((bmr.iova + 20000, bmr.key));
    p.a.post_send(&mut p.aqp, &w);
    let mut r = wr(WqeOpcode::RdmaRead, &amr, 30000, 5000);
    r.raddr = Some((bmr.iova + 20000, bmr.key));
    p.a.post_send(&mut p.aqp, &r);
    p.run();
    let wc = p.a.poll_all(&mut p.acq);
    assert_eq!(wc.len(), 3);
    assert_eq!(wc[2].byte_cnt(), 5000);
    assert_eq!(p.b.read(&bmr, 20000, 5000), data);
    assert_eq!(p.a.read(&amr, 30000, 5000), data);
    // The ACKs were coalesced: fewer ACKs than request packets.
    let c = p.b.h.hca.datapath_counters();
    assert!(c.acks_sent < 20, "acks {}", c.acks_sent);
}

#[test]
fn multi_packet_messages_over_roce() {
    multi_packet(LinkLayer::Ethernet);
}

#[test]
fn multi_packet_messages_over_infiniband() {
    multi_packet(LinkLayer::InfiniBand);
}

fn ud(link: LinkLayer) {
    let fabric = uhca_mock::Fabric::new(link);
    let mut a = common::verbs::Node::new(&fabric, link, 1);
    let mut b = common::verbs::Node::new(&fabric, link, 2);
    let mut acq = a.cq(6);
    let mut bcq = b.cq(6);
    let mut aqp = a.qp(QpServiceType::Ud, &acq, &acq);
    let mut bqp = b.qp(QpServiceType::Ud, &bcq, &bcq);
    a.ud_ready(&aqp, 0x1111);
    b.ud_ready(&bqp, 0x2222);
    let amr = a.mr(4096);
    let bmr = b.mr(4096);
    a.write(&amr, 0, b"datagram");
    b.post_recv(&mut bqp, &[(bmr.key, bmr.iova, 1024)]);
    let mut w = wr(WqeOpcode::SendImm, &amr, 0, 8);
    w.imm = 77;
    w.av = Some(a.av_to(&b, bqp.qpn, 0x2222));
    a.post_send(&mut aqp, &w);
    // A datagram with the wrong Q_Key is dropped.
    w.av = Some(a.av_to(&b, bqp.qpn, 0x3333));
    a.post_send(&mut aqp, &w);
    assert!(fabric.run_until_idle());
    assert_eq!(a.poll_all(&mut acq).len(), 2, "UD sends complete at once");
    let wc = b.poll_all(&mut bcq);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].opcode, CqeOpcode::RespSendImm);
    assert_eq!(wc[0].byte_cnt(), 40 + 8, "the GRH area counts");
    assert_eq!(wc[0].imm(), 77);
    assert_eq!(wc[0].cqe.remote_qpn(), aqp.qpn);
    assert_ne!(
        wc[0].cqe.flags_rqpn.get() & uhca_fwif::cqe::CQE_FLAGS_GRH,
        0
    );
    assert_eq!(b.read(&bmr, 40, 8), b"datagram");
    let grh = b.read(&bmr, 0, 40);
    match link {
        LinkLayer::Ethernet => {
            // IPv4: the header is in the last 20 bytes of the GRH area.
            assert_eq!(grh[20] >> 4, 4);
            assert_eq!(&grh[32..36], &a.ip);
            assert_eq!(wc[0].cqe.roce_l3_hdr_type(), CQE_ROCE_L3_HEADER_TYPE_IPV4);
            // The SL field carries the RoCE packet type: UDP (RoCEv2, bit 3) over IPv4 (2),
            // which libmlx5 hands out as wc.sl and UCX reads the destination address by.
            assert_eq!((wc[0].cqe.flags_rqpn.get() >> 24) & 0xf, 0x8 | 0x2);
        }
        LinkLayer::InfiniBand => {
            assert_eq!(grh[0] >> 4, 6, "GRH IPVer");
            assert_eq!(wc[0].cqe.slid.get(), a.h.hca.lid());
        }
    }
    assert_eq!(b.h.hca.datapath_counters().rx_qkey_violations, 1);
}

#[test]
fn ud_send_with_grh_and_qkey_over_roce() {
    ud(LinkLayer::Ethernet);
}

#[test]
fn ud_send_with_grh_and_qkey_over_infiniband() {
    ud(LinkLayer::InfiniBand);
}

#[test]
fn uc_write_with_immediate() {
    let mut p = Pair::new(
        LinkLayer::Ethernet,
        QpServiceType::Uc,
        Conn::default(),
        Conn::default(),
    );
    let amr = p.a.mr(8192);
    let bmr = p.b.mr(8192);
    p.a.write(&amr, 0, &[9u8; 3000]);
    let mut w = wr(WqeOpcode::RdmaWrite, &amr, 0, 3000);
    w.raddr = Some((bmr.iova, bmr.key));
    p.a.post_send(&mut p.aqp, &w);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova + 4000, 16)]);
    let mut w = wr(WqeOpcode::RdmaWriteImm, &amr, 0, 10);
    w.raddr = Some((bmr.iova + 5000, bmr.key));
    w.imm = 5;
    p.a.post_send(&mut p.aqp, &w);
    p.run();
    assert_eq!(p.a.poll_all(&mut p.acq).len(), 2);
    assert_eq!(p.b.read(&bmr, 0, 3000), vec![9u8; 3000]);
    let wc = p.b.poll_all(&mut p.bcq);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].opcode, CqeOpcode::RespWrImm);
    assert_eq!(
        p.b.h.hca.datapath_counters().acks_sent,
        0,
        "UC is never ACKed"
    );
}

#[test]
fn uc_drops_a_message_with_a_lost_packet() {
    let mut p = Pair::new(
        LinkLayer::Ethernet,
        QpServiceType::Uc,
        Conn::default(),
        Conn::default(),
    );
    let amr = p.a.mr(8192);
    let bmr = p.b.mr(8192);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 8192)]);
    p.a.write(&amr, 0, &[1u8; 3000]);
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 3000));
    // Lose the middle packet of three.
    let mut frames = p.a.h.hca.take_tx_frames();
    assert_eq!(frames.len(), 3);
    frames.remove(1);
    p.b.h.hca.receive_frames(&frames);
    assert!(p.b.poll_all(&mut p.bcq).is_empty());
    assert_eq!(p.b.h.hca.datapath_counters().rx_uc_dropped, 1);
    // A WRITE goes through, and the next SEND uses the same receive WQE.
    let mut w = wr(WqeOpcode::RdmaWrite, &amr, 0, 8);
    w.raddr = Some((bmr.iova + 4096, bmr.key));
    p.a.post_send(&mut p.aqp, &w);
    p.run();
    assert_eq!(p.b.read(&bmr, 4096, 8), vec![1u8; 8]);
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 100));
    p.run();
    let wc = p.b.poll_all(&mut p.bcq);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].byte_cnt(), 100);
}

#[test]
fn completion_events_for_armed_cqs() {
    let mut p = Pair::rc(LinkLayer::Ethernet);
    let amr = p.a.mr(4096);
    let bmr = p.b.mr(4096);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 64)]);
    p.b.arm(&p.bcq, 0, false);
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 8));
    p.run();
    let eqes = p.b.events(EventType::Comp);
    assert_eq!(eqes.len(), 1);
    let comp: &uhca_fwif::eqe::EqeComp = eqes[0].data_as();
    assert_eq!(comp.cqn.get() & 0xff_ffff, p.bcq.cqn);
    // Not armed again: the next completion raises no event.
    p.b.poll_all(&mut p.bcq);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 64)]);
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 8));
    p.run();
    assert!(p.b.events(EventType::Comp).is_empty());
    // Solicited only: an unsolicited SEND raises nothing, a solicited one does.
    p.b.poll_all(&mut p.bcq);
    p.b.arm(&p.bcq, 1, true);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 64)]);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 64)]);
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 8));
    p.run();
    assert!(p.b.events(EventType::Comp).is_empty());
    let mut w = wr(WqeOpcode::Send, &amr, 0, 8);
    w.solicited = true;
    p.a.post_send(&mut p.aqp, &w);
    p.run();
    assert_eq!(p.b.events(EventType::Comp).len(), 1);
}

/// An RMP (the shared receive queue of ISSI 1): receives follow its linked list of WQEs,
/// and its limit raises one SRQ_RQ_LIMIT event when fewer WQEs than the limit remain.
#[test]
fn sends_consume_srq_wqes_through_the_free_list() {
    use common::pas_bytes;
    use uhca_fwif::cmd::*;
    use uhca_fwif::wqe::WqeDataSeg;
    use zerocopy::IntoBytes;
    let fabric = uhca_mock::Fabric::ethernet();
    let mut a = common::verbs::Node::new(&fabric, LinkLayer::Ethernet, 1);
    let mut b = common::verbs::Node::new(&fabric, LinkLayer::Ethernet, 2);
    let mut acq = a.cq(6);
    let mut bcq = b.cq(6);
    // An RMP of 8 WQEs of 64 bytes (next segment + 3 data segments), limit 2.
    let srq_buf = b.mr(4096);
    let dbr = b.mr(64);
    let mut c = CreateRmpIn::new_cmd();
    c.ctx_mut().set_state(RmpcState::Rdy.raw());
    c.ctx_mut()
        .wq_mut()
        .set_log_wq_sz(3)
        .set_log_wq_stride(6)
        .set_pd(b.pd)
        .set_lwm(2)
        .set_dbr_addr(dbr.iova);
    let srqn = b.h.ok(&c, &pas_bytes(&[srq_buf.iova])).rmpn();
    // The free list: WQE i links to i + 1; post to 3 then 5 by relinking 3 -> 5.
    let mut aqp = a.qp(QpServiceType::Rc, &acq, &acq);
    let (mut cq_in, pages) = {
        let (c, p) = b.h.create_qp_in(QpServiceType::Rc, b.pd, bcq.cqn, b.uar);
        (c, p)
    };
    cq_in.qpc_mut().set_rq_type(1).set_srqn_rmpn_xrqn(srqn);
    let bqpn = b.h.ok(&cq_in, &pas_bytes(&pages)).qpn();
    let bqp = common::verbs::Qp {
        qpn: bqpn,
        st: QpServiceType::Rc,
        buf: 0,
        dbr: 0,
        log_sq: 4,
        log_rq: 4,
        log_stride: 2,
        sq_pi: 0,
        rq_pi: 0,
    };
    a.connect(&aqp, &b, bqpn, Conn::default());
    b.connect(&bqp, &a, aqp.qpn, Conn::default());
    let data = b.mr(4096);
    let wqe = |next: u16, off: u64| {
        let mut w = vec![0u8; 64];
        w[2..4].copy_from_slice(&next.to_be_bytes());
        let d = WqeDataSeg {
            byte_count: 64.into(),
            lkey: data.key.into(),
            addr: (data.iova + off).into(),
        };
        w[16..32].copy_from_slice(d.as_bytes());
        w[32..36].copy_from_slice(&0u32.to_be_bytes());
        w[36..40].copy_from_slice(&uhca_fwif::wqe::INVALID_LKEY.to_be_bytes());
        w
    };
    b.write(&srq_buf, 0, &wqe(3, 0));
    b.write(&srq_buf, 3 * 64, &wqe(5, 64));
    b.write(&srq_buf, 5 * 64, &wqe(6, 128));
    b.write(&dbr, 0, &3u32.to_be_bytes());
    let amr = a.mr(4096);
    for i in 0..3u8 {
        a.write(&amr, i as usize * 8, &[i + 1; 8]);
        a.post_send(&mut aqp, &wr(WqeOpcode::Send, &amr, i as usize * 8, 8));
    }
    assert!(fabric.run_until_idle());
    let wc = b.poll_all(&mut bcq);
    let counters: Vec<u16> = wc.iter().map(|w| w.wqe_counter()).collect();
    assert_eq!(counters, vec![0, 3, 5], "SRQ WQE indices in list order");
    assert_eq!(b.read(&data, 64, 8), vec![2u8; 8]);
    assert_eq!(b.read(&data, 128, 8), vec![3u8; 8]);
    assert_eq!(a.poll_all(&mut acq).len(), 3);
    // Three posted, three taken: the count fell below 2 once, one event, then disarmed.
    let lim = b.events(EventType::SrqRqLimit);
    assert_eq!(lim.len(), 1, "one limit event");
    let d: &uhca_fwif::eqe::EqeQpSrq = lim[0].data_as();
    assert_eq!((d.r#type, d.qp_srq_n.get() & 0x00ff_ffff), (1, srqn));
    let mut q = QueryRmpIn::new_cmd();
    q.set_rmpn(srqn);
    let o = b.h.ok(&q, &[]);
    assert_eq!(o.rmp_context().wq().lwm(), 0, "the limit is disarmed");
    assert_eq!(o.rmp_context().wq().hw_counter(), 3, "WQEs taken");
    // An SRQ-attached QP that enters the error state reports its last WQE.
    b.modify_to_error(&bqp);
    assert!(b.poll_all(&mut bcq).is_empty(), "an SRQ is not flushed");
    assert!(fabric.run_until_idle());
    let ev = b.events(EventType::SrqLastWqe);
    assert_eq!(ev.len(), 1);
}

#[test]
fn rc_over_ipv6_gids() {
    let fabric = uhca_mock::Fabric::ethernet();
    let mut a = common::verbs::Node::new(&fabric, LinkLayer::Ethernet, 1);
    let mut b = common::verbs::Node::new(&fabric, LinkLayer::Ethernet, 2);
    a.add_ipv6_gid(1);
    b.add_ipv6_gid(2);
    let mut acq = a.cq(6);
    let mut bcq = b.cq(6);
    let mut aqp = a.qp(QpServiceType::Rc, &acq, &acq);
    let mut bqp = b.qp(QpServiceType::Rc, &bcq, &bcq);
    let c = Conn {
        gid_index: 1,
        ..Conn::default()
    };
    a.connect(&aqp, &b, bqp.qpn, c);
    b.connect(&bqp, &a, aqp.qpn, c);
    let amr = a.mr(4096);
    let bmr = b.mr(4096);
    b.post_recv(&mut bqp, &[(bmr.key, bmr.iova, 64)]);
    a.write(&amr, 0, b"v6");
    a.post_send(&mut aqp, &wr(WqeOpcode::Send, &amr, 0, 2));
    let frames = a.h.hca.take_tx_frames();
    let r = uhca_mock::wire::RoceV2Repr::parse(&frames[0]).unwrap();
    match r.ip {
        uhca_mock::wire::IpRepr::Ipv6(v6) => {
            assert_eq!(v6.src, a.ip6);
            assert_eq!(v6.dst, b.ip6);
        }
        other => panic!("expected IPv6, got {other:?}"),
    }
    b.h.hca.receive_frames(&frames);
    assert!(fabric.run_until_idle());
    assert_eq!(b.poll_all(&mut bcq)[0].byte_cnt(), 2);
    assert_eq!(a.poll_all(&mut acq).len(), 1);
}

#[test]
fn force_loopback_between_two_qps_of_one_hca() {
    use uhca_fwif::cmd::*;
    let fabric = uhca_mock::Fabric::ethernet();
    let mut a = common::verbs::Node::new(&fabric, LinkLayer::Ethernet, 1);
    let mut cq = a.cq(6);
    let mut q1 = a.qp(QpServiceType::Rc, &cq, &cq);
    let mut q2 = a.qp(QpServiceType::Rc, &cq, &cq);
    for (me, peer) in [(q1.qpn, q2.qpn), (q2.qpn, q1.qpn)] {
        let mut m = Rst2initQpIn::new_cmd();
        m.qpc_mut().set_pm_state(common::PM_STATE_MIGRATED);
        m.set_qpn(me);
        m.qpc_mut()
            .set_rwe(true)
            .primary_address_path_mut()
            .set_vhca_port_num(1);
        a.h.ok(&m, &[]);
        let mut m = Init2rtrQpIn::new_cmd();
        m.qpc_mut().set_pm_state(common::PM_STATE_MIGRATED);
        m.set_qpn(me);
        m.qpc_mut()
            .set_mtu(IbMtu::Mtu1024.raw())
            .set_log_msg_max(20)
            .set_remote_qpn(peer)
            .set_next_rcv_psn(1);
        m.qpc_mut()
            .primary_address_path_mut()
            .set_vhca_port_num(1)
            .set_fl(true);
        a.h.ok(&m, &[]);
        let mut m = Rtr2rtsQpIn::new_cmd();
        m.qpc_mut().set_pm_state(common::PM_STATE_MIGRATED);
        m.set_qpn(me);
        m.qpc_mut().set_next_send_psn(1).set_retry_count(3);
        m.qpc_mut().primary_address_path_mut().set_ack_timeout(10);
        a.h.ok(&m, &[]);
    }
    let mr = a.mr(4096);
    a.write(&mr, 0, b"loop");
    a.post_recv(&mut q2, &[(mr.key, mr.iova + 100, 64)]);
    a.post_send(&mut q1, &wr(WqeOpcode::Send, &mr, 0, 4));
    assert!(fabric.run_until_idle());
    let wc = a.poll_all(&mut cq);
    assert_eq!(wc.len(), 2);
    assert_eq!(a.read(&mr, 100, 4), b"loop");
}

#[test]
fn a_fenced_wqe_waits_for_the_read_before_it() {
    let mut p = Pair::rc(LinkLayer::Ethernet);
    let amr = p.a.mr(4096);
    let bmr = p.b.mr(4096);
    p.b.write(&bmr, 0, b"before");
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova + 100, 64)]);
    let mut r = wr(WqeOpcode::RdmaRead, &amr, 0, 6);
    r.raddr = Some((bmr.iova, bmr.key));
    p.a.post_send(&mut p.aqp, &r);
    // The fenced SEND carries what the READ brings back.
    let mut s = wr(WqeOpcode::Send, &amr, 0, 6);
    s.fence = true;
    p.a.post_send(&mut p.aqp, &s);
    let first = p.a.h.hca.take_tx_frames();
    assert_eq!(first.len(), 1, "only the READ request leaves");
    p.b.h.hca.receive_frames(&first);
    let resp = p.b.h.hca.take_tx_frames();
    p.a.h.hca.receive_frames(&resp);
    let send = p.a.h.hca.take_tx_frames();
    assert_eq!(send.len(), 1, "the SEND leaves once the READ completed");
    p.b.h.hca.receive_frames(&send);
    p.run();
    assert_eq!(p.b.read(&bmr, 100, 6), b"before");
    assert_eq!(p.a.poll_all(&mut p.acq).len(), 2);
}

#[test]
fn rc_over_infiniband_with_a_grh() {
    let c = Conn {
        grh: true,
        ..Conn::default()
    };
    let mut p = Pair::new(LinkLayer::InfiniBand, QpServiceType::Rc, c, c);
    let amr = p.a.mr(4096);
    let bmr = p.b.mr(4096);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 64)]);
    p.a.write(&amr, 0, b"global");
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 6));
    let f = p.a.h.hca.take_tx_frames();
    let pkt = uhca_mock::wire::IbPacketRepr::parse(&f[0]).unwrap();
    let grh = pkt.grh.expect("a GRH");
    assert_eq!(grh.hop_limit, 2);
    assert_eq!(
        &grh.dgid[8..],
        &p.b.h.hca.config().node_guid().to_be_bytes()
    );
    assert_eq!(pkt.lrh.dlid, p.b.h.hca.lid());
    p.b.h.hca.receive_frames(&f);
    p.run();
    assert_eq!(p.b.read(&bmr, 0, 6), b"global");
    assert_eq!(p.a.poll_all(&mut p.acq).len(), 1);
}

#[test]
fn a_wrong_pkey_is_dropped_and_counted() {
    let mut p = Pair::rc(LinkLayer::Ethernet);
    let amr = p.a.mr(64);
    let bmr = p.b.mr(64);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 64)]);
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 8));
    let f = p.a.h.hca.take_tx_frames();
    let mut r = uhca_mock::wire::RoceV2Repr::parse(&f[0]).unwrap();
    r.transport.bth.pkey = 0x8001;
    let mut g = vec![0u8; r.buffer_len()];
    r.emit(&mut g).unwrap();
    p.b.h.hca.receive_frames(&[g]);
    assert_eq!(p.b.h.hca.datapath_counters().rx_pkey_violations, 1);
    assert!(p.b.poll_all(&mut p.bcq).is_empty());
    // The retransmission (with the right P_Key) gets through.
    p.run();
    assert_eq!(p.b.poll_all(&mut p.bcq).len(), 1);
}

#[test]
fn the_first_packet_in_rtr_raises_communication_established() {
    let rtr = Conn {
        stop_at_rtr: true,
        ..Conn::default()
    };
    let mut p = Pair::new(LinkLayer::Ethernet, QpServiceType::Rc, Conn::default(), rtr);
    assert_eq!(p.b.qp_state(&p.bqp), QpState::Rtr);
    let amr = p.a.mr(64);
    let bmr = p.b.mr(64);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 64)]);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 64)]);
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 8));
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 8));
    p.run();
    assert_eq!(
        p.b.poll_all(&mut p.bcq).len(),
        2,
        "an RTR QP receives and ACKs"
    );
    assert_eq!(p.a.poll_all(&mut p.acq).len(), 2);
    let ev = p.b.events(EventType::CommEst);
    assert_eq!(ev.len(), 1, "once");
    let d: &uhca_fwif::eqe::EqeQpSrq = ev[0].data_as();
    assert_eq!(d.qp_srq_n.get() & 0xff_ffff, p.bqp.qpn);
}

#[test]
fn zero_length_messages() {
    let mut p = Pair::rc(LinkLayer::Ethernet);
    let amr = p.a.mr(64);
    let bmr = p.b.mr(64);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 64)]);
    // A SEND without any data segment, a zero-length WRITE and READ.
    let send = Wr {
        opcode: Some(WqeOpcode::Send),
        signaled: true,
        ..Wr::default()
    };
    p.a.post_send(&mut p.aqp, &send);
    let mut w = wr(WqeOpcode::RdmaWrite, &amr, 0, 0);
    w.sges.clear();
    w.raddr = Some((bmr.iova, bmr.key));
    p.a.post_send(&mut p.aqp, &w);
    let mut r = w.clone();
    r.opcode = Some(WqeOpcode::RdmaRead);
    p.a.post_send(&mut p.aqp, &r);
    p.run();
    let wc = p.a.poll_all(&mut p.acq);
    assert_eq!(wc.len(), 3);
    assert!(
        wc.iter()
            .all(|w| w.opcode == CqeOpcode::Req && w.byte_cnt() == 0)
    );
    let wc = p.b.poll_all(&mut p.bcq);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].byte_cnt(), 0);
}

#[test]
fn held_send_doorbells_leave_the_wqes_unfetched() {
    let mut p = Pair::rc(LinkLayer::Ethernet);
    let amr = p.a.mr(4096);
    let bmr = p.b.mr(4096);
    p.a.write(&amr, 0, b"held");
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova, 64)]);
    p.b.post_recv(&mut p.bqp, &[(bmr.key, bmr.iova + 64, 64)]);
    p.a.h.hca.hold_send_doorbells(true);
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 4));
    p.run();
    assert!(p.a.h.hca.doorbells().iter().any(|d| d.is_send_doorbell()));
    assert!(p.a.poll_all(&mut p.acq).is_empty(), "no WQE was fetched");
    assert!(p.b.poll_all(&mut p.bcq).is_empty(), "nothing was sent");
    // Released, the next doorbell makes the engine fetch everything up to its counter.
    p.a.h.hca.hold_send_doorbells(false);
    p.a.post_send(&mut p.aqp, &wr(WqeOpcode::Send, &amr, 0, 4));
    p.run();
    assert_eq!(p.a.poll_all(&mut p.acq).len(), 2);
    assert_eq!(p.b.poll_all(&mut p.bcq).len(), 2);
}

/// The datagram segment's two forms: with `dqp_dct` bit 31 clear the engine takes the
/// compact 16-byte address vector and reads the next segment right after it, so a 48-byte
/// vector with the bit clear has its GRH fields taken for data segments, as on a ConnectX.
#[test]
fn ud_compact_and_extended_address_vectors_over_infiniband() {
    let link = LinkLayer::InfiniBand;
    let fabric = uhca_mock::Fabric::new(link);
    let mut a = common::verbs::Node::new(&fabric, link, 1);
    let mut b = common::verbs::Node::new(&fabric, link, 2);
    let mut acq = a.cq(6);
    let mut bcq = b.cq(6);
    let mut aqp = a.qp(QpServiceType::Ud, &acq, &acq);
    let mut bqp = b.qp(QpServiceType::Ud, &bcq, &bcq);
    a.ud_ready(&aqp, 0x1111);
    b.ud_ready(&bqp, 0x2222);
    let amr = a.mr(4096);
    let bmr = b.mr(4096);
    a.write(&amr, 0, b"compact!");
    for i in 0..2 {
        b.post_recv(&mut bqp, &[(bmr.key, bmr.iova + i * 1024, 1024)]);
    }
    // No GRH, bit 31 clear: the compact form.
    let mut av = a.av_to(&b, bqp.qpn, 0x2222);
    av.grh_gid_fl = 0.into();
    av.rgid = [0; 16];
    av.hop_limit = 0;
    av.dqp_dct = bqp.qpn.into();
    let mut w = wr(WqeOpcode::Send, &amr, 0, 8);
    w.av = Some(av);
    w.compact_av = true;
    a.post_send(&mut aqp, &w);
    assert!(fabric.run_until_idle());
    let sent = a.poll_all(&mut acq);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].opcode, CqeOpcode::Req);
    let wc = b.poll_all(&mut bcq);
    assert_eq!(wc.len(), 1, "the compact AV delivers");
    assert_eq!(wc[0].byte_cnt(), 40 + 8);
    assert_eq!(
        wc[0].cqe.flags_rqpn.get() & uhca_fwif::cqe::CQE_FLAGS_GRH,
        0
    );
    assert_eq!(b.read(&bmr, 40, 8), b"compact!");

    // The same 48 bytes with bit 31 clear: bytes 16..48 of the vector are read as a data
    // segment (byte count 0 = 2 GiB, lkey 0).
    w.compact_av = false;
    a.post_send(&mut aqp, &w);
    assert!(fabric.run_until_idle());
    let sent = a.poll_all(&mut acq);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].opcode, CqeOpcode::ReqErr, "{:?}", sent[0]);
    // A 2 GiB datagram is longer than the path MTU.
    assert_eq!(sent[0].syndrome(), CqeSyndrome::LocalLengthErr);
    assert!(b.poll_all(&mut bcq).is_empty(), "nothing arrives");
}

/// A pair of RC QPs on two nodes whose 8-byte atomics are in the host's byte order
/// (`host`) or big-endian (the power-on mode).
fn atomic_pair(host: bool) -> Pair {
    let link = LinkLayer::InfiniBand;
    let fabric = uhca_mock::Fabric::new(link);
    let node = |n| {
        if host {
            common::verbs::Node::with_host_order_atomics(&fabric, link, n)
        } else {
            common::verbs::Node::new(&fabric, link, n)
        }
    };
    let mut a = node(1);
    let mut b = node(2);
    let acq = a.cq(6);
    let bcq = b.cq(6);
    let aqp = a.qp(QpServiceType::Rc, &acq, &acq);
    let bqp = b.qp(QpServiceType::Rc, &bcq, &bcq);
    a.connect(&aqp, &b, bqp.qpn, Conn::default());
    b.connect(&bqp, &a, aqp.qpn, Conn::default());
    Pair {
        fabric,
        a,
        b,
        acq,
        bcq,
        aqp,
        bqp,
    }
}

/// Issue 31 F2: the 8-byte atomic endianness mode the driver set decides the byte order of
/// the responder's target word and of the original value written back to the requester:
/// big-endian in mode 0 (the power-on value), the host's (little-endian: HOST_ENDIANNESS
/// was written with `he` 0) in mode 1, as Linux's `handle_hca_cap_atomic` sets it. The same
/// target bytes ff ff ff ff 00 00 00 00, fetch-and-add 1, then compare-and-swap.
#[test]
fn atomics_work_on_the_target_in_the_byte_order_of_the_endianness_mode() {
    for host in [false, true] {
        let mut p = atomic_pair(host);
        assert_eq!(p.b.h.hca.atomic_req_endianness_mode(), host as u8);
        let amr = p.a.mr(4096);
        let bmr = p.b.mr(4096);
        p.b.write(&bmr, 64, &[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        let mut w = wr(WqeOpcode::AtomicFa, &amr, 0, 8);
        w.raddr = Some((bmr.iova + 64, bmr.key));
        w.atomic = Some((1, 0));
        p.a.post_send(&mut p.aqp, &w);
        p.run();
        let wc = p.a.poll_all(&mut p.acq);
        assert_eq!(wc.len(), 1);
        assert_eq!(wc[0].opcode, CqeOpcode::Req, "{wc:?}");
        // The fetched value: the target's bytes as they were, in either mode (read and
        // written back in the same order).
        assert_eq!(p.a.read(&amr, 0, 8), [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        let after = p.b.read(&bmr, 64, 8);
        if host {
            // 0x00000000_ffffffff + 1 = 0x00000001_00000000, little-endian.
            assert_eq!(after, [0, 0, 0, 0, 1, 0, 0, 0], "host order");
        } else {
            // 0xffffffff_00000000 + 1, big-endian.
            assert_eq!(after, [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1], "big-endian");
        }
        // Compare-and-swap whose compare is the word in the mode's order: it swaps.
        let word = if host {
            u64::from_le_bytes(after.clone().try_into().unwrap())
        } else {
            u64::from_be_bytes(after.clone().try_into().unwrap())
        };
        let mut w = wr(WqeOpcode::AtomicCs, &amr, 8, 8);
        w.raddr = Some((bmr.iova + 64, bmr.key));
        w.atomic = Some((0x0102_0304_0506_0708, word));
        p.a.post_send(&mut p.aqp, &w);
        p.run();
        assert_eq!(p.a.poll_all(&mut p.acq).len(), 1);
        assert_eq!(p.a.read(&amr, 8, 8), after, "the original value");
        let swapped = 0x0102_0304_0506_0708u64;
        let want = if host {
            swapped.to_le_bytes()
        } else {
            swapped.to_be_bytes()
        };
        assert_eq!(p.b.read(&bmr, 64, 8), want, "swapped (host {host})");
    }
}
