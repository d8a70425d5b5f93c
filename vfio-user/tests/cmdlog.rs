//! The command dump and the comparison of two drivers' commands: the mock keeps every
//! command's bytes when asked (mailbox inputs included), the dump reads back as written, and
//! the comparer flags a field that differs, unless it is an object number or address or an
//! expectation explains it.

use uhca_driver::{Hca, HcaConfig};
use uhca_fwif::consts::CmdOpcode;
use uhca_fwif::field::{PrmLayout, get_bits, set_bits};
use uhca_fwif::zerocopy::IntoBytes;
use uhca_fwif::{cmd, ctx};
use uhca_mock::{ClockMode, LinkLayer, MockConfig, MockHca};
use uhca_vfio_user::cmdlog::{
    DumpedCommand, FieldVerdict, compare, decode, dump_line, parse_dump, parse_expected,
};

fn bring_up(record: bool) -> (MockHca, Hca<uhca_mock::MockPlatform>) {
    let dev = MockHca::new(MockConfig {
        port_type: LinkLayer::InfiniBand,
        clock: ClockMode::Virtual,
        init_delay_us: 5_000,
        ..MockConfig::default()
    });
    dev.record_command_bytes(record);
    let cfg = HcaConfig {
        fw_pre_init_timeout_ns: 2_000_000_000,
        fw_init_timeout_ns: 200_000_000,
        cmd_timeout_ns: 200_000_000,
        poll_us: 100,
        ..HcaConfig::default()
    };
    let hca = Hca::open_with(dev.platform(), cfg).expect("bring-up");
    (dev, hca)
}

/// uhca's bring-up, dumped and read back.
fn uhca_dump() -> Vec<DumpedCommand> {
    let (dev, hca) = bring_up(true);
    hca.close().expect("teardown");
    let text: String = dev
        .take_command_bytes()
        .iter()
        .map(|c| dump_line("fn0", c) + "\n")
        .collect();
    parse_dump(&text).expect("the dump reads back")
}

#[test]
fn bytes_are_kept_only_when_asked_and_hold_whole_mailbox_inputs() {
    let (dev, hca) = bring_up(false);
    assert!(dev.take_command_bytes().is_empty(), "off by default");
    drop(hca);

    let (dev, hca) = bring_up(true);
    let log = dev.command_log();
    let bytes = dev.take_command_bytes();
    assert_eq!(bytes.len(), log.len(), "one entry per logged command");
    for (b, r) in bytes.iter().zip(&log) {
        assert_eq!(b.record, *r);
        assert_eq!(
            get_bits(&b.input, 0, 16) as u16,
            r.opcode.raw(),
            "the input starts with its opcode"
        );
    }
    // SET_HCA_CAP's input is 4112 bytes: 16 inline, the rest in mailboxes; the capability
    // page the driver wrote is all there (log_max_qp lies beyond the inline 16 bytes).
    let set = bytes
        .iter()
        .find(|b| b.record.opcode == CmdOpcode::SetHcaCap)
        .expect("SET_HCA_CAP sent");
    assert_eq!(set.input.len(), cmd::SetHcaCapIn::SIZE);
    assert!(set.output.len() >= 8);
    let cap_off = cmd::set_hca_cap_in::capability.bit_offset as usize;
    let log_max_qp = cap_off + ctx::cmd_hca_cap::log_max_qp.bit_offset as usize;
    assert_ne!(
        get_bits(&set.input, log_max_qp, 5),
        0,
        "the capability page came from the mailboxes"
    );
    // CREATE_EQ's output names the EQ the driver uses.
    let eq = bytes
        .iter()
        .find(|b| b.record.opcode == CmdOpcode::CreateEq)
        .expect("CREATE_EQ sent");
    assert_eq!(
        get_bits(
            &eq.output,
            cmd::create_eq_out::eq_number.bit_offset as usize,
            8
        ) as u8,
        hca.eqn()
    );
    assert!(dev.take_command_bytes().is_empty(), "taken once");
}

#[test]
fn the_dump_reads_back_as_written() {
    let (dev, hca) = bring_up(true);
    let bytes = dev.take_command_bytes();
    drop(hca);
    for b in &bytes {
        let line = dump_line("/tmp/a b/fn0.sock", b);
        let c = uhca_vfio_user::cmdlog::parse_line(&line)
            .expect("well formed")
            .expect("a command line");
        assert_eq!(c.function, "/tmp/a_b/fn0.sock");
        assert_eq!(c.opcode, b.record.opcode.raw());
        assert_eq!(c.op_mod, b.record.op_mod);
        assert_eq!(c.status, b.record.status.raw());
        assert_eq!(c.input, b.input);
        assert_eq!(c.output, b.output);
    }
    assert!(uhca_vfio_user::cmdlog::parse_line("cmd f opcode=0x1 op_mod=0x0").is_err());
    assert!(
        uhca_vfio_user::cmdlog::parse_line("cmd f opcode=0x1 op_mod=0x0 status=0x0 in=0 out=")
            .is_err()
    );
    assert_eq!(uhca_vfio_user::cmdlog::parse_line("# a comment"), Ok(None));
}

#[test]
fn decoding_names_the_contexts_fields_and_the_capability_page() {
    let cmds = uhca_dump();
    let st = uhca_vfio_user::cmdlog::QpTypes::default();
    let eq = cmds
        .iter()
        .find(|c| c.opcode == CmdOpcode::CreateEq.raw())
        .unwrap();
    let d = decode(eq, &st);
    assert_eq!(d.kind, "CREATE_EQ/op_mod=0x0");
    assert!(d.fields.contains_key("eq_context_entry.log_eq_size"));
    assert!(d.fields.contains_key("event_bitmask"));
    // The EQ's page addresses are page aligned: their low bits are zero.
    assert_eq!(d.fields.get("pas[].low12").map(String::as_str), Some("0x0"));
    let set = cmds
        .iter()
        .find(|c| c.opcode == CmdOpcode::SetHcaCap.raw())
        .unwrap();
    let d = decode(set, &st);
    assert!(d.kind.starts_with("SET_HCA_CAP/op_mod=0x"));
    if set.op_mod >> 1 == 0 {
        assert!(
            d.fields.contains_key("capability.log_max_qp"),
            "{:?}",
            d.fields.keys()
        );
    }
    assert_eq!(d.fields.get("(inlen)").map(String::as_str), Some("0x1010"));
}

#[test]
fn a_differing_field_fails_unless_explained_and_objects_never_count() {
    let uhca = uhca_dump();
    let same = compare(&uhca, &uhca, &[]);
    assert!(!same.common.is_empty());
    assert!(
        same.common.iter().all(|k| k.differing.is_empty()),
        "a driver agrees with itself"
    );

    // "Linux" is the same bring-up with a larger EQ, another UAR page for it and a bit set
    // that no declared field covers.
    let mut linux = uhca.clone();
    let eq = linux
        .iter_mut()
        .find(|c| c.opcode == CmdOpcode::CreateEq.raw())
        .unwrap();
    let eqc = cmd::create_eq_in::eq_context_entry.bit_offset as usize;
    let size = eqc + ctx::eqc::log_eq_size.bit_offset as usize;
    let old = get_bits(&eq.input, size, 5);
    set_bits(&mut eq.input, size, 5, old + 1);
    let uar = eqc + ctx::eqc::uar_page.bit_offset as usize;
    let old_uar = get_bits(&eq.input, uar, 24);
    set_bits(&mut eq.input, uar, 24, old_uar + 7);
    let enable = linux
        .iter_mut()
        .find(|c| c.opcode == CmdOpcode::EnableHca.raw())
        .unwrap();
    enable.input[12] |= 0x01; // bits 96..127 of enable_hca_in are reserved

    let cmp = compare(&linux, &uhca, &[]);
    let eq = cmp
        .common
        .iter()
        .find(|k| k.kind == "CREATE_EQ/op_mod=0x0")
        .unwrap();
    let verdict = |k: &uhca_vfio_user::cmdlog::KindComparison, f: &str| {
        k.differing
            .iter()
            .find(|d| d.field == f)
            .map(|d| d.verdict.clone())
    };
    assert_eq!(
        verdict(eq, "eq_context_entry.log_eq_size"),
        Some(FieldVerdict::Unexplained)
    );
    assert_eq!(
        verdict(eq, "eq_context_entry.uar_page"),
        Some(FieldVerdict::ObjectOrAddress)
    );
    let en = cmp
        .common
        .iter()
        .find(|k| k.kind == "ENABLE_HCA/op_mod=0x0")
        .unwrap();
    assert_eq!(
        verdict(en, "undeclared@0xc"),
        Some(FieldVerdict::Unexplained)
    );

    let expected = parse_expected(
        "# reasons\nCREATE_EQ* eq_context_entry.log_eq_size Linux sizes its EQ for more events\n\
         ENABLE_HCA/op_mod=0x0 undeclared@0xc a test\nCREATE_CQ/op_mod=0x0 cq_context.cc not seen\n",
    )
    .unwrap();
    let cmp = compare(&linux, &uhca, &expected);
    let eq = cmp
        .common
        .iter()
        .find(|k| k.kind == "CREATE_EQ/op_mod=0x0")
        .unwrap();
    assert_eq!(
        verdict(eq, "eq_context_entry.log_eq_size"),
        Some(FieldVerdict::Explained(
            "Linux sizes its EQ for more events".into()
        ))
    );
    assert_eq!(
        cmp.unused_expectations,
        vec![4],
        "the CREATE_CQ line matched nothing"
    );
    assert!(parse_expected("CREATE_EQ eq_context_entry.log_eq_size\n").is_err());
}

/// A command as a dump would hold it: `input` after the header, answered OK with `output`.
fn dumped<I: PrmLayout>(input: &I, output: Vec<u8>) -> DumpedCommand {
    let b = input.as_bytes().to_vec();
    DumpedCommand {
        function: "fn0".into(),
        opcode: get_bits(&b, 0, 16) as u16,
        op_mod: get_bits(&b, 48, 16) as u16,
        status: 0,
        input: b,
        output,
    }
}

#[test]
fn a_qps_commands_are_grouped_by_its_service_type_even_when_its_number_comes_back() {
    use uhca_fwif::cmd::Command;
    use uhca_fwif::consts::QpServiceType;
    let create = |st: QpServiceType| {
        let mut c = cmd::CreateQpIn::new_cmd();
        c.qpc_mut().set_st(st.raw());
        let mut out = cmd::CreateQpOut::default();
        out.set_qpn(0x105);
        dumped(&c, out.as_bytes().to_vec())
    };
    let rst2init = || {
        let mut c = cmd::Rst2initQpIn::new_cmd();
        c.set_qpn(0x105);
        dumped(&c, vec![0; 16])
    };
    let destroy = || {
        let mut c = cmd::DestroyQpIn::new_cmd();
        c.set_qpn(0x105);
        dumped(&c, vec![0; 16])
    };
    // A UD QP, destroyed; then an RC QP that gets the same number.
    let seq = [
        create(QpServiceType::Ud),
        rst2init(),
        destroy(),
        create(QpServiceType::Rc),
        rst2init(),
    ];
    let mut st = uhca_vfio_user::cmdlog::QpTypes::default();
    let kinds: Vec<String> = seq
        .iter()
        .map(|c| {
            let k = decode(c, &st).kind;
            st.follow(c);
            k
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "CREATE_QP/op_mod=0x0/st=UD",
            "RST2INIT_QP/op_mod=0x0/st=UD",
            "DESTROY_QP/op_mod=0x0/st=UD",
            "CREATE_QP/op_mod=0x0/st=RC",
            "RST2INIT_QP/op_mod=0x0/st=RC",
        ]
    );
    // A QP whose creation is not in the log is grouped as unknown, not guessed.
    let lone = decode(&rst2init(), &uhca_vfio_user::cmdlog::QpTypes::default());
    assert_eq!(lone.kind, "RST2INIT_QP/op_mod=0x0/st=?");
    // The PSNs and the peer's QP number differ by nature; the MTU does not.
    let mut a = cmd::Rtr2rtsQpIn::new_cmd();
    a.qpc_mut().set_next_send_psn(0x1234).set_mtu(4);
    let mut b = cmd::Rtr2rtsQpIn::new_cmd();
    b.qpc_mut().set_next_send_psn(0x777).set_mtu(5);
    let cmp = compare(&[dumped(&a, vec![0; 16])], &[dumped(&b, vec![0; 16])], &[]);
    let k = &cmp.common[0];
    let v = |f: &str| {
        k.differing
            .iter()
            .find(|d| d.field == f)
            .map(|d| d.verdict.clone())
    };
    assert_eq!(v("qpc.next_send_psn"), Some(FieldVerdict::ObjectOrAddress));
    assert_eq!(v("qpc.mtu"), Some(FieldVerdict::Unexplained));
}

#[test]
fn functions_are_selected_by_the_end_of_their_path() {
    let (dev, hca) = bring_up(true);
    let bytes = dev.take_command_bytes();
    drop(hca);
    let text: String = bytes
        .iter()
        .enumerate()
        .map(|(i, c)| dump_line(&format!("/tmp/x/fn{}.sock", i % 3), c) + "\n")
        .collect();
    let all = parse_dump(&text).unwrap();
    let two = uhca_vfio_user::cmdlog::select_functions(all.clone(), &["fn0.sock", "fn1.sock"]);
    assert_eq!(
        two.len(),
        all.iter()
            .filter(|c| !c.function.ends_with("fn2.sock"))
            .count()
    );
    assert!(two.iter().all(|c| !c.function.ends_with("fn2.sock")));
    assert_eq!(
        uhca_vfio_user::cmdlog::select_functions(all.clone(), &[]),
        all
    );
}

/// Linux's user contexts are read out of its function's commands: only what lies between
/// an ALLOC_TRANSPORT_DOMAIN and the next DEALLOC_TRANSPORT_DOMAIN of the same function is
/// kept (both included), so the kernel's own objects before, between and after two
/// contexts are left out, and another function's window does not open this one's.
#[test]
fn windows_keep_what_lies_between_their_opening_and_closing_commands() {
    use uhca_vfio_user::cmdlog::{opcode_by_name, select_windows};
    let open = opcode_by_name("ALLOC_TRANSPORT_DOMAIN").expect("a PRM name");
    let close = opcode_by_name("DEALLOC_TRANSPORT_DOMAIN").expect("a PRM name");
    assert_eq!(open, CmdOpcode::AllocTransportDomain.raw());
    assert_eq!(close, CmdOpcode::DeallocTransportDomain.raw());
    assert_eq!(opcode_by_name("NO_SUCH_COMMAND"), None);
    let c = |function: &str, op: CmdOpcode| DumpedCommand {
        function: function.into(),
        opcode: op.raw(),
        op_mod: 0,
        status: 0,
        input: Vec::new(),
        output: Vec::new(),
    };
    use CmdOpcode::*;
    let seq = vec![
        c("fn0", CreateQp), // the kernel's, before any context
        c("fn1", AllocTransportDomain),
        c("fn0", CreateCq), // fn1's window does not open fn0's
        c("fn0", AllocTransportDomain),
        c("fn0", AllocPd),
        c("fn1", AllocPd),
        c("fn0", DeallocTransportDomain),
        c("fn0", DestroyQp), // between two contexts: the kernel's
        c("fn0", AllocTransportDomain),
        c("fn0", CreateMkey),
        c("fn0", DeallocTransportDomain),
        c("fn0", DeallocPd), // after: the kernel's
    ];
    let kept: Vec<(String, u16)> = select_windows(seq, open, close)
        .into_iter()
        .map(|c| (c.function, c.opcode))
        .collect();
    let want: Vec<(String, u16)> = [
        ("fn1", AllocTransportDomain),
        ("fn0", AllocTransportDomain),
        ("fn0", AllocPd),
        ("fn1", AllocPd),
        ("fn0", DeallocTransportDomain),
        ("fn0", AllocTransportDomain),
        ("fn0", CreateMkey),
        ("fn0", DeallocTransportDomain),
    ]
    .into_iter()
    .map(|(f, o)| (f.to_string(), o.raw()))
    .collect();
    assert_eq!(kept, want);
}
