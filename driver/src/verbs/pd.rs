//! Protection domains (ALLOC_PD/DEALLOC_PD) and transport domains
//! (ALLOC_TRANSPORT_DOMAIN/DEALLOC_TRANSPORT_DOMAIN).

use uhca_fwif::cmd::Command;
use uhca_fwif::cmd::{AllocPdIn, AllocTransportDomainIn};
use uhca_hal::Platform;

use super::Failed;
use crate::error::Result;
use crate::hca::Hca;
use crate::release::{Dropped, ObjectKind, Ticket};

/// A protection domain: memory regions, QPs and SRQs of one PD may work together.
///
/// Dropped without [`Pd::destroy`], it is deallocated at its HCA's next command (see
/// [`crate::release`]); dropped after its HCA is gone, it does nothing (TEARDOWN_HCA
/// removed it with the function).
pub struct Pd<P: Platform> {
    pdn: u32,
    hca_id: u64,
    /// Its place in the HCA's release queue (`None` once deallocated): dropping it queues
    /// DEALLOC_PD.
    ticket: Option<Ticket<P>>,
}

impl<P: Platform> Drop for Pd<P> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            t.release(Dropped::number_only(ObjectKind::Pd, self.pdn));
        }
    }
}

impl<P: Platform> core::fmt::Debug for Pd<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Pd")
            .field("pdn", &self.pdn)
            .field("hca_id", &self.hca_id)
            .finish_non_exhaustive()
    }
}

/// Two handles are equal when they name the same PD of the same HCA.
impl<P: Platform> PartialEq for Pd<P> {
    fn eq(&self, other: &Self) -> bool {
        (self.pdn, self.hca_id) == (other.pdn, other.hca_id)
    }
}

impl<P: Platform> Eq for Pd<P> {}

impl<P: Platform> Pd<P> {
    /// The PD number (`pd` in the contexts).
    pub fn pdn(&self) -> u32 {
        self.pdn
    }

    /// The identity of the HCA that created it.
    pub(crate) fn hca_id(&self) -> u64 {
        self.hca_id
    }

    /// DEALLOC_PD.
    ///
    /// # Errors
    ///
    /// The PD back with the error, e.g. RES_BUSY while a memory region, QP or SRQ uses it.
    pub fn destroy(mut self, hca: &mut Hca<P>) -> core::result::Result<(), Failed<Pd<P>>> {
        if let Err(error) = hca.check_owner(self.hca_id) {
            return Err(Failed {
                object: self,
                error,
            });
        }
        match hca.destroy_object(ObjectKind::Pd, self.pdn) {
            Ok(_) => {
                // Deallocated: its reservation in the release queue goes back.
                self.ticket = None;
                Ok(())
            }
            Err(error) => Err(Failed {
                object: self,
                error,
            }),
        }
    }
}

/// A transport domain (`transport_domain`), the scope of Ethernet transport objects
/// (TIRs and TISes) and of local loopback between them.
///
/// Dropped without [`TransportDomain::destroy`], it is deallocated at its HCA's next
/// command (see [`crate::release`]); dropped after its HCA is gone, it does nothing
/// (TEARDOWN_HCA removed it with the function).
pub struct TransportDomain<P: Platform> {
    tdn: u32,
    hca_id: u64,
    /// Its place in the HCA's release queue (`None` once deallocated): dropping it queues
    /// DEALLOC_TRANSPORT_DOMAIN.
    ticket: Option<Ticket<P>>,
}

impl<P: Platform> Drop for TransportDomain<P> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            t.release(Dropped::number_only(ObjectKind::TransportDomain, self.tdn));
        }
    }
}

impl<P: Platform> core::fmt::Debug for TransportDomain<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("TransportDomain")
            .field("tdn", &self.tdn)
            .field("hca_id", &self.hca_id)
            .finish_non_exhaustive()
    }
}

/// Two handles are equal when they name the same domain of the same HCA.
impl<P: Platform> PartialEq for TransportDomain<P> {
    fn eq(&self, other: &Self) -> bool {
        (self.tdn, self.hca_id) == (other.tdn, other.hca_id)
    }
}

impl<P: Platform> Eq for TransportDomain<P> {}

impl<P: Platform> TransportDomain<P> {
    /// The transport domain number.
    pub fn tdn(&self) -> u32 {
        self.tdn
    }

    /// DEALLOC_TRANSPORT_DOMAIN.
    ///
    /// # Errors
    ///
    /// The domain back with the error.
    pub fn destroy(
        mut self,
        hca: &mut Hca<P>,
    ) -> core::result::Result<(), Failed<TransportDomain<P>>> {
        if let Err(error) = hca.check_owner(self.hca_id) {
            return Err(Failed {
                object: self,
                error,
            });
        }
        match hca.destroy_object(ObjectKind::TransportDomain, self.tdn) {
            Ok(_) => {
                // Deallocated: its reservation in the release queue goes back.
                self.ticket = None;
                Ok(())
            }
            Err(error) => Err(Failed {
                object: self,
                error,
            }),
        }
    }
}

impl<P: Platform> Hca<P> {
    /// Allocates a protection domain (ALLOC_PD, `ibv_alloc_pd`).
    ///
    /// # Errors
    ///
    /// The command's error (LIM when the device has no more PDs).
    pub fn alloc_pd(&mut self) -> Result<Pd<P>> {
        let ticket = self.release_ticket()?;
        let out = self.cmd(&AllocPdIn::new_cmd())?;
        Ok(Pd {
            pdn: out.pd(),
            hca_id: self.id(),
            ticket: Some(ticket),
        })
    }

    /// Allocates a transport domain (ALLOC_TRANSPORT_DOMAIN).
    ///
    /// # Errors
    ///
    /// The command's error.
    pub fn alloc_transport_domain(&mut self) -> Result<TransportDomain<P>> {
        let ticket = self.release_ticket()?;
        let out = self.cmd(&AllocTransportDomainIn::new_cmd())?;
        Ok(TransportDomain {
            tdn: out.transport_domain(),
            hca_id: self.id(),
            ticket: Some(ticket),
        })
    }
}
