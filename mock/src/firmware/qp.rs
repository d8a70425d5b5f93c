//! Queue pairs: CREATE_QP, DESTROY_QP, QUERY_QP and the state machine (RST2INIT,
//! INIT2INIT, INIT2RTR, RTR2RTS, RTS2RTS, SQERR2RTS, 2ERR, 2RST), each transition checked against the
//! QP's current state (BAD_QP_STATE) and its parameters (BAD_PARAM).

use super::special_qp::{check_special_q_key, has_pd, is_special};
use super::{
    CmdResult, Ctx, Fail, Firmware, Qp, QpMoved, bad_param, bad_res, copy_field, lim, out,
    pages_for, pas_list, syndrome,
};
use crate::caps::{LinkLayer, PKEY_TABLE_ENTRIES};
use crate::objects::is_datagram_qp as is_datagram;
use uhca_fwif::cmd::*;
use uhca_fwif::consts::{ADAPTER_PAGE_SIZE, CmdStatus, QpServiceType, QpState};
use uhca_fwif::ctx::{Ads, Qpc, ads, qpc};
use uhca_fwif::{Field, PrmLayout};

/// Optional-parameter bits of the modify commands (`opt_param_mask`).
pub mod optpar {
    /// Responder RDMA read enable.
    pub const RRE: u32 = 1 << 1;
    /// Responder atomic enable.
    pub const RAE: u32 = 1 << 2;
    /// Responder RDMA write enable.
    pub const RWE: u32 = 1 << 3;
    /// P_Key index.
    pub const PKEY_INDEX: u32 = 1 << 4;
    /// Q_Key.
    pub const Q_KEY: u32 = 1 << 5;
    /// Minimum RNR NAK timer.
    pub const RNR_TIMEOUT: u32 = 1 << 6;
    /// Primary address path.
    pub const PRIMARY_ADDR_PATH: u32 = 1 << 7;
    /// Outstanding RDMA reads/atomics as requester.
    pub const SRA_MAX: u32 = 1 << 8;
    /// Outstanding RDMA reads/atomics as responder.
    pub const RRA_MAX: u32 = 1 << 9;
    /// Retry count.
    pub const RETRY_COUNT: u32 = 1 << 12;
    /// RNR retry count.
    pub const RNR_RETRY: u32 = 1 << 13;
    /// ACK timeout.
    pub const ACK_TIMEOUT: u32 = 1 << 14;
    /// Queue counter set.
    pub const COUNTER_SET_ID: u32 = 1 << 25;
}

/// Which QP context fields an optional-parameter bit covers.
const OPT_QPC: &[(u32, Field)] = &[
    (optpar::RRE, qpc::rre),
    (optpar::RAE, qpc::rae),
    (optpar::RWE, qpc::rwe),
    (optpar::Q_KEY, qpc::q_key),
    (optpar::RNR_TIMEOUT, qpc::min_rnr_nak),
    (optpar::SRA_MAX, qpc::log_sra_max),
    (optpar::RRA_MAX, qpc::log_rra_max),
    (optpar::RETRY_COUNT, qpc::retry_count),
    (optpar::RNR_RETRY, qpc::rnr_retry),
    (optpar::COUNTER_SET_ID, qpc::counter_set_id),
];

/// Address-path fields copied for a path change (everything but the port, set at INIT).
const PATH_FIELDS: &[Field] = &[
    ads::fl,
    ads::free_ar,
    ads::grh,
    ads::mlid,
    ads::rlid,
    ads::ack_timeout,
    ads::src_addr_index,
    ads::stat_rate,
    ads::hop_limit,
    ads::tclass,
    ads::flow_label,
    ads::rgid_rip,
    ads::f_dscp,
    ads::f_ecn,
    ads::f_eth_prio,
    ads::ecn,
    ads::dscp,
    ads::udp_sport,
    ads::dei_cfi,
    ads::eth_prio,
    ads::sl,
    ads::rmac_47_32,
    ads::rmac_31_0,
];

fn path_base() -> u32 {
    qpc::primary_address_path.bit_offset
}

fn copy_qpc(dst: &mut Qpc, src: &Qpc, fields: &[Field]) {
    for &f in fields {
        copy_field(&mut dst.0, &src.0, 0, f);
    }
}

fn copy_path(dst: &mut Qpc, src: &Qpc, fields: &[Field]) {
    for &f in fields {
        copy_field(&mut dst.0, &src.0, path_base(), f);
    }
}

fn apply_optional(dst: &mut Qpc, src: &Qpc, mask: u32) {
    for &(bit, f) in OPT_QPC {
        if mask & bit != 0 {
            copy_field(&mut dst.0, &src.0, 0, f);
        }
    }
    if mask & optpar::PKEY_INDEX != 0 {
        copy_path(dst, src, &[ads::pkey_index]);
    }
    if mask & optpar::PRIMARY_ADDR_PATH != 0 {
        copy_path(dst, src, PATH_FIELDS);
    }
    if mask & optpar::ACK_TIMEOUT != 0 {
        copy_path(dst, src, &[ads::ack_timeout]);
    }
}

/// `qpc.pm_state` MIGRATED (the PRM's path-migration states: 0 ARMED, 1 REARM, 3 MIGRATED).
const PM_STATE_MIGRATED: u8 = 3;

/// Path migration needs an alternate path; the model has none, so a QP context must say
/// MIGRATED. A context left zeroed says ARMED: a migration armed towards nothing.
fn check_pm_state(q: &Qpc) -> Result<(), Fail> {
    if q.pm_state() == PM_STATE_MIGRATED {
        Ok(())
    } else {
        Err(bad_param(syndrome::BAD_PM_STATE))
    }
}

fn qp_state_err() -> Fail {
    Fail::Cmd(CmdStatus::BadQpStateErr, syndrome::BAD_QP_TRANSITION)
}

/// A modify command's output and the QP's move, which the device hands to the engine.
type Moved = Result<(Vec<u8>, QpMoved), Fail>;

/// The modify commands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Transition {
    Rst2Init,
    Init2Init,
    Init2Rtr,
    Rtr2Rts,
    Rts2Rts,
    Sqerr2Rts,
    ToErr,
    ToRst,
}

impl Transition {
    fn allowed_from(self, s: QpState) -> bool {
        match self {
            Transition::Rst2Init => s == QpState::Rst,
            Transition::Init2Init | Transition::Init2Rtr => s == QpState::Init,
            Transition::Rtr2Rts => s == QpState::Rtr,
            Transition::Rts2Rts => s == QpState::Rts,
            Transition::Sqerr2Rts => s == QpState::Sqer,
            Transition::ToErr | Transition::ToRst => true,
        }
    }
    fn to(self) -> QpState {
        match self {
            Transition::Rst2Init | Transition::Init2Init => QpState::Init,
            Transition::Init2Rtr => QpState::Rtr,
            Transition::Rtr2Rts | Transition::Rts2Rts | Transition::Sqerr2Rts => QpState::Rts,
            Transition::ToErr => QpState::Err,
            Transition::ToRst => QpState::Rst,
        }
    }
}

impl Firmware<'_> {
    pub(crate) fn cmd_create_qp(&mut self, c: &Ctx, i: &CreateQpIn) -> CmdResult {
        let q = *i.qpc();
        let caps = self.state.caps.general_cur;
        if i.input_qpn() != 0 {
            return Err(bad_param(syndrome::BAD_INPUT_QPN));
        }
        check_pm_state(&q)?;
        if i.qpc_ext() || i.wq_umem_valid() || q.dbr_umem_valid() {
            return Err(bad_param(syndrome::UNSUPPORTED_FEATURE));
        }
        let st = QpServiceType::from_raw(q.st());
        let ok_type = match st {
            QpServiceType::Rc => caps.rc(),
            QpServiceType::Uc => caps.uc(),
            QpServiceType::Ud => caps.ud(),
            QpServiceType::Xrc => caps.xrc(),
            st if is_special(st) => {
                self.check_create_special_qp(st, &q)?;
                true
            }
            _ => false,
        };
        if !ok_type {
            return Err(bad_param(syndrome::BAD_QP_TYPE));
        }
        if st == QpServiceType::Xrc {
            super::xrc::check_xrc_qp(self.objs, &q)?;
        }
        if has_pd(st) && !self.objs.pds.contains(&q.pd()) {
            return Err(bad_param(syndrome::BAD_PD));
        }
        if !q.no_sq() && !self.objs.cqs.contains_key(&q.cqn_snd()) {
            return Err(bad_param(syndrome::BAD_CQ));
        }
        let rq_bytes = match q.rq_type() {
            0 => (1u64 << q.log_rq_size()) * (16u64 << q.log_rq_stride()),
            1 => {
                if !self.objs.srqs.contains_key(&q.srqn_rmpn_xrqn()) {
                    return Err(bad_param(syndrome::BAD_SRQ));
                }
                0
            }
            3 => 0,
            _ => return Err(bad_param(syndrome::BAD_RQ_TYPE)),
        };
        if q.rq_type() != 3 && !self.objs.cqs.contains_key(&q.cqn_rcv()) {
            return Err(bad_param(syndrome::BAD_CQ));
        }
        if q.log_sq_size() > caps.log_max_qp_sz() || q.log_rq_size() > caps.log_max_qp_sz() {
            return Err(bad_param(syndrome::BAD_QUEUE_SIZE));
        }
        // The UAR page is where the QP's send doorbells ring: a QP without a send queue
        // rings none, and Linux leaves the page 0 for the XRC targets it creates (`no_sq`,
        // no doorbell record, no page list).
        if !q.no_sq() && !self.objs.uars.contains(&q.uar_page()) {
            return Err(bad_param(syndrome::BAD_UAR));
        }
        if !q.dbr_addr().is_multiple_of(8) {
            return Err(bad_param(syndrome::BAD_DBR_ADDR));
        }
        // Timestamp formats: free-running (0), default (1), real time (2). Which of them a
        // QP may use is the capability the firmware reports for QPs: the RoCE page's
        // `qp_ts_format` on a function with RoCE, the general `sq_ts_format` otherwise
        // (capability encoding: 0 free-running, 1 real time, 2 both).
        let ts_cap = if caps.roce() {
            self.state.caps.roce_cur.qp_ts_format()
        } else {
            caps.sq_ts_format()
        };
        let ts_ok = match q.ts_format() {
            0 => ts_cap == 0 || ts_cap == 2,
            1 => true,
            2 => ts_cap == 1 || ts_cap == 2,
            _ => false,
        };
        if !ts_ok {
            return Err(bad_param(syndrome::BAD_TS_FORMAT));
        }
        let sq_bytes = if q.no_sq() {
            0
        } else {
            (1u64 << q.log_sq_size()) * 64
        };
        let page_size = (ADAPTER_PAGE_SIZE as u64) << q.log_page_size().min(20);
        // `page_offset`: the queue starts that many 64ths of a page into its first page.
        let start = q.page_offset() as u64 * (page_size / 64);
        let npages = pages_for(start + rq_bytes + sq_bytes, page_size) as usize;
        let pas = pas_list(c.raw, CreateQpIn::SIZE, npages)?;
        self.need_regular_pages()?;
        if self.objs.qps.len() >= 1 << self.state.caps.general_cur.log_max_qp() {
            return Err(lim(syndrome::TABLE_FULL));
        }
        let qpn = (self.objs.alloc_id() + super::FIRST_QPN) & 0x00ff_ffff;
        let mut stored = q;
        stored.set_state(QpState::Rst.raw());
        self.objs.qps.insert(qpn, Qp { qpc: stored, pas });
        let mut o = CreateQpOut::default();
        o.set_qpn(qpn);
        Ok(out(&o))
    }

    pub(crate) fn cmd_destroy_qp(&mut self, _c: &Ctx, i: &DestroyQpIn) -> CmdResult {
        if self.objs.qps.remove(&i.qpn()).is_none() {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        self.qp_dp.remove(&i.qpn());
        Ok(out(&DestroyQpOut::default()))
    }

    pub(crate) fn cmd_query_qp(&mut self, _c: &Ctx, i: &QueryQpIn) -> CmdResult {
        if i.qpc_ext() {
            return Err(bad_param(syndrome::UNSUPPORTED_FEATURE));
        }
        let Some(qp) = self.objs.qps.get(&i.qpn()) else {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        };
        let mut o = QueryQpOut::default();
        *o.qpc_mut() = qp.qpc;
        if let Some(s) = self.qp_dp.get(&i.qpn()) {
            s.report(o.qpc_mut());
        }
        Ok(out(&o))
    }

    /// Checks the parameters of an address path (RST2INIT port and P_Key, INIT2RTR and
    /// path changes: GID index, RoCE enablement).
    fn check_path(&self, p: &Ads, port_required: bool) -> Result<(), Fail> {
        if port_required && p.vhca_port_num() != 1 {
            return Err(bad_param(syndrome::BAD_PORT));
        }
        if p.pkey_index() as usize >= PKEY_TABLE_ENTRIES {
            return Err(bad_param(syndrome::BAD_PKEY_INDEX));
        }
        Ok(())
    }

    /// A static rate must be 0 (unlimited) or a code listed in `stat_rate_support`.
    fn check_stat_rate(&self, p: &Ads) -> Result<(), Fail> {
        let support = self.state.caps.general_cur.stat_rate_support();
        let rate = p.stat_rate();
        if rate != 0 && support & (1u16 << rate) == 0 {
            return Err(bad_param(syndrome::BAD_STAT_RATE));
        }
        Ok(())
    }

    fn check_remote_path(&self, st: QpServiceType, p: &Ads) -> Result<(), Fail> {
        if is_datagram(st) {
            return Ok(());
        }
        let idx = p.src_addr_index() as usize;
        match self.state.port_type() {
            LinkLayer::Ethernet => {
                if !self.state.nic_vport.roce_en() && !p.fl() {
                    return Err(bad_param(syndrome::ROCE_DISABLED));
                }
                if !p.fl() && self.state.roce_addrs.get(idx).is_none_or(|e| e.is_none()) {
                    return Err(bad_param(syndrome::BAD_GID_INDEX));
                }
            }
            LinkLayer::InfiniBand => {
                if p.grh() && idx >= crate::caps::IB_GID_TABLE_ENTRIES {
                    return Err(bad_param(syndrome::BAD_GID_INDEX));
                }
            }
        }
        Ok(())
    }

    fn modify_qp(
        &mut self,
        t: Transition,
        qpn: u32,
        opt: u32,
        req: Option<&Qpc>,
    ) -> Result<QpMoved, Fail> {
        let Some(qp) = self.objs.qps.get(&qpn) else {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        };
        let cur = QpState::from_raw(qp.qpc.state());
        if !t.allowed_from(cur) {
            return Err(qp_state_err());
        }
        let st = QpServiceType::from_raw(qp.qpc.st());
        let mut next = qp.qpc;
        let caps = &self.state.caps.general_cur;
        if let Some(r) = req {
            let rp = r.primary_address_path();
            if matches!(
                t,
                Transition::Rst2Init | Transition::Init2Rtr | Transition::Rtr2Rts
            ) {
                check_pm_state(r)?;
            }
            match t {
                Transition::Rst2Init => {
                    self.check_path(rp, true)?;
                    copy_path(&mut next, r, &[ads::pkey_index, ads::vhca_port_num]);
                    if is_datagram(st) {
                        check_special_q_key(st, r)?;
                        copy_qpc(&mut next, r, &[qpc::q_key]);
                    } else {
                        copy_qpc(&mut next, r, &[qpc::rre, qpc::rwe, qpc::rae]);
                    }
                    copy_qpc(&mut next, r, &[qpc::counter_set_id]);
                }
                Transition::Init2Rtr => {
                    if !is_datagram(st) {
                        if !(1..=5).contains(&r.mtu()) {
                            return Err(bad_param(syndrome::BAD_MTU));
                        }
                        if r.log_msg_max() > caps.log_max_msg() {
                            return Err(bad_param(syndrome::BAD_MSG_SIZE));
                        }
                        if r.log_rra_max() > caps.log_max_ra_res_qp() {
                            return Err(bad_param(syndrome::BAD_RDMA_DEPTH));
                        }
                        if rp.vhca_port_num() > 1 {
                            return Err(bad_param(syndrome::BAD_PORT));
                        }
                        self.check_remote_path(st, rp)?;
                        self.check_stat_rate(rp)?;
                        copy_qpc(
                            &mut next,
                            r,
                            &[
                                qpc::mtu,
                                qpc::log_msg_max,
                                qpc::remote_qpn,
                                qpc::next_rcv_psn,
                                qpc::log_rra_max,
                                qpc::min_rnr_nak,
                            ],
                        );
                        copy_path(&mut next, r, PATH_FIELDS);
                    }
                }
                Transition::Rtr2Rts => {
                    if r.log_sra_max() > caps.log_max_ra_req_qp() {
                        return Err(bad_param(syndrome::BAD_RDMA_DEPTH));
                    }
                    copy_qpc(&mut next, r, &[qpc::next_send_psn]);
                    if !is_datagram(st) {
                        copy_qpc(
                            &mut next,
                            r,
                            &[
                                qpc::retry_count,
                                qpc::rnr_retry,
                                qpc::log_sra_max,
                                qpc::log_ack_req_freq,
                            ],
                        );
                        copy_path(&mut next, r, &[ads::ack_timeout]);
                    }
                }
                // INIT2INIT and RTS2RTS change only what the optional-parameter mask
                // selects (below).
                Transition::Init2Init
                | Transition::Rts2Rts
                | Transition::Sqerr2Rts
                | Transition::ToErr
                | Transition::ToRst => {}
            }
            if opt & optpar::PRIMARY_ADDR_PATH != 0 {
                self.check_path(rp, false)?;
                self.check_stat_rate(rp)?;
                self.check_remote_path(st, rp)?;
            }
            if opt & optpar::Q_KEY != 0 {
                check_special_q_key(st, r)?;
            }
            if opt & optpar::PKEY_INDEX != 0 && rp.pkey_index() as usize >= PKEY_TABLE_ENTRIES {
                return Err(bad_param(syndrome::BAD_PKEY_INDEX));
            }
            if opt & optpar::SRA_MAX != 0 && r.log_sra_max() > caps.log_max_ra_req_qp() {
                return Err(bad_param(syndrome::BAD_RDMA_DEPTH));
            }
            if opt & optpar::RRA_MAX != 0 && r.log_rra_max() > caps.log_max_ra_res_qp() {
                return Err(bad_param(syndrome::BAD_RDMA_DEPTH));
            }
            apply_optional(&mut next, r, opt);
        }
        next.set_state(t.to().raw());
        if t == Transition::ToRst {
            next.set_hw_sq_wqebb_counter(0)
                .set_sw_sq_wqebb_counter(0)
                .set_hw_rq_counter(0)
                .set_sw_rq_counter(0);
        }
        if let Some(qp) = self.objs.qps.get_mut(&qpn) {
            qp.qpc = next;
        }
        Ok(QpMoved {
            qpn,
            from: cur,
            to: t.to(),
        })
    }

    pub(crate) fn cmd_rst2init(&mut self, _c: &Ctx, i: &Rst2initQpIn) -> Moved {
        let moved = self.modify_qp(
            Transition::Rst2Init,
            i.qpn(),
            i.opt_param_mask(),
            Some(i.qpc()),
        )?;
        Ok((out(&Rst2initQpOut::default()), moved))
    }

    pub(crate) fn cmd_init2init(&mut self, _c: &Ctx, i: &Init2initQpIn) -> Moved {
        let moved = self.modify_qp(
            Transition::Init2Init,
            i.qpn(),
            i.opt_param_mask(),
            Some(i.qpc()),
        )?;
        Ok((out(&Init2initQpOut::default()), moved))
    }

    pub(crate) fn cmd_init2rtr(&mut self, _c: &Ctx, i: &Init2rtrQpIn) -> Moved {
        let moved = self.modify_qp(
            Transition::Init2Rtr,
            i.qpn(),
            i.opt_param_mask(),
            Some(i.qpc()),
        )?;
        Ok((out(&Init2rtrQpOut::default()), moved))
    }

    pub(crate) fn cmd_rtr2rts(&mut self, _c: &Ctx, i: &Rtr2rtsQpIn) -> Moved {
        let moved = self.modify_qp(
            Transition::Rtr2Rts,
            i.qpn(),
            i.opt_param_mask(),
            Some(i.qpc()),
        )?;
        Ok((out(&Rtr2rtsQpOut::default()), moved))
    }

    pub(crate) fn cmd_rts2rts(&mut self, _c: &Ctx, i: &Rts2rtsQpIn) -> Moved {
        let moved = self.modify_qp(
            Transition::Rts2Rts,
            i.qpn(),
            i.opt_param_mask(),
            Some(i.qpc()),
        )?;
        Ok((out(&Rts2rtsQpOut::default()), moved))
    }

    pub(crate) fn cmd_sqerr2rts(&mut self, _c: &Ctx, i: &Sqerr2rtsQpIn) -> Moved {
        let moved = self.modify_qp(
            Transition::Sqerr2Rts,
            i.qpn(),
            i.opt_param_mask(),
            Some(i.qpc()),
        )?;
        Ok((out(&Sqerr2rtsQpOut::default()), moved))
    }

    pub(crate) fn cmd_2err(&mut self, _c: &Ctx, i: &Qp2errIn) -> Moved {
        let moved = self.modify_qp(Transition::ToErr, i.qpn(), 0, None)?;
        Ok((out(&Qp2errOut::default()), moved))
    }

    pub(crate) fn cmd_2rst(&mut self, _c: &Ctx, i: &Qp2rstIn) -> Moved {
        let moved = self.modify_qp(Transition::ToRst, i.qpn(), 0, None)?;
        Ok((out(&Qp2rstOut::default()), moved))
    }
}
