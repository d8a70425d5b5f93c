//! Every InfiniBand and RoCEv2 header of the mock's wire module, one at a time: the first
//! byte picks the header, the rest are its bytes. Whatever parses must emit and parse back
//! to the same representation; nothing may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uhca_mock::wire::eth::EthernetFrame;
use uhca_mock::wire::ib::{Aeth, AtomicAckEth, AtomicEth, Bth, Deth, Grh, Lrh, Reth, Xrceth};
use uhca_mock::wire::ib::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, DethRepr, GrhRepr, LrhRepr, RethRepr, XrcethRepr,
};
use uhca_mock::wire::{
    BthRepr, EthernetRepr, IpRepr, Ipv4Packet, Ipv4Repr, Ipv6Packet, Ipv6Repr, UdpPacket, UdpRepr,
};

/// Parse with `$view::new_checked` and `$repr::parse`; emit into a fresh buffer and parse
/// again: the same representation.
macro_rules! round_trip {
    ($b:expr, $view:ident, $repr:ident) => {{
        if let Ok(v) = $view::new_checked($b) {
            if let Ok(r) = $repr::parse(&v) {
                let mut out = vec![0u8; r.buffer_len()];
                r.emit(&mut $view::new_unchecked(&mut out[..]));
                let again = $view::new_checked(&out[..]).expect("an emitted header is whole");
                assert_eq!($repr::parse(&again).expect("an emitted header parses"), r);
            }
        }
    }};
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, b)) = data.split_first() else {
        return;
    };
    match which % 13 {
        0 => round_trip!(b, Lrh, LrhRepr),
        1 => round_trip!(b, Grh, GrhRepr),
        2 => round_trip!(b, Bth, BthRepr),
        3 => round_trip!(b, Reth, RethRepr),
        4 => round_trip!(b, Aeth, AethRepr),
        5 => round_trip!(b, AtomicEth, AtomicEthRepr),
        6 => round_trip!(b, AtomicAckEth, AtomicAckEthRepr),
        7 => round_trip!(b, Deth, DethRepr),
        11 => round_trip!(b, Xrceth, XrcethRepr),
        8 => {
            if let Ok(f) = EthernetFrame::new_checked(b) {
                let _ = (f.payload().len(), f.header_len(), f.outer_ethertype());
                if let Ok((r, ty)) = EthernetRepr::parse(&f) {
                    let mut out = vec![0u8; r.buffer_len()];
                    r.emit(&mut out, ty).expect("a parsed header emits");
                    let again = EthernetFrame::new_checked(&out[..]).expect("whole");
                    assert_eq!(EthernetRepr::parse(&again).unwrap(), (r, ty));
                }
            }
        }
        9 => {
            if let Ok(p) = Ipv4Packet::new_checked(b) {
                let _ = (p.payload().len(), p.header().len(), p.verify_checksum());
                if let Ok(r) = Ipv4Repr::parse(&p) {
                    let mut out = vec![0u8; r.buffer_len() + r.payload_len];
                    r.emit(&mut out).expect("a parsed header emits");
                    let again = Ipv4Packet::new_checked(&out[..]).expect("whole");
                    assert_eq!(Ipv4Repr::parse(&again).unwrap(), r);
                }
            }
        }
        10 => {
            if let Ok(p) = Ipv6Packet::new_checked(b) {
                let _ = (p.payload().len(), p.flow_label());
                if let Ok(r) = Ipv6Repr::parse(&p) {
                    let mut out = vec![0u8; r.buffer_len() + r.payload_len];
                    r.emit(&mut out).expect("a parsed header emits");
                    let again = Ipv6Packet::new_checked(&out[..]).expect("whole");
                    assert_eq!(Ipv6Repr::parse(&again).unwrap(), r);
                }
            }
        }
        _ => {
            // UDP over either IP version: the checksum covers a pseudo-header.
            let ips = [
                IpRepr::Ipv4(Ipv4Repr::new([10, 0, 0, 1], [10, 0, 0, 2])),
                IpRepr::Ipv6(Ipv6Repr::new([1; 16], [2; 16])),
            ];
            for ip in &ips {
                if let Ok(p) = UdpPacket::new_checked(b) {
                    let _ = (p.payload().len(), p.len(), p.checksum());
                    if let Ok(r) = UdpRepr::parse(&p, ip) {
                        let mut out = vec![0u8; r.buffer_len() + p.payload().len()];
                        r.emit(&mut out, p.payload().len())
                            .expect("a parsed header emits");
                        let again = UdpPacket::new_checked(&out[..]).expect("whole");
                        assert_eq!(UdpRepr::parse(&again, ip).unwrap(), r);
                    }
                }
            }
        }
    }
});
