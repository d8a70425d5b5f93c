//! Soak and teardown under load (issue 13 item 4): hundreds of RC QPs across three mock
//! HCAs exchanging SENDs over a lossy fabric (drops, duplicates, reordering) for a bounded
//! time; pairs torn down while their peers still send (one side moved to ERR, drained and
//! destroyed with its CQ, the other side left sending into the void until its retries run
//! out) and replaced; at the end one HCA closed with requests outstanding. Every request
//! completes exactly once, successfully or with an error (a flush, or retry exceeded for a
//! sender whose peer is gone), and host memory is flat from the first part of the run to the
//! last (the counting allocator of `uhca-test-support`, and the resident set size).
//!
//! `UHCA_SOAK_SECS` sets the duration (10 s by default, the CI run); `UHCA_SOAK_QPS` the
//! number of QPs (300). The long run's figures are in `driver/HOSTILE.md`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use uhca_driver::addr::{AhAttr, Gid, Mac};
use uhca_driver::verbs::{
    Cq, InitAttr, Mr, Pd, Qp, QpCaps, QpInitAttr, Rc, RecvWr, RtrAttr, RtsAttr, SendOp, SendWr,
    Sge, WcStatus, WorkCompletion,
};
use uhca_driver::{Hca, HcaConfig};
use uhca_fwif::consts::{AccessFlags, IbMtu};
use uhca_mock::{Fabric, FaultConfig, LinkLayer, MockConfig, MockHca, MockPlatform};

#[global_allocator]
static GLOBAL: uhca_test_support::CountingAlloc = uhca_test_support::CountingAlloc;

mod common;

type P = MockPlatform;
type Rts = Qp<P, Rc>;

const HCAS: usize = 3;
/// Work requests each QP keeps in flight at most, per direction.
const DEPTH: u64 = 4;
const MSG: u32 = 64;

struct Node {
    dev: MockHca,
    hca: Hca<P>,
    pd: Pd<P>,
    mr: Mr<P>,
    mac: Mac,
    gid: Gid,
}

fn node(fabric: &Fabric, n: u8) -> Node {
    let mac = Mac([0x02, 0xc0, 0xff, 0xee, 0x01, n]);
    let dev = MockHca::new(MockConfig {
        mac: mac.0,
        regular_pages: 4096,
        ..MockConfig::default()
    });
    let mut hca = Hca::open_with(
        dev.platform(),
        HcaConfig {
            cmd_timeout_ns: 2_000_000_000,
            ..common::cfg()
        },
    )
    .expect("bring-up");
    fabric.attach(&dev);
    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, n));
    let gid = hca.add_roce_gid(1, 0, ip, mac, None).unwrap();
    let pd = hca.alloc_pd().unwrap();
    let mr = hca
        .alloc_mr(&pd, 64 * 1024, AccessFlags::LOCAL_WRITE)
        .unwrap();
    Node {
        dev,
        hca,
        pd,
        mr,
        mac,
        gid,
    }
}

/// One side of a pair: its QP and the CQ it alone uses.
struct Side {
    node: usize,
    cq: Cq<P>,
    qp: Option<Rts>,
    /// Requests posted and not completed, by `wr_id`.
    sends: u64,
    recvs: u64,
    /// Whether it still posts (a side whose peer is gone keeps sending until its QP fails).
    live: bool,
}

struct Pair {
    sides: [Side; 2],
    /// Epoch at which it is torn down.
    dies_at: u64,
}

/// Every `wr_id` posted and not yet completed: which pair side it belongs to.
type Outstanding = HashMap<u64, (usize, usize)>;

struct Soak {
    fabric: Fabric,
    nodes: Vec<Node>,
    pairs: Vec<Option<Pair>>,
    out: Outstanding,
    next_wr: u64,
    rng: u64,
    /// Counts for the report.
    ok: u64,
    errors: u64,
    pairs_made: u64,
}

fn rts() -> RtsAttr {
    RtsAttr {
        sq_psn: 0x10,
        timeout: 10,
        retry_cnt: 3,
        rnr_retry: 3,
        max_rd_atomic: 1,
    }
}

impl Soak {
    fn rand(&mut self, n: u64) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % n
    }

    fn side(&mut self, node: usize) -> (Side, Qp<P, Rc>) {
        let n = &mut self.nodes[node];
        let cq = n.hca.create_cq(4 * DEPTH as u32).unwrap();
        let mut qp = n
            .hca
            .create_qp::<Rc>(
                &n.pd,
                &QpInitAttr {
                    send_cq: &cq,
                    recv_cq: &cq,
                    srq: None,
                    cap: QpCaps {
                        max_send_wr: DEPTH as u32,
                        max_recv_wr: DEPTH as u32,
                        max_send_sge: 1,
                        max_recv_sge: 1,
                        max_inline_data: 0,
                    },
                },
            )
            .unwrap();
        qp.to_init(
            &mut n.hca,
            InitAttr {
                access: AccessFlags::LOCAL_WRITE,
                ..InitAttr::default()
            },
        )
        .unwrap();
        let side = Side {
            node,
            cq,
            qp: None,
            sends: 0,
            recvs: 0,
            live: true,
        };
        (side, qp)
    }

    fn connect(&mut self, node: usize, mut qp: Qp<P, Rc>, peer: usize, pqpn: u32) -> Rts {
        let ah = AhAttr::RoceV2 {
            sgid_index: 0,
            dgid: self.nodes[peer].gid,
            dmac: self.nodes[peer].mac,
            udp_sport: 0xc000 + pqpn as u16,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            sl: 0,
        };
        let hca = &mut self.nodes[node].hca;
        qp.to_rtr(
            hca,
            RtrAttr {
                path_mtu: IbMtu::Mtu1024,
                dest_qpn: pqpn,
                rq_psn: 0x10,
                max_dest_rd_atomic: 1,
                min_rnr_timer: 1,
                ah,
            },
        )
        .unwrap();
        qp.to_rts(hca, rts()).unwrap();
        qp
    }

    /// A new pair between two different HCAs, living for a random number of epochs.
    fn make_pair(&mut self, slot: usize, epoch: u64) {
        let a = slot % HCAS;
        let b = (a + 1 + self.rand(HCAS as u64 - 1) as usize) % HCAS;
        let (mut sa, qa) = self.side(a);
        let (mut sb, qb) = self.side(b);
        let (na, nb) = (qa.qpn(), qb.qpn());
        sa.qp = Some(self.connect(a, qa, b, nb));
        sb.qp = Some(self.connect(b, qb, a, na));
        let life = 5 + self.rand(40);
        self.pairs[slot] = Some(Pair {
            sides: [sa, sb],
            dies_at: epoch + life,
        });
        self.pairs_made += 1;
    }

    /// Keeps each live side's queues full: receives, and SENDs to its peer.
    fn post(&mut self, slot: usize) {
        let Some(pair) = self.pairs[slot].as_mut() else {
            return;
        };
        for (s, side) in pair.sides.iter_mut().enumerate() {
            let Some(qp) = side.qp.as_mut() else { continue };
            if !side.live {
                continue;
            }
            let mr = &self.nodes[side.node].mr;
            let sge = [Sge {
                addr: mr.iova() + (slot as u64 % 256) * 256,
                len: MSG,
                lkey: mr.lkey(),
            }];
            while side.recvs < DEPTH {
                let id = self.next_wr;
                if qp
                    .post_recv(&[RecvWr {
                        wr_id: id,
                        sg_list: &sge,
                    }])
                    .is_err()
                {
                    break;
                }
                self.next_wr += 1;
                self.out.insert(id, (slot, s));
                side.recvs += 1;
            }
            // Never more SENDs in flight than the peer has receives (no RNR).
            while side.sends < DEPTH / 2 {
                let id = self.next_wr;
                if qp
                    .post_send(&[SendWr::new(id, SendOp::Send, &sge)])
                    .is_err()
                {
                    break;
                }
                self.next_wr += 1;
                self.out.insert(id, (slot, s));
                side.sends += 1;
            }
        }
    }

    /// Takes one completion of pair `slot`'s side `s`: it must be outstanding, once.
    fn complete(&mut self, slot: usize, s: usize, wc: &WorkCompletion) {
        let owner = self.out.remove(&wc.wr_id);
        assert_eq!(
            owner,
            Some((slot, s)),
            "wr_id {} completed twice, or on the wrong QP: {wc:?}",
            wc.wr_id
        );
        let side = &mut self.pairs[slot].as_mut().unwrap().sides[s];
        if wc.opcode == uhca_driver::verbs::WcOpcode::Send {
            side.sends -= 1;
        } else {
            side.recvs -= 1;
        }
        if wc.status == WcStatus::Success {
            self.ok += 1;
        } else {
            self.errors += 1;
        }
    }

    fn poll_pair(&mut self, slot: usize) {
        let mut wc = [WorkCompletion::default(); 16];
        for s in 0..2 {
            loop {
                let n = {
                    let Some(pair) = self.pairs[slot].as_mut() else {
                        return;
                    };
                    pair.sides[s]
                        .cq
                        .poll(&mut wc)
                        .expect("CQEs match what was posted")
                };
                for w in &wc[..n] {
                    self.complete(slot, s, w);
                }
                if n < wc.len() {
                    break;
                }
            }
        }
    }

    /// Outstanding requests of one side.
    fn outstanding(&self, slot: usize, s: usize) -> u64 {
        self.pairs[slot]
            .as_ref()
            .map_or(0, |p| p.sides[s].sends + p.sides[s].recvs)
    }

    /// Moves side `s` of `slot` to ERR, drains its flushes, destroys its QP and its CQ.
    fn kill_side(&mut self, slot: usize, s: usize) {
        let node = self.pairs[slot].as_ref().unwrap().sides[s].node;
        let qp = self.pairs[slot].as_mut().unwrap().sides[s]
            .qp
            .take()
            .unwrap();
        self.pairs[slot].as_mut().unwrap().sides[s].live = false;
        let mut err = qp;
        err.to_err(&mut self.nodes[node].hca).unwrap();
        let start = Instant::now();
        while self.outstanding(slot, s) > 0 {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "flushes of a QP moved to ERR never came"
            );
            self.fabric.run_for(100_000);
            self.poll_pair(slot);
        }
        err.destroy(&mut self.nodes[node].hca).unwrap();
    }

    /// Tears a pair down while one side still sends: the other side first (ERR, drain,
    /// destroy, its CQ destroyed), then the sender runs on until its requests fail (no
    /// peer: retries exceeded, then flushes), then it goes too.
    fn kill_pair(&mut self, slot: usize) {
        let victim = self.rand(2) as usize;
        self.kill_side(slot, victim);
        // The survivor keeps posting into the void for a while.
        for _ in 0..3 {
            self.post(slot);
            self.fabric.run_for(2_000_000);
            self.poll_pair(slot);
        }
        self.kill_side(slot, 1 - victim);
        let pair = self.pairs[slot].take().unwrap();
        for side in pair.sides {
            let node = side.node;
            side.cq.destroy(&mut self.nodes[node].hca).unwrap();
        }
    }
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn soak_three_hcas_hundreds_of_qps_faults_churn_and_close_under_load() {
    let secs = env("UHCA_SOAK_SECS", 10);
    let qps = env("UHCA_SOAK_QPS", 300) as usize;
    let fabric = Fabric::new(LinkLayer::Ethernet);
    fabric.set_faults(FaultConfig::lossy(13, 5));
    let nodes = (0..HCAS).map(|i| node(&fabric, i as u8 + 1)).collect();
    let mut soak = Soak {
        fabric,
        nodes,
        pairs: (0..qps / 2).map(|_| None).collect(),
        out: HashMap::new(),
        next_wr: 1,
        rng: 0x2545_f491_4f6c_dd1d,
        ok: 0,
        errors: 0,
        pairs_made: 0,
    };
    for slot in 0..soak.pairs.len() {
        soak.make_pair(slot, 0);
    }
    let start = Instant::now();
    let run = Duration::from_secs(secs);
    // Memory samples: (seconds, live bytes, RSS KiB), one per tenth of the run.
    let mut samples: Vec<(f64, usize, u64)> = Vec::new();
    let mut epoch = 0u64;
    while start.elapsed() < run {
        epoch += 1;
        for slot in 0..soak.pairs.len() {
            soak.post(slot);
        }
        soak.fabric.run_for(1_000_000);
        for slot in 0..soak.pairs.len() {
            soak.poll_pair(slot);
            if soak.pairs[slot]
                .as_ref()
                .is_some_and(|p| p.dies_at <= epoch)
            {
                soak.kill_pair(slot);
                soak.make_pair(slot, epoch);
            }
        }
        // The model's own logs are observability for tests (bounded rings of 65,536
        // records each); empty them so they do not mask the driver's memory.
        for n in &soak.nodes {
            n.dev.clear_command_log();
            n.dev.take_doorbells();
        }
        let t = start.elapsed().as_secs_f64();
        if samples.len() < 10 && t >= samples.len() as f64 * secs as f64 / 10.0 {
            samples.push((t, uhca_test_support::live_bytes(), rss_kib()));
        }
    }
    samples.push((
        start.elapsed().as_secs_f64(),
        uhca_test_support::live_bytes(),
        rss_kib(),
    ));

    // Close one HCA with requests outstanding on its QPs: each completes exactly once,
    // flushed in software after the device is gone.
    for slot in 0..soak.pairs.len() {
        soak.post(slot);
    }
    soak.fabric.run_for(200_000);
    let victim = 0usize;
    let on_victim: Vec<(usize, usize)> = (0..soak.pairs.len())
        .flat_map(|slot| (0..2).map(move |s| (slot, s)))
        .filter(|&(slot, s)| {
            soak.pairs[slot]
                .as_ref()
                .is_some_and(|p| p.sides[s].node == victim)
        })
        .collect();
    let pending: u64 = on_victim
        .iter()
        .map(|&(slot, s)| soak.outstanding(slot, s))
        .sum();
    assert!(pending > 0, "requests outstanding when the HCA closes");
    let node = soak.nodes.remove(victim);
    let Node { hca, pd, mr, .. } = node;
    drop((pd, mr));
    let closed = Instant::now();
    // CQs and QPs are still alive: DESTROY_EQ is refused (busy), teardown goes on past it
    // and reports it.
    let close = hca.close();
    assert!(
        matches!(close, Ok(()) | Err(uhca_driver::Error::Command(_))),
        "{close:?}"
    );
    let (mut flushed, mut completed_after) = (0u64, 0u64);
    let mut wc = [WorkCompletion::default(); 16];
    for &(slot, s) in &on_victim {
        loop {
            let n = soak.pairs[slot].as_mut().unwrap().sides[s]
                .cq
                .poll(&mut wc)
                .expect("CQEs match what was posted");
            for w in &wc[..n] {
                // What the device finished before it went comes first, as it wrote it.
                assert!(
                    matches!(w.status, WcStatus::Success | WcStatus::WrFlushed),
                    "{w:?}"
                );
                soak.complete(slot, s, w);
                completed_after += 1;
                flushed += (w.status == WcStatus::WrFlushed) as u64;
            }
            if n == 0 {
                break;
            }
        }
        assert_eq!(soak.outstanding(slot, s), 0, "pair {slot} side {s}");
        // Nothing more, ever.
        let cq = &mut soak.pairs[slot].as_mut().unwrap().sides[s].cq;
        assert_eq!(cq.poll(&mut wc).unwrap(), 0);
    }
    let close_took = closed.elapsed();
    assert_eq!(
        completed_after, pending,
        "every outstanding request completed once"
    );
    assert!(flushed > 0);

    let (t0, live0, rss0) = samples[1.min(samples.len() - 1)];
    let (t1, live1, rss1) = *samples.last().unwrap();
    println!(
        "soak: {secs} s, {qps} QPs on {HCAS} HCAs, faults 5‰ drop/dup/reorder, {epoch} epochs, \
         {} pairs made, {} completions ({} ok, {} errors); closed an HCA with {pending} \
         requests outstanding: {completed_after} completed after the close ({flushed} \
         flushed in software) in {close_took:.2?}",
        soak.pairs_made,
        soak.ok + soak.errors,
        soak.ok,
        soak.errors
    );
    for (t, live, rss) in &samples {
        println!(
            "  t={t:6.1} s  live {:8.2} MiB  RSS {:8.2} MiB",
            *live as f64 / (1 << 20) as f64,
            *rss as f64 / 1024.0
        );
    }
    println!(
        "  live bytes from t={t0:.1} s to t={t1:.1} s: {:+.2} MiB; RSS {:+.2} MiB",
        (live1 as f64 - live0 as f64) / (1 << 20) as f64,
        (rss1 as f64 - rss0 as f64) / 1024.0
    );
    // Flat: after the first tenth, the held bytes grow by less than 1 MiB (no leak per
    // request or per object: the run made thousands of each).
    assert!(
        live1 < live0 + (1 << 20),
        "host memory grew from {live0} to {live1} bytes"
    );
    assert!(soak.ok > 1000, "traffic moved");
}

/// Closing an HCA with requests outstanding: each completes exactly once with a flush,
/// in software, once the device is gone (it used to leave them outstanding for ever).
#[test]
fn closing_an_hca_flushes_every_outstanding_request_once() {
    let fabric = Fabric::new(LinkLayer::Ethernet);
    let mut soak = Soak {
        nodes: (0..2).map(|i| node(&fabric, i as u8 + 1)).collect(),
        fabric,
        pairs: (0..4).map(|_| None).collect(),
        out: HashMap::new(),
        next_wr: 1,
        rng: 7,
        ok: 0,
        errors: 0,
        pairs_made: 0,
    };
    for slot in 0..4 {
        // Node 0 on side 0 (slot % HCAS with two nodes is 0 or 1; keep it simple).
        let (mut sa, qa) = soak.side(0);
        let (mut sb, qb) = soak.side(1);
        let (na, nb) = (qa.qpn(), qb.qpn());
        sa.qp = Some(soak.connect(0, qa, 1, nb));
        sb.qp = Some(soak.connect(1, qb, 0, na));
        soak.pairs[slot] = Some(Pair {
            sides: [sa, sb],
            dies_at: u64::MAX,
        });
    }
    // The device takes no more send doorbells: the SENDs stay outstanding.
    soak.nodes[0].dev.hold_send_doorbells(true);
    for slot in 0..4 {
        soak.post(slot);
    }
    let pending: u64 = (0..4).map(|slot| soak.outstanding(slot, 0)).sum();
    assert_eq!(pending, 4 * (DEPTH + DEPTH / 2));
    let node = soak.nodes.remove(0);
    let Node { hca, pd, mr, .. } = node;
    drop((pd, mr));
    let _ = hca.close();
    let mut wc = [WorkCompletion::default(); 64];
    let mut seen = 0;
    for slot in 0..4 {
        let n = soak.pairs[slot].as_mut().unwrap().sides[0]
            .cq
            .poll(&mut wc)
            .unwrap();
        for w in &wc[..n] {
            assert_eq!(w.status, WcStatus::WrFlushed);
            soak.complete(slot, 0, w);
        }
        seen += n as u64;
        let cq = &mut soak.pairs[slot].as_mut().unwrap().sides[0].cq;
        assert_eq!(cq.poll(&mut wc).unwrap(), 0, "once");
    }
    assert_eq!(seen, pending);
}
