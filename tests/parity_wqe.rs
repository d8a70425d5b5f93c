//! Byte-for-byte parity with NVIDIA's libmlx5, the WQE side: for the same work requests,
//! uhca (through its public API, on a mock HCA whose send doorbells are held so nothing
//! consumes the queues) and libmlx5 (rdma-core's `providers/mlx5`, compiled unmodified and
//! driven by `tests/parity/harness_wqe.c` on plain memory of the same geometry) must write
//! the same send WQEs, receive WQEs, SRQ WQEs, doorbell records, send doorbells and CQ arm
//! doorbells, byte for byte, except the fields listed in [`ALLOWED`].
//!
//! The harness is found through `UHCA_LIBMLX5_HARNESS_DIR` (what `bash
//! tests/parity/build.sh` prints). Without it the tests say they skipped and pass, unless
//! `UHCA_REQUIRE_LIBMLX5=1` (CI sets it) makes that a failure. `UHCA_PARITY_SEED` replays a
//! random run. `tests/parity/README.md` says what is compared and why.

#[path = "parity/common.rs"]
mod common;

use std::collections::VecDeque;
use std::time::Duration;

use common::{Pipe, Rng, harness_path, seed};

use uhca::driver::Hca;
use uhca::driver::addr::{AhAttr, Gid, Grh, Mac, StaticRate};
use uhca::driver::verbs::{
    Ah, Cq, InitAttr, Pd, Qp, QpCaps, QpInitAttr, QpTransport, Rc, RecvWr, RtrAttr, RtsAttr,
    SendData, SendFlags, SendOp, SendWr, Sge, Srq, SrqInitAttr, Uc, Ud, UdDest, WorkCompletion,
    WrError,
};
use uhca::fwif::consts::{AccessFlags, CqeOpcode};
use uhca::fwif::cqe::{Cqe64, op_own_of};
use uhca::fwif::zerocopy::{FromZeros, IntoBytes};
use uhca::hal::DmaMem;
use uhca::mock::{LinkLayer, MockHca, MockPlatform};

type P = MockPlatform;

/// The fields allowed to differ between uhca and libmlx5, and why. Everything else must be
/// equal; every byte these let through is counted and reported in the summary line.
const ALLOWED: &[(&str, &str)] = &[
    (
        "inline segment padding",
        "the bytes after an inline segment's data, up to its 16-byte boundary: the device \
         reads byte_count bytes and ignores the rest; libmlx5 leaves whatever the ring held \
         there, uhca too except where the segment wraps the ring's end (it writes that unit \
         whole, zero-padded)",
    ),
    (
        "fetch-and-add compare field",
        "bytes 8..16 of a fetch-and-add's atomic segment: the operation has one operand \
         (swap_add) and the device does not read the compare field; libmlx5 leaves what the \
         ring held there (qp.c _set_atomic_seg), uhca writes zero",
    ),
    (
        "SRQ scatter entries after the list's end",
        "in an SRQ WQE, the entries after the one with the invalid lkey that ends the list: \
         the device stops there, so they keep what an earlier use of the slot left. They \
         differ only after the one difference on purpose (an empty entry libmlx5 copies and \
         uhca leaves out, see the README), which shifts where the list ends",
    ),
];

/// Indexes into [`ALLOWED`].
const PAD: usize = 0;
const FA_COMPARE: usize = 1;
const SRQ_TAIL: usize = 2;

/// For an SRQ buffer as libmlx5 wrote it, the entries [`ALLOWED`] lets differ: those after
/// each WQE's invalid-lkey entry.
fn allowed_in_srq(buf: &[u8], stride: usize) -> Vec<Option<usize>> {
    let mut allow = vec![None; buf.len()];
    for wqe in (0..buf.len()).step_by(stride) {
        let end = (wqe + 16..wqe + stride)
            .step_by(16)
            .find(|&e| buf[e..e + 4] == [0, 0, 0, 0] && buf[e + 4..e + 8] == [0, 0, 1, 0]);
        if let Some(e) = end {
            for a in &mut allow[e + 16..wqe + stride] {
                *a = Some(SRQ_TAIL);
            }
        }
    }
    allow
}

// ---------------------------------------------------------------------------------------
// The harness process
// ---------------------------------------------------------------------------------------

/// libmlx5 behind a pipe: one request per line, answered by result lines and "ok".
struct Harness {
    pipe: Pipe,
}

impl Harness {
    /// Starts the harness, or says why the test is skipped (`None`).
    fn start() -> Option<Harness> {
        let bin = harness_path("harness_wqe")?;
        Some(Harness {
            pipe: Pipe::start(&bin),
        })
    }

    /// Sends requests (one per line) and returns the result lines of each.
    fn ask_all(&mut self, requests: &[String]) -> Vec<Vec<String>> {
        for r in requests {
            self.pipe.send(r);
        }
        requests.iter().map(|r| self.reply(r)).collect()
    }

    fn ask(&mut self, request: &str) -> Vec<String> {
        self.ask_all(&[request.to_string()]).pop().unwrap()
    }

    fn reply(&mut self, request: &str) -> Vec<String> {
        let mut out = Vec::new();
        loop {
            let line = self.pipe.recv(Duration::from_secs(30));
            if line == "ok" {
                return out;
            }
            if let Some(why) = line.strip_prefix("err ") {
                panic!("libmlx5 harness refused {request:?}: {why}");
            }
            out.push(line);
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).expect("hex from the harness"))
        .collect()
}

/// The words of the result line that starts with `key`.
fn field<'a>(lines: &'a [String], key: &str) -> Vec<&'a str> {
    lines
        .iter()
        .find_map(|l| {
            let mut w = l.split(' ');
            (w.next() == Some(key)).then(|| w.collect())
        })
        .unwrap_or_else(|| panic!("no {key:?} in the harness's answer {lines:?}"))
}

// ---------------------------------------------------------------------------------------
// Comparison and bookkeeping
// ---------------------------------------------------------------------------------------

/// What was compared.
#[derive(Default)]
struct Stats {
    cases: u64,
    wqes: u64,
    bytes: u64,
    wrapped: u64,
    dbrecs: u64,
    doorbells: u64,
    masked: [u64; 3],
    /// Differences on purpose, checked to be exactly what the README says.
    on_purpose: u64,
}

impl Stats {
    fn summary(&self, what: &str) {
        let masked: Vec<String> = ALLOWED
            .iter()
            .zip(self.masked)
            .map(|((name, _), n)| format!("{n} bytes of {name}"))
            .collect();
        println!(
            "libmlx5 parity ({what}): {} cases, {} WQEs ({} across the ring's end), {} bytes, \
             {} doorbell records, {} doorbells compared equal; allowed to differ: {}; {} \
             differences on purpose checked",
            self.cases,
            self.wqes,
            self.wrapped,
            self.bytes,
            self.dbrecs,
            self.doorbells,
            masked.join(", "),
            self.on_purpose
        );
    }
}

/// For a send WQE as libmlx5 wrote it, which bytes [`ALLOWED`] lets differ (by entry).
fn allowed_in_send_wqe(wqe: &[u8], ud: bool) -> Vec<Option<usize>> {
    let mut allow = vec![None; wqe.len()];
    let opcode = wqe[3];
    let mut at = 16 + if ud { 48 } else { 0 };
    // RDMA WRITE (with immediate), RDMA READ: a remote-address segment; atomics: that and
    // an atomic segment (PRM "Send WQE construction").
    match opcode {
        0x08 | 0x09 | 0x10 => at += 16,
        0x11 => at += 32,
        0x12 => {
            for a in &mut allow[at + 24..at + 32] {
                *a = Some(FA_COMPARE);
            }
            at += 32;
        }
        _ => {}
    }
    if at + 4 <= wqe.len() {
        let bc = u32::from_be_bytes(wqe[at..at + 4].try_into().unwrap());
        if bc & 0x8000_0000 != 0 {
            let end = at + 4 + (bc & 0x3ff) as usize;
            for a in allow.iter_mut().take(end.next_multiple_of(16)).skip(end) {
                *a = Some(PAD);
            }
        }
    }
    allow
}

/// Compares two byte strings with the given allowances; panics with both in full and the
/// first difference.
fn compare(
    stats: &mut Stats,
    what: &str,
    uhca: &[u8],
    mlx5: &[u8],
    allow: Option<&[Option<usize>]>,
    replay: &str,
) {
    let diff: Vec<usize> = (0..uhca.len().max(mlx5.len()))
        .filter(|&i| uhca.get(i) != mlx5.get(i) && allow.is_none_or(|a| a[i].is_none()))
        .collect();
    if !diff.is_empty() {
        let units = |b: &[u8]| {
            b.chunks(16)
                .enumerate()
                .map(|(i, c)| format!("  {:3}: {}", i * 16, hex(c)))
                .collect::<Vec<_>>()
                .join("\n")
        };
        panic!(
            "{what}: uhca and libmlx5 differ at byte offsets {diff:?}\nuhca:\n{}\nlibmlx5:\n{}\n\
             {replay}",
            units(uhca),
            units(mlx5)
        );
    }
    if let Some(a) = allow {
        for (i, a) in a.iter().enumerate() {
            if let Some(k) = a
                && uhca.get(i) != mlx5.get(i)
            {
                stats.masked[*k] += 1;
            }
        }
    }
    stats.bytes += uhca.len() as u64;
}

// ---------------------------------------------------------------------------------------
// uhca on a mock HCA
// ---------------------------------------------------------------------------------------

/// A mock HCA with held send doorbells, a PD and one CQ for everything.
struct Rig {
    dev: MockHca,
    hca: Hca<P>,
    pd: Pd<P>,
    cq: Cq<P>,
    cq_pi: u32,
}

fn rig(port_type: LinkLayer) -> Rig {
    let (dev, mut hca) = common::open_held(port_type);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(15).unwrap();
    Rig {
        dev,
        hca,
        pd,
        cq,
        cq_pi: 0,
    }
}

impl Rig {
    /// Writes a CQE into the CQ as the device does (body first, `op_own` with the owner bit
    /// of the lap last) and returns its bytes.
    fn write_cqe(&mut self, mut cqe: Cqe64, opcode: CqeOpcode) -> Vec<u8> {
        let log = (self.cq.cqe() + 1).trailing_zeros();
        cqe.op_own = op_own_of(opcode, ((self.cq_pi >> log) & 1) as u8);
        let iova = self.cq.ring().mem().iova() + ((self.cq_pi & ((1 << log) - 1)) as u64) * 64;
        assert!(self.dev.host_write(iova, &cqe.as_bytes()[..63]));
        assert!(self.dev.host_write(iova + 63, &cqe.as_bytes()[63..]));
        self.cq_pi += 1;
        cqe.as_bytes().to_vec()
    }

    fn poll(&mut self, n: usize) -> Vec<WorkCompletion> {
        let mut wc = vec![WorkCompletion::default(); n];
        let got = self.cq.poll(&mut wc).expect("CQEs the driver accepts");
        wc.truncate(got);
        wc
    }

    fn send_doorbells(&self) -> Vec<uhca::mock::DoorbellRecord> {
        self.dev
            .take_doorbells()
            .into_iter()
            .filter(|d| d.is_send_doorbell())
            .collect()
    }
}

/// An RC or UC QP in RTS towards a peer that does not exist (the held doorbells keep the
/// engine from sending anyway).
fn connected_qp<T: QpTransport>(rig: &mut Rig, cap: QpCaps, sig_all: bool) -> Qp<P, T>
where
    Qp<P, T>: ToRts<T>,
{
    let attr = QpInitAttr {
        send_cq: &rig.cq,
        recv_cq: &rig.cq,
        srq: None,
        cap,
    };
    let mut qp = rig.hca.create_qp::<T>(&rig.pd, &attr).unwrap();
    qp.set_sq_sig_all(sig_all);
    let access = if T::ST == uhca::fwif::consts::QpServiceType::Rc {
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ
    } else {
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE
    };
    qp.to_init(
        &mut rig.hca,
        InitAttr {
            access,
            ..InitAttr::default()
        },
    )
    .unwrap();
    qp.up(&mut rig.hca)
}

/// INIT → RTS for the connected transports (their `to_rtr`/`to_rts` differ in signature).
trait ToRts<T: QpTransport> {
    fn up(self, hca: &mut Hca<P>) -> Qp<P, T>;
}

fn rtr() -> RtrAttr {
    RtrAttr {
        dest_qpn: 0x77,
        ah: AhAttr::Ib {
            dlid: 9,
            sl: 0,
            src_path_bits: 0,
            static_rate: StaticRate::PortCurrent,
            grh: None,
        },
        ..RtrAttr::default()
    }
}

impl ToRts<Rc> for Qp<P, Rc> {
    fn up(self, hca: &mut Hca<P>) -> Qp<P, Rc> {
        let mut qp = self;
        qp.to_rtr(hca, rtr()).unwrap();
        qp.to_rts(
            hca,
            RtsAttr {
                timeout: 31,
                max_rd_atomic: 4,
                ..RtsAttr::default()
            },
        )
        .unwrap();
        qp
    }
}

impl ToRts<Uc> for Qp<P, Uc> {
    fn up(self, hca: &mut Hca<P>) -> Qp<P, Uc> {
        let mut qp = self;
        qp.to_rtr(hca, rtr()).unwrap();
        qp.to_rts(hca, 0).unwrap();
        qp
    }
}

fn ud_qp(rig: &mut Rig, cap: QpCaps) -> Qp<P, Ud> {
    let attr = QpInitAttr {
        send_cq: &rig.cq,
        recv_cq: &rig.cq,
        srq: None,
        cap,
    };
    let mut qp = rig.hca.create_qp::<Ud>(&rig.pd, &attr).unwrap();
    qp.to_init(
        &mut rig.hca,
        InitAttr {
            qkey: 0x1111,
            ..InitAttr::default()
        },
    )
    .unwrap();
    qp.to_rtr(&mut rig.hca).unwrap();
    qp.to_rts(&mut rig.hca, 0).unwrap();
    qp
}

/// A uhca QP and its twin in the harness, with the geometry read from uhca's QP.
struct Twin<T: QpTransport> {
    qp: Qp<P, T>,
    slot: u32,
    /// SQ: byte offset in the QP buffer, WQEBBs (a power of two).
    sq_off: usize,
    sq_bbs: u32,
    /// RQ: WQEs and stride in bytes.
    rq_cnt: u32,
    rq_stride: usize,
    dbr_off: usize,
    /// The last send WQE posted: its index and opcode (to retire the ring up to it).
    last: Option<(u16, u8)>,
    /// WQEBBs posted since the ring was last retired (uhca's ring counts what the poller
    /// retired only at the next post).
    used: u32,
    /// Receive WQEs posted and not yet retired.
    rq_outstanding: u32,
}

impl<T: QpTransport> Twin<T> {
    fn new(h: &mut Harness, qp: Qp<P, T>, slot: u32, sig_all: bool) -> Self {
        let r = qp.rings();
        let sq_bbs = r.sq_free();
        let rq_cnt = r.rq_free();
        let dbr_off = (r.dbr_iova() - r.mem().iova()) as usize;
        // The layout uhca shares with libmlx5: RQ at 0, SQ after it, the doorbell record
        // after both (64-byte aligned).
        let sq_bytes = sq_bbs as usize * 64;
        let rq_bytes = dbr_off - sq_bytes;
        let rq_stride = if rq_cnt == 0 {
            0
        } else {
            rq_bytes / rq_cnt as usize
        };
        let caps = qp.caps();
        let kind = match T::ST {
            uhca::fwif::consts::QpServiceType::Rc => "rc",
            uhca::fwif::consts::QpServiceType::Uc => "uc",
            _ => "ud",
        };
        let log = |n: u32| {
            if n == 0 {
                -1
            } else {
                n.trailing_zeros() as i64
            }
        };
        h.ask(&format!(
            "qp {slot} {kind} {:#x} {} {} {} {} {} {}",
            qp.qpn(),
            log(sq_bbs),
            caps.max_send_sge,
            caps.max_inline_data,
            sig_all as u8,
            log(rq_cnt),
            if rq_cnt == 0 {
                0
            } else {
                rq_stride.trailing_zeros()
            }
        ));
        Twin {
            qp,
            slot,
            sq_off: rq_bytes,
            sq_bbs,
            rq_cnt,
            rq_stride,
            dbr_off,
            last: None,
            used: 0,
            rq_outstanding: 0,
        }
    }

    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        self.qp.rings().mem().read_bytes(off, &mut v);
        v
    }

    /// The send WQE at WQEBB counter `index`: its DS count of 16-byte units, wrapping.
    fn send_wqe(&self, index: u32) -> (Vec<u8>, bool) {
        let ring = self.sq_bbs as usize * 64;
        let start = (index as usize % self.sq_bbs as usize) * 64;
        let head = self.read(self.sq_off + start, 16);
        let ds = (head[7] & 0x3f) as usize;
        let mut v = Vec::with_capacity(ds * 16);
        for u in 0..ds {
            v.extend(self.read(self.sq_off + (start + u * 16) % ring, 16));
        }
        (v, start + ds * 16 > ring)
    }

    fn dbrec(&self) -> Vec<u8> {
        self.read(self.dbr_off, 8)
    }

    /// Frees the whole SQ: a requester CQE for the last WQE posted retires it and every
    /// WQE before it (libmlx5's ring needs nothing: its overflow check is off).
    fn retire_sq(&mut self, rig: &mut Rig) {
        let Some((index, opcode)) = self.last.take() else {
            return;
        };
        let mut c = Cqe64::new_zeroed();
        c.sop_drop_qpn.set((opcode as u32) << 24 | self.qp.qpn());
        c.wqe_counter.set(index);
        rig.write_cqe(c, CqeOpcode::Req);
        assert_eq!(rig.poll(4).len(), 1);
        self.used = 0;
    }
}

// ---------------------------------------------------------------------------------------
// Send requests
// ---------------------------------------------------------------------------------------

/// A send request in a form both sides can be given.
#[derive(Clone, Debug)]
struct Req {
    op: SendOp,
    sges: Vec<Sge>,
    inline: Option<Vec<u8>>,
    flags: SendFlags,
    /// UD: (index of the AH in the test's list, remote QPN, Q_Key).
    ud: Option<(usize, u32, u32)>,
}

impl Req {
    fn new(op: SendOp) -> Self {
        Req {
            op,
            sges: vec![sge(0)],
            inline: None,
            flags: SendFlags::SIGNALED,
            ud: None,
        }
    }

    fn wr<'a>(&'a self, wr_id: u64, ahs: &'a [Ah]) -> SendWr<'a> {
        SendWr {
            wr_id,
            op: self.op,
            data: match &self.inline {
                Some(b) => SendData::Inline(b),
                None => SendData::Sge(&self.sges),
            },
            flags: self.flags,
            ud: self.ud.map(|(ah, remote_qpn, remote_qkey)| UdDest {
                ah: &ahs[ah],
                remote_qpn,
                remote_qkey,
            }),
        }
    }

    /// The harness's `wr` line (ibv_send_wr: opcode, send_flags, operands).
    fn line(&self) -> String {
        let (opcode, imm, raddr, rkey, swap, cmp) = match self.op {
            SendOp::RdmaWrite { remote_addr, rkey } => (0, 0, remote_addr, rkey, 0, 0),
            SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm,
            } => (1, imm, remote_addr, rkey, 0, 0),
            SendOp::Send => (2, 0, 0, 0, 0, 0),
            SendOp::SendWithImm { imm } => (3, imm, 0, 0, 0, 0),
            SendOp::RdmaRead { remote_addr, rkey } => (4, 0, remote_addr, rkey, 0, 0),
            SendOp::AtomicCmpSwap {
                remote_addr,
                rkey,
                compare,
                swap,
            } => (5, 0, remote_addr, rkey, swap, compare),
            SendOp::AtomicFetchAdd {
                remote_addr,
                rkey,
                add,
            } => (6, 0, remote_addr, rkey, 0, add),
            other => unimplemented!("the harness has no ibv_wr_opcode for {other:?}"),
        };
        // ibv_send_flags: FENCE 1, SIGNALED 2, SOLICITED 4, INLINE 8.
        let mut flags = 0;
        if self.flags.contains(SendFlags::FENCE) {
            flags |= 1;
        }
        if self.flags.contains(SendFlags::SIGNALED) {
            flags |= 2;
        }
        if self.flags.contains(SendFlags::SOLICITED) {
            flags |= 4;
        }
        let (ah, rqpn, qkey) = match self.ud {
            Some((a, q, k)) => (a as i64, q, k),
            None => (-1, 0, 0),
        };
        let data = match &self.inline {
            Some(b) => {
                flags |= 8;
                format!("x{} 0", hex(b))
            }
            None => {
                let mut s = format!("- {}", self.sges.len());
                for e in &self.sges {
                    s += &format!(" {:#x} {:#x} {:#x}", e.addr, e.len, e.lkey);
                }
                s
            }
        };
        format!(
            "wr {opcode} {flags} {imm:#x} {raddr:#x} {rkey:#x} {swap:#x} {cmp:#x} {ah} {rqpn:#x} \
             {qkey:#x} {data}"
        )
    }

    /// WQEBBs its WQE takes at most (to keep uhca's ring from filling).
    fn wqebbs(&self) -> u32 {
        let mut b = 16 + if self.ud.is_some() { 48 } else { 0 };
        b += match self.op {
            SendOp::RdmaWrite { .. }
            | SendOp::RdmaWriteWithImm { .. }
            | SendOp::RdmaRead { .. } => 16,
            SendOp::AtomicCmpSwap { .. } | SendOp::AtomicFetchAdd { .. } => 32,
            _ => 0,
        };
        b += match &self.inline {
            Some(d) => (4 + d.len()).next_multiple_of(16),
            None => 16 * self.sges.len(),
        };
        b.div_ceil(64) as u32
    }
}

fn sge(i: u64) -> Sge {
    Sge {
        addr: 0x7f00_0000_1000 + i * 0x1_0000 + i,
        len: 0x100 + i as u32 * 8,
        lkey: 0x0001_0100 | i as u32,
    }
}

/// Posts `reqs` on both sides and compares everything they wrote. Returns whether uhca
/// accepted the whole list.
fn post_and_compare<T: QpTransport>(
    rig: &mut Rig,
    h: &mut Harness,
    t: &mut Twin<T>,
    ahs: &[Ah],
    reqs: &[Req],
    stats: &mut Stats,
    case: &str,
) -> bool {
    let need: u32 = reqs.iter().map(Req::wqebbs).sum();
    assert!(need <= t.sq_bbs, "{case}: the batch does not fit the ring");
    if t.used + need > t.sq_bbs {
        t.retire_sq(rig);
    }
    let before = t.qp.rings().sq_producer();
    let wrs: Vec<SendWr<'_>> = reqs
        .iter()
        .enumerate()
        .map(|(i, r)| r.wr(i as u64, ahs))
        .collect();
    let ours = t.qp.post_send(&wrs);
    let mut lines: Vec<String> = reqs.iter().map(Req::line).collect();
    lines.push(format!("post {}", t.slot));
    let theirs = h.ask_all(&lines).pop().unwrap();
    let replay = format!("case {case}; requests:\n{}", lines.join("\n"));

    let ret = field(&theirs, "ret");
    let (err, bad): (i32, i64) = (ret[0].parse().unwrap(), ret[1].parse().unwrap());
    match &ours {
        Ok(()) => assert_eq!(err, 0, "{replay}\nuhca posted all, libmlx5 refused #{bad}"),
        Err(b) => assert_eq!(
            bad, b.index as i64,
            "{replay}\nuhca refused #{} ({}), libmlx5 returned {err} at #{bad}",
            b.index, b.error
        ),
    }
    // Every WQE libmlx5 wrote, against the one uhca wrote at the same index.
    let wqes: Vec<(u32, Vec<u8>)> = theirs
        .iter()
        .filter_map(|l| l.strip_prefix("wqe "))
        .map(|l| {
            let (i, b) = l.split_once(' ').unwrap();
            (i.parse().unwrap(), unhex(b))
        })
        .collect();
    let mut at = before;
    for (index, mlx5) in &wqes {
        assert_eq!(
            at & 0xffff,
            *index,
            "{replay}\nuhca's WQE counter {at:#x}, libmlx5's {index:#x}"
        );
        let (ours, wrapped) = t.send_wqe(at);
        let allow = allowed_in_send_wqe(mlx5, T::ST == uhca::fwif::consts::QpServiceType::Ud);
        compare(
            stats,
            &format!("{case}: send WQE {index:#x}"),
            &ours,
            mlx5,
            Some(&allow),
            &replay,
        );
        stats.wqes += 1;
        stats.wrapped += wrapped as u64;
        t.last = Some((at as u16, mlx5[3]));
        t.used += mlx5.len().div_ceil(64) as u32;
        at = at.wrapping_add(mlx5.len().div_ceil(64) as u32);
    }
    assert_eq!(
        at,
        t.qp.rings().sq_producer(),
        "{replay}\nuhca posted WQEBBs libmlx5 did not"
    );
    compare(
        stats,
        &format!("{case}: doorbell record"),
        &t.dbrec(),
        &unhex(field(&theirs, "dbrec")[0]),
        None,
        &replay,
    );
    stats.dbrecs += 1;
    let rung = rig.send_doorbells();
    if wqes.is_empty() {
        assert!(
            rung.is_empty(),
            "{replay}\nuhca rang a doorbell for nothing"
        );
    } else {
        let db = field(&theirs, "db");
        assert_eq!(rung.len(), 1, "{replay}\none doorbell per post: {rung:?}");
        let d = &rung[0];
        assert_eq!(d.width, 8, "{replay}\nan 8-byte doorbell");
        assert_eq!(
            d.offset as i64 - 0x800,
            db[0].parse::<i64>().unwrap(),
            "{replay}\nthe doorbell's BlueFlame buffer (offset from the register)"
        );
        let mut theirs_db = unhex(db[1]);
        let last_ctrl = &wqes.last().unwrap().1[..8];
        if ours.is_err() && theirs_db != last_ctrl {
            // On purpose: when libmlx5 refuses a request after it started on its slot
            // (inline data too long: _mlx5_post_send points `ctrl` at the slot before
            // set_data_inl_seg fails), post_send_db rings with the first 8 bytes of that
            // unposted slot, stale ring content. uhca rings with the last posted WQE's, as
            // the PRM describes the doorbell; that is what uhca's must equal.
            theirs_db = last_ctrl.to_vec();
            stats.on_purpose += 1;
        }
        compare(
            stats,
            &format!("{case}: doorbell"),
            &d.bytes[..8],
            &theirs_db,
            None,
            &replay,
        );
        stats.doorbells += 1;
    }
    stats.cases += 1;
    ours.is_ok()
}

fn rc_caps(max_send_sge: u32, max_inline_data: u32) -> QpCaps {
    QpCaps {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge,
        max_recv_sge: 4,
        max_inline_data,
    }
}

/// Every send opcode with every combination of signalled, solicited and fence, each with 1
/// to `max_send_sge` gather entries (some empty, which both leave out) and inline data of
/// every length from 0 to `max_inline_data`, one by one and in batches, on RC and UC QPs
/// with and without `sq_sig_all`: every WQE, doorbell record and doorbell equal.
#[test]
fn send_wqes_match_libmlx5() {
    let Some(mut h) = Harness::start() else {
        return;
    };
    let mut rig = rig(LinkLayer::InfiniBand);
    let mut stats = Stats::default();
    let ops = [
        SendOp::Send,
        SendOp::SendWithImm { imm: 0x1234_5678 },
        SendOp::RdmaWrite {
            remote_addr: 0x1_0000_0040,
            rkey: 0xabc,
        },
        SendOp::RdmaWriteWithImm {
            remote_addr: 0xdead_beef_0000,
            rkey: 0x1_2345,
            imm: 0xfedc_ba98,
        },
        SendOp::RdmaRead {
            remote_addr: 0x2000,
            rkey: 0x77,
        },
        SendOp::AtomicCmpSwap {
            remote_addr: 0x3000,
            rkey: 0x78,
            compare: 0x1111_2222_3333_4444,
            swap: 0x5555_6666_7777_8888,
        },
        SendOp::AtomicFetchAdd {
            remote_addr: 0x4008,
            rkey: 0x79,
            add: 0x0123_4567_89ab_cdef,
        },
    ];
    let flag_sets: Vec<SendFlags> = (0..8u8)
        .map(|b| {
            let mut f = SendFlags::empty();
            f.set(SendFlags::SIGNALED, b & 1 != 0);
            f.set(SendFlags::SOLICITED, b & 2 != 0);
            f.set(SendFlags::FENCE, b & 4 != 0);
            f
        })
        .collect();
    for (slot, (cap, sig_all)) in [
        (rc_caps(4, 64), false),
        (rc_caps(16, 256), false),
        (rc_caps(2, 16), true),
    ]
    .into_iter()
    .enumerate()
    {
        let qp = connected_qp::<Rc>(&mut rig, cap, sig_all);
        let mut t = Twin::new(&mut h, qp, slot as u32, sig_all);
        let caps = t.qp.caps();
        for op in ops {
            let atomic = matches!(
                op,
                SendOp::AtomicCmpSwap { .. } | SendOp::AtomicFetchAdd { .. }
            );
            for &flags in &flag_sets {
                let mut r = Req::new(op);
                r.flags = flags;
                if atomic {
                    r.sges = vec![Sge { len: 8, ..sge(1) }];
                }
                post_and_compare(&mut rig, &mut h, &mut t, &[], &[r], &mut stats, "flags");
            }
            if atomic {
                continue;
            }
            // 1 to the maximum number of gather entries; then with empty entries in it.
            for n in 1..=caps.max_send_sge as u64 {
                let mut r = Req::new(op);
                r.sges = (0..n).map(sge).collect();
                post_and_compare(
                    &mut rig,
                    &mut h,
                    &mut t,
                    &[],
                    &[r.clone()],
                    &mut stats,
                    "sges",
                );
                r.sges[(n / 2) as usize].len = 0;
                post_and_compare(&mut rig, &mut h, &mut t, &[], &[r], &mut stats, "empty sge");
            }
            if matches!(op, SendOp::RdmaRead { .. }) {
                continue;
            }
            // Inline data of every length, 0 to the maximum: across WQEBB boundaries and,
            // as the ring turns, across its end.
            for len in 0..=caps.max_inline_data as usize {
                let mut r = Req::new(op);
                r.inline = Some((0..len).map(|i| (i * 7 + len) as u8).collect());
                post_and_compare(&mut rig, &mut h, &mut t, &[], &[r], &mut stats, "inline");
            }
        }
        // Batches: as many WQEs as fit, mixed, so that they wrap the ring.
        for round in 0..3 * t.sq_bbs as usize {
            let mut batch = Vec::new();
            let mut room = t.sq_bbs;
            for k in 0..=round % 5 {
                let mut r = Req::new(ops[(round + k) % ops.len()]);
                if matches!(
                    r.op,
                    SendOp::AtomicCmpSwap { .. } | SendOp::AtomicFetchAdd { .. }
                ) {
                    r.sges = vec![Sge { len: 8, ..sge(2) }];
                }
                r.flags = flag_sets[(round * 3 + k) % 8];
                if r.wqebbs() > room {
                    break;
                }
                room -= r.wqebbs();
                batch.push(r);
            }
            post_and_compare(&mut rig, &mut h, &mut t, &[], &batch, &mut stats, "batch");
        }
        // A bad request stops the batch where libmlx5's does, after posting the ones
        // before it.
        let mut too_many = Req::new(SendOp::Send);
        too_many.sges = (0..caps.max_send_sge as u64 + 1).map(sge).collect();
        let mut too_long = Req::new(SendOp::Send);
        too_long.inline = Some(vec![0x5a; caps.max_inline_data as usize + 1]);
        for bad in [too_many, too_long] {
            t.retire_sq(&mut rig);
            let ok = post_and_compare(
                &mut rig,
                &mut h,
                &mut t,
                &[],
                &[Req::new(SendOp::Send), bad],
                &mut stats,
                "bad request",
            );
            assert!(!ok);
        }
        t.retire_sq(&mut rig);
    }
    // UC: SEND and RDMA WRITE, with and without immediate.
    let qp = connected_qp::<Uc>(&mut rig, rc_caps(3, 32), false);
    let mut t = Twin::new(&mut h, qp, 3, false);
    for op in &ops[..4] {
        for n in 1..=3 {
            let mut r = Req::new(*op);
            r.sges = (0..n).map(sge).collect();
            r.flags = flag_sets[n as usize * 2];
            post_and_compare(&mut rig, &mut h, &mut t, &[], &[r], &mut stats, "uc");
        }
        let mut r = Req::new(*op);
        r.inline = Some(vec![0xa5; 29]);
        post_and_compare(&mut rig, &mut h, &mut t, &[], &[r], &mut stats, "uc inline");
    }
    assert!(stats.wrapped > 0, "no WQE crossed the ring's end");
    stats.summary("send WQEs");
}

// ---------------------------------------------------------------------------------------
// UD address vectors
// ---------------------------------------------------------------------------------------

/// The verbs value (`ibv_rate`) of a rate: uhca's API takes the rate, the harness the enum.
fn ibv_rate(rate: StaticRate) -> u8 {
    (0..=24)
        .find(|&v| StaticRate::from_ibv(v) == Some(rate))
        .unwrap()
}

/// The rates verbs names that have a `stat_rate` code of their own in the PRM: 2.5, 10, 30,
/// 5, 20, 40, 60, 80 and 120 Gb/s (ibv_rate 2 to 10), and the port's rate.
fn exact_rate(v: u8) -> bool {
    v == 0 || (2..=10).contains(&v)
}

/// The PRM's `stat_rate` codes in Mb/s (0: no limit), for the check of the rates that
/// differ on purpose.
fn stat_rate_mbps(code: u8) -> u32 {
    match code {
        1 => 56_000,
        2 => 25_000,
        3 => 100_000,
        4 => 200_000,
        5 => 50_000,
        6 => 400_000,
        7 => 2_500,
        8 => 10_000,
        9 => 30_000,
        10 => 5_000,
        11 => 20_000,
        12 => 40_000,
        13 => 60_000,
        14 => 80_000,
        15 => 120_000,
        _ => u32::MAX,
    }
}

/// The RoCEv2 UDP source port libmlx5 derives from a flow label (verbs.h
/// `ibv_flow_label_to_udp_sport`: the 20-bit label folded to 14 bits, in 0xC000..), or,
/// for label 0, draws at random (`get_random() % 16384 + 49152`). uhca's API takes the port
/// itself, so the test gives it the one libmlx5 picks.
fn roce_sport(flow_label: u32, random: u32) -> u16 {
    if flow_label == 0 {
        (random % 16384 + 49152) as u16
    } else {
        let fl = flow_label & 0xf_ffff;
        (((fl & 0x3fff) ^ (fl >> 14)) | 0xc000) as u16
    }
}

/// An address handle on both sides: uhca's, and the address vector libmlx5 built.
fn make_ah(rig: &Rig, h: &mut Harness, slot: usize, ah: AhAttr, random: u32) -> (Ah, Vec<u8>) {
    let line = match ah {
        AhAttr::Ib {
            dlid,
            sl,
            src_path_bits,
            static_rate,
            grh,
        } => {
            let rate = ibv_rate(static_rate);
            let g = grh.unwrap_or_default();
            format!(
                "ah {slot} ib {dlid:#x} {sl} {src_path_bits:#x} {rate} {} {} {:#x} {:#x} {} {}",
                grh.is_some() as u8,
                g.sgid_index,
                g.flow_label,
                g.traffic_class,
                g.hop_limit,
                hex(&g.dgid.0)
            )
        }
        AhAttr::RoceV2 {
            sgid_index,
            dgid,
            dmac,
            traffic_class,
            hop_limit,
            flow_label,
            sl,
            ..
        } => format!(
            "ah {slot} eth {sl} 0 {sgid_index} {flow_label:#x} {traffic_class:#x} {hop_limit} {} \
             {} {random}",
            hex(&dgid.0),
            hex(&dmac.0)
        ),
    };
    let av = unhex(field(&h.ask(&line), "av")[0]);
    (rig.hca.create_ah(1, ah).unwrap(), av)
}

/// UD sends over InfiniBand without and with a GRH and over RoCEv2 to IPv4 and IPv6
/// destinations: the datagram segment (the address vector with the remote QPN and Q_Key)
/// and the rest of the WQE equal.
#[test]
fn ud_address_vectors_match_libmlx5() {
    let Some(mut h) = Harness::start() else {
        return;
    };
    let mut stats = Stats::default();
    let cap = QpCaps {
        max_send_wr: 8,
        max_recv_wr: 4,
        max_send_sge: 3,
        max_recv_sge: 1,
        max_inline_data: 100,
    };
    // InfiniBand.
    let mut ib = rig(LinkLayer::InfiniBand);
    h.ask("link ib");
    let mut ahs = Vec::new();
    let mut paths = Vec::new();
    for (i, (sl, bits, rate)) in [(0, 0, 0), (5, 0x7f, 3), (15, 3, 10)]
        .into_iter()
        .enumerate()
    {
        paths.push(AhAttr::Ib {
            dlid: 0x10 + i as u16 * 0x1111,
            sl,
            src_path_bits: bits,
            static_rate: StaticRate::from_ibv(rate).unwrap(),
            grh: None,
        });
        paths.push(AhAttr::Ib {
            dlid: 0xbeef,
            sl,
            src_path_bits: bits,
            static_rate: StaticRate::from_ibv(rate).unwrap(),
            grh: Some(Grh {
                dgid: Gid::from_parts(0xfe80_0000_0000_0000, 0x0002_c903_00aa_bb00 + i as u64),
                sgid_index: i as u8,
                flow_label: [0, 0x12345, 0xfffff][i],
                hop_limit: [1, 64, 255][i],
                traffic_class: [0, 0x20, 0xff][i],
            }),
        });
    }
    for (slot, p) in paths.iter().enumerate() {
        ahs.push(make_ah(&ib, &mut h, slot, *p, 0).0);
    }
    // Every rate verbs names, on the address vector alone (from byte 12: the Q_Key and
    // dqp_dct are filled in per send, compared above in the WQEs).
    for v in 0..=24u8 {
        let Some(rate) = StaticRate::from_ibv(v) else {
            continue;
        };
        let path = AhAttr::Ib {
            dlid: 0x42,
            sl: 3,
            src_path_bits: 1,
            static_rate: rate,
            grh: None,
        };
        let (ah, mut theirs) = make_ah(&ib, &mut h, 7, path, 0);
        let ours = ah.av(0, 0).as_bytes().to_vec();
        let replay = format!("static rate {rate:?} (ibv_rate {v})");
        if !exact_rate(v) {
            // On purpose: a rate without a code of its own. libmlx5's AH table
            // (verbs.c ib_to_mlx5_rate_table) rounds it up to the next code or to no limit
            // (14 Gb/s becomes 20, 200 Gb/s unlimited); uhca takes the fastest code the
            // device supports that is not above it, as Linux's ib_rate_to_mlx5 does for
            // QP paths, so a path never runs faster than asked.
            let (o, t) = (ours[12] >> 4, theirs[12] >> 4);
            let mbps = rate.mbps().unwrap();
            assert!(
                o != 0 && stat_rate_mbps(o) <= mbps,
                "{replay}: uhca's stat_rate {o} is faster than asked"
            );
            assert!(
                stat_rate_mbps(t) > mbps,
                "{replay}: libmlx5's stat_rate {t} no longer rounds up: drop this exception"
            );
            theirs[12] = (o << 4) | (theirs[12] & 0xf);
            stats.on_purpose += 1;
        }
        compare(
            &mut stats,
            "address vector",
            &ours[12..],
            &theirs[12..],
            None,
            &replay,
        );
        stats.cases += 1;
    }

    let qp = ud_qp(&mut ib, cap);
    let mut t = Twin::new(&mut h, qp, 0, false);
    ud_sends(
        &mut ib,
        &mut h,
        &mut t,
        &ahs,
        &mut stats,
        "UD over InfiniBand",
    );
    drop(t);
    drop(ib);

    // RoCEv2.
    let mut eth = rig(LinkLayer::Ethernet);
    h.ask("link eth");
    let mut ahs = Vec::new();
    let dests = [
        (Gid::from_ipv4([192, 168, 1, 7]), 0, 0x1234u32),
        (Gid::from_ipv4([10, 0, 0, 1]), 0xabcde, 0),
        (
            Gid::from_parts(0x2001_0db8_0000_0001, 0x0000_0000_0000_0042),
            0x1,
            0,
        ),
        (
            Gid::from_parts(0xfd00_1234_5678_9abc, 0xdef0_1234_5678_9abc),
            0,
            0x7fff_ffff,
        ),
    ];
    for (slot, (dgid, flow_label, random)) in dests.into_iter().enumerate() {
        let path = AhAttr::RoceV2 {
            sgid_index: slot as u8 % 2,
            dgid,
            dmac: Mac([0x02, 0x11, 0x22, 0x33, 0x44, slot as u8]),
            udp_sport: roce_sport(flow_label, random),
            traffic_class: [0, 0x68, 0xb8, 0x03][slot],
            hop_limit: [64, 1, 255, 32][slot],
            flow_label,
            sl: [0, 3, 7, 5][slot] as u8,
        };
        ahs.push(make_ah(&eth, &mut h, slot, path, random).0);
    }
    let qp = ud_qp(&mut eth, cap);
    let mut t = Twin::new(&mut h, qp, 1, false);
    ud_sends(&mut eth, &mut h, &mut t, &ahs, &mut stats, "UD over RoCEv2");
    stats.summary("UD address vectors");
}

fn ud_sends(
    rig: &mut Rig,
    h: &mut Harness,
    t: &mut Twin<Ud>,
    ahs: &[Ah],
    stats: &mut Stats,
    case: &str,
) {
    let caps = t.qp.caps();
    for (i, _) in ahs.iter().enumerate() {
        for (k, op) in [SendOp::Send, SendOp::SendWithImm { imm: 0xc0ff_ee00 }]
            .into_iter()
            .enumerate()
        {
            let mut r = Req::new(op);
            r.ud = Some((i, 0x00ab_cdef - i as u32, 0x8001_0000 + k as u32));
            r.sges = (0..=(i as u64 % caps.max_send_sge as u64))
                .map(sge)
                .collect();
            post_and_compare(rig, h, t, ahs, &[r.clone()], stats, case);
            r.inline = Some(
                (0..(i * 13 + k) % (caps.max_inline_data as usize + 1))
                    .map(|b| b as u8)
                    .collect(),
            );
            r.flags = SendFlags::SIGNALED | SendFlags::SOLICITED;
            post_and_compare(rig, h, t, ahs, &[r], stats, case);
        }
    }
}

// ---------------------------------------------------------------------------------------
// Receive WQEs: RQ and SRQ
// ---------------------------------------------------------------------------------------

fn recv_line(sges: &[Sge]) -> String {
    let mut s = format!("rwr {}", sges.len());
    for e in sges {
        s += &format!(" {:#x} {:#x} {:#x}", e.addr, e.len, e.lkey);
    }
    s
}

/// Receive WQEs on an RQ (1 to the maximum number of scatter entries, empty entries left
/// out, batches that wrap the ring) and on an SRQ (its linked free list as libmlx5 lays it
/// out and reuses it when WQEs complete in order): WQEs and doorbell records equal.
#[test]
fn receive_wqes_match_libmlx5() {
    let Some(mut h) = Harness::start() else {
        return;
    };
    let mut rig = rig(LinkLayer::InfiniBand);
    let mut stats = Stats::default();
    let mut rng = Rng(0x5eed);
    // RQ.
    let cap = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 4,
        max_inline_data: 0,
    };
    let qp = connected_qp::<Rc>(&mut rig, cap, false);
    let mut t = Twin::new(&mut h, qp, 0, false);
    let max = t.qp.caps().max_recv_sge as u64;
    assert_eq!(max as usize * 16, t.rq_stride);
    for round in 0..6 * t.rq_cnt as u64 {
        let n = 1 + round % t.rq_cnt as u64 / 2;
        if t.rq_outstanding + n as u32 > t.rq_cnt {
            // Responder CQEs retire the oldest receives (the RQ is consumed in order).
            for _ in 0..t.rq_outstanding {
                let mut c = Cqe64::new_zeroed();
                c.sop_drop_qpn.set(t.qp.qpn());
                let head = t.qp.rings().rq_head();
                c.wqe_counter.set((head - t.rq_outstanding) as u16);
                rig.write_cqe(c, CqeOpcode::RespSend);
                assert_eq!(rig.poll(1).len(), 1);
                t.rq_outstanding -= 1;
            }
        }
        let lists: Vec<Vec<Sge>> = (0..n)
            .map(|k| {
                let m = 1 + (round + k) % max;
                let mut l: Vec<Sge> = (0..m).map(|i| sge(i + k)).collect();
                if rng.one_in(3) {
                    let z = rng.below(m) as usize;
                    l[z].len = 0;
                }
                l
            })
            .collect();
        let wrs: Vec<RecvWr<'_>> = lists
            .iter()
            .enumerate()
            .map(|(i, l)| RecvWr {
                wr_id: i as u64,
                sg_list: l,
            })
            .collect();
        let before = t.qp.rings().rq_head();
        t.qp.post_recv(&wrs).unwrap();
        t.rq_outstanding += n as u32;
        let mut lines: Vec<String> = lists.iter().map(|l| recv_line(l)).collect();
        lines.push(format!("postrecv {}", t.slot));
        let theirs = h.ask_all(&lines).pop().unwrap();
        let replay = format!("requests:\n{}", lines.join("\n"));
        assert_eq!(field(&theirs, "ret"), ["0", "-1"], "{replay}");
        let mut at = before;
        for l in theirs.iter().filter_map(|l| l.strip_prefix("wqe ")) {
            let (i, b) = l.split_once(' ').unwrap();
            assert_eq!(i.parse::<u32>().unwrap(), at & 0xffff, "{replay}");
            let off = (at % t.rq_cnt) as usize * t.rq_stride;
            compare(
                &mut stats,
                &format!("RQ WQE {at:#x}"),
                &t.read(off, t.rq_stride),
                &unhex(b),
                None,
                &replay,
            );
            stats.wqes += 1;
            at += 1;
        }
        assert_eq!(at, t.qp.rings().rq_head(), "{replay}");
        compare(
            &mut stats,
            "RQ doorbell record",
            &t.dbrec(),
            &unhex(field(&theirs, "dbrec")[0]),
            None,
            &replay,
        );
        stats.dbrecs += 1;
        stats.cases += 1;
    }

    // SRQ.
    for (slot, (max_wr, max_sge)) in [(7u32, 1u32), (12, 3), (5, 6)].into_iter().enumerate() {
        let mut srq = rig
            .hca
            .create_srq(
                &rig.pd,
                SrqInitAttr {
                    max_wr,
                    max_sge,
                    srq_limit: 0,
                },
            )
            .unwrap();
        let geo = h.ask(&format!("srq {slot} {max_wr} {max_sge}"));
        let geo = field(&geo, "srq");
        assert_eq!(
            (geo[0], geo[1], geo[2]),
            (
                (1u32 << srq.log_size()).to_string().as_str(),
                srq.log_stride().to_string().as_str(),
                srq.max_sge().to_string().as_str()
            ),
            "SRQ geometry (WQEs, log2 stride, scatter entries)"
        );
        srq_rounds(&mut rig, &mut h, &mut srq, slot, &mut stats, &mut rng);
    }
    stats.summary("receive WQEs");
}

fn srq_rounds(
    rig: &mut Rig,
    h: &mut Harness,
    srq: &mut Srq<P>,
    slot: usize,
    stats: &mut Stats,
    rng: &mut Rng,
) {
    // A QP that receives from the SRQ, so that responder CQEs can give WQEs back.
    let attr = QpInitAttr {
        send_cq: &rig.cq,
        recv_cq: &rig.cq,
        srq: Some(srq),
        cap: QpCaps {
            max_send_wr: 1,
            max_send_sge: 1,
            ..QpCaps::default()
        },
    };
    let qp = rig.hca.create_qp::<Rc>(&rig.pd, &attr).unwrap();
    let qpn = qp.qpn();
    let mut _qp = qp;
    _qp.to_init(&mut rig.hca, InitAttr::default()).unwrap();
    let cnt = 1u32 << srq.log_size();
    let stride = 1usize << srq.log_stride();
    let len = (cnt as usize) << srq.log_stride();
    let mut head = 0u32;
    let mut posted: VecDeque<u32> = VecDeque::new();
    let mut prev = vec![0u8; len];
    srq.mem().read_bytes(0, &mut prev);
    // The on-purpose difference below stays in the buffer until the WQE is reused:
    // (offset, what libmlx5 wrote, what uhca must have written).
    let mut exception: Option<(usize, Vec<u8>, Vec<u8>)> = None;
    for round in 0..6 * cnt {
        // Round 1 posts one request whose scatter list has an empty entry: see below.
        let empty_entry = round == 1;
        let n = if empty_entry {
            1
        } else {
            1 + rng.below(cnt as u64 / 2 + 1) as u32
        };
        let lists: Vec<Vec<Sge>> = (0..n)
            .map(|k| {
                if empty_entry {
                    let mut l: Vec<Sge> = (0..srq.max_sge() as u64).map(|i| sge(i + 40)).collect();
                    l[0].len = 0;
                    return l;
                }
                let m = rng.below(srq.max_sge() as u64 + 1);
                (0..m).map(|i| sge(i + k as u64 + round as u64)).collect()
            })
            .collect();
        let wrs: Vec<RecvWr<'_>> = lists
            .iter()
            .enumerate()
            .map(|(i, l)| RecvWr {
                wr_id: i as u64,
                sg_list: l,
            })
            .collect();
        let ours = srq.post_recv(&wrs);
        let mut lines: Vec<String> = lists.iter().map(|l| recv_line(l)).collect();
        lines.push(format!("postsrq {slot}"));
        let theirs = h.ask_all(&lines).pop().unwrap();
        let replay = format!("SRQ {slot} round {round}; requests:\n{}", lines.join("\n"));
        let ret = field(&theirs, "ret");
        let took = match ours {
            Ok(()) => {
                assert_eq!(ret, ["0", "-1"], "{replay}");
                n
            }
            Err(b) => {
                assert!(matches!(b.error, WrError::QueueFull), "{replay}\n{b}");
                assert_eq!(
                    ret[1],
                    b.index.to_string(),
                    "{replay}\nwhere the SRQ filled"
                );
                b.index as u32
            }
        };
        let mut buf = unhex(field(&theirs, "buf")[0]);
        let mut mine = vec![0; len];
        srq.mem().read_bytes(0, &mut mine);
        if empty_entry {
            // On purpose: libmlx5's mlx5_post_srq_recv (srq.c) copies an empty scatter
            // entry as it is, and a byte count of 0 means 2 GiB to the device; uhca leaves
            // empty entries out, on the SRQ as libmlx5 itself does on the RQ
            // (mlx5_post_recv, qp.c). What uhca must have written: libmlx5's WQE with the
            // empty entry removed and the list ended by an invalid-lkey entry.
            assert_eq!(took, 1, "{replay}");
            let at = head as usize * stride + 16;
            let mut want = prev[at..at + stride - 16].to_vec();
            let kept: Vec<&Sge> = lists[0].iter().filter(|e| e.len != 0).collect();
            for (i, e) in kept.iter().enumerate() {
                want[i * 16..i * 16 + 4].copy_from_slice(&e.len.to_be_bytes());
                want[i * 16 + 4..i * 16 + 8].copy_from_slice(&e.lkey.to_be_bytes());
                want[i * 16 + 8..i * 16 + 16].copy_from_slice(&e.addr.to_be_bytes());
            }
            if kept.len() < srq.max_sge() as usize {
                let i = kept.len() * 16;
                want[i..i + 16].copy_from_slice(&[0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
            }
            assert_ne!(
                buf[at..at + stride - 16],
                want[..],
                "{replay}\nlibmlx5 no longer writes empty SRQ scatter entries: drop this \
                 exception (test and README)"
            );
            exception = Some((at, buf[at..at + stride - 16].to_vec(), want));
            stats.on_purpose += 1;
        }
        if let Some((at, theirs, want)) = &exception {
            if buf[*at..*at + theirs.len()] == theirs[..] {
                buf[*at..*at + want.len()].copy_from_slice(want);
            } else {
                exception = None;
            }
        }
        let allow = allowed_in_srq(&buf, stride);
        compare(stats, "SRQ buffer", &mine, &buf, Some(&allow), &replay);
        prev = mine;
        let mut dbr = [0u8; 4];
        srq.mem().read_bytes(srq.dbr_offset(), &mut dbr);
        compare(
            stats,
            "SRQ doorbell record",
            &dbr,
            &unhex(field(&theirs, "dbrec")[0]),
            None,
            &replay,
        );
        stats.dbrecs += 1;
        stats.wqes += took as u64;
        stats.cases += 1;
        // The WQEs taken follow the free list's links from the head.
        for _ in 0..took {
            posted.push_back(head);
            let at = head as usize * stride;
            head = u16::from_be_bytes([buf[at + 2], buf[at + 3]]) as u32;
        }
        // Complete the oldest ones, in order, on both sides.
        let done = rng.below(posted.len() as u64 + 1);
        let mut frees = Vec::new();
        for _ in 0..done {
            let idx = posted.pop_front().unwrap();
            let mut c = Cqe64::new_zeroed();
            c.sop_drop_qpn.set(qpn);
            c.wqe_counter.set(idx as u16);
            c.srqn.set(srq.srqn());
            rig.write_cqe(c, CqeOpcode::RespSend);
            assert_eq!(rig.poll(1).len(), 1);
            frees.push(format!("freesrq {slot} {idx}"));
        }
        h.ask_all(&frees);
    }
}

// ---------------------------------------------------------------------------------------
// CQ: consumer-index record and arm doorbell
// ---------------------------------------------------------------------------------------

/// Polled CQEs move the consumer index libmlx5 and uhca publish in the CQ's doorbell
/// record; arming (solicited or not, before and after completion events) writes the same
/// arm word to the record and the same 8-byte doorbell to the UAR. Three laps of the CQ.
#[test]
fn cq_doorbells_match_libmlx5() {
    let Some(mut h) = Harness::start() else {
        return;
    };
    let mut rig = rig(LinkLayer::InfiniBand);
    let mut stats = Stats::default();
    let mut rng = Rng(0xc0);
    let qp = connected_qp::<Rc>(&mut rig, rc_caps(1, 0), false);
    let mut t = Twin::new(&mut h, qp, 0, false);
    let ncqe = rig.cq.cqe() + 1;
    h.ask(&format!(
        "cq 0 {:#x} {}",
        rig.cq.cqn(),
        ncqe.trailing_zeros()
    ));
    let cq_dbr = rig.cq.ring().dbr_iova();
    while rig.cq_pi < 3 * ncqe {
        // A few signalled sends, then a CQE for each.
        let k = 1 + rng.below(4) as usize;
        let reqs = vec![Req::new(SendOp::Send); k];
        let before = t.qp.rings().sq_producer();
        post_and_compare(&mut rig, &mut h, &mut t, &[], &reqs, &mut stats, "cq sends");
        let mut lines = Vec::new();
        for i in 0..k as u32 {
            let mut c = Cqe64::new_zeroed();
            // The SEND WQE opcode (0x0a) and the QPN.
            c.sop_drop_qpn.set(0x0a << 24 | t.qp.qpn());
            c.wqe_counter.set((before + i) as u16);
            let bytes = rig.write_cqe(c, CqeOpcode::Req);
            lines.push(format!("cqe 0 {}", hex(&bytes)));
        }
        t.last = None;
        t.used = 0;
        lines.push(format!("poll 0 {k}"));
        let theirs = h.ask_all(&lines).pop().unwrap();
        assert_eq!(rig.poll(k).len(), k);
        assert_eq!(field(&theirs, "polled")[0], k.to_string());
        let mut dbr = [0u8; 8];
        assert!(rig.dev.host_read(cq_dbr, &mut dbr));
        let replay = format!("CQ consumer index {}", rig.cq.ring().consumer_index());
        compare(
            &mut stats,
            "CQ doorbell record after poll",
            &dbr,
            &unhex(field(&theirs, "dbrec")[0]),
            None,
            &replay,
        );
        stats.dbrecs += 1;
        // Arm, solicited or not; sometimes a completion event first (arm_sn moves on).
        if rng.one_in(2) {
            rig.cq.ack_event();
            h.ask("event 0");
        }
        let solicited = rng.one_in(2);
        rig.dev.take_doorbells();
        rig.cq.req_notify(solicited);
        let theirs = h.ask(&format!("arm 0 {}", solicited as u8));
        assert!(rig.dev.host_read(cq_dbr, &mut dbr));
        let replay = format!("{replay}, solicited {solicited}");
        compare(
            &mut stats,
            "CQ doorbell record after arm",
            &dbr,
            &unhex(field(&theirs, "dbrec")[0]),
            None,
            &replay,
        );
        stats.dbrecs += 1;
        let rung: Vec<_> = rig
            .dev
            .take_doorbells()
            .into_iter()
            .filter(|d| d.offset == 0x20)
            .collect();
        let db = field(&theirs, "db");
        assert_eq!(rung.len(), 1, "{replay}: one arm doorbell: {rung:?}");
        assert_eq!(
            (rung[0].offset.to_string(), rung[0].width),
            (db[0].to_string(), 8)
        );
        compare(
            &mut stats,
            "CQ arm doorbell",
            &rung[0].bytes[..8],
            &unhex(db[1]),
            None,
            &replay,
        );
        stats.doorbells += 1;
        stats.cases += 1;
    }
    stats.summary("CQ doorbells");
}

// ---------------------------------------------------------------------------------------
// Seeded random requests
// ---------------------------------------------------------------------------------------

fn random_req(rng: &mut Rng, st: &str, caps: QpCaps, n_ahs: usize) -> Req {
    let op = match (st, rng.below(7)) {
        ("ud", k) => {
            if k % 2 == 0 {
                SendOp::Send
            } else {
                SendOp::SendWithImm {
                    imm: rng.next() as u32,
                }
            }
        }
        ("uc", k) if k >= 4 => SendOp::RdmaWrite {
            remote_addr: rng.next(),
            rkey: rng.next() as u32,
        },
        (_, 0) => SendOp::Send,
        (_, 1) => SendOp::SendWithImm {
            imm: rng.next() as u32,
        },
        (_, 2) => SendOp::RdmaWrite {
            remote_addr: rng.next(),
            rkey: rng.next() as u32,
        },
        (_, 3) => SendOp::RdmaWriteWithImm {
            remote_addr: rng.next(),
            rkey: rng.next() as u32,
            imm: rng.next() as u32,
        },
        (_, 4) => SendOp::RdmaRead {
            remote_addr: rng.next(),
            rkey: rng.next() as u32,
        },
        (_, 5) => SendOp::AtomicCmpSwap {
            remote_addr: rng.next() & !7,
            rkey: rng.next() as u32,
            compare: rng.next(),
            swap: rng.next(),
        },
        _ => SendOp::AtomicFetchAdd {
            remote_addr: rng.next() & !7,
            rkey: rng.next() as u32,
            add: rng.next(),
        },
    };
    let mut r = Req::new(op);
    r.flags = SendFlags::from_bits_truncate(rng.below(8) as u8);
    let sge_of = |rng: &mut Rng| Sge {
        addr: rng.next(),
        len: if rng.one_in(8) {
            0
        } else {
            rng.next() as u32 & 0x7fff_ffff
        },
        lkey: rng.next() as u32,
    };
    if matches!(
        op,
        SendOp::AtomicCmpSwap { .. } | SendOp::AtomicFetchAdd { .. }
    ) {
        r.sges = vec![Sge {
            len: 8,
            ..sge_of(rng)
        }];
    } else if !matches!(op, SendOp::RdmaRead { .. }) && caps.max_inline_data > 0 && rng.one_in(2) {
        let len = rng.below(caps.max_inline_data as u64 + 1) as usize;
        r.inline = Some(rng.bytes(len));
    } else {
        let n = rng.below(caps.max_send_sge as u64 + 1);
        r.sges = (0..n).map(|_| sge_of(rng)).collect();
    }
    if st == "ud" {
        r.ud = Some((
            rng.below(n_ahs as u64) as usize,
            rng.next() as u32 & 0xff_ffff,
            rng.next() as u32,
        ));
    }
    r
}

/// Thousands of random requests (every opcode, flags, gather lists, inline data, UD
/// destinations) in random batches on RC, UC and UD QPs of random geometry; the seed is
/// printed, and `UHCA_PARITY_SEED` replays it.
#[test]
fn random_requests_match_libmlx5() {
    let Some(mut h) = Harness::start() else {
        return;
    };
    let seed = seed();
    println!("libmlx5 parity: random requests with UHCA_PARITY_SEED={seed:#x}");
    let mut rng = Rng(seed);
    let mut stats = Stats::default();
    let mut rig = rig(LinkLayer::InfiniBand);
    h.ask("link ib");
    let mut ahs = Vec::new();
    for slot in 0..4 {
        let grh = rng.one_in(2).then(|| Grh {
            dgid: Gid(rng.bytes(16).try_into().unwrap()),
            sgid_index: rng.below(2) as u8,
            flow_label: rng.next() as u32 & 0xf_ffff,
            hop_limit: rng.next() as u8,
            traffic_class: rng.next() as u8,
        });
        let path = AhAttr::Ib {
            dlid: 1 + rng.below(0xbfff) as u16,
            sl: rng.below(16) as u8,
            src_path_bits: rng.below(128) as u8,
            static_rate: StaticRate::from_ibv(
                [0, 2, 3, 4, 5, 6, 7, 8, 9, 10][rng.below(10) as usize],
            )
            .unwrap(),
            grh,
        };
        ahs.push(make_ah(&rig, &mut h, slot, path, 0).0);
    }
    let mut requests = 0;
    let mut slot = 0;
    while requests < 20_000 {
        let st = ["rc", "uc", "ud"][rng.below(3) as usize];
        let cap = QpCaps {
            max_send_wr: 1 << rng.below(5),
            max_recv_wr: 1,
            max_send_sge: 1 + rng.below(8) as u32,
            max_recv_sge: 1,
            max_inline_data: [0, 16, 60, 128, 300][rng.below(5) as usize],
        };
        let sig_all = rng.one_in(4);
        let per_qp = 200 + rng.below(400) as usize;
        let case = format!("random {st} QP (seed {seed:#x})");
        macro_rules! run {
            ($t:expr) => {{
                let mut t = $t;
                let caps = t.qp.caps();
                let mut n = 0;
                while n < per_qp {
                    let k = 1 + rng.below(6) as usize;
                    let mut batch = Vec::new();
                    let mut room = t.sq_bbs;
                    for _ in 0..k {
                        let r = random_req(&mut rng, st, caps, ahs.len());
                        if r.wqebbs() > room {
                            break;
                        }
                        room -= r.wqebbs();
                        batch.push(r);
                    }
                    n += batch.len().max(1);
                    post_and_compare(&mut rig, &mut h, &mut t, &ahs, &batch, &mut stats, &case);
                }
                t.retire_sq(&mut rig);
                n
            }};
        }
        requests += match st {
            "rc" => run!(Twin::new(
                &mut h,
                connected_qp::<Rc>(&mut rig, cap, sig_all),
                slot,
                sig_all
            )),
            "uc" => run!(Twin::new(
                &mut h,
                connected_qp::<Uc>(&mut rig, cap, sig_all),
                slot,
                sig_all
            )),
            _ => {
                let mut qp = rig
                    .hca
                    .create_qp::<Ud>(
                        &rig.pd,
                        &QpInitAttr {
                            send_cq: &rig.cq,
                            recv_cq: &rig.cq,
                            srq: None,
                            cap,
                        },
                    )
                    .unwrap();
                qp.set_sq_sig_all(sig_all);
                qp.to_init(&mut rig.hca, InitAttr::default()).unwrap();
                qp.to_rtr(&mut rig.hca).unwrap();
                qp.to_rts(&mut rig.hca, 0).unwrap();
                run!(Twin::new(&mut h, qp, slot, sig_all))
            }
        };
        slot = (slot + 1) % 8;
    }
    stats.summary(&format!("random requests, seed {seed:#x}"));
}
