//! The reserved lkey (QUERY_SPECIAL_CONTEXTS' `resd_lkey`) on the mock: the driver asks the
//! firmware for it, a QP created with `rlky` honours it, and a scatter/gather entry with it
//! names a raw IOVA. Inside memory the driver mapped it carries the bytes both ways (SEND
//! gather, RECV scatter); at an IOVA nothing maps the device's access is an IOMMU fault,
//! which the mock logs, and the work request completes in error with no memory changed:
//! a gather fault is a local access error for the sender (nothing goes on the wire), a
//! scatter fault a local access error for the receiver and a NAK (remote operational
//! error) for the sender. On a QP created without `rlky` the key is no key at all, and
//! neither is it for a receive through an SRQ (created without `srqc.rlky`).

use uhca_driver::Error;
use uhca_driver::verbs::{
    QpInitAttr, Rc, RecvWr, ReservedLkey, RtsAttr, SendOp, SendWr, WcStatus, WorkCompletion,
};
use uhca_fwif::consts::{CmdOpcode, QpState};
use uhca_hal::DmaMem;
use uhca_mock::{Fabric, FaultKind, LinkLayer};

mod common;

use common::*;

/// An IOVA the mock never maps: its allocator hands out IOVAs from
/// `uhca_mock::iommu::IOVA_BASE` (0xf0_0000_0000) upwards, and nothing is mapped below.
const UNMAPPED: u64 = 0x0000_0007_dead_0000;

/// A node's QP created with the reserved lkey allowed, in INIT.
fn rlky_qp(n: &mut Node, key: &ReservedLkey) -> uhca_driver::verbs::Qp<P, Rc> {
    let attr = QpInitAttr {
        send_cq: &n.cq,
        recv_cq: &n.cq,
        srq: None,
        cap: caps(),
    };
    let mut qp = n
        .hca
        .create_qp_with_reserved_lkey::<Rc>(&n.pd, &attr, key)
        .expect("CREATE_QP with rlky");
    let access = qp_access(&n.hca);
    qp.to_init(
        &mut n.hca,
        uhca_driver::verbs::InitAttr {
            access,
            ..Default::default()
        },
    )
    .unwrap();
    qp
}

/// Two nodes whose connected RC QPs both honour the reserved lkey, with each node's key.
fn rlky_pair(link: LinkLayer) -> (Fabric, Node, Node, RcRts, RcRts, ReservedLkey, ReservedLkey) {
    let fabric = Fabric::new(link);
    let mut a = node(&fabric, 1);
    let mut b = node(&fabric, 2);
    let ka = a.hca.reserved_lkey().expect("QUERY_SPECIAL_CONTEXTS");
    let kb = b.hca.reserved_lkey().expect("QUERY_SPECIAL_CONTEXTS");
    let qa = rlky_qp(&mut a, &ka);
    let qb = rlky_qp(&mut b, &kb);
    let (na, nb) = (qa.qpn(), qb.qpn());
    let qa = connect(&fabric, &mut a, qa, &b, nb, RtsAttr::default());
    let qb = connect(&fabric, &mut b, qb, &a, na, RtsAttr::default());
    (fabric, a, b, qa, qb, ka, kb)
}

/// Every byte of a node's registered buffer.
fn snapshot(n: &Node) -> Vec<u8> {
    let mut v = vec![0u8; n.mr.mem().len()];
    n.mr.mem().read_bytes(0, &mut v);
    v
}

fn statuses(wc: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wc.iter().map(|c| (c.wr_id, c.status)).collect()
}

#[test]
fn the_key_is_what_query_special_contexts_reports_and_belongs_to_its_hca() {
    let fabric = Fabric::new(LinkLayer::Ethernet);
    let mut a = node(&fabric, 1);
    let mut b = node(&fabric, 2);
    let key = a.hca.reserved_lkey().unwrap();
    assert_eq!(key.key(), uhca_mock::firmware::RESERVED_LKEY);
    assert!(
        a.dev
            .last_command(CmdOpcode::QuerySpecialContexts)
            .is_some()
    );
    let sge = key.sge(0x1234_5678, 99);
    assert_eq!(
        (sge.addr, sge.len, sge.lkey),
        (0x1234_5678, 99, key.key()),
        "the entry is the raw IOVA with the key"
    );
    // A key asked of one HCA makes no QP on another.
    let attr = QpInitAttr {
        send_cq: &b.cq,
        recv_cq: &b.cq,
        srq: None,
        cap: caps(),
    };
    let r = b.hca.create_qp_with_reserved_lkey::<Rc>(&b.pd, &attr, &key);
    assert!(matches!(r, Err(Error::WrongHca)), "{r:?}");
}

fn gather_and_scatter_inside_mapped_memory(link: LinkLayer) {
    let (fabric, mut a, mut b, mut qa, mut qb, ka, kb) = rlky_pair(link);
    let pattern: Vec<u8> = (0..300u32).map(|i| (i * 13 + 5) as u8).collect();
    a.mr.mem_mut().write_bytes(100, &pattern);
    // B receives through its reserved lkey too, at an IOVA inside its own buffer.
    let rsge = [kb.sge(b.mr.iova() + 2048, 512)];
    qb.post_recv(&[RecvWr {
        wr_id: 7,
        sg_list: &rsge,
    }])
    .unwrap();
    let ssge = [ka.sge(a.mr.iova() + 100, 300)];
    qa.post_send(&[SendWr::new(1, SendOp::Send, &ssge)])
        .unwrap();
    run(&fabric);
    assert_eq!(statuses(&poll(&mut a)), [(1, WcStatus::Success)]);
    let wb = poll(&mut b);
    assert_eq!(statuses(&wb), [(7, WcStatus::Success)]);
    assert_eq!(wb[0].byte_len, 300);
    let mut got = vec![0u8; 300];
    b.mr.mem().read_bytes(2048, &mut got);
    assert_eq!(
        got, pattern,
        "the bytes gathered at A's IOVA landed at B's IOVA"
    );
    assert!(
        a.dev.iommu_faults().is_empty(),
        "{:?}",
        a.dev.iommu_faults()
    );
    assert!(
        b.dev.iommu_faults().is_empty(),
        "{:?}",
        b.dev.iommu_faults()
    );
}

#[test]
fn a_send_through_the_reserved_lkey_inside_mapped_memory_carries_the_bytes_roce() {
    gather_and_scatter_inside_mapped_memory(LinkLayer::Ethernet);
}

#[test]
fn a_send_through_the_reserved_lkey_inside_mapped_memory_carries_the_bytes_ib() {
    gather_and_scatter_inside_mapped_memory(LinkLayer::InfiniBand);
}

#[test]
fn a_send_gathered_from_an_unmapped_iova_is_an_iommu_fault_and_a_local_access_error() {
    let (fabric, mut a, mut b, mut qa, mut qb, ka, _) = rlky_pair(LinkLayer::Ethernet);
    assert!(!a.dev.is_mapped(UNMAPPED, 256), "the IOVA is unmapped");
    let rsge = [b.mr.sge(0, 1024).unwrap()];
    qb.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: &rsge,
    }])
    .unwrap();
    let (before_a, before_b) = (snapshot(&a), snapshot(&b));
    let sent_before = fabric.counters();
    let bad = [ka.sge(UNMAPPED, 256)];
    let good = [a.mr.sge(0, 64).unwrap()];
    qa.post_send(&[
        SendWr::new(1, SendOp::Send, &bad),
        SendWr::new(2, SendOp::Send, &good),
    ])
    .unwrap();
    run(&fabric);
    assert_eq!(
        statuses(&poll(&mut a)),
        [(1, WcStatus::LocalAccess), (2, WcStatus::WrFlushed)],
        "the faulting gather completes in error and puts the QP in error"
    );
    assert_eq!(a.dev.qp_state(qa.qpn()), Some(QpState::Err));
    assert!(poll(&mut b).is_empty(), "nothing reached B");
    assert_eq!(fabric.counters(), sent_before, "nothing went on the wire");
    assert_eq!(snapshot(&a), before_a);
    assert_eq!(snapshot(&b), before_b);
    let faults = a.dev.iommu_faults();
    assert_eq!(faults.len(), 1, "{faults:?}");
    let f = faults[0];
    assert_eq!(
        (f.iova, f.write, f.kind, f.context),
        (UNMAPPED, false, FaultKind::Unmapped, "data (gather)")
    );
}

#[test]
fn a_recv_scattering_to_an_unmapped_iova_fails_both_sides_and_changes_no_memory() {
    let (fabric, mut a, mut b, mut qa, mut qb, _, kb) = rlky_pair(LinkLayer::InfiniBand);
    let bad = [kb.sge(UNMAPPED, 1024)];
    qb.post_recv(&[RecvWr {
        wr_id: 5,
        sg_list: &bad,
    }])
    .unwrap();
    let pattern: Vec<u8> = (0..256u32).map(|i| (i ^ 0xa5) as u8).collect();
    a.mr.mem_mut().write_bytes(0, &pattern);
    let (before_a, before_b) = (snapshot(&a), snapshot(&b));
    let src = [a.mr.sge(0, 256).unwrap()];
    qa.post_send(&[SendWr::new(1, SendOp::Send, &src)]).unwrap();
    run(&fabric);
    assert_eq!(
        statuses(&poll(&mut b)),
        [(5, WcStatus::LocalAccess)],
        "the receiver's WQE completes in error"
    );
    assert_eq!(
        statuses(&poll(&mut a)),
        [(1, WcStatus::RemoteOperation)],
        "the responder NAKed with a remote operational error"
    );
    assert_eq!(b.dev.qp_state(qb.qpn()), Some(QpState::Err));
    assert_eq!(a.dev.qp_state(qa.qpn()), Some(QpState::Err));
    assert_eq!(snapshot(&a), before_a);
    assert_eq!(
        snapshot(&b),
        before_b,
        "nothing landed in B's mapped memory"
    );
    let faults = b.dev.iommu_faults();
    assert_eq!(faults.len(), 1, "{faults:?}");
    let f = faults[0];
    assert_eq!(
        (f.iova, f.write, f.kind, f.context),
        (UNMAPPED, true, FaultKind::Unmapped, "data (scatter)")
    );
    assert!(a.dev.iommu_faults().is_empty());
}

#[test]
fn on_a_qp_created_without_rlky_the_reserved_lkey_is_a_local_protection_error() {
    let (fabric, mut a, mut b, mut qa, mut qb) = rc_pair(LinkLayer::Ethernet, RtsAttr::default());
    let ka = a.hca.reserved_lkey().unwrap();
    let rsge = [b.mr.sge(0, 1024).unwrap()];
    qb.post_recv(&[RecvWr {
        wr_id: 3,
        sg_list: &rsge,
    }])
    .unwrap();
    // Inside A's own buffer, which a QP with `rlky` would gather from.
    let sge = [ka.sge(a.mr.iova(), 64)];
    qa.post_send(&[SendWr::new(1, SendOp::Send, &sge)]).unwrap();
    run(&fabric);
    assert_eq!(statuses(&poll(&mut a)), [(1, WcStatus::LocalProtection)]);
    assert!(poll(&mut b).is_empty());
    assert!(a.dev.iommu_faults().is_empty(), "refused before any DMA");
}

#[test]
fn a_receive_through_an_srq_cannot_use_the_reserved_lkey_even_on_a_qp_with_rlky() {
    // SRQs are created without `srqc.rlky` (and at ISSI 1 they are RMPs, whose context has
    // no such bit): the receive WQE's key is the SRQ's business, not the QP's.
    let fabric = Fabric::new(LinkLayer::Ethernet);
    let mut a = node(&fabric, 1);
    let mut b = node(&fabric, 2);
    let ka = a.hca.reserved_lkey().unwrap();
    let kb = b.hca.reserved_lkey().unwrap();
    let mut srq = b
        .hca
        .create_srq(
            &b.pd,
            uhca_driver::verbs::SrqInitAttr {
                max_wr: 3,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    let attr = QpInitAttr {
        send_cq: &b.cq,
        recv_cq: &b.cq,
        srq: Some(&srq),
        cap: uhca_driver::verbs::QpCaps {
            max_recv_wr: 0,
            max_recv_sge: 0,
            ..caps()
        },
    };
    let access = qp_access(&b.hca);
    let mut qb = b
        .hca
        .create_qp_with_reserved_lkey::<Rc>(&b.pd, &attr, &kb)
        .unwrap();
    qb.to_init(
        &mut b.hca,
        uhca_driver::verbs::InitAttr {
            access,
            ..Default::default()
        },
    )
    .unwrap();
    let qa = rlky_qp(&mut a, &ka);
    let (na, nb) = (qa.qpn(), qb.qpn());
    let mut qa = connect(&fabric, &mut a, qa, &b, nb, RtsAttr::default());
    let qb = connect(&fabric, &mut b, qb, &a, na, RtsAttr::default());
    // Inside B's own buffer: through the QP's own receive queue this would work.
    let rsge = [kb.sge(b.mr.iova() + 1024, 512)];
    srq.post_recv(&[RecvWr {
        wr_id: 8,
        sg_list: &rsge,
    }])
    .unwrap();
    let before_b = snapshot(&b);
    let src = [a.mr.sge(0, 128).unwrap()];
    qa.post_send(&[SendWr::new(1, SendOp::Send, &src)]).unwrap();
    run(&fabric);
    assert_eq!(statuses(&poll(&mut b)), [(8, WcStatus::LocalProtection)]);
    assert_eq!(statuses(&poll(&mut a)), [(1, WcStatus::RemoteOperation)]);
    assert_eq!(snapshot(&b), before_b);
    assert!(b.dev.iommu_faults().is_empty(), "refused before any DMA");
    drop(qb);
}
