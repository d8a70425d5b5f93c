//! `uhca-cmd-compare`: Linux's commands and uhca's, side by side, field by field.
//!
//! ```text
//! uhca-cmd-compare --linux DUMP --uhca DUMP... --expected FILE [--require NAME,...]
//! ```
//!
//! Reads command dumps written by `uhca-vfio-user-server --command-dump` (one of a function
//! Linux's `mlx5_core`/`mlx5_ib` drove, one or more of functions uhca drove), decodes every
//! input with the `uhca-fwif` layouts and lines the two drivers' commands up by kind (the
//! opcode's PRM name and op_mod, the QP's service type, the register, the mkey's access
//! mode): see `uhca_vfio_user::cmdlog`. For each kind both sent it prints every field whose
//! values differ, Linux's and uhca's, and one PASS or FAIL line: FAIL when a field differs
//! that is not an object number, an address or a PSN and not listed with its reason in the
//! expectations FILE (`KIND FIELD REASON`, a `*` at the end of KIND matches any kind with
//! that start). `--require` names opcodes (PRM names without `MLX5_CMD_OP_`) both logs must
//! hold: a FAIL line for each one missing. Exits 1 when any line is FAIL, 2 on bad input.

use std::process::ExitCode;
use uhca_vfio_user::cmdlog::{FieldVerdict, compare, parse_dump, parse_expected, show};

struct Args {
    linux: String,
    uhca: Vec<String>,
    expected: String,
    require: Vec<String>,
}

const USAGE: &str =
    "usage: uhca-cmd-compare --linux DUMP --uhca DUMP... --expected FILE [--require NAME,...]";

fn parse() -> Result<Args, String> {
    let (mut linux, mut uhca, mut expected, mut require) = (None, Vec::new(), None, Vec::new());
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .ok_or_else(|| format!("{a} needs a value\n{USAGE}"))
        };
        match a.as_str() {
            "--linux" => linux = Some(val()?),
            "--uhca" => uhca.push(val()?),
            "--expected" => expected = Some(val()?),
            "--require" => require.extend(val()?.split(',').map(str::to_string)),
            _ => return Err(USAGE.into()),
        }
    }
    match (linux, expected) {
        (Some(linux), Some(expected)) if !uhca.is_empty() => Ok(Args {
            linux,
            uhca,
            expected,
            require,
        }),
        _ => Err(USAGE.into()),
    }
}

fn read(path: &str) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"))
}

fn main() -> ExitCode {
    let run = || -> Result<bool, String> {
        let a = parse()?;
        let linux = parse_dump(&read(&a.linux)?).map_err(|e| format!("{}: {e}", a.linux))?;
        let mut uhca = Vec::new();
        for p in &a.uhca {
            uhca.extend(parse_dump(&read(p)?).map_err(|e| format!("{p}: {e}"))?);
        }
        let expected =
            parse_expected(&read(&a.expected)?).map_err(|e| format!("{}: {e}", a.expected))?;
        let cmp = compare(&linux, &uhca, &expected);
        println!(
            "linux-vs-uhca: Linux sent {} commands, uhca {}; {} kinds in common, {} only Linux's, {} only uhca's",
            linux.len(),
            uhca.len(),
            cmp.common.len(),
            cmp.only_linux.len(),
            cmp.only_uhca.len()
        );
        let mut verdicts = Vec::new();
        for k in &cmp.common {
            println!(
                "== {}: Linux {}, uhca {}; {} fields alike, {} differ",
                k.kind,
                k.linux_count,
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
                    "   {}: Linux {}  uhca {}  ({what})",
                    f.field,
                    show(&f.linux),
                    show(&f.uhca)
                );
            }
            if unexplained.is_empty() {
                verdicts.push(format!(
                    "PASS linux-vs-uhca: {}: {} fields alike, {explained} differ as explained, {objects} object/address",
                    k.kind, k.same
                ));
            }
            for f in unexplained {
                verdicts.push(format!(
                    "FAIL linux-vs-uhca: {} {}: Linux {}, uhca {}; not explained in {}",
                    k.kind,
                    f.field,
                    show(&f.linux),
                    show(&f.uhca),
                    a.expected
                ));
            }
        }
        for (kind, n) in &cmp.only_linux {
            println!("only Linux sent: {kind} ({n})");
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
            let found = cmp.common.iter().any(|k| k.kind.starts_with(&start));
            verdicts.push(format!(
                "{} linux-vs-uhca: {r} in both drivers' logs",
                if found { "PASS" } else { "FAIL" }
            ));
        }
        let failed = verdicts.iter().filter(|v| v.starts_with("FAIL")).count();
        for v in &verdicts {
            println!("{v}");
        }
        println!(
            "linux-vs-uhca: {} passed, {failed} failed",
            verdicts.len() - failed
        );
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
