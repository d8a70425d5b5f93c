//! Memory barriers, named after what they order.
//!
//! The device and the CPU share DMA memory (work queues, completion and event queues,
//! doorbell records, the command queue) and talk through MMIO (BAR0). Each function here
//! orders one kind of access against another, with the semantics of rdma-core's
//! `util/udma_barrier.h`:
//!
//! | function | rdma-core | x86_64 | aarch64 |
//! | --- | --- | --- | --- |
//! | [`wqe_before_doorbell_record`], [`cmd_entry_before_doorbell`] | `udma_to_device_barrier` | compiler barrier | `dmb oshst` |
//! | [`doorbell_record_before_mmio`] | `mmio_wc_start` | `sfence` | `dsb st` |
//! | [`mmio_flush_writes`] | `mmio_flush_writes` | `sfence` | `dsb st` |
//! | [`cqe_owner_before_cqe_read`], [`eqe_owner_before_eqe_read`], [`cmd_owner_before_output_read`] | `udma_from_device_barrier` | compiler barrier (Linux `dma_rmb`; rdma-core uses `lfence`) | `dmb oshld` |
//! | [`cqe_read_before_consumer_index`], [`eqe_read_before_consumer_index`] | (loads before the store that frees the entry) | compiler barrier | `dmb oshld` |
//!
//! Why a compiler barrier is enough on x86_64: memory is coherent for DMA, stores are seen
//! by the device in program order (TSO), loads are not reordered with other loads, and
//! loads are not reordered with later stores. rdma-core's `lfence` in
//! `udma_from_device_barrier` is stronger than needed; Linux's `dma_rmb()` on x86 is a
//! compiler barrier, and so is this one.
//!
//! Other targets get a portable fallback with `core::sync::atomic` fences (`Release` for
//! store barriers, `Acquire` for read barriers, `SeqCst` for the flushes). Under Miri the
//! fallback is used on every target (Miri cannot run inline assembly).
//!
//! Under `cfg(loom)` every barrier is a loom fence of the corresponding strength, so the
//! loom models in this crate see them and fail when one is weakened. The loom build also
//! has `loom_weaken`, which turns one barrier into a no-op for the current test thread so
//! a model can prove that the barrier is needed.

/// Which barrier; used by [`loom_weaken`] to turn one off in a loom model.
#[cfg(loom)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Barrier {
    WqeBeforeDoorbellRecord,
    DoorbellRecordBeforeMmio,
    MmioFlushWrites,
    CqeOwnerBeforeCqeRead,
    CqeReadBeforeConsumerIndex,
}

#[cfg(loom)]
std::thread_local! {
    static WEAKENED: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
}

/// Loom builds only: makes `barrier` a no-op (`Relaxed`, i.e. no fence) on the calling
/// thread (`None` restores all), so a model can show that loom finds the bug it prevents.
#[cfg(loom)]
pub fn loom_weaken(barrier: Option<Barrier>) {
    WEAKENED.with(|w| w.set(barrier.map_or(0, |b| 1 << b as u32)));
}

#[cfg(loom)]
#[inline(always)]
fn loom_fence(which: Barrier, ordering: core::sync::atomic::Ordering) {
    if WEAKENED.with(|w| w.get() & (1 << which as u32)) == 0 {
        loom::sync::atomic::fence(ordering);
    }
}

// ------------------------------------------------------------------------------------
// Primitive implementations per target.
// ------------------------------------------------------------------------------------

/// Store-store ordering towards the device (`udma_to_device_barrier`).
#[cfg(not(loom))]
#[inline(always)]
fn to_device() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: an empty asm block without `nomem` is a compiler barrier: it touches no
    // memory or registers and has no other effect.
    unsafe {
        core::arch::asm!("", options(nostack, preserves_flags));
    }
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: `dmb oshst` only orders stores; it has no other effect on program state.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags));
    }
    #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    core::sync::atomic::fence(core::sync::atomic::Ordering::Release);
}

/// Load-load (and load-store) ordering of data the device wrote
/// (`udma_from_device_barrier`).
#[cfg(not(loom))]
#[inline(always)]
fn from_device() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: an empty asm block without `nomem` is a compiler barrier (Linux `dma_rmb`).
    unsafe {
        core::arch::asm!("", options(nostack, preserves_flags));
    }
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: `dmb oshld` only orders loads before later loads and stores.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags));
    }
    #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    core::sync::atomic::fence(core::sync::atomic::Ordering::Acquire);
}

/// Drains write-combining buffers and orders all prior stores before later MMIO
/// (`mmio_flush_writes`).
#[cfg(not(loom))]
#[inline(always)]
fn flush_writes() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: `sfence` only orders stores and drains write-combining buffers.
    unsafe {
        core::arch::asm!("sfence", options(nostack, preserves_flags));
    }
    #[cfg(all(target_arch = "aarch64", not(miri)))]
    // SAFETY: `dsb st` only waits for prior stores to complete.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags));
    }
    #[cfg(any(miri, not(any(target_arch = "x86_64", target_arch = "aarch64"))))]
    core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
}

// ------------------------------------------------------------------------------------
// The named barriers.
// ------------------------------------------------------------------------------------

/// Orders the stores that build WQEs (send or receive) before the store of the doorbell
/// record that publishes them: the device may read the WQEs as soon as it sees the new
/// counter.
#[inline(always)]
pub fn wqe_before_doorbell_record() {
    #[cfg(loom)]
    loom_fence(
        Barrier::WqeBeforeDoorbellRecord,
        core::sync::atomic::Ordering::Release,
    );
    #[cfg(not(loom))]
    to_device();
}

/// Orders the command-queue entry and its mailboxes (DMA memory) before the command
/// doorbell write (MMIO).
#[inline(always)]
pub fn cmd_entry_before_doorbell() {
    #[cfg(loom)]
    loom_fence(
        Barrier::WqeBeforeDoorbellRecord,
        core::sync::atomic::Ordering::Release,
    );
    #[cfg(not(loom))]
    to_device();
}

/// Orders the doorbell-record store (and everything before it) before the MMIO doorbell
/// that follows, also when the UAR is mapped write-combining (`mmio_wc_start`).
#[inline(always)]
pub fn doorbell_record_before_mmio() {
    #[cfg(loom)]
    loom_fence(
        Barrier::DoorbellRecordBeforeMmio,
        core::sync::atomic::Ordering::Release,
    );
    #[cfg(not(loom))]
    flush_writes();
}

/// Pushes MMIO writes out of write-combining buffers before anything that follows (after a
/// doorbell or BlueFlame copy, before the alternate BlueFlame buffer is reused).
#[inline(always)]
pub fn mmio_flush_writes() {
    #[cfg(loom)]
    loom_fence(
        Barrier::MmioFlushWrites,
        core::sync::atomic::Ordering::SeqCst,
    );
    #[cfg(not(loom))]
    flush_writes();
}

/// After a CQE's owner bit and opcode said software owns it: orders that read before the
/// reads of the rest of the CQE, so no field older than the owner bit is seen.
#[inline(always)]
pub fn cqe_owner_before_cqe_read() {
    #[cfg(loom)]
    loom_fence(
        Barrier::CqeOwnerBeforeCqeRead,
        core::sync::atomic::Ordering::Acquire,
    );
    #[cfg(not(loom))]
    from_device();
}

/// After an EQE's owner bit said software owns it: orders that read before the reads of
/// the rest of the EQE.
#[inline(always)]
pub fn eqe_owner_before_eqe_read() {
    #[cfg(loom)]
    loom_fence(
        Barrier::CqeOwnerBeforeCqeRead,
        core::sync::atomic::Ordering::Acquire,
    );
    #[cfg(not(loom))]
    from_device();
}

/// After a command-queue entry's owner bit went back to software: orders that read before
/// the reads of the output (inline and mailboxes).
#[inline(always)]
pub fn cmd_owner_before_output_read() {
    #[cfg(loom)]
    loom_fence(
        Barrier::CqeOwnerBeforeCqeRead,
        core::sync::atomic::Ordering::Acquire,
    );
    #[cfg(not(loom))]
    from_device();
}

/// Orders the reads of consumed CQEs before the consumer-index store that lets the device
/// overwrite them.
#[inline(always)]
pub fn cqe_read_before_consumer_index() {
    #[cfg(loom)]
    loom_fence(
        Barrier::CqeReadBeforeConsumerIndex,
        core::sync::atomic::Ordering::AcqRel,
    );
    #[cfg(not(loom))]
    from_device();
}

/// Orders the reads of consumed EQEs before the EQ doorbell that lets the device overwrite
/// them.
#[inline(always)]
pub fn eqe_read_before_consumer_index() {
    #[cfg(loom)]
    loom_fence(
        Barrier::CqeReadBeforeConsumerIndex,
        core::sync::atomic::Ordering::AcqRel,
    );
    #[cfg(not(loom))]
    from_device();
}
