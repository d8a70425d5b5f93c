//! Packet building and round-trip checks shared by the wire tests (`mock/tests/wire_fuzz.rs`),
//! the fuzz seeds (`tests/fuzz_seeds.rs`) and the fuzz targets (`fuzz/fuzz_targets/`), so
//! that each packet shape is built in one place. Included by path (`#[path = …] mod
//! packets;`) rather than exported from the mock: it is test code, written against the
//! mock's public wire API only.
#![allow(dead_code)] // each includer uses a part

use uhca_mock::wire::ib::GrhRepr;
use uhca_mock::wire::{
    AethSyndrome, BthRepr, EthernetRepr, IbPacketRepr, IbTransportRepr, IpRepr, LinkNextHeader,
    LrhRepr, Opcode, RoceV2Repr,
};

/// The field values an IB transport gets in each optional header its opcode carries.
pub struct HeaderValues {
    /// BTH: destination QP and PSN.
    pub dest_qp: u32,
    pub psn: u32,
    /// DETH: Q_Key and source QP.
    pub deth: (u32, u32),
    /// XRCETH: XRC SRQ number.
    pub xrc_srq: u32,
    /// RETH: virtual address, R_Key and DMA length.
    pub reth: (u64, u32, u32),
    /// AtomicETH: virtual address, R_Key, swap-or-add and compare data.
    pub atomic_eth: (u64, u32, u64, u64),
    /// AETH: syndrome and MSN.
    pub aeth: (AethSyndrome, u32),
    /// AtomicAckETH: original remote data.
    pub atomic_ack_eth: u64,
    /// ImmDt.
    pub imm_dt: u32,
    /// IETH: the R_Key to invalidate.
    pub ieth: u32,
}

/// A transport of opcode `op` with every header the opcode carries (and `payload`, if it
/// carries one), filled from `v`.
pub fn transport<'a>(op: Opcode, v: &HeaderValues, payload: &'a [u8]) -> IbTransportRepr<'a> {
    let h = op.headers().expect("a known opcode");
    let mut t = IbTransportRepr::new(
        BthRepr::new(op, v.dest_qp, v.psn),
        if h.payload { payload } else { &[] },
    );
    if h.deth {
        t = t.with_deth(v.deth.0, v.deth.1);
    }
    if h.xrceth {
        t = t.with_xrceth(v.xrc_srq);
    }
    if h.reth {
        t = t.with_reth(v.reth.0, v.reth.1, v.reth.2);
    }
    if h.atomic_eth {
        let (va, rkey, swap_or_add, compare) = v.atomic_eth;
        t = t.with_atomic_eth(va, rkey, swap_or_add, compare);
    }
    if h.aeth {
        t = t.with_aeth(v.aeth.0, v.aeth.1);
    }
    if h.atomic_ack_eth {
        t = t.with_atomic_ack_eth(v.atomic_ack_eth);
    }
    if h.imm_dt {
        t = t.with_imm_dt(v.imm_dt);
    }
    if h.ieth {
        t = t.with_ieth(v.ieth);
    }
    t
}

/// An LRH on VL 0, SL 0 (its packet length is filled in when emitted).
pub fn lrh(lnh: LinkNextHeader, dlid: u16, slid: u16) -> LrhRepr {
    LrhRepr {
        vl: 0,
        lver: 0,
        sl: 0,
        lnh,
        dlid,
        packet_length: 0,
        slid,
    }
}

/// A native IB packet, LRH to VCRC, as bytes.
pub fn ib_packet(lrh: LrhRepr, grh: Option<GrhRepr>, transport: IbTransportRepr<'_>) -> Vec<u8> {
    let p = IbPacketRepr {
        lrh,
        grh,
        transport,
    };
    let mut b = vec![0u8; p.buffer_len()];
    p.emit(&mut b).expect("an IB packet emits");
    b
}

/// An untagged Ethernet frame from `src` to `dst` carrying a RoCEv2 packet, as bytes.
pub fn roce_frame(
    dst: [u8; 6],
    src: [u8; 6],
    ip: IpRepr,
    udp_src_port: u16,
    transport: IbTransportRepr<'_>,
) -> Vec<u8> {
    let r = RoceV2Repr {
        eth: EthernetRepr {
            dst,
            src,
            vlan: None,
        },
        ip,
        udp_src_port,
        transport,
    };
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b).expect("a RoCEv2 frame emits");
    b
}

/// If `b` parses as a bare IB transport, or as a native IB packet, it emits again to bytes
/// that parse to the same representation.
pub fn assert_ib_reemits(b: &[u8]) {
    if let Ok(t) = IbTransportRepr::parse(b) {
        let mut out = vec![0u8; t.buffer_len()];
        t.emit(&mut out).expect("a parsed transport emits");
        assert_eq!(IbTransportRepr::parse(&out).unwrap(), t);
    }
    if let Ok(p) = IbPacketRepr::parse(b) {
        let mut out = vec![0u8; p.buffer_len()];
        p.emit(&mut out).expect("a parsed IB packet emits");
        assert_eq!(IbPacketRepr::parse(&out).unwrap(), p);
    }
}
