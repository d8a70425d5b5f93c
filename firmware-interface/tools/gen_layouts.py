#!/usr/bin/env python3
"""Bootstraps uhca-fwif's PRM layout declarations and its copy of the reference rows.

Usage: python3 firmware-interface/tools/gen_layouts.py PRM_DIR

PRM_DIR holds the PRM reference tables, names and numbers only, in the format of the rows
this script keeps in tests/prm/: prm_layouts.csv (one row per field of a PRM layout:
struct, field, bit offset, bit width, where the layout is declared, its kind),
datapath_layouts.csv (the same in bytes, for the datapath structures) and constants.csv
(group, name, value, where it is declared). The tables in tests/prm/ are such a folder for
every layout the crate already declares. From them it writes:
  * src/{cmd,ctx,init_seg}/layouts.rs: one `prm_struct!` declaration per layout, one line per
    field (name, bit offset, width, Rust kind);
  * tests/prm/*.csv: the reference rows, unchanged, of every layout and constant group the
    crate declares, which the conformance test checks the declarations against.

The declarations are ordinary source from then on: edit them by hand, and the conformance
test keeps them honest. Re-running this script overwrites them.
"""
import csv
import os
import sys

if len(sys.argv) != 2:
    sys.exit(__doc__)
PRM = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.dirname(HERE)

COMMANDS = """enable_hca disable_hca query_issi set_issi query_pages manage_pages query_hca_cap
set_hca_cap init_hca teardown_hca access_register query_special_contexts alloc_uar dealloc_uar
create_eq destroy_eq query_eq alloc_pd dealloc_pd alloc_transport_domain
dealloc_transport_domain create_mkey destroy_mkey query_mkey create_cq destroy_cq query_cq
modify_cq create_qp destroy_qp query_qp rst2init_qp init2rtr_qp rtr2rts_qp rts2rts_qp
sqerr2rts_qp qp_2err qp_2rst create_srq destroy_srq query_srq arm_rq query_nic_vport_context
modify_nic_vport_context query_hca_vport_context query_hca_vport_gid query_hca_vport_pkey
query_vport_state set_roce_address query_roce_address mad_ifc alloc_q_counter
query_q_counter""".split()

GROUPS = {
    "cmd": ["mbox_in", "mbox_out"] + [f"{c}_{d}" for c in COMMANDS for d in ("in", "out")],
    "ctx": """cmd_hca_cap roce_cap cqc eqc qpc ads mkc srqc nic_vport_context
hca_vport_context roce_addr_layout mac_address_layout modify_nic_vport_field_select
register_host_endianness""".split(),
    "init_seg": ["initial_seg", "health_buffer"],
}
CTX_OF = {n: "crate::ctx" for n in GROUPS["ctx"]}
CTX_OF.update({n: "crate::init_seg" for n in GROUPS["init_seg"]})

KEYWORDS = {"type", "match", "ref", "mod", "override", "box", "in", "fn", "use", "loop", "move", "static", "struct", "trait", "where", "yield", "as", "const", "crate", "enum", "extern", "impl", "let", "mut", "pub", "return", "self", "super", "unsafe", "while", "abstract", "become", "do", "final", "macro", "priv", "typeof", "unsized", "virtual", "async", "await", "dyn", "try", "gen"}


def camel(name):
    return "".join(p[:1].upper() + p[1:] for p in name.split("_"))


def ident(name):
    name = name.replace(".", "__")
    return "r#" + name if name in KEYWORDS else name


def setter(name):
    return "set_" + name.replace(".", "__")


def kind_of(r):
    t, w, off = r["type"], int(r["bit_width"]), int(r["bit_offset"])
    if r["array_count"] == "flex":
        eb = int(r["elem_bits"] or 8)
        return "flex", f"[u8; {max(eb // 8, 1)}]"
    if t.startswith("struct "):
        inner = t.split()[1][len("mlx5_ifc_"):-len("_bits")]
        mod = CTX_OF.get(inner)
        if mod:
            return "struct", f"{mod}::{camel(inner)}"
        return "bytes", None
    if t.startswith("union ") or t in ("anon_union", "anon_struct"):
        if w <= 32 and off % 32 + w <= 32:
            return "scalar", "u32"
        return "bytes", None
    if w == 1:
        return "scalar", "bool"
    for b, ty in ((8, "u8"), (16, "u16"), (32, "u32"), (64, "u64")):
        if w <= b:
            return "scalar", ty
    return "bytes", None


def main():
    rows = list(csv.DictReader(open(os.path.join(PRM, "prm_layouts.csv"), newline="")))
    header = open(os.path.join(PRM, "prm_layouts.csv")).readline()
    by = {}
    for r in rows:
        by.setdefault(r["struct"], []).append(r)
    kept = []
    for group, names in GROUPS.items():
        out = [
            "// Declarations bootstrapped by tools/gen_layouts.py from the PRM reference tables;",
            "// maintained by hand since. The conformance test checks every line.",
            "#![allow(missing_docs)]",
            "",
            "crate::prm_struct! {",
        ]
        for n in names:
            tag = f"mlx5_ifc_{n}_bits"
            fields = by[tag]
            kept.extend(fields)
            size = int(fields[0]["bit_width"])
            assert fields[0]["field"] == "__size__"
            out.append(f"    /// PRM `{n}`.")
            out.append(f"    pub struct {camel(n)} : {n} = \"{tag}\", {size} bits {{")
            for r in fields[1:]:
                f = r["field"]
                k, ty = kind_of(r)
                off, w = r["bit_offset"], r["bit_width"]
                fid = ident(f)
                if k == "flex":
                    out.append(f"        {fid} @ {off} : flex {ty};")
                elif k == "struct":
                    out.append(f"        {fid} / {fid.replace('r#','')}_mut @ {off}, {w} : struct {ty};")
                elif k == "bytes":
                    out.append(f"        {fid} / {fid.replace('r#','')}_mut @ {off}, {w} : [u8];")
                else:
                    out.append(f"        {fid} / {setter(f)} @ {off}, {w} : {ty};")
            out.append("    }")
        out.append("}")
        path = os.path.join(CRATE, "src", group, "layouts.rs")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").write("\n".join(out) + "\n")


if __name__ == "__main__" and "--rows-only" not in sys.argv:
    main()


# The datapath structs and constant groups the crate declares; their reference rows are
# copied unchanged into tests/prm/ (run with --rows-only to refresh just the copies).
DATAPATH = """mlx5_cmd_layout mlx5_cmd_prot_block mlx5_wqe_ctrl_seg mlx5_wqe_raddr_seg
mlx5_wqe_atomic_seg mlx5_wqe_data_seg mlx5_wqe_inline_seg mlx5_av mlx5_wqe_datagram_seg
mlx5_wqe_eth_seg mlx5_wqe_srq_next_seg mlx5_cqe64 mlx5_err_cqe mlx5_eqe mlx5_eqe_cmd
mlx5_eqe_comp mlx5_eqe_page_req mlx5_eqe_port_state mlx5_eqe_cq_err mlx5_eqe_qp_srq""".split()
CONST_GROUPS = """cmd_opcode cmd_status cmd_delivery_status cmd_interface wqe_opcode wqe_ctrl
cqe_opcode cqe_syndrome cqe_misc doorbell uar_blueflame event_type event_port_change_subtype
qpc_state qpc_service_type mkey_access_mode query_pages_op_mod manage_pages_op_mod
hca_cap_type hca_cap_mode port_type_cap""".split()


def copy_rows(src, dst, keep):
    with open(os.path.join(PRM, src), newline="") as f:
        header = f.readline()
        lines = f.read().splitlines(keepends=True)
    rows = list(csv.reader(lines))
    with open(os.path.join(CRATE, "tests", "prm", dst), "w", newline="") as f:
        f.write(header)
        for line, r in zip(lines, rows):
            if keep(r):
                f.write(line if line.endswith("\n") else line + "\n")


def rows_main():
    tags = {f"mlx5_ifc_{n}_bits" for names in GROUPS.values() for n in names}
    copy_rows("prm_layouts.csv", "prm_layouts.csv", lambda r: r[0] in tags)
    copy_rows("datapath_layouts.csv", "datapath_layouts.csv", lambda r: r[0] in DATAPATH)
    copy_rows("constants.csv", "constants.csv", lambda r: r[0] in CONST_GROUPS)


if __name__ == "__main__":
    rows_main()
