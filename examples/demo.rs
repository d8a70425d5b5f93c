//! The uhca demo: two mock ConnectX HCAs in one process, brought up by the driver exactly as
//! a real ConnectX under VFIO would be, with an RC queue pair each over RoCEv2 on the mock's
//! in-memory Ethernet fabric: SEND, RDMA WRITE, RDMA READ, compare-and-swap and
//! fetch-and-add, every result checked in the peer's memory.
//!
//! `cargo run --example demo` (add `-- --pcap demo.pcap` to capture every packet; tshark
//! decodes the capture, and `uhca-wirecheck demo.pcap` verifies every ICRC).

// println!/eprintln! that stay quiet on a closed pipe (`| head`).
#[macro_use]
#[path = "common/print.rs"]
mod print;

use std::path::PathBuf;

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
    match uhca::demo::run(pcap.as_deref(), |line| println!("{line}")) {
        Ok(_) => println!("\ndone: every operation completed and every byte arrived as sent"),
        Err(e) => fail(&e.to_string()),
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("demo: {msg}");
    std::process::exit(1);
}
