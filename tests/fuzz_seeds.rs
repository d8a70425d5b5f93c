//! The seed corpora of the fuzz targets (`fuzz/seeds/<target>/`): a few valid inputs per
//! target, built here from the real formats (packets the wire module emits, captures the
//! pcap writer writes, the three out-of-band messages as the examples send them, CQEs and EQEs
//! laid out by the fwif structures, every firmware command's input, a vfio-user session, the
//! CM's MADs).
//!
//! This test fails when a seed file in the repository differs from what it generates (a
//! format changed and the seeds were not regenerated); `UHCA_WRITE_SEEDS=1 cargo test
//! --test fuzz_seeds` writes them. Other files in the seed directories (crashing inputs
//! the fuzzers found, kept as regression seeds) are left alone.

use std::collections::BTreeMap;
use std::path::PathBuf;

use uhca::driver::addr::Gid;
use uhca::fwif::cmd::COMMANDS;
use uhca::fwif::consts::{CqeOpcode, CqeSyndrome, EventType};
use uhca::fwif::cqe::{Cqe64, ErrCqe, op_own_of};
use uhca::fwif::eqe::Eqe;
use uhca::fwif::zerocopy::{FromZeros, IntoBytes};
use uhca::mock::wire::ib::{Aeth, AtomicAckEth, AtomicEth, Bth, Deth, Grh, Lrh, Reth, Xrceth};
use uhca::mock::wire::ib::{
    AethRepr, AtomicAckEthRepr, AtomicEthRepr, DethRepr, GrhRepr, LrhRepr, RethRepr, XrcethRepr,
};
use uhca::mock::wire::pcap::{LinkType, PcapWriter};
use uhca::mock::wire::{
    AethSyndrome, BthRepr, EtherType, EthernetRepr, IbTransportRepr, IpProtocol, IpRepr, Ipv4Repr,
    Ipv6Repr, LinkNextHeader, Opcode, UdpRepr, VlanTag,
};
use uhca::oob::{Dest, RdmaDest};

#[path = "../mock/tests/support/packets.rs"]
mod packets;
use packets::HeaderValues;

type Seeds = BTreeMap<(&'static str, String), Vec<u8>>;

fn with(first: u8, rest: &[u8]) -> Vec<u8> {
    let mut v = vec![first];
    v.extend_from_slice(rest);
    v
}

fn lrh(lnh: LinkNextHeader) -> LrhRepr {
    packets::lrh(lnh, 0x11, 0x22)
}

/// The MAC addresses of the seeds' RoCEv2 frames: to, from.
const DST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
const SRC_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];

/// An untagged RoCEv2 frame from `SRC_MAC` to `DST_MAC`, UDP source port 49152.
fn roce_frame(ip: IpRepr, t: IbTransportRepr<'_>) -> Vec<u8> {
    packets::roce_frame(DST_MAC, SRC_MAC, ip, 49152, t)
}

/// A transport of each header combination, from a few opcodes.
fn transports(payload: &[u8]) -> Vec<IbTransportRepr<'_>> {
    let values = HeaderValues {
        dest_qp: 0x12,
        psn: 0x34,
        deth: (0x1111_1111, 0x13),
        xrc_srq: 0x55,
        reth: (0x1000, 0x55, 64),
        atomic_eth: (0x2000, 0x66, 5, 7),
        aeth: (AethSyndrome::Ack { credit_count: 31 }, 9),
        atomic_ack_eth: 42,
        imm_dt: 0xabcd,
        ieth: 0x77,
    };
    [
        Opcode::RcSendOnly,
        Opcode::RcSendFirst,
        Opcode::RcRdmaWriteOnlyWithImmediate,
        Opcode::RcRdmaReadRequest,
        Opcode::RcRdmaReadResponseOnly,
        Opcode::RcAcknowledge,
        Opcode::RcCompareSwap,
        Opcode::RcAtomicAcknowledge,
        Opcode::RcSendOnlyWithInvalidate,
        Opcode::UdSendOnlyWithImmediate,
        Opcode::UcRdmaWriteFirst,
        Opcode::XrcSendOnly,
        Opcode::XrcRdmaWriteFirst,
    ]
    .into_iter()
    .map(|op| packets::transport(op, &values, payload))
    .collect()
}

fn wire(s: &mut Seeds) {
    // wire_headers: selector, then one header as its representation emits it.
    macro_rules! header {
        ($sel:expr, $name:expr, $view:ident, $repr:expr) => {{
            let r = $repr;
            let mut b = vec![0u8; r.buffer_len()];
            r.emit(&mut $view::new_unchecked(&mut b[..]));
            s.insert(("wire_headers", $name.into()), with($sel, &b));
        }};
    }
    header!(0, "lrh", Lrh, lrh(LinkNextHeader::IbaLocal));
    let grh = GrhRepr {
        traffic_class: 0,
        flow_label: 0x12345,
        payload_length: 20,
        next_header: 0x1b,
        hop_limit: 64,
        sgid: [0xfe; 16],
        dgid: [0x80; 16],
    };
    header!(1, "grh", Grh, grh);
    header!(2, "bth", Bth, BthRepr::new(Opcode::RcSendOnly, 0x12, 0x34));
    header!(
        3,
        "reth",
        Reth,
        RethRepr {
            va: 0x1000,
            rkey: 0x55,
            dma_len: 64
        }
    );
    header!(
        4,
        "aeth",
        Aeth,
        AethRepr {
            syndrome: AethSyndrome::Ack { credit_count: 31 },
            msn: 9
        }
    );
    header!(
        5,
        "atomic_eth",
        AtomicEth,
        AtomicEthRepr {
            va: 0x2000,
            rkey: 0x66,
            swap_or_add: 5,
            compare: 7
        }
    );
    header!(
        6,
        "atomic_ack_eth",
        AtomicAckEth,
        AtomicAckEthRepr { orig_rem_dt: 42 }
    );
    header!(
        7,
        "deth",
        Deth,
        DethRepr {
            qkey: 0x1111_1111,
            src_qp: 0x13
        }
    );
    let mut eth = [0u8; 18];
    EthernetRepr {
        dst: DST_MAC,
        src: SRC_MAC,
        vlan: Some(VlanTag {
            pcp: 3,
            dei: false,
            vid: 7,
        }),
    }
    .emit(&mut eth, EtherType::Ipv4)
    .unwrap();
    s.insert(("wire_headers", "ethernet_vlan".into()), with(8, &eth));
    let mut ip4 = Ipv4Repr::new([10, 0, 0, 1], [10, 0, 0, 2]);
    ip4.protocol = IpProtocol::Udp;
    ip4.payload_len = 12;
    let mut b = vec![0u8; 20 + 12];
    ip4.emit(&mut b).unwrap();
    s.insert(("wire_headers", "ipv4".into()), with(9, &b));
    let mut ip6 = Ipv6Repr::new([1; 16], [2; 16]);
    ip6.next_header = IpProtocol::Udp;
    ip6.payload_len = 12;
    let mut b = vec![0u8; 40 + 12];
    ip6.emit(&mut b).unwrap();
    s.insert(("wire_headers", "ipv6".into()), with(10, &b));
    let mut b = vec![0u8; 8 + 4];
    UdpRepr {
        src_port: 49152,
        dst_port: 4791,
    }
    .emit(&mut b, 4)
    .unwrap();
    s.insert(("wire_headers", "udp".into()), with(12, &b));
    header!(11, "xrceth", Xrceth, XrcethRepr { xrc_srq: 0x12_3456 });

    // wire_packets: mode 0 (bytes as they are), then a whole packet.
    let payload = b"0123456789abcdefXYZ";
    for (i, t) in transports(payload).into_iter().enumerate() {
        let b = packets::ib_packet(lrh(LinkNextHeader::IbaLocal), None, t);
        s.insert(("wire_packets", format!("ib_{i:02}")), with(0, &b));
        let ip = if i % 2 == 0 {
            IpRepr::Ipv4(Ipv4Repr::new([10, 0, 0, 1], [10, 0, 0, 2]))
        } else {
            IpRepr::Ipv6(Ipv6Repr::new([1; 16], [2; 16]))
        };
        let b = roce_frame(ip, t);
        s.insert(("wire_packets", format!("roce_{i:02}")), with(0, &b));
    }
    let b = packets::ib_packet(
        lrh(LinkNextHeader::IbaGlobal),
        Some(grh),
        transports(payload)[0],
    );
    s.insert(("wire_packets", "ib_global".into()), with(0, &b));
}

fn pcap(s: &mut Seeds) {
    let payload = b"captured";
    let ts = transports(payload);
    let mut w = PcapWriter::new(Vec::new(), LinkType::Ethernet).unwrap();
    for (i, t) in ts.iter().take(3).enumerate() {
        let b = roce_frame(
            IpRepr::Ipv4(Ipv4Repr::new([10, 0, 0, 1], [10, 0, 0, 2])),
            *t,
        );
        w.write_packet(1_000 * i as u64, &b).unwrap();
    }
    s.insert(("pcap", "roce.pcap".into()), w.into_inner());
    let mut w = PcapWriter::new(Vec::new(), LinkType::User0).unwrap();
    for t in ts.iter().skip(3).take(3) {
        let b = packets::ib_packet(lrh(LinkNextHeader::IbaLocal), None, *t);
        w.write_packet(5, &b).unwrap();
    }
    s.insert(("pcap", "ib.pcap".into()), w.into_inner());

    // pcapng, little-endian, laid out from the pcapng specification: a Section Header
    // Block, an Interface Description Block (Ethernet, if_tsresol 9), an Enhanced Packet
    // Block and a Simple Packet Block with one RoCEv2 frame each.
    let frame = roce_frame(
        IpRepr::Ipv4(Ipv4Repr::new([10, 0, 0, 1], [10, 0, 0, 2])),
        ts[0],
    );
    fn block(out: &mut Vec<u8>, ty: u32, body: &[u8]) {
        let padded = body.len().next_multiple_of(4);
        let len = (12 + padded) as u32;
        out.extend_from_slice(&ty.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(body);
        out.resize(out.len() + padded - body.len(), 0);
        out.extend_from_slice(&len.to_le_bytes());
    }
    let mut ng = Vec::new();
    let mut shb = Vec::new();
    shb.extend_from_slice(&0x1A2B_3C4Du32.to_le_bytes());
    shb.extend_from_slice(&1u16.to_le_bytes());
    shb.extend_from_slice(&0u16.to_le_bytes());
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    block(&mut ng, 0x0A0D_0D0A, &shb);
    let mut idb = Vec::new();
    idb.extend_from_slice(&1u16.to_le_bytes());
    idb.extend_from_slice(&0u16.to_le_bytes());
    idb.extend_from_slice(&65535u32.to_le_bytes());
    // if_tsresol (option 9, length 1): nanoseconds; then opt_endofopt.
    idb.extend_from_slice(&[9, 0, 1, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
    block(&mut ng, 1, &idb);
    let mut epb = Vec::new();
    epb.extend_from_slice(&0u32.to_le_bytes());
    epb.extend_from_slice(&0u32.to_le_bytes());
    epb.extend_from_slice(&1000u32.to_le_bytes());
    epb.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    epb.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    epb.extend_from_slice(&frame);
    block(&mut ng, 6, &epb);
    let mut spb = Vec::new();
    spb.extend_from_slice(&(frame.len() as u32).to_le_bytes());
    spb.extend_from_slice(&frame);
    block(&mut ng, 3, &spb);
    s.insert(("pcap", "roce.pcapng".into()), ng);
}

fn oob(s: &mut Seeds) {
    let dest = Dest {
        lid: 0x1,
        qpn: 0x12,
        psn: 0xab_cdef,
        gid: Gid::from_ipv4([10, 0, 0, 1]),
    };
    s.insert(("oob_pingpong", "roce".into()), dest.to_wire().to_vec());
    let ib = Dest {
        lid: 0x17,
        qpn: 0xff_ffff,
        psn: 0,
        gid: Gid([0; 16]),
    };
    s.insert(("oob_pingpong", "ib".into()), ib.to_wire().to_vec());
    let rd = RdmaDest {
        dest,
        rkey: 0x1234_5678,
        addr: 0x7f00_1234_5000,
        len: 0x10000,
    };
    s.insert(("oob_rdma", "dest".into()), with(0, &rd.to_wire()));
    let e = uhca_collective::Endpoint {
        addr: uhca_collective::PortAddr {
            gid: Gid::from_ipv4([127, 0, 0, 2]),
            mac: uhca::driver::addr::Mac([0x02, 0xc0, 0x11, 0xec, 0x01, 1]),
            lid: 0,
        },
        qpn: 0x104,
        psn: 0x1234,
        inbox: 0x7f12_3450_0000,
        rkey: 0x300,
    };
    let line = uhca_collective::line::endpoint_line(1, 0, &e);
    s.insert(("oob_collective", "endpoint".into()), line.into_bytes());
    let ib = uhca_collective::Endpoint {
        addr: uhca_collective::PortAddr {
            gid: Gid([0; 16]),
            mac: uhca::driver::addr::Mac([0; 6]),
            lid: 7,
        },
        ..e
    };
    let line = uhca_collective::line::endpoint_line(0, 3, &ib);
    s.insert(("oob_collective", "infiniband".into()), line.into_bytes());
    s.insert(
        ("oob_rdma", "lines".into()),
        with(
            1,
            b"write 65536 5000\nstart\nend\nok: 5000 buffers checked\n",
        ),
    );
}

fn cqe_eqe(s: &mut Seeds) {
    // cqe_eqe: [which, shape, ring bytes...]; CQ shape bits 0..2 log entries, bit 3 stride.
    let mut ok = Cqe64::new_zeroed();
    ok.sop_drop_qpn = (0x0a00_0104u32).into();
    ok.wqe_counter = 3u16.into();
    ok.byte_cnt = 3000u32.into();
    ok.immediate = 0x1234u32.into();
    ok.op_own = op_own_of(CqeOpcode::Req, 0);
    let mut recv = ok;
    recv.flags_rqpn = (0x1000_0013u32).into();
    recv.op_own = op_own_of(CqeOpcode::RespSendImm, 0);
    let mut err = ErrCqe::new_zeroed();
    err.syndrome = CqeSyndrome::WrFlushErr.raw();
    err.vendor_err_synd = 0x79;
    err.s_wqe_opcode_qpn = (0x0800_0104u32).into();
    err.wqe_counter = 4u16.into();
    err.op_own = op_own_of(CqeOpcode::ReqErr, 0);
    let mut ring = Vec::new();
    ring.extend_from_slice(ok.as_bytes());
    ring.extend_from_slice(recv.as_bytes());
    ring.extend_from_slice(err.as_bytes());
    s.insert(("cqe_eqe", "cq_64".into()), [&[0u8, 2][..], &ring].concat());
    let mut ring128 = Vec::new();
    for c in [ok.as_bytes(), err.as_bytes()] {
        ring128.extend_from_slice(&[0u8; 64]);
        ring128.extend_from_slice(c);
    }
    s.insert(
        ("cqe_eqe", "cq_128".into()),
        [&[0u8, 8 | 1][..], &ring128].concat(),
    );
    let mut ring = Vec::new();
    for (ty, data) in [
        (EventType::Cmd, &1u32.to_be_bytes()[..]),
        (EventType::PageRequest, &[0, 0, 0, 0, 0, 0, 0, 8][..]),
        (EventType::PortChange, &[0, 0, 0, 0, 0, 0, 0, 0, 0x10][..]),
        (
            EventType::CqError,
            &[0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 1][..],
        ),
    ] {
        let mut e = Eqe::new_zeroed();
        e.r#type = ty.raw();
        e.data[..data.len()].copy_from_slice(data);
        e.owner = 0;
        ring.extend_from_slice(e.as_bytes());
    }
    s.insert(("cqe_eqe", "eq".into()), [&[1u8, 2][..], &ring].concat());
}

fn commands(s: &mut Seeds) {
    // mock_cmd_in: [config], then per command [len_lo, len_hi, out_sel] and its input.
    // driver_cmd_out: [config] and seven-byte edits.
    fn out_sel(size: usize) -> u8 {
        if size <= 8 + 63 {
            (size.max(8) - 8) as u8
        } else if size <= 16 + 63 * 64 {
            0x40 | (size - 16).div_ceil(64) as u8
        } else {
            0x80 | ((size.saturating_sub(0x1010)).div_ceil(8).min(63)) as u8
        }
    }
    for (op, inl, outl) in COMMANDS {
        let mut input = vec![0u8; inl.size_bits as usize / 8];
        input[..2].copy_from_slice(&op.raw().to_be_bytes());
        let mut seed = vec![0u8];
        seed.extend_from_slice(&(input.len() as u16).to_le_bytes());
        seed.push(out_sel(outl.size_bits as usize / 8));
        seed.extend_from_slice(&input);
        let name = inl.prm_name.trim_start_matches("mlx5_ifc_");
        let name = name.trim_end_matches("_in_bits");
        s.insert(("mock_cmd_in", name.into()), seed);
    }
    s.insert(("driver_cmd_out", "ethernet".into()), vec![0]);
    s.insert(("driver_cmd_out", "infiniband".into()), vec![1]);
    // A few lies: a failed status on the 40th command, a capability word changed on the
    // 8th, one byte of the 30th output.
    s.insert(
        ("driver_cmd_out", "lies".into()),
        vec![
            0, 40, 3, 0x03, 0, 0, 0x12, 0x34, 8, 2, 17, 0xff, 0xff, 0xff, 0xff, 30, 0, 3, 0xff, 0,
            0, 0,
        ],
    );
}

fn vfio_user(s: &mut Seeds) {
    // A session as QEMU opens it: VERSION, DEVICE_GET_INFO, region and IRQ information,
    // configuration and BAR0 reads, a BAR0 write, DEVICE_RESET, DMA_UNMAP of everything.
    fn msg(out: &mut Vec<u8>, id: u16, command: u16, payload: &[u8]) {
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&command.to_le_bytes());
        out.extend_from_slice(&(16 + payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(payload);
    }
    fn words(w: &[u32]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }
    fn access(offset: u64, region: u32, count: u32, data: &[u8]) -> Vec<u8> {
        let mut v = offset.to_le_bytes().to_vec();
        v.extend_from_slice(&region.to_le_bytes());
        v.extend_from_slice(&count.to_le_bytes());
        v.extend_from_slice(data);
        v
    }
    let mut m = Vec::new();
    msg(
        &mut m,
        0,
        1,
        b"\0\0\x01\0{\"capabilities\":{\"max_msg_fds\":8}}\0",
    );
    msg(&mut m, 1, 4, &words(&[16, 0, 0, 0]));
    msg(&mut m, 2, 5, &words(&[32, 0, 0, 0, 0, 0, 0, 0]));
    msg(&mut m, 3, 5, &words(&[32, 0, 7, 0, 0, 0, 0, 0]));
    msg(&mut m, 4, 7, &words(&[16, 0, 2, 0]));
    msg(&mut m, 5, 9, &access(0, 7, 4, &[]));
    msg(&mut m, 6, 9, &access(0, 0, 16, &[]));
    msg(&mut m, 7, 10, &access(0x14, 0, 4, &[0, 0, 0x10, 0]));
    msg(&mut m, 8, 13, &[]);
    msg(&mut m, 9, 3, &words(&[24, 2, 0, 0, 0, 0]));
    s.insert(("vfio_user", "session".into()), m);
}

/// One MAD of each CM message the driver takes, as its CM encodes them.
fn cm_mads(s: &mut Seeds) {
    use uhca::driver::cm::msg::{MAD_LEN, Mra, Rej, RejReason, Rejected, Rep, Req, ReqPath, Rtu};
    let mut mad = [0u8; MAD_LEN];
    let req = Req {
        local_comm_id: 0x1234_5679,
        service_id: 0x0106_4853,
        local_ca_guid: 0x0002_c903_0000_0001,
        local_qkey: 0,
        local_qpn: 0x10c,
        responder_resources: 4,
        local_eecn: 0,
        initiator_depth: 4,
        remote_eecn: 0,
        remote_cm_response_timeout: 15,
        transport_service_type: 0,
        end_to_end_flow_control: true,
        starting_psn: 0xdc_561c,
        local_cm_response_timeout: 15,
        retry_count: 7,
        partition_key: 0xffff,
        path_mtu: 3,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 4,
        srq: false,
        extended_transport_type: 0,
        primary: ReqPath {
            local_lid: 1,
            remote_lid: 2,
            subnet_local: true,
            local_ack_timeout: 14,
            ..ReqPath::default()
        },
        alternate: ReqPath::default(),
        private_data: [0x11; 92],
    };
    req.encode(0x1234_5679_0000_0001, &mut mad);
    s.insert(("cm_mads", "req".into()), mad.to_vec());
    let rep = Rep {
        local_comm_id: 0x2345_6789,
        remote_comm_id: 0x1234_5679,
        local_qkey: 0,
        local_qpn: 0x10c,
        local_eecn: 0,
        starting_psn: 0x09_591d,
        responder_resources: 4,
        initiator_depth: 4,
        target_ack_delay: 0,
        failover_accepted: 1,
        end_to_end_flow_control: true,
        rnr_retry_count: 7,
        srq: false,
        local_ca_guid: 0x0002_c903_0000_0002,
        private_data: [0x22; 196],
    };
    rep.encode(0x1234_5679_0000_0001, &mut mad);
    s.insert(("cm_mads", "rep".into()), mad.to_vec());
    let rtu = Rtu {
        local_comm_id: 0x1234_5679,
        remote_comm_id: 0x2345_6789,
        private_data: [0; 224],
    };
    rtu.encode(0x1234_5679_0000_0001, &mut mad);
    s.insert(("cm_mads", "rtu".into()), mad.to_vec());
    Rej::new(0, 0x1234_5679, Rejected::Req, RejReason::INVALID_SERVICE_ID).encode(7, &mut mad);
    s.insert(("cm_mads", "rej".into()), mad.to_vec());
    let mra = Mra {
        local_comm_id: 0x2345_6789,
        remote_comm_id: 0x1234_5679,
        message_mraed: Rejected::Req,
        service_timeout: 20,
    };
    mra.encode(8, &mut mad);
    s.insert(("cm_mads", "mra".into()), mad.to_vec());
}

fn generate() -> Seeds {
    let mut s = Seeds::new();
    cm_mads(&mut s);
    wire(&mut s);
    pcap(&mut s);
    oob(&mut s);
    cqe_eqe(&mut s);
    commands(&mut s);
    vfio_user(&mut s);
    s
}

#[test]
fn seed_corpora_are_current() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
    let write = std::env::var_os("UHCA_WRITE_SEEDS").is_some_and(|v| v == "1");
    let mut stale = Vec::new();
    for ((target, name), bytes) in generate() {
        let path = root.join(target).join(&name);
        if write {
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, &bytes).unwrap();
        } else if std::fs::read(&path).ok().as_deref() != Some(&bytes[..]) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "seed files missing or out of date (regenerate with UHCA_WRITE_SEEDS=1 cargo test \
         --test fuzz_seeds): {stale:?}"
    );
}
