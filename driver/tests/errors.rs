//! Errors as a caller meets them: refused arguments say which argument, the value given
//! and the limit; wrapping errors give the wrapped one as `source()`; every error goes
//! into a `Box<dyn std::error::Error>` with `?`, in code generic over the platform.

mod common;

use std::error::Error as StdError;

use common::{caps, on_cq, open, rc_pair};
use uhca_driver::error::{Arg, InvalidArgument, Limit};
use uhca_driver::verbs::{Rc, RtsAttr, SendOp, SendWr, WrError};
use uhca_driver::{Error, Hca, Platform};
use uhca_fwif::consts::{AccessFlags, CmdStatus};
use uhca_hal::cmdq::CmdError;
use uhca_mock::LinkLayer;

#[test]
fn posting_more_sges_than_max_send_sge_names_the_count_and_the_limit() {
    let (_fabric, a, _b, mut qa, _qb) = rc_pair(LinkLayer::Ethernet, RtsAttr::default());
    let max = qa.caps().max_send_sge;
    let sge = a.mr.sge(0, 8).unwrap();
    let sges = vec![sge; max as usize + 1];
    let bad = qa
        .post_send(&[SendWr::new(1, SendOp::Send, &sges)])
        .unwrap_err();
    assert_eq!(bad.index, 0);
    assert_eq!(
        bad.error,
        WrError::TooManySges {
            given: max as usize + 1,
            max
        }
    );
    let text = bad.to_string();
    assert!(
        text.contains(&(max + 1).to_string()) && text.contains(&max.to_string()),
        "{text}"
    );
    // The refused request is the source of the BadWr.
    let source = bad.source().unwrap().downcast_ref::<WrError>().unwrap();
    assert_eq!(*source, bad.error);
}

/// One field of a QP's capabilities.
type CapField = fn(&mut uhca_driver::verbs::QpCaps) -> &mut u32;

#[test]
fn a_qp_with_too_many_sges_is_refused_with_the_argument_given_and_limit() {
    let (_dev, mut hca) = open(LinkLayer::Ethernet);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(16).unwrap();
    let mut cap = caps();
    cap.max_send_sge = 1000;
    let e = hca.create_qp::<Rc>(&pd, &on_cq(&cq, cap)).unwrap_err();
    let Error::InvalidArgument(InvalidArgument {
        arg: Arg::MaxSendSge,
        given: 1000,
        limit: Limit::Max(limit),
        ..
    }) = e
    else {
        panic!("{e:?}");
    };
    assert!(limit > 0 && limit < 1000, "{limit}");
    // The largest the error names is accepted.
    cap.max_send_sge = limit as u32;
    let qp = hca.create_qp::<Rc>(&pd, &on_cq(&cq, cap)).unwrap();
    let text = e.to_string();
    assert!(
        text.contains("max_send_sge") && text.contains("1000") && text.contains(&limit.to_string()),
        "{text}"
    );
    qp.destroy(&mut hca).unwrap();
    // The same for each queue limit: the limit named is the largest accepted.
    let fields: [(Arg, CapField); 4] = [
        (Arg::MaxInlineData, |c| &mut c.max_inline_data),
        (Arg::MaxRecvSge, |c| &mut c.max_recv_sge),
        (Arg::MaxSendWr, |c| &mut c.max_send_wr),
        (Arg::MaxRecvWr, |c| &mut c.max_recv_wr),
    ];
    for (arg, field) in fields {
        let mut cap = caps();
        *field(&mut cap) = 1 << 24;
        let e = hca.create_qp::<Rc>(&pd, &on_cq(&cq, cap)).unwrap_err();
        let Error::InvalidArgument(a) = e else {
            panic!("{arg}: {e:?}")
        };
        assert_eq!((a.arg, a.given), (arg, 1 << 24), "{e}");
        let Limit::Max(limit) = a.limit else {
            panic!("{e:?}")
        };
        *field(&mut cap) = limit as u32;
        let qp = hca
            .create_qp::<Rc>(&pd, &on_cq(&cq, cap))
            .unwrap_or_else(|f| panic!("{arg} of {limit}: {f}"));
        qp.destroy(&mut hca).unwrap();
    }
    cq.destroy(&mut hca).unwrap();
    pd.destroy(&mut hca).unwrap();
    hca.close().unwrap();
}

#[test]
fn refused_arguments_carry_their_values() {
    let (_dev, mut hca) = open(LinkLayer::Ethernet);
    let max_cqe = hca.caps().max_cqe;
    assert_eq!(
        hca.create_cq(max_cqe).unwrap_err(),
        Error::InvalidArgument(InvalidArgument::max(
            Arg::Cqe,
            max_cqe.into(),
            u64::from(max_cqe) - 1
        ))
    );
    assert_eq!(
        hca.create_cq(0).unwrap_err(),
        Error::InvalidArgument(InvalidArgument::min(Arg::Cqe, 0, 1))
    );
    let ports = hca.caps().num_ports.max(1);
    assert_eq!(
        hca.query_port(ports + 1).unwrap_err(),
        Error::InvalidArgument(InvalidArgument::max(
            Arg::Port,
            u64::from(ports) + 1,
            ports.into()
        ))
    );
    let pd = hca.alloc_pd().unwrap();
    let e = hca
        .alloc_mr(&pd, 4096, AccessFlags::REMOTE_WRITE)
        .unwrap_err();
    let Error::InvalidArgument(a) = e else {
        panic!("{e:?}")
    };
    assert_eq!(a.arg, Arg::AccessFlags);
    assert_eq!(a.given, u64::from(AccessFlags::REMOTE_WRITE.bits()));
    assert!(matches!(a.limit, Limit::Rule(r) if r.contains("local write")));
    let mr = hca.alloc_mr(&pd, 4096, AccessFlags::LOCAL_WRITE).unwrap();
    assert_eq!(
        mr.sge(4000, 200).unwrap_err(),
        Error::InvalidArgument(InvalidArgument::max(Arg::RangeEnd, 4200, 4096))
    );
    assert_eq!(
        mr.sge(4000, 200).unwrap_err().to_string(),
        "invalid argument offset + len: 4200 given, at most 4096"
    );
    mr.destroy(&mut hca).unwrap();
    pd.destroy(&mut hca).unwrap();
    hca.close().unwrap();
}

#[test]
fn the_source_of_a_command_error_is_the_command_error() {
    let (_dev, mut hca) = open(LinkLayer::Ethernet);
    // Outside the GID table: the firmware refuses the query (BAD_PARAM).
    let e = hca.query_gid(1, u16::MAX).unwrap_err();
    assert_eq!(e.command_status(), Some(CmdStatus::BadParamErr), "{e}");
    let Error::Command(inner) = e else {
        panic!("{e:?}")
    };
    let source = e.source().expect("a command error has a source");
    assert_eq!(source.downcast_ref::<CmdError>(), Some(&inner));
    assert_eq!(source.to_string(), inner.to_string());
    // An argument error's source is the argument's description.
    let e = hca.create_cq(0).unwrap_err();
    assert!(
        e.source()
            .unwrap()
            .downcast_ref::<InvalidArgument>()
            .is_some()
    );
    hca.close().unwrap();
}

/// What a user writes: a function generic over the platform that returns a boxed error
/// (the `Failed` of a destroy, which holds the object, included).
fn make_objects<P: Platform + 'static>(
    hca: &mut Hca<P>,
    cqe: u32,
) -> Result<(), Box<dyn StdError>> {
    let pd = hca.alloc_pd()?;
    let cq = hca.create_cq(cqe)?;
    cq.destroy(hca)?;
    pd.destroy(hca)?;
    Ok(())
}

/// The same with a `Send + Sync` box, for errors that hold no object.
fn make_cq<P: Platform>(
    hca: &mut Hca<P>,
    cqe: u32,
) -> Result<u32, Box<dyn StdError + Send + Sync>> {
    let cq = hca.create_cq(cqe)?;
    let cqn = cq.cqn();
    // `unwrap` of a `Failed` needs no `Debug` of the platform.
    cq.destroy(hca).unwrap();
    Ok(cqn)
}

#[test]
fn errors_go_into_a_boxed_error_with_question_mark() {
    let (_dev, mut hca) = open(LinkLayer::Ethernet);
    make_objects(&mut hca, 16).unwrap();
    make_cq(&mut hca, 16).unwrap();
    let e = make_cq(&mut hca, 0).unwrap_err();
    assert!(e.downcast_ref::<Error>().is_some());
    let e = make_objects(&mut hca, 0).unwrap_err();
    let e = e.downcast::<Error>().expect("the driver's error, boxed");
    assert_eq!(
        *e,
        Error::InvalidArgument(InvalidArgument::min(Arg::Cqe, 0, 1))
    );
    hca.close().unwrap();
}
