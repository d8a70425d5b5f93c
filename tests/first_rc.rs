//! `first_rc`, README's one-file example, between two processes as a user runs it: each
//! side a mock HCA whose RoCEv2 port is a kernel UDP socket (`--udp`), the server and the
//! client swapping their endpoints over TCP, the client's RDMA WRITE and SEND checked by
//! the server in its own memory.

mod common;

use common::{free_tcp_port, pair, spawn, wait};
use std::time::Duration;

#[test]
fn first_rc_writes_and_sends_between_two_processes() {
    let [(c, c_text), (s, s_text)] = pair("first_rc", "127.0.0.91", "127.0.0.92", &[]);
    assert!(c.status.success(), "client:\n{c_text}\nserver:\n{s_text}");
    assert!(s.status.success(), "server:\n{s_text}\nclient:\n{c_text}");
    // Each side installed the RoCEv2 GID of its address and learnt the other's.
    assert!(
        c_text.contains("RoCEv2 GID 0 installed: 0000:0000:0000:0000:0000:ffff:7f00:005c")
            && c_text
                .contains("remote QPN 0x104, LID 0, GID 0000:0000:0000:0000:0000:ffff:7f00:005b"),
        "{c_text}"
    );
    assert!(
        c_text.contains("client: RDMA WRITE of 34 B and SEND of 28 B completed (RdmaWrite, Send)"),
        "{c_text}"
    );
    // The server read both messages from its own memory.
    assert!(
        s_text.contains("server: received a SEND of 28 B: \"hello from the client's SEND\""),
        "{s_text}"
    );
    assert!(
        s_text.contains(
            "server: the RDMA WRITE left \"written by the client's RDMA WRITE\" in this side's memory"
        ),
        "{s_text}"
    );
    for text in [&c_text, &s_text] {
        assert!(text.contains("first_rc: done"), "{text}");
    }
}

/// A user may start the client first: it retries until the server listens (and would give up
/// with an error after 60 s rather than wait for ever).
#[test]
fn first_rc_client_started_before_the_server_waits_for_it() {
    let port = free_tcp_port().to_string();
    let client = spawn(
        "first_rc",
        &["--udp", "127.0.0.95", "-p", &port, "127.0.0.1"],
    );
    std::thread::sleep(Duration::from_millis(700));
    let server = spawn("first_rc", &["--udp", "127.0.0.96", "-p", &port]);
    let (c, c_text) = wait(client, Duration::from_secs(60));
    let (s, s_text) = wait(server, Duration::from_secs(60));
    assert!(c.status.success(), "client:\n{c_text}\nserver:\n{s_text}");
    assert!(s.status.success(), "server:\n{s_text}\nclient:\n{c_text}");
    assert!(
        s_text.contains("server: received a SEND of 28 B"),
        "{s_text}"
    );
}
