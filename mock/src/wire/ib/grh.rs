//! Global Route Header (GRH), IBTA Vol 1 section 8.3: 40 bytes, laid out like an IPv6 header.
//!
//! ```text
//!  bytes 0-3:  IPVer(31:28)=6  TClass(27:20)  FlowLabel(19:0)
//!  bytes 4-5:  PayLen   bytes after the GRH through the ICRC (VCRC excluded)
//!  byte 6:     NxtHdr   0x1B for an IBA transport header
//!  byte 7:     HopLmt
//!  bytes 8-23: SGID     bytes 24-39: DGID
//! ```

use crate::wire::{Error, Field, Result, be};

mod field {
    use super::Field;
    pub const VER_TC_FL: Field = 0..4;
    pub const PAY_LEN: Field = 4..6;
    pub const NXT_HDR: usize = 6;
    pub const HOP_LMT: usize = 7;
    pub const SGID: Field = 8..24;
    pub const DGID: Field = 24..40;
}

/// The length of a GRH.
pub const GRH_LEN: usize = 40;
/// GRH:IPVer.
pub const GRH_IP_VERSION: u8 = 6;
/// GRH:NxtHdr for an IBA transport header (BTH).
pub const GRH_NEXT_HEADER_IBA: u8 = 0x1B;

/// A view of a Global Route Header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grh<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Grh<T> {
    /// Wrap a buffer without checks; getters panic if it is shorter than 40 bytes.
    pub const fn new_unchecked(buffer: T) -> Grh<T> {
        Grh { buffer }
    }
    /// Wrap a buffer after [`Grh::check_len`].
    pub fn new_checked(buffer: T) -> Result<Grh<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// `Err(Truncated)` if the buffer is shorter than a GRH.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < GRH_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }
    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// GRH:IPVer.
    pub fn ip_version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }
    /// GRH:TClass.
    pub fn traffic_class(&self) -> u8 {
        ((be::u32(self.buffer.as_ref(), field::VER_TC_FL.start) >> 20) & 0xFF) as u8
    }
    /// GRH:FlowLabel (20 bits).
    pub fn flow_label(&self) -> u32 {
        be::u32(self.buffer.as_ref(), field::VER_TC_FL.start) & 0x000F_FFFF
    }
    /// GRH:PayLen.
    pub fn payload_length(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::PAY_LEN.start)
    }
    /// GRH:NxtHdr.
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[field::NXT_HDR]
    }
    /// GRH:HopLmt.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[field::HOP_LMT]
    }
    /// GRH:SGID.
    pub fn sgid(&self) -> [u8; 16] {
        let mut g = [0; 16];
        g.copy_from_slice(&self.buffer.as_ref()[field::SGID]);
        g
    }
    /// GRH:DGID.
    pub fn dgid(&self) -> [u8; 16] {
        let mut g = [0; 16];
        g.copy_from_slice(&self.buffer.as_ref()[field::DGID]);
        g
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Grh<T> {
    fn set_word0(&mut self, ver: u8, tc: u8, fl: u32) {
        let w = (u32::from(ver & 0xF) << 28) | (u32::from(tc) << 20) | (fl & 0x000F_FFFF);
        be::set_u32(self.buffer.as_mut(), field::VER_TC_FL.start, w);
    }
    /// Set GRH:IPVer (4 bits).
    pub fn set_ip_version(&mut self, v: u8) {
        let (tc, fl) = (self.traffic_class(), self.flow_label());
        self.set_word0(v, tc, fl);
    }
    /// Set GRH:TClass.
    pub fn set_traffic_class(&mut self, v: u8) {
        let (ver, fl) = (self.ip_version(), self.flow_label());
        self.set_word0(ver, v, fl);
    }
    /// Set GRH:FlowLabel (20 bits).
    pub fn set_flow_label(&mut self, v: u32) {
        let (ver, tc) = (self.ip_version(), self.traffic_class());
        self.set_word0(ver, tc, v);
    }
    /// Set GRH:PayLen.
    pub fn set_payload_length(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::PAY_LEN.start, v);
    }
    /// Set GRH:NxtHdr.
    pub fn set_next_header(&mut self, v: u8) {
        self.buffer.as_mut()[field::NXT_HDR] = v;
    }
    /// Set GRH:HopLmt.
    pub fn set_hop_limit(&mut self, v: u8) {
        self.buffer.as_mut()[field::HOP_LMT] = v;
    }
    /// Set GRH:SGID.
    pub fn set_sgid(&mut self, g: &[u8; 16]) {
        self.buffer.as_mut()[field::SGID].copy_from_slice(g);
    }
    /// Set GRH:DGID.
    pub fn set_dgid(&mut self, g: &[u8; 16]) {
        self.buffer.as_mut()[field::DGID].copy_from_slice(g);
    }
}

/// A parsed GRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GrhRepr {
    /// TClass.
    pub traffic_class: u8,
    /// FlowLabel, 20 bits.
    pub flow_label: u32,
    /// PayLen. [`IbPacketRepr::emit`](super::IbPacketRepr::emit) fills it in.
    pub payload_length: u16,
    /// NxtHdr; 0x1B ([`GRH_NEXT_HEADER_IBA`]) before a BTH.
    pub next_header: u8,
    /// HopLmt.
    pub hop_limit: u8,
    /// SGID.
    pub sgid: [u8; 16],
    /// DGID.
    pub dgid: [u8; 16],
}

impl GrhRepr {
    /// A GRH between two GIDs with NxtHdr 0x1B, hop limit 64 and the rest zero.
    pub const fn new(sgid: [u8; 16], dgid: [u8; 16]) -> GrhRepr {
        GrhRepr {
            traffic_class: 0,
            flow_label: 0,
            payload_length: 0,
            next_header: GRH_NEXT_HEADER_IBA,
            hop_limit: 64,
            sgid,
            dgid,
        }
    }

    /// Parse a GRH; `Err(Malformed)` if IPVer is not 6.
    pub fn parse<T: AsRef<[u8]>>(grh: &Grh<T>) -> Result<GrhRepr> {
        grh.check_len()?;
        if grh.ip_version() != GRH_IP_VERSION {
            return Err(Error::Malformed);
        }
        Ok(GrhRepr {
            traffic_class: grh.traffic_class(),
            flow_label: grh.flow_label(),
            payload_length: grh.payload_length(),
            next_header: grh.next_header(),
            hop_limit: grh.hop_limit(),
            sgid: grh.sgid(),
            dgid: grh.dgid(),
        })
    }

    /// 40.
    pub const fn buffer_len(&self) -> usize {
        GRH_LEN
    }

    /// Write the GRH (IPVer 6). Panics if the view is shorter than 40 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, grh: &mut Grh<T>) {
        grh.set_word0(GRH_IP_VERSION, self.traffic_class, self.flow_label);
        grh.set_payload_length(self.payload_length);
        grh.set_next_header(self.next_header);
        grh.set_hop_limit(self.hop_limit);
        grh.set_sgid(&self.sgid);
        grh.set_dgid(&self.dgid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repr() -> GrhRepr {
        let mut sgid = [0u8; 16];
        sgid[0] = 0xFE;
        sgid[1] = 0x80;
        sgid[15] = 1;
        let mut dgid = sgid;
        dgid[15] = 2;
        GrhRepr {
            traffic_class: 0xA5,
            flow_label: 0x12345,
            payload_length: 0x0024,
            next_header: 0x1B,
            hop_limit: 0xFF,
            sgid,
            dgid,
        }
    }

    // Word 0 = 6<<28 | 0xA5<<20 | 0x12345 = 0x6A51_2345.
    static BYTES: [u8; 40] = [
        0x6A, 0x51, 0x23, 0x45, 0x00, 0x24, 0x1B, 0xFF, //
        0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, //
        0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x02,
    ];

    #[test]
    fn golden_parse_and_emit() {
        assert_eq!(
            GrhRepr::parse(&Grh::new_checked(&BYTES[..]).unwrap()).unwrap(),
            repr()
        );
        let mut buf = [0u8; 40];
        repr().emit(&mut Grh::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn setters_keep_neighbours() {
        let mut buf = BYTES;
        let mut g = Grh::new_unchecked(&mut buf[..]);
        g.set_traffic_class(0x01);
        assert_eq!(
            (g.ip_version(), g.traffic_class(), g.flow_label()),
            (6, 1, 0x12345)
        );
        g.set_flow_label(0xFFFFF);
        assert_eq!(
            (g.ip_version(), g.traffic_class(), g.flow_label()),
            (6, 1, 0xFFFFF)
        );
    }

    #[test]
    fn errors() {
        assert_eq!(
            Grh::new_checked(&BYTES[..39]).unwrap_err(),
            Error::Truncated
        );
        let mut b = BYTES;
        b[0] = 0x4A;
        assert_eq!(
            GrhRepr::parse(&Grh::new_unchecked(&b[..])).unwrap_err(),
            Error::Malformed
        );
    }
}
