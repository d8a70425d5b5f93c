//! The communication manager (`uhca_driver::cm`): two mock HCAs connect an RC QP each
//! through REQ, REP and RTU on their QP1s, with nothing exchanged outside the fabric but
//! where the peer's port is, and ping-pong a checked payload over the connection; a lost
//! REP is recovered by the REQ's resend, a REQ for a service nobody listens on is refused
//! with a REJ that the requester sees as a typed error, and a REQ nobody answers ends in
//! a timeout after the retries.

mod common;

use common::{Node, rc_qp_on};
use uhca_driver::addr::Endpoint;
use uhca_driver::cm::msg::RejReason;
use uhca_driver::cm::{Cm, CmConfig, CmError, ConnState, Connection, Waiting};
use uhca_driver::verbs::{
    Gsi, InitAttr, Qp, QpCaps, QpInitAttr, Rc, RecvWr, SendOp, SendWr, UdDest, WcOpcode, WcStatus,
    WorkCompletion,
};
use uhca_fwif::consts::{IbMtu, QpState};
use uhca_mock::{Fabric, FaultConfig, LinkLayer};

const SERVICE: u64 = 0x0000_0000_0106_4e21;
const TIMEOUT_NS: u64 = 10_000_000; // 10 ms between resends (virtual time)

fn cfg() -> CmConfig {
    CmConfig {
        response_timeout_ns: TIMEOUT_NS,
        max_retries: 3,
        ..CmConfig::default()
    }
}

/// A node with its CM and an RC QP in RESET.
struct Side {
    n: Node,
    cm: Cm<common::P>,
    qp: Qp<common::P, Rc>,
}

fn side(fabric: &Fabric, k: u8) -> Side {
    side_with(fabric, k, cfg())
}

fn side_with(fabric: &Fabric, k: u8, cfg: CmConfig) -> Side {
    let mut n = common::node(fabric, k);
    let cm = Cm::new(&mut n.hca, &n.pd, cfg).expect("the CM's QP1 and slots");
    let attr = QpInitAttr {
        send_cq: &n.cq,
        recv_cq: &n.cq,
        srq: None,
        cap: common::caps(),
    };
    let qp = n.hca.create_qp::<Rc>(&n.pd, &attr).unwrap();
    Side { n, cm, qp }
}

/// One step of one side: its CM reads and answers; then the fabric delivers.
fn step(fabric: &Fabric, s: &mut Side, c: &mut Connection) -> Result<bool, CmError> {
    let r = s.cm.progress(&mut s.n.hca, c, &mut s.qp);
    common::run(fabric);
    r
}

/// Steps both sides until both are established (or one fails), advancing both clocks by
/// 1 ms a round; at most `rounds` rounds.
fn drive(
    fabric: &Fabric,
    a: &mut Side,
    ca: &mut Connection,
    b: &mut Side,
    cb: &mut Connection,
    rounds: usize,
) -> (Result<bool, CmError>, Result<bool, CmError>) {
    let (mut ra, mut rb) = (Ok(false), Ok(false));
    for _ in 0..rounds {
        if !matches!(ra, Ok(false)) && !matches!(rb, Ok(false)) {
            break;
        }
        if ra == Ok(false) || ra == Ok(true) {
            ra = step(fabric, a, ca);
        }
        if rb == Ok(false) || rb == Ok(true) {
            rb = step(fabric, b, cb);
        }
        if ra == Ok(true) && rb == Ok(true) {
            break;
        }
        for s in [&*a, &*b] {
            uhca_hal::Clock::delay_us(s.n.hca.platform(), 1000);
        }
    }
    (ra, rb)
}

/// The client SENDs `msg` on its connected QP; the server receives it, checks it and sends
/// it back reversed; the client checks the answer.
fn ping_pong(fabric: &Fabric, client: &mut Side, server: &mut Side, msg: &[u8]) {
    let len = msg.len();
    server
        .qp
        .post_recv(&[RecvWr::new(10, &[server.n.mr.sge(0, 256).unwrap()])])
        .unwrap();
    client
        .qp
        .post_recv(&[RecvWr::new(11, &[client.n.mr.sge(4096, 256).unwrap()])])
        .unwrap();
    client.n.mr.mem_mut().write_bytes(0, msg);
    let sge = [client.n.mr.sge(0, len).unwrap()];
    client
        .qp
        .post_send(&[SendWr::new(1, SendOp::Send, &sge)])
        .unwrap();
    common::run(fabric);
    let got = recv_one(&mut server.n, 10, len);
    assert_eq!(got, msg, "the server received what the client sent");
    let back: Vec<u8> = got.iter().rev().copied().collect();
    server.n.mr.mem_mut().write_bytes(1024, &back);
    let sge = [server.n.mr.sge(1024, len).unwrap()];
    server
        .qp
        .post_send(&[SendWr::new(2, SendOp::Send, &sge)])
        .unwrap();
    common::run(fabric);
    let wcs = common::poll(&mut client.n);
    let recv = wcs
        .iter()
        .find(|w| w.opcode == WcOpcode::Recv)
        .expect("the answer");
    assert_eq!(recv.status, WcStatus::Success);
    assert_eq!(recv.byte_len as usize, len);
    let mut answer = vec![0; len];
    client.n.mr.mem().read_bytes(4096, &mut answer);
    assert_eq!(answer, back, "the client received the server's answer");
}

fn recv_one(n: &mut Node, wr_id: u64, len: usize) -> Vec<u8> {
    let wcs = common::poll(n);
    let w = wcs
        .iter()
        .find(|w| w.wr_id == wr_id)
        .unwrap_or_else(|| panic!("receive {wr_id} completed: {wcs:?}"));
    assert_eq!(w.status, WcStatus::Success);
    assert_eq!(w.byte_len as usize, len);
    let mut got = vec![0; len];
    n.mr.mem().read_bytes(0, &mut got);
    got
}

use uhca_hal::Clock;
use uhca_hal::dma::DmaMem;

fn connects_and_ping_pongs(link: LinkLayer) -> (Fabric, Side, Side, Connection, Connection) {
    let fabric = Fabric::new(link);
    let (mut a, mut b) = (side(&fabric, 1), side(&fabric, 2));
    let peer: Endpoint = b.cm.endpoint();
    let mut cb =
        b.cm.listen(SERVICE, b"rkey and address of the server")
            .unwrap();
    let mut ca =
        a.cm.connect(
            &mut a.n.hca,
            &mut a.qp,
            &peer,
            SERVICE,
            b"hello from the client",
        )
        .unwrap();
    assert_eq!(ca.state(), ConnState::ReqSent);
    assert_eq!(a.qp.state(), QpState::Init);
    common::run(&fabric);
    let (ra, rb) = drive(&fabric, &mut a, &mut ca, &mut b, &mut cb, 20);
    assert_eq!((ra, rb), (Ok(true), Ok(true)));
    assert_eq!((a.qp.state(), b.qp.state()), (QpState::Rts, QpState::Rts));
    // Each side learnt the other's QP, PSN and private data from the MADs alone.
    assert_eq!(ca.remote_qpn(), b.qp.qpn());
    assert_eq!(cb.remote_qpn(), a.qp.qpn());
    assert_eq!(ca.psns(), (cb.psns().1, cb.psns().0));
    assert_eq!(ca.remote_comm_id(), cb.local_comm_id());
    assert_eq!(&cb.private_data()[..21], b"hello from the client");
    assert_eq!(&ca.private_data()[..30], b"rkey and address of the server");
    assert_eq!(cb.path_mtu(), IbMtu::Mtu1024);
    // One REQ, one REP, one RTU: nothing resent, nothing dropped.
    let (sa, sb) = (a.cm.stats(), b.cm.stats());
    assert_eq!((sa.sent, sa.received, sa.resent), (2, 1, 0), "{sa:?}");
    assert_eq!((sb.sent, sb.received, sb.resent), (1, 2, 0), "{sb:?}");
    ping_pong(&fabric, &mut a, &mut b, b"ping over a CM-made connection");
    (fabric, a, b, ca, cb)
}

#[test]
fn two_hcas_connect_rc_qps_through_the_cm_on_infiniband_and_ping_pong() {
    connects_and_ping_pongs(LinkLayer::InfiniBand);
}

#[test]
fn two_hcas_connect_rc_qps_through_the_cm_on_rocev2_and_ping_pong() {
    connects_and_ping_pongs(LinkLayer::Ethernet);
}

#[test]
fn a_lost_rep_is_recovered_by_the_resent_req_and_a_lost_rtu_by_the_resent_rep() {
    let fabric = Fabric::new(LinkLayer::InfiniBand);
    // The server waits 100 times longer than the client before it resends on its own, so
    // that only the client's resend can bring the REP back in the first part.
    const SERVER_TIMEOUT_NS: u64 = 100 * TIMEOUT_NS;
    let slow = CmConfig {
        response_timeout_ns: SERVER_TIMEOUT_NS,
        ..cfg()
    };
    let (mut a, mut b) = (side(&fabric, 1), side_with(&fabric, 2, slow));
    let peer = b.cm.endpoint();
    let mut cb = b.cm.listen(SERVICE, &[]).unwrap();
    let mut ca =
        a.cm.connect(&mut a.n.hca, &mut a.qp, &peer, SERVICE, &[])
            .unwrap();
    common::run(&fabric);
    // The server answers the REQ; its REP is lost on the fabric.
    fabric.set_faults(FaultConfig::drop_all());
    assert_eq!(step(&fabric, &mut b, &mut cb), Ok(false));
    fabric.set_faults(FaultConfig::default());
    assert_eq!(cb.state(), ConnState::RepSent);
    assert_eq!(step(&fabric, &mut a, &mut ca), Ok(false), "no REP arrived");
    // The client's clock passes its response timeout: the REQ goes again, the server
    // sees a duplicate and sends its REP again.
    uhca_hal::Clock::delay_us(a.n.hca.platform(), TIMEOUT_NS as u32 / 1000 + 1);
    assert_eq!(step(&fabric, &mut a, &mut ca), Ok(false));
    assert_eq!(ca.tries(), 2, "the REQ was sent twice");
    // This time the client's RTU is lost: the server's REP goes again after its timeout
    // and the established client answers it with the RTU again.
    assert_eq!(step(&fabric, &mut b, &mut cb), Ok(false));
    assert_eq!(
        b.cm.stats().resent,
        1,
        "the duplicate REQ was answered with the REP"
    );
    fabric.set_faults(FaultConfig::drop_all());
    assert_eq!(step(&fabric, &mut a, &mut ca), Ok(true));
    fabric.set_faults(FaultConfig::default());
    assert_eq!(step(&fabric, &mut b, &mut cb), Ok(false), "no RTU arrived");
    uhca_hal::Clock::delay_us(b.n.hca.platform(), SERVER_TIMEOUT_NS as u32 / 1000 + 1);
    assert_eq!(step(&fabric, &mut b, &mut cb), Ok(false));
    assert_eq!(step(&fabric, &mut a, &mut ca), Ok(true));
    assert_eq!(step(&fabric, &mut b, &mut cb), Ok(true));
    let (sa, sb) = (a.cm.stats(), b.cm.stats());
    assert_eq!(sa.resent, 2, "REQ and RTU resent: {sa:?}");
    assert_eq!(
        sb.resent, 2,
        "REP resent for the duplicate REQ and after the timeout: {sb:?}"
    );
    ping_pong(&fabric, &mut a, &mut b, b"after a lost REP and a lost RTU");
}

#[test]
fn a_req_for_a_service_nobody_listens_on_is_rejected_with_a_typed_error() {
    let fabric = Fabric::new(LinkLayer::Ethernet);
    let (mut a, mut b) = (side(&fabric, 1), side(&fabric, 2));
    let peer = b.cm.endpoint();
    let mut cb = b.cm.listen(SERVICE, &[]).unwrap();
    let mut ca =
        a.cm.connect(&mut a.n.hca, &mut a.qp, &peer, SERVICE + 1, &[])
            .unwrap();
    common::run(&fabric);
    assert_eq!(step(&fabric, &mut b, &mut cb), Ok(false));
    assert_eq!(
        cb.state(),
        ConnState::Listening,
        "the listener is untouched"
    );
    assert_eq!(b.cm.stats().rejects_sent, 1);
    assert_eq!(b.qp.state(), QpState::Rst, "the server's QP was not moved");
    let e = step(&fabric, &mut a, &mut ca).unwrap_err();
    assert_eq!(
        e,
        CmError::Rejected {
            reason: RejReason::INVALID_SERVICE_ID,
            message: uhca_driver::cm::msg::Rejected::Req,
        }
    );
    assert!(e.to_string().contains("REJ reason 8"), "{e}");
    assert_eq!(ca.state(), ConnState::Failed);
    assert_eq!(step(&fabric, &mut a, &mut ca).unwrap_err(), CmError::Failed);
    // The listener still takes the right service.
    let mut qp = rc_qp_on(&mut a.n.hca, &a.n.pd, &a.n.cq, &a.n.cq);
    let mut ca =
        a.cm.connect(&mut a.n.hca, &mut qp, &peer, SERVICE, &[])
            .unwrap();
    a.qp = qp;
    common::run(&fabric);
    let (ra, rb) = drive(&fabric, &mut a, &mut ca, &mut b, &mut cb, 20);
    assert_eq!((ra, rb), (Ok(true), Ok(true)));
}

#[test]
fn a_req_nobody_answers_times_out_after_the_retries() {
    let fabric = Fabric::new(LinkLayer::InfiniBand);
    let mut a = side(&fabric, 1);
    // A peer with no CM: its port has no QP1, the fabric's datagrams to it are dropped.
    let mut n = common::node(&fabric, 2);
    let peer = n.hca.endpoint(1, 0).unwrap();
    let mut ca =
        a.cm.connect(&mut a.n.hca, &mut a.qp, &peer, SERVICE, &[])
            .unwrap();
    common::run(&fabric);
    let start = a.n.hca.platform().now_ns();
    let e =
        a.cm.establish(&mut a.n.hca, &mut ca, &mut a.qp, 10 * TIMEOUT_NS)
            .unwrap_err();
    let waited = a.n.hca.platform().now_ns() - start;
    assert_eq!(
        e,
        CmError::Timeout {
            waiting_for: Waiting::Rep,
            tries: 4
        },
        "the REQ and 3 resends"
    );
    assert!(
        (4 * TIMEOUT_NS..5 * TIMEOUT_NS).contains(&waited),
        "gave up after 4 response timeouts, not {waited} ns"
    );
    assert_eq!(a.cm.stats().sent, 4);
    // A listener with nobody calling times out too, within the time given.
    let mut cl = a.cm.listen(SERVICE, &[]).unwrap();
    let mut qp = rc_qp_on(&mut a.n.hca, &a.n.pd, &a.n.cq, &a.n.cq);
    let e =
        a.cm.establish(&mut a.n.hca, &mut cl, &mut qp, TIMEOUT_NS)
            .unwrap_err();
    assert_eq!(
        e,
        CmError::Timeout {
            waiting_for: Waiting::Req,
            tries: 0
        }
    );
    let _ = &mut n;
}

#[test]
fn mads_that_are_not_cm_messages_are_dropped_and_the_listener_goes_on() {
    let fabric = Fabric::new(LinkLayer::InfiniBand);
    let mut b = side(&fabric, 2);
    let mut cb = b.cm.listen(SERVICE, &[]).unwrap();
    // A third node sends raw MADs from its own QP1: a REQ with class version 1, one of
    // another management class, and a short one.
    let mut m = common::node(&fabric, 3);
    let attr = QpInitAttr {
        send_cq: &m.cq,
        recv_cq: &m.cq,
        srq: None,
        cap: QpCaps::new(4, 4),
    };
    let mut gsi = m.hca.create_qp::<Gsi>(&m.pd, &attr).unwrap();
    gsi.connect(&mut m.hca, &InitAttr::default(), 0).unwrap();
    let mut req = [0u8; 256];
    req[..4].copy_from_slice(&[1, 0x07, 1, 0x03]);
    req[17] = 0x10;
    let mut sa = req;
    sa[1] = 0x03;
    m.mr.mem_mut().write_bytes(0, &req);
    m.mr.mem_mut().write_bytes(256, &sa);
    let ah = m.hca.create_ah(1, common::path(&fabric, &b.n)).unwrap();
    let dest = UdDest {
        ah: &ah,
        remote_qpn: 1,
        remote_qkey: uhca_driver::verbs::GSI_Q_KEY,
    };
    let sges = [
        m.mr.sge(0, 256).unwrap(),
        m.mr.sge(256, 256).unwrap(),
        m.mr.sge(0, 100).unwrap(),
    ];
    let wrs: Vec<_> = sges
        .iter()
        .enumerate()
        .map(|(i, s)| SendWr::new(i as u64, SendOp::Send, core::slice::from_ref(s)).with_ud(dest))
        .collect();
    gsi.post_send(&wrs).unwrap();
    common::run(&fabric);
    let sent: Vec<WorkCompletion> = common::poll(&mut m);
    assert!(
        sent.iter().all(|w| w.status == WcStatus::Success),
        "{sent:?}"
    );
    assert_eq!(step(&fabric, &mut b, &mut cb), Ok(false));
    let s = b.cm.stats();
    assert_eq!((s.received, s.dropped, s.sent), (3, 3, 0), "{s:?}");
    assert_eq!(cb.state(), ConnState::Listening);
    // The listener still connects a real requester.
    let mut a = side(&fabric, 1);
    let peer = b.cm.endpoint();
    let mut ca =
        a.cm.connect(&mut a.n.hca, &mut a.qp, &peer, SERVICE, &[])
            .unwrap();
    common::run(&fabric);
    let (ra, rb) = drive(&fabric, &mut a, &mut ca, &mut b, &mut cb, 20);
    assert_eq!((ra, rb), (Ok(true), Ok(true)));
}

#[test]
fn qp1_takes_only_its_well_known_q_key_and_exists_once_per_port() {
    for link in [LinkLayer::InfiniBand, LinkLayer::Ethernet] {
        let fabric = Fabric::new(link);
        let mut n = common::node(&fabric, 1);
        let attr = QpInitAttr {
            send_cq: &n.cq,
            recv_cq: &n.cq,
            srq: None,
            cap: QpCaps::new(4, 4),
        };
        let mut gsi = n.hca.create_qp::<Gsi>(&n.pd, &attr).unwrap();
        let before = n.dev.command_log().len();
        let bad = InitAttr {
            qkey: 0x1234,
            ..InitAttr::default()
        };
        let e = gsi.to_init(&mut n.hca, bad).unwrap_err();
        assert!(e.to_string().contains("0x80010000"), "{e}");
        assert_eq!(
            n.dev.command_log().len(),
            before,
            "refused before any command"
        );
        gsi.connect(&mut n.hca, &InitAttr::default(), 0).unwrap();
        let q = gsi.query(&mut n.hca).unwrap();
        assert_eq!(q.qkey, uhca_driver::verbs::GSI_Q_KEY);
        assert_eq!(q.state, QpState::Rts);
        // The device has one QP1 per port: a second is refused, and so is a CM beside it.
        assert!(n.hca.create_qp::<Gsi>(&n.pd, &attr).is_err());
        assert!(matches!(
            Cm::new(&mut n.hca, &n.pd, cfg()),
            Err(CmError::Verbs(_))
        ));
    }
}

fn required(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| v == "1")
}

/// tshark's `infiniband` dissector, a decoder uhca did not write, reads the CM's MADs in a
/// RoCEv2 capture of the mock's fabric: a REQ for a service nobody listens on and its REJ,
/// then REQ, REP and RTU, each field where the spec puts it.
#[test]
fn tshark_decodes_the_cm_mads_of_a_rocev2_capture() {
    let found = std::process::Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            !required("UHCA_REQUIRE_TSHARK"),
            "tshark is required (UHCA_REQUIRE_TSHARK=1) but not installed"
        );
        eprintln!("SKIPPED: tshark is not installed");
        return;
    }
    let path = std::env::temp_dir().join(format!("uhca-cm-{}.pcap", std::process::id()));
    let fabric = Fabric::new(LinkLayer::Ethernet);
    let (mut a, mut b) = (side(&fabric, 1), side(&fabric, 2));
    fabric.capture_file(&path).unwrap();
    let peer = b.cm.endpoint();
    let mut cb = b.cm.listen(SERVICE, b"pong").unwrap();
    let mut wrong =
        a.cm.connect(&mut a.n.hca, &mut a.qp, &peer, SERVICE + 1, &[])
            .unwrap();
    common::run(&fabric);
    step(&fabric, &mut b, &mut cb).unwrap();
    assert!(step(&fabric, &mut a, &mut wrong).is_err());
    let mut qp = rc_qp_on(&mut a.n.hca, &a.n.pd, &a.n.cq, &a.n.cq);
    let mut ca =
        a.cm.connect(&mut a.n.hca, &mut qp, &peer, SERVICE, b"ping")
            .unwrap();
    a.qp = qp;
    common::run(&fabric);
    let (ra, rb) = drive(&fabric, &mut a, &mut ca, &mut b, &mut cb, 20);
    assert_eq!((ra, rb), (Ok(true), Ok(true)));
    fabric.stop_capture().unwrap();
    let fields = [
        "infiniband.bth.destqp",
        "infiniband.deth.q_key",
        "infiniband.deth.srcqp",
        "infiniband.mad.mgmtclass",
        "infiniband.mad.classversion",
        "infiniband.mad.method",
        "infiniband.mad.attributeid",
        "infiniband.cm.req.serviceid",
        "infiniband.cm.req.localqpn",
        "infiniband.cm.req.startpsn",
        "infiniband.cm.req.transpsvctype",
        "infiniband.cm.req.pppmtu",
        "infiniband.cm.rep.localqpn",
        "infiniband.cm.rep.startpsn",
        "infiniband.cm.rep.remotecommid",
        "infiniband.cm.rtu.remotecommid",
        "infiniband.cm.rej.reason",
        "infiniband.cm.rej.msgrej",
    ];
    let mut cmd = std::process::Command::new("tshark");
    cmd.arg("-r").arg(&path);
    cmd.args(["-T", "fields", "-E", "separator=;", "-Y", "infiniband.mad"]);
    for f in fields {
        cmd.args(["-e", f]);
    }
    let out = cmd.output().expect("tshark runs");
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split(';').collect()).collect();
    let num = |s: &str| -> u64 {
        let s = s.trim();
        match s.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16).unwrap(),
            None => s
                .parse()
                .unwrap_or_else(|_| panic!("a number: {s:?} in {text}")),
        }
    };
    let attrs: Vec<u64> = rows.iter().map(|r| num(r[6])).collect();
    assert_eq!(
        attrs,
        [0x10, 0x12, 0x10, 0x13, 0x14],
        "REQ, REJ, REQ, REP, RTU:\n{text}"
    );
    for r in &rows {
        // To QP 1 from QP 1 with the GSI Q_Key; CM class 7, version 2, method Send.
        assert_eq!(
            (num(r[0]), num(r[1]), num(r[2])),
            (1, 0x8001_0000, 1),
            "{r:?}"
        );
        assert_eq!((num(r[3]), num(r[4]), num(r[5])), (7, 2, 3), "{r:?}");
    }
    let (req, rej, rep, rtu) = (&rows[2], &rows[1], &rows[3], &rows[4]);
    assert_eq!(num(rows[0][7]), SERVICE + 1);
    assert_eq!(
        (num(rej[16]), num(rej[17])),
        (8, 0),
        "invalid service ID, REQ rejected"
    );
    assert_eq!(num(req[7]), SERVICE);
    assert_eq!(num(req[8]), u64::from(a.qp.qpn()));
    assert_eq!(num(req[9]), u64::from(ca.psns().0));
    assert_eq!((num(req[10]), num(req[11])), (0, 3), "RC, path MTU 1024");
    assert_eq!(num(rep[12]), u64::from(b.qp.qpn()));
    assert_eq!(num(rep[13]), u64::from(cb.psns().0));
    assert_eq!(num(rep[14]), u64::from(ca.local_comm_id()));
    assert_eq!(num(rtu[15]), u64::from(cb.local_comm_id()));
}

/// One side of the UDP test, in its own thread: a mock HCA whose RoCEv2 port is the UDP
/// socket `ip:4791`, its CM, and a QP in INIT with a receive posted. The client connects
/// to the server's port (known from its IP address alone), sends `PING` and checks the
/// answer; the server checks the ping and answers it reversed.
fn udp_side(ip: [u8; 4], server: Option<[u8; 4]>) -> Result<u64, String> {
    const PING: &[u8] = b"ping over UDP, connected by the CM";
    let node = match uhca_mock::MockHca::udp(ip.into()) {
        Ok(n) => n,
        Err(e) => return Err(format!("bind: {e}")),
    };
    let mut hca = uhca_driver::Hca::open_with(node.platform(), common::cfg()).unwrap();
    hca.add_roce_ip(1, 0, std::net::Ipv4Addr::from(ip).into())
        .unwrap();
    let pd = hca.alloc_pd().unwrap();
    let mut cq = hca.create_cq(16).unwrap();
    let mut mr = hca.alloc_mr(&pd, 4096, common::ALL).unwrap();
    let cfg = CmConfig {
        response_timeout_ns: 200_000_000,
        ..CmConfig::default()
    };
    let mut cm = Cm::new(&mut hca, &pd, cfg).unwrap();
    let mut qp = common::rc_qp_on(&mut hca, &pd, &cq, &cq);
    qp.post_recv(&[RecvWr::new(1, &[mr.sge(2048, 256).unwrap()])])
        .unwrap();
    let start = std::time::Instant::now();
    let mut conn = match server {
        Some(s) => {
            let peer = Endpoint {
                link_layer: uhca_driver::caps::LinkLayer::Ethernet,
                lid: 0,
                gid: uhca_driver::addr::Gid::from_ipv4(s),
                mac: uhca_driver::addr::Mac([2, 0, s[0], s[1], s[2], s[3]]),
                gid_index: 0,
            };
            cm.connect(&mut hca, &mut qp, &peer, SERVICE, &[]).unwrap()
        }
        None => cm.listen(SERVICE, &[]).unwrap(),
    };
    cm.establish(&mut hca, &mut conn, &mut qp, 20_000_000_000)
        .map_err(|e| e.to_string())?;
    let took = start.elapsed().as_micros() as u64;
    let mut wc = [WorkCompletion::default(); 2];
    let mut wait = |cq: &mut uhca_driver::verbs::Cq<common::P>, op: WcOpcode| {
        let mut left = 10;
        loop {
            let n = cq.poll_timeout(&mut wc[..1], 2_000_000_000).unwrap();
            if n == 1 && wc[0].opcode == op {
                assert_eq!(wc[0].status, WcStatus::Success);
                return wc[0].byte_len as usize;
            }
            left -= 1;
            assert!(left > 0, "no {op:?} completion");
        }
    };
    if server.is_some() {
        mr.mem_mut().write_bytes(0, PING);
        let sge = [mr.sge(0, PING.len()).unwrap()];
        qp.post_send(&[SendWr::new(2, SendOp::Send, &sge)]).unwrap();
        let n = wait(&mut cq, WcOpcode::Recv);
        let mut got = vec![0; n];
        mr.mem().read_bytes(2048, &mut got);
        let want: Vec<u8> = PING.iter().rev().copied().collect();
        assert_eq!(got, want, "the client received the server's answer");
    } else {
        let n = wait(&mut cq, WcOpcode::Recv);
        let mut got = vec![0; n];
        mr.mem().read_bytes(2048, &mut got);
        assert_eq!(got, PING, "the server received the ping");
        got.reverse();
        mr.mem_mut().write_bytes(0, &got);
        let sge = [mr.sge(0, n).unwrap()];
        qp.post_send(&[SendWr::new(3, SendOp::Send, &sge)]).unwrap();
        wait(&mut cq, WcOpcode::Send);
        // Stay until the client's RTU cannot need a resend of the REP.
        let _ = cm.progress(&mut hca, &mut conn, &mut qp);
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    Ok(took)
}

#[test]
fn two_mock_hcas_connect_through_the_cm_over_the_udp_rocev2_path() {
    let (s, c) = ([127, 0, 27, 2], [127, 0, 27, 1]);
    let server = std::thread::spawn(move || udp_side(s, None));
    std::thread::sleep(std::time::Duration::from_millis(100));
    let client = std::thread::spawn(move || udp_side(c, Some(s)));
    let (rs, rc) = (server.join().unwrap(), client.join().unwrap());
    if let (Err(e), _) | (_, Err(e)) = (&rs, &rc)
        && e.starts_with("bind")
    {
        assert!(
            !required("UHCA_REQUIRE_UDP"),
            "UHCA_REQUIRE_UDP=1 but a loopback socket could not be bound: {e}"
        );
        eprintln!("SKIPPED: {e}");
        return;
    }
    let took = rc.expect("the client connected");
    rs.expect("the server connected");
    eprintln!("REQ to established on the client: {took} µs");
}

/// An MRA for the REQ (the peer needs longer, as Linux's `rdma_cm` says while its
/// application has not accepted yet) pushes the REQ's deadline back by the MRA's service
/// timeout: no resend until then.
#[test]
fn an_mra_for_the_req_pushes_the_wait_back_without_resending() {
    let fabric = Fabric::new(LinkLayer::InfiniBand);
    let mut a = side(&fabric, 1);
    // The peer: a node whose QP1 is the test's own, to send a hand-made MRA.
    let mut m = common::node(&fabric, 2);
    let attr = QpInitAttr {
        send_cq: &m.cq,
        recv_cq: &m.cq,
        srq: None,
        cap: QpCaps::new(4, 4),
    };
    let mut gsi = m.hca.create_qp::<Gsi>(&m.pd, &attr).unwrap();
    gsi.connect(&mut m.hca, &InitAttr::default(), 0).unwrap();
    let peer = m.hca.endpoint(1, 0).unwrap();
    let mut ca =
        a.cm.connect(&mut a.n.hca, &mut a.qp, &peer, SERVICE, &[])
            .unwrap();
    common::run(&fabric);
    let mra = uhca_driver::cm::msg::Mra {
        local_comm_id: 0x77,
        remote_comm_id: ca.local_comm_id(),
        message_mraed: uhca_driver::cm::msg::Rejected::Req,
        service_timeout: 20, // 4.096 µs × 2^20 ≈ 4.3 s
    };
    let mut mad = [0u8; 256];
    mra.encode(1, &mut mad);
    m.mr.mem_mut().write_bytes(0, &mad);
    let ah = m.hca.create_ah(1, common::path(&fabric, &a.n)).unwrap();
    let sge = [m.mr.sge(0, 256).unwrap()];
    let wr = SendWr::new(1, SendOp::Send, &sge).with_ud(UdDest {
        ah: &ah,
        remote_qpn: 1,
        remote_qkey: uhca_driver::verbs::GSI_Q_KEY,
    });
    gsi.post_send(&[wr]).unwrap();
    common::run(&fabric);
    assert_eq!(step(&fabric, &mut a, &mut ca), Ok(false));
    assert_eq!(a.cm.stats().mras, 1);
    // Without the MRA the REQ would be sent 4 times within 40 ms and fail; now 1 s passes
    // with the one REQ still awaiting its answer.
    let e =
        a.cm.establish(&mut a.n.hca, &mut ca, &mut a.qp, 1_000_000_000)
            .unwrap_err();
    assert_eq!(
        e,
        CmError::Timeout {
            waiting_for: Waiting::Rep,
            tries: 1
        }
    );
    assert_eq!(
        a.cm.stats().sent,
        1,
        "no resend while the peer asked for time"
    );
}

/// The requester chooses the path MTU (a REP has no MTU to lower it): a listener that takes
/// at most 512 bytes refuses a REQ for 1024 with REJ reason 26, and takes one for 512.
#[test]
fn a_req_for_a_larger_path_mtu_than_the_listener_takes_is_rejected() {
    let fabric = Fabric::new(LinkLayer::InfiniBand);
    let small = CmConfig {
        path_mtu: IbMtu::Mtu512,
        ..cfg()
    };
    let (mut a, mut b) = (side(&fabric, 1), side_with(&fabric, 2, small));
    let peer = b.cm.endpoint();
    let mut cb = b.cm.listen(SERVICE, &[]).unwrap();
    let mut ca =
        a.cm.connect(&mut a.n.hca, &mut a.qp, &peer, SERVICE, &[])
            .unwrap();
    common::run(&fabric);
    assert_eq!(step(&fabric, &mut b, &mut cb), Ok(false));
    assert_eq!(
        step(&fabric, &mut a, &mut ca).unwrap_err(),
        CmError::Rejected {
            reason: RejReason::INVALID_PATH_MTU,
            message: uhca_driver::cm::msg::Rejected::Req,
        }
    );
    // Asked for 512, it connects at 512 on both sides.
    let mut c = side_with(&fabric, 3, small);
    let mut cc =
        c.cm.connect(&mut c.n.hca, &mut c.qp, &peer, SERVICE, &[])
            .unwrap();
    common::run(&fabric);
    let (rc, rb) = drive(&fabric, &mut c, &mut cc, &mut b, &mut cb, 20);
    assert_eq!((rc, rb), (Ok(true), Ok(true)));
    assert_eq!(
        (cc.path_mtu(), cb.path_mtu()),
        (IbMtu::Mtu512, IbMtu::Mtu512)
    );
    ping_pong(&fabric, &mut c, &mut b, b"at a path MTU of 512");
}
