//! Atomics follow the atomic capability page: the driver reads it at bring-up, asks for the
//! fetched value in host order where the device can (Linux `handle_hca_cap_atomic`), and
//! offers atomics only if the page has 8-byte compare-and-swap and fetch-and-add with a
//! host-order result (Linux `mlx5_ib` `get_atomic_caps`). The bytes of a fetched value in
//! the local buffer are checked end to end in `datapath.rs` (`rc_every_opcode_*`).

mod common;

use common::*;

use std::net::{IpAddr, Ipv4Addr};

use uhca_driver::addr::{AhAttr, Mac};
use uhca_driver::verbs::{
    InitAttr, QpCaps, QpInitAttr, Rc, RtrAttr, RtsAttr, SendOp, SendWr, Sge, WrError,
};
use uhca_driver::{Error, Hca};
use uhca_fwif::cmd::{query_hca_cap_op_mod, set_hca_cap_op_mod};
use uhca_fwif::consts::{
    ATOMIC_OPS_CMP_SWAP, ATOMIC_OPS_FETCH_ADD, ATOMIC_REQ_MODE_BE, ATOMIC_REQ_MODE_HOST_ENDIANNESS,
    ATOMIC_SIZE_QP_8BYTES, AccessFlags, CmdOpcode, HcaCapMode, HcaCapType, IbMtu, QpState,
};
use uhca_mock::{MockConfig, MockHca, MockPlatform};

fn ran(dev: &MockHca, opcode: CmdOpcode, op_mod: u16) -> bool {
    dev.command_log()
        .iter()
        .any(|r| r.opcode == opcode && r.op_mod == op_mod)
}

#[test]
fn the_driver_reads_the_atomic_page_and_asks_for_host_order_results() {
    let dev = MockHca::new(MockConfig::default());
    let hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    assert!(ran(
        &dev,
        CmdOpcode::QueryHcaCap,
        query_hca_cap_op_mod(HcaCapType::Atomic, HcaCapMode::GetCur)
    ));
    assert!(ran(
        &dev,
        CmdOpcode::SetHcaCap,
        set_hca_cap_op_mod(HcaCapType::Atomic)
    ));
    assert_eq!(
        dev.atomic_req_endianness_mode(),
        ATOMIC_REQ_MODE_HOST_ENDIANNESS
    );
    let page = hca.atomic_caps().expect("the page was read");
    assert_eq!(
        page.atomic_req_8B_endianness_mode(),
        ATOMIC_REQ_MODE_HOST_ENDIANNESS
    );
    assert!(hca.caps().atomic);
    hca.close().unwrap();
}

/// Brings up a device whose atomic page is `(operations, size_qp, host order offered)`,
/// connects an RC QP to itself over RoCE, and tries to use atomics.
fn with_atomic_page(
    operations: u16,
    size_qp: u16,
    host_order: bool,
) -> (MockHca, Hca<MockPlatform>) {
    let dev = MockHca::new(MockConfig::default());
    dev.set_atomic_caps(operations, size_qp, host_order);
    let hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    (dev, hca)
}

fn atomics_are_refused(mut hca: Hca<MockPlatform>) {
    assert!(!hca.caps().atomic, "no atomics offered");
    let mac = Mac([0x02, 0xc0, 0xff, 0xee, 0x00, 0x01]);
    let gid = hca
        .add_roce_gid(1, 0, IpAddr::V4(Ipv4Addr::new(192, 168, 0, 1)), mac, None)
        .unwrap();
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(15).unwrap();
    let mr = hca.alloc_mr(&pd, 4096, AccessFlags::LOCAL_WRITE).unwrap();
    let attr = QpInitAttr {
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        cap: QpCaps {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
    };
    // The responder side: remote atomics cannot be granted.
    let mut qp = hca.create_qp::<Rc>(&pd, &attr).unwrap();
    let err = qp
        .to_init(
            &mut hca,
            InitAttr {
                access: AccessFlags::REMOTE_ATOMIC | AccessFlags::LOCAL_WRITE,
                ..InitAttr::default()
            },
        )
        .expect_err("remote atomics refused");
    assert_eq!(err, Error::Unsupported("remote atomics"));
    assert_eq!(
        qp.state(),
        QpState::Rst,
        "a refused transition changes nothing"
    );
    // The requester side: an atomic work request is refused before it reaches the device.
    qp.to_init(&mut hca, InitAttr::default()).unwrap();
    qp.to_rtr(
        &mut hca,
        RtrAttr {
            path_mtu: IbMtu::Mtu1024,
            dest_qpn: 0,
            rq_psn: 0,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 1,
            ah: AhAttr::RoceV2 {
                sgid_index: 0,
                dgid: gid,
                dmac: mac,
                udp_sport: 0xc000,
                traffic_class: 0,
                hop_limit: 64,
                flow_label: 0,
                sl: 0,
            },
        },
    )
    .unwrap();
    qp.to_rts(&mut hca, RtsAttr::default()).unwrap();
    let result = [Sge {
        addr: mr.iova(),
        len: 8,
        lkey: mr.lkey(),
    }];
    let wr = SendWr::new(
        1,
        SendOp::AtomicFetchAdd {
            remote_addr: mr.iova(),
            rkey: mr.rkey(),
            add: 1,
        },
        &result,
    );
    let bad = qp.post_send(&[wr]).unwrap_err();
    assert_eq!((bad.index, bad.error), (0, WrError::OpNotSupported));
}

#[test]
fn without_host_order_results_no_atomics_are_offered() {
    if cfg!(target_endian = "big") {
        // Network order is host order there: atomics are offered anyway.
        return;
    }
    let (dev, hca) = with_atomic_page(
        ATOMIC_OPS_CMP_SWAP | ATOMIC_OPS_FETCH_ADD,
        ATOMIC_SIZE_QP_8BYTES,
        false,
    );
    assert!(
        !ran(
            &dev,
            CmdOpcode::SetHcaCap,
            set_hca_cap_op_mod(HcaCapType::Atomic)
        ),
        "nothing to set"
    );
    assert_eq!(dev.atomic_req_endianness_mode(), ATOMIC_REQ_MODE_BE);
    atomics_are_refused(hca);
}

#[test]
fn without_fetch_and_add_no_atomics_are_offered() {
    let (_dev, hca) = with_atomic_page(ATOMIC_OPS_CMP_SWAP, ATOMIC_SIZE_QP_8BYTES, true);
    atomics_are_refused(hca);
}

#[test]
fn without_the_8_byte_size_no_atomics_are_offered() {
    let (_dev, hca) = with_atomic_page(ATOMIC_OPS_CMP_SWAP | ATOMIC_OPS_FETCH_ADD, 1 << 2, true);
    atomics_are_refused(hca);
}
