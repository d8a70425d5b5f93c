//! `vfio_edu`: the VM rig's VFIO test program (`tests/vm/`, test `vfio`). It checks uhca's
//! VFIO platform against real Linux VFIO with QEMU's `edu`, `e1000e` and NVMe devices and
//! prints one `PASS`/`FAIL` line per check; `rig.rs` says what it checks and how to run it.
//! VFIO is Linux only: elsewhere the program only says so.

use std::process::ExitCode;

#[cfg(target_os = "linux")]
mod rig;

#[cfg(target_os = "linux")]
fn main() -> ExitCode {
    rig::main()
}

#[cfg(not(target_os = "linux"))]
fn main() -> ExitCode {
    eprintln!("vfio_edu: VFIO exists on Linux only");
    ExitCode::from(2)
}
