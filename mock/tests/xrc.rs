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
    let xrcd = alloc_xrcd(h);
    let eq = h.create_eq(uar, 3, &[]);
    let cqn = h.create_cq(uar, eq.eqn, 4);
    Refs { pd, xrcd, cqn }
}

impl Refs {
    /// DEALLOC_XRCD of the XRC domain.
    fn dealloc_xrcd(&self) -> DeallocXrcdIn {
        let mut d = DeallocXrcdIn::new_cmd();
        d.set_xrcd(self.xrcd);
        d
    }

    /// DESTROY_CQ of the CQ.
    fn destroy_cq(&self) -> DestroyCqIn {
        let mut d = DestroyCqIn::new_cmd();
        d.set_cqn(self.cqn);
        d
    }
}

/// ALLOC_XRCD: a new XRC domain's number.
fn alloc_xrcd(h: &mut Harness) -> u32 {
    h.ok(&AllocXrcdIn::new_cmd(), &[]).xrcd()
}

/// A CREATE_XRC_SRQ input for 2^`log_size` WQEs of 64 bytes (`log_rq_stride` 2) in domain
/// `xrcd` and PD `pd`, completing on CQ `cqn`, reporting `user_index`, with its doorbell
/// record at `dbr`.
fn create_xrc_srq_in(
    log_size: u8,
    xrcd: u32,
    cqn: u32,
    pd: u32,
    user_index: u32,
    dbr: u64,
) -> CreateXrcSrqIn {
    let mut c = CreateXrcSrqIn::new_cmd();
    c.xrc_srq_context_entry_mut()
        .set_log_xrc_srq_size(log_size)
        .set_log_rq_stride(2)
        .set_xrcd(xrcd)
        .set_cqn(cqn)
        .set_pd(pd)
        .set_user_index(user_index)
        .set_db_record_addr_h((dbr >> 32) as u32)
        .set_db_record_addr_l((dbr as u32) >> 2);
    c
}

/// At ISSI 0, a CREATE_SRQ input for 2^`log_size` WQEs of 64 bytes in domain `xrcd` and PD
/// `pd`, completing on CQ `cqn`, with its doorbell record at `dbr` (how Linux makes an SRQ,
/// XRC or not, on such firmware).
fn create_srq_in(log_size: u8, xrcd: u32, cqn: u32, pd: u32, dbr: u64) -> CreateSrqIn {
    let mut c = CreateSrqIn::new_cmd();
    c.srq_context_entry_mut()
        .set_log_srq_size(log_size)
        .set_log_rq_stride(2)
        .set_xrcd(xrcd)
        .set_cqn(cqn)
        .set_pd(pd)
        .set_dbr_addr(dbr);
    c
}

/// A CREATE_XRC_SRQ input for 64 WQEs of 64 bytes, its page list and the doorbell record's
/// IOVA, as Linux's `mlx5_ib` fills it (the `srqc` fields, then `user_index`).
fn xrc_srq_in(h: &mut Harness, r: &Refs) -> (CreateXrcSrqIn, Vec<u8>, u64) {
    let buf = h.p.alloc_coherent(64 * 64, 4096).unwrap();
    let dbr = h.p.alloc_coherent(64, 64).unwrap();
    let c = create_xrc_srq_in(6, r.xrcd, r.cqn, r.pd, 0x00ab_cdef, dbr.iova);
    let pages = pas_bytes(&pages_of(&buf, 64 * 64));
    let iova = dbr.iova;
    h.pages.push(buf);
    h.pages.push(dbr);
    (c, pages, iova)
}

#[test]
fn the_xrc_capability_is_offered() {
    let mut h = Harness::ready(MockConfig::infiniband());
    let c = h.general_caps();
    assert!(c.xrc());
    assert!(c.log_max_xrcd() > 0);
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
    let (dx, dc) = (r.dealloc_xrcd(), r.destroy_cq());
    assert_eq!(h.err(&dx, &[]), in_use);
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
    h.ok(&r.dealloc_xrcd(), &[]);
    h.ok(&r.destroy_cq(), &[]);
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
    let mut c = create_srq_in(6, r.xrcd, r.cqn, r.pd, dbr.iova);
    let pages = pas_bytes(&pages_of(&buf, 64 * 64));
    c.srq_context_entry_mut().set_xrcd(r.xrcd + 9);
    assert_eq!(h.err(&c, &pages).1, syndrome::BAD_XRCD);
    c.srq_context_entry_mut()
        .set_xrcd(r.xrcd)
        .set_cqn(r.cqn + 9);
    assert_eq!(h.err(&c, &pages).1, syndrome::BAD_CQ);
    c.srq_context_entry_mut().set_cqn(r.cqn);
    let srqn = h.ok(&c, &pages).srqn();
    let (dx, dc) = (r.dealloc_xrcd(), r.destroy_cq());
    assert_eq!(h.err(&dx, &[]).1, syndrome::OBJECT_IN_USE);
    assert_eq!(h.err(&dc, &[]).1, syndrome::OBJECT_IN_USE);
    let mut d = DestroySrqIn::new_cmd();
    d.set_srqn(srqn);
    h.ok(&d, &[]);
    h.ok(&dx, &[]);
    h.ok(&dc, &[]);
}

// ---- The transport: an initiator on HCA A, a target, its domain's XRC SRQs on HCA B ----

use common::PM_STATE_MIGRATED;
use common::verbs::{Conn, Cq, Mr, Node, Qp, Wr, full_emit, transport_of, wr};
use uhca_hal::DmaRegion;
use uhca_mock::wire::pcap::PcapReader;
use uhca_mock::{Fabric, LinkLayer};

/// An XRC SRQ of 16 WQEs of 64 bytes, with the test's count of WQEs posted.
struct TestSrq {
    srqn: u32,
    buf: u64,
    dbr: u64,
    posted: u32,
}

impl TestSrq {
    /// SRQ `srqn` with its queue at `buf` and its doorbell record at `dbr`, nothing posted.
    fn new(srqn: u32, buf: u64, dbr: u64) -> TestSrq {
        TestSrq {
            srqn,
            buf,
            dbr,
            posted: 0,
        }
    }
}

/// The user index the test gives its XRC SRQs (what their CQEs report).
const SRQ_USER_INDEX: u32 = 0x0005_a5a5;

fn keep(n: &mut Node, len: usize) -> u64 {
    let r: DmaRegion = n.h.p.alloc_coherent(len.max(64), 4096).unwrap();
    let iova = r.iova;
    n.keep.push(r);
    iova
}

/// CREATE_XRC_SRQ on `n` in domain `xrcd`, PD `pd`, completing on `cq`.
fn xrc_srq(n: &mut Node, xrcd: u32, pd: u32, cq: &Cq) -> TestSrq {
    let buf = keep(n, 16 * 64);
    let dbr = keep(n, 64);
    let c = create_xrc_srq_in(4, xrcd, cq.cqn, pd, SRQ_USER_INDEX, dbr);
    let srqn = n.h.ok(&c, &pas_bytes(&[buf])).xrc_srqn();
    TestSrq::new(srqn, buf, dbr)
}

/// Posts one receive WQE (a "next" segment, then one data segment) to an XRC SRQ: the list
/// runs 0, 1, 2, ... and the doorbell record counts the WQEs posted.
fn post_srq(n: &Node, s: &mut TestSrq, mr: &Mr, off: u64, len: u32) {
    let idx = s.posted % 16;
    let mut w = vec![0u8; 64];
    w[2..4].copy_from_slice(&(((idx + 1) % 16) as u16).to_be_bytes());
    let d = uhca_fwif::wqe::WqeDataSeg {
        byte_count: len.into(),
        lkey: mr.key.into(),
        addr: (mr.iova + off).into(),
    };
    w[16..32].copy_from_slice(zerocopy::IntoBytes::as_bytes(&d));
    w[36..40].copy_from_slice(&uhca_fwif::wqe::INVALID_LKEY.to_be_bytes());
    assert!(n.h.hca.host_write(s.buf + idx as u64 * 64, &w));
    s.posted += 1;
    assert!(n.h.hca.host_write(s.dbr, &s.posted.to_be_bytes()));
}

/// A CREATE_QP input of an XRC QP in domain `xrcd` and PD `pd`, completing on CQ `cqn` (send
/// and receive); what else it has (UAR, queues, doorbell record) is the caller's.
fn xrc_qp_in(xrcd: u32, pd: u32, cqn: u32) -> CreateQpIn {
    let mut c = CreateQpIn::new_cmd();
    c.qpc_mut()
        .set_st(QpServiceType::Xrc.raw())
        .set_pm_state(PM_STATE_MIGRATED)
        .set_pd(pd)
        .set_xrcd(xrcd)
        .set_cqn_snd(cqn)
        .set_cqn_rcv(cqn);
    c
}

/// CREATE_QP of an XRC QP on `n`: an initiator (2^6 send WQEBBs) or a target (`no_sq`);
/// neither has a receive queue of its own (`rq_type` 3, zero length).
fn xrc_qp(n: &mut Node, xrcd: u32, pd: u32, cq: &Cq, initiator: bool) -> Qp {
    let sq = keep(n, 4096);
    let dbr = keep(n, 64);
    let mut c = xrc_qp_in(xrcd, pd, cq.cqn);
    c.qpc_mut()
        .set_uar_page(n.uar)
        .set_rq_type(3)
        .set_dbr_addr(dbr);
    let pages = if initiator {
        c.qpc_mut().set_log_sq_size(6);
        vec![sq]
    } else {
        c.qpc_mut().set_no_sq(true);
        vec![]
    };
    let qpn = n.h.ok(&c, &pas_bytes(&pages)).qpn();
    // The test's WQE writer puts the SQ after an RQ of 2^log_rq WQEs of 16 << log_stride
    // bytes; there is no RQ, so the buffer is named 16 bytes early.
    Qp::without_rq(qpn, QpServiceType::Xrc, sq - 16, dbr, 6)
}

/// On `a`: a CQ of 2^`log_cq` entries, an XRC domain and an initiator in `a`'s PD that
/// completes on that CQ.
fn initiator(a: &mut Node, log_cq: u8) -> (Cq, Qp) {
    let acq = a.cq(log_cq);
    let xa = alloc_xrcd(&mut a.h);
    let apd = a.pd;
    let ini = xrc_qp(a, xa, apd, &acq, true);
    (acq, ini)
}

/// Connects initiator `ini` on `a` (with `initiator_conn`) to target `tgt` on `b`, which
/// stays at RTR (a target never sends a request).
fn connect_xrc(a: &mut Node, ini: &Qp, b: &mut Node, tgt: &Qp, initiator_conn: Conn) {
    a.connect(ini, b, tgt.qpn, initiator_conn);
    b.connect(
        tgt,
        a,
        ini.qpn,
        Conn {
            stop_at_rtr: true,
            ..Conn::default()
        },
    );
}

/// An initiator on A connected to a target on B; on B an XRC domain with one XRC SRQ
/// whose CQ is its own (the target's CQ stays empty).
struct Xrc {
    fabric: Fabric,
    a: Node,
    b: Node,
    acq: Cq,
    /// The XRC SRQ's CQ.
    scq: Cq,
    /// The target QP's own CQ (XRC receives never complete here).
    tcq: Cq,
    ini: Qp,
    tgt: Qp,
    xrcd: u32,
    srq: TestSrq,
    /// Memory of the SRQ's PD on B.
    bmr: Mr,
}

impl Xrc {
    fn new(link: LinkLayer, initiator_conn: Conn) -> Xrc {
        let fabric = Fabric::new(link);
        let mut a = Node::new(&fabric, link, 1);
        let mut b = Node::new(&fabric, link, 2);
        let (acq, ini) = initiator(&mut a, 8);
        let scq = b.cq(8);
        let tcq = b.cq(4);
        let xrcd = alloc_xrcd(&mut b.h);
        // The target's PD is not the SRQ's: data access is checked against the SRQ's PD.
        let tpd = b.h.alloc_pd();
        let tgt = xrc_qp(&mut b, xrcd, tpd, &tcq, false);
        let bpd = b.pd;
        let srq = xrc_srq(&mut b, xrcd, bpd, &scq);
        let bmr = b.mr(16384);
        connect_xrc(&mut a, &ini, &mut b, &tgt, initiator_conn);
        Xrc {
            fabric,
            a,
            b,
            acq,
            scq,
            tcq,
            ini,
            tgt,
            xrcd,
            srq,
            bmr,
        }
    }
}

fn xrc_wr(op: WqeOpcode, mr: &Mr, off: usize, len: u32, srqn: u32) -> Wr {
    Wr {
        xrc_srqn: Some(srqn),
        ..wr(op, mr, off, len)
    }
}

fn an_xrc_send_lands_in_the_srq_its_header_names(link: LinkLayer) {
    let mut x = Xrc::new(link, Conn::default());
    let amr = x.a.mr(16384);
    let msg: Vec<u8> = (0..2500u32).map(|i| (i * 7 + 3) as u8).collect();
    x.a.write(&amr, 0, b"hello, xrc");
    x.a.write(&amr, 4096, &msg);
    let bmr = x.bmr;
    post_srq(&x.b, &mut x.srq, &bmr, 0, 64);
    post_srq(&x.b, &mut x.srq, &bmr, 4096, 4096);
    let srqn = x.srq.srqn;
    let mut s1 = xrc_wr(WqeOpcode::SendImm, &amr, 0, 10, srqn);
    s1.imm = 0x1234_5678;
    x.a.post_send(&mut x.ini, &s1);
    // 2500 bytes at an MTU of 1024: First, Middle, Last.
    x.a.post_send(&mut x.ini, &xrc_wr(WqeOpcode::Send, &amr, 4096, 2500, srqn));
    // An RDMA WRITE and READ through the target: the rkey is of the SRQ's PD, not the
    // target QP's.
    let mut w = xrc_wr(WqeOpcode::RdmaWrite, &amr, 0, 10, srqn);
    w.raddr = Some((bmr.iova + 8192, bmr.key));
    x.a.post_send(&mut x.ini, &w);
    let mut r = xrc_wr(WqeOpcode::RdmaRead, &amr, 12288, 10, srqn);
    r.raddr = Some((bmr.iova + 8192, bmr.key));
    x.a.post_send(&mut x.ini, &r);
    assert!(x.fabric.run_until_idle());
    let wc = x.a.poll_all(&mut x.acq);
    let ops: Vec<_> = wc.iter().map(|w| w.opcode).collect();
    assert_eq!(ops, vec![CqeOpcode::Req; 4], "{wc:?}");
    assert_eq!(x.a.read(&amr, 12288, 10), b"hello, xrc", "READ came back");
    assert_eq!(x.b.read(&bmr, 8192, 10), b"hello, xrc", "WRITE landed");
    // The receives completed on the SRQ's CQ, naming the target QP and the SRQ's index.
    let rx = x.b.poll_all(&mut x.scq);
    assert_eq!(rx.len(), 2, "{rx:?}");
    assert_eq!(rx[0].opcode, CqeOpcode::RespSendImm);
    assert_eq!(rx[0].imm(), 0x1234_5678);
    assert_eq!(rx[0].byte_cnt(), 10);
    assert_eq!(rx[1].opcode, CqeOpcode::RespSend);
    assert_eq!(rx[1].byte_cnt(), 2500);
    for (i, c) in rx.iter().enumerate() {
        assert_eq!(c.qpn(), x.tgt.qpn);
        assert_eq!(c.cqe.srqn.get() & 0x00ff_ffff, SRQ_USER_INDEX);
        assert_eq!(c.wqe_counter(), i as u16, "SRQ WQE index");
    }
    assert_eq!(x.b.read(&bmr, 0, 10), b"hello, xrc");
    assert_eq!(x.b.read(&bmr, 4096, 2500), msg);
    assert!(
        x.b.poll_all(&mut x.tcq).is_empty(),
        "nothing on the target's CQ"
    );
    assert_eq!(x.b.qp_state(&x.tgt), QpState::Rtr);
}

#[test]
fn an_xrc_send_lands_in_the_srq_its_header_names_infiniband() {
    an_xrc_send_lands_in_the_srq_its_header_names(LinkLayer::InfiniBand);
}

#[test]
fn an_xrc_send_lands_in_the_srq_its_header_names_roce() {
    an_xrc_send_lands_in_the_srq_its_header_names(LinkLayer::Ethernet);
}

/// An XRC SEND of five packets (at MTU 1024): its middle packets, built from the first
/// middle packet's headers, carry the XRCETH as a full emit would (byte for byte), and the
/// message lands whole in the SRQ's buffer.
fn a_long_xrc_send_keeps_its_xrceth_in_every_packet(link: LinkLayer) {
    let mut x = Xrc::new(link, Conn::default());
    let amr = x.a.mr(16384);
    let msg: Vec<u8> = (0..4196u32).map(|i| (i * 11 + 1) as u8).collect();
    x.a.write(&amr, 0, &msg);
    let bmr = x.bmr;
    post_srq(&x.b, &mut x.srq, &bmr, 0, 8192);
    let srqn = x.srq.srqn;
    x.a.post_send(&mut x.ini, &xrc_wr(WqeOpcode::Send, &amr, 0, 4196, srqn));
    let frames = x.a.h.hca.take_tx_frames();
    assert_eq!(frames.len(), 5, "first, three middle, last");
    for (i, f) in frames.iter().enumerate() {
        let xrceth = transport_of(link, f).xrceth;
        assert_eq!(xrceth.map(|h| h.xrc_srq), Some(srqn), "packet {i}");
        let again = full_emit(link, f);
        assert_eq!(&again, f, "packet {i} equals a full emit of its contents");
    }
    x.b.h.hca.receive_frames(&frames);
    assert!(x.fabric.run_until_idle());
    assert_eq!(x.a.poll_all(&mut x.acq).len(), 1);
    let rx = x.b.poll_all(&mut x.scq);
    assert_eq!(rx.len(), 1, "{rx:?}");
    assert_eq!(rx[0].byte_cnt(), 4196);
    assert_eq!(x.b.read(&bmr, 0, 4196), msg);
}

#[test]
fn a_long_xrc_send_keeps_its_xrceth_in_every_packet_infiniband() {
    a_long_xrc_send_keeps_its_xrceth_in_every_packet(LinkLayer::InfiniBand);
}

#[test]
fn a_long_xrc_send_keeps_its_xrceth_in_every_packet_roce() {
    a_long_xrc_send_keeps_its_xrceth_in_every_packet(LinkLayer::Ethernet);
}

/// A request naming an XRC SRQ of another domain is a remote access violation: NAK, the
/// initiator's WQE fails with a remote access error, the target goes to the error state
/// with a WQ access error event, and the other domain's SRQ is untouched.
#[test]
fn a_request_naming_an_srq_of_another_domain_is_refused() {
    let mut x = Xrc::new(LinkLayer::InfiniBand, Conn::default());
    let other = alloc_xrcd(&mut x.b.h);
    assert_ne!(other, x.xrcd);
    let mut ocq = x.b.cq(4);
    let bpd = x.b.pd;
    let mut osrq = xrc_srq(&mut x.b, other, bpd, &ocq);
    let bmr = x.bmr;
    post_srq(&x.b, &mut osrq, &bmr, 0, 64);
    let amr = x.a.mr(4096);
    x.a.write(&amr, 0, b"not yours");
    x.a.post_send(&mut x.ini, &xrc_wr(WqeOpcode::Send, &amr, 0, 9, osrq.srqn));
    assert!(x.fabric.run_until_idle());
    let wc = x.a.poll_all(&mut x.acq);
    assert_eq!(wc[0].opcode, CqeOpcode::ReqErr);
    assert_eq!(wc[0].syndrome(), CqeSyndrome::RemoteAccessErr);
    assert_eq!(x.a.qp_state(&x.ini), QpState::Err);
    assert_eq!(x.b.qp_state(&x.tgt), QpState::Err);
    assert_eq!(x.b.events(EventType::WqAccessError).len(), 1);
    assert!(x.b.poll_all(&mut ocq).is_empty());
    assert_ne!(x.b.read(&bmr, 0, 9), b"not yours");
    assert_eq!(x.b.h.hca.datapath_counters().naks_sent, 1);
}

/// An XRC SRQ without a posted WQE: the target answers RNR NAKs (the initiator retries for
/// ever with `rnr_retry` 7) until a WQE is posted, then the SEND completes.
#[test]
fn an_empty_xrc_srq_answers_rnr_until_a_wqe_is_posted() {
    let mut x = Xrc::new(LinkLayer::Ethernet, Conn::default());
    let amr = x.a.mr(4096);
    x.a.write(&amr, 0, b"late");
    let srqn = x.srq.srqn;
    x.a.post_send(&mut x.ini, &xrc_wr(WqeOpcode::Send, &amr, 0, 4, srqn));
    x.fabric.run_for(50_000_000);
    assert!(x.b.h.hca.datapath_counters().rnr_naks_sent >= 2);
    assert!(x.a.poll_all(&mut x.acq).is_empty());
    assert_eq!(x.a.qp_state(&x.ini), QpState::Rts);
    let bmr = x.bmr;
    post_srq(&x.b, &mut x.srq, &bmr, 100, 64);
    assert!(x.fabric.run_until_idle());
    assert_eq!(x.a.poll_all(&mut x.acq)[0].opcode, CqeOpcode::Req);
    let rx = x.b.poll_all(&mut x.scq);
    assert_eq!((rx.len(), rx[0].byte_cnt()), (1, 4));
    assert_eq!(x.b.read(&bmr, 100, 4), b"late");
}

#[test]
fn xrc_qp_creation_checks() {
    let fabric = Fabric::new(LinkLayer::InfiniBand);
    let mut n = Node::new(&fabric, LinkLayer::InfiniBand, 1);
    let cq = n.cq(4);
    let xrcd = alloc_xrcd(&mut n.h);
    let mut c = xrc_qp_in(xrcd + 40, n.pd, cq.cqn);
    c.qpc_mut()
        .set_uar_page(n.uar)
        .set_rq_type(3)
        .set_no_sq(true);
    assert_eq!(
        n.h.err(&c, &[]),
        (CmdStatus::BadParamErr, syndrome::BAD_XRCD)
    );
    // An XRC QP has no receive queue of its own.
    c.qpc_mut().set_xrcd(xrcd).set_rq_type(0);
    assert_eq!(
        n.h.err(&c, &[]),
        (CmdStatus::BadParamErr, syndrome::BAD_RQ_TYPE)
    );
    c.qpc_mut().set_rq_type(3);
    let qpn = n.h.ok(&c, &[]).qpn();
    // Its domain stays while it lives.
    let mut dx = DeallocXrcdIn::new_cmd();
    dx.set_xrcd(xrcd);
    assert_eq!(n.h.err(&dx, &[]).1, syndrome::OBJECT_IN_USE);
    let mut d = DestroyQpIn::new_cmd();
    d.set_qpn(qpn);
    n.h.ok(&d, &[]);
    n.h.ok(&dx, &[]);
}

/// tshark (4.0, which names the XRC opcodes but does not decode the XRCETH: it shows the
/// bytes after the BTH as vendor data) reads a capture of XRC traffic: the opcodes, QPs
/// and PSNs it decodes match, and each request's bytes after the BTH start with the XRCETH
/// (a reserved byte, the SRQ number) followed by the payload. The model's own checker
/// takes every frame as good.
#[test]
fn tshark_reads_a_capture_of_xrc_traffic() {
    let mut x = Xrc::new(LinkLayer::Ethernet, Conn::default());
    let path = std::env::temp_dir().join(format!("uhca-xrc-{}.pcap", std::process::id()));
    x.fabric.capture_file(&path).unwrap();
    let amr = x.a.mr(4096);
    x.a.write(&amr, 0, b"captured");
    let bmr = x.bmr;
    post_srq(&x.b, &mut x.srq, &bmr, 0, 64);
    let srqn = x.srq.srqn;
    x.a.post_send(&mut x.ini, &xrc_wr(WqeOpcode::Send, &amr, 0, 8, srqn));
    assert!(x.fabric.run_until_idle());
    assert_eq!(x.fabric.stop_capture().unwrap(), 2, "the SEND and its ACK");
    assert_eq!(x.a.poll_all(&mut x.acq).len(), 1);
    // Our checker: both frames good, XRC SEND Only (0xA4) and XRC Acknowledge (0xB1).
    let mut rd = PcapReader::new(std::fs::File::open(&path).unwrap()).unwrap();
    let mut ops = Vec::new();
    while let Some(p) = rd.next_packet().unwrap() {
        match uhca_mock::wire::check::check(p.link_type, &p.data) {
            uhca_mock::wire::check::Verdict::Good(op) => ops.push(op),
            v => panic!("{v:?}"),
        }
    }
    assert_eq!(ops, vec![0xa4, 0xb1]);
    match std::process::Command::new("tshark")
        .arg("--version")
        .output()
    {
        Ok(o) if o.status.success() => {}
        _ => {
            if std::env::var("UHCA_REQUIRE_TSHARK").as_deref() == Ok("1") {
                panic!("UHCA_REQUIRE_TSHARK=1 but tshark is not installed");
            }
            eprintln!("SKIPPED: tshark is not installed (set UHCA_REQUIRE_TSHARK=1 to fail)");
            return;
        }
    }
    let out = std::process::Command::new("tshark")
        .args(["--disable-protocol", "rpcordma", "-r"])
        .arg(&path)
        .args(["-T", "fields", "-E", "separator=|"])
        .args(["-e", "infiniband.bth.opcode", "-e", "infiniband.bth.destqp"])
        .args(["-e", "infiniband.bth.psn", "-e", "infiniband.vendor"])
        .output()
        .expect("run tshark");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(rows.len(), 2, "{text}");
    let psn = Conn::default().psn;
    assert_eq!(rows[0][0], "164", "XRC SEND Only: {text}");
    assert_eq!(rows[0][1], format!("0x{:06x}", x.tgt.qpn), "{text}");
    assert_eq!(rows[0][2], psn.to_string(), "{text}");
    let want = format!("00{:06x}{}", srqn, hex(b"captured"));
    // tshark lists the unknown bytes twice: the first dword, then all of them.
    assert!(
        rows[0][3].split(',').any(|v| v.starts_with(&want)),
        "XRCETH and payload after the BTH: {} (want {want}...)",
        rows[0][3]
    );
    assert_eq!(rows[1][0], "177", "XRC Acknowledge: {text}");
    assert_eq!(rows[1][1], format!("0x{:06x}", x.ini.qpn), "{text}");
    assert_eq!(rows[1][2], psn.to_string(), "{text}");
    // The ACK's bytes after the BTH: the AETH, an ACK with credit code 31 and MSN 1 (no
    // XRCETH in a response).
    assert!(
        rows[1][3].split(',').any(|v| v.starts_with("1f000001")),
        "{text}"
    );
    let _ = std::fs::remove_file(&path);
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One target serves every XRC SRQ of its domain: each message goes to the SRQ its XRCETH
/// names and completes on that SRQ's CQ; an XRC SRQ's limit, armed with ARM_XRC_SRQ,
/// raises SRQ_RQ_LIMIT (with the SRQ's number) when its WQEs run low.
#[test]
fn one_target_feeds_each_srq_of_its_domain() {
    let mut x = Xrc::new(LinkLayer::InfiniBand, Conn::default());
    let mut cq2 = x.b.cq(4);
    let bpd = x.b.pd;
    let xrcd = x.xrcd;
    let mut srq2 = xrc_srq(&mut x.b, xrcd, bpd, &cq2);
    let bmr = x.bmr;
    post_srq(&x.b, &mut x.srq, &bmr, 0, 64);
    post_srq(&x.b, &mut srq2, &bmr, 1024, 64);
    post_srq(&x.b, &mut srq2, &bmr, 2048, 64);
    let mut a = ArmXrcSrqIn::new_cmd();
    a.set_op_mod(ARM_XRC_SRQ_OP_MOD_XRC_SRQ)
        .set_xrc_srqn(srq2.srqn)
        .set_lwm(2);
    x.b.h.ok(&a, &[]);
    let amr = x.a.mr(4096);
    x.a.write(&amr, 0, b"to one");
    x.a.write(&amr, 64, b"to two");
    let (one, two) = (x.srq.srqn, srq2.srqn);
    x.a.post_send(&mut x.ini, &xrc_wr(WqeOpcode::Send, &amr, 64, 6, two));
    x.a.post_send(&mut x.ini, &xrc_wr(WqeOpcode::Send, &amr, 0, 6, one));
    assert!(x.fabric.run_until_idle());
    assert_eq!(x.a.poll_all(&mut x.acq).len(), 2);
    let c1 = x.b.poll_all(&mut x.scq);
    let c2 = x.b.poll_all(&mut cq2);
    assert_eq!((c1.len(), c2.len()), (1, 1));
    assert_eq!(c2[0].wqe_counter(), 0);
    assert_eq!(x.b.read(&bmr, 1024, 6), b"to two");
    assert_eq!(x.b.read(&bmr, 0, 6), b"to one");
    // srq2 had 2 WQEs and a limit of 2: one taken leaves 1 < 2.
    let lim = x.b.events(EventType::SrqRqLimit);
    assert_eq!(lim.len(), 1);
    let d: &uhca_fwif::eqe::EqeQpSrq = lim[0].data_as();
    assert_eq!((d.r#type, d.qp_srq_n.get() & 0x00ff_ffff), (1, two));
    let mut q = QueryXrcSrqIn::new_cmd();
    q.set_xrc_srqn(two);
    assert_eq!(
        x.b.h.ok(&q, &[]).xrc_srq_context_entry().lwm(),
        0,
        "disarmed"
    );
    // A target names SRQs per message, not in its context: no QP holds this one, so it
    // can be destroyed (a later message naming it would be refused like another domain's).
    let mut d = DestroyXrcSrqIn::new_cmd();
    d.set_xrc_srqn(two);
    x.b.h.ok(&d, &[]);
}

/// On a lossy fabric (frames dropped, duplicated, reordered) XRC recovers as RC does:
/// timeouts and sequence NAKs resend, duplicates are answered without a second delivery,
/// and every message arrives once, in order, intact, in the SRQ it names.
#[test]
fn xrc_recovers_from_loss_like_rc() {
    let conn = Conn {
        ack_timeout: 8,
        ..Conn::default()
    };
    let mut x = Xrc::new(LinkLayer::Ethernet, conn);
    x.fabric
        .set_faults(uhca_mock::FaultConfig::lossy(0x5eed, 60));
    let amr = x.a.mr(12 * 4096);
    let bmr = x.bmr;
    let n = 12u32;
    for i in 0..n {
        let msg: Vec<u8> = (0..1000u32).map(|j| (i * 13 + j) as u8).collect();
        x.a.write(&amr, i as usize * 4096, &msg);
        // Receive WQE i gets KiB i of the target's region.
        post_srq(&x.b, &mut x.srq, &bmr, i as u64 * 1024, 1024);
    }
    let srqn = x.srq.srqn;
    for i in 0..n {
        x.a.post_send(
            &mut x.ini,
            &xrc_wr(WqeOpcode::Send, &amr, i as usize * 4096, 1000, srqn),
        );
    }
    assert!(x.fabric.run_until_idle());
    let wc = x.a.poll_all(&mut x.acq);
    assert_eq!(wc.len(), n as usize);
    assert!(wc.iter().all(|w| w.opcode == CqeOpcode::Req), "{wc:?}");
    let rx = x.b.poll_all(&mut x.scq);
    assert_eq!(rx.len(), n as usize, "each message delivered once");
    for (i, c) in rx.iter().enumerate() {
        assert_eq!((c.opcode, c.byte_cnt()), (CqeOpcode::RespSend, 1000));
        assert_eq!(c.wqe_counter(), i as u16, "in order");
        let want: Vec<u8> = (0..1000u32).map(|j| (i as u32 * 13 + j) as u8).collect();
        assert_eq!(x.b.read(&bmr, i * 1024, 1000), want, "message {i}");
    }
    let f = x.fabric.counters();
    let ad = x.a.h.hca.datapath_counters();
    assert!(
        ad.retransmitted_packets > 0,
        "the faults cost retransmissions: {f:?} {ad:?}"
    );
}

/// An InfiniBand node whose firmware stays at ISSI 0 (no SET_ISSI), as `Node::new` brings
/// one up otherwise.
fn issi0_node(fabric: &Fabric, n: u8) -> Node {
    let mac = [0x02, 0xc0, 0xff, 0xee, 0x00, n];
    let mut h = Harness::initialized_at_issi(
        MockConfig {
            mac,
            ..MockConfig::infiniband()
        },
        0,
    );
    h.give_outstanding(QueryPagesOpMod::RegularPages);
    let uar = h.alloc_uar();
    let pd = h.alloc_pd();
    let eq = h.create_eq(uar, 6, &[EventType::WqAccessError, EventType::SrqRqLimit]);
    fabric.attach(&h.hca);
    Node {
        h,
        uar,
        pd,
        eq,
        ip: [0; 4],
        mac,
        link: LinkLayer::InfiniBand,
        keep: Vec::new(),
        ip6: [0; 16],
    }
}

/// At ISSI 0 an XRC SRQ is a CREATE_SRQ with `srqc.xrcd` and `srqc.cqn` (how Linux makes
/// one on such firmware): a target delivers into it and completes on its CQ, with the
/// SRQ's number in the CQE (`srqc` has no user index).
#[test]
fn an_issi_0_xrc_srq_takes_xrc_sends() {
    let fabric = Fabric::new(LinkLayer::InfiniBand);
    let mut a = Node::new(&fabric, LinkLayer::InfiniBand, 1);
    let mut b = issi0_node(&fabric, 2);
    let (mut acq, mut ini) = initiator(&mut a, 6);
    let mut scq = b.cq(6);
    let mut tcq = b.cq(4);
    let xb = alloc_xrcd(&mut b.h);
    let bpd = b.pd;
    let tgt = xrc_qp(&mut b, xb, bpd, &tcq, false);
    let buf = keep(&mut b, 16 * 64);
    let dbr = keep(&mut b, 64);
    let c = create_srq_in(4, xb, scq.cqn, bpd, dbr);
    let srqn = b.h.ok(&c, &pas_bytes(&[buf])).srqn();
    let mut srq = TestSrq::new(srqn, buf, dbr);
    let bmr = b.mr(4096);
    post_srq(&b, &mut srq, &bmr, 0, 64);
    connect_xrc(&mut a, &ini, &mut b, &tgt, Conn::default());
    let amr = a.mr(4096);
    a.write(&amr, 0, b"issi zero");
    a.post_send(&mut ini, &xrc_wr(WqeOpcode::Send, &amr, 0, 9, srqn));
    assert!(fabric.run_until_idle());
    assert_eq!(a.poll_all(&mut acq)[0].opcode, CqeOpcode::Req);
    let rx = b.poll_all(&mut scq);
    assert_eq!(rx.len(), 1);
    assert_eq!(rx[0].qpn(), tgt.qpn);
    assert_eq!(rx[0].cqe.srqn.get() & 0x00ff_ffff, srqn);
    assert_eq!(b.read(&bmr, 0, 9), b"issi zero");
    assert!(
        b.poll_all(&mut tcq).is_empty(),
        "nothing on the target's CQ"
    );
}

/// X1: Linux creates an XRC target QP in the kernel (`ibv_xsrq_pingpong`'s receive QP) with
/// no send queue, its receive side "SRQ" naming a placeholder XRC SRQ of the driver's own
/// domain, and no UAR page, doorbell record or page list: `uar_page` and `dbr_addr` are 0.
/// The model refused the UAR (BAD_UAR); a QP without a send queue rings no doorbell. The
/// target then takes XRC SENDs into the SRQ of its domain that each request names.
#[test]
fn an_xrc_target_created_as_linux_does_without_uar_or_doorbell_record_receives() {
    let link = LinkLayer::InfiniBand;
    let fabric = Fabric::new(link);
    let mut a = Node::new(&fabric, link, 1);
    let mut b = Node::new(&fabric, link, 2);
    let (mut acq, mut ini) = initiator(&mut a, 6);
    let mut scq = b.cq(6);
    let mut tcq = b.cq(4);
    // The driver's own domain and placeholder XRC SRQ, then the user's domain.
    let bpd = b.pd;
    let x0 = alloc_xrcd(&mut b.h);
    let s0 = xrc_srq(&mut b, x0, bpd, &tcq);
    let xrcd = alloc_xrcd(&mut b.h);
    let mut c = xrc_qp_in(xrcd, bpd, tcq.cqn);
    c.qpc_mut()
        .set_rq_type(1)
        .set_no_sq(true)
        .set_srqn_rmpn_xrqn(s0.srqn);
    assert_eq!(c.qpc().uar_page(), 0);
    assert_eq!(c.qpc().dbr_addr(), 0);
    let tgt = Qp::without_rq(b.h.ok(&c, &[]).qpn(), QpServiceType::Xrc, 0, 0, 0);
    let mut srq = xrc_srq(&mut b, xrcd, bpd, &scq);
    let bmr = b.mr(4096);
    connect_xrc(&mut a, &ini, &mut b, &tgt, Conn::default());
    post_srq(&b, &mut srq, &bmr, 0, 64);
    let amr = a.mr(4096);
    a.write(&amr, 0, b"to a kernel target");
    a.post_send(&mut ini, &xrc_wr(WqeOpcode::Send, &amr, 0, 18, srq.srqn));
    assert!(fabric.run_until_idle());
    let sent = a.poll_all(&mut acq);
    assert_eq!(sent.len(), 1, "{sent:?}");
    assert_eq!(sent[0].opcode, CqeOpcode::Req, "{sent:?}");
    let got = b.poll_all(&mut scq);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].opcode, CqeOpcode::RespSend);
    assert_eq!(got[0].qpn(), tgt.qpn);
    assert_eq!(b.read(&bmr, 0, 18), b"to a kernel target");
    assert!(
        b.poll_all(&mut tcq).is_empty(),
        "nothing on the placeholder's CQ"
    );
}

/// Issue 31 F1: an XRC SRQ whose buffer starts `page_offset` 64ths of a page into its first
/// page (Linux's CREATE_XRC_SRQ for a user buffer): the page list covers the offset, and a
/// send through the target lands through the WQE at the offset.
#[test]
fn an_xrc_srq_that_starts_inside_its_first_page_receives() {
    let mut x = Xrc::new(LinkLayer::InfiniBand, Conn::default());
    // 16 WQEs of 64 bytes from 60/64 of the first page: two pages.
    let start = 60 * 4096 / 64;
    let pages = keep(&mut x.b, 8192);
    let dbr = keep(&mut x.b, 64);
    let mut c = create_xrc_srq_in(4, x.xrcd, x.scq.cqn, x.b.pd, SRQ_USER_INDEX, dbr);
    c.xrc_srq_context_entry_mut().set_page_offset(60);
    let short = x.b.h.exec(&c, &pas_bytes(&[pages]));
    assert_eq!(
        short.status(),
        CmdStatus::BadInpLenErr,
        "one page is too few"
    );
    let srqn = x.b.h.ok(&c, &pas_bytes(&[pages, pages + 4096])).xrc_srqn();
    let mut srq = TestSrq::new(srqn, pages + start as u64, dbr);
    let bmr = x.bmr;
    post_srq(&x.b, &mut srq, &bmr, 0, 64);
    let amr = x.a.mr(4096);
    x.a.write(&amr, 0, b"offset srq");
    x.a.post_send(&mut x.ini, &xrc_wr(WqeOpcode::Send, &amr, 0, 10, srqn));
    assert!(x.fabric.run_until_idle());
    assert_eq!(x.a.poll_all(&mut x.acq).len(), 1);
    let rx = x.b.poll_all(&mut x.scq);
    assert_eq!(rx.len(), 1, "{rx:?}");
    assert_eq!(rx[0].opcode, CqeOpcode::RespSend);
    assert_eq!(x.b.read(&bmr, 0, 10), b"offset srq");
}
