//! Commands with their bytes: what `uhca-vfio-user-server --command-dump FILE` writes, how
//! `uhca-cmd-compare` reads it back, decodes each input field by field with the
//! `uhca-fwif` layouts and lines up two drivers' commands.
//!
//! # The dump
//!
//! One line per command the firmware executed, in order, for every function the server
//! serves (the socket's path names the function):
//!
//! ```text
//! cmd /tmp/x/fn0.sock opcode=0x0104 op_mod=0x0 status=0x00 in=0104000000000000... out=00000000...
//! ```
//!
//! `in` is the whole input as the firmware read it (the entry's inline part and the mailbox
//! blocks' data, `inlen` bytes), `out` the output it wrote (`outlen` bytes; empty when it
//! wrote none), both in hex.
//!
//! # The comparison
//!
//! Each command is decoded with its input layout ([`uhca_fwif::cmd::COMMANDS`]), nested
//! contexts included (the QPC and its address paths, CQC, EQC, MKC, the capability pages of
//! SET_HCA_CAP), into `path = value` pairs. Bits of the input that no declared field covers
//! become pseudo-fields (`undeclared@0x1c`, the dword's byte offset) when they are not zero, so a bit one
//! driver sets that the layouts do not know still shows; so do the low 12 bits of a
//! trailing array's entries (`pas[].low12`: an MTT entry's permission bits, or a page
//! address's offset, which must be zero). Commands are grouped by kind
//! ([`CommandKind`]: the opcode's PRM name and op_mod, with the QP's service type for QP
//! commands, the register for ACCESS_REGISTER, the access mode for CREATE_MKEY), and for
//! each kind both drivers send, each field's set of values over all of one driver's
//! commands of that kind is set against the other's. Fields that hold object numbers,
//! addresses or per-connection random numbers (a CQN, a doorbell record's IOVA, a PSN) differ
//! by nature: they are reported as such and never count as a difference.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use uhca_fwif::consts::{CmdOpcode, QpServiceType};
use uhca_fwif::field::{Field, LayoutInfo, PrmLayout, get_bits};
use uhca_fwif::{cmd, ctx};

/// One command read back from a dump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DumpedCommand {
    /// The function (the server's socket path) that executed it.
    pub function: String,
    /// The opcode from the input header.
    pub opcode: u16,
    /// op_mod from the input header.
    pub op_mod: u16,
    /// The status the firmware answered.
    pub status: u8,
    /// The input bytes.
    pub input: Vec<u8>,
    /// The output bytes (empty when none was written).
    pub output: Vec<u8>,
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

fn unhex(s: &str) -> Result<Vec<u8>, String> {
    if !s.len().is_multiple_of(2) {
        return Err(format!("odd number of hex digits ({})", s.len()));
    }
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| format!("not hex at {i}"))
        })
        .collect()
}

/// The dump line of one command executed by `function`.
pub fn dump_line(function: &str, c: &uhca_mock::CommandBytes) -> String {
    format!(
        "cmd {} opcode=0x{:04x} op_mod=0x{:x} status=0x{:02x} in={} out={}",
        function.replace(char::is_whitespace, "_"),
        c.record.opcode.raw(),
        c.record.op_mod,
        c.record.status.raw(),
        hex(&c.input),
        hex(&c.output)
    )
}

/// Reads one dump line: `Ok(None)` for a line that is not a command (blank, a comment),
/// an error naming what is wrong for a malformed one.
pub fn parse_line(line: &str) -> Result<Option<DumpedCommand>, String> {
    let mut words = line.split_whitespace();
    if words.next() != Some("cmd") {
        return Ok(None);
    }
    let function = words.next().ok_or("no function")?.to_string();
    let mut get = |name: &str| -> Result<&str, String> {
        let w = words.next().ok_or_else(|| format!("no {name}"))?;
        w.strip_prefix(name)
            .and_then(|v| v.strip_prefix('='))
            .ok_or_else(|| format!("expected {name}=, found {w}"))
    };
    let num = |s: &str| -> Result<u64, String> {
        u64::from_str_radix(s.trim_start_matches("0x"), 16).map_err(|e| format!("{s}: {e}"))
    };
    let opcode = num(get("opcode")?)? as u16;
    let op_mod = num(get("op_mod")?)? as u16;
    let status = num(get("status")?)? as u8;
    let input = unhex(get("in")?)?;
    let output = unhex(get("out")?)?;
    Ok(Some(DumpedCommand {
        function,
        opcode,
        op_mod,
        status,
        input,
        output,
    }))
}

/// Keeps the commands of the functions whose path ends with one of `suffixes` (all of them
/// when `suffixes` is empty).
pub fn select_functions(cmds: Vec<DumpedCommand>, suffixes: &[&str]) -> Vec<DumpedCommand> {
    if suffixes.is_empty() {
        return cmds;
    }
    cmds.into_iter()
        .filter(|c| suffixes.iter().any(|s| c.function.ends_with(s)))
        .collect()
}

/// The opcode whose PRM name (without `MLX5_CMD_OP_`) is `name`.
pub fn opcode_by_name(name: &str) -> Option<u16> {
    CmdOpcode::PRM_VALUES
        .iter()
        .find(|(n, _)| n.strip_prefix("MLX5_CMD_OP_") == Some(name))
        .map(|&(_, v)| v as u16)
}

/// Keeps, per function, the commands from each `open` command through the next `close`
/// command, both included; the commands outside such a window are dropped. A window left
/// open at the end keeps what it holds.
///
/// Linux's `mlx5_ib` allocates a transport domain when a process opens the device (a user
/// context) and frees it when the context goes: the window ALLOC_TRANSPORT_DOMAIN ..
/// DEALLOC_TRANSPORT_DOMAIN holds what rdma-core's libmlx5 asked for through `ib_uverbs`,
/// without the kernel's own objects (its bring-up, `mlx5_ib`'s special QPs and caches).
pub fn select_windows(cmds: Vec<DumpedCommand>, open: u16, close: u16) -> Vec<DumpedCommand> {
    let mut inside: HashMap<String, bool> = HashMap::new();
    cmds.into_iter()
        .filter(|c| {
            let w = inside.entry(c.function.clone()).or_default();
            if c.opcode == open {
                *w = true;
                true
            } else if c.opcode == close && *w {
                *w = false;
                true
            } else {
                *w
            }
        })
        .collect()
}

/// Reads a whole dump; errors carry the line number.
pub fn parse_dump(text: &str) -> Result<Vec<DumpedCommand>, String> {
    let mut v = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if let Some(c) = parse_line(line).map_err(|e| format!("line {}: {e}", i + 1))? {
            v.push(c);
        }
    }
    Ok(v)
}

/// The layout nested in a field of this name (the contexts inside commands).
fn nested(name: &str) -> Option<&'static LayoutInfo> {
    Some(match name {
        "qpc" => &ctx::Qpc::LAYOUT,
        "primary_address_path" | "secondary_address_path" => &ctx::Ads::LAYOUT,
        "cq_context" => &ctx::Cqc::LAYOUT,
        "eq_context_entry" => &ctx::Eqc::LAYOUT,
        "memory_key_mkey_entry" => &ctx::Mkc::LAYOUT,
        "srq_context_entry" => &ctx::Srqc::LAYOUT,
        "ctx" | "rmp_context" => &ctx::Rmpc::LAYOUT,
        "wq" => &ctx::Wq::LAYOUT,
        "bitmask" => &ctx::RmpBitmask::LAYOUT,
        "nic_vport_context" => &ctx::NicVportContext::LAYOUT,
        "field_select" => &ctx::ModifyNicVportFieldSelect::LAYOUT,
        "hca_vport_context" => &ctx::HcaVportContext::LAYOUT,
        "roce_address" => &ctx::RoceAddrLayout::LAYOUT,
        "permanent_address" => &ctx::MacAddressLayout::LAYOUT,
        "query_adapter_struct" => &ctx::QueryAdapterParamBlock::LAYOUT,
        _ => return None,
    })
}

/// The capability page layout of a SET_HCA_CAP `op_mod` (`op_mod[15:1]` is the type).
fn capability_layout(op_mod: u16) -> Option<&'static LayoutInfo> {
    match op_mod >> 1 {
        0 => Some(&ctx::CmdHcaCap::LAYOUT),
        3 => Some(&ctx::AtomicCaps::LAYOUT),
        4 => Some(&ctx::RoceCap::LAYOUT),
        _ => None,
    }
}

/// Whether a field (by its last name) holds an object number the device handed out, an
/// address (IOVA, page offset, LID, GID, MAC of a peer) or a number chosen at random per
/// connection (PSNs): values that differ between two drivers by nature.
pub fn is_object_or_address(name: &str) -> bool {
    const NAMES: &[&str] = &[
        "pd",
        "qpn",
        "cqn",
        "eqn",
        "c_eqn",
        "c_eqn_or_apu_element",
        "cqn_snd",
        "cqn_rcv",
        "srqn_rmpn_xrqn",
        "xrcd",
        "xrc_domain",
        "uar_page",
        "user_index",
        "remote_qpn",
        "deth_sqpn",
        "dbr_addr",
        "start_addr",
        "mkey_7_0",
        "mkey_index",
        "input_qpn",
        "counter_set_id",
        "transport_domain",
        "dbr_umem_id",
        "wq_umem_id",
        "wq_umem_offset",
        "rlid",
        "rgid_rip",
        "rmac_47_32",
        "rmac_31_0",
        "page_offset",
        "next_send_psn",
        "next_rcv_psn",
        "last_acked_psn",
        "eq_number",
        "uar",
        "srq_number",
        "srqn",
        "rmpn",
        "cq_umem_id",
        "cq_umem_offset",
        "mkey_umem_id",
        "mkey_umem_offset",
        "sw_owner_id",
        "gid",
        "remote_lid",
    ];
    NAMES.contains(&name)
}

/// One field's value, as text (`0x..` for a number, hex digits for a byte string).
type Value = String;

/// A decoded command: its kind and its fields (`path -> value`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// What the command is grouped under.
    pub kind: CommandKind,
    /// Every field of the input, by path (`qpc.primary_address_path.sl`).
    pub fields: BTreeMap<String, Value>,
}

/// What commands are lined up by: the opcode's PRM name and op_mod, with the QP's service
/// type for QP commands (`CREATE_QP/op_mod=0x0/st=RC`), the register for ACCESS_REGISTER,
/// the MAD's attribute for MAD_IFC (`MAD_IFC/op_mod=0x3/attr=0x0015`), the access mode for
/// CREATE_MKEY.
pub type CommandKind = String;

fn opcode_name(opcode: u16) -> String {
    CmdOpcode::from_raw(opcode)
        .prm_name()
        .map(|n| n.trim_start_matches("MLX5_CMD_OP_").to_string())
        .unwrap_or_else(|| format!("OPCODE_0x{opcode:04x}"))
}

/// Decodes `bytes` as `layout` at `base_bit`, into `out` under `prefix`; marks the bits it
/// covered in `covered` (one bit per input bit, offset by `base_bit`).
fn decode_layout(
    layout: &LayoutInfo,
    bytes: &[u8],
    base_bit: usize,
    prefix: &str,
    op_mod: u16,
    out: &mut BTreeMap<String, Value>,
    covered: &mut [bool],
) {
    for f in layout.fields {
        let Field {
            name,
            bit_offset,
            bit_width,
        } = *f;
        if bit_width == 0 {
            continue; // a flexible array after the fixed part: not compared
        }
        let off = base_bit + bit_offset as usize;
        let width = bit_width as usize;
        let path = format!("{prefix}{name}");
        let inner = if name == "capability" {
            capability_layout(op_mod)
        } else {
            nested(name)
        };
        if let Some(inner) = inner
            && inner.size_bits as usize <= width
        {
            decode_layout(inner, bytes, off, &format!("{path}."), op_mod, out, covered);
            continue;
        }
        if off + width > bytes.len() * 8 {
            continue; // beyond the input: reads as absent (zero)
        }
        for c in &mut covered[off..off + width] {
            *c = true;
        }
        let v = if width <= 64 {
            format!("0x{:x}", get_bits(bytes, off, width))
        } else {
            let b = &bytes[off / 8..(off + width).div_ceil(8)];
            // All zeros reads as a zero number, as a field beyond a shorter input does.
            if b.iter().all(|&x| x == 0) {
                "0x0".into()
            } else {
                hex(b)
            }
        };
        out.insert(path, v);
    }
}

/// The QP a successful CREATE_QP made: (function, qpn) and its service type.
fn created_qp(c: &DumpedCommand) -> Option<((String, u32), u8)> {
    if c.opcode != CmdOpcode::CreateQp.raw() || c.status != 0 || c.output.len() < 12 {
        return None;
    }
    let qpn = get_bits(&c.output, cmd::create_qp_out::qpn.bit_offset as usize, 24) as u32;
    let st_bit = cmd::create_qp_in::qpc.bit_offset as usize + ctx::qpc::st.bit_offset as usize;
    if c.input.len() * 8 < st_bit + 8 {
        return None;
    }
    let st = get_bits(&c.input, st_bit, 8) as u8;
    Some(((c.function.clone(), qpn), st))
}

/// The service types of the QPs alive at each point of a command sequence, so that a QP's
/// later commands are grouped with its kind (a QP number comes back once its QP is
/// destroyed, so the map follows the sequence).
#[derive(Clone, Debug, Default)]
pub struct QpTypes(HashMap<(String, u32), u8>);

impl QpTypes {
    /// Takes note of a command (a CREATE_QP that succeeded).
    pub fn follow(&mut self, c: &DumpedCommand) {
        if let Some((k, st)) = created_qp(c) {
            self.0.insert(k, st);
        }
    }
}

fn st_name(st: u8) -> String {
    QpServiceType::from_raw(st)
        .prm_name()
        .map(|n| n.trim_start_matches("MLX5_QPC_ST_").to_string())
        .unwrap_or_else(|| format!("0x{st:x}"))
}

/// Bit offset of `AttributeID` in a MAD's common header (IB specification 13.4.2: base
/// version, class, class version, method, status, class specific, transaction id, then the
/// attribute id at byte 16).
const MAD_ATTRIBUTE_ID_BIT: usize = 16 * 8;

/// QP commands that name an existing QP in `qpn` at bit 72 of the input.
fn names_a_qp(opcode: CmdOpcode) -> bool {
    use CmdOpcode::*;
    matches!(
        opcode,
        Rst2initQp
            | Init2initQp
            | Init2rtrQp
            | Rtr2rtsQp
            | Rts2rtsQp
            | Sqerr2rtsQp
            | Qp2err
            | Qp2rst
            | DestroyQp
            | QueryQp
    )
}

/// Decodes one command's input.
pub fn decode(c: &DumpedCommand, qp_st: &QpTypes) -> Decoded {
    let opcode = CmdOpcode::from_raw(c.opcode);
    let mut kind = format!("{}/op_mod=0x{:x}", opcode_name(c.opcode), c.op_mod);
    let bits = |off: usize, w: usize| {
        if c.input.len() * 8 >= off + w {
            Some(get_bits(&c.input, off, w))
        } else {
            None
        }
    };
    if opcode == CmdOpcode::AccessReg
        && let Some(r) = bits(cmd::access_register_in::register_id.bit_offset as usize, 16)
    {
        let _ = write!(kind, "/register=0x{r:04x}");
    }
    if opcode == CmdOpcode::MadIfc {
        // The MAD's attribute: which query it is (NodeInfo, PortInfo, ...).
        let attr = cmd::mad_ifc_in::mad.bit_offset as usize + MAD_ATTRIBUTE_ID_BIT;
        if let Some(a) = bits(attr, 16) {
            let _ = write!(kind, "/attr=0x{a:04x}");
        }
    }
    if opcode == CmdOpcode::CreateQp {
        let off = cmd::create_qp_in::qpc.bit_offset as usize + ctx::qpc::st.bit_offset as usize;
        if let Some(st) = bits(off, 8) {
            let _ = write!(kind, "/st={}", st_name(st as u8));
        }
    }
    if names_a_qp(opcode)
        && let Some(qpn) = bits(72, 24)
    {
        let st = qp_st
            .0
            .get(&(c.function.clone(), qpn as u32))
            .map(|&s| st_name(s))
            .unwrap_or_else(|| "?".into());
        let _ = write!(kind, "/st={st}");
    }
    if opcode == CmdOpcode::CreateMkey {
        let base = cmd::create_mkey_in::memory_key_mkey_entry.bit_offset as usize;
        if let (Some(lo), Some(hi)) = (
            bits(base + ctx::mkc::access_mode_1_0.bit_offset as usize, 2),
            bits(base + ctx::mkc::access_mode_4_2.bit_offset as usize, 3),
        ) {
            let _ = write!(kind, "/access_mode=0x{:x}", hi << 2 | lo);
        }
    }
    let mut fields = BTreeMap::new();
    let mut covered = vec![false; c.input.len() * 8];
    // The header's uid and op_mod/opcode are read by every layout; cover them once here.
    let layout = cmd::COMMANDS
        .iter()
        .find(|(op, _, _)| *op == opcode)
        .map(|(_, i, _)| *i);
    match layout {
        Some(l) => {
            decode_layout(l, &c.input, 0, "", c.op_mod, &mut fields, &mut covered);
            if !l.fields.iter().any(|f| f.bit_width == 0) {
                // A fixed-size input: its length is the driver's choice too.
                fields.insert("(inlen)".into(), format!("0x{:x}", c.input.len()));
            } else {
                // A flexible array follows: its length follows the object's size and its
                // entries are addresses, so neither is compared; but the low 12 bits of
                // its 8-byte entries are flags or must be zero (the permission bits of an
                // MTT entry; a page address's offset), so their union is.
                let fixed = l.size_bits as usize;
                for b in covered.iter_mut().skip(fixed) {
                    *b = true;
                }
                for f in l.fields.iter().filter(|f| f.bit_width == 0) {
                    let start = f.bit_offset as usize / 8;
                    if let Some(rest) = c.input.get(start..) {
                        let low = rest.chunks_exact(8).fold(0u64, |acc, e| {
                            acc | (u64::from_be_bytes([
                                e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7],
                            ]) & 0xfff)
                        });
                        fields.insert(format!("{}[].low12", f.name), format!("0x{low:x}"));
                    }
                }
            }
        }
        None => {
            decode_layout(
                &cmd::MboxIn::LAYOUT,
                &c.input,
                0,
                "",
                c.op_mod,
                &mut fields,
                &mut covered,
            );
            fields.insert("(inlen)".into(), format!("0x{:x}", c.input.len()));
        }
    }
    // Bits no declared field covers, per dword, when set.
    for (i, dw) in c.input.chunks(4).enumerate() {
        let mut v = 0u32;
        for (j, &b) in dw.iter().enumerate() {
            for k in 0..8 {
                let bit = i * 32 + j * 8 + k;
                if b & (0x80 >> k) != 0 && !covered[bit] {
                    v |= 1 << (31 - (j * 8 + k));
                }
            }
        }
        if v != 0 {
            fields.insert(format!("undeclared@0x{:x}", i * 4), format!("0x{v:08x}"));
        }
    }
    Decoded { kind, fields }
}

/// One explained difference: a command kind (a trailing `*` matches any kind with that
/// start), a field path and the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explained {
    /// The command kind, or its start followed by `*`.
    pub kind: String,
    /// The field path.
    pub field: String,
    /// Why the two drivers differ there.
    pub reason: String,
    /// The line of the expectations file.
    pub line: usize,
}

impl Explained {
    fn matches(&self, kind: &str, field: &str) -> bool {
        let k = match self.kind.strip_suffix('*') {
            Some(start) => kind.starts_with(start),
            None => kind == self.kind,
        };
        k && self.field == field
    }
}

/// Reads the expectations file: `KIND FIELD REASON...` per line, `#` comments and blank
/// lines ignored. A line without a reason is an error.
pub fn parse_expected(text: &str) -> Result<Vec<Explained>, String> {
    let mut v = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.splitn(3, char::is_whitespace);
        let (Some(kind), Some(field), Some(reason)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(format!("line {}: expected KIND FIELD REASON", i + 1));
        };
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(format!("line {}: no reason given", i + 1));
        }
        v.push(Explained {
            kind: kind.into(),
            field: field.into(),
            reason: reason.into(),
            line: i + 1,
        });
    }
    Ok(v)
}

/// How a field whose values differ between the drivers is judged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldVerdict {
    /// An object number, address or random number: differs by nature.
    ObjectOrAddress,
    /// The drivers differ, for the reason given in the expectations.
    Explained(String),
    /// The drivers differ and nothing explains it.
    Unexplained,
}

/// One field of one command kind, both drivers' values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldComparison {
    /// The field path.
    pub field: String,
    /// The values the reference driver (Linux, rdma-core) used, over all its commands of
    /// the kind.
    pub reference: BTreeSet<Value>,
    /// The values uhca used.
    pub uhca: BTreeSet<Value>,
    /// The verdict.
    pub verdict: FieldVerdict,
}

/// One command kind both drivers sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KindComparison {
    /// The kind.
    pub kind: CommandKind,
    /// How many commands of the kind the reference driver sent.
    pub reference_count: usize,
    /// How many uhca sent.
    pub uhca_count: usize,
    /// The fields whose values are not the same (the others are left out).
    pub differing: Vec<FieldComparison>,
    /// How many fields were the same.
    pub same: usize,
}

/// The whole comparison.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Comparison {
    /// The kinds both sent, in kind order.
    pub common: Vec<KindComparison>,
    /// Kinds only the reference driver sent, with how many.
    pub only_reference: Vec<(CommandKind, usize)>,
    /// Kinds only uhca sent, with how many.
    pub only_uhca: Vec<(CommandKind, usize)>,
    /// Expectations that matched no difference (the drivers now agree, or the command is
    /// no longer sent), by line.
    pub unused_expectations: Vec<usize>,
}

fn group(cmds: &[DumpedCommand]) -> BTreeMap<CommandKind, Vec<BTreeMap<String, Value>>> {
    let mut st = QpTypes::default();
    let mut g: BTreeMap<CommandKind, Vec<_>> = BTreeMap::new();
    for c in cmds {
        let d = decode(c, &st);
        st.follow(c);
        g.entry(d.kind).or_default().push(d.fields);
    }
    g
}

/// Lines up a reference driver's commands (Linux's, rdma-core's) with uhca's by kind and
/// compares them field by field.
pub fn compare(
    reference: &[DumpedCommand],
    uhca: &[DumpedCommand],
    expected: &[Explained],
) -> Comparison {
    let l = group(reference);
    let u = group(uhca);
    let mut cmp = Comparison::default();
    let mut used = vec![false; expected.len()];
    for (kind, lc) in &l {
        let Some(uc) = u.get(kind) else {
            cmp.only_reference.push((kind.clone(), lc.len()));
            continue;
        };
        let paths: BTreeSet<&String> = lc.iter().chain(uc.iter()).flat_map(|m| m.keys()).collect();
        let values = |cs: &Vec<BTreeMap<String, Value>>, p: &str| -> BTreeSet<Value> {
            cs.iter()
                .map(|m| m.get(p).cloned().unwrap_or_else(|| "0x0".into()))
                .collect()
        };
        let mut k = KindComparison {
            kind: kind.clone(),
            reference_count: lc.len(),
            uhca_count: uc.len(),
            differing: Vec::new(),
            same: 0,
        };
        for p in paths {
            let (lv, uv) = (values(lc, p), values(uc, p));
            if lv == uv {
                k.same += 1;
                continue;
            }
            let last = p.rsplit('.').next().unwrap_or(p);
            let verdict = if is_object_or_address(last) {
                FieldVerdict::ObjectOrAddress
            } else if let Some(i) = expected.iter().position(|e| e.matches(kind, p)) {
                used[i] = true;
                FieldVerdict::Explained(expected[i].reason.clone())
            } else {
                FieldVerdict::Unexplained
            };
            k.differing.push(FieldComparison {
                field: p.clone(),
                reference: lv,
                uhca: uv,
                verdict,
            });
        }
        cmp.common.push(k);
    }
    for (kind, uc) in &u {
        if !l.contains_key(kind) {
            cmp.only_uhca.push((kind.clone(), uc.len()));
        }
    }
    cmp.unused_expectations = expected
        .iter()
        .zip(&used)
        .filter(|(_, u)| !**u)
        .map(|(e, _)| e.line)
        .collect();
    cmp
}

/// A set of values as text, at most eight of them.
pub fn show(values: &BTreeSet<Value>) -> String {
    let mut s: Vec<String> = values
        .iter()
        .take(8)
        .map(|v| {
            if v.len() > 40 {
                format!("{}…", &v[..40])
            } else {
                v.clone()
            }
        })
        .collect();
    if values.len() > 8 {
        s.push(format!("…(+{})", values.len() - 8));
    }
    s.join(",")
}
