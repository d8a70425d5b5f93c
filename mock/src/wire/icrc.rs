//! The invariant CRC (ICRC) and variant CRC (VCRC) of InfiniBand and RoCEv2 packets.
//!
//! The ICRC is [`Crc32`] over the packet with its *variant* fields (those a switch or router
//! may change in flight) replaced by ones, from the first byte of the LRH (or, in RoCEv2, from
//! eight 0xFF bytes standing in for the LRH) to the last byte of the padded payload. It is
//! stored after the payload with its low byte first ([`u32::to_le_bytes`]).
//!
//! | packet | masked to ones |
//! | --- | --- |
//! | native IB, local (LNH = IBA local) | LRH:VL; BTH byte 4 (FECN, BECN, Resv6) |
//! | native IB, global (LNH = IBA global) | the whole LRH; GRH:TClass, FlowLabel, HopLmt; BTH byte 4 |
//! | RoCEv2 over IPv4 | 8 bytes of ones for the LRH; IPv4 TOS, TTL, header checksum; UDP checksum; BTH byte 4 |
//! | RoCEv2 over IPv6 | 8 bytes of ones for the LRH; IPv6 traffic class, flow label, hop limit; UDP checksum; BTH byte 4 |
//!
//! The RoCEv2 rule is checked against scapy-built frames (`mock/tests/vectors/`). The native
//! IB rule follows the IBTA's list of variant fields (as given in Shanley, *InfiniBand Network
//! Architecture*, ch. 25: a local packet's ICRC includes "the LRH except for the VL field"; a
//! global packet's includes only GRH:IPVer, PayLen, NxtHdr, SGID and DGID of the routing
//! headers, and excluded fields "are replaced with 1s") and is not checked against an
//! independent implementation (see the module docs of [`crate::wire`]).
//!
//! The VCRC ([`Crc16`]) covers a native IB packet from the first byte of the LRH through the
//! ICRC and is stored after it, low byte first.
//!
//! None of these functions allocates: variant headers are masked in a copy on the stack.

use crate::wire::crc::{Crc16, Crc32};
use crate::wire::ib::bth::BTH_LEN;
use crate::wire::ib::grh::GRH_LEN;
use crate::wire::ib::lrh::{LRH_LEN, LinkNextHeader};
use crate::wire::{Error, Result};

/// The length of the ICRC.
pub const ICRC_LEN: usize = 4;
/// The length of the VCRC.
pub const VCRC_LEN: usize = 2;

fn update_bth(crc: &mut Crc32, transport: &[u8]) -> Result<()> {
    if transport.len() < BTH_LEN {
        return Err(Error::Truncated);
    }
    let mut bth = [0u8; BTH_LEN];
    bth.copy_from_slice(&transport[..BTH_LEN]);
    bth[4] = 0xFF; // FECN, BECN, Resv6
    crc.update(&bth);
    crc.update(&transport[BTH_LEN..]);
    Ok(())
}

fn update_grh(crc: &mut Crc32, grh: &[u8]) {
    let mut g = [0u8; GRH_LEN];
    g.copy_from_slice(&grh[..GRH_LEN]);
    g[0] |= 0x0F; // TClass bits 7:4
    g[1] = 0xFF; // TClass bits 3:0, FlowLabel bits 19:16
    g[2] = 0xFF; // FlowLabel
    g[3] = 0xFF;
    g[7] = 0xFF; // HopLmt
    crc.update(&g);
}

/// The ICRC of a native InfiniBand packet. `packet` runs from the first byte of the LRH to
/// the last byte of the padded payload: ICRC and VCRC excluded.
///
/// Errors: `Truncated` if the headers do not fit, `Unsupported` for a raw or IP non-IBA
/// packet (LNH 0b00, 0b01), which has no ICRC.
pub fn ib_icrc(packet: &[u8]) -> Result<u32> {
    if packet.len() < LRH_LEN {
        return Err(Error::Truncated);
    }
    let mut crc = Crc32::new();
    match LinkNextHeader::from(packet[1]) {
        LinkNextHeader::IbaLocal => {
            let mut lrh = [0u8; LRH_LEN];
            lrh.copy_from_slice(&packet[..LRH_LEN]);
            lrh[0] |= 0xF0; // VL
            crc.update(&lrh);
            update_bth(&mut crc, &packet[LRH_LEN..])?;
        }
        LinkNextHeader::IbaGlobal => {
            if packet.len() < LRH_LEN + GRH_LEN {
                return Err(Error::Truncated);
            }
            crc.update(&[0xFF; LRH_LEN]);
            update_grh(&mut crc, &packet[LRH_LEN..]);
            update_bth(&mut crc, &packet[LRH_LEN + GRH_LEN..])?;
        }
        LinkNextHeader::Raw | LinkNextHeader::IpNonIba => return Err(Error::Unsupported),
    }
    Ok(crc.finish())
}

/// The ICRC of a RoCEv2 packet given in three parts: the IP header (IPv4 with options, if
/// any, or the 40-byte IPv6 header), the 8-byte UDP header, and the transport bytes from the
/// BTH to the last byte of the padded payload (ICRC excluded). The headers must carry the
/// lengths of the packet as sent (IP total length and UDP length include the ICRC).
///
/// This is the form a UDP transport uses, which sees only the UDP payload: it rebuilds the IP
/// and UDP headers from the socket addresses.
///
/// Errors: `Truncated` if the BTH does not fit; `Malformed` if `ip_header` is not a whole
/// IPv4 or IPv6 header or `udp_header` is not 8 bytes.
pub fn roce_v2_icrc_parts(ip_header: &[u8], udp_header: &[u8], transport: &[u8]) -> Result<u32> {
    // The masked headers are laid out in one block (8 bytes of ones for the LRH, the IP
    // header, the UDP header, the BTH) and fed to the CRC at once: one call instead of one
    // per header, which matters for packets whose payload is small.
    let mut head = [0u8; LRH_LEN + 60 + 8 + BTH_LEN];
    head[..LRH_LEN].fill(0xFF);
    let mut at = LRH_LEN;
    let version = ip_header.first().map(|b| b >> 4);
    match version {
        Some(4) => {
            let ihl = usize::from(ip_header[0] & 0x0F) * 4;
            if ihl < 20 || ip_header.len() != ihl {
                return Err(Error::Malformed);
            }
            let ip = &mut head[at..at + ihl];
            ip.copy_from_slice(ip_header);
            ip[1] = 0xFF; // TOS (DSCP, ECN)
            ip[8] = 0xFF; // TTL
            ip[10] = 0xFF; // header checksum
            ip[11] = 0xFF;
            at += ihl;
        }
        Some(6) => {
            if ip_header.len() != 40 {
                return Err(Error::Malformed);
            }
            let ip = &mut head[at..at + 40];
            ip.copy_from_slice(ip_header);
            ip[0] |= 0x0F; // traffic class bits 7:4
            ip[1] = 0xFF; // traffic class bits 3:0, flow label 19:16
            ip[2] = 0xFF; // flow label
            ip[3] = 0xFF;
            ip[7] = 0xFF; // hop limit
            at += 40;
        }
        _ => return Err(Error::Malformed),
    }
    if udp_header.len() != 8 {
        return Err(Error::Malformed);
    }
    let udp = &mut head[at..at + 8];
    udp.copy_from_slice(udp_header);
    udp[6] = 0xFF; // checksum
    udp[7] = 0xFF;
    at += 8;
    if transport.len() < BTH_LEN {
        return Err(Error::Truncated);
    }
    let bth = &mut head[at..at + BTH_LEN];
    bth.copy_from_slice(&transport[..BTH_LEN]);
    bth[4] = 0xFF; // FECN, BECN, Resv6
    at += BTH_LEN;
    let mut crc = Crc32::new();
    crc.update(&head[..at]);
    crc.update(&transport[BTH_LEN..]);
    Ok(crc.finish())
}

/// The ICRC of a RoCEv2 packet given as its IP datagram (IP header through the last byte of
/// the padded payload, ICRC excluded).
///
/// Errors: `Truncated` if the headers do not fit; `Malformed` for an IP version other than 4
/// or 6 or an IPv4 header length below 20.
pub fn roce_v2_icrc(ip_datagram: &[u8]) -> Result<u32> {
    let ip_len = match ip_datagram.first().map(|b| b >> 4) {
        Some(4) => usize::from(ip_datagram[0] & 0x0F) * 4,
        Some(6) => 40,
        None => return Err(Error::Truncated),
        _ => return Err(Error::Malformed),
    };
    if ip_len < 20 {
        return Err(Error::Malformed);
    }
    if ip_datagram.len() < ip_len + 8 {
        return Err(Error::Truncated);
    }
    roce_v2_icrc_parts(
        &ip_datagram[..ip_len],
        &ip_datagram[ip_len..ip_len + 8],
        &ip_datagram[ip_len + 8..],
    )
}

/// The VCRC of a native IB packet: `packet` runs from the first byte of the LRH through the
/// ICRC.
pub fn vcrc(packet: &[u8]) -> u16 {
    Crc16::checksum(packet)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variant_fields_do_not_change_the_icrc() {
        // An IBA-global packet: LRH, GRH, BTH, 4 bytes of payload.
        let mut p = [0u8; 8 + 40 + 12 + 4];
        p[1] = 0x03; // LNH global
        p[8] = 0x60; // IPVer 6
        p[8 + 40] = 0x04; // RC SEND Only
        p[8 + 40 + 12] = 0x55;
        let base = ib_icrc(&p).unwrap();
        for (at, v) in [
            (0, 0xF0),
            (1, 0xF3),
            (2, 0x12),
            (7, 0x99),
            (9, 0xFF),
            (11, 0x1F),
        ] {
            let mut q = p;
            q[at] = v;
            assert_eq!(ib_icrc(&q).unwrap(), base, "byte {at}");
        }
        let mut q = p;
        q[8 + 40 + 4] = 0xC0; // FECN, BECN
        assert_eq!(ib_icrc(&q).unwrap(), base);
        // Invariant fields do change it: PayLen, NxtHdr, SGID, DestQP, payload.
        for at in [12, 14, 16, 8 + 40 + 7, 8 + 40 + 12] {
            let mut q = p;
            q[at] ^= 1;
            assert_ne!(ib_icrc(&q).unwrap(), base, "byte {at}");
        }
    }

    #[test]
    fn local_packet_masks_only_vl() {
        let mut p = [0u8; 8 + 12];
        p[1] = 0x02; // LNH local
        let base = ib_icrc(&p).unwrap();
        let mut q = p;
        q[0] = 0xF0; // VL 15
        assert_eq!(ib_icrc(&q).unwrap(), base);
        for at in [0, 1, 2, 5, 7] {
            let mut q = p;
            q[at] ^= if at == 0 { 0x01 } else { 0x10 }; // LVer, SL, DLID, PktLen, SLID
            assert_ne!(ib_icrc(&q).unwrap(), base, "byte {at}");
        }
    }

    #[test]
    fn errors() {
        assert_eq!(ib_icrc(&[0; 7]), Err(Error::Truncated));
        assert_eq!(ib_icrc(&[0; 64]), Err(Error::Unsupported)); // LNH raw
        let mut p = [0u8; 8 + 11];
        p[1] = 2;
        assert_eq!(ib_icrc(&p), Err(Error::Truncated));
        assert_eq!(roce_v2_icrc(&[]), Err(Error::Truncated));
        assert_eq!(roce_v2_icrc(&[0x50; 64]), Err(Error::Malformed));
        assert_eq!(roce_v2_icrc(&[0x44; 64]), Err(Error::Malformed)); // IHL 4
        assert_eq!(roce_v2_icrc(&[0x45; 30]), Err(Error::Truncated));
        assert_eq!(roce_v2_icrc(&[0x45; 39]), Err(Error::Truncated)); // BTH cut short
    }
}
