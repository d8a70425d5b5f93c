//! Errors of the VFIO platform, each with what went wrong and what to do about it.

use std::fmt;
use std::io;
use std::path::PathBuf;

use uhca_hal::platform::{ConfigError, DmaError};

use super::address::PciAddress;
use super::irq::IrqKind;

/// Another device in the same IOMMU group that keeps the group from being viable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMember {
    /// Its address (the sysfs name; not necessarily a PCI function).
    pub name: String,
    /// The driver it is bound to, if any.
    pub driver: Option<String>,
}

/// Why opening or using a device through VFIO failed.
///
/// Every message says what to do about it (how to bind the device, which kernel option is
/// missing, which permission to grant).
#[derive(Debug)]
#[non_exhaustive]
pub enum VfioError {
    /// The PCI address given is not of the form `DDDD:BB:DD.F`.
    InvalidAddress {
        /// What the caller passed.
        input: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// No PCI function with this address exists.
    NoSuchDevice {
        /// The address looked for.
        address: PciAddress,
        /// The sysfs directory that does not exist.
        path: PathBuf,
    },
    /// The device is not an NVIDIA/Mellanox device (vendor 0x15b3). Use
    /// `VfioPlatform::open_any` to drive another device on purpose.
    NotAConnectX {
        /// The address.
        address: PciAddress,
        /// Its PCI vendor ID.
        vendor: u16,
        /// Its PCI device ID.
        device: u16,
    },
    /// The device is bound to another driver (or none) instead of `vfio-pci`.
    NotBoundToVfio {
        /// The address.
        address: PciAddress,
        /// The driver it is bound to, `None` when unbound.
        driver: Option<String>,
    },
    /// The device has no IOMMU group: the IOMMU is off or absent.
    NoIommu {
        /// The address.
        address: PciAddress,
    },
    /// `/dev/vfio` (or the group's node in it) does not exist.
    VfioUnavailable {
        /// The missing path.
        path: PathBuf,
    },
    /// Other devices of the IOMMU group are bound to host drivers, so the kernel will not hand
    /// the group to userspace.
    GroupNotViable {
        /// The address.
        address: PciAddress,
        /// The IOMMU group number.
        group: u32,
        /// The members that block it (bound to drivers other than vfio-pci, pci-stub,
        /// pcieport). Empty when they could not be determined.
        blockers: Vec<GroupMember>,
    },
    /// This process has the device open already (through another [`VfioPlatform`]).
    ///
    /// [`VfioPlatform`]: super::VfioPlatform
    AlreadyOpen {
        /// The address.
        address: PciAddress,
    },
    /// Another process (or a virtual machine) already holds the IOMMU group.
    GroupBusy {
        /// The IOMMU group number.
        group: u32,
    },
    /// The caller may not open a VFIO node.
    PermissionDenied {
        /// The node.
        path: PathBuf,
    },
    /// The kernel's VFIO lacks something this platform needs (API version, type1v2 IOMMU,
    /// an mmap-able BAR0, a PCI device).
    Unsupported {
        /// What is missing.
        what: String,
    },
    /// A sysfs file could not be read.
    Sysfs {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
    /// A system call failed.
    Io {
        /// What was being done.
        op: &'static str,
        /// The cause (with its errno).
        source: io::Error,
    },
    /// An error from the vfio-ioctls crate not covered by a more specific variant.
    Vfio(vfio_ioctls::VfioError),
    /// A configuration-space access failed.
    Config(ConfigError),
    /// A DMA allocation or mapping failed.
    Dma {
        /// What was being done.
        op: &'static str,
        /// The cause.
        error: DmaError,
        /// The caller's locked-memory limit (`RLIMIT_MEMLOCK`) in bytes, `None` if unlimited.
        memlock_limit: Option<u64>,
    },
    /// 2 MiB hugepages were required (`HugePages::Require`) but none could be had.
    NoHugePages {
        /// Free 2 MiB pages reported by the kernel, when known.
        free: Option<u64>,
        /// The errno of the failed `mmap`, when one was tried.
        errno: Option<i32>,
    },
    /// Interrupts of this kind could not be set up.
    Interrupts {
        /// The kind of interrupt.
        kind: IrqKind,
        /// What went wrong.
        reason: String,
    },
}

const BIND_HINT: &str = "bind it with: \
echo {a} > /sys/bus/pci/devices/{a}/driver/unbind; \
echo vfio-pci > /sys/bus/pci/devices/{a}/driver_override; \
echo {a} > /sys/bus/pci/drivers_probe \
(or: driverctl set-override {a} vfio-pci); \
run `modprobe vfio-pci` first if the driver is not loaded";

fn bind_hint(address: &PciAddress) -> String {
    BIND_HINT.replace("{a}", &address.to_string())
}

impl fmt::Display for VfioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VfioError::InvalidAddress { input, reason } => write!(
                f,
                "invalid PCI address {input:?}: {reason}; \
                 give it as `lspci -D` prints it, e.g. 0000:3b:00.0"
            ),
            VfioError::NoSuchDevice { address, path } => write!(
                f,
                "no PCI device {address} ({} does not exist); \
                 list devices with `lspci -D -d 15b3:`",
                path.display()
            ),
            VfioError::NotAConnectX {
                address,
                vendor,
                device,
            } => write!(
                f,
                "{address} is not a ConnectX: its PCI ID is {vendor:04x}:{device:04x}, \
                 expected vendor 15b3 (NVIDIA/Mellanox); \
                 use VfioPlatform::open_any to drive another device on purpose"
            ),
            VfioError::NotBoundToVfio { address, driver } => {
                match driver {
                    Some(d) => write!(f, "{address} is bound to {d}, not to vfio-pci; ")?,
                    None => write!(f, "{address} is not bound to any driver (need vfio-pci); ")?,
                }
                f.write_str(&bind_hint(address))
            }
            VfioError::NoIommu { address } => write!(
                f,
                "{address} has no IOMMU group, so the IOMMU is off or absent; \
                 enable VT-d/AMD-Vi in the firmware setup and boot with \
                 intel_iommu=on (Intel) or amd_iommu=on (AMD), plus iommu=pt, \
                 then check `dmesg | grep -i -e DMAR -e IOMMU`"
            ),
            VfioError::VfioUnavailable { path } => write!(
                f,
                "{} does not exist: VFIO is not available; run `modprobe vfio-pci` \
                 and make sure the IOMMU is on (boot with intel_iommu=on or amd_iommu=on)",
                path.display()
            ),
            VfioError::GroupNotViable {
                address,
                group,
                blockers,
            } => {
                write!(
                    f,
                    "IOMMU group {group} of {address} is not viable: every device in the group \
                     must be bound to vfio-pci (or be unbound)"
                )?;
                if blockers.is_empty() {
                    write!(f, "; see /sys/kernel/iommu_groups/{group}/devices")?;
                } else {
                    f.write_str("; bind these to vfio-pci too:")?;
                    for m in blockers {
                        match &m.driver {
                            Some(d) => write!(f, " {} (bound to {d})", m.name)?,
                            None => write!(f, " {}", m.name)?,
                        }
                    }
                    f.write_str(
                        " (or move the device to a slot with its own group; \
                         ACS on the upstream bridge splits groups)",
                    )?;
                }
                Ok(())
            }
            VfioError::AlreadyOpen { address } => write!(
                f,
                "{address} is already open in this process; a device has one driver at a \
                 time: drop the other VfioPlatform first"
            ),
            VfioError::GroupBusy { group } => write!(
                f,
                "IOMMU group {group} is already in use by another process or a virtual \
                 machine (/dev/vfio/{group} can be opened once); stop it \
                 (`fuser -v /dev/vfio/{group}` shows who holds it)"
            ),
            VfioError::PermissionDenied { path } => write!(
                f,
                "permission denied opening {}: run as root, or give your user the node \
                 (`chown $USER {}`, or a udev rule for the vfio group) and raise the \
                 locked-memory limit for DMA (`ulimit -l unlimited` or memlock in \
                 /etc/security/limits.conf)",
                path.display(),
                path.display()
            ),
            VfioError::Unsupported { what } => write!(f, "VFIO cannot be used: {what}"),
            VfioError::Sysfs { path, source } => {
                write!(f, "cannot read {}: {source}", path.display())
            }
            VfioError::Io { op, source } => write!(f, "{op} failed: {source}"),
            VfioError::Vfio(e) => write!(f, "VFIO: {e}"),
            VfioError::Config(e) => write!(f, "{e}"),
            VfioError::Dma {
                op,
                error,
                memlock_limit,
            } => {
                write!(f, "{op}: {error}")?;
                if *error == DmaError::MappingFailed(libc::ENOMEM) {
                    match memlock_limit {
                        Some(l) => write!(
                            f,
                            "; VFIO pins DMA memory and counts it against the locked-memory \
                             limit ({} KiB now): raise it (`ulimit -l unlimited`, memlock in \
                             /etc/security/limits.conf) or run as root",
                            l / 1024
                        )?,
                        None => f.write_str("; the IOMMU or the kernel ran out of memory")?,
                    }
                } else if *error == DmaError::MappingFailed(libc::ENOSPC) {
                    f.write_str(
                        "; the IOMMU driver's mapping limit is reached \
                         (vfio_iommu_type1 dma_entry_limit): use larger allocations",
                    )?;
                }
                Ok(())
            }
            VfioError::NoHugePages { free, errno } => {
                f.write_str("2 MiB hugepages are required but none are available")?;
                if let Some(n) = free {
                    write!(f, " ({n} free)")?;
                }
                if let Some(e) = errno {
                    write!(f, " (mmap: {})", io::Error::from_raw_os_error(*e))?;
                }
                f.write_str(
                    "; reserve some with `echo 512 > /proc/sys/vm/nr_hugepages` \
                     (1 GiB) or boot with hugepages=512, or allow 4 KiB pages \
                     (HugePages::Prefer)",
                )
            }
            VfioError::Interrupts { kind, reason } => {
                write!(f, "cannot set up {kind} interrupts: {reason}")
            }
        }
    }
}

impl std::error::Error for VfioError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            VfioError::Sysfs { source, .. } | VfioError::Io { source, .. } => Some(source),
            VfioError::Vfio(e) => Some(e),
            _ => None,
        }
    }
}

impl From<ConfigError> for VfioError {
    fn from(e: ConfigError) -> Self {
        VfioError::Config(e)
    }
}

impl VfioError {
    /// A failed system call, with the errno of `err`.
    pub(crate) fn io(op: &'static str, source: io::Error) -> Self {
        VfioError::Io { op, source }
    }

    /// The `errno` behind this error, when there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            VfioError::Sysfs { source, .. } | VfioError::Io { source, .. } => source.raw_os_error(),
            VfioError::Config(ConfigError::Io(e)) => Some(*e),
            VfioError::Dma {
                error: DmaError::MappingFailed(e),
                ..
            } => Some(*e),
            _ => None,
        }
    }
}
