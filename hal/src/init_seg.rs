//! The initialization segment at offset 0 of BAR0: typed access, the wait for firmware
//! readiness, programming the command-queue address, and health checks.
//!
//! Every field is read through the [`uhca_fwif::init_seg::initial_seg`] and
//! [`uhca_fwif::init_seg::health_buffer`] descriptors with one 32-bit big-endian access,
//! so no offset is restated here.
//!
//! ```
//! # use uhca_hal::testing::FakePlatform;
//! use uhca_hal::init_seg::InitSeg;
//! let p = FakePlatform::new();
//! p.bar.set_field(uhca_fwif::init_seg::initial_seg::cmd_interface_rev, 5);
//! let iseg = InitSeg::new(&p);
//! assert_eq!(iseg.cmd_interface_rev(), 5);
//! iseg.wait_ready(&p, 1_000_000_000, 2_000).unwrap();
//! ```

use crate::platform::{Bar, Clock};
use uhca_fwif::Field;
use uhca_fwif::init_seg::{health_buffer, initial_seg};

/// Default time to wait for `initializing` to clear before the command queue is set up
/// (Linux `FW_PRE_INIT_TIMEOUT`, rdma-core's VFIO provider: 120 s).
pub const FW_PRE_INIT_TIMEOUT_NS: u64 = 120_000_000_000;
/// Default time to wait for `initializing` to clear after the command-queue address is
/// written (Linux `FW_INIT_TIMEOUT`: 2 s).
pub const FW_INIT_TIMEOUT_NS: u64 = 2_000_000_000;
/// Poll interval of the readiness wait (Linux and rdma-core: 2 ms).
pub const FW_INIT_POLL_US: u32 = 2_000;
/// Consecutive polls with an unchanged health counter that make the device's health
/// compromised (Linux `MAX_MISSES`).
pub const HEALTH_MAX_MISSES: u32 = 3;

/// The `nic_interface` field read the way Linux reads it: 3 bits (`cmdq_addr_l_sz[10:8]`).
/// The PRM layout declares 2 bits (`[9:8]`), but Linux's `mlx5_get_nic_state` masks 3 so
/// that SW_RESET (7) and a device gone from the bus (all ones) are visible; this
/// descriptor widens the fwif one by its reserved high bit.
pub const NIC_INTERFACE_LINUX: Field = Field {
    name: "nic_interface",
    bit_offset: initial_seg::nic_interface.bit_offset - 1,
    bit_width: initial_seg::nic_interface.bit_width + 1,
};

/// Errors of initialization-segment operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum InitSegError {
    /// `initializing` did not clear within the timeout.
    FirmwareNotReady {
        /// Nanoseconds waited.
        waited_ns: u64,
    },
    /// The command interface revision is not the one this HAL speaks
    /// ([`uhca_fwif::consts::CMD_IF_REV`]).
    UnsupportedCmdifRev(u16),
    /// The device reports a command queue this HAL cannot use (more than 32 slots, or
    /// slots and stride that do not fit one 4 KiB page, or a stride smaller than an entry).
    BadCmdqGeometry {
        /// `log_cmdq_size`.
        log_size: u8,
        /// `log_cmdq_stride`.
        log_stride: u8,
    },
    /// The command-queue address is not 4 KiB aligned.
    UnalignedCmdqAddress(u64),
}

impl core::fmt::Display for InitSegError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            InitSegError::FirmwareNotReady { waited_ns } => write!(
                f,
                "firmware still initializing after {} ms",
                waited_ns / 1_000_000
            ),
            InitSegError::UnsupportedCmdifRev(r) => write!(
                f,
                "command interface revision {r} not supported (expected {})",
                uhca_fwif::consts::CMD_IF_REV
            ),
            InitSegError::BadCmdqGeometry {
                log_size,
                log_stride,
            } => write!(
                f,
                "unusable command queue: log_cmdq_size {log_size}, log_cmdq_stride {log_stride}"
            ),
            InitSegError::UnalignedCmdqAddress(a) => {
                write!(f, "command queue address {a:#x} is not 4 KiB aligned")
            }
        }
    }
}

impl core::error::Error for InitSegError {}

/// The NIC interface mode (`nic_interface`, read as 3 bits like Linux).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NicInterface {
    /// `MLX5_NIC_IFC_FULL` (0): normal operation.
    Full,
    /// `MLX5_NIC_IFC_DISABLED` (1): the driver disabled the interface (fast teardown).
    Disabled,
    /// `MLX5_NIC_IFC_NO_DRAM_NIC` (2).
    NoDramNic,
    /// `MLX5_NIC_IFC_SW_RESET` (7): software reset, or the device is gone (reads all ones).
    SwReset,
    /// Any other value.
    Unknown(u8),
}

impl NicInterface {
    /// Decodes the 3-bit field.
    pub const fn from_raw(v: u8) -> Self {
        match v {
            0 => NicInterface::Full,
            1 => NicInterface::Disabled,
            2 => NicInterface::NoDramNic,
            7 => NicInterface::SwReset,
            v => NicInterface::Unknown(v),
        }
    }

    /// The raw value.
    pub const fn raw(self) -> u8 {
        match self {
            NicInterface::Full => 0,
            NicInterface::Disabled => 1,
            NicInterface::NoDramNic => 2,
            NicInterface::SwReset => 7,
            NicInterface::Unknown(v) => v,
        }
    }
}

/// A health syndrome (`health_buffer.synd`), with the names Linux's `health.c` and
/// rdma-core's VFIO provider print.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthSyndrome(pub u8);

impl HealthSyndrome {
    /// The syndrome's name, if it is a known one.
    pub const fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0x1 => "FW internal error",
            0x7 => "dead IRISC",
            0x8 => "HW unrecoverable error",
            0x9 => "FW CRC error",
            0xa => "ICM fetch PCI error",
            0xb => "HW fatal error",
            0xc => "async EQ buffer overrun",
            0xd => "EQ error",
            0xe => "invalid EQ referenced",
            0xf => "FFSER error",
            0x10 => "high temperature",
            0x12 => "ICM PCI poisoned error",
            0x13 => "trust lockdown error",
            _ => return None,
        })
    }
}

impl core::fmt::Display for HealthSyndrome {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{n} ({:#x})", self.0),
            None => write!(f, "unknown health syndrome ({:#x})", self.0),
        }
    }
}

/// A snapshot of the health buffer and the health counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthBuffer {
    /// `assert_existptr`.
    pub assert_existptr: u32,
    /// `assert_callra`.
    pub assert_callra: u32,
    /// `time`: seconds since the firmware booted.
    pub time: u32,
    /// `fw_version`; all ones when the device no longer answers on PCI.
    pub fw_version: u32,
    /// `hw_id`.
    pub hw_id: u32,
    /// `rfr`: recovery flow required.
    pub rfr: bool,
    /// `valid`.
    pub valid: bool,
    /// `severity`.
    pub severity: u8,
    /// `irisc_index`.
    pub irisc_index: u8,
    /// `synd`.
    pub synd: HealthSyndrome,
    /// `ext_synd`.
    pub ext_synd: u16,
    /// `health_counter` (the firmware increments it while alive).
    pub health_counter: u32,
}

/// Why the device is considered dead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FatalHealth {
    /// `fw_version` reads all ones: the device does not answer on PCI.
    PciNotResponding,
    /// `nic_interface` is DISABLED or SW_RESET.
    NicInterface(NicInterface),
    /// Recovery flow required, with this syndrome.
    RecoveryRequired {
        /// `synd`.
        synd: HealthSyndrome,
        /// `ext_synd`.
        ext_synd: u16,
    },
    /// The health counter did not move for [`HEALTH_MAX_MISSES`] consecutive polls.
    HealthCounterStuck {
        /// Its value.
        counter: u32,
    },
}

impl core::fmt::Display for FatalHealth {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FatalHealth::PciNotResponding => {
                f.write_str("device not responding on PCI (fw_version all ones)")
            }
            FatalHealth::NicInterface(s) => write!(f, "NIC interface is {s:?}"),
            FatalHealth::RecoveryRequired { synd, ext_synd } => {
                write!(f, "recovery flow required: {synd}, ext_synd {ext_synd:#x}")
            }
            FatalHealth::HealthCounterStuck { counter } => write!(
                f,
                "device's health compromised: health counter stuck at {counter:#x} for {HEALTH_MAX_MISSES} polls"
            ),
        }
    }
}

impl core::error::Error for FatalHealth {}

/// What a health poll found when the device is not dead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum HealthStatus {
    /// Nothing to report.
    Ok,
    /// A new non-zero syndrome appeared (Linux reports it; the device may still work).
    Syndrome(HealthSyndrome),
}

/// Typed access to the initialization segment of one device.
#[derive(Clone, Copy, Debug)]
pub struct InitSeg<'a, B: Bar + ?Sized> {
    bar: &'a B,
}

impl<'a, B: Bar + ?Sized> InitSeg<'a, B> {
    /// A view of the initialization segment at offset 0 of `bar`.
    pub fn new(bar: &'a B) -> Self {
        InitSeg { bar }
    }

    /// Reads a field of `initial_seg` (one 32-bit big-endian read).
    ///
    /// # Panics
    ///
    /// If the field does not lie within one dword (a programming error).
    #[inline]
    pub fn read(&self, field: Field) -> u32 {
        assert!(field.within_dword(), "{} spans dwords", field.name);
        field.from_dword(self.bar.read_be32(field.dword_byte_offset()))
    }

    /// Reads a field of the health buffer nested in `initial_seg`.
    #[inline]
    pub fn read_health(&self, field: Field) -> u32 {
        self.read(Field {
            name: field.name,
            bit_offset: initial_seg::health_buffer.bit_offset + field.bit_offset,
            bit_width: field.bit_width,
        })
    }

    /// Firmware revision (major, minor, subminor).
    pub fn fw_rev(&self) -> (u16, u16, u16) {
        (
            self.read(initial_seg::fw_rev_major) as u16,
            self.read(initial_seg::fw_rev_minor) as u16,
            self.read(initial_seg::fw_rev_subminor) as u16,
        )
    }

    /// `cmd_interface_rev`.
    pub fn cmd_interface_rev(&self) -> u16 {
        self.read(initial_seg::cmd_interface_rev) as u16
    }

    /// `initializing`: the firmware is not ready yet.
    pub fn initializing(&self) -> bool {
        self.read(initial_seg::initializing) != 0
    }

    /// `log_cmdq_size` and `log_cmdq_stride` (read-only fields).
    pub fn cmdq_geometry(&self) -> (u8, u8) {
        (
            self.read(initial_seg::log_cmdq_size) as u8,
            self.read(initial_seg::log_cmdq_stride) as u8,
        )
    }

    /// `nic_interface`, read as 3 bits like Linux ([`NIC_INTERFACE_LINUX`]).
    pub fn nic_interface(&self) -> NicInterface {
        NicInterface::from_raw(self.read(NIC_INTERFACE_LINUX) as u8)
    }

    /// `health_counter`.
    pub fn health_counter(&self) -> u32 {
        self.read(initial_seg::health_counter)
    }

    /// Reads the health buffer and the health counter.
    pub fn health(&self) -> HealthBuffer {
        HealthBuffer {
            assert_existptr: self.read_health(health_buffer::assert_existptr),
            assert_callra: self.read_health(health_buffer::assert_callra),
            time: self.read_health(health_buffer::time),
            fw_version: self.read_health(health_buffer::fw_version),
            hw_id: self.read_health(health_buffer::hw_id),
            rfr: self.read_health(health_buffer::rfr) != 0,
            valid: self.read_health(health_buffer::valid) != 0,
            severity: self.read_health(health_buffer::severity) as u8,
            irisc_index: self.read_health(health_buffer::irisc_index) as u8,
            synd: HealthSyndrome(self.read_health(health_buffer::synd) as u8),
            ext_synd: self.read_health(health_buffer::ext_synd) as u16,
            health_counter: self.health_counter(),
        }
    }

    /// Waits until `initializing` clears, polling every `poll_us` microseconds, for at most
    /// `timeout_ns` nanoseconds of `clock`. Use [`FW_PRE_INIT_TIMEOUT_NS`] before the
    /// command queue is set up and [`FW_INIT_TIMEOUT_NS`] after.
    ///
    /// # Errors
    ///
    /// [`InitSegError::FirmwareNotReady`] on timeout.
    pub fn wait_ready<C: Clock + ?Sized>(
        &self,
        clock: &C,
        timeout_ns: u64,
        poll_us: u32,
    ) -> Result<(), InitSegError> {
        let start = clock.now_ns();
        loop {
            if !self.initializing() {
                return Ok(());
            }
            let waited_ns = clock.now_ns().saturating_sub(start);
            if waited_ns >= timeout_ns {
                return Err(InitSegError::FirmwareNotReady { waited_ns });
            }
            clock.delay_us(poll_us.max(1));
        }
    }

    /// Checks `cmd_interface_rev` and the command-queue geometry; returns
    /// (`log_cmdq_size`, `log_cmdq_stride`).
    ///
    /// # Errors
    ///
    /// [`InitSegError::UnsupportedCmdifRev`] unless the revision is 5;
    /// [`InitSegError::BadCmdqGeometry`] for more than 32 slots, a queue larger than 4 KiB
    /// or a stride smaller than a 64-byte entry.
    pub fn check_cmd_interface(&self) -> Result<(u8, u8), InitSegError> {
        let rev = self.cmd_interface_rev();
        if rev != uhca_fwif::consts::CMD_IF_REV {
            return Err(InitSegError::UnsupportedCmdifRev(rev));
        }
        let (log_size, log_stride) = self.cmdq_geometry();
        if (1usize << log_size) > uhca_fwif::consts::MAX_COMMANDS
            || log_size as u32 + log_stride as u32 > uhca_fwif::consts::ADAPTER_PAGE_SHIFT
            || log_stride < uhca_fwif::cmdq::CMD_ENTRY_LOG_STRIDE
        {
            return Err(InitSegError::BadCmdqGeometry {
                log_size,
                log_stride,
            });
        }
        Ok((log_size, log_stride))
    }

    /// Programs the command-queue address: the high word first, then the low word, which
    /// carries the address bits 31:12 only (writing it also sets `nic_interface` to FULL;
    /// `log_cmdq_size` and `log_cmdq_stride` are read-only).
    ///
    /// # Errors
    ///
    /// [`InitSegError::UnalignedCmdqAddress`] unless `iova` is 4 KiB aligned.
    pub fn set_cmdq_address(&self, iova: u64) -> Result<(), InitSegError> {
        if !iova.is_multiple_of(uhca_fwif::consts::ADAPTER_PAGE_SIZE as u64) {
            return Err(InitSegError::UnalignedCmdqAddress(iova));
        }
        let hi = initial_seg::cmdq_phy_addr_63_32;
        let lo = initial_seg::cmdq_phy_addr_31_12;
        self.bar.write_be32(
            hi.dword_byte_offset(),
            hi.into_dword(0, (iova >> 32) as u32),
        );
        self.bar.write_be32(
            lo.dword_byte_offset(),
            lo.into_dword(0, (iova as u32) >> lo.dword_shift()),
        );
        Ok(())
    }

    /// Writes `nic_interface` (for example DISABLED for fast teardown), keeping the
    /// command-queue address bits of the same word.
    pub fn set_nic_interface(&self, state: NicInterface) {
        let lo = initial_seg::cmdq_phy_addr_31_12;
        let off = lo.dword_byte_offset();
        let addr_bits = lo.into_dword(0, lo.from_dword(self.bar.read_be32(off)));
        self.bar.write_be32(
            off,
            NIC_INTERFACE_LINUX.into_dword(addr_bits, state.raw() as u32),
        );
    }

    /// Rings the command doorbell for the slots set in `vector`.
    pub fn ring_cmd_doorbell(&self, vector: u32) {
        let f = initial_seg::command_doorbell_vector;
        self.bar
            .write_be32(f.dword_byte_offset(), f.into_dword(0, vector));
    }
}

/// Health polling with the fatal conditions Linux (`health.c`) and rdma-core's VFIO
/// provider (`mlx5_health_check_fatal_sensors`) use. Call [`HealthMonitor::poll`] at a
/// steady interval (Linux: every 2 s; rdma-core: every 1 s).
#[derive(Clone, Copy, Debug, Default)]
pub struct HealthMonitor {
    prev_counter: Option<u32>,
    misses: u32,
    prev_synd: u8,
}

impl HealthMonitor {
    /// A monitor that has not polled yet.
    pub const fn new() -> Self {
        HealthMonitor {
            prev_counter: None,
            misses: 0,
            prev_synd: 0,
        }
    }

    /// Polls once. The first poll only records the health counter; the counter is stuck
    /// when [`HEALTH_MAX_MISSES`] polls in a row after that see the same value.
    ///
    /// # Errors
    ///
    /// A [`FatalHealth`] when the device is dead: `fw_version` all ones, `nic_interface`
    /// DISABLED or SW_RESET, RFR set with a non-zero syndrome, or the counter stuck.
    pub fn poll<B: Bar + ?Sized>(
        &mut self,
        iseg: &InitSeg<'_, B>,
    ) -> Result<HealthStatus, FatalHealth> {
        let h = iseg.health();
        if h.fw_version == u32::MAX {
            return Err(FatalHealth::PciNotResponding);
        }
        if let s @ (NicInterface::Disabled | NicInterface::SwReset) = iseg.nic_interface() {
            return Err(FatalHealth::NicInterface(s));
        }
        if h.rfr && h.synd.0 != 0 {
            return Err(FatalHealth::RecoveryRequired {
                synd: h.synd,
                ext_synd: h.ext_synd,
            });
        }
        match self.prev_counter {
            Some(prev) if prev == h.health_counter => self.misses += 1,
            _ => self.misses = 0,
        }
        self.prev_counter = Some(h.health_counter);
        if self.misses >= HEALTH_MAX_MISSES {
            return Err(FatalHealth::HealthCounterStuck {
                counter: h.health_counter,
            });
        }
        let new_synd = h.synd.0 != 0 && h.synd.0 != self.prev_synd;
        self.prev_synd = h.synd.0;
        Ok(if new_synd {
            HealthStatus::Syndrome(h.synd)
        } else {
            HealthStatus::Ok
        })
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::testing::FakePlatform;

    #[test]
    fn cmdq_address_is_written_high_then_low_with_address_bits_only() {
        let p = FakePlatform::new();
        p.bar.set_field(initial_seg::log_cmdq_size, 5);
        p.bar.set_field(initial_seg::log_cmdq_stride, 6);
        let iseg = InitSeg::new(&p);
        iseg.set_cmdq_address(0x0000_0012_3456_7000).unwrap();
        let log = p.bar.write_log();
        // (offset, value) of each 32-bit write, high word first, low word with address
        // bits only (log sizes are read-only, nic_interface 0 = FULL).
        assert_eq!(log, [(0x10, 0x12), (0x14, 0x3456_7000)]);
        assert_eq!(iseg.cmdq_geometry(), (5, 6), "read-only fields unchanged");
        assert_eq!(
            iseg.set_cmdq_address(0x1000_0800),
            Err(InitSegError::UnalignedCmdqAddress(0x1000_0800))
        );
    }

    #[test]
    fn geometry_and_revision_are_checked() {
        let p = FakePlatform::new();
        let iseg = InitSeg::new(&p);
        p.bar.set_field(initial_seg::cmd_interface_rev, 4);
        assert_eq!(
            iseg.check_cmd_interface(),
            Err(InitSegError::UnsupportedCmdifRev(4))
        );
        p.bar.set_field(initial_seg::cmd_interface_rev, 5);
        p.bar.set_field(initial_seg::log_cmdq_size, 5);
        p.bar.set_field(initial_seg::log_cmdq_stride, 6);
        assert_eq!(iseg.check_cmd_interface(), Ok((5, 6)));
        p.bar.set_field(initial_seg::log_cmdq_size, 6);
        assert!(matches!(
            iseg.check_cmd_interface(),
            Err(InitSegError::BadCmdqGeometry { .. })
        ));
        p.bar.set_field(initial_seg::log_cmdq_size, 4);
        p.bar.set_field(initial_seg::log_cmdq_stride, 9);
        assert!(matches!(
            iseg.check_cmd_interface(),
            Err(InitSegError::BadCmdqGeometry { .. })
        ));
        p.bar.set_field(initial_seg::log_cmdq_stride, 5);
        assert!(matches!(
            iseg.check_cmd_interface(),
            Err(InitSegError::BadCmdqGeometry { .. })
        ));
    }

    #[test]
    fn wait_ready_times_out_on_the_platform_clock() {
        let p = FakePlatform::new();
        p.bar.set_field(initial_seg::initializing, 1);
        let iseg = InitSeg::new(&p);
        let t0 = p.clock.now_ns();
        let e = iseg.wait_ready(&p, 10_000_000, 2_000).unwrap_err();
        assert!(
            matches!(e, InitSegError::FirmwareNotReady { waited_ns } if waited_ns >= 10_000_000)
        );
        assert!(
            p.clock.now_ns() - t0 < 13_000_000,
            "no wait much past the timeout"
        );
        // Firmware that becomes ready after 5 ms of (virtual) time.
        let p = FakePlatform::new();
        p.bar.set_field(initial_seg::initializing, 1);
        p.on_delay(|p, now| {
            if now >= 5_000_000 {
                p.bar.set_field(initial_seg::initializing, 0);
            }
        });
        InitSeg::new(&p).wait_ready(&p, 10_000_000, 2_000).unwrap();
        assert!((5_000_000..7_000_000).contains(&p.clock.now_ns()));
    }

    fn healthy(p: &FakePlatform) {
        p.bar
            .set_health_field(health_buffer::fw_version, 0x0016_0010);
    }

    #[test]
    fn health_fatal_conditions() {
        // PCI gone: fw_version all ones.
        let p = FakePlatform::new();
        p.bar.set_health_field(health_buffer::fw_version, u32::MAX);
        let mut m = HealthMonitor::new();
        assert_eq!(
            m.poll(&InitSeg::new(&p)),
            Err(FatalHealth::PciNotResponding)
        );

        // nic_interface DISABLED and SW_RESET (the 3-bit value 7).
        for (raw, state) in [(1, NicInterface::Disabled), (7, NicInterface::SwReset)] {
            let p = FakePlatform::new();
            healthy(&p);
            p.bar.set_field(NIC_INTERFACE_LINUX, raw);
            assert_eq!(
                HealthMonitor::new().poll(&InitSeg::new(&p)),
                Err(FatalHealth::NicInterface(state))
            );
        }

        // RFR with a syndrome is fatal; RFR alone or a syndrome alone is not.
        let p = FakePlatform::new();
        healthy(&p);
        p.bar.set_health_field(health_buffer::rfr, 1);
        assert_eq!(
            HealthMonitor::new().poll(&InitSeg::new(&p)),
            Ok(HealthStatus::Ok)
        );
        p.bar.set_health_field(health_buffer::synd, 0x10);
        p.bar.set_health_field(health_buffer::ext_synd, 0xbeef);
        let e = HealthMonitor::new().poll(&InitSeg::new(&p)).unwrap_err();
        assert_eq!(
            e,
            FatalHealth::RecoveryRequired {
                synd: HealthSyndrome(0x10),
                ext_synd: 0xbeef
            }
        );
        assert_eq!(
            std::format!("{e}"),
            "recovery flow required: high temperature (0x10), ext_synd 0xbeef"
        );
        p.bar.set_health_field(health_buffer::rfr, 0);
        let mut m = HealthMonitor::new();
        assert_eq!(
            m.poll(&InitSeg::new(&p)),
            Ok(HealthStatus::Syndrome(HealthSyndrome(0x10)))
        );
        p.bar.set_field(initial_seg::health_counter, 1);
        assert_eq!(
            m.poll(&InitSeg::new(&p)),
            Ok(HealthStatus::Ok),
            "same syndrome reported once"
        );
    }

    #[test]
    fn health_counter_stuck_for_three_polls_is_fatal() {
        let p = FakePlatform::new();
        healthy(&p);
        let iseg = InitSeg::new(&p);
        let mut m = HealthMonitor::new();
        // A moving counter is healthy for any number of polls.
        for c in 0..10 {
            p.bar.set_field(initial_seg::health_counter, c);
            assert_eq!(m.poll(&iseg), Ok(HealthStatus::Ok));
        }
        // Baseline 9, then two misses: still alive; the third miss is fatal.
        assert_eq!(m.poll(&iseg), Ok(HealthStatus::Ok));
        assert_eq!(m.poll(&iseg), Ok(HealthStatus::Ok));
        assert_eq!(
            m.poll(&iseg),
            Err(FatalHealth::HealthCounterStuck { counter: 9 })
        );
        // It recovers as soon as the counter moves.
        p.bar.set_field(initial_seg::health_counter, 10);
        assert_eq!(m.poll(&iseg), Ok(HealthStatus::Ok));
        // The syndrome occupies the top byte of the same word and does not disturb it.
        p.bar.set_field(initial_seg::health_syndrome, 0xff);
        assert_eq!(iseg.health_counter(), 10);
    }

    #[test]
    fn health_syndrome_names() {
        let names: std::vec::Vec<std::string::String> = [
            0x1, 0x7, 0x8, 0x9, 0xa, 0xb, 0xc, 0xd, 0xe, 0xf, 0x10, 0x12, 0x13, 0x42,
        ]
        .iter()
        .map(|&s| std::format!("{}", HealthSyndrome(s)))
        .collect();
        assert_eq!(
            names,
            [
                "FW internal error (0x1)",
                "dead IRISC (0x7)",
                "HW unrecoverable error (0x8)",
                "FW CRC error (0x9)",
                "ICM fetch PCI error (0xa)",
                "HW fatal error (0xb)",
                "async EQ buffer overrun (0xc)",
                "EQ error (0xd)",
                "invalid EQ referenced (0xe)",
                "FFSER error (0xf)",
                "high temperature (0x10)",
                "ICM PCI poisoned error (0x12)",
                "trust lockdown error (0x13)",
                "unknown health syndrome (0x42)",
            ]
        );
    }

    #[test]
    fn set_nic_interface_keeps_address_bits() {
        let p = FakePlatform::new();
        let iseg = InitSeg::new(&p);
        iseg.set_cmdq_address(0xabcd_e000).unwrap();
        iseg.set_nic_interface(NicInterface::Disabled);
        assert_eq!(iseg.nic_interface(), NicInterface::Disabled);
        assert_eq!(p.bar.read_be32(0x14) & 0xffff_f000, 0xabcd_e000);
        assert_eq!(p.bar.read_be32(0x14) & 0x700, 0x100);
    }
}
