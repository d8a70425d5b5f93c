//! The command interface: delivery checks, mailbox chains through the IOMMU, completion
//! events, injected faults and the command log.

mod common;

use common::{BLOCK_STRIDE, Harness};
use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::*;
use uhca_fwif::cmdq::CmdProtBlock;
use uhca_fwif::consts::*;
use uhca_fwif::eqe::EqeCmd;
use uhca_hal::{Bar, Clock, Dma};
use uhca_mock::firmware::syndrome;
use uhca_mock::{CommandOutcome, FaultKind, MockConfig};
use zerocopy::{FromBytes, IntoBytes};

fn query_cap_input() -> Vec<u8> {
    let mut q = QueryHcaCapIn::new_cmd();
    q.set_op_mod(query_hca_cap_op_mod(
        HcaCapType::General,
        HcaCapMode::GetMax,
    ));
    q.as_bytes().to_vec()
}

#[test]
fn long_output_through_a_mailbox_chain() {
    let mut h = Harness::initialized(MockConfig::default());
    let r = h.exec_raw(&query_cap_input(), QueryHcaCapOut::SIZE);
    assert!(r.completed);
    assert_eq!(r.delivery, DeliveryStatus::Ok);
    let o: QueryHcaCapOut = r.as_out();
    assert_eq!(o.cmd_hca_cap().log_max_qp(), 17);
    assert!(o.cmd_hca_cap().fast_teardown());
    let log = h.hca.command_log();
    let last = log.last().unwrap();
    assert_eq!(last.opcode, CmdOpcode::QueryHcaCap);
    assert_eq!(last.outcome, CommandOutcome::Completed);
    assert_eq!(last.status, CmdStatus::Ok);
}

#[test]
fn bad_type_is_a_descriptor_error() {
    let mut h = Harness::started(MockConfig::default());
    let mut e = h.post(0, EnableHcaIn::new_cmd().as_bytes(), 16);
    e.r#type = 3;
    h.write_entry(0, &e);
    h.ring(0);
    let r = h.result(0, 16);
    assert!(r.completed);
    assert_eq!(r.delivery, DeliveryStatus::CmdDescrErr);
    assert_eq!(
        h.hca.hca_state(),
        uhca_mock::HcaState::Disabled,
        "not executed"
    );
    assert_eq!(
        h.hca.command_log()[0].outcome,
        CommandOutcome::DeliveryError
    );
}

#[test]
fn token_mismatch_in_a_mailbox() {
    let mut h = Harness::initialized(MockConfig::default());
    let input = query_cap_input();
    let e = h.post(0, &input, QueryHcaCapOut::SIZE);
    // Corrupt the token of the third output block.
    let blk = h.outbox.iova + 2 * BLOCK_STRIDE;
    let mut b = [0u8; 576];
    assert!(h.hca.host_read(blk, &mut b));
    b[0x23d] = e.token.wrapping_add(1);
    assert!(h.hca.host_write(blk, &b));
    h.ring(0);
    assert_eq!(h.result(0, 16).delivery, DeliveryStatus::TokErr);
}

#[test]
fn bad_block_number() {
    let mut h = Harness::initialized(MockConfig::default());
    h.post(0, &query_cap_input(), QueryHcaCapOut::SIZE);
    let mut b = CmdProtBlock::default();
    assert!(h.hca.host_read(h.outbox.iova, b.as_mut_bytes()));
    b.block_num = 7.into();
    assert!(h.hca.host_write(h.outbox.iova, b.as_bytes()));
    h.ring(0);
    assert_eq!(h.result(0, 16).delivery, DeliveryStatus::BadBlkNumErr);
}

#[test]
fn misaligned_and_unmapped_mailboxes() {
    let mut h = Harness::initialized(MockConfig::default());
    let mut e = h.post(0, &query_cap_input(), QueryHcaCapOut::SIZE);
    e.out_ptr = (h.outbox.iova + 0x80).into();
    e.status_own = 1;
    h.write_entry(0, &e);
    h.ring(0);
    assert_eq!(h.result(0, 16).delivery, DeliveryStatus::OutPtrAlignErr);

    // A chain that ends too early.
    h.post(0, &query_cap_input(), QueryHcaCapOut::SIZE);
    let mut b = CmdProtBlock::default();
    assert!(
        h.hca
            .host_read(h.outbox.iova + BLOCK_STRIDE, b.as_mut_bytes())
    );
    b.next = 0.into();
    assert!(h.hca.host_write(h.outbox.iova + BLOCK_STRIDE, b.as_bytes()));
    h.ring(0);
    assert_eq!(h.result(0, 16).delivery, DeliveryStatus::OutLengthErr);

    // An input mailbox pointer that no mapping covers: an IOMMU fault, FW error.
    let mut m = ManagePagesIn::new_cmd();
    m.set_function_id(uhca_mock::firmware::FUNCTION_ID);
    m.set_op_mod(ManagePagesOpMod::Give.raw())
        .set_input_num_entries(1);
    let mut input = m.as_bytes().to_vec();
    input.extend_from_slice(&[0u8; 8]);
    let mut e = h.post(0, &input, 16);
    e.in_ptr = 0x4000_0000.into();
    h.write_entry(0, &e);
    h.clear_iommu_faults_helper();
    h.ring(0);
    assert_eq!(h.result(0, 16).delivery, DeliveryStatus::FwErr);
    let f = h.hca.iommu_faults();
    assert_eq!(f.len(), 1);
    assert_eq!(f[0].iova, 0x4000_0000);
    assert_eq!(f[0].kind, FaultKind::Unmapped);
    assert_eq!(f[0].context, "input mailbox");
    // Taking them hands each fault out once (the vfio-user server's reporter prints them so).
    assert_eq!(h.hca.take_iommu_faults(), f);
    assert!(h.hca.iommu_faults().is_empty());
    assert!(h.hca.take_iommu_faults().is_empty());
}

trait ClearFaults {
    fn clear_iommu_faults_helper(&self);
}
impl ClearFaults for Harness {
    fn clear_iommu_faults_helper(&self) {
        self.hca.clear_iommu_faults();
    }
}

#[test]
fn lengths_are_checked() {
    let mut h = Harness::initialized(MockConfig::default());
    // Delivery: an input shorter than the header.
    let mut e = h.post(0, EnableHcaIn::new_cmd().as_bytes(), 16);
    e.inlen = 4.into();
    h.write_entry(0, &e);
    h.ring(0);
    assert_eq!(h.result(0, 16).delivery, DeliveryStatus::InLengthErr);
    // Command status: an output shorter than QUERY_HCA_CAP's output layout.
    let r = h.exec_raw(&query_cap_input(), 16);
    assert_eq!(r.delivery, DeliveryStatus::Ok);
    assert_eq!(r.status(), CmdStatus::BadOutpLenErr);
    assert_eq!(r.syndrome(), syndrome::BAD_OUTPUT_LEN);
    // Command status: an input shorter than its layout.
    let r = h.exec_raw(&CreateCqIn::new_cmd().as_bytes()[..32], 16);
    assert_eq!(r.status(), CmdStatus::BadInpLenErr);
}

/// Issue 31 F4: QUERY_HCA_CAP answers an output that holds the capability page asked for,
/// as rdma-core's DevX tests read it on ConnectX (16 + 2048 bytes,
/// `tests/mlx5_prm_structs.py` `QueryCmdHcaCapOut`), not only the whole 4112-byte union;
/// an output too short for the page is still refused.
#[test]
fn query_hca_cap_answers_an_output_that_holds_the_page() {
    let mut h = Harness::initialized(MockConfig::default());
    let r = h.exec_raw(&query_cap_input(), 16 + 2048);
    assert_eq!(r.delivery, DeliveryStatus::Ok);
    assert_eq!(r.status(), CmdStatus::Ok, "syndrome {:#x}", r.syndrome());
    assert_eq!(r.out.len(), 16 + 2048);
    let mut full = r.out.clone();
    full.resize(QueryHcaCapOut::SIZE, 0);
    let o = QueryHcaCapOut::read_from_bytes(&full).unwrap();
    assert_eq!(o.cmd_hca_cap().log_max_qp(), 17);
    // Exactly the general page (its layout's size) is enough too.
    let page = uhca_fwif::ctx::CmdHcaCap::SIZE;
    let r = h.exec_raw(&query_cap_input(), 16 + page);
    assert_eq!(r.status(), CmdStatus::Ok);
    // One byte short of the page: refused.
    let r = h.exec_raw(&query_cap_input(), 16 + page - 1);
    assert_eq!(r.status(), CmdStatus::BadOutpLenErr);
    assert_eq!(r.syndrome(), syndrome::BAD_OUTPUT_LEN);
}

#[test]
fn unknown_opcode_and_uid() {
    let mut h = Harness::initialized(MockConfig::default());
    let mut hdr = MboxIn::default();
    hdr.set_opcode(0x0933);
    let r = h.exec_raw(hdr.as_bytes(), 16);
    assert_eq!(r.status(), CmdStatus::BadOpErr);
    let mut a = AllocPdIn::new_cmd();
    a.set_uid(5);
    assert_eq!(h.err(&a, &[]), (CmdStatus::BadParamErr, syndrome::BAD_UID));
    let mut a = AllocPdIn::new_cmd();
    a.set_op_mod(1);
    assert_eq!(
        h.err(&a, &[]),
        (CmdStatus::BadParamErr, syndrome::BAD_OP_MOD)
    );
    let r = h.exec(&nop_cmd(), &[]);
    assert_eq!(r.status(), CmdStatus::Ok);
}

/// NOP has no layout in `uhca-fwif`; its input is the bare header.
fn nop_cmd() -> MboxInCmd {
    let mut m = MboxIn::default();
    m.set_opcode(CmdOpcode::Nop.raw());
    MboxInCmd(m)
}
#[derive(
    Clone,
    Copy,
    zerocopy::FromBytes,
    zerocopy::IntoBytes,
    zerocopy::KnownLayout,
    zerocopy::Immutable,
)]
#[repr(transparent)]
struct MboxInCmd(MboxIn);
impl uhca_fwif::PrmLayout for MboxInCmd {
    const LAYOUT: uhca_fwif::LayoutInfo = MboxIn::LAYOUT;
    const SIZE: usize = MboxIn::SIZE;
}
impl Command for MboxInCmd {
    const OPCODE: CmdOpcode = CmdOpcode::Nop;
    type Out = MboxOut;
}

#[test]
fn software_owned_slot_is_ignored() {
    let mut h = Harness::started(MockConfig::default());
    let mut e = h.post(0, EnableHcaIn::new_cmd().as_bytes(), 16);
    e.status_own = 0;
    h.write_entry(0, &e);
    h.ring(0);
    assert!(h.hca.command_log().is_empty());
    assert!(
        h.hca
            .notes()
            .iter()
            .any(|n| n.text.contains("software owns"))
    );
}

#[test]
fn doorbell_before_ready_or_address_is_ignored() {
    let mut h = common::Harness::new(MockConfig::default());
    h.post(0, EnableHcaIn::new_cmd().as_bytes(), 16);
    h.ring(0);
    assert!(h.hca.command_log().is_empty());
    assert!(h.hca.notes()[0].text.contains("initializing"));
}

#[test]
fn completion_event_carries_the_slot_vector() {
    let mut h = Harness::ready(MockConfig::default());
    let uar = h.alloc_uar();
    let mut eq = h.create_eq(uar, 4, &[EventType::Cmd]);
    assert!(
        h.poll_eq(&mut eq).is_empty(),
        "CREATE_EQ itself is not reported"
    );
    h.post(3, AllocPdIn::new_cmd().as_bytes(), 16);
    h.ring(3);
    assert!(h.result(3, 16).completed);
    let eqes = h.poll_eq(&mut eq);
    assert_eq!(eqes.len(), 1);
    assert_eq!(eqes[0].event_type(), EventType::Cmd);
    assert_eq!(eqes[0].data_as::<EqeCmd>().vector.get(), 1 << 3);
    // Arm: the next EQE raises the EQ's interrupt vector.
    h.eq_doorbell(&eq, true);
    h.ok(&AllocPdIn::new_cmd(), &[]);
    assert_eq!(h.hca.interrupts(0), 1);
    assert_eq!(h.hca.eq_counters(eq.eqn), Some((1, 2)));
}

#[test]
fn injected_failure_and_hang() {
    let mut h = Harness::ready(MockConfig::default());
    h.hca
        .fail_next_command(CmdOpcode::AllocPd, CmdStatus::NoResErr, 0xabcd);
    assert_eq!(
        h.err(&AllocPdIn::new_cmd(), &[]),
        (CmdStatus::NoResErr, 0xabcd)
    );
    assert_eq!(h.hca.objects().pds, 0, "not executed");
    assert_eq!(
        h.hca.last_command(CmdOpcode::AllocPd).unwrap().outcome,
        CommandOutcome::Injected
    );
    h.alloc_pd();

    h.hca.hang_next_command(CmdOpcode::AllocPd);
    h.post(1, AllocPdIn::new_cmd().as_bytes(), 16);
    h.ring(1);
    assert!(!h.result(1, 16).completed);
    h.p.delay_us(1_000_000);
    assert!(!h.result(1, 16).completed, "still owned by hardware");
    // Other slots still work.
    h.alloc_uar();
    h.hca.complete_hung_commands();
    let r = h.result(1, 16);
    assert!(r.completed);
    assert_eq!(r.status(), CmdStatus::Ok);
    assert_eq!(h.hca.objects().pds, 2);
}

/// A lying firmware: the output filter rewrites what the driver reads back, not what the
/// model did (the PD exists although the output says the command failed).
#[test]
fn the_output_filter_rewrites_outputs_not_the_model() {
    let mut h = Harness::ready(MockConfig::default());
    let before = h.hca.objects().pds;
    h.hca
        .set_command_output_filter(Some(Box::new(|op, out: &mut [u8]| {
            if op == CmdOpcode::AllocPd {
                out[0] = CmdStatus::BadParamErr.raw();
                out[4..8].copy_from_slice(&0x1234_5678u32.to_be_bytes());
            }
        })));
    assert_eq!(
        h.err(&AllocPdIn::new_cmd(), &[]),
        (CmdStatus::BadParamErr, 0x1234_5678)
    );
    assert_eq!(h.hca.objects().pds, before + 1, "the model executed it");
    // Other commands are passed through untouched; removing the filter ends the lie.
    h.alloc_uar();
    h.hca.set_command_output_filter(None);
    h.alloc_pd();
    assert_eq!(h.hca.objects().pds, before + 2);
}

#[test]
fn command_log_records_errors() {
    let mut h = Harness::ready(MockConfig::default());
    h.hca.clear_command_log();
    let mut d = DeallocPdIn::new_cmd();
    d.set_pd(0x777);
    h.err(&d, &[]);
    let log = h.hca.command_log();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].opcode, CmdOpcode::DeallocPd);
    assert_eq!(log[0].status, CmdStatus::BadResErr);
    assert_eq!(log[0].syndrome, syndrome::NO_SUCH_OBJECT);
    assert_eq!(log[0].slot, 0);
    assert_eq!(log[0].time_ns, h.hca.now_ns());
}

#[test]
fn entry_unreachable_queue_faults() {
    let h = Harness::started(MockConfig::default());
    // Point the queue at an IOVA nothing maps.
    h.p.write_be32(0x10, 0x1);
    h.p.write_be32(0x14, 0);
    h.ring(0);
    let f = h.hca.iommu_faults();
    assert_eq!(f[0].context, "command entry");
    // Free the mailboxes and reuse them: the device faults instead of touching freed memory.
    let r = h.p.alloc_coherent(576, 1024).unwrap();
    let iova = r.iova;
    // SAFETY: the region came from this platform and the device does not use it.
    unsafe { h.p.free_coherent(r) };
    assert!(!h.hca.is_mapped(iova, 1));
}

#[test]
fn doorbells_from_several_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<uhca_mock::MockPlatform>();
    assert_send_sync::<uhca_mock::MockHca>();
    let mut h = Harness::ready(MockConfig::default());
    for slot in 1..=8u8 {
        h.post(slot, AllocPdIn::new_cmd().as_bytes(), 16);
    }
    let threads: Vec<_> = (1..=8u8)
        .map(|slot| {
            let p = h.p.clone();
            std::thread::spawn(move || p.write_be32(common::CMD_DBELL, 1 << slot))
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let mut pds = std::collections::BTreeSet::new();
    for slot in 1..=8u8 {
        let r = h.result(slot, 16);
        assert!(r.completed);
        pds.insert(r.as_out::<AllocPdOut>().pd());
    }
    assert_eq!(pds.len(), 8, "eight distinct PDs");
}

#[test]
fn several_hcas_are_independent() {
    let mut a = Harness::ready(MockConfig::default());
    let b = Harness::ready(MockConfig::infiniband());
    a.alloc_pd();
    assert_eq!(a.hca.objects().pds, 1);
    assert_eq!(b.hca.objects().pds, 0);
    assert!(!b.hca.is_mapped(a.cmdq.iova + 4096 * 1000, 1));
}

#[test]
fn bounds_are_exact() {
    let mut h = Harness::initialized(MockConfig::default());
    // A 575-byte "mailbox": the device reads 576 bytes, one past the mapping.
    let short = h.p.alloc_coherent(575, 4096).unwrap();
    let mut m = ManagePagesIn::new_cmd();
    m.set_function_id(uhca_mock::firmware::FUNCTION_ID);
    m.set_op_mod(ManagePagesOpMod::Give.raw())
        .set_input_num_entries(1);
    let mut input = m.as_bytes().to_vec();
    input.extend_from_slice(&[0u8; 8]);
    let mut e = h.post(0, &input, 16);
    e.in_ptr = short.iova.into();
    h.write_entry(0, &e);
    h.hca.clear_iommu_faults();
    h.ring(0);
    assert_eq!(h.result(0, 16).delivery, DeliveryStatus::FwErr);
    let f = h.hca.iommu_faults();
    assert_eq!((f[0].iova, f[0].len, f[0].write), (short.iova, 576, false));
}
