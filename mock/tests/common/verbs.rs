//! A tiny raw "verbs driver" written from the PRM for the datapath tests: PD, memory keys,
//! CQs and QPs through commands, WQEs written into the SQ and RQ buffers from `uhca-fwif`
//! layouts, doorbell records and UAR doorbells, CQEs read with the owner-bit rule. It uses
//! neither the HAL's rings nor the driver.

use super::{Harness, PM_STATE_MIGRATED, TestEq, pages_of, pas_bytes};
use uhca_fwif::cmd::*;
use uhca_fwif::consts::*;
use uhca_fwif::cqe::{Cqe64, ErrCqe};
use uhca_fwif::wqe::{
    Av, INVALID_LKEY, WqeAtomicSeg, WqeCtrlSeg, WqeDataSeg, WqeInlineSeg, WqeRaddrSeg, WqeXrcSeg,
};
use uhca_hal::{Bar, Dma, DmaRegion};
use uhca_mock::{Fabric, LinkLayer, MockConfig};
use zerocopy::{FromBytes, IntoBytes};

/// One HCA brought up with a UAR, a PD, an EQ and (Ethernet) RoCE with GID 0.
pub struct Node {
    pub h: Harness,
    pub uar: u32,
    pub pd: u32,
    pub eq: TestEq,
    pub ip: [u8; 4],
    pub mac: [u8; 6],
    pub link: LinkLayer,
    pub keep: Vec<DmaRegion>,
    pub ip6: [u8; 16],
}

/// A memory region: a DMA buffer and its key.
#[derive(Clone, Copy, Debug)]
pub struct Mr {
    pub key: u32,
    pub iova: u64,
    pub len: usize,
}

pub struct Cq {
    pub cqn: u32,
    pub buf: u64,
    pub dbr: u64,
    pub log: u8,
    pub ci: u32,
}

/// A completion as the test reads it.
#[derive(Clone, Copy, Debug)]
pub struct Wc {
    pub opcode: CqeOpcode,
    pub cqe: Cqe64,
    pub err: ErrCqe,
}

impl Wc {
    pub fn syndrome(&self) -> CqeSyndrome {
        self.err.syndrome()
    }
    pub fn byte_cnt(&self) -> u32 {
        self.cqe.byte_cnt.get()
    }
    pub fn wqe_counter(&self) -> u16 {
        self.cqe.wqe_counter.get()
    }
    pub fn qpn(&self) -> u32 {
        self.cqe.qpn()
    }
    pub fn imm(&self) -> u32 {
        self.cqe.immediate.get()
    }
}

pub struct Qp {
    pub qpn: u32,
    pub st: QpServiceType,
    pub buf: u64,
    pub dbr: u64,
    pub log_sq: u8,
    pub log_rq: u8,
    pub log_stride: u8,
    pub sq_pi: u16,
    pub rq_pi: u32,
}

impl Qp {
    /// The handle of QP `qpn` of service type `st` with no receive queue of its own: a send
    /// queue of 2^`log_sq` WQEBBs, its doorbell record at `dbr`, nothing posted. `buf` is
    /// where the WQE writer takes the queues to start: a receive queue of one 16-byte WQE
    /// (`log_rq` 0, `log_stride` 0), then the send queue; a send queue at `sq` is `sq - 16`.
    pub fn without_rq(qpn: u32, st: QpServiceType, buf: u64, dbr: u64, log_sq: u8) -> Qp {
        Qp {
            qpn,
            st,
            buf,
            dbr,
            log_sq,
            log_rq: 0,
            log_stride: 0,
            sq_pi: 0,
            rq_pi: 0,
        }
    }
}

/// A send work request.
#[derive(Clone, Debug, Default)]
pub struct Wr {
    pub opcode: Option<WqeOpcode>,
    pub sges: Vec<(u32, u64, u32)>,
    pub inline: Option<Vec<u8>>,
    pub raddr: Option<(u64, u32)>,
    pub atomic: Option<(u64, u64)>,
    pub imm: u32,
    pub signaled: bool,
    pub solicited: bool,
    pub fence: bool,
    pub av: Option<Av>,
    /// Write only the first 16 bytes of `av` (the compact address vector).
    pub compact_av: bool,
    /// XRC: the remote XRC SRQ, written in an XRC segment right after the control segment.
    pub xrc_srqn: Option<u32>,
}

/// Connection parameters of an RC/UC QP.
#[derive(Clone, Copy, Debug)]
pub struct Conn {
    pub mtu: IbMtu,
    pub psn: u32,
    pub retry_count: u8,
    pub rnr_retry: u8,
    pub ack_timeout: u8,
    pub min_rnr_nak: u8,
    /// Source GID index; index 1 is the node's IPv6 GID (see [`Node::add_ipv6_gid`]).
    pub gid_index: u8,
    /// InfiniBand: send a GRH (to the peer's link-local GID).
    pub grh: bool,
    /// Queue counter set (0: none).
    pub counter_set_id: u8,
    /// Leave the QP in RTR (a pure responder).
    pub stop_at_rtr: bool,
}

impl Default for Conn {
    fn default() -> Self {
        Conn {
            mtu: IbMtu::Mtu1024,
            psn: 0x10,
            retry_count: 7,
            rnr_retry: 7,
            ack_timeout: 14,
            min_rnr_nak: 1,
            gid_index: 0,
            grh: false,
            counter_set_id: 0,
            stop_at_rtr: false,
        }
    }
}

impl Node {
    /// Brings up HCA `n` (1, 2, ...) of a fabric of `link` and attaches it.
    pub fn new(fabric: &Fabric, link: LinkLayer, n: u8) -> Node {
        Self::with_ip(fabric, link, n, [192, 168, 0, n])
    }

    /// As [`Node::new`], with the IPv4 address of GID 0.
    pub fn with_ip(fabric: &Fabric, link: LinkLayer, n: u8, ip: [u8; 4]) -> Node {
        Self::with_setup(fabric, link, n, ip, |_| {})
    }

    /// As [`Node::new`], with 8-byte atomics in the host's byte order: SET_HCA_CAP of the
    /// atomic capability with `atomic_req_8B_endianness_mode` 1 before INIT_HCA, as
    /// Linux's `handle_hca_cap_atomic` sets it.
    pub fn with_host_order_atomics(fabric: &Fabric, link: LinkLayer, n: u8) -> Node {
        Self::with_setup(fabric, link, n, [192, 168, 0, n], |h| {
            let mut s = SetHcaCapIn::new_cmd();
            s.set_op_mod(set_hca_cap_op_mod(HcaCapType::Atomic));
            let mut a = uhca_fwif::ctx::AtomicCaps::default();
            a.set_atomic_req_8B_endianness_mode(ATOMIC_REQ_MODE_HOST_ENDIANNESS);
            s.capability_mut()[..<uhca_fwif::ctx::AtomicCaps as uhca_fwif::PrmLayout>::SIZE]
                .copy_from_slice(a.as_bytes());
            h.ok(&s, &[]);
        })
    }

    /// As [`Node::with_ip`], running `before_init` on the harness before INIT_HCA.
    pub fn with_setup(
        fabric: &Fabric,
        link: LinkLayer,
        n: u8,
        ip: [u8; 4],
        before_init: impl FnOnce(&mut Harness),
    ) -> Node {
        let mac = [0x02, 0xc0, 0xff, 0xee, 0x00, n];
        let cfg = match link {
            LinkLayer::Ethernet => MockConfig {
                mac,
                ..MockConfig::ethernet()
            },
            LinkLayer::InfiniBand => MockConfig {
                mac,
                ..MockConfig::infiniband()
            },
        };
        let mut h = Harness::ready_with(cfg, before_init);
        let uar = h.alloc_uar();
        let pd = h.alloc_pd();
        let eq = h.create_eq(
            uar,
            6,
            &[
                EventType::CqError,
                EventType::CommEst,
                EventType::WqAccessError,
                EventType::WqInvalReqError,
                EventType::SrqLastWqe,
                EventType::SrqRqLimit,
            ],
        );
        if link == LinkLayer::Ethernet {
            h.enable_roce();
            let mut s = SetRoceAddressIn::new_cmd();
            s.set_roce_address_index(0);
            let a = s.roce_address_mut();
            a.source_l3_address_mut()[10..]
                .copy_from_slice(&[0xff, 0xff, ip[0], ip[1], ip[2], ip[3]]);
            a.set_roce_version(2)
                .set_roce_l3_type(0)
                .set_source_mac_47_32(u16::from_be_bytes([mac[0], mac[1]]))
                .set_source_mac_31_0(u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]));
            h.ok(&s, &[]);
        }
        fabric.attach(&h.hca);
        Node {
            h,
            uar,
            pd,
            eq,
            ip,
            mac,
            link,
            keep: Vec::new(),
            ip6: [0; 16],
        }
    }

    /// Programs GID index 1 with a RoCE v2 IPv6 address fd00::n.
    pub fn add_ipv6_gid(&mut self, n: u8) {
        let mut g = [0u8; 16];
        g[0] = 0xfd;
        g[15] = n;
        let mut s = SetRoceAddressIn::new_cmd();
        s.set_roce_address_index(1);
        let a = s.roce_address_mut();
        a.source_l3_address_mut().copy_from_slice(&g);
        let mac = self.mac;
        a.set_roce_version(2)
            .set_roce_l3_type(1)
            .set_source_mac_47_32(u16::from_be_bytes([mac[0], mac[1]]))
            .set_source_mac_31_0(u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]));
        self.h.ok(&s, &[]);
        self.ip6 = g;
    }

    fn alloc(&mut self, len: usize) -> u64 {
        let r = self.h.p.alloc_coherent(len.max(64), 4096).unwrap();
        let iova = r.iova;
        self.keep.push(r);
        iova
    }

    /// A memory region of `len` bytes in PD `pd` with the given rights (lr and lw always).
    pub fn mr_in(&mut self, pd: u32, len: usize, rw: bool, rr: bool, a: bool) -> Mr {
        let iova = self.alloc(len);
        let mut c = CreateMkeyIn::new_cmd();
        c.memory_key_mkey_entry_mut()
            .set_access_mode_1_0(0)
            .set_lr(true)
            .set_lw(true)
            .set_rw(rw)
            .set_rr(rr)
            .set_a(a)
            .set_qpn(0xff_ffff)
            .set_mkey_7_0(0x42)
            .set_pd(pd)
            .set_start_addr(iova)
            .set_len(len as u64);
        let idx = self.h.ok(&c, &[]).mkey_index();
        Mr {
            key: (idx << 8) | 0x42,
            iova,
            len,
        }
    }

    pub fn mr(&mut self, len: usize) -> Mr {
        let pd = self.pd;
        self.mr_in(pd, len, true, true, true)
    }

    pub fn destroy_mr(&mut self, mr: &Mr) {
        let mut d = DestroyMkeyIn::new_cmd();
        d.set_mkey_index(mr.key >> 8);
        self.h.ok(&d, &[]);
    }

    pub fn write(&self, mr: &Mr, off: usize, data: &[u8]) {
        assert!(self.h.hca.host_write(mr.iova + off as u64, data));
    }

    pub fn read(&self, mr: &Mr, off: usize, len: usize) -> Vec<u8> {
        let mut b = vec![0u8; len];
        assert!(self.h.hca.host_read(mr.iova + off as u64, &mut b));
        b
    }

    /// A CQ of 2^log 64-byte CQEs on the node's EQ (every CQE starts invalid, owner 1).
    pub fn cq(&mut self, log: u8) -> Cq {
        self.cq_with_page_offset(log, 0)
    }

    /// As [`Node::cq`], the CQEs starting `page_offset` 64ths of a 4 KiB page into the first
    /// page of the page list (`cqc.page_offset`, as Linux sets it for a user buffer).
    pub fn cq_with_page_offset(&mut self, log: u8, page_offset: u8) -> Cq {
        let start = page_offset as usize * (4096 / 64);
        let bytes = 64usize << log;
        let span = start + bytes;
        let pages0 = self.alloc(span.max(4096));
        let buf = pages0 + start as u64;
        let dbr = self.alloc(64);
        let mut init = vec![0u8; bytes];
        for c in init.chunks_mut(64) {
            c[63] = (CqeOpcode::Invalid.raw() << 4) | 1;
        }
        assert!(self.h.hca.host_write(buf, &init));
        let mut c = CreateCqIn::new_cmd();
        c.cq_context_mut()
            .set_log_cq_size(log)
            .set_page_offset(page_offset)
            .set_uar_page(self.uar)
            .set_c_eqn_or_apu_element(self.eq.eqn as u32)
            .set_dbr_addr(dbr);
        let pages: Vec<u64> = (0..span.div_ceil(4096))
            .map(|i| pages0 + i as u64 * 4096)
            .collect();
        let cqn = self.h.ok(&c, &pas_bytes(&pages)).cqn();
        Cq {
            cqn,
            buf,
            dbr,
            log,
            ci: 0,
        }
    }

    /// Polls one CQE (owner-bit rule), advancing the consumer index and its record.
    pub fn poll(&self, cq: &mut Cq) -> Option<Wc> {
        let idx = (cq.ci & ((1 << cq.log) - 1)) as u64;
        let mut b = [0u8; 64];
        assert!(self.h.hca.host_read(cq.buf + idx * 64, &mut b));
        let op = CqeOpcode::from_raw(b[63] >> 4);
        let owner = (b[63] & 1) as u32;
        if op == CqeOpcode::Invalid || owner != (cq.ci >> cq.log) & 1 {
            return None;
        }
        cq.ci += 1;
        assert!(
            self.h
                .hca
                .host_write(cq.dbr, &(cq.ci & 0xff_ffff).to_be_bytes())
        );
        Some(Wc {
            opcode: op,
            cqe: Cqe64::read_from_bytes(&b).unwrap(),
            err: ErrCqe::read_from_bytes(&b).unwrap(),
        })
    }

    pub fn poll_all(&self, cq: &mut Cq) -> Vec<Wc> {
        let mut v = Vec::new();
        while let Some(w) = self.poll(cq) {
            v.push(w);
        }
        v
    }

    /// Arms the CQ for the next completion (record then UAR doorbell).
    pub fn arm(&self, cq: &Cq, sn: u32, solicited: bool) {
        let word = uhca_fwif::doorbell::cq_arm_word(sn, solicited, cq.ci);
        assert!(self.h.hca.host_write(cq.dbr + 4, &word.to_be_bytes()));
        let v = uhca_fwif::doorbell::cq_uar_doorbell(word, cq.cqn);
        self.h.p.write64(
            self.uar as usize * 4096 + CQ_DOORBELL,
            u64::from_ne_bytes(v.to_be_bytes()),
        );
    }

    /// A QP with 2^6 SQ WQEBBs and 2^6 RQ WQEs of 4 SGEs.
    pub fn qp(&mut self, st: QpServiceType, scq: &Cq, rcq: &Cq) -> Qp {
        let pd = self.pd;
        self.qp_in(st, pd, scq, rcq)
    }

    pub fn qp_in(&mut self, st: QpServiceType, pd: u32, scq: &Cq, rcq: &Cq) -> Qp {
        self.qp_with_user_index(st, pd, scq, rcq, 0)
    }

    /// As [`Node::qp_in`], with `qpc.user_index` set (what CQEs of version 1 carry in
    /// `srqn_uidx` to name the QP).
    pub fn qp_with_user_index(
        &mut self,
        st: QpServiceType,
        pd: u32,
        scq: &Cq,
        rcq: &Cq,
        user_index: u32,
    ) -> Qp {
        let (log_sq, log_rq, log_stride) = (6u8, 6u8, 2u8);
        let rq = (1usize << log_rq) * (16 << log_stride);
        let sq = (1usize << log_sq) * 64;
        let buf = self.alloc(rq + sq);
        let dbr = self.alloc(64);
        let mut c = CreateQpIn::new_cmd();
        c.qpc_mut().set_pm_state(PM_STATE_MIGRATED);
        c.qpc_mut()
            .set_st(st.raw())
            .set_pm_state(3)
            .set_pd(pd)
            .set_uar_page(self.uar)
            .set_log_rq_size(log_rq)
            .set_log_rq_stride(log_stride)
            .set_log_sq_size(log_sq)
            .set_cqn_snd(scq.cqn)
            .set_cqn_rcv(rcq.cqn)
            .set_user_index(user_index)
            .set_dbr_addr(dbr);
        let pages: Vec<u64> = (0..(rq + sq).div_ceil(4096))
            .map(|i| buf + i as u64 * 4096)
            .collect();
        let qpn = self.h.ok(&c, &pas_bytes(&pages)).qpn();
        let _ = pages_of;
        Qp {
            qpn,
            st,
            buf,
            dbr,
            log_sq,
            log_rq,
            log_stride,
            sq_pi: 0,
            rq_pi: 0,
        }
    }

    /// As [`Node::qp`], with the work queue starting `page_offset` 64ths of a page into
    /// its first page (`qpc.page_offset`, as Linux sets it for a user buffer that does not
    /// start on a page of the size it chose).
    pub fn qp_with_page_offset(&mut self, st: QpServiceType, cq: &Cq, page_offset: u8) -> Qp {
        let (log_sq, log_rq, log_stride) = (6u8, 6u8, 2u8);
        let rq = (1usize << log_rq) * (16 << log_stride);
        let sq = (1usize << log_sq) * 64;
        let start = page_offset as usize * (4096 / 64);
        let pages0 = self.alloc(start + rq + sq);
        let dbr = self.alloc(64);
        let mut c = CreateQpIn::new_cmd();
        c.qpc_mut()
            .set_pm_state(PM_STATE_MIGRATED)
            .set_st(st.raw())
            .set_pd(self.pd)
            .set_uar_page(self.uar)
            .set_log_rq_size(log_rq)
            .set_log_rq_stride(log_stride)
            .set_log_sq_size(log_sq)
            .set_page_offset(page_offset)
            .set_cqn_snd(cq.cqn)
            .set_cqn_rcv(cq.cqn)
            .set_dbr_addr(dbr);
        let pages: Vec<u64> = (0..(start + rq + sq).div_ceil(4096))
            .map(|i| pages0 + i as u64 * 4096)
            .collect();
        let qpn = self.h.ok(&c, &pas_bytes(&pages)).qpn();
        Qp {
            qpn,
            st,
            buf: pages0 + start as u64,
            dbr,
            log_sq,
            log_rq,
            log_stride,
            sq_pi: 0,
            rq_pi: 0,
        }
    }

    /// A REG_UMR QP as Linux makes it (no PD, no receive queue), in RTS. Its send queue
    /// starts at the buffer's start: the returned `buf` is set back by the 16-byte receive
    /// queue that `log_rq` 0 and `log_stride` 0 describe, so `write_send` finds it.
    pub fn umr_qp(&mut self, cq: &Cq) -> Qp {
        let log_sq = 4u8;
        let buf = self.alloc((1usize << log_sq) * 64);
        let dbr = self.alloc(64);
        let mut c = CreateQpIn::new_cmd();
        c.qpc_mut()
            .set_pm_state(PM_STATE_MIGRATED)
            .set_st(QpServiceType::RegUmr.raw())
            .set_uar_page(self.uar)
            .set_rq_type(3)
            .set_log_sq_size(log_sq)
            .set_cqn_snd(cq.cqn)
            .set_cqn_rcv(cq.cqn)
            .set_dbr_addr(dbr);
        let qpn = self.h.ok(&c, &pas_bytes(&[buf])).qpn();
        let qp = Qp::without_rq(qpn, QpServiceType::RegUmr, buf - 16, dbr, log_sq);
        let mut m = Rst2initQpIn::new_cmd();
        m.set_qpn(qpn);
        m.qpc_mut()
            .set_pm_state(PM_STATE_MIGRATED)
            .primary_address_path_mut()
            .set_vhca_port_num(1);
        self.h.ok(&m, &[]);
        let mut r = Init2rtrQpIn::new_cmd();
        r.set_qpn(qpn);
        r.qpc_mut()
            .set_pm_state(PM_STATE_MIGRATED)
            .set_mtu(IbMtu::Mtu4096.raw())
            .set_log_msg_max(12);
        self.h.ok(&r, &[]);
        let mut t = Rtr2rtsQpIn::new_cmd();
        t.set_qpn(qpn);
        t.qpc_mut().set_pm_state(PM_STATE_MIGRATED);
        self.h.ok(&t, &[]);
        qp
    }

    /// RST → INIT → RTR → RTS for an RC or UC QP towards `peer_qpn` on `peer`.
    pub fn connect(&mut self, qp: &Qp, peer: &Node, peer_qpn: u32, c: Conn) {
        let mut m = Rst2initQpIn::new_cmd();
        m.qpc_mut().set_pm_state(PM_STATE_MIGRATED);
        m.set_qpn(qp.qpn);
        m.qpc_mut()
            .set_rre(true)
            .set_rwe(true)
            .set_rae(true)
            .set_counter_set_id(c.counter_set_id)
            .primary_address_path_mut()
            .set_vhca_port_num(1);
        self.h.ok(&m, &[]);
        let mut m = Init2rtrQpIn::new_cmd();
        m.qpc_mut().set_pm_state(PM_STATE_MIGRATED);
        m.set_qpn(qp.qpn);
        m.qpc_mut()
            .set_mtu(c.mtu.raw())
            .set_log_msg_max(30)
            .set_remote_qpn(peer_qpn)
            .set_next_rcv_psn(c.psn)
            .set_log_rra_max(4)
            .set_min_rnr_nak(c.min_rnr_nak);
        let p = m.qpc_mut().primary_address_path_mut();
        p.set_vhca_port_num(1);
        match self.link {
            LinkLayer::Ethernet => {
                let mut g = [0u8; 16];
                g[10] = 0xff;
                g[11] = 0xff;
                g[12..].copy_from_slice(&peer.ip);
                if c.gid_index == 1 {
                    g = peer.ip6;
                }
                p.rgid_rip_mut().copy_from_slice(&g);
                p.set_src_addr_index(c.gid_index)
                    .set_hop_limit(64)
                    .set_udp_sport(0xc000 | (qp.qpn as u16 & 0x3fff))
                    .set_rmac_47_32(u16::from_be_bytes([peer.mac[0], peer.mac[1]]))
                    .set_rmac_31_0(u32::from_be_bytes([
                        peer.mac[2],
                        peer.mac[3],
                        peer.mac[4],
                        peer.mac[5],
                    ]));
            }
            LinkLayer::InfiniBand => {
                p.set_rlid(peer.h.hca.lid());
                if c.grh {
                    let mut g = [0u8; 16];
                    g[..8].copy_from_slice(&0xfe80_0000_0000_0000u64.to_be_bytes());
                    g[8..].copy_from_slice(&peer.h.hca.config().node_guid().to_be_bytes());
                    p.rgid_rip_mut().copy_from_slice(&g);
                    p.set_grh(true).set_hop_limit(2).set_src_addr_index(0);
                }
            }
        }
        self.h.ok(&m, &[]);
        if c.stop_at_rtr {
            return;
        }
        let mut m = Rtr2rtsQpIn::new_cmd();
        m.qpc_mut().set_pm_state(PM_STATE_MIGRATED);
        m.set_qpn(qp.qpn);
        m.qpc_mut()
            .set_next_send_psn(c.psn)
            .set_retry_count(c.retry_count)
            .set_rnr_retry(c.rnr_retry)
            .set_log_sra_max(4);
        m.qpc_mut()
            .primary_address_path_mut()
            .set_ack_timeout(c.ack_timeout);
        self.h.ok(&m, &[]);
    }

    /// RST → INIT → RTR → RTS for a UD QP with `qkey`.
    pub fn ud_ready(&mut self, qp: &Qp, qkey: u32) {
        let mut m = Rst2initQpIn::new_cmd();
        m.qpc_mut().set_pm_state(PM_STATE_MIGRATED);
        m.set_qpn(qp.qpn);
        m.qpc_mut()
            .set_q_key(qkey)
            .primary_address_path_mut()
            .set_vhca_port_num(1);
        self.h.ok(&m, &[]);
        let mut r = Init2rtrQpIn::new_cmd();
        r.qpc_mut().set_pm_state(PM_STATE_MIGRATED);
        r.set_qpn(qp.qpn);
        self.h.ok(&r, &[]);
        let mut s = Rtr2rtsQpIn::new_cmd();
        s.qpc_mut().set_pm_state(PM_STATE_MIGRATED);
        s.set_qpn(qp.qpn);
        self.h.ok(&s, &[]);
    }

    /// A UD address vector to `peer`'s QP `dqpn`.
    pub fn av_to(&self, peer: &Node, dqpn: u32, qkey: u32) -> Av {
        let mut av = Av {
            qkey: qkey.into(),
            dqp_dct: (Av::EXTENDED_UD_AV | dqpn).into(),
            ..Av::default()
        };
        match self.link {
            LinkLayer::Ethernet => {
                av.rmac = peer.mac;
                av.rgid[10] = 0xff;
                av.rgid[11] = 0xff;
                av.rgid[12..].copy_from_slice(&peer.ip);
                av.rlid = 0xc123.into();
                av.hop_limit = 64;
            }
            LinkLayer::InfiniBand => {
                av.rlid = peer.h.hca.lid().into();
                // A global route: GRH with the peer's link-local GID.
                let mut g = [0u8; 16];
                g[..8].copy_from_slice(&0xfe80_0000_0000_0000u64.to_be_bytes());
                g[8..].copy_from_slice(&peer.h.hca.config().node_guid().to_be_bytes());
                av.rgid = g;
                av.hop_limit = 64;
                av.grh_gid_fl = Av::GRH_GID_FL_GRH.into();
            }
        }
        av
    }

    pub fn qp_state(&self, qp: &Qp) -> QpState {
        self.h.hca.qp_state(qp.qpn).unwrap()
    }

    /// Writes a send WQE, updates the doorbell record and rings the send doorbell.
    pub fn post_send(&self, qp: &mut Qp, wr: &Wr) -> u16 {
        let (idx, first8) = self.write_send(qp, wr);
        self.ring_send(first8);
        idx
    }

    /// Rings the send doorbell (BlueFlame register) with a WQE's first 8 bytes.
    pub fn ring_send(&self, first8: u64) {
        self.h
            .p
            .write64(self.uar as usize * 4096 + BF_OFFSET, first8);
    }

    /// Writes a send WQE and updates the doorbell record without ringing the doorbell;
    /// returns its index and the first 8 bytes the doorbell carries.
    pub fn write_send(&self, qp: &mut Qp, wr: &Wr) -> (u16, u64) {
        let idx = qp.sq_pi;
        let mut body: Vec<u8> = Vec::new();
        if let Some(n) = wr.xrc_srqn {
            let x = WqeXrcSeg {
                xrc_srqn: n.into(),
                rsvd: [0; 12],
            };
            body.extend_from_slice(x.as_bytes());
        }
        if let Some(av) = &wr.av {
            let len = if wr.compact_av { Av::COMPACT_LEN } else { 48 };
            body.extend_from_slice(&av.as_bytes()[..len]);
        }
        if let Some((va, rkey)) = wr.raddr {
            let r = WqeRaddrSeg {
                raddr: va.into(),
                rkey: rkey.into(),
                reserved: 0.into(),
            };
            body.extend_from_slice(r.as_bytes());
        }
        if let Some((swap_add, compare)) = wr.atomic {
            let a = WqeAtomicSeg {
                swap_add: swap_add.into(),
                compare: compare.into(),
            };
            body.extend_from_slice(a.as_bytes());
        }
        if let Some(d) = &wr.inline {
            let h = WqeInlineSeg {
                byte_count: WqeInlineSeg::byte_count_of(d.len() as u32).into(),
            };
            let mut seg = h.as_bytes().to_vec();
            seg.extend_from_slice(d);
            seg.resize(seg.len().next_multiple_of(16), 0);
            body.extend_from_slice(&seg);
        }
        for &(lkey, addr, len) in &wr.sges {
            let d = WqeDataSeg {
                byte_count: len.into(),
                lkey: lkey.into(),
                addr: addr.into(),
            };
            body.extend_from_slice(d.as_bytes());
        }
        let ds = 1 + body.len() / 16;
        let op = wr.opcode.unwrap_or(WqeOpcode::Send);
        let mut flags = 0u8;
        if wr.signaled {
            flags |= WqeCtrlFlags::CQ_UPDATE.bits();
        }
        if wr.solicited {
            flags |= WqeCtrlFlags::SOLICITED.bits();
        }
        if wr.fence {
            flags |= WqeCtrlFlags::FENCE.bits();
        }
        let ctrl = WqeCtrlSeg {
            opmod_idx_opcode: WqeCtrlSeg::opmod_idx_opcode_of(0, idx, op).into(),
            qpn_ds: WqeCtrlSeg::qpn_ds_of(qp.qpn, ds as u8).into(),
            signature: 0,
            rsvd: [0; 2],
            fm_ce_se: flags,
            imm: wr.imm.into(),
        };
        let mut wqe = ctrl.as_bytes().to_vec();
        wqe.extend_from_slice(&body);
        let bbs = wqe.len().div_ceil(64);
        wqe.resize(bbs * 64, 0);
        let sq_base = qp.buf + ((1u64 << qp.log_rq) * (16u64 << qp.log_stride));
        let n = 1u16 << qp.log_sq;
        for (k, bb) in wqe.chunks(64).enumerate() {
            let slot = idx.wrapping_add(k as u16) & (n - 1);
            assert!(self.h.hca.host_write(sq_base + slot as u64 * 64, bb));
        }
        qp.sq_pi = qp.sq_pi.wrapping_add(bbs as u16);
        assert!(
            self.h
                .hca
                .host_write(qp.dbr + 4, &(qp.sq_pi as u32).to_be_bytes())
        );
        let first8 = u64::from_ne_bytes(wqe[..8].try_into().unwrap());
        (idx, first8)
    }

    /// Posts a receive WQE with the given SGEs.
    pub fn post_recv(&self, qp: &mut Qp, sges: &[(u32, u64, u32)]) -> u32 {
        let stride = 16usize << qp.log_stride;
        let mut w = vec![0u8; stride];
        for (i, &(lkey, addr, len)) in sges.iter().enumerate() {
            let d = WqeDataSeg {
                byte_count: len.into(),
                lkey: lkey.into(),
                addr: addr.into(),
            };
            w[i * 16..i * 16 + 16].copy_from_slice(d.as_bytes());
        }
        if sges.len() * 16 < stride {
            let d = WqeDataSeg {
                byte_count: 0.into(),
                lkey: INVALID_LKEY.into(),
                addr: 0.into(),
            };
            w[sges.len() * 16..sges.len() * 16 + 16].copy_from_slice(d.as_bytes());
        }
        let idx = qp.rq_pi & ((1 << qp.log_rq) - 1);
        assert!(
            self.h
                .hca
                .host_write(qp.buf + idx as u64 * stride as u64, &w)
        );
        let n = qp.rq_pi;
        qp.rq_pi += 1;
        assert!(
            self.h
                .hca
                .host_write(qp.dbr, &(qp.rq_pi & 0xffff).to_be_bytes())
        );
        n
    }

    /// The EQEs of the node's EQ of type `t` (others are consumed and dropped); the
    /// consumed entries are given back to the device (EQ doorbell, update only), as a
    /// consumer must, or the EQ overruns.
    pub fn events(&mut self, t: EventType) -> Vec<uhca_fwif::eqe::Eqe> {
        let all = self.h.poll_eq(&mut self.eq);
        self.h.eq_doorbell(&self.eq, false);
        all.into_iter().filter(|e| e.event_type() == t).collect()
    }

    pub fn modify_to_error(&mut self, qp: &Qp) {
        let mut e = Qp2errIn::new_cmd();
        e.set_qpn(qp.qpn);
        self.h.ok(&e, &[]);
    }
}

/// A connected RC (or UC) pair on a fresh fabric: nodes 1 and 2, one CQ each (send and
/// receive), QPs connected both ways.
pub struct Pair {
    pub fabric: Fabric,
    pub a: Node,
    pub b: Node,
    pub acq: Cq,
    pub bcq: Cq,
    pub aqp: Qp,
    pub bqp: Qp,
}

impl Pair {
    pub fn new(link: LinkLayer, st: QpServiceType, ca: Conn, cb: Conn) -> Pair {
        Self::new_with(link, st, ca, cb, |_| {})
    }

    /// As [`Pair::new`], running `prepare` on each node before its QP is created.
    pub fn new_with(
        link: LinkLayer,
        st: QpServiceType,
        ca: Conn,
        cb: Conn,
        mut prepare: impl FnMut(&mut Node),
    ) -> Pair {
        let fabric = Fabric::new(link);
        let mut a = Node::new(&fabric, link, 1);
        let mut b = Node::new(&fabric, link, 2);
        prepare(&mut a);
        prepare(&mut b);
        let acq = a.cq(10);
        let bcq = b.cq(10);
        let aqp = a.qp(st, &acq, &acq);
        let bqp = b.qp(st, &bcq, &bcq);
        a.connect(&aqp, &b, bqp.qpn, ca);
        b.connect(&bqp, &a, aqp.qpn, cb);
        Pair {
            fabric,
            a,
            b,
            acq,
            bcq,
            aqp,
            bqp,
        }
    }

    pub fn rc(link: LinkLayer) -> Pair {
        Self::new(link, QpServiceType::Rc, Conn::default(), Conn::default())
    }

    pub fn run(&self) {
        assert!(self.fabric.run_until_idle(), "fabric did not go idle");
    }
}

/// A signalled WR with one SGE.
pub fn wr(op: WqeOpcode, mr: &Mr, off: usize, len: u32) -> Wr {
    Wr {
        opcode: Some(op),
        sges: vec![(mr.key, mr.iova + off as u64, len)],
        signaled: true,
        ..Wr::default()
    }
}

/// The transport (BTH onward) of a frame of `link`, parsed whole: ICRC (and VCRC) checked.
pub fn transport_of(link: LinkLayer, frame: &[u8]) -> uhca_mock::wire::IbTransportRepr<'_> {
    match link {
        LinkLayer::Ethernet => {
            uhca_mock::wire::RoceV2Repr::parse(frame)
                .expect("a frame that parses (ICRC checked)")
                .transport
        }
        LinkLayer::InfiniBand => {
            uhca_mock::wire::IbPacketRepr::parse(frame)
                .expect("a packet that parses (ICRC, VCRC checked)")
                .transport
        }
    }
}

/// A frame of `link` parsed whole and emitted again: what a full emit of its contents gives.
pub fn full_emit(link: LinkLayer, frame: &[u8]) -> Vec<u8> {
    match link {
        LinkLayer::Ethernet => {
            let r = uhca_mock::wire::RoceV2Repr::parse(frame).expect("a frame that parses");
            let mut out = vec![0u8; r.buffer_len()];
            r.emit(&mut out).expect("emit");
            out
        }
        LinkLayer::InfiniBand => {
            let r = uhca_mock::wire::IbPacketRepr::parse(frame).expect("a packet that parses");
            let mut out = vec![0u8; r.buffer_len()];
            r.emit(&mut out).expect("emit");
            out
        }
    }
}
