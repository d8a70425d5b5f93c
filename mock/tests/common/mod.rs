//! A small test driver written from the PRM: it writes command-queue entries and mailbox
//! chains into mock DMA memory, rings the doorbell through the `Bar` trait and reads the
//! output back. It uses `uhca-fwif` layouts only (not the HAL's engine).
#![allow(dead_code)]

use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::*;
use uhca_fwif::cmdq::{CmdLayout, CmdProtBlock, mailbox_blocks};
use uhca_fwif::consts::*;
use uhca_fwif::eqe::Eqe;
use uhca_hal::{Bar, Dma, DmaRegion, PciConfig};
use uhca_mock::{MockConfig, MockHca, MockPlatform};
use zerocopy::{FromBytes, IntoBytes};

/// Blocks per mailbox chain the harness provides.
pub const CHAIN_BLOCKS: usize = 64;
/// `qpc.pm_state` MIGRATED: the only path-migration state a QP context may carry (no
/// alternate paths).
pub const PM_STATE_MIGRATED: u8 = 3;
/// Stride of blocks in the chain region.
pub const BLOCK_STRIDE: u64 = 1024;
/// The command doorbell register.
pub const CMD_DBELL: usize = 0x18;

/// What the device wrote back.
#[derive(Debug, Clone)]
pub struct Raw {
    /// Whether ownership came back to software.
    pub completed: bool,
    /// Delivery status.
    pub delivery: DeliveryStatus,
    /// The output bytes (inline 16 bytes then mailbox data), `outlen` long.
    pub out: Vec<u8>,
}

impl Raw {
    pub fn status(&self) -> CmdStatus {
        CmdStatus::from_raw(self.out[0])
    }
    pub fn syndrome(&self) -> u32 {
        u32::from_be_bytes([self.out[4], self.out[5], self.out[6], self.out[7]])
    }
    pub fn as_out<T: PrmLayout>(&self) -> T {
        T::read_from_prefix(&self.out)
            .expect("output long enough")
            .0
    }
}

/// An event queue the harness created, with its buffer.
pub struct TestEq {
    pub eqn: u8,
    pub buf: DmaRegion,
    pub log_size: u8,
    pub ci: u32,
    pub uar: u32,
}

pub struct Harness {
    pub hca: MockHca,
    pub p: MockPlatform,
    pub cmdq: DmaRegion,
    pub inbox: DmaRegion,
    pub outbox: DmaRegion,
    /// Mailboxes of every slot but 0 (so two commands can be in flight).
    pub inbox2: DmaRegion,
    pub outbox2: DmaRegion,
    pub token: u8,
    pub pages: Vec<DmaRegion>,
}

impl Harness {
    /// A powered-on HCA with a command queue allocated but nothing written to the device.
    pub fn new(cfg: MockConfig) -> Self {
        let hca = MockHca::new(cfg);
        let p = hca.platform();
        let cmdq = p.alloc_coherent(4096, 4096).unwrap();
        let inbox = p
            .alloc_coherent(CHAIN_BLOCKS * BLOCK_STRIDE as usize, 4096)
            .unwrap();
        let outbox = p
            .alloc_coherent(CHAIN_BLOCKS * BLOCK_STRIDE as usize, 4096)
            .unwrap();
        let inbox2 = p
            .alloc_coherent(CHAIN_BLOCKS * BLOCK_STRIDE as usize, 4096)
            .unwrap();
        let outbox2 = p
            .alloc_coherent(CHAIN_BLOCKS * BLOCK_STRIDE as usize, 4096)
            .unwrap();
        Harness {
            hca,
            p,
            cmdq,
            inbox,
            outbox,
            inbox2,
            outbox2,
            token: 0,
            pages: Vec::new(),
        }
    }

    /// Waits for `initializing` to clear, with a timeout on the platform clock.
    pub fn wait_ready(&self) -> bool {
        use uhca_hal::Clock;
        let deadline = self.p.now_ns() + 10_000_000_000;
        while self.p.read_be32(0x1fc) & 0x8000_0000 != 0 {
            if self.p.now_ns() > deadline {
                return false;
            }
            self.p.delay_us(100);
        }
        true
    }

    pub fn set_bus_master(&self, on: bool) {
        let cmd = self.p.config_read16(4).unwrap();
        let cmd = if on { cmd | 0x4 } else { cmd & !0x4 };
        self.p.config_write16(4, cmd).unwrap();
    }

    pub fn set_cmdq_address(&self) {
        let iova = self.cmdq.iova;
        self.p.write_be32(0x10, (iova >> 32) as u32);
        self.p.write_be32(0x14, iova as u32);
    }

    /// Ready, bus master on and the command queue address written.
    pub fn started(cfg: MockConfig) -> Self {
        let h = Self::new(cfg);
        assert!(h.wait_ready());
        h.set_bus_master(true);
        h.set_cmdq_address();
        h
    }

    /// Initialized like a driver does it: ENABLE_HCA, ISSI, boot pages, host endianness,
    /// capabilities, init pages, INIT_HCA.
    pub fn initialized(cfg: MockConfig) -> Self {
        Self::initialized_at_issi(cfg, 1)
    }

    /// Initialized at interface step `issi` (0: SET_ISSI is not sent, as by a driver for
    /// firmware older than ISSI 1).
    pub fn initialized_at_issi(cfg: MockConfig, issi: u16) -> Self {
        Self::initialized_with(cfg, issi, |_| {})
    }

    /// As [`Harness::initialized_at_issi`], running `before_init` (SET_HCA_CAP, for one)
    /// just before INIT_HCA.
    pub fn initialized_with(
        cfg: MockConfig,
        issi: u16,
        before_init: impl FnOnce(&mut Harness),
    ) -> Self {
        let mut h = Self::started(cfg);
        h.ok(&EnableHcaIn::new_cmd(), &[]);
        if issi != 0 {
            let mut s = SetIssiIn::new_cmd();
            s.set_current_issi(issi);
            h.ok(&s, &[]);
        }
        h.give_outstanding(QueryPagesOpMod::BootPages);
        let mut a = AccessRegisterIn::new_cmd();
        a.set_op_mod(ACCESS_REGISTER_OP_MOD_WRITE)
            .set_register_id(REG_HOST_ENDIANNESS);
        h.ok(&a, &[0u8; 16]);
        before_init(&mut h);
        h.give_outstanding(QueryPagesOpMod::InitPages);
        h.ok(&InitHcaIn::new_cmd(), &[]);
        h
    }

    /// Initialized, with the regular pages given up front and an Ethernet port's RoCE on.
    pub fn ready(cfg: MockConfig) -> Self {
        Self::ready_with(cfg, |_| {})
    }

    /// As [`Harness::ready`], running `before_init` just before INIT_HCA.
    pub fn ready_with(cfg: MockConfig, before_init: impl FnOnce(&mut Harness)) -> Self {
        let mut h = Self::initialized_with(cfg, 1, before_init);
        h.give_outstanding(QueryPagesOpMod::RegularPages);
        h
    }

    /// Writes a command into `slot` without ringing.
    pub fn post(&mut self, slot: u8, input: &[u8], outlen: usize) -> CmdLayout {
        self.token = self.token.wrapping_add(1).max(1);
        let tok = self.token;
        let inlen = input.len();
        let (inbox, outbox) = self.boxes(slot);
        let nin = mailbox_blocks(inlen);
        let nout = mailbox_blocks(outlen);
        assert!(
            nin <= CHAIN_BLOCKS && nout <= CHAIN_BLOCKS,
            "test chain too short"
        );
        for k in 0..nin {
            let mut b = CmdProtBlock::default();
            let s = 16 + k * 512;
            let e = (s + 512).min(inlen);
            b.data[..e - s].copy_from_slice(&input[s..e]);
            b.next = if k + 1 < nin {
                inbox + (k as u64 + 1) * BLOCK_STRIDE
            } else {
                0
            }
            .into();
            b.block_num = (k as u32).into();
            b.token = tok;
            assert!(
                self.hca
                    .host_write(inbox + k as u64 * BLOCK_STRIDE, b.as_bytes())
            );
        }
        for k in 0..nout {
            let next = if k + 1 < nout {
                outbox + (k as u64 + 1) * BLOCK_STRIDE
            } else {
                0
            };
            let b = CmdProtBlock {
                next: next.into(),
                block_num: (k as u32).into(),
                token: tok,
                ..Default::default()
            };
            assert!(
                self.hca
                    .host_write(outbox + k as u64 * BLOCK_STRIDE, b.as_bytes())
            );
        }
        let mut e = CmdLayout {
            r#type: PCI_CMD_XPORT,
            ..Default::default()
        };
        e.inlen = (inlen as u32).into();
        e.outlen = (outlen as u32).into();
        e.in_ptr = if nin > 0 { inbox } else { 0 }.into();
        e.out_ptr = if nout > 0 { outbox } else { 0 }.into();
        let mut first = [0u8; 16];
        let n = inlen.min(16);
        first[..n].copy_from_slice(&input[..n]);
        e.r#in = <[zerocopy::byteorder::big_endian::U32; 4]>::read_from_bytes(&first).unwrap();
        e.token = tok;
        e.status_own = CMD_OWNER_HW;
        self.write_entry(slot, &e);
        e
    }

    /// The IOVAs of the input and output mailbox chains of `slot`.
    pub fn boxes(&self, slot: u8) -> (u64, u64) {
        if slot == 0 {
            (self.inbox.iova, self.outbox.iova)
        } else {
            (self.inbox2.iova, self.outbox2.iova)
        }
    }

    pub fn write_entry(&self, slot: u8, e: &CmdLayout) {
        assert!(
            self.hca
                .host_write(self.cmdq.iova + slot as u64 * 64, e.as_bytes())
        );
    }

    pub fn read_entry(&self, slot: u8) -> CmdLayout {
        let mut b = [0u8; 64];
        assert!(
            self.hca
                .host_read(self.cmdq.iova + slot as u64 * 64, &mut b)
        );
        CmdLayout::read_from_bytes(&b).unwrap()
    }

    pub fn ring(&self, slot: u8) {
        self.p.write_be32(CMD_DBELL, 1 << slot);
    }

    /// Reads the result in `slot` (after the doorbell).
    pub fn result(&self, slot: u8, outlen: usize) -> Raw {
        let e = self.read_entry(slot);
        let (_, outbox) = self.boxes(slot);
        let mut out = Vec::with_capacity(outlen);
        out.extend_from_slice(e.out.as_bytes());
        let mut k = 0u64;
        while out.len() < outlen {
            let mut b = [0u8; 576];
            assert!(self.hca.host_read(outbox + k * BLOCK_STRIDE, &mut b));
            out.extend_from_slice(&b[..512]);
            k += 1;
        }
        out.truncate(outlen);
        Raw {
            completed: e.owner() == CMD_OWNER_SW,
            delivery: e.delivery_status(),
            out,
        }
    }

    pub fn exec_raw_slot(&mut self, slot: u8, input: &[u8], outlen: usize) -> Raw {
        self.post(slot, input, outlen);
        self.ring(slot);
        self.result(slot, outlen)
    }

    pub fn exec_raw(&mut self, input: &[u8], outlen: usize) -> Raw {
        self.exec_raw_slot(0, input, outlen)
    }

    /// Runs a command with `extra` input bytes after its layout (a `pas` list, register
    /// data) and `extra_out` output bytes after its output layout.
    pub fn exec_ext<C: Command>(&mut self, inp: &C, extra: &[u8], extra_out: usize) -> Raw {
        let mut input = inp.as_bytes().to_vec();
        input.extend_from_slice(extra);
        let r = self.exec_raw(&input, <C::Out as PrmLayout>::SIZE + extra_out);
        assert!(
            r.completed,
            "command {:#x} did not complete",
            inp.get(mbox_in::opcode)
        );
        assert_eq!(r.delivery, DeliveryStatus::Ok);
        r
    }

    pub fn exec<C: Command>(&mut self, inp: &C, extra: &[u8]) -> Raw {
        self.exec_ext(inp, extra, 0)
    }

    /// Runs a command that must succeed; returns its output.
    pub fn ok<C: Command>(&mut self, inp: &C, extra: &[u8]) -> C::Out {
        let r = self.exec(inp, extra);
        assert_eq!(
            r.status(),
            CmdStatus::Ok,
            "command {:#x} failed with syndrome {:#x}",
            inp.get(mbox_in::opcode),
            r.syndrome()
        );
        r.as_out()
    }

    /// Runs a command that must fail; returns (status, syndrome).
    pub fn err<C: Command>(&mut self, inp: &C, extra: &[u8]) -> (CmdStatus, u32) {
        let r = self.exec(inp, extra);
        assert_ne!(
            r.status(),
            CmdStatus::Ok,
            "command {:#x} succeeded",
            inp.get(mbox_in::opcode)
        );
        (r.status(), r.syndrome())
    }

    pub fn query_pages(&mut self, which: QueryPagesOpMod) -> u32 {
        let mut q = QueryPagesIn::new_cmd();
        q.set_op_mod(which.raw());
        self.ok(&q, &[]).num_pages()
    }

    /// Allocates `n` pages and returns their IOVAs (kept alive by the harness).
    pub fn alloc_pages(&mut self, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| {
                let r = self.p.alloc_coherent(4096, 4096).unwrap();
                let iova = r.iova;
                self.pages.push(r);
                iova
            })
            .collect()
    }

    pub fn give(&mut self, pages: &[u64]) -> Raw {
        let mut m = ManagePagesIn::new_cmd();
        m.set_function_id(uhca_mock::firmware::FUNCTION_ID);
        m.set_op_mod(ManagePagesOpMod::Give.raw())
            .set_input_num_entries(pages.len() as u32);
        self.exec(&m, &pas_bytes(pages))
    }

    pub fn give_outstanding(&mut self, which: QueryPagesOpMod) -> usize {
        let n = self.query_pages(which) as usize;
        if n > 0 {
            let pages = self.alloc_pages(n);
            let r = self.give(&pages);
            assert_eq!(
                r.status(),
                CmdStatus::Ok,
                "give: syndrome {:#x}",
                r.syndrome()
            );
        }
        n
    }

    /// The current general capabilities (QUERY_HCA_CAP, `cmd_hca_cap`, current values).
    pub fn general_caps(&mut self) -> uhca_fwif::ctx::CmdHcaCap {
        let mut q = QueryHcaCapIn::new_cmd();
        q.set_op_mod(query_hca_cap_op_mod(
            HcaCapType::General,
            HcaCapMode::GetCur,
        ));
        *self.ok(&q, &[]).cmd_hca_cap()
    }

    pub fn alloc_uar(&mut self) -> u32 {
        self.ok(&AllocUarIn::new_cmd(), &[]).uar()
    }

    pub fn alloc_pd(&mut self) -> u32 {
        self.ok(&AllocPdIn::new_cmd(), &[]).pd()
    }

    /// CREATE_EQ input for an EQ of 2^log_size entries subscribed to `events`.
    pub fn create_eq_in(
        &mut self,
        uar: u32,
        log_size: u8,
        events: &[EventType],
    ) -> (CreateEqIn, DmaRegion) {
        let bytes = 64usize << log_size;
        let buf = self.p.alloc_coherent(bytes.max(4096), 4096).unwrap();
        // Every EQE starts owned by hardware (owner bit 1).
        let mut init = vec![0u8; bytes];
        for e in init.chunks_mut(64) {
            e[63] = 1;
        }
        assert!(self.hca.host_write(buf.iova, &init));
        let mut c = CreateEqIn::new_cmd();
        c.eq_context_entry_mut()
            .set_log_eq_size(log_size)
            .set_uar_page(uar)
            .set_intr(0);
        let mask: u64 = events.iter().fold(0, |m, e| m | 1u64 << e.raw());
        c.event_bitmask_mut()[..8].copy_from_slice(&mask.to_be_bytes());
        (c, buf)
    }

    pub fn create_eq(&mut self, uar: u32, log_size: u8, events: &[EventType]) -> TestEq {
        let (c, buf) = self.create_eq_in(uar, log_size, events);
        let pages = pages_of(&buf, 64 << log_size);
        let eqn = self.ok(&c, &pas_bytes(&pages)).eq_number();
        TestEq {
            eqn,
            buf,
            log_size,
            ci: 0,
            uar,
        }
    }

    /// Reads the valid EQEs of `eq` (owner-bit protocol) and advances its consumer index
    /// (no doorbell).
    pub fn poll_eq(&self, eq: &mut TestEq) -> Vec<Eqe> {
        let mut out = Vec::new();
        for _ in 0..(1u32 << eq.log_size) {
            let idx = (eq.ci & ((1 << eq.log_size) - 1)) as u64;
            let mut b = [0u8; 64];
            assert!(self.hca.host_read(eq.buf.iova + idx * 64, &mut b));
            let eqe = Eqe::read_from_bytes(&b).unwrap();
            if eqe.owner_bit() as u32 != (eq.ci >> eq.log_size) & 1 {
                break;
            }
            out.push(eqe);
            eq.ci += 1;
        }
        out
    }

    /// Writes the EQ doorbell (update CI and arm).
    pub fn eq_doorbell(&self, eq: &TestEq, arm: bool) {
        let off = if arm {
            EQ_DOORBELL_OFFSET
        } else {
            EQ_DOORBELL_UPDATE_CI_OFFSET
        };
        self.p.write_be32(
            eq.uar as usize * 4096 + off,
            uhca_fwif::doorbell::eq_doorbell(eq.eqn, eq.ci),
        );
    }

    /// A CQ of 2^log_size 64-byte CQEs bound to `eqn`.
    pub fn create_cq(&mut self, uar: u32, eqn: u8, log_size: u8) -> u32 {
        let (c, pages) = self.create_cq_in(uar, eqn, log_size);
        self.ok(&c, &pas_bytes(&pages)).cqn()
    }

    pub fn create_cq_in(&mut self, uar: u32, eqn: u8, log_size: u8) -> (CreateCqIn, Vec<u64>) {
        let bytes = 64usize << log_size;
        let buf = self.p.alloc_coherent(bytes.max(4096), 4096).unwrap();
        let dbr = self.p.alloc_coherent(64, 64).unwrap();
        let mut c = CreateCqIn::new_cmd();
        c.cq_context_mut()
            .set_log_cq_size(log_size)
            .set_uar_page(uar)
            .set_c_eqn_or_apu_element(eqn as u32)
            .set_dbr_addr(dbr.iova);
        let pages = pages_of(&buf, bytes);
        self.pages.push(buf);
        self.pages.push(dbr);
        (c, pages)
    }

    /// CREATE_QP input for a QP of type `st` with 2^4 SQ and RQ entries.
    pub fn create_qp_in(
        &mut self,
        st: QpServiceType,
        pd: u32,
        cqn: u32,
        uar: u32,
    ) -> (CreateQpIn, Vec<u64>) {
        let rq = 16 * 64;
        let sq = 16 * 64;
        let buf = self.p.alloc_coherent(rq + sq, 4096).unwrap();
        let dbr = self.p.alloc_coherent(64, 64).unwrap();
        let mut c = CreateQpIn::new_cmd();
        c.qpc_mut().set_pm_state(PM_STATE_MIGRATED);
        c.qpc_mut()
            .set_st(st.raw())
            .set_pm_state(3)
            .set_pd(pd)
            .set_uar_page(uar)
            .set_log_rq_size(4)
            .set_log_rq_stride(2)
            .set_log_sq_size(4)
            .set_cqn_snd(cqn)
            .set_cqn_rcv(cqn)
            .set_dbr_addr(dbr.iova);
        let pages = pages_of(&buf, rq + sq);
        self.pages.push(buf);
        self.pages.push(dbr);
        (c, pages)
    }

    pub fn create_qp(&mut self, st: QpServiceType, pd: u32, cqn: u32, uar: u32) -> u32 {
        let (c, pages) = self.create_qp_in(st, pd, cqn, uar);
        self.ok(&c, &pas_bytes(&pages)).qpn()
    }

    /// Programs GID index `idx` with a RoCE v2 IPv4 address.
    pub fn set_gid(&mut self, idx: u16) {
        let mut s = SetRoceAddressIn::new_cmd();
        s.set_roce_address_index(idx);
        let a = s.roce_address_mut();
        a.source_l3_address_mut()[10..].copy_from_slice(&[0xff, 0xff, 192, 168, 0, 1]);
        a.set_roce_version(2)
            .set_roce_l3_type(0)
            .set_source_mac_47_32(0x02c0)
            .set_source_mac_31_0(0xffee0001);
        self.ok(&s, &[]);
    }

    pub fn enable_roce(&mut self) {
        let mut m = ModifyNicVportContextIn::new_cmd();
        m.field_select_mut().set_roce_en(true);
        m.nic_vport_context_mut().set_roce_en(true);
        self.ok(&m, &[]);
    }
}

/// A ready HCA with what the QP tests start from: a UAR, a PD, an EQ of 16 entries and a
/// CQ of 64 entries on it.
pub struct Setup {
    pub h: Harness,
    pub pd: u32,
    pub uar: u32,
    pub cqn: u32,
}

/// A [`Setup`] on an HCA with configuration `cfg`.
pub fn setup(cfg: MockConfig) -> Setup {
    let mut h = Harness::ready(cfg);
    let uar = h.alloc_uar();
    let pd = h.alloc_pd();
    let eq = h.create_eq(uar, 4, &[]);
    let cqn = h.create_cq(uar, eq.eqn, 6);
    Setup { h, pd, uar, cqn }
}

impl Setup {
    /// CREATE_QP of a QP of service type `st` in the set-up's PD, on its CQ and UAR.
    pub fn create_qp(&mut self, st: QpServiceType) -> u32 {
        self.h.create_qp(st, self.pd, self.cqn, self.uar)
    }

    /// A CREATE_QP input of service type `st` with protection domain `pd`, on the set-up's
    /// CQ and UAR, with its page list.
    pub fn create_qp_in(&mut self, st: QpServiceType, pd: u32) -> (CreateQpIn, Vec<u64>) {
        self.h.create_qp_in(st, pd, self.cqn, self.uar)
    }

    /// The status and syndrome of a CREATE_QP the model refuses.
    pub fn create_qp_err(&mut self, c: &CreateQpIn, pages: &[u64]) -> (CmdStatus, u32) {
        self.h.err(c, &pas_bytes(pages))
    }
}

/// The 4 KiB page IOVAs covering `len` bytes of `r`.
pub fn pages_of(r: &DmaRegion, len: usize) -> Vec<u64> {
    (0..len.div_ceil(4096))
        .map(|i| r.iova + i as u64 * 4096)
        .collect()
}

/// A `pas` array as bytes.
pub fn pas_bytes(pages: &[u64]) -> Vec<u8> {
    pages.iter().flat_map(|p| p.to_be_bytes()).collect()
}
pub mod verbs;
