//! The QP's state checked at run time: what a user of `Qp<P, T>` sees of the IB state
//! table, of posting in the wrong state, and of the device moving a QP to ERR.

mod common;

use common::*;
use uhca_driver::verbs::{
    InitAttr, InitModifyAttr, Qp, Rc, RtrAttr, RtsAttr, RtsModifyAttr, SendOp, SendWr, WcStatus,
    WrError,
};
use uhca_driver::{AsyncEvent, Error};
use uhca_fwif::consts::{AccessFlags, EventType, IbMtu, QpState};
use uhca_hal::dma::DmaMem;
use uhca_mock::{Fabric, LinkLayer};

/// RDMA WRITEs 64 bytes of `byte` from `a`'s MR to `b`'s over `qa`; the completion's
/// status, and whether the bytes arrived.
fn write(
    fabric: &Fabric,
    a: &mut Node,
    qa: &mut Qp<P, Rc>,
    b: &Node,
    byte: u8,
) -> (WcStatus, bool) {
    a.mr.mem_mut().write_bytes(0, &[byte; 64]);
    let sge = [a.mr.sge(0, 64).unwrap()];
    let wr = SendWr::new(
        u64::from(byte),
        SendOp::RdmaWrite {
            remote_addr: b.mr.iova() + 256,
            rkey: b.mr.rkey(),
        },
        &sge,
    );
    qa.post_send(&[wr]).unwrap();
    run(fabric);
    let wc = poll(a);
    assert_eq!(wc.len(), 1, "one completion: {wc:?}");
    let mut got = [0u8; 64];
    b.mr.mem().read_bytes(256, &mut got);
    (wc[0].status, got == [byte; 64])
}

#[test]
fn an_illegal_transition_is_refused_with_from_and_to_and_the_qp_still_works() {
    let (fabric, mut a, b, mut qa, _qb) = rc_pair(LinkLayer::Ethernet, RtsAttr::default());
    assert_eq!(qa.state(), QpState::Rts);
    let sent = a.dev.command_log().len();
    // RTS -> INIT and RTS -> RTR are not in the IB state table.
    let e = qa.to_init(&mut a.hca, InitAttr::default()).unwrap_err();
    assert_eq!(
        e,
        Error::IllegalTransition {
            from: QpState::Rts,
            to: QpState::Init
        }
    );
    assert!(
        e.to_string().contains("RTS") && e.to_string().contains("INIT"),
        "{e}"
    );
    let e = qa.to_rtr(&mut a.hca, RtrAttr::default()).unwrap_err();
    assert_eq!(
        e,
        Error::IllegalTransition {
            from: QpState::Rts,
            to: QpState::Rtr
        }
    );
    // connect() starts from RESET only.
    let e = qa
        .connect(
            &mut a.hca,
            &InitAttr::default(),
            &RtrAttr::default(),
            &RtsAttr::default(),
        )
        .unwrap_err();
    assert!(
        matches!(
            e,
            Error::IllegalTransition {
                from: QpState::Rts,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(a.dev.command_log().len(), sent, "nothing was sent");
    assert_eq!(qa.state(), QpState::Rts, "nothing changed");
    assert_eq!(qa.query(&mut a.hca).unwrap().state, QpState::Rts);
    // And the QP still moves data.
    assert_eq!(
        write(&fabric, &mut a, &mut qa, &b, 0x5a),
        (WcStatus::Success, true)
    );
}

/// A connection whose QP lives in a field through every state.
struct Conn {
    qp: Qp<P, Rc>,
}

fn bring_up(fabric: &Fabric, n: &mut Node, conn: &mut Conn, peer: &Node, peer_qpn: u32, psn: u32) {
    let init = InitAttr {
        access: qp_access(&n.hca),
        ..InitAttr::default()
    };
    let rtr = RtrAttr {
        path_mtu: IbMtu::Mtu1024,
        dest_qpn: peer_qpn,
        rq_psn: psn,
        ah: path(fabric, peer),
        ..RtrAttr::default()
    };
    let rts = RtsAttr {
        sq_psn: psn,
        ..RtsAttr::default()
    };
    conn.qp.connect(&mut n.hca, &init, &rtr, &rts).unwrap();
    assert_eq!(conn.qp.state(), QpState::Rts);
}

#[test]
fn a_qp_in_a_struct_field_goes_through_err_and_reset_and_moves_data_again() {
    let fabric = Fabric::new(LinkLayer::Ethernet);
    let mut a = node(&fabric, 1);
    let mut b = node(&fabric, 2);
    let mut ca = Conn {
        qp: a.hca.create_qp::<Rc>(&a.pd, &on_cq(&a.cq, caps())).unwrap(),
    };
    let mut cb = Conn {
        qp: b.hca.create_qp::<Rc>(&b.pd, &on_cq(&b.cq, caps())).unwrap(),
    };
    assert_eq!(ca.qp.state(), QpState::Rst);
    let (na, nb) = (ca.qp.qpn(), cb.qp.qpn());
    bring_up(&fabric, &mut a, &mut ca, &b, nb, 0x100);
    bring_up(&fabric, &mut b, &mut cb, &a, na, 0x100);
    assert_eq!(
        write(&fabric, &mut a, &mut ca.qp, &b, 1),
        (WcStatus::Success, true)
    );

    // RTS -> ERR: posting is refused, the device has it in ERR.
    ca.qp.to_err(&mut a.hca).unwrap();
    assert_eq!(ca.qp.state(), QpState::Err);
    assert_eq!(a.dev.qp_state(na), Some(QpState::Err));
    let sge = [a.mr.sge(0, 8).unwrap()];
    let bad = ca
        .qp
        .post_send(&[SendWr::new(9, SendOp::Send, &sge)])
        .unwrap_err();
    assert_eq!(bad.error, WrError::QpInError { qpn: na });
    // ERR -> RTS is not a transition.
    assert!(matches!(
        ca.qp.to_rts(&mut a.hca, RtsAttr::default()),
        Err(Error::IllegalTransition {
            from: QpState::Err,
            to: QpState::Rts
        })
    ));

    // ERR -> RESET -> RTS on both sides (fresh PSNs), and data moves again.
    ca.qp.to_reset(&mut a.hca).unwrap();
    cb.qp.to_reset(&mut b.hca).unwrap();
    assert_eq!(ca.qp.state(), QpState::Rst);
    assert_eq!(a.dev.qp_state(na), Some(QpState::Rst));
    bring_up(&fabric, &mut a, &mut ca, &b, nb, 0x200);
    bring_up(&fabric, &mut b, &mut cb, &a, na, 0x200);
    assert_eq!(
        write(&fabric, &mut a, &mut ca.qp, &b, 2),
        (WcStatus::Success, true)
    );
}

#[test]
fn posting_on_a_qp_in_init_is_refused_and_receives_are_taken() {
    let fabric = Fabric::new(LinkLayer::Ethernet);
    let mut a = node(&fabric, 1);
    let mut qp = rc_qp(&mut a);
    assert_eq!(qp.state(), QpState::Init);
    let sge = [a.mr.sge(0, 64).unwrap()];
    let bad = qp
        .post_send(&[SendWr::new(1, SendOp::Send, &sge)])
        .unwrap_err();
    assert_eq!(bad.index, 0);
    assert_eq!(
        bad.error,
        WrError::QpState {
            qpn: qp.qpn(),
            state: QpState::Init
        }
    );
    // Receives may be posted from INIT on; not in RESET.
    let rwr = uhca_driver::verbs::RecvWr {
        wr_id: 2,
        sg_list: &sge,
    };
    qp.post_recv(&[rwr]).unwrap();
    qp.to_reset(&mut a.hca).unwrap();
    let bad = qp.post_recv(&[rwr]).unwrap_err();
    assert_eq!(
        bad.error,
        WrError::QpState {
            qpn: qp.qpn(),
            state: QpState::Rst
        }
    );
}

#[test]
fn an_error_completion_shows_as_err_in_state() {
    let (fabric, mut a, b, mut qa, _qb) = rc_pair(LinkLayer::Ethernet, RtsAttr::default());
    let sge = [a.mr.sge(0, 64).unwrap()];
    // A WRITE with a key the responder does not have: a remote access error.
    let wr = SendWr::new(
        7,
        SendOp::RdmaWrite {
            remote_addr: b.mr.iova(),
            rkey: b.mr.rkey() ^ 0x55,
        },
        &sge,
    );
    qa.post_send(&[wr]).unwrap();
    assert_eq!(qa.state(), QpState::Rts, "nothing polled yet");
    run(&fabric);
    let wc = poll(&mut a);
    assert_eq!(wc[0].status, WcStatus::RemoteAccess);
    assert_eq!(
        qa.state(),
        QpState::Err,
        "the error completion moved the driver's view"
    );
    assert!(matches!(
        qa.to_rts(&mut a.hca, RtsAttr::default()),
        Err(Error::IllegalTransition {
            from: QpState::Err,
            ..
        })
    ));
    // QUERY_QP agrees, and RESET is allowed from it.
    assert_eq!(qa.query(&mut a.hca).unwrap().state, QpState::Err);
    qa.to_reset(&mut a.hca).unwrap();
    assert_eq!(qa.state(), QpState::Rst);
}

#[test]
fn init_to_init_changes_the_rights_the_peer_then_meets() {
    let fabric = Fabric::new(LinkLayer::Ethernet);
    let mut a = node(&fabric, 1);
    let mut b = node(&fabric, 2);
    let qa = rc_qp(&mut a);
    // B's QP is in INIT with every right; INIT -> INIT takes remote write away.
    let mut qb = rc_qp(&mut b);
    assert!(qb.query(&mut b.hca).unwrap().qpc.rwe());
    qb.init_to_init(
        &mut b.hca,
        InitModifyAttr {
            access: Some(AccessFlags::REMOTE_READ),
            pkey_index: Some(1),
            ..InitModifyAttr::default()
        },
    )
    .unwrap();
    assert_eq!(qb.state(), QpState::Init);
    let q = qb.query(&mut b.hca).unwrap();
    assert!(!q.qpc.rwe() && q.qpc.rre(), "the device has the new rights");
    assert_eq!(q.pkey_index, 1);
    // INIT -> INIT through to_init, every attribute given: the rights come back... and
    // go again, so the peer meets the QP without remote write.
    qb.to_init(
        &mut b.hca,
        InitAttr {
            access: AccessFlags::REMOTE_READ,
            ..InitAttr::default()
        },
    )
    .unwrap();
    assert_eq!(qb.query(&mut b.hca).unwrap().pkey_index, 0);
    let (na, nb) = (qa.qpn(), qb.qpn());
    let mut qa = connect(&fabric, &mut a, qa, &b, nb, RtsAttr::default());
    let _qb = connect(&fabric, &mut b, qb, &a, na, RtsAttr::default());
    assert_eq!(
        write(&fabric, &mut a, &mut qa, &b, 3),
        (WcStatus::RemoteAccess, false),
        "the responder refuses a WRITE INIT -> INIT took away"
    );
}

#[test]
fn rts_to_rts_changes_rights_and_timers_while_the_qp_sends() {
    let (fabric, mut a, mut b, mut qa, mut qb) = rc_pair(LinkLayer::Ethernet, RtsAttr::default());
    assert_eq!(
        write(&fabric, &mut a, &mut qa, &b, 1),
        (WcStatus::Success, true)
    );
    // The RNR timer and the ACK timeout change in RTS; the QP stays in RTS and sends.
    qa.rts_to_rts(
        &mut a.hca,
        RtsModifyAttr {
            min_rnr_timer: Some(20),
            timeout: Some(9),
            ..RtsModifyAttr::default()
        },
    )
    .unwrap();
    assert_eq!(qa.state(), QpState::Rts);
    let q = qa.query(&mut a.hca).unwrap().qpc;
    assert_eq!(q.min_rnr_nak(), 20);
    assert_eq!(q.primary_address_path().ack_timeout(), 9);
    assert_eq!(
        write(&fabric, &mut a, &mut qa, &b, 2),
        (WcStatus::Success, true)
    );
    // B takes remote write away in RTS: A's next WRITE is refused.
    qb.rts_to_rts(
        &mut b.hca,
        RtsModifyAttr {
            access: Some(AccessFlags::REMOTE_READ),
            ..RtsModifyAttr::default()
        },
    )
    .unwrap();
    assert_eq!(qb.state(), QpState::Rts);
    assert_eq!(
        write(&fabric, &mut a, &mut qa, &b, 3),
        (WcStatus::RemoteAccess, false)
    );
}

#[test]
fn init_to_init_and_rts_to_rts_are_checked_before_anything_is_sent() {
    let (_fabric, mut a, _b, mut qa, _qb) = rc_pair(LinkLayer::Ethernet, RtsAttr::default());
    let sent = a.dev.command_log().len();
    // INIT -> INIT from RTS is not in the table.
    assert_eq!(
        qa.init_to_init(&mut a.hca, InitModifyAttr::default()),
        Err(Error::IllegalTransition {
            from: QpState::Rts,
            to: QpState::Init
        })
    );
    // An RC QP has no Q_Key; RNR timer codes have 5 bits.
    let e = qa
        .rts_to_rts(
            &mut a.hca,
            RtsModifyAttr {
                qkey: Some(7),
                ..RtsModifyAttr::default()
            },
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = qa
        .rts_to_rts(
            &mut a.hca,
            RtsModifyAttr {
                min_rnr_timer: Some(32),
                ..RtsModifyAttr::default()
            },
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert_eq!(a.dev.command_log().len(), sent, "nothing was sent");
    // RTS -> RTS from ERR is not in the table either.
    qa.to_err(&mut a.hca).unwrap();
    assert_eq!(
        qa.rts_to_rts(&mut a.hca, RtsModifyAttr::default()),
        Err(Error::IllegalTransition {
            from: QpState::Err,
            to: QpState::Rts
        })
    );
}

#[test]
fn a_qp_fatal_event_moves_the_driver_s_view_to_err_with_nothing_to_poll() {
    let (fabric, a, mut b, mut qa, mut qb) = rc_pair(LinkLayer::Ethernet, RtsAttr::default());
    let nb = qb.qpn();
    // A's WRITE with a key B does not have: B's responder refuses it, the device moves
    // B's QP to ERR and raises WQ_ACCESS_ERROR on it. B has no completion to poll: an
    // RDMA WRITE consumes no receive.
    let sge = [a.mr.sge(0, 64).unwrap()];
    let wr = SendWr::new(
        1,
        SendOp::RdmaWrite {
            remote_addr: b.mr.iova(),
            rkey: b.mr.rkey() ^ 0x55,
        },
        &sge,
    );
    qa.post_send(&[wr]).unwrap();
    run(&fabric);
    assert_eq!(b.dev.qp_state(nb), Some(QpState::Err));
    assert!(poll(&mut b).is_empty(), "nothing for B to poll");
    assert_eq!(qb.state(), QpState::Rts, "the event is not served yet");
    b.hca.process_events().unwrap();
    assert_eq!(qb.state(), QpState::Err, "served: the driver has it in ERR");
    assert_eq!(
        b.hca.next_event(),
        Some(AsyncEvent::QpSrq {
            event: EventType::WqAccessError,
            number: nb,
            srq: false
        })
    );
    // Posting is refused at once; ERR -> RESET -> RTS brings it back.
    let sge = [b.mr.sge(0, 8).unwrap()];
    let bad = qb
        .post_send(&[SendWr::new(2, SendOp::Send, &sge)])
        .unwrap_err();
    assert_eq!(bad.error, WrError::QpInError { qpn: nb });
    assert!(matches!(
        qb.rts_to_rts(&mut b.hca, RtsModifyAttr::default()),
        Err(Error::IllegalTransition {
            from: QpState::Err,
            ..
        })
    ));
    qb.to_reset(&mut b.hca).unwrap();
    assert_eq!(qb.state(), QpState::Rst);
}
