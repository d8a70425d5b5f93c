//! `uhca-wirecheck`: check every InfiniBand and RoCEv2 packet in pcap files.
//!
//! ```text
//! uhca-wirecheck [-q] FILE.pcap...
//! ```
//!
//! Files may be pcap or pcapng.
//!
//! Link types: Ethernet (1) and raw IP (101) carry RoCEv2 (UDP destination port 4791; other
//! traffic is counted and skipped); DLT_USER0 (147) and LINKTYPE_INFINIBAND (247) carry
//! native IB packets, LRH to VCRC. Each packet is decoded with `uhca_mock::wire`, which checks
//! lengths, versions, the IPv4 header and UDP checksums, the ICRC and (native IB) the VCRC.
//! Prints one line per bad packet and a per-opcode summary per file.
//!
//! Exit status: 0 if every IB/RoCEv2 packet is good, 1 if any is malformed or fails a CRC or
//! checksum, 2 if a file cannot be read as pcap (empty, cut short, not a capture) or has an
//! unsupported link type.
//!
//! A closed standard output (`uhca-wirecheck FILE | head`) is not an error: the reports stop,
//! the checking goes on, and the exit status is still the verdict on every packet.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Write};
use std::process::ExitCode;

use uhca_mock::wire::Opcode;
use uhca_mock::wire::check::{Verdict, check};
use uhca_mock::wire::pcap::{LinkType, PcapReader};

#[derive(Default)]
struct Tally {
    packets: u64,
    good: u64,
    other: u64,
    unsupported: u64,
    bad: u64,
    by_opcode: BTreeMap<u8, u64>,
    by_error: BTreeMap<String, u64>,
}

/// `eprintln!` that never panics: standard error may be the same closed pipe as standard
/// output (`2>&1 | head`), and a message nobody reads is no reason to stop.
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(io::stderr().lock(), $($arg)*);
    }};
}

/// Standard output that goes quiet once its reader has gone (`EPIPE`): the verdict does not
/// depend on anyone reading the report. Any other write error ends the run (status 2).
struct Out {
    closed: bool,
}

impl Out {
    fn line(&mut self, args: fmt::Arguments<'_>) {
        if self.closed {
            return;
        }
        match writeln!(io::stdout().lock(), "{args}") {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => self.closed = true,
            Err(e) => {
                say!("uhca-wirecheck: cannot write the report: {e}");
                std::process::exit(2);
            }
        }
    }
}

/// Size of the smallest capture header: a pcap file header (a pcapng Section Header Block
/// with its Interface Description Block is longer).
const PCAP_HEADER_LEN: u64 = 24;

/// Why a file's header cannot be read, in the words a user needs: an empty capture and a cut
/// one are said as such (rather than as an I/O error from deep in the reader).
fn header_error(path: &str, len: u64, e: &io::Error) -> String {
    if len == 0 {
        format!("{path}: the file is empty: no capture header, no packets")
    } else if e.kind() == io::ErrorKind::UnexpectedEof {
        format!(
            "{path}: the file ends inside the capture header ({len} bytes; a pcap header is \
             {PCAP_HEADER_LEN}, a pcapng one longer): the capture is truncated"
        )
    } else {
        format!("{path}: {e}")
    }
}

fn run(path: &str, quiet: bool, out: &mut Out, t: &mut Tally) -> Result<LinkType, String> {
    let file = File::open(path).map_err(|e| format!("{path}: {e}"))?;
    let len = file.metadata().map_err(|e| format!("{path}: {e}"))?.len();
    let mut rd = PcapReader::new(BufReader::new(file)).map_err(|e| header_error(path, len, &e))?;
    let link = rd.link_type();
    if !matches!(
        link,
        LinkType::Ethernet | LinkType::RawIp | LinkType::User0 | LinkType::Infiniband
    ) {
        return Err(format!("{path}: unsupported link type {}", u32::from(link)));
    }
    let mut n = 0u64;
    while let Some(p) = rd.next_packet().map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            format!(
                "{path}: packet {}: the file ends inside this record: the capture is truncated \
                 ({n} whole packets before it)",
                n + 1
            )
        } else {
            format!("{path}: packet {}: {e}", n + 1)
        }
    })? {
        n += 1;
        t.packets += 1;
        match check(p.link_type, &p.data) {
            Verdict::Good(op) => {
                t.good += 1;
                *t.by_opcode.entry(op).or_default() += 1;
            }
            Verdict::Other => t.other += 1,
            Verdict::Unsupported(e) => {
                t.unsupported += 1;
                if !quiet {
                    say!("{path}: packet {n}: not decoded: {e}");
                }
            }
            Verdict::Bad(e) => {
                t.bad += 1;
                *t.by_error.entry(e.to_string()).or_default() += 1;
                out.line(format_args!("{path}: packet {n}: BAD: {e}"));
            }
        }
    }
    Ok(link)
}

fn main() -> ExitCode {
    let mut out = Out { closed: false };
    let mut quiet = false;
    let mut files = Vec::new();
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "-q" | "--quiet" => quiet = true,
            "-h" | "--help" => {
                out.line(format_args!("usage: uhca-wirecheck [-q] FILE.pcap..."));
                out.line(format_args!(
                    "Decodes every InfiniBand (DLT 147/247) or RoCEv2 (Ethernet, raw IP) packet,"
                ));
                out.line(format_args!(
                    "verifies lengths, checksums, ICRC and VCRC; exits 1 if any packet is bad."
                ));
                return ExitCode::SUCCESS;
            }
            _ => files.push(a),
        }
    }
    if files.is_empty() {
        say!("usage: uhca-wirecheck [-q] FILE.pcap...");
        return ExitCode::from(2);
    }
    let mut any_bad = false;
    for f in &files {
        let mut t = Tally::default();
        let link = match run(f, quiet, &mut out, &mut t) {
            Ok(l) => l,
            Err(e) => {
                say!("uhca-wirecheck: {e}");
                return ExitCode::from(2);
            }
        };
        out.line(format_args!(
            "{f}: link type {}: {} packets: {} good, {} bad, {} not decoded, {} other traffic",
            u32::from(link),
            t.packets,
            t.good,
            t.bad,
            t.unsupported,
            t.other
        ));
        for (op, count) in &t.by_opcode {
            let name = Opcode::from(*op).name().unwrap_or("unknown");
            out.line(format_args!("  0x{op:02x} {name:<40} {count}"));
        }
        for (e, count) in &t.by_error {
            out.line(format_args!("  BAD {e:<40} {count}"));
        }
        any_bad |= t.bad > 0;
    }
    if any_bad {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
