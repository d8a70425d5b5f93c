//! CQE parity with libmlx5: the completions uhca's `Cq::poll` and libmlx5's
//! `mlx5_poll_cq_v1` (rdma-core `providers/mlx5/cq.c`, compiled unmodified into
//! `harness_cqe` by `tests/parity/build.sh`) decode from the very same CQE bytes, field by
//! field, and the consumer-index word both write to the CQ's doorbell record.
//!
//! uhca side: work requests are posted through the public API on a mock HCA whose send
//! doorbells are held (the driver knows the `wr_id`s, the device does nothing); the test
//! writes CQEs into the CQ's ring with `MockHca::host_write` (body first, `op_own` with the
//! lap's owner bit last) and polls. libmlx5 side: the harness is told the same `wr_id` at
//! the same WQE counter (SQ, RQ) or SRQ index, gets the same 64 bytes at the same ring
//! slot, and polls with the same batch sizes.
//!
//! The CQEs are generated from a seed (printed; `UHCA_PARITY_SEED` replays one), several
//! thousand a run: every requester opcode uhca posts (SEND, SEND with immediate, RDMA
//! WRITE with and without immediate, RDMA READ, compare-and-swap, fetch-and-add) on RC and
//! UD, every responder opcode (SEND, SEND with immediate, RDMA WRITE with immediate, SEND
//! with invalidate) on an RQ and an SRQ, RC and UD, with and without a GRH, any source
//! QP, SL, SLID and path bits; every error syndrome (the PRM's thirteen and values it does
//! not define) on the requester and the responder side with a random vendor syndrome,
//! followed by the flush errors of the WQEs left; CQ ring wraps. Bytes the PRM gives no
//! meaning for these CQEs are random. The run fails unless every case above was met.
//!
//! Fields compared (the `ibv_wc` field libmlx5 fills ← uhca's `WorkCompletion`):
//! `wr_id` ← `wr_id`; `status` ← [`WcStatus`] mapped to `ibv_wc_status` (an unknown
//! syndrome is `IBV_WC_GENERAL_ERR`); `qp_num` ← `qp_num`; `vendor_err` ← `vendor_err`
//! (error completions); `opcode` ← [`WcOpcode`] mapped to `ibv_wc_opcode`; `byte_len` ←
//! `byte_len` (receives, RDMA READ, atomics); `imm_data` (network order) ← `imm_data`
//! (host order) when `IBV_WC_WITH_IMM`; `wc_flags` ← [`WcFlags`] (`GRH`, `WITH_IMM`);
//! `slid`, `sl` ← `slid`, `sl` (receives); `src_qp` ← `src_qp` (UD receives).
//!
//! Fields allowed to differ, and why (also in `tests/parity/README.md`):
//!
//! | field | when | libmlx5 | uhca | why |
//! |---|---|---|---|---|
//! | `opcode`, `byte_len`, `wc_flags`, `imm_data`, `src_qp`, `slid`, `sl`, `pkey_index`, `dlid_path_bits` | error completion | not written | the request's opcode, zeros | verbs defines only `wr_id`, `status`, `qp_num`, `vendor_err` for an error completion (ibv_poll_cq(3)) |
//! | `vendor_err` | success | not written (only error CQEs, cq.c:891) | 0 | a vendor error syndrome: meaningless on success |
//! | `byte_len` | requester SEND, RDMA WRITE | not written | 0 | verbs defines it for receives, RDMA READ and atomics |
//! | `wc_flags` `WITH_IMM`, `imm_data` | requester SEND/RDMA WRITE with immediate | flag set (cq.c:168, 174), `imm_data` not written | no flag | ibv_poll_cq(3): the flag means "immediate data value is valid"; uhca's means the same, and a requester completion carries none |
//! | `src_qp` | RC receive | from `flags_rqpn` (cq.c:321) | 0 | ibv_poll_cq(3): "valid only for UD QPs" |
//! | `pkey_index` | receive | `imm_inval_pkey & 0xffff` (cq.c:325) | no field | verbs defines it for GSI QPs, which uhca does not create |
//! | `IBV_WC_IP_CSUM_OK` | never set here | | | libmlx5 sets it only on QPs created with checksum offload (raw packet), which uhca has not |
//!
//! CQEs uhca refuses and libmlx5 would decode (uhca checks each CQE against what was
//! posted, libmlx5 indexes its `wr_id` array with whatever counter the CQE carries) are not
//! generated: a counter naming no outstanding WQE, a requester WQE opcode other than the
//! one posted, an unknown QP, receives out of order on an RQ; nor CQEs with the inline
//! scatter bits of `op_own` (scatter to CQE, which uhca never enables); nor a responder's
//! remote-aborted error with vendor syndrome 0x93 (an on-demand-paging page fault, which
//! libmlx5 handles itself on an SRQ and never reports; uhca registers no such memory). With CQE version 1
//! libmlx5 finds the QP by the user index in `srqn_uidx`, uhca by the QPN; the harness gives
//! each QP a user index of its own and the CQEs carry it.
//!
//! Skips (and says how to run it) unless `UHCA_LIBMLX5_HARNESS_DIR` names the folder
//! `bash tests/parity/build.sh` printed; with `UHCA_REQUIRE_LIBMLX5=1` a missing harness
//! fails.

#[path = "parity/common.rs"]
mod common;

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use common::{Pipe, Rng, harness_path, seed};

use uhca::driver::Hca;
use uhca::driver::addr::AhAttr;
use uhca::driver::verbs::{
    Cq, InitAttr, Mr, Pd, Qp, QpCaps, QpInitAttr, Rc, RecvWr, RtrAttr, RtsAttr, SendFlags, SendOp,
    SendWr, Sge, Srq, SrqInitAttr, Ud, UdDest, WcFlags, WcOpcode, WcStatus, WorkCompletion,
};
use uhca::fwif::consts::AccessFlags;
use uhca::hal::DmaMem;
use uhca::mock::{LinkLayer, MockHca, MockPlatform};

type P = MockPlatform;

// ---------------------------------------------------------------------------------------
// The CQE as the PRM lays it out (64-byte CQE; offsets in bytes, big-endian fields).
// Written here from the layout, not taken from the driver's own definitions.

const CQE_FLAGS_RQPN: usize = 24;
const CQE_SRQN_UIDX: usize = 32;
const CQE_BYTE_CNT: usize = 44;
const CQE_VENDOR_ERR_SYND: usize = 54;
const CQE_SYNDROME: usize = 55;
const CQE_SOP_DROP_QPN: usize = 56;
/// The PRM's remote-aborted error syndrome.
const SYNDROME_REMOTE_ABORTED: u8 = 0x22;
/// The vendor syndrome of an on-demand-paging page fault (mlx5dv.h
/// `MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT`).
const VENDOR_SYNDROME_ODP_PFAULT: u8 = 0x93;
const CQE_WQE_COUNTER: usize = 60;
const CQE_OP_OWN: usize = 63;

/// CQE opcodes (`op_own[7:4]`).
const CQE_REQ: u8 = 0x0;
const CQE_RESP_WR_IMM: u8 = 0x1;
const CQE_RESP_SEND: u8 = 0x2;
const CQE_RESP_SEND_IMM: u8 = 0x3;
const CQE_RESP_SEND_INV: u8 = 0x4;
const CQE_REQ_ERR: u8 = 0xd;
const CQE_RESP_ERR: u8 = 0xe;

/// Send WQE opcodes (the CQE's `sop`, the WQE's `opcode`).
const WQE_RDMA_WRITE: u8 = 0x08;
const WQE_RDMA_WRITE_IMM: u8 = 0x09;
const WQE_SEND: u8 = 0x0a;
const WQE_SEND_IMM: u8 = 0x0b;
const WQE_RDMA_READ: u8 = 0x10;
const WQE_ATOMIC_CS: u8 = 0x11;
const WQE_ATOMIC_FA: u8 = 0x12;

/// The error syndromes the PRM defines, then values it does not (both sides map those to
/// "some other error").
const SYNDROMES: &[u8] = &[
    0x01, 0x02, 0x04, 0x05, 0x06, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x22, 0x00, 0x03, 0x07,
    0x21, 0x23, 0xff,
];
const SYNDROME_WR_FLUSH_ERR: u8 = 0x05;

// ---------------------------------------------------------------------------------------
// ibv_wc values (libibverbs/verbs.h); the harness reports the ones it was compiled with
// and the test checks them before using these.

const IBV_CONSTS: &[(&str, u32)] = &[
    ("SUCCESS", 0),
    ("LOC_LEN_ERR", 1),
    ("LOC_QP_OP_ERR", 2),
    ("LOC_PROT_ERR", 4),
    ("WR_FLUSH_ERR", 5),
    ("MW_BIND_ERR", 6),
    ("BAD_RESP_ERR", 7),
    ("LOC_ACCESS_ERR", 8),
    ("REM_INV_REQ_ERR", 9),
    ("REM_ACCESS_ERR", 10),
    ("REM_OP_ERR", 11),
    ("RETRY_EXC_ERR", 12),
    ("RNR_RETRY_EXC_ERR", 13),
    ("REM_ABORT_ERR", 16),
    ("GENERAL_ERR", 21),
    ("SEND", 0),
    ("RDMA_WRITE", 1),
    ("RDMA_READ", 2),
    ("COMP_SWAP", 3),
    ("FETCH_ADD", 4),
    ("RECV", 128),
    ("RECV_RDMA_WITH_IMM", 129),
    ("GRH", 1),
    ("WITH_IMM", 2),
    ("WITH_INV", 8),
];
const IBV_WC_WITH_IMM: u32 = 2;
const IBV_WC_WITH_INV: u32 = 8;

/// uhca's status as `ibv_wc_status`.
fn ibv_status(s: WcStatus) -> u32 {
    match s {
        WcStatus::Success => 0,
        WcStatus::LocalLength => 1,
        WcStatus::LocalQpOp => 2,
        WcStatus::LocalProtection => 4,
        WcStatus::WrFlushed => 5,
        WcStatus::MwBind => 6,
        WcStatus::BadResponse => 7,
        WcStatus::LocalAccess => 8,
        WcStatus::RemoteInvalidRequest => 9,
        WcStatus::RemoteAccess => 10,
        WcStatus::RemoteOperation => 11,
        WcStatus::RetryExceeded => 12,
        WcStatus::RnrRetryExceeded => 13,
        WcStatus::RemoteAborted => 16,
        WcStatus::Unknown(_) => 21,
        other => unimplemented!("no ibv_wc_status for {other:?}"),
    }
}

/// uhca's opcode as `ibv_wc_opcode`.
fn ibv_opcode(o: WcOpcode) -> u32 {
    match o {
        WcOpcode::Send => 0,
        WcOpcode::RdmaWrite => 1,
        WcOpcode::RdmaRead => 2,
        WcOpcode::CompSwap => 3,
        WcOpcode::FetchAdd => 4,
        WcOpcode::Recv => 128,
        WcOpcode::RecvRdmaWithImm => 129,
        other => unimplemented!("no ibv_wc_opcode for {other:?}"),
    }
}

/// uhca's flags as `ibv_wc_flags`.
fn ibv_flags(f: WcFlags) -> u32 {
    let mut v = 0;
    if f.contains(WcFlags::GRH) {
        v |= 1;
    }
    if f.contains(WcFlags::WITH_IMM) {
        v |= IBV_WC_WITH_IMM;
    }
    if f.contains(WcFlags::WITH_INV) {
        v |= IBV_WC_WITH_INV;
    }
    v
}

/// One `ibv_wc` as the harness printed it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct IbvWc {
    wr_id: u64,
    status: u32,
    opcode: u32,
    vendor_err: u32,
    byte_len: u32,
    imm_data: u32,
    qp_num: u32,
    src_qp: u32,
    wc_flags: u32,
    pkey_index: u32,
    slid: u32,
    sl: u32,
    dlid_path_bits: u32,
}

// ---------------------------------------------------------------------------------------
// The harness process.

struct Harness {
    pipe: Pipe,
}

impl Harness {
    fn start(bin: &std::path::Path) -> Harness {
        Harness {
            pipe: Pipe::start(bin),
        }
    }

    fn send(&mut self, line: &str) {
        self.pipe.send(line);
    }

    fn recv(&mut self) -> String {
        let line = self.pipe.recv(Duration::from_secs(20));
        assert!(!line.starts_with("error"), "harness_cqe: {line}");
        line
    }

    fn check_consts(&mut self) {
        self.send("consts");
        let line = self.recv();
        let got: Vec<(String, u32)> = line
            .split_whitespace()
            .skip(1)
            .map(|kv| {
                let (k, v) = kv.split_once('=').unwrap();
                (k.to_string(), v.parse().unwrap())
            })
            .collect();
        let want: Vec<(String, u32)> = IBV_CONSTS
            .iter()
            .map(|&(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(got, want, "ibv_wc values of the harness's libibverbs");
    }

    /// `mlx5_poll_cq_v1(cq, ne, wc)`: the completions and the doorbell record's CI word.
    fn poll(&mut self, ne: usize) -> (Vec<IbvWc>, [u8; 4]) {
        self.send(&format!("poll {ne}"));
        let head = self.recv();
        let n: i32 = head
            .strip_prefix("n ")
            .unwrap_or_else(|| panic!("harness_cqe: {head}"))
            .parse()
            .unwrap();
        assert!(n >= 0, "libmlx5's poll returned {n} (CQ_POLL_ERR)");
        let mut wcs = Vec::new();
        for _ in 0..n {
            let l = self.recv();
            let v: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .map(|x| x.parse().unwrap())
                .collect();
            assert_eq!(v.len(), 13, "harness_cqe: {l}");
            let u = |i: usize| v[i] as u32;
            wcs.push(IbvWc {
                wr_id: v[0],
                status: u(1),
                opcode: u(2),
                vendor_err: u(3),
                byte_len: u(4),
                imm_data: u(5),
                qp_num: u(6),
                src_qp: u(7),
                wc_flags: u(8),
                pkey_index: u(9),
                slid: u(10),
                sl: u(11),
                dlid_path_bits: u(12),
            });
        }
        let d = self.recv();
        let hex = d.strip_prefix("dbrec ").unwrap();
        let mut rec = [0u8; 4];
        for (i, b) in rec.iter_mut().enumerate() {
            *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
        }
        (wcs, rec)
    }
}

// ---------------------------------------------------------------------------------------
// uhca's side: a mock HCA, QPs in RTS with their send doorbells held.

fn open() -> (MockHca, Hca<P>) {
    common::open_held(LinkLayer::InfiniBand)
}

fn ib_path(dlid: u16) -> AhAttr {
    // RtrAttr's default path (InfiniBand, no GRH) with this DLID.
    let mut ah = RtrAttr::default().ah;
    if let AhAttr::Ib { dlid: d, .. } = &mut ah {
        *d = dlid;
    }
    ah
}

enum AnyQp {
    Rc(Qp<P, Rc>),
    Ud(Qp<P, Ud>),
}

fn rc_up(hca: &mut Hca<P>, mut qp: Qp<P, Rc>) -> Qp<P, Rc> {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    qp.to_init(
        hca,
        InitAttr {
            access,
            ..InitAttr::default()
        },
    )
    .unwrap();
    let rtr = RtrAttr {
        dest_qpn: 0x77,
        ah: ib_path(9),
        ..RtrAttr::default()
    };
    qp.to_rtr(hca, rtr).unwrap();
    // The longest ACK timeout: the peer does not exist.
    let rts = RtsAttr {
        timeout: 31,
        ..RtsAttr::default()
    };
    qp.to_rts(hca, rts).unwrap();
    qp
}

fn ud_up(hca: &mut Hca<P>, mut qp: Qp<P, Ud>) -> Qp<P, Ud> {
    let init = InitAttr {
        qkey: 0x1111,
        ..InitAttr::default()
    };
    qp.to_init(hca, init).unwrap();
    qp.to_rtr(hca).unwrap();
    qp.to_rts(hca, 0).unwrap();
    qp
}

/// A send WQE uhca has outstanding: its counter, opcode, signalled or not.
#[derive(Clone, Copy, Debug)]
struct SendWqe {
    counter: u16,
    wqe_opcode: u8,
    signaled: bool,
}

struct TestQp {
    qp: Option<AnyQp>,
    qpn: u32,
    /// The user index libmlx5 knows the QP by (CQE version 1).
    uidx: u32,
    srq: Option<usize>,
    ud: bool,
    /// Receives posted since the last RESET (the RQ's WQE counter).
    rq_posted: u32,
    sq: VecDeque<SendWqe>,
    rq: VecDeque<(u16, u64)>,
    in_error: bool,
}

struct TestSrq {
    srq: Srq<P>,
    /// Posted and not completed: (SRQ WQE index, wr_id).
    posted: Vec<(u16, u64)>,
}

/// What a CQE completes, for the comparison.
#[derive(Clone, Copy, Debug)]
struct Expect {
    qp: usize,
    cqe_opcode: u8,
    sop: u8,
}

struct World {
    dev: MockHca,
    hca: Hca<P>,
    _pd: Pd<P>,
    cq: Cq<P>,
    mr: Mr<P>,
    ah: uhca::driver::verbs::Ah,
    qps: Vec<TestQp>,
    srqs: Vec<TestSrq>,
    harness: Harness,
    /// CQEs written (the producer index of both rings).
    cq_pi: u32,
    cq_log: u32,
    next_wr_id: u64,
    covered: BTreeSet<String>,
}

fn caps(srq: bool) -> QpCaps {
    QpCaps {
        max_send_wr: 16,
        max_recv_wr: if srq { 0 } else { 16 },
        max_send_sge: 2,
        max_recv_sge: if srq { 0 } else { 1 },
        max_inline_data: 0,
    }
}

impl World {
    fn new(bin: &std::path::Path) -> World {
        let (dev, mut hca) = open();
        let pd = hca.alloc_pd().unwrap();
        let cq = hca.create_cq(127).unwrap();
        let cq_log = (cq.cqe() + 1).trailing_zeros();
        let mr = hca
            .alloc_mr(
                &pd,
                8192,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            )
            .unwrap();
        let ah = hca.create_ah(1, ib_path(0x33)).unwrap();
        let mut harness = Harness::start(bin);
        harness.check_consts();
        harness.send(&format!("cq {cq_log}"));
        let mut srqs = Vec::new();
        for _ in 0..2 {
            let attr = SrqInitAttr {
                max_wr: 31,
                max_sge: 1,
                srq_limit: 0,
            };
            let srq = hca.create_srq(&pd, attr).unwrap();
            harness.send(&format!("srq {}", srq.srqn()));
            srqs.push(TestSrq {
                srq,
                posted: Vec::new(),
            });
        }
        let mut qps = Vec::new();
        // RC on its RQ, RC on SRQ 0, UD on its RQ, UD on SRQ 1, and one more of each on
        // an RQ so that several QPs share the CQ.
        for (i, (ud, srq)) in [
            (false, None),
            (false, Some(0)),
            (true, None),
            (true, Some(1)),
            (false, None),
            (true, None),
        ]
        .into_iter()
        .enumerate()
        {
            let attr = QpInitAttr {
                send_cq: &cq,
                recv_cq: &cq,
                srq: srq.map(|s: usize| &srqs[s].srq),
                cap: caps(srq.is_some()),
            };
            let (qp, qpn) = if ud {
                let qp = hca.create_qp::<Ud>(&pd, &attr).unwrap();
                let qpn = qp.qpn();
                (AnyQp::Ud(ud_up(&mut hca, qp)), qpn)
            } else {
                let qp = hca.create_qp::<Rc>(&pd, &attr).unwrap();
                let qpn = qp.qpn();
                (AnyQp::Rc(rc_up(&mut hca, qp)), qpn)
            };
            // User indexes as libmlx5 hands them out: small, its own numbering.
            let uidx = 0x10 + i as u32 * 0x1011;
            let srqn = srq.map_or("-".to_string(), |s| srqs[s].srq.srqn().to_string());
            harness.send(&format!("qp {qpn} {uidx} {srqn}"));
            qps.push(TestQp {
                qp: Some(qp),
                qpn,
                uidx,
                srq,
                ud,
                rq_posted: 0,
                sq: VecDeque::new(),
                rq: VecDeque::new(),
                in_error: false,
            });
        }
        World {
            dev,
            hca,
            _pd: pd,
            cq,
            mr,
            ah,
            qps,
            srqs,
            harness,
            cq_pi: 0,
            cq_log,
            next_wr_id: 0x1000_0000_0000_0001,
            covered: BTreeSet::new(),
        }
    }

    fn wr_id(&mut self, rng: &mut Rng) -> u64 {
        // Distinct, and with high bits set so that a truncation would show.
        self.next_wr_id = self.next_wr_id.wrapping_add(1 + rng.below(1 << 40));
        self.next_wr_id
    }

    /// RESET and back to RTS after an error completion (uhca refuses posts until then).
    fn recycle(&mut self, i: usize) {
        let hca = &mut self.hca;
        let t = &mut self.qps[i];
        t.qp = Some(match t.qp.take().unwrap() {
            AnyQp::Rc(mut q) => {
                q.to_reset(hca).unwrap();
                AnyQp::Rc(rc_up(hca, q))
            }
            AnyQp::Ud(mut q) => {
                q.to_reset(hca).unwrap();
                AnyQp::Ud(ud_up(hca, q))
            }
        });
        t.in_error = false;
        t.rq_posted = 0;
        t.sq.clear();
        t.rq.clear();
    }

    /// Posts one send through uhca and tells the harness its counter and wr_id.
    fn post_send(&mut self, i: usize, rng: &mut Rng, last: bool) {
        let wr_id = self.wr_id(rng);
        let base = self.mr.iova();
        let lkey = self.mr.lkey();
        let ud = self.qps[i].ud;
        let pick = if ud { rng.below(2) } else { rng.below(7) };
        let (op, wqe_opcode) = match pick {
            0 => (SendOp::Send, WQE_SEND),
            1 => (
                SendOp::SendWithImm {
                    imm: rng.next() as u32,
                },
                WQE_SEND_IMM,
            ),
            2 => (
                SendOp::RdmaWrite {
                    remote_addr: rng.next(),
                    rkey: rng.next() as u32,
                },
                WQE_RDMA_WRITE,
            ),
            3 => (
                SendOp::RdmaWriteWithImm {
                    remote_addr: rng.next(),
                    rkey: rng.next() as u32,
                    imm: rng.next() as u32,
                },
                WQE_RDMA_WRITE_IMM,
            ),
            4 => (
                SendOp::RdmaRead {
                    remote_addr: rng.next(),
                    rkey: rng.next() as u32,
                },
                WQE_RDMA_READ,
            ),
            5 => (
                SendOp::AtomicCmpSwap {
                    remote_addr: rng.next() & !7,
                    rkey: rng.next() as u32,
                    compare: rng.next(),
                    swap: rng.next(),
                },
                WQE_ATOMIC_CS,
            ),
            _ => (
                SendOp::AtomicFetchAdd {
                    remote_addr: rng.next() & !7,
                    rkey: rng.next() as u32,
                    add: rng.next(),
                },
                WQE_ATOMIC_FA,
            ),
        };
        let atomic = matches!(wqe_opcode, WQE_ATOMIC_CS | WQE_ATOMIC_FA);
        let sge = [Sge {
            addr: base + 8 * rng.below(64),
            len: if atomic { 8 } else { 1 + rng.below(512) as u32 },
            lkey,
        }];
        let signaled = last || rng.percent(60);
        let mut flags = SendFlags::empty();
        if signaled {
            flags |= SendFlags::SIGNALED;
        }
        let mut wr = SendWr::new(wr_id, op, &sge).with_flags(flags);
        let dest = UdDest {
            ah: &self.ah,
            remote_qpn: 0x456,
            remote_qkey: 0x2222,
        };
        if ud {
            wr = wr.with_ud(dest);
        }
        self.dev.take_doorbells();
        match self.qps[i].qp.as_mut().unwrap() {
            AnyQp::Rc(q) => q.post_send(&[wr]).unwrap(),
            AnyQp::Ud(q) => q.post_send(&[wr]).unwrap(),
        }
        // The held send doorbell carries the first 8 bytes of the WQE's control segment:
        // opmod_idx_opcode gives the WQE counter and the opcode uhca wrote.
        let db: Vec<_> = self
            .dev
            .take_doorbells()
            .into_iter()
            .filter(|d| d.offset >= 0x800 && d.width == 8)
            .collect();
        assert_eq!(db.len(), 1, "one send doorbell per post");
        let word = u32::from_be_bytes(db[0].bytes[..4].try_into().unwrap());
        let counter = (word >> 8) as u16;
        assert_eq!(word as u8, wqe_opcode, "uhca's WQE opcode");
        let t = &mut self.qps[i];
        t.sq.push_back(SendWqe {
            counter,
            wqe_opcode,
            signaled,
        });
        let line = format!("sq {} {counter} {wr_id}", t.uidx);
        self.harness.send(&line);
    }

    fn post_recv(&mut self, i: usize, rng: &mut Rng) {
        let wr_id = self.wr_id(rng);
        let sge = [Sge {
            addr: self.mr.iova() + 64 * rng.below(64),
            len: 64,
            lkey: self.mr.lkey(),
        }];
        let wr = RecvWr {
            wr_id,
            sg_list: &sge,
        };
        match self.qps[i].qp.as_mut().unwrap() {
            AnyQp::Rc(q) => q.post_recv(&[wr]).unwrap(),
            AnyQp::Ud(q) => q.post_recv(&[wr]).unwrap(),
        }
        let t = &mut self.qps[i];
        let counter = t.rq_posted as u16;
        t.rq_posted += 1;
        t.rq.push_back((counter, wr_id));
        let line = format!("rq {} {counter} {wr_id}", t.uidx);
        self.harness.send(&line);
    }

    /// Posts one SRQ receive and finds the WQE index uhca chose by its buffer address.
    fn post_srq(&mut self, s: usize, rng: &mut Rng) {
        let wr_id = self.wr_id(rng);
        // A buffer address no WQE of this SRQ's buffer holds (posted or left from before),
        // so that the WQE uhca writes is found by it.
        let base = self.mr.iova();
        let n = 1u16 << self.srqs[s].srq.log_size();
        let taken: BTreeSet<u64> = (0..n).map(|k| self.srq_addr(s, k)).collect();
        let addr = (0..2 * n as u64)
            .map(|k| base + 64 * k)
            .find(|a| !taken.contains(a))
            .unwrap();
        let sge = [Sge {
            addr,
            len: 64,
            lkey: self.mr.lkey(),
        }];
        let wr = RecvWr {
            wr_id,
            sg_list: &sge,
        };
        self.srqs[s].srq.post_recv(&[wr]).unwrap();
        let idx = (0..n)
            .find(|&k| self.srq_addr(s, k) == addr && !self.srqs[s].posted.iter().any(|p| p.0 == k))
            .expect("the posted SRQ WQE is in the SRQ buffer");
        if std::env::var_os("UHCA_PARITY_TRACE").is_some() {
            eprintln!(
                "srq {s} idx {idx} addr {addr:#x} posted {:?}",
                self.srqs[s].posted
            );
        }
        self.srqs[s].posted.push((idx, wr_id));
        let line = format!("srqwr {} {idx} {wr_id}", self.srqs[s].srq.srqn());
        self.harness.send(&line);
    }

    /// The buffer address of SRQ WQE `idx`'s first data segment (after the 16-byte next
    /// segment; the address is the segment's last 8 bytes).
    fn srq_addr(&self, s: usize, idx: u16) -> u64 {
        let srq = &self.srqs[s].srq;
        let off = ((idx as usize) << srq.log_stride()) + 16 + 8;
        let mut b = [0u8; 8];
        srq.mem().read_bytes(off, &mut b);
        u64::from_be_bytes(b)
    }

    /// Writes one CQE into both rings at the next slot, with the lap's owner bit.
    fn write_cqe(&mut self, mut cqe: [u8; 64], opcode: u8, rng: &mut Rng) {
        let owner = ((self.cq_pi >> self.cq_log) & 1) as u8;
        // op_own: opcode, then bit 1 (solicited event, which neither side reports) random,
        // the inline-scatter bits (2, 3) clear, the owner bit.
        cqe[CQE_OP_OWN] = opcode << 4 | (rng.below(2) as u8) << 1 | owner;
        let at = self.cq.ring().mem().iova() + (self.cq_pi & ((1 << self.cq_log) - 1)) as u64 * 64;
        assert!(self.dev.host_write(at, &cqe[..63]));
        assert!(self.dev.host_write(at + 63, &cqe[63..]));
        let hex: String = cqe.iter().map(|b| format!("{b:02x}")).collect();
        self.harness.send(&format!("cqe {hex}"));
        self.cq_pi += 1;
    }

    fn dbrec(&self) -> [u8; 4] {
        let mut b = [0u8; 4];
        assert!(self.dev.host_read(self.cq.ring().dbr_iova(), &mut b));
        b
    }
}

fn be32(b: &mut [u8; 64], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn be16(b: &mut [u8; 64], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn random_cqe(rng: &mut Rng) -> [u8; 64] {
    let mut b = [0u8; 64];
    for c in b.chunks_exact_mut(8) {
        c.copy_from_slice(&rng.next().to_le_bytes());
    }
    b
}

fn cqe_name(op: u8) -> &'static str {
    match op {
        CQE_REQ => "REQ",
        CQE_RESP_WR_IMM => "RESP_WR_IMM",
        CQE_RESP_SEND => "RESP_SEND",
        CQE_RESP_SEND_IMM => "RESP_SEND_IMM",
        CQE_RESP_SEND_INV => "RESP_SEND_INV",
        CQE_REQ_ERR => "REQ_ERR",
        CQE_RESP_ERR => "RESP_ERR",
        _ => "?",
    }
}

fn sop_name(op: u8) -> &'static str {
    match op {
        WQE_SEND => "SEND",
        WQE_SEND_IMM => "SEND_IMM",
        WQE_RDMA_WRITE => "RDMA_WRITE",
        WQE_RDMA_WRITE_IMM => "RDMA_WRITE_IMM",
        WQE_RDMA_READ => "RDMA_READ",
        WQE_ATOMIC_CS => "ATOMIC_CS",
        WQE_ATOMIC_FA => "ATOMIC_FA",
        _ => "-",
    }
}

/// Compares one completion field by field; returns the differences.
fn compare(w: &World, e: &Expect, u: &WorkCompletion, l: &IbvWc) -> Vec<String> {
    let mut d = Vec::new();
    let mut field = |name: &str, uhca: u64, libmlx5: u64| {
        if uhca != libmlx5 {
            d.push(format!("{name}: uhca {uhca:#x}, libmlx5 {libmlx5:#x}"));
        }
    };
    field("wr_id", u.wr_id, l.wr_id);
    field("status", ibv_status(u.status) as u64, l.status as u64);
    field("qp_num", u.qp_num as u64, l.qp_num as u64);
    if u.status != WcStatus::Success || l.status != 0 {
        field("vendor_err", u.vendor_err as u64, l.vendor_err as u64);
        return d;
    }
    field("opcode", ibv_opcode(u.opcode) as u64, l.opcode as u64);
    let flags = ibv_flags(u.wc_flags);
    if e.cqe_opcode == CQE_REQ {
        // libmlx5 flags a requester completion of an operation with immediate data
        // WITH_IMM (cq.c:168, 174) without writing imm_data; uhca does not (listed).
        let imm = matches!(e.sop, WQE_SEND_IMM | WQE_RDMA_WRITE_IMM);
        field(
            "wc_flags",
            (flags | if imm { IBV_WC_WITH_IMM } else { 0 }) as u64,
            l.wc_flags as u64,
        );
        if matches!(e.sop, WQE_RDMA_READ | WQE_ATOMIC_CS | WQE_ATOMIC_FA) {
            field("byte_len", u.byte_len as u64, l.byte_len as u64);
        }
    } else {
        field("wc_flags", flags as u64, l.wc_flags as u64);
        field("byte_len", u.byte_len as u64, l.byte_len as u64);
        if l.wc_flags & IBV_WC_WITH_IMM != 0 {
            field("imm_data", u.imm_data as u64, l.imm_data as u64);
        }
        if l.wc_flags & IBV_WC_WITH_INV != 0 {
            // The union holds the rkey in host order (cq.c:316); the harness prints it
            // through be32toh, as for imm_data.
            field(
                "invalidated_rkey",
                u32::from_be(u.invalidated_rkey) as u64,
                l.imm_data as u64,
            );
        }
        field("slid", u.slid as u64, l.slid as u64);
        field(
            "dlid_path_bits",
            u.dlid_path_bits as u64,
            l.dlid_path_bits as u64,
        );
        field("sl", u.sl as u64, l.sl as u64);
        if w.qps[e.qp].ud {
            field("src_qp", u.src_qp as u64, l.src_qp as u64);
        }
    }
    d
}

/// One episode: posts on every QP, CQEs for what was posted (in an order the device could
/// write them, with at most one error per QP followed by flushes), polls both in the same
/// random batches, compares.
fn episode(w: &mut World, rng: &mut Rng, synd_next: &mut [usize; 2], total: &mut usize) {
    for i in 0..w.qps.len() {
        if w.qps[i].in_error {
            w.recycle(i);
        }
    }
    if std::env::var_os("UHCA_PARITY_TRACE").is_some() {
        eprintln!("episode after {total} CQEs");
    }
    // Post.
    for i in 0..w.qps.len() {
        let sends = rng.below(5) as usize;
        for k in 0..sends {
            w.post_send(i, rng, k + 1 == sends);
        }
        if w.qps[i].srq.is_none() {
            for _ in 0..rng.below(4) {
                w.post_recv(i, rng);
            }
        }
    }
    for s in 0..w.srqs.len() {
        let room = 24usize.saturating_sub(w.srqs[s].posted.len());
        for _ in 0..rng.below(room.min(4) as u64 + 1) {
            w.post_srq(s, rng);
        }
    }
    // Which CQEs: per QP a sequence of (send or receive) completions in queue order.
    #[derive(Clone, Copy)]
    enum Src {
        Sq(SendWqe),
        Rq(u16),
        Srq(u16),
    }
    let mut per_qp: Vec<VecDeque<Src>> = Vec::new();
    for t in &w.qps {
        let mut sq: VecDeque<Src> =
            t.sq.iter()
                .filter(|s| s.signaled)
                .map(|&s| Src::Sq(s))
                .collect();
        let mut rq: VecDeque<Src> = t.rq.iter().map(|&(c, _)| Src::Rq(c)).collect();
        let mut seq = VecDeque::new();
        while !sq.is_empty() || !rq.is_empty() {
            let from_sq = rq.is_empty() || (!sq.is_empty() && rng.percent(50));
            seq.push_back(
                if from_sq {
                    sq.pop_front()
                } else {
                    rq.pop_front()
                }
                .unwrap(),
            );
        }
        per_qp.push(seq);
    }
    // SRQ receives: some of the posted ones, through a QP attached to the SRQ.
    for (s, srq) in w.srqs.iter().enumerate() {
        let users: Vec<usize> = (0..w.qps.len())
            .filter(|&i| w.qps[i].srq == Some(s))
            .collect();
        for &(idx, _) in &srq.posted {
            if rng.percent(70) {
                let q = users[rng.below(users.len() as u64) as usize];
                let at = rng.below(per_qp[q].len() as u64 + 1) as usize;
                per_qp[q].insert(at, Src::Srq(idx));
            }
        }
    }
    // Errors: at a random point of some QPs' sequences; every later CQE of that QP's own
    // queues is a flush error, and its SRQ receives after the point do not happen.
    let mut error_at: Vec<Option<usize>> = vec![None; w.qps.len()];
    for (q, seq) in per_qp.iter_mut().enumerate() {
        if !seq.is_empty() && rng.percent(18) {
            let at = rng.below(seq.len() as u64) as usize;
            // Unsignalled sends after the point are flushed too.
            let t = &w.qps[q];
            let mut rebuilt: VecDeque<Src> = VecDeque::new();
            for (k, s) in seq.iter().enumerate() {
                if k <= at || !matches!(s, Src::Srq(..)) {
                    rebuilt.push_back(*s);
                }
            }
            if let Some(Src::Sq(last)) = rebuilt.iter().rev().find(|s| matches!(s, Src::Sq(_))) {
                let last = last.counter;
                let tail: Vec<SendWqe> =
                    t.sq.iter()
                        .skip_while(|s| s.counter != last)
                        .skip(1)
                        .copied()
                        .collect();
                for s in tail {
                    rebuilt.push_back(Src::Sq(s));
                }
            }
            *seq = rebuilt;
            error_at[q] = Some(at);
        }
    }
    // Interleave the QPs' sequences into the CQ.
    let mut order = Vec::new();
    let mut cursors: Vec<usize> = vec![0; per_qp.len()];
    loop {
        let live: Vec<usize> = (0..per_qp.len())
            .filter(|&q| cursors[q] < per_qp[q].len())
            .collect();
        if live.is_empty() {
            break;
        }
        let q = live[rng.below(live.len() as u64) as usize];
        order.push((q, cursors[q], per_qp[q][cursors[q]]));
        cursors[q] += 1;
    }
    assert!(order.len() < 1 << w.cq_log, "an episode fits the CQ");
    // Write the CQEs.
    let mut expects = Vec::new();
    let mut cqes = Vec::new();
    for (q, k, src) in order {
        let mut b = random_cqe(rng);
        let (qpn, uidx, ud) = (w.qps[q].qpn, w.qps[q].uidx, w.qps[q].ud);
        let err = error_at[q].map(|at| k.cmp(&at));
        let (opcode, sop, counter) = match src {
            Src::Sq(s) => {
                let op = if err.is_some_and(|o| o.is_ge()) {
                    CQE_REQ_ERR
                } else {
                    CQE_REQ
                };
                (op, s.wqe_opcode, s.counter)
            }
            Src::Rq(c) | Src::Srq(c) => {
                let op = if err.is_some_and(|o| o.is_ge()) {
                    CQE_RESP_ERR
                } else {
                    match rng.below(8) {
                        0..=2 => CQE_RESP_SEND,
                        3 | 4 => CQE_RESP_SEND_IMM,
                        5 if !ud => CQE_RESP_SEND_INV,
                        _ if !ud => CQE_RESP_WR_IMM,
                        _ => CQE_RESP_SEND,
                    }
                };
                (op, 0, c)
            }
        };
        // The user index (libmlx5's key) in srqn_uidx[23:0], its top byte random.
        b[CQE_SRQN_UIDX + 1..CQE_SRQN_UIDX + 4].copy_from_slice(&uidx.to_be_bytes()[1..]);
        be16(&mut b, CQE_WQE_COUNTER, counter);
        let side = usize::from(matches!(src, Src::Rq(_) | Src::Srq(_)));
        let mut label = String::new();
        match opcode {
            CQE_REQ => {
                be32(&mut b, CQE_SOP_DROP_QPN, (sop as u32) << 24 | qpn);
                label = format!(
                    "{} {} {}",
                    if ud { "UD" } else { "RC" },
                    cqe_name(opcode),
                    sop_name(sop)
                );
            }
            CQE_REQ_ERR | CQE_RESP_ERR => {
                let synd = if err == Some(std::cmp::Ordering::Equal) {
                    let s = SYNDROMES[synd_next[side] % SYNDROMES.len()];
                    synd_next[side] += 1;
                    label = format!("{} syndrome {s:#04x}", cqe_name(opcode));
                    s
                } else {
                    SYNDROME_WR_FLUSH_ERR
                };
                b[CQE_SYNDROME] = synd;
                // s_wqe_opcode_qpn: the top byte is the WQE opcode of a requester error,
                // random on the responder side (neither side reads it).
                let top = if side == 0 { sop } else { b[CQE_SOP_DROP_QPN] };
                be32(&mut b, CQE_SOP_DROP_QPN, (top as u32) << 24 | qpn);
                if rng.percent(30) {
                    b[CQE_VENDOR_ERR_SYND] = 0;
                }
                // Not generated: a responder's remote-aborted error with vendor syndrome
                // 0x93, an on-demand-paging page fault. libmlx5 takes it for an ODP fault
                // on an SRQ and re-posts the SRQ's WQE itself, reporting nothing (cq.c,
                // `is_odp_pfault_err`); the harness's SRQ has no WQE list for that. uhca
                // registers no on-demand-paging memory, so a device never writes it for
                // uhca's QPs.
                if opcode == CQE_RESP_ERR
                    && synd == SYNDROME_REMOTE_ABORTED
                    && b[CQE_VENDOR_ERR_SYND] == VENDOR_SYNDROME_ODP_PFAULT
                {
                    b[CQE_VENDOR_ERR_SYND] = 0;
                }
            }
            _ => {
                // sop_drop_qpn: the QPN; the top byte random (a responder has no sop).
                let top = b[CQE_SOP_DROP_QPN];
                be32(&mut b, CQE_SOP_DROP_QPN, (top as u32) << 24 | qpn);
                // A SEND's byte count fits the receive it landed in (every receive here
                // holds 64 bytes): a device reporting more is refused by uhca
                // (`BadCqe::ByteCountTooLarge`), which libmlx5 does not check. An RDMA WRITE
                // with immediate keeps its random count: it writes where its rkey says.
                if opcode != CQE_RESP_WR_IMM {
                    be32(&mut b, CQE_BYTE_CNT, rng.below(65) as u32);
                }
                let g = (b[CQE_FLAGS_RQPN] >> 4) & 3;
                let on = if matches!(src, Src::Srq(..)) {
                    "SRQ"
                } else {
                    "RQ"
                };
                label = format!(
                    "{} {} {on} {}",
                    if ud { "UD" } else { "RC" },
                    cqe_name(opcode),
                    if g != 0 { "GRH" } else { "no GRH" }
                );
            }
        }
        if !label.is_empty() {
            w.covered.insert(label);
        }
        if std::env::var_os("UHCA_PARITY_TRACE").is_some() {
            eprintln!(
                "cqe qp {qpn:#x} {} counter {counter} sop {sop:#x}",
                cqe_name(opcode)
            );
        }
        w.write_cqe(b, opcode, rng);
        expects.push(Expect {
            qp: q,
            cqe_opcode: opcode,
            sop,
        });
        cqes.push(b);
    }
    // Poll both in the same batches and compare.
    let mut next = 0;
    loop {
        let ne = 1 + rng.below(8) as usize;
        let mut wc = [WorkCompletion::default(); 8];
        let n =
            w.cq.poll(&mut wc[..ne])
                .unwrap_or_else(|e| panic!("uhca refused a CQE: {e}"));
        let (lib, lib_rec) = w.harness.poll(ne);
        assert_eq!(n, lib.len(), "completions in a poll of {ne}");
        for (u, l) in wc[..n].iter().zip(&lib) {
            let e = &expects[next];
            let diffs = compare(w, e, u, l);
            assert!(
                diffs.is_empty(),
                "CQE {} ({}, QP {:#x}) decoded differently:\n  {}\n  bytes {}\n  uhca {u:?}\n  libmlx5 {l:?}",
                *total + next,
                cqe_name(e.cqe_opcode),
                w.qps[e.qp].qpn,
                diffs.join("\n  "),
                cqes[next]
                    .iter()
                    .map(|b| format!("{b:02x}"))
                    .collect::<String>(),
            );
            next += 1;
        }
        assert_eq!(
            w.dbrec(),
            lib_rec,
            "the consumer-index word of the CQ doorbell record after {} CQEs",
            *total + next
        );
        if n == 0 {
            break;
        }
    }
    assert_eq!(next, expects.len(), "every CQE polled");
    *total += next;
    // What both now consider done.
    for (q, t) in w.qps.iter_mut().enumerate() {
        if error_at[q].is_some() {
            t.in_error = true;
        } else {
            t.sq.clear();
            t.rq.clear();
        }
    }
    let done: Vec<(usize, u16)> = cqes
        .iter()
        .zip(&expects)
        .filter_map(|(b, e)| {
            let s = w.qps[e.qp].srq?;
            let side = matches!(e.cqe_opcode, CQE_REQ | CQE_REQ_ERR);
            (!side).then(|| {
                (
                    s,
                    u16::from_be_bytes([b[CQE_WQE_COUNTER], b[CQE_WQE_COUNTER + 1]]),
                )
            })
        })
        .collect();
    for (s, idx) in done {
        w.srqs[s].posted.retain(|p| p.0 != idx);
    }
}

/// The cases a run must have met.
fn required_cases() -> Vec<String> {
    let mut v = Vec::new();
    for sop in [WQE_SEND, WQE_SEND_IMM] {
        v.push(format!("UD REQ {}", sop_name(sop)));
    }
    for sop in [
        WQE_SEND,
        WQE_SEND_IMM,
        WQE_RDMA_WRITE,
        WQE_RDMA_WRITE_IMM,
        WQE_RDMA_READ,
        WQE_ATOMIC_CS,
        WQE_ATOMIC_FA,
    ] {
        v.push(format!("RC REQ {}", sop_name(sop)));
    }
    for t in ["RC", "UD"] {
        for q in ["RQ", "SRQ"] {
            for g in ["GRH", "no GRH"] {
                v.push(format!("{t} RESP_SEND {q} {g}"));
                v.push(format!("{t} RESP_SEND_IMM {q} {g}"));
            }
        }
    }
    for q in ["RQ", "SRQ"] {
        v.push(format!("RC RESP_WR_IMM {q} no GRH"));
        v.push(format!("RC RESP_SEND_INV {q} no GRH"));
    }
    for op in [CQE_REQ_ERR, CQE_RESP_ERR] {
        for s in SYNDROMES {
            v.push(format!("{} syndrome {s:#04x}", cqe_name(op)));
        }
    }
    v
}

#[test]
fn uhca_and_libmlx5_decode_the_same_cqes_alike() {
    let Some(bin) = harness_path("harness_cqe") else {
        return;
    };
    let seed = seed();
    eprintln!("CQE parity seed {seed:#x} (UHCA_PARITY_SEED={seed:#x} replays this run)");
    let mut rng = Rng(seed);
    let mut w = World::new(&bin);
    let mut synd_next = [0usize; 2];
    let mut total = 0;
    let mut episodes = 0;
    while total < 20_000 || episodes < 100 {
        episode(&mut w, &mut rng, &mut synd_next, &mut total);
        episodes += 1;
    }
    let missing: Vec<String> = required_cases()
        .into_iter()
        .filter(|c| !w.covered.contains(c))
        .collect();
    assert!(w.cq_pi > 4 << w.cq_log, "the CQ ring wrapped several times");
    assert!(
        missing.is_empty(),
        "seed {seed}: {total} CQEs in {episodes} episodes did not cover: {missing:?}"
    );
    eprintln!(
        "{total} CQEs in {episodes} episodes decoded alike ({} cases)",
        w.covered.len()
    );
}
