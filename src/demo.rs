//! The README's demo: two mock ConnectX HCAs, brought up by the driver, connected by the
//! mock's in-memory Ethernet fabric, with an RC queue pair each over RoCEv2. One side does
//! SEND, RDMA WRITE, RDMA READ, compare-and-swap and fetch-and-add against the other; every
//! result is checked in the peer's memory, and every packet can be captured to a pcap that
//! tshark decodes (`cargo run --example demo -- --pcap demo.pcap`).

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use uhca_driver::addr::{AddressHandle, Gid, Mac};
use uhca_driver::verbs::{
    Cq, InitAttr, Mr, Pd, Qp, QpCaps, QpInitAttr, Rc, RecvWr, RtrAttr, RtsAttr, SendFlags, SendOp,
    SendWr, Sge, WcStatus, WorkCompletion, state,
};
use uhca_driver::{Hca, HcaConfig};
use uhca_fwif::consts::{AccessFlags, IbMtu};
use uhca_hal::DmaMem;
use uhca_mock::{Fabric, MockConfig, MockHca, MockPlatform, PortType};

type P = MockPlatform;

/// What the demo did, for a caller (or a test) to check against the capture.
#[derive(Clone, Debug, Default)]
pub struct DemoReport {
    /// The requester's (hca0's) QP number.
    pub qpn_a: u32,
    /// The responder's (hca1's) QP number.
    pub qpn_b: u32,
    /// The first PSN hca0 sends with.
    pub psn_a: u32,
    /// The first PSN hca1 sends with.
    pub psn_b: u32,
    /// Whether the atomics ran (the device must offer them).
    pub atomics: bool,
    /// Packets on the wire.
    pub packets: u64,
    /// The human-readable account, line by line.
    pub lines: Vec<String>,
}

struct Node {
    dev: MockHca,
    hca: Hca<P>,
    pd: Pd,
    cq: Cq<P>,
    mr: Mr<P>,
    mac: Mac,
    gid: Gid,
}

type DemoResult<T> = Result<T, Box<dyn std::error::Error>>;

fn node(fabric: &Fabric, n: u8) -> DemoResult<Node> {
    let mac = Mac([0x02, 0x00, 0x00, 0x00, 0x00, n]);
    let dev = MockHca::new(MockConfig {
        port_type: PortType::Ethernet,
        mac: mac.0,
        ..MockConfig::default()
    });
    let mut hca = Hca::open_with(dev.platform(), HcaConfig::default())?;
    fabric.attach(&dev);
    let gid = hca.add_roce_gid(1, 0, IpAddr::V4(Ipv4Addr::new(10, 0, 0, n)), mac, None)?;
    let pd = hca.alloc_pd()?;
    let cq = hca.create_cq(63)?;
    let mut access =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    if hca.caps().atomic {
        access |= AccessFlags::REMOTE_ATOMIC;
    }
    let mr = hca.alloc_mr(&pd, 16384, access)?;
    Ok(Node {
        dev,
        hca,
        pd,
        cq,
        mr,
        mac,
        gid,
    })
}

fn qp(n: &mut Node) -> DemoResult<Qp<P, Rc, state::Init>> {
    let cap = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let attr = QpInitAttr {
        send_cq: &n.cq,
        recv_cq: &n.cq,
        srq: None,
        cap,
    };
    let qp = n.hca.create_qp::<Rc>(&n.pd, &attr)?;
    let mut access =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    if n.hca.caps().atomic {
        access |= AccessFlags::REMOTE_ATOMIC;
    }
    Ok(qp.to_init(
        &mut n.hca,
        InitAttr {
            access,
            ..InitAttr::default()
        },
    )?)
}

fn connect(
    n: &mut Node,
    qp: Qp<P, Rc, state::Init>,
    peer: &Node,
    peer_qpn: u32,
    psn: u32,
    peer_psn: u32,
) -> DemoResult<Qp<P, Rc, state::Rts>> {
    let ah = AddressHandle::RoceV2 {
        sgid_index: 0,
        dgid: peer.gid,
        dmac: peer.mac,
        udp_sport: 0xc000 | (peer_qpn as u16 & 0x3fff),
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
        sl: 0,
    };
    let rtr = RtrAttr {
        path_mtu: IbMtu::Mtu1024,
        dest_qpn: peer_qpn,
        rq_psn: peer_psn,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 12,
        ah,
    };
    let qp = qp.to_rtr(&mut n.hca, rtr)?;
    Ok(qp.to_rts(
        &mut n.hca,
        RtsAttr {
            sq_psn: psn,
            max_rd_atomic: 4,
            ..RtsAttr::default()
        },
    )?)
}

fn poll_one(fabric: &Fabric, n: &mut Node) -> DemoResult<WorkCompletion> {
    let mut wc = [WorkCompletion::default(); 1];
    for _ in 0..1000 {
        fabric.run_until_idle();
        if n.cq.poll(&mut wc)? == 1 {
            if wc[0].status != WcStatus::Success {
                return Err(
                    format!("work request {} failed: {:?}", wc[0].wr_id, wc[0].status).into(),
                );
            }
            return Ok(wc[0]);
        }
    }
    Err("no completion".into())
}

/// Runs the demo; with `pcap`, captures every packet there. `say` receives each line as it
/// happens.
///
/// # Errors
///
/// Any driver error, a failed completion, or data that did not arrive as sent.
pub fn run(pcap: Option<&Path>, mut say: impl FnMut(&str)) -> DemoResult<DemoReport> {
    let mut report = DemoReport::default();
    let mut line = |report: &mut DemoReport, s: String| {
        say(&s);
        report.lines.push(s);
    };
    let fabric = Fabric::ethernet();
    if let Some(path) = pcap {
        fabric.capture_file(path)?;
    }
    let mut a = node(&fabric, 1)?;
    let mut b = node(&fabric, 2)?;
    report.atomics = a.hca.caps().atomic && b.hca.caps().atomic;
    line(
        &mut report,
        format!(
            "hca0: RoCEv2 GID {} (10.0.0.1), hca1: GID {} (10.0.0.2)",
            a.gid, b.gid
        ),
    );

    let (qa, qb) = (qp(&mut a)?, qp(&mut b)?);
    let (qpn_a, qpn_b) = (qa.qpn(), qb.qpn());
    let (psn_a, psn_b) = (0xff_fffd, 0x00_1000); // hca0's PSNs wrap past 0xffffff.
    let mut qa = connect(&mut a, qa, &b, qpn_b, psn_a, psn_b)?;
    let mut qb = connect(&mut b, qb, &a, qpn_a, psn_b, psn_a)?;
    report.qpn_a = qpn_a;
    report.qpn_b = qpn_b;
    report.psn_a = psn_a;
    report.psn_b = psn_b;
    line(
        &mut report,
        format!(
            "RC QPs connected: hca0 QP {qpn_a:#x} (PSN {psn_a:#x}) <-> hca1 QP {qpn_b:#x} (PSN {psn_b:#x}), path MTU 1024"
        ),
    );

    let (la, ia) = (a.mr.lkey(), a.mr.iova());
    let (lb, ib, rkey) = (b.mr.lkey(), b.mr.iova(), b.mr.rkey());

    // SEND: hca1 posts a receive, hca0 sends 3000 bytes (three packets at MTU 1024).
    let message: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    a.mr.mem_mut().write_bytes(0, &message);
    let recv = [Sge {
        addr: ib,
        len: 4096,
        lkey: lb,
    }];
    qb.post_recv(&[RecvWr {
        wr_id: 100,
        sg_list: &recv,
    }])
    .map_err(|e| format!("{e:?}"))?;
    let src = [Sge {
        addr: ia,
        len: 3000,
        lkey: la,
    }];
    qa.post_send(&[SendWr::new(1, SendOp::Send, &src)])
        .map_err(|e| format!("{e:?}"))?;
    poll_one(&fabric, &mut a)?;
    let wc = poll_one(&fabric, &mut b)?;
    let mut got = vec![0u8; 3000];
    b.mr.mem().read_bytes(0, &mut got);
    if got != message || wc.byte_len != 3000 {
        return Err("SEND: data did not arrive as sent".into());
    }
    line(
        &mut report,
        format!(
            "SEND 3000 bytes: hca1 received {} bytes, identical",
            wc.byte_len
        ),
    );

    // RDMA WRITE: 1024 bytes into hca1's memory at 4096, no receive consumed.
    let text = b"written by hca0 with RDMA WRITE, no CPU on hca1 involved";
    a.mr.mem_mut().write_bytes(4096, text);
    let src = [Sge {
        addr: ia + 4096,
        len: text.len() as u32,
        lkey: la,
    }];
    let wr = SendWr::new(
        2,
        SendOp::RdmaWrite {
            remote_addr: ib + 4096,
            rkey,
        },
        &src,
    );
    qa.post_send(&[wr]).map_err(|e| format!("{e:?}"))?;
    poll_one(&fabric, &mut a)?;
    let mut got = vec![0u8; text.len()];
    b.mr.mem().read_bytes(4096, &mut got);
    if got != text {
        return Err("RDMA WRITE: data did not arrive".into());
    }
    line(
        &mut report,
        format!(
            "RDMA WRITE {} bytes: hca1's memory now says {:?}",
            text.len(),
            String::from_utf8_lossy(&got)
        ),
    );

    // RDMA READ: 2048 bytes from hca1 at 8192 into hca0 at 8192.
    let secret: Vec<u8> = (0..2048u32).map(|i| (i * 13 + 1) as u8).collect();
    b.mr.mem_mut().write_bytes(8192, &secret);
    let dst = [Sge {
        addr: ia + 8192,
        len: 2048,
        lkey: la,
    }];
    let wr = SendWr::new(
        3,
        SendOp::RdmaRead {
            remote_addr: ib + 8192,
            rkey,
        },
        &dst,
    );
    qa.post_send(&[wr]).map_err(|e| format!("{e:?}"))?;
    let wc = poll_one(&fabric, &mut a)?;
    let mut got = vec![0u8; 2048];
    a.mr.mem().read_bytes(8192, &mut got);
    if got != secret {
        return Err("RDMA READ: data did not arrive".into());
    }
    line(
        &mut report,
        format!(
            "RDMA READ {} bytes from hca1: identical to hca1's memory",
            wc.byte_len
        ),
    );

    if report.atomics {
        b.mr.mem_mut().write_be64(12288, 7);
        b.mr.mem_mut().write_be64(12296, 100);
        let cas_to = [Sge {
            addr: ia + 12288,
            len: 8,
            lkey: la,
        }];
        let faa_to = [Sge {
            addr: ia + 12296,
            len: 8,
            lkey: la,
        }];
        let cas = SendWr::new(
            4,
            SendOp::AtomicCmpSwap {
                remote_addr: ib + 12288,
                rkey,
                compare: 7,
                swap: 42,
            },
            &cas_to,
        );
        let faa = SendWr::new(
            5,
            SendOp::AtomicFetchAdd {
                remote_addr: ib + 12296,
                rkey,
                add: 5,
            },
            &faa_to,
        )
        .with_flags(SendFlags::SIGNALED | SendFlags::FENCE);
        qa.post_send(&[cas, faa]).map_err(|e| format!("{e:?}"))?;
        poll_one(&fabric, &mut a)?;
        poll_one(&fabric, &mut a)?;
        // The original values land in the local buffer in the host's byte order (the
        // driver asks the HCA for host-order atomic results, as Linux does); the remote
        // words are big-endian, as the InfiniBand specification keeps them.
        let mut orig = [0u8; 16];
        a.mr.mem().read_bytes(12288, &mut orig);
        let host = |b: &[u8]| u64::from_ne_bytes(b.try_into().unwrap_or([0; 8]));
        let (old_cas, old_faa) = (host(&orig[..8]), host(&orig[8..]));
        let (new_cas, new_faa) = (b.mr.mem().read_be64(12288), b.mr.mem().read_be64(12296));
        if (old_cas, old_faa, new_cas, new_faa) != (7, 100, 42, 105) {
            return Err("atomics: wrong values".into());
        }
        line(
            &mut report,
            format!("compare-and-swap: hca1's word was {old_cas}, compared 7, now {new_cas}"),
        );
        line(
            &mut report,
            format!("fetch-and-add:    hca1's word was {old_faa}, added 5, now {new_faa}"),
        );
    } else {
        line(
            &mut report,
            "atomics: the mock HCA does not offer them (cmd_hca_cap.atomic = 0); skipped"
                .to_string(),
        );
    }

    let c = fabric.counters();
    report.packets = c.delivered;
    let mut s = String::new();
    let _ = write!(
        s,
        "fabric: {} packets delivered, {} dropped",
        c.delivered, c.dropped
    );
    line(&mut report, s);
    if let Some(path) = pcap {
        let n = fabric.stop_capture()?;
        line(
            &mut report,
            format!(
                "pcap: {n} packets written to {} (tshark -r {} decodes them)",
                path.display(),
                path.display()
            ),
        );
    }

    qa.destroy(&mut a.hca).map_err(|f| f.error)?;
    qb.destroy(&mut b.hca).map_err(|f| f.error)?;
    for n in [a, b] {
        let Node {
            dev,
            mut hca,
            pd,
            cq,
            mr,
            ..
        } = n;
        let _buf = mr.destroy(&mut hca).map_err(|f| f.error)?;
        cq.destroy(&mut hca).map_err(|f| f.error)?;
        pd.destroy(&mut hca).map_err(|f| f.error)?;
        hca.close()?;
        if !dev.iommu_faults().is_empty() {
            return Err(format!("IOMMU faults: {:?}", dev.iommu_faults()).into());
        }
    }
    Ok(report)
}
