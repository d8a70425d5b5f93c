//! Links the program as a fixed-address ELF (no PIE: the 32-bit boot stub uses absolute
//! addresses) laid out by `linker.ld`, which also emits the PVH note's `PT_NOTE` header.
fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    println!("cargo:rustc-link-arg-bins=--no-pie");
    println!("cargo:rustc-link-arg-bins=-T{dir}/linker.ld");
    println!("cargo:rerun-if-changed=linker.ld");
}
