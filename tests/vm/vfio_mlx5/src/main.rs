//! The VM rig's program for the mock ConnectX behind real Linux VFIO (the vfio-user test,
//! `tests/vm/guest/tests/vfiouser.sh`): on one function bound to vfio-pci, in one process,
//!
//! 1. a bring-up and a graceful teardown, then a second bring-up;
//! 2. objects created (PD, CQ, an RC QP) and `VFIO_DEVICE_RESET` while that driver
//!    runs: the reset reaches the device as a function level reset, which takes the HCA
//!    and everything on it down;
//! 3. a bring-up after the reset: the firmware starts over, so the first QP of this
//!    bring-up gets the number the first QP of the earlier one had (the old QP, never
//!    destroyed, is gone with the reset); the port is active again; the objects are destroyed;
//! 4. a DMA to an IOVA the driver never mapped (`dma.rs`): with the reserved lkey, a SEND
//!    gathering from it and a RECV scattering to it complete in error and change no memory
//!    the driver mapped (the vfio-user server reports the IOMMU faults on the host);
//! 5. a fast teardown.
//!
//! Prints one `PASS`/`FAIL` line per check and `N passed, M failed`; exits 0 only if all
//! passed.
//!
//! ```sh
//! vfio_mlx5 0000:00:02.0
//! ```

#[cfg(target_os = "linux")]
mod dma;
#[cfg(target_os = "linux")]
mod rig;

#[cfg(target_os = "linux")]
fn main() -> std::process::ExitCode {
    rig::main()
}

#[cfg(not(target_os = "linux"))]
fn main() -> std::process::ExitCode {
    eprintln!("vfio_mlx5: VFIO exists on Linux only");
    std::process::ExitCode::from(2)
}
