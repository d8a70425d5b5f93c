//! What the two header predictions ([`crate::wire::roce::RxPrediction`],
//! [`crate::wire::ib::RxPrediction`]) share: a packet's bytes before its payload and its
//! length, kept, and the test that a later packet repeats them but for BTH:PSN.

use crate::wire::ib::bth::BTH_LEN;

/// The most header bytes kept: Ethernet with a VLAN tag, IPv4 with options, UDP, BTH and
/// extension headers, or LRH, GRH, BTH and extension headers.
const KEPT_MAX: usize = 128;

/// BTH bytes 9-11 are the PSN.
const PSN_IN_BTH: usize = 9;

/// A packet's bytes before its payload, its length, and where its BTH begins.
#[derive(Clone, Debug)]
pub(crate) struct KeptHeaders {
    bytes: [u8; KEPT_MAX],
    header_len: usize,
    len: usize,
    psn_at: usize,
}

impl KeptHeaders {
    /// The first `header_len` bytes of `packet` (a BTH at `bth_at` among them) and its
    /// length; `None` if they are longer than kept.
    pub(crate) fn of(packet: &[u8], header_len: usize, bth_at: usize) -> Option<Self> {
        if header_len > KEPT_MAX || packet.len() < header_len || bth_at + BTH_LEN > header_len {
            return None;
        }
        let mut bytes = [0u8; KEPT_MAX];
        bytes[..header_len].copy_from_slice(&packet[..header_len]);
        Some(KeptHeaders {
            bytes,
            header_len,
            len: packet.len(),
            psn_at: bth_at + PSN_IN_BTH,
        })
    }

    /// The length of the kept headers (where the payload begins).
    pub(crate) fn header_len(&self) -> usize {
        self.header_len
    }

    /// `packet`'s PSN if it has the kept length and repeats every kept byte but the PSN's.
    #[inline]
    pub(crate) fn repeated_by(&self, packet: &[u8]) -> Option<u32> {
        let (h, p) = (self.header_len, self.psn_at);
        if packet.len() != self.len
            || packet[..p] != self.bytes[..p]
            || packet[p + 3..h] != self.bytes[p + 3..h]
        {
            return None;
        }
        Some(u32::from_be_bytes([
            0,
            packet[p],
            packet[p + 1],
            packet[p + 2],
        ]))
    }

    #[cfg(test)]
    pub(crate) fn psn_at(&self) -> usize {
        self.psn_at
    }
}
