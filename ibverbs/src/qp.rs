//! RC QPs by handle, for `ibv_create_qp`/`ibv_modify_qp`/`ibv_query_qp`/`ibv_destroy_qp`
//! and the `post_send`/`post_recv`/`poll_cq` ops: uhca's QP keeps its state in its type, so
//! the table holds it as [`RcQp`], one variant per state, and `modify` moves it along the
//! transition the attributes ask for.

use uhca_driver::addr::{AddressHandle, Gid, Mac};
use uhca_driver::verbs::{
    InitAttr, Qp, QpCaps, QpInitAttr, Rc, RecvWr, RtrAttr, RtsAttr, SendOp, SendWr, WorkCompletion,
    state,
};
use uhca_fwif::consts::{AccessFlags, IbMtu};
use uhca_hal::wq::Sge;

use crate::device::{Device, MockP, Open, VResult, VerbsError};

/// An RC QP in the state its type says.
pub enum RcQp {
    /// RESET.
    Reset(Qp<MockP, Rc, state::Reset>),
    /// INIT.
    Init(Qp<MockP, Rc, state::Init>),
    /// RTR.
    Rtr(Qp<MockP, Rc, state::Rtr>),
    /// RTS.
    Rts(Qp<MockP, Rc, state::Rts>),
    /// ERR.
    Err(Qp<MockP, Rc, state::Err>),
}

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
    /// `IBV_QPS_ERR`.
    Err = 6,
}

impl QpState {
    /// From the C value (`SQD`, `SQE` and unknown values: `None`).
    pub fn from_raw(v: i32) -> Option<Self> {
        Some(match v {
            0 => Self::Reset,
            1 => Self::Init,
            2 => Self::Rtr,
            3 => Self::Rts,
            6 => Self::Err,
            _ => return None,
        })
    }
}

impl RcQp {
    fn state(&self) -> QpState {
        match self {
            RcQp::Reset(_) => QpState::Reset,
            RcQp::Init(_) => QpState::Init,
            RcQp::Rtr(_) => QpState::Rtr,
            RcQp::Rts(_) => QpState::Rts,
            RcQp::Err(_) => QpState::Err,
        }
    }

    fn qpn(&self) -> u32 {
        match self {
            RcQp::Reset(q) => q.qpn(),
            RcQp::Init(q) => q.qpn(),
            RcQp::Rtr(q) => q.qpn(),
            RcQp::Rts(q) => q.qpn(),
            RcQp::Err(q) => q.qpn(),
        }
    }
}

/// A QP of the table with what `ibv_query_qp` reports.
pub struct QpEntry {
    qp: Option<RcQp>,
    /// The capabilities it was created with.
    pub caps: QpCaps,
    /// Every send signalled (`sq_sig_all`).
    pub sq_sig_all: bool,
    /// The port (set at INIT).
    pub port: u8,
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

/// The errno rdma-core's mlx5 provider returns for a work request the driver refused.
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
                    qp: Some(RcQp::Reset(qp)),
                    caps: got,
                    sq_sig_all,
                    port: 1,
                },
            );
            Ok((h, qpn, got))
        })?
    }

    /// `ibv_modify_qp`: the transition `m.state` names from the QP's state, with the
    /// attributes that transition needs. Returns the new state.
    ///
    /// # Errors
    ///
    /// EINVAL for an unknown QP, a transition verbs does not allow or missing attributes;
    /// EOPNOTSUPP for a modify without a state change; the driver's failure (the QP stays
    /// as it was).
    pub fn modify_qp(&self, handle: u32, m: &Modify) -> VResult<QpState> {
        self.with_open(|o| {
            let link = o.hw.hca.caps().link_layer;
            let e = o.qps.get_mut(&handle).ok_or_else(|| einval("unknown QP"))?;
            let qp = e.qp.take().expect("a QP in the table");
            let to = match m.state {
                Some(s) => s,
                None => {
                    e.qp = Some(qp);
                    return Err(VerbsError::new(
                        libc::EOPNOTSUPP,
                        "modifying a QP's attributes without a state change",
                    ));
                }
            };
            let hca = &mut o.hw.hca;
            let fail = |what: &str, err: &dyn core::fmt::Debug| {
                VerbsError::new(libc::EINVAL, format!("{what}: {err:?}"))
            };
            let (next, err) = match (qp, to) {
                (RcQp::Reset(q), QpState::Init) => {
                    let attr = (|| {
                        Ok::<_, VerbsError>(InitAttr {
                            port: need(m.port, "IBV_QP_PORT")?,
                            pkey_index: m.pkey_index.unwrap_or(0),
                            access: need(m.access, "IBV_QP_ACCESS_FLAGS")?,
                            ..InitAttr::default()
                        })
                    })();
                    match attr {
                        Err(er) => (RcQp::Reset(q), Some(er)),
                        Ok(a) => {
                            let port = a.port;
                            match q.to_init(hca, a) {
                                Ok(q) => {
                                    e.port = port;
                                    (RcQp::Init(q), None)
                                }
                                Err(f) => (RcQp::Reset(f.object), Some(fail("to INIT", &f.error))),
                            }
                        }
                    }
                }
                (RcQp::Init(q), QpState::Rtr) => {
                    let attr = (|| {
                        let av = need(m.av, "IBV_QP_AV")?;
                        let mtu = IbMtu::from_raw(need(m.path_mtu, "IBV_QP_PATH_MTU")?);
                        let dest_qpn = need(m.dest_qpn, "IBV_QP_DEST_QPN")?;
                        let ah = match link {
                            uhca_driver::caps::LinkLayer::Ethernet => {
                                if !av.is_global {
                                    return Err(einval("a RoCE path is global (is_global, a GID)"));
                                }
                                AddressHandle::RoceV2 {
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
                        Ok(RtrAttr {
                            path_mtu: mtu,
                            dest_qpn,
                            rq_psn: need(m.rq_psn, "IBV_QP_RQ_PSN")?,
                            max_dest_rd_atomic: need(
                                m.max_dest_rd_atomic,
                                "IBV_QP_MAX_DEST_RD_ATOMIC",
                            )?,
                            min_rnr_timer: need(m.min_rnr_timer, "IBV_QP_MIN_RNR_TIMER")?,
                            ah,
                        })
                    })();
                    match attr {
                        Err(er) => (RcQp::Init(q), Some(er)),
                        Ok(a) => match q.to_rtr(hca, a) {
                            Ok(q) => (RcQp::Rtr(q), None),
                            Err(f) => (RcQp::Init(f.object), Some(fail("to RTR", &f.error))),
                        },
                    }
                }
                (RcQp::Rtr(q), QpState::Rts) => {
                    let attr = (|| {
                        Ok::<_, VerbsError>(RtsAttr {
                            sq_psn: need(m.sq_psn, "IBV_QP_SQ_PSN")?,
                            timeout: need(m.timeout, "IBV_QP_TIMEOUT")?,
                            retry_cnt: need(m.retry_cnt, "IBV_QP_RETRY_CNT")?,
                            rnr_retry: need(m.rnr_retry, "IBV_QP_RNR_RETRY")?,
                            max_rd_atomic: need(m.max_rd_atomic, "IBV_QP_MAX_QP_RD_ATOMIC")?,
                        })
                    })();
                    match attr {
                        Err(er) => (RcQp::Rtr(q), Some(er)),
                        Ok(a) => match q.to_rts(hca, a) {
                            Ok(q) => (RcQp::Rts(q), None),
                            Err(f) => (RcQp::Rtr(f.object), Some(fail("to RTS", &f.error))),
                        },
                    }
                }
                (q, QpState::Err) => match q {
                    RcQp::Reset(q) => wrap_err(q.to_err(hca), RcQp::Reset),
                    RcQp::Init(q) => wrap_err(q.to_err(hca), RcQp::Init),
                    RcQp::Rtr(q) => wrap_err(q.to_err(hca), RcQp::Rtr),
                    RcQp::Rts(q) => wrap_err(q.to_err(hca), RcQp::Rts),
                    RcQp::Err(q) => (RcQp::Err(q), None),
                },
                (q, QpState::Reset) => match q {
                    RcQp::Reset(q) => (RcQp::Reset(q), None),
                    RcQp::Init(q) => wrap_reset(q.to_reset(hca), RcQp::Init),
                    RcQp::Rtr(q) => wrap_reset(q.to_reset(hca), RcQp::Rtr),
                    RcQp::Rts(q) => wrap_reset(q.to_reset(hca), RcQp::Rts),
                    RcQp::Err(q) => wrap_reset(q.to_reset(hca), RcQp::Err),
                },
                (q, to) => {
                    let from = q.state();
                    (q, Some(einval(format!("no transition {from:?} -> {to:?}"))))
                }
            };
            let s = next.state();
            e.qp = Some(next);
            match err {
                Some(er) => Err(er),
                None => Ok(s),
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
            let mut e = o.qps.remove(&handle).ok_or_else(|| einval("unknown QP"))?;
            let hca = &mut o.hw.hca;
            let r = match e.qp.take().expect("a QP in the table") {
                RcQp::Reset(q) => q.destroy(hca).map_err(|f| (RcQp::Reset(f.object), f.error)),
                RcQp::Init(q) => q.destroy(hca).map_err(|f| (RcQp::Init(f.object), f.error)),
                RcQp::Rtr(q) => q.destroy(hca).map_err(|f| (RcQp::Rtr(f.object), f.error)),
                RcQp::Rts(q) => q.destroy(hca).map_err(|f| (RcQp::Rts(f.object), f.error)),
                RcQp::Err(q) => q.destroy(hca).map_err(|f| (RcQp::Err(f.object), f.error)),
            };
            r.map_err(|(q, er)| {
                e.qp = Some(q);
                o.qps.insert(handle, e);
                VerbsError::new(libc::EBUSY, format!("destroy QP: {er:?}"))
            })
        })?
    }

    /// The QP's state, capabilities, `sq_sig_all` and port (`ibv_query_qp`).
    ///
    /// # Errors
    ///
    /// Unknown QP.
    pub fn query_qp(&self, handle: u32) -> VResult<(QpState, QpCaps, bool, u8, u32)> {
        self.with_open(|o| {
            let e = o.qps.get(&handle).ok_or_else(|| einval("unknown QP"))?;
            let q = e.qp.as_ref().expect("a QP in the table");
            Ok((q.state(), e.caps, e.sq_sig_all, e.port, q.qpn()))
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
            let RcQp::Rts(q) = e.qp.as_mut().expect("a QP in the table") else {
                return Err((0, libc::EINVAL));
            };
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
                    let chunk = &chunk[..count];
                    let e = o.qps.get_mut(&handle).ok_or((0, libc::EINVAL))?;
                    let mut reqs = [RecvWr {
                        wr_id: 0,
                        sg_list: &[],
                    }; POST_BATCH];
                    for (i, (id, _)) in chunk.iter().enumerate() {
                        let (s, t) = ranges[i];
                        reqs[i] = RecvWr {
                            wr_id: *id,
                            sg_list: &flat[s..t],
                        };
                    }
                    let reqs = &reqs[..chunk.len()];
                    let r = match e.qp.as_mut().expect("a QP in the table") {
                        RcQp::Init(q) => q.post_recv(reqs),
                        RcQp::Rtr(q) => q.post_recv(reqs),
                        RcQp::Rts(q) => q.post_recv(reqs),
                        _ => return Err((0, libc::EINVAL)),
                    };
                    r.map_err(|b| (b.index, wr_errno(&b.error)))?;
                    refused.map_or(Ok(()), |e| Err((count, e)))
                })
                .unwrap_or(Err((0, libc::EINVAL)))
            },
        )
    }

    /// `post_srq_recv` over the application's SGEs, as [`Device::post_recv`].
    pub fn post_srq_recv(&self, handle: u32, wrs: &[(u64, &[AppSge])]) -> Result<(), (usize, i32)> {
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
                    let chunk = &chunk[..count];
                    let (srq, _) = o.srqs.get_mut(&handle).ok_or((0, libc::EINVAL))?;
                    let mut reqs = [RecvWr {
                        wr_id: 0,
                        sg_list: &[],
                    }; POST_BATCH];
                    for (i, (id, _)) in chunk.iter().enumerate() {
                        let (s, t) = ranges[i];
                        reqs[i] = RecvWr {
                            wr_id: *id,
                            sg_list: &flat[s..t],
                        };
                    }
                    srq.post_recv(&reqs[..chunk.len()])
                        .map_err(|b| (b.index, wr_errno(&b.error)))?;
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

/// A transition's outcome: the QP in its new state, or back in its old one with the error.
type Moved<To, From> = Result<Qp<MockP, Rc, To>, uhca_driver::Failed<Qp<MockP, Rc, From>>>;

fn wrap_err<S>(
    r: Moved<state::Err, S>,
    back: fn(Qp<MockP, Rc, S>) -> RcQp,
) -> (RcQp, Option<VerbsError>)
where
    S: uhca_driver::verbs::QpStateKind,
{
    match r {
        Ok(q) => (RcQp::Err(q), None),
        Err(f) => (
            back(f.object),
            Some(einval(format!("to ERR: {:?}", f.error))),
        ),
    }
}

fn wrap_reset<S>(
    r: Moved<state::Reset, S>,
    back: fn(Qp<MockP, Rc, S>) -> RcQp,
) -> (RcQp, Option<VerbsError>)
where
    S: uhca_driver::verbs::QpStateKind,
{
    match r {
        Ok(q) => (RcQp::Reset(q), None),
        Err(f) => (
            back(f.object),
            Some(einval(format!("to RESET: {:?}", f.error))),
        ),
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
        assert_eq!(
            d.modify_qp(qp, &Modify::default()).unwrap_err().errno,
            libc::EOPNOTSUPP
        );
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
