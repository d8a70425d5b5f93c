//! The driver's event queue under bursts of events: more events than the EQ used to hold
//! must be served, never overrun it (on hardware an overrun of an asynchronous EQ is a
//! fatal firmware error, "async EQ buffer overrun", which the mock reports the same way).

mod common;

use common::*;

use uhca_driver::hca::MAX_PENDING_EVENTS;
use uhca_driver::{AsyncEvent, Hca};
use uhca_fwif::consts::PortChangeSubtype;
use uhca_mock::LinkLayer;

/// More events than the 128 the driver plans for (its default `log_eq_size` 7).
const BURST: usize = 200;

#[test]
fn a_burst_of_page_requests_past_the_eq_size_is_served() {
    let dev = mock(LinkLayer::Ethernet);
    let mut hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    hca.process_events().unwrap();
    let before = hca.firmware_pages();
    // The firmware asks for one page at a time, BURST times, while the driver is busy
    // elsewhere; each answer (MANAGE_PAGES) adds a command-completion EQE on top.
    for _ in 0..BURST {
        dev.request_pages(1);
    }
    hca.process_events()
        .expect("every page request served, no EQ overrun");
    assert_eq!(hca.fatal(), None);
    assert_eq!(hca.firmware_pages(), before + BURST);
    assert_eq!(dev.pages().held, before + BURST);
    // The EQ still works: one more request after the burst.
    dev.request_pages(1);
    hca.process_events().unwrap();
    assert_eq!(hca.firmware_pages(), before + BURST + 1);
    hca.close().unwrap();
}

#[test]
fn a_burst_of_port_events_past_the_eq_size_reaches_the_user() {
    let dev = mock(LinkLayer::Ethernet);
    let mut hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    hca.process_events().unwrap();
    while hca.next_event().is_some() {}
    for i in 0..BURST {
        dev.set_port_up(i % 2 == 1);
    }
    hca.process_events()
        .expect("every port event taken, no EQ overrun");
    let mut seen = 0;
    let mut last = None;
    while let Some(ev) = hca.next_event() {
        if let AsyncEvent::PortChange { port: 1, subtype } = ev {
            seen += 1;
            last = Some(subtype);
        }
    }
    assert_eq!(seen, MAX_PENDING_EVENTS, "the newest events are kept");
    assert_eq!(
        hca.events_dropped() as usize + seen,
        BURST,
        "every event arrived"
    );
    assert_eq!(
        last,
        Some(PortChangeSubtype::Active),
        "the last one was ACTIVE"
    );
    hca.close().unwrap();
}
