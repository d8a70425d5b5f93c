//! Bring-up and teardown of the driver on the mock ConnectX: the command sequence, the
//! page accounting, and every injected firmware fault surfacing as a typed error without
//! a hang.

mod common;

use common::*;

use uhca_driver::{Error, Hca, HcaConfig, TeardownMode};
use uhca_fwif::consts::{CmdOpcode, CmdStatus};
use uhca_mock::{ClockMode, LinkLayer, MockConfig, MockHca};

fn opcodes(hca: &MockHca) -> Vec<CmdOpcode> {
    hca.command_log()
        .iter()
        .filter(|r| r.outcome != uhca_mock::CommandOutcome::Deferred)
        .map(|r| r.opcode)
        .collect()
}

#[test]
fn ethernet_bring_up_follows_rdma_core_order_and_fast_teardown_disables_the_nic() {
    let dev = mock(LinkLayer::Ethernet);
    let hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    use CmdOpcode::*;
    let seq = opcodes(&dev);
    let expected_prefix = [
        EnableHca,
        QueryIssi,
        SetIssi,
        QueryPages,
        ManagePages,
        AccessReg,
        QueryHcaCap,
        QueryHcaCap,
        SetHcaCap,
        QueryHcaCap,
    ];
    assert_eq!(
        &seq[..expected_prefix.len()],
        &expected_prefix,
        "full log: {seq:?}"
    );
    let tail: Vec<_> = seq.iter().skip_while(|&&o| o != InitHca).copied().collect();
    assert_eq!(
        &tail[..4],
        &[InitHca, ModifyNicVportContext, AllocUar, CreateEq],
        "{seq:?}"
    );
    // QUERY_PAGES for init pages and their MANAGE_PAGES come right before INIT_HCA.
    let init = seq.iter().position(|&o| o == InitHca).unwrap();
    assert_eq!(&seq[init - 2..init], &[QueryPages, ManagePages]);
    assert!(dev.roce_enabled(), "RoCE enabled on the Ethernet port");
    assert_eq!(dev.issi(), 1);
    assert!(hca.caps().roce && hca.roce_caps().is_some());
    assert!(hca.firmware_pages() > 0);
    assert_eq!(
        dev.pages().held,
        hca.firmware_pages(),
        "driver and firmware agree on pages"
    );
    assert!(dev.iommu_faults().is_empty(), "{:?}", dev.iommu_faults());

    dev.clear_command_log();
    hca.close().expect("teardown");
    // The mock offers fast teardown, so the default teardown uses it: TEARDOWN_HCA with
    // the prepare-fast profile, then the NIC interface disabled; the firmware lets go of
    // its pages without returning them one by one (as in Linux's fast unload).
    let seq = opcodes(&dev);
    assert_eq!(seq, [DestroyEq, DeallocUar, TeardownHca], "{seq:?}");
    assert_eq!(dev.last_command(TeardownHca).unwrap().op_mod, 0);
    assert_eq!(dev.hca_state(), uhca_mock::HcaState::TornDown);
    assert!(dev.iommu_faults().is_empty(), "{:?}", dev.iommu_faults());
    let objects = dev.objects();
    assert_eq!((objects.uars, objects.eqs), (0, 0));
}

#[test]
fn graceful_teardown_reclaims_pages_and_disables_the_hca() {
    let dev = mock(LinkLayer::InfiniBand);
    let hca = Hca::open_with(
        dev.platform(),
        HcaConfig {
            teardown: TeardownMode::Graceful,
            ..cfg()
        },
    )
    .expect("bring-up");
    assert!(
        !opcodes(&dev).contains(&CmdOpcode::ModifyNicVportContext),
        "no RoCE enable on IB"
    );
    dev.clear_command_log();
    hca.close().expect("teardown");
    let seq = opcodes(&dev);
    let t = seq
        .iter()
        .position(|&o| o == CmdOpcode::TeardownHca)
        .unwrap();
    assert_eq!(seq[t + 1], CmdOpcode::ManagePages, "{seq:?}");
    assert_eq!(seq.last(), Some(&CmdOpcode::DisableHca), "{seq:?}");
    assert_eq!(dev.pages().held, 0);
}

#[test]
fn page_requests_at_run_time_are_served() {
    let dev = mock(LinkLayer::Ethernet);
    let mut hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    hca.process_events().unwrap();
    let before = hca.firmware_pages();
    assert_eq!(dev.pages().held, before);
    dev.request_pages(40);
    hca.process_events().unwrap();
    assert_eq!(hca.firmware_pages(), before + 40);
    assert_eq!(dev.pages().held, before + 40);
    dev.request_pages(-25);
    hca.process_events().unwrap();
    assert_eq!(hca.firmware_pages(), before + 15);
    assert_eq!(dev.pages().held, before + 15);
    hca.close().unwrap();
}

#[test]
fn a_failing_command_is_a_typed_error_naming_it() {
    let dev = mock(LinkLayer::Ethernet);
    dev.fail_next_command(CmdOpcode::InitHca, CmdStatus::BadParamErr, 0x1234);
    let err = Hca::open_with(dev.platform(), cfg()).unwrap_err();
    assert_eq!(err.command_status(), Some(CmdStatus::BadParamErr));
    let msg = err.to_string();
    assert!(
        msg.contains("INIT_HCA") && msg.contains("BAD_PARAM") && msg.contains("0x1234"),
        "{msg}"
    );
    // The failed bring-up was undone: pages back, HCA disabled.
    assert_eq!(dev.pages().held, 0);
    assert_eq!(
        dev.command_log().last().map(|r| r.opcode),
        Some(CmdOpcode::DisableHca)
    );
}

#[test]
fn a_command_that_never_completes_times_out() {
    let dev = mock(LinkLayer::Ethernet);
    dev.hang_next_command(CmdOpcode::QueryHcaCap);
    let err = Hca::open_with(dev.platform(), cfg()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Command(uhca_hal::cmdq::CmdError::Timeout { .. })
        ),
        "{err}"
    );
    assert!(err.to_string().contains("QUERY_HCA_CAP"), "{err}");
}

#[test]
fn firmware_that_never_gets_ready_is_reported() {
    let dev = mock(LinkLayer::Ethernet);
    dev.set_stuck_initializing(true);
    let err = Hca::open_with(dev.platform(), cfg()).unwrap_err();
    assert!(
        matches!(
            err,
            Error::InitSeg(uhca_hal::init_seg::InitSegError::FirmwareNotReady { .. })
        ),
        "{err}"
    );
}

#[test]
fn fatal_health_turns_every_later_call_into_an_error_and_teardown_does_not_hang() {
    let dev = mock(LinkLayer::Ethernet);
    let mut hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    dev.set_fatal_health(0x8, 0);
    let err = hca.poll_health().unwrap_err();
    assert!(matches!(err, Error::Fatal(_)), "{err}");
    assert!(matches!(hca.process_events(), Err(Error::Fatal(_))));
    dev.clear_command_log();
    let err = hca.close().unwrap_err();
    assert!(matches!(err, Error::Fatal(_)));
    assert!(
        dev.command_log().is_empty(),
        "no command sent to a dead device"
    );
}

#[test]
fn a_device_that_fell_off_the_bus_is_fatal() {
    let dev = mock(LinkLayer::Ethernet);
    let mut hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    dev.set_pci_all_ones(true);
    assert!(matches!(hca.poll_health(), Err(Error::Fatal(_))));
    assert!(hca.close().is_err());
}

#[test]
fn not_a_connectx() {
    // Vendor id is checked before anything else; the mock is always a ConnectX, so make
    // its config space read all ones, as a missing device would.
    let dev = mock(LinkLayer::Ethernet);
    dev.set_pci_all_ones(true);
    let err = Hca::open_with(dev.platform(), cfg()).unwrap_err();
    assert!(
        matches!(err, Error::NotAConnectX { vendor: 0xffff, .. }),
        "{err}"
    );
}

#[test]
fn closing_with_a_cq_still_alive_keeps_the_eq_memory_until_the_device_is_quiet() {
    let dev = mock(LinkLayer::Ethernet);
    let mut hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    let cq = hca.create_cq(16).expect("cq");
    // The CQ still uses the EQ: DESTROY_EQ is refused, and the teardown goes on.
    let err = hca.close().unwrap_err();
    assert!(err.to_string().contains("DESTROY_EQ"), "{err}");
    assert!(
        dev.iommu_faults().is_empty(),
        "device wrote freed memory: {:?}",
        dev.iommu_faults()
    );
    // The CQ's memory is leaked on purpose (the device may still use it).
    core::mem::forget(cq);
}

/// Issue 18 item 8: the driver's EQ subscribes to what Linux's async EQ and rdma-core's
/// VFIO EQ subscribe to (command completions, page requests, Linux's
/// `MLX5_ASYNC_EVENT_MASK` less SQ_DRAINED and PATH_MIG), and not to INTERNAL_ERROR (0x8),
/// which neither subscribes to; read back from the device with QUERY_EQ.
/// A raw QUERY_EQ (`Hca::exec`, the `raw` feature).
#[cfg(feature = "raw")]
#[test]
fn the_event_queue_subscribes_to_what_the_nvidia_drivers_do_and_not_internal_error() {
    use uhca_fwif::cmd::{Command, QueryEqIn};
    use uhca_fwif::consts::EventType;
    let dev = mock(LinkLayer::Ethernet);
    let mut hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    let mut q = QueryEqIn::new_cmd();
    q.set_eq_number(hca.eqn());
    let out = hca.exec(&q, &[], &mut []).expect("QUERY_EQ");
    let mask = out.event_bitmask();
    assert_eq!(
        mask & 1 << EventType::InternalError.raw(),
        0,
        "INTERNAL_ERROR subscribed: {mask:#x}"
    );
    let wanted = [
        EventType::Cmd,
        EventType::PageRequest,
        EventType::PortChange,
        EventType::CqError,
        EventType::WqCatasError,
        EventType::WqInvalReqError,
        EventType::WqAccessError,
        EventType::PathMigFailed,
        EventType::SrqCatasError,
        EventType::SrqLastWqe,
        EventType::SrqRqLimit,
        EventType::CommEst,
    ];
    let expected = wanted.iter().fold(0u64, |m, e| m | 1 << e.raw());
    assert_eq!(mask, expected, "event_bitmask {mask:#x}");
    hca.close().unwrap();
}

/// A command outstanding when the device turns fatal is given up as soon as the health
/// buffer says so, not at the command timeout (the completion EQE may never come: an EQ
/// overrun, a firmware crash).
#[test]
fn a_command_waiting_when_the_device_dies_fails_fatal_at_once() {
    let dev = MockHca::new(MockConfig {
        port_type: LinkLayer::Ethernet,
        clock: ClockMode::RealTime,
        init_delay_us: 1_000,
        ..MockConfig::default()
    });
    let mut hca = Hca::open_with(
        dev.platform(),
        HcaConfig {
            cmd_timeout_ns: 30_000_000_000,
            ..cfg()
        },
    )
    .expect("bring-up");
    dev.hang_next_command(CmdOpcode::AllocPd);
    let killer = {
        let dev = dev.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            dev.set_fatal_health(0xc, 0);
        })
    };
    let start = std::time::Instant::now();
    let e = hca.alloc_pd().unwrap_err();
    killer.join().unwrap();
    assert!(matches!(e, Error::Fatal(_)), "{e}");
    assert!(
        start.elapsed() < std::time::Duration::from_secs(10),
        "gave up after {:?}, not at the 30 s timeout",
        start.elapsed()
    );
}
