//! `rdma_bw` and `rdma_lat --mock`: both sides in one process on two mock HCAs; every
//! test (`-t`) exits 0, prints perftest's table and reports the data intact.

mod common;

use std::time::Duration;

use common::run;

/// The row under `header`: its whitespace-separated numbers.
fn row(text: &str, header: &str) -> Vec<f64> {
    let mut lines = text.lines();
    lines
        .by_ref()
        .find(|l| l.trim_end() == header.trim_end())
        .unwrap_or_else(|| panic!("no table header in:\n{text}"));
    let row = lines.next().unwrap_or_else(|| panic!("no row in:\n{text}"));
    row.split_whitespace()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{v:?} is not a number in {row:?}"))
        })
        .collect()
}

const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]";
const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    \
                          t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

#[test]
fn rdma_bw_mock_write_read_and_send() {
    for (op, title) in [
        ("write", "RDMA_Write BW Test"),
        ("read", "RDMA_Read BW Test"),
        ("send", "Send BW Test"),
    ] {
        let args = [
            "--mock",
            "-t",
            op,
            "-s",
            "4096",
            "-n",
            "300",
            "--tx-depth",
            "32",
            "--cq-mod",
            "8",
        ];
        let (out, text) = run("rdma_bw", &args, Duration::from_secs(30));
        assert!(out.status.success(), "rdma_bw -t {op} failed:\n{text}");
        assert!(text.contains(title), "{op}:\n{text}");
        let r = row(&text, BW_HEADER);
        assert_eq!(r.len(), 5, "{op}: {r:?}");
        assert_eq!((r[0], r[1]), (4096.0, 300.0), "{op}: {r:?}");
        assert!(r[3] > 0.0 && r[2] >= r[3] && r[4] > 0.0, "{op}: {r:?}");
        assert!(
            text.contains("data checked at the target: the last 16 buffer(s) of 4096 bytes"),
            "{op}:\n{text}"
        );
    }
}

#[test]
fn rdma_bw_mock_odd_sizes_and_a_deep_queue() {
    // A message of several MTUs that is not a multiple of them, fewer messages than
    // buffers, and a completion only for the last request.
    let args = [
        "--mock",
        "-s",
        "3000",
        "-n",
        "5",
        "--tx-depth",
        "8",
        "--cq-mod",
        "8",
        "-m",
        "1024",
    ];
    let (out, text) = run("rdma_bw", &args, Duration::from_secs(30));
    assert!(out.status.success(), "{text}");
    assert_eq!(&row(&text, BW_HEADER)[..2], &[3000.0, 5.0], "{text}");
    assert!(
        text.contains("the last 5 buffer(s) of 3000 bytes arrived intact"),
        "{text}"
    );
}

#[test]
fn rdma_lat_mock_send_write_and_read() {
    for (op, title, checked) in [
        ("send", "Send Latency Test", 2),
        ("write", "RDMA_Write Latency Test", 2),
        ("read", "RDMA_Read Latency Test", 1),
    ] {
        let args = ["--mock", "-t", op, "-s", "1500", "-n", "100"];
        let (out, text) = run("rdma_lat", &args, Duration::from_secs(30));
        assert!(out.status.success(), "rdma_lat -t {op} failed:\n{text}");
        assert!(text.contains(title), "{op}:\n{text}");
        let r = row(&text, LAT_HEADER);
        assert_eq!(r.len(), 9, "{op}: {r:?}");
        assert_eq!((r[0], r[1]), (1500.0, 100.0), "{op}: {r:?}");
        let (min, max, typical, avg) = (r[2], r[3], r[4], r[5]);
        assert!(min > 0.0 && min <= typical && typical <= max, "{op}: {r:?}");
        assert!(min <= avg && avg <= max, "{op}: {r:?}");
        assert!(r[7] <= r[8] && r[8] <= max, "{op}: {r:?}");
        assert_eq!(
            text.matches("the last buffer of 1500 bytes arrived intact")
                .count(),
            checked,
            "{op}:\n{text}"
        );
    }
}

#[test]
fn rdma_lat_mock_default_size() {
    let (out, text) = run("rdma_lat", &["--mock", "-n", "50"], Duration::from_secs(30));
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Send Latency Test"), "{text}");
    assert_eq!(&row(&text, LAT_HEADER)[..2], &[2.0, 50.0], "{text}");
}

#[test]
fn bad_flags_are_refused() {
    for (name, args) in [
        ("rdma_bw", &["--mock", "-t", "atomic"][..]),
        ("rdma_bw", &["--mock", "--tx-depth", "0"][..]),
        ("rdma_lat", &["--mock", "-t", "write_imm"][..]),
    ] {
        let (out, text) = run(name, args, Duration::from_secs(10));
        assert_eq!(out.status.code(), Some(2), "{name} {args:?}:\n{text}");
    }
}

#[cfg(not(feature = "vfio"))]
#[test]
fn device_without_vfio_says_so() {
    for name in ["rdma_bw", "rdma_lat"] {
        let (out, text) = run(name, &["--device", "0000:00:00.0"], Duration::from_secs(10));
        assert_eq!(out.status.code(), Some(1), "{name}:\n{text}");
        assert!(
            text.contains("build with `--features vfio`"),
            "{name}:\n{text}"
        );
    }
}
