//! Queue pairs: creation checks and the state machine.

mod common;

use common::{Harness, Setup, pas_bytes, setup};
use uhca_fwif::cmd::*;
use uhca_fwif::consts::*;
use uhca_mock::firmware::{optpar, syndrome};
use uhca_mock::{LinkLayer, MockConfig};

fn rst2init(qpn: u32) -> Rst2initQpIn {
    let mut m = Rst2initQpIn::new_cmd();
    m.qpc_mut().set_pm_state(common::PM_STATE_MIGRATED);
    m.set_qpn(qpn);
    m.qpc_mut()
        .set_rre(true)
        .set_rwe(true)
        .primary_address_path_mut()
        .set_vhca_port_num(1);
    m
}

fn init2rtr(qpn: u32) -> Init2rtrQpIn {
    let mut m = Init2rtrQpIn::new_cmd();
    m.qpc_mut().set_pm_state(common::PM_STATE_MIGRATED);
    m.set_qpn(qpn);
    m.qpc_mut()
        .set_mtu(IbMtu::Mtu1024.raw())
        .set_log_msg_max(30)
        .set_remote_qpn(0x1234)
        .set_next_rcv_psn(0x100)
        .set_log_rra_max(2)
        .set_min_rnr_nak(12);
    m.qpc_mut()
        .primary_address_path_mut()
        .set_vhca_port_num(1)
        .set_src_addr_index(0)
        .set_hop_limit(64)
        .set_rmac_47_32(0x02c0)
        .set_rmac_31_0(0xffee0002);
    m
}

fn rtr2rts(qpn: u32) -> Rtr2rtsQpIn {
    let mut m = Rtr2rtsQpIn::new_cmd();
    m.qpc_mut().set_pm_state(common::PM_STATE_MIGRATED);
    m.set_qpn(qpn);
    m.qpc_mut()
        .set_next_send_psn(0x200)
        .set_retry_count(7)
        .set_rnr_retry(7)
        .set_log_sra_max(2);
    m.qpc_mut().primary_address_path_mut().set_ack_timeout(14);
    m
}

fn query(h: &mut Harness, qpn: u32) -> QueryQpOut {
    let mut q = QueryQpIn::new_cmd();
    q.set_qpn(qpn);
    h.ok(&q, &[])
}

#[test]
fn rc_qp_to_rts_and_back() {
    let Setup {
        mut h,
        pd,
        uar,
        cqn,
    } = setup(MockConfig::default());
    h.enable_roce();
    h.set_gid(0);
    let qpn = h.create_qp(QpServiceType::Rc, pd, cqn, uar);
    assert!(qpn >= 0x100);
    assert_eq!(h.hca.qp_state(qpn), Some(QpState::Rst));
    h.ok(&rst2init(qpn), &[]);
    assert_eq!(h.hca.qp_state(qpn), Some(QpState::Init));
    h.ok(&init2rtr(qpn), &[]);
    h.ok(&rtr2rts(qpn), &[]);
    let o = query(&mut h, qpn);
    let c = o.qpc();
    assert_eq!(c.state(), QpState::Rts.raw());
    assert_eq!(c.remote_qpn(), 0x1234);
    assert_eq!(c.next_rcv_psn(), 0x100);
    assert_eq!(c.next_send_psn(), 0x200);
    assert_eq!(c.mtu(), IbMtu::Mtu1024.raw());
    assert_eq!(c.primary_address_path().ack_timeout(), 14);
    assert_eq!(c.primary_address_path().rmac_31_0(), 0xffee0002);
    assert!(c.rre() && c.rwe() && !c.rae());
    // RTS2RTS changes only what the optional-parameter mask selects.
    let mut m = Rts2rtsQpIn::new_cmd();
    m.set_qpn(qpn)
        .set_opt_param_mask(optpar::RAE | optpar::RNR_TIMEOUT);
    m.qpc_mut()
        .set_rae(true)
        .set_min_rnr_nak(3)
        .set_retry_count(1);
    h.ok(&m, &[]);
    let c = *query(&mut h, qpn).qpc();
    assert!(c.rae());
    assert_eq!(c.min_rnr_nak(), 3);
    assert_eq!(c.retry_count(), 7, "not selected");
    // To error, then reset, then INIT again.
    let mut e = Qp2errIn::new_cmd();
    e.set_qpn(qpn);
    h.ok(&e, &[]);
    assert_eq!(h.hca.qp_state(qpn), Some(QpState::Err));
    let mut r = Qp2rstIn::new_cmd();
    r.set_qpn(qpn);
    h.ok(&r, &[]);
    assert_eq!(h.hca.qp_state(qpn), Some(QpState::Rst));
    h.ok(&rst2init(qpn), &[]);
    // A CQ in use by a QP cannot be destroyed; the QP can.
    let mut dc = DestroyCqIn::new_cmd();
    dc.set_cqn(cqn);
    assert_eq!(
        h.err(&dc, &[]),
        (CmdStatus::ResBusy, syndrome::OBJECT_IN_USE)
    );
    let mut d = DestroyQpIn::new_cmd();
    d.set_qpn(qpn);
    h.ok(&d, &[]);
    assert_eq!(h.err(&d, &[]).0, CmdStatus::BadResErr);
    h.ok(&dc, &[]);
}

#[test]
fn init2init_changes_only_what_the_mask_selects() {
    let Setup {
        mut h,
        pd,
        uar,
        cqn,
    } = setup(MockConfig::default());
    let qpn = h.create_qp(QpServiceType::Rc, pd, cqn, uar);
    // INIT2INIT needs a QP in INIT.
    let mut m = Init2initQpIn::new_cmd();
    m.set_qpn(qpn);
    assert_eq!(h.err(&m, &[]).0, CmdStatus::BadQpStateErr);
    h.ok(&rst2init(qpn), &[]);
    let mut m = Init2initQpIn::new_cmd();
    m.set_qpn(qpn)
        .set_opt_param_mask(optpar::RWE | optpar::RAE | optpar::PKEY_INDEX);
    m.qpc_mut()
        .set_rwe(false)
        .set_rae(true)
        .set_rre(false)
        .primary_address_path_mut()
        .set_pkey_index(3);
    h.ok(&m, &[]);
    assert_eq!(h.hca.qp_state(qpn), Some(QpState::Init));
    let c = *query(&mut h, qpn).qpc();
    assert!(!c.rwe() && c.rae());
    assert!(c.rre(), "not selected");
    assert_eq!(c.primary_address_path().pkey_index(), 3);
    // A P_Key index outside the table is refused and changes nothing.
    m.qpc_mut()
        .primary_address_path_mut()
        .set_pkey_index(uhca_mock::caps::PKEY_TABLE_ENTRIES as u16);
    assert_eq!(
        h.err(&m, &[]),
        (CmdStatus::BadParamErr, syndrome::BAD_PKEY_INDEX)
    );
    assert_eq!(
        query(&mut h, qpn).qpc().primary_address_path().pkey_index(),
        3
    );
}

#[test]
fn transitions_from_the_wrong_state() {
    let Setup {
        mut h,
        pd,
        uar,
        cqn,
    } = setup(MockConfig::default());
    h.enable_roce();
    h.set_gid(0);
    let qpn = h.create_qp(QpServiceType::Rc, pd, cqn, uar);
    // INIT2RTR on a RESET QP.
    assert_eq!(
        h.err(&init2rtr(qpn), &[]),
        (CmdStatus::BadQpStateErr, syndrome::BAD_QP_TRANSITION)
    );
    assert_eq!(h.err(&rtr2rts(qpn), &[]).0, CmdStatus::BadQpStateErr);
    let mut m = Rts2rtsQpIn::new_cmd();
    m.set_qpn(qpn);
    assert_eq!(h.err(&m, &[]).0, CmdStatus::BadQpStateErr);
    let mut s = Sqerr2rtsQpIn::new_cmd();
    s.set_qpn(qpn);
    assert_eq!(h.err(&s, &[]).0, CmdStatus::BadQpStateErr);
    h.ok(&rst2init(qpn), &[]);
    assert_eq!(h.err(&rst2init(qpn), &[]).0, CmdStatus::BadQpStateErr);
    assert_eq!(
        h.hca.qp_state(qpn),
        Some(QpState::Init),
        "unchanged by a failed transition"
    );
    // Unknown QP.
    assert_eq!(h.err(&rst2init(qpn + 77), &[]).0, CmdStatus::BadResErr);
}

#[test]
fn transition_parameters_are_checked() {
    let Setup {
        mut h,
        pd,
        uar,
        cqn,
    } = setup(MockConfig::default());
    let qpn = h.create_qp(QpServiceType::Rc, pd, cqn, uar);
    let mut bad = rst2init(qpn);
    bad.qpc_mut()
        .primary_address_path_mut()
        .set_vhca_port_num(2);
    assert_eq!(
        h.err(&bad, &[]),
        (CmdStatus::BadParamErr, syndrome::BAD_PORT)
    );
    bad.qpc_mut()
        .primary_address_path_mut()
        .set_vhca_port_num(1)
        .set_pkey_index(128);
    assert_eq!(h.err(&bad, &[]).1, syndrome::BAD_PKEY_INDEX);
    h.ok(&rst2init(qpn), &[]);
    // RoCE is not enabled on the NIC vport yet.
    assert_eq!(h.err(&init2rtr(qpn), &[]).1, syndrome::ROCE_DISABLED);
    h.enable_roce();
    // No GID at index 0 yet.
    assert_eq!(h.err(&init2rtr(qpn), &[]).1, syndrome::BAD_GID_INDEX);
    h.set_gid(0);
    let mut m = init2rtr(qpn);
    m.qpc_mut().set_mtu(6);
    assert_eq!(h.err(&m, &[]).1, syndrome::BAD_MTU);
    let mut m = init2rtr(qpn);
    m.qpc_mut().set_log_rra_max(7);
    assert_eq!(h.err(&m, &[]).1, syndrome::BAD_RDMA_DEPTH);
    let mut m = init2rtr(qpn);
    m.qpc_mut().set_log_msg_max(31);
    assert_eq!(h.err(&m, &[]).1, syndrome::BAD_MSG_SIZE);
    h.ok(&init2rtr(qpn), &[]);
    let mut m = rtr2rts(qpn);
    m.qpc_mut().set_log_sra_max(5);
    assert_eq!(h.err(&m, &[]).1, syndrome::BAD_RDMA_DEPTH);
    h.ok(&rtr2rts(qpn), &[]);
}

#[test]
fn force_loopback_without_roce() {
    let Setup {
        mut h,
        pd,
        uar,
        cqn,
    } = setup(MockConfig::default());
    let qpn = h.create_qp(QpServiceType::Rc, pd, cqn, uar);
    h.ok(&rst2init(qpn), &[]);
    let mut m = init2rtr(qpn);
    m.qpc_mut().primary_address_path_mut().set_fl(true);
    h.ok(&m, &[]);
    assert!(query(&mut h, qpn).qpc().primary_address_path().fl());
}

#[test]
fn ud_qp() {
    let Setup {
        mut h,
        pd,
        uar,
        cqn,
    } = setup(MockConfig::default());
    let qpn = h.create_qp(QpServiceType::Ud, pd, cqn, uar);
    let mut m = Rst2initQpIn::new_cmd();
    m.qpc_mut().set_pm_state(common::PM_STATE_MIGRATED);
    m.set_qpn(qpn);
    m.qpc_mut()
        .set_q_key(0x1111_0000)
        .primary_address_path_mut()
        .set_vhca_port_num(1)
        .set_pkey_index(0);
    h.ok(&m, &[]);
    let mut r = Init2rtrQpIn::new_cmd();
    r.qpc_mut().set_pm_state(common::PM_STATE_MIGRATED);
    r.set_qpn(qpn);
    h.ok(&r, &[]);
    let mut s = Rtr2rtsQpIn::new_cmd();
    s.qpc_mut().set_pm_state(common::PM_STATE_MIGRATED);
    s.set_qpn(qpn);
    s.qpc_mut().set_next_send_psn(5);
    h.ok(&s, &[]);
    let c = *query(&mut h, qpn).qpc();
    assert_eq!(c.q_key(), 0x1111_0000);
    assert_eq!(c.st(), QpServiceType::Ud.raw());
    assert_eq!(c.state(), QpState::Rts.raw());
}

#[test]
fn create_qp_checks() {
    let Setup {
        mut h,
        pd,
        uar,
        cqn,
    } = setup(MockConfig::default());
    let (base, pages) = h.create_qp_in(QpServiceType::Rc, pd, cqn, uar);
    let pas = pas_bytes(&pages);
    let mut c = base;
    c.qpc_mut().set_st(QpServiceType::Dci.raw());
    assert_eq!(
        h.err(&c, &pas),
        (CmdStatus::BadParamErr, syndrome::BAD_QP_TYPE)
    );
    // XRC is offered, but an XRC QP names an XRC domain (more in tests/xrc.rs).
    let mut c = base;
    c.qpc_mut().set_st(QpServiceType::Xrc.raw());
    assert_eq!(
        h.err(&c, &pas),
        (CmdStatus::BadParamErr, syndrome::BAD_XRCD)
    );
    let mut c = base;
    c.qpc_mut().set_pd(pd + 9);
    assert_eq!(h.err(&c, &pas).1, syndrome::BAD_PD);
    let mut c = base;
    c.qpc_mut().set_cqn_snd(cqn + 9);
    assert_eq!(h.err(&c, &pas).1, syndrome::BAD_CQ);
    let mut c = base;
    c.qpc_mut().set_log_sq_size(15).set_log_rq_size(14);
    assert_eq!(
        h.exec(&c, &pas).status(),
        CmdStatus::BadInpLenErr,
        "buffer needs more pages"
    );
    let mut c = base;
    c.qpc_mut().set_ts_format(2);
    assert_eq!(h.err(&c, &pas).1, syndrome::BAD_TS_FORMAT);
    let mut c = base;
    c.qpc_mut().set_ts_format(3);
    assert_eq!(h.err(&c, &pas).1, syndrome::BAD_TS_FORMAT);
    let mut c = base;
    c.qpc_mut().set_rq_type(1).set_srqn_rmpn_xrqn(4242);
    assert_eq!(h.err(&c, &pas).1, syndrome::BAD_SRQ);
    let mut c = base;
    c.set_input_qpn(0x500);
    assert_eq!(h.err(&c, &pas).1, syndrome::BAD_INPUT_QPN);
    let mut c = base;
    c.qpc_mut().set_uar_page(9999);
    assert_eq!(h.err(&c, &pas).1, syndrome::BAD_UAR);
    let mut c = base;
    c.qpc_mut().set_dbr_addr(3);
    assert_eq!(h.err(&c, &pas).1, syndrome::BAD_DBR_ADDR);
    // A zero-size RQ needs fewer pages (extra entries are ignored).
    let mut c = base;
    c.qpc_mut().set_rq_type(3);
    h.ok(&c, &pas);
    assert_eq!(h.hca.objects().qps, 1);
}

/// A QP's `ts_format` is checked against the QP timestamp capability: the RoCE page's
/// `qp_ts_format` on a RoCE function (not the general `sq_ts_format`), the general one
/// without RoCE.
#[test]
fn qp_timestamp_format_follows_the_qp_capability() {
    // RoCE: send queues free-running only, QPs real time only.
    let Setup {
        mut h,
        pd,
        uar,
        cqn,
    } = setup(MockConfig::default());
    h.hca.set_ts_format_caps(0, 1);
    let (base, pages) = h.create_qp_in(QpServiceType::Rc, pd, cqn, uar);
    let pas = pas_bytes(&pages);
    let mut c = base;
    c.qpc_mut().set_ts_format(0);
    assert_eq!(
        h.err(&c, &pas),
        (CmdStatus::BadParamErr, syndrome::BAD_TS_FORMAT)
    );
    for ts in [1, 2] {
        let (mut c, pages) = h.create_qp_in(QpServiceType::Rc, pd, cqn, uar);
        c.qpc_mut().set_ts_format(ts);
        h.ok(&c, &pas_bytes(&pages));
    }
    // InfiniBand (no RoCE page): the general capability decides.
    let Setup {
        mut h,
        pd,
        uar,
        cqn,
    } = setup(MockConfig::infiniband());
    h.hca.set_ts_format_caps(1, 0);
    let (mut c, pages) = h.create_qp_in(QpServiceType::Rc, pd, cqn, uar);
    c.qpc_mut().set_ts_format(0);
    assert_eq!(
        h.err(&c, &pas_bytes(&pages)),
        (CmdStatus::BadParamErr, syndrome::BAD_TS_FORMAT)
    );
    c.qpc_mut().set_ts_format(2);
    h.ok(&c, &pas_bytes(&pages));
}

#[test]
fn infiniband_qp_needs_no_gid() {
    let Setup {
        mut h,
        pd,
        uar,
        cqn,
    } = setup(MockConfig {
        port_type: LinkLayer::InfiniBand,
        ..Default::default()
    });
    let qpn = h.create_qp(QpServiceType::Rc, pd, cqn, uar);
    h.ok(&rst2init(qpn), &[]);
    let mut m = init2rtr(qpn);
    m.qpc_mut().primary_address_path_mut().set_rlid(7).set_sl(0);
    h.ok(&m, &[]);
    let mut g = init2rtr(qpn);
    g.qpc_mut()
        .primary_address_path_mut()
        .set_grh(true)
        .set_src_addr_index(9);
    let mut q = Qp2rstIn::new_cmd();
    q.set_qpn(qpn);
    h.ok(&q, &[]);
    h.ok(&rst2init(qpn), &[]);
    assert_eq!(h.err(&g, &[]).1, syndrome::BAD_GID_INDEX);
}

#[test]
fn send_queue_error_recovery() {
    let Setup {
        mut h,
        pd,
        uar,
        cqn,
    } = setup(MockConfig::default());
    h.enable_roce();
    h.set_gid(0);
    let qpn = h.create_qp(QpServiceType::Rc, pd, cqn, uar);
    h.ok(&rst2init(qpn), &[]);
    h.ok(&init2rtr(qpn), &[]);
    h.ok(&rtr2rts(qpn), &[]);
    let mut s = Sqerr2rtsQpIn::new_cmd();
    s.set_qpn(qpn);
    assert_eq!(
        h.err(&s, &[]).0,
        CmdStatus::BadQpStateErr,
        "RTS is not SQER"
    );
    assert!(h.hca.force_qp_state(qpn, QpState::Sqer));
    h.ok(&s, &[]);
    assert_eq!(h.hca.qp_state(qpn), Some(QpState::Rts));
}

#[test]
fn unknown_qp_numbers() {
    let Setup { mut h, .. } = setup(MockConfig::default());
    let mut q = QueryQpIn::new_cmd();
    q.set_qpn(0x999);
    assert_eq!(
        h.err(&q, &[]),
        (CmdStatus::BadResErr, syndrome::NO_SUCH_OBJECT)
    );
    let mut e = Qp2errIn::new_cmd();
    e.set_qpn(0x999);
    assert_eq!(h.err(&e, &[]).0, CmdStatus::BadResErr);
    let mut r = Qp2rstIn::new_cmd();
    r.set_qpn(0x999);
    assert_eq!(h.err(&r, &[]).0, CmdStatus::BadResErr);
}

/// `pm_state` is ARMED (0) in a zeroed context: a migration armed towards an alternate
/// path the model does not have. Every context-carrying transition must say MIGRATED, as
/// Linux's `__mlx5_ib_modify_qp` writes it.
#[test]
fn pm_state_other_than_migrated_is_refused() {
    let Setup {
        mut h,
        pd,
        uar,
        cqn,
    } = setup(MockConfig::default());
    h.enable_roce();
    h.set_gid(0);
    let qpn = h.create_qp(QpServiceType::Rc, pd, cqn, uar);
    let bad = (CmdStatus::BadParamErr, syndrome::BAD_PM_STATE);
    for pm in [0u8, 1] {
        let mut m = rst2init(qpn);
        m.qpc_mut().set_pm_state(pm);
        assert_eq!(h.err(&m, &[]), bad, "RST2INIT with pm_state {pm}");
    }
    assert_eq!(h.hca.qp_state(qpn), Some(QpState::Rst), "nothing changed");
    h.ok(&rst2init(qpn), &[]);
    let mut r = init2rtr(qpn);
    r.qpc_mut().set_pm_state(0);
    assert_eq!(h.err(&r, &[]), bad, "INIT2RTR");
    h.ok(&init2rtr(qpn), &[]);
    let mut s = rtr2rts(qpn);
    s.qpc_mut().set_pm_state(0);
    assert_eq!(h.err(&s, &[]), bad, "RTR2RTS");
    h.ok(&rtr2rts(qpn), &[]);
    assert_eq!(h.hca.qp_state(qpn), Some(QpState::Rts));
}

/// An address path's static rate must be unlimited (0) or a code the device lists in
/// `stat_rate_support`; the mock lists every code but 6 (400 Gb/s).
#[test]
fn a_static_rate_the_device_does_not_list_is_refused() {
    let Setup {
        mut h,
        pd,
        uar,
        cqn,
    } = setup(MockConfig::default());
    h.enable_roce();
    h.set_gid(0);
    let qpn = h.create_qp(QpServiceType::Rc, pd, cqn, uar);
    h.ok(&rst2init(qpn), &[]);
    let mut r = init2rtr(qpn);
    r.qpc_mut().primary_address_path_mut().set_stat_rate(6);
    assert_eq!(
        h.err(&r, &[]),
        (CmdStatus::BadParamErr, syndrome::BAD_STAT_RATE)
    );
    let mut r = init2rtr(qpn);
    r.qpc_mut().primary_address_path_mut().set_stat_rate(4);
    h.ok(&r, &[]);
    assert_eq!(
        query(&mut h, qpn).qpc().primary_address_path().stat_rate(),
        4
    );
}
