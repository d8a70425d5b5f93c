//! A pcap writer (the classic libpcap format, as smoltcp's `PcapWriter` writes) and a reader
//! of pcap and pcapng (what tshark and dumpcap write by default).
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

/// One record read from a pcap or pcapng stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcapPacket {
    /// Timestamp in nanoseconds.
    pub timestamp_ns: u64,
    /// The length of the packet on the wire.
    pub orig_len: u32,
    /// The link type of the interface it was captured on.
    pub link_type: LinkType,
    /// The captured bytes.
    pub data: Vec<u8>,
}

/// The largest pcapng block the reader accepts.
const MAX_BLOCK_LEN: u32 = MAX_RECORD_LEN + 4096;

const PCAPNG_SHB: u32 = 0x0A0D_0D0A;
const PCAPNG_BOM: u32 = 0x1A2B_3C4D;
const PCAPNG_IDB: u32 = 1;
const PCAPNG_SPB: u32 = 3;
const PCAPNG_EPB: u32 = 6;

/// A pcapng interface: its link type, snap length and timestamp resolution.
#[derive(Debug, Clone, Copy)]
struct Interface {
    link_type: LinkType,
    snaplen: u32,
    /// `if_tsresol`: bit 7 clear, 10^-n seconds; set, 2^-n seconds. Default 6 (microseconds).
    tsresol: u8,
}

impl Interface {
    fn ns(self, ts: u64) -> u64 {
        let n = u32::from(self.tsresol & 0x7F);
        let ns = if self.tsresol & 0x80 == 0 {
            if n <= 9 {
                u128::from(ts) * 10u128.pow(9 - n)
            } else {
                u128::from(ts) / 10u128.checked_pow(n - 9).unwrap_or(u128::MAX)
            }
        } else {
            (u128::from(ts) * 1_000_000_000) >> n.min(127)
        };
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
}

#[derive(Debug)]
enum Format {
    Pcap { nanos: bool },
    PcapNg { interfaces: Vec<Interface> },
}

/// Reads a pcap stream, or a pcapng stream (Section Header, Interface Description, Enhanced
/// and Simple Packet blocks; other blocks are skipped).
#[derive(Debug)]
pub struct PcapReader<R: Read> {
    r: R,
    big_endian: bool,
    format: Format,
    link_type: LinkType,
}

fn invalid(msg: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

impl<R: Read> PcapReader<R> {
    /// Read and check the file header (for pcapng, up to the first Interface Description
    /// Block). `InvalidData` if the stream is neither pcap nor pcapng.
    pub fn new(mut r: R) -> io::Result<Self> {
        let mut m = [0u8; 4];
        r.read_exact(&mut m)?;
        if u32::from_le_bytes(m) == PCAPNG_SHB {
            let mut rd = PcapReader {
                r,
                big_endian: false,
                format: Format::PcapNg {
                    interfaces: Vec::new(),
                },
                link_type: LinkType::Unknown(u32::MAX),
            };
            let mut h = [0u8; 8];
            h[..4].copy_from_slice(&m);
            rd.r.read_exact(&mut h[4..])?;
            rd.section_header(h)?;
            // Read blocks until the first interface is known; no packet may precede it.
            loop {
                if let Format::PcapNg { interfaces } = &rd.format
                    && let Some(i) = interfaces.first()
                {
                    rd.link_type = i.link_type;
                    return Ok(rd);
                }
                match rd.next_block()? {
                    Some(None) => {}
                    Some(Some(_)) => return Err(invalid("pcapng packet before any interface")),
                    None => return Err(io::ErrorKind::UnexpectedEof.into()),
                }
            }
        }
        let mut h = [0u8; 24];
        h[..4].copy_from_slice(&m);
        r.read_exact(&mut h[4..])?;
        let magic_le = u32::from_le_bytes(m);
        let magic_be = u32::from_be_bytes(m);
        let (big_endian, nanos) = match (magic_le, magic_be) {
            (MAGIC_US, _) => (false, false),
            (MAGIC_NS, _) => (false, true),
            (_, MAGIC_US) => (true, false),
            (_, MAGIC_NS) => (true, true),
            _ => return Err(invalid("neither a pcap nor a pcapng file")),
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
            format: Format::Pcap { nanos },
            link_type: LinkType::from(lt & 0x0FFF_FFFF),
        })
    }

    /// The file's link type (for pcapng, the first interface's; each packet carries its own).
    pub fn link_type(&self) -> LinkType {
        self.link_type
    }

    fn u16_at(&self, b: &[u8], at: usize) -> u16 {
        let x = [b[at], b[at + 1]];
        if self.big_endian {
            u16::from_be_bytes(x)
        } else {
            u16::from_le_bytes(x)
        }
    }

    fn u32_at(&self, b: &[u8], at: usize) -> u32 {
        let x = [b[at], b[at + 1], b[at + 2], b[at + 3]];
        if self.big_endian {
            u32::from_be_bytes(x)
        } else {
            u32::from_le_bytes(x)
        }
    }

    /// Fill `buf`; `Ok(false)` at a clean end of stream before the first byte.
    fn read_or_eof(&mut self, buf: &mut [u8]) -> io::Result<bool> {
        let mut got = 0;
        while got < buf.len() {
            match self.r.read(&mut buf[got..]) {
                Ok(0) if got == 0 => return Ok(false),
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// A Section Header Block whose type and length are `h`: the byte-order magic, the rest
    /// of the block (skipped), and a fresh interface list.
    fn section_header(&mut self, h: [u8; 8]) -> io::Result<()> {
        let mut bom = [0u8; 4];
        self.r.read_exact(&mut bom)?;
        self.big_endian = match (u32::from_le_bytes(bom), u32::from_be_bytes(bom)) {
            (PCAPNG_BOM, _) => false,
            (_, PCAPNG_BOM) => true,
            _ => return Err(invalid("bad pcapng byte-order magic")),
        };
        let len = self.u32_at(&h, 4);
        if !(28..=MAX_BLOCK_LEN).contains(&len) || !len.is_multiple_of(4) {
            return Err(invalid("bad pcapng section header length"));
        }
        let mut rest = vec![0u8; len as usize - 12];
        self.r.read_exact(&mut rest)?;
        self.format = Format::PcapNg {
            interfaces: Vec::new(),
        };
        Ok(())
    }

    /// One pcapng block: `None` at end of stream, `Some(None)` for a non-packet block.
    fn next_block(&mut self) -> io::Result<Option<Option<PcapPacket>>> {
        let mut h = [0u8; 8];
        if !self.read_or_eof(&mut h)? {
            return Ok(None);
        }
        let raw_type = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        if raw_type == PCAPNG_SHB {
            self.section_header(h)?;
            return Ok(Some(None));
        }
        let block_type = self.u32_at(&h, 0);
        let len = self.u32_at(&h, 4);
        if !(12..=MAX_BLOCK_LEN).contains(&len) || !len.is_multiple_of(4) {
            return Err(invalid("bad pcapng block length"));
        }
        let mut body = vec![0u8; len as usize - 8];
        self.r.read_exact(&mut body)?;
        let body = &body[..body.len() - 4]; // trailing copy of the length
        let Format::PcapNg { interfaces } = &self.format else {
            return Err(invalid("pcapng block in a pcap file"));
        };
        match block_type {
            PCAPNG_IDB => {
                if body.len() < 8 {
                    return Err(invalid("short pcapng interface block"));
                }
                let mut iface = Interface {
                    link_type: LinkType::from(u32::from(self.u16_at(body, 0))),
                    snaplen: self.u32_at(body, 4),
                    tsresol: 6,
                };
                let mut at = 8;
                while at + 4 <= body.len() {
                    let code = self.u16_at(body, at);
                    let olen = usize::from(self.u16_at(body, at + 2));
                    if code == 0 {
                        break;
                    }
                    if code == 9 && olen >= 1 && at + 4 < body.len() {
                        iface.tsresol = body[at + 4];
                    }
                    at += 4 + olen.div_ceil(4) * 4;
                }
                if let Format::PcapNg { interfaces } = &mut self.format {
                    interfaces.push(iface);
                }
                Ok(Some(None))
            }
            PCAPNG_EPB => {
                if body.len() < 20 {
                    return Err(invalid("short pcapng packet block"));
                }
                let iface = *interfaces
                    .get(self.u32_at(body, 0) as usize)
                    .ok_or_else(|| invalid("pcapng packet on an unknown interface"))?;
                let ts = (u64::from(self.u32_at(body, 4)) << 32) | u64::from(self.u32_at(body, 8));
                let cap = self.u32_at(body, 12) as usize;
                let orig_len = self.u32_at(body, 16);
                let data = body
                    .get(20..20 + cap)
                    .ok_or_else(|| invalid("pcapng packet overruns its block"))?;
                Ok(Some(Some(PcapPacket {
                    timestamp_ns: iface.ns(ts),
                    orig_len,
                    link_type: iface.link_type,
                    data: data.to_vec(),
                })))
            }
            PCAPNG_SPB => {
                if body.len() < 4 {
                    return Err(invalid("short pcapng packet block"));
                }
                let iface = *interfaces
                    .first()
                    .ok_or_else(|| invalid("pcapng packet before any interface"))?;
                let orig_len = self.u32_at(body, 0);
                let mut cap = (orig_len as usize).min(body.len() - 4);
                if iface.snaplen != 0 {
                    cap = cap.min(iface.snaplen as usize);
                }
                Ok(Some(Some(PcapPacket {
                    timestamp_ns: 0,
                    orig_len,
                    link_type: iface.link_type,
                    data: body[4..4 + cap].to_vec(),
                })))
            }
            _ => Ok(Some(None)),
        }
    }

    /// The next packet, or `None` at a clean end of stream. `InvalidData` for a record longer
    /// than [`MAX_RECORD_LEN`] or a malformed pcapng block; `UnexpectedEof` for a cut record.
    pub fn next_packet(&mut self) -> io::Result<Option<PcapPacket>> {
        let nanos = match &self.format {
            Format::Pcap { nanos } => *nanos,
            Format::PcapNg { .. } => loop {
                match self.next_block()? {
                    None => return Ok(None),
                    Some(Some(p)) => return Ok(Some(p)),
                    Some(None) => {}
                }
            },
        };
        let mut h = [0u8; 16];
        if !self.read_or_eof(&mut h)? {
            return Ok(None);
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
        let timestamp_ns = secs * 1_000_000_000 + if nanos { frac } else { frac * 1_000 };
        Ok(Some(PcapPacket {
            timestamp_ns,
            orig_len,
            link_type: self.link_type,
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
    /// A little-endian pcapng: SHB; IDB (Ethernet, if_tsresol = 9, i.e. nanoseconds);
    /// EPB (interface 0, ts 0x1_0000_0002 ns, 3 bytes); a custom block (skipped);
    /// SPB (2 bytes); laid out by hand from the pcapng specification.
    fn pcapng() -> Vec<u8> {
        let mut f = Vec::new();
        let block = |f: &mut Vec<u8>, t: u32, body: &[u8]| {
            let len = (12 + body.len()) as u32;
            f.extend_from_slice(&t.to_le_bytes());
            f.extend_from_slice(&len.to_le_bytes());
            f.extend_from_slice(body);
            f.extend_from_slice(&len.to_le_bytes());
        };
        // SHB: BOM, version 1.0, section length -1.
        let mut shb = PCAPNG_BOM.to_le_bytes().to_vec();
        shb.extend_from_slice(&[1, 0, 0, 0]);
        shb.extend_from_slice(&u64::MAX.to_le_bytes());
        block(&mut f, PCAPNG_SHB, &shb);
        // IDB: link type 1, reserved, snaplen 0; option 9 (if_tsresol) len 1 value 9 + pad;
        // opt_endofopt.
        block(
            &mut f,
            PCAPNG_IDB,
            &[1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 1, 0, 9, 0, 0, 0, 0, 0, 0, 0],
        );
        // EPB: interface 0, ts high 1, ts low 2, caplen 3, origlen 3, data + 1 pad byte.
        block(
            &mut f,
            PCAPNG_EPB,
            &[
                0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 3, 0, 0, 0, 0xA, 0xB, 0xC, 0,
            ],
        );
        block(&mut f, 0x0BAD, &[1, 2, 3, 4]);
        // SPB: origlen 2, data + 2 pad bytes.
        block(&mut f, PCAPNG_SPB, &[2, 0, 0, 0, 0xD, 0xE, 0, 0]);
        f
    }

    #[test]
    fn reads_pcapng() {
        let f = pcapng();
        let mut r = PcapReader::new(&f[..]).unwrap();
        assert_eq!(r.link_type(), LinkType::Ethernet);
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(
            (p.timestamp_ns, p.orig_len, &p.data[..]),
            ((1 << 32) + 2, 3, &[0xA, 0xB, 0xC][..])
        );
        assert_eq!(p.link_type, LinkType::Ethernet);
        let p = r.next_packet().unwrap().unwrap();
        assert_eq!(p.data, [0xD, 0xE]);
        assert!(r.next_packet().unwrap().is_none());
    }

    #[test]
    fn mutated_pcapng_never_panics() {
        let f = pcapng();
        let mut x: u64 = 0x1234_5678;
        for _ in 0..20_000 {
            let mut g = f.clone();
            for _ in 0..3 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let i = (x % g.len() as u64) as usize;
                g[i] = (x >> 32) as u8;
            }
            g.truncate((x >> 40) as usize % (g.len() + 1));
            if let Ok(mut r) = PcapReader::new(&g[..]) {
                while let Ok(Some(_)) = r.next_packet() {}
            }
        }
    }
}
