//! uhca's rows of the driver benchmark: the public datapath API (`qp.post_send(&wrs)`,
//! `qp.post_recv(&wrs)`, `cq.poll(&mut wc)`) on rings whose doorbells are plain memory.
//!
//! The objects are created on the mock (so every context is real and the rings are what a
//! device would be given); then the platform wrapper below catches every UAR doorbell in a
//! word of memory, so the model never sees the work: the device does nothing, and the
//! completions are written into the CQ by the benchmark itself, in `prepare`, outside the
//! clock and the instruction count. Only the driver and the HAL under it are timed.

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use uhca_driver::verbs::{
    Cq, InitAttr, Mr, Qp, QpCaps, QpInitAttr, Rc, RecvWr, RtrAttr, RtsAttr, SendFlags, SendOp,
    SendWr, Sge, Srq, SrqInitAttr, WorkCompletion,
};
use uhca_driver::{Hca, HcaConfig};
use uhca_fwif::consts::{AccessFlags, CqeOpcode, WqeOpcode};
use uhca_fwif::cqe::{Cqe64, op_own_of};
use uhca_fwif::zerocopy::{FromZeros, IntoBytes};
use uhca_hal::{
    Bar, Clock, ConfigError, Dma, DmaError, DmaRegion, HostMem, PciConfig, dma::DmaMem,
};
use uhca_mock::{ClockMode, LinkLayer, MockConfig, MockHca, MockPlatform};

use super::Measured;
use super::callgrind::{self, Case};

/// The mock platform with every UAR doorbell (offset 0x20 and up within a UAR page, past
/// the init segment) caught in one word of memory.
#[derive(Clone)]
struct PlainDoorbells {
    mock: MockPlatform,
    catch: Arc<AtomicU64>,
    on: Arc<std::sync::atomic::AtomicBool>,
}

// SAFETY: forwards to the mock platform, which upholds the obligations; caught writes go to
// an atomic and nowhere else.
unsafe impl Bar for PlainDoorbells {
    fn bar_len(&self) -> usize {
        self.mock.bar_len()
    }
    fn read32(&self, offset: usize) -> u32 {
        self.mock.read32(offset)
    }
    fn write32(&self, offset: usize, value: u32) {
        self.mock.write32(offset, value)
    }
    fn read64(&self, offset: usize) -> u64 {
        self.mock.read64(offset)
    }
    #[inline]
    fn write64(&self, offset: usize, value: u64) {
        if self.on.load(Ordering::Relaxed) {
            self.catch.store(value, Ordering::Relaxed);
        } else {
            self.mock.write64(offset, value)
        }
    }
}

// SAFETY: forwards to the mock platform.
unsafe impl Dma for PlainDoorbells {
    fn alloc_coherent(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError> {
        self.mock.alloc_coherent(len, align)
    }
    unsafe fn free_coherent(&self, region: DmaRegion) {
        // SAFETY: the caller's contract is forwarded unchanged.
        unsafe { self.mock.free_coherent(region) }
    }
    unsafe fn map(&self, cpu: NonNull<u8>, len: usize) -> Result<u64, DmaError> {
        // SAFETY: as above.
        unsafe { self.mock.map(cpu, len) }
    }
    unsafe fn unmap(&self, iova: u64, len: usize) -> Result<(), DmaError> {
        // SAFETY: as above.
        unsafe { self.mock.unmap(iova, len) }
    }
}

// SAFETY: host memory from the global allocator (the trait's default bodies).
unsafe impl HostMem for PlainDoorbells {}

impl PciConfig for PlainDoorbells {
    fn config_read8(&self, offset: u16) -> Result<u8, ConfigError> {
        self.mock.config_read8(offset)
    }
    fn config_read16(&self, offset: u16) -> Result<u16, ConfigError> {
        self.mock.config_read16(offset)
    }
    fn config_read32(&self, offset: u16) -> Result<u32, ConfigError> {
        self.mock.config_read32(offset)
    }
    fn config_write16(&self, offset: u16, value: u16) -> Result<(), ConfigError> {
        self.mock.config_write16(offset, value)
    }
    fn config_write32(&self, offset: u16, value: u32) -> Result<(), ConfigError> {
        self.mock.config_write32(offset, value)
    }
}

impl Clock for PlainDoorbells {
    fn now_ns(&self) -> u64 {
        self.mock.now_ns()
    }
    fn delay_us(&self, us: u32) {
        self.mock.delay_us(us)
    }
}

type P = PlainDoorbells;

/// One RC QP in RTS (connected to itself) with its CQ and a memory region, and a writer of
/// the CQEs the device would write.
struct Pair {
    dev: MockHca,
    cq: Cq<P>,
    qp: Qp<P, Rc>,
    mr: Mr<P>,
    /// The SRQ the QP receives from, if it does.
    srq: Option<Srq<P>>,
    cq_iova: u64,
    cq_log: u32,
    cq_pi: u32,
}

/// An HCA on the mock with one [`Pair`] (more with [`Rig::pair`]); derefs to the pair.
struct Rig {
    /// The platform: its doorbells are caught once the objects exist.
    p: P,
    /// The HCA (kept open; more pairs are made on it).
    hca: Hca<P>,
    gid: uhca_driver::addr::Gid,
    main: Pair,
}

impl std::ops::Deref for Rig {
    type Target = Pair;
    fn deref(&self) -> &Pair {
        &self.main
    }
}

impl std::ops::DerefMut for Rig {
    fn deref_mut(&mut self) -> &mut Pair {
        &mut self.main
    }
}

/// Creates a QP/CQ/MR on `hca` (and an SRQ of 1024 WQEs the QP receives from, if
/// `with_srq`) and brings the QP to RTS connected to itself.
fn make_pair(dev: &MockHca, hca: &mut Hca<P>, gid: uhca_driver::addr::Gid, with_srq: bool) -> Pair {
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(4095).unwrap();
    let mr = hca
        .alloc_mr(&pd, 1 << 16, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let srq = with_srq.then(|| {
        hca.create_srq(
            &pd,
            SrqInitAttr {
                max_wr: 1023,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap()
    });
    let mut qp = hca
        .create_qp::<Rc>(
            &pd,
            &QpInitAttr {
                send_cq: &cq,
                recv_cq: &cq,
                srq: srq.as_ref(),
                cap: QpCaps {
                    max_send_wr: 512,
                    max_recv_wr: if with_srq { 0 } else { 1024 },
                    max_send_sge: 1,
                    max_recv_sge: if with_srq { 0 } else { 1 },
                    max_inline_data: 64,
                },
            },
        )
        .unwrap();
    let qpn = qp.qpn();
    qp.to_init(hca, InitAttr::default()).unwrap();
    let ah = uhca_driver::addr::AhAttr::RoceV2 {
        sgid_index: 0,
        dgid: gid,
        dmac: uhca_driver::addr::Mac([2, 0, 0, 0, 0, 1]),
        udp_sport: 0xc000,
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
        sl: 0,
    };
    qp.to_rtr(
        hca,
        RtrAttr {
            dest_qpn: qpn,
            ah,
            ..RtrAttr::default()
        },
    )
    .unwrap();
    qp.to_rts(hca, RtsAttr::default()).unwrap();
    let cq_iova = cq.ring().mem().iova();
    let cq_log = (cq.cqe() + 1).trailing_zeros();
    Pair {
        dev: dev.clone(),
        cq,
        qp,
        mr,
        srq,
        cq_iova,
        cq_log,
        cq_pi: 0,
    }
}

impl Rig {
    fn new() -> Rig {
        Rig::make(false)
    }

    /// A rig whose QP receives from an SRQ.
    fn with_srq() -> Rig {
        Rig::make(true)
    }

    fn make(with_srq: bool) -> Rig {
        let dev = MockHca::new(MockConfig {
            port_type: LinkLayer::Ethernet,
            clock: ClockMode::Virtual,
            init_delay_us: 5_000,
            ..MockConfig::default()
        });
        let p = PlainDoorbells {
            mock: dev.platform(),
            catch: Arc::new(AtomicU64::new(0)),
            on: Arc::new(false.into()),
        };
        let mut hca = Hca::open_with(
            p.clone(),
            HcaConfig {
                poll_us: 100,
                ..HcaConfig::default()
            },
        )
        .expect("bring-up");
        let mac = uhca_driver::addr::Mac([2, 0, 0, 0, 0, 1]);
        let ip = std::net::IpAddr::V4(std::net::Ipv4Addr::new(192, 168, 0, 1));
        let gid = hca.add_roce_gid(1, 0, ip, mac, None).expect("a RoCE GID");
        let main = make_pair(&dev, &mut hca, gid, with_srq);
        p.on.store(true, Ordering::SeqCst);
        Rig { p, hca, gid, main }
    }

    /// Another QP/CQ/MR on the same HCA (commands go to the model meanwhile).
    fn pair(&mut self) -> Pair {
        self.p.on.store(false, Ordering::SeqCst);
        let pair = make_pair(&self.main.dev, &mut self.hca, self.gid, false);
        self.p.on.store(true, Ordering::SeqCst);
        pair
    }
}

impl Pair {
    /// Writes a CQE at the CQ's next producer position, as the device would.
    fn cqe(&mut self, mut cqe: Cqe64, opcode: CqeOpcode) {
        let owner = ((self.cq_pi >> self.cq_log) & 1) as u8;
        cqe.op_own = op_own_of(opcode, owner);
        let at = self.cq_iova + ((self.cq_pi & ((1 << self.cq_log) - 1)) as u64) * 64;
        assert!(self.dev.host_write(at, &cqe.as_bytes()[..63]));
        assert!(self.dev.host_write(at + 63, &cqe.as_bytes()[63..]));
        self.cq_pi += 1;
    }

    /// A requester CQE for the send WQE at `counter`.
    fn req(&mut self, counter: u16, op: WqeOpcode) {
        let mut c = Cqe64::new_zeroed();
        c.sop_drop_qpn.set((op.raw() as u32) << 24 | self.qp.qpn());
        c.wqe_counter.set(counter);
        self.cqe(c, CqeOpcode::Req);
    }

    /// A responder CQE for the receive WQE at `counter`.
    fn resp(&mut self, counter: u16) {
        let mut c = Cqe64::new_zeroed();
        c.sop_drop_qpn.set(self.qp.qpn());
        c.wqe_counter.set(counter);
        c.byte_cnt.set(64);
        self.cqe(c, CqeOpcode::RespSend);
    }

    /// A responder CQE of `opcode` for the receive WQE at `counter` (of the RQ or the SRQ),
    /// as libmlx5's harness writes it: 64 bytes, the immediate for the `*Imm` opcodes, the
    /// sender's LID 1, no GRH.
    fn resp_of(&mut self, counter: u16, opcode: CqeOpcode) {
        let mut c = Cqe64::new_zeroed();
        c.sop_drop_qpn.set(self.qp.qpn());
        c.wqe_counter.set(counter);
        c.byte_cnt.set(64);
        c.slid.set(1);
        if opcode != CqeOpcode::RespSend {
            c.immediate.set(IMM_DATA);
        }
        self.cqe(c, opcode);
    }

    fn sq_producer(&self) -> u32 {
        self.qp.rings().sq_producer()
    }

    /// Completes everything posted: a CQE for the last send WQE (earlier ones retire with
    /// it), polled.
    fn retire_sends(&mut self, last_index: u16, op: WqeOpcode) {
        self.req(last_index, op);
        let mut wc = [WorkCompletion::default(); 1];
        assert_eq!(self.cq.poll(&mut wc).unwrap(), 1);
    }
}

/// A send case: `calls` calls of `per_call` requests each per chunk, the chunk's last
/// request signalled; `prepare` completes the chunk (one CQE for its last WQE, polled).
struct SendCase {
    rig: Rig,
    per_call: usize,
    calls: usize,
    op: SendOp,
    /// WQEBBs one request takes.
    bbs: u32,
    /// The requests of every call but the chunk's last (none signalled), and of its last
    /// (the last request signalled): built once, outside the timed region, as the libmlx5
    /// harness builds its `ibv_send_wr` lists once.
    plain: Vec<SendWr<'static>>,
    last: Vec<SendWr<'static>>,
}

impl SendCase {
    fn new(per_call: usize, op_of: impl Fn(&Rig) -> SendOp, inline: bool) -> SendCase {
        let rig = Rig::new();
        let sge = [Sge {
            addr: rig.mr.iova(),
            len: 64,
            lkey: rig.mr.lkey(),
        }];
        let op = op_of(&rig);
        let bbs = if inline { 2 } else { 1 };
        // Half the SQ per chunk.
        let calls = (256 / bbs as usize) / per_call;
        // The requests borrow their gather list and payload for the whole benchmark.
        let sge: &'static [Sge; 1] = Box::leak(Box::new(sge));
        let payload: &'static [u8; 64] = Box::leak(Box::new([0x5a; 64]));
        let wr = |flags| {
            let w = if inline {
                SendWr::new(0, op, &[]).with_inline(&payload[..])
            } else {
                SendWr::new(0, op, sge)
            };
            w.with_flags(flags)
        };
        let plain: Vec<SendWr<'static>> = (0..per_call).map(|_| wr(SendFlags::empty())).collect();
        let mut last = plain.clone();
        if let Some(l) = last.last_mut() {
            *l = wr(SendFlags::SIGNALED);
        }
        SendCase {
            rig,
            per_call,
            calls,
            op,
            bbs,
            plain,
            last,
        }
    }
}

impl Case for SendCase {
    fn chunk(&self) -> u64 {
        (self.calls * self.per_call) as u64
    }

    fn prepare(&mut self) {
        let pi = self.rig.sq_producer();
        if pi != 0 {
            let op = match self.op {
                SendOp::RdmaWrite { .. } => WqeOpcode::RdmaWrite,
                _ => WqeOpcode::Send,
            };
            self.rig.retire_sends(pi.wrapping_sub(self.bbs) as u16, op);
        }
    }

    fn run(&mut self) {
        for c in 0..self.calls {
            let wrs = if c + 1 == self.calls {
                &self.last
            } else {
                &self.plain
            };
            self.rig.qp.post_send(std::hint::black_box(wrs)).unwrap();
        }
    }
}

/// post_recv, 32 per call, 512 per chunk; `prepare` completes them (512 responder CQEs,
/// polled).
struct RecvCase {
    rig: Rig,
    sge: [Sge; 1],
    counter: u16,
    posted: bool,
}

impl Case for RecvCase {
    fn chunk(&self) -> u64 {
        512
    }

    fn prepare(&mut self) {
        if !self.posted {
            return;
        }
        let mut wc = [WorkCompletion::default(); 32];
        for _ in 0..512 / 32 {
            for _ in 0..32 {
                self.rig.resp(self.counter);
                self.counter = self.counter.wrapping_add(1);
            }
            assert_eq!(self.rig.cq.poll(&mut wc).unwrap(), 32);
        }
        self.posted = false;
    }

    fn run(&mut self) {
        let wrs: [RecvWr<'_>; 32] = std::array::from_fn(|i| RecvWr {
            wr_id: i as u64,
            sg_list: &self.sge,
        });
        for _ in 0..512 / 32 {
            self.rig.qp.post_recv(std::hint::black_box(&wrs)).unwrap();
        }
        self.posted = true;
    }
}

/// poll, 16 per call, 256 CQEs per chunk; `prepare` posts 256 signalled SENDs and writes
/// their CQEs.
struct PollCase {
    rig: Rig,
    sge: [Sge; 1],
    wc: [WorkCompletion; 16],
}

impl Case for PollCase {
    fn chunk(&self) -> u64 {
        256
    }

    fn prepare(&mut self) {
        let wrs: Vec<SendWr<'_>> = (0..32)
            .map(|i| SendWr::new(i, SendOp::Send, &self.sge).with_flags(SendFlags::SIGNALED))
            .collect();
        for _ in 0..256 / 32 {
            let pi = self.rig.sq_producer();
            self.rig.qp.post_send(&wrs).unwrap();
            for k in 0..32u32 {
                self.rig.req(pi.wrapping_add(k) as u16, WqeOpcode::Send);
            }
        }
    }

    fn run(&mut self) {
        for _ in 0..256 / 16 {
            let n = self
                .rig
                .cq
                .poll(std::hint::black_box(&mut self.wc))
                .unwrap();
            debug_assert_eq!(n, 16);
        }
    }
}

/// Empty polls, 1000 per chunk.
struct EmptyPollCase {
    rig: Rig,
    wc: [WorkCompletion; 16],
}

impl Case for EmptyPollCase {
    fn chunk(&self) -> u64 {
        1000
    }

    fn prepare(&mut self) {}

    fn run(&mut self) {
        for _ in 0..1000 {
            let n = self
                .rig
                .cq
                .poll(std::hint::black_box(&mut self.wc))
                .unwrap();
            debug_assert_eq!(n, 0);
        }
    }
}

/// The immediate of the receive CQEs with immediate.
const IMM_DATA: u32 = 0x1234_5678;

/// The order an SRQ hands out its WQEs (uhca's and rdma-core's free list: the next WQE to
/// post first, one WQE kept spare, a completed WQE linked after the last), so the
/// benchmark's CQEs name the WQEs the posts took.
struct SrqOrder(std::collections::VecDeque<u16>);

impl SrqOrder {
    fn new(srq: &Srq<P>) -> SrqOrder {
        SrqOrder((0..1u32 << srq.log_size()).map(|i| i as u16).collect())
    }
    /// The WQE the next post takes.
    fn take(&mut self) -> u16 {
        assert!(self.0.len() > 1, "the SRQ keeps one WQE spare");
        self.0.pop_front().expect("a free WQE")
    }
    /// A WQE completed.
    fn give_back(&mut self, index: u16) {
        self.0.push_back(index);
    }
}

/// poll, 16 per call, 256 receive CQEs of `opcode` per chunk; `prepare` posts 256 receives
/// (32 per call, on the QP's RQ or on its SRQ) and writes their CQEs.
struct RecvPollCase {
    rig: Rig,
    sge: [Sge; 1],
    opcode: CqeOpcode,
    /// The RQ's next WQE counter; unused with an SRQ.
    counter: u16,
    order: Option<SrqOrder>,
    wc: [WorkCompletion; 16],
}

impl RecvPollCase {
    fn new(with_srq: bool, opcode: CqeOpcode) -> RecvPollCase {
        let rig = if with_srq {
            Rig::with_srq()
        } else {
            Rig::new()
        };
        let sge = sge_of(&rig);
        let order = rig.srq.as_ref().map(SrqOrder::new);
        RecvPollCase {
            rig,
            sge,
            opcode,
            counter: 0,
            order,
            wc: [WorkCompletion::default(); 16],
        }
    }
}

impl Case for RecvPollCase {
    fn chunk(&self) -> u64 {
        256
    }

    fn prepare(&mut self) {
        let wrs: [RecvWr<'_>; 32] = std::array::from_fn(|i| RecvWr {
            wr_id: i as u64,
            sg_list: &self.sge,
        });
        for _ in 0..256 / 32 {
            match self.rig.main.srq.as_mut() {
                Some(srq) => srq.post_recv(&wrs).unwrap(),
                None => self.rig.main.qp.post_recv(&wrs).unwrap(),
            }
        }
        for _ in 0..256 {
            let counter = match self.order.as_mut() {
                Some(o) => {
                    let at = o.take();
                    // Given back when its CQE is polled, in this order.
                    o.give_back(at);
                    at
                }
                None => {
                    self.counter = self.counter.wrapping_add(1);
                    self.counter.wrapping_sub(1)
                }
            };
            self.rig.resp_of(counter, self.opcode);
        }
    }

    fn run(&mut self) {
        for _ in 0..256 / 16 {
            let n = self
                .rig
                .cq
                .poll(std::hint::black_box(&mut self.wc))
                .unwrap();
            debug_assert_eq!(n, 16);
        }
    }
}

/// post_recv on an SRQ, 32 per call, 512 per chunk; `prepare` completes them (512
/// responder CQEs, polled).
struct SrqRecvCase {
    rig: Rig,
    sge: [Sge; 1],
    order: SrqOrder,
    posted: bool,
}

impl Case for SrqRecvCase {
    fn chunk(&self) -> u64 {
        512
    }

    fn prepare(&mut self) {
        if !self.posted {
            return;
        }
        let mut wc = [WorkCompletion::default(); 32];
        for _ in 0..512 / 32 {
            for _ in 0..32 {
                let at = self.order.take();
                self.rig.resp_of(at, CqeOpcode::RespSend);
                self.order.give_back(at);
            }
            assert_eq!(self.rig.cq.poll(&mut wc).unwrap(), 32);
        }
        self.posted = false;
    }

    fn run(&mut self) {
        let wrs: [RecvWr<'_>; 32] = std::array::from_fn(|i| RecvWr {
            wr_id: i as u64,
            sg_list: &self.sge,
        });
        let srq = self.rig.main.srq.as_mut().expect("an SRQ");
        for _ in 0..512 / 32 {
            srq.post_recv(std::hint::black_box(&wrs)).unwrap();
        }
        self.posted = true;
    }
}

fn sge_of(rig: &Rig) -> [Sge; 1] {
    [Sge {
        addr: rig.mr.iova(),
        len: 64,
        lkey: rig.mr.lkey(),
    }]
}

/// Measures uhca's case for each row name that contains `filter`.
pub fn measure(
    rows: &[&'static str],
    filter: &str,
    opts: &callgrind::Options,
) -> BTreeMap<&'static str, Measured> {
    let mut out = BTreeMap::new();
    for &name in rows {
        if !name.contains(filter) {
            continue;
        }
        let id = format!("uhca_{name}");
        let m = match name {
            "send_sge_1" => {
                callgrind::measure(&id, &mut SendCase::new(1, |_| SendOp::Send, false), opts)
            }
            "send_sge_32" => {
                callgrind::measure(&id, &mut SendCase::new(32, |_| SendOp::Send, false), opts)
            }
            "send_inline64_32" => {
                callgrind::measure(&id, &mut SendCase::new(32, |_| SendOp::Send, true), opts)
            }
            "write_sge_32" => callgrind::measure(
                &id,
                &mut SendCase::new(
                    32,
                    |r| SendOp::RdmaWrite {
                        remote_addr: r.mr.iova() + 4096,
                        rkey: r.mr.rkey(),
                    },
                    false,
                ),
                opts,
            ),
            "recv_sge_32" => {
                let rig = Rig::new();
                let sge = sge_of(&rig);
                callgrind::measure(
                    &id,
                    &mut RecvCase {
                        rig,
                        sge,
                        counter: 0,
                        posted: false,
                    },
                    opts,
                )
            }
            "poll_16_v1" => {
                let rig = Rig::new();
                let sge = sge_of(&rig);
                callgrind::measure(
                    &id,
                    &mut PollCase {
                        rig,
                        sge,
                        wc: [WorkCompletion::default(); 16],
                    },
                    opts,
                )
            }
            "srq_recv_sge_32" => {
                let rig = Rig::with_srq();
                let sge = sge_of(&rig);
                let order = SrqOrder::new(rig.srq.as_ref().expect("an SRQ"));
                callgrind::measure(
                    &id,
                    &mut SrqRecvCase {
                        rig,
                        sge,
                        order,
                        posted: false,
                    },
                    opts,
                )
            }
            _ if name.starts_with("poll_recv_16_") => {
                let with_srq = name.contains("_srq_");
                let opcode = if name.ends_with("_send") {
                    CqeOpcode::RespSend
                } else if name.ends_with("_send_imm") {
                    CqeOpcode::RespSendImm
                } else {
                    CqeOpcode::RespWrImm
                };
                callgrind::measure(&id, &mut RecvPollCase::new(with_srq, opcode), opts)
            }
            "poll_empty_v1" => callgrind::measure(
                &id,
                &mut EmptyPollCase {
                    rig: Rig::new(),
                    wc: [WorkCompletion::default(); 16],
                },
                opts,
            ),
            _ => None,
        };
        if let Some(m) = m {
            out.insert(name, m);
        }
    }
    out
}

/// SEND 1 SGE, 32 per call, on `pair` for at least `ops` requests, each 256 retired by one
/// CQE the benchmark writes and polls; the wall time it took (retiring included).
fn stream(pair: &mut Pair, ops: u64) -> std::time::Duration {
    let sge = [Sge {
        addr: pair.mr.iova(),
        len: 64,
        lkey: pair.mr.lkey(),
    }];
    let plain: [SendWr<'_>; 32] = std::array::from_fn(|i| {
        SendWr::new(i as u64, SendOp::Send, &sge).with_flags(SendFlags::empty())
    });
    let mut last = plain;
    last[31] = last[31].with_flags(SendFlags::SIGNALED);
    let start = std::time::Instant::now();
    let mut done = 0;
    while done < ops {
        for c in 0..8 {
            let wrs = if c == 7 { &last } else { &plain };
            pair.qp.post_send(std::hint::black_box(wrs)).unwrap();
        }
        let pi = pair.qp.rings().sq_producer();
        pair.retire_sends(pi.wrapping_sub(1) as u16, WqeOpcode::Send);
        done += 256;
    }
    start.elapsed()
}

/// Requests per second of SEND 1 SGE (32 per call) on pairs `a` and `b` on two threads at
/// once (no lock between them), in aggregate.
fn in_parallel(a: &mut Pair, b: &mut Pair, ops: u64) -> f64 {
    let barrier = std::sync::Barrier::new(2);
    let (ta, tb) = std::thread::scope(|s| {
        let ta = s.spawn(|| {
            barrier.wait();
            stream(a, ops)
        });
        let tb = s.spawn(|| {
            barrier.wait();
            stream(b, ops)
        });
        (ta.join().unwrap(), tb.join().unwrap())
    });
    2.0 * ops as f64 / ta.max(tb).as_secs_f64()
}

/// One round of the thread measurement, requests per second of SEND 1 SGE (32 per call).
#[derive(Clone, Copy, Debug)]
pub struct ThreadRound {
    /// One QP/CQ pair on one thread.
    pub one: f64,
    /// Two pairs of the same HCA on two threads, in aggregate.
    pub same_hca: f64,
    /// Two pairs of two HCAs (two platforms, two mock devices) on two threads, in
    /// aggregate: nothing shared but the machine.
    pub two_hcas: f64,
}

/// `rounds` rounds, each measuring one thread alone, then two threads on two pairs of one
/// HCA, then two threads on pairs of two HCAs, one right after the other: the ratios of a
/// round compare measurements taken under the same load on the machine.
pub fn two_threads(ops: u64, rounds: usize) -> Vec<ThreadRound> {
    let mut rig = Rig::new();
    let mut second = rig.pair();
    let mut other = Rig::new();
    let first = &mut rig.main;
    // Warm up all three.
    stream(first, 4096);
    stream(&mut second, 4096);
    stream(&mut other.main, 4096);
    (0..rounds)
        .map(|_| ThreadRound {
            one: ops as f64 / stream(first, ops).as_secs_f64(),
            same_hca: in_parallel(first, &mut second, ops),
            two_hcas: in_parallel(first, &mut other.main, ops),
        })
        .collect()
}
