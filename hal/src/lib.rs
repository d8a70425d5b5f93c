//! # uhca-hal: typed hardware access for mlx5 HCAs
//!
//! The one place where `unsafe`, memory ordering and device memory live, so that everything
//! above it is safe code and every hardware rule is written once:
//!
//! * [`platform`]: the traits a platform implements (BAR, DMA, PCI config, clock).
//!
//! `no_std`, and no allocator needed.
#![no_std]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks, missing_docs)]

pub mod platform;

pub use platform::{Bar, Clock, ConfigError, Dma, DmaError, DmaRegion, PciConfig, Platform};
