//! Step 4: a DMA to an IOVA the driver never mapped, through real VFIO.
//!
//! The reserved lkey (QUERY_SPECIAL_CONTEXTS) names raw IOVAs, so a work request can point
//! the device at an address the guest's VFIO container does not map: the top page of the
//! highest free range of the platform's IOVA allocator. Two pairs of RC QPs created with
//! `rlky` (the reserved lkey allowed) are connected to each other through the fabric (this
//! function talks to itself: Ethernet to its own GID, InfiniBand to its own LID):
//!
//! - a SEND and a RECV through the reserved lkey at IOVAs inside the driver's MR work and
//!   carry the bytes (the key itself works under VFIO);
//! - a SEND that gathers from the unmapped IOVA completes in error (local access error),
//!   nothing reaches the receiver, the MR is unchanged;
//! - a RECV whose scatter entry is the unmapped IOVA: the incoming SEND gives the receiver
//!   an error completion (local access error) and the sender the responder's NAK (remote
//!   operational error); the MR is unchanged.
//!
//! The device's side of each fault (the IOMMU refusing the access) is the vfio-user
//! server's: it prints one line per IOMMU fault, which the rig's host script checks
//! against the IOVA this program prints (`vfio_mlx5: unmapped IOVA 0x...`).

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use uhca_driver::Hca;
use uhca_driver::addr::{AhAttr, StaticRate};
use uhca_driver::caps::LinkLayer;
use uhca_driver::verbs::{
    Cq, InitAttr, Mr, Pd, Qp, QpCaps, QpInitAttr, Rc, RecvWr, ReservedLkey, RtrAttr, RtsAttr,
    SendOp, SendWr, WcStatus, WorkCompletion,
};
use uhca_driver::vfio::VfioPlatform;
use uhca_fwif::consts::{AccessFlags, IbMtu};
use uhca_hal::DmaMem;

use crate::rig::{Report, Res};

type Init = Qp<VfioPlatform, Rc>;
type Rts = Qp<VfioPlatform, Rc>;

/// How long a completion may take (TCG, every doorbell and poll a trapped BAR access).
const DEADLINE: Duration = Duration::from_secs(10);
/// How long the receiver is watched for a completion that must not come.
const QUIET: Duration = Duration::from_millis(500);
/// The MR the driver maps (through VFIO) for the checks.
const MR_LEN: usize = 16384;

/// What the checks create, destroyed (or left to the teardown) by the caller's HCA.
pub struct Objects {
    pd: Pd<VfioPlatform>,
    cqa: Cq<VfioPlatform>,
    cqb: Cq<VfioPlatform>,
    mr: Mr<VfioPlatform>,
    qps: Vec<Rts>,
}

fn rlky_qp(
    hca: &mut Hca<VfioPlatform>,
    pd: &Pd<VfioPlatform>,
    cq: &Cq<VfioPlatform>,
    key: &ReservedLkey,
) -> Res<Init> {
    let attr = QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCaps {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
    };
    let mut qp = hca.create_qp_with_reserved_lkey::<Rc>(pd, &attr, key)?;
    qp.to_init(hca, InitAttr::default())?;
    Ok(qp)
}

fn connect(hca: &mut Hca<VfioPlatform>, mut qp: Init, peer: u32, ah: AhAttr) -> Res<Rts> {
    qp.to_rtr(
        hca,
        RtrAttr {
            path_mtu: IbMtu::Mtu1024,
            dest_qpn: peer,
            rq_psn: 0x100,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 1,
            ah,
        },
    )?;
    qp.to_rts(
        hca,
        RtsAttr {
            sq_psn: 0x100,
            max_rd_atomic: 1,
            ..RtsAttr::default()
        },
    )?;
    Ok(qp)
}

/// The path from this function's port to itself.
fn self_path(hca: &mut Hca<VfioPlatform>) -> Res<AhAttr> {
    let port = hca.query_port(1)?;
    Ok(match hca.caps().link_layer {
        LinkLayer::Ethernet => {
            let mac = port.mac.ok_or("the Ethernet port reports no MAC address")?;
            let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
            let gid = hca.add_roce_gid(1, 0, ip, mac, None)?;
            AhAttr::RoceV2 {
                sgid_index: 0,
                dgid: gid,
                dmac: mac,
                udp_sport: 0xc000,
                traffic_class: 0,
                hop_limit: 64,
                flow_label: 0,
                sl: 0,
            }
        }
        _ => AhAttr::Ib {
            dlid: port.lid,
            sl: 0,
            src_path_bits: 0,
            static_rate: StaticRate::PortCurrent,
            grh: None,
        },
    })
}

/// Polls `cq` until it gives at least one completion or `limit` passes.
fn completions(cq: &mut Cq<VfioPlatform>, limit: Duration) -> Res<Vec<WorkCompletion>> {
    let t = Instant::now();
    let mut wc = [WorkCompletion::default(); 4];
    loop {
        let n = cq.poll(&mut wc)?;
        if n > 0 {
            return Ok(wc[..n].to_vec());
        }
        if t.elapsed() > limit {
            return Ok(Vec::new());
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

fn statuses(wc: &[WorkCompletion]) -> Vec<(u64, WcStatus)> {
    wc.iter().map(|c| (c.wr_id, c.status)).collect()
}

fn snapshot(mr: &Mr<VfioPlatform>) -> Vec<u8> {
    let mut v = vec![0u8; mr.mem().len()];
    mr.mem().read_bytes(0, &mut v);
    v
}

/// The checks of step 4 on a running HCA. Returns the objects for the caller to destroy.
pub fn check(r: &mut Report, p: &VfioPlatform, hca: &mut Hca<VfioPlatform>) -> Option<Objects> {
    let key = r.require(
        "QUERY_SPECIAL_CONTEXTS gives the reserved lkey",
        hca.reserved_lkey().map_err(Into::into),
    )?;
    println!("reserved lkey: {:#010x}", key.key());
    let made: Res<_> = (|| {
        let pd = hca.alloc_pd()?;
        let cqa = hca.create_cq(16)?;
        let cqb = hca.create_cq(16)?;
        let mr = hca.alloc_mr(&pd, MR_LEN, AccessFlags::LOCAL_WRITE)?;
        let ah = self_path(hca)?;
        let mut qps = Vec::new();
        for _ in 0..2 {
            let a = rlky_qp(hca, &pd, &cqa, &key)?;
            let b = rlky_qp(hca, &pd, &cqb, &key)?;
            let (na, nb) = (a.qpn(), b.qpn());
            qps.push(connect(hca, a, nb, ah)?);
            qps.push(connect(hca, b, na, ah)?);
        }
        Ok(Objects {
            pd,
            cqa,
            cqb,
            mr,
            qps,
        })
    })();
    let mut o = r.require(
        "two pairs of RC QPs created with rlky, connected to each other through the fabric",
        made,
    )?;
    let base = o.mr.iova();
    println!("MR: {MR_LEN} bytes at IOVA {base:#x}");

    // The unmapped IOVA: the last page of the highest free range of the platform's IOVA
    // allocator, which nothing in this process's VFIO container maps.
    let free = p.free_iova_ranges();
    let Some(top) = free.iter().max_by_key(|r| r.last) else {
        r.check(false, "the platform reports free IOVA space");
        return Some(o);
    };
    let iova = top.last & !0xfff;
    println!(
        "vfio_mlx5: unmapped IOVA {iova:#x} (the last page of the free IOVA range {:#x}-{:#x})",
        top.start, top.last
    );
    r.check(
        iova >= top.start && !(base..base + MR_LEN as u64).contains(&iova),
        "the unmapped IOVA lies in the platform's free IOVA space, outside the MR",
    );

    // (a) Inside the MR, both ways through the reserved lkey.
    let pattern: Vec<u8> = (0..300u32).map(|i| (i * 13 + 5) as u8).collect();
    o.mr.mem_mut().write_bytes(100, &pattern);
    let (qa, rest) = o.qps.split_at_mut(1);
    let (qa1, qb1) = (&mut qa[0], &mut rest[0]);
    let rsge = [key.sge(base + 8192, 512)];
    let ssge = [key.sge(base + 100, 300)];
    let ok: Res<bool> = (|| {
        qb1.post_recv(&[RecvWr {
            wr_id: 10,
            sg_list: &rsge,
        }])?;
        qa1.post_send(&[SendWr::new(11, SendOp::Send, &ssge)])?;
        let wa = completions(&mut o.cqa, DEADLINE)?;
        let wb = completions(&mut o.cqb, DEADLINE)?;
        let mut got = vec![0u8; 300];
        o.mr.mem().read_bytes(8192, &mut got);
        println!("  sender {:?}, receiver {:?}", statuses(&wa), statuses(&wb));
        Ok(statuses(&wa) == [(11, WcStatus::Success)]
            && statuses(&wb) == [(10, WcStatus::Success)]
            && got == pattern)
    })();
    r.check(
        ok.unwrap_or(false),
        "SEND gathered and RECV scattered through the reserved lkey at the MR's IOVAs: \
         both complete, the 300 bytes arrived",
    );

    // (b) A SEND gathering from the unmapped IOVA.
    let before = snapshot(&o.mr);
    let rsge = [o.mr.sge(4096, 1024).unwrap_or_default()];
    let bad = [key.sge(iova, 256)];
    let got: Res<(Vec<WorkCompletion>, Vec<WorkCompletion>)> = (|| {
        qb1.post_recv(&[RecvWr {
            wr_id: 20,
            sg_list: &rsge,
        }])?;
        let t = Instant::now();
        qa1.post_send(&[SendWr::new(21, SendOp::Send, &bad)])?;
        let wa = completions(&mut o.cqa, DEADLINE)?;
        println!(
            "  gather fault: sender {:?} after {:.0} ms",
            statuses(&wa),
            t.elapsed().as_secs_f64() * 1e3
        );
        let wb = completions(&mut o.cqb, QUIET)?;
        Ok((wa, wb))
    })();
    let (wa, wb) = got.unwrap_or_default();
    r.check(
        statuses(&wa) == [(21, WcStatus::LocalAccess)],
        &format!(
            "SEND gathered from unmapped IOVA {iova:#x}: error completion (local access error) \
             within {} s",
            DEADLINE.as_secs()
        ),
    );
    r.check(wb.is_empty(), "gather fault: nothing reached the receiver");
    r.check(
        snapshot(&o.mr) == before,
        "gather fault: the MR's memory is unchanged",
    );

    // (c) A RECV whose scatter entry is the unmapped IOVA, on the second pair.
    let (qa2, qb2) = {
        let (x, y) = o.qps.split_at_mut(3);
        (&mut x[2], &mut y[0])
    };
    let before = snapshot(&o.mr);
    let bad = [key.sge(iova, 1024)];
    let src = [o.mr.sge(0, 256).unwrap_or_default()];
    let got: Res<(Vec<WorkCompletion>, Vec<WorkCompletion>)> = (|| {
        qb2.post_recv(&[RecvWr {
            wr_id: 30,
            sg_list: &bad,
        }])?;
        let t = Instant::now();
        qa2.post_send(&[SendWr::new(31, SendOp::Send, &src)])?;
        let wb = completions(&mut o.cqb, DEADLINE)?;
        let wa = completions(&mut o.cqa, DEADLINE)?;
        println!(
            "  scatter fault: receiver {:?}, sender {:?} after {:.0} ms",
            statuses(&wb),
            statuses(&wa),
            t.elapsed().as_secs_f64() * 1e3
        );
        Ok((wa, wb))
    })();
    let (wa, wb) = got.unwrap_or_default();
    r.check(
        statuses(&wb) == [(30, WcStatus::LocalAccess)],
        &format!(
            "RECV scattering to unmapped IOVA {iova:#x}: the receiver's error completion \
             (local access error)"
        ),
    );
    r.check(
        statuses(&wa) == [(31, WcStatus::RemoteOperation)],
        "scatter fault: the sender's error completion (remote operational error, the \
         responder's NAK)",
    );
    r.check(
        snapshot(&o.mr) == before,
        "scatter fault: the MR's memory is unchanged",
    );
    Some(o)
}

impl Objects {
    /// Destroys the QPs, the MR, the CQs and the PD.
    pub fn destroy(self, hca: &mut Hca<VfioPlatform>) -> Res<()> {
        for qp in self.qps {
            qp.destroy(hca)?;
        }
        self.mr.destroy(hca)?;
        self.cqa.destroy(hca)?;
        self.cqb.destroy(hca)?;
        self.pd.destroy(hca)?;
        Ok(())
    }
}
