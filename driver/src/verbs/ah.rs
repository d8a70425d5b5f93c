//! Address handles for UD sends.
//!
//! mlx5 address handles live in software (rdma-core builds them without a command): an
//! [`Ah`] checks its [`AhAttr`] against the port once and keeps the prepared
//! address vector (`mlx5_av`) that every UD send to that destination copies into its
//! datagram segment, with the destination QPN and Q_Key of the work request.

use uhca_fwif::wqe::Av;
use uhca_hal::Platform;

use crate::addr::AhAttr;
use crate::caps::LinkLayer;
#[cfg(doc)]
use crate::error::Error;
use crate::error::{Arg, InvalidArgument, Result};
use crate::hca::Hca;
use crate::verbs::qp::{ah_link_layer, port_in_range};

/// Mask of a 24-bit QPN.
const MASK24: u32 = 0x00ff_ffff;

/// A UD address handle: a destination path, checked and encoded once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ah {
    attr: AhAttr,
    port: u8,
    av: Av,
}

impl Ah {
    /// The path it was created with (`ibv_query_ah`).
    pub fn attr(&self) -> &AhAttr {
        &self.attr
    }

    /// The port it sends from.
    pub fn port(&self) -> u8 {
        self.port
    }

    /// The address vector for a send to QP `dqpn` with Q_Key `qkey`, ready for
    /// [`uhca_hal::wq::WqeBuilder::datagram`].
    pub fn av(&self, dqpn: u32, qkey: u32) -> Av {
        let mut av = self.av;
        av.qkey = qkey.into();
        // The driver writes the extended (48-byte) form only, as libmlx5 does.
        av.dqp_dct = (Av::EXTENDED_UD_AV | (dqpn & MASK24)).into();
        av
    }
}

impl<P: Platform> Hca<P> {
    /// Creates an address handle (`ibv_create_ah`): no command, the path is checked
    /// against the port and encoded.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a port the HCA does not have, a path of the other
    /// link layer (InfiniBand LIDs on an Ethernet port or the reverse), a service level
    /// or source GID index out of range, or a zero destination LID.
    pub fn create_ah(&self, port: u8, attr: AhAttr) -> Result<Ah> {
        let caps = self.caps();
        port_in_range(port, caps.num_ports)?;
        match (attr, caps.link_layer) {
            (AhAttr::Ib { dlid, sl, grh, .. }, LinkLayer::InfiniBand) => {
                if dlid == 0 {
                    return Err(InvalidArgument::min(Arg::Dlid, 0, 1).into());
                }
                if sl > 15 {
                    return Err(InvalidArgument::max(Arg::ServiceLevel, sl.into(), 15).into());
                }
                if let Some(g) = grh
                    && g.sgid_index as u32 >= caps.gid_table_len.max(1)
                {
                    return Err(InvalidArgument::max(
                        Arg::SgidIndex,
                        g.sgid_index.into(),
                        u64::from(caps.gid_table_len.max(1)) - 1,
                    )
                    .into());
                }
            }
            (AhAttr::RoceV2 { sgid_index, sl, .. }, LinkLayer::Ethernet) => {
                let table = self
                    .roce_caps()
                    .map_or(caps.gid_table_len, |r| r.address_table_len as u32);
                if sgid_index as u32 >= table {
                    return Err(InvalidArgument::max(
                        Arg::SgidIndex,
                        sgid_index.into(),
                        u64::from(table).saturating_sub(1),
                    )
                    .into());
                }
                if sl > 7 {
                    return Err(InvalidArgument::max(Arg::ServiceLevel, sl.into(), 7).into());
                }
            }
            (ah, _) => return Err(ah_link_layer(&ah).into()),
        }
        let mut av = Av::default();
        attr.write_av(&mut av, 0, 0, self.hca_cap().stat_rate_support());
        Ok(Ah { attr, port, av })
    }
}
