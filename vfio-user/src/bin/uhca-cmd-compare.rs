//! `uhca-cmd-compare`: another driver's commands and uhca's, side by side, field by field.
//!
//! ```text
//! uhca-cmd-compare --reference NAME DUMP[@FN,...] --uhca DUMP[@FN,...]... --expected FILE
//!                  [--reference-window OPEN..CLOSE] [--require KIND,...]
//! ```
//!
//! Reads command dumps written by `uhca-vfio-user-server --command-dump`: the reference
//! driver's (Linux's `mlx5_core`/`mlx5_ib`, or rdma-core's VFIO provider) and uhca's. A dump
//! may be followed by `@` and a comma-separated list of function path endings
//! (`vfio-user-infiniband.cmds@fn0.sock,fn1.sock`): only those functions' commands are
//! read. Every input is decoded with the `uhca-fwif` layouts and the two drivers' commands
//! are lined up by kind (the opcode's PRM name and op_mod, the QP's service type, the
//! register, the MAD attribute, the mkey's access mode): see `uhca_vfio_user::cmdlog`. For
//! each kind both sent it prints every field whose values differ, the reference's and
//! uhca's, and one PASS or FAIL line: FAIL when a field differs that is not an object
//! number, an address or a PSN and not listed with its reason in the expectations FILE
//! (`KIND FIELD REASON`, a `*` at the end of KIND matches any kind with that start).
//! `--reference-window OPEN..CLOSE` (opcode names) keeps only the reference's commands from
//! each OPEN through the next CLOSE, per function (`ALLOC_TRANSPORT_DOMAIN..DEALLOC_TRANSPORT_DOMAIN`:
//! what Linux's user contexts, libmlx5, asked for; see `cmdlog::select_windows`).
//! `--require` names opcodes (PRM names without `MLX5_CMD_OP_`), or whole kinds as printed
//! after `==` (`CREATE_QP/op_mod=0x0/st=RC`), that both logs must hold: a FAIL line for each
//! one missing. The lines start with `NAME-vs-uhca:` (NAME in lower case).
//! Exits 1 when any line is FAIL, 2 on bad input.

use std::process::ExitCode;
use uhca_vfio_user::cmdlog::{
    DumpedCommand, FieldVerdict, compare, opcode_by_name, parse_dump, parse_expected,
    select_functions, select_windows, show,
};

struct Args {
    name: String,
    reference: String,
    uhca: Vec<String>,
    expected: String,
    require: Vec<String>,
    window: Option<(u16, u16)>,
}

const USAGE: &str = "usage: uhca-cmd-compare --reference NAME DUMP[@FN,...] --uhca DUMP[@FN,...]... --expected FILE [--reference-window OPEN..CLOSE] [--require KIND,...]";

/// `OPEN..CLOSE`: two opcode names.
fn parse_window(s: &str) -> Result<(u16, u16), String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("--reference-window {s}: expected OPEN..CLOSE"))?;
    let op = |n: &str| opcode_by_name(n).ok_or_else(|| format!("no opcode named {n}"));
    Ok((op(a)?, op(b)?))
}

fn parse() -> Result<Args, String> {
    let (mut reference, mut uhca, mut expected, mut require) = (None, Vec::new(), None, Vec::new());
    let mut window = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .ok_or_else(|| format!("{a} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--reference" => reference = Some((val()?, val()?)),
            "--uhca" => uhca.push(val()?),
            "--expected" => expected = Some(val()?),
            "--require" => require.extend(val()?.split(',').map(str::to_string)),
            "--reference-window" => window = Some(parse_window(&val()?)?),
            _ => return Err(USAGE.into()),
        }
    }
    match (reference, expected) {
        (Some((name, reference)), Some(expected)) if !uhca.is_empty() => Ok(Args {
            name,
            reference,
            uhca,
            expected,
            require,
            window,
        }),
        _ => Err(USAGE.into()),
    }
}

fn read(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))
}

/// Reads `DUMP[@FN,...]`: the dump's commands of the functions named, or all.
fn read_dump(arg: &str) -> Result<Vec<DumpedCommand>, String> {
    let (path, fns) = match arg.split_once('@') {
        Some((p, f)) => (p, f.split(',').filter(|s| !s.is_empty()).collect()),
        None => (arg, Vec::new()),
    };
    let cmds = parse_dump(&read(path)?).map_err(|e| format!("{path}: {e}"))?;
    let n = cmds.len();
    let kept = select_functions(cmds, &fns);
    if kept.is_empty() && n > 0 {
        return Err(format!("{path}: no command of the functions {fns:?}"));
    }
    Ok(kept)
}

fn main() -> ExitCode {
    let run = || -> Result<bool, String> {
        let a = parse()?;
        let mut reference = read_dump(&a.reference)?;
        if let Some((open, close)) = a.window {
            reference = select_windows(reference, open, close);
            if reference.is_empty() {
                return Err(format!("{}: no command inside the window", a.reference));
            }
        }
        let mut uhca = Vec::new();
        for p in &a.uhca {
            uhca.extend(read_dump(p)?);
        }
        let name = &a.name;
        let tag = format!("{}-vs-uhca", name.to_lowercase());
        let expected =
            parse_expected(&read(&a.expected)?).map_err(|e| format!("{}: {e}", a.expected))?;
        let cmp = compare(&reference, &uhca, &expected);
        println!(
            "{tag}: {name} sent {} commands, uhca {}; {} kinds in common, {} only {name}'s, {} only uhca's",
            reference.len(),
            uhca.len(),
            cmp.common.len(),
            cmp.only_reference.len(),
            cmp.only_uhca.len()
        );
        let mut verdicts = Vec::new();
        for k in &cmp.common {
            println!(
                "== {}: {name} {}, uhca {}; {} fields alike, {} differ",
                k.kind,
                k.reference_count,
                k.uhca_count,
                k.same,
                k.differing.len()
            );
            let mut unexplained = Vec::new();
            let (mut explained, mut objects) = (0, 0);
            for f in &k.differing {
                let what = match &f.verdict {
                    FieldVerdict::ObjectOrAddress => {
                        objects += 1;
                        "object/address".to_string()
                    }
                    FieldVerdict::Explained(r) => {
                        explained += 1;
                        format!("explained: {r}")
                    }
                    FieldVerdict::Unexplained => {
                        unexplained.push(f);
                        "NOT EXPLAINED".to_string()
                    }
                };
                println!(
                    "   {}: {name} {}  uhca {}  ({what})",
                    f.field,
                    show(&f.reference),
                    show(&f.uhca)
                );
            }
            if unexplained.is_empty() {
                verdicts.push(format!(
                    "PASS {tag}: {}: {} fields alike, {explained} differ as explained, {objects} object/address",
                    k.kind, k.same
                ));
            }
            for f in unexplained {
                verdicts.push(format!(
                    "FAIL {tag}: {} {}: {name} {}, uhca {}; not explained in {}",
                    k.kind,
                    f.field,
                    show(&f.reference),
                    show(&f.uhca),
                    a.expected
                ));
            }
        }
        for (kind, n) in &cmp.only_reference {
            println!("only {name} sent: {kind} ({n})");
        }
        for (kind, n) in &cmp.only_uhca {
            println!("only uhca sent: {kind} ({n})");
        }
        for line in &cmp.unused_expectations {
            println!(
                "note: {} line {line} explains a difference not seen in these logs",
                a.expected
            );
        }
        for r in &a.require {
            let start = format!("{r}/");
            let found = cmp
                .common
                .iter()
                .any(|k| k.kind == *r || k.kind.starts_with(&start));
            verdicts.push(format!(
                "{} {tag}: {r} in both drivers' logs",
                if found { "PASS" } else { "FAIL" }
            ));
        }
        let failed = verdicts.iter().filter(|v| v.starts_with("FAIL")).count();
        for v in &verdicts {
            println!("{v}");
        }
        println!("{tag}: {} passed, {failed} failed", verdicts.len() - failed);
        Ok(failed == 0)
    };
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("uhca-cmd-compare: {e}");
            ExitCode::from(2)
        }
    }
}
