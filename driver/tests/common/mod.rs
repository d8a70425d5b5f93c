//! What the driver's integration tests share: the settings and the mock HCAs they open,
//! and two nodes on one mock fabric with connected RC QPs.
//!
//! Each test file takes what it needs (`mod common;`), so not every item is used by every
//! file.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};

use uhca_driver::addr::{AddressHandle, Gid, Mac, StaticRate};
use uhca_driver::verbs::{
    Cq, InitAttr, Mr, Pd, Qp, QpCaps, QpInitAttr, Rc, RtrAttr, RtsAttr, WorkCompletion, state,
};
use uhca_driver::{Hca, HcaConfig};
use uhca_fwif::consts::{AccessFlags, IbMtu};
use uhca_mock::{ClockMode, Fabric, LinkLayer, MockConfig, MockHca, MockPlatform, PortType};

/// Bring-up settings for the mock: short timeouts (a hang fails in seconds, not minutes),
/// polling every 100 µs.
pub fn cfg() -> HcaConfig {
    HcaConfig {
        fw_pre_init_timeout_ns: 2_000_000_000,
        fw_init_timeout_ns: 200_000_000,
        cmd_timeout_ns: 200_000_000,
        poll_us: 100,
        ..HcaConfig::default()
    }
}

/// A mock HCA with a virtual clock whose firmware takes 5 ms to get ready.
pub fn mock(port_type: PortType) -> MockHca {
    MockHca::new(MockConfig {
        port_type,
        clock: ClockMode::Virtual,
        init_delay_us: 5_000,
        ..MockConfig::default()
    })
}

/// [`mock`], brought up by the driver with [`cfg`].
pub fn open(port_type: PortType) -> (MockHca, Hca<MockPlatform>) {
    let dev = mock(port_type);
    let hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    (dev, hca)
}

pub type P = MockPlatform;

pub const ALL: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

/// Every right the device can give a QP's responder (remote atomics only when the device
/// has the `atomic` capability).
pub fn qp_access(hca: &Hca<P>) -> AccessFlags {
    if hca.caps().atomic {
        ALL
    } else {
        ALL - AccessFlags::REMOTE_ATOMIC
    }
}

pub struct Node {
    pub dev: MockHca,
    pub hca: Hca<P>,
    pub pd: Pd,
    pub cq: Cq<P>,
    pub mr: Mr<P>,
    pub mac: Mac,
    pub gid: Gid,
    pub lid: u16,
}

pub fn node(fabric: &Fabric, n: u8) -> Node {
    let mac = Mac([0x02, 0xc0, 0xff, 0xee, 0x00, n]);
    let port_type = match fabric.link_layer() {
        LinkLayer::Ethernet => PortType::Ethernet,
        LinkLayer::InfiniBand => PortType::InfiniBand,
    };
    let dev = MockHca::new(MockConfig {
        port_type,
        mac: mac.0,
        ..MockConfig::default()
    });
    let mut hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    fabric.attach(&dev);
    let (gid, lid) = match fabric.link_layer() {
        LinkLayer::Ethernet => {
            let ip = IpAddr::V4(Ipv4Addr::new(192, 168, 0, n));
            (hca.add_roce_gid(1, 0, ip, mac, None).unwrap(), 0)
        }
        LinkLayer::InfiniBand => (Gid::ZERO, hca.query_port(1).unwrap().lid),
    };
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(63).unwrap();
    let mr = hca.alloc_mr(&pd, 16384, ALL).unwrap();
    Node {
        dev,
        hca,
        pd,
        cq,
        mr,
        mac,
        gid,
        lid,
    }
}

/// The path from `from` to `to`.
pub fn path(fabric: &Fabric, to: &Node) -> AddressHandle {
    match fabric.link_layer() {
        LinkLayer::Ethernet => AddressHandle::RoceV2 {
            sgid_index: 0,
            dgid: to.gid,
            dmac: to.mac,
            udp_sport: 0xc000,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            sl: 0,
        },
        LinkLayer::InfiniBand => AddressHandle::Ib {
            dlid: to.lid,
            sl: 0,
            src_path_bits: 0,
            static_rate: StaticRate::PortCurrent,
            grh: None,
        },
    }
}

pub fn caps() -> QpCaps {
    QpCaps {
        max_send_wr: 32,
        max_recv_wr: 32,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    }
}

pub fn rc_qp(n: &mut Node) -> Qp<P, Rc, state::Init> {
    let attr = QpInitAttr {
        send_cq: &n.cq,
        recv_cq: &n.cq,
        srq: None,
        cap: caps(),
    };
    let qp = n.hca.create_qp::<Rc>(&n.pd, &attr).unwrap();
    let access = qp_access(&n.hca);
    qp.to_init(
        &mut n.hca,
        InitAttr {
            access,
            ..InitAttr::default()
        },
    )
    .unwrap()
}

pub fn connect(
    fabric: &Fabric,
    n: &mut Node,
    qp: Qp<P, Rc, state::Init>,
    peer: &Node,
    peer_qpn: u32,
    rts: RtsAttr,
) -> Qp<P, Rc, state::Rts> {
    let ah = path(fabric, peer);
    let qp = qp
        .to_rtr(
            &mut n.hca,
            RtrAttr {
                path_mtu: IbMtu::Mtu1024,
                dest_qpn: peer_qpn,
                rq_psn: 0x100,
                max_dest_rd_atomic: 4,
                min_rnr_timer: 1,
                ah,
            },
        )
        .unwrap();
    qp.to_rts(
        &mut n.hca,
        RtsAttr {
            sq_psn: 0x100,
            max_rd_atomic: 4,
            ..rts
        },
    )
    .unwrap()
}

/// An RC QP ready to send.
pub type RcRts = Qp<P, Rc, state::Rts>;

/// Two nodes with a connected RC QP each (`a` to `b`).
pub fn rc_pair(link: LinkLayer, rts: RtsAttr) -> (Fabric, Node, Node, RcRts, RcRts) {
    let fabric = Fabric::new(link);
    let mut a = node(&fabric, 1);
    let mut b = node(&fabric, 2);
    let qa = rc_qp(&mut a);
    let qb = rc_qp(&mut b);
    let (na, nb) = (qa.qpn(), qb.qpn());
    let qa = connect(&fabric, &mut a, qa, &b, nb, rts);
    let qb = connect(&fabric, &mut b, qb, &a, na, rts);
    (fabric, a, b, qa, qb)
}

pub fn poll(n: &mut Node) -> Vec<WorkCompletion> {
    let mut all = Vec::new();
    let mut wc = [WorkCompletion::default(); 16];
    loop {
        let k = n.cq.poll(&mut wc).expect("CQEs match what was posted");
        all.extend_from_slice(&wc[..k]);
        if k < wc.len() {
            return all;
        }
    }
}

pub fn run(fabric: &Fabric) {
    assert!(fabric.run_until_idle(), "the fabric settles");
}
