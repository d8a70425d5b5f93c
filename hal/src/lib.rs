//! # uhca-hal: typed hardware access for mlx5 HCAs
//!
//! The one place where `unsafe`, memory ordering and device memory live, so that everything
//! above it is safe code and every hardware rule is written once:
//!
//! * [`platform`]: the traits a platform implements (BAR, DMA, PCI config, clock).
//! * [`barriers`]: the memory barriers, named after what they order.
//! * [`dma`]: owned DMA buffers with volatile, bounds-checked accessors.
//! * [`init_seg`]: the initialization segment, firmware readiness and health checks.
//! * [`cmdq`]: the command-queue engine (slots, tokens, mailboxes, completion, timeouts).
//! * [`wq`], [`cq`], [`eq`]: the rings: send and receive queues with their WQE builders and
//!   doorbells, the completion-queue poller, the event-queue poller.
//! * [`host`]: host memory from the platform (never reachable by the device) and the owners
//!   built on it: arrays, shared values, a spin lock.
//! * [`wrid`]: the work-request tables a poster and a poller share, and their protocol.
//!
//! `no_std`, and no allocator needed. The `alloc` feature adds
//! [`host::GlobalHostMem`] (host memory from the global allocator, for platforms with one);
//! the `testing` feature adds a memory-backed fake platform (`uhca_hal::testing`, needs
//! `std`).
#![no_std]
#![deny(
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks,
    missing_docs
)]

#[cfg(any(test, loom, feature = "testing"))]
extern crate std;

pub mod barriers;
pub mod cmdq;
pub mod cq;
pub mod dma;
pub mod eq;
pub mod host;
pub mod init_seg;
pub mod platform;
pub mod wq;
pub mod wrid;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(all(test, loom))]
mod loom_models;

pub use dma::{DmaBuf, DmaMem, HostBuf, MappedBuf};
pub use host::HostMem;
pub use platform::{Bar, Clock, ConfigError, Dma, DmaError, DmaRegion, PciConfig, Platform};
