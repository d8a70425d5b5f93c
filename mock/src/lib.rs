//! # uhca-mock: a model of a ConnectX (mlx5) HCA
//!
//! Written from the PRM and the `uhca-fwif` layouts, never from the driver: it decodes
//! commands and WQEs and encodes CQEs, EQEs and packets by itself, so a misreading of the
//! PRM in the driver shows up as a failing test instead of being mirrored.

pub mod wire;
