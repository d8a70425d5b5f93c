//! PCI configuration-space layout the platform needs: the command register and the
//! capability lists. The walks work over any [`PciConfig`], so they are tested over a byte
//! array.

use uhca_hal::platform::{ConfigError, PciConfig};

/// Offset of the vendor ID.
pub const VENDOR_ID: u16 = 0x00;
/// Offset of the device ID.
pub const DEVICE_ID: u16 = 0x02;
/// Offset of the command register.
pub const COMMAND: u16 = 0x04;
/// Offset of the status register.
pub const STATUS: u16 = 0x06;
/// Offset of the capabilities pointer.
pub const CAPABILITIES_POINTER: u16 = 0x34;
/// Command register: respond to memory-space accesses (BARs).
pub const COMMAND_MEMORY: u16 = 1 << 1;
/// Command register: the function may master the bus (issue DMA and MSI writes).
pub const COMMAND_BUS_MASTER: u16 = 1 << 2;
/// Command register: legacy INTx disabled.
pub const COMMAND_INTX_DISABLE: u16 = 1 << 10;
/// Status register: a capability list is present.
pub const STATUS_CAP_LIST: u16 = 1 << 4;
/// Where the extended capabilities (PCI Express) start.
pub const EXTENDED_CAPS_START: u16 = 0x100;

/// Standard capability IDs.
pub mod cap_id {
    /// Power management.
    pub const POWER_MANAGEMENT: u8 = 0x01;
    /// Vital product data.
    pub const VPD: u8 = 0x03;
    /// MSI.
    pub const MSI: u8 = 0x05;
    /// Vendor specific.
    pub const VENDOR: u8 = 0x09;
    /// PCI Express.
    pub const PCI_EXPRESS: u8 = 0x10;
    /// MSI-X.
    pub const MSI_X: u8 = 0x11;
}

/// Extended capability IDs.
pub mod ext_cap_id {
    /// Advanced error reporting.
    pub const AER: u16 = 0x0001;
    /// Device serial number.
    pub const SERIAL_NUMBER: u16 = 0x0003;
    /// Alternative routing-ID interpretation.
    pub const ARI: u16 = 0x000e;
    /// Single-root I/O virtualisation.
    pub const SR_IOV: u16 = 0x0010;
}

/// Device Capabilities register, offset from the PCI Express capability.
pub const PCIE_DEVICE_CAPABILITIES: u16 = 0x04;
/// Device Capabilities: function-level reset supported.
pub const PCIE_DEVCAP_FLR: u32 = 1 << 28;

/// One entry of the standard capability list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capability {
    /// Capability ID ([`cap_id`]).
    pub id: u8,
    /// Offset of the capability in configuration space.
    pub offset: u16,
}

/// One entry of the extended capability list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExtendedCapability {
    /// Capability ID ([`ext_cap_id`]).
    pub id: u16,
    /// Capability version.
    pub version: u8,
    /// Offset of the capability in configuration space.
    pub offset: u16,
}

/// Walks the standard capability list (from the pointer at 0x34). A list that loops or
/// points into the header ends the walk instead of looping forever: at most 48 entries fit
/// in the 192 bytes after the header.
pub fn capabilities<C: PciConfig + ?Sized>(cfg: &C) -> Result<Vec<Capability>, ConfigError> {
    let mut out = Vec::new();
    if cfg.config_read16(STATUS)? & STATUS_CAP_LIST == 0 {
        return Ok(out);
    }
    let mut ptr = u16::from(cfg.config_read8(CAPABILITIES_POINTER)? & 0xfc);
    while ptr >= 0x40 && out.len() < 48 {
        let id = cfg.config_read8(ptr)?;
        let next = u16::from(cfg.config_read8(ptr + 1)? & 0xfc);
        if out.iter().any(|c: &Capability| c.offset == ptr) {
            break;
        }
        out.push(Capability { id, offset: ptr });
        ptr = next;
    }
    Ok(out)
}

/// Walks the extended capability list (from 0x100). Returns an empty list when the
/// configuration space has only 256 bytes (the read is out of range) or holds no
/// extended capability (the first header reads 0 or all ones). Stops on loops.
pub fn extended_capabilities<C: PciConfig + ?Sized>(
    cfg: &C,
) -> Result<Vec<ExtendedCapability>, ConfigError> {
    let mut out: Vec<ExtendedCapability> = Vec::new();
    let mut ptr = EXTENDED_CAPS_START;
    // 4096 - 256 bytes, 4 bytes per header at least.
    while ptr >= EXTENDED_CAPS_START && out.len() < 960 {
        let header = match cfg.config_read32(ptr) {
            Ok(h) => h,
            Err(ConfigError::OutOfRange) if ptr == EXTENDED_CAPS_START => return Ok(out),
            Err(e) => return Err(e),
        };
        if header == 0 || header == u32::MAX {
            break;
        }
        if out.iter().any(|c| c.offset == ptr) {
            break;
        }
        out.push(ExtendedCapability {
            id: (header & 0xffff) as u16,
            version: ((header >> 16) & 0xf) as u8,
            offset: ptr,
        });
        ptr = ((header >> 20) & 0xffc) as u16;
    }
    Ok(out)
}

/// The offset of the first standard capability with `id`, if any.
pub fn find_capability<C: PciConfig + ?Sized>(cfg: &C, id: u8) -> Result<Option<u16>, ConfigError> {
    Ok(capabilities(cfg)?
        .into_iter()
        .find(|c| c.id == id)
        .map(|c| c.offset))
}

/// Whether the PCI Express capability advertises function-level reset.
pub fn supports_flr<C: PciConfig + ?Sized>(cfg: &C) -> Result<bool, ConfigError> {
    match find_capability(cfg, cap_id::PCI_EXPRESS)? {
        Some(off) => Ok(cfg.config_read32(off + PCIE_DEVICE_CAPABILITIES)? & PCIE_DEVCAP_FLR != 0),
        None => Ok(false),
    }
}

/// Sets `set` and clears `clear` in the command register (read, modify, write); returns the
/// new value.
pub fn update_command<C: PciConfig + ?Sized>(
    cfg: &C,
    set: u16,
    clear: u16,
) -> Result<u16, ConfigError> {
    let old = cfg.config_read16(COMMAND)?;
    let new = (old | set) & !clear;
    if new != old {
        cfg.config_write16(COMMAND, new)?;
    }
    Ok(new)
}

#[cfg(test)]
pub(crate) mod fake {
    use super::*;
    use std::cell::RefCell;

    /// Configuration space as a byte array, little-endian like the real one.
    pub(crate) struct FakeConfig(pub(crate) RefCell<Vec<u8>>);

    impl FakeConfig {
        pub(crate) fn new(len: usize) -> Self {
            FakeConfig(RefCell::new(vec![0; len]))
        }
        pub(crate) fn put8(&self, off: usize, v: u8) {
            self.0.borrow_mut()[off] = v;
        }
        pub(crate) fn put16(&self, off: usize, v: u16) {
            self.0.borrow_mut()[off..off + 2].copy_from_slice(&v.to_le_bytes());
        }
        pub(crate) fn put32(&self, off: usize, v: u32) {
            self.0.borrow_mut()[off..off + 4].copy_from_slice(&v.to_le_bytes());
        }
        fn get<const N: usize>(&self, off: u16) -> Result<[u8; N], ConfigError> {
            let off = usize::from(off);
            let b = self.0.borrow();
            if off % N != 0 || off + N > b.len() {
                return Err(ConfigError::OutOfRange);
            }
            Ok(b[off..off + N].try_into().unwrap())
        }
    }

    impl PciConfig for FakeConfig {
        fn config_read8(&self, offset: u16) -> Result<u8, ConfigError> {
            Ok(self.get::<1>(offset)?[0])
        }
        fn config_read16(&self, offset: u16) -> Result<u16, ConfigError> {
            Ok(u16::from_le_bytes(self.get::<2>(offset)?))
        }
        fn config_read32(&self, offset: u16) -> Result<u32, ConfigError> {
            Ok(u32::from_le_bytes(self.get::<4>(offset)?))
        }
        fn config_write16(&self, offset: u16, value: u16) -> Result<(), ConfigError> {
            self.get::<2>(offset)?;
            self.put16(usize::from(offset), value);
            Ok(())
        }
        fn config_write32(&self, offset: u16, value: u32) -> Result<(), ConfigError> {
            self.get::<4>(offset)?;
            self.put32(usize::from(offset), value);
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeConfig;
    use super::*;

    /// A ConnectX-like function: PM at 0x60, VPD at 0x48, PCIe at 0x70 with FLR, MSI-X at
    /// 0x9c; extended: AER at 0x100, serial number at 0x150, SR-IOV at 0x180.
    fn connectx_like() -> FakeConfig {
        let c = FakeConfig::new(4096);
        c.put16(0, 0x15b3);
        c.put16(2, 0x101d);
        c.put16(STATUS as usize, STATUS_CAP_LIST);
        c.put8(0x34, 0x60);
        c.put8(0x60, cap_id::POWER_MANAGEMENT);
        c.put8(0x61, 0x48);
        c.put8(0x48, cap_id::VPD);
        c.put8(0x49, 0x72); // low bits are reserved and must be masked off
        c.put8(0x70, cap_id::PCI_EXPRESS);
        c.put8(0x71, 0x9c);
        c.put32(0x74, PCIE_DEVCAP_FLR | 0x8000);
        c.put8(0x9c, cap_id::MSI_X);
        c.put8(0x9d, 0);
        c.put32(0x100, 0x0001 | (2 << 16) | (0x150 << 20));
        c.put32(0x150, 0x0003 | (1 << 16) | (0x180 << 20));
        c.put32(0x180, 0x0010 | (1 << 16));
        c
    }

    #[test]
    fn walks_the_standard_list() {
        let c = connectx_like();
        let caps = capabilities(&c).unwrap();
        assert_eq!(
            caps,
            [
                Capability {
                    id: cap_id::POWER_MANAGEMENT,
                    offset: 0x60
                },
                Capability {
                    id: cap_id::VPD,
                    offset: 0x48
                },
                Capability {
                    id: cap_id::PCI_EXPRESS,
                    offset: 0x70
                },
                Capability {
                    id: cap_id::MSI_X,
                    offset: 0x9c
                },
            ]
        );
        assert_eq!(find_capability(&c, cap_id::MSI_X).unwrap(), Some(0x9c));
        assert_eq!(find_capability(&c, cap_id::MSI).unwrap(), None);
        assert!(supports_flr(&c).unwrap());
    }

    #[test]
    fn walks_the_extended_list() {
        let c = connectx_like();
        let ext = extended_capabilities(&c).unwrap();
        assert_eq!(
            ext,
            [
                ExtendedCapability {
                    id: ext_cap_id::AER,
                    version: 2,
                    offset: 0x100
                },
                ExtendedCapability {
                    id: ext_cap_id::SERIAL_NUMBER,
                    version: 1,
                    offset: 0x150
                },
                ExtendedCapability {
                    id: ext_cap_id::SR_IOV,
                    version: 1,
                    offset: 0x180
                },
            ]
        );
    }

    #[test]
    fn no_list_and_short_config_space() {
        // QEMU's edu: 256 bytes, no capability bit → nothing, and no error.
        let c = FakeConfig::new(256);
        c.put16(0, 0x1234);
        assert!(capabilities(&c).unwrap().is_empty());
        assert!(extended_capabilities(&c).unwrap().is_empty());
        assert!(!supports_flr(&c).unwrap());
        // A PCIe capability without FLR.
        c.put16(STATUS as usize, STATUS_CAP_LIST);
        c.put8(0x34, 0x40);
        c.put8(0x40, cap_id::PCI_EXPRESS);
        assert!(!supports_flr(&c).unwrap());
    }

    #[test]
    fn loops_and_bad_pointers_end_the_walk() {
        let c = FakeConfig::new(4096);
        c.put16(STATUS as usize, STATUS_CAP_LIST);
        c.put8(0x34, 0x40);
        c.put8(0x40, cap_id::MSI);
        c.put8(0x41, 0x50);
        c.put8(0x50, cap_id::MSI_X);
        c.put8(0x51, 0x40); // back to the first
        assert_eq!(capabilities(&c).unwrap().len(), 2);
        // A pointer into the header ends the walk.
        c.put8(0x51, 0x10);
        assert_eq!(capabilities(&c).unwrap().len(), 2);
        // Extended loop.
        c.put32(0x100, 0x0001 | (0x100 << 20));
        assert_eq!(extended_capabilities(&c).unwrap().len(), 1);
        // All ones (a function that fell off the bus) reads as no list.
        c.put32(0x100, u32::MAX);
        assert!(extended_capabilities(&c).unwrap().is_empty());
    }

    #[test]
    fn command_register_update() {
        let c = FakeConfig::new(256);
        c.put16(COMMAND as usize, COMMAND_INTX_DISABLE);
        let v = update_command(&c, COMMAND_MEMORY | COMMAND_BUS_MASTER, 0).unwrap();
        assert_eq!(
            v,
            COMMAND_INTX_DISABLE | COMMAND_MEMORY | COMMAND_BUS_MASTER
        );
        assert_eq!(c.config_read16(COMMAND).unwrap(), v);
        let v = update_command(&c, 0, COMMAND_BUS_MASTER).unwrap();
        assert_eq!(v, COMMAND_INTX_DISABLE | COMMAND_MEMORY);
    }
}
