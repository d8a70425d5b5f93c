//! Ethernet II frames with an optional IEEE 802.1Q VLAN tag.
//!
//! ```text
//!  bytes 0-5: destination MAC   bytes 6-11: source MAC   bytes 12-13: EtherType
//!  if EtherType = 0x8100: bytes 14-15: TCI = PCP(15:13) DEI(12) VID(11:0), bytes 16-17: EtherType
//! ```
//!
//! The frame check sequence is not part of the buffer (as in pcap captures).

use crate::wire::{Error, Result, be};

/// A 48-bit MAC address.
pub type EthernetAddress = [u8; 6];

/// The length of an Ethernet II header without a VLAN tag.
pub const ETHERNET_HEADER_LEN: usize = 14;
/// The length of an 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;

/// An EtherType.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EtherType {
    /// 0x0800.
    Ipv4,
    /// 0x0806.
    Arp,
    /// 0x8100, an 802.1Q tag follows.
    Vlan,
    /// 0x86DD.
    Ipv6,
    /// 0x8915, RoCE v1 (GRH directly over Ethernet).
    RoceV1,
    /// Any other.
    Unknown(u16),
}

impl From<u16> for EtherType {
    fn from(v: u16) -> Self {
        match v {
            0x0800 => EtherType::Ipv4,
            0x0806 => EtherType::Arp,
            0x8100 => EtherType::Vlan,
            0x86DD => EtherType::Ipv6,
            0x8915 => EtherType::RoceV1,
            x => EtherType::Unknown(x),
        }
    }
}

impl From<EtherType> for u16 {
    fn from(v: EtherType) -> u16 {
        match v {
            EtherType::Ipv4 => 0x0800,
            EtherType::Arp => 0x0806,
            EtherType::Vlan => 0x8100,
            EtherType::Ipv6 => 0x86DD,
            EtherType::RoceV1 => 0x8915,
            EtherType::Unknown(x) => x,
        }
    }
}

/// An 802.1Q tag control information.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Priority code point, 3 bits.
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier, 12 bits.
    pub vid: u16,
}

impl VlanTag {
    fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0FFF,
        }
    }
    fn tci(&self) -> u16 {
        (u16::from(self.pcp & 7) << 13) | (u16::from(self.dei) << 12) | (self.vid & 0x0FFF)
    }
}

/// A view of an Ethernet II frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wrap a buffer without checks; getters panic if it is too short.
    pub const fn new_unchecked(buffer: T) -> Self {
        EthernetFrame { buffer }
    }
    /// Wrap a buffer after [`EthernetFrame::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }
    /// `Err(Truncated)` if the header (with its VLAN tag, if the outer EtherType says so)
    /// does not fit.
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < ETHERNET_HEADER_LEN {
            return Err(Error::Truncated);
        }
        if b.len() < self.header_len() {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }
    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// The destination MAC.
    pub fn dst_addr(&self) -> EthernetAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[0..6]);
        a
    }
    /// The source MAC.
    pub fn src_addr(&self) -> EthernetAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[6..12]);
        a
    }
    /// The outer EtherType (0x8100 if tagged).
    pub fn outer_ethertype(&self) -> EtherType {
        EtherType::from(be::u16(self.buffer.as_ref(), 12))
    }
    /// The VLAN tag, if the frame has one.
    pub fn vlan_tag(&self) -> Option<VlanTag> {
        (self.outer_ethertype() == EtherType::Vlan)
            .then(|| VlanTag::from_tci(be::u16(self.buffer.as_ref(), 14)))
    }
    /// The EtherType of the payload (after the VLAN tag, if any).
    pub fn ethertype(&self) -> EtherType {
        match self.outer_ethertype() {
            EtherType::Vlan => EtherType::from(be::u16(self.buffer.as_ref(), 16)),
            e => e,
        }
    }
    /// 14, or 18 with a VLAN tag.
    pub fn header_len(&self) -> usize {
        match self.outer_ethertype() {
            EtherType::Vlan => ETHERNET_HEADER_LEN + VLAN_TAG_LEN,
            _ => ETHERNET_HEADER_LEN,
        }
    }
    /// The payload (possibly followed by Ethernet padding).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

/// A parsed Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Destination MAC.
    pub dst: EthernetAddress,
    /// Source MAC.
    pub src: EthernetAddress,
    /// The 802.1Q tag, if any.
    pub vlan: Option<VlanTag>,
}

impl EthernetRepr {
    /// Parse the header; returns it with the payload's EtherType.
    pub fn parse<T: AsRef<[u8]>>(f: &EthernetFrame<T>) -> Result<(EthernetRepr, EtherType)> {
        f.check_len()?;
        Ok((
            EthernetRepr {
                dst: f.dst_addr(),
                src: f.src_addr(),
                vlan: f.vlan_tag(),
            },
            f.ethertype(),
        ))
    }

    /// 14, or 18 with a VLAN tag.
    pub const fn buffer_len(&self) -> usize {
        if self.vlan.is_some() {
            ETHERNET_HEADER_LEN + VLAN_TAG_LEN
        } else {
            ETHERNET_HEADER_LEN
        }
    }

    /// Write the header with `ethertype` for the payload. `Err(Truncated)` if `buf` is shorter
    /// than [`buffer_len`](Self::buffer_len).
    pub fn emit(&self, buf: &mut [u8], ethertype: EtherType) -> Result<()> {
        if buf.len() < self.buffer_len() {
            return Err(Error::Truncated);
        }
        buf[0..6].copy_from_slice(&self.dst);
        buf[6..12].copy_from_slice(&self.src);
        match &self.vlan {
            Some(tag) => {
                be::set_u16(buf, 12, EtherType::Vlan.into());
                be::set_u16(buf, 14, tag.tci());
                be::set_u16(buf, 16, ethertype.into());
            }
            None => be::set_u16(buf, 12, ethertype.into()),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_tagged() {
        // dst 02:00:00:00:00:02, src 02:00:00:00:00:01, 0x8100, TCI: PCP 3, DEI 0, VID 100
        // = 011 0 0000_0110_0100 = 0x6064, inner 0x86DD.
        let b = [
            2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x81, 0x00, 0x60, 0x64, 0x86, 0xDD, 0xAB,
        ];
        let f = EthernetFrame::new_checked(&b[..]).unwrap();
        let (r, et) = EthernetRepr::parse(&f).unwrap();
        assert_eq!(et, EtherType::Ipv6);
        assert_eq!(
            r.vlan,
            Some(VlanTag {
                pcp: 3,
                dei: false,
                vid: 100
            })
        );
        assert_eq!(f.payload(), &[0xAB]);
        let mut out = [0u8; 18];
        r.emit(&mut out, EtherType::Ipv6).unwrap();
        assert_eq!(out, b[..18]);
        assert_eq!(
            EthernetFrame::new_checked(&b[..17]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn ethertype_lossless() {
        for v in [0u16, 0x0800, 0x86DD, 0x8100, 0x8915, 0xFFFF] {
            assert_eq!(u16::from(EtherType::from(v)), v);
        }
    }
}
