#!/usr/bin/env python3
"""Bootstraps src/consts.rs's enums from the PRM constants table.

Usage: python3 firmware-interface/tools/gen_consts.py PRM_DIR

PRM_DIR holds constants.csv (group, name, value, where it is declared), in the format of
tests/prm/constants.csv (see gen_layouts.py).
"""
import csv, os, sys
if len(sys.argv) != 2:
    sys.exit(__doc__)
PRM = sys.argv[1]
CRATE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (enum name, repr, group, prefix stripped from the C name, doc)
ENUMS = [
    ("CmdOpcode", "u16", "cmd_opcode", "MLX5_CMD_OP_", "Command opcodes (`MLX5_CMD_OP_*`), the `opcode` of every command input."),
    ("CmdStatus", "u8", "cmd_status", "MLX5_CMD_STAT_", "Command status (`mbox_out.status`)."),
    ("DeliveryStatus", "u8", "cmd_delivery_status", "MLX5_CMD_DELIVERY_STAT_", "Command delivery status (`cmd_layout.status_own >> 1`)."),
    ("WqeOpcode", "u8", "wqe_opcode", "MLX5_OPCODE_", "Send WQE opcodes (control segment `opcode`)."),
    ("CqeOpcode", "u8", "cqe_opcode", "MLX5_CQE_", "CQE opcodes (`op_own >> 4`)."),
    ("CqeSyndrome", "u8", "cqe_syndrome", "MLX5_CQE_SYNDROME_", "Error CQE syndromes (`mlx5_err_cqe.syndrome`)."),
    ("EventType", "u8", "event_type", "MLX5_EVENT_TYPE_", "Event queue entry types (`mlx5_eqe.type`)."),
    ("PortChangeSubtype", "u8", "event_port_change_subtype", "MLX5_PORT_CHANGE_SUBTYPE_", "Port change event sub-types (`mlx5_eqe.sub_type`)."),
    ("QpState", "u8", "qpc_state", "MLX5_QPC_STATE_", "QP states as the QP context holds them (`qpc.state`)."),
    ("QpServiceType", "u8", "qpc_service_type", "MLX5_QPC_ST_", "QP service types (`qpc.st`)."),
    ("MkcAccessMode", "u8", "mkey_access_mode", "MLX5_MKC_ACCESS_MODE_", "Memory key access modes (`mkc.access_mode_1_0`, with `access_mode_4_2`)."),
    ("QueryPagesOpMod", "u16", "query_pages_op_mod", "MLX5_QUERY_PAGES_IN_OP_MOD_", "QUERY_PAGES op_mod: which pages the firmware is asked about."),
    ("ManagePagesOpMod", "u16", "manage_pages_op_mod", "MLX5_PAGES_", "MANAGE_PAGES op_mod."),
    ("HcaCapType", "u16", "hca_cap_type", "MLX5_CAP_", "Capability types, `op_mod[15:1]` of QUERY_HCA_CAP and SET_HCA_CAP."),
    ("HcaCapMode", "u16", "hca_cap_mode", "HCA_CAP_OPMOD_", "`op_mod[0]` of QUERY_HCA_CAP: maximum or current capabilities."),
    ("PortTypeCap", "u8", "port_type_cap", "MLX5_CAP_PORT_TYPE_", "`cmd_hca_cap.port_type`."),
]

def camel(s):
    parts = s.lower().split("_")
    out = "".join(p[:1].upper() + p[1:] for p in parts)
    if out[:1].isdigit():
        out = "N" + out
    return out

rows = list(csv.DictReader(open(os.path.join(PRM, "constants.csv"), newline="")))
out = []
for name, repr_, group, prefix, doc in ENUMS:
    seen = set()
    out.append("prm_enum! {")
    out.append(f"    /// {doc}")
    out.append(f"    pub enum {name} : {repr_} = \"{group}\" {{")
    for r in rows:
        if r["group"] != group or not r["value"] or "driver" in r["note"]:
            continue
        v = int(r["value"], 0)
        if v in seen:
            continue
        seen.add(v)
        out.append(f"        {camel(r['name'][len(prefix):])} = {r['value']} => \"{r['name']}\",")
    out.append("    }")
    out.append("}")
    out.append("")
open(os.path.join(CRATE, "src", "consts", "enums.rs"), "w").write(
    "// Bootstrapped by tools/gen_consts.py from the PRM constants table; maintained by hand.\n\n"
    + "\n".join(out))
