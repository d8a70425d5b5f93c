//! # uhca
//!
//! A userspace and bare-metal verbs driver for NVIDIA ConnectX HCAs (the "mlx5" interface,
//! ConnectX-4 and later), with a model of the device so that everything can be tested
//! without hardware. This crate re-exports the layers so a user depends on one crate:
//!
//! * [`fwif`]: the firmware interface (layouts and constants);
//! * [`hal`]: typed hardware access (platform traits, command queue, rings);
//! * [`driver`]: bring-up, verbs objects and the datapath;
//! * `mock` (feature `mock`): the device model;
//! * [`oob`] (feature `std`): the out-of-band exchange of rdma-core's pingpong examples.
#![cfg_attr(not(feature = "std"), no_std)]
#![forbid(unsafe_code)]

pub use uhca_driver as driver;
pub use uhca_fwif as fwif;
pub use uhca_hal as hal;
#[cfg(feature = "mock")]
pub use uhca_mock as mock;

#[cfg(feature = "std")]
pub mod oob;

#[cfg(feature = "mock")]
pub mod demo;

/// The README's examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
