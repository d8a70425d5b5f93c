//! A pcap writer and reader (the classic libpcap format, as smoltcp's `PcapWriter` writes).
//!
//! Link types: [`LinkType::Ethernet`] (1) for RoCEv2 frames, [`LinkType::User0`] (147) for
//! native InfiniBand packets (LRH to VCRC). tshark 4.0 does not decode link type 247
//! (`LINKTYPE_INFINIBAND`); it decodes DLT_USER0 once the user DLT table maps it to the
//! `infiniband` dissector: `tshark -o` [`TSHARK_USER0_INFINIBAND`] `-r file.pcap`.
//!
//! The writer uses the nanosecond-resolution magic (0xA1B23C4D) so the virtual clock's
//! timestamps survive; the reader takes both resolutions in both byte orders.
//!
//! ```
//! use uhca_mock::wire::pcap::{LinkType, PcapReader, PcapWriter};
//!
//! let mut w = PcapWriter::new(Vec::new(), LinkType::Ethernet).unwrap();
//! w.write_packet(1_500, &[0u8; 60]).unwrap(); // timestamp in nanoseconds
//! let file = w.into_inner();
//!
//! let mut r = PcapReader::new(&file[..]).unwrap();
//! assert_eq!(r.link_type(), LinkType::Ethernet);
//! let p = r.next_packet().unwrap().unwrap();
//! assert_eq!((p.timestamp_ns, p.data.len()), (1_500, 60));
//! assert!(r.next_packet().unwrap().is_none());
//! ```

use std::io::{self, Read, Write};

/// The tshark preference that maps DLT_USER0 (147) to the InfiniBand dissector; pass it as
/// `tshark -o '<this>'`.
pub const TSHARK_USER0_INFINIBAND: &str =
    r#"uat:user_dlts:"User 0 (DLT=147)","infiniband","0","","0","""#;

/// The largest record the reader accepts (a defence against corrupt length fields).
pub const MAX_RECORD_LEN: u32 = 256 * 1024;

const MAGIC_US: u32 = 0xA1B2_C3D4;
const MAGIC_NS: u32 = 0xA1B2_3C4D;

/// A pcap link type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// 1: Ethernet (RoCEv2).
    Ethernet,
    /// 101: raw IPv4/IPv6 datagrams (RoCEv2 without Ethernet).
    RawIp,
    /// 147: DLT_USER0, used here for native InfiniBand packets.
    User0,
    /// 247: LINKTYPE_INFINIBAND (not decoded by tshark 4.0).
    Infiniband,
    /// Any other.
    Unknown(u32),
}

impl From<u32> for LinkType {
    fn from(v: u32) -> Self {
        match v {
            1 => LinkType::Ethernet,
            101 => LinkType::RawIp,
            147 => LinkType::User0,
            247 => LinkType::Infiniband,
            x => LinkType::Unknown(x),
        }
    }
}

impl From<LinkType> for u32 {
    fn from(v: LinkType) -> u32 {
        match v {
            LinkType::Ethernet => 1,
            LinkType::RawIp => 101,
            LinkType::User0 => 147,
            LinkType::Infiniband => 247,
            LinkType::Unknown(x) => x,
        }
    }
}

/// Writes a pcap stream.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    w: W,
}

impl<W: Write> PcapWriter<W> {
    /// Write the file header (version 2.4, nanosecond timestamps, snap length
    /// [`MAX_RECORD_LEN`]) for `link_type`.
    pub fn new(mut w: W, link_type: LinkType) -> io::Result<Self> {
        let mut h = [0u8; 24];
        h[0..4].copy_from_slice(&MAGIC_NS.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone, sigfigs: 0
        h[16..20].copy_from_slice(&MAX_RECORD_LEN.to_le_bytes());
        h[20..24].copy_from_slice(&u32::from(link_type).to_le_bytes());
        w.write_all(&h)?;
        Ok(PcapWriter { w })
    }

    /// Write one packet with a timestamp in nanoseconds. Packets longer than
    /// [`MAX_RECORD_LEN`] are truncated in the record (with their original length kept).
    pub fn write_packet(&mut self, timestamp_ns: u64, data: &[u8]) -> io::Result<()> {
        let orig = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let cap = orig.min(MAX_RECORD_LEN);
        let mut h = [0u8; 16];
        let secs = u32::try_from(timestamp_ns / 1_000_000_000).unwrap_or(u32::MAX);
        h[0..4].copy_from_slice(&secs.to_le_bytes());
        h[4..8].copy_from_slice(&((timestamp_ns % 1_000_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&cap.to_le_bytes());
        h[12..16].copy_from_slice(&orig.to_le_bytes());
        self.w.write_all(&h)?;
        self.w.write_all(&data[..cap as usize])
    }

    /// Flush the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.w
    }
}

/// One record read from a pcap stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcapPacket {
    /// Timestamp in nanoseconds.
    pub timestamp_ns: u64,
    /// The length of the packet on the wire.
    pub orig_len: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
}

/// Reads a pcap stream.
#[derive(Debug)]
pub struct PcapReader<R: Read> {
    r: R,
    big_endian: bool,
    nanos: bool,
    link_type: LinkType,
}

fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

impl<R: Read> PcapReader<R> {
    /// Read and check the file header. `InvalidData` if the magic is not pcap's.
    pub fn new(mut r: R) -> io::Result<Self> {
        let mut h = [0u8; 24];
        r.read_exact(&mut h)?;
        let magic_le = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let magic_be = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
        let (big_endian, nanos) = match (magic_le, magic_be) {
            (MAGIC_US, _) => (false, false),
            (MAGIC_NS, _) => (false, true),
            (_, MAGIC_US) => (true, false),
            (_, MAGIC_NS) => (true, true),
            _ => return Err(invalid("not a pcap file (pcapng is not supported)")),
        };
        let lt = [h[20], h[21], h[22], h[23]];
        let lt = if big_endian {
            u32::from_be_bytes(lt)
        } else {
            u32::from_le_bytes(lt)
        };
        Ok(PcapReader {
            r,
            big_endian,
            nanos,
            link_type: LinkType::from(lt & 0x0FFF_FFFF),
        })
    }

    /// The file's link type.
    pub fn link_type(&self) -> LinkType {
        self.link_type
    }

    fn u32_at(&self, b: &[u8], at: usize) -> u32 {
        let x = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if self.big_endian {
            u32::from_be_bytes(x)
        } else {
            u32::from_le_bytes(x)
        }
    }

    /// The next record, or `None` at a clean end of file. `InvalidData` for a record longer
    /// than [`MAX_RECORD_LEN`]; `UnexpectedEof` for a cut record.
    pub fn next_packet(&mut self) -> io::Result<Option<PcapPacket>> {
        let mut h = [0u8; 16];
        let mut got = 0;
        while got < h.len() {
            match self.r.read(&mut h[got..]) {
                Ok(0) if got == 0 => return Ok(None),
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        let secs = u64::from(self.u32_at(&h, 0));
        let frac = u64::from(self.u32_at(&h, 4));
        let cap = self.u32_at(&h, 8);
        let orig_len = self.u32_at(&h, 12);
        if cap > MAX_RECORD_LEN {
            return Err(invalid("pcap record too long"));
        }
        let mut data = vec![0u8; cap as usize];
        self.r.read_exact(&mut data)?;
        let timestamp_ns = secs * 1_000_000_000 + if self.nanos { frac } else { frac * 1_000 };
        Ok(Some(PcapPacket {
            timestamp_ns,
            orig_len,
            data,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_header() {
        let w = PcapWriter::new(Vec::new(), LinkType::User0).unwrap();
        let f = w.into_inner();
        // 4d 3c b2 a1 | 02 00 04 00 | 0 | 0 | snaplen 0x40000 | 147 = 0x93
        assert_eq!(
            f,
            [
                0x4d, 0x3c, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 4, 0, 0x93, 0, 0,
                0
            ]
        );
    }

    #[test]
    fn reads_big_endian_microseconds() {
        let mut f = vec![
            0xa1, 0xb2, 0xc3, 0xd4, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0,
            1,
        ];
        f.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 1, 0, 0, 0, 1, 0xAB]);
        let mut r = PcapReader::new(&f[..]).unwrap();
        assert_eq!(r.link_type(), LinkType::Ethernet);
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!((p.timestamp_ns, p.data), (2_000_003_000, vec![0xAB]));
        assert!(r.next_packet().unwrap().is_none());
    }

    #[test]
    fn rejects_garbage() {
        assert!(PcapReader::new(&[0u8; 24][..]).is_err());
        assert!(PcapReader::new(&[0u8; 3][..]).is_err());
        let mut f = PcapWriter::new(Vec::new(), LinkType::Ethernet)
            .unwrap()
            .into_inner();
        f.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        let mut r = PcapReader::new(&f[..]).unwrap();
        assert_eq!(
            r.next_packet().unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        let mut f = PcapWriter::new(Vec::new(), LinkType::Ethernet)
            .unwrap()
            .into_inner();
        f.extend_from_slice(&[0, 0, 0]);
        let mut r = PcapReader::new(&f[..]).unwrap();
        assert_eq!(
            r.next_packet().unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }
}
