//! `rc_pingpong -e` (rdma-core's `--events`): both sides sleep on completion events of their
//! armed CQ instead of polling it, and every round trip still completes. On the mock the
//! events come from the driver's event queue; under `--device` also through the MSI-X
//! eventfd (checked in the VM rig, `tests/vm/guest/tests/vfiouser.sh`).

mod common;

#[test]
fn rc_pingpong_with_events_completes_every_round_trip_through_completion_events() {
    let stdout = common::run_ok("rc_pingpong", &["--mock", "-e", "-n", "20", "-s", "512"]);
    // Two sides (client and server), each with its iteration line and its event count.
    assert_eq!(stdout.matches("20 iters in").count(), 2, "{stdout}");
    let events: Vec<u64> = stdout
        .lines()
        .filter_map(|l| l.strip_suffix(" interrupts"))
        .filter_map(|l| l.split(' ').next()?.parse().ok())
        .collect();
    assert_eq!(events.len(), 2, "an event count per side:\n{stdout}");
    // Each side waited at least once per received message it did not find by polling.
    assert!(events.iter().all(|&n| n >= 1), "{stdout}");
}
