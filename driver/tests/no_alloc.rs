//! Posting and polling allocate nothing: a counting global allocator watches
//! `Qp::post_send` (WQEs, shadow slots, doorbell record, the UAR doorbell), `Qp::post_recv`
//! and `Cq::poll` (CQE checks against the shadow, consumer index) on two mock HCAs that
//! really exchange the data.
//!
//! The mock's engine runs inside the doorbell write and allocates as a model may, so the
//! platform here holds the send doorbells written while counting and hands them to the
//! model right after; everything else goes straight to the mock.

use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use uhca_test_support::{CountingAlloc, counted};

mod common;

use uhca_driver::verbs::{
    RecvWr, RtsAttr, SendFlags, SendOp, SendWr, Sge, WcStatus, WorkCompletion,
};
use uhca_hal::platform::{Clock, ConfigError, Dma, DmaError, DmaRegion, PciConfig};
use uhca_hal::{Bar, DmaMem};
use uhca_mock::{Fabric, MockHca, MockPlatform};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// Send doorbells (UAR offset 0x800 and up) written while `hold` is set.
#[derive(Default)]
struct Held {
    hold: AtomicBool,
    n: AtomicUsize,
    at: [AtomicUsize; 8],
    value: [AtomicU64; 8],
}

/// The mock platform, with send doorbells held while counting.
#[derive(Clone)]
struct Holding {
    mock: MockPlatform,
    held: Arc<Held>,
}

impl Holding {
    /// Gives the held doorbells to the model, in order.
    fn release(&self) {
        let n = self.held.n.swap(0, Ordering::SeqCst);
        for i in 0..n {
            let at = self.held.at[i].load(Ordering::SeqCst);
            self.mock
                .write64(at, self.held.value[i].load(Ordering::SeqCst));
        }
    }
}

// SAFETY: forwards to the mock platform, which upholds the obligations; held writes only
// reach it later, in the same order.
unsafe impl Bar for Holding {
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
    fn write64(&self, offset: usize, value: u64) {
        if self.held.hold.load(Ordering::SeqCst) && offset % 4096 >= 0x800 {
            let i = self.held.n.fetch_add(1, Ordering::SeqCst);
            assert!(i < 8, "more doorbells than one per post");
            self.held.at[i].store(offset, Ordering::SeqCst);
            self.held.value[i].store(value, Ordering::SeqCst);
        } else {
            self.mock.write64(offset, value)
        }
    }
}

// SAFETY: forwards to the mock platform.
unsafe impl Dma for Holding {
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

impl PciConfig for Holding {
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

// SAFETY: host memory from the global allocator (the trait's default bodies);
// test platform.
unsafe impl uhca_hal::HostMem for Holding {}

impl Clock for Holding {
    fn now_ns(&self) -> u64 {
        self.mock.now_ns()
    }
    fn delay_us(&self, us: u32) {
        self.mock.delay_us(us)
    }
}

#[test]
fn post_and_poll_allocate_nothing() {
    // The counter sees allocations.
    assert_eq!(counted(|| std::hint::black_box(vec![1u8; 8])).1, 1);
    let fabric = Fabric::ethernet();
    let holding = |dev: &MockHca| Holding {
        mock: dev.platform(),
        held: Arc::new(Held::default()),
    };
    let (mut a, mut b, mut qa, mut qb) = common::rc_pair_on(&fabric, RtsAttr::default(), holding);
    let held = a.hca.platform().clone();

    let (la, lb) = (a.mr.lkey(), b.mr.lkey());
    let (ia, ib) = (a.mr.iova(), b.mr.iova());
    let rkey = b.mr.rkey();
    let rsge = [Sge {
        addr: ib,
        len: 256,
        lkey: lb,
    }];
    let recvs = [RecvWr {
        wr_id: 0,
        sg_list: &rsge,
    }; 4];
    let ssge = [
        Sge {
            addr: ia,
            len: 64,
            lkey: la,
        },
        Sge {
            addr: ia + 128,
            len: 32,
            lkey: la,
        },
    ];
    let sends = [
        SendWr::new(1, SendOp::Send, &ssge).with_flags(SendFlags::empty()),
        SendWr::new(2, SendOp::Send, &[])
            .with_inline(b"sixty-four bytes at most, copied into the WQE"),
        SendWr::new(
            3,
            SendOp::RdmaWrite {
                remote_addr: ib + 4096,
                rkey,
            },
            &ssge,
        )
        .with_flags(SendFlags::empty()),
        SendWr::new(4, SendOp::SendWithImm { imm: 1 }, &ssge[..1]),
        SendWr::new(
            5,
            SendOp::RdmaWriteWithImm {
                remote_addr: ib + 4096,
                rkey,
                imm: 2,
            },
            &ssge,
        ),
    ];
    a.mr.mem_mut().write_bytes(0, &[0xa1; 64]);
    a.mr.mem_mut().write_bytes(128, &[0xb2; 32]);
    let mut wc = [WorkCompletion::default(); 16];
    let (mut got_a, mut got_b) = (0, 0);
    for round in 0..100 {
        let (r, n) = counted(|| qb.post_recv(&recvs));
        r.unwrap();
        assert_eq!(n, 0, "post_recv allocated (round {round})");
        held.held.hold.store(true, Ordering::SeqCst);
        let (r, n) = counted(|| qa.post_send(&sends));
        held.held.hold.store(false, Ordering::SeqCst);
        r.unwrap();
        assert_eq!(n, 0, "post_send allocated (round {round})");
        assert_eq!(held.held.n.load(Ordering::SeqCst), 1, "one doorbell");
        held.release();
        assert!(fabric.run_until_idle());
        let (r, n) = counted(|| a.cq.poll(&mut wc));
        assert_eq!(n, 0, "poll allocated (round {round})");
        let k = r.unwrap();
        assert!(wc[..k].iter().all(|c| c.status == WcStatus::Success));
        got_a += k;
        let (r, n) = counted(|| b.cq.poll(&mut wc));
        assert_eq!(n, 0, "poll allocated (round {round})");
        let k = r.unwrap();
        assert!(wc[..k].iter().all(|c| c.status == WcStatus::Success));
        got_b += k;
    }
    // Three signalled requests per round; four consume a receive.
    assert_eq!((got_a, got_b), (300, 400));
    let mut seen = [0u8; 96];
    b.mr.mem().read_bytes(4096, &mut seen);
    assert_eq!(&seen[..64], &[0xa1; 64]);
    assert_eq!(
        &seen[64..],
        &[0xb2; 32],
        "the WRITE's second entry lands after its first"
    );
}
