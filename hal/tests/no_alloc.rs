//! Posting and polling allocate nothing: a counting global allocator watches every post,
//! doorbell, poll and consumer-index update.

use std::sync::atomic::{AtomicU64, Ordering};
use uhca_fwif::consts::{CqeOpcode, WqeCtrlFlags, WqeOpcode};
use uhca_fwif::cqe::{Cqe64, op_own_of};
use uhca_hal::cq::{Completion, CqLayout, CqRing};
use uhca_hal::eq::EqRing;
use uhca_hal::testing::FakePlatform;
use uhca_hal::wq::{QpLayout, QpRings, Sge, SqDoorbell};
use uhca_hal::{Bar, DmaBuf, DmaMem};
use uhca_test_support::{CountingAlloc, counted};
use zerocopy::{FromZeros, IntoBytes};

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

/// A doorbell register that is one word of memory (the fake BAR keeps a log, which
/// allocates).
struct RegBar(AtomicU64);

// SAFETY: no memory is touched besides the atomic.
unsafe impl Bar for RegBar {
    fn bar_len(&self) -> usize {
        0x10000
    }
    fn read32(&self, _: usize) -> u32 {
        0
    }
    fn write32(&self, _: usize, v: u32) {
        self.0.store(v as u64, Ordering::Relaxed)
    }
    fn read64(&self, _: usize) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    fn write64(&self, _: usize, v: u64) {
        self.0.store(v, Ordering::Relaxed)
    }
}

#[test]
fn post_doorbell_and_poll_allocate_nothing() {
    let p = FakePlatform::new();
    let bar = RegBar(AtomicU64::new(0));
    let ql = QpLayout::new(9, Some((6, 5)), Some(7));
    let mut qp = QpRings::new(
        DmaBuf::alloc(&p, ql.buffer_len(), 4096).unwrap(),
        ql,
        SqDoorbell::new(0x4000),
    )
    .unwrap();
    let cl = CqLayout::new(3, 6);
    let mut cq = CqRing::new(DmaBuf::alloc(&p, cl.buffer_len(), 4096).unwrap(), cl).unwrap();
    let cq_base = cq.mem().iova();
    let mut eq = EqRing::new(DmaBuf::alloc(&p, 64 * 64, 4096).unwrap(), 1, 6).unwrap();
    let eq_base = eq.mem().iova();
    let inline = [0x5au8; 64];
    let mut out = [Completion::default(); 16];
    let rounds = if cfg!(miri) { 3 } else { 200 };
    let mut allocations = 0;
    for round in 0..rounds {
        let ((), n) = counted(|| {
            for i in 0..32u32 {
                let mut w = qp.sq_wqe(WqeOpcode::Send, WqeCtrlFlags::CQ_UPDATE).unwrap();
                if i % 2 == 0 {
                    w.data(0x1000, 64, 1).unwrap();
                } else {
                    w.inline(&inline).unwrap();
                }
                w.finish();
                if i % 8 == 0 {
                    qp.ring_sq_doorbell(&bar);
                }
            }
            qp.ring_sq_doorbell(&bar);
            let pi = qp.sq_producer();
            qp.sq_complete((pi - 2) as u16, 2).unwrap();
            qp.post_recv(&[Sge {
                addr: 1,
                len: 2,
                lkey: 3,
            }])
            .unwrap();
            qp.ring_rq_doorbell();
            qp.rq_complete(1).unwrap();
        });
        // The device writes 32 CQEs (not counted: it is the test's device).
        for k in 0..32u32 {
            let n = round * 32 + k;
            let mut c = Cqe64::new_zeroed();
            c.byte_cnt.set(n);
            c.op_own = op_own_of(CqeOpcode::Req, ((n >> 6) & 1) as u8);
            p.dma
                .device_write(cq_base + (n as u64 % 64) * 64, c.as_bytes());
        }
        // And one EQE.
        let mut e = [0u8; 64];
        e[63] = ((round >> 6) & 1) as u8;
        p.dma.device_write(eq_base + (round as u64 % 64) * 64, &e);
        let (got, m) = counted(|| {
            let n = cq.poll(&mut out) + cq.poll(&mut out);
            let ev = eq.poll_one().is_some();
            eq.arm(&bar, 0x4000);
            cq.arm(&bar, 0x4000, false);
            (n, ev)
        });
        assert_eq!(got, (32, true));
        allocations += n + m;
    }
    assert_eq!(allocations, 0, "the datapath allocated");
    assert!(bar.read64(0) != 0, "doorbells were rung");
}
