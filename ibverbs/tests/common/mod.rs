//! What the tests that run Debian's programs on this library share: the directory where
//! `libibverbs.so.1` is the cdylib cargo built, the check that `ldd -r` resolves a
//! program's imports there, and a wait for a TCP server without connecting to it.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Makes `$TMPDIR/NAME-PID/` holding `libibverbs.so.1` → the cdylib cargo built beside the
/// running test, and returns it.
pub fn cdylib_dir(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let so = [deps, deps.parent().unwrap()]
        .iter()
        .map(|d| d.join("libuhca_ibverbs.so"))
        .find(|p| p.exists())
        .expect("libuhca_ibverbs.so beside the test (cargo builds the cdylib with the tests)");
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("libibverbs.so.1");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&so, &link).unwrap();
    dir
}

/// Asserts that `ldd -r PROGRAM`, with `dir` on `LD_LIBRARY_PATH`, loads each of `libs`
/// (`"libibverbs"`, ...) from `dir` and leaves no symbol undefined.
pub fn assert_imports_resolve(program: &Path, dir: &Path, libs: &[&str]) {
    let out = Command::new("ldd")
        .arg("-r")
        .arg(program)
        .env("LD_LIBRARY_PATH", dir)
        .output()
        .expect("ldd");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let name = program.display();
    for lib in libs {
        let so = dir.join(format!("{lib}.so.1"));
        assert!(
            text.contains(&format!("{lib}.so.1 => {}", so.display())),
            "{name} does not load uhca's {lib}:\n{text}"
        );
    }
    assert!(
        !text.contains("undefined symbol") && !text.contains("not found"),
        "{name}:\n{text}"
    );
}

/// Whether something listens on TCP `port` (from `/proc/net/tcp`, without connecting: the
/// servers of rdma-core's examples and of perftest accept one connection only).
pub fn listening(port: u16) -> bool {
    let want = format!(":{port:04X}");
    std::fs::read_to_string("/proc/net/tcp")
        .unwrap_or_default()
        .lines()
        .skip(1)
        .any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() > 3 && f[1].ends_with(&want) && f[3] == "0A"
        })
}
