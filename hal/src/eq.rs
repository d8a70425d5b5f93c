//! The event-queue poller and the EQ doorbells.
//!
//! EQEs are 64 bytes; a new queue has every owner bit set to 1, and an EQE belongs to
//! software when its owner bit equals `(ci >> log_eqe_cnt) & 1`. The consumer index goes
//! back to the device through a 32-bit big-endian doorbell in the UAR page (`eqn << 24 |
//! ci`), at [`EQ_DOORBELL_UPDATE_CI_OFFSET`] to update only or at [`EQ_DOORBELL_OFFSET`] to
//! update and re-arm. Update the consumer index at least every few entries while
//! draining a long burst, so the queue cannot overrun.
//!
//! ```
//! # use uhca_hal::testing::{FakePlatform, FAKE_UAR};
//! use uhca_hal::eq::EqRing;
//! use uhca_hal::DmaBuf;
//! let p = FakePlatform::new();
//! let mut eq = EqRing::new(DmaBuf::alloc(&p, 64 << 4, 4096).unwrap(), 3, 4).unwrap();
//! assert!(eq.poll_one().is_none());
//! eq.arm(&p, FAKE_UAR);
//! ```

use crate::barriers;
use crate::dma::DmaMem;
use crate::platform::Bar;
use uhca_fwif::doorbell::{EQ_DOORBELL_OFFSET, EQ_DOORBELL_UPDATE_CI_OFFSET, eq_doorbell};
use uhca_fwif::eqe::Eqe;
use zerocopy::{FromZeros, IntoBytes};

const EQE: usize = core::mem::size_of::<Eqe>();
const OWNER_OFF: usize = core::mem::offset_of!(Eqe, owner);

/// Why an EQ could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EqLayoutError {
    /// The buffer is smaller than `64 << log_eqe_cnt` bytes, or the size is too large.
    BufferTooSmall,
}

impl core::fmt::Display for EqLayoutError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("EQ buffer too small for its entries")
    }
}

impl core::error::Error for EqLayoutError {}

/// An event queue's entries (at offset 0 of its buffer) and its consumer state.
#[derive(Debug)]
pub struct EqRing<M: DmaMem> {
    mem: M,
    eqn: u8,
    log_cnt: u8,
    ci: u32,
}

impl<M: DmaMem> EqRing<M> {
    /// Takes over `mem` for `1 << log_eqe_cnt` EQEs of EQ number `eqn` and sets every owner
    /// bit to 1.
    ///
    /// # Errors
    ///
    /// [`EqLayoutError::BufferTooSmall`].
    pub fn new(mut mem: M, eqn: u8, log_eqe_cnt: u8) -> Result<Self, EqLayoutError> {
        if log_eqe_cnt > 24 || (EQE << log_eqe_cnt) > mem.len() {
            return Err(EqLayoutError::BufferTooSmall);
        }
        for i in 0..1usize << log_eqe_cnt {
            mem.write_u8(i * EQE + OWNER_OFF, 1);
        }
        Ok(EqRing {
            mem,
            eqn,
            log_cnt: log_eqe_cnt,
            ci: 0,
        })
    }

    /// Number of entries.
    pub fn entries(&self) -> u32 {
        1 << self.log_cnt
    }

    /// The memory.
    pub fn mem(&self) -> &M {
        &self.mem
    }

    /// The EQ number.
    pub fn eqn(&self) -> u8 {
        self.eqn
    }

    /// Sets the EQ number once the firmware has assigned it (CREATE_EQ's output). The ring
    /// must exist, with its owner bits initialised, before CREATE_EQ hands the memory to the
    /// device, which is before the number is known.
    pub fn set_eqn(&mut self, eqn: u8) {
        self.eqn = eqn;
    }

    /// The consumer index (wrapping; the device sees its low 24 bits).
    pub fn consumer_index(&self) -> u32 {
        self.ci
    }

    /// Takes the next EQE if software owns it. The consumer index goes to the device with
    /// [`EqRing::update_ci`] or [`EqRing::arm`].
    #[inline]
    pub fn poll_one(&mut self) -> Option<Eqe> {
        let off = ((self.ci & ((1u32 << self.log_cnt) - 1)) as usize) * EQE;
        let owner = ((self.ci >> self.log_cnt) & 1) as u8;
        if self.mem.read_u8(off + OWNER_OFF) & 1 != owner {
            return None;
        }
        // The owner bit said the EQE is ours: read the rest only after it.
        barriers::eqe_owner_before_eqe_read();
        let mut eqe = Eqe::new_zeroed();
        self.mem.read_bytes(off, eqe.as_mut_bytes());
        self.ci = self.ci.wrapping_add(1);
        Some(eqe)
    }

    #[inline]
    fn doorbell<B: Bar + ?Sized>(&self, bar: &B, reg: usize) {
        // The consumed EQEs must be read before the device may overwrite them.
        barriers::eqe_read_before_consumer_index();
        bar.write_be32(reg, eq_doorbell(self.eqn, self.ci));
    }

    /// Gives the consumed EQEs back without arming (UAR + 0x48).
    pub fn update_ci<B: Bar + ?Sized>(&self, bar: &B, uar_page: usize) {
        self.doorbell(bar, uar_page + EQ_DOORBELL_UPDATE_CI_OFFSET);
    }

    /// Gives the consumed EQEs back and arms the EQ for its next event (UAR + 0x40).
    pub fn arm<B: Bar + ?Sized>(&self, bar: &B, uar_page: usize) {
        self.doorbell(bar, uar_page + EQ_DOORBELL_OFFSET);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::dma::DmaBuf;
    use crate::testing::{FAKE_UAR, FakePlatform};
    use uhca_fwif::consts::EventType;
    use uhca_fwif::eqe::{EqeCmd, EqePageReq};

    fn device_write_eqe(p: &FakePlatform, iova: u64, ty: EventType, data: &[u8], owner: u8) {
        let mut e = Eqe::new_zeroed();
        e.r#type = ty.raw();
        e.data[..data.len()].copy_from_slice(data);
        p.dma.device_write(iova, &e.as_bytes()[..63]);
        p.dma.device_write(iova + 63, &[owner]);
    }

    #[test]
    fn events_are_taken_by_owner_bit_across_wraps() {
        let p = FakePlatform::new();
        let mut eq = EqRing::new(DmaBuf::alloc(&p, 64 * 2, 4096).unwrap(), 5, 1).unwrap();
        assert_eq!(eq.mem().read_u8(63), 1);
        assert_eq!(eq.mem().read_u8(127), 1);
        assert!(
            eq.poll_one().is_none(),
            "owner 1 is hardware's on the first lap"
        );
        let base = eq.mem().iova();
        for n in 0..6u32 {
            let owner = ((n >> 1) & 1) as u8;
            let at = base + (n as u64 & 1) * 64;
            device_write_eqe(
                &p,
                at,
                EventType::Cmd,
                &(1u32 << n).to_be_bytes(),
                owner ^ 1,
            );
            assert!(eq.poll_one().is_none(), "stale EQE taken at {n}");
            device_write_eqe(&p, at, EventType::Cmd, &(1u32 << n).to_be_bytes(), owner);
            let e = eq.poll_one().expect("fresh EQE");
            assert_eq!(e.event_type(), EventType::Cmd);
            assert_eq!(e.data_as::<EqeCmd>().vector.get(), 1 << n);
        }
        let mut d = [0u8; 8];
        d[2..4].copy_from_slice(&3u16.to_be_bytes());
        d[4..8].copy_from_slice(&(-5i32).to_be_bytes());
        device_write_eqe(&p, base, EventType::PageRequest, &d, 1);
        let e = eq.poll_one().unwrap();
        let pr = e.data_as::<EqePageReq>();
        assert_eq!((pr.func_id.get(), pr.num_pages_signed()), (3, -5));
    }

    #[test]
    fn doorbells_carry_eqn_and_consumer_index() {
        let p = FakePlatform::new();
        let mut eq = EqRing::new(DmaBuf::alloc(&p, 64 * 4, 4096).unwrap(), 7, 2).unwrap();
        device_write_eqe(&p, eq.mem().iova(), EventType::Cmd, &[], 0);
        eq.poll_one().unwrap();
        eq.update_ci(&p, FAKE_UAR);
        eq.arm(&p, FAKE_UAR);
        assert_eq!(
            p.bar.write_log(),
            [
                (FAKE_UAR + 0x48, 0x0700_0001),
                (FAKE_UAR + 0x40, 0x0700_0001)
            ]
        );
    }
}
