//! InfiniBand headers (IBTA Vol 1 chapters 7 to 9) and whole transport packets.
//!
//! * Link and network layer: [`Lrh`]/[`LrhRepr`], [`Grh`]/[`GrhRepr`].
//! * Transport layer: [`Bth`]/[`BthRepr`] with the [`Opcode`] table, and the extension
//!   headers RETH, AETH, AtomicETH, AtomicAckETH, DETH, ImmDt, IETH and XRC's XRCETH
//!   ([`ext`]).
//! * [`IbTransportRepr`]: the BTH, the extension headers the opcode calls for and the
//!   payload (pad removed) — the part shared by native IB and RoCEv2.
//! * [`IbPacketRepr`]: a whole native IB packet, LRH to VCRC.
//! * [`psn`]: 24-bit PSN arithmetic; [`ext::rnr_timer_micros`] and [`ext::credits_of`]: the
//!   AETH field encodings.
//!
//! ```
//! use uhca_mock::wire::{
//!     AethSyndrome, BthRepr, IbPacketRepr, IbTransportRepr, LinkNextHeader, LrhRepr, Opcode,
//! };
//!
//! // An RC ACK from LID 2 to LID 1: LRH, BTH, AETH, ICRC, VCRC.
//! let ack = IbTransportRepr::new(BthRepr::new(Opcode::RcAcknowledge, 0x11, 41), &[])
//!     .with_aeth(AethSyndrome::Ack { credit_count: 31 }, 7);
//! let lrh = LrhRepr {
//!     vl: 0, lver: 0, sl: 0, lnh: LinkNextHeader::IbaLocal, dlid: 1, packet_length: 0, slid: 2,
//! };
//! let packet = IbPacketRepr { lrh, grh: None, transport: ack };
//! let mut buf = [0u8; 64];
//! let len = packet.buffer_len(); // 8 + 12 + 4 + 4 + 2
//! packet.emit(&mut buf).unwrap(); // fills PktLen, PadCnt, ICRC and VCRC
//!
//! let parsed = IbPacketRepr::parse(&buf[..len]).unwrap(); // checks VCRC, ICRC, lengths
//! assert_eq!(parsed.transport.aeth.unwrap().msn, 7);
//! assert_eq!(parsed.lrh.packet_length, 7); // 28 bytes up to and including the ICRC
//! ```

pub(crate) mod bth;
pub mod ext;
pub(crate) mod grh;
pub(crate) mod lrh;
pub mod psn;

pub use bth::{BTH_LEN, Bth, BthRepr, ExtHeaders, MessagePosition, Opcode, TransportService};
pub use ext::{
    AETH_LEN, ATOMIC_ACK_ETH_LEN, ATOMIC_ETH_LEN, Aeth, AethRepr, AethSyndrome, AtomicAckEth,
    AtomicAckEthRepr, AtomicEth, AtomicEthRepr, DETH_LEN, Deth, DethRepr, IETH_LEN, IMM_DT_LEN,
    NakCode, RETH_LEN, Reth, RethRepr, XRCETH_LEN, Xrceth, XrcethRepr,
};
pub use grh::{GRH_IP_VERSION, GRH_LEN, GRH_NEXT_HEADER_IBA, Grh, GrhRepr};
pub use lrh::{LRH_LEN, LinkNextHeader, Lrh, LrhRepr};

use crate::wire::icrc::{ICRC_LEN, VCRC_LEN, ib_icrc, vcrc};
use crate::wire::predict::KeptHeaders;
use crate::wire::{Error, Result, be};

/// The IB transport part of a packet: BTH, extension headers and payload.
///
/// On the wire it runs from the BTH to the last pad byte; the ICRC that follows is handled by
/// the enclosing [`IbPacketRepr`] or [`RoceV2Repr`](crate::wire::RoceV2Repr).
///
/// Each `Option` must be `Some` exactly when [`Opcode::headers`] calls for that header; a
/// payload is allowed only when it says `payload`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IbTransportRepr<'a> {
    /// The BTH. `bth.pad_count` is filled in by [`emit`](Self::emit) from the payload length.
    pub bth: BthRepr,
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// XRCETH (XRC requests).
    pub xrceth: Option<XrcethRepr>,
    /// RETH (RDMA WRITE First/Only, RDMA READ Request).
    pub reth: Option<RethRepr>,
    /// AtomicETH (CmpSwap, FetchAdd).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH (Acknowledge, ATOMIC Acknowledge, RDMA READ response First/Last/Only).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH (ATOMIC Acknowledge).
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// ImmDt, as the 32-bit big-endian value on the wire.
    pub imm_dt: Option<u32>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
    /// The payload, without the pad bytes.
    pub payload: &'a [u8],
}

impl<'a> IbTransportRepr<'a> {
    /// A transport packet with no extension headers; add them with the `with_*` methods.
    pub const fn new(bth: BthRepr, payload: &'a [u8]) -> Self {
        IbTransportRepr {
            bth,
            deth: None,
            xrceth: None,
            reth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack_eth: None,
            imm_dt: None,
            ieth: None,
            payload,
        }
    }

    /// A RoCEv2 congestion notification packet (IBTA Annex A17): opcode 0x81, BECN set,
    /// P_Key 0xFFFF, PSN 0, 16 reserved bytes, to `dest_qp`.
    pub const fn cnp(dest_qp: u32) -> Self {
        let mut bth = BthRepr::new(Opcode::Cnp, dest_qp, 0);
        bth.becn = true;
        IbTransportRepr::new(bth, &[])
    }

    /// With a DETH.
    pub const fn with_deth(mut self, qkey: u32, src_qp: u32) -> Self {
        self.deth = Some(DethRepr {
            qkey,
            src_qp: src_qp & 0x00FF_FFFF,
        });
        self
    }
    /// With an XRCETH naming XRC SRQ `xrc_srq`.
    pub const fn with_xrceth(mut self, xrc_srq: u32) -> Self {
        self.xrceth = Some(XrcethRepr {
            xrc_srq: xrc_srq & 0x00FF_FFFF,
        });
        self
    }
    /// With a RETH.
    pub const fn with_reth(mut self, va: u64, rkey: u32, dma_len: u32) -> Self {
        self.reth = Some(RethRepr { va, rkey, dma_len });
        self
    }
    /// With an AtomicETH.
    pub const fn with_atomic_eth(
        mut self,
        va: u64,
        rkey: u32,
        swap_or_add: u64,
        compare: u64,
    ) -> Self {
        self.atomic_eth = Some(AtomicEthRepr {
            va,
            rkey,
            swap_or_add,
            compare,
        });
        self
    }
    /// With an AETH.
    pub const fn with_aeth(mut self, syndrome: AethSyndrome, msn: u32) -> Self {
        self.aeth = Some(AethRepr {
            syndrome,
            msn: msn & 0x00FF_FFFF,
        });
        self
    }
    /// With an AtomicAckETH.
    pub const fn with_atomic_ack_eth(mut self, orig_rem_dt: u64) -> Self {
        self.atomic_ack_eth = Some(AtomicAckEthRepr { orig_rem_dt });
        self
    }
    /// With an ImmDt.
    pub const fn with_imm_dt(mut self, imm: u32) -> Self {
        self.imm_dt = Some(imm);
        self
    }
    /// With an IETH.
    pub const fn with_ieth(mut self, rkey: u32) -> Self {
        self.ieth = Some(rkey);
        self
    }

    /// The pad count the payload needs to end on a 4-byte boundary.
    pub const fn pad_count(&self) -> u8 {
        ((4 - self.payload.len() % 4) % 4) as u8
    }

    /// The length of the BTH and extension headers.
    pub fn header_len(&self) -> usize {
        BTH_LEN + self.present().len()
    }

    /// The length on the wire, BTH to last pad byte (ICRC excluded).
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len() + usize::from(self.pad_count())
    }

    /// The headers this value carries (`payload` is set if the payload is not empty;
    /// `cnp_reserved` follows the opcode).
    fn present(&self) -> ExtHeaders {
        ExtHeaders {
            deth: self.deth.is_some(),
            xrceth: self.xrceth.is_some(),
            reth: self.reth.is_some(),
            atomic_eth: self.atomic_eth.is_some(),
            aeth: self.aeth.is_some(),
            atomic_ack_eth: self.atomic_ack_eth.is_some(),
            imm_dt: self.imm_dt.is_some(),
            ieth: self.ieth.is_some(),
            cnp_reserved: self.bth.opcode == Opcode::Cnp,
            payload: !self.payload.is_empty(),
        }
    }

    /// Parse from the BTH to the last pad byte (ICRC excluded).
    ///
    /// Errors: `Truncated` if a header does not fit; `Malformed` if TVer is not 0, the length
    /// is not a multiple of 4, the pad count exceeds the payload, or an opcode without payload
    /// carries one; `Unsupported` for an opcode not in [`Opcode`]'s table.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let bth = BthRepr::parse(&Bth::new_checked(bytes)?)?;
        let want = bth.opcode.headers().ok_or(Error::Unsupported)?;
        if !bytes.len().is_multiple_of(4) {
            return Err(Error::Malformed);
        }
        let mut r = IbTransportRepr::new(bth, &[]);
        let mut at = BTH_LEN;
        let mut take = |n: usize| -> Result<&'a [u8]> {
            let s = bytes.get(at..at + n).ok_or(Error::Truncated)?;
            at += n;
            Ok(s)
        };
        if want.deth {
            r.deth = Some(DethRepr::parse(&Deth::new_checked(take(DETH_LEN)?)?)?);
        }
        if want.xrceth {
            r.xrceth = Some(XrcethRepr::parse(&Xrceth::new_checked(take(XRCETH_LEN)?)?)?);
        }
        if want.reth {
            r.reth = Some(RethRepr::parse(&Reth::new_checked(take(RETH_LEN)?)?)?);
        }
        if want.atomic_eth {
            r.atomic_eth = Some(AtomicEthRepr::parse(&AtomicEth::new_checked(take(
                ATOMIC_ETH_LEN,
            )?)?)?);
        }
        if want.aeth {
            r.aeth = Some(AethRepr::parse(&Aeth::new_checked(take(AETH_LEN)?)?)?);
        }
        if want.atomic_ack_eth {
            r.atomic_ack_eth = Some(AtomicAckEthRepr::parse(&AtomicAckEth::new_checked(take(
                ATOMIC_ACK_ETH_LEN,
            )?)?)?);
        }
        if want.imm_dt {
            r.imm_dt = Some(be::u32(take(IMM_DT_LEN)?, 0));
        }
        if want.ieth {
            r.ieth = Some(be::u32(take(IETH_LEN)?, 0));
        }
        if want.cnp_reserved {
            take(16)?;
        }
        let rest = &bytes[at..];
        let pad = usize::from(bth.pad_count);
        if !want.payload && (!rest.is_empty() || pad != 0) {
            return Err(Error::Malformed);
        }
        if pad > rest.len() {
            return Err(Error::Malformed);
        }
        r.payload = &rest[..rest.len() - pad];
        Ok(r)
    }

    /// Write from the BTH to the last pad byte into the first [`buffer_len`](Self::buffer_len)
    /// bytes of `buf`. BTH:PadCnt is computed from the payload length; pad bytes are zero.
    ///
    /// Errors: `Truncated` if `buf` is too short; `Unsupported` for an unknown opcode;
    /// `Malformed` if the extension headers or payload do not match the opcode.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let want = self.bth.opcode.headers().ok_or(Error::Unsupported)?;
        let have = self.present();
        let same_headers = ExtHeaders {
            payload: want.payload,
            ..have
        } == want;
        if !same_headers || (have.payload && !want.payload) {
            return Err(Error::Malformed);
        }
        let len = self.buffer_len();
        if buf.len() < len {
            return Err(Error::Truncated);
        }
        let buf = &mut buf[..len];
        let bth = BthRepr {
            pad_count: self.pad_count(),
            ..self.bth
        };
        bth.emit(&mut Bth::new_unchecked(&mut buf[..BTH_LEN]));
        let mut at = BTH_LEN;
        let mut next = |n: usize| {
            let r = at..at + n;
            at += n;
            r
        };
        if let Some(h) = &self.deth {
            h.emit(&mut Deth::new_unchecked(&mut buf[next(DETH_LEN)]));
        }
        if let Some(h) = &self.xrceth {
            h.emit(&mut Xrceth::new_unchecked(&mut buf[next(XRCETH_LEN)]));
        }
        if let Some(h) = &self.reth {
            h.emit(&mut Reth::new_unchecked(&mut buf[next(RETH_LEN)]));
        }
        if let Some(h) = &self.atomic_eth {
            h.emit(&mut AtomicEth::new_unchecked(
                &mut buf[next(ATOMIC_ETH_LEN)],
            ));
        }
        if let Some(h) = &self.aeth {
            h.emit(&mut Aeth::new_unchecked(&mut buf[next(AETH_LEN)]));
        }
        if let Some(h) = &self.atomic_ack_eth {
            h.emit(&mut AtomicAckEth::new_unchecked(
                &mut buf[next(ATOMIC_ACK_ETH_LEN)],
            ));
        }
        if let Some(v) = self.imm_dt {
            buf[next(IMM_DT_LEN)].copy_from_slice(&v.to_be_bytes());
        }
        if let Some(v) = self.ieth {
            buf[next(IETH_LEN)].copy_from_slice(&v.to_be_bytes());
        }
        if want.cnp_reserved {
            buf[next(16)].fill(0);
        }
        let p = next(self.payload.len());
        // A payload already written at its place in `buf` is left as it is.
        if !core::ptr::eq(self.payload.as_ptr(), PAYLOAD_IN_PLACE.as_ptr()) {
            buf[p].copy_from_slice(self.payload);
        }
        let pad = next(usize::from(self.pad_count()));
        buf[pad].fill(0);
        Ok(())
    }
}

/// The payload of a transport whose bytes are already at their place in the buffer it is
/// emitted into: `&PAYLOAD_IN_PLACE[..n]` as [`IbTransportRepr::payload`] gives the
/// length, `n`, and [`IbTransportRepr::emit`] (and the emitters of whole packets and
/// frames, which call it) writes everything around those `n` bytes, and computes the ICRC
/// and VCRC over them, without copying them. The mock's engine reads a packet's payload
/// from memory straight into its frame this way.
pub(crate) static PAYLOAD_IN_PLACE: [u8; 4096] = [0; 4096];

/// A whole native InfiniBand packet: LRH, optional GRH, transport, ICRC and VCRC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IbPacketRepr<'a> {
    /// The LRH. `lnh` and `packet_length` are filled in by [`emit`](Self::emit).
    pub lrh: LrhRepr,
    /// The GRH, for a global packet. `payload_length` and `next_header` (0x1B) are filled in
    /// by [`emit`](Self::emit).
    pub grh: Option<GrhRepr>,
    /// BTH onward.
    pub transport: IbTransportRepr<'a>,
}

impl<'a> IbPacketRepr<'a> {
    /// The length on the wire, LRH through VCRC.
    pub fn buffer_len(&self) -> usize {
        LRH_LEN
            + self.grh.map_or(0, |_| GRH_LEN)
            + self.transport.buffer_len()
            + ICRC_LEN
            + VCRC_LEN
    }

    /// Parse a whole packet, checking lengths, the VCRC and the ICRC.
    ///
    /// `bytes` must be exactly the packet, LRH through VCRC.
    ///
    /// Errors: `Truncated` if `bytes` is shorter than LRH:PktLen says (plus the VCRC);
    /// `Malformed` for extra bytes, a bad LVer/IPVer/TVer, a GRH:PayLen that disagrees with
    /// LRH:PktLen, or any transport error; `Unsupported` for a raw packet, a GRH whose
    /// NxtHdr is not 0x1B or an unknown opcode; `BadVcrc`, `BadIcrc`.
    pub fn parse(bytes: &'a [u8]) -> Result<Self> {
        let lrh_view = Lrh::new_checked(bytes)?;
        let mut lrh = LrhRepr::parse(&lrh_view)?;
        let global = match lrh.lnh {
            LinkNextHeader::IbaLocal => false,
            LinkNextHeader::IbaGlobal => true,
            LinkNextHeader::Raw | LinkNextHeader::IpNonIba => return Err(Error::Unsupported),
        };
        let pkt = usize::from(lrh.packet_length) * 4;
        let hdr = LRH_LEN + if global { GRH_LEN } else { 0 };
        if pkt < hdr + BTH_LEN + ICRC_LEN {
            return Err(Error::Malformed);
        }
        if bytes.len() < pkt + VCRC_LEN {
            return Err(Error::Truncated);
        }
        if bytes.len() > pkt + VCRC_LEN {
            return Err(Error::Malformed);
        }
        let stored_vcrc = u16::from_le_bytes([bytes[pkt], bytes[pkt + 1]]);
        if vcrc(&bytes[..pkt]) != stored_vcrc {
            return Err(Error::BadVcrc);
        }
        let grh = if global {
            let g = GrhRepr::parse(&Grh::new_checked(&bytes[LRH_LEN..])?)?;
            if g.next_header != GRH_NEXT_HEADER_IBA {
                return Err(Error::Unsupported);
            }
            if usize::from(g.payload_length) != pkt - hdr {
                return Err(Error::Malformed);
            }
            Some(g)
        } else {
            None
        };
        let end = pkt - ICRC_LEN;
        let stored_icrc =
            u32::from_le_bytes([bytes[end], bytes[end + 1], bytes[end + 2], bytes[end + 3]]);
        if ib_icrc(&bytes[..end])? != stored_icrc {
            return Err(Error::BadIcrc);
        }
        let transport = IbTransportRepr::parse(&bytes[hdr..end])?;
        lrh.packet_length = (pkt / 4) as u16;
        Ok(IbPacketRepr {
            lrh,
            grh,
            transport,
        })
    }

    /// Write the whole packet into the first [`buffer_len`](Self::buffer_len) bytes of `buf`,
    /// filling in LRH:LNH and PktLen, GRH:PayLen and NxtHdr, BTH:PadCnt, the ICRC and the VCRC.
    ///
    /// Errors: `Truncated` if `buf` is too short; `Malformed` if the packet is longer than
    /// PktLen can say (8188 bytes) or the transport does not match its opcode;
    /// `Unsupported` for an unknown opcode.
    pub fn emit(&self, buf: &mut [u8]) -> Result<()> {
        let len = self.buffer_len();
        let pkt = len - VCRC_LEN;
        if pkt / 4 > 0x07FF {
            return Err(Error::Malformed);
        }
        if buf.len() < len {
            return Err(Error::Truncated);
        }
        let buf = &mut buf[..len];
        let lrh = LrhRepr {
            lnh: if self.grh.is_some() {
                LinkNextHeader::IbaGlobal
            } else {
                LinkNextHeader::IbaLocal
            },
            packet_length: (pkt / 4) as u16,
            ..self.lrh
        };
        lrh.emit(&mut Lrh::new_unchecked(&mut buf[..LRH_LEN]));
        let mut at = LRH_LEN;
        if let Some(g) = &self.grh {
            let g = GrhRepr {
                payload_length: (pkt - LRH_LEN - GRH_LEN) as u16,
                next_header: GRH_NEXT_HEADER_IBA,
                ..*g
            };
            g.emit(&mut Grh::new_unchecked(&mut buf[at..at + GRH_LEN]));
            at += GRH_LEN;
        }
        let end = pkt - ICRC_LEN;
        self.transport.emit(&mut buf[at..end])?;
        let icrc = ib_icrc(&buf[..end])?;
        buf[end..pkt].copy_from_slice(&icrc.to_le_bytes());
        let v = vcrc(&buf[..pkt]);
        buf[pkt..].copy_from_slice(&v.to_le_bytes());
        Ok(())
    }
}

/// Header prediction for received native InfiniBand packets: what [`IbPacketRepr::parse`]
/// found in one packet, kept to parse the next packets whose bytes before the payload are
/// the same but for BTH:PSN, and whose length is the same (the middle packets of one
/// message, or SENDs of one size on one QP). Every check the parser makes (LRH and GRH
/// fields and lengths, BTH and extension headers, pad) depends only on those bytes and that
/// length, so such a packet passes them all and parses to the same values with its own PSN
/// and payload; its VCRC and ICRC, which cover the payload, are computed again and checked
/// in the parser's order. The RoCEv2 form is [`crate::wire::roce::RxPrediction`].
#[derive(Clone, Debug)]
pub struct RxPrediction {
    kept: KeptHeaders,
    repr: IbPacketRepr<'static>,
}

impl RxPrediction {
    /// The prediction `packet`, which parsed to `r`, gives; `None` if its headers are
    /// longer than kept.
    pub fn of(packet: &[u8], r: &IbPacketRepr<'_>) -> Option<Self> {
        let bth_at = LRH_LEN + r.grh.map_or(0, |_| GRH_LEN);
        let kept = KeptHeaders::of(packet, bth_at + r.transport.header_len(), bth_at)?;
        Some(RxPrediction {
            kept,
            repr: IbPacketRepr {
                transport: IbTransportRepr {
                    payload: &[],
                    ..r.transport
                },
                ..*r
            },
        })
    }

    /// Parses `packet` as predicted: `None` if its length or a header byte other than
    /// BTH:PSN differs (parse it with [`IbPacketRepr::parse`]); else what that parse would
    /// return: the predicted values with the packet's PSN and payload, or `BadVcrc`,
    /// `BadIcrc`.
    #[inline]
    pub fn parse<'a>(&self, packet: &'a [u8]) -> Option<Result<IbPacketRepr<'a>>> {
        let psn = self.kept.repeated_by(packet)?;
        let pkt = packet.len() - VCRC_LEN;
        if vcrc(&packet[..pkt]) != u16::from_le_bytes([packet[pkt], packet[pkt + 1]]) {
            return Some(Err(Error::BadVcrc));
        }
        let end = pkt - ICRC_LEN;
        let stored = u32::from_le_bytes([
            packet[end],
            packet[end + 1],
            packet[end + 2],
            packet[end + 3],
        ]);
        match ib_icrc(&packet[..end]) {
            Ok(c) if c == stored => {}
            Ok(_) => return Some(Err(Error::BadIcrc)),
            Err(e) => return Some(Err(e)),
        }
        let pad = usize::from(self.repr.transport.bth.pad_count);
        let mut r = IbPacketRepr {
            transport: IbTransportRepr {
                payload: &packet[self.kept.header_len()..end - pad],
                ..self.repr.transport
            },
            ..self.repr
        };
        r.transport.bth.psn = psn;
        Some(Ok(r))
    }

    /// Parses `packet` as `kept` predicts it, else in full; a packet with data parsed in
    /// full is kept to predict the next (see [`crate::wire::roce::RxPrediction::parse_keeping`]).
    pub fn parse_keeping<'a>(
        kept: &mut Option<RxPrediction>,
        packet: &'a [u8],
    ) -> Result<IbPacketRepr<'a>> {
        if let Some(r) = kept.as_ref().and_then(|p| p.parse(packet)) {
            return r;
        }
        let r = IbPacketRepr::parse(packet)?;
        if !r.transport.payload.is_empty() {
            *kept = RxPrediction::of(packet, &r);
        }
        Ok(r)
    }
}

/// Re-seals a native InfiniBand packet (LRH to VCRC) whose headers were copied from
/// another packet of the same length that differs only in BTH:PSN and payload, as the
/// middle packets of one message do: sets BTH:PSN to `psn` (24 bits) and computes the ICRC
/// and the VCRC again over the packet as it now is. Every other byte stays as it was.
///
/// Errors: `Truncated` if the headers, ICRC and VCRC do not fit; `Unsupported` for a raw or
/// IP non-IBA packet (LNH 0b00, 0b01), which has no BTH.
pub fn reseal_packet(packet: &mut [u8], psn: u32) -> Result<()> {
    let bth_at = match LinkNextHeader::from(*packet.get(1).ok_or(Error::Truncated)?) {
        LinkNextHeader::IbaLocal => LRH_LEN,
        LinkNextHeader::IbaGlobal => LRH_LEN + GRH_LEN,
        LinkNextHeader::Raw | LinkNextHeader::IpNonIba => return Err(Error::Unsupported),
    };
    let pkt = packet.len().checked_sub(VCRC_LEN).ok_or(Error::Truncated)?;
    let end = pkt.checked_sub(ICRC_LEN).ok_or(Error::Truncated)?;
    if end < bth_at + BTH_LEN {
        return Err(Error::Truncated);
    }
    Bth::new_unchecked(&mut packet[bth_at..bth_at + BTH_LEN]).set_psn(psn);
    let icrc = ib_icrc(&packet[..end])?;
    packet[end..pkt].copy_from_slice(&icrc.to_le_bytes());
    let v = vcrc(&packet[..pkt]);
    packet[pkt..].copy_from_slice(&v.to_le_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(psn: u32, opcode: Opcode, payload: &[u8], grh: bool) -> Vec<u8> {
        let mut t = IbTransportRepr::new(BthRepr::new(opcode, 0x11, psn), payload);
        t.bth.pkey = 0xffff;
        let r = IbPacketRepr {
            lrh: LrhRepr {
                vl: 0,
                lver: 0,
                sl: 0,
                lnh: LinkNextHeader::IbaLocal,
                dlid: 2,
                packet_length: 0,
                slid: 1,
            },
            grh: grh.then(|| GrhRepr::new([7; 16], [8; 16])),
            transport: t,
        };
        let mut p = vec![0u8; r.buffer_len()];
        r.emit(&mut p).unwrap();
        p
    }

    /// As `roce::tests::a_predicted_parse_is_the_full_parse`, for native InfiniBand with and
    /// without a GRH: the VCRC is checked before the ICRC, as the full parser does.
    #[test]
    fn a_predicted_parse_is_the_full_parse() {
        for grh in [false, true] {
            let a: Vec<u8> = (0..256).map(|i| (i * 3) as u8).collect();
            let b: Vec<u8> = (0..256).map(|i| (i * 5 + 1) as u8).collect();
            let first = packet(0x00ff_fffe, Opcode::RcSendMiddle, &a, grh);
            let p =
                RxPrediction::of(&first, &IbPacketRepr::parse(&first).unwrap()).expect("predicted");
            let next = packet(0x00ff_ffff, Opcode::RcSendMiddle, &b, grh);
            let wrapped = packet(0, Opcode::RcSendMiddle, &b, grh);
            for f in [&first, &next, &wrapped] {
                assert_eq!(
                    p.parse(f).expect("predicted").unwrap(),
                    IbPacketRepr::parse(f).unwrap(),
                    "grh {grh}"
                );
            }
            assert!(p.parse(&packet(1, Opcode::RcSendLast, &b, grh)).is_none());
            assert!(
                p.parse(&packet(1, Opcode::RcSendMiddle, &b[..252], grh))
                    .is_none()
            );
            let psn_at = p.kept.psn_at();
            assert_eq!(psn_at, LRH_LEN + if grh { GRH_LEN } else { 0 } + 9);
            for at in (0..p.kept.header_len()).filter(|i| !(psn_at..psn_at + 3).contains(i)) {
                let mut f = next.clone();
                f[at] ^= 0x01;
                assert!(p.parse(&f).is_none(), "byte {at} changed, grh {grh}");
            }
            // A payload byte changed: the VCRC fails first, in both parsers.
            let mut f = next.clone();
            f[p.kept.header_len() + 7] ^= 0x80;
            assert_eq!(p.parse(&f).unwrap().unwrap_err(), Error::BadVcrc);
            assert_eq!(IbPacketRepr::parse(&f).unwrap_err(), Error::BadVcrc);
            // The payload and the VCRC changed to match: the ICRC fails, in both.
            let n = f.len() - VCRC_LEN;
            let v = vcrc(&f[..n]);
            f[n..].copy_from_slice(&v.to_le_bytes());
            assert_eq!(p.parse(&f).unwrap().unwrap_err(), Error::BadIcrc);
            assert_eq!(IbPacketRepr::parse(&f).unwrap_err(), Error::BadIcrc);
        }
    }
}
