//! The driver against a hostile device: a mock HCA behind `uhca_mock::HostilePlatform`,
//! which rewrites CQEs, EQEs, command outputs and BAR reads (`Lie`). One test per lie (what
//! the driver does, the typed error, the state after), then seeded runs of random lies
//! asserting what must hold whatever the device says: no panic, every wait bounded, nothing
//! outside the caller's buffers changed, every posted work request completed at most once.
//! The table of lies and outcomes is `driver/HOSTILE.md`.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use uhca_driver::addr::{AhAttr, Gid, Mac};
use uhca_driver::verbs::{
    BadCqe, Cq, InitAttr, Mr, Pd, PollError, Qp, QpCaps, QpInitAttr, Rc, RecvWr, RtrAttr, RtsAttr,
    SendOp, SendWr, Sge, WcStatus, WorkCompletion,
};
use uhca_driver::{Error, Hca, HcaConfig};
use uhca_fwif::consts::{AccessFlags, CmdOpcode, IbMtu};
use uhca_hal::init_seg::FatalHealth;
use uhca_hal::{DmaMem, Platform};
use uhca_mock::{Fabric, HostilePlatform, Lie, LinkLayer, MockConfig, MockHca};

mod common;

const ALL: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ);

/// Bytes of each node's memory region; buffers are posted in its middle, the rest are
/// guard bytes.
const MR_LEN: usize = 16384;
/// Where receive buffers start, and how long each is.
const RECV_AT: usize = 4096;
const RECV_LEN: usize = 512;
/// The guard pattern.
const GUARD: u8 = 0xa5;

struct Node<P: Platform> {
    hca: Hca<P>,
    pd: Pd<P>,
    cq: Cq<P>,
    mr: Mr<P>,
    mac: Mac,
    gid: Gid,
}

fn cfg() -> HcaConfig {
    common::cfg()
}

fn mock(n: u8) -> MockHca {
    MockHca::new(MockConfig {
        mac: [0x02, 0xc0, 0xff, 0xee, 0x00, n],
        init_delay_us: 1000,
        ..MockConfig::default()
    })
}

fn node<P: Platform>(p: P, n: u8) -> Result<Node<P>, Error> {
    let mac = Mac([0x02, 0xc0, 0xff, 0xee, 0x00, n]);
    let mut hca = Hca::open_with(p, cfg())?;
    let ip = IpAddr::V4(Ipv4Addr::new(192, 168, 0, n));
    let gid = hca.add_roce_gid(1, 0, ip, mac, None)?;
    let pd = hca.alloc_pd()?;
    let cq = hca.create_cq(63)?;
    let mut mr = hca.alloc_mr(&pd, MR_LEN, ALL)?;
    mr.mem_mut().write_bytes(0, &[GUARD; MR_LEN]);
    Ok(Node {
        hca,
        pd,
        cq,
        mr,
        mac,
        gid,
    })
}

fn path<P: Platform>(to: &Node<P>) -> AhAttr {
    AhAttr::RoceV2 {
        sgid_index: 0,
        dgid: to.gid,
        dmac: to.mac,
        udp_sport: 0xc000,
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
        sl: 0,
    }
}

fn rc_qp<P: Platform>(n: &mut Node<P>) -> Result<Qp<P, Rc>, Error> {
    let attr = QpInitAttr {
        send_cq: &n.cq,
        recv_cq: &n.cq,
        srq: None,
        cap: QpCaps {
            max_send_wr: 32,
            max_recv_wr: 32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        },
    };
    let mut qp = n.hca.create_qp::<Rc>(&n.pd, &attr)?;
    qp.to_init(
        &mut n.hca,
        InitAttr {
            access: ALL,
            ..InitAttr::default()
        },
    )?;
    Ok(qp)
}

type Rts<P> = Qp<P, Rc>;

fn connect<P: Platform, Q: Platform>(
    n: &mut Node<P>,
    qp: Qp<P, Rc>,
    peer: &Node<Q>,
    peer_qpn: u32,
) -> Result<Rts<P>, Error> {
    let mut qp = qp;
    qp.to_rtr(
        &mut n.hca,
        RtrAttr {
            path_mtu: IbMtu::Mtu1024,
            dest_qpn: peer_qpn,
            rq_psn: 0x100,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
            ah: path(peer),
        },
    )?;
    qp.to_rts(
        &mut n.hca,
        RtsAttr {
            sq_psn: 0x100,
            max_rd_atomic: 4,
            ..RtsAttr::default()
        },
    )?;
    Ok(qp)
}

/// A hostile node `a` and an honest node `b` on one RoCEv2 fabric, with a connected RC QP
/// each.
struct World {
    fabric: Fabric,
    lies: HostilePlatform,
    a: Node<HostilePlatform>,
    b: Node<uhca_mock::MockPlatform>,
    qa: Rts<HostilePlatform>,
    qb: Rts<uhca_mock::MockPlatform>,
}

fn world(seed: u64) -> World {
    let fabric = Fabric::new(LinkLayer::Ethernet);
    let (da, db) = (mock(1), mock(2));
    let lies = HostilePlatform::new(&da, seed);
    let mut a = node(lies.clone(), 1).expect("bring-up of a");
    let mut b = node(db.platform(), 2).expect("bring-up of b");
    fabric.attach(&da);
    fabric.attach(&db);
    let (qa, qb) = (rc_qp(&mut a).unwrap(), rc_qp(&mut b).unwrap());
    let (na, nb) = (qa.qpn(), qb.qpn());
    let qa = connect(&mut a, qa, &b, nb).unwrap();
    let qb = connect(&mut b, qb, &a, na).unwrap();
    World {
        fabric,
        lies,
        a,
        b,
        qa,
        qb,
    }
}

/// Posts `n` receives on `qp` (wr_id `first_wr`..), one `RECV_LEN` slot each of `node`'s
/// receive buffers; what the post answers is the test's to see in the completions.
fn post_recvs<P: Platform>(qp: &mut Rts<P>, node: &Node<P>, first_wr: u64, n: u64) {
    for i in 0..n {
        let sge = [Sge {
            addr: node.mr.iova() + (RECV_AT + i as usize * RECV_LEN) as u64,
            len: RECV_LEN as u32,
            lkey: node.mr.lkey(),
        }];
        let _ = qp.post_recv(&[RecvWr {
            wr_id: first_wr + i,
            sg_list: &sge,
        }]);
    }
}

/// Posts `n` SENDs on `qp` (wr_id `first_wr`..) from the start of `node`'s region, of
/// `len`, `len + 1`, ... bytes.
fn post_sends<P: Platform>(qp: &mut Rts<P>, node: &Node<P>, first_wr: u64, len: u32, n: u64) {
    for i in 0..n {
        let sge = [Sge {
            addr: node.mr.iova(),
            len: len + i as u32,
            lkey: node.mr.lkey(),
        }];
        let _ = qp.post_send(&[SendWr::new(first_wr + i, SendOp::Send, &sge)]);
    }
}

/// What a hostile node's CQ gave back.
#[derive(Debug, Default)]
struct Polled {
    wcs: Vec<WorkCompletion>,
    errors: Vec<PollError>,
}

impl World {
    /// `a` posts `recvs` receives (wr_id 100..) and `sends` SENDs to `b` (wr_id 1..);
    /// `b` posts as many receives and sends `recvs` SENDs to `a`.
    fn exchange(&mut self, sends: u64, recvs: u64) {
        self.exchange_from(0, sends, recvs);
    }

    /// [`World::exchange`] with every `wr_id` offset by `base`.
    fn exchange_from(&mut self, base: u64, sends: u64, recvs: u64) {
        post_recvs(&mut self.qa, &self.a, base + 100, recvs);
        post_recvs(&mut self.qb, &self.b, base + 300, sends);
        post_sends(&mut self.qb, &self.b, base + 400, 64, recvs);
        post_sends(&mut self.qa, &self.a, base + 1, 32, sends);
    }

    /// Moves the fabric and polls `a`'s CQ (through the wrapper) until `want` completions
    /// or errors came or `budget` passed; a bounded wait, whatever the device does.
    fn poll_a(&mut self, want: usize, budget: Duration) -> Polled {
        self.poll_a_rounds(want, budget, usize::MAX)
    }

    /// [`World::poll_a`], moving the fabric at most `rounds` times.
    fn poll_a_rounds(&mut self, want: usize, budget: Duration, rounds: usize) -> Polled {
        let mut got = Polled::default();
        let mut round = 0;
        // Guard slots on both sides of the slice the driver may write.
        let mut wc = [WorkCompletion {
            wr_id: 0xdead,
            ..WorkCompletion::default()
        }; 10];
        let start = Instant::now();
        while got.wcs.len() + got.errors.len() < want && start.elapsed() < budget && round < rounds
        {
            round += 1;
            self.fabric.run_until_idle_within(50_000_000);
            self.lies.tamper();
            match self.a.cq.poll(&mut wc[1..9]) {
                Ok(n) => got.wcs.extend_from_slice(&wc[1..1 + n]),
                Err(e) => {
                    got.wcs.extend_from_slice(&wc[1..1 + e.polled]);
                    got.errors.push(e);
                }
            }
            assert_eq!(wc[0].wr_id, 0xdead, "poll wrote before the caller's slice");
            assert_eq!(wc[9].wr_id, 0xdead, "poll wrote past the caller's slice");
        }
        got
    }

    /// Every guard byte of `a`'s memory region (outside the receive buffers) is intact.
    fn guards_intact(&self) -> bool {
        let mut buf = vec![0u8; MR_LEN];
        self.a.mr.mem().read_bytes(0, &mut buf);
        let (lo, hi) = (RECV_AT, RECV_AT + 8 * RECV_LEN);
        buf[..lo].iter().chain(&buf[hi..]).all(|&b| b == GUARD)
    }
}

/// No `wr_id` came back twice.
fn at_most_once(wcs: &[WorkCompletion]) {
    let mut seen = HashMap::new();
    for wc in wcs {
        *seen.entry(wc.wr_id).or_insert(0) += 1;
    }
    assert!(
        seen.values().all(|&n| n == 1),
        "a work request completed twice: {wcs:?}"
    );
}

/// Runs the exchange with `lie` armed and returns what `a`'s CQ gave.
fn cqe_lie(lie: Lie) -> (World, Polled) {
    let mut w = world(7);
    w.lies.arm(lie);
    w.exchange(2, 2);
    let got = w.poll_a(4, Duration::from_secs(2));
    assert!(
        w.guards_intact(),
        "{lie:?}: bytes outside the posted buffers changed"
    );
    at_most_once(&got.wcs);
    assert_eq!(w.lies.armed(), 0, "{lie:?} was told");
    (w, got)
}

/// The first poll error, if any.
fn first_error(got: &Polled) -> Option<BadCqe> {
    got.errors.first().map(|e| e.cqe)
}

/// Runs the exchange with `lie` armed (as `cqe_lie`), checks that exactly the requests
/// `completed` complete, and returns the refusal of the first CQE.
fn cqe_refused(lie: Lie, completed: &[u64]) -> (World, Polled, BadCqe) {
    let (w, got) = cqe_lie(lie);
    let Some(refused) = first_error(&got) else {
        panic!("{lie:?}: no CQE refused; completed {:?}", ids(&got));
    };
    assert_eq!(ids(&got), completed, "{lie:?}: what completed");
    (w, got, refused)
}

fn ids(got: &Polled) -> Vec<u64> {
    let mut v: Vec<u64> = got.wcs.iter().map(|w| w.wr_id).collect();
    v.sort_unstable();
    v
}

// ---- CQEs ------------------------------------------------------------------------------
// The exchange: `a` receives two SENDs (wr 100, 101) and sends two (wr 1, 2); the device
// writes the two receive CQEs first. The lie hits the first CQE.

#[test]
fn cqe_naming_an_unknown_qp_is_refused_and_the_sends_still_complete() {
    // The receive it replaced never completes; the sends do.
    let (w, got, refused) = cqe_refused(Lie::CqeUnknownQp, &[1, 2]);
    let told = w.lies.told()[0];
    assert!(matches!(refused, BadCqe::UnknownQp { qpn } if qpn >= 0xf0_0000));
    assert_eq!(
        told.qpn,
        w.qa.qpn(),
        "the lie replaced a CQE of the real QP"
    );
    // The receive queue stays out of step (the next receive CQE names WQE 1 while WQE 0
    // is the oldest).
    assert_eq!(
        got.errors[1].cqe,
        BadCqe::NotOutstanding {
            qpn: w.qa.qpn(),
            wqe_counter: 1
        }
    );
}

#[test]
fn cqe_with_a_wqe_counter_out_of_range_is_refused() {
    let (w, _, refused) = cqe_refused(Lie::CqeCounterOutOfRange, &[1, 2]);
    match refused {
        BadCqe::NotOutstanding { qpn, wqe_counter } => {
            assert_eq!(qpn, w.qa.qpn());
            assert!(wqe_counter >= 0x4000, "the counter the lie wrote");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_same_cqe_twice_completes_its_request_once() {
    // The first receive completes; its copy (in place of the second) is refused.
    let (w, _, refused) = cqe_refused(Lie::CqeDuplicate, &[1, 2, 100]);
    assert_eq!(
        refused,
        BadCqe::NotOutstanding {
            qpn: w.qa.qpn(),
            wqe_counter: 0
        }
    );
}

#[test]
fn cqe_reporting_another_opcode_than_posted_is_refused() {
    // A receive CQE turned into a requester CQE names WQE 0 of the send queue, where a
    // SEND is outstanding, but reports WQE opcode 0 (NOP): refused, the SEND stays
    // outstanding and completes with its own CQE.
    let (w, _, refused) = cqe_refused(Lie::CqeOpcodeMismatch, &[1, 2]);
    assert_eq!(
        refused,
        BadCqe::OpcodeMismatch {
            qpn: w.qa.qpn(),
            wqe_counter: 0,
            reported: 0
        }
    );
}

#[test]
fn cqe_with_a_reserved_opcode_is_refused() {
    let (w, _, refused) = cqe_refused(Lie::CqeReservedOpcode, &[1, 2]);
    assert_eq!(
        refused,
        BadCqe::UnexpectedOpcode {
            qpn: w.qa.qpn(),
            opcode: uhca_fwif::consts::CqeOpcode::from_raw(7)
        }
    );
}

#[test]
fn error_cqe_with_a_syndrome_outside_the_enum_is_a_typed_status_and_stops_the_qp() {
    let (mut w, got) = cqe_lie(Lie::CqeSyndromeOutOfEnum);
    assert!(got.errors.is_empty());
    let first = got.wcs.iter().find(|c| c.wr_id == 100).unwrap();
    assert_eq!(
        first.status,
        WcStatus::from_syndrome(uhca_fwif::consts::CqeSyndrome::from_raw(0xee))
    );
    assert_ne!(first.status, WcStatus::Success);
    // The driver takes the device's word that the QP is in error: posting is refused.
    let sge = [w.a.mr.sge(0, 8).unwrap()];
    assert!(
        w.qa.post_send(&[SendWr::new(9, SendOp::Send, &sge)])
            .is_err()
    );
}

#[test]
fn cqe_owner_bit_flapping_delivers_the_cqe_once_after_it_settles() {
    let mut w = world(7);
    w.lies.arm(Lie::CqeOwnerFlap);
    w.exchange(2, 2);
    w.fabric.run_until_idle();
    w.lies.tamper();
    let mut wc = [WorkCompletion::default(); 8];
    assert_eq!(
        w.a.cq.poll(&mut wc).unwrap(),
        0,
        "a CQE owned by hardware is not read (nor any after it)"
    );
    let got = w.poll_a(4, Duration::from_secs(2));
    assert!(got.errors.is_empty(), "{:?}", got.errors);
    assert_eq!(ids(&got), [1, 2, 100, 101]);
    at_most_once(&got.wcs);
}

#[test]
fn byte_count_beyond_the_posted_buffer_is_refused() {
    // The receive WQE can take 512 bytes; the CQE claims about 4 GiB: refused before the
    // WQE is taken (it used to be reported as received). The device's own writes stayed
    // inside the posted buffer (guards checked by `cqe_lie`).
    let (w, got, refused) = cqe_refused(Lie::CqeByteCountTooLarge, &[1, 2]);
    match refused {
        BadCqe::ByteCountTooLarge { qpn, byte_cnt } => {
            assert_eq!(qpn, w.qa.qpn());
            assert!(byte_cnt >= 0xffff_f000);
            assert_eq!(w.qa.qpn(), w.lies.told()[0].qpn);
        }
        other => panic!("{other:?}"),
    }
    assert!(got.wcs.iter().all(|c| c.byte_len <= RECV_LEN as u32));
}

// ---- EQEs ------------------------------------------------------------------------------
// A real event (the port goes down) is rewritten before the driver serves the EQ.

fn eqe_lie(lie: Lie) -> (World, uhca_driver::Result<()>) {
    let mut w = world(7);
    w.lies.arm(lie);
    w.lies.hca().set_port_up(false);
    w.lies.tamper();
    let r = w.a.hca.process_events();
    assert_eq!(w.lies.told().len(), 1, "{lie:?} was told");
    (w, r)
}

/// [`eqe_lie`] for a lie the driver is to pass over: serving the EQ succeeds.
fn eqe_passed_over(lie: Lie) -> World {
    let (w, r) = eqe_lie(lie);
    if let Err(e) = r {
        panic!("{lie:?}: serving the EQ failed: {e:?}");
    }
    w
}

#[test]
fn eqe_of_an_unknown_type_is_ignored() {
    let mut w = eqe_passed_over(Lie::EqeUnknownType);
    assert_eq!(w.a.hca.next_event(), None);
    assert!(w.a.hca.create_cq(7).is_ok(), "the HCA works on");
}

#[test]
fn completion_event_for_a_cq_that_does_not_exist_is_dropped_and_counted() {
    let mut w = eqe_passed_over(Lie::EqeCompUnknownCq);
    assert_eq!(w.a.hca.next_completion_event(), None);
    assert_eq!(w.a.hca.unknown_cq_events(), 1);
}

#[test]
fn cq_error_event_for_a_cq_that_does_not_exist_is_dropped_and_counted() {
    let mut w = eqe_passed_over(Lie::EqeCqErrorUnknownCq);
    assert_eq!(w.a.hca.next_event(), None);
    assert_eq!(w.a.hca.unknown_cq_events(), 1);
}

#[test]
fn bogus_completion_events_do_not_crowd_out_a_real_one() {
    // 80 completion events naming CQs that do not exist, then a real one: the real one
    // reaches the user (the driver used to queue the bogus ones, 64 distinct CQs at most,
    // and drop the real event behind them).
    let mut w = world(7);
    let dev = w.lies.hca();
    for _ in 0..8 {
        for _ in 0..10 {
            w.lies.arm(Lie::EqeCompUnknownCq);
            dev.set_port_up(false);
        }
        w.lies.tamper();
        w.a.hca.process_events().unwrap();
        dev.set_port_up(true);
        w.a.hca.process_events().unwrap();
    }
    assert_eq!(w.a.hca.unknown_cq_events(), 80);
    w.a.cq.req_notify(false);
    w.exchange(0, 1);
    let got = w.poll_a(1, Duration::from_secs(2));
    assert_eq!(ids(&got), [100]);
    w.a.hca.process_events().unwrap();
    assert!(
        w.a.cq.take_event(&mut w.a.hca),
        "the real completion event came through"
    );
    assert_eq!(w.a.hca.completion_events_dropped(), 0);
}

#[test]
fn page_request_beyond_the_budget_is_refused_before_anything_is_allocated() {
    let (mut w, r) = eqe_lie(Lie::EqePageRequestHuge);
    let held = w.a.hca.firmware_pages();
    assert_eq!(
        r,
        Err(Error::PageBudget {
            requested: i32::MAX as u32,
            held: held as u32,
            budget: uhca_driver::pages::MAX_FIRMWARE_PAGES
        })
    );
    assert!(w.a.hca.create_cq(7).is_ok(), "the HCA works on");
}

#[test]
fn page_return_of_two_billion_pages_is_a_command_error() {
    let (mut w, r) = eqe_lie(Lie::EqePageReturnHuge);
    let held = w.a.hca.firmware_pages();
    // The firmware (which never asked) refuses the MANAGE_PAGES TAKE the driver sends.
    assert!(matches!(r, Err(Error::Command(_))), "{r:?}");
    assert_eq!(w.a.hca.firmware_pages(), held);
    assert!(w.a.hca.create_cq(7).is_ok(), "the HCA works on");
}

#[test]
fn a_configured_page_budget_is_kept_and_a_refused_request_asked_again_does_not_hang() {
    // Boot (8) and init (32) pages fit a budget of 40; the 16 regular pages the firmware
    // asks for before its first CQ do not. The model asks again at once after each "can't
    // give": the driver serves at most one lap of its EQ per look (it used to loop there
    // for ever), so the command ends within its timeout. Run on a thread with a deadline.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let dev = mock(1);
        let mut hca = Hca::open_with(
            dev.platform(),
            HcaConfig {
                max_firmware_pages: 40,
                ..cfg()
            },
        )
        .unwrap();
        let held = hca.firmware_pages();
        let r = hca.create_cq(7).map(|c| c.cqn());
        let _ = tx.send((held, r, hca.firmware_pages()));
    });
    let (held, r, after) = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("create_cq returned (no endless event loop)");
    assert_eq!(held, 40);
    assert_eq!(
        r,
        Err(Error::PageBudget {
            requested: 16,
            held: 40,
            budget: 40
        })
    );
    assert_eq!(after, 40);
}

// ---- command outputs -------------------------------------------------------------------

/// Brings up a mock HCA behind the wrapper with `lie` armed for `op`, then creates a CQ
/// and a PD.
fn cmd_lie(lie: Lie, op: CmdOpcode) -> (HostilePlatform, uhca_driver::Result<(u32, u32)>) {
    let dev = mock(1);
    let lies = HostilePlatform::new(&dev, 3);
    lies.arm_for(lie, Some(op));
    let start = Instant::now();
    let r = Hca::open_with(lies.clone(), cfg()).and_then(|mut h| {
        let cq = h.create_cq(7)?;
        let pd = h.alloc_pd()?;
        Ok((cq.cqn(), pd.pdn()))
    });
    assert!(start.elapsed() < Duration::from_secs(5), "bounded");
    assert_eq!(lies.armed(), 0, "{lie:?} was told");
    (lies, r)
}

#[test]
fn command_status_outside_the_enum_is_a_typed_command_error() {
    let (_, r) = cmd_lie(Lie::CmdStatusOutOfEnum, CmdOpcode::CreateCq);
    match r {
        Err(Error::Command(uhca_hal::cmdq::CmdError::Status { opcode, status, .. })) => {
            assert_eq!(opcode, CmdOpcode::CreateCq);
            assert_eq!(status.raw(), 0x7f);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn command_delivery_status_outside_the_enum_is_a_typed_delivery_error() {
    let (_, r) = cmd_lie(Lie::CmdDeliveryStatusGarbage, CmdOpcode::CreateCq);
    assert!(
        matches!(
            r,
            Err(Error::Command(uhca_hal::cmdq::CmdError::Delivery {
                opcode: CmdOpcode::CreateCq,
                ..
            }))
        ),
        "{r:?}"
    );
}

#[test]
fn capabilities_all_ones_fail_bring_up_with_a_typed_error() {
    // Every log_max_* at 31: the driver copies the capabilities it sets back to the
    // firmware, which refuses them (SET_HCA_CAP, bad parameter); no panic, no allocation
    // sized from them.
    let (_, r) = cmd_lie(Lie::CmdCapsAllOnes, CmdOpcode::QueryHcaCap);
    assert!(matches!(r, Err(Error::Command(_))), "{r:?}");
}

#[test]
fn query_pages_for_two_billion_pages_fails_bring_up_within_the_budget() {
    let (_, r) = cmd_lie(Lie::CmdQueryPagesHuge, CmdOpcode::QueryPages);
    assert_eq!(
        r,
        Err(Error::PageBudget {
            requested: i32::MAX as u32,
            held: 0,
            budget: uhca_driver::pages::MAX_FIRMWARE_PAGES
        })
    );
}

#[test]
fn random_output_bytes_of_every_bring_up_command_give_a_typed_error_or_work() {
    for op in [
        CmdOpcode::QueryHcaCap,
        CmdOpcode::QueryPages,
        CmdOpcode::ManagePages,
        CmdOpcode::QueryIssi,
        CmdOpcode::SetIssi,
        CmdOpcode::EnableHca,
        CmdOpcode::InitHca,
        CmdOpcode::AllocUar,
        CmdOpcode::CreateEq,
        CmdOpcode::CreateCq,
        CmdOpcode::AllocPd,
    ] {
        let (lies, r) = cmd_lie(Lie::CmdOutputGarbage, op);
        assert_eq!(lies.told().len(), 1, "{op:?}");
        let _ = r; // Either is fine; neither may panic or hang.
    }
}

#[test]
fn an_object_number_already_in_use_is_taken_as_given() {
    // CREATE_QP answers the number of the QP that exists: the driver cannot tell (HOSTILE.md);
    // the new QP shadows the old one in the CQ's map, and completions of the old one are
    // refused or mismatched, never completed twice.
    let mut w = world(7);
    w.lies
        .arm_for(Lie::CmdExistingNumber, Some(CmdOpcode::CreateQp));
    let q2 = rc_qp(&mut w.a);
    assert_eq!(w.lies.told().len(), 1);
    if let Ok(q2) = &q2 {
        assert_eq!(q2.qpn(), w.qa.qpn());
    }
    w.exchange(2, 2);
    let got = w.poll_a(4, Duration::from_millis(500));
    at_most_once(&got.wcs);
    assert!(w.guards_intact());
}

// ---- the initialization segment and the BAR --------------------------------------------

type Health = Vec<uhca_driver::Result<uhca_hal::init_seg::HealthStatus>>;

/// Polls `a`'s health four times a second of model time apart.
fn health(w: &mut World) -> Health {
    (0..4)
        .map(|_| {
            w.lies.hca().advance_us(1_000_000);
            w.a.hca.poll_health()
        })
        .collect()
}

/// A world with `lie` armed and the four health polls it gave.
fn health_lie(lie: Lie) -> (World, Health) {
    let mut w = world(7);
    w.lies.arm(lie);
    let h = health(&mut w);
    (w, h)
}

#[test]
fn health_syndrome_outside_the_list_is_fatal_and_named() {
    let (mut w, h) = health_lie(Lie::HealthSyndromeGarbage);
    let fatal = Error::Fatal(FatalHealth::RecoveryRequired {
        synd: uhca_hal::init_seg::HealthSyndrome(0xee),
        ext_synd: 0,
    });
    assert_eq!(h[0], Err(fatal));
    assert!(
        fatal.to_string().contains("unknown health syndrome (0xee)"),
        "{fatal}"
    );
    assert_eq!(w.a.hca.create_cq(7).map(|c| c.cqn()), Err(fatal));
}

#[test]
fn health_counter_stuck_is_fatal_after_three_polls() {
    let (_, h) = health_lie(Lie::HealthCounterStuck);
    assert!(h[..3].iter().all(|r| r.is_ok()), "{h:?}");
    assert!(matches!(
        h[3],
        Err(Error::Fatal(FatalHealth::HealthCounterStuck { .. }))
    ));
}

#[test]
fn init_segment_changing_mid_run_is_ignored_after_bring_up() {
    // The firmware revision and `initializing` are read at bring-up only.
    let mut w = world(7);
    let fw = w.a.hca.info().fw_version;
    w.lies.arm(Lie::InitSegChanges);
    let h = health(&mut w);
    assert!(h.iter().all(|r| r.is_ok()), "{h:?}");
    assert!(w.a.hca.create_cq(7).is_ok());
    assert_eq!(w.a.hca.info().fw_version, fw);
    w.exchange(2, 2);
    assert_eq!(ids(&w.poll_a(4, Duration::from_secs(2))), [1, 2, 100, 101]);
}

#[test]
fn surprise_removal_mid_datapath_fails_fatal_and_close_is_bounded() {
    let mut w = world(7);
    w.exchange(2, 2);
    w.lies.arm(Lie::SurpriseRemoval);
    let start = Instant::now();
    assert_eq!(
        w.a.hca.poll_health(),
        Err(Error::Fatal(FatalHealth::PciNotResponding))
    );
    assert_eq!(
        w.a.hca.create_cq(7).map(|c| c.cqn()),
        Err(Error::Fatal(FatalHealth::PciNotResponding))
    );
    // Posting still works (doorbells go nowhere); what the device had fetched before
    // completes at most once; the rest never does, and polling stays bounded.
    let got = w.poll_a(4, Duration::from_millis(300));
    at_most_once(&got.wcs);
    assert!(w.guards_intact());
    let World { a, qa, .. } = w;
    drop(qa);
    let Node {
        hca, cq, mr, pd, ..
    } = a;
    drop((cq, mr, pd));
    assert_eq!(
        hca.close(),
        Err(Error::Fatal(FatalHealth::PciNotResponding))
    );
    assert!(start.elapsed() < Duration::from_secs(5), "bounded");
}

// ---- seeded runs -----------------------------------------------------------------------

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// What one seeded run left behind.
enum After {
    /// The world can take another run.
    Usable,
    /// The hostile HCA is dead or its QP could not be rebuilt: build a new world.
    Rebuild,
}

/// One seeded run on `w`: new QPs, random lies armed, a random exchange, `a`'s CQ polled
/// for a bounded number of rounds. Panics on any broken promise.
fn seeded_run(
    w: &mut World,
    seed: u64,
    completed: &mut HashMap<u64, u32>,
    told: &mut HashMap<Lie, usize>,
) -> After {
    let mut rng = Rng(seed);
    let told_before = w.lies.told().len();
    let after = seeded_run_inner(w, seed, &mut rng, completed);
    for t in &w.lies.told()[told_before..] {
        *told.entry(t.lie).or_insert(0) += 1;
    }
    after
}

fn seeded_run_inner(
    w: &mut World,
    seed: u64,
    rng: &mut Rng,
    completed: &mut HashMap<u64, u32>,
) -> After {
    // Lies told to the commands of this run's QP set-up (or any later command).
    let lies_cmd = [
        Lie::CmdStatusOutOfEnum,
        Lie::CmdDeliveryStatusGarbage,
        Lie::CmdOutputGarbage,
        Lie::CmdExistingNumber,
    ];
    let cqe_eqe: Vec<Lie> = Lie::ALL
        .iter()
        .copied()
        .filter(|l| l.is_cqe() || l.is_eqe())
        .collect();
    let bar = [
        Lie::HealthSyndromeGarbage,
        Lie::HealthCounterStuck,
        Lie::InitSegChanges,
        Lie::SurpriseRemoval,
    ];
    w.lies.disarm();
    if rng.below(8) == 0 {
        w.lies
            .arm(lies_cmd[rng.below(lies_cmd.len() as u64) as usize]);
    }
    // New QPs for this run (the old ones' leftovers in the CQs are dropped by the driver).
    let qa = match rc_qp(&mut w.a) {
        Ok(q) => q,
        Err(_) => {
            w.lies.disarm();
            return After::Usable;
        }
    };
    let qb = rc_qp(&mut w.b).expect("the honest side");
    let (na, nb) = (qa.qpn(), qb.qpn());
    let qa = match connect(&mut w.a, qa, &w.b, nb) {
        Ok(q) => q,
        Err(_) => {
            w.lies.disarm();
            return After::Usable;
        }
    };
    let qb = connect(&mut w.b, qb, &w.a, na).expect("the honest side");
    let trace = std::env::var("UHCA_HOSTILE_TRACE").is_ok();
    let t0 = Instant::now();
    let old_a = std::mem::replace(&mut w.qa, qa);
    let old_b = std::mem::replace(&mut w.qb, qb);
    let _ = old_a.destroy(&mut w.a.hca);
    let _ = old_b.destroy(&mut w.b.hca);
    drain_b(w);
    if trace {
        eprintln!("seed {seed}: swap {:?}", t0.elapsed());
    }

    for _ in 0..rng.below(3) + 1 {
        w.lies
            .arm(cqe_eqe[rng.below(cqe_eqe.len() as u64) as usize]);
    }
    let bar_lie = rng.below(40) == 0;
    if bar_lie {
        w.lies.arm(bar[rng.below(bar.len() as u64) as usize]);
    }
    let (sends, recvs) = (rng.below(5), rng.below(5));
    let base = seed << 16;
    w.exchange_from(base, sends, recvs);
    if rng.below(4) == 0 {
        // An event for the EQE lies to rewrite.
        let dev = w.lies.hca();
        dev.set_port_up(false);
        dev.set_port_up(true);
    }
    let got = w.poll_a_rounds(
        (sends + recvs) as usize,
        Duration::from_millis(500),
        20 + rng.below(20) as usize,
    );
    if std::env::var("UHCA_HOSTILE_TRACE").is_ok() {
        eprintln!("seed {seed}: told {:?}", w.lies.told().last());
    }
    if trace {
        eprintln!("seed {seed}: polled {:?}", t0.elapsed());
    }
    let events = w.a.hca.process_events();
    while w.a.hca.next_event().is_some() {}
    while w.a.hca.next_completion_event().is_some() {}
    for wc in &got.wcs {
        let n = completed.entry(wc.wr_id).or_insert(0);
        *n += 1;
        assert_eq!(*n, 1, "seed {seed}: wr_id {:#x} completed twice", wc.wr_id);
        assert!(
            wc.wr_id >> 16 == seed,
            "seed {seed}: wr_id {:#x} was not posted in this run: {wc:?}, lies {:?}",
            wc.wr_id,
            w.lies.told()
        );
        let i = wc.wr_id & 0xffff;
        assert!(
            (1..=sends).contains(&i) || (100..100 + recvs).contains(&i),
            "seed {seed}: wr_id {:#x} was never posted",
            wc.wr_id
        );
    }
    assert!(
        w.guards_intact(),
        "seed {seed}: bytes outside the buffers changed"
    );
    drain_b(w);
    if bar_lie || matches!(events, Err(Error::Fatal(_))) {
        After::Rebuild
    } else {
        After::Usable
    }
}

/// Drains the honest node's CQ (its completions are not under test).
fn drain_b(w: &mut World) {
    let mut wc = [WorkCompletion::default(); 16];
    for _ in 0..64 {
        if let Ok(0) = w.b.cq.poll(&mut wc) {
            return;
        }
    }
}

/// Thousands of short runs with random lies (`UHCA_HOSTILE_RUNS`, 2,000 by default): no
/// panic, every run bounded in time, nothing outside the caller's buffers changed, every
/// posted work request completed at most once. A failure names its seed.
#[test]
fn seeded_runs_of_random_lies_break_no_promise() {
    let runs: u64 = std::env::var("UHCA_HOSTILE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let start = Instant::now();
    let mut w: Option<World> = None;
    let mut completed = HashMap::new();
    let mut told = HashMap::new();
    let (mut worlds, mut slowest) = (0, Duration::ZERO);
    for seed in 1..=runs {
        let world_now = w.get_or_insert_with(|| {
            worlds += 1;
            world(seed)
        });
        let t = Instant::now();
        let after = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            seeded_run(world_now, seed, &mut completed, &mut told)
        }));
        let took = t.elapsed();
        slowest = slowest.max(took);
        if took > Duration::from_millis(300) {
            eprintln!("seed {seed}: {took:?}");
        }
        match after {
            Ok(After::Usable) => {}
            Ok(After::Rebuild) => w = None,
            Err(p) => {
                eprintln!("seed {seed} panicked");
                std::panic::resume_unwind(p);
            }
        }
        // Generous for a loaded CI machine: the slowest run here takes about 1.5 s.
        assert!(took < Duration::from_secs(15), "seed {seed} took {took:?}");
    }
    eprintln!(
        "{runs} seeded runs in {:?} ({worlds} worlds, slowest run {slowest:?}, {} completions)",
        start.elapsed(),
        completed.len()
    );
    let mut told: Vec<_> = told.into_iter().collect();
    told.sort_by_key(|&(l, _)| format!("{l:?}"));
    eprintln!("lies told: {told:?}");
    // Every CQE lie and the EQE lies were told at least once (the seeds reach them).
    if runs >= 1000 {
        for lie in Lie::ALL.iter().filter(|l| l.is_cqe()) {
            assert!(told.iter().any(|(l, _)| l == lie), "{lie:?} never told");
        }
    }
}
