//! A whole life cycle in the order rdma-core's VFIO provider and Linux use, with an async EQ
//! for command completions and page requests served while commands wait, then RoCE objects
//! up to an RC QP in RTS, and an orderly teardown that gets every page back.

mod common;

use common::{Harness, TestEq, pas_bytes};
use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::*;
use uhca_fwif::consts::*;
use uhca_fwif::eqe::EqePageReq;
use uhca_hal::Clock;
use uhca_mock::{HcaState, MockConfig};
use zerocopy::IntoBytes;

/// Runs a command in slot 0 and, while it waits, serves page requests from `eq` through
/// slot 31, as a driver's command engine does. Bounded by a timeout on the model clock.
fn exec_serving<C: Command>(h: &mut Harness, eq: &mut TestEq, inp: &C, extra: &[u8]) -> C::Out {
    let mut input = inp.as_bytes().to_vec();
    input.extend_from_slice(extra);
    let outlen = <C::Out as PrmLayout>::SIZE;
    h.post(0, &input, outlen);
    h.ring(0);
    let deadline = h.p.now_ns() + 1_000_000_000;
    loop {
        for eqe in h.poll_eq(eq) {
            if eqe.event_type() == EventType::PageRequest {
                let n = eqe.data_as::<EqePageReq>().num_pages_signed();
                assert!(n > 0);
                let pages = h.alloc_pages(n as usize);
                let mut m = ManagePagesIn::new_cmd();
                m.set_op_mod(ManagePagesOpMod::Give.raw())
                    .set_input_num_entries(n as u32);
                let mut give = m.as_bytes().to_vec();
                give.extend_from_slice(&pas_bytes(&pages));
                assert_eq!(h.exec_raw_slot(31, &give, 16).status(), CmdStatus::Ok);
            }
        }
        h.eq_doorbell(eq, true);
        let r = h.result(0, outlen);
        if r.completed {
            assert_eq!(r.status(), CmdStatus::Ok, "syndrome {:#x}", r.syndrome());
            return r.as_out();
        }
        assert!(h.p.now_ns() < deadline, "command timed out");
        h.p.delay_us(10);
    }
}

#[test]
fn rdma_core_order_bring_up_and_teardown() {
    let mut h = Harness::started(MockConfig {
        regular_pages: 24,
        ..MockConfig::ethernet()
    });
    h.ok(&EnableHcaIn::new_cmd(), &[]);
    assert_eq!(
        h.ok(&QueryIssiIn::new_cmd(), &[]).supported_issi_dw0() & 2,
        2
    );
    let mut s = SetIssiIn::new_cmd();
    s.set_current_issi(1);
    h.ok(&s, &[]);
    let boot = h.give_outstanding(QueryPagesOpMod::BootPages);
    let mut a = AccessRegisterIn::new_cmd();
    a.set_op_mod(ACCESS_REGISTER_OP_MOD_WRITE)
        .set_register_id(REG_HOST_ENDIANNESS);
    h.exec_ext(&a, &[0u8; 16], 16);
    // General caps: copy the current ones, change what a driver changes.
    let mut q = QueryHcaCapIn::new_cmd();
    q.set_op_mod(query_hca_cap_op_mod(
        HcaCapType::General,
        HcaCapMode::GetCur,
    ));
    let cur = h.ok(&q, &[]);
    let mut set = SetHcaCapIn::new_cmd();
    set.set_op_mod(set_hca_cap_op_mod(HcaCapType::General));
    set.capability_mut().copy_from_slice(cur.capability());
    set.cmd_hca_cap_mut()
        .set_cmdif_checksum(0)
        .set_log_uar_page_sz(0)
        .set_release_all_pages(true);
    h.ok(&set, &[]);
    // RoCE caps: the source UDP port chosen by software.
    q.set_op_mod(query_hca_cap_op_mod(HcaCapType::Roce, HcaCapMode::GetCur));
    let roce = h.ok(&q, &[]);
    let mut set = SetHcaCapIn::new_cmd();
    set.set_op_mod(set_hca_cap_op_mod(HcaCapType::Roce));
    set.capability_mut().copy_from_slice(roce.capability());
    set.capability_mut()[0] |= 0x08; // sw_r_roce_src_udp_port (bit 4)
    h.ok(&set, &[]);
    let init = h.give_outstanding(QueryPagesOpMod::InitPages);
    h.ok(&InitHcaIn::new_cmd(), &[]);
    h.enable_roce();
    let uar = h.alloc_uar();
    let mut eq = h.create_eq(
        uar,
        7,
        &[
            EventType::Cmd,
            EventType::PageRequest,
            EventType::PortChange,
        ],
    );
    h.eq_doorbell(&eq, true);

    // Objects: the firmware asks for its regular pages while they are created.
    let pd = exec_serving(&mut h, &mut eq, &AllocPdIn::new_cmd(), &[]).pd();
    let mut mk = CreateMkeyIn::new_cmd();
    mk.memory_key_mkey_entry_mut()
        .set_pd(pd)
        .set_qpn(0xffffff)
        .set_length64(true)
        .set_lr(true)
        .set_lw(true);
    exec_serving(&mut h, &mut eq, &mk, &[]);
    assert_eq!(
        h.hca.last_command(CmdOpcode::ManagePages).map(|r| r.slot),
        Some(31),
        "pages given through the page slot"
    );
    assert_eq!(h.hca.pages().regular_outstanding, 0);
    let (c, pages) = h.create_cq_in(uar, eq.eqn, 6);
    let cqn = exec_serving(&mut h, &mut eq, &c, &pas_bytes(&pages)).cqn();
    let (c, pages) = h.create_qp_in(QpServiceType::Rc, pd, cqn, uar);
    let qpn = exec_serving(&mut h, &mut eq, &c, &pas_bytes(&pages)).qpn();
    h.set_gid(1);
    let mut m = Rst2initQpIn::new_cmd();
    m.qpc_mut().set_pm_state(common::PM_STATE_MIGRATED);
    m.set_qpn(qpn);
    m.qpc_mut()
        .set_rwe(true)
        .primary_address_path_mut()
        .set_vhca_port_num(1);
    exec_serving(&mut h, &mut eq, &m, &[]);
    let mut m = Init2rtrQpIn::new_cmd();
    m.qpc_mut().set_pm_state(common::PM_STATE_MIGRATED);
    m.set_qpn(qpn);
    m.qpc_mut()
        .set_mtu(5)
        .set_log_msg_max(20)
        .set_remote_qpn(qpn)
        .set_min_rnr_nak(12);
    m.qpc_mut()
        .primary_address_path_mut()
        .set_vhca_port_num(1)
        .set_src_addr_index(1)
        .set_udp_sport(0xc001);
    exec_serving(&mut h, &mut eq, &m, &[]);
    let mut m = Rtr2rtsQpIn::new_cmd();
    m.qpc_mut().set_pm_state(common::PM_STATE_MIGRATED);
    m.set_qpn(qpn);
    m.qpc_mut().set_retry_count(7).set_rnr_retry(7);
    exec_serving(&mut h, &mut eq, &m, &[]);
    assert_eq!(h.hca.qp_state(qpn), Some(QpState::Rts));
    assert!(h.hca.interrupts(0) > 0, "the armed EQ raised its vector");

    // Teardown: objects, EQ, UAR, TEARDOWN_HCA, reclaim everything, DISABLE_HCA.
    let mut d = DestroyQpIn::new_cmd();
    d.set_qpn(qpn);
    h.ok(&d, &[]);
    let mut d = DestroyCqIn::new_cmd();
    d.set_cqn(cqn);
    h.ok(&d, &[]);
    let mut d = DestroyEqIn::new_cmd();
    d.set_eq_number(eq.eqn);
    h.ok(&d, &[]);
    let mut d = DeallocUarIn::new_cmd();
    d.set_uar(uar);
    h.ok(&d, &[]);
    h.ok(&TeardownHcaIn::new_cmd(), &[]);
    let mut reclaimed = 0;
    loop {
        let mut t = ManagePagesIn::new_cmd();
        t.set_op_mod(ManagePagesOpMod::Take.raw())
            .set_input_num_entries(64);
        let r = h.exec_ext(&t, &[], 64 * 8);
        let n = r.as_out::<ManagePagesOut>().output_num_entries() as usize;
        if n == 0 {
            break;
        }
        reclaimed += n;
    }
    assert_eq!(reclaimed, boot + init + 24);
    h.ok(&DisableHcaIn::new_cmd(), &[]);
    assert_eq!(h.hca.hca_state(), HcaState::Disabled);
    assert!(h.hca.iommu_faults().is_empty());
    assert!(h.hca.notes().is_empty(), "{:?}", h.hca.notes());
    // Every command is in the log, none failed.
    assert!(
        h.hca
            .command_log()
            .iter()
            .all(|r| r.status == CmdStatus::Ok)
    );
}
