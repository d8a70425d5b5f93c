//! Loom models of the two device-facing protocols, run on the real ring code
//! ([`QpRings`], [`CqRing`]) over memory whose every access loom sees, with the barriers
//! mapped to loom fences (see [`crate::barriers`]); of the protocol between the thread that
//! posts and the thread that polls, on the real work-request tables ([`SqTable`],
//! [`RqTable`]); and of [`SpinLock`].
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p uhca-hal --release --lib loom`.
//!
//! Each model has a twin that weakens one barrier to nothing ([`barriers::loom_weaken`]),
//! one edge of the tables' protocol to relaxed ([`wrid::loom_weaken`]) or the lock's
//! orderings to relaxed ([`host::loom_weaken_lock`]), and must fail: that proves the
//! model can see the ordering it provides.

use crate::barriers::{self, Barrier};
use crate::cq::{Completion, CqLayout, CqRing};
use crate::dma::DmaMem;
use crate::host::{self, GlobalHostMem, SpinLock};
use crate::platform::Bar;
use crate::wq::{QpLayout, QpRings, SqDoorbell};
use crate::wrid::{self, Edge, RqTable, SendEntry, SqTable};
use loom::sync::Arc;
use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::vec::Vec;
use uhca_fwif::consts::{WqeCtrlFlags, WqeOpcode};
use uhca_fwif::wqe::WqeCtrlSeg;

/// DMA memory as loom atomics, one per big-endian 32-bit word; every access is `Relaxed`
/// (what a device's DMA guarantees), so only the barriers order them.
#[derive(Clone)]
struct LoomMem {
    words: Arc<Vec<AtomicU32>>,
}

impl LoomMem {
    fn new(len: usize) -> Self {
        LoomMem {
            words: Arc::new((0..len / 4).map(|_| AtomicU32::new(0)).collect()),
        }
    }
    fn word(&self, off: usize) -> &AtomicU32 {
        &self.words[off / 4]
    }
}

impl DmaMem for LoomMem {
    fn len(&self) -> usize {
        self.words.len() * 4
    }
    fn iova(&self) -> u64 {
        0x1000
    }
    fn read_u8(&self, off: usize) -> u8 {
        (self.word(off).load(Relaxed) >> (24 - 8 * (off % 4))) as u8
    }
    fn read_be16(&self, off: usize) -> u16 {
        (self.word(off).load(Relaxed) >> (16 - 8 * (off % 4))) as u16
    }
    fn read_be32(&self, off: usize) -> u32 {
        self.word(off).load(Relaxed)
    }
    fn read_be64(&self, off: usize) -> u64 {
        (self.read_be32(off) as u64) << 32 | self.read_be32(off + 4) as u64
    }
    fn write_u8(&mut self, off: usize, v: u8) {
        let w = self.word(off);
        let sh = 24 - 8 * (off % 4);
        w.store(
            (w.load(Relaxed) & !(0xff << sh)) | (v as u32) << sh,
            Relaxed,
        );
    }
    fn write_be32(&mut self, off: usize, v: u32) {
        self.word(off).store(v, Relaxed);
    }
    fn write_be64(&mut self, off: usize, v: u64) {
        self.write_be32(off, (v >> 32) as u32);
        self.write_be32(off + 4, v as u32);
    }
    fn write_bytes(&mut self, off: usize, src: &[u8]) {
        for (i, b) in src.iter().enumerate() {
            self.write_u8(off + i, *b);
        }
    }
    fn read_bytes(&self, off: usize, dst: &mut [u8]) {
        // Word by word where aligned, so a CQE costs 16 loads.
        let mut i = 0;
        while i < dst.len() {
            if (off + i).is_multiple_of(4) && i + 4 <= dst.len() {
                dst[i..i + 4].copy_from_slice(&self.read_be32(off + i).to_be_bytes());
                i += 4;
            } else {
                dst[i] = self.read_u8(off + i);
                i += 1;
            }
        }
    }
    fn fill(&mut self, off: usize, len: usize, byte: u8) {
        for i in 0..len {
            self.write_u8(off + i, byte);
        }
    }
}

/// A BAR whose UAR doorbell is one loom atomic.
struct LoomBar {
    doorbell: AtomicU64,
}

// SAFETY: no memory is touched; accesses are loom atomics.
unsafe impl Bar for LoomBar {
    fn bar_len(&self) -> usize {
        0x2000
    }
    fn read32(&self, _: usize) -> u32 {
        0
    }
    fn write32(&self, _: usize, _: u32) {}
    fn read64(&self, _: usize) -> u64 {
        self.doorbell.load(Relaxed)
    }
    fn write64(&self, _: usize, v: u64) {
        self.doorbell.store(v, Relaxed);
    }
}

fn model(weaken: Option<Barrier>, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(move || {
        barriers::loom_weaken(weaken);
        f()
    });
}

const QPN: u32 = 0x42;

/// The producer posts one SEND and rings the doorbell; the device reacts either to the
/// doorbell record (as it does when it polls it) or to the UAR doorbell, and must then
/// find the whole WQE and a send counter that covers it.
fn sq_protocol(weaken: Option<Barrier>) {
    model(weaken, move || {
        let layout = QpLayout::new(QPN, None, Some(1));
        let mem = LoomMem::new(layout.buffer_len());
        let dev = mem.clone();
        let bar = Arc::new(LoomBar {
            doorbell: AtomicU64::new(0),
        });
        let bar2 = bar.clone();
        let producer = loom::thread::spawn(move || {
            barriers::loom_weaken(weaken);
            let mut qp = QpRings::new(mem, layout, SqDoorbell::new(0)).unwrap();
            let mut w = qp.sq_wqe(WqeOpcode::Send, WqeCtrlFlags::CQ_UPDATE).unwrap();
            w.data(0xabcd_0000, 64, 7).unwrap();
            w.finish();
            qp.ring_sq_doorbell(&*bar2);
        });
        let check_wqe = |m: &LoomMem| {
            let ctrl_hi = m.read_be32(0);
            let ctrl_lo = m.read_be32(4);
            assert_eq!(
                ctrl_hi,
                WqeCtrlSeg::opmod_idx_opcode_of(0, 0, WqeOpcode::Send),
                "stale control segment"
            );
            assert_eq!(
                ctrl_lo,
                WqeCtrlSeg::qpn_ds_of(QPN, 2),
                "stale control segment"
            );
            assert_eq!(m.read_be64(24), 0xabcd_0000, "stale data segment");
        };
        let dbr = layout.dbr_offset + 4;
        // The device, on the doorbell record path: a counter of 1 publishes WQE 0.
        if dev.read_be32(dbr) == 1 {
            loom::sync::atomic::fence(loom::sync::atomic::Ordering::Acquire);
            check_wqe(&dev);
        }
        // On the UAR doorbell path: the doorbell names WQE 0 of QPN; the record must
        // already cover it.
        let db = u64::from_be(bar.doorbell.load(Relaxed));
        if db != 0 {
            loom::sync::atomic::fence(loom::sync::atomic::Ordering::Acquire);
            assert_eq!(db & 0xffff_ff00, (QPN as u64) << 8);
            assert_eq!(
                dev.read_be32(dbr),
                1,
                "doorbell seen before the doorbell record"
            );
            check_wqe(&dev);
        }
        producer.join().unwrap();
    });
}

/// The device writes a CQE (body, then release, then `op_own`); the consumer polls once
/// and, if it takes the CQE, must see the body the device wrote, never an older one.
fn cq_owner_protocol(weaken: Option<Barrier>) {
    model(weaken, move || {
        let layout = CqLayout::new(3, 1);
        let mem = LoomMem::new(layout.buffer_len());
        let mut dev = mem.clone();
        let mut cq = CqRing::new(mem, layout).unwrap();
        let device = loom::thread::spawn(move || {
            // byte_cnt (offset 0x2c), then op_own word (wqe_counter 5, opcode REQ, owner 0).
            dev.write_be32(0x2c, 1234);
            loom::sync::atomic::fence(loom::sync::atomic::Ordering::Release);
            dev.write_be32(0x3c, 5 << 16);
        });
        barriers::loom_weaken(weaken);
        if let Some(c) = cq.poll_one() {
            let Completion::Success(s) = c else {
                panic!("{c:?}")
            };
            assert_eq!(s.wqe_counter, 5);
            assert_eq!(s.byte_count, 1234, "CQE body read before the owner bit");
        }
        device.join().unwrap();
    });
}

#[test]
fn loom_sq_doorbell_record_protocol() {
    sq_protocol(None);
}

#[test]
#[should_panic(expected = "stale")]
fn loom_sq_without_wqe_barrier_is_caught() {
    sq_protocol(Some(Barrier::WqeBeforeDoorbellRecord));
}

#[test]
#[should_panic(expected = "doorbell seen before the doorbell record")]
fn loom_sq_without_record_barrier_is_caught() {
    sq_protocol(Some(Barrier::DoorbellRecordBeforeMmio));
}

#[test]
fn loom_cq_owner_bit_consumer() {
    cq_owner_protocol(None);
}

#[test]
#[should_panic(expected = "CQE body read before the owner bit")]
fn loom_cq_without_read_barrier_is_caught() {
    cq_owner_protocol(Some(Barrier::CqeOwnerBeforeCqeRead));
}

/// Runs `f` under loom with `edge` of the tables' protocol weakened on the main thread (a
/// model's threads weaken it on themselves too).
fn table_model(edge: Option<Edge>, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(move || {
        wrid::loom_weaken(edge);
        f()
    });
}

/// What the model's threads also track of each slot: a loom cell the poster writes before
/// it records a WQE in the slot and the poller reads while the WQE is outstanding. Loom
/// reports a race on it ("Causality violation") if the poster reuses a slot the poller has
/// not retired in the order the protocol promises.
struct Shadow(Vec<loom::cell::UnsafeCell<u64>>);

// SAFETY: loom's cells check every access for races themselves; this is a model.
unsafe impl Sync for Shadow {}

impl Shadow {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Shadow(
            (0..n).map(|_| loom::cell::UnsafeCell::new(0)).collect(),
        ))
    }
    fn write(&self, slot: usize, v: u64) {
        // SAFETY: loom checks the access against the others (a model, not the driver).
        self.0[slot].with_mut(|p| unsafe { *p = v });
    }
    fn read(&self, slot: usize) -> u64 {
        // SAFETY: as for `write`.
        self.0[slot].with(|p| unsafe { *p })
    }
}

/// Send table of 2 basic blocks: the poster records and publishes WQEs 0 and 1, then WQE 2
/// in slot 0 again if the poller has retired WQE 0; the poller takes whatever is
/// outstanding, in order. Every `wr_id` the poller sees must be the one recorded; with
/// `shadow`, a slot must never be rewritten while the poller may still read it.
fn sq_table_protocol(edge: Option<Edge>, shadow: bool) {
    table_model(edge, move || {
        let t = Arc::new(SqTable::new(GlobalHostMem, 1).unwrap());
        let sh = Shadow::new(2);
        let (t2, sh2) = (t.clone(), sh.clone());
        let poster = loom::thread::spawn(move || {
            wrid::loom_weaken(edge);
            let post = |k: u16| {
                if shadow {
                    sh2.write(k as usize % 2, 100 + k as u64);
                }
                t2.record(&SendEntry {
                    wr_id: 100 + k as u64,
                    wqe_index: k,
                    wqebbs: 1,
                    tag: 0,
                    signaled: true,
                });
                t2.publish(k as u32 + 1);
            };
            post(0);
            post(1);
            // Room for WQE 2 only once WQE 0 is retired.
            if t2.consumer() >= 1 {
                post(2);
            }
        });
        for k in 0..3u16 {
            let Some(e) = t.outstanding(k) else { break };
            assert_eq!(e.wr_id, 100 + k as u64, "stale wr_id: not the one recorded");
            if shadow {
                assert_eq!(sh.read(k as usize % 2), 100 + k as u64);
            }
            t.retire(&e);
        }
        poster.join().unwrap();
    });
}

/// Receive table of 2 WQEs, the same traffic as [`sq_table_protocol`]; the poller takes
/// WQEs in order with `take`.
fn rq_table_protocol(edge: Option<Edge>, shadow: bool) {
    table_model(edge, move || {
        let t = Arc::new(RqTable::new(GlobalHostMem, 1).unwrap());
        let sh = Shadow::new(2);
        let (t2, sh2) = (t.clone(), sh.clone());
        let poster = loom::thread::spawn(move || {
            wrid::loom_weaken(edge);
            let post = |k: u32| {
                if shadow {
                    sh2.write(k as usize % 2, 100 + k as u64);
                }
                t2.record(k, 100 + k as u64);
                t2.publish(k + 1);
            };
            post(0);
            post(1);
            if t2.consumer() >= 1 {
                post(2);
            }
        });
        for k in 0..3u32 {
            // The slot is read (as the driver reads the user's buffer of a receive) while
            // the WQE is outstanding: after it is published, before `take` retires it.
            if shadow {
                if t.in_flight() == 0 {
                    break;
                }
                assert_eq!(sh.read(k as usize % 2), 100 + k as u64);
            }
            let Some(wr_id) = t.take(k as u16) else { break };
            assert_eq!(wr_id, 100 + k as u64, "stale wr_id: not the one recorded");
        }
        poster.join().unwrap();
    });
}

#[test]
fn loom_sq_table_poster_and_poller() {
    sq_table_protocol(None, true);
}

#[test]
#[should_panic(expected = "stale wr_id")]
fn loom_sq_table_without_publish_ordering_is_caught() {
    sq_table_protocol(Some(Edge::Publish), false);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn loom_sq_table_without_retire_ordering_is_caught() {
    sq_table_protocol(Some(Edge::Retire), true);
}

#[test]
fn loom_rq_table_poster_and_poller() {
    rq_table_protocol(None, true);
}

#[test]
#[should_panic(expected = "stale wr_id")]
fn loom_rq_table_without_publish_ordering_is_caught() {
    rq_table_protocol(Some(Edge::Publish), false);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn loom_rq_table_without_retire_ordering_is_caught() {
    rq_table_protocol(Some(Edge::Retire), true);
}

/// Two threads each try once to take the lock and, if they get it, add 1 to a loom cell
/// under it: the cell's accesses must be ordered by the lock (loom checks), and the cell
/// must count every holder. (`try_lock` is what `lock` loops on, with the same orderings; a
/// model of the loop itself would have loom explore the spinning without end.)
fn spin_lock_protocol(weaken: bool) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(move || {
        host::loom_weaken_lock(weaken);
        let l = Arc::new(SpinLock::new(loom::cell::UnsafeCell::new(0u64)));
        let l2 = l.clone();
        let add = move |l: &SpinLock<loom::cell::UnsafeCell<u64>>| match l.try_lock() {
            Some(g) => {
                // SAFETY: loom checks the access (a model).
                g.with_mut(|p| unsafe { *p += 1 });
                1
            }
            None => 0,
        };
        let other = loom::thread::spawn(move || {
            host::loom_weaken_lock(weaken);
            add(&l2)
        });
        let mine = add(&l);
        let theirs = other.join().unwrap();
        assert!(mine + theirs >= 1, "nobody got a free lock");
        let g = l.try_lock().expect("free again");
        // SAFETY: as above.
        let count = g.with(|p| unsafe { *p });
        assert_eq!(count, mine + theirs, "an update was lost");
    });
}

#[test]
fn loom_spin_lock_excludes() {
    spin_lock_protocol(false);
}

#[test]
#[should_panic(expected = "Causality violation")]
fn loom_spin_lock_without_orderings_is_caught() {
    spin_lock_protocol(true);
}
