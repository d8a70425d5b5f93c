//! `uhca-collective` over two guests on one server: this guest holds two ranks of four
//! (`-append duo=0` ranks 0 and 1, `duo=1` ranks 2 and 3), one per function, and the other
//! guest the other two. The QPs between the guests are connected in band by the driver's
//! IB CM (`uhca_driver::cm`): each function has a QP1 and a CM, guest 0's rank sends the
//! REQ, guest 1's answers with the REP, and the inbox and rkey each side writes into
//! travel in the REQ's and REP's private data. Each guest knows only the address plan
//! (rank r at 10.0.0.(r + 1)); nothing goes through the host. Between the two ranks of one
//! guest the endpoints are exchanged in memory. Then an all-reduce (ring), an all-gather
//! and a broadcast run on both guests at once, each guest checking its ranks' results.

use alloc::vec::Vec;

use uhca_collective::{Communicator, Endpoint, PortAddr, ReduceOp};
use uhca_driver::Hca;
use uhca_driver::addr::{Endpoint as CmEndpoint, Gid, Mac};
use uhca_driver::caps::LinkLayer;
use uhca_driver::cm::{Cm, CmConfig, CmError, Connection};
use uhca_fwif::consts::IbMtu;

use crate::checks::collective::{config, value};
use crate::platform::{self, BareMetal};
use crate::{Addr, Res, check};

/// Ranks in all, and in this guest.
const SIZE: usize = 4;
const LOCAL: usize = 2;
/// How long the program waits for the other guest's endpoints.
const EXCHANGE_NS: u64 = 60_000_000_000;

/// The service of the connection from rank `from` to rank `to` (rdma_cm's TCP port space,
/// ports 0x4900 + from × 16 + to).
fn service(from: usize, to: usize) -> u64 {
    0x0000_0000_0106_4900 | (from as u64) << 4 | to as u64
}

/// The private data of a REQ or REP: the inbox (IOVA) and rkey the peer writes into.
fn private(e: &Endpoint) -> [u8; 12] {
    let mut d = [0u8; 12];
    d[..8].copy_from_slice(&e.inbox.to_be_bytes());
    d[8..].copy_from_slice(&e.rkey.to_be_bytes());
    d
}

/// The endpoint a connection set up by the CM gives for the peer: its QP and PSN from the
/// REQ or REP, its inbox and rkey from the private data.
fn learnt(c: &Connection, addr: PortAddr) -> Res<Endpoint> {
    let d = c.private_data();
    if d.len() < 12 {
        return Err(msg!("no inbox in the peer's private data"));
    }
    let mut inbox = [0u8; 8];
    inbox.copy_from_slice(&d[..8]);
    Ok(Endpoint {
        addr,
        qpn: c.remote_qpn(),
        psn: c.psns().1,
        inbox: u64::from_be_bytes(inbox),
        rkey: u32::from_be_bytes([d[8], d[9], d[10], d[11]]),
    })
}

/// Where rank `r`'s port is: the address plan gives function n of guest g the IP address
/// 10.0.0.(2g + n + 1), rank 2g + n; the MAC is the broadcast address (the mock's fabric
/// routes RoCEv2 by IP; on a real network a neighbour table would give it).
fn port_of(r: usize) -> CmEndpoint {
    CmEndpoint {
        link_layer: LinkLayer::Ethernet,
        lid: 0,
        gid: Gid::from_ipv4([10, 0, 0, r as u8 + 1]),
        mac: Mac([0xff; 6]),
        gid_index: 0,
    }
}

type Comm<'p> = Communicator<&'p BareMetal>;

/// Connects the cross-guest pairs through the CM, one at a time in one order both guests
/// follow: (0, 2), (0, 3), (1, 2), (1, 3); guest 0's rank is the active side. The active
/// side starts again (a new REQ) while the other guest is not there yet (no answer, or a
/// REJ because its CM does not listen on that service yet), until [`EXCHANGE_NS`].
fn connect<'p>(g: usize, hcas: &mut [&mut (Hca<&'p BareMetal>, Addr)]) -> Res<Vec<Comm<'p>>> {
    let base = g * LOCAL;
    let mut pending = Vec::new();
    let mut cms = Vec::new();
    let cm_cfg = CmConfig {
        path_mtu: IbMtu::Mtu4096,
        responder_resources: 1,
        initiator_depth: 1,
        response_timeout_ns: 500_000_000,
        max_retries: 3,
        ..CmConfig::default()
    };
    for (i, (hca, a)) in hcas.iter_mut().map(|x| &mut **x).enumerate() {
        let addr = PortAddr {
            gid: a.gid,
            mac: a.mac,
            lid: a.lid,
        };
        pending.push(
            Communicator::create(hca, base + i, SIZE, addr, config())
                .map_err(|e| msg!("rank {}: create: {e}", base + i))?,
        );
        let pd = hca.alloc_pd().map_err(|e| msg!("alloc_pd: {e}"))?;
        let cm = Cm::new(hca, &pd, cm_cfg).map_err(|e| msg!("rank {}: {e}", base + i))?;
        cms.push((pd, cm));
    }
    let local = |r: usize| r >= base && r < base + LOCAL;
    // remote[i][from]: what rank `from` of the other guest gave local rank base + i.
    let mut remote: [[Option<Endpoint>; SIZE]; LOCAL] = [[None; SIZE]; LOCAL];
    let deadline = platform::now_ns() + EXCHANGE_NS;
    let t0 = platform::now_ns();
    let mut mads = 0;
    for from in 0..LOCAL {
        for to in LOCAL..SIZE {
            let (me, peer) = if g == 0 { (from, to) } else { (to, from) };
            let i = me - base;
            let (hca, _) = &mut *hcas[i];
            let cm = &mut cms[i].1;
            let mine = pending[i].endpoint(peer);
            let qp = pending[i]
                .qp_mut(peer)
                .ok_or(msg!("no QP for rank {peer}"))?;
            let mut conn = if g == 0 {
                cm.connect(hca, qp, &port_of(peer), service(from, to), &private(&mine))
            } else {
                cm.listen(service(from, to), &private(&mine))
            }
            .map_err(|e| msg!("rank {me} to {peer}: {e}"))?;
            loop {
                match cm.progress(hca, &mut conn, qp) {
                    Ok(true) => break,
                    Ok(false) => {}
                    // The other guest is not there yet: ask again.
                    Err(CmError::Timeout { .. } | CmError::Rejected { .. }) if g == 0 => {
                        conn = cm
                            .connect(hca, qp, &port_of(peer), service(from, to), &private(&mine))
                            .map_err(|e| msg!("rank {me} to {peer}: {e}"))?;
                    }
                    Err(e) => return Err(msg!("rank {me} to {peer}: {e}")),
                }
                if platform::now_ns() > deadline {
                    return Err(msg!(
                        "rank {me} to {peer}: not connected after {} s",
                        EXCHANGE_NS / 1_000_000_000
                    ));
                }
            }
            let pa = pending[i].endpoint(peer).addr;
            remote[i][peer] = Some(learnt(&conn, pa)?);
            // Until the RTU surely arrived: a passive side answered, an active one has
            // nothing left to resend for (a lost RTU brings a REP, answered next time).
            mads = cm.stats().sent;
        }
    }
    println!(
        "  the {} cross-guest connections made by the CM in {} ms (this guest's last CM sent {mads} MADs)",
        LOCAL * (SIZE - LOCAL),
        (platform::now_ns() - t0) / 1_000_000
    );
    let mut comms = Vec::new();
    let all: Vec<_> = (0..LOCAL)
        .map(|i| {
            (0..SIZE)
                .map(|p| {
                    let me = base + i;
                    if p == me {
                        // Ignored by `connect`.
                        pending[(i + 1) % LOCAL].endpoint(me)
                    } else if local(p) {
                        pending[p - base].endpoint(me)
                    } else {
                        remote[i][p].expect("every remote endpoint arrived")
                    }
                })
                .collect::<Vec<_>>()
        })
        .collect();
    for ((i, p), eps) in pending.into_iter().enumerate().zip(all) {
        let (hca, _) = &mut *hcas[i];
        comms.push(
            p.connect(hca, &eps)
                .map_err(|e| msg!("rank {}: connect: {e}", base + i))?,
        );
    }
    // The CMs' QP1s go (their PDs after them, through the driver's release queue).
    drop(cms);
    Ok(comms)
}

fn verify(g: usize, bufs: &[Vec<i32>], want: impl Fn(usize) -> i32) -> Res<()> {
    for (i, b) in bufs.iter().enumerate() {
        if let Some(k) = (0..b.len()).find(|&k| b[k] != want(k)) {
            return Err(msg!(
                "rank {}: element {k} is {}, expected {}",
                g * LOCAL + i,
                b[k],
                want(k)
            ));
        }
    }
    Ok(())
}

/// The two-guest checks on this guest's two functions (`hcas`), as guest `g` (six lines).
pub fn run(g: usize, link: &str, hcas: &mut [&mut (Hca<&BareMetal>, Addr)]) {
    let base = g * LOCAL;
    let Some(mut comms) = check(
        format_args!(
            "duo ({link}): ranks {base} and {} of {SIZE}, connected to the other guest's by the IB CM (REQ/REP/RTU on QP1, no host relay)",
            base + 1
        ),
        if hcas.len() == LOCAL && g < 2 {
            connect(g, hcas)
        } else {
            Err(msg!(
                "{} functions up, {LOCAL} needed (or a bad guest number)",
                hcas.len()
            ))
        },
    ) else {
        return;
    };
    let len = 24 << 10;
    let mut bufs: Vec<Vec<i32>> = (0..LOCAL)
        .map(|i| (0..len).map(|k| value(base + i, k)).collect())
        .collect();
    check(
        format_args!(
            "duo ({link}): all-reduce (sum, ring) of {len} i32 over two guests, every element"
        ),
        crate::checks::collective::on_all(&mut comms, &mut bufs, |c, b| {
            c.all_reduce(b, ReduceOp::Sum)
        })
        .and_then(|_| verify(g, &bufs, |k| (0..SIZE).map(|r| value(r, k)).sum())),
    );
    let block = 4 << 10;
    let mut bufs: Vec<Vec<i32>> = (0..LOCAL)
        .map(|i| {
            let r = base + i;
            let mut b = alloc::vec![0; SIZE * block];
            for (k, x) in b[r * block..(r + 1) * block].iter_mut().enumerate() {
                *x = value(r, k);
            }
            b
        })
        .collect();
    check(
        format_args!(
            "duo ({link}): all-gather of {SIZE} blocks of {block} i32 over two guests, every block"
        ),
        crate::checks::collective::on_all(&mut comms, &mut bufs, |c, b| c.all_gather(b))
            .and_then(|_| verify(g, &bufs, |k| value(k / block, k % block))),
    );
    let root = 3;
    let mut bufs: Vec<Vec<i32>> = (0..LOCAL)
        .map(|i| {
            if base + i == root {
                (0..len).map(|k| value(root, k)).collect()
            } else {
                alloc::vec![-1; len]
            }
        })
        .collect();
    check(
        format_args!(
            "duo ({link}): broadcast of {len} i32 from rank {root} over two guests, every copy"
        ),
        crate::checks::collective::on_all(&mut comms, &mut bufs, |c, b| c.broadcast(b, root))
            .and_then(|_| verify(g, &bufs, |k| value(root, k))),
    );
    check(
        format_args!("duo ({link}): communicators destroyed"),
        comms
            .into_iter()
            .zip(hcas.iter_mut())
            .try_for_each(|(c, h)| c.destroy(&mut h.0).map_err(|e| msg!("destroy: {e}"))),
    );
}
