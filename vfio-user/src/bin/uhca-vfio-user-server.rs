//! `uhca-vfio-user-server`: serves mock ConnectX functions to a VMM over vfio-user.
//!
//! ```text
//! uhca-vfio-user-server [--link ethernet|infiniband] [--pcap FILE] [--log] [--command-log]
//!                       [--command-dump FILE] [--hang-opcode OPCODE]
//!                       [--removal-file FILE] --socket PATH...
//! ```
//!
//! One mock function per `--socket` (in order: MAC 02:c0:ff:ee:00:01, :02, ...; on
//! InfiniBand the fabric's subnet manager gives LIDs 1, 2, ...), all on one mock fabric whose
//! pump runs in real time. Each socket takes one client at a time; when a client goes, its
//! DMA maps and eventfds are dropped and the socket waits for the next. The server runs
//! until it is killed. With `--command-log`, each time a client goes the server prints the
//! commands that function's firmware executed since the last client went (one `cmd` line
//! each: opcode, op_mod, the register of an ACCESS_REGISTER, status, syndrome, outcome),
//! the model's notes (driver behaviour hardware would silently accept, such as DISABLE_HCA
//! with firmware pages still held) and the pages the firmware holds.
//!
//! With `--command-dump FILE`, the firmware also keeps every command's input and output
//! bytes, and each time a client goes the server appends them to FILE (created empty at
//! start), one line per command in the form `uhca_vfio_user::cmdlog` reads back
//! (`cmd PATH opcode=0x.. op_mod=0x.. status=0x.. in=HEX out=HEX`), then prints
//! `PATH: command dump: N commands written`; `uhca-cmd-compare` lines up two such dumps
//! field by field. It is meant for test rigs: the bytes of up to the model's log capacity of
//! commands are held in memory until the client goes.
//!
//! With `--hang-opcode OPCODE` (a number, e.g. `0x400` for CREATE_CQ), every function's
//! firmware takes each command of that opcode and never completes it (the entry stays
//! owned by hardware, no completion event): a device that stops answering, for testing a
//! driver's command timeout. Other commands are answered as usual.
//!
//! With `--removal-file FILE`, once FILE exists (the server looks every 10 ms) every
//! function is surprise-removed: each configuration-space and BAR read returns all ones and
//! writes are dropped, as for a device gone from the bus, while the sockets stay up (killing
//! the server instead makes QEMU 11.1's vfio-user client abort, so a guest never sees it).
//!
//! Every device access the model's IOMMU refuses (an IOVA outside the client's DMA maps, a
//! write to a read-only map, DMA with bus mastering off) is printed on standard output,
//! one line each, within about 50 ms:
//!
//! ```text
//! uhca-vfio-user-server: IOMMU fault: PATH: device write of 256 B at IOVA 0x7ffffff000 (data (scatter)): unmapped
//! ```

use std::io::Write;
use std::os::unix::net::UnixListener;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uhca_fwif::consts::CmdOpcode;
use uhca_mock::{ClockMode, Fabric, FaultKind, IommuFault, LinkLayer, MockConfig, MockHca};
use uhca_vfio_user::{Function, cmdlog, serve};

/// Writes one line to standard output. The server's output is a log: a reader that has gone
/// (`| head`) or any other failed write must not stop it serving, so the line is dropped.
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// [`say!`] for standard error.
/// One line to standard error in one write: standard error is unbuffered, so `writeln!`
/// would write each formatted piece apart, and another thread's line (standard output,
/// often the same file) could land in the middle of it.
macro_rules! warn {
    ($($arg:tt)*) => {{
        let mut line = format!($($arg)*);
        line.push('\n');
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }};
}

struct Args {
    sockets: Vec<String>,
    link: LinkLayer,
    pcap: Option<String>,
    log: bool,
    command_log: bool,
    command_dump: Option<String>,
    hang_opcode: Option<u16>,
    removal_file: Option<String>,
}

const USAGE: &str = "usage: uhca-vfio-user-server [--link ethernet|infiniband] [--pcap FILE] [--log] [--command-log] [--command-dump FILE] [--hang-opcode OPCODE] [--removal-file FILE] --socket PATH...";

fn parse() -> Result<Args, String> {
    let mut a = Args {
        sockets: Vec::new(),
        link: LinkLayer::Ethernet,
        pcap: None,
        log: false,
        command_log: false,
        command_dump: None,
        hang_opcode: None,
        removal_file: None,
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
            "--command-dump" => {
                a.command_dump = Some(it.next().ok_or("--command-dump needs a file")?)
            }
            "--hang-opcode" => {
                let v = it.next().ok_or("--hang-opcode needs an opcode")?;
                let n = match v.strip_prefix("0x") {
                    Some(h) => u16::from_str_radix(h, 16),
                    None => v.parse(),
                };
                a.hang_opcode = Some(n.map_err(|_| format!("--hang-opcode {v}: not a number"))?);
            }
            "--removal-file" => {
                a.removal_file = Some(it.next().ok_or("--removal-file needs a path")?)
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    if a.sockets.is_empty() {
        return Err(USAGE.into());
    }
    Ok(a)
}

/// How often the reporter looks for new IOMMU faults.
const FAULT_POLL: Duration = Duration::from_millis(50);

/// The line printed for one IOMMU fault of the function served on `path`.
fn fault_line(path: &str, f: &IommuFault) -> String {
    let why = match f.kind {
        FaultKind::Unmapped => "unmapped",
        FaultKind::BusMasterDisabled => "bus mastering off",
        FaultKind::ReadOnly => "write to a read-only map",
        FaultKind::Unbacked => "mapped without memory the server can reach",
    };
    format!(
        "uhca-vfio-user-server: IOMMU fault: {path}: device {} of {} B at IOVA {:#x} ({}): {why}",
        if f.write { "write" } else { "read" },
        f.len,
        f.iova,
        f.context,
    )
}

/// Prints (to standard output) and clears the commands `hca` executed, its notes and the
/// pages its firmware holds.
fn print_command_log(path: &str, hca: &MockHca) {
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

/// Appends the commands `hca` executed since the last call, with their bytes, to the dump.
fn append_command_dump(path: &str, hca: &MockHca, dump: &Mutex<std::fs::File>) {
    let mut text = String::new();
    let cmds = hca.take_command_bytes();
    let n = cmds.len();
    for c in cmds {
        text.push_str(&cmdlog::dump_line(path, &c));
        text.push('\n');
    }
    let mut f = dump.lock().unwrap_or_else(|e| e.into_inner());
    match f.write_all(text.as_bytes()).and_then(|()| f.flush()) {
        Ok(()) => say!("{path}: command dump: {n} commands written"),
        Err(e) => warn!("{path}: cannot write the command dump: {e}"),
    }
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            warn!("{e}");
            return ExitCode::from(2);
        }
    };
    let fabric = Fabric::new(args.link);
    if let Some(p) = &args.pcap
        && let Err(e) = fabric.capture_file(p)
    {
        warn!("cannot write the capture {p}: {e}");
        return ExitCode::FAILURE;
    }
    let dump = match &args.command_dump {
        Some(p) => match std::fs::File::create(p) {
            Ok(f) => Some(Arc::new(Mutex::new(f))),
            Err(e) => {
                warn!("cannot write the command dump {p}: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let port_type = args.link;
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
        hca.record_command_bytes(dump.is_some());
        if let Some(op) = args.hang_opcode {
            hca.inject_command_fault(
                Some(CmdOpcode::from_raw(op)),
                uhca_mock::CommandFault::Hang,
                u32::MAX,
            );
        }
        let _ = std::fs::remove_file(path);
        match UnixListener::bind(path) {
            Ok(l) => listeners.push((path.clone(), l, Function::new(hca))),
            Err(e) => {
                warn!("cannot listen on {path}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let _pump = fabric.start_pump(100);
    // One reporter for every function's IOMMU faults, whichever thread caused them (a
    // socket's, for BAR writes, or the fabric's pump, for received packets).
    let watched: Vec<(String, MockHca)> = listeners
        .iter()
        .map(|(path, _, function)| (path.clone(), function.hca().clone()))
        .collect();
    if let Some(file) = args.removal_file.clone() {
        let hcas: Vec<MockHca> = watched.iter().map(|(_, h)| h.clone()).collect();
        std::thread::spawn(move || {
            while !std::path::Path::new(&file).exists() {
                std::thread::sleep(Duration::from_millis(10));
            }
            for h in &hcas {
                h.set_pci_all_ones(true);
            }
            say!("uhca-vfio-user-server: {file} exists: every function removed (reads all ones)");
        });
    }
    std::thread::spawn(move || {
        loop {
            for (path, hca) in &watched {
                for f in hca.take_iommu_faults() {
                    say!("{}", fault_line(path, &f));
                }
            }
            std::thread::sleep(FAULT_POLL);
        }
    });
    let mut threads = Vec::new();
    for (path, listener, function) in listeners {
        say!("uhca-vfio-user-server: function {path} ready");
        let log = args.log;
        let command_log = args.command_log;
        let dump = dump.clone();
        threads.push(std::thread::spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(stream) => {
                        match serve(stream, &function, log) {
                            Ok(s) => warn!("{path}: client gone: {s:?}"),
                            Err(e) => warn!("{path}: connection failed: {e}"),
                        }
                        // The dump first: a script waits for the command log's last
                        // line before it stops the server.
                        if let Some(d) = &dump {
                            append_command_dump(&path, function.hca(), d);
                        }
                        if command_log {
                            print_command_log(&path, function.hca());
                        }
                    }
                    Err(e) => warn!("{path}: accept failed: {e}"),
                }
            }
        }));
    }
    for t in threads {
        let _ = t.join();
    }
    ExitCode::SUCCESS
}
