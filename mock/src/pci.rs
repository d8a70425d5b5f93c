//! PCI configuration space of the modelled function: a ConnectX-6 Dx-like physical function
//! with a 64-bit prefetchable BAR0 of 32 MiB, power management, PCI Express (with function
//! level reset), MSI-X and the vendor-specific capability.
//!
//! Registers are kept as a little-endian byte image with a write mask per byte, so size
//! probing a BAR (write all ones, read back) behaves as on hardware: the read-only low bits
//! of the BAR read back as zero and reveal the size.

/// Mellanox/NVIDIA PCI vendor id.
pub const VENDOR_ID: u16 = 0x15b3;
/// Device id of a ConnectX-6 Dx.
pub const DEVICE_ID: u16 = 0x101d;
/// Subsystem id reported (a ConnectX-6 Dx board).
pub const SUBSYSTEM_ID: u16 = 0x0016;
/// Class code of an Ethernet controller.
pub const CLASS_ETHERNET: u32 = 0x02_00_00;
/// Class code of an InfiniBand controller (serial bus, InfiniBand).
pub const CLASS_INFINIBAND: u32 = 0x0c_06_00;
/// Size of BAR0 in bytes (32 MiB).
pub const BAR0_SIZE: usize = 32 << 20;
/// Bytes of configuration space (PCI Express extended space).
pub const CONFIG_SPACE_SIZE: usize = 4096;

/// The command register (16 bits).
pub const PCI_COMMAND: u16 = 0x04;
/// Command register: memory space decoding.
pub const PCI_COMMAND_MEMORY: u16 = 1 << 1;
/// Command register: bus master (the device may DMA).
pub const PCI_COMMAND_MASTER: u16 = 1 << 2;
/// BAR0 (low half of the 64-bit BAR).
pub const PCI_BAR0: u16 = 0x10;
/// Offset of the power-management capability.
pub const CAP_PM: u16 = 0x40;
/// Offset of the PCI Express capability.
pub const CAP_PCIE: u16 = 0x60;
/// Offset of the MSI-X capability.
pub const CAP_MSIX: u16 = 0x9c;
/// Offset of the vendor-specific capability.
pub const CAP_VNDR: u16 = 0xc0;
/// PCI Express device control register (16 bits), within the config space.
pub const PCIE_DEVCTL: u16 = CAP_PCIE + 0x08;
/// Device control: initiate function level reset.
pub const PCIE_DEVCTL_BCR_FLR: u16 = 1 << 15;
/// PCI Express device capabilities: function level reset supported.
pub const PCIE_DEVCAP_FLR: u32 = 1 << 28;
/// BAR0 offset of the MSI-X table.
pub const MSIX_TABLE_OFFSET: usize = 0x2000;
/// BAR0 offset of the MSI-X pending-bit array.
pub const MSIX_PBA_OFFSET: usize = 0x3000;

/// The configuration space of the function.
#[derive(Clone, Debug)]
pub(crate) struct PciFunction {
    bytes: Vec<u8>,
    wmask: Vec<u8>,
}

impl PciFunction {
    /// The power-on state. `infiniband` selects the class code; `msix_vectors` the MSI-X
    /// table size.
    pub(crate) fn new(infiniband: bool, msix_vectors: u16) -> Self {
        let mut f = PciFunction {
            bytes: vec![0; CONFIG_SPACE_SIZE],
            wmask: vec![0; CONFIG_SPACE_SIZE],
        };
        f.put16(0x00, VENDOR_ID);
        f.put16(0x02, DEVICE_ID);
        // Command: memory decoding on, as vfio-pci leaves a device it hands to userspace;
        // bus mastering off until the driver turns it on.
        f.put16(PCI_COMMAND, PCI_COMMAND_MEMORY);
        f.mask16(PCI_COMMAND, 0x0546);
        f.put16(0x06, 1 << 4); // status: capability list
        let class = if infiniband {
            CLASS_INFINIBAND
        } else {
            CLASS_ETHERNET
        };
        f.put32(0x08, class << 8); // revision 0
        f.mask(0x0c, 0xff); // cache line size
        f.put8(0x0e, 0x00); // header type 0, single function
        // BAR0: 64-bit (bits 2:1 = 10), prefetchable (bit 3); bits below the size read 0.
        f.put32(PCI_BAR0, 0x0000_000c);
        f.mask32(PCI_BAR0, !(BAR0_SIZE as u32 - 1));
        f.mask32(PCI_BAR0 + 4, 0xffff_ffff);
        f.put16(0x2c, VENDOR_ID);
        f.put16(0x2e, SUBSYSTEM_ID);
        f.put8(0x34, CAP_PM as u8);
        f.mask(0x3c, 0xff); // interrupt line
        f.put8(0x3d, 1); // INTA

        // Power management: version 3, D0; power state bits writable.
        f.put8(CAP_PM, 0x01);
        f.put8(CAP_PM + 1, CAP_PCIE as u8);
        f.put16(CAP_PM + 2, 0x0003);
        f.mask16(CAP_PM + 4, 0x0003);

        // PCI Express: version 2 endpoint; FLR capable, 512-byte max payload supported;
        // 16 GT/s x16 link.
        f.put8(CAP_PCIE, 0x10);
        f.put8(CAP_PCIE + 1, CAP_MSIX as u8);
        f.put16(CAP_PCIE + 2, 0x0002);
        f.put32(CAP_PCIE + 4, PCIE_DEVCAP_FLR | 0x2);
        f.put16(PCIE_DEVCTL, 0x2810); // relaxed ordering, 512 B read requests, 128 B payload
        f.mask16(PCIE_DEVCTL, 0xffff);
        f.put32(CAP_PCIE + 0x0c, 4 | (16 << 4)); // link capabilities: 16 GT/s, x16
        f.mask16(CAP_PCIE + 0x10, 0x0fff);
        f.put16(CAP_PCIE + 0x12, 4 | (16 << 4)); // link status: 16 GT/s, x16
        // Link capabilities 2: the supported link speeds vector (2.5, 5, 8 and 16 GT/s, bits
        // 1 to 4). Above 5 GT/s the speed fields of the link registers are indexes into this
        // vector (speed 4: its fourth bit, 16 GT/s); left empty, a reader cannot tell the
        // speed (Linux logged "Unknown x16 link").
        f.put32(CAP_PCIE + 0x2c, 0b1_1110);
        f.put32(CAP_PCIE + 0x24, 0x0000_0000);
        f.mask16(CAP_PCIE + 0x28, 0xffff);

        // MSI-X: table in BAR0 at 0x2000, PBA at 0x3000; enable and function mask writable.
        f.put8(CAP_MSIX, 0x11);
        f.put8(CAP_MSIX + 1, CAP_VNDR as u8);
        f.put16(CAP_MSIX + 2, msix_vectors.saturating_sub(1) & 0x7ff);
        f.mask16(CAP_MSIX + 2, 0xc000);
        f.put32(CAP_MSIX + 4, MSIX_TABLE_OFFSET as u32);
        f.put32(CAP_MSIX + 8, MSIX_PBA_OFFSET as u32);

        // Vendor-specific capability (the mlx5 "VSC" gateway), 0x18 bytes, contents read-only.
        f.put8(CAP_VNDR, 0x09);
        f.put8(CAP_VNDR + 1, 0x00);
        f.put8(CAP_VNDR + 2, 0x18);
        f
    }

    fn put8(&mut self, off: u16, v: u8) {
        self.bytes[off as usize] = v;
    }
    fn put16(&mut self, off: u16, v: u16) {
        self.bytes[off as usize..off as usize + 2].copy_from_slice(&v.to_le_bytes());
    }
    fn put32(&mut self, off: u16, v: u32) {
        self.bytes[off as usize..off as usize + 4].copy_from_slice(&v.to_le_bytes());
    }
    fn mask(&mut self, off: u16, m: u8) {
        self.wmask[off as usize] = m;
    }
    fn mask16(&mut self, off: u16, m: u16) {
        self.wmask[off as usize..off as usize + 2].copy_from_slice(&m.to_le_bytes());
    }
    fn mask32(&mut self, off: u16, m: u32) {
        self.wmask[off as usize..off as usize + 4].copy_from_slice(&m.to_le_bytes());
    }

    /// Reads `N` bytes at `off` (the caller checked range and alignment).
    pub(crate) fn read<const N: usize>(&self, off: u16) -> [u8; N] {
        let mut out = [0u8; N];
        out.copy_from_slice(&self.bytes[off as usize..off as usize + N]);
        out
    }

    /// Copies `buf.len()` bytes from `off` (the caller checked the range).
    pub(crate) fn read_into(&self, off: u16, buf: &mut [u8]) {
        buf.copy_from_slice(&self.bytes[off as usize..off as usize + buf.len()]);
    }

    /// Writes bytes at `off` through the write mask. Returns true if the write initiated a
    /// function level reset (the caller resets the device, including this space).
    pub(crate) fn write(&mut self, off: u16, data: &[u8]) -> bool {
        for (i, &v) in data.iter().enumerate() {
            let o = off as usize + i;
            let m = self.wmask[o];
            self.bytes[o] = (self.bytes[o] & !m) | (v & m);
        }
        let devctl = u16::from_le_bytes(self.read::<2>(PCIE_DEVCTL));
        if devctl & PCIE_DEVCTL_BCR_FLR != 0 {
            // The bit always reads as zero.
            self.put16(PCIE_DEVCTL, devctl & !PCIE_DEVCTL_BCR_FLR);
            return true;
        }
        false
    }

    /// The command register.
    pub(crate) fn command(&self) -> u16 {
        u16::from_le_bytes(self.read::<2>(PCI_COMMAND))
    }
}
