//! Page accounting: QUERY_PAGES, MANAGE_PAGES and PAGE_REQUEST events, including commands
//! the firmware holds until the driver gives the pages it asked for.

mod common;

use common::{Harness, pas_bytes};
use uhca_fwif::cmd::*;
use uhca_fwif::consts::*;
use uhca_fwif::eqe::EqePageReq;
use uhca_mock::firmware::{FUNCTION_ID, FW_PAGE_FILL, PAGE_REQ_RELEASE_ALL, syndrome};
use uhca_mock::{CommandOutcome, FaultKind, MockConfig};

#[test]
fn query_pages_reports_each_kind() {
    let mut h = Harness::started(MockConfig {
        boot_pages: 3,
        init_pages: 5,
        regular_pages: 7,
        ..Default::default()
    });
    h.ok(&EnableHcaIn::new_cmd(), &[]);
    assert_eq!(h.query_pages(QueryPagesOpMod::BootPages), 3);
    assert_eq!(h.query_pages(QueryPagesOpMod::InitPages), 5);
    assert_eq!(h.query_pages(QueryPagesOpMod::RegularPages), 7);
    h.give_outstanding(QueryPagesOpMod::BootPages);
    assert_eq!(h.query_pages(QueryPagesOpMod::BootPages), 0);
    assert_eq!(h.query_pages(QueryPagesOpMod::InitPages), 5);
    let mut q = QueryPagesIn::new_cmd();
    q.set_op_mod(4);
    assert_eq!(
        h.err(&q, &[]),
        (CmdStatus::BadParamErr, syndrome::BAD_OP_MOD)
    );
    q.set_op_mod(1).set_function_id(2);
    assert_eq!(h.err(&q, &[]).1, syndrome::BAD_FUNCTION);
}

#[test]
fn given_pages_are_read_through_the_iommu() {
    let mut h = Harness::started(MockConfig::default());
    h.ok(&EnableHcaIn::new_cmd(), &[]);
    let pages = h.alloc_pages(2);
    // The firmware owns the pages now: it fills them.
    assert_eq!(h.give(&pages).status(), CmdStatus::Ok);
    let mut b = [0u8; 16];
    assert!(h.hca.host_read(pages[1] + 4000, &mut b));
    assert_eq!(b, [FW_PAGE_FILL; 16]);
    assert_eq!(h.hca.pages().held, 2);
    // Given twice.
    let r = h.give(&pages[..1]);
    assert_eq!(
        (r.status(), r.syndrome()),
        (CmdStatus::BadParamErr, syndrome::PAGE_DUPLICATE)
    );
    // Not 4 KiB aligned.
    let r = h.give(&[pages[0] + 8]);
    assert_eq!(r.syndrome(), syndrome::PAGE_NOT_ALIGNED);
    // Not mapped: an IOMMU fault, and the command fails.
    h.hca.clear_iommu_faults();
    let r = h.give(&[0x7000_0000]);
    assert_eq!(
        (r.status(), r.syndrome()),
        (CmdStatus::IntErr, syndrome::PAGE_NOT_MAPPED)
    );
    let f = h.hca.iommu_faults();
    assert_eq!(f[0].iova, 0x7000_0000);
    assert_eq!(f[0].kind, FaultKind::Unmapped);
    assert_eq!(h.hca.pages().held, 2, "nothing taken from a failed command");
    // More entries announced than given.
    let mut m = ManagePagesIn::new_cmd();
    m.set_function_id(uhca_mock::firmware::FUNCTION_ID);
    m.set_op_mod(ManagePagesOpMod::Give.raw())
        .set_input_num_entries(3);
    let two = h.alloc_pages(2);
    let r = h.exec(&m, &pas_bytes(&two));
    assert_eq!(r.status(), CmdStatus::BadInpLenErr);
    m.set_op_mod(9);
    assert_eq!(h.err(&m, &[]).1, syndrome::BAD_OP_MOD);
}

#[test]
fn objects_wait_for_regular_pages_asked_with_page_request() {
    let mut h = Harness::initialized(MockConfig {
        regular_pages: 4,
        ..Default::default()
    });
    let uar = h.alloc_uar();
    let pd = h.alloc_pd();
    // The async EQ: the firmware asks for its regular pages as soon as it exists.
    let mut eq = h.create_eq(uar, 5, &[EventType::Cmd, EventType::PageRequest]);
    let eqes = h.poll_eq(&mut eq);
    assert_eq!(eqes.len(), 1);
    assert_eq!(eqes[0].event_type(), EventType::PageRequest);
    let req = eqes[0].data_as::<EqePageReq>();
    assert_eq!(req.num_pages_signed(), 4);
    assert_eq!(
        req.func_id.get(),
        uhca_mock::firmware::FUNCTION_ID,
        "own function"
    );
    assert_eq!(
        req.ec_function.get(),
        0,
        "not the embedded CPU, not release-all"
    );
    assert_eq!(h.hca.pages().requested, 4);

    // A CQ now waits for the pages: the command stays with hardware.
    let (c, cq_pages) = h.create_cq_in(uar, eq.eqn, 4);
    let mut input = zerocopy::IntoBytes::as_bytes(&c).to_vec();
    input.extend_from_slice(&pas_bytes(&cq_pages));
    h.post(0, &input, 16);
    h.ring(0);
    assert!(!h.result(0, 16).completed);
    assert_eq!(
        h.hca.last_command(CmdOpcode::CreateCq).unwrap().outcome,
        CommandOutcome::Deferred
    );

    // The driver answers from another slot; the CQ then completes, with its event.
    let pages = h.alloc_pages(4);
    let mut m = ManagePagesIn::new_cmd();
    m.set_function_id(uhca_mock::firmware::FUNCTION_ID);
    m.set_op_mod(ManagePagesOpMod::Give.raw())
        .set_input_num_entries(4);
    let mut give = zerocopy::IntoBytes::as_bytes(&m).to_vec();
    give.extend_from_slice(&pas_bytes(&pages));
    let r = h.exec_raw_slot(31, &give, 16);
    assert_eq!(r.status(), CmdStatus::Ok);
    let r = h.result(0, 16);
    assert!(r.completed);
    assert_eq!(r.status(), CmdStatus::Ok);
    let cqn: CreateCqOut = r.as_out();
    assert_ne!(cqn.cqn(), 0);
    let vectors: Vec<u32> = h
        .poll_eq(&mut eq)
        .iter()
        .map(|e| e.data_as::<uhca_fwif::eqe::EqeCmd>().vector.get())
        .collect();
    assert_eq!(vectors, vec![1 << 31, 1 << 0]);
    assert_eq!(h.hca.pages().regular_outstanding, 0);
    assert_eq!(h.hca.pages().requested, 0);
    let _ = pd;
}

#[test]
fn cant_give_fails_the_waiting_command() {
    let mut h = Harness::initialized(MockConfig {
        regular_pages: 2,
        ..Default::default()
    });
    let uar = h.alloc_uar();
    let pd = h.alloc_pd();
    h.create_eq(uar, 4, &[EventType::PageRequest]);
    let mut mk = CreateMkeyIn::new_cmd();
    mk.memory_key_mkey_entry_mut()
        .set_pd(pd)
        .set_qpn(0xffffff)
        .set_length64(true)
        .set_lr(true);
    h.post(2, zerocopy::IntoBytes::as_bytes(&mk), 16);
    h.ring(2);
    assert!(!h.result(2, 16).completed);
    let mut m = ManagePagesIn::new_cmd();
    m.set_function_id(uhca_mock::firmware::FUNCTION_ID);
    m.set_op_mod(ManagePagesOpMod::CantGive.raw());
    let r = h.exec_raw_slot(31, zerocopy::IntoBytes::as_bytes(&m), 16);
    assert_eq!(r.status(), CmdStatus::Ok);
    let r = h.result(2, 16);
    assert!(r.completed);
    assert_eq!(
        (r.status(), r.syndrome()),
        (CmdStatus::NoResErr, syndrome::PAGES_REFUSED)
    );
    assert_eq!(h.hca.objects().mkeys, 0);
}

#[test]
fn without_a_page_request_queue_creation_fails() {
    let mut h = Harness::initialized(MockConfig {
        regular_pages: 2,
        ..Default::default()
    });
    let uar = h.alloc_uar();
    let eq = h.create_eq(uar, 4, &[EventType::Cmd]);
    let (c, pages) = h.create_cq_in(uar, eq.eqn, 2);
    assert_eq!(
        h.err(&c, &pas_bytes(&pages)),
        (CmdStatus::NoResErr, syndrome::NO_REGULAR_PAGES)
    );
    // Given up front, as Snabb and Theseus do.
    assert_eq!(h.give_outstanding(QueryPagesOpMod::RegularPages), 2);
    h.ok(&c, &pas_bytes(&pages));
}

#[test]
fn run_time_page_requests_both_ways() {
    let mut h = Harness::ready(MockConfig::default());
    let uar = h.alloc_uar();
    let mut eq = h.create_eq(uar, 4, &[EventType::PageRequest]);
    assert!(h.poll_eq(&mut eq).is_empty(), "nothing outstanding");
    h.hca.request_pages(3);
    let e = h.poll_eq(&mut eq);
    assert_eq!(e[0].data_as::<EqePageReq>().num_pages_signed(), 3);
    assert_eq!(h.query_pages(QueryPagesOpMod::RegularPages), 3);
    h.give_outstanding(QueryPagesOpMod::RegularPages);
    // The firmware returns five pages: a negative request, then TAKE gives them back.
    h.hca.request_pages(-5);
    let e = h.poll_eq(&mut eq);
    assert_eq!(e[0].data_as::<EqePageReq>().num_pages_signed(), -5);
    let mut t = ManagePagesIn::new_cmd();
    t.set_function_id(uhca_mock::firmware::FUNCTION_ID);
    t.set_op_mod(ManagePagesOpMod::Take.raw())
        .set_input_num_entries(10);
    let r = h.exec_ext(&t, &[], 10 * 8);
    let o: ManagePagesOut = r.as_out();
    assert_eq!(o.output_num_entries(), 5);
    // No more than the output has room for.
    h.hca.request_pages(-4);
    let r = h.exec_ext(&t, &[], 2 * 8);
    assert_eq!(r.as_out::<ManagePagesOut>().output_num_entries(), 2);
}

#[test]
fn page_requests_wait_for_an_event_queue() {
    let mut h = Harness::ready(MockConfig::default());
    h.hca.request_pages(2);
    assert_eq!(h.hca.pages().requested, 0, "no EQ to tell");
    let uar = h.alloc_uar();
    let mut eq = h.create_eq(uar, 4, &[EventType::PageRequest]);
    let e = h.poll_eq(&mut eq);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].data_as::<EqePageReq>().num_pages_signed(), 2);
}

#[test]
fn teardown_ends_commands_waiting_for_pages() {
    let mut h = Harness::initialized(MockConfig {
        regular_pages: 2,
        ..Default::default()
    });
    let uar = h.alloc_uar();
    let pd = h.alloc_pd();
    h.create_eq(uar, 4, &[EventType::PageRequest]);
    let mut mk = CreateMkeyIn::new_cmd();
    mk.memory_key_mkey_entry_mut()
        .set_pd(pd)
        .set_qpn(0xffffff)
        .set_length64(true)
        .set_lr(true);
    h.post(2, zerocopy::IntoBytes::as_bytes(&mk), 16);
    h.ring(2);
    assert!(!h.result(2, 16).completed);
    let t = TeardownHcaIn::new_cmd();
    let r = h.exec_raw_slot(31, zerocopy::IntoBytes::as_bytes(&t), 16);
    assert_eq!(r.status(), CmdStatus::Ok);
    let r = h.result(2, 16);
    assert!(r.completed);
    assert_eq!(
        (r.status(), r.syndrome()),
        (CmdStatus::BadSysStateErr, syndrome::HCA_TORN_DOWN)
    );
}

#[test]
fn pages_belong_to_the_function_query_pages_names() {
    let mut h = Harness::started(MockConfig::default());
    h.ok(&EnableHcaIn::new_cmd(), &[]);
    let mut q = QueryPagesIn::new_cmd();
    q.set_op_mod(QueryPagesOpMod::BootPages.raw());
    let o = h.ok(&q, &[]);
    assert_eq!(o.function_id(), FUNCTION_ID, "own function, not 0");
    assert!(!o.embedded_cpu_function());
    // Asking for it by its id is the same as asking for "self" (0).
    q.set_function_id(FUNCTION_ID);
    assert_eq!(h.ok(&q, &[]).num_pages(), o.num_pages());
    let pages = h.alloc_pages(o.num_pages() as usize);
    // MANAGE_PAGES for function 0, or for the embedded CPU function: refused.
    for (func, ec) in [(0, false), (FUNCTION_ID, true), (FUNCTION_ID + 1, false)] {
        let mut m = ManagePagesIn::new_cmd();
        m.set_op_mod(ManagePagesOpMod::Give.raw())
            .set_function_id(func)
            .set_embedded_cpu_function(ec)
            .set_input_num_entries(pages.len() as u32);
        assert_eq!(
            h.err(&m, &pas_bytes(&pages)),
            (CmdStatus::BadParamErr, syndrome::BAD_FUNCTION),
            "function {func}, ec {ec}"
        );
    }
    assert_eq!(h.hca.pages().held, 0);
    assert_eq!(h.give(&pages).status(), CmdStatus::Ok, "own function");
    assert_eq!(h.hca.pages().held, pages.len());
}

/// Up to INIT_HCA with `release_all_pages` turned on, regular pages given, and an EQ for
/// page requests.
fn initialized_with_release_all(release_all: bool) -> (Harness, common::TestEq) {
    let mut h = Harness::started(MockConfig::default());
    h.ok(&EnableHcaIn::new_cmd(), &[]);
    let mut s = SetIssiIn::new_cmd();
    s.set_current_issi(1);
    h.ok(&s, &[]);
    h.give_outstanding(QueryPagesOpMod::BootPages);
    let mut q = QueryHcaCapIn::new_cmd();
    q.set_op_mod(query_hca_cap_op_mod(
        HcaCapType::General,
        HcaCapMode::GetCur,
    ));
    let cur = h.ok(&q, &[]);
    let mut set = SetHcaCapIn::new_cmd();
    set.set_op_mod(set_hca_cap_op_mod(HcaCapType::General));
    set.capability_mut().copy_from_slice(cur.capability());
    set.cmd_hca_cap_mut().set_release_all_pages(release_all);
    h.ok(&set, &[]);
    h.give_outstanding(QueryPagesOpMod::InitPages);
    h.ok(&InitHcaIn::new_cmd(), &[]);
    h.give_outstanding(QueryPagesOpMod::RegularPages);
    let uar = h.alloc_uar();
    let eq = h.create_eq(uar, 4, &[EventType::PageRequest]);
    (h, eq)
}

#[test]
fn release_all_pages_is_a_page_request_with_the_release_all_bit() {
    let (mut h, mut eq) = initialized_with_release_all(true);
    let held = h.hca.pages().held;
    assert!(held > 0);
    assert!(h.hca.release_all_pages());
    let e = h.poll_eq(&mut eq);
    assert_eq!(e.len(), 1);
    let req = e[0].data_as::<EqePageReq>();
    assert_eq!(req.ec_function.get(), PAGE_REQ_RELEASE_ALL);
    assert_eq!(req.func_id.get(), FUNCTION_ID);
    assert_eq!(req.num_pages_signed(), -(held as i32));
    // The firmware holds nothing any more: TAKE returns nothing, and it asks for nothing.
    assert_eq!(h.hca.pages().held, 0);
    let mut t = ManagePagesIn::new_cmd();
    t.set_op_mod(ManagePagesOpMod::Take.raw())
        .set_function_id(FUNCTION_ID)
        .set_input_num_entries(8);
    let r = h.exec_ext(&t, &[], 8 * 8);
    assert_eq!(r.as_out::<ManagePagesOut>().output_num_entries(), 0);
    assert_eq!(h.query_pages(QueryPagesOpMod::RegularPages), 0);
}

#[test]
fn without_the_capability_the_firmware_never_releases_all_pages() {
    let (h, mut eq) = initialized_with_release_all(false);
    let held = h.hca.pages().held;
    assert!(!h.hca.release_all_pages());
    assert!(h.poll_eq(&mut eq).is_empty());
    assert_eq!(h.hca.pages().held, held);
}

#[test]
fn take_replies_can_be_limited_and_empty() {
    let mut h = Harness::ready(MockConfig::default());
    h.ok(&TeardownHcaIn::new_cmd(), &[]);
    let held = h.hca.pages().held;
    assert!(held > 3);
    h.hca.limit_page_returns(&[2, 0, 1]);
    let mut t = ManagePagesIn::new_cmd();
    t.set_op_mod(ManagePagesOpMod::Take.raw())
        .set_function_id(FUNCTION_ID)
        .set_input_num_entries(64);
    let mut got = Vec::new();
    for _ in 0..4 {
        let r = h.exec_ext(&t, &[], 64 * 8);
        got.push(r.as_out::<ManagePagesOut>().output_num_entries() as usize);
    }
    assert_eq!(got, vec![2, 0, 1, held - 3]);
    assert_eq!(h.hca.pages().held, 0);
}
