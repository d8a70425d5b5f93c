//! Checks every layout and constant this crate declares against the PRM reference rows kept
//! in `tests/prm/` (copied unchanged from the project's PRM tables, which were computed from
//! Linux's, rdma-core's and DPDK's headers; the `source` column says where each row is from).
//!
//! A declared field that the reference does not know, or that disagrees with it, fails the
//! test. Nothing is skipped.
//!
//! This test binary has its own `main` (`harness = false`) so that `cargo test` always shows
//! what it checked: how many fields, sizes and constants, not just "ok".

use std::collections::HashMap;
use uhca_fwif::field::{ByteLayoutInfo, LayoutInfo};

/// Splits one CSV line, honouring double quotes.
fn split_csv(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => quoted = !quoted,
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// Reads a reference table into rows keyed by column name. Quoted fields may span lines.
fn read_table(name: &str) -> Vec<HashMap<String, String>> {
    let path = format!("{}/tests/prm/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut records = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        if !pending.is_empty() {
            pending.push('\n');
        }
        pending.push_str(line);
        if pending.matches('"').count().is_multiple_of(2) {
            records.push(split_csv(&std::mem::take(&mut pending)));
        }
    }
    let header = records.remove(0);
    records
        .into_iter()
        .map(|r| header.iter().cloned().zip(r).collect())
        .collect()
}

fn num(s: &str) -> u64 {
    let s = s.trim();
    if let Some(h) = s.strip_prefix("0x") {
        u64::from_str_radix(h, 16).unwrap()
    } else {
        s.parse().unwrap_or_else(|_| panic!("not a number: {s:?}"))
    }
}

fn rust_to_prm_name(name: &str) -> String {
    name.trim_start_matches("r#").replace("__", ".")
}

fn all_prm_layouts() -> Vec<LayoutInfo> {
    let mut v = Vec::new();
    v.extend_from_slice(uhca_fwif::cmd::LAYOUTS);
    v.extend_from_slice(uhca_fwif::ctx::LAYOUTS);
    v.extend_from_slice(uhca_fwif::init_seg::LAYOUTS);
    v
}

fn all_byte_layouts() -> Vec<ByteLayoutInfo> {
    let mut v = Vec::new();
    v.extend_from_slice(uhca_fwif::cmdq::BYTE_LAYOUTS);
    v.extend_from_slice(uhca_fwif::wqe::BYTE_LAYOUTS);
    v.extend_from_slice(uhca_fwif::cqe::BYTE_LAYOUTS);
    v.extend_from_slice(uhca_fwif::eqe::BYTE_LAYOUTS);
    v
}

/// Returns the (offset, width) of the set bits, in big-endian bit numbering, or `None` if
/// they are not one contiguous run.
fn set_bit_run(buf: &[u8]) -> Option<(u32, u32)> {
    let bits: Vec<u32> = (0..buf.len() as u32 * 8)
        .filter(|&i| buf[(i / 8) as usize] & (0x80 >> (i % 8)) != 0)
        .collect();
    match (bits.first(), bits.last()) {
        (Some(&a), Some(&b)) if (b - a + 1) as usize == bits.len() => Some((a, b - a + 1)),
        (None, None) => Some((0, 0)),
        _ => None,
    }
}

fn prm_layouts_match_the_reference_field_by_field() {
    let rows = read_table("prm_layouts.csv");
    let mut by_struct: HashMap<&str, HashMap<&str, &HashMap<String, String>>> = HashMap::new();
    for r in &rows {
        by_struct
            .entry(&r["struct"])
            .or_default()
            .insert(&r["field"], r);
    }
    let mut errors = Vec::new();
    let (mut fields, mut sizes, mut setters) = (0, 0, 0);
    for layout in all_prm_layouts() {
        let Some(ref_fields) = by_struct.get(layout.prm_name) else {
            errors.push(format!("{}: not in the reference", layout.prm_name));
            continue;
        };
        let size = ref_fields.get("__size__").map(|r| num(&r["bit_width"]));
        if size != Some(layout.size_bits as u64) {
            errors.push(format!(
                "{}: size {} bits, reference {size:?}",
                layout.prm_name, layout.size_bits
            ));
        }
        sizes += 1;
        for (i, f) in layout.fields.iter().enumerate() {
            let name = rust_to_prm_name(f.name);
            let Some(r) = ref_fields.get(name.as_str()) else {
                errors.push(format!(
                    "{}.{name}: the reference does not know this field",
                    layout.prm_name
                ));
                continue;
            };
            let (off, width) = (num(&r["bit_offset"]), num(&r["bit_width"]));
            if (off, width) != (f.bit_offset as u64, f.bit_width as u64) {
                errors.push(format!(
                    "{}.{name}: declared at bit {} width {}, reference bit {off} width {width} ({})",
                    layout.prm_name, f.bit_offset, f.bit_width, r["source"]
                ));
            }
            fields += 1;
            // The generated setter must touch exactly the declared bits.
            let mut buf = vec![0u8; layout.size_bits as usize / 8];
            (layout.fill_field)(&mut buf, i);
            let expect = if f.bit_width == 0 {
                (0, 0)
            } else {
                (f.bit_offset, f.bit_width)
            };
            match set_bit_run(&buf) {
                Some(run) if run == expect => setters += 1,
                other => errors.push(format!(
                    "{}.{name}: setter wrote bits {other:?}, declared {expect:?}",
                    layout.prm_name
                )),
            }
        }
    }
    println!(
        "PRM layouts: {} layouts; {fields} fields and {sizes} sizes checked against the \
         reference; {setters} setters proven to write exactly their declared bits",
        all_prm_layouts().len()
    );
    assert!(
        errors.is_empty(),
        "{} disagreements:\n{}",
        errors.len(),
        errors.join("\n")
    );
    assert!(fields > 1000, "too few fields checked: {fields}");
}

fn datapath_layouts_match_the_reference() {
    let rows = read_table("datapath_layouts.csv");
    let aliases: HashMap<(&str, &str), &str> = uhca_fwif::wqe::AV_FIELD_ALIASES
        .iter()
        .map(|&(a, b)| (("mlx5_av", a), b))
        .chain(
            uhca_fwif::wqe::ETH_SEG_FIELD_ALIASES
                .iter()
                .map(|&(a, b)| (("mlx5_wqe_eth_seg", a), b)),
        )
        .collect();
    let mut errors = Vec::new();
    let (mut fields, mut sizes) = (0, 0);
    for layout in all_byte_layouts() {
        let find = |field: &str| {
            rows.iter()
                .find(|r| r["struct"] == layout.c_name && r["field"] == field)
        };
        match find("__size__") {
            Some(r) if num(&r["byte_size"]) == layout.size as u64 => sizes += 1,
            other => errors.push(format!(
                "{}: size {} bytes, reference {:?}",
                layout.c_name,
                layout.size,
                other.map(|r| &r["byte_size"])
            )),
        }
        for f in layout.fields {
            let rust = f.name.trim_start_matches("r#");
            let name = aliases.get(&(layout.c_name, rust)).copied().unwrap_or(rust);
            match find(name) {
                Some(r)
                    if num(&r["byte_offset"]) == f.byte_offset as u64
                        && num(&r["byte_size"]) == f.byte_size as u64 =>
                {
                    fields += 1
                }
                Some(r) => errors.push(format!(
                    "{}.{name}: declared at byte {} size {}, reference byte {} size {}",
                    layout.c_name, f.byte_offset, f.byte_size, r["byte_offset"], r["byte_size"]
                )),
                None => errors.push(format!(
                    "{}.{name}: the reference does not know this field",
                    layout.c_name
                )),
            }
        }
    }
    println!("datapath layouts: {fields} fields and {sizes} sizes checked against the reference");
    assert!(
        errors.is_empty(),
        "{} disagreements:\n{}",
        errors.len(),
        errors.join("\n")
    );
}

fn constants_match_the_reference() {
    let rows = read_table("constants.csv");
    let lookup = |group: Option<&str>, name: &str| -> Option<u64> {
        rows.iter()
            .find(|r| r["name"] == name && group.is_none_or(|g| r["group"] == g))
            .map(|r| num(&r["value"]))
    };
    let mut errors = Vec::new();
    let mut checked = 0;
    for (group, values) in uhca_fwif::consts::PRM_ENUMS {
        for &(name, value) in *values {
            match lookup(Some(group), name) {
                Some(v) if v == value => checked += 1,
                other => errors.push(format!("{group}.{name} = {value:#x}, reference {other:?}")),
            }
        }
    }
    let singles = uhca_fwif::consts::PRM_CONSTS
        .iter()
        .chain(uhca_fwif::consts::WqeCtrlFlags::PRM_VALUES);
    for &(name, value) in singles {
        match lookup(None, name) {
            Some(v) if v == value => checked += 1,
            other => errors.push(format!("{name} = {value:#x}, reference {other:?}")),
        }
    }
    println!("constants: {checked} values checked against the reference");
    assert!(
        errors.is_empty(),
        "{} disagreements:\n{}",
        errors.len(),
        errors.join("\n")
    );
    assert!(checked > 300, "too few constants checked: {checked}");
}

fn infiniband_spec_constants() {
    // IBA vol. 1, 14.2.5.6 PortInfo: PortState 1 Down, 2 Init, 3 Armed, 4 Active; MTU
    // encodings 1..5 for 256..4096 bytes. These are not PRM values, so they are checked here.
    use uhca_fwif::consts::{IbMtu, PortState};
    let states = [
        (1, PortState::Down),
        (2, PortState::Init),
        (3, PortState::Armed),
        (4, PortState::Active),
    ];
    for (v, s) in states {
        assert_eq!(PortState::from_raw(v), s);
    }
    for (enc, bytes) in [(1u8, 256u32), (2, 512), (3, 1024), (4, 2048), (5, 4096)] {
        assert_eq!(IbMtu::from_raw(enc).bytes(), Some(bytes));
        assert_eq!(IbMtu::from_bytes(bytes).map(IbMtu::raw), Some(enc));
    }
    assert_eq!(IbMtu::from_raw(9).bytes(), None);
}

fn every_command_links_its_opcode_and_output() {
    for (op, inp, out) in uhca_fwif::cmd::COMMANDS {
        assert_eq!(inp.fields[0].name, "opcode", "{}", inp.prm_name);
        assert_eq!((inp.fields[0].bit_offset, inp.fields[0].bit_width), (0, 16));
        assert!(op.prm_name().is_some(), "{op:?} has no PRM name");
        assert!(inp.prm_name.ends_with("_in_bits") && out.prm_name.ends_with("_out_bits"));
        let stem = |s: &'static str, suffix: &str| s.trim_end_matches(suffix).to_string();
        assert_eq!(
            stem(inp.prm_name, "_in_bits"),
            stem(out.prm_name, "_out_bits")
        );
        assert_eq!(
            (out.fields[0].name, out.fields[1].name),
            ("status", "syndrome")
        );
    }
    assert_eq!(uhca_fwif::cmd::COMMANDS.len(), 66);
}

fn reference_copy_is_unchanged_from_the_project_tables() {
    // The rows in tests/prm/ are facts copied verbatim. Where the project's shared tables
    // are beside the checkout (a developer machine, CI), prove that every kept row is
    // present there unchanged.
    let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/prm");
    if !shared.exists() {
        println!(
            "NOTE: {} not present; the copy could not be compared",
            shared.display()
        );
        return;
    }
    for name in ["prm_layouts.csv", "datapath_layouts.csv", "constants.csv"] {
        let original = std::fs::read_to_string(shared.join(name)).unwrap();
        let original: std::collections::HashSet<&str> = original.lines().collect();
        let copy =
            std::fs::read_to_string(format!("{}/tests/prm/{name}", env!("CARGO_MANIFEST_DIR")))
                .unwrap();
        for line in copy.lines() {
            assert!(
                original.contains(line),
                "{name}: row not in the project table: {line}"
            );
        }
    }
}

fn main() {
    let checks: [(&str, fn()); 6] = [
        (
            "prm_layouts_match_the_reference_field_by_field",
            prm_layouts_match_the_reference_field_by_field,
        ),
        (
            "datapath_layouts_match_the_reference",
            datapath_layouts_match_the_reference,
        ),
        (
            "constants_match_the_reference",
            constants_match_the_reference,
        ),
        ("infiniband_spec_constants", infiniband_spec_constants),
        (
            "every_command_links_its_opcode_and_output",
            every_command_links_its_opcode_and_output,
        ),
        (
            "reference_copy_is_unchanged_from_the_project_tables",
            reference_copy_is_unchanged_from_the_project_tables,
        ),
    ];
    let (mut passed, mut failed) = (0, 0);
    for (name, check) in checks {
        match std::panic::catch_unwind(check) {
            Ok(()) => {
                println!("conformance: {name} ... ok");
                passed += 1;
            }
            Err(_) => {
                println!("conformance: {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
