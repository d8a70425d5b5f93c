//! What the driver's integration tests share: the settings and the mock HCAs they open,
//! and two nodes on one mock fabric with connected RC QPs.
//!
//! Each test file takes what it needs (`mod common;`), so not every item is used by every
//! file.
#![allow(dead_code)]

use std::net::{IpAddr, Ipv4Addr};

use uhca_driver::addr::{AhAttr, Gid, Mac, StaticRate};
use uhca_driver::verbs::{
    Cq, InitAttr, Mr, Pd, Qp, QpCaps, QpInitAttr, Rc, RtrAttr, RtsAttr, Srq, WorkCompletion,
};
use uhca_driver::{Hca, HcaConfig};
use uhca_fwif::consts::{AccessFlags, IbMtu};
use uhca_hal::Platform;
use uhca_mock::{ClockMode, Fabric, LinkLayer, MockConfig, MockHca, MockPlatform};

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
pub fn mock(port_type: LinkLayer) -> MockHca {
    MockHca::new(MockConfig {
        port_type,
        clock: ClockMode::Virtual,
        init_delay_us: 5_000,
        ..MockConfig::default()
    })
}

/// [`mock`], brought up by the driver with [`cfg`].
pub fn open(port_type: LinkLayer) -> (MockHca, Hca<MockPlatform>) {
    let dev = mock(port_type);
    let hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    (dev, hca)
}

pub type P = MockPlatform;

pub const ALL: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

/// [`open`] on an InfiniBand port.
pub fn open_ib() -> (MockHca, Hca<P>) {
    open(LinkLayer::InfiniBand)
}

/// Every right the device can give a QP's responder (remote atomics only when the device
/// has the `atomic` capability).
pub fn qp_access<Q: Platform>(hca: &Hca<Q>) -> AccessFlags {
    if hca.caps().atomic {
        ALL
    } else {
        ALL - AccessFlags::REMOTE_ATOMIC
    }
}

/// A PD, a CQ of `cq_depth` entries and an MR of `mr_len` bytes with `access` in that PD.
pub fn pd_cq_mr<Q: Platform>(
    hca: &mut Hca<Q>,
    cq_depth: u32,
    mr_len: usize,
    access: AccessFlags,
) -> (Pd<Q>, Cq<Q>, Mr<Q>) {
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(cq_depth).unwrap();
    let mr = hca.alloc_mr(&pd, mr_len, access).unwrap();
    (pd, cq, mr)
}

/// A mock HCA on a fabric, brought up by the driver (through platform `Q`), with a PD, a
/// CQ and an MR, and its address on the fabric.
pub struct Node<Q: Platform = P> {
    pub dev: MockHca,
    pub hca: Hca<Q>,
    pub pd: Pd<Q>,
    pub cq: Cq<Q>,
    pub mr: Mr<Q>,
    pub mac: Mac,
    pub gid: Gid,
    pub lid: u16,
}

/// Node `n` of `fabric`, driven through the mock's own platform.
pub fn node(fabric: &Fabric, n: u8) -> Node {
    node_on(fabric, n, MockHca::platform)
}

/// Node `n` of `fabric`, driven through the platform `platform` makes of the mock HCA (a
/// wrapper that watches or holds what the driver does): brought up with [`cfg`], attached
/// to the fabric, with a RoCEv2 GID for `192.168.0.n` on Ethernet or its LID on
/// InfiniBand, a PD, a CQ of 63 entries and an MR of 16 KiB with every right.
pub fn node_on<Q: Platform>(
    fabric: &Fabric,
    n: u8,
    platform: impl FnOnce(&MockHca) -> Q,
) -> Node<Q> {
    let mac = Mac([0x02, 0xc0, 0xff, 0xee, 0x00, n]);
    let port_type = fabric.link_layer();
    let dev = MockHca::new(MockConfig {
        port_type,
        mac: mac.0,
        ..MockConfig::default()
    });
    let mut hca = Hca::open_with(platform(&dev), cfg()).expect("bring-up");
    fabric.attach(&dev);
    let (gid, lid) = match fabric.link_layer() {
        LinkLayer::Ethernet => {
            let ip = IpAddr::V4(Ipv4Addr::new(192, 168, 0, n));
            (hca.add_roce_gid(1, 0, ip, mac, None).unwrap(), 0)
        }
        LinkLayer::InfiniBand => (Gid::ZERO, hca.query_port(1).unwrap().lid),
    };
    let (pd, cq, mr) = pd_cq_mr(&mut hca, 63, 16384, ALL);
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

/// The path to `to` on `fabric`.
pub fn path<Q: Platform>(fabric: &Fabric, to: &Node<Q>) -> AhAttr {
    match fabric.link_layer() {
        LinkLayer::Ethernet => AhAttr::RoceV2 {
            sgid_index: 0,
            dgid: to.gid,
            dmac: to.mac,
            udp_sport: 0xc000,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            sl: 0,
        },
        LinkLayer::InfiniBand => AhAttr::Ib {
            dlid: to.lid,
            sl: 0,
            src_path_bits: 0,
            static_rate: StaticRate::PortCurrent,
            grh: None,
        },
    }
}

/// Queue sizes: `wr` work requests and `sge` scatter/gather entries each way, up to
/// `inline` bytes of inline data.
pub fn qp_caps(wr: u32, sge: u32, inline: u32) -> QpCaps {
    QpCaps {
        max_send_wr: wr,
        max_recv_wr: wr,
        max_send_sge: sge,
        max_recv_sge: sge,
        max_inline_data: inline,
    }
}

/// The queue sizes of the fixture's QPs.
pub fn caps() -> QpCaps {
    qp_caps(32, 2, 64)
}

/// The attributes of a QP whose sends and receives both complete on `cq`, without an SRQ.
pub fn on_cq<Q: Platform>(cq: &Cq<Q>, cap: QpCaps) -> QpInitAttr<'_, Q> {
    QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
    }
}

/// The attributes of a QP whose sends and receives complete on `cq` and whose receives
/// come from `srq` (so it has no receive queue of its own: `cap`'s receive sizes are 0).
pub fn on_srq<'a, Q: Platform>(cq: &'a Cq<Q>, srq: &'a Srq<Q>, cap: QpCaps) -> QpInitAttr<'a, Q> {
    QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq: Some(srq),
        cap: QpCaps {
            max_recv_wr: 0,
            max_recv_sge: 0,
            ..cap
        },
    }
}

/// An RC QP of `n` on its CQ, in INIT with every right the device gives ([`qp_access`]).
pub fn rc_qp<Q: Platform>(n: &mut Node<Q>) -> Qp<Q, Rc> {
    rc_qp_on(&mut n.hca, &n.pd, &n.cq, &n.cq)
}

/// An RC QP of `hca` in `pd` whose sends complete on `send` and receives on `recv`, with
/// [`caps`], in INIT with every right the device gives ([`qp_access`]).
pub fn rc_qp_on<Q: Platform>(
    hca: &mut Hca<Q>,
    pd: &Pd<Q>,
    send: &Cq<Q>,
    recv: &Cq<Q>,
) -> Qp<Q, Rc> {
    let attr = QpInitAttr {
        send_cq: send,
        recv_cq: recv,
        srq: None,
        cap: caps(),
    };
    let qp = hca.create_qp::<Rc>(pd, &attr).unwrap();
    rc_init(hca, qp)
}

/// Moves an RC QP from RESET to INIT with every right the device gives ([`qp_access`]).
pub fn rc_init<Q: Platform>(hca: &mut Hca<Q>, mut qp: Qp<Q, Rc>) -> Qp<Q, Rc> {
    let access = qp_access(hca);
    qp.to_init(
        hca,
        InitAttr {
            access,
            ..InitAttr::default()
        },
    )
    .unwrap();
    qp
}

/// Moves `qp` of `n` through RTR to RTS towards QP `peer_qpn` of `peer` (PSNs 0x100, four
/// RDMA READs each way, path MTU 1024; the rest of RTS from `rts`).
pub fn connect<Q: Platform, R: Platform>(
    fabric: &Fabric,
    n: &mut Node<Q>,
    mut qp: Qp<Q, Rc>,
    peer: &Node<R>,
    peer_qpn: u32,
    rts: RtsAttr,
) -> Qp<Q, Rc> {
    let ah = path(fabric, peer);
    qp.to_rtr(
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
    .unwrap();
    qp
}

/// An RC QP ready to send.
pub type RcRts<Q = P> = Qp<Q, Rc>;

/// Two nodes with a connected RC QP each (`a` to `b`).
pub fn rc_pair(link: LinkLayer, rts: RtsAttr) -> (Fabric, Node, Node, RcRts, RcRts) {
    let fabric = Fabric::new(link);
    let (a, b, qa, qb) = rc_pair_on(&fabric, rts, MockHca::platform);
    (fabric, a, b, qa, qb)
}

/// Nodes 1 and 2 of `fabric` through platforms `platform` makes, with a connected RC QP
/// each (`a` to `b`).
pub fn rc_pair_on<Q: Platform>(
    fabric: &Fabric,
    rts: RtsAttr,
    platform: impl Fn(&MockHca) -> Q,
) -> (Node<Q>, Node<Q>, RcRts<Q>, RcRts<Q>) {
    let mut a = node_on(fabric, 1, &platform);
    let mut b = node_on(fabric, 2, &platform);
    let qa = rc_qp(&mut a);
    let qb = rc_qp(&mut b);
    let (na, nb) = (qa.qpn(), qb.qpn());
    let qa = connect(fabric, &mut a, qa, &b, nb, rts);
    let qb = connect(fabric, &mut b, qb, &a, na, rts);
    (a, b, qa, qb)
}

/// Everything `n`'s CQ holds now.
pub fn poll<Q: Platform>(n: &mut Node<Q>) -> Vec<WorkCompletion> {
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

/// Moves the fabric until nothing is in flight.
pub fn run(fabric: &Fabric) {
    assert!(fabric.run_until_idle(), "the fabric settles");
}
