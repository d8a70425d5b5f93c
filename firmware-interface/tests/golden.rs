//! Golden-byte tests: complete commands and datapath entries built field by field through
//! the generated accessors, compared with bytes worked out by hand from the PRM's bit
//! numbering (bit 0 = MSB of byte 0; a field at bit `o` of width `w` occupies bits
//! `o % 8 ..` of byte `o / 8` onwards). The arithmetic for each byte is in the comments, so
//! a reader can redo it.

use uhca_fwif::cmd::{
    Command, CreateCqIn, ManagePagesIn, QueryHcaCapIn, Rst2initQpIn, query_hca_cap_op_mod,
};
use uhca_fwif::consts::{
    CqeOpcode, HcaCapMode, HcaCapType, ManagePagesOpMod, QpServiceType, WqeCtrlFlags, WqeOpcode,
};
use uhca_fwif::cqe::Cqe64;
use uhca_fwif::wqe::WqeCtrlSeg;
use zerocopy::{FromBytes, IntoBytes};

#[test]
fn query_hca_cap_current_general() {
    let mut q = QueryHcaCapIn::new_cmd();
    q.set_op_mod(query_hca_cap_op_mod(
        HcaCapType::General,
        HcaCapMode::GetCur,
    ));
    // opcode 0x0100 in bits 0..16 → bytes 0-1; op_mod in bits 48..64 → bytes 6-7 =
    // (type 0 << 1) | current 1 = 0x0001.
    let expect = [0x01, 0x00, 0, 0, 0, 0, 0x00, 0x01, 0, 0, 0, 0, 0, 0, 0, 0];
    assert_eq!(q.as_bytes(), &expect);
}

#[test]
fn query_hca_cap_max_roce() {
    let mut q = QueryHcaCapIn::new_cmd();
    q.set_op_mod(query_hca_cap_op_mod(HcaCapType::Roce, HcaCapMode::GetMax));
    // RoCE is capability type 4 → op_mod = 4 << 1 | 0 = 0x0008.
    assert_eq!(&q.as_bytes()[..8], &[0x01, 0x00, 0, 0, 0, 0, 0x00, 0x08]);
}

#[test]
fn manage_pages_give_two_pages() {
    let mut m = ManagePagesIn::new_cmd();
    m.set_op_mod(ManagePagesOpMod::Give.raw())
        .set_function_id(0)
        .set_input_num_entries(2);
    // opcode 0x0108; op_mod 1 (give) in bytes 6-7; input_num_entries at bit 96 → bytes 12-15.
    let expect = [
        0x01, 0x08, 0, 0, 0, 0, 0x00, 0x01, 0, 0, 0, 0, 0x00, 0x00, 0x00, 0x02,
    ];
    assert_eq!(m.as_bytes(), &expect);
    // The page addresses follow the 16-byte fixed part.
    assert_eq!(uhca_fwif::cmd::manage_pages_in::pas.bit_offset / 8, 16);
}

#[test]
fn create_cq_with_context() {
    let mut c = CreateCqIn::new_cmd();
    c.cq_context_mut()
        .set_log_cq_size(10)
        .set_uar_page(0x123)
        .set_c_eqn(7)
        .set_log_page_size(2)
        .set_dbr_addr(0x1122_3344_5566_7788);
    let b = c.as_bytes();
    assert_eq!(
        b.len(),
        0x110,
        "create_cq_in is 2176 bits; pas follow at 0x110"
    );
    assert_eq!(&b[0..2], &[0x04, 0x00]); // CREATE_CQ = 0x400
    // cq_context starts at bit 128 = byte 16.
    // log_cq_size: cqc bit 99, width 5 → cqc byte 12, bits 3..7 → 0b000_01010 = 0x0a.
    assert_eq!(b[16 + 12], 0x0a);
    // uar_page: cqc bit 104, width 24 → cqc bytes 13..16.
    assert_eq!(&b[16 + 13..16 + 16], &[0x00, 0x01, 0x23]);
    // c_eqn: cqc bit 184, width 8 → cqc byte 23.
    assert_eq!(b[16 + 23], 0x07);
    // log_page_size: cqc bit 195, width 5 → cqc byte 24, bits 3..7 → 0x02.
    assert_eq!(b[16 + 24], 0x02);
    // dbr_addr: cqc bit 448, width 64 → cqc bytes 56..64, big-endian.
    assert_eq!(
        &b[16 + 56..16 + 64],
        &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]
    );
    // Nothing else was written.
    let written: usize = b.iter().filter(|&&x| x != 0).count();
    // opcode 0x04, log_cq_size, uar_page (2 non-zero bytes), c_eqn, log_page_size, dbr_addr.
    assert_eq!(written, 1 + 1 + 2 + 1 + 1 + 8);
}

#[test]
fn rst2init_rc_qp() {
    let mut m = Rst2initQpIn::new_cmd();
    m.set_qpn(0x00ab_cdef);
    let qpc = m.qpc_mut();
    qpc.set_st(QpServiceType::Rc.raw())
        .set_pm_state(3)
        .set_pd(0x0000_0042);
    qpc.set_rre(true).set_rwe(true);
    qpc.primary_address_path_mut()
        .set_vhca_port_num(1)
        .set_pkey_index(0x0005);
    let b = m.as_bytes();
    assert_eq!(&b[0..2], &[0x05, 0x02]); // RST2INIT_QP = 0x502
    // qpn: bit 72, width 24 → bytes 9..12.
    assert_eq!(&b[9..12], &[0xab, 0xcd, 0xef]);
    // qpc at bit 192 = byte 24.
    let q = &b[24..];
    // st: qpc bit 8, width 8 → qpc byte 1 = RC (0).
    assert_eq!(q[1], 0x00);
    // pm_state: qpc bit 19, width 2 → byte 2, bits 3..5 → 0b0001_1000 = 0x18.
    assert_eq!(q[2], 0x18);
    // pd: qpc bit 40, width 24 → bytes 5..8.
    assert_eq!(&q[5..8], &[0x00, 0x00, 0x42]);
    // rre, rwe: qpc bits 1168, 1169 → byte 146, bits 0 and 1 → 0xc0.
    assert_eq!(q[146], 0xc0);
    // primary_address_path at qpc bit 192 = qpc byte 24; ads.pkey_index at ads bit 16 →
    // ads bytes 2..4; ads.vhca_port_num at ads bit 296 → ads byte 37.
    assert_eq!(&q[24 + 2..24 + 4], &[0x00, 0x05]);
    assert_eq!(q[24 + 37], 0x01);
}

#[test]
fn send_wqe_control_segment() {
    let ctrl = WqeCtrlSeg {
        opmod_idx_opcode: WqeCtrlSeg::opmod_idx_opcode_of(0, 0x1234, WqeOpcode::Send).into(),
        qpn_ds: WqeCtrlSeg::qpn_ds_of(0x00ab_cdef, 3).into(),
        fm_ce_se: WqeCtrlFlags::CQ_UPDATE.bits(),
        ..Default::default()
    };
    // opmod 0 | wqe_index 0x1234 in bits 23:8 | opcode SEND 0x0a; qpn 0xabcdef in 31:8,
    // ds 3; CQ_UPDATE (0x08) in byte 11.
    let expect = [
        0x00, 0x12, 0x34, 0x0a, 0xab, 0xcd, 0xef, 0x03, 0x00, 0x00, 0x00, 0x08, 0, 0, 0, 0,
    ];
    assert_eq!(ctrl.as_bytes(), &expect);
    assert_eq!(
        (ctrl.opcode(), ctrl.wqe_index(), ctrl.qpn(), ctrl.ds()),
        (WqeOpcode::Send, 0x1234, 0xab_cdef, 3)
    );
}

#[test]
fn receive_completion_decoded_from_raw_bytes() {
    let mut raw = [0u8; 64];
    raw[36..40].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]); // immediate
    raw[44..48].copy_from_slice(&[0x00, 0x00, 0x10, 0x00]); // byte_cnt 4096
    raw[56..60].copy_from_slice(&[0x00, 0x00, 0x01, 0x02]); // sop_drop_qpn: QPN 0x102
    raw[60..62].copy_from_slice(&[0x00, 0x07]); // wqe_counter 7
    raw[63] = 0x31; // op_own: opcode 3 (RESP_SEND_IMM) in 7:4, owner 1
    let cqe = Cqe64::read_from_bytes(&raw).unwrap();
    assert_eq!(cqe.opcode(), CqeOpcode::RespSendImm);
    assert_eq!(cqe.owner(), 1);
    assert_eq!(cqe.qpn(), 0x102);
    assert_eq!(cqe.byte_cnt.get(), 4096);
    assert_eq!(cqe.wqe_counter.get(), 7);
    assert_eq!(cqe.immediate.get(), 0xdead_beef);
}

#[test]
fn init_segment_registers_where_the_c_struct_has_them() {
    // Byte offsets from `struct mlx5_init_seg` (Linux device.h), an independent statement
    // of the same registers.
    use uhca_fwif::init_seg::{health_buffer, initial_seg};
    assert_eq!(initial_seg::cmdq_phy_addr_63_32.byte_offset(), 0x10);
    assert_eq!(initial_seg::cmdq_phy_addr_31_12.dword_byte_offset(), 0x14);
    // cmdq_addr_l_sz: log_cmdq_size in bits 7:4, log_cmdq_stride in 3:0, nic_interface 9:8.
    assert_eq!(initial_seg::log_cmdq_size.dword_byte_offset(), 0x14);
    assert_eq!(initial_seg::log_cmdq_size.from_dword(0x0000_0056), 5);
    assert_eq!(initial_seg::log_cmdq_stride.from_dword(0x0000_0056), 6);
    assert_eq!(initial_seg::nic_interface.from_dword(0x0000_0100), 1);
    assert_eq!(initial_seg::command_doorbell_vector.byte_offset(), 0x18);
    // initializing: bit 31 of the dword at 0x1fc.
    assert_eq!(initial_seg::initializing.dword_byte_offset(), 0x1fc);
    assert_eq!(initial_seg::initializing.from_dword(0x8000_0000), 1);
    assert_eq!(initial_seg::health_buffer.byte_offset(), 0x200);
    assert_eq!(initial_seg::internal_timer_h.byte_offset(), 0x1000);
    // health_counter: bits 23:0 of the dword at 0x1010.
    assert_eq!(initial_seg::health_counter.dword_byte_offset(), 0x1010);
    assert_eq!(
        initial_seg::health_counter.from_dword(0xff12_3456),
        0x12_3456
    );
    // Health buffer: synd at 0x3d, ext_synd at 0x3e, fw_ver at 0x30, RFR bit 31 at 0x38.
    assert_eq!(health_buffer::synd.byte_offset(), 0x3d);
    assert_eq!(health_buffer::ext_synd.byte_offset(), 0x3e);
    assert_eq!(health_buffer::fw_version.byte_offset(), 0x30);
    assert_eq!(
        (
            health_buffer::rfr.dword_byte_offset(),
            health_buffer::rfr.dword_shift()
        ),
        (0x38, 31)
    );
}

#[test]
fn unknown_values_are_kept() {
    use uhca_fwif::consts::{CmdOpcode, CmdStatus};
    assert_eq!(CmdOpcode::from_raw(0x7fff), CmdOpcode::Unknown(0x7fff));
    assert_eq!(CmdOpcode::from_raw(0x7fff).raw(), 0x7fff);
    assert_eq!(CmdStatus::from_raw(0x3), CmdStatus::BadParamErr);
    assert_eq!(
        CmdStatus::BadParamErr.to_string(),
        "MLX5_CMD_STAT_BAD_PARAM_ERR"
    );
    assert_eq!(CmdStatus::from_raw(0xee).to_string(), "CmdStatus(0xee)");
}
