//! The reserved lkey: the one local key whose addresses are the device's own bus addresses.
//!
//! QUERY_SPECIAL_CONTEXTS reports, among the firmware's special memory keys, `resd_lkey`: a
//! local key with **no translation and no protection**. A scatter/gather entry with it
//! names an address the device puts on the bus as it is — under VFIO an IOVA of the
//! function's IOMMU domain — with no memory region behind it: no PD, no access rights, no
//! bounds. The device reads or writes whatever the IOMMU maps at that address, and the
//! IOMMU is the only thing that stops it anywhere else (an address nothing maps is an IOMMU
//! fault: the device gets an error for the access, and the work request completes in
//! error). Without an IOMMU it is physical memory.
//!
//! A kernel driver uses such a key for buffers it mapped itself (early Linux `mlx5_ib`
//! offered it as the device's `local_dma_lkey`, and sets `qpc.rlky` on its kernel QPs);
//! rdma-core's user QPs never get it. Here it serves the same purpose for a program that
//! manages IOVAs itself, and it lets a test name an IOVA that no memory region covers.
//!
//! Two steps make it usable, so it cannot be used by accident:
//!
//! 1. [`Hca::reserved_lkey`] asks the firmware for the key (QUERY_SPECIAL_CONTEXTS) and
//!    returns it as a [`ReservedLkey`], a type of its own, never a bare `u32`;
//! 2. a QP honours it only if it was created with
//!    [`Hca::create_qp_with_reserved_lkey`], which sets the QP context's `rlky` bit
//!    ("the reserved lkey may be used on this QP"). On any other QP the key is no key: a
//!    work request that uses it completes with a local protection error. (SRQs are
//!    created without `srqc.rlky`: a receive through an SRQ cannot use it.)
//!
//! [`ReservedLkey::sge`] then builds a scatter/gather entry from a raw IOVA. Nothing checks
//! that the IOVA lies in memory the program owns: a SEND gathers from it, a RECV scatters
//! into it, an RDMA READ response lands in it. Prefer a registered [`Mr`](super::Mr), whose
//! key bounds every access to its own buffer.
//!
//! ```
//! use uhca_driver::verbs::{QpInitAttr, Rc, SendOp, SendWr};
//! # fn f<P: uhca_hal::Platform + Send + Sync>(
//! #     hca: &mut uhca_driver::Hca<P>,
//! #     pd: &uhca_driver::verbs::Pd<P>,
//! #     attr: &QpInitAttr<'_, P>,
//! # ) -> Result<(), Box<dyn std::error::Error>> {
//! let key = hca.reserved_lkey()?;
//! let qp = hca.create_qp_with_reserved_lkey::<Rc>(pd, attr, &key)?;
//! // 64 bytes at device address 0x20_0000, whatever the IOMMU maps there.
//! let sge = [key.sge(0x20_0000, 64)];
//! let wr = SendWr::new(1, SendOp::Send, &sge);
//! # let _ = (qp, wr);
//! # Ok(())
//! # }
//! ```
//!
//! This module is not part of `uhca`'s prelude.

use uhca_fwif::cmd::{Command, QuerySpecialContextsIn};
use uhca_hal::Platform;

use super::Sge;
use crate::error::Result;
use crate::hca::Hca;

/// The firmware's reserved lkey (`resd_lkey` of QUERY_SPECIAL_CONTEXTS): a
/// scatter/gather entry with it names a raw IOVA, with no translation, no PD, no access
/// rights and no bounds (see the [module documentation](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReservedLkey {
    key: u32,
    hca_id: u64,
}

impl ReservedLkey {
    /// The key's value, as the firmware reported it.
    pub fn key(&self) -> u32 {
        self.key
    }

    /// A scatter/gather entry of `len` bytes at device address `iova`, through the
    /// reserved lkey. **Nothing is checked**: the device reads (SEND, WRITE) or writes
    /// (RECV, READ response, atomic result) `[iova, iova + len)` as the IOMMU maps it,
    /// whatever memory that is, and faults where nothing is mapped. Only a QP created with
    /// [`Hca::create_qp_with_reserved_lkey`] honours it.
    pub fn sge(&self, iova: u64, len: u32) -> Sge {
        Sge {
            addr: iova,
            len,
            lkey: self.key,
        }
    }
}

impl<P: Platform> Hca<P> {
    /// Asks the firmware for its reserved lkey (QUERY_SPECIAL_CONTEXTS), the key whose
    /// addresses are IOVAs with no translation and no protection (see
    /// [`verbs::reserved`](self)). The key stays valid until the HCA is torn down or reset.
    ///
    /// # Errors
    ///
    /// The command's error.
    pub fn reserved_lkey(&mut self) -> Result<ReservedLkey> {
        let out = self.cmd(&QuerySpecialContextsIn::new_cmd())?;
        Ok(ReservedLkey {
            key: out.resd_lkey(),
            hca_id: self.id(),
        })
    }

    /// Checks that `key` was asked of this HCA.
    pub(crate) fn check_reserved_lkey(&self, key: &ReservedLkey) -> Result<()> {
        self.check_owner(key.hca_id)
    }
}
