//! `uhca-ibverbs`: a shared library built from uhca that programs load instead of
//! rdma-core's `libibverbs.so.1`.
//!
//! The devices come from the `UHCA_DEVICES` environment variable (see [`config`] and the
//! crate's README): mock ConnectX HCAs running in the process, each with its RoCEv2 port on
//! a UDP socket, and ConnectX functions bound to vfio-pci, by PCI address, brought up
//! through uhca's VFIO platform ([`vfio`]). Without it,
//! `ibv_get_device_list` returns an empty list and prints one hint line on stderr.
//!
//! # `UHCA_DEVICES`
//!
//! Entries separated by `;`, each `KIND:NAME=WHERE`:
//!
//! - `mock:NAME=udp:IPV4`: a mock ConnectX in the process whose RoCEv2 port is a UDP socket
//!   on `IPV4:4791` (GID index 0 is that address's RoCEv2 GID), brought up on the first
//!   `ibv_open_device`;
//! - `vfio:NAME=BDF[,ip=IPV4]`: a ConnectX function bound to vfio-pci (`0000:3b:00.0`),
//!   brought up on the first `ibv_open_device`; on an Ethernet port `ip=` installs the
//!   RoCEv2 GID of `IPV4` at index 0 (no kernel driver fills the GID table under VFIO).
//!
//! For example `UHCA_DEVICES="mock:uhca0=udp:127.0.0.1;vfio:uhca1=0000:3b:00.0,ip=10.0.0.1"`.
//! Then:
//!
//! ```sh
//! ln -sf "$PWD/target/debug/libuhca_ibverbs.so" /tmp/uhca-verbs/libibverbs.so.1
//! LD_LIBRARY_PATH=/tmp/uhca-verbs UHCA_DEVICES="mock:uhca0=udp:127.0.0.1" ibv_devinfo
//! ```
//!
//! Layers: [`config`], [`device`] and [`qp`] are plain Rust (configuration parsing,
//! bring-up, the object tables, QP transitions), tested without the C ABI; [`abi`] holds the `#[repr(C)]` structures of
//! rdma-core 44's `verbs.h`; `ffi` (built outside unit tests) holds the exported functions
//! and the only `unsafe` of the crate.

pub mod abi;
pub mod ah;
pub mod config;
pub mod device;
pub mod events;
#[cfg(not(test))]
mod ffi;
pub mod platform;
pub mod qp;
#[cfg(test)]
mod rdma_tests;
pub mod vfio;
mod wake;
