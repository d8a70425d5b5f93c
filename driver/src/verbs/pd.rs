//! Protection domains (ALLOC_PD/DEALLOC_PD) and transport domains
//! (ALLOC_TRANSPORT_DOMAIN/DEALLOC_TRANSPORT_DOMAIN).

use uhca_fwif::cmd::Command;
use uhca_fwif::cmd::{AllocPdIn, AllocTransportDomainIn, DeallocPdIn, DeallocTransportDomainIn};
use uhca_hal::Platform;

use super::Failed;
use crate::error::Result;
use crate::hca::Hca;
use crate::release::{MailboxRef, ObjectKind};

/// A protection domain: memory regions, QPs and SRQs of one PD may work together.
///
/// Dropped without [`Pd::destroy`], it is deallocated at its HCA's next command (see
/// [`crate::release`]).
#[derive(Debug, PartialEq, Eq)]
pub struct Pd {
    pdn: u32,
    hca_id: u64,
    mailbox: MailboxRef,
    /// Not deallocated yet: dropping it queues DEALLOC_PD.
    live: bool,
}

impl Drop for Pd {
    fn drop(&mut self) {
        if self.live {
            self.mailbox.post(ObjectKind::Pd, self.pdn);
        }
    }
}

impl Pd {
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
    pub fn destroy<P: Platform>(
        mut self,
        hca: &mut Hca<P>,
    ) -> core::result::Result<(), Failed<Pd>> {
        if let Err(error) = hca.check_owner(self.hca_id) {
            return Err(Failed {
                object: self,
                error,
            });
        }
        let mut d = DeallocPdIn::new_cmd();
        d.set_pd(self.pdn);
        match hca.exec(&d, &[], &mut []) {
            Ok(_) => {
                self.live = false;
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
/// command (see [`crate::release`]).
#[derive(Debug, PartialEq, Eq)]
pub struct TransportDomain {
    tdn: u32,
    hca_id: u64,
    mailbox: MailboxRef,
    /// Not deallocated yet: dropping it queues DEALLOC_TRANSPORT_DOMAIN.
    live: bool,
}

impl Drop for TransportDomain {
    fn drop(&mut self) {
        if self.live {
            self.mailbox.post(ObjectKind::TransportDomain, self.tdn);
        }
    }
}

impl TransportDomain {
    /// The transport domain number.
    pub fn tdn(&self) -> u32 {
        self.tdn
    }

    /// DEALLOC_TRANSPORT_DOMAIN.
    ///
    /// # Errors
    ///
    /// The domain back with the error.
    pub fn destroy<P: Platform>(
        mut self,
        hca: &mut Hca<P>,
    ) -> core::result::Result<(), Failed<TransportDomain>> {
        if let Err(error) = hca.check_owner(self.hca_id) {
            return Err(Failed {
                object: self,
                error,
            });
        }
        let mut d = DeallocTransportDomainIn::new_cmd();
        d.set_transport_domain(self.tdn);
        match hca.exec(&d, &[], &mut []) {
            Ok(_) => {
                self.live = false;
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
    pub fn alloc_pd(&mut self) -> Result<Pd> {
        let out = self.exec(&AllocPdIn::new_cmd(), &[], &mut [])?;
        Ok(Pd {
            pdn: out.pd(),
            hca_id: self.id(),
            mailbox: self.mailbox(),
            live: true,
        })
    }

    /// Allocates a transport domain (ALLOC_TRANSPORT_DOMAIN).
    ///
    /// # Errors
    ///
    /// The command's error.
    pub fn alloc_transport_domain(&mut self) -> Result<TransportDomain> {
        let out = self.exec(&AllocTransportDomainIn::new_cmd(), &[], &mut [])?;
        Ok(TransportDomain {
            tdn: out.transport_domain(),
            hca_id: self.id(),
            mailbox: self.mailbox(),
            live: true,
        })
    }
}
