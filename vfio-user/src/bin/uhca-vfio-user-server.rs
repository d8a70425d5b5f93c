//! `uhca-vfio-user-server`: serves mock ConnectX functions to a VMM over vfio-user.
//!
//! ```text
//! uhca-vfio-user-server [--link ethernet|infiniband] [--pcap FILE] [--log] [--command-log]
//!                       --socket PATH...
//! ```
//!
//! One mock function per `--socket` (in order: MAC 02:c0:ff:ee:00:01, :02, ...; on
//! InfiniBand the fabric's subnet manager gives LIDs 1, 2, ...), all on one mock fabric whose
//! pump runs in real time. Each socket takes one client at a time; when a client goes, its
//! DMA maps and eventfds are dropped and the socket waits for the next. The server runs
//! until it is killed. With `--command-log`, each time a client goes the server prints the
//! commands that function's firmware executed since the last client went (one `cmd` line
//! each: opcode, op_mod, the register of an ACCESS_REGISTER, status, syndrome, outcome), the model's notes (driver behaviour
//! hardware would silently accept, such as DISABLE_HCA with firmware pages still held) and
//! the pages the firmware holds.

use std::os::unix::net::UnixListener;
use std::process::ExitCode;
use uhca_fwif::consts::CmdOpcode;
use uhca_mock::{ClockMode, Fabric, LinkLayer, MockConfig, MockHca, PortType};
use uhca_vfio_user::{Function, serve};

struct Args {
    sockets: Vec<String>,
    link: LinkLayer,
    pcap: Option<String>,
    log: bool,
    command_log: bool,
}

const USAGE: &str = "usage: uhca-vfio-user-server [--link ethernet|infiniband] [--pcap FILE] [--log] [--command-log] --socket PATH...";

fn parse() -> Result<Args, String> {
    let mut a = Args {
        sockets: Vec::new(),
        link: LinkLayer::Ethernet,
        pcap: None,
        log: false,
        command_log: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--socket" => a.sockets.push(it.next().ok_or("--socket needs a path")?),
            "--link" => {
                a.link = match it.next().as_deref() {
                    Some("ethernet") => LinkLayer::Ethernet,
                    Some("infiniband") => LinkLayer::InfiniBand,
                    _ => return Err("--link takes ethernet or infiniband".into()),
                }
            }
            "--pcap" => a.pcap = Some(it.next().ok_or("--pcap needs a file")?),
            "--log" => a.log = true,
            "--command-log" => a.command_log = true,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    if a.sockets.is_empty() {
        return Err(USAGE.into());
    }
    Ok(a)
}

/// Prints (to standard output) and clears the commands `hca` executed, its notes and the
/// pages its firmware holds.
fn print_command_log(path: &str, hca: &MockHca) {
    use std::io::Write;
    let records = hca.command_log();
    hca.clear_command_log();
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{path}: command log: {} commands", records.len());
    for r in &records {
        let reg = if r.opcode == CmdOpcode::AccessReg {
            format!(" register=0x{:04x}", r.register_id)
        } else {
            String::new()
        };
        let _ = writeln!(
            o,
            "{path}: cmd {:?} op_mod=0x{:x}{reg} status={:?} syndrome=0x{:08x} {:?}",
            r.opcode, r.op_mod, r.status, r.syndrome, r.outcome
        );
    }
    for n in hca.notes() {
        let _ = writeln!(o, "{path}: note: {}", n.text);
    }
    let _ = writeln!(
        o,
        "{path}: firmware pages held: {}, state: {:?}",
        hca.pages().held,
        hca.hca_state()
    );
    let _ = o.flush();
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let fabric = Fabric::new(args.link);
    if let Some(p) = &args.pcap
        && let Err(e) = fabric.capture_file(p)
    {
        eprintln!("cannot write the capture {p}: {e}");
        return ExitCode::FAILURE;
    }
    let port_type = match args.link {
        LinkLayer::Ethernet => PortType::Ethernet,
        LinkLayer::InfiniBand => PortType::InfiniBand,
    };
    let mut listeners = Vec::new();
    for (i, path) in args.sockets.iter().enumerate() {
        let mut mac = MockConfig::default().mac;
        mac[5] = (i + 1) as u8;
        let hca = MockHca::new(MockConfig {
            port_type,
            clock: ClockMode::RealTime,
            mac,
            ..MockConfig::default()
        });
        fabric.attach(&hca);
        let _ = std::fs::remove_file(path);
        match UnixListener::bind(path) {
            Ok(l) => listeners.push((path.clone(), l, Function::new(hca))),
            Err(e) => {
                eprintln!("cannot listen on {path}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let _pump = fabric.start_pump(100);
    let mut threads = Vec::new();
    for (path, listener, function) in listeners {
        println!("uhca-vfio-user-server: function {path} ready");
        let log = args.log;
        let command_log = args.command_log;
        threads.push(std::thread::spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(stream) => {
                        match serve(stream, &function, log) {
                            Ok(s) => eprintln!("{path}: client gone: {s:?}"),
                            Err(e) => eprintln!("{path}: connection failed: {e}"),
                        }
                        if command_log {
                            print_command_log(&path, function.hca());
                        }
                    }
                    Err(e) => eprintln!("{path}: accept failed: {e}"),
                }
            }
        }));
    }
    for t in threads {
        let _ = t.join();
    }
    ExitCode::SUCCESS
}
