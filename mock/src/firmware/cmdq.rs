//! The command queue: entries and mailbox chains read through the IOMMU, delivery checks,
//! outputs written back, ownership returned, completion events posted.

use super::{Fail, Firmware, HcaState};
use crate::device::Device;
use crate::faults::CommandFault;
use crate::log::{CommandOutcome, CommandRecord};
use uhca_fwif::cmd::{AccessRegisterIn, MboxIn};
use uhca_fwif::cmdq::{CMD_INLINE_IN_BYTES, CmdLayout, CmdProtBlock};
use uhca_fwif::consts::{
    CMD_DATA_BLOCK_SIZE, CMD_OWNER_HW, CmdOpcode, CmdStatus, DeliveryStatus, EventType,
    PCI_CMD_XPORT,
};
use uhca_fwif::eqe::EqeCmd;
use zerocopy::{FromBytes, IntoBytes};

/// Entry size in bytes.
const ENTRY: usize = 64;
/// Mailbox block size in bytes.
const BLOCK: usize = core::mem::size_of::<CmdProtBlock>();
/// Alignment of `in_ptr`/`out_ptr` (`input_mailbox_pointer_31_9`).
const MBOX_PTR_ALIGN: u64 = 512;
/// Alignment of a block's `next` (`next_pointer_31_10`).
const MBOX_NEXT_ALIGN: u64 = 1024;
/// Longest input or output the model accepts (8 MiB).
pub const MAX_CMD_LEN: usize = 8 << 20;

/// The mailbox chain of one direction, checked.
struct Chain {
    blocks: Vec<u64>,
    data: Vec<u8>,
}

impl Device {
    /// A write to the command doorbell: `vector` has one bit per slot.
    pub(crate) fn command_doorbell(&mut self, vector: u32, now: u64) {
        if self.fw.fatal.is_some() {
            self.note(
                now,
                format!("command doorbell {vector:#x} ignored: firmware in fatal error"),
            );
            return;
        }
        if self.initializing(now) {
            self.note(
                now,
                format!("command doorbell {vector:#x} while firmware initializing"),
            );
            return;
        }
        if self.fw.cmdq_iova() == 0 {
            self.note(
                now,
                "command doorbell before the command queue address was set".into(),
            );
            return;
        }
        let slots = 1u32 << self.config.log_cmdq_size;
        for slot in 0..32u32 {
            if vector & (1 << slot) == 0 {
                continue;
            }
            if slot >= slots {
                self.note(
                    now,
                    format!("command doorbell for slot {slot} beyond the queue"),
                );
                continue;
            }
            self.process_slot(slot as u8, now);
        }
        self.service(now);
    }

    /// Runs the command in `slot`.
    pub(crate) fn process_slot(&mut self, slot: u8, now: u64) {
        if self.fw.hung.contains(&slot) || self.fw.deferred.contains(&slot) {
            self.note(
                now,
                format!("doorbell for slot {slot}, whose command is still executing"),
            );
            return;
        }
        let (entry_iova, entry) = match self.firmware().read_entry(slot, now) {
            Some(e) => e,
            None => {
                self.note(
                    now,
                    format!("slot {slot}: command entry unreadable; command lost"),
                );
                return;
            }
        };
        if entry.owner() != CMD_OWNER_HW {
            self.note(
                now,
                format!("doorbell for slot {slot}, which software owns"),
            );
            return;
        }
        let mut rec = CommandRecord {
            time_ns: now,
            slot,
            token: entry.token,
            opcode: CmdOpcode::Unknown(0),
            op_mod: 0,
            register_id: 0,
            delivery: DeliveryStatus::Ok,
            status: CmdStatus::Ok,
            syndrome: 0,
            outcome: CommandOutcome::Completed,
        };
        let chains = self.firmware().deliver(&entry, now);
        let (input, out_chain) = match chains {
            Ok(v) => v,
            Err(ds) => {
                rec.delivery = ds;
                rec.outcome = CommandOutcome::DeliveryError;
                if let Ok((hdr, _)) = MboxIn::read_from_prefix(entry.r#in.as_bytes()) {
                    rec.opcode = CmdOpcode::from_raw(hdr.opcode());
                    rec.op_mod = hdr.op_mod();
                }
                self.finish(entry_iova, slot, ds, None, &[], true, now);
                self.log_command(rec, entry.r#in.as_bytes(), &[]);
                return;
            }
        };
        if let Ok((hdr, _)) = MboxIn::read_from_prefix(&input[..]) {
            rec.opcode = CmdOpcode::from_raw(hdr.opcode());
            rec.op_mod = hdr.op_mod();
        }
        rec.register_id = register_id(rec.opcode, &input);
        let outlen = entry.outlen.get() as usize;
        let cmd_eq_before = self.objs.eq_for(EventType::Cmd.raw()).is_some();
        let result = match self.faults.take_command_fault(rec.opcode) {
            Some(CommandFault::Hang) => {
                rec.outcome = CommandOutcome::Hung;
                self.fw.hung.insert(slot);
                self.log_command(rec, &input, &[]);
                return;
            }
            Some(CommandFault::Fail { status, syndrome }) => {
                rec.outcome = CommandOutcome::Injected;
                Err(Fail::Cmd(status, syndrome))
            }
            None => self.execute(&input, outlen, now),
        };
        let output = match result {
            Ok(mut o) => {
                o.resize(outlen, 0);
                o
            }
            Err(Fail::Defer) => {
                rec.outcome = CommandOutcome::Deferred;
                self.fw.deferred.push(slot);
                self.log_command(rec, &input, &[]);
                return;
            }
            Err(Fail::Cmd(status, syndrome)) => {
                rec.status = status;
                rec.syndrome = syndrome;
                error_output(outlen, status, syndrome)
            }
        };
        let mut output = output;
        if let Some(filter) = &self.faults.output_filter {
            let mut f = filter.0.lock().unwrap_or_else(|e| e.into_inner());
            f(rec.opcode, &mut output);
        }
        let ds = DeliveryStatus::Ok;
        let ds = self.finish(
            entry_iova,
            slot,
            ds,
            Some(&output),
            &out_chain,
            cmd_eq_before,
            now,
        );
        rec.delivery = ds;
        self.log_command(rec, &input, &output);
    }

    /// Writes the output and gives the entry back ([`Firmware::write_back`]); posts the
    /// completion event. Returns the delivery status written.
    #[allow(clippy::too_many_arguments)]
    fn finish(
        &mut self,
        entry_iova: u64,
        slot: u8,
        ds: DeliveryStatus,
        output: Option<&[u8]>,
        out_chain: &[u64],
        event: bool,
        now: u64,
    ) -> DeliveryStatus {
        let Some(ds) = self
            .firmware()
            .write_back(entry_iova, slot, ds, output, out_chain, now)
        else {
            return ds;
        };
        // Command completion event, if an event queue asked for them (the HCA state allows
        // EQs only once initialized).
        if event && self.fw.state == HcaState::Initialized {
            let mut data = [0u8; 28];
            let cmd = EqeCmd {
                vector: (1u32 << slot).into(),
                ..Default::default()
            };
            data[..core::mem::size_of::<EqeCmd>()].copy_from_slice(cmd.as_bytes());
            self.post_event(EventType::Cmd.raw(), 0, data, now, false);
        }
        ds
    }

    /// Completes hung commands (injected) now, executing them.
    pub(crate) fn release_hung(&mut self, now: u64) {
        let slots: Vec<u8> = std::mem::take(&mut self.fw.hung).into_iter().collect();
        for s in slots {
            self.process_slot(s, now);
        }
        self.service(now);
    }

    /// Re-runs commands that waited for pages.
    pub(crate) fn retry_deferred(&mut self, now: u64) {
        let slots = std::mem::take(&mut self.fw.deferred);
        for s in slots {
            self.process_slot(s, now);
        }
    }

    /// Fails the commands that waited for pages (the driver said it cannot give them).
    pub(crate) fn fail_deferred(&mut self, now: u64) {
        let slots = std::mem::take(&mut self.fw.deferred);
        for slot in slots {
            let mut fw = self.firmware();
            let Some((entry_iova, entry)) = fw.read_entry(slot, now) else {
                continue;
            };
            let Ok((input, out_chain)) = fw.deliver(&entry, now) else {
                continue;
            };
            let outlen = entry.outlen.get() as usize;
            let synd = super::syndrome::PAGES_REFUSED;
            let o = error_output(outlen, CmdStatus::NoResErr, synd);
            let ds = self.finish(
                entry_iova,
                slot,
                DeliveryStatus::Ok,
                Some(&o),
                &out_chain,
                true,
                now,
            );
            let hdr = MboxIn::read_from_prefix(&input[..])
                .map(|(h, _)| h)
                .unwrap_or_default();
            let rec = CommandRecord {
                time_ns: now,
                slot,
                token: entry.token,
                opcode: CmdOpcode::from_raw(hdr.opcode()),
                op_mod: hdr.op_mod(),
                register_id: register_id(CmdOpcode::from_raw(hdr.opcode()), &input),
                delivery: ds,
                status: CmdStatus::NoResErr,
                syndrome: synd,
                outcome: CommandOutcome::Completed,
            };
            self.log_command(rec, &input, &o);
        }
    }
}

/// The command queue's transport, in the firmware's room: entries and mailboxes read and
/// written through the IOMMU.
impl Firmware<'_> {
    /// Reads the entry of `slot`: its IOVA and its bytes, `None` if unreadable.
    fn read_entry(&mut self, slot: u8, now: u64) -> Option<(u64, CmdLayout)> {
        let entry_iova = self.state.cmdq_iova() + slot as u64 * ENTRY as u64;
        let mut raw = [0u8; ENTRY];
        self.iommu
            .dma_read(entry_iova, &mut raw, now, "command entry")
            .ok()?;
        let entry = CmdLayout::read_from_bytes(&raw).ok()?;
        Some((entry_iova, entry))
    }

    /// Writes the output (inline part and output mailboxes) and gives the entry back with
    /// its delivery status. Returns the delivery status written (`FwErr` if the output
    /// could not be written), or `None` if ownership could not be returned (noted).
    fn write_back(
        &mut self,
        entry_iova: u64,
        slot: u8,
        mut ds: DeliveryStatus,
        output: Option<&[u8]>,
        out_chain: &[u64],
        now: u64,
    ) -> Option<DeliveryStatus> {
        if let Some(output) = output {
            let inline = output.len().min(CMD_INLINE_IN_BYTES);
            let mut out16 = [0u8; 16];
            out16[..inline].copy_from_slice(&output[..inline]);
            let mut ok = self
                .iommu
                .dma_write(entry_iova + 0x20, &out16, now, "command output")
                .is_ok();
            let rest = &output[inline..];
            for (i, chunk) in rest.chunks(CMD_DATA_BLOCK_SIZE).enumerate() {
                let Some(&blk) = out_chain.get(i) else { break };
                ok &= self
                    .iommu
                    .dma_write(blk, chunk, now, "output mailbox")
                    .is_ok();
            }
            if !ok {
                ds = DeliveryStatus::FwErr;
            }
        }
        let status_own = ds.raw() << 1;
        if self
            .iommu
            .dma_write(entry_iova + 0x3f, &[status_own], now, "command status")
            .is_err()
        {
            self.note(now, format!("slot {slot}: could not return ownership"));
            return None;
        }
        Some(ds)
    }

    /// Delivery checks; returns the input bytes and the output chain's blocks.
    fn deliver(&mut self, e: &CmdLayout, now: u64) -> Result<(Vec<u8>, Vec<u64>), DeliveryStatus> {
        if e.r#type != PCI_CMD_XPORT {
            return Err(DeliveryStatus::CmdDescrErr);
        }
        let inlen = e.inlen.get() as usize;
        let outlen = e.outlen.get() as usize;
        if !(8..=MAX_CMD_LEN).contains(&inlen) {
            return Err(DeliveryStatus::InLengthErr);
        }
        if !(8..=MAX_CMD_LEN).contains(&outlen) {
            return Err(DeliveryStatus::OutLengthErr);
        }
        let in_blocks = uhca_fwif::cmdq::mailbox_blocks(inlen);
        let out_blocks = uhca_fwif::cmdq::mailbox_blocks(outlen);
        let in_ptr = e.in_ptr.get();
        let out_ptr = e.out_ptr.get();
        if in_blocks > 0 && !in_ptr.is_multiple_of(MBOX_PTR_ALIGN) {
            return Err(DeliveryStatus::InPtrAlignErr);
        }
        if out_blocks > 0 && !out_ptr.is_multiple_of(MBOX_PTR_ALIGN) {
            return Err(DeliveryStatus::OutPtrAlignErr);
        }
        let input_chain = self.walk(in_ptr, in_blocks, e.token, true, now)?;
        let out_chain = self.walk(out_ptr, out_blocks, e.token, false, now)?;
        let mut input = Vec::with_capacity(inlen);
        input.extend_from_slice(e.r#in.as_bytes());
        input.extend_from_slice(&input_chain.data);
        input.truncate(inlen);
        Ok((input, out_chain.blocks))
    }

    /// Walks a mailbox chain of `n` blocks from `first`, checking block numbers, tokens and
    /// pointers.
    fn walk(
        &mut self,
        first: u64,
        n: usize,
        token: u8,
        input: bool,
        now: u64,
    ) -> Result<Chain, DeliveryStatus> {
        let (len_err, align_err, ctx) = if input {
            (
                DeliveryStatus::InLengthErr,
                DeliveryStatus::InPtrAlignErr,
                "input mailbox",
            )
        } else {
            (
                DeliveryStatus::OutLengthErr,
                DeliveryStatus::OutPtrAlignErr,
                "output mailbox",
            )
        };
        let mut chain = Chain {
            blocks: Vec::with_capacity(n),
            data: Vec::new(),
        };
        let mut ptr = first;
        for k in 0..n {
            if k > 0 {
                if ptr == 0 {
                    return Err(len_err);
                }
                if !ptr.is_multiple_of(MBOX_NEXT_ALIGN) {
                    return Err(align_err);
                }
            }
            let mut raw = vec![0u8; BLOCK];
            if self.iommu.dma_read(ptr, &mut raw, now, ctx).is_err() {
                return Err(DeliveryStatus::FwErr);
            }
            let Ok(b) = CmdProtBlock::read_from_bytes(&raw) else {
                return Err(DeliveryStatus::FwErr);
            };
            if b.block_num.get() as usize != k {
                return Err(DeliveryStatus::BadBlkNumErr);
            }
            if b.token != token {
                return Err(DeliveryStatus::TokErr);
            }
            chain.blocks.push(ptr);
            if input {
                chain.data.extend_from_slice(&b.data);
            }
            ptr = b.next.get();
        }
        Ok(chain)
    }
}

/// The output of a failed command: its status and syndrome, zeros to `outlen`.
fn error_output(outlen: usize, status: CmdStatus, syndrome: u32) -> Vec<u8> {
    let mut o = vec![0u8; outlen];
    o[0] = status.raw();
    o[4..8].copy_from_slice(&syndrome.to_be_bytes());
    o
}

/// ACCESS_REGISTER's `register_id` from a command's input, for the command log (0 for other
/// commands or an input too short to hold it).
fn register_id(opcode: CmdOpcode, input: &[u8]) -> u16 {
    match (opcode, AccessRegisterIn::read_from_prefix(input)) {
        (CmdOpcode::AccessReg, Ok((i, _))) => i.register_id(),
        _ => 0,
    }
}
