//! # uhca-vfio: the VFIO platform
//!
//! A real PCI function, bound to `vfio-pci`, behind `uhca-hal`'s platform traits (Linux;
//! elsewhere the crate is empty). `uhca-driver` re-exports it as `uhca_driver::vfio` behind
//! its `vfio` feature; it depends on nothing of the driver, so a bare-metal build of the
//! driver never compiles it.
//!
//! [`VfioPlatform`] implements [`Bar`], [`Dma`], [`PciConfig`] and [`Clock`] (hence
//! [`Platform`](uhca_hal::platform::Platform)) for one device:
//!
//! * **Open** ([`VfioPlatform::open`]): the PCI address is checked in sysfs first (device
//!   present, ConnectX vendor, IOMMU group, bound to vfio-pci, `/dev/vfio/<group>` present),
//!   so each way of getting the setup wrong gets its own [`VfioError`] with the fix in its
//!   message. Then vfio-ioctls opens the container (`/dev/vfio/vfio`), adds the group after
//!   checking it is viable, selects the type1v2 IOMMU and gets the device fd (a second
//!   function of a group already open in this process joins its container). BAR0 is
//!   `mmap`ed whole; the configuration space is read and written through the VFIO config
//!   region; memory space and bus mastering are turned on.
//! * **BAR0** ([`Bar`]): volatile loads and stores of the stated width through
//!   `volatile::VolatilePtr`s into the mapping (read-only or write-only, as the access); no
//!   reference into it ever exists. Out-of-range or misaligned offsets
//!   panic.
//! * **DMA** ([`Dma`]): the IOVA ranges come from `VFIO_IOMMU_GET_INFO`'s IOVA-range
//!   capability ([`IommuInfo`]; [`LEGACY_IOVA_RANGES`] on kernels without it), IOVAs from a
//!   first-fit [`IovaAllocator`] that never hands out the first 64 KiB (so IOVA 0 in a device
//!   context is always a bug) and honours [`VfioOptions::dma_address_bits`]. Memory comes in
//!   2 MiB hugepage blocks ([`HugePages`]; 4 KiB pages with one clear message when the
//!   kernel has no free hugepages), each mapped once with `VFIO_IOMMU_MAP_DMA` and carved
//!   into 4 KiB pages. [`Dma::map`] maps a caller's buffer at a fresh IOVA; the IOMMU maps
//!   whole pages, so the rest of the buffer's first and last page is reachable by the device
//!   too.
//! * **Time** ([`Clock`]): `CLOCK_MONOTONIC`; delays sleep (`nanosleep`).
//! * **Interrupts** (optional; polling always works): [`VfioPlatform::enable_interrupts`]
//!   binds MSI-X (or MSI, or INTx) vectors to eventfds ([`InterruptFd`]).
//!
//! # Teardown
//!
//! Dropping the platform (its last clone) releases everything in this order: interrupts disabled, bus
//! mastering cleared, every DMA mapping unmapped from the IOMMU and its memory freed, BAR0
//! unmapped, the device fd closed (vfio-pci then resets the function), the group taken out
//! of the container and the container closed (with the last function of the group open in
//! this process). **The driver must disable the device first**
//! (for an mlx5 HCA: TEARDOWN_HCA, page reclaim, DISABLE_HCA): clearing bus mastering stops
//! a device that was not disabled from reaching memory that is about to be freed, but the
//! device sees its DMA fail rather than a clean shutdown.
//!
//! # What vfio-ioctls does and what this module does itself
//!
//! vfio-ioctls (0.10, no KVM) opens the container and the group, checks viability, selects
//! the type1v2 IOMMU, gets the device fd, maps and unmaps DMA and sets interrupts up. This
//! module issues `VFIO_DEVICE_GET_INFO`, `VFIO_DEVICE_GET_REGION_INFO`, `VFIO_DEVICE_RESET`
//! and `VFIO_IOMMU_GET_INFO` itself (vfio-ioctls hides the first two's results, swallows the
//! reset's error and has no IOMMU info), with request numbers computed like the kernel's
//! `_IO(VFIO_TYPE, VFIO_BASE + n)`, and reads and writes the configuration space with
//! `pread`/`pwrite` so that failures come back as errors.
//!
//! # Limitations
//!
//! * The functions of one IOMMU group (a dual-port card without ACS) share one container
//!   and one IOVA space in this process, so they can be opened side by side; a group held
//!   by another process gets [`VfioError::GroupBusy`], a device opened twice
//!   [`VfioError::AlreadyOpen`].
//! * BAR0 is mapped whole, which needs a kernel that allows mapping the MSI-X table
//!   (Linux 4.16 and later); the mapping is uncached (no write combining, so no BlueFlame).
//! * The legacy container/group interface only (no iommufd character devices), and no
//!   VFIO no-IOMMU mode.
//! * DMA blocks are returned to the system when the platform is dropped, not when their
//!   last allocation is freed.
//!
//! # Setting a machine up
//!
//! ```text
//! # IOMMU on: boot with intel_iommu=on iommu=pt (or amd_iommu=on iommu=pt)
//! modprobe vfio-pci
//! echo 0000:3b:00.0 > /sys/bus/pci/devices/0000:3b:00.0/driver/unbind
//! echo vfio-pci > /sys/bus/pci/devices/0000:3b:00.0/driver_override
//! echo 0000:3b:00.0 > /sys/bus/pci/drivers_probe
//! echo 512 > /proc/sys/vm/nr_hugepages            # optional: 1 GiB of 2 MiB pages
//! ```
//!
//! Then run as root, or give the user `/dev/vfio/<group>` and a large enough locked-memory
//! limit (`ulimit -l`): VFIO pins every DMA page and counts it against that limit.
//!
//! # Example: QEMU's edu device
//!
//! The VM rig drives QEMU's `edu` device (1234:11e8) through this platform, so any vendor
//! can be opened with [`VfioPlatform::open_any`]:
//!
//! ```no_run
//! use std::time::Duration;
//! use uhca_vfio::{IrqKind, VfioError, VfioOptions, VfioPlatform};
//! use uhca_hal::platform::{Bar, Dma, PciConfig};
//!
//! // edu reaches only the first 256 MiB.
//! let opts = VfioOptions::default().with_dma_address_bits(28);
//! let p = VfioPlatform::open_any("0000:00:03.0", &opts)?;
//! assert_eq!(p.config_read16(0).map_err(VfioError::from)?, 0x1234);
//! assert_eq!(p.read32(0x00), 0x010000ed); // edu's ID register
//! let irq = p.enable_interrupts(IrqKind::Msi, 1)?.remove(0);
//! let buf = p
//!     .alloc_coherent(4096, 4096)
//!     .map_err(|e| p.explain_dma_error("DMA buffer", e))?;
//! // SAFETY: the region is live and 4096 bytes long; the device is not using it yet.
//! unsafe { buf.cpu.as_ptr().write_bytes(0x5a, 64) };
//! // edu's DMA engine: copy 64 bytes from our buffer into its own memory at 0x40000, then
//! // raise an interrupt.
//! p.write64(0x80, buf.iova);
//! p.write64(0x88, 0x40000);
//! p.write64(0x90, 64);
//! p.write64(0x98, 0x1 | 0x4);
//! assert!(irq.wait(Duration::from_secs(1))? > 0);
//! p.write32(0x64, p.read32(0x24)); // acknowledge
//! // SAFETY: the device no longer uses the buffer.
//! unsafe { p.free_coherent(buf) };
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![cfg(target_os = "linux")]
#![deny(
    unsafe_op_in_unsafe_fn,
    clippy::undocumented_unsafe_blocks,
    missing_docs
)]

#[cfg(not(target_pointer_width = "64"))]
compile_error!("the VFIO platform needs 64-bit targets (single 8-byte MMIO accesses)");

mod address;
mod error;
mod iommu;
mod iova;
mod irq;
mod mem;
mod paths;
pub mod pci;
mod sys;

use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use uhca_hal::platform::{Bar, Clock, ConfigError, Dma, DmaError, DmaRegion, PciConfig};
use vfio_bindings::bindings::vfio::{
    VFIO_DEVICE_FLAGS_PCI, VFIO_DEVICE_FLAGS_RESET, VFIO_PCI_BAR0_REGION_INDEX,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ,
    VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_ioctls::{VfioContainer, VfioDevice, VfioOps};
use volatile::{VolatilePtr, access};

pub use address::PciAddress;
pub use error::{GroupMember, VfioError};
pub use iommu::{IommuInfo, LEGACY_IOVA_RANGES, parse_iommu_info};
pub use iova::{IovaAllocator, IovaFreeError, IovaRange};
pub use irq::{InterruptFd, IrqKind};
pub use mem::{BLOCK_SIZE, DmaStats, HugePages};
pub use paths::{MELLANOX_VENDOR_ID, VfioPaths};

use mem::{DmaPool, IommuMap};

/// The lowest IOVA ever handed out: the first 64 KiB stay unmapped, so a zero (or small)
/// address in a device context faults instead of hitting memory.
pub const MIN_IOVA: u64 = 0x1_0000;

/// How to open a device. Build it from [`Default`] and change fields.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct VfioOptions {
    /// Where sysfs and `/dev/vfio` are (tests point these at a fake tree).
    pub paths: VfioPaths,
    /// Whether DMA memory uses 2 MiB hugepages (default: when available).
    pub hugepages: HugePages,
    /// How many address bits the device can put on the bus for DMA (default 64). IOVAs are
    /// allocated below 2^bits; QEMU's edu device needs 28.
    pub dma_address_bits: u8,
    /// Issue a device reset (`VFIO_DEVICE_RESET`, an FLR on ConnectX) after opening, when
    /// the device supports one (default false: vfio-pci already resets the function when
    /// the device fd is opened and closed).
    pub reset: bool,
    /// Turn bus mastering on when opening (default true; memory space is always turned on).
    pub bus_master: bool,
    /// Print the hugepage fallback message on stderr once (default true); it is kept for
    /// [`VfioPlatform::dma_notice`] either way.
    pub announce_fallback: bool,
}

impl Default for VfioOptions {
    fn default() -> Self {
        VfioOptions {
            paths: VfioPaths::default(),
            hugepages: HugePages::default(),
            dma_address_bits: 64,
            reset: false,
            bus_master: true,
            announce_fallback: true,
        }
    }
}

impl VfioOptions {
    /// Replaces [`paths`](Self::paths).
    pub fn with_paths(mut self, paths: VfioPaths) -> Self {
        self.paths = paths;
        self
    }
    /// Replaces [`hugepages`](Self::hugepages).
    pub fn with_hugepages(mut self, hugepages: HugePages) -> Self {
        self.hugepages = hugepages;
        self
    }
    /// Replaces [`dma_address_bits`](Self::dma_address_bits).
    pub fn with_dma_address_bits(mut self, bits: u8) -> Self {
        self.dma_address_bits = bits;
        self
    }
    /// Replaces [`reset`](Self::reset).
    pub fn with_reset(mut self, reset: bool) -> Self {
        self.reset = reset;
        self
    }
    /// Replaces [`bus_master`](Self::bus_master).
    pub fn with_bus_master(mut self, bus_master: bool) -> Self {
        self.bus_master = bus_master;
        self
    }
    /// Replaces [`announce_fallback`](Self::announce_fallback).
    pub fn with_announce_fallback(mut self, announce: bool) -> Self {
        self.announce_fallback = announce;
        self
    }
}

/// The IOMMU operations on the VFIO container.
struct ContainerMapper(Arc<VfioContainer>);

fn vfio_errno(e: &vfio_ioctls::VfioError) -> i32 {
    match e {
        vfio_ioctls::VfioError::IommuDmaMap(s) | vfio_ioctls::VfioError::IommuDmaUnmap(s) => {
            s.errno()
        }
        vfio_ioctls::VfioError::InvalidDmaUnmapSize => libc::EINVAL,
        _ => libc::EIO,
    }
}

impl IommuMap for ContainerMapper {
    unsafe fn map(&self, iova: u64, len: usize, vaddr: *mut u8) -> Result<(), i32> {
        // SAFETY: the caller upholds vfio_dma_map's contract (memory stays mapped until
        // unmapped, raw-pointer access only), which is IommuMap::map's contract.
        unsafe { self.0.vfio_dma_map(iova, len, vaddr) }.map_err(|e| vfio_errno(&e))
    }
    fn unmap(&self, iova: u64, len: usize) -> Result<(), i32> {
        self.0.vfio_dma_unmap(iova, len).map_err(|e| vfio_errno(&e))
    }
}

/// A VFIO container with one IOMMU group in it, shared by the platforms of that group's
/// functions in this process, with the IOVA space of its IOMMU domain.
struct SharedContainer {
    container: Arc<VfioContainer>,
    group: u32,
    iommu: IommuInfo,
    /// Shared by the DMA pools of the group's devices: they map into one IOMMU domain.
    iova: Arc<Mutex<IovaAllocator>>,
    /// The functions open on it.
    open: Mutex<Vec<PciAddress>>,
}

/// The containers of this process, one per IOMMU group in use.
static CONTAINERS: Mutex<Vec<Weak<SharedContainer>>> = Mutex::new(Vec::new());

impl SharedContainer {
    /// Queries the IOMMU of `container` (its group added, so its IOMMU set).
    fn new(container: Arc<VfioContainer>, group: u32) -> Result<Self, VfioError> {
        let raw = sys::iommu_info_bytes(&*container)
            .map_err(|e| VfioError::io("VFIO_IOMMU_GET_INFO", e))?;
        let iommu = parse_iommu_info(&raw).map_err(|m| {
            VfioError::io(
                "VFIO_IOMMU_GET_INFO",
                io::Error::new(io::ErrorKind::InvalidData, m),
            )
        })?;
        let mut iova = IovaAllocator::new(&iommu.iova_ranges);
        iova.clamp(MIN_IOVA, u64::MAX);
        Ok(SharedContainer {
            container,
            group,
            iommu,
            iova: Arc::new(Mutex::new(iova)),
            open: Mutex::new(Vec::new()),
        })
    }

    fn is_open(&self, address: &PciAddress) -> bool {
        self.open
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(address)
    }

    fn set_open(&self, address: PciAddress, open: bool) {
        let mut v = self.open.lock().unwrap_or_else(|p| p.into_inner());
        v.retain(|a| *a != address);
        if open {
            v.push(address);
        }
    }
}

/// The `mmap` of BAR0.
struct BarMapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is device memory reached only through raw pointers with volatile
// accesses; the device serialises concurrent accesses, so sharing or moving the owner
// between threads is sound (the `Bar` contract requires exactly this).
unsafe impl Send for BarMapping {}
// SAFETY: as for Send.
unsafe impl Sync for BarMapping {}

impl Drop for BarMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping was made by `mmap` with this length and no pointer into it
        // outlives the platform that owns it.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// Whether an access of `size` bytes (a power of two) at `offset` is naturally aligned and
/// inside a region of `len` bytes.
#[inline(always)]
fn access_in_bounds(offset: usize, size: usize, len: usize) -> bool {
    offset.is_multiple_of(size) && offset.checked_add(size).is_some_and(|end| end <= len)
}

/// What identifies the failing open, for error mapping.
struct OpenContext<'a> {
    address: PciAddress,
    group: u32,
    paths: &'a VfioPaths,
}

/// Turns an error of vfio-ioctls during open into the specific, actionable one.
fn map_open_error(e: vfio_ioctls::VfioError, ctx: &OpenContext<'_>) -> VfioError {
    use vfio_ioctls::VfioError as E;
    let container = ctx.paths.dev_vfio.join("vfio");
    let group_node = ctx.paths.group_node(ctx.group);
    let from_io = |source: io::Error, path: &Path, op: &'static str| match source.kind() {
        io::ErrorKind::PermissionDenied => VfioError::PermissionDenied {
            path: path.to_owned(),
        },
        io::ErrorKind::NotFound => VfioError::VfioUnavailable {
            path: path.to_owned(),
        },
        _ if source.raw_os_error() == Some(libc::EBUSY) && path == group_node => {
            VfioError::GroupBusy { group: ctx.group }
        }
        _ => VfioError::io(op, source),
    };
    match e {
        E::OpenContainer(source) => from_io(source, &container, "open /dev/vfio/vfio"),
        E::OpenGroup(source, _) => from_io(source, &group_node, "open the VFIO group"),
        E::GroupViable => VfioError::GroupNotViable {
            address: ctx.address,
            group: ctx.group,
            blockers: paths::group_blockers(ctx.paths, ctx.group, &ctx.address),
        },
        E::VfioApiVersion => VfioError::Unsupported {
            what: "the kernel's VFIO API version is not the one vfio-ioctls speaks".into(),
        },
        E::VfioExtension | E::VfioType1V2 | E::VfioInvalidType => VfioError::Unsupported {
            what: "the kernel offers no type1v2 IOMMU backend \
                   (load vfio_iommu_type1; iommufd-only kernels are not supported)"
                .into(),
        },
        E::ContainerSetIOMMU(s) => VfioError::io(
            "VFIO_SET_IOMMU (type1v2)",
            io::Error::from_raw_os_error(s.errno()),
        ),
        E::GroupGetDeviceFD(s) if s.errno() == libc::EBUSY => VfioError::Unsupported {
            what: format!(
                "{} is already open (by this or another process); close it first",
                ctx.address
            ),
        },
        E::GroupGetDeviceFD(s) => VfioError::io(
            "VFIO_GROUP_GET_DEVICE_FD",
            io::Error::from_raw_os_error(s.errno()),
        ),
        E::VfioDeviceGetInfo(s) => VfioError::io(
            "VFIO_DEVICE_GET_INFO",
            io::Error::from_raw_os_error(s.errno()),
        ),
        E::VfioDeviceGetInfoPCI | E::VfioDeviceGetInfoOther => VfioError::Unsupported {
            what: format!("{} is not presented by VFIO as a PCI device", ctx.address),
        },
        E::InvalidPath => VfioError::Sysfs {
            path: ctx.paths.pci_device_dir(&ctx.address).join("iommu_group"),
            source: io::Error::new(io::ErrorKind::InvalidData, "not a usable IOMMU group link"),
        },
        other => VfioError::Vfio(other),
    }
}

/// One PCI function opened through VFIO; implements the HAL's platform traits.
///
/// A cheap shared handle (an [`Arc`] of the opened function): cloning it shares the one
/// function, so the driver's objects hold a `VfioPlatform` by value, with no lifetime. The
/// function is released (see the [module documentation](self)) when the last clone drops.
///
/// `Send + Sync`: BAR accesses, configuration accesses and DMA allocation may come from any
/// thread.
#[derive(Clone)]
pub struct VfioPlatform {
    inner: Arc<Function>,
}

/// What a [`VfioPlatform`] shares between its clones.
struct Function {
    address: PciAddress,
    vendor: u16,
    device_id: u16,
    group: u32,
    device_flags: u32,
    config_offset: u64,
    config_len: u64,
    memlock: Option<u64>,
    irqs: Mutex<Option<IrqKind>>,
    // Released by Drop, in this order: pool (unmap + free DMA), bar (munmap), device (close
    // the fd, group out of the container); the container goes last, with the last platform
    // of its group.
    pool: ManuallyDrop<DmaPool<ContainerMapper>>,
    bar: ManuallyDrop<BarMapping>,
    device: ManuallyDrop<VfioDevice>,
    shared: Arc<SharedContainer>,
}

impl std::fmt::Debug for VfioPlatform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioPlatform")
            .field("address", &self.inner.address)
            .field(
                "id",
                &format_args!("{:04x}:{:04x}", self.inner.vendor, self.inner.device_id),
            )
            .field("group", &self.inner.group)
            .field("bar0_len", &self.inner.bar.len)
            .field("iova_ranges", &self.inner.shared.iommu.iova_ranges)
            .finish_non_exhaustive()
    }
}

impl VfioPlatform {
    /// Opens the ConnectX at `address` (e.g. `"0000:3b:00.0"`) with default options.
    ///
    /// Fails with [`VfioError::NotAConnectX`] for other vendors; see [`open_any`](Self::open_any).
    pub fn open(address: &str) -> Result<Self, VfioError> {
        Self::open_with(address, &VfioOptions::default())
    }

    /// Opens the ConnectX at `address` with `options`.
    pub fn open_with(address: &str, options: &VfioOptions) -> Result<Self, VfioError> {
        Self::open_inner(PciAddress::parse(address)?, options, true)
    }

    /// Opens the PCI function at `address` whatever its vendor (QEMU's edu device in the VM
    /// rig, for instance). The caller knows what the device is.
    pub fn open_any(address: &str, options: &VfioOptions) -> Result<Self, VfioError> {
        Self::open_inner(PciAddress::parse(address)?, options, false)
    }

    fn open_inner(
        address: PciAddress,
        options: &VfioOptions,
        require_connectx: bool,
    ) -> Result<Self, VfioError> {
        let found = paths::probe(&options.paths, &address, require_connectx)?;
        let ctx = OpenContext {
            address,
            group: found.group,
            paths: &options.paths,
        };
        // Opens are serialised in this process: the functions of one IOMMU group share one
        // container (the group node can be opened only once), created by the first of them.
        let mut registry = CONTAINERS.lock().unwrap_or_else(|p| p.into_inner());
        registry.retain(|w| w.strong_count() > 0);
        let existing = registry
            .iter()
            .filter_map(Weak::upgrade)
            .find(|s| s.group == found.group);
        if existing.as_ref().is_some_and(|s| s.is_open(&address)) {
            return Err(VfioError::AlreadyOpen { address });
        }
        let container = match &existing {
            Some(s) => s.container.clone(),
            None => Arc::new(VfioContainer::new(None).map_err(|e| map_open_error(e, &ctx))?),
        };
        let ops: Arc<dyn VfioOps> = container.clone();
        // On any early return below, `device` drops before `container` (reverse order of
        // declaration): device fd closed, then the group leaves the container.
        let device =
            VfioDevice::new(&found.dir, ops, false).map_err(|e| map_open_error(e, &ctx))?;
        let shared = match existing {
            Some(s) => s,
            None => {
                // The IOMMU is set now (the group is in the container): ask it for its ranges.
                let s = Arc::new(SharedContainer::new(container.clone(), found.group)?);
                registry.push(Arc::downgrade(&s));
                s
            }
        };
        drop(registry);

        let info =
            sys::device_info(&device).map_err(|e| VfioError::io("VFIO_DEVICE_GET_INFO", e))?;
        if info.flags & VFIO_DEVICE_FLAGS_PCI == 0 {
            return Err(VfioError::Unsupported {
                what: format!("{address} is not presented by VFIO as a PCI device"),
            });
        }
        let cfg = sys::region_info(&device, VFIO_PCI_CONFIG_REGION_INDEX)
            .map_err(|e| VfioError::io("VFIO_DEVICE_GET_REGION_INFO (config space)", e))?;
        let bar = sys::region_info(&device, VFIO_PCI_BAR0_REGION_INDEX)
            .map_err(|e| VfioError::io("VFIO_DEVICE_GET_REGION_INFO (BAR0)", e))?;
        let need = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
        if bar.size == 0 || bar.flags & need != need || bar.flags & VFIO_REGION_INFO_FLAG_MMAP == 0
        {
            return Err(VfioError::Unsupported {
                what: format!(
                    "BAR0 of {address} is not a memory BAR that can be mapped \
                     (size {:#x}, VFIO region flags {:#x})",
                    bar.size, bar.flags
                ),
            });
        }
        let bar_len = usize::try_from(bar.size).map_err(|_| VfioError::Unsupported {
            what: "BAR0 larger than the address space".into(),
        })?;
        let bar_off = libc::off_t::try_from(bar.offset).map_err(|_| VfioError::Unsupported {
            what: "BAR0 region offset out of range".into(),
        })?;
        // SAFETY: a shared mapping of the device fd at the offset VFIO gave for BAR0, of the
        // region's size, at an address of the kernel's choosing; it aliases no Rust object.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                bar_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                device.as_raw_fd(),
                bar_off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(VfioError::io("mmap of BAR0", io::Error::last_os_error()));
        }
        let bar_map = BarMapping {
            ptr: NonNull::new(p.cast())
                .ok_or_else(|| VfioError::io("mmap of BAR0", io::Error::other("null mapping")))?,
            len: bar_len,
        };

        let window = (
            MIN_IOVA,
            match options.dma_address_bits {
                0 => 0,
                b if b >= 64 => u64::MAX,
                b => (1u64 << b) - 1,
            },
        );
        let reachable: u128 = shared
            .iova
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .free_ranges()
            .iter()
            .filter(|r| r.last >= window.0 && r.start <= window.1)
            .map(|r| u128::from(r.last.min(window.1) - r.start.max(window.0)) + 1)
            .sum();
        if reachable < BLOCK_SIZE as u128 {
            return Err(VfioError::Unsupported {
                what: format!(
                    "no usable IOVA space: the IOMMU offers {:?}, the device reaches \
                     {} bits",
                    shared.iommu.iova_ranges, options.dma_address_bits
                ),
            });
        }
        let granule = usize::try_from(shared.iommu.min_page_size())
            .unwrap_or(usize::MAX)
            .max(sys::page_size());
        if granule > BLOCK_SIZE {
            return Err(VfioError::Unsupported {
                what: format!("IOMMU page size {granule:#x} is larger than 2 MiB"),
            });
        }
        let pool = DmaPool::new(
            ContainerMapper(container),
            shared.iova.clone(),
            window,
            options.hugepages,
            options.paths.clone(),
            granule,
            options.announce_fallback,
        );

        let platform = VfioPlatform {
            inner: Arc::new(Function {
                address,
                vendor: found.vendor,
                device_id: found.device,
                group: found.group,
                device_flags: info.flags,
                config_offset: cfg.offset,
                config_len: cfg.size,
                memlock: sys::memlock_limit(),
                irqs: Mutex::new(None),
                pool: ManuallyDrop::new(pool),
                bar: ManuallyDrop::new(bar_map),
                device: ManuallyDrop::new(device),
                shared,
            }),
        };
        platform.inner.shared.set_open(address, true);
        // The device as VFIO sees it must be the one sysfs described.
        let vendor = platform.config_read16(pci::VENDOR_ID)?;
        if require_connectx && vendor != MELLANOX_VENDOR_ID {
            return Err(VfioError::NotAConnectX {
                address,
                vendor,
                device: platform.config_read16(pci::DEVICE_ID)?,
            });
        }
        if options.reset && platform.supports_reset() {
            platform.reset()?;
        }
        let mut set = pci::COMMAND_MEMORY;
        if options.bus_master {
            set |= pci::COMMAND_BUS_MASTER;
        }
        pci::update_command(&platform, set, 0)?;
        Ok(platform)
    }

    /// The PCI address.
    pub fn address(&self) -> PciAddress {
        self.inner.address
    }

    /// The PCI vendor ID.
    pub fn vendor_id(&self) -> u16 {
        self.inner.vendor
    }

    /// The PCI device ID.
    pub fn device_id(&self) -> u16 {
        self.inner.device_id
    }

    /// The IOMMU group number.
    pub fn iommu_group(&self) -> u32 {
        self.inner.group
    }

    /// What the IOMMU reported: page sizes, IOVA ranges, mapping budget.
    pub fn iommu_info(&self) -> &IommuInfo {
        &self.inner.shared.iommu
    }

    /// The IOVA ranges DMA memory is allocated from (after [`MIN_IOVA`] and
    /// [`VfioOptions::dma_address_bits`]), as they stand now.
    pub fn free_iova_ranges(&self) -> Vec<IovaRange> {
        self.inner.pool.free_iova_ranges()
    }

    /// Size of the configuration space (256 for PCI, 4096 for PCI Express).
    pub fn config_space_len(&self) -> u64 {
        self.inner.config_len
    }

    /// The caller's locked-memory limit in bytes when opening (`None`: unlimited). VFIO
    /// counts every pinned DMA page against it.
    pub fn memlock_limit(&self) -> Option<u64> {
        self.inner.memlock
    }

    /// Whether VFIO can reset the device (`VFIO_DEVICE_FLAGS_RESET`: FLR, or another
    /// function-level method the kernel knows for it).
    pub fn supports_reset(&self) -> bool {
        self.inner.device_flags & VFIO_DEVICE_FLAGS_RESET != 0
    }

    /// Resets the function (`VFIO_DEVICE_RESET`) and turns memory space and bus mastering
    /// back on (the kernel restores the configuration space around the reset, this makes
    /// sure). All device state is lost: only between a disabled device and a new bring-up.
    pub fn reset(&self) -> Result<(), VfioError> {
        if !self.supports_reset() {
            return Err(VfioError::Unsupported {
                what: format!("{} offers no reset method to VFIO", self.inner.address),
            });
        }
        sys::device_reset(&*self.inner.device)
            .map_err(|e| VfioError::io("VFIO_DEVICE_RESET", e))?;
        pci::update_command(self, pci::COMMAND_MEMORY | pci::COMMAND_BUS_MASTER, 0)?;
        Ok(())
    }

    /// Turns bus mastering on (the device may issue DMA and MSI writes).
    pub fn enable_bus_master(&self) -> Result<(), VfioError> {
        pci::update_command(self, pci::COMMAND_MEMORY | pci::COMMAND_BUS_MASTER, 0)?;
        Ok(())
    }

    /// Turns bus mastering off: the device can no longer reach memory (nor signal MSIs).
    pub fn disable_bus_master(&self) -> Result<(), VfioError> {
        pci::update_command(self, 0, pci::COMMAND_BUS_MASTER)?;
        Ok(())
    }

    /// The standard capability list.
    pub fn capabilities(&self) -> Result<Vec<pci::Capability>, VfioError> {
        Ok(pci::capabilities(self)?)
    }

    /// The extended (PCI Express) capability list.
    pub fn extended_capabilities(&self) -> Result<Vec<pci::ExtendedCapability>, VfioError> {
        Ok(pci::extended_capabilities(self)?)
    }

    /// The offset of the first standard capability with `id` ([`pci::cap_id`]).
    pub fn find_capability(&self, id: u8) -> Result<Option<u16>, VfioError> {
        Ok(pci::find_capability(self, id)?)
    }

    /// The hugepage fallback message, if DMA memory had to fall back to 4 KiB pages (or
    /// failed because hugepages were required).
    pub fn dma_notice(&self) -> Option<String> {
        self.inner.pool.notice()
    }

    /// Counters of the DMA pool.
    pub fn dma_stats(&self) -> DmaStats {
        self.inner.pool.stats()
    }

    /// A [`DmaError`] from this platform as a [`VfioError`] whose message says what to do
    /// (for example, raise the locked-memory limit when the IOMMU mapping ran out of it).
    pub fn explain_dma_error(&self, op: &'static str, error: DmaError) -> VfioError {
        VfioError::Dma {
            op,
            error,
            memlock_limit: self.inner.memlock,
        }
    }

    /// How many vectors of `kind` the device offers (0: none).
    pub fn interrupt_count(&self, kind: IrqKind) -> u32 {
        self.inner
            .device
            .get_irq_info(kind.vfio_index())
            .map_or(0, |i| i.count)
    }

    /// Binds vectors `0..count` of `kind` to new eventfds and enables them; any kind
    /// enabled before is disabled first. The returned fds are non-blocking; waiting on
    /// them is optional (polling the device always works).
    pub fn enable_interrupts(
        &self,
        kind: IrqKind,
        count: u32,
    ) -> Result<Vec<InterruptFd>, VfioError> {
        let available = self.interrupt_count(kind);
        if count == 0 || count > available {
            return Err(VfioError::Interrupts {
                kind,
                reason: format!("asked for {count} vectors, the device offers {available}"),
            });
        }
        let mut enabled = self.inner.irqs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = enabled.take() {
            let _ = self.inner.device.disable_irq(old.vfio_index());
        }
        let fds = (0..count)
            .map(|v| InterruptFd::new(kind, v))
            .collect::<io::Result<Vec<_>>>()
            .map_err(|e| VfioError::io("eventfd", e))?;
        self.inner
            .device
            .enable_irq(
                kind.vfio_index(),
                fds.iter().map(InterruptFd::eventfd).collect(),
            )
            .map_err(|e| VfioError::Interrupts {
                kind,
                reason: format!("VFIO_DEVICE_SET_IRQS failed ({e})"),
            })?;
        *enabled = Some(kind);
        Ok(fds)
    }

    /// Disables the interrupts enabled by [`enable_interrupts`](Self::enable_interrupts).
    pub fn disable_interrupts(&self) -> Result<(), VfioError> {
        let mut enabled = self.inner.irqs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(kind) = enabled.take() {
            self.inner
                .device
                .disable_irq(kind.vfio_index())
                .map_err(|e| VfioError::Interrupts {
                    kind,
                    reason: format!("VFIO_DEVICE_SET_IRQS (disable) failed ({e})"),
                })?;
        }
        Ok(())
    }

    /// Unmasks legacy INTx after it fired (VFIO masks a level-triggered INTx each time it
    /// signals the eventfd; MSI and MSI-X need no unmasking).
    pub fn unmask_intx(&self) -> Result<(), VfioError> {
        self.inner
            .device
            .unmask_irq(IrqKind::Intx.vfio_index())
            .map_err(|e| VfioError::Interrupts {
                kind: IrqKind::Intx,
                reason: format!("unmask failed ({e})"),
            })
    }

    /// Signals `vector` of `kind` from software (VFIO's loopback), to test the eventfd path
    /// without the device.
    pub fn trigger_interrupt(&self, kind: IrqKind, vector: u32) -> Result<(), VfioError> {
        self.inner
            .device
            .trigger_irq(kind.vfio_index(), vector)
            .map_err(|e| VfioError::Interrupts {
                kind,
                reason: format!("trigger of vector {vector} failed ({e})"),
            })
    }

    #[inline(always)]
    fn bar_ptr<T>(&self, offset: usize) -> NonNull<T> {
        let size = core::mem::size_of::<T>();
        assert!(
            access_in_bounds(offset, size, self.inner.bar.len),
            "BAR0 access of {size} bytes at {offset:#x} is misaligned or outside the \
             {:#x}-byte BAR",
            self.inner.bar.len
        );
        // SAFETY: `offset` is inside the mapping (checked above), so the result is inside
        // it too and not null.
        unsafe { self.inner.bar.ptr.add(offset).cast() }
    }
}

impl Drop for Function {
    fn drop(&mut self) {
        // Interrupts off first.
        let irqs = self.irqs.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Some(kind) = irqs.take() {
            let _ = self.device.disable_irq(kind.vfio_index());
        }
        // Stop the device from reaching memory before any of it is unmapped or freed.
        let _ = pci::update_command(&*self, 0, pci::COMMAND_BUS_MASTER);
        // SAFETY: each field is dropped exactly once, here, and not used afterwards; the
        // order is the one documented on the module: DMA (unmapped, then freed), BAR0, the
        // device fd (before the group and container, which the Arc releases last).
        unsafe {
            ManuallyDrop::drop(&mut self.pool);
            ManuallyDrop::drop(&mut self.bar);
            ManuallyDrop::drop(&mut self.device);
        }
        self.shared.set_open(self.address, false);
    }
}

/// The configuration space of the function itself, for its release (the platform's
/// [`PciConfig`] forwards here).
impl PciConfig for Function {
    fn config_read8(&self, offset: u16) -> Result<u8, ConfigError> {
        Ok(self.config_read::<1>(offset)?[0])
    }
    fn config_read16(&self, offset: u16) -> Result<u16, ConfigError> {
        Ok(u16::from_le_bytes(self.config_read::<2>(offset)?))
    }
    fn config_read32(&self, offset: u16) -> Result<u32, ConfigError> {
        Ok(u32::from_le_bytes(self.config_read::<4>(offset)?))
    }
    fn config_write16(&self, offset: u16, value: u16) -> Result<(), ConfigError> {
        self.config_write::<2>(offset, value.to_le_bytes())
    }
    fn config_write32(&self, offset: u16, value: u32) -> Result<(), ConfigError> {
        self.config_write::<4>(offset, value.to_le_bytes())
    }
}

impl Function {
    fn config_access<const N: usize>(&self, offset: u16) -> Result<u64, ConfigError> {
        if !access_in_bounds(usize::from(offset), N, self.config_len as usize) {
            return Err(ConfigError::OutOfRange);
        }
        Ok(self.config_offset + u64::from(offset))
    }

    fn config_read<const N: usize>(&self, offset: u16) -> Result<[u8; N], ConfigError> {
        let at = self.config_access::<N>(offset)?;
        let mut b = [0u8; N];
        sys::pread_exact(&*self.device, &mut b, at).map_err(ConfigError::Io)?;
        Ok(b)
    }

    fn config_write<const N: usize>(&self, offset: u16, b: [u8; N]) -> Result<(), ConfigError> {
        let at = self.config_access::<N>(offset)?;
        sys::pwrite_all(&*self.device, &b, at).map_err(ConfigError::Io)
    }
}

// SAFETY: every access is a single volatile load or store of the stated width through a
// `volatile::VolatilePtr` made from a raw pointer into the BAR0 mapping (read-only for loads,
// write-only for stores; its `read`/`write` are `read_volatile`/`write_volatile`, which for a
// naturally aligned u32/u64 compile to one access on the 64-bit targets this crate builds
// for); no reference into the BAR is created; `bar_ptr` panics on misaligned or
// out-of-range offsets before any access; concurrent accesses from several threads are
// serialised by the device, and the mapping lives as long as `self`.
unsafe impl Bar for VfioPlatform {
    fn bar_len(&self) -> usize {
        self.inner.bar.len
    }
    #[inline(always)]
    fn read32(&self, offset: usize) -> u32 {
        let p = self.bar_ptr::<u32>(offset);
        // SAFETY: `p` is non-null (inside the mapping), in bounds and aligned (checked by
        // bar_ptr), inside a live mapping; the pointer is used for this one load.
        unsafe { VolatilePtr::new_read_only(p) }.read()
    }
    #[inline(always)]
    fn write32(&self, offset: usize, value: u32) {
        let p = self.bar_ptr::<u32>(offset);
        // SAFETY: as for read32.
        unsafe { VolatilePtr::new_restricted(access::WriteOnly, p) }.write(value)
    }
    #[inline(always)]
    fn read64(&self, offset: usize) -> u64 {
        let p = self.bar_ptr::<u64>(offset);
        // SAFETY: as for read32.
        unsafe { VolatilePtr::new_read_only(p) }.read()
    }
    #[inline(always)]
    fn write64(&self, offset: usize, value: u64) {
        let p = self.bar_ptr::<u64>(offset);
        // SAFETY: as for read32.
        unsafe { VolatilePtr::new_restricted(access::WriteOnly, p) }.write(value)
    }
}

// SAFETY: allocations come from DmaPool: fresh or freed pages zeroed before they are handed
// out, inside mappings that live until the pool is dropped (after the platform disabled bus
// mastering), CPU address and IOVA aligned alike to `align` (blocks are 2 MiB-aligned on both
// sides and carved in 4 KiB pages; larger alignments get mappings of their own), each page
// in at most one live allocation, each mapped into the IOMMU at its IOVA for its full length
// before it is returned. Memory is ordinary write-back RAM, coherent with the device on the
// platforms VFIO supports (the IOMMU snoops). IOVAs come from one allocator, so no two
// mappings alias. The pool's state is behind a mutex.
unsafe impl Dma for VfioPlatform {
    fn alloc_coherent(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError> {
        self.inner.pool.alloc(len, align)
    }
    unsafe fn free_coherent(&self, region: DmaRegion) {
        self.inner.pool.free(region)
    }
    /// Maps the whole pages around `cpu..cpu+len` at a fresh IOVA (the device can reach the
    /// rest of the first and last page too) and returns the IOVA of `cpu`.
    unsafe fn map(&self, cpu: NonNull<u8>, len: usize) -> Result<u64, DmaError> {
        // SAFETY: the caller upholds Dma::map's contract, which is map_user's.
        unsafe { self.inner.pool.map_user(cpu, len) }
    }
    unsafe fn unmap(&self, iova: u64, len: usize) -> Result<(), DmaError> {
        self.inner.pool.unmap_user(iova, len)
    }
}

impl PciConfig for VfioPlatform {
    fn config_read8(&self, offset: u16) -> Result<u8, ConfigError> {
        self.inner.config_read8(offset)
    }
    fn config_read16(&self, offset: u16) -> Result<u16, ConfigError> {
        self.inner.config_read16(offset)
    }
    fn config_read32(&self, offset: u16) -> Result<u32, ConfigError> {
        self.inner.config_read32(offset)
    }
    fn config_write16(&self, offset: u16, value: u16) -> Result<(), ConfigError> {
        self.inner.config_write16(offset, value)
    }
    fn config_write32(&self, offset: u16, value: u32) -> Result<(), ConfigError> {
        self.inner.config_write32(offset, value)
    }
}

// SAFETY: host memory from the global allocator (the trait's default bodies);
// memory never mapped through the IOMMU.
unsafe impl uhca_hal::HostMem for VfioPlatform {}

impl Clock for VfioPlatform {
    fn now_ns(&self) -> u64 {
        sys::monotonic_ns()
    }
    fn delay_us(&self, us: u32) {
        std::thread::sleep(Duration::from_micros(u64::from(us)));
    }
}

/// The platform's clock alone (`CLOCK_MONOTONIC`, sleeping delays), for code that needs
/// time without a device.
#[derive(Clone, Copy, Debug, Default)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now_ns(&self) -> u64 {
        sys::monotonic_ns()
    }
    fn delay_us(&self, us: u32) {
        std::thread::sleep(Duration::from_micros(u64::from(us)));
    }
}

#[cfg(test)]
mod tests {
    use super::paths::fake::FakeSys;
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn platform_and_errors_are_send_and_sync() {
        assert_send_sync::<VfioPlatform>();
        assert_send_sync::<VfioError>();
        assert_send_sync::<InterruptFd>();
        // `?` into the usual boxed error works.
        let boxed: Box<dyn std::error::Error + Send + Sync> = VfioError::NoIommu {
            address: PciAddress::parse("0000:00:02.0").unwrap(),
        }
        .into();
        assert!(boxed.to_string().contains("no IOMMU group"));
    }

    #[test]
    fn platform_is_an_owned_handle() {
        // The driver's objects hold the platform by value: it must be a `Platform` (hence
        // `Clone`) with no lifetime, and a clone is one pointer.
        fn assert_owned_platform<P: uhca_hal::Platform + Send + Sync + 'static>() {}
        assert_owned_platform::<VfioPlatform>();
        assert_eq!(
            core::mem::size_of::<VfioPlatform>(),
            core::mem::size_of::<usize>()
        );
    }

    #[test]
    fn bounds_of_bar_and_config_accesses() {
        // BAR0 of 1 MiB.
        let len = 1 << 20;
        assert!(access_in_bounds(0, 4, len));
        assert!(access_in_bounds(len - 4, 4, len));
        assert!(access_in_bounds(len - 8, 8, len));
        assert!(!access_in_bounds(len - 4, 8, len), "straddles the end");
        assert!(!access_in_bounds(len, 4, len));
        assert!(!access_in_bounds(2, 4, len), "misaligned");
        assert!(!access_in_bounds(4, 8, len), "misaligned 64-bit");
        assert!(!access_in_bounds(usize::MAX - 3, 4, usize::MAX), "overflow");
        // Configuration space of 256 bytes.
        assert!(access_in_bounds(0xff, 1, 256));
        assert!(!access_in_bounds(0x100, 1, 256));
        assert!(!access_in_bounds(0xfe, 4, 256));
    }

    #[test]
    fn clock_and_delay() {
        let c = MonotonicClock;
        let t0 = c.now_ns();
        c.delay_us(1500);
        let t1 = c.now_ns();
        assert!(t1 - t0 >= 1_500_000, "{t0} {t1}");
    }

    /// Opening fails before any ioctl with the precise error (this machine has no VFIO; the
    /// fake tree stands in for sysfs).
    #[test]
    fn open_reports_setup_errors() {
        let f = FakeSys::new();
        let o = VfioOptions::default().with_paths(f.paths());
        let e = VfioPlatform::open_with("0000:3b:00.0", &o).unwrap_err();
        assert!(matches!(e, VfioError::NoSuchDevice { .. }), "{e}");
        let e = VfioPlatform::open_with("3b:00", &o).unwrap_err();
        assert!(
            e.to_string().contains("invalid PCI address \"3b:00\""),
            "{e}"
        );
        f.add_device("0000:00:03.0", 0x1234, 0x11e8);
        let e = VfioPlatform::open_with("0000:00:03.0", &o).unwrap_err();
        assert!(
            matches!(e, VfioError::NotAConnectX { vendor: 0x1234, .. }),
            "{e}"
        );
        let e = VfioPlatform::open_any("0000:00:03.0", &o).unwrap_err();
        assert!(matches!(e, VfioError::NoIommu { .. }), "{e}");
        f.set_group("0000:00:03.0", 5);
        let e = VfioPlatform::open_any("0000:00:03.0", &o).unwrap_err();
        assert!(
            matches!(e, VfioError::NotBoundToVfio { driver: None, .. }),
            "{e}"
        );
        f.bind("0000:00:03.0", "vfio-pci");
        let e = VfioPlatform::open_any("0000:00:03.0", &o).unwrap_err();
        assert!(matches!(e, VfioError::VfioUnavailable { .. }), "{e}");
    }

    fn ctx(f: &FakeSys) -> (VfioPaths, PciAddress) {
        (f.paths(), PciAddress::parse("0000:3b:00.0").unwrap())
    }

    #[test]
    fn vfio_ioctls_errors_become_actionable() {
        use vfio_ioctls::VfioError as E;
        use vmm_sys_util::errno::Error as Errno;
        let f = FakeSys::new();
        let (paths, address) = ctx(&f);
        let c = OpenContext {
            address,
            group: 42,
            paths: &paths,
        };
        let os = io::Error::from_raw_os_error;

        let m = map_open_error(E::OpenGroup(os(libc::EACCES), "42".into()), &c).to_string();
        assert!(m.contains("permission denied opening"), "{m}");
        assert!(m.contains("dev/vfio/42"), "{m}");
        assert!(m.contains("run as root"), "{m}");
        assert!(m.contains("ulimit -l"), "{m}");

        let m = map_open_error(E::OpenContainer(os(libc::EACCES)), &c).to_string();
        assert!(m.contains("dev/vfio/vfio"), "{m}");
        assert!(m.contains("permission denied"), "{m}");

        let e = map_open_error(E::OpenGroup(os(libc::EBUSY), "42".into()), &c);
        assert!(matches!(e, VfioError::GroupBusy { group: 42 }));
        let m = e.to_string();
        assert!(m.contains("already in use by another process"), "{m}");
        assert!(m.contains("fuser -v /dev/vfio/42"), "{m}");
        let m = VfioError::AlreadyOpen { address }.to_string();
        assert!(
            m.contains("0000:3b:00.0 is already open in this process"),
            "{m}"
        );

        let m = map_open_error(E::OpenContainer(os(libc::ENOENT)), &c).to_string();
        assert!(m.contains("does not exist: VFIO is not available"), "{m}");

        // Viability: the blockers are read from (fake) sysfs.
        f.add_device("0000:3b:00.0", 0x15b3, 0x101d);
        f.add_device("0000:3b:00.1", 0x15b3, 0x101d);
        f.set_group("0000:3b:00.0", 42);
        f.set_group("0000:3b:00.1", 42);
        f.bind("0000:3b:00.0", "vfio-pci");
        f.bind("0000:3b:00.1", "mlx5_core");
        let m = map_open_error(E::GroupViable, &c).to_string();
        assert!(
            m.contains("IOMMU group 42 of 0000:3b:00.0 is not viable"),
            "{m}"
        );
        assert!(m.contains("0000:3b:00.1 (bound to mlx5_core)"), "{m}");

        let m = map_open_error(E::VfioType1V2, &c).to_string();
        assert!(m.contains("type1v2"), "{m}");
        let m = map_open_error(E::GroupGetDeviceFD(Errno::new(libc::EBUSY)), &c).to_string();
        assert!(m.contains("already open"), "{m}");
        let e = map_open_error(E::ContainerSetIOMMU(Errno::new(libc::EPERM)), &c);
        assert_eq!(e.errno(), Some(libc::EPERM));
        assert!(e.to_string().contains("VFIO_SET_IOMMU"), "{e}");
        // Anything else keeps vfio-ioctls' error as the source.
        let e = map_open_error(E::GroupSetContainer, &c);
        assert!(std::error::Error::source(&e).is_some());
    }

    #[test]
    fn dma_errors_explain_memlock() {
        let e = VfioError::Dma {
            op: "alloc_coherent",
            error: DmaError::MappingFailed(libc::ENOMEM),
            memlock_limit: Some(8 << 20),
        };
        let m = e.to_string();
        assert!(m.contains("locked-memory limit (8192 KiB now)"), "{m}");
        assert!(m.contains("ulimit -l unlimited"), "{m}");
        assert_eq!(e.errno(), Some(libc::ENOMEM));
        let m = VfioError::Dma {
            op: "map",
            error: DmaError::MappingFailed(libc::ENOSPC),
            memlock_limit: None,
        }
        .to_string();
        assert!(m.contains("dma_entry_limit"), "{m}");
        let m = VfioError::Interrupts {
            kind: IrqKind::MsiX,
            reason: "asked for 4 vectors, the device offers 0".into(),
        }
        .to_string();
        assert!(
            m.contains("cannot set up MSI-X interrupts: asked for 4"),
            "{m}"
        );
        let m = VfioError::Unsupported { what: "x".into() }.to_string();
        assert_eq!(m, "VFIO cannot be used: x");
        let e = VfioError::from(ConfigError::Io(libc::EIO));
        assert_eq!(e.to_string(), "PCI config access failed (errno 5)");
        assert_eq!(e.errno(), Some(libc::EIO));
        let m = VfioError::Vfio(vfio_ioctls::VfioError::GroupSetContainer).to_string();
        assert_eq!(m, "VFIO: failed to add vfio group into vfio container");
        let m =
            VfioError::io("mmap of BAR0", io::Error::from_raw_os_error(libc::EINVAL)).to_string();
        assert!(
            m.starts_with("mmap of BAR0 failed: Invalid argument"),
            "{m}"
        );
    }
}
