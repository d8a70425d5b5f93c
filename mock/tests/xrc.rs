//! XRC: the `xrc` capability, XRC SRQs (CREATE_XRC_SRQ, QUERY_XRC_SRQ, ARM_XRC_SRQ,
//! DESTROY_XRC_SRQ) and what they tie to (XRC domain, CQ, PD), driven with raw PRM
//! commands.

mod common;

use common::{Harness, pages_of, pas_bytes};
use uhca_fwif::cmd::*;
use uhca_fwif::consts::*;
use uhca_hal::Dma;
use uhca_mock::MockConfig;
use uhca_mock::firmware::syndrome;

/// The objects an XRC SRQ refers to.
struct Refs {
    pd: u32,
    xrcd: u32,
    cqn: u32,
}

fn refs(h: &mut Harness) -> Refs {
    let pd = h.alloc_pd();
    let uar = h.alloc_uar();
    let xrcd = h.ok(&AllocXrcdIn::new_cmd(), &[]).xrcd();
    let eq = h.create_eq(uar, 3, &[]);
    let cqn = h.create_cq(uar, eq.eqn, 4);
    Refs { pd, xrcd, cqn }
}

/// A CREATE_XRC_SRQ input for 64 WQEs of 64 bytes, its page list and the doorbell record's
/// IOVA, as Linux's `mlx5_ib` fills it (the `srqc` fields, then `user_index`).
fn xrc_srq_in(h: &mut Harness, r: &Refs) -> (CreateXrcSrqIn, Vec<u8>, u64) {
    let buf = h.p.alloc_coherent(64 * 64, 4096).unwrap();
    let dbr = h.p.alloc_coherent(64, 64).unwrap();
    let mut c = CreateXrcSrqIn::new_cmd();
    c.xrc_srq_context_entry_mut()
        .set_log_xrc_srq_size(6)
        .set_log_rq_stride(2)
        .set_xrcd(r.xrcd)
        .set_cqn(r.cqn)
        .set_pd(r.pd)
        .set_user_index(0x00ab_cdef)
        .set_db_record_addr_h((dbr.iova >> 32) as u32)
        .set_db_record_addr_l((dbr.iova as u32) >> 2);
    let pages = pas_bytes(&pages_of(&buf, 64 * 64));
    let iova = dbr.iova;
    h.pages.push(buf);
    h.pages.push(dbr);
    (c, pages, iova)
}

#[test]
fn the_xrc_capability_is_offered() {
    let mut h = Harness::ready(MockConfig::infiniband());
    let mut q = QueryHcaCapIn::new_cmd();
    q.set_op_mod(query_hca_cap_op_mod(
        HcaCapType::General,
        HcaCapMode::GetCur,
    ));
    let o = h.ok(&q, &[]);
    assert!(o.cmd_hca_cap().xrc());
    assert!(o.cmd_hca_cap().log_max_xrcd() > 0);
}

/// Linux's `mlx5_ib` creates an XRC SRQ at probe (ISSI 1) with CREATE_XRC_SRQ; it arms,
/// queries and destroys it with the XRC SRQ commands.
#[test]
fn xrc_srq_create_query_arm_destroy() {
    let mut h = Harness::ready(MockConfig::infiniband());
    let r = refs(&mut h);
    let (c, pages, dbr) = xrc_srq_in(&mut h, &r);
    let n = h.ok(&c, &pages).xrc_srqn();
    assert_ne!(n, 0);
    let mut q = QueryXrcSrqIn::new_cmd();
    q.set_xrc_srqn(n);
    let s = *h.ok(&q, &[]).xrc_srq_context_entry();
    assert_eq!(s.state(), 0, "GOOD");
    assert_eq!(s.xrcd(), r.xrcd);
    assert_eq!(s.cqn(), r.cqn);
    assert_eq!(s.pd(), r.pd);
    assert_eq!(s.user_index(), 0x00ab_cdef);
    assert_eq!(s.log_xrc_srq_size(), 6);
    assert_eq!(s.log_rq_stride(), 2);
    assert_eq!(
        ((s.db_record_addr_h() as u64) << 32) | ((s.db_record_addr_l() as u64) << 2),
        dbr
    );
    // The limit: armed with op_mod XRC_SRQ, below the size.
    let mut a = ArmXrcSrqIn::new_cmd();
    a.set_op_mod(ARM_XRC_SRQ_OP_MOD_XRC_SRQ)
        .set_xrc_srqn(n)
        .set_lwm(10);
    h.ok(&a, &[]);
    assert_eq!(h.ok(&q, &[]).xrc_srq_context_entry().lwm(), 10);
    a.set_lwm(64);
    assert_eq!(h.err(&a, &[]), (CmdStatus::BadParamErr, syndrome::BAD_LWM));
    a.set_op_mod(0).set_lwm(1);
    assert_eq!(
        h.err(&a, &[]),
        (CmdStatus::BadParamErr, syndrome::BAD_OP_MOD)
    );
    // What it uses cannot go while it lives: its domain, its CQ, its PD.
    let in_use = (CmdStatus::ResBusy, syndrome::OBJECT_IN_USE);
    let mut dx = DeallocXrcdIn::new_cmd();
    dx.set_xrcd(r.xrcd);
    assert_eq!(h.err(&dx, &[]), in_use);
    let mut dc = DestroyCqIn::new_cmd();
    dc.set_cqn(r.cqn);
    assert_eq!(h.err(&dc, &[]), in_use);
    let mut dp = DeallocPdIn::new_cmd();
    dp.set_pd(r.pd);
    assert_eq!(h.err(&dp, &[]), in_use);
    // It is not an RMP: the RMP commands do not know it.
    let mut qr = QueryRmpIn::new_cmd();
    qr.set_rmpn(n);
    assert_eq!(h.err(&qr, &[]).1, syndrome::NO_SUCH_OBJECT);
    let mut dr = DestroyRmpIn::new_cmd();
    dr.set_rmpn(n);
    assert_eq!(h.err(&dr, &[]).1, syndrome::NO_SUCH_OBJECT);
    // Destroyed, it is gone, and what it used may go.
    let mut d = DestroyXrcSrqIn::new_cmd();
    d.set_xrc_srqn(n);
    h.ok(&d, &[]);
    let gone = (CmdStatus::BadResErr, syndrome::NO_SUCH_OBJECT);
    assert_eq!(h.err(&d, &[]), gone);
    assert_eq!(h.err(&q, &[]), gone);
    a.set_op_mod(ARM_XRC_SRQ_OP_MOD_XRC_SRQ);
    assert_eq!(h.err(&a, &[]), gone);
    h.ok(&dx, &[]);
    h.ok(&dc, &[]);
    h.ok(&dp, &[]);
}

#[test]
fn xrc_srq_user_index_may_be_its_number() {
    let mut h = Harness::ready(MockConfig::infiniband());
    let r = refs(&mut h);
    let (mut c, pages, _) = xrc_srq_in(&mut h, &r);
    c.xrc_srq_context_entry_mut()
        .set_user_index(0)
        .set_user_index_equal_xrc_srqn(true);
    let n = h.ok(&c, &pages).xrc_srqn();
    let mut q = QueryXrcSrqIn::new_cmd();
    q.set_xrc_srqn(n);
    assert_eq!(h.ok(&q, &[]).xrc_srq_context_entry().user_index(), n);
}

#[test]
fn xrc_srq_creation_checks_what_it_names() {
    let mut h = Harness::ready(MockConfig::infiniband());
    let r = refs(&mut h);
    let bad = |s| (CmdStatus::BadParamErr, s);
    let (mut c, pages, _) = xrc_srq_in(&mut h, &r);
    c.xrc_srq_context_entry_mut().set_xrcd(r.xrcd + 77);
    assert_eq!(h.err(&c, &pages), bad(syndrome::BAD_XRCD));
    let (mut c, pages, _) = xrc_srq_in(&mut h, &r);
    c.xrc_srq_context_entry_mut().set_cqn(r.cqn + 77);
    assert_eq!(h.err(&c, &pages), bad(syndrome::BAD_CQ));
    let (mut c, pages, _) = xrc_srq_in(&mut h, &r);
    c.xrc_srq_context_entry_mut().set_pd(r.pd + 77);
    assert_eq!(h.err(&c, &pages), bad(syndrome::BAD_PD));
    let (mut c, pages, _) = xrc_srq_in(&mut h, &r);
    c.set_xrc_srq_umem_valid(true);
    assert_eq!(h.err(&c, &pages), bad(syndrome::UNSUPPORTED_FEATURE));
    let (mut c, pages, _) = xrc_srq_in(&mut h, &r);
    c.xrc_srq_context_entry_mut().set_dbr_umem_valid(true);
    assert_eq!(h.err(&c, &pages), bad(syndrome::UNSUPPORTED_FEATURE));
    let (mut c, pages, _) = xrc_srq_in(&mut h, &r);
    c.xrc_srq_context_entry_mut().set_lwm(64);
    assert_eq!(h.err(&c, &pages), bad(syndrome::BAD_LWM));
    // A page list too short for the queue.
    let (mut c, pages, _) = xrc_srq_in(&mut h, &r);
    c.xrc_srq_context_entry_mut().set_log_xrc_srq_size(9);
    assert_eq!(h.exec(&c, &pages).status(), CmdStatus::BadInpLenErr);
    // After all that, nothing was created: the domain and the CQ go.
    let mut dx = DeallocXrcdIn::new_cmd();
    dx.set_xrcd(r.xrcd);
    h.ok(&dx, &[]);
    let mut dc = DestroyCqIn::new_cmd();
    dc.set_cqn(r.cqn);
    h.ok(&dc, &[]);
}

/// At ISSI 0 Linux creates every SRQ with CREATE_SRQ, naming an XRC domain and a CQ in
/// `srqc` (an XRC SRQ's own, or its spare ones for a plain SRQ).
#[test]
fn an_issi_0_srq_in_an_xrc_domain() {
    let mut h = Harness::initialized_at_issi(MockConfig::infiniband(), 0);
    h.give_outstanding(QueryPagesOpMod::RegularPages);
    let r = refs(&mut h);
    let buf = h.p.alloc_coherent(64 * 64, 4096).unwrap();
    let dbr = h.p.alloc_coherent(64, 64).unwrap();
    let mut c = CreateSrqIn::new_cmd();
    c.srq_context_entry_mut()
        .set_log_srq_size(6)
        .set_log_rq_stride(2)
        .set_xrcd(r.xrcd)
        .set_cqn(r.cqn)
        .set_pd(r.pd)
        .set_dbr_addr(dbr.iova);
    let pages = pas_bytes(&pages_of(&buf, 64 * 64));
    c.srq_context_entry_mut().set_xrcd(r.xrcd + 9);
    assert_eq!(h.err(&c, &pages).1, syndrome::BAD_XRCD);
    c.srq_context_entry_mut()
        .set_xrcd(r.xrcd)
        .set_cqn(r.cqn + 9);
    assert_eq!(h.err(&c, &pages).1, syndrome::BAD_CQ);
    c.srq_context_entry_mut().set_cqn(r.cqn);
    let srqn = h.ok(&c, &pages).srqn();
    let mut dx = DeallocXrcdIn::new_cmd();
    dx.set_xrcd(r.xrcd);
    assert_eq!(h.err(&dx, &[]).1, syndrome::OBJECT_IN_USE);
    let mut dc = DestroyCqIn::new_cmd();
    dc.set_cqn(r.cqn);
    assert_eq!(h.err(&dc, &[]).1, syndrome::OBJECT_IN_USE);
    let mut d = DestroySrqIn::new_cmd();
    d.set_srqn(srqn);
    h.ok(&d, &[]);
    h.ok(&dx, &[]);
    h.ok(&dc, &[]);
}
