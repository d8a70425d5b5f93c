//! Property tests of the rings, decoding every byte independently with the fwif layouts.
//!
//! * SQ: random WQE shapes (SEND with 0..8 gather entries, RDMA WRITE, atomics, UD with a
//!   datagram segment, inline data of 0..300 bytes) posted over many laps of small rings,
//!   with a device consuming at random points: every WQE not yet consumed still decodes to
//!   exactly what was posted (so nothing overwrote it), at the WQE index the producer
//!   counter says, in the PRM layout; the SQ refuses a WQE exactly when it does not fit.
//! * CQ: a device writes CQEs only into entries the published consumer index has freed;
//!   the poller returns each CQE once, in order, never a stale one from an earlier lap,
//!   and returns nothing only when nothing is pending.

use proptest::prelude::*;
use std::collections::VecDeque;
use uhca_fwif::consts::{CqeOpcode, WqeCtrlFlags, WqeOpcode};
use uhca_fwif::cqe::{Cqe64, op_own_of};
use uhca_fwif::wqe::{Av, WqeAtomicSeg, WqeCtrlSeg, WqeDataSeg, WqeInlineSeg, WqeRaddrSeg};
use uhca_hal::cq::{Completion, CqLayout, CqRing};
use uhca_hal::testing::{FAKE_UAR, FakePlatform};
use uhca_hal::wq::{QpLayout, QpRings, SqDoorbell, WqError};
use uhca_hal::{DmaBuf, DmaMem};
use zerocopy::{FromBytes, FromZeros, IntoBytes};

const QPN: u32 = 0x1234;

#[derive(Clone, Debug)]
enum Shape {
    Send(Vec<(u64, u32, u32)>),
    Write(u64, u32, Vec<(u64, u32, u32)>),
    Atomic(u64, u64),
    Ud(u32, Vec<(u64, u32, u32)>),
    Inline(Vec<u8>),
}

#[derive(Clone, Debug)]
enum Op {
    Post(Shape, u8, u32),
    Consume(usize),
    Doorbell,
}

fn sges(max: usize) -> impl Strategy<Value = Vec<(u64, u32, u32)>> {
    prop::collection::vec((any::<u64>(), 0u32..0x8000_0000, any::<u32>()), 0..=max)
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        sges(8).prop_map(Shape::Send),
        (any::<u64>(), any::<u32>(), sges(4)).prop_map(|(a, k, s)| Shape::Write(a, k, s)),
        (any::<u64>(), any::<u64>()).prop_map(|(a, b)| Shape::Atomic(a, b)),
        (any::<u32>(), sges(3)).prop_map(|(q, s)| Shape::Ud(q, s)),
        prop::collection::vec(any::<u8>(), 0..300).prop_map(Shape::Inline),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (shape(), prop::sample::select(vec![0u8, 0x08, 0x0a, 0x40, 0x60]), any::<u32>())
            .prop_map(|(s, f, i)| Op::Post(s, f, i)),
        3 => (1usize..6).prop_map(Op::Consume),
        1 => Just(Op::Doorbell),
    ]
}

fn av(dqpn: u32) -> Av {
    let mut a = Av::new_zeroed();
    a.qkey.set(0x1111_2222);
    a.dqp_dct.set(Av::EXTENDED_UD_AV | (dqpn & 0xff_ffff));
    a.rgid = [0xfe; 16];
    a.tclass = 3;
    a
}

/// Builds the WQE for `shape`; returns the opcode and the DS count it should have.
fn post<M: DmaMem>(
    qp: &mut QpRings<M>,
    shape: &Shape,
    flags: u8,
    imm: u32,
) -> Result<(u16, u8, WqeOpcode), WqError> {
    let (opcode, flags) = (
        match shape {
            Shape::Send(_) | Shape::Inline(_) | Shape::Ud(..) => WqeOpcode::SendImm,
            Shape::Write(..) => WqeOpcode::RdmaWrite,
            Shape::Atomic(..) => WqeOpcode::AtomicFa,
        },
        WqeCtrlFlags::from_bits_retain(flags),
    );
    let mut w = qp.sq_wqe(opcode, flags)?;
    w.imm(imm);
    match shape {
        Shape::Send(s) => {
            for &(a, l, k) in s {
                w.data(a, l, k)?;
            }
        }
        Shape::Write(a, k, s) => {
            w.raddr(*a, *k)?;
            for &(a, l, k) in s {
                w.data(a, l, k)?;
            }
        }
        Shape::Atomic(a, b) => {
            w.raddr(0x1000, 7)?.atomic(*a, *b)?.data(0x2000, 8, 9)?;
        }
        Shape::Ud(q, s) => {
            w.datagram(&av(*q))?;
            for &(a, l, k) in s {
                w.data(a, l, k)?;
            }
        }
        Shape::Inline(d) => {
            w.inline(d)?;
        }
    }
    let p = w.finish();
    Ok((p.wqe_index, p.wqebbs, opcode))
}

fn expected_ds(shape: &Shape) -> usize {
    1 + match shape {
        Shape::Send(s) => s.len(),
        Shape::Write(_, _, s) => 1 + s.len(),
        Shape::Atomic(..) => 3,
        Shape::Ud(_, s) => 3 + s.len(),
        Shape::Inline(d) => (4 + d.len()).div_ceil(16),
    }
}

/// Reads a WQE's bytes out of the ring (following the wrap) and checks every field.
#[allow(clippy::too_many_arguments)]
fn check_wqe<M: DmaMem>(
    mem: &M,
    sq_off: usize,
    ring: usize,
    start: u32,
    bbs: u8,
    shape: &Shape,
    flags: u8,
    imm: u32,
    opcode: WqeOpcode,
) {
    let mut b = vec![0u8; bbs as usize * 64];
    for (i, byte) in b.iter_mut().enumerate() {
        *byte = mem.read_u8(sq_off + ((start as usize * 64 + i) % ring));
    }
    let ctrl = WqeCtrlSeg::read_from_bytes(&b[..16]).unwrap();
    assert_eq!(ctrl.opcode(), opcode);
    assert_eq!(
        ctrl.wqe_index(),
        start as u16,
        "WQE index is the producer counter"
    );
    assert_eq!(ctrl.qpn(), QPN);
    assert_eq!(ctrl.ds() as usize, expected_ds(shape));
    assert_eq!(ctrl.fm_ce_se, flags);
    assert_eq!(ctrl.imm.get(), imm);
    assert_eq!(
        bbs as usize,
        expected_ds(shape).div_ceil(4),
        "WQEBB accounting"
    );
    let seg = |i: usize| &b[16 * i..16 * i + 16];
    let check_data = |first: usize, s: &[(u64, u32, u32)]| {
        for (i, &(a, l, k)) in s.iter().enumerate() {
            let d = WqeDataSeg::read_from_bytes(seg(first + i)).unwrap();
            assert_eq!((d.addr.get(), d.byte_count.get(), d.lkey.get()), (a, l, k));
        }
    };
    match shape {
        Shape::Send(s) => check_data(1, s),
        Shape::Write(a, k, s) => {
            let r = WqeRaddrSeg::read_from_bytes(seg(1)).unwrap();
            assert_eq!((r.raddr.get(), r.rkey.get()), (*a, *k));
            check_data(2, s);
        }
        Shape::Atomic(x, y) => {
            let at = WqeAtomicSeg::read_from_bytes(seg(2)).unwrap();
            assert_eq!((at.swap_add.get(), at.compare.get()), (*x, *y));
            check_data(3, &[(0x2000, 8, 9)]);
        }
        Shape::Ud(q, s) => {
            assert_eq!(Av::read_from_bytes(&b[16..64]).unwrap(), av(*q));
            check_data(4, s);
        }
        Shape::Inline(d) => {
            let h = WqeInlineSeg::read_from_bytes(&b[16..20]).unwrap();
            assert_eq!(h.inline_len(), Some(d.len() as u32));
            assert_eq!(&b[20..20 + d.len()], d.as_slice());
        }
    }
}

fn cases(n: u32) -> ProptestConfig {
    ProptestConfig {
        cases: if cfg!(miri) { 3 } else { n },
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(cases(200))]

    #[test]
    fn sq_never_overwrites_unconsumed_wqes(log_sq in 2u8..=6, ops in prop::collection::vec(op(), 1..if cfg!(miri) { 40 } else { 400 })) {
        let p = FakePlatform::new();
        let layout = QpLayout::new(QPN, None, Some(log_sq));
        let (sq_off, _) = layout.sq.unwrap();
        let ring = 64usize << log_sq;
        let mut qp = QpRings::new(DmaBuf::alloc(&p, layout.buffer_len(), 4096).unwrap(), layout, SqDoorbell::new(FAKE_UAR)).unwrap();
        let mut outstanding: VecDeque<(u32, u8, Shape, u8, u32, WqeOpcode)> = VecDeque::new();
        let mut pi = 0u32;
        let mut laps_bbs = 0u64;
        for op in ops {
            match op {
                Op::Post(shape, flags, imm) => {
                    let used: u32 = outstanding.iter().map(|o| o.1 as u32).sum();
                    let need = expected_ds(&shape).div_ceil(4) as u32;
                    match post(&mut qp, &shape, flags, imm) {
                        Ok((idx, bbs, opcode)) => {
                            prop_assert_eq!(idx, pi as u16);
                            prop_assert!(used + bbs as u32 <= 1 << log_sq, "posted into unconsumed WQEBBs");
                            outstanding.push_back((pi, bbs, shape, flags, imm, opcode));
                            pi += bbs as u32;
                            laps_bbs += bbs as u64;
                        }
                        Err(WqError::SqFull { .. }) => prop_assert!(used + need > 1 << log_sq, "refused a WQE that fits"),
                        Err(WqError::WqeTooLarge { .. }) => prop_assert!(expected_ds(&shape) > 63 || need > 16 || need > 1 << log_sq),
                        Err(e) => prop_assert!(false, "unexpected {e:?}"),
                    }
                }
                Op::Consume(n) => {
                    let n = n.min(outstanding.len());
                    if n > 0 {
                        let last = outstanding[n - 1].clone();
                        qp.sq_complete(last.0 as u16, last.1).unwrap();
                        outstanding.drain(..n);
                    }
                }
                Op::Doorbell => {
                    qp.ring_sq_doorbell(&p);
                    prop_assert_eq!(qp.mem().read_be32(layout.dbr_offset + 4), pi & 0xffff);
                }
            }
            for (start, bbs, shape, flags, imm, opcode) in &outstanding {
                check_wqe(qp.mem(), sq_off, ring, *start, *bbs, shape, *flags, *imm, *opcode);
            }
        }
        let _ = laps_bbs;
    }
}

#[derive(Clone, Debug)]
enum CqOp {
    Produce(usize),
    Poll(usize),
    Publish,
}

proptest! {
    #![proptest_config(cases(200))]

    #[test]
    fn cq_never_returns_a_stale_cqe(log_cq in 1u8..=4, ops in prop::collection::vec(prop_oneof![
        (1usize..8).prop_map(CqOp::Produce), (1usize..8).prop_map(CqOp::Poll), Just(CqOp::Publish)
    ], 1..if cfg!(miri) { 40 } else { 300 })) {
        let p = FakePlatform::new();
        let layout = CqLayout::new(5, log_cq);
        let n = 1u32 << log_cq;
        let mut cq = CqRing::new(DmaBuf::alloc(&p, layout.buffer_len(), 4096).unwrap(), layout).unwrap();
        let base = cq.mem().iova();
        let mut produced = 0u32; // CQEs the device wrote
        let mut taken = 0u32;    // CQEs the poller returned
        for op in ops {
            match op {
                CqOp::Produce(k) => {
                    // The device only writes entries the published consumer index freed.
                    let published = cq.mem().read_be32(layout.dbr_offset);
                    for _ in 0..k {
                        if produced - published >= n {
                            break;
                        }
                        let mut c = Cqe64::new_zeroed();
                        c.wqe_counter.set(produced as u16);
                        c.byte_cnt.set(produced);
                        c.sop_drop_qpn.set(QPN);
                        c.op_own = op_own_of(CqeOpcode::Req, ((produced / n) & 1) as u8);
                        let at = base + ((produced % n) as u64) * 64;
                        p.dma.device_write(at, &c.as_bytes()[..63]);
                        p.dma.device_write(at + 63, &[c.op_own]);
                        produced += 1;
                    }
                }
                CqOp::Poll(k) => {
                    for _ in 0..k {
                        match cq.poll_one() {
                            Some(Completion::Success(s)) => {
                                prop_assert!(taken < produced, "returned a CQE the device has not written");
                                prop_assert_eq!(s.byte_count, taken, "stale or out-of-order CQE");
                                prop_assert_eq!(s.qpn, QPN);
                                taken += 1;
                            }
                            Some(c) => prop_assert!(false, "{c:?}"),
                            None => {
                                prop_assert_eq!(taken, produced, "a pending CQE was not returned");
                                break;
                            }
                        }
                    }
                }
                CqOp::Publish => cq.update_consumer_index(),
            }
        }
    }
}
