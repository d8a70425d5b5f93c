//! What the two libmlx5 parity tests (`tests/parity_wqe.rs`, `tests/parity_cqe.rs`) share:
//! finding and running a harness process, the seeded generator of their random cases, and
//! uhca's side: a mock HCA brought up by the driver with its send doorbells held.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

/// Whether CI asked for the parity tests to run (`UHCA_REQUIRE_LIBMLX5=1`): then a missing
/// harness fails the test instead of skipping it.
pub fn required() -> bool {
    std::env::var("UHCA_REQUIRE_LIBMLX5").is_ok_and(|v| v == "1")
}

/// The harness binary `name` in `UHCA_LIBMLX5_HARNESS_DIR`; `None` after saying why the test
/// is skipped (a failure under [`required`]).
pub fn harness_path(name: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("UHCA_LIBMLX5_HARNESS_DIR").filter(|d| !d.is_empty());
    let why = match &dir {
        Some(d) if Path::new(d).join(name).is_file() => return Some(Path::new(d).join(name)),
        Some(d) => format!("{} has no {name}", d.to_string_lossy()),
        None => "UHCA_LIBMLX5_HARNESS_DIR is not set".to_string(),
    };
    assert!(
        !required(),
        "libmlx5 parity required (UHCA_REQUIRE_LIBMLX5=1) but {why}"
    );
    eprintln!(
        "SKIPPED: {why}; build libmlx5's harnesses with `bash tests/parity/build.sh` and run \
         with UHCA_LIBMLX5_HARNESS_DIR=<the folder it prints>"
    );
    None
}

/// A harness process behind pipes: request lines in, answer lines out. Killed when dropped.
pub struct Pipe {
    name: String,
    child: Child,
    stdin: BufWriter<ChildStdin>,
    lines: Receiver<String>,
    /// The request lines sent since the last answer (named when the harness fails).
    pending: Vec<String>,
}

impl Pipe {
    /// Starts `bin`; its stderr goes to the test's.
    pub fn start(bin: &Path) -> Pipe {
        let mut child = Command::new(bin)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Pipe {
            name: bin.display().to_string(),
            stdin: BufWriter::new(child.stdin.take().unwrap()),
            child,
            lines,
            pending: Vec::new(),
        }
    }

    /// Queues one request line (sent with the next [`Pipe::recv`]).
    pub fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap_or_else(|e| panic!("{} gone: {e}", self.name));
        self.pending.push(line.to_string());
    }

    /// Sends what is queued and waits at most `timeout` for the next answer line.
    pub fn recv(&mut self, timeout: Duration) -> String {
        self.stdin
            .flush()
            .unwrap_or_else(|e| panic!("{} gone: {e}", self.name));
        let asked = self.pending.join("\n  ");
        match self.lines.recv_timeout(timeout) {
            Ok(line) => {
                self.pending.clear();
                line
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!(
                    "{}: no answer within {timeout:?} (hung); asked:\n  {asked}",
                    self.name
                )
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                let status = self.child.wait();
                panic!(
                    "{}: exited without answering ({status:?}); asked:\n  {asked}",
                    self.name
                )
            }
        }
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A small PRNG of our own (SplitMix64), seeded so a failing run can be replayed.
pub struct Rng(pub u64);

// Each of the two tests uses only some of these.
#[allow(dead_code)]
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// True one time in `n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }

    /// True `percent` times in a hundred.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// The seed of a run: `UHCA_PARITY_SEED` (hex, `0x` optional) to replay one, else the
/// clock. Print it as `{seed:#x}`.
pub fn seed() -> u64 {
    match std::env::var("UHCA_PARITY_SEED") {
        Ok(s) => u64::from_str_radix(s.trim().trim_start_matches("0x"), 16)
            .expect("UHCA_PARITY_SEED: a hex number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    }
}

/// A mock HCA (virtual clock, firmware ready after 5 ms) brought up by the driver with
/// short timeouts, its send doorbells held so that the tests read the WQEs before the
/// model executes them.
pub fn open_held(
    port_type: uhca::mock::LinkLayer,
) -> (
    uhca::mock::MockHca,
    uhca::driver::Hca<uhca::mock::MockPlatform>,
) {
    let dev = uhca::mock::MockHca::new(uhca::mock::MockConfig {
        port_type,
        clock: uhca::mock::ClockMode::Virtual,
        init_delay_us: 5_000,
        ..uhca::mock::MockConfig::default()
    });
    let cfg = uhca::driver::HcaConfig {
        fw_pre_init_timeout_ns: 2_000_000_000,
        fw_init_timeout_ns: 200_000_000,
        cmd_timeout_ns: 200_000_000,
        poll_us: 100,
        ..uhca::driver::HcaConfig::default()
    };
    let hca = uhca::driver::Hca::open_with(dev.platform(), cfg).expect("bring-up");
    dev.hold_send_doorbells(true);
    (dev, hca)
}
