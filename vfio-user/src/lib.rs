//! # uhca-vfio-user: the mock ConnectX as a PCI function behind real VFIO
//!
//! A vfio-user server: it serves [`uhca_mock::MockHca`]s to a VMM (QEMU's `vfio-user-pci`
//! device) over Unix sockets, one function per socket, so that a guest sees a ConnectX PCI
//! function, binds it to `vfio-pci` and drives it through real Linux VFIO.
//!
//! What the client sees and where it lands in the model:
//!
//! * configuration space (region 7): the model's own, with its PCI Express capability (FLR)
//!   and its MSI-X capability; every read and write goes to the model;
//! * BAR0 (region 0, 32 MiB): trapped, never mmapped, so that every access — the
//!   initialization segment, the command doorbell, the health counter, UARs and doorbells —
//!   is a socket message that reaches the model at once;
//! * MSI-X: the eventfds the client hands over in SET_IRQS; the model signals the one of
//!   the vector it raises (the client emulates the MSI-X table and its masking itself);
//! * DMA: each DMA_MAP brings a file (the guest RAM's memfd) that the model maps itself and
//!   puts behind its IOMMU at the client's IOVA; a device access outside every map is an
//!   IOMMU fault of the model, as in every other use of it;
//! * DEVICE_RESET: a function level reset of the model.
//!
//! The protocol is QEMU's `docs/interop/vfio-user.rst`, written here from that text
//! ([`proto`], [`server`]) rather than taken from the `vfio_user` crate (see the workspace's
//! `ARCHITECTURE.md` for why). The `uhca-vfio-user-server` binary serves several functions
//! on one mock fabric.

pub mod cmdlog;
pub mod proto;
pub mod server;

pub use server::{Function, Refusal, Stats, serve};
