//! BAR0: the initialization segment (offset 0), the clocks and health counter (0x1000), the
//! MSI-X table (0x2000) and pending bits (0x3000), and UAR pages (4 KiB each at
//! `uar_index * 4096`).
//!
//! Registers are big-endian: a 32-bit access moves the four bytes of the register in memory
//! order, so `Bar::read32` returns `u32::from_ne_bytes(register bytes)`.

use crate::device::Device;
use crate::firmware::state::{FIRST_UAR, HcaState};
use crate::log::DoorbellRecord;
use crate::pci::{MSIX_PBA_OFFSET, MSIX_TABLE_OFFSET, PCI_COMMAND_MEMORY};
use uhca_fwif::Field;
use uhca_fwif::consts::{
    BF_OFFSET, CMD_IF_REV, DB_BLUEFLAME_BUFFER_SIZE, EQ_DOORBELL_OFFSET,
    EQ_DOORBELL_UPDATE_CI_OFFSET,
};
use uhca_fwif::init_seg::{health_buffer, initial_seg};

pub use crate::firmware::state::HEALTH_TICK_NS;
/// The `nic_interface` value of a disabled NIC (fast teardown).
pub const NIC_IFC_DISABLED: u8 = 1;
/// `nic_interface_supported` reported in the initialization segment (full and disabled).
pub const NIC_IFC_SUPPORTED: u8 = 0b011;
/// UAR page size.
pub const UAR_PAGE: usize = 4096;

/// A health-buffer field as a field of the initialization segment.
fn hb(f: Field) -> Field {
    Field {
        bit_offset: initial_seg::health_buffer.bit_offset + f.bit_offset,
        ..f
    }
}

impl Device {
    /// The host-order value of the big-endian dword at `off` of the initialization
    /// segment and clock page.
    fn iseg_dword(&self, off: usize, now: u64) -> u32 {
        let fw = &self.fw;
        let (maj, min, sub) = self.config.fw_rev;
        let since = now.saturating_sub(fw.boot_ns);
        let counter = if fw.fatal.is_some() {
            fw.frozen_counter
        } else {
            ((since / HEALTH_TICK_NS) & 0x00ff_ffff) as u32
        };
        let (synd, ext) = fw.fatal.unwrap_or((0, 0));
        let timer = since;
        let fw_ver = ((maj as u32) << 24) | ((min as u32) << 16) | sub as u32;
        let log_size = self.config.log_cmdq_size as u32;
        let fields: [(Field, u32); 26] = [
            (initial_seg::fw_rev_minor, min as u32),
            (initial_seg::fw_rev_major, maj as u32),
            (initial_seg::cmd_interface_rev, CMD_IF_REV as u32),
            (initial_seg::fw_rev_subminor, sub as u32),
            (initial_seg::cmdq_phy_addr_63_32, fw.cmdq_addr_h),
            (initial_seg::cmdq_phy_addr_31_12, fw.cmdq_addr_l >> 12),
            (initial_seg::nic_interface, fw.nic_interface as u32),
            (initial_seg::log_cmdq_size, log_size),
            (
                initial_seg::log_cmdq_stride,
                uhca_fwif::cmdq::CMD_ENTRY_LOG_STRIDE as u32,
            ),
            (initial_seg::initializing, self.initializing(now) as u32),
            (
                initial_seg::nic_interface_supported,
                NIC_IFC_SUPPORTED as u32,
            ),
            (initial_seg::internal_timer_h, (timer >> 32) as u32),
            (initial_seg::internal_timer_l, timer as u32),
            (initial_seg::health_syndrome, synd as u32),
            (initial_seg::health_counter, counter),
            (hb(health_buffer::time), (since / 1_000_000_000) as u32),
            (hb(health_buffer::fw_version), fw_ver),
            (hb(health_buffer::hw_id), crate::pci::DEVICE_ID as u32),
            (hb(health_buffer::rfr), fw.fatal.is_some() as u32),
            (hb(health_buffer::valid), fw.fatal.is_some() as u32),
            (hb(health_buffer::severity), 0),
            (hb(health_buffer::irisc_index), 0),
            (hb(health_buffer::synd), synd as u32),
            (hb(health_buffer::ext_synd), ext as u32),
            (hb(health_buffer::assert_callra), 0),
            (hb(health_buffer::assert_existptr), 0),
        ];
        let rt = initial_seg::real_time.byte_offset();
        if off == rt {
            return (now >> 32) as u32;
        }
        if off == rt + 4 {
            return now as u32;
        }
        fields
            .iter()
            .filter(|(f, _)| f.within_dword() && f.dword_byte_offset() == off)
            .fold(0, |acc, (f, v)| f.into_dword(acc, *v))
    }

    /// A 32-bit BAR read, returning the register bytes in memory order.
    pub(crate) fn bar_read(&mut self, offset: usize, bytes: &mut [u8], now: u64) {
        if self.faults.pci_all_ones || self.pci.command() & PCI_COMMAND_MEMORY == 0 {
            bytes.fill(0xff);
            return;
        }
        match offset {
            0..0x2000 => {
                for (i, chunk) in bytes.chunks_mut(4).enumerate() {
                    let v = self.iseg_dword(offset + i * 4, now);
                    chunk.copy_from_slice(&v.to_be_bytes());
                }
            }
            o if (MSIX_TABLE_OFFSET..MSIX_TABLE_OFFSET + self.msix_table.len()).contains(&o) => {
                let s = o - MSIX_TABLE_OFFSET;
                let end = (s + bytes.len()).min(self.msix_table.len());
                bytes.fill(0);
                bytes[..end - s].copy_from_slice(&self.msix_table[s..end]);
            }
            _ => bytes.fill(0),
        }
    }

    /// A BAR write of `bytes` (4 or 8) in memory order.
    pub(crate) fn bar_write(&mut self, offset: usize, bytes: &[u8], now: u64) {
        if self.faults.pci_all_ones {
            return;
        }
        if self.pci.command() & PCI_COMMAND_MEMORY == 0 {
            self.note(
                now,
                format!("BAR write at {offset:#x} with memory decoding disabled"),
            );
            return;
        }
        if offset < UAR_PAGE * FIRST_UAR as usize {
            for (i, chunk) in bytes.chunks(4).enumerate() {
                let v = u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
                self.special_write32(offset + i * 4, v, now);
            }
            return;
        }
        let uar = (offset / UAR_PAGE) as u32;
        let in_page = offset % UAR_PAGE;
        let allocated = self.objs.uars.contains(&uar);
        let mut rec = DoorbellRecord {
            time_ns: now,
            uar,
            offset: in_page as u32,
            width: bytes.len() as u8,
            bytes: [0; 8],
            allocated,
        };
        rec.bytes[..bytes.len()].copy_from_slice(bytes);
        self.doorbells.push(rec);
        if !allocated {
            self.note(
                now,
                format!("doorbell write to UAR {uar} which is not allocated"),
            );
            return;
        }
        let cq_db = uhca_fwif::consts::CQ_DOORBELL;
        match (in_page, bytes.len()) {
            (o, 4) if o == EQ_DOORBELL_OFFSET || o == EQ_DOORBELL_UPDATE_CI_OFFSET => {
                let v = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
                self.eq_doorbell(uar, v, o == EQ_DOORBELL_OFFSET, now);
            }
            (o, 8) if o == cq_db => {
                let v = u64::from_be_bytes([
                    bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
                ]);
                self.firmware().cq_doorbell(uar, v, now);
                self.engine_arm_cq((v as u32) & 0x00ff_ffff, now);
            }
            (o, 8)
                if o >= BF_OFFSET && (o - BF_OFFSET).is_multiple_of(DB_BLUEFLAME_BUFFER_SIZE) =>
            {
                // A send doorbell: the first 8 bytes of a control segment (a BlueFlame copy
                // writes the rest of the WQE after them, which the engine reads from memory).
                self.send_doorbell(uar, bytes, now);
            }
            _ => {}
        }
    }

    /// Writes to the initialization segment and the pages before the first UAR.
    fn special_write32(&mut self, off: usize, v: u32, now: u64) {
        let addr_h = initial_seg::cmdq_phy_addr_63_32.dword_byte_offset();
        let addr_l = initial_seg::cmdq_phy_addr_31_12.dword_byte_offset();
        let dbell = initial_seg::command_doorbell_vector.dword_byte_offset();
        match off {
            o if o == addr_h => self.fw.cmdq_addr_h = v,
            o if o == addr_l => {
                self.fw.cmdq_addr_l = initial_seg::cmdq_phy_addr_31_12.from_dword(v) << 12;
                let ifc = initial_seg::nic_interface.from_dword(v) as u8;
                self.set_nic_interface(ifc, now);
                let ro = initial_seg::log_cmdq_size.into_dword(0, 0xf)
                    | initial_seg::log_cmdq_stride.into_dword(0, 0xf);
                if v & ro != 0 {
                    self.note(
                        now,
                        "write to read-only log_cmdq_size/log_cmdq_stride".into(),
                    );
                }
            }
            o if o == dbell => self.command_doorbell(v, now),
            o if (MSIX_TABLE_OFFSET..MSIX_TABLE_OFFSET + self.msix_table.len()).contains(&o) => {
                let s = o - MSIX_TABLE_OFFSET;
                self.msix_table[s..s + 4].copy_from_slice(&v.to_be_bytes());
            }
            o if (MSIX_PBA_OFFSET..MSIX_PBA_OFFSET + 0x1000).contains(&o) => {
                self.note(
                    now,
                    format!("write to the read-only MSI-X pending bits at {o:#x}"),
                );
            }
            o => self.note(
                now,
                format!("write of {v:#010x} to read-only BAR0 offset {o:#x}"),
            ),
        }
    }

    fn set_nic_interface(&mut self, ifc: u8, now: u64) {
        if ifc == NIC_IFC_DISABLED && self.fw.nic_interface != NIC_IFC_DISABLED {
            if self.fw.fast_teardown_prepared {
                self.objs.clear();
                self.fw.drop_objects();
                self.fw.state = HcaState::TornDown;
                self.fw.pages.released = true;
                self.fw.fast_teardown_prepared = false;
            } else {
                self.note(
                    now,
                    "nic_interface set to DISABLED without PREPARE_FAST_TEARDOWN".into(),
                );
            }
        }
        self.fw.nic_interface = ifc;
    }
}
