//! HCA life cycle: enable, ISSI, capabilities, registers, INIT_HCA, teardown, disable.

mod common;

use common::Harness;
use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::*;
use uhca_fwif::consts::*;
use uhca_fwif::ctx::{AtomicCaps, McamReg, McqiReg, McqiVersion, McqsReg, RoceCap};
use uhca_hal::Bar;
use uhca_mock::firmware::syndrome;
use uhca_mock::{HcaState, MockConfig};
use zerocopy::{FromBytes, IntoBytes};

fn cap_query(cap: HcaCapType, mode: HcaCapMode) -> QueryHcaCapIn {
    let mut q = QueryHcaCapIn::new_cmd();
    q.set_op_mod(query_hca_cap_op_mod(cap, mode));
    q
}

#[test]
fn enable_hca() {
    let mut h = Harness::started(MockConfig::default());
    // Nothing but ENABLE_HCA before ENABLE_HCA.
    assert_eq!(
        h.err(&QueryIssiIn::new_cmd(), &[]),
        (CmdStatus::BadSysStateErr, syndrome::HCA_NOT_ENABLED)
    );
    let mut e = EnableHcaIn::new_cmd();
    e.set_function_id(3);
    assert_eq!(
        h.err(&e, &[]),
        (CmdStatus::BadParamErr, syndrome::BAD_FUNCTION)
    );
    h.ok(&EnableHcaIn::new_cmd(), &[]);
    assert_eq!(h.hca.hca_state(), HcaState::Enabled);
    assert_eq!(
        h.err(&EnableHcaIn::new_cmd(), &[]).1,
        syndrome::HCA_ALREADY_ENABLED
    );
}

#[test]
fn issi() {
    let mut h = Harness::started(MockConfig::default());
    h.ok(&EnableHcaIn::new_cmd(), &[]);
    let o = h.ok(&QueryIssiIn::new_cmd(), &[]);
    assert_eq!(o.current_issi(), 0);
    assert_eq!(o.supported_issi_dw0() & 0b11, 0b11, "ISSI 0 and 1");
    let mut s = SetIssiIn::new_cmd();
    s.set_current_issi(2);
    assert_eq!(h.err(&s, &[]), (CmdStatus::BadParamErr, syndrome::BAD_ISSI));
    s.set_current_issi(1);
    h.ok(&s, &[]);
    assert_eq!(h.ok(&QueryIssiIn::new_cmd(), &[]).current_issi(), 1);
    assert_eq!(h.hca.issi(), 1);
}

#[test]
fn boot_pages_gate_capabilities_and_registers() {
    let mut h = Harness::started(MockConfig::default());
    h.ok(&EnableHcaIn::new_cmd(), &[]);
    let q = cap_query(HcaCapType::General, HcaCapMode::GetCur);
    assert_eq!(
        h.err(&q, &[]),
        (CmdStatus::NoResErr, syndrome::NO_BOOT_PAGES)
    );
    h.give_outstanding(QueryPagesOpMod::BootPages);
    h.ok(&q, &[]);
}

#[test]
fn query_hca_cap_max_and_current() {
    let mut h = Harness::initialized(MockConfig::default());
    let max = h.ok(&cap_query(HcaCapType::General, HcaCapMode::GetMax), &[]);
    let cur = h.ok(&cap_query(HcaCapType::General, HcaCapMode::GetCur), &[]);
    let (m, c) = (max.cmd_hca_cap(), cur.cmd_hca_cap());
    assert_eq!(m.port_type(), PortTypeCap::Eth.raw());
    assert!(m.roce() && m.rc() && m.ud() && m.uc() && m.uar_4k());
    assert!(
        m.release_all_pages() && !c.release_all_pages(),
        "driver turns it on"
    );
    assert_eq!(c.log_max_qp(), m.log_max_qp());
    assert_eq!(c.log_uar_page_sz(), 0);
    assert_eq!(c.cmdif_checksum(), 0);
    let r = h.ok(&cap_query(HcaCapType::Roce, HcaCapMode::GetMax), &[]);
    let rc: &RoceCap = r.roce_cap();
    assert!(rc.sw_r_roce_src_udp_port());
    assert_eq!(rc.r_roce_dest_udp_port(), 4791);
    assert_eq!(rc.roce_address_table_size(), 256);
    let r = h.ok(&cap_query(HcaCapType::Roce, HcaCapMode::GetCur), &[]);
    assert!(!r.roce_cap().sw_r_roce_src_udp_port());
    let bad = h.err(&cap_query(HcaCapType::Odp, HcaCapMode::GetCur), &[]);
    assert_eq!(bad, (CmdStatus::BadParamErr, syndrome::BAD_CAP_TYPE));
    let mut other = cap_query(HcaCapType::General, HcaCapMode::GetCur);
    other.set_other_function(true).set_function_id(1);
    assert_eq!(h.err(&other, &[]).1, syndrome::BAD_FUNCTION);
}

#[test]
fn the_atomic_capability_page_and_the_requester_endianness_mode() {
    let mut h = Harness::started(MockConfig::default());
    h.ok(&EnableHcaIn::new_cmd(), &[]);
    h.give_outstanding(QueryPagesOpMod::BootPages);
    let max = h.ok(&cap_query(HcaCapType::Atomic, HcaCapMode::GetMax), &[]);
    let max = max.atomic_caps();
    assert_eq!(
        max.atomic_operations(),
        ATOMIC_OPS_CMP_SWAP | ATOMIC_OPS_FETCH_ADD
    );
    assert_eq!(max.atomic_size_qp(), ATOMIC_SIZE_QP_8BYTES);
    assert!(max.supported_atomic_req_8B_endianness_mode_1());
    let cur = h.ok(&cap_query(HcaCapType::Atomic, HcaCapMode::GetCur), &[]);
    assert_eq!(
        cur.atomic_caps().atomic_req_8B_endianness_mode(),
        ATOMIC_REQ_MODE_BE,
        "big-endian until the driver asks otherwise"
    );
    // Host endianness, as Linux's handle_hca_cap_atomic sets it.
    let mut s = SetHcaCapIn::new_cmd();
    s.set_op_mod(set_hca_cap_op_mod(HcaCapType::Atomic));
    let mut a = AtomicCaps::default();
    a.set_atomic_req_8B_endianness_mode(ATOMIC_REQ_MODE_HOST_ENDIANNESS);
    s.capability_mut()[..<AtomicCaps as uhca_fwif::PrmLayout>::SIZE].copy_from_slice(a.as_bytes());
    h.ok(&s, &[]);
    let cur = h.ok(&cap_query(HcaCapType::Atomic, HcaCapMode::GetCur), &[]);
    assert_eq!(
        cur.atomic_caps().atomic_req_8B_endianness_mode(),
        ATOMIC_REQ_MODE_HOST_ENDIANNESS
    );
    assert_eq!(h.hca.atomic_req_endianness_mode(), 1);
    // Mode 2 does not exist.
    a.set_atomic_req_8B_endianness_mode(2);
    s.capability_mut()[..<AtomicCaps as uhca_fwif::PrmLayout>::SIZE].copy_from_slice(a.as_bytes());
    assert_eq!(
        h.err(&s, &[]),
        (CmdStatus::BadParamErr, syndrome::CAP_ABOVE_MAX)
    );
    // A device that cannot write results in host order refuses mode 1.
    h.hca
        .set_atomic_caps(ATOMIC_OPS_CMP_SWAP, ATOMIC_SIZE_QP_8BYTES, false);
    let max = h.ok(&cap_query(HcaCapType::Atomic, HcaCapMode::GetMax), &[]);
    assert!(
        !max.atomic_caps()
            .supported_atomic_req_8B_endianness_mode_1()
    );
    a.set_atomic_req_8B_endianness_mode(ATOMIC_REQ_MODE_HOST_ENDIANNESS);
    s.capability_mut()[..<AtomicCaps as uhca_fwif::PrmLayout>::SIZE].copy_from_slice(a.as_bytes());
    assert_eq!(h.err(&s, &[]).1, syndrome::CAP_ABOVE_MAX);
}

#[test]
fn set_hca_cap_honours_settable_fields() {
    let mut h = Harness::started(MockConfig::default());
    h.ok(&EnableHcaIn::new_cmd(), &[]);
    h.give_outstanding(QueryPagesOpMod::BootPages);
    let cur = h.ok(&cap_query(HcaCapType::General, HcaCapMode::GetCur), &[]);
    let mut s = SetHcaCapIn::new_cmd();
    s.set_op_mod(set_hca_cap_op_mod(HcaCapType::General));
    s.capability_mut().copy_from_slice(cur.capability());
    s.cmd_hca_cap_mut()
        .set_release_all_pages(true)
        .set_log_max_qp(10)
        .set_log_max_cq(3);
    h.ok(&s, &[]);
    let now = h.ok(&cap_query(HcaCapType::General, HcaCapMode::GetCur), &[]);
    assert!(now.cmd_hca_cap().release_all_pages());
    assert_eq!(now.cmd_hca_cap().log_max_qp(), 10);
    assert_eq!(now.cmd_hca_cap().log_max_cq(), 16, "not settable: ignored");
    // Above the maximum.
    s.cmd_hca_cap_mut().set_log_max_qp(31);
    assert_eq!(
        h.err(&s, &[]),
        (CmdStatus::BadParamErr, syndrome::CAP_ABOVE_MAX)
    );
    s.cmd_hca_cap_mut().set_log_max_qp(10).set_cmdif_checksum(3);
    assert_eq!(h.err(&s, &[]).1, syndrome::CAP_ABOVE_MAX);
    s.cmd_hca_cap_mut()
        .set_cmdif_checksum(0)
        .set_log_uar_page_sz(1);
    assert_eq!(h.err(&s, &[]).1, syndrome::CAP_ABOVE_MAX);
    // RoCE caps.
    let mut r = SetHcaCapIn::new_cmd();
    r.set_op_mod(set_hca_cap_op_mod(HcaCapType::Roce));
    let mut rc = RoceCap::default();
    rc.set_sw_r_roce_src_udp_port(true);
    r.capability_mut()[..RoceCap::SIZE_BYTES].copy_from_slice(rc.as_bytes());
    h.ok(&r, &[]);
    let got = h.ok(&cap_query(HcaCapType::Roce, HcaCapMode::GetCur), &[]);
    assert!(got.roce_cap().sw_r_roce_src_udp_port());
    // Op_mod with the "current" bit is not a SET_HCA_CAP op_mod.
    r.set_op_mod(1);
    assert_eq!(h.err(&r, &[]).1, syndrome::BAD_OP_MOD);
    // Not after INIT_HCA.
    h.give_outstanding(QueryPagesOpMod::InitPages);
    h.ok(&InitHcaIn::new_cmd(), &[]);
    s.cmd_hca_cap_mut().set_log_uar_page_sz(0);
    assert_eq!(
        h.err(&s, &[]),
        (CmdStatus::BadSysStateErr, syndrome::HCA_ALREADY_INITIALIZED)
    );
}

trait SizeBytes {
    const SIZE_BYTES: usize;
}
impl SizeBytes for RoceCap {
    const SIZE_BYTES: usize = <RoceCap as uhca_fwif::PrmLayout>::SIZE;
}

#[test]
fn init_hca_needs_init_pages() {
    let mut h = Harness::started(MockConfig::default());
    h.ok(&EnableHcaIn::new_cmd(), &[]);
    h.give_outstanding(QueryPagesOpMod::BootPages);
    assert_eq!(
        h.err(&InitHcaIn::new_cmd(), &[]),
        (CmdStatus::NoResErr, syndrome::NO_INIT_PAGES)
    );
    assert_eq!(
        h.err(&AllocPdIn::new_cmd(), &[]).1,
        syndrome::HCA_NOT_INITIALIZED
    );
    h.give_outstanding(QueryPagesOpMod::InitPages);
    h.ok(&InitHcaIn::new_cmd(), &[]);
    assert_eq!(h.hca.hca_state(), HcaState::Initialized);
    assert_eq!(
        h.err(&InitHcaIn::new_cmd(), &[]).1,
        syndrome::HCA_ALREADY_INITIALIZED
    );
}

/// INIT_HCA in its first, 16-byte form (no `sw_vhca_id`, no `sw_owner_id`), as rdma-core
/// 44's VFIO provider sends it: taken, the missing bytes read as zero.
#[test]
fn init_hca_takes_the_short_input_of_older_drivers() {
    let mut h = Harness::started(MockConfig::default());
    h.ok(&EnableHcaIn::new_cmd(), &[]);
    h.give_outstanding(QueryPagesOpMod::BootPages);
    h.give_outstanding(QueryPagesOpMod::InitPages);
    let short = &InitHcaIn::new_cmd().0[..16];
    let r = h.exec_raw(short, <InitHcaOut as uhca_fwif::PrmLayout>::SIZE);
    assert_eq!(r.status(), CmdStatus::Ok, "syndrome {:#x}", r.syndrome());
    assert_eq!(h.hca.hca_state(), HcaState::Initialized);
}

#[test]
fn host_endianness_register() {
    let mut h = Harness::initialized(MockConfig::default());
    let mut w = AccessRegisterIn::new_cmd();
    w.set_op_mod(ACCESS_REGISTER_OP_MOD_WRITE)
        .set_register_id(REG_HOST_ENDIANNESS);
    let mut data = [0u8; 16];
    data[0] = 0x80;
    h.exec_ext(&w, &data, 16);
    assert!(h.hca.host_endianness_big());
    let mut r = AccessRegisterIn::new_cmd();
    r.set_op_mod(ACCESS_REGISTER_OP_MOD_READ)
        .set_register_id(REG_HOST_ENDIANNESS);
    let raw = h.exec_ext(&r, &[0u8; 16], 16);
    assert_eq!(raw.status(), CmdStatus::Ok);
    assert_eq!(raw.out[16], 0x80);
    // Without room for the register data.
    assert_eq!(h.exec(&r, &[0u8; 16]).status(), CmdStatus::BadOutpLenErr);
    r.set_register_id(0x5003);
    assert_eq!(
        h.err(&r, &[0u8; 16]),
        (CmdStatus::BadParamErr, syndrome::BAD_REGISTER)
    );
    w.set_op_mod(7).set_register_id(REG_HOST_ENDIANNESS);
    assert_eq!(h.err(&w, &data).1, syndrome::BAD_OP_MOD);
    // Write without data.
    w.set_op_mod(0);
    assert_eq!(h.exec(&w, &[]).status(), CmdStatus::BadInpLenErr);
}

/// ACCESS_REGISTER read of `reg` with `data`, with room for `out_len` bytes of register.
fn read_register(h: &mut Harness, reg: u16, data: &[u8], out_len: usize) -> common::Raw {
    let mut r = AccessRegisterIn::new_cmd();
    r.set_op_mod(ACCESS_REGISTER_OP_MOD_READ)
        .set_register_id(reg);
    h.exec_ext(&r, data, out_len)
}

#[test]
fn firmware_component_registers_report_the_running_version() {
    let mut h = Harness::initialized(MockConfig::default());
    // MCAM, as the general capabilities promise.
    let q = h.ok(&cap_query(HcaCapType::General, HcaCapMode::GetCur), &[]);
    assert!(q.cmd_hca_cap().mcam_reg());
    let mut m = McamReg::default();
    let raw = read_register(&mut h, REG_MCAM, m.as_bytes(), McamReg::SIZE);
    assert_eq!(raw.status(), CmdStatus::Ok);
    let (got, _) = McamReg::read_from_prefix(&raw.out[16..]).unwrap();
    let regs = got.mng_access_reg_cap_mask__access_regs();
    assert!(regs.mcqs() && regs.mcqi());
    assert!(!regs.mcc() && !regs.mcda(), "no flashing");
    assert!(got.mng_feature_cap_mask().iter().all(|&b| b == 0));
    // The other register groups are empty; groups past the fourth do not exist.
    m.set_access_reg_group(2);
    let raw = read_register(&mut h, REG_MCAM, m.as_bytes(), McamReg::SIZE);
    let (got, _) = McamReg::read_from_prefix(&raw.out[16..]).unwrap();
    assert_eq!(got.access_reg_group(), 2);
    assert!(!got.mng_access_reg_cap_mask__access_regs().mcqs());
    m.set_access_reg_group(4);
    let raw = read_register(&mut h, REG_MCAM, m.as_bytes(), McamReg::SIZE);
    assert_eq!(raw.syndrome(), syndrome::BAD_REGISTER_INDEX);

    // MCQS: component 0 is the boot image, idle, and the last.
    let mut s = McqsReg::default();
    let raw = read_register(&mut h, REG_MCQS, s.as_bytes(), McqsReg::SIZE);
    let (got, _) = McqsReg::read_from_prefix(&raw.out[16..]).unwrap();
    assert_eq!(got.identifier(), MCQS_IDENTIFIER_BOOT_IMG);
    assert_eq!(got.component_update_state(), MCQS_UPDATE_STATE_IDLE);
    assert!(got.last_index_flag());
    s.set_component_index(1);
    let raw = read_register(&mut h, REG_MCQS, s.as_bytes(), McqsReg::SIZE);
    assert_eq!(raw.syndrome(), syndrome::BAD_REGISTER_INDEX);

    // MCQI: the running version of the boot image, the initialization segment's.
    let mut i = McqiReg::default();
    i.set_info_type(MCQI_INFO_TYPE_VERSION)
        .set_data_size(McqiVersion::SIZE as u16);
    let raw = read_register(
        &mut h,
        REG_MCQI,
        i.as_bytes(),
        McqiReg::SIZE + McqiVersion::SIZE,
    );
    assert_eq!(raw.status(), CmdStatus::Ok);
    let (v, _) = McqiVersion::read_from_prefix(&raw.out[16 + McqiReg::SIZE..]).unwrap();
    assert_eq!(v.version(), (22 << 24) | (39 << 16) | 1002);
    assert_eq!(v.version_string_length(), 10);
    assert_eq!(&v.version_string()[..10], b"22.39.1002");
    let fw = h.p.read_be32(0);
    assert_eq!(fw >> 16, 39, "the same minor in the initialization segment");
    // As much as asked for: the first 8 bytes only.
    i.set_data_size(8);
    let raw = read_register(&mut h, REG_MCQI, i.as_bytes(), McqiReg::SIZE + 8);
    assert_eq!(raw.status(), CmdStatus::Ok);
    let (r, _) = McqiReg::read_from_prefix(&raw.out[16..]).unwrap();
    assert_eq!(r.data_size(), 8);
    assert_eq!(r.info_size(), McqiVersion::SIZE as u32);
    // No pending image, no other information type, no other component.
    i.set_data_size(McqiVersion::SIZE as u16)
        .set_read_pending_component(true);
    let raw = read_register(
        &mut h,
        REG_MCQI,
        i.as_bytes(),
        McqiReg::SIZE + McqiVersion::SIZE,
    );
    assert_eq!(raw.syndrome(), syndrome::BAD_REGISTER_INDEX);
    i.set_read_pending_component(false).set_info_type(0);
    let raw = read_register(
        &mut h,
        REG_MCQI,
        i.as_bytes(),
        McqiReg::SIZE + McqiVersion::SIZE,
    );
    assert_eq!(raw.syndrome(), syndrome::BAD_REGISTER_INDEX);
    // Query registers cannot be written.
    let mut w = AccessRegisterIn::new_cmd();
    w.set_op_mod(ACCESS_REGISTER_OP_MOD_WRITE)
        .set_register_id(REG_MCQS);
    assert_eq!(
        h.exec_ext(&w, McqsReg::default().as_bytes(), McqsReg::SIZE)
            .syndrome(),
        syndrome::READ_ONLY_REGISTER
    );
    // The command log names the register of each ACCESS_REGISTER, and no register for
    // other commands.
    let log = h.hca.command_log();
    let regs: Vec<u16> = log
        .iter()
        .filter(|r| r.opcode == CmdOpcode::AccessReg)
        .map(|r| r.register_id)
        .collect();
    assert_eq!(regs.first(), Some(&REG_HOST_ENDIANNESS), "bring-up");
    assert_eq!(regs.last(), Some(&REG_MCQS));
    assert!(regs.contains(&REG_MCAM) && regs.contains(&REG_MCQI));
    assert!(
        log.iter()
            .filter(|r| r.opcode != CmdOpcode::AccessReg)
            .all(|r| r.register_id == 0)
    );
}

#[test]
fn special_contexts() {
    let mut h = Harness::initialized(MockConfig::default());
    let o = h.ok(&QuerySpecialContextsIn::new_cmd(), &[]);
    assert_eq!(o.resd_lkey(), uhca_mock::firmware::RESERVED_LKEY);
    let mut q = QuerySpecialContextsIn::new_cmd();
    q.set_op_mod(1);
    assert_eq!(h.err(&q, &[]).1, syndrome::BAD_OP_MOD);
}

#[test]
fn query_adapter_reports_the_vendor_and_the_psid() {
    let mut h = Harness::initialized(MockConfig::default());
    let o = h.ok(&QueryAdapterIn::new_cmd(), &[]);
    let a = o.query_adapter_struct();
    assert_eq!(a.ieee_vendor_id(), 0x0002c9);
    assert_eq!(a.vsd_vendor_id(), 0x15b3);
    // The PSID as Linux copies it (16 bytes, the string padded with zeros): its board_id.
    assert_eq!(&a.vsd_contd_psid()[..], b"UHCA_MOCK_0001\0\0");
    assert!(a.vsd().iter().all(|&b| b == 0));
    let mut q = QueryAdapterIn::new_cmd();
    q.set_op_mod(1);
    assert_eq!(h.err(&q, &[]).1, syndrome::BAD_OP_MOD);
}

fn reclaim_all(h: &mut Harness) -> usize {
    let mut total = 0;
    loop {
        let mut t = ManagePagesIn::new_cmd();
        t.set_function_id(uhca_mock::firmware::FUNCTION_ID);
        t.set_op_mod(ManagePagesOpMod::Take.raw())
            .set_input_num_entries(16);
        let r = h.exec_ext(&t, &[], 16 * 8);
        assert_eq!(r.status(), CmdStatus::Ok);
        let o: ManagePagesOut = r.as_out();
        let n = o.output_num_entries() as usize;
        for i in 0..n {
            let a = u64::from_be_bytes(r.out[16 + i * 8..24 + i * 8].try_into().unwrap());
            assert_eq!(a % 4096, 0);
        }
        if n == 0 {
            return total;
        }
        total += n;
    }
}

#[test]
fn graceful_teardown_reclaims_every_page() {
    let mut h = Harness::ready(MockConfig::default());
    let held = h.hca.pages().held;
    assert_eq!(held, 8 + 32 + 16);
    h.alloc_pd();
    // Before teardown the firmware keeps the pages it needs.
    assert_eq!(reclaim_all(&mut h), 0);
    let mut t = TeardownHcaIn::new_cmd();
    t.set_profile(7);
    assert_eq!(h.err(&t, &[]).1, syndrome::BAD_TEARDOWN_PROFILE);
    t.set_profile(0);
    let o = h.ok(&t, &[]);
    assert!(!o.state(), "FORCE_STATE_SUCCESS");
    assert_eq!(h.hca.hca_state(), HcaState::TornDown);
    assert_eq!(h.hca.objects().pds, 0);
    assert_eq!(h.err(&AllocPdIn::new_cmd(), &[]).1, syndrome::HCA_TORN_DOWN);
    assert_eq!(h.err(&t, &[]).1, syndrome::HCA_TORN_DOWN);
    assert_eq!(reclaim_all(&mut h), held);
    h.ok(&DisableHcaIn::new_cmd(), &[]);
    assert_eq!(h.hca.hca_state(), HcaState::Disabled);
    assert!(h.hca.notes().is_empty(), "{:?}", h.hca.notes());
    assert_eq!(
        h.err(&DisableHcaIn::new_cmd(), &[]).1,
        syndrome::HCA_NOT_ENABLED
    );
}

#[test]
fn fast_teardown_through_nic_interface() {
    let mut h = Harness::ready(MockConfig::default());
    let mut t = TeardownHcaIn::new_cmd();
    t.set_profile(2);
    assert!(!h.ok(&t, &[]).state());
    assert_eq!(h.hca.hca_state(), HcaState::Initialized, "only prepared");
    // nic_interface = DISABLED (bits 9:8 of 0x14), keeping the queue address.
    let lo = h.p.read_be32(0x14) & 0xffff_f000;
    h.p.write_be32(0x14, lo | (1 << 8));
    assert_eq!((h.p.read_be32(0x14) >> 8) & 3, 1);
    assert_eq!(h.hca.hca_state(), HcaState::TornDown);
    assert_eq!(reclaim_all(&mut h), 8 + 32 + 16);
}

#[test]
fn disable_without_reclaim_is_noted() {
    let mut h = Harness::ready(MockConfig::default());
    h.ok(&DisableHcaIn::new_cmd(), &[]);
    assert!(
        h.hca
            .notes()
            .iter()
            .any(|n| n.text.contains("not reclaimed"))
    );
    assert_eq!(h.hca.pages().held, 0);
}
