//! The vfio-user wire format: the 16-byte message header, the command numbers, the flags and
//! the sizes of the fixed payloads, as QEMU's `docs/interop/vfio-user.rst` specifies them
//! ("Header", "Commands" and each command's section). All fields are in host byte order
//! (little-endian on the hosts uhca runs on), per the specification's "Protocol
//! Specification" section.

/// Bytes of the message header.
pub const HEADER_SIZE: usize = 16;

/// The commands (the specification's "Commands" table).
pub mod cmd {
    /// Version and capability negotiation, the first message.
    pub const VERSION: u16 = 1;
    /// Client memory the server may reach, with a file descriptor to map.
    pub const DMA_MAP: u16 = 2;
    /// Removes a DMA map.
    pub const DMA_UNMAP: u16 = 3;
    /// Device flags, number of regions and of interrupt types.
    pub const DEVICE_GET_INFO: u16 = 4;
    /// One region's flags, size and offset.
    pub const DEVICE_GET_REGION_INFO: u16 = 5;
    /// File descriptors for region sub-ranges (ioeventfds); not offered by this server.
    pub const DEVICE_GET_REGION_IO_FDS: u16 = 6;
    /// One interrupt type's flags and count.
    pub const DEVICE_GET_IRQ_INFO: u16 = 7;
    /// Interrupt actions (eventfds to signal).
    pub const DEVICE_SET_IRQS: u16 = 8;
    /// A read of a region (BAR0 or configuration space).
    pub const REGION_READ: u16 = 9;
    /// A write to a region.
    pub const REGION_WRITE: u16 = 10;
    /// Server to client: a read of client memory (not used: DMA goes through the maps).
    pub const DMA_READ: u16 = 11;
    /// Server to client: a write of client memory (not used).
    pub const DMA_WRITE: u16 = 12;
    /// Device reset.
    pub const DEVICE_RESET: u16 = 13;
    /// Several region writes in one message (only when negotiated; this server does not).
    pub const REGION_WRITE_MULTI: u16 = 15;
    /// Device features (migration, DMA logging); not offered by this server.
    pub const DEVICE_FEATURE: u16 = 16;
}

/// Header flags: the message type in bits 3:0 (0 command, 1 reply).
pub const FLAG_TYPE_MASK: u32 = 0xf;
/// Header flags: message type "reply".
pub const FLAG_TYPE_REPLY: u32 = 1;
/// Header flags: the sender wants no reply.
pub const FLAG_NO_REPLY: u32 = 1 << 4;
/// Header flags: the reply reports an error (the header's error field holds an errno).
pub const FLAG_ERROR: u32 = 1 << 5;

/// `VFIO_DEVICE_FLAGS_RESET`: the device takes DEVICE_RESET.
pub const DEVICE_FLAGS_RESET: u32 = 1 << 0;
/// `VFIO_DEVICE_FLAGS_PCI`: a PCI device.
pub const DEVICE_FLAGS_PCI: u32 = 1 << 1;

/// `VFIO_REGION_INFO_FLAG_READ`.
pub const REGION_FLAG_READ: u32 = 1 << 0;
/// `VFIO_REGION_INFO_FLAG_WRITE`.
pub const REGION_FLAG_WRITE: u32 = 1 << 1;

/// PCI region indexes (`VFIO_PCI_*_REGION_INDEX`): BAR0 to BAR5, the ROM, configuration
/// space, VGA.
pub const PCI_NUM_REGIONS: u32 = 9;
/// Region index of BAR0.
pub const PCI_BAR0_REGION_INDEX: u32 = 0;
/// Region index of the configuration space.
pub const PCI_CONFIG_REGION_INDEX: u32 = 7;

/// Interrupt indexes (`VFIO_PCI_*_IRQ_INDEX`): INTx, MSI, MSI-X, error, request.
pub const PCI_NUM_IRQS: u32 = 5;
/// Interrupt index of INTx.
pub const PCI_INTX_IRQ_INDEX: u32 = 0;
/// Interrupt index of MSI-X.
pub const PCI_MSIX_IRQ_INDEX: u32 = 2;
/// Interrupt index of the error (AER) interrupt.
pub const PCI_ERR_IRQ_INDEX: u32 = 3;
/// Interrupt index of the device request (removal) interrupt.
pub const PCI_REQ_IRQ_INDEX: u32 = 4;

/// `VFIO_IRQ_INFO_EVENTFD`.
pub const IRQ_INFO_EVENTFD: u32 = 1 << 0;
/// `VFIO_IRQ_INFO_MASKABLE`.
pub const IRQ_INFO_MASKABLE: u32 = 1 << 1;
/// `VFIO_IRQ_INFO_AUTOMASKED`.
pub const IRQ_INFO_AUTOMASKED: u32 = 1 << 2;
/// `VFIO_IRQ_INFO_NORESIZE`.
pub const IRQ_INFO_NORESIZE: u32 = 1 << 3;

/// `VFIO_IRQ_SET_DATA_NONE`.
pub const IRQ_SET_DATA_NONE: u32 = 1 << 0;
/// `VFIO_IRQ_SET_DATA_BOOL`.
pub const IRQ_SET_DATA_BOOL: u32 = 1 << 1;
/// `VFIO_IRQ_SET_DATA_EVENTFD`.
pub const IRQ_SET_DATA_EVENTFD: u32 = 1 << 2;
/// `VFIO_IRQ_SET_ACTION_MASK`.
pub const IRQ_SET_ACTION_MASK: u32 = 1 << 3;
/// `VFIO_IRQ_SET_ACTION_UNMASK`.
pub const IRQ_SET_ACTION_UNMASK: u32 = 1 << 4;
/// `VFIO_IRQ_SET_ACTION_TRIGGER`.
pub const IRQ_SET_ACTION_TRIGGER: u32 = 1 << 5;

/// DMA_MAP flags: the server may read the memory.
pub const DMA_MAP_FLAG_READ: u32 = 1 << 0;
/// DMA_MAP flags: the server may write the memory.
pub const DMA_MAP_FLAG_WRITE: u32 = 1 << 1;
/// DMA_UNMAP flags: unmap every map (`VFIO_DMA_UNMAP_FLAG_ALL`; address and size zero).
pub const DMA_UNMAP_FLAG_ALL: u32 = 1 << 1;

/// Bytes of the DMA_MAP payload.
pub const DMA_MAP_SIZE: usize = 32;
/// Bytes of the DMA_UNMAP payload.
pub const DMA_UNMAP_SIZE: usize = 24;
/// Bytes of `struct vfio_device_info` as vfio-user sends it.
pub const DEVICE_INFO_SIZE: usize = 16;
/// Bytes of `struct vfio_region_info`.
pub const REGION_INFO_SIZE: usize = 32;
/// Bytes of `struct vfio_irq_info`.
pub const IRQ_INFO_SIZE: usize = 16;
/// Bytes of the fixed part of `struct vfio_irq_set`.
pub const IRQ_SET_SIZE: usize = 20;
/// Bytes of the fixed part of REGION_READ and REGION_WRITE (offset, region, count).
pub const REGION_ACCESS_SIZE: usize = 16;

/// The largest `count` of one region read or write this server takes (the specification's
/// default `max_data_xfer_size`, 1 MiB).
pub const MAX_DATA_XFER: usize = 1 << 20;
/// The largest message this server takes: a region write of [`MAX_DATA_XFER`] bytes.
pub const MAX_MESSAGE: usize = HEADER_SIZE + REGION_ACCESS_SIZE + MAX_DATA_XFER;
/// The most file descriptors one message may carry (the `max_msg_fds` this server
/// announces).
pub const MAX_MSG_FDS: usize = 16;

/// errno values the server replies with (Linux numbering, as the protocol uses).
pub mod errno {
    /// Invalid argument: a short payload, a bad flag, an access out of range.
    pub const EINVAL: u32 = 22;
    /// The DMA map overlaps an existing one.
    pub const EEXIST: u32 = 17;
    /// Message too large.
    pub const E2BIG: u32 = 7;
    /// Unknown command.
    pub const ENOSYS: u32 = 38;
    /// Not supported (a feature this server does not offer).
    pub const ENOTSUP: u32 = 95;
    /// Bad file descriptor (a DMA map with several, or a wrong number of eventfds).
    pub const EBADF: u32 = 9;
}

/// A message header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// Message id (echoed in the reply).
    pub id: u16,
    /// Command.
    pub command: u16,
    /// Size of the whole message, header included.
    pub size: u32,
    /// Flags: type, no-reply, error.
    pub flags: u32,
    /// errno of an error reply.
    pub error: u32,
}

impl Header {
    /// Decodes a header.
    pub fn decode(b: &[u8; HEADER_SIZE]) -> Self {
        Header {
            id: u16::from_le_bytes([b[0], b[1]]),
            command: u16::from_le_bytes([b[2], b[3]]),
            size: le32(b, 4),
            flags: le32(b, 8),
            error: le32(b, 12),
        }
    }

    /// Encodes a header.
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        b[0..2].copy_from_slice(&self.id.to_le_bytes());
        b[2..4].copy_from_slice(&self.command.to_le_bytes());
        b[4..8].copy_from_slice(&self.size.to_le_bytes());
        b[8..12].copy_from_slice(&self.flags.to_le_bytes());
        b[12..16].copy_from_slice(&self.error.to_le_bytes());
        b
    }

    /// Whether the sender asked for no reply.
    pub fn no_reply(&self) -> bool {
        self.flags & FLAG_NO_REPLY != 0
    }

    /// Whether this is a reply (not a command).
    pub fn is_reply(&self) -> bool {
        self.flags & FLAG_TYPE_MASK == FLAG_TYPE_REPLY
    }
}

/// The little-endian `u32` at `off` of `b` (the caller checked the length).
pub fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// The little-endian `u64` at `off` of `b` (the caller checked the length).
pub fn le64(b: &[u8], off: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(v)
}
