//! What Linux's `mlx5_ib` needs to register an InfiniBand device (found by the VM rig's
//! `linuxmlx5` test, mock/MODEL.md "What Linux's mlx5 driver exercised"): the special QPs
//! (the port's QP0 and QP1, the REG_UMR QP), DEALLOC_Q_COUNTER, the subnet management
//! agent's GUIDInfo, P_KeyTable and full PortInfo, MADs of classes without an agent, NOP
//! work requests on datagram QPs, and the UMR capability bits; and what rdma-core's
//! libmlx5 needed for its QPs (the linuxuhca test): QUERY_QP's short output, `page_offset`.

mod common;

use common::verbs::{Cq, Mr, Node, Qp, Wr};
use common::{Harness, PM_STATE_MIGRATED, Setup, pas_bytes, setup};
use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::*;
use uhca_fwif::consts::*;
use uhca_fwif::wqe::Av;
use uhca_mock::firmware::{
    MAD_STATUS_BAD_ATTRIBUTE_VALUE, MAD_STATUS_BAD_CLASS, PORT_CAPABILITY_MASK, QP1_Q_KEY, optpar,
    syndrome,
};
use uhca_mock::{Fabric, LinkLayer, MockConfig};
use zerocopy::{FromBytes, IntoBytes};

/// Two InfiniBand nodes on one fabric, each with a CQ of 64 entries.
fn two_nodes() -> (Fabric, Node, Node, Cq, Cq) {
    let fabric = Fabric::new(LinkLayer::InfiniBand);
    let mut a = Node::new(&fabric, LinkLayer::InfiniBand, 1);
    let mut b = Node::new(&fabric, LinkLayer::InfiniBand, 2);
    let acq = a.cq(6);
    let bcq = b.cq(6);
    (fabric, a, b, acq, bcq)
}

/// A NOP work request (its control segment alone), completion requested if `signaled`.
fn nop(signaled: bool) -> Wr {
    Wr {
        opcode: Some(WqeOpcode::Nop),
        signaled,
        ..Wr::default()
    }
}

fn rst2init(qpn: u32, qkey: u32) -> Rst2initQpIn {
    let mut m = Rst2initQpIn::new_cmd();
    m.set_qpn(qpn);
    m.qpc_mut()
        .set_pm_state(PM_STATE_MIGRATED)
        .set_q_key(qkey)
        .primary_address_path_mut()
        .set_vhca_port_num(1);
    m
}

fn init2rtr(qpn: u32, mtu: IbMtu, log_msg_max: u8) -> Init2rtrQpIn {
    let mut m = Init2rtrQpIn::new_cmd();
    m.set_qpn(qpn);
    m.qpc_mut()
        .set_pm_state(PM_STATE_MIGRATED)
        .set_mtu(mtu.raw())
        .set_log_msg_max(log_msg_max);
    m.qpc_mut().primary_address_path_mut().set_vhca_port_num(1);
    m
}

fn rtr2rts(qpn: u32) -> Rtr2rtsQpIn {
    let mut m = Rtr2rtsQpIn::new_cmd();
    m.set_qpn(qpn);
    m.qpc_mut().set_pm_state(PM_STATE_MIGRATED);
    m
}

/// Linux's REG_UMR QP: a send queue only (zero-length receive queue, `rq_type` 3), no
/// protection domain (its `pd` is 0: Linux sets `latency_sensitive` instead).
fn umr_qp_in(s: &mut Setup) -> (CreateQpIn, Vec<u64>) {
    let (mut c, pages) = s.create_qp_in(QpServiceType::RegUmr, 0);
    c.qpc_mut()
        .set_rq_type(3)
        .set_log_rq_size(0)
        .set_log_rq_stride(0)
        .set_latency_sensitive(true);
    (c, pages)
}

#[test]
fn the_umr_qp_has_no_pd_and_no_receive_queue_and_reaches_rts() {
    let mut s = setup(MockConfig::infiniband());
    let (c, pages) = umr_qp_in(&mut s);
    let qpn = s.h.ok(&c, &pas_bytes(&pages)).qpn();
    s.h.ok(&rst2init(qpn, 0), &[]);
    s.h.ok(&init2rtr(qpn, IbMtu::Mtu4096, 12), &[]);
    s.h.ok(&rtr2rts(qpn), &[]);
    assert_eq!(s.h.hca.qp_state(qpn), Some(QpState::Rts));
    // Any other QP still needs a protection domain.
    let (mut rc, pages) = s.create_qp_in(QpServiceType::Rc, 0);
    rc.qpc_mut().set_pd(0);
    assert_eq!(
        s.create_qp_err(&rc, &pages),
        (CmdStatus::BadParamErr, syndrome::BAD_PD)
    );
    // A REG_UMR QP with a receive queue is refused.
    let (mut c, pages) = umr_qp_in(&mut s);
    c.qpc_mut()
        .set_rq_type(0)
        .set_log_rq_size(4)
        .set_log_rq_stride(2);
    assert_eq!(
        s.create_qp_err(&c, &pages),
        (CmdStatus::BadParamErr, syndrome::UMR_QP_WITH_RQ)
    );
}

#[test]
fn qp0_and_qp1_exist_once_per_port_and_qp0_only_on_infiniband() {
    let mut s = setup(MockConfig::infiniband());
    let qp0 = s.create_qp(QpServiceType::Qp0);
    let qp1 = s.create_qp(QpServiceType::Qp1);
    assert_ne!(qp0, qp1);
    assert!(qp0 > 1 && qp1 > 1, "firmware QPNs, not the wire's 0 and 1");
    for st in [QpServiceType::Qp0, QpServiceType::Qp1] {
        let (c, pages) = s.create_qp_in(st, s.pd);
        assert_eq!(
            s.create_qp_err(&c, &pages),
            (CmdStatus::ResBusy, syndrome::SPECIAL_QP_TAKEN),
            "a second {st:?}"
        );
    }
    // Once destroyed, the port's QP1 can be made again.
    let mut d = DestroyQpIn::new_cmd();
    d.set_qpn(qp1);
    s.h.ok(&d, &[]);
    s.create_qp(QpServiceType::Qp1);

    // An Ethernet port has QP1 (the general services interface) and no QP0.
    let mut e = setup(MockConfig::ethernet());
    e.create_qp(QpServiceType::Qp1);
    let (c, pages) = e.create_qp_in(QpServiceType::Qp0, e.pd);
    assert_eq!(
        e.create_qp_err(&c, &pages),
        (CmdStatus::BadParamErr, syndrome::SPECIAL_QP_TAKEN)
    );
}

#[test]
fn qp1_takes_only_the_well_known_q_key_and_both_reach_rts_as_datagram_qps() {
    let mut s = setup(MockConfig::infiniband());
    let qp0 = s.create_qp(QpServiceType::Qp0);
    let qp1 = s.create_qp(QpServiceType::Qp1);
    assert_eq!(
        s.h.err(&rst2init(qp1, 0x1234), &[]),
        (CmdStatus::BadParamErr, syndrome::BAD_QP1_Q_KEY)
    );
    assert_eq!(s.h.hca.qp_state(qp1), Some(QpState::Rst));
    // Linux's transitions of its QP0 and QP1: Q_Key (0 for QP0), then MTU 256 and
    // 256-byte messages (a MAD), no remote address (datagram QPs have none).
    s.h.ok(&rst2init(qp0, 0), &[]);
    s.h.ok(&rst2init(qp1, QP1_Q_KEY), &[]);
    for qpn in [qp0, qp1] {
        s.h.ok(&init2rtr(qpn, IbMtu::Mtu256, 8), &[]);
        s.h.ok(&rtr2rts(qpn), &[]);
        assert_eq!(s.h.hca.qp_state(qpn), Some(QpState::Rts));
    }
    // A later Q_Key change on QP1 is held to the same rule.
    let mut m = Rts2rtsQpIn::new_cmd();
    m.set_qpn(qp1).set_opt_param_mask(optpar::Q_KEY);
    m.qpc_mut().set_q_key(0x1111);
    assert_eq!(
        s.h.err(&m, &[]),
        (CmdStatus::BadParamErr, syndrome::BAD_QP1_Q_KEY)
    );
}

#[test]
fn dealloc_q_counter_frees_the_set() {
    let mut h = Harness::ready(MockConfig::infiniband());
    let a = h.ok(&AllocQCounterIn::new_cmd(), &[]).counter_set_id();
    let b = h.ok(&AllocQCounterIn::new_cmd(), &[]).counter_set_id();
    assert_ne!(a, b);
    let mut d = DeallocQCounterIn::new_cmd();
    d.set_counter_set_id(a);
    h.ok(&d, &[]);
    assert_eq!(
        h.err(&d, &[]),
        (CmdStatus::BadResErr, syndrome::NO_SUCH_OBJECT),
        "freed twice"
    );
    let mut q = QueryQCounterIn::new_cmd();
    q.set_counter_set_id(a);
    assert_eq!(h.err(&q, &[]).1, syndrome::NO_SUCH_OBJECT);
    // The freed set is allocated again.
    assert_eq!(h.ok(&AllocQCounterIn::new_cmd(), &[]).counter_set_id(), a);
}

fn mad(class: u8, attr: u16, modifier: u32) -> MadIfcIn {
    let mut m = MadIfcIn::new_cmd();
    m.set_op_mod(3).set_port(1);
    let mad = m.mad_mut();
    mad[0] = 1; // base version
    mad[1] = class;
    mad[2] = 1; // class version
    mad[3] = 0x01; // Get
    mad[16..18].copy_from_slice(&attr.to_be_bytes());
    mad[20..24].copy_from_slice(&modifier.to_be_bytes());
    m
}

fn mad_status(o: &MadIfcOut) -> u16 {
    u16::from_be_bytes([o.response_mad_packet()[4], o.response_mad_packet()[5]])
}

#[test]
fn the_subnet_management_agent_answers_guid_info_pkey_table_and_a_whole_port_info() {
    let cfg = MockConfig::infiniband();
    let mut h = Harness::ready(cfg.clone());
    // GUIDInfo block 0: the port GUID at entry 0 (GID 0 = subnet prefix + port GUID).
    let o = h.ok(&mad(0x01, 0x0014, 0), &[]);
    assert_eq!(mad_status(&o), 0);
    let d = &o.response_mad_packet()[64..128];
    assert_eq!(&d[0..8], &cfg.node_guid().to_be_bytes());
    assert!(d[8..].iter().all(|&b| b == 0), "no other GUID assigned");
    let o = h.ok(&mad(0x01, 0x0014, 1), &[]);
    assert_eq!(
        mad_status(&o),
        MAD_STATUS_BAD_ATTRIBUTE_VALUE,
        "8 GUIDs only"
    );
    // P_KeyTable: the default P_Key at entry 0 of block 0; 128 entries in 4 blocks.
    let o = h.ok(&mad(0x01, 0x0016, 0), &[]);
    assert_eq!(mad_status(&o), 0);
    let d = &o.response_mad_packet()[64..128];
    assert_eq!(&d[0..2], &[0xff, 0xff]);
    assert!(d[2..].iter().all(|&b| b == 0));
    assert_eq!(mad_status(&h.ok(&mad(0x01, 0x0016, 3), &[])), 0);
    assert_eq!(
        mad_status(&h.ok(&mad(0x01, 0x0016, 4), &[])),
        MAD_STATUS_BAD_ATTRIBUTE_VALUE
    );
    // PortInfo: what Linux's `mlx5_query_mad_ifc_port` reads for `ibv_devinfo`.
    let o = h.ok(&mad(0x01, 0x0015, 1), &[]);
    let d = &o.response_mad_packet()[64..128];
    assert_eq!(
        u32::from_be_bytes([d[20], d[21], d[22], d[23]]),
        PORT_CAPABILITY_MASK
    );
    assert_eq!(d[31] & 0xf, 2, "link width active 4X");
    assert_eq!(d[36] >> 4, IbMtu::Mtu4096.raw(), "neighbour (active) MTU");
    assert_eq!(d[41] & 0xf, IbMtu::Mtu4096.raw(), "MTU capability");
    assert_eq!(d[37] >> 4, 1, "VL capability: VL0");
    assert_eq!(d[50], 8, "GUID capability: the GID table's 8 entries");
    assert_ne!(PORT_CAPABILITY_MASK & (1 << 14), 0, "extended speeds");
    assert_eq!(d[62] >> 4, 2, "extended speed active: EDR");
}

#[test]
fn a_mad_of_a_class_without_an_agent_gets_a_mad_status_not_a_command_error() {
    // Linux's ib_core asks the performance management agent for its ClassPortInfo while
    // registering the device; the model has no such agent.
    let mut h = Harness::ready(MockConfig::infiniband());
    let o = h.ok(&mad(0x04, 0x0001, 0), &[]);
    assert_eq!(mad_status(&o), MAD_STATUS_BAD_CLASS);
    assert_eq!(o.response_mad_packet()[3], 0x81, "GetResp");
    // A MAD that is not base version 1 is still a malformed command.
    let mut bad = mad(0x04, 0x0001, 0);
    bad.mad_mut()[0] = 2;
    assert_eq!(h.err(&bad, &[]).1, syndrome::BAD_MAD);
}

#[test]
fn the_capabilities_say_a_umr_changes_no_translation_size() {
    let mut h = Harness::ready(MockConfig::infiniband());
    let c = h.general_caps();
    assert!(c.umr_modify_entity_size_disabled());
    assert!(c.umr_modify_atomic_disabled());
    assert!(c.umr_indirect_mkey_disabled());
}

/// Linux's write-combining test posts NOP work requests of one 16-byte control segment on
/// a UD QP: a NOP has no datagram segment. The engine read one and failed the NOP with a
/// local QP operation error (`mlx5_ib_test_wc: Error -22`, and no InfiniBand device).
#[test]
fn a_nop_on_a_ud_qp_is_its_control_segment_alone() {
    let fabric = Fabric::new(LinkLayer::InfiniBand);
    let mut a = Node::new(&fabric, LinkLayer::InfiniBand, 1);
    let mut cq = a.cq(6);
    let mut qp = a.qp(QpServiceType::Ud, &cq, &cq);
    a.ud_ready(&qp, 0x11);
    for _ in 0..3 {
        a.post_send(&mut qp, &nop(false));
    }
    a.post_send(&mut qp, &nop(true));
    assert!(fabric.run_until_idle());
    let wcs = a.poll_all(&mut cq);
    assert_eq!(wcs.len(), 1, "one signalled NOP: {wcs:?}");
    assert_eq!(wcs[0].opcode, CqeOpcode::Req);
    assert_eq!(wcs[0].wqe_counter(), 3);
    assert_eq!(a.qp_state(&qp), QpState::Rts);
}

/// QP0 or QP1 of `n`, taken to RTS with `qkey` (as Linux's MAD layer does).
fn special_qp(n: &mut Node, st: QpServiceType, cq: &Cq, qkey: u32) -> Qp {
    let qp = n.qp(st, cq, cq);
    n.ud_ready(&qp, qkey);
    qp
}

/// A SEND on a UD QP of `len` bytes at `off` in `mr` to the address `av`.
fn datagram(av: Av, mr: &Mr, off: usize, len: u32) -> Wr {
    Wr {
        av: Some(av),
        ..common::verbs::wr(WqeOpcode::Send, mr, off, len)
    }
}

/// A MAD-sized datagram from `from`'s QP `qp` to destination QP `dqpn` of `to`.
fn send_mad(from: &Node, qp: &mut Qp, to: &Node, dqpn: u32, qkey: u32, mr: &Mr) {
    let mut av = from.av_to(to, dqpn, qkey);
    av.grh_gid_fl = 0.into(); // MADs between LIDs of one subnet carry no GRH
    from.post_send(qp, &datagram(av, mr, 0, 256));
}

#[test]
fn datagrams_to_qp_0_and_1_reach_the_ports_special_qps_and_leave_from_qp_0_and_1() {
    let (fabric, mut a, mut b, mut acq, mut bcq) = two_nodes();
    let mut a1 = special_qp(&mut a, QpServiceType::Qp1, &acq, QP1_Q_KEY);
    let mut b1 = special_qp(&mut b, QpServiceType::Qp1, &bcq, QP1_Q_KEY);
    let mut a0 = special_qp(&mut a, QpServiceType::Qp0, &acq, 0);
    let mut b0 = special_qp(&mut b, QpServiceType::Qp0, &bcq, 0);
    let amr = a.mr(4096);
    let bmr = b.mr(8192);
    a.write(&amr, 0, &[0x5a; 256]);
    // B's QP1 and QP0 each wait with one receive (40 bytes of GRH space, then the MAD).
    b.post_recv(&mut b1, &[(bmr.key, bmr.iova, 4096)]);
    b.post_recv(&mut b0, &[(bmr.key, bmr.iova + 4096, 4096)]);

    // QP1 to QP1 with the well-known Q_Key (bit 31 set: the QP's own).
    send_mad(&a, &mut a1, &b, 1, QP1_Q_KEY, &amr);
    assert!(fabric.run_until_idle());
    let sent = a.poll_all(&mut acq);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].opcode, CqeOpcode::Req);
    assert_eq!(
        sent[0].qpn(),
        a1.qpn,
        "the send completes on the firmware QPN"
    );
    let got = b.poll_all(&mut bcq);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].opcode, CqeOpcode::RespSend);
    assert_eq!(got[0].qpn(), b1.qpn, "received on the port's QP1");
    assert_eq!(got[0].byte_cnt(), 40 + 256);
    assert_eq!(
        got[0].cqe.flags_rqpn.get() & 0x00ff_ffff,
        1,
        "the source QP on the wire is QP 1, not {:#x}",
        a1.qpn
    );
    assert_eq!(got[0].cqe.slid.get(), a.h.hca.lid());
    assert_eq!(b.read(&bmr, 40, 256), vec![0x5a; 256]);

    // QP0 to QP0: subnet management packets carry a Q_Key nobody checks.
    send_mad(&a, &mut a0, &b, 0, 0x0bad_0bad, &amr);
    assert!(fabric.run_until_idle());
    assert_eq!(a.poll_all(&mut acq).len(), 1);
    let got = b.poll_all(&mut bcq);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].qpn(), b0.qpn, "received on the port's QP0");
    assert_eq!(got[0].cqe.flags_rqpn.get() & 0x00ff_ffff, 0);

    // To QP1 with another Q_Key: a Q_Key violation, nothing received.
    b.post_recv(&mut b1, &[(bmr.key, bmr.iova, 4096)]);
    let before = b.h.hca.datapath_counters().rx_qkey_violations;
    send_mad(&a, &mut a1, &b, 1, 0x1234, &amr);
    assert!(fabric.run_until_idle());
    assert_eq!(a.poll_all(&mut acq).len(), 1);
    assert!(b.poll_all(&mut bcq).is_empty());
    assert_eq!(b.h.hca.datapath_counters().rx_qkey_violations, before + 1);

    // A port without a QP1 drops what is addressed to QP 1.
    let mut d = DestroyQpIn::new_cmd();
    d.set_qpn(b1.qpn);
    b.h.ok(&d, &[]);
    let before = b.h.hca.datapath_counters().rx_discarded;
    send_mad(&a, &mut a1, &b, 1, QP1_Q_KEY, &amr);
    assert!(fabric.run_until_idle());
    assert!(b.poll_all(&mut bcq).is_empty());
    assert_eq!(b.h.hca.datapath_counters().rx_discarded, before + 1);
}

/// The model executes no UMR work request: one on the REG_UMR QP completes with a local QP
/// operation error (Linux posts none, the capability bits tell it not to need any).
#[test]
fn a_umr_work_request_fails_with_a_local_qp_operation_error() {
    let fabric = Fabric::new(LinkLayer::InfiniBand);
    let mut a = Node::new(&fabric, LinkLayer::InfiniBand, 1);
    let mut cq = a.cq(6);
    let mut qp = a.umr_qp(&cq);
    // A NOP goes through (the queue works) ...
    a.post_send(&mut qp, &nop(true));
    assert!(fabric.run_until_idle());
    let wcs = a.poll_all(&mut cq);
    assert_eq!(wcs.len(), 1);
    assert_eq!(wcs[0].opcode, CqeOpcode::Req);
    // ... a UMR (its control segment and 48 bytes of UMR control and mkey segments) does not.
    a.post_send(
        &mut qp,
        &Wr {
            opcode: Some(WqeOpcode::Umr),
            inline: Some(vec![0; 44]),
            signaled: true,
            ..Wr::default()
        },
    );
    assert!(fabric.run_until_idle());
    let wcs = a.poll_all(&mut cq);
    assert_eq!(wcs.len(), 1, "{wcs:?}");
    assert_eq!(wcs[0].opcode, CqeOpcode::ReqErr);
    assert_eq!(wcs[0].syndrome(), CqeSyndrome::LocalQpOpErr);
    assert_eq!(wcs[0].qpn(), qp.qpn);
}

/// Linux 6.1 reads QUERY_QP's output up to the QP context (272 bytes), not the page list
/// after it: the model refused that length (`QUERY_QP(0x50b) op_mod(0x0) failed, status bad
/// output length(0x51)` when rdma-core's pingpongs ask for the QP's capabilities).
#[test]
fn query_qp_answers_an_output_that_ends_after_the_context() {
    let mut s = setup(MockConfig::infiniband());
    let qpn = s.create_qp(QpServiceType::Rc);
    let mut q = QueryQpIn::new_cmd();
    q.set_qpn(qpn);
    let short = uhca_mock::firmware::QUERY_QP_OUT_FIXED;
    assert_eq!(short, 272);
    let r = s.h.exec_raw(q.as_bytes(), short);
    assert_eq!(r.status(), CmdStatus::Ok, "272-byte output");
    assert_eq!(r.out.len(), short);
    let mut full = r.out.clone();
    full.resize(QueryQpOut::SIZE, 0);
    let o = QueryQpOut::read_from_prefix(&full).unwrap().0;
    assert_eq!(
        o.qpc().st(),
        QpServiceType::Rc.raw(),
        "the context is there"
    );
    assert_eq!(o.qpc().uar_page(), s.uar);
    // One byte less cuts into the context: refused.
    let r = s.h.exec_raw(q.as_bytes(), short - 1);
    assert_eq!(r.status(), CmdStatus::BadOutpLenErr);
}

/// A user QP whose buffer starts inside a page (`qpc.page_offset`): Linux's CREATE_QP for
/// rdma-core's ibv_rc_pingpong failed with BAD_PAGE_SIZE (`Create QP type 2 failed`) when
/// its buffer did not start on a page; the model refused any offset.
#[test]
fn a_qp_whose_queue_starts_inside_its_first_page_sends_and_receives() {
    let (fabric, mut a, mut b, mut acq, mut bcq) = two_nodes();
    let mut aqp = a.qp_with_page_offset(QpServiceType::Ud, &acq, 40);
    let mut bqp = b.qp(QpServiceType::Ud, &bcq, &bcq);
    a.ud_ready(&aqp, 0x11);
    b.ud_ready(&bqp, 0x11);
    let amr = a.mr(4096);
    let bmr = b.mr(4096);
    b.write(&bmr, 2048, &[0xa5; 100]);
    a.post_recv(&mut aqp, &[(amr.key, amr.iova, 2048)]);
    let av = b.av_to(&a, aqp.qpn, 0x11);
    b.post_send(&mut bqp, &datagram(av, &bmr, 2048, 100));
    assert!(fabric.run_until_idle());
    let got = a.poll_all(&mut acq);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].opcode, CqeOpcode::RespSend);
    assert_eq!(got[0].byte_cnt(), 140);
    assert_eq!(a.read(&amr, 40, 100), vec![0xa5; 100]);
    assert_eq!(b.poll_all(&mut bcq).len(), 1);
    // And back: A's send queue, after its receive queue, from the same offset.
    a.write(&amr, 3000, &[0x3c; 64]);
    b.post_recv(&mut bqp, &[(bmr.key, bmr.iova, 2048)]);
    let av = a.av_to(&b, bqp.qpn, 0x11);
    a.post_send(&mut aqp, &datagram(av, &amr, 3000, 64));
    assert!(fabric.run_until_idle());
    let sent = a.poll_all(&mut acq);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].opcode, CqeOpcode::Req, "{sent:?}");
    let got = b.poll_all(&mut bcq);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(b.read(&bmr, 40, 64), vec![0x3c; 64]);
}

/// An RMP's WQEs at 64 bytes each, `next` linking WQE `i` to `i + 1`, one data segment of
/// 64 bytes at `addr` of key `lkey`.
fn linked_wqe(next: u16, lkey: u32, addr: u64) -> Vec<u8> {
    let mut w = vec![0u8; 64];
    w[2..4].copy_from_slice(&next.to_be_bytes());
    let d = uhca_fwif::wqe::WqeDataSeg {
        byte_count: 64.into(),
        lkey: lkey.into(),
        addr: addr.into(),
    };
    w[16..32].copy_from_slice(d.as_bytes());
    w[36..40].copy_from_slice(&uhca_fwif::wqe::INVALID_LKEY.to_be_bytes());
    w
}

/// Issue 31 F1: Linux (>= 5.11, `srq_cmd.c` `get_pas_size`, the offset from
/// `mlx5_umem_find_best_quantized_pgoff`) creates SRQs, XRC SRQs and RMPs, and CQs
/// (`mlx5_umem_find_best_cq_quantized_pgoff`), whose user buffer starts `page_offset` 64ths
/// of a page into the first page of the page list; the model refused any offset. An RMP
/// and a CQ that start inside their first page: the receive lands through the WQE at the
/// offset, its CQE is written at the offset, and the page lists count the offset.
#[test]
fn an_rmp_and_a_cq_that_start_inside_their_first_page_receive_and_complete() {
    let (fabric, mut a, mut b, mut acq, _) = two_nodes();
    // B's CQ: 64 CQEs (4096 bytes) from 40/64 of the first page: two pages.
    let mut bcq = b.cq_with_page_offset(6, 40);
    // An RMP of 8 WQEs of 64 bytes from 20/64 of its page (1280 bytes in).
    let (po, start) = (20u8, 20 * 4096 / 64);
    let rmp_pages = b.mr(8192);
    let dbr = b.mr(64);
    let mut c = CreateRmpIn::new_cmd();
    c.ctx_mut().set_state(RmpcState::Rdy.raw());
    c.ctx_mut()
        .wq_mut()
        .set_log_wq_sz(3)
        .set_log_wq_stride(6)
        .set_pd(b.pd)
        .set_page_offset(po)
        .set_dbr_addr(dbr.iova);
    let rmpn = b.h.ok(&c, &pas_bytes(&[rmp_pages.iova])).rmpn();
    let data = b.mr(4096);
    b.write(&rmp_pages, start, &linked_wqe(1, data.key, data.iova));
    b.write(
        &rmp_pages,
        start + 64,
        &linked_wqe(2, data.key, data.iova + 64),
    );
    b.write(&dbr, 0, &2u32.to_be_bytes());
    let mut aqp = a.qp(QpServiceType::Rc, &acq, &acq);
    let (mut q, pages) = b.h.create_qp_in(QpServiceType::Rc, b.pd, bcq.cqn, b.uar);
    q.qpc_mut().set_rq_type(1).set_srqn_rmpn_xrqn(rmpn);
    let bqpn = b.h.ok(&q, &pas_bytes(&pages)).qpn();
    let bqp = Qp {
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
    a.connect(&aqp, &b, bqpn, common::verbs::Conn::default());
    b.connect(&bqp, &a, aqp.qpn, common::verbs::Conn::default());
    let amr = a.mr(4096);
    a.write(&amr, 0, &[0x5a; 32]);
    a.write(&amr, 64, &[0x6b; 32]);
    a.post_send(&mut aqp, &common::verbs::wr(WqeOpcode::Send, &amr, 0, 32));
    a.post_send(&mut aqp, &common::verbs::wr(WqeOpcode::Send, &amr, 64, 32));
    assert!(fabric.run_until_idle());
    assert_eq!(a.poll_all(&mut acq).len(), 2);
    // The CQEs are read at the CQ's offset (`bcq.buf`).
    let got = b.poll_all(&mut bcq);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].opcode, CqeOpcode::RespSend);
    assert_eq!(
        got.iter().map(|w| w.wqe_counter()).collect::<Vec<_>>(),
        vec![0, 1]
    );
    assert_eq!(b.read(&data, 0, 32), vec![0x5a; 32]);
    assert_eq!(b.read(&data, 64, 32), vec![0x6b; 32]);
    // Nothing was written where a CQ without the offset would have put its CQEs.
    let mut first = [0u8; 64];
    assert!(b.h.hca.host_read(bcq.buf - 40 * 64, &mut first));
    assert_eq!(first, [0u8; 64]);
}

/// The page list must cover the offset as well as the queue: a CQ of 4096 bytes from an
/// offset needs two pages, an RMP whose WQEs reach past its page two; one page is an input
/// too short for the list (BAD_INPUT_LEN), as without the offset a page too few is.
#[test]
fn a_page_list_that_does_not_cover_the_offset_is_refused() {
    let (_fabric, mut a, _b, _, _) = two_nodes();
    let buf = a.mr(8192);
    let dbr = a.mr(64);
    let mut c = CreateCqIn::new_cmd();
    c.cq_context_mut()
        .set_log_cq_size(6)
        .set_page_offset(1)
        .set_uar_page(a.uar)
        .set_c_eqn_or_apu_element(a.eq.eqn as u32)
        .set_dbr_addr(dbr.iova);
    let r = a.h.exec(&c, &pas_bytes(&[buf.iova]));
    assert_eq!(r.status(), CmdStatus::BadInpLenErr);
    a.h.ok(&c, &pas_bytes(&[buf.iova, buf.iova + 4096]));
    let mut r = CreateRmpIn::new_cmd();
    r.ctx_mut().set_state(RmpcState::Rdy.raw());
    r.ctx_mut()
        .wq_mut()
        .set_log_wq_sz(6)
        .set_log_wq_stride(6)
        .set_pd(a.pd)
        .set_page_offset(1)
        .set_dbr_addr(dbr.iova);
    let o = a.h.exec(&r, &pas_bytes(&[buf.iova]));
    assert_eq!(o.status(), CmdStatus::BadInpLenErr);
    a.h.ok(&r, &pas_bytes(&[buf.iova, buf.iova + 4096]));
}

/// L13: with CQE version 1 every CQE names its QP by the QP's `user_index` in `srqn_uidx`,
/// the requester's (send) completions too. libmlx5 finds the QP of a send completion that
/// way and moves that QP's send queue on; with several QPs on one CQ (rdma-core's
/// `ibv_srq_pingpong`: four RC QPs, one CQ), a requester CQE without it was taken as the
/// first QP's, the others' send queues looked full and `ibv_post_send` failed.
#[test]
fn every_completion_names_its_qps_user_index_the_senders_too() {
    let (fabric, mut a, mut b, mut acq, mut bcq) = two_nodes();
    let (apd, bpd) = (a.pd, b.pd);
    let uidx = |i: u32| 0x00a0_0000 + i;
    let mut aqps = Vec::new();
    let mut bqps = Vec::new();
    for i in 0..3 {
        aqps.push(a.qp_with_user_index(QpServiceType::Rc, apd, &acq, &acq, uidx(i)));
        bqps.push(b.qp_with_user_index(QpServiceType::Rc, bpd, &bcq, &bcq, uidx(0x10 + i)));
    }
    let amr = a.mr(4096);
    let bmr = b.mr(4096);
    for (aq, bq) in aqps.iter().zip(&bqps) {
        a.connect(aq, &b, bq.qpn, common::verbs::Conn::default());
        b.connect(bq, &a, aq.qpn, common::verbs::Conn::default());
    }
    for (i, (aq, bq)) in aqps.iter_mut().zip(bqps.iter_mut()).enumerate() {
        b.post_recv(bq, &[(bmr.key, bmr.iova + i as u64 * 1024, 1024)]);
        a.write(&amr, i * 1024, &[i as u8 + 1; 100]);
        a.post_send(aq, &common::verbs::wr(WqeOpcode::Send, &amr, i * 1024, 100));
    }
    assert!(fabric.run_until_idle());
    let sent = a.poll_all(&mut acq);
    assert_eq!(sent.len(), 3, "{sent:?}");
    for c in &sent {
        assert_eq!(c.opcode, CqeOpcode::Req, "{c:?}");
        let i = aqps
            .iter()
            .position(|q| q.qpn == c.qpn())
            .expect("a QP of A");
        assert_eq!(
            c.cqe.srqn.get() & 0x00ff_ffff,
            uidx(i as u32),
            "the send completion of QP {:#x} names its user index",
            c.qpn()
        );
    }
    let got = b.poll_all(&mut bcq);
    assert_eq!(got.len(), 3, "{got:?}");
    for c in &got {
        assert_eq!(c.opcode, CqeOpcode::RespSend, "{c:?}");
        let i = bqps
            .iter()
            .position(|q| q.qpn == c.qpn())
            .expect("a QP of B");
        assert_eq!(c.cqe.srqn.get() & 0x00ff_ffff, uidx(0x10 + i as u32));
        assert_eq!(b.read(&bmr, i * 1024, 100), vec![i as u8 + 1; 100]);
    }
}

/// Issue 31 F3: a requester's error CQE (here a remote access error NAK) names the QP's
/// user index too, as its successful and flush CQEs do: libmlx5 with CQE version 1 finds
/// the QP of an error completion by it (`cq.c` `get_req_context`).
#[test]
fn a_requester_error_completion_names_its_qps_user_index() {
    let (fabric, mut a, mut b, mut acq, mut bcq) = two_nodes();
    let (apd, bpd) = (a.pd, b.pd);
    let mut aq = a.qp_with_user_index(QpServiceType::Rc, apd, &acq, &acq, 0x00a0_0007);
    let bq = b.qp_with_user_index(QpServiceType::Rc, bpd, &bcq, &bcq, 0x00b0_0003);
    a.connect(&aq, &b, bq.qpn, common::verbs::Conn::default());
    b.connect(&bq, &a, aq.qpn, common::verbs::Conn::default());
    let amr = a.mr(4096);
    let bmr = b.mr(4096);
    let mut w = common::verbs::wr(WqeOpcode::RdmaWrite, &amr, 0, 64);
    // A wrong rkey: the responder NAKs with a remote access error.
    w.raddr = Some((bmr.iova, bmr.key ^ 0x100));
    a.post_send(&mut aq, &w);
    assert!(fabric.run_until_idle());
    let wc = a.poll_all(&mut acq);
    assert_eq!(wc[0].opcode, CqeOpcode::ReqErr, "{wc:?}");
    assert_eq!(wc[0].syndrome(), CqeSyndrome::RemoteAccessErr);
    assert_eq!(
        wc[0].err.srqn.get() & 0x00ff_ffff,
        0x00a0_0007,
        "the requester's error CQE names its QP's user index"
    );
    // The responder's error CQE (none here: a WRITE consumes no receive) and its flush.
    let _ = b.poll_all(&mut bcq);
}
