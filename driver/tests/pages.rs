//! Firmware pages against the mock: pages go to the function the firmware names, a
//! release-all page request frees them without a command, and the reclaim at teardown
//! waits for a firmware that returns its pages slowly.

mod common;

use uhca_driver::{Error, Hca, HcaConfig, TeardownMode};
use uhca_fwif::consts::{CmdOpcode, CmdStatus};
use uhca_mock::firmware::FUNCTION_ID;
use uhca_mock::{CommandOutcome, LinkLayer, MockHca};

/// The fixture's settings, with the graceful teardown that returns the firmware's pages.
fn cfg() -> HcaConfig {
    HcaConfig {
        teardown: TeardownMode::Graceful,
        ..common::cfg()
    }
}

fn mock() -> MockHca {
    common::mock(LinkLayer::Ethernet)
}

fn refused_manage_pages(dev: &MockHca) -> usize {
    dev.command_log()
        .iter()
        .filter(|r| r.opcode == CmdOpcode::ManagePages && r.status != CmdStatus::Ok)
        .count()
}

#[test]
fn pages_go_to_the_function_the_firmware_names() {
    // The mock's own function is not function 0: a driver that always sends MANAGE_PAGES
    // for function 0 is refused (BAD_PARAM) and cannot bring the device up.
    assert_ne!(FUNCTION_ID, 0);
    let dev = mock();
    let mut hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    hca.process_events().unwrap();
    assert_eq!(refused_manage_pages(&dev), 0);
    assert_eq!(dev.pages().held, hca.firmware_pages());
    // Run-time requests name the function too, both ways.
    dev.request_pages(20);
    hca.process_events().unwrap();
    dev.request_pages(-7);
    hca.process_events().unwrap();
    assert_eq!(dev.pages().held, hca.firmware_pages());
    assert_eq!(refused_manage_pages(&dev), 0);
    hca.close().unwrap();
    assert_eq!(dev.pages().held, 0);
    assert_eq!(refused_manage_pages(&dev), 0);
}

#[test]
fn a_release_all_page_request_frees_the_pages_without_a_command() {
    let dev = mock();
    let mut hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    hca.process_events().unwrap();
    assert!(hca.firmware_pages() > 0);
    // The driver turned `release_all_pages` on, so the firmware may send it.
    assert!(hca.hca_cap().release_all_pages());
    assert!(dev.release_all_pages(), "event posted");
    dev.clear_command_log();
    hca.process_events().unwrap();
    assert_eq!(hca.firmware_pages(), 0, "every page is the driver's again");
    assert!(
        !dev.command_log()
            .iter()
            .any(|r| r.opcode == CmdOpcode::ManagePages),
        "no MANAGE_PAGES for released pages"
    );
    // Nothing left to reclaim: teardown is clean.
    hca.close().unwrap();
}

#[test]
fn teardown_reclaim_waits_through_short_and_empty_replies() {
    let dev = mock();
    let mut hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    hca.process_events().unwrap();
    let held = dev.pages().held;
    assert!(held > 8);
    // The firmware returns 3 pages, then nothing twice, then 5, then the rest.
    dev.limit_page_returns(&[3, 0, 0, 5]);
    dev.clear_command_log();
    hca.close().expect("all pages reclaimed");
    assert_eq!(dev.pages().held, 0);
    let takes: Vec<_> = dev
        .command_log()
        .into_iter()
        .filter(|r| r.opcode == CmdOpcode::ManagePages && r.outcome == CommandOutcome::Completed)
        .collect();
    assert_eq!(takes.len(), 5, "3, 0, 0, 5, rest");
    assert_eq!(
        dev.command_log().last().map(|r| r.opcode),
        Some(CmdOpcode::DisableHca)
    );
}

#[test]
fn teardown_reclaim_gives_up_on_a_firmware_that_keeps_its_pages() {
    let dev = mock();
    let hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    // Empty replies for longer than the reclaim timeout (5 s, one retry a millisecond).
    dev.limit_page_returns(&[0; 6_000]);
    let err = hca.close().unwrap_err();
    assert_eq!(
        err,
        Error::DeviceMisbehaved("firmware kept pages after teardown")
    );
    assert_eq!(
        dev.command_log().last().map(|r| r.opcode),
        Some(CmdOpcode::DisableHca),
        "teardown went on"
    );
}
