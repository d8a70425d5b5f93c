//! The special QPs CREATE_QP makes besides RC, UC and UD: the port's QP0 (subnet management
//! interface) and QP1 (general services interface), and the REG_UMR QP a kernel driver keeps
//! for memory-registration work requests.
//!
//! QP0 and QP1 get an ordinary QPN from the firmware (the one commands and doorbells use);
//! on the wire they are QP 0 and QP 1 of their port: the datapath delivers the port's
//! datagrams addressed to destination QP 0 or 1 to them and sends theirs with source QP 0
//! or 1. One of each per port; QP0 exists on InfiniBand ports only. QP1's Q_Key is the
//! well-known 0x8001_0000 of the general services interface (IBA volume 1, chapter 13).
//!
//! A REG_UMR QP only sends (a zero-length receive queue) and belongs to no protection
//! domain; the model takes it through its states like any QP but executes no UMR work
//! request (the engine completes one with a local QP operation error, as any opcode it does
//! not model).

use super::{Fail, Firmware, bad_param, busy, syndrome};
use crate::caps::LinkLayer;
use uhca_fwif::consts::QpServiceType;
use uhca_fwif::ctx::Qpc;

/// QP1's Q_Key (the general services interface's well-known Q_Key).
pub const QP1_Q_KEY: u32 = 0x8001_0000;

/// Whether `st` is one of the special QPs this module checks.
pub(crate) fn is_special(st: QpServiceType) -> bool {
    matches!(
        st,
        QpServiceType::Qp0 | QpServiceType::Qp1 | QpServiceType::RegUmr
    )
}

/// Whether CREATE_QP checks the context's `pd`: not for a REG_UMR QP, whose work requests
/// name the protection domain of each memory key they change (Linux leaves its `pd` 0).
pub(crate) fn has_pd(st: QpServiceType) -> bool {
    st != QpServiceType::RegUmr
}

impl Firmware<'_> {
    /// CREATE_QP's checks for a special QP (`is_special(st)`).
    pub(crate) fn check_create_special_qp(&self, st: QpServiceType, q: &Qpc) -> Result<(), Fail> {
        match st {
            QpServiceType::Qp0 | QpServiceType::Qp1 => {
                if st == QpServiceType::Qp0 && self.state.port_type() != LinkLayer::InfiniBand {
                    return Err(bad_param(syndrome::SPECIAL_QP_TAKEN));
                }
                if self.objs.special_qpn(st).is_some() {
                    return Err(busy(syndrome::SPECIAL_QP_TAKEN));
                }
                Ok(())
            }
            QpServiceType::RegUmr => {
                if q.rq_type() != 3 {
                    return Err(bad_param(syndrome::UMR_QP_WITH_RQ));
                }
                Ok(())
            }
            _ => Err(bad_param(syndrome::BAD_QP_TYPE)),
        }
    }
}

/// RST2INIT's Q_Key rule for QP1 (QP0's Q_Key is not checked by anyone: subnet
/// management packets carry none).
pub(crate) fn check_special_q_key(st: QpServiceType, r: &Qpc) -> Result<(), Fail> {
    if st == QpServiceType::Qp1 && r.q_key() != QP1_Q_KEY {
        return Err(bad_param(syndrome::BAD_QP1_Q_KEY));
    }
    Ok(())
}
