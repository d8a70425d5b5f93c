//! NCCL's loading sequence on this library: `tests/c/nccl_loading.c` `dlopen`s the cdylib
//! by its path (as NCCL does with `NCCL_IBVERBS_LIB`), `dlvsym`s the 22 symbols NCCL's
//! InfiniBand transport requires at `IBVERBS_1.1` (all must be found: NCCL gives up on the
//! transport when one is missing) and its optional ones at their versions, then makes the
//! first calls of NCCL's device discovery through those pointers, on one mock device
//! (`127.0.0.118`). NCCL itself is not in Debian and needs GPUs.
//!
//! Skipped with a message without a C compiler, unless `UHCA_REQUIRE_IBVERBS_UTILS=1`.

#[allow(dead_code)] // the helpers other test files use
mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn nccl_finds_every_symbol_it_requires() {
    let dir = common::cdylib_dir("uhca-ibverbs-nccl");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/nccl_loading.c");
    let exe = dir.join("nccl_loading");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = match Command::new(&cc)
        .args(["-Wall", "-Werror"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-ldl")
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            assert!(
                std::env::var("UHCA_REQUIRE_IBVERBS_UTILS").as_deref() != Ok("1"),
                "UHCA_REQUIRE_IBVERBS_UTILS=1 but no C compiler ({cc}: {e})"
            );
            eprintln!("skipped: no C compiler ({cc}: {e})");
            return;
        }
    };
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    // No LD_LIBRARY_PATH: the library is found by its path alone.
    let out = Command::new(&exe)
        .arg(dir.join("libibverbs.so.1"))
        .env("UHCA_DEVICES", "mock:uhca0=udp:127.0.0.118")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}");
    let checks: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("PASS ") || l.starts_with("FAIL "))
        .collect();
    // dlopen, 22 dlvsym, 9 calls.
    assert_eq!(checks.len(), 32, "every check ran: {stdout}");
    assert!(checks.iter().all(|l| l.starts_with("PASS ")), "{stdout}");
    // The optional symbols of rdma-core 44's versions are there too.
    for s in [
        "ibv_reg_mr_iova2@IBVERBS_1.8: found",
        "ibv_reg_dmabuf_mr@IBVERBS_1.12: found",
        "ibv_query_ece@IBVERBS_1.10: found",
        "ibv_set_ece@IBVERBS_1.10: found",
    ] {
        assert!(stdout.contains(s), "{s}: {stdout}");
    }
}
