//! PCI configuration space through the legacy mechanism (address port 0xCF8, data port
//! 0xCFC), which reaches every function's first 256 bytes on QEMU's q35 and pc machines
//! (the driver reads nothing beyond), a scan of every bus, and BAR0 sizing.

use crate::port::{inl, inw, outl, outw};

/// A function's bus, device and function numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bdf {
    /// Bus.
    pub bus: u8,
    /// Device (0-31).
    pub dev: u8,
    /// Function (0-7).
    pub func: u8,
}

impl core::fmt::Display for Bdf {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:02x}:{:02x}.{}", self.bus, self.dev, self.func)
    }
}

const ADDR: u16 = 0xcf8;
const DATA: u16 = 0xcfc;

fn select(b: Bdf, off: u8) {
    let a = 0x8000_0000
        | u32::from(b.bus) << 16
        | u32::from(b.dev) << 11
        | u32::from(b.func) << 8
        | u32::from(off & 0xfc);
    outl(ADDR, a);
}

// One CPU and no interrupt handler touches configuration space, so the address/data pair
// needs no lock here; a multi-CPU platform must hold one across select + access.

/// Reads 32 bits at `off` (4-aligned).
pub fn read32(b: Bdf, off: u8) -> u32 {
    select(b, off);
    inl(DATA)
}

/// Reads 16 bits at `off` (2-aligned).
pub fn read16(b: Bdf, off: u8) -> u16 {
    select(b, off);
    inw(DATA + u16::from(off & 2))
}

/// Reads 8 bits at `off`.
pub fn read8(b: Bdf, off: u8) -> u8 {
    (read32(b, off) >> ((off & 3) * 8)) as u8
}

/// Writes 32 bits at `off` (4-aligned).
pub fn write32(b: Bdf, off: u8, v: u32) {
    select(b, off);
    outl(DATA, v);
}

/// Writes 16 bits at `off` (2-aligned): only those two bytes (a command-register write
/// never touches the status register beside it).
pub fn write16(b: Bdf, off: u8, v: u16) {
    select(b, off);
    outw(DATA + u16::from(off & 2), v);
}

/// A function found by [`scan`].
#[derive(Clone, Copy, Debug)]
pub struct Function {
    /// Where.
    pub bdf: Bdf,
    /// Vendor id.
    pub vendor: u16,
    /// Device id.
    pub device: u16,
    /// Class, subclass and programming interface (`0x0c0600` InfiniBand, `0x020000` Ethernet).
    pub class: u32,
}

/// Calls `found` for every function on buses 0-255.
pub fn scan(mut found: impl FnMut(Function)) {
    for bus in 0..=255u8 {
        for dev in 0..32u8 {
            for func in 0..8u8 {
                let bdf = Bdf { bus, dev, func };
                let id = read32(bdf, 0);
                if id & 0xffff == 0xffff {
                    if func == 0 {
                        break;
                    }
                    continue;
                }
                found(Function {
                    bdf,
                    vendor: id as u16,
                    device: (id >> 16) as u16,
                    class: read32(bdf, 8) >> 8,
                });
                // Header type bit 7: more than one function.
                if func == 0 && read8(bdf, 0x0e) & 0x80 == 0 {
                    break;
                }
            }
        }
    }
}

/// BAR0 of a function: its address (as the firmware, SeaBIOS, assigned it) and length.
/// Sizes it by writing all-ones with memory decoding off, then restores both.
pub fn bar0(b: Bdf) -> Option<(u64, u64)> {
    let lo = read32(b, 0x10);
    if lo & 1 != 0 {
        return None; // an I/O BAR
    }
    let is64 = (lo >> 1) & 3 == 2;
    let hi = if is64 { read32(b, 0x14) } else { 0 };
    let cmd = read16(b, 0x04);
    write16(b, 0x04, cmd & !0x2);
    write32(b, 0x10, !0);
    let size_lo = read32(b, 0x10) & !0xf;
    write32(b, 0x10, lo);
    let mut mask = u64::from(size_lo) | 0xffff_ffff_0000_0000;
    if is64 {
        write32(b, 0x14, !0);
        mask = u64::from(size_lo) | u64::from(read32(b, 0x14)) << 32;
        write32(b, 0x14, hi);
    }
    write16(b, 0x04, cmd);
    let len = (!mask).wrapping_add(1);
    let addr = u64::from(lo & !0xf) | u64::from(hi) << 32;
    (addr != 0 && len != 0).then_some((addr, len))
}
