//! RC QPs by handle, for `ibv_create_qp`/`ibv_modify_qp`/`ibv_query_qp`/`ibv_destroy_qp`
//! and the `post_send`/`post_recv`/`poll_cq` ops. The table holds each QP as the driver's
//! [`Qp`], whose state is a run-time value the driver checks; `modify` checks the attribute
//! mask as `ibv_modify_qp(3)` documents it (the attributes each transition requires and
//! those it may take) before the driver checks the transition against the IB state table.

use uhca_driver::Error as DriverError;
use uhca_driver::addr::{AhAttr, Gid, Mac};
use uhca_driver::verbs::{
    InitAttr, InitModifyAttr, Qp, QpCaps, QpInitAttr, Rc, RecvWr, RtrAttr, RtsAttr, RtsModifyAttr,
    SendOp, SendWr, WorkCompletion,
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

/// A QP of the table with what `ibv_query_qp` reports.
pub struct QpEntry {
    qp: Qp<MockP, Rc>,
    /// The capabilities it was created with.
    pub caps: QpCaps,
    /// Every send signalled (`sq_sig_all`).
    pub sq_sig_all: bool,
    /// The port (set at INIT).
    pub port: u8,
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
    /// Their names, for the error messages.
    pub const NAMES: [&str; 14] = [
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
    ];
}

/// The attributes an RC transition requires, and those it may take besides (which this
/// library refuses with EOPNOTSUPP unless [`rc_applied`] lists them), as
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

/// The optional attributes of an RC transition this library applies: those INIT → INIT
/// and RTS → RTS change (INIT → INIT keeps the QP's port).
fn rc_applied(from: QpState, to: QpState) -> u32 {
    use QpState as S;
    use attr::*;
    match (from, to) {
        (S::Init, S::Init) => PKEY_INDEX | PORT | ACCESS_FLAGS,
        (S::Rts, S::Rts) => ACCESS_FLAGS | MIN_RNR_TIMER | TIMEOUT,
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
}

impl AppSendWr<'_> {
    /// A placeholder for arrays (a SEND of nothing).
    pub const EMPTY: AppSendWr<'static> = AppSendWr {
        wr_id: 0,
        op: SendOp::Send,
        sges: &[],
        flags: uhca_driver::verbs::SendFlags::empty(),
        inline: None,
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

impl Device {
    /// `ibv_create_qp` for an RC QP on `pd` whose queues complete to `send_cq`/`recv_cq`:
    /// the handle, the QP number and the capabilities it got.
    ///
    /// # Errors
    ///
    /// Unknown objects, or the driver's failure. With `srq`, the QP receives from that
    /// SRQ (its own receive sizes are ignored, as verbs says).
    pub fn create_qp(
        &self,
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
            let qp =
                o.hw.hca
                    .create_qp::<Rc>(pd, &attr)
                    .map_err(|e| VerbsError::new(libc::EINVAL, format!("create QP: {e:?}")))?;
            let got = qp.caps();
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
            let Some((required, optional)) = rc_mask(from, to) else {
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
            let refused = given & optional & !rc_applied(from, to);
            if refused != 0 {
                return Err(VerbsError::new(
                    libc::EOPNOTSUPP,
                    format!("{from:?} -> {to:?} with {}", names(refused)),
                ));
            }
            let hca = &mut o.hw.hca;
            let qp = &mut e.qp;
            let done = match to {
                QpState::Reset => qp.to_reset(hca),
                QpState::Err => qp.to_err(hca),
                QpState::Init if from == QpState::Init => {
                    if m.port.is_some_and(|p| p != e.port) {
                        return Err(VerbsError::new(
                            libc::EOPNOTSUPP,
                            "INIT -> INIT to another port",
                        ));
                    }
                    qp.init_to_init(
                        hca,
                        InitModifyAttr {
                            pkey_index: m.pkey_index,
                            access: m.access,
                            qkey: None,
                        },
                    )
                }
                QpState::Init => {
                    let a = InitAttr {
                        port: need(m.port, "IBV_QP_PORT")?,
                        pkey_index: need(m.pkey_index, "IBV_QP_PKEY_INDEX")?,
                        access: need(m.access, "IBV_QP_ACCESS_FLAGS")?,
                        ..InitAttr::default()
                    };
                    let r = qp.to_init(hca, a);
                    if r.is_ok() {
                        e.port = a.port;
                    }
                    r
                }
                QpState::Rtr => {
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
                                // No neighbour table: the mock's fabric and its UDP uplink
                                // route by IP, as the examples' --udp mode does.
                                dmac: Mac([0xff; 6]),
                                udp_sport: 0xc000 | (dest_qpn as u16 & 0x3fff),
                                traffic_class: av.traffic_class,
                                hop_limit: if av.hop_limit == 0 { 64 } else { av.hop_limit },
                                flow_label: av.flow_label,
                                sl: av.sl,
                            }
                        }
                        uhca_driver::caps::LinkLayer::InfiniBand => {
                            return Err(VerbsError::new(
                                libc::EOPNOTSUPP,
                                "InfiniBand paths (the devices here are RoCE)",
                            ));
                        }
                    };
                    qp.to_rtr(
                        hca,
                        RtrAttr {
                            path_mtu: mtu,
                            dest_qpn,
                            rq_psn: need(m.rq_psn, "IBV_QP_RQ_PSN")?,
                            max_dest_rd_atomic: need(
                                m.max_dest_rd_atomic,
                                "IBV_QP_MAX_DEST_RD_ATOMIC",
                            )?,
                            min_rnr_timer: need(m.min_rnr_timer, "IBV_QP_MIN_RNR_TIMER")?,
                            ah,
                        },
                    )
                }
                QpState::Rts if from == QpState::Rtr => qp.to_rts(
                    hca,
                    RtsAttr {
                        sq_psn: need(m.sq_psn, "IBV_QP_SQ_PSN")?,
                        timeout: need(m.timeout, "IBV_QP_TIMEOUT")?,
                        retry_cnt: need(m.retry_cnt, "IBV_QP_RETRY_CNT")?,
                        rnr_retry: need(m.rnr_retry, "IBV_QP_RNR_RETRY")?,
                        max_rd_atomic: need(m.max_rd_atomic, "IBV_QP_MAX_QP_RD_ATOMIC")?,
                    },
                ),
                QpState::Rts if from == QpState::Rts => qp.rts_to_rts(
                    hca,
                    RtsModifyAttr {
                        access: m.access,
                        min_rnr_timer: m.min_rnr_timer,
                        timeout: m.timeout,
                        qkey: None,
                    },
                ),
                QpState::Rts if from == QpState::Sqe => qp.recover_sq(hca),
                _ => Err(DriverError::Unsupported("this transition")),
            };
            match done {
                Ok(()) => Ok(QpState::from_prm(qp.state())),
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
            qp.destroy(&mut o.hw.hca).map_err(|f| {
                let (qp, er) = f.into_parts();
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

    /// The QP's state, capabilities, `sq_sig_all`, port and number (`ibv_query_qp`). The
    /// state is the driver's, refreshed from the device (QUERY_QP) when it answers: an
    /// error completion or the device's own move to ERR shows.
    ///
    /// # Errors
    ///
    /// Unknown QP.
    pub fn query_qp(&self, handle: u32) -> VResult<(QpState, QpCaps, bool, u8, u32)> {
        self.with_open(|o| {
            let e = o.qps.get(&handle).ok_or_else(|| einval("unknown QP"))?;
            // A device that does not answer leaves the driver's view as it was.
            let _ = e.qp.query(&mut o.hw.hca);
            let s = QpState::from_prm(e.qp.state());
            Ok((s, e.caps, e.sq_sig_all, e.port, e.qp.qpn()))
        })?
    }

    /// `post_send`: the application's work requests (their SGEs translated, or their
    /// inline bytes, ranges of `inline`), in batches of [`POST_BATCH`] under one lock and
    /// one doorbell each, with nothing allocated. On failure, the index of the first
    /// request not posted (the ones before it are) and the errno.
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
                let r = SendWr::new(w.wr_id, w.op, &flat[s..t]).with_flags(flags);
                reqs[i] = match w.inline {
                    Some((a, b)) => r.with_inline(inline.get(a..b).ok_or((i, libc::EINVAL))?),
                    None => r,
                };
            }
            q.post_send(&reqs[..count])
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
            e.qp.post_recv(reqs)
                .map_err(|b| (b.index, wr_errno(&b.error)))
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
        let (qp, qpn, got) = d.create_qp(pd, cq, cq, None, caps, false).unwrap();
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
                }],
                &[]
            ),
            Err((0, libc::EINVAL)),
            "INIT sends nothing"
        );
        assert_eq!(d.query_qp(qp).unwrap().0, QpState::Init);
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
        assert_eq!(d.query_qp(qp).unwrap().0, QpState::Init);
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
}
