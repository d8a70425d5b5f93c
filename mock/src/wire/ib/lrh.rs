//! Local Route Header (LRH), IBTA Vol 1 section 7.7: 8 bytes, first on every native IB packet.
//!
//! ```text
//!  byte 0: VL(7:4) LVer(3:0)
//!  byte 1: SL(7:4) Rsv2(3:2) LNH(1:0)
//!  bytes 2-3: DLID
//!  bytes 4-5: Rsv5(15:11) PktLen(10:0)   PktLen counts 4-byte words from the LRH through the ICRC
//!  bytes 6-7: SLID
//! ```

use crate::wire::{Error, Field, Result, be};

mod field {
    use super::Field;
    pub const VL_LVER: usize = 0;
    pub const SL_LNH: usize = 1;
    pub const DLID: Field = 2..4;
    pub const PKT_LEN: Field = 4..6;
    pub const SLID: Field = 6..8;
}

/// The length of an LRH.
pub const LRH_LEN: usize = 8;

/// LRH:LNH, what follows the LRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkNextHeader {
    /// 0b00: raw packet (no IBA transport, no ICRC).
    Raw,
    /// 0b01: IP non-IBA transport (a raw IPv6 datagram).
    IpNonIba,
    /// 0b10: IBA local: BTH follows.
    IbaLocal,
    /// 0b11: IBA global: GRH then BTH follow.
    IbaGlobal,
}

impl From<u8> for LinkNextHeader {
    fn from(v: u8) -> Self {
        match v & 3 {
            0 => LinkNextHeader::Raw,
            1 => LinkNextHeader::IpNonIba,
            2 => LinkNextHeader::IbaLocal,
            _ => LinkNextHeader::IbaGlobal,
        }
    }
}

impl From<LinkNextHeader> for u8 {
    fn from(v: LinkNextHeader) -> u8 {
        match v {
            LinkNextHeader::Raw => 0,
            LinkNextHeader::IpNonIba => 1,
            LinkNextHeader::IbaLocal => 2,
            LinkNextHeader::IbaGlobal => 3,
        }
    }
}

/// A view of a Local Route Header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lrh<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Lrh<T> {
    /// Wrap a buffer without checks; getters panic if it is shorter than 8 bytes.
    pub const fn new_unchecked(buffer: T) -> Lrh<T> {
        Lrh { buffer }
    }

    /// Wrap a buffer after [`Lrh::check_len`].
    pub fn new_checked(buffer: T) -> Result<Lrh<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// `Err(Truncated)` if the buffer is shorter than an LRH.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < LRH_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// LRH:VL, the virtual lane.
    pub fn vl(&self) -> u8 {
        self.buffer.as_ref()[field::VL_LVER] >> 4
    }
    /// LRH:LVer, the link version (0).
    pub fn lver(&self) -> u8 {
        self.buffer.as_ref()[field::VL_LVER] & 0x0F
    }
    /// LRH:SL, the service level.
    pub fn sl(&self) -> u8 {
        self.buffer.as_ref()[field::SL_LNH] >> 4
    }
    /// LRH:Rsv2, two reserved bits.
    pub fn rsv2(&self) -> u8 {
        (self.buffer.as_ref()[field::SL_LNH] >> 2) & 3
    }
    /// LRH:LNH, the link next header.
    pub fn lnh(&self) -> LinkNextHeader {
        LinkNextHeader::from(self.buffer.as_ref()[field::SL_LNH])
    }
    /// LRH:DLID, the destination local identifier.
    pub fn dlid(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::DLID.start)
    }
    /// LRH:PktLen, the packet length in 4-byte words from the LRH through the ICRC.
    pub fn packet_length(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::PKT_LEN.start) & 0x07FF
    }
    /// LRH:SLID, the source local identifier.
    pub fn slid(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::SLID.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Lrh<T> {
    /// Set LRH:VL (4 bits).
    pub fn set_vl(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::VL_LVER];
        *b = (*b & 0x0F) | (v << 4);
    }
    /// Set LRH:LVer (4 bits).
    pub fn set_lver(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::VL_LVER];
        *b = (*b & 0xF0) | (v & 0x0F);
    }
    /// Set LRH:SL (4 bits).
    pub fn set_sl(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::SL_LNH];
        *b = (*b & 0x0F) | (v << 4);
    }
    /// Set LRH:Rsv2 (2 bits; 0 on transmit).
    pub fn set_rsv2(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::SL_LNH];
        *b = (*b & !0x0C) | ((v & 3) << 2);
    }
    /// Set LRH:LNH.
    pub fn set_lnh(&mut self, v: LinkNextHeader) {
        let b = &mut self.buffer.as_mut()[field::SL_LNH];
        *b = (*b & !3) | u8::from(v);
    }
    /// Set LRH:DLID.
    pub fn set_dlid(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::DLID.start, v);
    }
    /// Set LRH:PktLen (11 bits; Rsv5 is cleared).
    pub fn set_packet_length(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::PKT_LEN.start, v & 0x07FF);
    }
    /// Set LRH:SLID.
    pub fn set_slid(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::SLID.start, v);
    }
}

/// A parsed LRH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LrhRepr {
    /// VL, 4 bits (VL15 is the management lane).
    pub vl: u8,
    /// LVer, 4 bits, 0 in IBTA 1.x.
    pub lver: u8,
    /// SL, 4 bits.
    pub sl: u8,
    /// LNH. [`IbPacketRepr::emit`](super::IbPacketRepr::emit) fills it in.
    pub lnh: LinkNextHeader,
    /// DLID.
    pub dlid: u16,
    /// PktLen in 4-byte words, LRH through ICRC. [`IbPacketRepr::emit`](super::IbPacketRepr::emit)
    /// fills it in.
    pub packet_length: u16,
    /// SLID.
    pub slid: u16,
}

impl LrhRepr {
    /// Parse an LRH; `Err(Malformed)` if LVer is not 0.
    pub fn parse<T: AsRef<[u8]>>(lrh: &Lrh<T>) -> Result<LrhRepr> {
        lrh.check_len()?;
        if lrh.lver() != 0 {
            return Err(Error::Malformed);
        }
        Ok(LrhRepr {
            vl: lrh.vl(),
            lver: lrh.lver(),
            sl: lrh.sl(),
            lnh: lrh.lnh(),
            dlid: lrh.dlid(),
            packet_length: lrh.packet_length(),
            slid: lrh.slid(),
        })
    }

    /// 8.
    pub const fn buffer_len(&self) -> usize {
        LRH_LEN
    }

    /// Write the LRH (reserved bits zero). Panics if the view is shorter than 8 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, lrh: &mut Lrh<T>) {
        lrh.set_vl(self.vl);
        lrh.set_lver(self.lver);
        lrh.set_sl(self.sl);
        lrh.set_rsv2(0);
        lrh.set_lnh(self.lnh);
        lrh.set_dlid(self.dlid);
        lrh.set_packet_length(self.packet_length);
        lrh.set_slid(self.slid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // VL=0, LVer=0 | SL=3, Rsv2=0, LNH=0b10 (IBA local) | DLID=0x0002 | PktLen=7 words |
    // SLID=0x0001.  Byte 1 = 0011_00_10 = 0x32.
    static BYTES: [u8; 8] = [0x00, 0x32, 0x00, 0x02, 0x00, 0x07, 0x00, 0x01];

    fn repr() -> LrhRepr {
        LrhRepr {
            vl: 0,
            lver: 0,
            sl: 3,
            lnh: LinkNextHeader::IbaLocal,
            dlid: 2,
            packet_length: 7,
            slid: 1,
        }
    }

    #[test]
    fn golden_parse_and_emit() {
        let p = Lrh::new_checked(&BYTES[..]).unwrap();
        assert_eq!(LrhRepr::parse(&p).unwrap(), repr());
        let mut buf = [0xAAu8; 8];
        repr().emit(&mut Lrh::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn vl15_and_global() {
        // VL=15, LVer=0 -> 0xF0; SL=0, LNH=0b11 -> 0x03; PktLen 0x7FF (max); Rsv5 bits ignored.
        let b = [0xF0, 0x03, 0xFF, 0xFF, 0xFF, 0xFF, 0x12, 0x34];
        let p = Lrh::new_checked(&b[..]).unwrap();
        assert_eq!(p.vl(), 15);
        assert_eq!(p.lnh(), LinkNextHeader::IbaGlobal);
        assert_eq!(p.packet_length(), 0x7FF);
        assert_eq!(p.slid(), 0x1234);
    }

    #[test]
    fn errors() {
        assert_eq!(Lrh::new_checked(&BYTES[..7]).unwrap_err(), Error::Truncated);
        let mut b = BYTES;
        b[0] = 0x01; // LVer 1
        assert_eq!(
            LrhRepr::parse(&Lrh::new_unchecked(&b[..])).unwrap_err(),
            Error::Malformed
        );
    }
}
