//! The two CRCs of InfiniBand.
//!
//! * [`Crc32`]: the ICRC's CRC-32. The ordinary reflected IEEE 802.3 CRC (polynomial
//!   0x04C11DB7, reflected 0xEDB88320, initial value 0xFFFF_FFFF, final XOR 0xFFFF_FFFF), the
//!   same as zlib's `crc32`. Checked against golden values from Python's `zlib.crc32`
//!   (see the tests and `mock/tests/vectors/`).
//! * [`Crc16`]: the VCRC's CRC-16. Polynomial 0x100B (x^16 + x^12 + x^3 + x + 1), bit
//!   reflected (0xD008), initial value 0xFFFF, final XOR 0xFFFF. These are the parameters of
//!   Endace's `dagcrc_infiniband_vcrc16_r` (`dagcrc.c`, the DAG capture library); the
//!   table-driven engine here is checked against a bit-serial, MSB-first reference with
//!   polynomial 0x100B in the tests.
//!
//! Both are table driven, with the tables built at compile time (the CRC-16 slicing by
//! eight bytes); neither allocates.

const fn crc32_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xEDB8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
}

const fn crc16_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut n = 0;
    while n < 256 {
        let mut c = n as u16;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                0xD008 ^ (c >> 1)
            } else {
                c >> 1
            };
            k += 1;
        }
        table[n] = c;
        n += 1;
    }
    table
}

static CRC32_TABLE: [u32; 256] = crc32_table();
static CRC16_TABLE: [u16; 256] = crc16_table();

/// Slicing-by-8 tables for [`Crc16`]: `CRC16_SLICES[k][b]` is the CRC state after byte `b`
/// followed by `k` zero bytes, so eight bytes are folded with eight independent look-ups
/// instead of a chain of eight dependent ones.
static CRC16_SLICES: [[u16; 256]; 8] = crc16_slices();

const fn crc16_slices() -> [[u16; 256]; 8] {
    let base = crc16_table();
    let mut t = [[0u16; 256]; 8];
    t[0] = base;
    let mut k = 1;
    while k < 8 {
        let mut n = 0;
        while n < 256 {
            let prev = t[k - 1][n];
            t[k][n] = base[(prev & 0xFF) as usize] ^ (prev >> 8);
            n += 1;
        }
        k += 1;
    }
    t
}

/// An incremental CRC-32 (IEEE, reflected; zlib's `crc32`), the engine of the ICRC.
///
/// Computed by `crc32fast` (carry-less multiplication where the CPU offers it, else a
/// slicing table); [`crc32_bytewise`] keeps the byte-at-a-time definition the tests hold
/// it against.
#[derive(Debug, Clone)]
pub struct Crc32 {
    hasher: crc32fast::Hasher,
}

impl Default for Crc32 {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for Crc32 {
    fn eq(&self, other: &Self) -> bool {
        self.finish() == other.finish()
    }
}

impl Eq for Crc32 {}

/// A fresh `crc32fast` hasher. Its constructor asks the CPU which instructions it has (a
/// few feature tests per call); a packet needs two or three CRCs, so the answer is kept in
/// a prototype that is copied instead.
fn fresh_hasher() -> crc32fast::Hasher {
    static PROTOTYPE: std::sync::OnceLock<crc32fast::Hasher> = std::sync::OnceLock::new();
    PROTOTYPE.get_or_init(crc32fast::Hasher::new).clone()
}

impl Crc32 {
    /// A fresh CRC over no bytes.
    pub fn new() -> Self {
        Crc32 {
            hasher: fresh_hasher(),
        }
    }

    /// Feed bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
    }

    /// The CRC of the bytes fed so far.
    pub fn finish(&self) -> u32 {
        self.hasher.clone().finalize()
    }

    /// The CRC-32 of `bytes` in one call (equal to `zlib.crc32(bytes)`).
    pub fn checksum(bytes: &[u8]) -> u32 {
        let mut h = fresh_hasher();
        h.update(bytes);
        h.finalize()
    }
}

/// The CRC-32 of `bytes` computed one byte at a time from its 256-entry table: the
/// definition, kept to check [`Crc32`] against.
pub fn crc32_bytewise(bytes: &[u8]) -> u32 {
    let mut c = 0xFFFF_FFFFu32;
    for &b in bytes {
        c = CRC32_TABLE[((c ^ u32::from(b)) & 0xFF) as usize] ^ (c >> 8);
    }
    c ^ 0xFFFF_FFFF
}

/// An incremental CRC-16 with InfiniBand's VCRC parameters (polynomial 0x100B, reflected,
/// initial value 0xFFFF, final XOR 0xFFFF).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crc16 {
    state: u16,
}

impl Default for Crc16 {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc16 {
    /// A fresh CRC over no bytes.
    pub const fn new() -> Self {
        Crc16 { state: 0xFFFF }
    }

    /// Feed bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        let t = &CRC16_SLICES;
        let mut c = self.state;
        let mut eights = bytes.chunks_exact(8);
        for b in &mut eights {
            // The state is folded into the first two bytes; each byte then contributes its
            // table entry for the bytes that follow it.
            let x = c ^ u16::from_le_bytes([b[0], b[1]]);
            c = t[7][usize::from(x & 0xFF)]
                ^ t[6][usize::from(x >> 8)]
                ^ t[5][usize::from(b[2])]
                ^ t[4][usize::from(b[3])]
                ^ t[3][usize::from(b[4])]
                ^ t[2][usize::from(b[5])]
                ^ t[1][usize::from(b[6])]
                ^ t[0][usize::from(b[7])];
        }
        for &b in eights.remainder() {
            c = CRC16_TABLE[((c ^ u16::from(b)) & 0xFF) as usize] ^ (c >> 8);
        }
        self.state = c;
    }

    /// The CRC of the bytes fed so far.
    pub const fn finish(&self) -> u16 {
        self.state ^ 0xFFFF
    }

    /// The VCRC CRC-16 of `bytes` in one call.
    pub fn checksum(bytes: &[u8]) -> u16 {
        let mut c = Crc16::new();
        c.update(bytes);
        c.finish()
    }
}

/// The Internet checksum (RFC 1071) helpers used by IPv4 and UDP.
pub mod inet {
    /// Add `bytes` (big-endian 16-bit words, an odd last byte padded with zero) to a running
    /// one's-complement sum kept in a `u32` that is folded at the end.
    ///
    /// The words are added four bytes at a time into a 64-bit sum and folded once at the
    /// end (2^16 is 1 modulo 0xFFFF, so a 32-bit word counts as its two 16-bit halves): the
    /// result is the same end-around-carry sum, at most 0xFFFF, as adding 16-bit words one
    /// by one (checked against that in the tests).
    pub fn sum(acc: u32, bytes: &[u8]) -> u32 {
        let mut s = u64::from(acc);
        let mut quads = bytes.chunks_exact(4);
        for w in &mut quads {
            s += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
        }
        let rest = quads.remainder();
        let mut pairs = rest.chunks_exact(2);
        for w in &mut pairs {
            s += u64::from(u16::from_be_bytes([w[0], w[1]]));
        }
        if let [last] = pairs.remainder() {
            s += u64::from(*last) << 8;
        }
        while s > 0xFFFF {
            s = (s & 0xFFFF) + (s >> 16);
        }
        s as u32
    }

    /// Fold a running sum and complement it: the checksum to store.
    pub fn finish(acc: u32) -> u16 {
        let mut a = acc;
        while a > 0xFFFF {
            a = (a & 0xFFFF) + (a >> 16);
        }
        !(a as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Golden values printed by Python 3.11 `zlib.crc32` (an independent implementation):
    /// `hex(zlib.crc32(b"123456789"))`, `hex(zlib.crc32(b""))`,
    /// `hex(zlib.crc32(bytes(range(256))))`, `hex(zlib.crc32(b"\xff"*8))`.
    #[test]
    fn crc32_matches_zlib() {
        assert_eq!(Crc32::checksum(b"123456789"), 0xCBF4_3926);
        assert_eq!(Crc32::checksum(b""), 0);
        let all: Vec<u8> = (0..=255u8).collect();
        assert_eq!(Crc32::checksum(&all), 0x2905_8C73);
        assert_eq!(Crc32::checksum(&[0xFF; 8]), 0x2144_DF1C);
    }

    #[test]
    fn crc32_equals_the_bytewise_definition() {
        let data: Vec<u8> = (0..5000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for (start, len) in [
            (0, 0),
            (0, 1),
            (3, 15),
            (1, 64),
            (7, 1024),
            (5, 4096),
            (0, 5000),
        ] {
            let s = &data[start..start + len];
            assert_eq!(Crc32::checksum(s), crc32_bytewise(s), "{start}+{len}");
            let mut c = Crc32::new();
            for part in s.chunks(37) {
                c.update(part);
            }
            assert_eq!(c.finish(), crc32_bytewise(s), "incremental {start}+{len}");
        }
    }

    #[test]
    fn crc32_incremental_equals_one_shot() {
        let all: Vec<u8> = (0..200u8).collect();
        let mut c = Crc32::new();
        c.update(&all[..17]);
        c.update(&all[17..]);
        assert_eq!(c.finish(), Crc32::checksum(&all));
    }

    /// A bit-serial, MSB-first reference for the VCRC: it runs polynomial 0x100B on the
    /// bit-reversed input and bit-reverses the result, which is what "reflected" means. It
    /// shares nothing with the table engine but the polynomial.
    fn crc16_reference(bytes: &[u8]) -> u16 {
        let mut crc: u16 = 0xFFFF;
        for &b in bytes {
            crc ^= u16::from(b.reverse_bits()) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x100B
                } else {
                    crc << 1
                };
            }
        }
        crc.reverse_bits() ^ 0xFFFF
    }

    #[test]
    fn crc16_matches_bit_serial_reference() {
        let all: Vec<u8> = (0..=255u8).collect();
        for n in [0, 1, 2, 9, 31, 256] {
            assert_eq!(
                Crc16::checksum(&all[..n]),
                crc16_reference(&all[..n]),
                "len {n}"
            );
        }
        assert_eq!(Crc16::checksum(b"123456789"), crc16_reference(b"123456789"));
    }

    /// The slicing-by-8 engine against the bit-serial reference at packet lengths, from
    /// every alignment, whole and fed in uneven parts (the remainders of each part go
    /// through the byte-wise path).
    #[test]
    fn crc16_slicing_equals_the_reference() {
        let data: Vec<u8> = (0..4200u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        for (start, len) in [
            (0, 7),
            (0, 8),
            (1, 9),
            (3, 15),
            (5, 64),
            (7, 1084),
            (2, 4136),
        ] {
            let s = &data[start..start + len];
            let want = crc16_reference(s);
            assert_eq!(Crc16::checksum(s), want, "{start}+{len}");
            for part in [1, 5, 37] {
                let mut c = Crc16::new();
                for p in s.chunks(part) {
                    c.update(p);
                }
                assert_eq!(c.finish(), want, "{start}+{len} in parts of {part}");
            }
        }
    }

    /// The sum of 16-bit words one by one, folding at each step: the definition the
    /// word-wise [`inet::sum`] is held against.
    fn inet_sum_by_halfwords(mut acc: u32, bytes: &[u8]) -> u32 {
        acc = (acc & 0xFFFF) + (acc >> 16);
        acc = (acc & 0xFFFF) + (acc >> 16);
        let mut chunks = bytes.chunks_exact(2);
        for w in &mut chunks {
            acc += u32::from(u16::from_be_bytes([w[0], w[1]]));
            acc = (acc & 0xFFFF) + (acc >> 16);
        }
        if let [last] = chunks.remainder() {
            acc += u32::from(*last) << 8;
            acc = (acc & 0xFFFF) + (acc >> 16);
        }
        acc
    }

    #[test]
    fn inet_sum_equals_the_halfword_definition() {
        let data: Vec<u8> = (0..300u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect();
        let ones = [0xFFu8; 64];
        for len in 0..67 {
            for acc in [0, 1, 0xFFFF, 0x1_2345, 0xFFFF_FFFF] {
                for bytes in [&data[..len], &data[100..100 + len], &ones[..len.min(64)]] {
                    assert_eq!(
                        sum(acc, bytes),
                        inet_sum_by_halfwords(acc, bytes),
                        "acc {acc:#x}, {bytes:x?}"
                    );
                }
            }
        }
    }

    #[test]
    fn inet_checksum_rfc1071_example() {
        // RFC 1071 section 3 example: 00 01 f2 03 f4 f5 f6 f7 sums to 0xddf2.
        let acc = sum(0, &[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]);
        assert_eq!(inet::finish(acc), !0xddf2);
    }

    use inet::sum;
}
