//! # uhca-driver: the uhca verbs driver
//!
//! Bring-up and teardown of an mlx5 HCA, firmware page management, event processing, the
//! verbs objects (PD, MR, CQ, QP, SRQ, AH) and the datapath, generic over the platform of
//! [`uhca_hal::platform`]. The core is `no_std`, and its error types implement
//! `core::error::Error` (so `std::error::Error` with `std`, with `source()` where one wraps
//! another); the `std` feature starts no thread (the device's health is read by every
//! command and by [`Hca::poll_health`]); the `vfio` feature adds the VFIO platform
//! (`uhca-vfio`, as the module `vfio`).
//!
//! [`cm`] connects RC QPs in band, through the InfiniBand communication manager's REQ, REP
//! and RTU on the port's QP1 ([`verbs::Gsi`]): no TCP, no host, only where the peer's port
//! is, which is what a bare-metal program needs (and what Linux's `ib_cm` speaks).
//!
#![cfg_attr(not(feature = "std"), no_std)]
#![forbid(unsafe_code)]
#![deny(
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks,
    missing_docs
)]

/// The VFIO platform (Linux, feature `vfio`): the crate `uhca-vfio`, re-exported here so a
/// user of the driver names one crate.
#[cfg(all(feature = "vfio", target_os = "linux"))]
pub use uhca_vfio as vfio;

/// Declares a method that can break the driver's invariants (the rings behind a queue's
/// back, a raw command, raw DMA memory): `pub` with the `raw` feature (for tests and
/// tools), `pub(crate)` without it, so safe code using the driver cannot reach it.
macro_rules! raw_pub {
    ($(#[$m:meta])* fn $($rest:tt)*) => {
        #[cfg(feature = "raw")]
        $(#[$m])*
        ///
        /// *Only with the `raw` feature: it can break what the driver keeps consistent.*
        pub fn $($rest)*
        #[cfg(not(feature = "raw"))]
        $(#[$m])*
        #[allow(dead_code)]
        pub(crate) fn $($rest)*
    };
}

pub mod addr;
pub mod caps;
pub mod cm;
pub mod error;
mod events;
pub mod hca;
pub mod pages;
pub mod release;
pub mod verbs;

pub use error::{Error, Result};
pub use hca::{AsyncEvent, Hca, HcaConfig, TeardownMode};
pub use release::ObjectKind;
/// The platform trait every object is generic over (`uhca_hal::Platform`), named here so a
/// user of the driver needs no second crate to write `P: Platform`.
pub use uhca_hal::Platform;
pub use verbs::Failed;
