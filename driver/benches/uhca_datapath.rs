//! The driver's datapath through its public API, on rings whose doorbells are plain memory:
//! ns and (under callgrind) instructions per operation.
//!
//! Objects are created on the mock (so every context is real), then the UAR doorbells are
//! caught by the platform wrapper below and never reach the model: the device does nothing,
//! and completions are written into the CQ by the benchmark itself, outside the timed
//! calls. So only the driver (and the HAL under it) is timed.
//!
//! Run: `cargo bench -p uhca-driver --bench uhca_datapath`. `UHCA_BENCH_CASE=name` runs one
//! case; `UHCA_BENCH_N` sets the operations per run. Instructions per operation: run one
//! case under `valgrind --tool=callgrind --toggle-collect='*TIMED*'` (the timed calls are
//! wrapped in functions whose names contain `TIMED`), and divide the count by the
//! operations the case prints.

use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use uhca_driver::verbs::{
    Cq, InitAttr, Mr, Qp, QpCaps, QpInitAttr, Rc, RecvWr, RtrAttr, RtsAttr, SendFlags, SendOp,
    SendWr, Sge, WorkCompletion, state,
};
use uhca_driver::{Hca, HcaConfig};
use uhca_fwif::consts::{AccessFlags, CqeOpcode, WqeOpcode};
use uhca_fwif::cqe::{Cqe64, op_own_of};
use uhca_fwif::zerocopy::{FromZeros, IntoBytes};
use uhca_hal::{
    Bar, Clock, ConfigError, Dma, DmaError, DmaRegion, HostMem, PciConfig, dma::DmaMem,
};
use uhca_mock::{ClockMode, MockConfig, MockHca, MockPlatform, PortType};

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

// SAFETY: forwards to the mock platform.
unsafe impl HostMem for PlainDoorbells {
    fn alloc_host(&self, len: usize, align: usize) -> Result<NonNull<u8>, DmaError> {
        self.mock.alloc_host(len, align)
    }
    unsafe fn free_host(&self, ptr: NonNull<u8>, len: usize, align: usize) {
        // SAFETY: the caller's contract is forwarded unchanged.
        unsafe { self.mock.free_host(ptr, len, align) }
    }
}

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

/// One RC QP in RTS with its CQ and a memory region, and a writer of CQEs.
struct Rig {
    dev: MockHca,
    p: P,
    _hca: Hca<P>,
    cq: Cq<P>,
    qp: Qp<P, Rc, state::Rts>,
    mr: Mr<P>,
    cq_iova: u64,
    cq_log: u32,
    cq_pi: u32,
}

impl Rig {
    fn new() -> Rig {
        let dev = MockHca::new(MockConfig {
            port_type: PortType::Ethernet,
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
        let pd = hca.alloc_pd().unwrap();
        let cq = hca.create_cq(4095).unwrap();
        let mr = hca
            .alloc_mr(&pd, 1 << 16, AccessFlags::LOCAL_WRITE)
            .unwrap();
        let qp = hca
            .create_qp::<Rc>(
                &pd,
                &QpInitAttr {
                    send_cq: &cq,
                    recv_cq: &cq,
                    srq: None,
                    cap: QpCaps {
                        max_send_wr: 512,
                        max_recv_wr: 1024,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 64,
                    },
                },
            )
            .unwrap();
        let qpn = qp.qpn();
        let qp = qp
            .to_init(&mut hca, InitAttr::default())
            .map_err(|f| f.error)
            .unwrap();
        let mac = uhca_driver::addr::Mac([2, 0, 0, 0, 0, 1]);
        let ip = std::net::IpAddr::V4(std::net::Ipv4Addr::new(192, 168, 0, 1));
        let gid = hca.add_roce_gid(1, 0, ip, mac, None).expect("a RoCE GID");
        let ah = uhca_driver::addr::AddressHandle::RoceV2 {
            sgid_index: 0,
            dgid: gid,
            dmac: uhca_driver::addr::Mac([2, 0, 0, 0, 0, 1]),
            udp_sport: 0xc000,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            sl: 0,
        };
        let qp = qp
            .to_rtr(
                &mut hca,
                RtrAttr {
                    dest_qpn: qpn,
                    ah,
                    ..RtrAttr::default()
                },
            )
            .map_err(|f| f.error)
            .unwrap();
        let qp = qp
            .to_rts(&mut hca, RtsAttr::default())
            .map_err(|f| f.error)
            .unwrap();
        p.on.store(true, Ordering::SeqCst);
        let cq_iova = cq.ring().mem().iova();
        let cq_log = (cq.cqe() + 1).trailing_zeros();
        Rig {
            dev,
            p,
            _hca: hca,
            cq,
            qp,
            mr,
            cq_iova,
            cq_log,
            cq_pi: 0,
        }
    }

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

#[inline(never)]
fn timed_post_send(qp: &mut Qp<P, Rc, state::Rts>, wrs: &[SendWr<'_>]) {
    qp.post_send(black_box(wrs)).unwrap();
}

#[inline(never)]
fn timed_post_recv(qp: &mut Qp<P, Rc, state::Rts>, wrs: &[RecvWr<'_>]) {
    qp.post_recv(black_box(wrs)).unwrap();
}

#[inline(never)]
fn timed_poll(cq: &mut Cq<P>, wc: &mut [WorkCompletion]) -> usize {
    cq.poll(black_box(wc)).unwrap()
}

/// A send case: `per_call` requests of `op` per call; returns (ns per request, requests).
fn send_case(rig: &mut Rig, n: u64, per_call: usize, inline: bool, op: SendOp) -> (f64, u64) {
    let sge = [Sge {
        addr: rig.mr.iova(),
        len: 64,
        lkey: rig.mr.lkey(),
    }];
    let payload = [0x5au8; 64];
    let mut wrs: Vec<SendWr<'_>> = (0..per_call)
        .map(|i| {
            let w = if inline {
                SendWr::new(i as u64, op, &[]).with_inline(&payload)
            } else {
                SendWr::new(i as u64, op, &sge)
            };
            w.with_flags(SendFlags::empty())
        })
        .collect();
    if let Some(last) = wrs.last_mut() {
        *last = last.with_flags(SendFlags::SIGNALED);
    }
    let wqe_op = match op {
        SendOp::RdmaWrite { .. } => WqeOpcode::RdmaWrite,
        _ => WqeOpcode::Send,
    };
    let calls = n / per_call as u64;
    let mut spent = Duration::ZERO;
    for _ in 0..calls {
        let t = Instant::now();
        timed_post_send(&mut rig.qp, &wrs);
        spent += t.elapsed();
        // The last WQE's index: the producer less its size.
        let pi = rig.sq_producer();
        let bbs = if inline { 2 } else { 1 };
        rig.retire_sends(pi.wrapping_sub(bbs) as u16, wqe_op);
    }
    (
        spent.as_nanos() as f64 / (calls * per_call as u64) as f64,
        calls * per_call as u64,
    )
}

fn recv_case(rig: &mut Rig, n: u64) -> (f64, u64) {
    let sge = [Sge {
        addr: rig.mr.iova(),
        len: 64,
        lkey: rig.mr.lkey(),
    }];
    let wrs: Vec<RecvWr<'_>> = (0..32)
        .map(|i| RecvWr {
            wr_id: i,
            sg_list: &sge,
        })
        .collect();
    let calls = n / 32;
    let mut spent = Duration::ZERO;
    let mut counter = 0u16;
    let mut wc = [WorkCompletion::default(); 32];
    for _ in 0..calls {
        let t = Instant::now();
        timed_post_recv(&mut rig.qp, &wrs);
        spent += t.elapsed();
        for _ in 0..32 {
            rig.resp(counter);
            counter = counter.wrapping_add(1);
        }
        assert_eq!(rig.cq.poll(&mut wc).unwrap(), 32);
    }
    (spent.as_nanos() as f64 / (calls * 32) as f64, calls * 32)
}

fn poll_case(rig: &mut Rig, n: u64) -> (f64, u64) {
    let sge = [Sge {
        addr: rig.mr.iova(),
        len: 64,
        lkey: rig.mr.lkey(),
    }];
    let wrs: Vec<SendWr<'_>> = (0..16)
        .map(|i| SendWr::new(i, SendOp::Send, &sge).with_flags(SendFlags::SIGNALED))
        .collect();
    let calls = n / 16;
    let mut spent = Duration::ZERO;
    let mut wc = [WorkCompletion::default(); 16];
    for _ in 0..calls {
        let pi = rig.sq_producer();
        rig.qp.post_send(&wrs).unwrap();
        for k in 0..16u32 {
            rig.req(pi.wrapping_add(k) as u16, WqeOpcode::Send);
        }
        let t = Instant::now();
        let got = timed_poll(&mut rig.cq, &mut wc);
        spent += t.elapsed();
        assert_eq!(got, 16);
    }
    (spent.as_nanos() as f64 / (calls * 16) as f64, calls * 16)
}

fn empty_poll_case(rig: &mut Rig, n: u64) -> (f64, u64) {
    let mut wc = [WorkCompletion::default(); 16];
    let t = Instant::now();
    for _ in 0..n {
        assert_eq!(timed_poll(&mut rig.cq, &mut wc), 0);
    }
    (t.elapsed().as_nanos() as f64 / n as f64, n)
}

fn main() {
    let n: u64 = std::env::var("UHCA_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let only = std::env::var("UHCA_BENCH_CASE").ok();
    let mut rig = Rig::new();
    let rkey = rig.mr.rkey();
    let raddr = rig.mr.iova();
    type Case = (&'static str, Box<dyn Fn(&mut Rig, u64) -> (f64, u64)>);
    let cases: Vec<Case> = vec![
        (
            "send_1sge_1",
            Box::new(|r, n| send_case(r, n, 1, false, SendOp::Send)),
        ),
        (
            "send_1sge_32",
            Box::new(|r, n| send_case(r, n, 32, false, SendOp::Send)),
        ),
        (
            "send_inline64_32",
            Box::new(|r, n| send_case(r, n, 32, true, SendOp::Send)),
        ),
        (
            "write_1sge_32",
            Box::new(move |r, n| {
                send_case(
                    r,
                    n,
                    32,
                    false,
                    SendOp::RdmaWrite {
                        remote_addr: raddr,
                        rkey,
                    },
                )
            }),
        ),
        ("recv_1sge_32", Box::new(recv_case)),
        ("poll_16", Box::new(poll_case)),
        ("poll_empty", Box::new(empty_poll_case)),
    ];
    for (name, f) in &cases {
        if only.as_deref().is_some_and(|o| o != *name) {
            continue;
        }
        let (ns, ops) = f(&mut rig, n);
        println!("case {name} ns {ns:.1} ops {ops}");
    }
    black_box(&rig.p.catch);
}
