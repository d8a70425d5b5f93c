//! The HAL's completion- and event-queue pollers over rings of arbitrary bytes, as a device
//! (faulty or hostile) may leave them. The first bytes pick the ring's shape (CQ: 1 to 16
//! entries, 64- or 128-byte stride; EQ: 1 to 16 entries); the rest fill the ring.
//!
//! Properties: nothing panics; a ring the device does not write again yields at most one
//! lap of entries; the HAL's one CQE decoder (`poll_next`'s in-place view, which
//! `poll_one` reads whole) agrees with the raw copy of `poll_raw` read through `fwif`'s
//! layout on every entry; every EQE
//! reads as each event data type the driver uses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uhca_fwif::consts::CqeOpcode;
use uhca_fwif::eqe::{EqeCmd, EqeComp, EqeCqErr, EqePageReq, EqePortState, EqeQpSrq};
use uhca_hal::DmaBuf;
use uhca_hal::cq::{Completion, CqLayout, CqRing};
use uhca_hal::dma::DmaMem;
use uhca_hal::eq::EqRing;
use uhca_hal::testing::FakePlatform;

/// Writes `len` bytes at `iova` as the device would: `bytes` repeated.
fn device_fill(p: &FakePlatform, iova: u64, len: usize, bytes: &[u8]) {
    if bytes.is_empty() {
        return;
    }
    let mut off = 0;
    while off < len {
        let n = (len - off).min(bytes.len());
        p.dma.device_write(iova + off as u64, &bytes[..n]);
        off += n;
    }
}

fn cq(p: &FakePlatform, shape: u8, bytes: &[u8]) {
    let mut layout = CqLayout::new(1, (shape & 0x7).min(4));
    layout.log_stride = 6 + (shape >> 3 & 1);
    layout.dbr_offset = layout.cqe_bytes();
    let cnt = 1usize << layout.log_cqe_cnt;
    let rings: Vec<CqRing<DmaBuf<&FakePlatform>>> = (0..3)
        .map(|_| {
            let buf = DmaBuf::alloc(p, layout.buffer_len(), 4096).unwrap();
            let r = CqRing::new(buf, layout).unwrap();
            // The device's bytes over the initialised ring (the doorbell record stays).
            device_fill(p, r.mem().iova(), layout.cqe_bytes(), bytes);
            r
        })
        .collect();
    let [mut a, mut b, mut c] = <[_; 3]>::try_from(rings).ok().unwrap();
    let mut n = 0;
    loop {
        let one = a.poll_one();
        let raw = b.poll_raw();
        match (&one, &raw) {
            (None, None) => {}
            (Some(c), Some(r)) => {
                assert_eq!(c.qpn(), r.qpn(), "QPN at CQE {n}");
                assert_eq!(c.wqe_counter(), r.wqe_counter.get(), "counter at CQE {n}");
                if let Completion::Success(s) = c {
                    assert_eq!(
                        (s.opcode, s.byte_count, s.remote_qpn, s.timestamp),
                        (r.opcode(), r.byte_cnt.get(), r.remote_qpn(), r.timestamp()),
                        "CQE {n}"
                    );
                }
            }
            (x, y) => panic!("poll_one gave {x:?}, poll_raw {y:?}"),
        }
        let view = c.poll_next().map(|v| {
            let (synd, vendor) = v.error_syndromes();
            let _ = (v.ml_path_slid(), v.flags_rqpn(), v.immediate(), v.sop());
            (
                v.opcode(),
                v.qpn(),
                v.wqe_counter(),
                v.byte_cnt(),
                synd,
                vendor,
            )
        });
        match (one, view) {
            (None, None) => break,
            (Some(Completion::Success(s)), Some((op, qpn, wc, bytes, _, _))) => {
                assert_eq!(
                    (s.opcode, s.qpn, s.wqe_counter, s.byte_count),
                    (op, qpn, wc, bytes)
                );
                let _ = s.wqe_opcode();
            }
            (Some(Completion::Error(e)), Some((op, qpn, wc, _, synd, vendor))) => {
                assert!(matches!(op, CqeOpcode::ReqErr | CqeOpcode::RespErr));
                assert_eq!(
                    (
                        e.opcode,
                        e.qpn,
                        e.wqe_counter,
                        e.syndrome,
                        e.vendor_syndrome
                    ),
                    (op, qpn, wc, synd, vendor)
                );
                let _ = e.to_string();
            }
            (x, y) => panic!("poll_one gave {x:?}, poll_next {y:?}"),
        }
        n += 1;
        assert!(
            n <= cnt,
            "more CQEs than entries without the device writing"
        );
    }
    let mut out = [Completion::default(); 4];
    assert_eq!(a.poll(&mut out), 0);
    a.update_consumer_index();
}

fn eq(p: &FakePlatform, shape: u8, bytes: &[u8]) {
    let log_cnt = (shape & 0x7).min(4);
    let len = 64usize << log_cnt;
    let buf = DmaBuf::alloc(p, len, 4096).unwrap();
    let mut ring = EqRing::new(buf, 2, log_cnt).unwrap();
    // The device's bytes over the initialised ring, owner bits included.
    device_fill(p, ring.mem().iova(), len, bytes);
    let mut n = 0;
    while let Some(eqe) = ring.poll_one() {
        let _ = (eqe.event_type(), eqe.owner_bit(), eqe.sub_type);
        let _ = eqe.data_as::<EqeCmd>().vector.get();
        let _ = eqe.data_as::<EqeComp>().cqn.get() & 0x00ff_ffff;
        let _ = eqe.data_as::<EqePageReq>().num_pages_signed();
        let _ = eqe.data_as::<EqePortState>().port_num();
        let _ = eqe.data_as::<EqeCqErr>().syndrome;
        let _ = eqe.data_as::<EqeQpSrq>().qp_srq_n.get();
        n += 1;
        assert!(
            n <= 1usize << log_cnt,
            "more EQEs than entries without the device writing"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let [which, shape, rest @ ..] = data else {
        return;
    };
    let p = FakePlatform::new();
    if which & 1 == 0 {
        cq(&p, *shape, rest);
    } else {
        eq(&p, *shape, rest);
    }
});
