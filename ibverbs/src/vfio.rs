//! Opening a `vfio:NAME=BDF[,ip=IPV4]` device: the ConnectX function bound to vfio-pci,
//! brought up by uhca's VFIO platform, with what no kernel driver does for it under VFIO.
//!
//! - On an Ethernet port the RoCEv2 GID table starts empty (Linux's mlx5 fills it from the
//!   interfaces' addresses; under VFIO there is no interface): `ip=` installs the RoCEv2 GID
//!   of that address, with the port's MAC, at index 0. Without `ip=` and with index 0 empty,
//!   the open fails with `EADDRNOTAVAIL` and says to add `ip=`.
//! - On an InfiniBand port the subnet manager assigns the LID, which `ibv_query_port`
//!   reports; `ip=` is refused there (`EINVAL`).
//! - The platform's errors become errnos, each with the platform's message, which says
//!   what to do: `ENODEV` (no such function, not a ConnectX, not bound to vfio-pci, no
//!   IOMMU group), `ENOENT` (no `/dev/vfio`), `EBUSY` (the IOMMU group is held elsewhere or
//!   not viable), `EACCES` (permission on the VFIO nodes), `ENOMEM` (DMA memory: the
//!   locked-memory limit, hugepages), `EOPNOTSUPP` (the kernel's VFIO lacks a feature).
//! - MSI-X vector 0 (the driver's event queue) is bound to an eventfd; a thread waits on it
//!   and kicks the device's event thread, as the mock's interrupt handler does
//!   (`src/wake.rs`).

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::wake::Kicker;
use std::thread::JoinHandle;
use std::time::Duration;

use uhca_driver::Hca;
use uhca_driver::caps::LinkLayer;
use uhca_driver::vfio::{IrqKind, VfioError, VfioPlatform};

use crate::device::{MockP, VResult, VerbsError};
use crate::platform::DevPlatform;

/// The errno an application sees for a VFIO platform's error.
pub fn errno_of(e: &VfioError) -> i32 {
    match e {
        VfioError::InvalidAddress { .. } => libc::EINVAL,
        VfioError::NoSuchDevice { .. }
        | VfioError::NotAConnectX { .. }
        | VfioError::NotBoundToVfio { .. }
        | VfioError::NoIommu { .. } => libc::ENODEV,
        VfioError::VfioUnavailable { .. } => libc::ENOENT,
        VfioError::GroupNotViable { .. }
        | VfioError::AlreadyOpen { .. }
        | VfioError::GroupBusy { .. } => libc::EBUSY,
        VfioError::PermissionDenied { .. } => libc::EACCES,
        VfioError::Dma { .. } | VfioError::NoHugePages { .. } => libc::ENOMEM,
        VfioError::Unsupported { .. } => libc::EOPNOTSUPP,
        other => other.errno().unwrap_or(libc::EIO),
    }
}

/// A VFIO device's platform and its interrupt thread, kept while the device is open.
pub(crate) struct VfioHw {
    platform: VfioPlatform,
    irq: Option<IrqThread>,
}

struct IrqThread {
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl VfioHw {
    /// Stops the interrupt thread and disables the function's interrupts (before the
    /// teardown; idempotent).
    pub(crate) fn stop_interrupts(&self) {
        if let Some(irq) = &self.irq {
            irq.stop.store(true, Ordering::Release);
            let t = irq.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(t) = t {
                let _ = t.join();
            }
            let _ = self.platform.disable_interrupts();
        }
    }
}

impl Drop for VfioHw {
    fn drop(&mut self) {
        self.stop_interrupts();
    }
}

/// Opens the function at `bdf` and brings it up; on Ethernet installs the RoCEv2 GID of
/// `ip` at index 0. `kicker` wakes the device's event thread on each interrupt.
pub(crate) fn open(
    bdf: &str,
    ip: Option<Ipv4Addr>,
    kicker: Kicker,
) -> VResult<(Hca<MockP>, VfioHw)> {
    let platform = VfioPlatform::open(bdf)
        .map_err(|e| VerbsError::new(errno_of(&e), format!("vfio {bdf}: {e}")))?;
    let mut hca = Hca::open(DevPlatform::Vfio(platform.clone()))
        .map_err(|e| VerbsError::new(libc::EIO, format!("vfio {bdf}: bring-up: {e:?}")))?;
    if let Err(e) = set_up_port(&mut hca, bdf, ip) {
        let _ = hca.close();
        return Err(e);
    }
    // Interrupts are optional (completions are always polled): without MSI-X the
    // completion channels are never woken, which the message says.
    let irq = match platform.enable_interrupts(IrqKind::MsiX, 1) {
        Ok(mut fds) => {
            let fd = fds.remove(0);
            let stop = Arc::new(AtomicBool::new(false));
            let stop2 = stop.clone();
            let thread = std::thread::Builder::new()
                .name(format!("uhca-irq-{bdf}"))
                .spawn(move || {
                    while !stop2.load(Ordering::Acquire) {
                        // A bounded wait, so a close is seen within 100 ms.
                        if matches!(fd.wait(Duration::from_millis(100)), Ok(n) if n > 0) {
                            kicker.kick();
                        }
                    }
                })
                .map_err(|e| VerbsError::new(libc::EAGAIN, format!("interrupt thread: {e}")));
            match thread {
                Ok(t) => Some(IrqThread {
                    stop,
                    thread: Mutex::new(Some(t)),
                }),
                Err(e) => {
                    let _ = platform.disable_interrupts();
                    let _ = hca.close();
                    return Err(e);
                }
            }
        }
        Err(e) => {
            eprintln!(
                "uhca libibverbs: vfio {bdf}: no MSI-X interrupts ({e}): completion channels \
                 will not be woken; polling works"
            );
            None
        }
    };
    Ok((hca, VfioHw { platform, irq }))
}

/// The port's addressing: the RoCEv2 GID of `ip` on Ethernet, nothing on InfiniBand
/// (the subnet manager's LID).
fn set_up_port(hca: &mut Hca<MockP>, bdf: &str, ip: Option<Ipv4Addr>) -> VResult<()> {
    let drv = |what: &str, e: uhca_driver::Error| {
        VerbsError::new(libc::EIO, format!("vfio {bdf}: {what}: {e:?}"))
    };
    match (hca.caps().link_layer, ip) {
        (LinkLayer::Ethernet, Some(ip)) => {
            let mac = hca
                .query_port(1)
                .map_err(|e| drv("query port 1", e))?
                .mac
                .ok_or_else(|| {
                    VerbsError::new(
                        libc::EIO,
                        format!("vfio {bdf}: the Ethernet port reports no MAC address"),
                    )
                })?;
            hca.add_roce_gid(1, 0, IpAddr::V4(ip), mac, None)
                .map_err(|e| drv("installing the RoCEv2 GID", e))?;
            Ok(())
        }
        (LinkLayer::Ethernet, None) => {
            let gid = hca.query_gid(1, 0).map_err(|e| drv("query GID 0", e))?;
            if gid.gid.is_zero() {
                return Err(VerbsError::new(
                    libc::EADDRNOTAVAIL,
                    format!(
                        "vfio {bdf}: port 1 is Ethernet and its GID table is empty (no kernel \
                         driver fills it under VFIO): give the port an IPv4 address in \
                         UHCA_DEVICES, e.g. vfio:NAME={bdf},ip=10.0.0.1"
                    ),
                ));
            }
            Ok(())
        }
        (LinkLayer::InfiniBand, Some(_)) => Err(VerbsError::new(
            libc::EINVAL,
            format!(
                "vfio {bdf}: port 1 is InfiniBand: its address is the LID the subnet manager \
                 assigns, not ip= (drop it from UHCA_DEVICES)"
            ),
        )),
        (LinkLayer::InfiniBand, None) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errnos_of_the_platform() {
        // Each through the platform itself, where a host can produce it.
        let e = VfioPlatform::open("0000:3b:00").unwrap_err();
        assert_eq!(errno_of(&e), libc::EINVAL, "{e}");
        let e = VfioPlatform::open("ffff:ff:1f.7").unwrap_err();
        assert_eq!(errno_of(&e), libc::ENODEV, "{e}");
    }
}
