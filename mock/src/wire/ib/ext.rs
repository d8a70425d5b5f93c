//! The extension transport headers, IBTA Vol 1 section 9.3:
//! RETH, AETH, AtomicETH, AtomicAckETH, DETH, ImmDt, IETH; and the XRC annex's XRCETH.
//!
//! ```text
//!  RETH (16):         VA(64) R_Key(32) DMALen(32)
//!  AETH (4):          Syndrome(8) MSN(24)
//!  AtomicETH (28):    VA(64) R_Key(32) SwapOrAddData(64) CompareData(64)
//!  AtomicAckETH (8):  OrigRemDt(64)
//!  DETH (8):          Q_Key(32) Reserved(8) SrcQP(24)
//!  ImmDt (4):         Immediate data (opaque, carried as-is)
//!  IETH (4):          R_Key to invalidate
//!  XRCETH (4):        Reserved(8) XRCSRQ(24)
//! ```

use crate::wire::{Error, Result, be};

/// Length of a RETH.
pub const RETH_LEN: usize = 16;
/// Length of an AETH.
pub const AETH_LEN: usize = 4;
/// Length of an AtomicETH.
pub const ATOMIC_ETH_LEN: usize = 28;
/// Length of an AtomicAckETH.
pub const ATOMIC_ACK_ETH_LEN: usize = 8;
/// Length of a DETH.
pub const DETH_LEN: usize = 8;
/// Length of an ImmDt.
pub const IMM_DT_LEN: usize = 4;
/// Length of an IETH.
pub const IETH_LEN: usize = 4;
/// Length of an XRCETH.
pub const XRCETH_LEN: usize = 4;

fn check(b: &[u8], len: usize) -> Result<()> {
    if b.len() < len {
        Err(Error::Truncated)
    } else {
        Ok(())
    }
}

macro_rules! view {
    ($(#[$doc:meta])* $name:ident, $len:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }

        impl<T: AsRef<[u8]>> $name<T> {
            /// Wrap a buffer without checks; getters panic if it is too short.
            pub const fn new_unchecked(buffer: T) -> Self {
                Self { buffer }
            }
            /// Wrap a buffer after checking its length (`Err(Truncated)`).
            pub fn new_checked(buffer: T) -> Result<Self> {
                check(buffer.as_ref(), $len)?;
                Ok(Self { buffer })
            }
            /// The underlying buffer.
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

view!(
    /// A view of an RDMA Extended Transport Header.
    Reth, RETH_LEN
);

impl<T: AsRef<[u8]>> Reth<T> {
    /// RETH:VA, the remote virtual address.
    pub fn va(&self) -> u64 {
        be::u64(self.buffer.as_ref(), 0)
    }
    /// RETH:R_Key.
    pub fn rkey(&self) -> u32 {
        be::u32(self.buffer.as_ref(), 8)
    }
    /// RETH:DMALen, the length of the whole RDMA operation in bytes.
    pub fn dma_len(&self) -> u32 {
        be::u32(self.buffer.as_ref(), 12)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Reth<T> {
    /// Set RETH:VA.
    pub fn set_va(&mut self, v: u64) {
        be::set_u64(self.buffer.as_mut(), 0, v);
    }
    /// Set RETH:R_Key.
    pub fn set_rkey(&mut self, v: u32) {
        be::set_u32(self.buffer.as_mut(), 8, v);
    }
    /// Set RETH:DMALen.
    pub fn set_dma_len(&mut self, v: u32) {
        be::set_u32(self.buffer.as_mut(), 12, v);
    }
}

/// A parsed RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RethRepr {
    /// VA.
    pub va: u64,
    /// R_Key.
    pub rkey: u32,
    /// DMALen.
    pub dma_len: u32,
}

impl RethRepr {
    /// Parse a RETH.
    pub fn parse<T: AsRef<[u8]>>(p: &Reth<T>) -> Result<RethRepr> {
        check(p.buffer.as_ref(), RETH_LEN)?;
        Ok(RethRepr {
            va: p.va(),
            rkey: p.rkey(),
            dma_len: p.dma_len(),
        })
    }
    /// 16.
    pub const fn buffer_len(&self) -> usize {
        RETH_LEN
    }
    /// Write the RETH. Panics if the view is shorter than 16 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Reth<T>) {
        p.set_va(self.va);
        p.set_rkey(self.rkey);
        p.set_dma_len(self.dma_len);
    }
}

/// An AETH NAK code (Syndrome bits 4:0 when bits 6:5 are 0b11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// 0: PSN sequence error.
    PsnSequenceError,
    /// 1: invalid request.
    InvalidRequest,
    /// 2: remote access error.
    RemoteAccessError,
    /// 3: remote operational error.
    RemoteOperationalError,
    /// 4: invalid RD request.
    InvalidRdRequest,
    /// 5-31: reserved.
    Unknown(u8),
}

impl From<u8> for NakCode {
    fn from(v: u8) -> NakCode {
        match v & 0x1F {
            0 => NakCode::PsnSequenceError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccessError,
            3 => NakCode::RemoteOperationalError,
            4 => NakCode::InvalidRdRequest,
            x => NakCode::Unknown(x),
        }
    }
}

impl From<NakCode> for u8 {
    fn from(v: NakCode) -> u8 {
        match v {
            NakCode::PsnSequenceError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccessError => 2,
            NakCode::RemoteOperationalError => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Unknown(x) => x & 0x1F,
        }
    }
}

/// AETH:Syndrome. Bit 7 is reserved (0); bits 6:5 select ACK (00), RNR NAK (01),
/// reserved (10) or NAK (11); bits 4:0 are the credit count, the RNR timer or the NAK code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AethSyndrome {
    /// ACK with the end-to-end credit count (5 bits; 0x1F means "invalid", no credits).
    Ack {
        /// Credit count, 0-31.
        credit_count: u8,
    },
    /// RNR NAK with the minimum RNR NAK timer field (5 bits).
    RnrNak {
        /// RNR timer encoding, 0-31.
        timer: u8,
    },
    /// NAK with its code.
    Nak(NakCode),
    /// A syndrome with bit 7 set or bits 6:5 = 0b10, kept whole.
    Reserved(u8),
}

impl From<u8> for AethSyndrome {
    fn from(v: u8) -> AethSyndrome {
        if v & 0x80 != 0 {
            return AethSyndrome::Reserved(v);
        }
        match (v >> 5) & 3 {
            0 => AethSyndrome::Ack {
                credit_count: v & 0x1F,
            },
            1 => AethSyndrome::RnrNak { timer: v & 0x1F },
            3 => AethSyndrome::Nak(NakCode::from(v)),
            _ => AethSyndrome::Reserved(v),
        }
    }
}

impl From<AethSyndrome> for u8 {
    fn from(v: AethSyndrome) -> u8 {
        match v {
            AethSyndrome::Ack { credit_count } => credit_count & 0x1F,
            AethSyndrome::RnrNak { timer } => 0x20 | (timer & 0x1F),
            AethSyndrome::Nak(code) => 0x60 | u8::from(code),
            AethSyndrome::Reserved(x) => x,
        }
    }
}

/// The RNR NAK timer field's encoding in microseconds, indexed by the 5-bit code
/// (IBTA Vol 1, "Encoding for RNR NAK Timer Field": code 0 is 655.36 ms, code 1 is 0.01 ms,
/// ..., code 31 is 491.52 ms).
pub const RNR_TIMER_MICROS: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// The end-to-end credit count field's encoding in credits (receive WQEs), indexed by the
/// 5-bit code 0-30 (IBTA Vol 1, "Encoding for End-to-End Credit Count"); code 31 means the
/// count is invalid (no end-to-end flow control information).
pub const CREDIT_COUNT_CREDITS: [u32; 31] = [
    0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1_024, 1_536,
    2_048, 3_072, 4_096, 6_144, 8_192, 12_288, 16_384, 24_576, 32_768,
];

/// The credit count code for an ACK: the largest code whose credits do not exceed `credits`.
pub fn credit_count_for(credits: u32) -> u8 {
    CREDIT_COUNT_CREDITS
        .iter()
        .rposition(|&c| c <= credits)
        .unwrap_or(0) as u8
}

/// The number of credits a credit count code grants; `None` for code 31 (invalid).
pub fn credits_of(credit_count: u8) -> Option<u32> {
    CREDIT_COUNT_CREDITS
        .get(usize::from(credit_count & 0x1F))
        .copied()
}

/// The RNR delay in microseconds of a 5-bit RNR NAK timer code.
pub fn rnr_timer_micros(timer: u8) -> u32 {
    RNR_TIMER_MICROS[usize::from(timer & 0x1F)]
}

view!(
    /// A view of an ACK Extended Transport Header.
    Aeth, AETH_LEN
);

impl<T: AsRef<[u8]>> Aeth<T> {
    /// AETH:Syndrome.
    pub fn syndrome(&self) -> AethSyndrome {
        AethSyndrome::from(self.buffer.as_ref()[0])
    }
    /// AETH:MSN, the message sequence number (24 bits).
    pub fn msn(&self) -> u32 {
        be::u24(self.buffer.as_ref(), 1)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Aeth<T> {
    /// Set AETH:Syndrome.
    pub fn set_syndrome(&mut self, v: AethSyndrome) {
        self.buffer.as_mut()[0] = v.into();
    }
    /// Set AETH:MSN (24 bits).
    pub fn set_msn(&mut self, v: u32) {
        be::set_u24(self.buffer.as_mut(), 1, v);
    }
}

/// A parsed AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// Syndrome.
    pub syndrome: AethSyndrome,
    /// MSN, 24 bits.
    pub msn: u32,
}

impl AethRepr {
    /// Parse an AETH.
    pub fn parse<T: AsRef<[u8]>>(p: &Aeth<T>) -> Result<AethRepr> {
        check(p.buffer.as_ref(), AETH_LEN)?;
        Ok(AethRepr {
            syndrome: p.syndrome(),
            msn: p.msn(),
        })
    }
    /// 4.
    pub const fn buffer_len(&self) -> usize {
        AETH_LEN
    }
    /// Write the AETH. Panics if the view is shorter than 4 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Aeth<T>) {
        p.set_syndrome(self.syndrome);
        p.set_msn(self.msn);
    }
}

view!(
    /// A view of an Atomic Extended Transport Header.
    AtomicEth, ATOMIC_ETH_LEN
);

impl<T: AsRef<[u8]>> AtomicEth<T> {
    /// AtomicETH:VA.
    pub fn va(&self) -> u64 {
        be::u64(self.buffer.as_ref(), 0)
    }
    /// AtomicETH:R_Key.
    pub fn rkey(&self) -> u32 {
        be::u32(self.buffer.as_ref(), 8)
    }
    /// AtomicETH:SwapOrAddData (swap value of CmpSwap, addend of FetchAdd).
    pub fn swap_or_add(&self) -> u64 {
        be::u64(self.buffer.as_ref(), 12)
    }
    /// AtomicETH:CompareData.
    pub fn compare(&self) -> u64 {
        be::u64(self.buffer.as_ref(), 20)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicEth<T> {
    /// Set AtomicETH:VA.
    pub fn set_va(&mut self, v: u64) {
        be::set_u64(self.buffer.as_mut(), 0, v);
    }
    /// Set AtomicETH:R_Key.
    pub fn set_rkey(&mut self, v: u32) {
        be::set_u32(self.buffer.as_mut(), 8, v);
    }
    /// Set AtomicETH:SwapOrAddData.
    pub fn set_swap_or_add(&mut self, v: u64) {
        be::set_u64(self.buffer.as_mut(), 12, v);
    }
    /// Set AtomicETH:CompareData.
    pub fn set_compare(&mut self, v: u64) {
        be::set_u64(self.buffer.as_mut(), 20, v);
    }
}

/// A parsed AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicEthRepr {
    /// VA (8-byte aligned).
    pub va: u64,
    /// R_Key.
    pub rkey: u32,
    /// SwapOrAddData.
    pub swap_or_add: u64,
    /// CompareData.
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Parse an AtomicETH.
    pub fn parse<T: AsRef<[u8]>>(p: &AtomicEth<T>) -> Result<AtomicEthRepr> {
        check(p.buffer.as_ref(), ATOMIC_ETH_LEN)?;
        Ok(AtomicEthRepr {
            va: p.va(),
            rkey: p.rkey(),
            swap_or_add: p.swap_or_add(),
            compare: p.compare(),
        })
    }
    /// 28.
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_ETH_LEN
    }
    /// Write the AtomicETH. Panics if the view is shorter than 28 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut AtomicEth<T>) {
        p.set_va(self.va);
        p.set_rkey(self.rkey);
        p.set_swap_or_add(self.swap_or_add);
        p.set_compare(self.compare);
    }
}

view!(
    /// A view of an Atomic ACK Extended Transport Header.
    AtomicAckEth, ATOMIC_ACK_ETH_LEN
);

impl<T: AsRef<[u8]>> AtomicAckEth<T> {
    /// AtomicAckETH:OrigRemDt, the value at the remote address before the atomic.
    pub fn orig_rem_dt(&self) -> u64 {
        be::u64(self.buffer.as_ref(), 0)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicAckEth<T> {
    /// Set AtomicAckETH:OrigRemDt.
    pub fn set_orig_rem_dt(&mut self, v: u64) {
        be::set_u64(self.buffer.as_mut(), 0, v);
    }
}

/// A parsed AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AtomicAckEthRepr {
    /// OrigRemDt.
    pub orig_rem_dt: u64,
}

impl AtomicAckEthRepr {
    /// Parse an AtomicAckETH.
    pub fn parse<T: AsRef<[u8]>>(p: &AtomicAckEth<T>) -> Result<AtomicAckEthRepr> {
        check(p.buffer.as_ref(), ATOMIC_ACK_ETH_LEN)?;
        Ok(AtomicAckEthRepr {
            orig_rem_dt: p.orig_rem_dt(),
        })
    }
    /// 8.
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_ACK_ETH_LEN
    }
    /// Write the AtomicAckETH. Panics if the view is shorter than 8 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut AtomicAckEth<T>) {
        p.set_orig_rem_dt(self.orig_rem_dt);
    }
}

view!(
    /// A view of a Datagram Extended Transport Header.
    Deth, DETH_LEN
);

impl<T: AsRef<[u8]>> Deth<T> {
    /// DETH:Q_Key.
    pub fn qkey(&self) -> u32 {
        be::u32(self.buffer.as_ref(), 0)
    }
    /// DETH:SrcQP (24 bits).
    pub fn src_qp(&self) -> u32 {
        be::u24(self.buffer.as_ref(), 5)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Deth<T> {
    /// Set DETH:Q_Key.
    pub fn set_qkey(&mut self, v: u32) {
        be::set_u32(self.buffer.as_mut(), 0, v);
    }
    /// Set DETH:SrcQP (24 bits; the reserved byte is cleared).
    pub fn set_src_qp(&mut self, v: u32) {
        self.buffer.as_mut()[4] = 0;
        be::set_u24(self.buffer.as_mut(), 5, v);
    }
}

/// A parsed DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DethRepr {
    /// Q_Key.
    pub qkey: u32,
    /// SrcQP, 24 bits.
    pub src_qp: u32,
}

impl DethRepr {
    /// Parse a DETH.
    pub fn parse<T: AsRef<[u8]>>(p: &Deth<T>) -> Result<DethRepr> {
        check(p.buffer.as_ref(), DETH_LEN)?;
        Ok(DethRepr {
            qkey: p.qkey(),
            src_qp: p.src_qp(),
        })
    }
    /// 8.
    pub const fn buffer_len(&self) -> usize {
        DETH_LEN
    }
    /// Write the DETH. Panics if the view is shorter than 8 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Deth<T>) {
        p.set_qkey(self.qkey);
        p.set_src_qp(self.src_qp);
    }
}

view!(
    /// A view of an XRC Extended Transport Header: the XRC SRQ an XRC request is for.
    Xrceth, XRCETH_LEN
);

impl<T: AsRef<[u8]>> Xrceth<T> {
    /// XRCETH:XRCSRQ (24 bits).
    pub fn xrc_srq(&self) -> u32 {
        be::u24(self.buffer.as_ref(), 1)
    }
}
impl<T: AsRef<[u8]> + AsMut<[u8]>> Xrceth<T> {
    /// Set XRCETH:XRCSRQ (24 bits; the reserved byte is cleared).
    pub fn set_xrc_srq(&mut self, v: u32) {
        self.buffer.as_mut()[0] = 0;
        be::set_u24(self.buffer.as_mut(), 1, v);
    }
}

/// A parsed XRCETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct XrcethRepr {
    /// XRCSRQ, 24 bits: the number of the XRC SRQ at the responder.
    pub xrc_srq: u32,
}

impl XrcethRepr {
    /// Parse an XRCETH.
    pub fn parse<T: AsRef<[u8]>>(p: &Xrceth<T>) -> Result<XrcethRepr> {
        check(p.buffer.as_ref(), XRCETH_LEN)?;
        Ok(XrcethRepr {
            xrc_srq: p.xrc_srq(),
        })
    }
    /// 4.
    pub const fn buffer_len(&self) -> usize {
        XRCETH_LEN
    }
    /// Write the XRCETH. Panics if the view is shorter than 4 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut Xrceth<T>) {
        p.set_xrc_srq(self.xrc_srq);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xrceth_golden() {
        // XRCSRQ 0x12_3456 after a reserved byte the writer clears.
        let b = [0x00, 0x12, 0x34, 0x56];
        let r = XrcethRepr::parse(&Xrceth::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(r.xrc_srq, 0x12_3456);
        let mut out = [0xFFu8; 4];
        r.emit(&mut Xrceth::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
        assert_eq!(Xrceth::new_checked(&b[..3]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn reth_golden() {
        // VA 0x0000_7F00_1234_5000, R_Key 0x0000_1234, DMALen 4096 (0x1000).
        let b = [
            0x00, 0x00, 0x7F, 0x00, 0x12, 0x34, 0x50, 0x00, 0x00, 0x00, 0x12, 0x34, 0x00, 0x00,
            0x10, 0x00,
        ];
        let r = RethRepr {
            va: 0x7F00_1234_5000,
            rkey: 0x1234,
            dma_len: 4096,
        };
        assert_eq!(
            RethRepr::parse(&Reth::new_checked(&b[..]).unwrap()).unwrap(),
            r
        );
        let mut out = [0u8; 16];
        r.emit(&mut Reth::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
        assert_eq!(Reth::new_checked(&b[..15]).unwrap_err(), Error::Truncated);
    }

    #[test]
    fn aeth_golden_syndromes() {
        // (syndrome byte, meaning): IBTA Vol 1 Table 44 "AETH Syndrome field".
        let cases = [
            (0x1F, AethSyndrome::Ack { credit_count: 31 }), // 0 00 11111: ACK, invalid credit
            (0x05, AethSyndrome::Ack { credit_count: 5 }),
            (0x2E, AethSyndrome::RnrNak { timer: 14 }), // 0 01 01110
            (0x60, AethSyndrome::Nak(NakCode::PsnSequenceError)), // 0 11 00000
            (0x61, AethSyndrome::Nak(NakCode::InvalidRequest)),
            (0x62, AethSyndrome::Nak(NakCode::RemoteAccessError)),
            (0x63, AethSyndrome::Nak(NakCode::RemoteOperationalError)),
            (0x64, AethSyndrome::Nak(NakCode::InvalidRdRequest)),
            (0x65, AethSyndrome::Nak(NakCode::Unknown(5))),
            (0x40, AethSyndrome::Reserved(0x40)), // 0 10 00000: reserved class
            (0x80, AethSyndrome::Reserved(0x80)), // bit 7 set
        ];
        for (byte, syn) in cases {
            assert_eq!(AethSyndrome::from(byte), syn);
            assert_eq!(u8::from(syn), byte);
        }
        for v in 0..=255u8 {
            assert_eq!(u8::from(AethSyndrome::from(v)), v, "lossless {v:#x}");
        }
        // Syndrome 0x61 (NAK invalid request), MSN 0x000102.
        let b = [0x61, 0x00, 0x01, 0x02];
        let r = AethRepr {
            syndrome: AethSyndrome::Nak(NakCode::InvalidRequest),
            msn: 0x102,
        };
        assert_eq!(
            AethRepr::parse(&Aeth::new_checked(&b[..]).unwrap()).unwrap(),
            r
        );
        let mut out = [0u8; 4];
        r.emit(&mut Aeth::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
    }

    #[test]
    fn aeth_tables() {
        assert_eq!(rnr_timer_micros(0), 655_360);
        assert_eq!(rnr_timer_micros(1), 10);
        assert_eq!(rnr_timer_micros(14), 1_280);
        assert_eq!(rnr_timer_micros(31), 491_520);
        assert_eq!(credits_of(31), None);
        assert_eq!(credits_of(5), Some(6));
        assert_eq!(credits_of(30), Some(32_768));
        assert_eq!(credit_count_for(0), 0);
        assert_eq!(credit_count_for(5), 4); // 4 credits: 5 cannot be said exactly
        assert_eq!(credit_count_for(100), 13); // 96
        assert_eq!(credit_count_for(u32::MAX), 30);
        assert!(CREDIT_COUNT_CREDITS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn atomic_eth_golden() {
        // VA 0x1000, R_Key 0xAABBCCDD, Swap 0x0102030405060708, Compare 0x1112131415161718.
        let b = [
            0, 0, 0, 0, 0, 0, 0x10, 0x00, 0xAA, 0xBB, 0xCC, 0xDD, 1, 2, 3, 4, 5, 6, 7, 8, 0x11,
            0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18,
        ];
        let r = AtomicEthRepr {
            va: 0x1000,
            rkey: 0xAABB_CCDD,
            swap_or_add: 0x0102_0304_0506_0708,
            compare: 0x1112_1314_1516_1718,
        };
        assert_eq!(
            AtomicEthRepr::parse(&AtomicEth::new_checked(&b[..]).unwrap()).unwrap(),
            r
        );
        let mut out = [0u8; 28];
        r.emit(&mut AtomicEth::new_unchecked(&mut out[..]));
        assert_eq!(out, b);
    }

    #[test]
    fn atomic_ack_and_deth_golden() {
        let b = [0xDE, 0xAD, 0xBE, 0xEF, 0, 0, 0, 1];
        let r = AtomicAckEthRepr {
            orig_rem_dt: 0xDEAD_BEEF_0000_0001,
        };
        assert_eq!(
            AtomicAckEthRepr::parse(&AtomicAckEth::new_unchecked(&b[..])).unwrap(),
            r
        );
        // Q_Key 0x80010000 (a "controlled" Q_Key has bit 31 set), reserved 0, SrcQP 0x000042.
        let d = [0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x42];
        let r = DethRepr {
            qkey: 0x8001_0000,
            src_qp: 0x42,
        };
        assert_eq!(
            DethRepr::parse(&Deth::new_checked(&d[..]).unwrap()).unwrap(),
            r
        );
        let mut out = [0xFFu8; 8];
        r.emit(&mut Deth::new_unchecked(&mut out[..]));
        assert_eq!(out, d);
        assert_eq!(Deth::new_checked(&d[..7]).unwrap_err(), Error::Truncated);
    }
}
