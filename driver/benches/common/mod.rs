//! What the driver's benchmarks share: running a child process with a time limit, counting
//! instructions with callgrind ([`callgrind`]), and libmlx5's figures from the parity
//! build's `harness_bench` ([`libmlx5`]).

pub mod callgrind;
pub mod libmlx5;
pub mod uhca;

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What one case cost: nanoseconds per operation and, when callgrind could count them,
/// instructions per operation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    /// Median nanoseconds per operation.
    pub ns: f64,
    /// Instructions per operation (callgrind), `None` without valgrind.
    pub instructions: Option<f64>,
}

/// Why a child process gave no usable answer.
#[derive(Debug)]
pub enum RunError {
    /// It could not be started.
    Spawn(String, std::io::Error),
    /// It ran longer than its limit and was killed.
    Timeout(String, Duration),
    /// It exited with a failure; its stderr's last lines.
    Failed(String, String),
    /// Its output did not say what was expected.
    Output(String, String),
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Spawn(what, e) => write!(f, "cannot start {what}: {e}"),
            RunError::Timeout(what, t) => write!(f, "{what} ran longer than {t:?} (killed)"),
            RunError::Failed(what, err) => write!(f, "{what} failed: {err}"),
            RunError::Output(what, why) => write!(f, "{what}: {why}"),
        }
    }
}

/// The workspace's root folder (the driver crate's parent).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the driver crate sits in the workspace")
        .to_path_buf()
}

/// Runs `cmd` to its end, at most `limit`, and returns its stdout and stderr.
pub fn run_with_timeout(cmd: &mut Command, limit: Duration) -> Result<(String, String), RunError> {
    let what = format!("{:?}", cmd.get_program());
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RunError::Spawn(what.clone(), e))?;
    // Readers on their own threads, so a child filling a pipe never blocks on us.
    let mut out = child.stdout.take().expect("piped");
    let mut err = child.stderr.take().expect("piped");
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < limit => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(RunError::Timeout(what, limit));
            }
        }
    };
    let (out, err) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    if !status.success() {
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(RunError::Failed(
            what,
            format!("{status}: {}", tail.join(" / ")),
        ));
    }
    Ok((out, err))
}

/// The median of `v` (which must not be empty).
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
