//! UDP (RFC 768).
//!
//! ```text
//!  bytes 0-1: source port  bytes 2-3: destination port  bytes 4-5: length  bytes 6-7: checksum
//! ```

use crate::wire::crc::inet;
use crate::wire::ip::{IpProtocol, IpRepr};
use crate::wire::{Error, Result, be};

/// The length of a UDP header.
pub const UDP_HEADER_LEN: usize = 8;

/// A view of a UDP datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wrap a buffer without checks; getters panic if it is too short.
    pub const fn new_unchecked(buffer: T) -> Self {
        UdpPacket { buffer }
    }
    /// Wrap a buffer after [`UdpPacket::check_len`].
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// `Err(Truncated)` if the header or the length field does not fit in the buffer;
    /// `Err(Malformed)` if the length field is below 8.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < UDP_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let l = usize::from(self.len());
        if l < UDP_HEADER_LEN {
            return Err(Error::Malformed);
        }
        if len < l {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }
    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be::u16(self.buffer.as_ref(), 0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be::u16(self.buffer.as_ref(), 2)
    }
    /// Length, header included.
    pub fn len(&self) -> u16 {
        be::u16(self.buffer.as_ref(), 4)
    }
    /// Whether the length field says there is no payload.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= UDP_HEADER_LEN
    }
    /// Checksum (0: not computed, allowed over IPv4).
    pub fn checksum(&self) -> u16 {
        be::u16(self.buffer.as_ref(), 6)
    }
    /// The 8-byte header.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..UDP_HEADER_LEN]
    }
    /// The payload, up to the length field.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[UDP_HEADER_LEN..usize::from(self.len())]
    }
    /// Whether the checksum is right for this IP header (a zero checksum is "not computed"
    /// and always passes).
    pub fn verify_checksum(&self, ip: &IpRepr) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let d = &self.buffer.as_ref()[..usize::from(self.len())];
        let acc = inet::sum(ip.pseudo_header_sum(IpProtocol::Udp, d.len()), d);
        inet::finish(acc) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// Compute and store the checksum (0 is sent as 0xFFFF).
    pub fn fill_checksum(&mut self, ip: &IpRepr) {
        let l = usize::from(self.len());
        let b = self.buffer.as_mut();
        b[6] = 0;
        b[7] = 0;
        let acc = inet::sum(ip.pseudo_header_sum(IpProtocol::Udp, l), &b[..l]);
        let c = match inet::finish(acc) {
            0 => 0xFFFF,
            c => c,
        };
        be::set_u16(b, 6, c);
    }
}

/// A parsed UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl UdpRepr {
    /// Parse, verifying a non-zero checksum against `ip`.
    pub fn parse<T: AsRef<[u8]>>(p: &UdpPacket<T>, ip: &IpRepr) -> Result<UdpRepr> {
        p.check_len()?;
        if !p.verify_checksum(ip) {
            return Err(Error::BadChecksum);
        }
        Ok(UdpRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
        })
    }

    /// 8.
    pub const fn buffer_len(&self) -> usize {
        UDP_HEADER_LEN
    }

    /// Write the header for `payload_len` bytes of payload, with a zero checksum (fill it with
    /// [`UdpPacket::fill_checksum`] once the payload is in place).
    ///
    /// Errors: `Truncated` if `buf` is shorter than 8 bytes, `Malformed` if the length does not
    /// fit in 16 bits.
    pub fn emit(&self, buf: &mut [u8], payload_len: usize) -> Result<()> {
        if buf.len() < UDP_HEADER_LEN {
            return Err(Error::Truncated);
        }
        let l = u16::try_from(UDP_HEADER_LEN + payload_len).map_err(|_| Error::Malformed)?;
        be::set_u16(buf, 0, self.src_port);
        be::set_u16(buf, 2, self.dst_port);
        be::set_u16(buf, 4, l);
        be::set_u16(buf, 6, 0);
        Ok(())
    }
}
