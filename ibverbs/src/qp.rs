//! RC, UC and UD QPs by handle, for `ibv_create_qp`/`ibv_modify_qp`/`ibv_query_qp`/
//! `ibv_destroy_qp` and the `post_send`/`post_recv`/`poll_cq` ops. The table holds each QP
//! as the driver's [`Qp`] of its transport, whose state is a run-time value the driver
//! checks; `modify` checks the attribute mask as `ibv_modify_qp(3)` documents it for the
//! QP's type (the attributes each transition requires and those it may take) before the
//! driver checks the transition against the IB state table.

use uhca_driver::Error as DriverError;
use uhca_driver::addr::{AhAttr, Gid, Grh, Mac, StaticRate};
use uhca_driver::verbs::{
    InitAttr, InitModifyAttr, Qp, QpAttr, QpCaps, QpInitAttr, Rc, RecvWr, RtrAttr, RtsAttr,
    RtsModifyAttr, SendOp, SendWr, Uc, Ud, UdDest, WorkCompletion,
};
use uhca_fwif::consts::{AccessFlags, IbMtu, QpState as PrmState};
use uhca_hal::wq::Sge;

use crate::device::{Device, MockP, Open, VResult, VerbsError};

/// `enum ibv_qp_state` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum QpState {
    /// `IBV_QPS_RESET`.
    Reset = 0,
    /// `IBV_QPS_INIT`.
    Init = 1,
    /// `IBV_QPS_RTR`.
    Rtr = 2,
    /// `IBV_QPS_RTS`.
    Rts = 3,
    /// `IBV_QPS_SQD`.
    Sqd = 4,
    /// `IBV_QPS_SQE`.
    Sqe = 5,
    /// `IBV_QPS_ERR`.
    Err = 6,
}

impl QpState {
    /// From the C value (unknown values: `None`).
    pub fn from_raw(v: i32) -> Option<Self> {
        Some(match v {
            0 => Self::Reset,
            1 => Self::Init,
            2 => Self::Rtr,
            3 => Self::Rts,
            4 => Self::Sqd,
            5 => Self::Sqe,
            6 => Self::Err,
            _ => return None,
        })
    }

    /// The state the driver reports, as verbs names it.
    fn from_prm(s: PrmState) -> Self {
        match s {
            PrmState::Rst => Self::Reset,
            PrmState::Init => Self::Init,
            PrmState::Rtr => Self::Rtr,
            PrmState::Rts => Self::Rts,
            PrmState::Sqd | PrmState::Sqdrained => Self::Sqd,
            PrmState::Sqer => Self::Sqe,
            _ => Self::Err,
        }
    }
}

/// The QP types this library creates (`enum ibv_qp_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum Transport {
    /// `IBV_QPT_RC`.
    Rc = 2,
    /// `IBV_QPT_UC`.
    Uc = 3,
    /// `IBV_QPT_UD`.
    Ud = 4,
}

impl Transport {
    /// From the C value (other types: `None`).
    pub fn from_raw(v: i32) -> Option<Self> {
        Some(match v {
            2 => Self::Rc,
            3 => Self::Uc,
            4 => Self::Ud,
            _ => return None,
        })
    }
}

/// The driver's QP of each transport.
enum AnyQp {
    Rc(Qp<MockP, Rc>),
    Uc(Qp<MockP, Uc>),
    Ud(Qp<MockP, Ud>),
}

/// `$e` with `$q` bound to the QP whatever its transport (the methods every transport has).
macro_rules! each {
    ($qp:expr, $q:ident => $e:expr) => {
        match $qp {
            AnyQp::Rc($q) => $e,
            AnyQp::Uc($q) => $e,
            AnyQp::Ud($q) => $e,
        }
    };
}

impl AnyQp {
    fn transport(&self) -> Transport {
        match self {
            AnyQp::Rc(_) => Transport::Rc,
            AnyQp::Uc(_) => Transport::Uc,
            AnyQp::Ud(_) => Transport::Ud,
        }
    }
    fn state(&self) -> PrmState {
        each!(self, q => q.state())
    }
    fn qpn(&self) -> u32 {
        each!(self, q => q.qpn())
    }
}

/// What `ibv_query_qp` reports of a QP: what the library keeps, and the device's answer to
/// QUERY_QP when it gave one.
#[derive(Debug)]
pub struct QueriedQp {
    /// The driver's view of the state (refreshed from the device when it answered).
    pub state: QpState,
    /// The capabilities the QP got.
    pub caps: QpCaps,
    /// `sq_sig_all` at creation.
    pub sq_sig_all: bool,
    /// The port (from RESET→INIT).
    pub port: u8,
    /// The QP number.
    pub qpn: u32,
    /// The QP's type.
    pub transport: Transport,
    /// The device's context (Q_Key, PSNs, destination QP, MTU, P_Key index), if it answered.
    pub device: Option<QpAttr>,
}

/// A QP of the table with what `ibv_query_qp` reports.
pub struct QpEntry {
    qp: AnyQp,
    /// The capabilities it was created with.
    pub caps: QpCaps,
    /// Every send signalled (`sq_sig_all`).
    pub sq_sig_all: bool,
    /// The port (set at INIT).
    pub port: u8,
}

impl QpEntry {
    /// The QP number.
    pub(crate) fn qpn(&self) -> u32 {
        self.qp.qpn()
    }
}

/// The attributes of `ibv_modify_qp`'s mask this library knows, one bit each.
mod attr {
    pub const PORT: u32 = 1 << 0;
    pub const PKEY_INDEX: u32 = 1 << 1;
    pub const ACCESS_FLAGS: u32 = 1 << 2;
    pub const PATH_MTU: u32 = 1 << 3;
    pub const DEST_QPN: u32 = 1 << 4;
    pub const RQ_PSN: u32 = 1 << 5;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 6;
    pub const MIN_RNR_TIMER: u32 = 1 << 7;
    pub const AV: u32 = 1 << 8;
    pub const SQ_PSN: u32 = 1 << 9;
    pub const TIMEOUT: u32 = 1 << 10;
    pub const RETRY_CNT: u32 = 1 << 11;
    pub const RNR_RETRY: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const QKEY: u32 = 1 << 14;
    /// Their names, for the error messages.
    pub const NAMES: [&str; 15] = [
        "IBV_QP_PORT",
        "IBV_QP_PKEY_INDEX",
        "IBV_QP_ACCESS_FLAGS",
        "IBV_QP_PATH_MTU",
        "IBV_QP_DEST_QPN",
        "IBV_QP_RQ_PSN",
        "IBV_QP_MAX_DEST_RD_ATOMIC",
        "IBV_QP_MIN_RNR_TIMER",
        "IBV_QP_AV",
        "IBV_QP_SQ_PSN",
        "IBV_QP_TIMEOUT",
        "IBV_QP_RETRY_CNT",
        "IBV_QP_RNR_RETRY",
        "IBV_QP_MAX_QP_RD_ATOMIC",
        "IBV_QP_QKEY",
    ];
}

/// The attributes an RC transition requires, and those it may take besides (which this
/// library refuses with EOPNOTSUPP unless [`applied`] lists them), as
/// `ibv_modify_qp(3)` lists them. `None`: not a transition `ibv_modify_qp` makes with
/// attributes here.
fn rc_mask(from: QpState, to: QpState) -> Option<(u32, u32)> {
    use QpState as S;
    use attr::*;
    Some(match (from, to) {
        (_, S::Reset | S::Err) => (0, 0),
        (S::Reset, S::Init) => (PKEY_INDEX | PORT | ACCESS_FLAGS, 0),
        (S::Init, S::Init) => (0, PKEY_INDEX | PORT | ACCESS_FLAGS),
        (S::Init, S::Rtr) => (
            AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER,
            ACCESS_FLAGS | PKEY_INDEX,
        ),
        (S::Rtr, S::Rts) => (
            SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC,
            ACCESS_FLAGS | MIN_RNR_TIMER,
        ),
        (S::Rts, S::Rts) => (0, ACCESS_FLAGS | MIN_RNR_TIMER | TIMEOUT),
        (S::Sqe, S::Rts) => (0, ACCESS_FLAGS | MIN_RNR_TIMER),
        _ => return None,
    })
}

/// As [`rc_mask`], for UC: no RDMA READ or atomics, no acknowledgements (no timeout,
/// retries, RNR timer or read depths).
fn uc_mask(from: QpState, to: QpState) -> Option<(u32, u32)> {
    use QpState as S;
    use attr::*;
    Some(match (from, to) {
        (_, S::Reset | S::Err) => (0, 0),
        (S::Reset, S::Init) => (PKEY_INDEX | PORT | ACCESS_FLAGS, 0),
        (S::Init, S::Init) => (0, PKEY_INDEX | PORT | ACCESS_FLAGS),
        (S::Init, S::Rtr) => (AV | PATH_MTU | DEST_QPN | RQ_PSN, ACCESS_FLAGS | PKEY_INDEX),
        (S::Rtr, S::Rts) => (SQ_PSN, ACCESS_FLAGS),
        (S::Rts | S::Sqe, S::Rts) => (0, ACCESS_FLAGS),
        _ => return None,
    })
}

/// As [`rc_mask`], for UD: no path and no peer; the Q_Key at INIT, the first PSN at RTS.
fn ud_mask(from: QpState, to: QpState) -> Option<(u32, u32)> {
    use QpState as S;
    use attr::*;
    Some(match (from, to) {
        (_, S::Reset | S::Err) => (0, 0),
        (S::Reset, S::Init) => (PKEY_INDEX | PORT | QKEY, 0),
        (S::Init, S::Init) => (0, PKEY_INDEX | PORT | QKEY),
        (S::Init, S::Rtr) => (0, PKEY_INDEX | QKEY),
        (S::Rtr, S::Rts) => (SQ_PSN, QKEY),
        (S::Rts | S::Sqe, S::Rts) => (0, QKEY),
        _ => return None,
    })
}

/// The optional attributes of a transition this library applies: those INIT → INIT and
/// RTS → RTS change, by the QP's type (INIT → INIT keeps the QP's port). The driver's
/// `init_to_init` and `rts_to_rts` take the same ones.
fn applied(transport: Transport, from: QpState, to: QpState) -> u32 {
    use QpState as S;
    use attr::*;
    match (transport, from, to) {
        (Transport::Rc | Transport::Uc, S::Init, S::Init) => PKEY_INDEX | PORT | ACCESS_FLAGS,
        (Transport::Ud, S::Init, S::Init) => PKEY_INDEX | PORT | QKEY,
        (Transport::Rc, S::Rts, S::Rts) => ACCESS_FLAGS | MIN_RNR_TIMER | TIMEOUT,
        (Transport::Uc, S::Rts, S::Rts) => ACCESS_FLAGS,
        (Transport::Ud, S::Rts, S::Rts) => QKEY,
        _ => 0,
    }
}

fn names(bits: u32) -> String {
    attr::NAMES
        .iter()
        .enumerate()
        .filter(|(i, _)| bits & (1 << i) != 0)
        .map(|(_, n)| *n)
        .collect::<Vec<_>>()
        .join(" | ")
}

/// What `ibv_modify_qp` asks for, by attribute (each `Some` is a bit of the mask).
#[derive(Clone, Copy, Debug, Default)]
pub struct Modify {
    /// `IBV_QP_STATE`.
    pub state: Option<QpState>,
    /// `IBV_QP_PORT`.
    pub port: Option<u8>,
    /// `IBV_QP_PKEY_INDEX`.
    pub pkey_index: Option<u16>,
    /// `IBV_QP_ACCESS_FLAGS`.
    pub access: Option<AccessFlags>,
    /// `IBV_QP_PATH_MTU` (the C value, 1..=5).
    pub path_mtu: Option<u8>,
    /// `IBV_QP_DEST_QPN`.
    pub dest_qpn: Option<u32>,
    /// `IBV_QP_RQ_PSN`.
    pub rq_psn: Option<u32>,
    /// `IBV_QP_MAX_DEST_RD_ATOMIC`.
    pub max_dest_rd_atomic: Option<u8>,
    /// `IBV_QP_MIN_RNR_TIMER`.
    pub min_rnr_timer: Option<u8>,
    /// `IBV_QP_AV`: the path (global: the GRH's fields).
    pub av: Option<Av>,
    /// `IBV_QP_SQ_PSN`.
    pub sq_psn: Option<u32>,
    /// `IBV_QP_TIMEOUT`.
    pub timeout: Option<u8>,
    /// `IBV_QP_RETRY_CNT`.
    pub retry_cnt: Option<u8>,
    /// `IBV_QP_RNR_RETRY`.
    pub rnr_retry: Option<u8>,
    /// `IBV_QP_MAX_QP_RD_ATOMIC`.
    pub max_rd_atomic: Option<u8>,
    /// `IBV_QP_QKEY`.
    pub qkey: Option<u32>,
}

impl Modify {
    /// The attribute bits present ([`attr`]).
    fn mask(&self) -> u32 {
        use attr::*;
        let bit = |on: bool, b: u32| if on { b } else { 0 };
        bit(self.port.is_some(), PORT)
            | bit(self.pkey_index.is_some(), PKEY_INDEX)
            | bit(self.access.is_some(), ACCESS_FLAGS)
            | bit(self.path_mtu.is_some(), PATH_MTU)
            | bit(self.dest_qpn.is_some(), DEST_QPN)
            | bit(self.rq_psn.is_some(), RQ_PSN)
            | bit(self.max_dest_rd_atomic.is_some(), MAX_DEST_RD_ATOMIC)
            | bit(self.min_rnr_timer.is_some(), MIN_RNR_TIMER)
            | bit(self.av.is_some(), AV)
            | bit(self.sq_psn.is_some(), SQ_PSN)
            | bit(self.timeout.is_some(), TIMEOUT)
            | bit(self.retry_cnt.is_some(), RETRY_CNT)
            | bit(self.rnr_retry.is_some(), RNR_RETRY)
            | bit(self.max_rd_atomic.is_some(), MAX_QP_RD_ATOMIC)
            | bit(self.qkey.is_some(), QKEY)
    }
}

/// `struct ibv_ah_attr` as the QP needs it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Av {
    /// `is_global`.
    pub is_global: bool,
    /// `grh.dgid`.
    pub dgid: [u8; 16],
    /// `grh.sgid_index`.
    pub sgid_index: u8,
    /// `grh.hop_limit`.
    pub hop_limit: u8,
    /// `grh.traffic_class`.
    pub traffic_class: u8,
    /// `grh.flow_label`.
    pub flow_label: u32,
    /// `dlid`.
    pub dlid: u16,
    /// `sl`.
    pub sl: u8,
}

/// One scatter/gather entry as the application wrote it (its address, length, lkey): the
/// layout of `struct ibv_sge`, so the C layer lends the application's list as it is.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct AppSge {
    /// The application's address.
    pub addr: u64,
    /// Length.
    pub len: u32,
    /// Local key.
    pub lkey: u32,
}

/// A send work request as the application wrote it, borrowing its gather list.
#[derive(Clone, Copy, Debug)]
pub struct AppSendWr<'a> {
    /// `wr_id`.
    pub wr_id: u64,
    /// The operation (remote addresses and keys as the application gave them).
    pub op: SendOp,
    /// The gather (or, for READ and atomics, scatter) list.
    pub sges: &'a [AppSge],
    /// Signalled, fence, solicited.
    pub flags: uhca_driver::verbs::SendFlags,
    /// `IBV_SEND_INLINE`: the range of the post's inline bytes (gathered by the caller
    /// from the SGEs' addresses) that is this request's data; `sges` is then ignored.
    pub inline: Option<(usize, usize)>,
    /// `wr.ud` of a UD QP's request: the address handle's path, the remote QP and Q_Key.
    pub ud: Option<UdDest<'a>>,
}

impl AppSendWr<'_> {
    /// A placeholder for arrays (a SEND of nothing).
    pub const EMPTY: AppSendWr<'static> = AppSendWr {
        wr_id: 0,
        op: SendOp::Send,
        sges: &[],
        flags: uhca_driver::verbs::SendFlags::empty(),
        inline: None,
        ud: None,
    };
}

/// Work requests the posts handle per lock and doorbell (longer lists go in batches).
pub const POST_BATCH: usize = 16;
/// Scatter/gather entries of one batch, all requests together.
pub const POST_BATCH_SGES: usize = 64;

/// Runs `post` on consecutive batches of the `n` requests, each at most [`POST_BATCH`]
/// requests and [`POST_BATCH_SGES`] SGEs (`sges(i)`: request `i`'s; a request with more
/// is a batch of its own, refused when translated); a failure's index counts from the
/// first request.
pub(crate) fn in_batches(
    n: usize,
    sges: impl Fn(usize) -> usize,
    mut post: impl FnMut(std::ops::Range<usize>) -> Result<(), (usize, i32)>,
) -> Result<(), (usize, i32)> {
    let mut start = 0;
    while start < n {
        let (mut end, mut k) = (start, 0);
        while end < n && end - start < POST_BATCH {
            let l = sges(end);
            if end > start && k + l > POST_BATCH_SGES {
                break;
            }
            k += l;
            end += 1;
        }
        post(start..end).map_err(|(i, e)| (start + i, e))?;
        start = end;
    }
    Ok(())
}

/// The application's SGEs of a batch turned into uhca's, in `flat`, each request's range in
/// `ranges`; the index of the request at fault and the errno otherwise.
fn translate_batch<'a>(
    o: &Open,
    lists: impl Iterator<Item = Option<&'a [AppSge]>>,
    flat: &mut [Sge; POST_BATCH_SGES],
    ranges: &mut [(usize, usize); POST_BATCH],
) -> Result<(), (usize, i32)> {
    let mut k = 0;
    for (i, list) in lists.enumerate() {
        let start = k;
        for g in list.unwrap_or(&[]) {
            if k == POST_BATCH_SGES {
                return Err((i, libc::EINVAL));
            }
            flat[k] = o
                .translate(g.lkey, g.addr, g.len)
                .map_err(|e| (i, e.errno))?;
            k += 1;
        }
        ranges[i] = (start, k);
    }
    Ok(())
}

/// The errno rdma-core's mlx5 provider returns for a work request the driver refused:
/// ENOMEM for a full queue or too much inline data, EINVAL for the rest (an SGE outside its
/// MR, a QP in a state that does not take the request).
fn wr_errno(e: &uhca_driver::verbs::WrError) -> i32 {
    use uhca_driver::verbs::WrError;
    match e {
        WrError::QueueFull | WrError::InlineTooLong { .. } => libc::ENOMEM,
        _ => libc::EINVAL,
    }
}

fn einval(msg: impl Into<String>) -> VerbsError {
    VerbsError::new(libc::EINVAL, msg)
}

fn need<T>(v: Option<T>, what: &str) -> VResult<T> {
    v.ok_or_else(|| einval(format!("this transition needs {what}")))
}

/// The errno of a driver's refusal of a transition: EINVAL for an illegal transition or a
/// bad argument (nothing was sent), EOPNOTSUPP for what the driver does not do, EIO for
/// the device's refusal.
fn driver_errno(e: &DriverError) -> i32 {
    match e {
        DriverError::IllegalTransition { .. } | DriverError::InvalidArgument(_) => libc::EINVAL,
        DriverError::Unsupported(_) => libc::EOPNOTSUPP,
        _ => libc::EIO,
    }
}

/// The INIT → RTR attributes of a connected QP (RC, or UC with `rc` false, which has no
/// read depth or RNR timer) from the modify's attributes, with its RoCE path.
fn connected_rtr(link: uhca_driver::caps::LinkLayer, m: &Modify, rc: bool) -> VResult<RtrAttr> {
    let av = need(m.av, "IBV_QP_AV")?;
    let mtu = IbMtu::from_raw(need(m.path_mtu, "IBV_QP_PATH_MTU")?);
    let dest_qpn = need(m.dest_qpn, "IBV_QP_DEST_QPN")?;
    let ah = match link {
        uhca_driver::caps::LinkLayer::Ethernet => {
            if !av.is_global {
                return Err(einval("a RoCE path is global (is_global, a GID)"));
            }
            AhAttr::RoceV2 {
                sgid_index: av.sgid_index,
                dgid: Gid(av.dgid),
                // No neighbour table: the mock's fabric and its UDP uplink route by IP, as
                // the examples' --udp mode does.
                dmac: Mac([0xff; 6]),
                udp_sport: 0xc000 | (dest_qpn as u16 & 0x3fff),
                traffic_class: av.traffic_class,
                hop_limit: if av.hop_limit == 0 { 64 } else { av.hop_limit },
                flow_label: av.flow_label,
                sl: av.sl,
            }
        }
        // A VFIO function's InfiniBand port: LID-routed, with a GRH when the path is global.
        uhca_driver::caps::LinkLayer::InfiniBand => AhAttr::Ib {
            dlid: av.dlid,
            sl: av.sl,
            src_path_bits: 0,
            static_rate: StaticRate::PortCurrent,
            grh: av.is_global.then_some(Grh {
                dgid: Gid(av.dgid),
                sgid_index: av.sgid_index,
                flow_label: av.flow_label,
                hop_limit: av.hop_limit,
                traffic_class: av.traffic_class,
            }),
        },
    };
    let d = RtrAttr::default();
    Ok(RtrAttr {
        path_mtu: mtu,
        dest_qpn,
        rq_psn: need(m.rq_psn, "IBV_QP_RQ_PSN")?,
        max_dest_rd_atomic: if rc {
            need(m.max_dest_rd_atomic, "IBV_QP_MAX_DEST_RD_ATOMIC")?
        } else {
            d.max_dest_rd_atomic
        },
        min_rnr_timer: if rc {
            need(m.min_rnr_timer, "IBV_QP_MIN_RNR_TIMER")?
        } else {
            d.min_rnr_timer
        },
        ah,
    })
}

impl Device {
    /// `ibv_create_qp` for a QP of `transport` on `pd` whose queues complete to
    /// `send_cq`/`recv_cq`: the handle, the QP number and the capabilities it got.
    ///
    /// # Errors
    ///
    /// Unknown objects, or the driver's failure. With `srq`, the QP receives from that
    /// SRQ (its own receive sizes are ignored, as verbs says).
    #[allow(clippy::too_many_arguments)]
    pub fn create_qp(
        &self,
        transport: Transport,
        pd: u32,
        send_cq: u32,
        recv_cq: u32,
        srq: Option<u32>,
        caps: QpCaps,
        sq_sig_all: bool,
    ) -> VResult<(u32, u32, QpCaps)> {
        self.with_open(|o| {
            let pd = o.pds.get(&pd).ok_or_else(|| einval("unknown PD"))?;
            let scq = o
                .cqs
                .get(&send_cq)
                .ok_or_else(|| einval("unknown send CQ"))?;
            let rcq = o
                .cqs
                .get(&recv_cq)
                .ok_or_else(|| einval("unknown receive CQ"))?;
            let srq = match srq {
                Some(h) => Some(&o.srqs.get(&h).ok_or_else(|| einval("unknown SRQ"))?.0),
                None => None,
            };
            let cap = if srq.is_some() {
                QpCaps {
                    max_recv_wr: 0,
                    max_recv_sge: 0,
                    ..caps
                }
            } else {
                caps
            };
            let attr = QpInitAttr {
                send_cq: scq,
                recv_cq: rcq,
                srq,
                cap,
            };
            let hca = &mut o.hw.hca;
            let made = match transport {
                Transport::Rc => hca.create_qp::<Rc>(pd, &attr).map(AnyQp::Rc),
                Transport::Uc => hca.create_qp::<Uc>(pd, &attr).map(AnyQp::Uc),
                Transport::Ud => hca.create_qp::<Ud>(pd, &attr).map(AnyQp::Ud),
            };
            let qp =
                made.map_err(|e| VerbsError::new(libc::EINVAL, format!("create QP: {e:?}")))?;
            let got = each!(&qp, q => q.caps());
            let qpn = qp.qpn();
            let h = o.handle();
            o.qps.insert(
                h,
                QpEntry {
                    qp,
                    caps: got,
                    sq_sig_all,
                    port: 1,
                },
            );
            Ok((h, qpn, got))
        })?
    }

    /// `ibv_modify_qp`: the transition `m.state` names from the QP's state (the current
    /// state when the mask has no `IBV_QP_STATE`), with the attributes that transition
    /// requires, as `ibv_modify_qp(3)` lists them for RC. Returns the new state.
    ///
    /// # Errors
    ///
    /// EINVAL for an unknown QP, a transition the IB state table does not have, a required
    /// attribute missing or one the transition does not take (nothing is sent and nothing
    /// changes); EOPNOTSUPP for a transition or an optional attribute this library does not
    /// apply; the driver's failure (the QP stays in the state it was in).
    pub fn modify_qp(&self, handle: u32, m: &Modify) -> VResult<QpState> {
        self.with_open(|o| {
            let link = o.hw.hca.caps().link_layer;
            let e = o.qps.get_mut(&handle).ok_or_else(|| einval("unknown QP"))?;
            let from = QpState::from_prm(e.qp.state());
            let to = m.state.unwrap_or(from);
            let transport = e.qp.transport();
            let table = match transport {
                Transport::Rc => rc_mask,
                Transport::Uc => uc_mask,
                Transport::Ud => ud_mask,
            };
            let Some((required, optional)) = table(from, to) else {
                return Err(einval(format!("no transition {from:?} -> {to:?}")));
            };
            let given = m.mask();
            if given & !(required | optional) != 0 {
                return Err(einval(format!(
                    "{from:?} -> {to:?} takes no {}",
                    names(given & !(required | optional))
                )));
            }
            if required & !given != 0 {
                return Err(einval(format!(
                    "{from:?} -> {to:?} needs {}",
                    names(required & !given)
                )));
            }
            let refused = given & optional & !applied(transport, from, to);
            if refused != 0 {
                return Err(VerbsError::new(
                    libc::EOPNOTSUPP,
                    format!("{from:?} -> {to:?} with {}", names(refused)),
                ));
            }
            let hca = &mut o.hw.hca;
            let done = match (to, &mut e.qp) {
                (QpState::Reset, qp) => each!(qp, q => q.to_reset(hca)),
                (QpState::Err, qp) => each!(qp, q => q.to_err(hca)),
                (QpState::Init, qp) if from == QpState::Init => {
                    if m.port.is_some_and(|p| p != e.port) {
                        return Err(VerbsError::new(
                            libc::EOPNOTSUPP,
                            "INIT -> INIT to another port",
                        ));
                    }
                    let a = InitModifyAttr {
                        pkey_index: m.pkey_index,
                        access: m.access,
                        qkey: m.qkey,
                    };
                    each!(qp, q => q.init_to_init(hca, a))
                }
                (QpState::Init, qp) => {
                    let ud = transport == Transport::Ud;
                    let a = InitAttr {
                        port: need(m.port, "IBV_QP_PORT")?,
                        pkey_index: need(m.pkey_index, "IBV_QP_PKEY_INDEX")?,
                        access: if ud {
                            AccessFlags::empty()
                        } else {
                            need(m.access, "IBV_QP_ACCESS_FLAGS")?
                        },
                        qkey: if ud { need(m.qkey, "IBV_QP_QKEY")? } else { 0 },
                    };
                    let r = each!(qp, q => q.to_init(hca, a));
                    if r.is_ok() {
                        e.port = a.port;
                    }
                    r
                }
                (QpState::Rtr, AnyQp::Ud(q)) => q.to_rtr(hca),
                (QpState::Rtr, AnyQp::Rc(q)) => q.to_rtr(hca, connected_rtr(link, m, true)?),
                (QpState::Rtr, AnyQp::Uc(q)) => q.to_rtr(hca, connected_rtr(link, m, false)?),
                (QpState::Rts, qp) if from == QpState::Rts => {
                    let a = RtsModifyAttr {
                        access: m.access,
                        min_rnr_timer: m.min_rnr_timer,
                        timeout: m.timeout,
                        qkey: m.qkey,
                    };
                    each!(qp, q => q.rts_to_rts(hca, a))
                }
                (QpState::Rts, qp) if from == QpState::Sqe => each!(qp, q => q.recover_sq(hca)),
                (QpState::Rts, AnyQp::Rc(q)) if from == QpState::Rtr => q.to_rts(
                    hca,
                    RtsAttr {
                        sq_psn: need(m.sq_psn, "IBV_QP_SQ_PSN")?,
                        timeout: need(m.timeout, "IBV_QP_TIMEOUT")?,
                        retry_cnt: need(m.retry_cnt, "IBV_QP_RETRY_CNT")?,
                        rnr_retry: need(m.rnr_retry, "IBV_QP_RNR_RETRY")?,
                        max_rd_atomic: need(m.max_rd_atomic, "IBV_QP_MAX_QP_RD_ATOMIC")?,
                    },
                ),
                (QpState::Rts, AnyQp::Uc(q)) if from == QpState::Rtr => {
                    q.to_rts(hca, need(m.sq_psn, "IBV_QP_SQ_PSN")?)
                }
                (QpState::Rts, AnyQp::Ud(q)) if from == QpState::Rtr => {
                    q.to_rts(hca, need(m.sq_psn, "IBV_QP_SQ_PSN")?)
                }
                _ => Err(DriverError::Unsupported("this transition")),
            };
            match done {
                Ok(()) => Ok(QpState::from_prm(e.qp.state())),
                Err(er) => Err(VerbsError::new(
                    driver_errno(&er),
                    format!("{from:?} -> {to:?}: {er}"),
                )),
            }
        })?
    }

    /// `ibv_destroy_qp`.
    ///
    /// # Errors
    ///
    /// Unknown QP, or the driver's failure (the QP stays).
    pub fn destroy_qp(&self, handle: u32) -> VResult<()> {
        self.with_open(|o| {
            let e = o.qps.remove(&handle).ok_or_else(|| einval("unknown QP"))?;
            let QpEntry {
                qp,
                caps,
                sq_sig_all,
                port,
            } = e;
            let hca = &mut o.hw.hca;
            let failed = match qp {
                AnyQp::Rc(q) => q.destroy(hca).map_err(|f| {
                    let (q, er) = f.into_parts();
                    (AnyQp::Rc(q), er)
                }),
                AnyQp::Uc(q) => q.destroy(hca).map_err(|f| {
                    let (q, er) = f.into_parts();
                    (AnyQp::Uc(q), er)
                }),
                AnyQp::Ud(q) => q.destroy(hca).map_err(|f| {
                    let (q, er) = f.into_parts();
                    (AnyQp::Ud(q), er)
                }),
            };
            failed.map_err(|(qp, er)| {
                o.qps.insert(
                    handle,
                    QpEntry {
                        qp,
                        caps,
                        sq_sig_all,
                        port,
                    },
                );
                VerbsError::new(libc::EBUSY, format!("destroy QP: {er:?}"))
            })
        })?
    }

    /// The QP's state, capabilities, `sq_sig_all`, port, number and type (`ibv_query_qp`). The
    /// state is the driver's, refreshed from the device (QUERY_QP) when it answers: an
    /// error completion or the device's own move to ERR shows.
    ///
    /// # Errors
    ///
    /// Unknown QP.
    pub fn query_qp(&self, handle: u32) -> VResult<QueriedQp> {
        self.with_open(|o| {
            let e = o.qps.get(&handle).ok_or_else(|| einval("unknown QP"))?;
            // A device that does not answer leaves the driver's view as it was, and the
            // device's attributes unknown.
            let device = each!(&e.qp, q => q.query(&mut o.hw.hca)).ok();
            Ok(QueriedQp {
                state: QpState::from_prm(e.qp.state()),
                caps: e.caps,
                sq_sig_all: e.sq_sig_all,
                port: e.port,
                qpn: e.qp.qpn(),
                transport: e.qp.transport(),
                device,
            })
        })?
    }

    /// `post_send`: the application's work requests (their SGEs translated, or their
    /// inline bytes, ranges of `inline`), in batches of [`POST_BATCH`] under one lock and
    /// one doorbell each, with nothing allocated. On failure, the index of the first
    /// request not posted (the ones before it are) and the errno.
    /// A UD QP's requests carry their destination (`ud`), the others none.
    pub fn post_send(
        &self,
        handle: u32,
        wrs: &[AppSendWr<'_>],
        inline: &[u8],
    ) -> Result<(), (usize, i32)> {
        let sges = |i: usize| {
            let w: &AppSendWr<'_> = &wrs[i];
            if w.inline.is_some() { 0 } else { w.sges.len() }
        };
        in_batches(wrs.len(), sges, |r| {
            self.post_send_batch(handle, &wrs[r], inline)
        })
    }

    fn post_send_batch(
        &self,
        handle: u32,
        wrs: &[AppSendWr<'_>],
        inline: &[u8],
    ) -> Result<(), (usize, i32)> {
        self.with_open(|o| {
            let mut flat = [Sge::default(); POST_BATCH_SGES];
            let mut ranges = [(0, 0); POST_BATCH];
            let lists = wrs.iter().map(|w| w.inline.is_none().then_some(w.sges));
            // The requests before one whose SGEs fail are posted, as verbs says.
            let (count, refused) = match translate_batch(o, lists, &mut flat, &mut ranges) {
                Ok(()) => (wrs.len(), None),
                Err((i, e)) => (i, Some(e)),
            };
            let wrs = &wrs[..count];
            let e = o.qps.get_mut(&handle).ok_or((0, libc::EINVAL))?;
            let sig_all = e.sq_sig_all;
            let q = &mut e.qp;
            let mut reqs = [SendWr::new(0, SendOp::Send, &[]); POST_BATCH];
            for (i, w) in wrs.iter().enumerate() {
                let mut flags = w.flags;
                if sig_all {
                    flags |= uhca_driver::verbs::SendFlags::SIGNALED;
                }
                let (s, t) = ranges[i];
                let mut r = SendWr::new(w.wr_id, w.op, &flat[s..t]).with_flags(flags);
                if let Some(d) = w.ud {
                    r = r.with_ud(d);
                }
                reqs[i] = match w.inline {
                    Some((a, b)) => r.with_inline(inline.get(a..b).ok_or((i, libc::EINVAL))?),
                    None => r,
                };
            }
            each!(q, q => q.post_send(&reqs[..count]))
                .map_err(|b| (b.index, wr_errno(&b.error)))?;
            refused.map_or(Ok(()), |e| Err((count, e)))
        })
        .unwrap_or(Err((0, libc::EINVAL)))
    }

    /// `post_recv` over the application's SGEs, in batches as [`Device::post_send`],
    /// allocating nothing.
    pub fn post_recv(&self, handle: u32, wrs: &[(u64, &[AppSge])]) -> Result<(), (usize, i32)> {
        self.post_recv_batches(wrs, |o, reqs| {
            let e = o.qps.get_mut(&handle).ok_or((0, libc::EINVAL))?;
            each!(&mut e.qp, q => q.post_recv(reqs)).map_err(|b| (b.index, wr_errno(&b.error)))
        })
    }

    /// `post_srq_recv` over the application's SGEs, as [`Device::post_recv`].
    pub fn post_srq_recv(&self, handle: u32, wrs: &[(u64, &[AppSge])]) -> Result<(), (usize, i32)> {
        self.post_recv_batches(wrs, |o, reqs| {
            let (srq, _) = o.srqs.get_mut(&handle).ok_or((0, libc::EINVAL))?;
            srq.post_recv(reqs)
                .map_err(|b| (b.index, wr_errno(&b.error)))
        })
    }

    /// Receive requests in batches (SGEs translated on the stack, one lock per batch), each
    /// batch handed to `post` (a QP's or an SRQ's); the requests before one whose SGEs fail
    /// are posted, as verbs says.
    fn post_recv_batches(
        &self,
        wrs: &[(u64, &[AppSge])],
        post: impl Fn(&mut Open, &[RecvWr<'_>]) -> Result<(), (usize, i32)>,
    ) -> Result<(), (usize, i32)> {
        in_batches(
            wrs.len(),
            |i| wrs[i].1.len(),
            |r| {
                let chunk = &wrs[r];
                self.with_open(|o| {
                    let mut flat = [Sge::default(); POST_BATCH_SGES];
                    let mut ranges = [(0, 0); POST_BATCH];
                    let lists = chunk.iter().map(|w| Some(w.1));
                    let (count, refused) = match translate_batch(o, lists, &mut flat, &mut ranges) {
                        Ok(()) => (chunk.len(), None),
                        Err((i, e)) => (i, Some(e)),
                    };
                    let mut reqs = [RecvWr {
                        wr_id: 0,
                        sg_list: &[],
                    }; POST_BATCH];
                    for (i, (id, _)) in chunk[..count].iter().enumerate() {
                        let (s, t) = ranges[i];
                        reqs[i] = RecvWr {
                            wr_id: *id,
                            sg_list: &flat[s..t],
                        };
                    }
                    post(o, &reqs[..count])?;
                    refused.map_or(Ok(()), |e| Err((count, e)))
                })
                .unwrap_or(Err((0, libc::EINVAL)))
            },
        )
    }

    /// `poll_cq`: up to `out.len()` completions into `out` (the caller's memory: polling
    /// allocates nothing); the count written.
    ///
    /// # Errors
    ///
    /// Unknown CQ or the poller's failure.
    pub fn poll_cq(&self, handle: u32, out: &mut [WorkCompletion]) -> VResult<usize> {
        self.with_open(|o| {
            let cq = o.cqs.get_mut(&handle).ok_or_else(|| einval("unknown CQ"))?;
            cq.poll(out)
                .map_err(|e| VerbsError::new(libc::EIO, format!("poll: {e:?}")))
        })?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DeviceKind, DeviceSpec};
    use std::net::Ipv4Addr;
    use uhca_hal::HostBuf;

    #[test]
    fn transitions_by_mask() {
        let d = Device::new(DeviceSpec {
            name: "uhca-q".into(),
            kind: DeviceKind::MockUdp {
                ip: Ipv4Addr::new(127, 0, 0, 93),
            },
        });
        d.open().unwrap();
        let pd = d.alloc_pd().unwrap();
        let (cq, _) = d.create_cq(8).unwrap();
        let buf: &'static mut [u8] = Box::leak(vec![0u8; 4096].into_boxed_slice());
        let va = buf.as_ptr() as u64;
        let mr = d
            .reg_mr(pd, va, HostBuf::from(buf), AccessFlags::LOCAL_WRITE)
            .unwrap();
        let caps = QpCaps {
            max_send_wr: 1,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let (qp, qpn, got) = d
            .create_qp(Transport::Rc, pd, cq, cq, None, caps, false)
            .unwrap();
        assert!(got.max_recv_wr >= 4 && qpn != 0);
        let to = |s| Modify {
            state: Some(s),
            ..Modify::default()
        };
        // RESET -> RTR is not a transition; INIT needs its port and access.
        assert_eq!(
            d.modify_qp(qp, &to(QpState::Rtr)).unwrap_err().errno,
            libc::EINVAL
        );
        assert_eq!(
            d.modify_qp(qp, &to(QpState::Init)).unwrap_err().errno,
            libc::EINVAL
        );
        let sge = [AppSge {
            addr: va,
            len: 4096,
            lkey: mr.lkey,
        }];
        assert!(
            d.post_recv(qp, &[(1, &sge[..])]).is_err(),
            "RESET takes no receive"
        );
        let init = Modify {
            port: Some(1),
            access: Some(AccessFlags::empty()),
            pkey_index: Some(0),
            ..to(QpState::Init)
        };
        assert_eq!(d.modify_qp(qp, &init), Ok(QpState::Init));
        // An empty mask: INIT -> INIT changing nothing.
        assert_eq!(d.modify_qp(qp, &Modify::default()), Ok(QpState::Init));
        d.post_recv(qp, &[(1, &sge[..]), (2, &sge[..])]).unwrap();
        let outside = [AppSge {
            addr: va + 1,
            len: 4096,
            lkey: mr.lkey,
        }];
        assert_eq!(
            d.post_recv(qp, &[(3, &sge[..]), (4, &outside[..])]),
            Err((1, libc::EINVAL))
        );
        assert_eq!(
            d.post_send(
                qp,
                &[AppSendWr {
                    wr_id: 5,
                    op: SendOp::Send,
                    sges: &sge,
                    flags: uhca_driver::verbs::SendFlags::SIGNALED,
                    inline: None,
                    ud: None,
                }],
                &[]
            ),
            Err((0, libc::EINVAL)),
            "INIT sends nothing"
        );
        assert_eq!(d.query_qp(qp).unwrap().state, QpState::Init);
        // INIT -> RTR: a required attribute missing, or one RTR does not take, is EINVAL
        // and the QP stays in INIT.
        let rtr = Modify {
            av: Some(Av {
                is_global: true,
                ..Av::default()
            }),
            path_mtu: Some(3),
            dest_qpn: Some(qpn),
            rq_psn: Some(0),
            max_dest_rd_atomic: Some(1),
            min_rnr_timer: Some(12),
            ..to(QpState::Rtr)
        };
        let no_av = Modify { av: None, ..rtr };
        let e = d.modify_qp(qp, &no_av).unwrap_err();
        assert_eq!(e.errno, libc::EINVAL);
        assert!(format!("{e:?}").contains("IBV_QP_AV"), "{e:?}");
        let with_sq_psn = Modify {
            sq_psn: Some(1),
            ..rtr
        };
        let e = d.modify_qp(qp, &with_sq_psn).unwrap_err();
        assert_eq!(e.errno, libc::EINVAL);
        assert!(format!("{e:?}").contains("IBV_QP_SQ_PSN"), "{e:?}");
        assert_eq!(d.query_qp(qp).unwrap().state, QpState::Init);
        // To ERR flushes the receives: 1, 2, and 3 (posted before the refused 4, as verbs
        // posts the requests before `bad_wr`).
        assert_eq!(d.modify_qp(qp, &to(QpState::Err)), Ok(QpState::Err));
        let mut flushed = 0;
        for _ in 0..100 {
            flushed += d.poll_cq(cq, &mut [WorkCompletion::default(); 8]).unwrap();
            if flushed == 3 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(flushed, 3);
        assert_eq!(d.modify_qp(qp, &to(QpState::Reset)), Ok(QpState::Reset));
        d.destroy_qp(qp).unwrap();
        assert_eq!(d.destroy_qp(qp).unwrap_err().errno, libc::EINVAL);
        d.dereg_mr(mr.handle).unwrap();
        d.close().unwrap();
    }

    /// A UD QP takes the Q_Key at INIT, nothing at RTR and the first PSN at RTS, and no
    /// connected QP's attributes (a path, a destination QP); a UC QP's RTR takes no RC read
    /// depth or RNR timer.
    #[test]
    fn ud_and_uc_transitions_by_mask() {
        let d = Device::new(DeviceSpec {
            name: "uhca-ud".into(),
            kind: DeviceKind::MockUdp {
                ip: Ipv4Addr::new(127, 0, 0, 115),
            },
        });
        d.open().unwrap();
        let pd = d.alloc_pd().unwrap();
        let (cq, _) = d.create_cq(8).unwrap();
        let caps = QpCaps {
            max_send_wr: 1,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let to = |s| Modify {
            state: Some(s),
            ..Modify::default()
        };
        let (qp, _, _) = d
            .create_qp(Transport::Ud, pd, cq, cq, None, caps, false)
            .unwrap();
        assert_eq!(d.query_qp(qp).unwrap().transport, Transport::Ud);
        let init = Modify {
            port: Some(1),
            pkey_index: Some(0),
            ..to(QpState::Init)
        };
        let e = d.modify_qp(qp, &init).unwrap_err();
        assert_eq!(e.errno, libc::EINVAL);
        assert!(format!("{e:?}").contains("IBV_QP_QKEY"), "{e:?}");
        let with_access = Modify {
            access: Some(AccessFlags::empty()),
            qkey: Some(0x1111_1111),
            ..init
        };
        assert_eq!(
            d.modify_qp(qp, &with_access).unwrap_err().errno,
            libc::EINVAL,
            "UD takes no access flags"
        );
        let init = Modify {
            qkey: Some(0x1111_1111),
            ..init
        };
        assert_eq!(d.modify_qp(qp, &init), Ok(QpState::Init));
        let rtr_with_peer = Modify {
            dest_qpn: Some(5),
            ..to(QpState::Rtr)
        };
        let e = d.modify_qp(qp, &rtr_with_peer).unwrap_err();
        assert!(format!("{e:?}").contains("IBV_QP_DEST_QPN"), "{e:?}");
        assert_eq!(d.modify_qp(qp, &to(QpState::Rtr)), Ok(QpState::Rtr));
        let e = d.modify_qp(qp, &to(QpState::Rts)).unwrap_err();
        assert!(format!("{e:?}").contains("IBV_QP_SQ_PSN"), "{e:?}");
        let rts = Modify {
            sq_psn: Some(7),
            ..to(QpState::Rts)
        };
        assert_eq!(d.modify_qp(qp, &rts), Ok(QpState::Rts));
        // A UD send without a destination is refused.
        assert_eq!(
            d.post_send(
                qp,
                &[AppSendWr {
                    inline: Some((0, 4)),
                    ..AppSendWr::EMPTY
                }],
                &[0; 4]
            ),
            Err((0, libc::EINVAL))
        );
        d.destroy_qp(qp).unwrap();

        let (uc, qpn, _) = d
            .create_qp(Transport::Uc, pd, cq, cq, None, caps, false)
            .unwrap();
        let init = Modify {
            port: Some(1),
            pkey_index: Some(0),
            access: Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE),
            ..to(QpState::Init)
        };
        assert_eq!(d.modify_qp(uc, &init), Ok(QpState::Init));
        let rtr = Modify {
            av: Some(Av {
                is_global: true,
                ..Av::default()
            }),
            path_mtu: Some(3),
            dest_qpn: Some(qpn),
            rq_psn: Some(0),
            ..to(QpState::Rtr)
        };
        let rc_only = Modify {
            max_dest_rd_atomic: Some(1),
            ..rtr
        };
        let e = d.modify_qp(uc, &rc_only).unwrap_err();
        assert!(
            format!("{e:?}").contains("IBV_QP_MAX_DEST_RD_ATOMIC"),
            "{e:?}"
        );
        assert_eq!(d.modify_qp(uc, &rtr), Ok(QpState::Rtr));
        let rts = Modify {
            sq_psn: Some(0),
            ..to(QpState::Rts)
        };
        assert_eq!(d.modify_qp(uc, &rts), Ok(QpState::Rts));
        assert_eq!(d.query_qp(uc).unwrap().transport, Transport::Uc);
        d.destroy_qp(uc).unwrap();
        d.close().unwrap();
    }
}
