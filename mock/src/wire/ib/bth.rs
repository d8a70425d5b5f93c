//! Base Transport Header (BTH), IBTA Vol 1 section 9.2, and the opcode table.
//!
//! ```text
//!  byte 0:     OpCode
//!  byte 1:     SE(7) M(6) PadCnt(5:4) TVer(3:0)
//!  bytes 2-3:  P_Key
//!  byte 4:     FECN(7) BECN(6) Resv6(5:0)   (Resv8a in IBTA 1.0; variant, masked by the ICRC)
//!  bytes 5-7:  DestQP
//!  byte 8:     A(7) Resv7(6:0)
//!  bytes 9-11: PSN
//! ```

use crate::wire::{Error, Field, Result, be};

mod field {
    use super::Field;
    pub const OPCODE: usize = 0;
    pub const FLAGS: usize = 1;
    pub const P_KEY: Field = 2..4;
    pub const ECN: usize = 4;
    pub const DEST_QP: Field = 5..8;
    pub const ACK_REQ: usize = 8;
    pub const PSN: Field = 9..12;
}

/// The length of a BTH.
pub const BTH_LEN: usize = 12;

/// The transport service of an opcode: OpCode bits 7:5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportService {
    /// 000: Reliable Connection.
    Rc,
    /// 001: Unreliable Connection.
    Uc,
    /// 010: Reliable Datagram.
    Rd,
    /// 011: Unreliable Datagram.
    Ud,
    /// 100: CNP (RoCEv2 congestion notification; IBTA Annex A17).
    Cnp,
    /// 101: Extended Reliable Connection.
    Xrc,
    /// 110, 111: manufacturer specific.
    ManufacturerSpecific(u8),
}

/// Which extension headers follow the BTH for an opcode, in wire order
/// (DETH, XRCETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH, payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExtHeaders {
    /// Datagram ETH (8 bytes).
    pub deth: bool,
    /// XRC ETH (4 bytes): every XRC request names the XRC SRQ it is for.
    pub xrceth: bool,
    /// RDMA ETH (16 bytes).
    pub reth: bool,
    /// Atomic ETH (28 bytes).
    pub atomic_eth: bool,
    /// ACK ETH (4 bytes).
    pub aeth: bool,
    /// Atomic ACK ETH (8 bytes).
    pub atomic_ack_eth: bool,
    /// Immediate data (4 bytes).
    pub imm_dt: bool,
    /// Invalidate ETH (4 bytes).
    pub ieth: bool,
    /// 16 reserved bytes (CNP).
    pub cnp_reserved: bool,
    /// Whether a payload may follow.
    pub payload: bool,
}

impl ExtHeaders {
    /// The total length of the extension headers (payload excluded).
    pub const fn len(&self) -> usize {
        (self.deth as usize) * 8
            + (self.xrceth as usize) * 4
            + (self.reth as usize) * 16
            + (self.atomic_eth as usize) * 28
            + (self.aeth as usize) * 4
            + (self.atomic_ack_eth as usize) * 8
            + (self.imm_dt as usize) * 4
            + (self.ieth as usize) * 4
            + (self.cnp_reserved as usize) * 16
    }

    /// Whether no extension header follows.
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

const fn hdrs(spec: &str) -> ExtHeaders {
    // A tiny const parser for the table below: letters name the headers.
    let b = spec.as_bytes();
    let mut h = ExtHeaders {
        deth: false,
        xrceth: false,
        reth: false,
        atomic_eth: false,
        aeth: false,
        atomic_ack_eth: false,
        imm_dt: false,
        ieth: false,
        cnp_reserved: false,
        payload: false,
    };
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'D' => h.deth = true,
            b'X' => h.xrceth = true,
            b'R' => h.reth = true,
            b'T' => h.atomic_eth = true,
            b'A' => h.aeth = true,
            b'K' => h.atomic_ack_eth = true,
            b'I' => h.imm_dt = true,
            b'V' => h.ieth = true,
            b'C' => h.cnp_reserved = true,
            b'P' => h.payload = true,
            _ => {}
        }
        i += 1;
    }
    h
}

macro_rules! opcodes {
    ($($(#[$doc:meta])* $name:ident = $value:expr, $text:expr, $hdrs:expr;)*) => {
        /// BTH:OpCode. Known opcodes of RC, UC, UD, XRC and CNP; anything else is
        /// `Unknown(x)`, losslessly.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Opcode {
            $($(#[$doc])* $name,)*
            /// An opcode not in this table (RD, reserved, manufacturer specific).
            Unknown(u8),
        }

        impl From<u8> for Opcode {
            #[inline]
            fn from(v: u8) -> Opcode {
                match v {
                    $($value => Opcode::$name,)*
                    other => Opcode::Unknown(other),
                }
            }
        }

        impl From<Opcode> for u8 {
            #[inline]
            fn from(v: Opcode) -> u8 {
                match v {
                    $(Opcode::$name => $value,)*
                    Opcode::Unknown(other) => other,
                }
            }
        }

        impl Opcode {
            /// Every known opcode, in numeric order.
            pub const ALL: &'static [Opcode] = &[$(Opcode::$name,)*];

            /// The IBTA name, such as `"RC SEND Only"`; `None` for `Unknown`.
            pub const fn name(self) -> Option<&'static str> {
                match self {
                    $(Opcode::$name => Some($text),)*
                    Opcode::Unknown(_) => None,
                }
            }

            /// The extension headers that follow the BTH; `None` for `Unknown`, whose layout
            /// this module does not know.
            #[inline]
            pub const fn headers(self) -> Option<ExtHeaders> {
                match self {
                    $(Opcode::$name => Some(const { hdrs($hdrs) }),)*
                    Opcode::Unknown(_) => None,
                }
            }
        }
    };
}

// Header letters: D=DETH X=XRCETH R=RETH T=AtomicETH A=AETH K=AtomicAckETH I=ImmDt V=IETH
// C=CNP reserved bytes P=payload. IBTA Vol 1 Table 35 (opcodes) and 9.3 (header order); XRC
// (OpCode bits 7:5 = 101) from the XRC annex: the RC operations with an XRCETH right after
// the BTH in every request, the responses as RC's.
opcodes! {
    /// RC SEND First.
    RcSendFirst = 0x00, "RC SEND First", "P";
    /// RC SEND Middle.
    RcSendMiddle = 0x01, "RC SEND Middle", "P";
    /// RC SEND Last.
    RcSendLast = 0x02, "RC SEND Last", "P";
    /// RC SEND Last with Immediate.
    RcSendLastWithImmediate = 0x03, "RC SEND Last with Immediate", "IP";
    /// RC SEND Only.
    RcSendOnly = 0x04, "RC SEND Only", "P";
    /// RC SEND Only with Immediate.
    RcSendOnlyWithImmediate = 0x05, "RC SEND Only with Immediate", "IP";
    /// RC RDMA WRITE First.
    RcRdmaWriteFirst = 0x06, "RC RDMA WRITE First", "RP";
    /// RC RDMA WRITE Middle.
    RcRdmaWriteMiddle = 0x07, "RC RDMA WRITE Middle", "P";
    /// RC RDMA WRITE Last.
    RcRdmaWriteLast = 0x08, "RC RDMA WRITE Last", "P";
    /// RC RDMA WRITE Last with Immediate.
    RcRdmaWriteLastWithImmediate = 0x09, "RC RDMA WRITE Last with Immediate", "IP";
    /// RC RDMA WRITE Only.
    RcRdmaWriteOnly = 0x0A, "RC RDMA WRITE Only", "RP";
    /// RC RDMA WRITE Only with Immediate.
    RcRdmaWriteOnlyWithImmediate = 0x0B, "RC RDMA WRITE Only with Immediate", "RIP";
    /// RC RDMA READ Request.
    RcRdmaReadRequest = 0x0C, "RC RDMA READ Request", "R";
    /// RC RDMA READ response First.
    RcRdmaReadResponseFirst = 0x0D, "RC RDMA READ response First", "AP";
    /// RC RDMA READ response Middle.
    RcRdmaReadResponseMiddle = 0x0E, "RC RDMA READ response Middle", "P";
    /// RC RDMA READ response Last.
    RcRdmaReadResponseLast = 0x0F, "RC RDMA READ response Last", "AP";
    /// RC RDMA READ response Only.
    RcRdmaReadResponseOnly = 0x10, "RC RDMA READ response Only", "AP";
    /// RC Acknowledge.
    RcAcknowledge = 0x11, "RC Acknowledge", "A";
    /// RC ATOMIC Acknowledge.
    RcAtomicAcknowledge = 0x12, "RC ATOMIC Acknowledge", "AK";
    /// RC CmpSwap.
    RcCompareSwap = 0x13, "RC CmpSwap", "T";
    /// RC FetchAdd.
    RcFetchAdd = 0x14, "RC FetchAdd", "T";
    /// RC SEND Last with Invalidate.
    RcSendLastWithInvalidate = 0x16, "RC SEND Last with Invalidate", "VP";
    /// RC SEND Only with Invalidate.
    RcSendOnlyWithInvalidate = 0x17, "RC SEND Only with Invalidate", "VP";
    /// UC SEND First.
    UcSendFirst = 0x20, "UC SEND First", "P";
    /// UC SEND Middle.
    UcSendMiddle = 0x21, "UC SEND Middle", "P";
    /// UC SEND Last.
    UcSendLast = 0x22, "UC SEND Last", "P";
    /// UC SEND Last with Immediate.
    UcSendLastWithImmediate = 0x23, "UC SEND Last with Immediate", "IP";
    /// UC SEND Only.
    UcSendOnly = 0x24, "UC SEND Only", "P";
    /// UC SEND Only with Immediate.
    UcSendOnlyWithImmediate = 0x25, "UC SEND Only with Immediate", "IP";
    /// UC RDMA WRITE First.
    UcRdmaWriteFirst = 0x26, "UC RDMA WRITE First", "RP";
    /// UC RDMA WRITE Middle.
    UcRdmaWriteMiddle = 0x27, "UC RDMA WRITE Middle", "P";
    /// UC RDMA WRITE Last.
    UcRdmaWriteLast = 0x28, "UC RDMA WRITE Last", "P";
    /// UC RDMA WRITE Last with Immediate.
    UcRdmaWriteLastWithImmediate = 0x29, "UC RDMA WRITE Last with Immediate", "IP";
    /// UC RDMA WRITE Only.
    UcRdmaWriteOnly = 0x2A, "UC RDMA WRITE Only", "RP";
    /// UC RDMA WRITE Only with Immediate.
    UcRdmaWriteOnlyWithImmediate = 0x2B, "UC RDMA WRITE Only with Immediate", "RIP";
    /// UD SEND Only.
    UdSendOnly = 0x64, "UD SEND Only", "DP";
    /// UD SEND Only with Immediate.
    UdSendOnlyWithImmediate = 0x65, "UD SEND Only with Immediate", "DIP";
    /// CNP (RoCEv2 congestion notification packet).
    Cnp = 0x81, "CNP", "C";
    /// XRC SEND First.
    XrcSendFirst = 0xA0, "XRC SEND First", "XP";
    /// XRC SEND Middle.
    XrcSendMiddle = 0xA1, "XRC SEND Middle", "XP";
    /// XRC SEND Last.
    XrcSendLast = 0xA2, "XRC SEND Last", "XP";
    /// XRC SEND Last with Immediate.
    XrcSendLastWithImmediate = 0xA3, "XRC SEND Last with Immediate", "XIP";
    /// XRC SEND Only.
    XrcSendOnly = 0xA4, "XRC SEND Only", "XP";
    /// XRC SEND Only with Immediate.
    XrcSendOnlyWithImmediate = 0xA5, "XRC SEND Only with Immediate", "XIP";
    /// XRC RDMA WRITE First.
    XrcRdmaWriteFirst = 0xA6, "XRC RDMA WRITE First", "XRP";
    /// XRC RDMA WRITE Middle.
    XrcRdmaWriteMiddle = 0xA7, "XRC RDMA WRITE Middle", "XP";
    /// XRC RDMA WRITE Last.
    XrcRdmaWriteLast = 0xA8, "XRC RDMA WRITE Last", "XP";
    /// XRC RDMA WRITE Last with Immediate.
    XrcRdmaWriteLastWithImmediate = 0xA9, "XRC RDMA WRITE Last with Immediate", "XIP";
    /// XRC RDMA WRITE Only.
    XrcRdmaWriteOnly = 0xAA, "XRC RDMA WRITE Only", "XRP";
    /// XRC RDMA WRITE Only with Immediate.
    XrcRdmaWriteOnlyWithImmediate = 0xAB, "XRC RDMA WRITE Only with Immediate", "XRIP";
    /// XRC RDMA READ Request.
    XrcRdmaReadRequest = 0xAC, "XRC RDMA READ Request", "XR";
    /// XRC RDMA READ response First.
    XrcRdmaReadResponseFirst = 0xAD, "XRC RDMA READ response First", "AP";
    /// XRC RDMA READ response Middle.
    XrcRdmaReadResponseMiddle = 0xAE, "XRC RDMA READ response Middle", "P";
    /// XRC RDMA READ response Last.
    XrcRdmaReadResponseLast = 0xAF, "XRC RDMA READ response Last", "AP";
    /// XRC RDMA READ response Only.
    XrcRdmaReadResponseOnly = 0xB0, "XRC RDMA READ response Only", "AP";
    /// XRC Acknowledge.
    XrcAcknowledge = 0xB1, "XRC Acknowledge", "A";
    /// XRC ATOMIC Acknowledge.
    XrcAtomicAcknowledge = 0xB2, "XRC ATOMIC Acknowledge", "AK";
    /// XRC CmpSwap.
    XrcCompareSwap = 0xB3, "XRC CmpSwap", "XT";
    /// XRC FetchAdd.
    XrcFetchAdd = 0xB4, "XRC FetchAdd", "XT";
    /// XRC SEND Last with Invalidate.
    XrcSendLastWithInvalidate = 0xB6, "XRC SEND Last with Invalidate", "XVP";
    /// XRC SEND Only with Invalidate.
    XrcSendOnlyWithInvalidate = 0xB7, "XRC SEND Only with Invalidate", "XVP";
}

/// Where a packet sits in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MessagePosition {
    /// The first packet of a multi-packet message.
    First,
    /// A packet between the first and the last.
    Middle,
    /// The last packet of a multi-packet message.
    Last,
    /// The only packet of a message (including requests and acknowledgements).
    Only,
}

impl Opcode {
    /// Where a packet with this opcode sits in its message; `None` for `Unknown`.
    pub fn position(self) -> Option<MessagePosition> {
        use Opcode::*;
        Some(match self {
            RcSendFirst
            | RcRdmaWriteFirst
            | RcRdmaReadResponseFirst
            | UcSendFirst
            | UcRdmaWriteFirst
            | XrcSendFirst
            | XrcRdmaWriteFirst
            | XrcRdmaReadResponseFirst => MessagePosition::First,
            RcSendMiddle
            | RcRdmaWriteMiddle
            | RcRdmaReadResponseMiddle
            | UcSendMiddle
            | UcRdmaWriteMiddle
            | XrcSendMiddle
            | XrcRdmaWriteMiddle
            | XrcRdmaReadResponseMiddle => MessagePosition::Middle,
            RcSendLast
            | RcSendLastWithImmediate
            | RcSendLastWithInvalidate
            | RcRdmaWriteLast
            | RcRdmaWriteLastWithImmediate
            | RcRdmaReadResponseLast
            | UcSendLast
            | UcSendLastWithImmediate
            | UcRdmaWriteLast
            | UcRdmaWriteLastWithImmediate
            | XrcSendLast
            | XrcSendLastWithImmediate
            | XrcSendLastWithInvalidate
            | XrcRdmaWriteLast
            | XrcRdmaWriteLastWithImmediate
            | XrcRdmaReadResponseLast => MessagePosition::Last,
            Unknown(_) => return None,
            _ => MessagePosition::Only,
        })
    }

    /// Whether the opcode is sent by a responder (acknowledgements and RDMA READ responses)
    /// rather than a requester.
    pub fn is_response(self) -> bool {
        matches!(
            self,
            Opcode::RcAcknowledge
                | Opcode::RcAtomicAcknowledge
                | Opcode::RcRdmaReadResponseFirst
                | Opcode::RcRdmaReadResponseMiddle
                | Opcode::RcRdmaReadResponseLast
                | Opcode::RcRdmaReadResponseOnly
                | Opcode::XrcAcknowledge
                | Opcode::XrcAtomicAcknowledge
                | Opcode::XrcRdmaReadResponseFirst
                | Opcode::XrcRdmaReadResponseMiddle
                | Opcode::XrcRdmaReadResponseLast
                | Opcode::XrcRdmaReadResponseOnly
        )
    }

    /// OpCode bits 7:5.
    #[inline]
    pub fn transport(self) -> TransportService {
        match u8::from(self) >> 5 {
            0 => TransportService::Rc,
            1 => TransportService::Uc,
            2 => TransportService::Rd,
            3 => TransportService::Ud,
            4 => TransportService::Cnp,
            5 => TransportService::Xrc,
            x => TransportService::ManufacturerSpecific(x),
        }
    }
}

/// A view of a Base Transport Header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bth<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Bth<T> {
    /// Wrap a buffer without checks; getters panic if it is shorter than 12 bytes.
    pub const fn new_unchecked(buffer: T) -> Bth<T> {
        Bth { buffer }
    }
    /// Wrap a buffer after [`Bth::check_len`].
    pub fn new_checked(buffer: T) -> Result<Bth<T>> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }
    /// `Err(Truncated)` if the buffer is shorter than a BTH.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < BTH_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }
    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }
    /// BTH:OpCode.
    pub fn opcode(&self) -> Opcode {
        Opcode::from(self.buffer.as_ref()[field::OPCODE])
    }
    /// BTH:SE, solicited event.
    pub fn solicited(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x80 != 0
    }
    /// BTH:M, migration request.
    pub fn migreq(&self) -> bool {
        self.buffer.as_ref()[field::FLAGS] & 0x40 != 0
    }
    /// BTH:PadCnt, bytes of padding after the payload (0-3).
    pub fn pad_count(&self) -> u8 {
        (self.buffer.as_ref()[field::FLAGS] >> 4) & 3
    }
    /// BTH:TVer, transport header version (0).
    pub fn tver(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS] & 0x0F
    }
    /// BTH:P_Key.
    pub fn pkey(&self) -> u16 {
        be::u16(self.buffer.as_ref(), field::P_KEY.start)
    }
    /// BTH:FECN, forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.buffer.as_ref()[field::ECN] & 0x80 != 0
    }
    /// BTH:BECN, backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.buffer.as_ref()[field::ECN] & 0x40 != 0
    }
    /// BTH:DestQP (24 bits).
    pub fn dest_qp(&self) -> u32 {
        be::u24(self.buffer.as_ref(), field::DEST_QP.start)
    }
    /// BTH:A, acknowledge request.
    pub fn ack_req(&self) -> bool {
        self.buffer.as_ref()[field::ACK_REQ] & 0x80 != 0
    }
    /// BTH:PSN (24 bits).
    pub fn psn(&self) -> u32 {
        be::u24(self.buffer.as_ref(), field::PSN.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Bth<T> {
    fn set_bit(&mut self, at: usize, mask: u8, v: bool) {
        let b = &mut self.buffer.as_mut()[at];
        *b = if v { *b | mask } else { *b & !mask };
    }
    /// Set BTH:OpCode.
    pub fn set_opcode(&mut self, v: Opcode) {
        self.buffer.as_mut()[field::OPCODE] = v.into();
    }
    /// Set BTH:SE.
    pub fn set_solicited(&mut self, v: bool) {
        self.set_bit(field::FLAGS, 0x80, v);
    }
    /// Set BTH:M.
    pub fn set_migreq(&mut self, v: bool) {
        self.set_bit(field::FLAGS, 0x40, v);
    }
    /// Set BTH:PadCnt (2 bits).
    pub fn set_pad_count(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & !0x30) | ((v & 3) << 4);
    }
    /// Set BTH:TVer (4 bits).
    pub fn set_tver(&mut self, v: u8) {
        let b = &mut self.buffer.as_mut()[field::FLAGS];
        *b = (*b & 0xF0) | (v & 0x0F);
    }
    /// Set BTH:P_Key.
    pub fn set_pkey(&mut self, v: u16) {
        be::set_u16(self.buffer.as_mut(), field::P_KEY.start, v);
    }
    /// Set BTH:FECN.
    pub fn set_fecn(&mut self, v: bool) {
        self.set_bit(field::ECN, 0x80, v);
    }
    /// Set BTH:BECN.
    pub fn set_becn(&mut self, v: bool) {
        self.set_bit(field::ECN, 0x40, v);
    }
    /// Set BTH:DestQP (24 bits).
    pub fn set_dest_qp(&mut self, v: u32) {
        be::set_u24(self.buffer.as_mut(), field::DEST_QP.start, v);
    }
    /// Set BTH:A.
    pub fn set_ack_req(&mut self, v: bool) {
        self.set_bit(field::ACK_REQ, 0x80, v);
    }
    /// Set BTH:PSN (24 bits).
    pub fn set_psn(&mut self, v: u32) {
        be::set_u24(self.buffer.as_mut(), field::PSN.start, v);
    }
}

/// A parsed BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BthRepr {
    /// OpCode.
    pub opcode: Opcode,
    /// SE.
    pub solicited: bool,
    /// M.
    pub migreq: bool,
    /// PadCnt. [`IbTransportRepr::emit`](super::IbTransportRepr::emit) fills it in from the
    /// payload length.
    pub pad_count: u8,
    /// TVer, 0.
    pub tver: u8,
    /// P_Key.
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// DestQP, 24 bits.
    pub dest_qp: u32,
    /// A.
    pub ack_req: bool,
    /// PSN, 24 bits.
    pub psn: u32,
}

impl BthRepr {
    /// A BTH with the default partition key 0xFFFF and every flag clear.
    pub const fn new(opcode: Opcode, dest_qp: u32, psn: u32) -> BthRepr {
        BthRepr {
            opcode,
            solicited: false,
            migreq: false,
            pad_count: 0,
            tver: 0,
            pkey: 0xFFFF,
            fecn: false,
            becn: false,
            dest_qp: dest_qp & 0x00FF_FFFF,
            ack_req: false,
            psn: psn & 0x00FF_FFFF,
        }
    }

    /// Parse a BTH; `Err(Malformed)` if TVer is not 0. Unknown opcodes parse (the caller
    /// decides); [`IbTransportRepr::parse`](super::IbTransportRepr::parse) rejects them.
    pub fn parse<T: AsRef<[u8]>>(bth: &Bth<T>) -> Result<BthRepr> {
        bth.check_len()?;
        if bth.tver() != 0 {
            return Err(Error::Malformed);
        }
        Ok(BthRepr {
            opcode: bth.opcode(),
            solicited: bth.solicited(),
            migreq: bth.migreq(),
            pad_count: bth.pad_count(),
            tver: bth.tver(),
            pkey: bth.pkey(),
            fecn: bth.fecn(),
            becn: bth.becn(),
            dest_qp: bth.dest_qp(),
            ack_req: bth.ack_req(),
            psn: bth.psn(),
        })
    }

    /// 12.
    pub const fn buffer_len(&self) -> usize {
        BTH_LEN
    }

    /// Write the BTH (reserved bits zero). Panics if the view is shorter than 12 bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, bth: &mut Bth<T>) {
        bth.set_opcode(self.opcode);
        bth.buffer.as_mut()[field::FLAGS] = 0;
        bth.set_solicited(self.solicited);
        bth.set_migreq(self.migreq);
        bth.set_pad_count(self.pad_count);
        bth.set_tver(self.tver);
        bth.set_pkey(self.pkey);
        bth.buffer.as_mut()[field::ECN] = 0;
        bth.set_fecn(self.fecn);
        bth.set_becn(self.becn);
        bth.set_dest_qp(self.dest_qp);
        bth.buffer.as_mut()[field::ACK_REQ] = 0;
        bth.set_ack_req(self.ack_req);
        bth.set_psn(self.psn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // OpCode 0x04 (RC SEND Only) | SE=1 M=0 PadCnt=3 TVer=0 -> 1011_0000 = 0xB0 |
    // P_Key 0xFFFF | FECN=0 BECN=1 -> 0x40 | DestQP 0x000012 | A=1 -> 0x80 | PSN 0xABCDEF.
    static BYTES: [u8; 12] = [
        0x04, 0xB0, 0xFF, 0xFF, 0x40, 0x00, 0x00, 0x12, 0x80, 0xAB, 0xCD, 0xEF,
    ];

    fn repr() -> BthRepr {
        BthRepr {
            solicited: true,
            pad_count: 3,
            becn: true,
            ack_req: true,
            ..BthRepr::new(Opcode::RcSendOnly, 0x12, 0xAB_CDEF)
        }
    }

    #[test]
    fn golden_parse_and_emit() {
        assert_eq!(
            BthRepr::parse(&Bth::new_checked(&BYTES[..]).unwrap()).unwrap(),
            repr()
        );
        let mut buf = [0xFFu8; 12];
        repr().emit(&mut Bth::new_unchecked(&mut buf[..]));
        assert_eq!(buf, BYTES);
    }

    #[test]
    fn opcode_round_trip_is_lossless() {
        for v in 0..=255u8 {
            assert_eq!(u8::from(Opcode::from(v)), v);
        }
        assert_eq!(Opcode::from(0x15), Opcode::Unknown(0x15));
        assert_eq!(Opcode::from(0x40), Opcode::Unknown(0x40)); // RD is not decoded
        assert_eq!(Opcode::ALL.len(), 23 + 12 + 2 + 1 + 23);
        for &op in Opcode::ALL {
            assert!(op.name().is_some() && op.headers().is_some());
        }
    }

    #[test]
    fn opcode_headers() {
        let h = Opcode::RcRdmaWriteOnlyWithImmediate.headers().unwrap();
        assert!(h.reth && h.imm_dt && h.payload && !h.aeth);
        assert_eq!(h.len(), 20);
        assert_eq!(Opcode::RcAtomicAcknowledge.headers().unwrap().len(), 12);
        assert_eq!(Opcode::RcCompareSwap.headers().unwrap().len(), 28);
        assert_eq!(Opcode::UdSendOnlyWithImmediate.headers().unwrap().len(), 12);
        assert_eq!(Opcode::Cnp.headers().unwrap().len(), 16);
        assert!(!Opcode::RcRdmaReadRequest.headers().unwrap().payload);
        assert_eq!(Opcode::UdSendOnly.transport(), TransportService::Ud);
        assert_eq!(Opcode::Cnp.transport(), TransportService::Cnp);
    }

    #[test]
    fn positions() {
        assert_eq!(Opcode::RcSendFirst.position(), Some(MessagePosition::First));
        assert_eq!(
            Opcode::UcRdmaWriteMiddle.position(),
            Some(MessagePosition::Middle)
        );
        assert_eq!(
            Opcode::RcSendLastWithInvalidate.position(),
            Some(MessagePosition::Last)
        );
        assert_eq!(
            Opcode::RcAcknowledge.position(),
            Some(MessagePosition::Only)
        );
        assert_eq!(Opcode::Unknown(0x15).position(), None);
        // The names say the same as the table.
        for &op in Opcode::ALL {
            let name = op.name().unwrap();
            let pos = op.position().unwrap();
            assert_eq!(
                name.contains("First"),
                pos == MessagePosition::First,
                "{name}"
            );
            assert_eq!(
                name.contains("Middle"),
                pos == MessagePosition::Middle,
                "{name}"
            );
            assert_eq!(
                name.contains("Last"),
                pos == MessagePosition::Last,
                "{name}"
            );
            assert_eq!(
                op.is_response(),
                name.contains("Acknowledge") || name.contains("response"),
                "{name}"
            );
        }
    }

    #[test]
    fn psn_and_qpn_are_24_bit() {
        let r = BthRepr::new(Opcode::RcSendOnly, 0xFF12_3456, 0xFFFF_FFFF);
        assert_eq!((r.dest_qp, r.psn), (0x12_3456, 0xFF_FFFF));
        let mut buf = [0u8; 12];
        r.emit(&mut Bth::new_unchecked(&mut buf[..]));
        assert_eq!(buf[4], 0); // the 24-bit QPN did not spill into byte 4
    }

    #[test]
    fn errors() {
        assert_eq!(
            Bth::new_checked(&BYTES[..11]).unwrap_err(),
            Error::Truncated
        );
        let mut b = BYTES;
        b[1] |= 1; // TVer 1
        assert_eq!(
            BthRepr::parse(&Bth::new_unchecked(&b[..])).unwrap_err(),
            Error::Malformed
        );
    }
}
