//! The uhca demo: two mock ConnectX HCAs in one process, brought up by the driver exactly as
//! a real ConnectX under VFIO would be, with an RC queue pair each over RoCEv2 on the mock's
//! in-memory Ethernet fabric: SEND, RDMA WRITE, RDMA READ, compare-and-swap and
//! fetch-and-add, every result checked in the peer's memory.
//!
//! `cargo run --example demo` (add `-- --pcap demo.pcap` to capture every packet; tshark
//! decodes the capture, and `uhca-wirecheck demo.pcap` verifies every ICRC).
//!
//! Read [`run`] for the API: `uhca::testbed` makes the HCAs and connects the QPs, and the
//! rest is the verbs a transport uses on real hardware (`mr.sge`, `qp.post_send`,
//! `qp.post_recv`, `cq.poll` through `tb.poll_until`).

// println!/eprintln! that stay quiet on a closed pipe (`| head`).
#[macro_use]
#[path = "common/print.rs"]
mod print;

use std::path::{Path, PathBuf};
use std::time::Duration;

use uhca::prelude::*;
use uhca::testbed::{RcConfig, Testbed};

type DemoResult<T> = Result<T, Box<dyn std::error::Error>>;

/// How long one completion may take (the model answers in microseconds).
const WAIT: Duration = Duration::from_secs(10);

/// What the demo did, for a caller (or a test) to check against the capture.
#[derive(Clone, Debug, Default)]
pub struct DemoReport {
    /// The requester's (hca0's) QP number.
    pub qpn_a: u32,
    /// The responder's (hca1's) QP number.
    pub qpn_b: u32,
    /// The first PSN hca0 sends with.
    pub psn_a: u32,
    /// The first PSN hca1 sends with.
    pub psn_b: u32,
    /// Whether the atomics ran (the device must offer them).
    pub atomics: bool,
    /// Packets on the wire.
    pub packets: u64,
    /// The human-readable account, line by line.
    pub lines: Vec<String>,
}

/// Runs the demo; with `pcap`, captures every packet there. `say` receives each line as it
/// happens.
///
/// # Errors
///
/// Any driver error, a failed completion, or data that did not arrive as sent.
pub fn run(pcap: Option<&Path>, mut say: impl FnMut(&str)) -> DemoResult<DemoReport> {
    let mut report = DemoReport::default();
    let mut line = |report: &mut DemoReport, s: String| {
        say(&s);
        report.lines.push(s);
    };

    // Two HCAs on one Ethernet fabric: hca0 is 10.0.0.1, hca1 10.0.0.2 (RoCEv2 GID index 0).
    let mut tb = Testbed::ethernet(2)?;
    if let Some(path) = pcap {
        tb.fabric().capture_file(path)?;
    }
    report.atomics = tb.hca(0).caps().atomic && tb.hca(1).caps().atomic;
    line(
        &mut report,
        format!(
            "hca0: RoCEv2 GID {} (10.0.0.1), hca1: GID {} (10.0.0.2)",
            tb.gid(0),
            tb.gid(1)
        ),
    );

    // One RC QP each, with a PD, a CQ and 16 KiB of registered memory, connected. hca0's
    // PSNs start just below 2^24, so they wrap during the demo.
    let (psn_a, psn_b) = (0xff_fffd, 0x00_1000);
    let cfg = RcConfig {
        mr_len: 16384,
        cq_entries: 63,
        caps: QpCaps {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        },
        mtu: IbMtu::Mtu1024,
        psn: (psn_a, psn_b),
        max_rd_atomic: 4,
    };
    let (mut a, mut b) = tb.connect_rc(0, 1, &cfg)?;
    let (qpn_a, qpn_b) = (a.qp.qpn(), b.qp.qpn());
    (report.qpn_a, report.qpn_b, report.psn_a, report.psn_b) = (qpn_a, qpn_b, psn_a, psn_b);
    line(
        &mut report,
        format!(
            "RC QPs connected: hca0 QP {qpn_a:#x} (PSN {psn_a:#x}) <-> hca1 QP {qpn_b:#x} (PSN {psn_b:#x}), path MTU 1024"
        ),
    );
    let (remote, rkey) = (b.mr.iova(), b.mr.rkey());

    // SEND: hca1 posts a receive, hca0 sends 3000 bytes (three packets at MTU 1024).
    let message: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    a.mr.mem_mut().write_bytes(0, &message);
    b.qp.post_recv(&[RecvWr {
        wr_id: 100,
        sg_list: &[b.mr.sge(0, 4096)?],
    }])?;
    a.qp.post_send(&[SendWr::new(1, SendOp::Send, &[a.mr.sge(0, 3000)?])])?;
    completed(&tb, &mut a.cq)?;
    let wc = completed(&tb, &mut b.cq)?;
    let mut got = vec![0u8; 3000];
    b.mr.mem().read_bytes(0, &mut got);
    if got != message || wc.byte_len != 3000 {
        return Err("SEND: data did not arrive as sent".into());
    }
    line(
        &mut report,
        format!(
            "SEND 3000 bytes: hca1 received {} bytes, identical",
            wc.byte_len
        ),
    );

    // RDMA WRITE: into hca1's memory at 4096, no receive consumed.
    let text = b"written by hca0 with RDMA WRITE, no CPU on hca1 involved";
    a.mr.mem_mut().write_bytes(4096, text);
    let op = SendOp::RdmaWrite {
        remote_addr: remote + 4096,
        rkey,
    };
    a.qp.post_send(&[SendWr::new(2, op, &[a.mr.sge(4096, text.len())?])])?;
    completed(&tb, &mut a.cq)?;
    let mut got = vec![0u8; text.len()];
    b.mr.mem().read_bytes(4096, &mut got);
    if got != text {
        return Err("RDMA WRITE: data did not arrive".into());
    }
    line(
        &mut report,
        format!(
            "RDMA WRITE {} bytes: hca1's memory now says {:?}",
            text.len(),
            String::from_utf8_lossy(&got)
        ),
    );

    // RDMA READ: 2048 bytes from hca1 at 8192 into hca0 at 8192.
    let secret: Vec<u8> = (0..2048u32).map(|i| (i * 13 + 1) as u8).collect();
    b.mr.mem_mut().write_bytes(8192, &secret);
    let op = SendOp::RdmaRead {
        remote_addr: remote + 8192,
        rkey,
    };
    a.qp.post_send(&[SendWr::new(3, op, &[a.mr.sge(8192, 2048)?])])?;
    let wc = completed(&tb, &mut a.cq)?;
    let mut got = vec![0u8; 2048];
    a.mr.mem().read_bytes(8192, &mut got);
    if got != secret {
        return Err("RDMA READ: data did not arrive".into());
    }
    line(
        &mut report,
        format!(
            "RDMA READ {} bytes from hca1: identical to hca1's memory",
            wc.byte_len
        ),
    );

    if report.atomics {
        // The remote words in the host's byte order: the driver set the HCA's 8-byte atomic
        // endianness mode to host endianness at bring-up, as Linux does.
        b.mr.mem_mut().write_bytes(12288, &7u64.to_ne_bytes());
        b.mr.mem_mut().write_bytes(12296, &100u64.to_ne_bytes());
        let (cas_to, faa_to) = ([a.mr.sge(12288, 8)?], [a.mr.sge(12296, 8)?]);
        let cas = SendOp::AtomicCmpSwap {
            remote_addr: remote + 12288,
            rkey,
            compare: 7,
            swap: 42,
        };
        let faa = SendOp::AtomicFetchAdd {
            remote_addr: remote + 12296,
            rkey,
            add: 5,
        };
        a.qp.post_send(&[
            SendWr::new(4, cas, &cas_to),
            SendWr::new(5, faa, &faa_to).with_flags(SendFlags::SIGNALED | SendFlags::FENCE),
        ])?;
        completed(&tb, &mut a.cq)?;
        completed(&tb, &mut a.cq)?;
        // The original values land in the local buffer, and the remote words are, in the
        // host's byte order (the driver asks the HCA for host-order atomics, as Linux does).
        let mut orig = [0u8; 16];
        a.mr.mem().read_bytes(12288, &mut orig);
        let host = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
        let (old_cas, old_faa) = (host(&orig[..8]), host(&orig[8..]));
        let mut words = [0u8; 16];
        b.mr.mem().read_bytes(12288, &mut words);
        let (new_cas, new_faa) = (host(&words[..8]), host(&words[8..]));
        if (old_cas, old_faa, new_cas, new_faa) != (7, 100, 42, 105) {
            return Err("atomics: wrong values".into());
        }
        line(
            &mut report,
            format!("compare-and-swap: hca1's word was {old_cas}, compared 7, now {new_cas}"),
        );
        line(
            &mut report,
            format!("fetch-and-add:    hca1's word was {old_faa}, added 5, now {new_faa}"),
        );
    } else {
        line(
            &mut report,
            "atomics: the mock HCA does not offer them (cmd_hca_cap.atomic = 0); skipped"
                .to_string(),
        );
    }

    let c = tb.fabric().counters();
    report.packets = c.delivered;
    line(
        &mut report,
        format!(
            "fabric: {} packets delivered, {} dropped",
            c.delivered, c.dropped
        ),
    );
    if let Some(path) = pcap {
        let n = tb.fabric().stop_capture()?;
        line(
            &mut report,
            format!(
                "pcap: {n} packets written to {} (tshark -r {} decodes them)",
                path.display(),
                path.display()
            ),
        );
    }

    // Destroy both sides (QP, MR, CQ, PD), close both HCAs, and check that neither device
    // touched memory outside what was mapped for it.
    tb.destroy(a)?;
    tb.destroy(b)?;
    tb.close()?;
    Ok(report)
}

/// The next completion on `cq`, which must be a success.
fn completed(
    tb: &Testbed,
    cq: &mut Cq<uhca::testbed::TestbedPlatform>,
) -> DemoResult<WorkCompletion> {
    let wc = tb.poll_until(cq, 1, WAIT)?[0];
    if wc.status != WcStatus::Success {
        return Err(format!("work request {} failed: {:?}", wc.wr_id, wc.status).into());
    }
    Ok(wc)
}

#[allow(dead_code)] // `tests/demo_wire.rs` includes this file for `run` alone.
fn main() {
    let mut pcap = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--pcap" => match args.next() {
                Some(p) => pcap = Some(PathBuf::from(p)),
                None => fail("--pcap needs a file name"),
            },
            "-h" | "--help" => {
                println!("usage: demo [--pcap FILE]");
                return;
            }
            other => fail(&format!("unknown argument {other:?} (try --help)")),
        }
    }
    println!("uhca demo: two mock ConnectX HCAs, RC over RoCEv2\n");
    match run(pcap.as_deref(), |line| println!("{line}")) {
        Ok(_) => println!("\ndone: every operation completed and every byte arrived as sent"),
        Err(e) => fail(&e.to_string()),
    }
}

#[allow(dead_code)]
fn fail(msg: &str) -> ! {
    eprintln!("demo: {msg}");
    std::process::exit(1);
}
