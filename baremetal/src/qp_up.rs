//! The one place this program moves RC queue pairs through their states: create, INIT,
//! RTR and RTS for a pair of QPs on two functions of this guest ([`rc_pair`]), and ERR
//! before destruction ([`to_err`]). Every other part of the program holds the connected
//! QP as [`RcQp`] and only posts and polls, so a change of the driver's QP API touches
//! this file alone.
//!
//! The peers' QP numbers and PSNs are known here because both functions are in this
//! guest (no exchange over a wire is needed). The one exception is `checks::cm`, whose
//! QPs (created here, in INIT) are taken to RTR and RTS by the driver's communication
//! manager from what the REQ and REP carry.

use uhca_driver::Hca;
use uhca_driver::addr::{AhAttr, StaticRate};
use uhca_driver::caps::LinkLayer;
use uhca_driver::verbs::{Cq, InitAttr, Pd, Qp, QpCaps, QpInitAttr, Rc, RtrAttr, RtsAttr};
use uhca_fwif::consts::{AccessFlags, IbMtu};

use crate::platform::BareMetal;
use crate::{Addr, Res};

/// A connected RC QP (RTS) on one of this program's functions.
pub type RcQp<'p> = Qp<&'p BareMetal, Rc>;

/// One side of a pair: its HCA, PD, CQ (send and receive) and port address.
pub struct End<'a, 'p> {
    pub hca: &'a mut Hca<&'p BareMetal>,
    pub pd: &'a Pd<&'p BareMetal>,
    pub cq: &'a Cq<&'p BareMetal>,
    pub addr: &'a Addr,
    /// The first PSN this side sends.
    pub psn: u32,
}

/// What remote peers may do on the pair's QPs.
pub const REMOTE: AccessFlags = AccessFlags::REMOTE_WRITE
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

/// Creates an RC QP on each end (8 send and 8 receive entries, one SGE each) and takes both
/// to RTS, connected to each other: remote write, read and atomics allowed, MTU 1024, one
/// outstanding READ or atomic each way.
pub fn rc_pair<'p>(a: End<'_, 'p>, b: End<'_, 'p>) -> Res<(RcQp<'p>, RcQp<'p>)> {
    let mut qa = create(a.hca, a.pd, a.cq)?;
    let mut qb = create(b.hca, b.pd, b.cq)?;
    let (na, nb) = (qa.qpn(), qb.qpn());
    connect(a.hca, &mut qa, b.addr, nb, a.psn, b.psn)?;
    connect(b.hca, &mut qb, a.addr, na, b.psn, a.psn)?;
    Ok((qa, qb))
}

/// Moves `qp` to ERR (its outstanding work requests flush) before it is destroyed.
pub fn to_err<'p>(hca: &mut Hca<&'p BareMetal>, qp: &mut RcQp<'p>) -> Res<()> {
    qp.to_err(hca).map_err(|e| msg!("to_err: {e}"))
}

/// An RC QP of 8 send and 8 receive entries on `cq`, in INIT with [`REMOTE`] rights.
pub fn create<'p>(
    hca: &mut Hca<&'p BareMetal>,
    pd: &Pd<&'p BareMetal>,
    cq: &Cq<&'p BareMetal>,
) -> Res<RcQp<'p>> {
    let attr = QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCaps {
            max_send_wr: 8,
            max_recv_wr: 8,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
    };
    let mut qp = hca
        .create_qp::<Rc>(pd, &attr)
        .map_err(|e| msg!("create_qp: {e}"))?;
    let init = InitAttr {
        port: 1,
        access: REMOTE,
        ..InitAttr::default()
    };
    qp.to_init(hca, init).map_err(|e| msg!("to_init: {e}"))?;
    Ok(qp)
}

/// The path to `peer`: its LID (InfiniBand) or GID and MAC (RoCEv2).
fn path(link: LinkLayer, peer: &Addr, peer_qpn: u32) -> AhAttr {
    match link {
        LinkLayer::InfiniBand => AhAttr::Ib {
            dlid: peer.lid,
            sl: 0,
            src_path_bits: 0,
            static_rate: StaticRate::PortCurrent,
            grh: None,
        },
        LinkLayer::Ethernet => AhAttr::RoceV2 {
            sgid_index: 0,
            dgid: peer.gid,
            dmac: peer.mac,
            udp_sport: 0xc000 | (peer_qpn as u16 & 0x3fff),
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            sl: 0,
        },
    }
}

fn connect<'p>(
    hca: &mut Hca<&'p BareMetal>,
    qp: &mut RcQp<'p>,
    peer: &Addr,
    peer_qpn: u32,
    my_psn: u32,
    peer_psn: u32,
) -> Res<()> {
    let link = hca.caps().link_layer;
    let rtr = RtrAttr {
        path_mtu: IbMtu::Mtu1024,
        dest_qpn: peer_qpn,
        rq_psn: peer_psn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah: path(link, peer, peer_qpn),
    };
    qp.to_rtr(hca, rtr).map_err(|e| msg!("to_rtr: {e}"))?;
    let rts = RtsAttr {
        sq_psn: my_psn,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
    };
    qp.to_rts(hca, rts).map_err(|e| msg!("to_rts: {e}"))
}
