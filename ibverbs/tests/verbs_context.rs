//! The `struct verbs_context` around this library's `ibv_context`, seen from C:
//! `tests/c/verbs_context.c`, compiled against the installed `<infiniband/verbs.h>` and
//! linked to this crate's cdylib as `libibverbs.so.1`, checks that `verbs.h`'s inlines find
//! it (`verbs_get_ctx`, `sz`), that `ibv_query_device_ex` answers through the
//! `query_device_ex` op (`phys_port_cnt_ex`, `orig_attr`, the input `comp_mask` and
//! `attr_size` rules), and that an op not offered is `EOPNOTSUPP`. One PASS line per check.
//!
//! Skipped with a message without the header or a C compiler, unless
//! `UHCA_REQUIRE_IBVERBS_UTILS=1` (then a failure).

#[allow(dead_code)] // the helpers other test files use
mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn require() -> bool {
    std::env::var("UHCA_REQUIRE_IBVERBS_UTILS").as_deref() == Ok("1")
}

fn skip(why: &str) {
    assert!(!require(), "UHCA_REQUIRE_IBVERBS_UTILS=1 but {why}");
    eprintln!("skipped: {why} (apt-get install libibverbs-dev gcc)");
}

#[test]
fn extended_verbs_find_the_verbs_context() {
    let header = Path::new("/usr/include/infiniband/verbs.h");
    if !header.exists() {
        return skip(&format!("{} is absent", header.display()));
    }
    let dir = common::cdylib_dir("uhca-ibverbs-vctx");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/verbs_context.c");
    let exe = dir.join("verbs_context");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = match Command::new(&cc)
        .args(["-Wall", "-Werror"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(&dir)
        .arg("-l:libibverbs.so.1")
        .output()
    {
        Ok(o) => o,
        Err(e) => return skip(&format!("no C compiler ({cc}: {e})")),
    };
    assert!(
        built.status.success(),
        "{cc} failed:\n{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let mut child = Command::new(&exe)
        .env("LD_LIBRARY_PATH", &dir)
        .env("UHCA_DEVICES", "mock:uhca0=udp:127.0.0.87")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("{} did not finish in 30 s", exe.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(out.status.success(), "{stdout}");
    assert_eq!(lines.len(), 19, "every check ran: {stdout}");
    assert!(lines.iter().all(|l| l.starts_with("PASS ")), "{stdout}");
}
