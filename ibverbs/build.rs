//! Links the cdylib as `libibverbs.so.1` with rdma-core 44's version nodes.
//!
//! The version script only *declares* the nodes; each exported name gets its version from a
//! `.symver` directive on its trampoline (`src/ffi/export.rs`). A script that listed the
//! symbols would leave them unversioned next to rustc's own anonymous script.

use std::path::PathBuf;

/// rdma-core 44's libibverbs version nodes, in order (each inherits the previous one).
const NODES: &[&str] = &[
    "IBVERBS_1.0",
    "IBVERBS_1.1",
    "IBVERBS_1.5",
    "IBVERBS_1.6",
    "IBVERBS_1.7",
    "IBVERBS_1.8",
    "IBVERBS_1.9",
    "IBVERBS_1.10",
    "IBVERBS_1.11",
    "IBVERBS_1.12",
    "IBVERBS_1.13",
    "IBVERBS_1.14",
    "IBVERBS_PRIVATE_34",
];

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR"));
    let mut script = String::new();
    for (i, n) in NODES.iter().enumerate() {
        if i == 0 {
            script += &format!("{n} {{ local: *; }};\n");
        } else if n.starts_with("IBVERBS_PRIVATE") {
            // As in rdma-core: the private node inherits from none.
            script += &format!("{n} {{ }};\n");
        } else {
            script += &format!("{n} {{ }} {};\n", NODES[i - 1]);
        }
    }
    let path = out.join("libibverbs.map");
    std::fs::write(&path, script).expect("write the version script");
    println!(
        "cargo:rustc-cdylib-link-arg=-Wl,--version-script={}",
        path.display()
    );
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libibverbs.so.1");
    println!("cargo:rerun-if-changed=build.rs");
}
