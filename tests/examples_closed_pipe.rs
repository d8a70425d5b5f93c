//! The examples are command-line programs: with their output going to a pipe whose reader
//! has gone (`cargo run --example devinfo -- --mock | head`) they run to their end and exit
//! with their own status, instead of panicking with "failed printing to stdout: Broken pipe"
//! (`examples/common/print.rs`).
//!
//! The examples are the ones `cargo test` built beside this test (`target/<profile>/examples/`);
//! run the whole suite, or `cargo build --examples` first, when running this file alone.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::example;

/// Runs an example with standard output and error a pipe nobody reads any more (every write
/// fails with `EPIPE`), within a minute; returns its exit status.
fn run_into_closed_pipe(name: &str, args: &[&str]) -> i32 {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = Command::new(example(name))
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .stderr(writer.try_clone().unwrap())
        .stdout(writer)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            // A panic (std's println! on EPIPE) is status 101; a failed run is 1.
            return status
                .code()
                .expect("the example exited, not killed by a signal");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name} {args:?} did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn devinfo_prints_its_table_into_a_closed_pipe_and_succeeds() {
    assert_eq!(run_into_closed_pipe("devinfo", &["--mock"]), 0);
    assert_eq!(run_into_closed_pipe("devinfo", &["--mock", "--ib"]), 0);
}

#[test]
fn rc_pingpong_completes_its_exchange_with_a_closed_pipe() {
    // Client and server threads both print; neither may die on EPIPE.
    assert_eq!(
        run_into_closed_pipe("rc_pingpong", &["--mock", "-n", "50"]),
        0
    );
}

#[test]
fn ud_pingpong_completes_its_exchange_with_a_closed_pipe() {
    assert_eq!(
        run_into_closed_pipe("ud_pingpong", &["--mock", "-n", "50", "-s", "1000"]),
        0
    );
}

#[test]
fn perftest_like_tables_go_into_a_closed_pipe() {
    assert_eq!(run_into_closed_pipe("rdma_bw", &["--mock", "-n", "200"]), 0);
    assert_eq!(
        run_into_closed_pipe("rdma_lat", &["--mock", "-n", "200"]),
        0
    );
    assert_eq!(run_into_closed_pipe("rdma_rw", &["--mock"]), 0);
}

#[test]
fn all_reduce_perf_prints_its_table_into_a_closed_pipe() {
    assert_eq!(
        run_into_closed_pipe("all_reduce_perf", &["--mock", "-n", "2", "-e", "64"]),
        0
    );
}

#[test]
fn the_demo_runs_to_its_end_with_a_closed_pipe() {
    assert_eq!(run_into_closed_pipe("demo", &[]), 0);
}

#[test]
fn usage_goes_into_a_closed_pipe() {
    assert_eq!(run_into_closed_pipe("demo", &["--help"]), 0);
    assert_eq!(run_into_closed_pipe("devinfo", &["--bogus"]), 2);
}
