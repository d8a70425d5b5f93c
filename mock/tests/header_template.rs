//! The middle packets of a multi-packet message are built from the headers of the first
//! one sent (a header template: only BTH:PSN, the payload and the CRCs are written again).
//! Each must be byte for byte the packet a full emit of its parsed contents gives, over
//! RoCEv2 (IPv4 and IPv6) and native InfiniBand (with and without a GRH), for SENDs and
//! WRITEs, first transmissions and retransmissions; and the message must arrive whole.

mod common;

use common::verbs::{Conn, Pair, full_emit, transport_of, wr};
use uhca_fwif::consts::*;
use uhca_mock::LinkLayer;
use uhca_mock::wire::RoceV2Repr;

/// Messages of 7 packets at MTU 256: a first, five middle and a last, the last one short.
const LEN: usize = 6 * 256 + 100;

/// Two nodes with an RC QP each, connected at MTU 256 (from GID index 1, an IPv6 GID, with
/// `ipv6`; with a GRH on InfiniBand with `grh`).
fn setup(link: LinkLayer, ipv6: bool, grh: bool) -> Pair {
    let c = Conn {
        mtu: IbMtu::Mtu256,
        gid_index: u8::from(ipv6),
        grh,
        ..Conn::default()
    };
    Pair::new_with(link, QpServiceType::Rc, c, c, |node| {
        if ipv6 {
            // Node n's IPv4 address ends in n; its IPv6 GID is fd00::n.
            let n = node.ip[3];
            node.add_ipv6_gid(n);
        }
    })
}

/// Checks every frame against its full emit, and that the PSNs run on by one.
fn check_frames(link: LinkLayer, frames: &[Vec<u8>], what: &str) {
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(
            &full_emit(link, f),
            f,
            "{what}: packet {i} of {} differs from a full emit of its contents",
            frames.len()
        );
    }
    for w in frames.windows(2) {
        assert_eq!(
            transport_of(link, &w[1]).bth.psn,
            (transport_of(link, &w[0]).bth.psn + 1) & 0x00ff_ffff,
            "{what}: PSNs in order"
        );
    }
}

fn message(link: LinkLayer, ipv6: bool, grh: bool, op: WqeOpcode) {
    let what = format!("{link:?} ipv6={ipv6} grh={grh} {op:?}");
    let mut s = setup(link, ipv6, grh);
    let amr = s.a.mr(8192);
    let bmr = s.b.mr(8192);
    let data: Vec<u8> = (0..LEN).map(|i| (i * 13 + 5) as u8).collect();
    s.a.write(&amr, 0, &data);
    let mut w = wr(op, &amr, 0, LEN as u32);
    if op == WqeOpcode::RdmaWrite {
        w.raddr = Some((bmr.iova + 64, bmr.key));
    } else {
        s.b.post_recv(&mut s.bqp, &[(bmr.key, bmr.iova + 64, 4096)]);
    }
    s.a.post_send(&mut s.aqp, &w);
    let frames = s.a.h.hca.take_tx_frames();
    assert_eq!(frames.len(), 7, "{what}: packets of the message");
    if link == LinkLayer::Ethernet {
        let ip = RoceV2Repr::parse(&frames[0]).expect("parses").ip;
        assert_eq!(
            matches!(ip, uhca_mock::wire::IpRepr::Ipv6(_)),
            ipv6,
            "{what}: the IP version asked for"
        );
    }
    check_frames(link, &frames, &what);
    // Lose packets 2 to 6: the responder's sequence NAK makes the requester send them again
    // from packet 2 (a retransmission builds its own template from its first middle packet).
    s.b.h.hca.receive_frames(&frames[..2]);
    assert!(s.fabric.run_until_idle(), "{what}: fabric idle");
    assert_eq!(s.b.read(&bmr, 64, LEN), data, "{what}: data at the target");
    let wc = s.a.poll_all(&mut s.acq);
    assert_eq!(wc.len(), 1, "{what}: the sender's completion");
    assert_eq!(
        wc[0].opcode,
        CqeOpcode::Req,
        "{what}: completed without error"
    );
    if op == WqeOpcode::Send {
        let wc = s.b.poll_all(&mut s.bcq);
        assert_eq!(wc.len(), 1, "{what}: the receiver's completion");
        assert_eq!(wc[0].byte_cnt(), LEN as u32, "{what}: bytes received");
    }
    let c = s.a.h.hca.datapath_counters();
    assert!(
        c.retransmitted_packets >= 5,
        "{what}: packets 2 to 6 sent again ({} retransmitted)",
        c.retransmitted_packets
    );
}

#[test]
fn template_packets_equal_full_emits_roce_ipv4() {
    for op in [WqeOpcode::RdmaWrite, WqeOpcode::Send] {
        message(LinkLayer::Ethernet, false, false, op);
    }
}

#[test]
fn template_packets_equal_full_emits_roce_ipv6() {
    for op in [WqeOpcode::RdmaWrite, WqeOpcode::Send] {
        message(LinkLayer::Ethernet, true, false, op);
    }
}

#[test]
fn template_packets_equal_full_emits_infiniband() {
    for grh in [false, true] {
        for op in [WqeOpcode::RdmaWrite, WqeOpcode::Send] {
            message(LinkLayer::InfiniBand, false, grh, op);
        }
    }
}
