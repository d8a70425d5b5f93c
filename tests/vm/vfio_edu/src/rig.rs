//! Drives QEMU's `edu` device (PCI ID 1234:11e8) through uhca's VFIO platform and checks
//! that every part of the platform works against real Linux VFIO: region info, the BAR0
//! mapping, configuration space, bus mastering, IOVA ranges, DMA memory and caller-buffer
//! mappings with the edu DMA engine copying through the IOMMU in both directions, the IOMMU
//! fault after an unmap, MSI through an eventfd, reset, release and reopen, and the errors a
//! user meets (a wrong address, a device not bound to vfio-pci, a group held elsewhere).
//!
//! The VM rig (`tests/vm/`) runs it in a QEMU guest with an emulated Intel IOMMU:
//!
//! ```text
//! cargo run --release -p uhca-vm-vfio-edu -- 0000:00:02.0 \
//!     [--not-bound BDF]...        a device bound to another driver or to none
//!     [--reset-device BDF]...     a PCIe device with MSI-X and a reset (QEMU's e1000e, NVMe)
//!     [--pair BDF,BDF]            two edu functions of one IOMMU group
//! ```
//!
//! Every BDF given must be bound to `vfio-pci` (except `--not-bound` ones), the IOMMU must
//! be on, and it runs as root (or with the group node and a large enough `ulimit -l`).
//! A few hugepages (`echo 8 > /proc/sys/vm/nr_hugepages`) make it use and check them.
//!
//! It prints one line per check (`PASS …` or `FAIL …`), ends with `N passed, M failed` and
//! exits with status 1 when a check failed, 2 on a usage error.

use std::fmt::{Debug, Display};
use std::io::{BufRead, BufReader, Read, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use uhca_hal::platform::{Bar, Clock, ConfigError, Dma, DmaError, DmaRegion, PciConfig};
use uhca_vfio::{
    HugePages, InterruptFd, IrqKind, MIN_IOVA, VfioError, VfioOptions, VfioPlatform, pci,
};

/// QEMU's edu device: registers of BAR0 and their bits (QEMU's `docs/specs/edu.rst`).
mod edu {
    pub const VENDOR: u16 = 0x1234;
    pub const DEVICE: u16 = 0x11e8;
    /// BAR0 is 1 MiB.
    pub const BAR0_LEN: usize = 1 << 20;
    /// Identification: 0xRRrr00ed, version 1.0.
    pub const ID: usize = 0x00;
    pub const ID_VALUE: u32 = 0x0100_00ed;
    /// Reads back the bitwise inverse of what was written.
    pub const LIVENESS: usize = 0x04;
    /// Write n, read n! once `STATUS_COMPUTING` clears.
    pub const FACTORIAL: usize = 0x08;
    pub const STATUS: usize = 0x20;
    pub const STATUS_COMPUTING: u32 = 0x01;
    pub const STATUS_IRQ_ON_FACTORIAL: u32 = 0x80;
    pub const IRQ_STATUS: usize = 0x24;
    pub const IRQ_RAISE: usize = 0x60;
    pub const IRQ_ACK: usize = 0x64;
    /// The interrupt-status bit a finished factorial sets.
    pub const IRQ_FACTORIAL: u32 = 0x0000_0001;
    /// The interrupt-status bit a finished DMA sets.
    pub const IRQ_DMA: u32 = 0x0000_0100;
    pub const DMA_SRC: usize = 0x80;
    pub const DMA_DST: usize = 0x88;
    pub const DMA_COUNT: usize = 0x90;
    pub const DMA_CMD: usize = 0x98;
    pub const DMA_START: u64 = 0x1;
    pub const DMA_TO_RAM: u64 = 0x2;
    pub const DMA_IRQ: u64 = 0x4;
    /// The device's own 4 KiB DMA buffer, in its DMA address space.
    pub const BUFFER: u64 = 0x40000;
    /// The DMA engine masks addresses to 28 bits: it reaches the first 256 MiB of IOVA.
    pub const DMA_BITS: u8 = 28;
    /// QEMU 7.2's edu aborts on a transfer of its whole buffer: stay below.
    pub const MAX_DMA: usize = 2048;
}

/// A PCIe device the rig resets, and what the checks expect of it.
struct ResetDevice {
    name: &'static str,
    /// Extended capabilities it has.
    ext_caps: &'static [u16],
    /// Whether it advertises function-level reset.
    flr: bool,
    /// Whether the reset VFIO does clears its MSI-X table (in BAR0).
    reset_clears_msix_table: bool,
}

/// The devices of the rig, by PCI ID.
fn known_reset_device(vendor: u16, device: u16) -> Option<ResetDevice> {
    match (vendor, device) {
        // QEMU's e1000e (82574L) has no FLR: the kernel resets it through power management
        // (D3hot and back), which QEMU 7.2 does not act on. Its MSI-X table is in BAR3.
        (0x8086, 0x10d3) => Some(ResetDevice {
            name: "e1000e",
            ext_caps: &[pci::ext_cap_id::AER, pci::ext_cap_id::SERIAL_NUMBER],
            flr: false,
            reset_clears_msix_table: false,
        }),
        // QEMU's NVMe controller has FLR; its MSI-X table is in BAR0 and the reset clears
        // it (QEMU leaves the NVMe registers themselves alone).
        (0x1b36, 0x0010) => Some(ResetDevice {
            name: "NVMe",
            ext_caps: &[],
            flr: true,
            reset_clears_msix_table: true,
        }),
        _ => None,
    }
}

/// Where the MSI-X table is in BAR0, if it is there.
fn msix_table_in_bar0(p: &VfioPlatform) -> Option<usize> {
    let cap = p.find_capability(pci::cap_id::MSI_X).ok()??;
    let table = p.config_read32(cap + 4).ok()?;
    (table & 0x7 == 0).then_some((table & !0x7) as usize)
}

const SECOND: Duration = Duration::from_secs(1);

/// The tally of checks.
#[derive(Default)]
struct Report {
    passed: u32,
    failed: u32,
}

impl Report {
    fn check(&mut self, ok: bool, what: impl Display) -> bool {
        if ok {
            self.passed += 1;
            println!("PASS {what}");
        } else {
            self.failed += 1;
            println!("FAIL {what}");
        }
        ok
    }

    fn check_eq<T: PartialEq + Debug>(&mut self, what: impl Display, got: T, want: T) -> bool {
        if got == want {
            self.check(true, what)
        } else {
            self.check(false, format_args!("{what}: got {got:x?}, want {want:x?}"))
        }
    }

    /// A check that `result` failed with the error `matches` accepts, whose message holds
    /// every string of `says`.
    fn check_err<T>(
        &mut self,
        what: impl Display,
        result: Result<T, VfioError>,
        matches: impl FnOnce(&VfioError) -> bool,
        says: &[&str],
    ) -> bool {
        match result {
            Ok(_) => self.check(
                false,
                format_args!("{what}: succeeded, an error was expected"),
            ),
            Err(e) => {
                let msg = e.to_string();
                println!("  error: {msg}");
                let missing: Vec<&str> =
                    says.iter().copied().filter(|s| !msg.contains(s)).collect();
                if !matches(&e) {
                    self.check(false, format_args!("{what}: unexpected error {e:?}"))
                } else if !missing.is_empty() {
                    self.check(false, format_args!("{what}: message lacks {missing:?}"))
                } else {
                    self.check(true, what)
                }
            }
        }
    }

    /// A step without which the rest of a section cannot run.
    fn require<T, E: Display>(&mut self, what: impl Display, result: Result<T, E>) -> Option<T> {
        match result {
            Ok(v) => {
                self.check(true, what);
                Some(v)
            }
            Err(e) => {
                self.check(false, format_args!("{what}: {e}"));
                None
            }
        }
    }
}

fn note(msg: impl Display) {
    println!("  {msg}");
}

// ---- what the kernel says about this process and the devices --------------------------

fn sysfs_dir(bdf: &str) -> PathBuf {
    PathBuf::from("/sys/bus/pci/devices").join(bdf)
}

/// The driver `bdf` is bound to, from sysfs.
fn sysfs_driver(bdf: &str) -> Option<String> {
    let link = std::fs::read_link(sysfs_dir(bdf).join("driver")).ok()?;
    Some(link.file_name()?.to_string_lossy().into_owned())
}

/// The IOMMU group of `bdf`, from sysfs.
fn sysfs_group(bdf: &str) -> Option<u32> {
    let link = std::fs::read_link(sysfs_dir(bdf).join("iommu_group")).ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

/// A hexadecimal sysfs attribute of `bdf` (`class`, `revision`).
fn sysfs_hex(bdf: &str, attr: &str) -> Option<u32> {
    let s = std::fs::read_to_string(sysfs_dir(bdf).join(attr)).ok()?;
    u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
}

/// The command register of `bdf` as the kernel reads it (sysfs, not VFIO).
fn sysfs_command(bdf: &str) -> Option<u16> {
    let cfg = std::fs::read(sysfs_dir(bdf).join("config")).ok()?;
    Some(u16::from_le_bytes([*cfg.get(4)?, *cfg.get(5)?]))
}

/// File descriptors open in this process.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Mappings of VFIO files in this process (the BAR).
fn vfio_mappings() -> usize {
    std::fs::read_to_string("/proc/self/maps")
        .map_or(0, |m| m.lines().filter(|l| l.contains("vfio")).count())
}

/// A field of `/proc/self/status` in KiB (`VmLck`: memory VFIO pinned for DMA).
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

fn free_hugepages() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// The kernel log, when this process may read it.
fn kernel_log() -> Option<String> {
    let out = Command::new("dmesg").output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `f`, which is expected to panic, without printing the panic.
fn panics(f: impl FnOnce()) -> bool {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let r = catch_unwind(AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    r.is_err()
}

// ---- memory the device writes ------------------------------------------------------

/// `n` bytes of a pattern that differs for each `seed`.
fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// Writes `data` at `cpu + at` with volatile stores (the device reads this memory).
///
/// # Safety
///
/// `cpu..cpu + at + data.len()` is live memory no Rust reference points into.
unsafe fn poke(cpu: NonNull<u8>, at: usize, data: &[u8]) {
    for (i, b) in data.iter().enumerate() {
        // SAFETY: in bounds of live memory, by the caller's contract.
        unsafe { cpu.as_ptr().add(at + i).write_volatile(*b) };
    }
}

/// Reads `n` bytes at `cpu + at` with volatile loads (the device writes this memory).
///
/// # Safety
///
/// As for [`poke`].
unsafe fn peek(cpu: NonNull<u8>, at: usize, n: usize) -> Vec<u8> {
    // SAFETY: in bounds of live memory, by the caller's contract.
    (0..n)
        .map(|i| unsafe { cpu.as_ptr().add(at + i).read_volatile() })
        .collect()
}

fn region_write(r: &DmaRegion, at: usize, data: &[u8]) {
    assert!(at + data.len() <= r.len, "write past a DMA region");
    // SAFETY: in bounds (checked) of a live region, accessed only through raw pointers.
    unsafe { poke(r.cpu, at, data) }
}

fn region_read(r: &DmaRegion, at: usize, n: usize) -> Vec<u8> {
    assert!(at + n <= r.len, "read past a DMA region");
    // SAFETY: in bounds (checked) of a live region, accessed only through raw pointers.
    unsafe { peek(r.cpu, at, n) }
}

// ---- the edu device ------------------------------------------------------------------

/// The edu device behind the platform's BAR and clock.
struct Edu<'a>(&'a VfioPlatform);

impl Edu<'_> {
    /// Polls `reg` until `mask` clears, for up to 5 s (the platform's clock and delay).
    fn wait_clear(&self, reg: usize, mask: u64, wide: bool) -> bool {
        let p = self.0;
        let deadline = p.now_ns() + 5_000_000_000;
        loop {
            let v = if wide {
                p.read64(reg)
            } else {
                u64::from(p.read32(reg))
            };
            if v & mask == 0 {
                return true;
            }
            if p.now_ns() > deadline {
                return false;
            }
            p.delay_us(2_000);
        }
    }

    fn factorial(&self, n: u32) -> Option<u32> {
        self.0.write32(edu::FACTORIAL, n);
        self.wait_clear(edu::STATUS, edu::STATUS_COMPUTING.into(), false)
            .then(|| self.0.read32(edu::FACTORIAL))
    }

    /// Runs one transfer of the DMA engine; true when it finished.
    fn dma(&self, src: u64, dst: u64, len: usize, cmd: u64) -> bool {
        assert!(len <= edu::MAX_DMA);
        let p = self.0;
        p.write64(edu::DMA_SRC, src);
        p.write64(edu::DMA_DST, dst);
        p.write64(edu::DMA_COUNT, len as u64);
        p.write64(edu::DMA_CMD, cmd | edu::DMA_START);
        self.wait_clear(edu::DMA_CMD, edu::DMA_START, true)
    }

    /// RAM at `iova` to the device's buffer.
    fn ram_to_device(&self, iova: u64, len: usize) -> bool {
        self.dma(iova, edu::BUFFER, len, 0)
    }

    /// The device's buffer to RAM at `iova`, optionally with an interrupt when done.
    fn device_to_ram(&self, iova: u64, len: usize, irq: bool) -> bool {
        let cmd = edu::DMA_TO_RAM | if irq { edu::DMA_IRQ } else { 0 };
        self.dma(edu::BUFFER, iova, len, cmd)
    }

    /// Acknowledges every pending interrupt-status bit.
    fn ack_all(&self) {
        let pending = self.0.read32(edu::IRQ_STATUS);
        if pending != 0 {
            self.0.write32(edu::IRQ_ACK, pending);
        }
    }
}

// ---- the checks ------------------------------------------------------------------------

fn options() -> VfioOptions {
    VfioOptions::default().with_dma_address_bits(edu::DMA_BITS)
}

/// Errors a user meets before a device is open.
fn open_errors(r: &mut Report, bdf: &str, not_bound: &[String]) {
    println!("--- errors when opening");
    let opts = options();
    r.check_err(
        "a malformed address is refused",
        VfioPlatform::open_any("0000:00:1f.9", &opts),
        |e| matches!(e, VfioError::InvalidAddress { .. }),
        &["0000:00:1f.9", "function number", "lspci -D"],
    );
    r.check_err(
        "a non-address is refused",
        VfioPlatform::open_any("edu", &opts),
        |e| matches!(e, VfioError::InvalidAddress { .. }),
        &["invalid PCI address"],
    );
    let absent = "0000:00:1e.7";
    if sysfs_dir(absent).exists() {
        note(format_args!(
            "{absent} exists here: the missing-device check is skipped"
        ));
    } else {
        r.check_err(
            "a device that does not exist is reported",
            VfioPlatform::open_any(absent, &opts),
            |e| matches!(e, VfioError::NoSuchDevice { .. }),
            &[
                "no PCI device 0000:00:1e.7",
                "/sys/bus/pci/devices/0000:00:1e.7",
            ],
        );
    }
    r.check_err(
        "open() refuses a device that is not a ConnectX",
        VfioPlatform::open(bdf),
        |e| {
            matches!(e, VfioError::NotAConnectX { vendor, device, .. }
                if *vendor == edu::VENDOR && *device == edu::DEVICE)
        },
        &["is not a ConnectX", "1234:11e8", "open_any"],
    );
    for other in not_bound {
        let driver = sysfs_driver(other);
        let says = match &driver {
            Some(d) => format!("is bound to {d}, not to vfio-pci"),
            None => "is not bound to any driver".to_string(),
        };
        r.check_err(
            format_args!(
                "{other} (driver: {}) is reported as not bound to vfio-pci",
                driver.as_deref().unwrap_or("none")
            ),
            VfioPlatform::open_any(other, &opts),
            |e| matches!(e, VfioError::NotBoundToVfio { driver: d, .. } if *d == driver),
            &[&says, "driver_override", "drivers_probe"],
        );
    }
    group_busy(r, bdf);
}

/// Another process holds the device's group: opening it here fails with GroupBusy, and
/// works once that process is gone.
fn group_busy(r: &mut Report, bdf: &str) {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            r.check(
                false,
                format_args!("find this program to run a holder: {e}"),
            );
            return;
        }
    };
    let child = Command::new(exe)
        .args(["--hold", bdf])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn();
    let Some(mut child) = r.require("start a second process that holds the device", child) else {
        return;
    };
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut line);
    }
    if r.check(
        line.starts_with("held"),
        format_args!("the second process opened {bdf}"),
    ) {
        let group = sysfs_group(bdf);
        r.check_err(
            "a group held by another process is reported",
            VfioPlatform::open_any(bdf, &options()),
            |e| matches!(e, VfioError::GroupBusy { group: g } if Some(*g) == group),
            &["already in use by another process", "fuser -v /dev/vfio/"],
        );
    } else {
        note(format_args!("holder said: {}", line.trim()));
    }
    drop(child.stdin.take()); // EOF: the holder closes the device and exits
    let status = child.wait();
    r.check(
        matches!(status, Ok(s) if s.success()),
        "the second process released the device and exited",
    );
}

/// `--hold BDF`: opens the device, says so, and keeps it until stdin closes.
fn hold(bdf: &str) -> ExitCode {
    match VfioPlatform::open_any(bdf, &options()) {
        Ok(p) => {
            println!("held group {}", p.iommu_group());
            let _ = std::io::stdout().flush();
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
            drop(p);
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("hold failed: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What the process holds before a platform is opened, to compare after it is dropped.
struct Baseline {
    fds: usize,
    vfio_maps: usize,
    locked_kib: Option<u64>,
}

impl Baseline {
    fn now() -> Self {
        Baseline {
            fds: open_fds(),
            vfio_maps: vfio_mappings(),
            locked_kib: status_kib("VmLck:"),
        }
    }

    /// Checks that everything a platform held was given back.
    fn check_released(&self, r: &mut Report, bdf: &str) {
        r.check_eq(
            "release: every file descriptor closed",
            open_fds(),
            self.fds,
        );
        r.check_eq("release: BAR0 unmapped", vfio_mappings(), self.vfio_maps);
        r.check_eq(
            "release: pinned DMA memory unpinned (VmLck)",
            status_kib("VmLck:"),
            self.locked_kib,
        );
        r.check_eq(
            "release: the device stays bound to vfio-pci",
            sysfs_driver(bdf).as_deref(),
            Some("vfio-pci"),
        );
        match sysfs_command(bdf) {
            Some(cmd) => r.check(
                cmd & pci::COMMAND_BUS_MASTER == 0,
                format_args!("release: bus mastering off (command {cmd:#06x} in sysfs)"),
            ),
            None => r.check(false, "release: read the command register from sysfs"),
        };
    }
}

/// Region info, configuration space, bus master and IOVA ranges of an open edu.
fn edu_config(r: &mut Report, p: &VfioPlatform, bdf: &str) {
    println!("--- region info, configuration space, IOVA ranges");
    note(format_args!("{p:?}"));
    r.check_eq("region info: BAR0 is 1 MiB", p.bar_len(), edu::BAR0_LEN);
    r.check_eq(
        "region info: configuration space is 256 bytes (conventional PCI)",
        p.config_space_len(),
        256,
    );
    r.check_eq(
        "IDs from the device",
        (p.vendor_id(), p.device_id()),
        (edu::VENDOR, edu::DEVICE),
    );
    r.check_eq(
        "IOMMU group as sysfs has it",
        Some(p.iommu_group()),
        sysfs_group(bdf),
    );

    let iommu = p.iommu_info();
    note(format_args!("IOMMU: {iommu:x?}"));
    r.check(
        iommu.ranges_reported && !iommu.iova_ranges.is_empty(),
        "IOVA ranges reported by VFIO_IOMMU_GET_INFO",
    );
    r.check(
        iommu.page_sizes & 0x1000 != 0,
        "IOMMU page sizes include 4 KiB",
    );
    let free = p.free_iova_ranges();
    note(format_args!("free IOVA ranges: {free:x?}"));
    r.check(
        !free.is_empty()
            && free
                .iter()
                .all(|x| x.start >= MIN_IOVA && x.last < 1 << edu::DMA_BITS),
        "free IOVA space lies between 64 KiB and the 28 bits edu reaches",
    );

    r.check_eq("config read16: vendor", p.config_read16(0), Ok(edu::VENDOR));
    r.check_eq("config read16: device", p.config_read16(2), Ok(edu::DEVICE));
    r.check_eq(
        "config read32: vendor and device",
        p.config_read32(0),
        Ok(u32::from(edu::DEVICE) << 16 | u32::from(edu::VENDOR)),
    );
    // Class code and revision as the kernel read them at enumeration (sysfs).
    let class = sysfs_hex(bdf, "class");
    r.check_eq(
        "config read32: class code as sysfs has it",
        p.config_read32(0x08).ok().map(|v| v >> 8),
        class,
    );
    r.check_eq(
        "config read8: revision as sysfs has it",
        p.config_read8(0x08).ok().map(u32::from),
        sysfs_hex(bdf, "revision"),
    );
    let cmd = p.config_read16(pci::COMMAND).unwrap_or(0);
    r.check_eq(
        "memory space and bus master on after open",
        cmd & (pci::COMMAND_MEMORY | pci::COMMAND_BUS_MASTER),
        pci::COMMAND_MEMORY | pci::COMMAND_BUS_MASTER,
    );
    r.check_eq(
        "bus master off (config write, read back)",
        p.disable_bus_master()
            .ok()
            .and_then(|()| p.config_read16(pci::COMMAND).ok())
            .map(|c| c & pci::COMMAND_BUS_MASTER),
        Some(0),
    );
    r.check_eq(
        "bus master on again",
        p.enable_bus_master()
            .ok()
            .and_then(|()| p.config_read16(pci::COMMAND).ok())
            .map(|c| c & pci::COMMAND_BUS_MASTER),
        Some(pci::COMMAND_BUS_MASTER),
    );
    // VFIO virtualises the BARs: writing all ones reads back the size mask.
    let bar0 = p.config_read32(0x10).unwrap_or(0);
    let sized = p
        .config_write32(0x10, u32::MAX)
        .and_then(|()| p.config_read32(0x10));
    let restored = p
        .config_write32(0x10, bar0)
        .and_then(|()| p.config_read32(0x10));
    r.check_eq(
        "BAR0 sizing: all ones written, 1 MiB mask read back",
        sized,
        Ok(!(edu::BAR0_LEN as u32 - 1)),
    );
    r.check_eq("BAR0 register restored", restored, Ok(bar0));
    // Interrupt line: read-write; interrupt pin beside it: read-only.
    let line = p.config_read8(0x3c).unwrap_or(0);
    let pin = p.config_read8(0x3d).unwrap_or(0);
    let written = p
        .config_write16(0x3c, u16::from(pin ^ 0x3) << 8 | 0x5a)
        .and_then(|()| p.config_read16(0x3c));
    r.check_eq(
        "config write16: interrupt line written, read-only pin kept",
        written,
        Ok(u16::from(pin) << 8 | 0x5a),
    );
    let _ = p.config_write16(0x3c, u16::from(pin) << 8 | u16::from(line));
    r.check_eq(
        "config read past the end is an error",
        p.config_read32(256),
        Err(ConfigError::OutOfRange),
    );
    r.check_eq(
        "misaligned config read is an error",
        p.config_read16(0x3),
        Err(ConfigError::OutOfRange),
    );
    let caps = p.capabilities().unwrap_or_default();
    note(format_args!("capabilities: {caps:x?}"));
    let msi = caps
        .iter()
        .find(|c| c.id == pci::cap_id::MSI)
        .map(|c| c.offset);
    r.check(msi.is_some(), "MSI capability in the list");
    r.check_eq(
        "find_capability(MSI)",
        p.find_capability(pci::cap_id::MSI).ok().flatten(),
        msi,
    );
    r.check_eq(
        "no extended capabilities in 256 bytes",
        p.extended_capabilities().map(|v| v.len()).ok(),
        Some(0),
    );
}

/// BAR0 registers.
fn edu_registers(r: &mut Report, p: &VfioPlatform) {
    println!("--- BAR0 registers");
    let edu = Edu(p);
    r.check_eq("ID register", p.read32(edu::ID), edu::ID_VALUE);
    for v in [0x1234_5678u32, 0xa5a5_0000] {
        p.write32(edu::LIVENESS, v);
        r.check_eq(
            format_args!("liveness inverts {v:#010x}"),
            p.read32(edu::LIVENESS),
            !v,
        );
    }
    r.check_eq("factorial of 10", edu.factorial(10), Some(3_628_800));
    r.check_eq("factorial of 12", edu.factorial(12), Some(479_001_600));
    let len = p.bar_len();
    r.check(
        panics(|| {
            p.read32(len);
        }),
        "BAR0 access past the end panics",
    );
    r.check(
        panics(|| {
            p.read32(2);
        }),
        "misaligned BAR0 access panics",
    );
}

/// MSI through an eventfd. Returns the vector's eventfd for the DMA checks.
fn edu_interrupts(r: &mut Report, p: &VfioPlatform) -> Option<InterruptFd> {
    println!("--- interrupts");
    let edu = Edu(p);
    note(format_args!(
        "vectors: INTx {} MSI {} MSI-X {}",
        p.interrupt_count(IrqKind::Intx),
        p.interrupt_count(IrqKind::Msi),
        p.interrupt_count(IrqKind::MsiX)
    ));
    r.check_eq("edu offers one MSI", p.interrupt_count(IrqKind::Msi), 1);
    r.check_err(
        "MSI-X on a device without it is refused",
        p.enable_interrupts(IrqKind::MsiX, 1),
        |e| matches!(e, VfioError::Interrupts { .. }),
        &["MSI-X", "the device offers 0"],
    );
    let irq = r
        .require("MSI enabled", p.enable_interrupts(IrqKind::Msi, 1))?
        .pop()?;
    r.check_eq("no interrupt before any", irq.take().ok(), Some(0));

    p.write32(edu::IRQ_RAISE, 0x42);
    let n = irq.wait(5 * SECOND).unwrap_or(0);
    r.check(
        n > 0 && p.read32(edu::IRQ_STATUS) == 0x42,
        format_args!("device-raised MSI reaches the eventfd ({n})"),
    );
    p.write32(edu::IRQ_ACK, 0x42);
    r.check_eq("interrupt acknowledged", p.read32(edu::IRQ_STATUS), 0);

    r.check(
        p.trigger_interrupt(IrqKind::Msi, 0).is_ok() && irq.wait(5 * SECOND).unwrap_or(0) > 0,
        "VFIO loopback trigger reaches the eventfd",
    );

    p.write32(edu::STATUS, edu::STATUS_IRQ_ON_FACTORIAL);
    p.write32(edu::FACTORIAL, 5);
    let n = irq.wait(5 * SECOND).unwrap_or(0);
    r.check(
        n > 0
            && p.read32(edu::FACTORIAL) == 120
            && p.read32(edu::IRQ_STATUS) & edu::IRQ_FACTORIAL != 0,
        "factorial-done MSI",
    );
    p.write32(edu::STATUS, 0);
    edu.ack_all();
    std::thread::sleep(Duration::from_millis(50));
    r.check_eq("no spurious interrupt", irq.take().ok(), Some(0));
    Some(irq)
}

/// DMA memory, the edu DMA engine both ways, a caller buffer, unmap and the fault after.
fn edu_dma(r: &mut Report, p: &VfioPlatform, bdf: &str, irq: Option<&InterruptFd>) {
    println!("--- DMA");
    let edu = Edu(p);
    let window = 1u64 << edu::DMA_BITS;
    let (Some(a), Some(b)) = (
        r.require("alloc_coherent 4 KiB", p.alloc_coherent(4096, 4096)),
        r.require("alloc_coherent 8 KiB", p.alloc_coherent(8192, 4096)),
    ) else {
        return;
    };
    note(format_args!(
        "a: iova {:#x} cpu {:p}; b: iova {:#x} cpu {:p}; {:?}",
        a.iova,
        a.cpu,
        b.iova,
        b.cpu,
        p.dma_stats()
    ));
    r.check(
        region_read(&a, 0, a.len).iter().all(|&x| x == 0)
            && region_read(&b, 0, b.len).iter().all(|&x| x == 0),
        "DMA memory comes zeroed",
    );
    r.check(
        [&a, &b].iter().all(|x| {
            x.iova.is_multiple_of(4096)
                && (x.cpu.as_ptr() as usize).is_multiple_of(4096)
                && x.iova >= MIN_IOVA
                && x.iova + x.len as u64 <= window
        }),
        "IOVAs aligned, above 64 KiB and below 256 MiB",
    );
    r.check(
        a.iova + a.len as u64 <= b.iova || b.iova + b.len as u64 <= a.iova,
        "IOVAs of two regions do not overlap",
    );
    let locked = status_kib("VmLck:").unwrap_or(0);
    note(format_args!("VmLck with DMA memory mapped: {locked} kB"));
    r.check(locked > 0, "VFIO pinned the DMA memory (VmLck > 0)");

    // RAM -> device -> RAM, with the completion interrupt on the second transfer.
    let p1 = pattern(3, 1024);
    region_write(&a, 0, &p1);
    r.check(edu.ram_to_device(a.iova, 1024), "DMA RAM -> edu finished");
    r.check(
        edu.device_to_ram(b.iova + 100, 1024, true),
        "DMA edu -> RAM finished",
    );
    if let Some(irq) = irq {
        let n = irq.wait(5 * SECOND).unwrap_or(0);
        r.check(
            n > 0 && p.read32(edu::IRQ_STATUS) & edu::IRQ_DMA != 0,
            "DMA-done MSI",
        );
        edu.ack_all();
    }
    r.check(
        region_read(&b, 100, 1024) == p1,
        "data copied through the IOMMU both ways",
    );
    r.check(
        region_read(&b, 0, 100).iter().all(|&x| x == 0)
            && region_read(&b, 1124, b.len - 1124).iter().all(|&x| x == 0),
        "nothing written outside the transfer",
    );
    // Again with other data, from an unaligned offset, into a range across a page boundary.
    let p2 = pattern(101, 1000);
    region_write(&a, 3000, &p2);
    r.check(
        edu.ram_to_device(a.iova + 3000, 1000) && edu.device_to_ram(b.iova + 4000, 1000, false),
        "DMA at unaligned IOVAs finished",
    );
    r.check(
        region_read(&b, 4000, 1000) == p2,
        "data across a page boundary of the IOVA space",
    );

    caller_buffer(r, p, bdf, &p2);

    // A region larger than a 2 MiB block gets a mapping of its own.
    let huge_before = free_hugepages();
    if let Some(big) = r.require("alloc_coherent 3 MiB", p.alloc_coherent(3 << 20, 4096)) {
        let at = (2 << 20) + 512;
        r.check(
            edu.device_to_ram(big.iova + at as u64, 1000, false)
                && region_read(&big, at, 1000) == p2,
            "DMA into the third MiB of a 3 MiB region",
        );
        let s = p.dma_stats();
        note(format_args!(
            "{s:?}; notice {:?}; free hugepages {huge_before} before",
            p.dma_notice()
        ));
        r.check_eq("the 3 MiB region has its own mapping", s.dedicated, 1);
        if huge_before > 0 {
            r.check(
                s.huge_mappings >= 1 && p.dma_notice().is_none(),
                "hugepages back the DMA memory",
            );
        } else {
            r.check(
                p.dma_notice().is_some(),
                "without hugepages, the fallback to 4 KiB pages is announced",
            );
        }
        // SAFETY: the device no longer uses it.
        unsafe { p.free_coherent(big) };
    }
    // SAFETY: the device no longer uses them.
    unsafe {
        p.free_coherent(a);
        p.free_coherent(b);
    }
    r.check_eq(
        "every page freed",
        (p.dma_stats().pages_in_use, p.dma_stats().dedicated),
        (0, 0),
    );
}

/// `Dma::map` of a caller buffer, `unmap`, and the IOMMU fault of a DMA after it.
/// The device's buffer holds `data` when called.
fn caller_buffer(r: &mut Report, p: &VfioPlatform, bdf: &str, data: &[u8]) {
    let edu = Edu(p);
    let n = data.len();
    // Heap memory reached only through raw pointers while the device may write it.
    let heap: *mut [u8] = Box::into_raw(vec![0u8; 8192].into_boxed_slice());
    let Some(base) = NonNull::new(heap.cast::<u8>()) else {
        return;
    };
    // SAFETY: 17 + 3000 < 8192: inside the allocation.
    let cpu = unsafe { base.add(17) };
    let len = 3000;
    // SAFETY: the buffer stays allocated until after the unmap below and is touched only
    // through raw pointers meanwhile.
    let mapped = unsafe { p.map(cpu, len) };
    if let Some(iova) = r.require("map a caller buffer", mapped.map_err(|e| format!("{e:?}"))) {
        note(format_args!("caller buffer {cpu:p} -> iova {iova:#x}"));
        r.check(
            iova % 4096 == cpu.as_ptr() as u64 % 4096 && iova + (len as u64) < 1 << edu::DMA_BITS,
            "its IOVA keeps the page offset and lies below 256 MiB",
        );
        r.check_eq("one caller mapping", p.dma_stats().user_mappings, 1);
        r.check(
            edu.device_to_ram(iova, n, false),
            "DMA into the caller buffer finished",
        );
        // SAFETY: inside the allocation; the device is done.
        let got = unsafe { peek(cpu, 0, n) };
        r.check(got == data, "the caller buffer holds the data");
        r.check_eq(
            "unmap with the wrong length is refused",
            // SAFETY: refused, so nothing changes; a success would be a failed check.
            unsafe { p.unmap(iova, len - 1) },
            Err(DmaError::NotMapped),
        );
        // SAFETY: the device is done with the buffer.
        r.check_eq("unmap", unsafe { p.unmap(iova, len) }, Ok(()));
        r.check_eq("no caller mapping left", p.dma_stats().user_mappings, 0);

        // SAFETY: inside the allocation; the device no longer reaches it.
        unsafe { poke(base, 0, &[0; 8192]) };
        r.check(
            edu.device_to_ram(iova, n, false),
            "DMA to the unmapped IOVA completes (the IOMMU drops it)",
        );
        // SAFETY: inside the allocation.
        let after = unsafe { peek(base, 0, 8192) };
        r.check(
            after.iter().all(|&x| x == 0),
            "DMA after unmap does not reach memory",
        );
        dmar_fault_logged(r, bdf, iova & !0xfff);
    }
    // SAFETY: from Box::into_raw above; no mapping of it is left.
    drop(unsafe { Box::from_raw(heap) });
}

/// The kernel's IOMMU driver logs the blocked write (Intel VT-d: "DMAR: [DMA Write ...]
/// Request device [bb:dd.f] fault addr 0x...").
fn dmar_fault_logged(r: &mut Report, bdf: &str, page: u64) {
    let short = bdf.split_once(':').map_or(bdf, |(_, rest)| rest);
    let want = format!("Request device [{short}] fault addr {page:#x}");
    let start = Instant::now();
    loop {
        let Some(log) = kernel_log() else {
            note("the kernel log is not readable here: DMAR fault check skipped");
            return;
        };
        if let Some(line) = log
            .lines()
            .find(|l| l.contains("DMAR") && l.contains("DMA Write") && l.contains(&want))
        {
            note(line.trim());
            r.check(true, "the kernel logged the IOMMU fault (DMAR)");
            return;
        }
        if start.elapsed() > 3 * SECOND {
            r.check(
                false,
                format_args!("the kernel logged the IOMMU fault: no line with {want:?}"),
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Reset: edu has no reset method, so the platform must say so.
fn edu_reset(r: &mut Report, p: &VfioPlatform) {
    println!("--- reset");
    if p.supports_reset() {
        p.write32(edu::LIVENESS, 1);
        r.check(p.reset().is_ok(), "reset");
        r.check_eq(
            "device answers after reset",
            p.read32(edu::ID),
            edu::ID_VALUE,
        );
    } else {
        r.check_err(
            "reset of a device without a reset method is refused",
            p.reset(),
            |e| matches!(e, VfioError::Unsupported { .. }),
            &["offers no reset method"],
        );
    }
}

/// The whole life of one edu: open, every check, release.
fn edu_session(r: &mut Report, bdf: &str) {
    let base = Baseline::now();
    let opened = Instant::now();
    let Some(p) = r.require(
        format_args!("open {bdf} (any vendor, DMA below 256 MiB)"),
        VfioPlatform::open_any(bdf, &options()),
    ) else {
        return;
    };
    r.check_err(
        "a second open in this process is refused",
        VfioPlatform::open_any(bdf, &options()),
        |e| matches!(e, VfioError::AlreadyOpen { .. }),
        &["already open in this process"],
    );
    edu_config(r, &p, bdf);
    edu_registers(r, &p);
    let irq = edu_interrupts(r, &p);
    edu_dma(r, &p, bdf, irq.as_ref());
    edu_reset(r, &p);
    println!("--- release and reopen");
    drop(irq);
    drop(p);
    note(format_args!("open to release: {:?}", opened.elapsed()));
    base.check_released(r, bdf);

    // Reopen: everything was given back; 4 KiB pages this time.
    let opts = options().with_hugepages(HugePages::Never);
    let Some(p) = r.require("reopen after release", VfioPlatform::open_any(bdf, &opts)) else {
        return;
    };
    let edu = Edu(&p);
    r.check_eq("ID register after reopen", p.read32(edu::ID), edu::ID_VALUE);
    if let (Ok(c), Ok(d)) = (p.alloc_coherent(64, 64), p.alloc_coherent(64, 64)) {
        let data = pattern(77, 64);
        region_write(&c, 0, &data);
        r.check(
            edu.ram_to_device(c.iova, 64)
                && edu.device_to_ram(d.iova, 64, false)
                && region_read(&d, 0, 64) == data,
            "DMA round trip after reopen",
        );
        r.check_eq(
            "HugePages::Never: no hugepage mapping",
            p.dma_stats().huge_mappings,
            0,
        );
        // SAFETY: the device no longer uses them.
        unsafe {
            p.free_coherent(c);
            p.free_coherent(d);
        }
    } else {
        r.check(false, "alloc_coherent after reopen");
    }
    drop(p);
    base.check_released(r, bdf);
}

/// A PCIe device with MSI-X and a reset method (QEMU's e1000e or NVMe): capability walks,
/// MSI-X vectors, reset.
fn reset_device(r: &mut Report, bdf: &str) {
    println!("--- MSI-X and reset on {bdf}");
    let base = Baseline::now();
    let Some(p) = r.require(
        format_args!("open {bdf}"),
        VfioPlatform::open_any(bdf, &VfioOptions::default()),
    ) else {
        return;
    };
    note(format_args!("{p:?}"));
    let known = known_reset_device(p.vendor_id(), p.device_id());
    let name = known.as_ref().map_or("device", |k| k.name);
    r.check_eq(
        format_args!("region info: {name} has a 4 KiB (PCIe) configuration space"),
        p.config_space_len(),
        4096,
    );
    let caps = p.capabilities().unwrap_or_default();
    note(format_args!("capabilities {caps:x?}"));
    r.check(
        [pci::cap_id::PCI_EXPRESS, pci::cap_id::MSI_X]
            .iter()
            .all(|id| caps.iter().any(|c| c.id == *id)),
        "PCI Express and MSI-X capabilities",
    );
    let ext = p.extended_capabilities();
    note(format_args!("extended capabilities {ext:x?}"));
    let ext = ext.unwrap_or_default();
    let flr = pci::supports_flr(&p).ok();
    note(format_args!(
        "FLR: {flr:?}; VFIO reset: {}",
        p.supports_reset()
    ));
    if let Some(k) = &known {
        r.check(
            k.ext_caps.iter().all(|id| ext.iter().any(|c| c.id == *id)),
            format_args!("extended capabilities of the {name}: {:x?}", k.ext_caps),
        );
        r.check_eq(
            format_args!("FLR advertised by the {name}"),
            flr,
            Some(k.flr),
        );
    }

    let n = p.interrupt_count(IrqKind::MsiX);
    note(format_args!("MSI-X vectors: {n}"));
    if let Some(fds) = r.require(
        "three MSI-X vectors enabled",
        p.enable_interrupts(IrqKind::MsiX, n.min(3)),
    ) {
        for v in 0..fds.len() {
            let fired = p.trigger_interrupt(IrqKind::MsiX, v as u32).is_ok()
                && fds[v].wait(5 * SECOND).unwrap_or(0) == 1;
            let others_quiet = fds
                .iter()
                .enumerate()
                .all(|(i, f)| i == v || f.take().ok() == Some(0));
            r.check(
                fired && others_quiet && fds[v].vector() == v as u32,
                format_args!("MSI-X vector {v}: its eventfd alone fires"),
            );
        }
    }
    r.check_err(
        "more vectors than the device has are refused",
        p.enable_interrupts(IrqKind::MsiX, n + 1),
        |e| matches!(e, VfioError::Interrupts { .. }),
        &["the device offers"],
    );
    r.check(p.disable_interrupts().is_ok(), "interrupts disabled");

    r.check(p.supports_reset(), "the device offers a reset");
    // A mark in the message data of the last (unused) MSI-X table entry, to see the reset.
    let mark = msix_table_in_bar0(&p)
        .filter(|_| n > 3)
        .map(|table| table + (n as usize - 1) * 16 + 8);
    if let Some(at) = mark {
        p.write32(at, 0x5a5a_1234);
        r.check_eq(
            format_args!("MSI-X table entry {} written through BAR0", n - 1),
            p.read32(at),
            0x5a5a_1234,
        );
    }
    let reset = p.reset();
    note(format_args!("reset: {reset:?}"));
    r.check(reset.is_ok(), "VFIO_DEVICE_RESET");
    match (mark, &known) {
        (Some(at), Some(k)) if k.reset_clears_msix_table => {
            r.check_eq("the reset cleared the MSI-X table", p.read32(at), 0);
        }
        (Some(at), _) => note(format_args!(
            "MSI-X table mark after the reset: {:#x}",
            p.read32(at)
        )),
        (None, _) => note("MSI-X table not in BAR0: the reset's effect is not checked"),
    }
    r.check(
        p.read32(0) != u32::MAX,
        "the device answers after the reset",
    );
    r.check_eq(
        "memory space and bus master on after the reset",
        p.config_read16(pci::COMMAND)
            .map(|c| c & (pci::COMMAND_MEMORY | pci::COMMAND_BUS_MASTER)),
        Ok(pci::COMMAND_MEMORY | pci::COMMAND_BUS_MASTER),
    );
    drop(p);
    base.check_released(r, bdf);
}

/// A DMA round trip through fresh regions of `p`.
fn round_trip(p: &VfioPlatform, seed: u8) -> bool {
    let edu = Edu(p);
    let (Ok(a), Ok(b)) = (p.alloc_coherent(256, 64), p.alloc_coherent(256, 64)) else {
        return false;
    };
    let data = pattern(seed, 256);
    region_write(&a, 0, &data);
    let ok = edu.ram_to_device(a.iova, 256)
        && edu.device_to_ram(b.iova, 256, false)
        && region_read(&b, 0, 256) == data;
    // SAFETY: the device no longer uses them.
    unsafe {
        p.free_coherent(a);
        p.free_coherent(b);
    }
    ok
}

/// Two edu functions behind one PCIe-to-PCI bridge: one IOMMU group, one container, one
/// IOVA space.
fn group_pair(r: &mut Report, x: &str, y: &str) {
    println!("--- two functions of one IOMMU group: {x} {y}");
    let base = Baseline::now();
    let opts = options();
    let Some(p1) = r.require(format_args!("open {x}"), VfioPlatform::open_any(x, &opts)) else {
        return;
    };
    let Some(p2) = r.require(
        format_args!("open {y}, of the same group, beside it"),
        VfioPlatform::open_any(y, &opts),
    ) else {
        return;
    };
    r.check(
        p1.iommu_group() == p2.iommu_group() && Some(p1.iommu_group()) == sysfs_group(y),
        format_args!("both in IOMMU group {}", p1.iommu_group()),
    );
    r.check_err(
        "the same function twice is refused",
        VfioPlatform::open_any(y, &opts),
        |e| matches!(e, VfioError::AlreadyOpen { .. }),
        &["already open in this process"],
    );
    r.check(
        round_trip(&p1, 1) && round_trip(&p2, 2),
        "DMA on both functions",
    );
    if let (Ok(a1), Ok(a2)) = (p1.alloc_coherent(4096, 4096), p2.alloc_coherent(4096, 4096)) {
        note(format_args!("IOVAs {:#x} {:#x}", a1.iova, a2.iova));
        r.check(
            a1.iova + 4096 <= a2.iova || a2.iova + 4096 <= a1.iova,
            "one IOVA space: the two functions' regions do not overlap",
        );
        // SAFETY: the devices do not use them.
        unsafe {
            p1.free_coherent(a1);
            p2.free_coherent(a2);
        }
    }
    drop(p1);
    r.check(
        round_trip(&p2, 3),
        "the second function still does DMA after the first is closed",
    );
    match VfioPlatform::open_any(x, &opts) {
        Ok(p1) => {
            r.check(
                round_trip(&p1, 4) && round_trip(&p2, 5),
                "reopened beside the open one, both do DMA",
            );
            drop(p1);
        }
        Err(e) => {
            r.check(false, format_args!("reopen {x} beside {y}: {e}"));
        }
    }
    drop(p2);
    base.check_released(r, x);
    base.check_released(r, y);
}

const USAGE: &str = "usage: vfio_edu EDU_BDF [--not-bound BDF]... [--reset-device BDF]... \
                     [--pair BDF,BDF]";

pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, bdf] = args.as_slice()
        && flag == "--hold"
    {
        return hold(bdf);
    }
    let mut edu_bdf = None;
    let mut not_bound = Vec::new();
    let mut reset_bdfs = Vec::new();
    let mut pair = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match (a.as_str(), it.clone().next()) {
            ("--not-bound", Some(v)) => not_bound.push(v.clone()),
            ("--reset-device", Some(v)) => reset_bdfs.push(v.clone()),
            ("--pair", Some(v)) => match v.split_once(',') {
                Some((x, y)) => pair = Some((x.to_string(), y.to_string())),
                None => {
                    eprintln!("--pair takes two addresses: BDF,BDF\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            (s, _) if !s.starts_with('-') && edu_bdf.is_none() => {
                edu_bdf = Some(s.to_string());
                continue;
            }
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
        it.next();
    }
    let Some(bdf) = edu_bdf else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };

    let started = Instant::now();
    let mut r = Report::default();
    open_errors(&mut r, &bdf, &not_bound);
    edu_session(&mut r, &bdf);
    for dev in &reset_bdfs {
        reset_device(&mut r, dev);
    }
    if let Some((x, y)) = &pair {
        group_pair(&mut r, x, y);
    }
    note(format_args!("checks took {:?}", started.elapsed()));
    println!("{} passed, {} failed", r.passed, r.failed);
    if r.failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
