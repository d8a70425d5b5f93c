//! Protection domains (ALLOC_PD/DEALLOC_PD) and transport domains
//! (ALLOC_TRANSPORT_DOMAIN/DEALLOC_TRANSPORT_DOMAIN).

use uhca_fwif::cmd::Command;
use uhca_fwif::cmd::{AllocPdIn, AllocTransportDomainIn};
use uhca_hal::Platform;

use super::Failed;
use crate::error::Result;
use crate::hca::Hca;
use crate::release::{Dropped, ObjectKind, Ticket};

/// What a PD and a transport domain share: a number of one HCA, deallocated by number
/// (DEALLOC_PD, DEALLOC_TRANSPORT_DOMAIN) through `destroy` or, when dropped, through the
/// HCA's release queue.
struct Domain<P: Platform> {
    number: u32,
    kind: ObjectKind,
    hca_id: u64,
    /// Its place in the HCA's release queue (`None` once deallocated): dropping it queues
    /// the deallocation.
    ticket: Option<Ticket<P>>,
}

impl<P: Platform> Drop for Domain<P> {
    fn drop(&mut self) {
        if let Some(t) = self.ticket.take() {
            t.release(Dropped::number_only(self.kind, self.number));
        }
    }
}

impl<P: Platform> Domain<P> {
    /// Deallocates it now; on failure it stays allocated (and queued for release when
    /// dropped).
    fn deallocate(&mut self, hca: &mut Hca<P>) -> Result<()> {
        hca.check_owner(self.hca_id)?;
        hca.destroy_object(self.kind, self.number)?;
        // Deallocated: its reservation in the release queue goes back.
        self.ticket = None;
        Ok(())
    }
}

/// Debug, and equality of two handles naming the same domain of the same HCA.
macro_rules! domain_handle {
    ($ty:ident, $field:literal) => {
        impl<P: Platform> core::fmt::Debug for $ty<P> {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field($field, &self.d.number)
                    .field("hca_id", &self.d.hca_id)
                    .finish_non_exhaustive()
            }
        }

        /// Two handles are equal when they name the same domain of the same HCA.
        impl<P: Platform> PartialEq for $ty<P> {
            fn eq(&self, other: &Self) -> bool {
                (self.d.number, self.d.hca_id) == (other.d.number, other.d.hca_id)
            }
        }

        impl<P: Platform> Eq for $ty<P> {}

        impl<P: Platform> $ty<P> {
            /// Deallocates it.
            ///
            /// # Errors
            ///
            /// The handle back with the error, e.g. RES_BUSY while an object uses it.
            pub fn destroy(mut self, hca: &mut Hca<P>) -> core::result::Result<(), Failed<Self>> {
                match self.d.deallocate(hca) {
                    Ok(()) => Ok(()),
                    Err(error) => Err(Failed {
                        object: self,
                        error,
                    }),
                }
            }
        }
    };
}

/// A protection domain: memory regions, QPs and SRQs of one PD may work together.
///
/// Dropped without [`Pd::destroy`] (DEALLOC_PD), it is deallocated at its HCA's next
/// command (see [`crate::release`]); dropped after its HCA is gone, it does nothing
/// (TEARDOWN_HCA removed it with the function).
pub struct Pd<P: Platform> {
    d: Domain<P>,
}

domain_handle!(Pd, "pdn");

impl<P: Platform> Pd<P> {
    /// The PD number (`pd` in the contexts).
    pub fn pdn(&self) -> u32 {
        self.d.number
    }

    /// The identity of the HCA that created it.
    pub(crate) fn hca_id(&self) -> u64 {
        self.d.hca_id
    }
}

/// A transport domain (`transport_domain`), the scope of Ethernet transport objects
/// (TIRs and TISes) and of local loopback between them.
///
/// Dropped without [`TransportDomain::destroy`] (DEALLOC_TRANSPORT_DOMAIN), it is
/// deallocated at its HCA's next command (see [`crate::release`]); dropped after its HCA
/// is gone, it does nothing (TEARDOWN_HCA removed it with the function).
pub struct TransportDomain<P: Platform> {
    d: Domain<P>,
}

domain_handle!(TransportDomain, "tdn");

impl<P: Platform> TransportDomain<P> {
    /// The transport domain number.
    pub fn tdn(&self) -> u32 {
        self.d.number
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
            d: self.domain(ObjectKind::Pd, out.pd(), ticket),
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
            d: self.domain(ObjectKind::TransportDomain, out.transport_domain(), ticket),
        })
    }

    fn domain(&self, kind: ObjectKind, number: u32, ticket: Ticket<P>) -> Domain<P> {
        Domain {
            number,
            kind,
            hca_id: self.id(),
            ticket: Some(ticket),
        }
    }
}
