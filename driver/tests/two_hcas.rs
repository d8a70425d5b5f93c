//! Objects of two HCAs cannot be mixed: every command that names an object checks that the
//! object was made by the HCA it is given to, and refuses with `Error::WrongHca` before
//! anything is sent (the object's number would name another object of the other device).
//! The datapath takes no HCA at all, so there is nothing to mix there.

mod common;

use uhca_driver::Error;
use uhca_driver::verbs::{InitAttr, QpCaps, Rc, SrqInitAttr};
use uhca_fwif::consts::AccessFlags;
use uhca_mock::{LinkLayer, MockHca};

#[test]
fn an_object_handed_to_the_other_hca_is_refused_and_nothing_is_sent() {
    let (dev_a, mut a) = common::open(LinkLayer::InfiniBand);
    let (dev_b, mut b) = common::open(LinkLayer::InfiniBand);
    let pd_a = a.alloc_pd().unwrap();
    let pd_b = b.alloc_pd().unwrap();
    let cq_a = a.create_cq(16).unwrap();
    let cq_b = b.create_cq(16).unwrap();
    let cap = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let sent = |d: &MockHca| d.command_log().len();
    let (before_a, before_b) = (sent(&dev_a), sent(&dev_b));

    // Creation with another HCA's PD, CQ or SRQ.
    let mixed = |cq| common::on_cq(cq, cap);
    assert_eq!(
        b.create_qp::<Rc>(&pd_b, &mixed(&cq_a)).unwrap_err(),
        Error::WrongHca
    );
    assert_eq!(
        b.create_qp::<Rc>(&pd_a, &mixed(&cq_b)).unwrap_err(),
        Error::WrongHca
    );
    let srq_attr = SrqInitAttr {
        max_wr: 8,
        max_sge: 1,
        srq_limit: 0,
    };
    assert_eq!(b.create_srq(&pd_a, srq_attr).unwrap_err(), Error::WrongHca);
    assert_eq!(
        b.alloc_mr(&pd_a, 4096, AccessFlags::LOCAL_WRITE)
            .unwrap_err(),
        Error::WrongHca
    );
    let srq_a = a.create_srq(&pd_a, srq_attr).unwrap();
    let with_srq = common::on_srq(&cq_b, &srq_a, cap);
    assert_eq!(
        b.create_qp::<Rc>(&pd_b, &with_srq).unwrap_err(),
        Error::WrongHca
    );
    assert_eq!(sent(&dev_b), before_b, "B sent nothing");

    // Commands on an object with the wrong HCA: the object comes back untouched.
    let before_a = before_a + 1; // A's CREATE_RMP above.
    assert_eq!(sent(&dev_a), before_a);
    let mut qp = a.create_qp::<Rc>(&pd_a, &mixed(&cq_a)).unwrap();
    let before_b = sent(&dev_b);
    let f = qp.to_init(&mut b, InitAttr::default()).unwrap_err();
    assert_eq!(f, Error::WrongHca);
    assert_eq!(qp.query(&mut b).unwrap_err(), Error::WrongHca);
    assert_eq!(cq_a.query(&mut b).unwrap_err(), Error::WrongHca);
    let f = qp.destroy(&mut b).unwrap_err();
    assert_eq!(f.error, Error::WrongHca);
    let mut qp = f.object;
    let f = cq_a.destroy(&mut b).unwrap_err();
    assert_eq!(f.error, Error::WrongHca);
    let cq_a = f.object;
    let f = pd_a.destroy(&mut b).unwrap_err();
    assert_eq!(f.error, Error::WrongHca);
    let pd_a = f.object;
    assert_eq!(sent(&dev_b), before_b, "B sent nothing");
    assert_eq!(dev_b.objects().qps, 0);

    // With the right HCA everything works and goes.
    qp.to_init(&mut a, InitAttr::default()).unwrap();
    qp.destroy(&mut a).unwrap();
    srq_a.destroy(&mut a).unwrap();
    cq_a.destroy(&mut a).unwrap();
    pd_a.destroy(&mut a).unwrap();
    cq_b.destroy(&mut b).unwrap();
    pd_b.destroy(&mut b).unwrap();
    a.close().unwrap();
    b.close().unwrap();
}
