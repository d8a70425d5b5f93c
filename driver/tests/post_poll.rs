//! The datapath on one mock HCA, without a peer: the WQEs `post_send`, `post_recv` and
//! `Srq::post_recv` write are read back from the queues' DMA memory and decoded
//! independently with the `uhca-fwif` layouts; `Cq::poll` is fed CQEs written into the CQ
//! buffer the way the device writes them (body first, `op_own` last), including error
//! CQEs of every syndrome, coalesced unsignalled completions, two QPs on one CQ, an SRQ,
//! and CQEs the driver never asked for.
//!
//! RC QPs here point at a peer that does not exist and have the longest ACK timeout, so
//! the model's engine sends (queues) their packets and then waits: every CQE the tests see
//! is one they wrote.

use uhca_driver::Hca;
use uhca_driver::addr::{AhAttr, StaticRate};
use uhca_driver::verbs::{
    BadCqe, BadWr, Cq, InitAttr, Mr, Qp, QpCaps, QpInitAttr, Rc, RecvWr, RtrAttr, RtsAttr,
    SendFlags, SendOp, SendWr, Sge, SrqInitAttr, Ud, UdDest, WcFlags, WcOpcode, WcStatus,
    WorkCompletion, WrError,
};
use uhca_fwif::consts::{AccessFlags, CqeOpcode, CqeSyndrome, WqeCtrlFlags, WqeOpcode};
use uhca_fwif::cqe::{Cqe64, ErrCqe, op_own_of};
use uhca_fwif::wqe::{
    Av, INVALID_LKEY, WqeAtomicSeg, WqeCtrlSeg, WqeDataSeg, WqeInlineSeg, WqeRaddrSeg,
};
use uhca_fwif::zerocopy::{FromBytes, FromZeros, IntoBytes};
use uhca_hal::DmaMem;
use uhca_mock::MockHca;

mod common;

use common::open_ib as open;

use common::P;
type TestHca = Hca<P>;

fn caps() -> QpCaps {
    common::qp_caps(16, 4, 64)
}

fn ib_path(dlid: u16) -> AhAttr {
    AhAttr::Ib {
        dlid,
        sl: 0,
        src_path_bits: 0,
        static_rate: StaticRate::PortCurrent,
        grh: None,
    }
}

/// An RC QP in RTS towards a peer that does not exist, never timing out.
fn rc_qp(hca: &mut TestHca, pd: &uhca_driver::verbs::Pd<P>, scq: &Cq<P>, rcq: &Cq<P>) -> Qp<P, Rc> {
    let attr = QpInitAttr {
        send_cq: scq,
        recv_cq: rcq,
        srq: None,
        cap: caps(),
    };
    let mut qp = hca.create_qp::<Rc>(pd, &attr).unwrap();
    let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    qp.to_init(
        hca,
        InitAttr {
            access: all,
            ..InitAttr::default()
        },
    )
    .unwrap();
    qp.to_rtr(
        hca,
        RtrAttr {
            dest_qpn: 0x77,
            ah: ib_path(9),
            ..RtrAttr::default()
        },
    )
    .unwrap();
    qp.to_rts(
        hca,
        RtsAttr {
            timeout: 31,
            ..RtsAttr::default()
        },
    )
    .unwrap();
    qp
}

/// Byte offset of the SQ in the QP buffer (the RQ comes first).
fn sq_offset<T: uhca_driver::verbs::QpTransport>(qp: &Qp<P, T>) -> usize {
    let c = qp.caps();
    c.max_recv_wr as usize * 16 * c.max_recv_sge as usize
}

/// The send WQE at WQEBB `index` (no wrap in these tests).
fn wqe_bytes<T: uhca_driver::verbs::QpTransport>(qp: &Qp<P, T>, index: u16) -> Vec<u8> {
    let off = sq_offset(qp) + index as usize * 64;
    let mut head = [0u8; 16];
    qp.rings().mem().read_bytes(off, &mut head);
    let ctrl = WqeCtrlSeg::read_from_bytes(&head).unwrap();
    let mut v = vec![0; ctrl.ds() as usize * 16];
    qp.rings().mem().read_bytes(off, &mut v);
    v
}

fn ctrl(b: &[u8]) -> WqeCtrlSeg {
    WqeCtrlSeg::read_from_bytes(&b[..16]).unwrap()
}

fn data_seg(b: &[u8], at: usize) -> (u32, u32, u64) {
    let d = WqeDataSeg::read_from_bytes(&b[at..at + 16]).unwrap();
    (d.byte_count.get(), d.lkey.get(), d.addr.get())
}

fn send_doorbells(dev: &MockHca) -> usize {
    dev.take_doorbells()
        .iter()
        .filter(|d| d.offset >= 0x800 && d.width == 8)
        .count()
}

/// Writes CQEs into a CQ the way the device does: at the producer position, body first,
/// `op_own` (with the owner bit of the pass) last.
struct CqWriter {
    iova: u64,
    log: u32,
    pi: u32,
}

impl CqWriter {
    fn new(cq: &Cq<P>) -> Self {
        CqWriter {
            iova: cq.ring().mem().iova(),
            log: (cq.cqe() + 1).trailing_zeros(),
            pi: cq.ring().consumer_index(),
        }
    }

    fn write(&mut self, dev: &MockHca, mut cqe: Cqe64, opcode: CqeOpcode) {
        let owner = ((self.pi >> self.log) & 1) as u8;
        cqe.op_own = op_own_of(opcode, owner);
        let at = self.iova + ((self.pi & ((1 << self.log) - 1)) as u64) * 64;
        assert!(dev.host_write(at, &cqe.as_bytes()[..63]));
        assert!(dev.host_write(at + 63, &cqe.as_bytes()[63..]));
        self.pi += 1;
    }

    fn req(&mut self, dev: &MockHca, qpn: u32, counter: u16, wqe_op: WqeOpcode, byte_cnt: u32) {
        let mut c = Cqe64::new_zeroed();
        c.sop_drop_qpn.set((wqe_op.raw() as u32) << 24 | qpn);
        c.wqe_counter.set(counter);
        c.byte_cnt.set(byte_cnt);
        self.write(dev, c, CqeOpcode::Req);
    }

    fn err(&mut self, dev: &MockHca, op: CqeOpcode, qpn: u32, counter: u16, synd: u8, vendor: u8) {
        let mut e = ErrCqe::new_zeroed();
        e.syndrome = synd;
        e.vendor_err_synd = vendor;
        e.s_wqe_opcode_qpn.set(qpn);
        e.wqe_counter.set(counter);
        let c = Cqe64::read_from_bytes(e.as_bytes()).unwrap();
        self.write(dev, c, op);
    }

    fn resp(
        &mut self,
        dev: &MockHca,
        op: CqeOpcode,
        qpn: u32,
        counter: u16,
        byte_cnt: u32,
        imm: u32,
    ) {
        let mut c = Cqe64::new_zeroed();
        c.sop_drop_qpn.set(qpn);
        c.wqe_counter.set(counter);
        c.byte_cnt.set(byte_cnt);
        c.immediate.set(imm);
        self.write(dev, c, op);
    }
}

fn poll_all(cq: &mut Cq<P>) -> Vec<WorkCompletion> {
    let mut wc = [WorkCompletion::default(); 8];
    let n = cq.poll(&mut wc).expect("good CQEs");
    wc[..n].to_vec()
}

struct Setup {
    dev: MockHca,
    hca: TestHca,
    pd: uhca_driver::verbs::Pd<P>,
    cq: Cq<P>,
    mr: Mr<P>,
}

fn setup() -> Setup {
    let (dev, mut hca) = open();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let (pd, cq, mr) = common::pd_cq_mr(&mut hca, 31, 8192, access);
    Setup {
        dev,
        hca,
        pd,
        cq,
        mr,
    }
}

#[test]
fn every_send_operation_encodes_as_the_prm_says_with_one_doorbell() {
    let Setup {
        dev,
        mut hca,
        pd,
        mut cq,
        mr,
    } = setup();
    let mut qp = rc_qp(&mut hca, &pd, &cq, &cq);
    let qpn = qp.qpn();
    let (lkey, base) = (mr.lkey(), mr.iova());
    let two = [
        Sge {
            addr: base,
            len: 100,
            lkey,
        },
        Sge {
            addr: base + 512,
            len: 28,
            lkey,
        },
    ];
    let eight = [Sge {
        addr: base + 1024,
        len: 8,
        lkey,
    }];
    let read_to = [Sge {
        addr: base + 2048,
        len: 256,
        lkey,
    }];
    let text = b"inline bytes, twenty";
    let wrs = [
        SendWr::new(1, SendOp::Send, &two),
        SendWr::new(2, SendOp::SendWithImm { imm: 0xdead_beef }, &[])
            .with_inline(text)
            .with_flags(SendFlags::SIGNALED | SendFlags::SOLICITED),
        SendWr::new(
            3,
            SendOp::RdmaWrite {
                remote_addr: 0x1_0000_0040,
                rkey: 0x51,
            },
            &two,
        )
        .with_flags(SendFlags::empty()),
        SendWr::new(
            4,
            SendOp::RdmaWriteWithImm {
                remote_addr: 0x2000,
                rkey: 0x52,
                imm: 7,
            },
            &two[..1],
        ),
        SendWr::new(
            5,
            SendOp::RdmaRead {
                remote_addr: 0x3000,
                rkey: 0x53,
            },
            &read_to,
        ),
        SendWr::new(
            6,
            SendOp::AtomicCmpSwap {
                remote_addr: 0x4008,
                rkey: 0x54,
                compare: 11,
                swap: 22,
            },
            &eight,
        )
        .with_flags(SendFlags::SIGNALED | SendFlags::FENCE),
        SendWr::new(
            7,
            SendOp::AtomicFetchAdd {
                remote_addr: 0x5000,
                rkey: 0x55,
                add: 5,
            },
            &eight,
        ),
    ];
    send_doorbells(&dev);
    qp.post_send(&wrs).unwrap();
    assert_eq!(send_doorbells(&dev), 1, "one doorbell for the batch");
    assert_eq!(qp.rings().sq_producer(), 7, "each WQE fits one WQEBB");

    let cu = WqeCtrlFlags::CQ_UPDATE;
    // SEND: ctrl + 2 data.
    let b = wqe_bytes(&qp, 0);
    let c = ctrl(&b);
    assert_eq!(
        (c.opcode(), c.wqe_index(), c.qpn(), c.ds()),
        (WqeOpcode::Send, 0, qpn, 3)
    );
    assert_eq!(c.flags(), cu);
    assert_eq!(data_seg(&b, 16), (100, lkey, base));
    assert_eq!(data_seg(&b, 32), (28, lkey, base + 512));
    // SEND with immediate, inline: ctrl + (4 + 20 bytes → 2 units).
    let b = wqe_bytes(&qp, 1);
    let c = ctrl(&b);
    assert_eq!(
        (c.opcode(), c.ds(), c.imm.get()),
        (WqeOpcode::SendImm, 3, 0xdead_beef)
    );
    assert_eq!(c.flags(), cu | WqeCtrlFlags::SOLICITED);
    let inl = WqeInlineSeg::read_from_bytes(&b[16..20]).unwrap();
    assert_eq!(inl.inline_len(), Some(text.len() as u32));
    assert_eq!(&b[20..20 + text.len()], text);
    // Unsignalled RDMA WRITE: ctrl + raddr + 2 data, no CQE request.
    let b = wqe_bytes(&qp, 2);
    let c = ctrl(&b);
    assert_eq!((c.opcode(), c.ds()), (WqeOpcode::RdmaWrite, 4));
    assert_eq!(c.flags(), WqeCtrlFlags::empty());
    let r = WqeRaddrSeg::read_from_bytes(&b[16..32]).unwrap();
    assert_eq!((r.raddr.get(), r.rkey.get()), (0x1_0000_0040, 0x51));
    assert_eq!(data_seg(&b, 48), (28, lkey, base + 512));
    // WRITE with immediate.
    let b = wqe_bytes(&qp, 3);
    let c = ctrl(&b);
    assert_eq!(
        (c.opcode(), c.ds(), c.imm.get()),
        (WqeOpcode::RdmaWriteImm, 3, 7)
    );
    // READ.
    let b = wqe_bytes(&qp, 4);
    let c = ctrl(&b);
    assert_eq!((c.opcode(), c.ds()), (WqeOpcode::RdmaRead, 3));
    let r = WqeRaddrSeg::read_from_bytes(&b[16..32]).unwrap();
    assert_eq!((r.raddr.get(), r.rkey.get()), (0x3000, 0x53));
    assert_eq!(data_seg(&b, 32), (256, lkey, base + 2048));
    // CAS, fenced: ctrl + raddr + atomic + 8-byte data.
    let b = wqe_bytes(&qp, 5);
    let c = ctrl(&b);
    assert_eq!((c.opcode(), c.ds()), (WqeOpcode::AtomicCs, 4));
    assert_eq!(c.flags(), cu | WqeCtrlFlags::FENCE_SMALL_AND_FENCE);
    let a = WqeAtomicSeg::read_from_bytes(&b[32..48]).unwrap();
    assert_eq!((a.swap_add.get(), a.compare.get()), (22, 11));
    assert_eq!(data_seg(&b, 48), (8, lkey, base + 1024));
    // FAA.
    let b = wqe_bytes(&qp, 6);
    let c = ctrl(&b);
    assert_eq!((c.opcode(), c.ds()), (WqeOpcode::AtomicFa, 4));
    let a = WqeAtomicSeg::read_from_bytes(&b[32..48]).unwrap();
    assert_eq!((a.swap_add.get(), a.compare.get()), (5, 0));
    // The model took every WQE: no error CQE.
    assert!(poll_all(&mut cq).is_empty());
}

#[test]
fn a_bad_work_request_stops_the_batch_after_posting_the_ones_before_it() {
    let Setup {
        dev,
        mut hca,
        pd,
        cq,
        mr,
    } = setup();
    let mut qp = rc_qp(&mut hca, &pd, &cq, &cq);
    let lkey = mr.lkey();
    let one = [Sge {
        addr: mr.iova(),
        len: 8,
        lkey,
    }];
    let five = [one[0]; 5];
    let six = [one[0]; 6];
    let ok = SendWr::new(1, SendOp::Send, &one);
    // 16 WQEs of up to 2 WQEBBs (5 entries or 76 inline bytes): 32 WQEBBs.
    assert_eq!((qp.caps().max_send_sge, qp.caps().max_inline_data), (5, 76));
    let wrs = [ok, ok, SendWr::new(9, SendOp::Send, &six), ok];
    send_doorbells(&dev);
    let e = qp.post_send(&wrs).unwrap_err();
    assert_eq!(
        e,
        BadWr {
            index: 2,
            error: WrError::TooManySges { given: 6, max: 5 }
        }
    );
    assert_eq!(qp.rings().sq_producer(), 2, "the two before it are posted");
    assert_eq!(send_doorbells(&dev), 1, "and published");

    let ah = hca.create_ah(1, ib_path(3)).unwrap();
    let big = [0u8; 200];
    let huge = [Sge {
        addr: 0,
        len: 0x8000_0000,
        lkey,
    }];
    let cases: Vec<(SendWr<'_>, WrError)> = vec![
        (
            ok.with_inline(&big),
            WrError::InlineTooLong {
                given: 200,
                max: qp.caps().max_inline_data,
            },
        ),
        (
            SendWr::new(
                1,
                SendOp::RdmaRead {
                    remote_addr: 0,
                    rkey: 1,
                },
                &[],
            )
            .with_inline(b"x"),
            WrError::InlineNotAllowed,
        ),
        (
            SendWr::new(
                1,
                SendOp::AtomicFetchAdd {
                    remote_addr: 0x1004,
                    rkey: 1,
                    add: 1,
                },
                &one,
            ),
            WrError::AtomicAlignment,
        ),
        (
            SendWr::new(
                1,
                SendOp::AtomicFetchAdd {
                    remote_addr: 0x1000,
                    rkey: 1,
                    add: 1,
                },
                &five[..2],
            ),
            WrError::AtomicLocalBuffer,
        ),
        (
            ok.with_ud(UdDest {
                ah: &ah,
                remote_qpn: 1,
                remote_qkey: 1,
            }),
            WrError::Destination,
        ),
        (SendWr::new(1, SendOp::Send, &huge), WrError::SgeTooLong),
    ];
    for (wr, want) in cases {
        let e = qp.post_send([&ok, &wr]).unwrap_err();
        assert_eq!(
            e,
            BadWr {
                index: 1,
                error: want
            },
            "{wr:?}"
        );
    }
    // 2 + 6 posted; the SQ holds 32 single-WQEBB sends.
    assert_eq!(qp.rings().sq_producer(), 8);
    let fill = vec![ok; 30];
    let e = qp.post_send(&fill).unwrap_err();
    assert_eq!(
        e,
        BadWr {
            index: 24,
            error: WrError::QueueFull
        }
    );
    assert_eq!(qp.rings().sq_free(), 0);
}

#[test]
fn signalled_completions_retire_earlier_unsignalled_requests() {
    let Setup {
        dev,
        mut hca,
        pd,
        mut cq,
        mr,
    } = setup();
    let mut qp = rc_qp(&mut hca, &pd, &cq, &cq);
    let qpn = qp.qpn();
    let one = [Sge {
        addr: mr.iova(),
        len: 8,
        lkey: mr.lkey(),
    }];
    let quiet = SendWr::new(0, SendOp::Send, &one).with_flags(SendFlags::empty());
    let loud = SendWr::new(0, SendOp::Send, &one);
    let wrs = [
        SendWr { wr_id: 10, ..quiet },
        SendWr { wr_id: 11, ..quiet },
        SendWr { wr_id: 12, ..loud },
        SendWr { wr_id: 13, ..loud },
    ];
    qp.post_send(&wrs).unwrap();
    let mut w = CqWriter::new(&cq);
    w.req(&dev, qpn, 2, WqeOpcode::Send, 0);
    let wc = poll_all(&mut cq);
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode),
        (12, WcStatus::Success, WcOpcode::Send)
    );
    assert_eq!((wc[0].qp_num, wc[0].wqe_counter), (qpn, 2));
    // WQEs 0..=2 are free again; WQE 1 is no longer outstanding.
    w.req(&dev, qpn, 1, WqeOpcode::Send, 0);
    w.req(&dev, qpn, 3, WqeOpcode::Send, 0);
    let mut out = [WorkCompletion::default(); 4];
    let e = cq.poll(&mut out).unwrap_err();
    assert_eq!(e.polled, 0);
    assert_eq!(
        e.cqe,
        BadCqe::NotOutstanding {
            qpn,
            wqe_counter: 1
        }
    );
    // The bad CQE was consumed; the good one behind it is still there.
    let wc = poll_all(&mut cq);
    assert_eq!(wc.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [13]);
    // The whole SQ (32 WQEBBs) is free again.
    let again = vec![loud; 32];
    qp.post_send(&again).unwrap();
    assert_eq!(qp.rings().sq_free(), 0);
}

#[test]
fn sq_sig_all_signals_every_request() {
    let Setup {
        mut hca,
        pd,
        cq,
        mr,
        ..
    } = setup();
    let attr = common::on_cq(&cq, caps());
    let mut qp = hca.create_qp::<Rc>(&pd, &attr).unwrap();
    qp.set_sq_sig_all(true);
    qp.to_init(&mut hca, InitAttr::default()).unwrap();
    qp.to_rtr(
        &mut hca,
        RtrAttr {
            dest_qpn: 5,
            ah: ib_path(9),
            ..RtrAttr::default()
        },
    )
    .unwrap();
    qp.to_rts(
        &mut hca,
        RtsAttr {
            timeout: 31,
            ..RtsAttr::default()
        },
    )
    .unwrap();
    let one = [Sge {
        addr: mr.iova(),
        len: 8,
        lkey: mr.lkey(),
    }];
    let quiet = SendWr::new(1, SendOp::Send, &one).with_flags(SendFlags::empty());
    qp.post_send([&quiet]).unwrap();
    assert_eq!(ctrl(&wqe_bytes(&qp, 0)).flags(), WqeCtrlFlags::CQ_UPDATE);
}

#[test]
fn error_completions_decode_every_syndrome_and_put_the_qp_in_error() {
    let Setup {
        dev,
        mut hca,
        pd,
        mut cq,
        mr,
    } = setup();
    let mut qp = rc_qp(&mut hca, &pd, &cq, &cq);
    let qpn = qp.qpn();
    let table = [
        (CqeSyndrome::LocalLengthErr, WcStatus::LocalLength),
        (CqeSyndrome::LocalQpOpErr, WcStatus::LocalQpOp),
        (CqeSyndrome::LocalProtErr, WcStatus::LocalProtection),
        (CqeSyndrome::WrFlushErr, WcStatus::WrFlushed),
        (CqeSyndrome::MwBindErr, WcStatus::MwBind),
        (CqeSyndrome::BadRespErr, WcStatus::BadResponse),
        (CqeSyndrome::LocalAccessErr, WcStatus::LocalAccess),
        (
            CqeSyndrome::RemoteInvalReqErr,
            WcStatus::RemoteInvalidRequest,
        ),
        (CqeSyndrome::RemoteAccessErr, WcStatus::RemoteAccess),
        (CqeSyndrome::RemoteOpErr, WcStatus::RemoteOperation),
        (CqeSyndrome::TransportRetryExcErr, WcStatus::RetryExceeded),
        (CqeSyndrome::RnrRetryExcErr, WcStatus::RnrRetryExceeded),
        (CqeSyndrome::RemoteAbortedErr, WcStatus::RemoteAborted),
        (CqeSyndrome::Unknown(0x42), WcStatus::Unknown(0x42)),
    ];
    let one = [Sge {
        addr: mr.iova(),
        len: 8,
        lkey: mr.lkey(),
    }];
    let wrs: Vec<_> = (0..table.len() as u64)
        .map(|i| {
            SendWr::new(
                100 + i,
                SendOp::RdmaWrite {
                    remote_addr: 0,
                    rkey: 1,
                },
                &one,
            )
        })
        .collect();
    qp.post_send(&wrs).unwrap();
    let mut w = CqWriter::new(&cq);
    for (i, (synd, _)) in table.iter().enumerate() {
        w.err(&dev, CqeOpcode::ReqErr, qpn, i as u16, synd.raw(), i as u8);
    }
    let mut out = [WorkCompletion::default(); 16];
    let n = cq.poll(&mut out).unwrap();
    assert_eq!(n, table.len());
    for (i, (_, status)) in table.iter().enumerate() {
        let c = &out[i];
        assert_eq!(
            (c.wr_id, c.status, c.vendor_err),
            (100 + i as u64, *status, i as u8)
        );
        assert_eq!(c.opcode, WcOpcode::RdmaWrite, "the opcode that was posted");
    }
    assert!(qp.in_error());
    let e = qp.post_send(&wrs[..1]).unwrap_err();
    assert_eq!(
        e,
        BadWr {
            index: 0,
            error: WrError::QpInError { qpn }
        }
    );
    assert!(
        qp.post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &one
        }])
        .is_err()
    );
    // Through RESET back to RTS: posting works again, counters from zero.
    qp.to_reset(&mut hca).unwrap();
    assert!(!qp.in_error());
    qp.to_init(&mut hca, InitAttr::default()).unwrap();
    qp.to_rtr(
        &mut hca,
        RtrAttr {
            dest_qpn: 5,
            ah: ib_path(9),
            ..RtrAttr::default()
        },
    )
    .unwrap();
    qp.to_rts(
        &mut hca,
        RtsAttr {
            timeout: 31,
            ..RtsAttr::default()
        },
    )
    .unwrap();
    qp.post_send(&wrs[..1]).unwrap();
    w.req(&dev, qpn, 0, WqeOpcode::RdmaWrite, 0);
    assert_eq!(poll_all(&mut cq)[0].wr_id, 100);
}

#[test]
fn receives_complete_in_order_with_immediates_and_flush() {
    let Setup {
        dev,
        mut hca,
        pd,
        mut cq,
        mr,
    } = setup();
    let mut qp = rc_qp(&mut hca, &pd, &cq, &cq);
    let qpn = qp.qpn();
    let lkey = mr.lkey();
    let a = [Sge {
        addr: mr.iova(),
        len: 4096,
        lkey,
    }];
    let b = [
        Sge {
            addr: mr.iova(),
            len: 64,
            lkey,
        },
        Sge {
            addr: mr.iova() + 64,
            len: 64,
            lkey,
        },
    ];
    let wrs = [
        RecvWr {
            wr_id: 31,
            sg_list: &a,
        },
        RecvWr {
            wr_id: 32,
            sg_list: &b,
        },
        RecvWr {
            wr_id: 33,
            sg_list: &a,
        },
        RecvWr {
            wr_id: 34,
            sg_list: &a,
        },
    ];
    qp.post_recv(&wrs).unwrap();
    // The RQ WQEs: 64-byte stride, data segments then the invalid-lkey terminator.
    let mem = qp.rings().mem();
    let mut rq = [0u8; 128];
    mem.read_bytes(0, &mut rq);
    assert_eq!(data_seg(&rq, 0), (4096, lkey, mr.iova()));
    assert_eq!(data_seg(&rq, 16).1, INVALID_LKEY);
    assert_eq!(data_seg(&rq, 64 + 16), (64, lkey, mr.iova() + 64));
    assert_eq!(data_seg(&rq, 64 + 32).1, INVALID_LKEY);
    let many = [a[0]; 5];
    assert_eq!(
        qp.post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &many
        }])
        .unwrap_err()
        .error,
        WrError::TooManySges { given: 5, max: 4 }
    );

    let mut w = CqWriter::new(&cq);
    w.resp(&dev, CqeOpcode::RespSend, qpn, 0, 1000, 0);
    w.resp(&dev, CqeOpcode::RespSendImm, qpn, 1, 12, 0x0102_0304);
    w.resp(&dev, CqeOpcode::RespWrImm, qpn, 2, 0, 0xabcd);
    // The device names the wrong receive WQE: refused.
    w.resp(&dev, CqeOpcode::RespSend, qpn, 7, 0, 0);
    let mut out = [WorkCompletion::default(); 8];
    let e = cq.poll(&mut out).unwrap_err();
    assert_eq!(e.polled, 3);
    assert_eq!(
        e.cqe,
        BadCqe::NotOutstanding {
            qpn,
            wqe_counter: 7
        }
    );
    assert_eq!(
        (
            out[0].wr_id,
            out[0].opcode,
            out[0].byte_len,
            out[0].wc_flags
        ),
        (31, WcOpcode::Recv, 1000, WcFlags::empty())
    );
    assert_eq!(
        (
            out[1].wr_id,
            out[1].opcode,
            out[1].imm_data,
            out[1].wc_flags
        ),
        (32, WcOpcode::Recv, 0x0102_0304, WcFlags::WITH_IMM)
    );
    assert_eq!(
        (out[2].wr_id, out[2].opcode, out[2].imm_data),
        (33, WcOpcode::RecvRdmaWithImm, 0xabcd)
    );
    // A responder error: the QP is in error, the last receive flushes.
    w.err(
        &dev,
        CqeOpcode::RespErr,
        qpn,
        3,
        CqeSyndrome::WrFlushErr.raw(),
        0,
    );
    let wc = poll_all(&mut cq);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode),
        (34, WcStatus::WrFlushed, WcOpcode::Recv)
    );
    assert!(qp.in_error());
}

#[test]
fn two_qps_share_a_cq_and_garbage_cqes_are_refused() {
    let Setup {
        dev,
        mut hca,
        pd,
        mut cq,
        mr,
    } = setup();
    let other = hca.create_cq(7).unwrap();
    let mut q1 = rc_qp(&mut hca, &pd, &cq, &cq);
    let mut q2 = rc_qp(&mut hca, &pd, &cq, &cq);
    // q3 sends to another CQ.
    let mut q3 = rc_qp(&mut hca, &pd, &other, &cq);
    let one = [Sge {
        addr: mr.iova(),
        len: 8,
        lkey: mr.lkey(),
    }];
    let eight = [Sge {
        addr: mr.iova(),
        len: 8,
        lkey: mr.lkey(),
    }];
    let big = [one[0]; 4];
    q1.post_send(&[
        SendWr::new(1, SendOp::Send, &one),
        SendWr::new(2, SendOp::Send, &big),
    ])
    .unwrap();
    q2.post_send(&[
        SendWr::new(
            21,
            SendOp::RdmaRead {
                remote_addr: 0,
                rkey: 2,
            },
            &one,
        ),
        SendWr::new(
            22,
            SendOp::AtomicFetchAdd {
                remote_addr: 8,
                rkey: 2,
                add: 1,
            },
            &eight,
        ),
    ])
    .unwrap();
    q3.post_send(&[SendWr::new(31, SendOp::Send, &one)])
        .unwrap();
    let (n1, n2, n3) = (q1.qpn(), q2.qpn(), q3.qpn());
    let cqn = cq.cqn();
    // Two WQEBBs for q1's second WQE (ctrl + 4 data = 5 units).
    assert_eq!(q1.rings().sq_producer(), 3);

    let mut w = CqWriter::new(&cq);
    w.req(&dev, n2, 0, WqeOpcode::RdmaRead, 8);
    w.req(&dev, n1, 0, WqeOpcode::Send, 0);
    w.req(&dev, n2, 1, WqeOpcode::AtomicFa, 8);
    w.req(&dev, n1, 1, WqeOpcode::Send, 0);
    let wc = poll_all(&mut cq);
    let got: Vec<_> = wc
        .iter()
        .map(|c| (c.qp_num, c.wr_id, c.opcode, c.byte_len))
        .collect();
    assert_eq!(
        got,
        [
            (n2, 21, WcOpcode::RdmaRead, 8),
            (n1, 1, WcOpcode::Send, 0),
            (n2, 22, WcOpcode::FetchAdd, 8),
            (n1, 2, WcOpcode::Send, 0),
        ]
    );

    // Garbage, one CQE at a time; each is refused, consumed, and changes nothing.
    q1.post_send(&[
        SendWr::new(3, SendOp::Send, &big),
        SendWr::new(4, SendOp::Send, &one),
    ])
    .unwrap(); // WQEBBs 3-4 and 5
    let mut one_wc = [WorkCompletion::default(); 1];
    let mut expect_bad =
        |w: &mut CqWriter, cq: &mut Cq<P>, want: BadCqe, f: &dyn Fn(&mut CqWriter)| {
            f(w);
            let e = cq.poll(&mut one_wc).unwrap_err();
            assert_eq!(e.cqe, want);
        };
    expect_bad(&mut w, &mut cq, BadCqe::UnknownQp { qpn: 0xabcde }, &|w| {
        w.req(&dev, 0xabcde, 0, WqeOpcode::Send, 0)
    });
    expect_bad(
        &mut w,
        &mut cq,
        BadCqe::NotOutstanding {
            qpn: n1,
            wqe_counter: 4,
        },
        &|w| {
            w.req(&dev, n1, 4, WqeOpcode::Send, 0) // the middle of WQE 3
        },
    );
    expect_bad(
        &mut w,
        &mut cq,
        BadCqe::NotOutstanding {
            qpn: n1,
            wqe_counter: 9,
        },
        &|w| {
            w.req(&dev, n1, 9, WqeOpcode::Send, 0) // never posted
        },
    );
    expect_bad(
        &mut w,
        &mut cq,
        BadCqe::OpcodeMismatch {
            qpn: n1,
            wqe_counter: 3,
            reported: WqeOpcode::RdmaRead.raw(),
        },
        &|w| w.req(&dev, n1, 3, WqeOpcode::RdmaRead, 0),
    );
    expect_bad(&mut w, &mut cq, BadCqe::WrongCq { qpn: n3, cqn }, &|w| {
        w.req(&dev, n3, 0, WqeOpcode::Send, 0) // q3's sends complete to the other CQ
    });
    expect_bad(
        &mut w,
        &mut cq,
        BadCqe::UnexpectedOpcode {
            qpn: n1,
            opcode: CqeOpcode::ResizeCq,
        },
        &|w| {
            let mut c = Cqe64::new_zeroed();
            c.sop_drop_qpn.set(n1);
            w.write(&dev, c, CqeOpcode::ResizeCq)
        },
    );
    // Nothing was retired by the garbage: the real completions still map.
    w.req(&dev, n1, 5, WqeOpcode::Send, 0);
    let wc = poll_all(&mut cq);
    assert_eq!((wc[0].qp_num, wc[0].wr_id), (n1, 4));
    assert_eq!(q1.rings().sq_producer(), 6);
}

#[test]
fn ud_sends_carry_the_address_vector_and_receives_report_the_source() {
    let Setup {
        dev,
        mut hca,
        pd,
        mut cq,
        mr,
    } = setup();
    let attr = common::on_cq(&cq, caps());
    let mut qp = hca.create_qp::<Ud>(&pd, &attr).unwrap();
    let qpn = qp.qpn();
    qp.to_init(
        &mut hca,
        InitAttr {
            qkey: 0x1111,
            ..InitAttr::default()
        },
    )
    .unwrap();
    qp.to_rtr(&mut hca).unwrap();
    let rbuf = [Sge {
        addr: mr.iova(),
        len: 2048,
        lkey: mr.lkey(),
    }];
    qp.post_recv(&[RecvWr {
        wr_id: 77,
        sg_list: &rbuf,
    }])
    .unwrap();
    qp.to_rts(&mut hca, 0).unwrap();
    let ah = hca.create_ah(1, ib_path(0x33)).unwrap();
    let one = [Sge {
        addr: mr.iova(),
        len: 16,
        lkey: mr.lkey(),
    }];
    let dest = UdDest {
        ah: &ah,
        remote_qpn: 0x456,
        remote_qkey: 0x2222,
    };
    let e = qp
        .post_send(&[SendWr::new(1, SendOp::Send, &one)])
        .unwrap_err();
    assert_eq!(e.error, WrError::Destination);
    let e = qp
        .post_send(&[SendWr::new(
            1,
            SendOp::RdmaWrite {
                remote_addr: 0,
                rkey: 0,
            },
            &one,
        )
        .with_ud(dest)])
        .unwrap_err();
    assert_eq!(e.error, WrError::OpNotSupported);
    // Queue the send but read it before the doorbell reaches the engine? The engine
    // completes UD sends at once: read the WQE back, then expect its CQE.
    qp.post_send(&[SendWr::new(5, SendOp::SendWithImm { imm: 9 }, &one).with_ud(dest)])
        .unwrap();
    let b = wqe_bytes(&qp, 0);
    let c = ctrl(&b);
    assert_eq!(
        (c.opcode(), c.ds(), c.imm.get()),
        (WqeOpcode::SendImm, 5, 9)
    );
    let av = Av::read_from_bytes(&b[16..64]).unwrap();
    assert_eq!(
        (av.dqpn(), av.qkey.get(), av.rlid.get()),
        (0x456, 0x2222, 0x33)
    );
    assert_eq!(data_seg(&b, 64), (16, mr.lkey(), mr.iova()));

    // Whatever the engine did with the send, a receive CQE for the posted receive maps.
    let mut w = CqWriter::new(&cq);
    let mut out = [WorkCompletion::default(); 4];
    let before = cq.poll(&mut out).unwrap();
    // A model with a datapath engine completes the UD send once it is on the wire.
    assert!(before <= 1);
    if before == 1 {
        assert_eq!(
            (out[0].wr_id, out[0].status, out[0].opcode),
            (5, WcStatus::Success, WcOpcode::Send)
        );
    }
    w.pi += before as u32;
    let mut c = Cqe64::new_zeroed();
    c.sop_drop_qpn.set(qpn);
    c.wqe_counter.set(0);
    c.byte_cnt.set(40 + 16);
    c.flags_rqpn.set((1 << 28) | (5 << 24) | 0x789);
    c.slid.set(0x21);
    w.write(&dev, c, CqeOpcode::RespSend);
    let wc = poll_all(&mut cq);
    assert_eq!(wc.len(), 1);
    let r = wc[0];
    assert_eq!((r.wr_id, r.opcode, r.byte_len), (77, WcOpcode::Recv, 56));
    assert_eq!(
        (r.src_qp, r.slid, r.sl, r.wc_flags),
        (0x789, 0x21, 5, WcFlags::GRH)
    );
}

#[test]
fn srq_receives_complete_out_of_order_and_wqes_are_reused() {
    let Setup {
        dev,
        mut hca,
        pd,
        mut cq,
        mr,
    } = setup();
    let mut srq = hca
        .create_srq(
            &pd,
            SrqInitAttr {
                max_wr: 3,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    assert_eq!(srq.max_wr(), 3);
    let attr = common::on_srq(&cq, &srq, caps());
    let mut qp = hca.create_qp::<Rc>(&pd, &attr).unwrap();
    let qpn = qp.qpn();
    qp.to_init(&mut hca, InitAttr::default()).unwrap();
    let s = |i: u64| Sge {
        addr: mr.iova() + i * 256,
        len: 256,
        lkey: mr.lkey(),
    };
    let (s0, s1, s2, s3) = ([s(0)], [s(1)], [s(2)], [s(3)]);
    assert_eq!(
        qp.post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &s0
        }])
        .unwrap_err()
        .error,
        WrError::NoQueue,
        "the QP receives from its SRQ"
    );
    let e = srq
        .post_recv(&[
            RecvWr {
                wr_id: 40,
                sg_list: &s0,
            },
            RecvWr {
                wr_id: 41,
                sg_list: &s1,
            },
            RecvWr {
                wr_id: 42,
                sg_list: &s2,
            },
            RecvWr {
                wr_id: 43,
                sg_list: &s3,
            },
        ])
        .unwrap_err();
    assert_eq!(
        e,
        BadWr {
            index: 3,
            error: WrError::QueueFull
        }
    );
    let stride = 1usize << srq.log_stride();
    let m = srq.mem();
    let mut wqe = vec![0u8; stride];
    m.read_bytes(stride, &mut wqe);
    assert_eq!(
        u16::from_be_bytes([wqe[2], wqe[3]]),
        2,
        "WQE 1 links to WQE 2"
    );
    assert_eq!(data_seg(&wqe, 16), (256, mr.lkey(), mr.iova() + 256));
    assert_eq!(
        m.read_be32(srq.dbr_offset()),
        3,
        "three posted, one kept spare"
    );

    let mut w = CqWriter::new(&cq);
    w.resp(&dev, CqeOpcode::RespSend, qpn, 2, 10, 0);
    w.resp(&dev, CqeOpcode::RespSend, qpn, 0, 20, 0);
    w.resp(&dev, CqeOpcode::RespSend, qpn, 0, 20, 0); // WQE 0 again: not posted now
    let mut out = [WorkCompletion::default(); 4];
    let e = cq.poll(&mut out).unwrap_err();
    assert_eq!(e.polled, 2);
    assert_eq!(
        e.cqe,
        BadCqe::NotOutstanding {
            qpn,
            wqe_counter: 0
        }
    );
    assert_eq!((out[0].wr_id, out[1].wr_id), (42, 40));
    // Two are free again: the next posts take WQE 3 (the old spare) and WQE 2, and the
    // buffer's links follow the frees (3 → 2 → 0).
    srq.post_recv(&[
        RecvWr {
            wr_id: 50,
            sg_list: &s0,
        },
        RecvWr {
            wr_id: 51,
            sg_list: &s1,
        },
    ])
    .unwrap();
    let m = srq.mem();
    let next = |i: usize| m.read_be32(i * stride) & 0xffff;
    assert_eq!((next(3), next(2)), (2, 0));
    assert_eq!(m.read_be32(srq.dbr_offset()), 5);
    w.resp(&dev, CqeOpcode::RespSend, qpn, 3, 1, 0);
    w.resp(&dev, CqeOpcode::RespSend, qpn, 2, 1, 0);
    let wc = poll_all(&mut cq);
    assert_eq!(wc.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [50, 51]);
}

#[test]
fn arming_follows_the_event_sequence_number() {
    let Setup {
        dev,
        mut hca,
        mut cq,
        ..
    } = setup();
    cq.req_notify(false);
    assert_eq!(dev.cq_arm(cq.cqn()), Some((0, false, 0)));
    assert!(!cq.take_event(&mut hca), "no event yet");
    cq.ack_event();
    cq.req_notify(true);
    assert_eq!(dev.cq_arm(cq.cqn()), Some((1, true, 0)));
    assert_eq!(hca.next_completion_event(), None);
}

#[test]
fn empty_scatter_gather_entries_are_left_out() {
    let Setup {
        mut hca,
        pd,
        cq,
        mr,
        ..
    } = setup();
    let mut qp = rc_qp(&mut hca, &pd, &cq, &cq);
    let lkey = mr.lkey();
    // A zero length would mean 2 GiB to the device.
    let sges = [
        Sge {
            addr: 0x1000,
            len: 0,
            lkey,
        },
        Sge {
            addr: mr.iova(),
            len: 10,
            lkey,
        },
    ];
    qp.post_send(&[SendWr::new(1, SendOp::Send, &sges)])
        .unwrap();
    let b = wqe_bytes(&qp, 0);
    assert_eq!(ctrl(&b).ds(), 2);
    assert_eq!(data_seg(&b, 16), (10, lkey, mr.iova()));
    qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &sges,
    }])
    .unwrap();
    let mut rq = [0u8; 32];
    qp.rings().mem().read_bytes(0, &mut rq);
    assert_eq!(data_seg(&rq, 0), (10, lkey, mr.iova()));
    assert_eq!(data_seg(&rq, 16).1, INVALID_LKEY);
}

/// A receive of one entry (the shape the datapath posts in one step) is the same WQE and
/// meets the same refusals as any other: on a QP whose receives take one entry (16-byte
/// WQEs, no room for the terminator) the entry alone, and the next WQE untouched; a length
/// with the inline bit refused as too long; the request that finds the RQ full named by its
/// index, the ones before it posted.
#[test]
fn one_entry_receives_are_written_and_refused_as_the_general_path() {
    let Setup {
        mut hca,
        pd,
        cq,
        mr,
        ..
    } = setup();
    let attr = QpInitAttr {
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        cap: common::qp_caps(16, 1, 0),
    };
    let mut qp = hca.create_qp::<Rc>(&pd, &attr).unwrap();
    qp.to_init(&mut hca, InitAttr::default()).unwrap();
    let lkey = mr.lkey();
    let one = |addr: u64, len: u32| [Sge { addr, len, lkey }];
    let free = qp.rings().rq_free() as usize;
    let s = one(mr.iova() + 8, 100);
    qp.post_recv(&[RecvWr {
        wr_id: 1,
        sg_list: &s,
    }])
    .unwrap();
    // The RQ is at the start of the QP's buffer; its second WQE (16 bytes on) still holds
    // the zeros of a new ring, not a terminating entry (lkey 0x100).
    let mut rq = [0u8; 32];
    qp.rings().mem().read_bytes(0, &mut rq);
    assert_eq!(data_seg(&rq, 0), (100, lkey, mr.iova() + 8));
    assert_eq!(
        rq[16..],
        [0; 16],
        "a 16-byte WQE has no room for the terminator"
    );

    let huge = one(mr.iova(), 0x8000_0000);
    let e = qp
        .post_recv(&[RecvWr {
            wr_id: 2,
            sg_list: &huge,
        }])
        .unwrap_err();
    assert_eq!(
        e,
        BadWr {
            index: 0,
            error: WrError::SgeTooLong
        }
    );

    let wrs: Vec<RecvWr<'_>> = (0..free as u64)
        .map(|wr_id| RecvWr { wr_id, sg_list: &s })
        .collect();
    let e = qp.post_recv(&wrs).unwrap_err();
    assert_eq!(
        e,
        BadWr {
            index: free - 1,
            error: WrError::QueueFull
        },
        "one WQE was already posted: the last request finds the RQ full"
    );
    assert_eq!(qp.rings().rq_free(), 0);
}
