//! `uhca-ibverbs`: a shared library built from uhca that programs load instead of
//! rdma-core's `libibverbs.so.1`.
//!
//! The devices come from the `UHCA_DEVICES` environment variable (see [`config`] and the
//! crate's README): mock ConnectX HCAs running in the process, each with its RoCEv2 port on
//! a UDP socket, and (listed, not yet openable) VFIO functions by PCI address. Without it,
//! `ibv_get_device_list` returns an empty list and prints one hint line on stderr.
//!
//! Layers: [`config`] and [`device`] are plain Rust (configuration parsing, bring-up, the
//! object tables), tested without the C ABI; [`abi`] holds the `#[repr(C)]` structures of
//! rdma-core 44's `verbs.h`; `ffi` (built outside unit tests) holds the exported functions
//! and the only `unsafe` of the crate.

pub mod abi;
pub mod config;
pub mod device;
#[cfg(not(test))]
mod ffi;
