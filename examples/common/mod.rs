//! What the examples share: rdma-core-like flags, and opening an HCA on the mock (two in
//! one process over the in-memory fabric), over real UDP (one mock HCA whose RoCEv2 port is
//! a kernel UDP socket) or on real hardware under VFIO; and the bones of every side of a
//! two-sided example, so that an example holds only its own test: its verbs objects
//! ([`open_objects`]), the out-of-band exchange that connects its QP ([`exchange`],
//! [`exchange_rc`]) and their teardown ([`take_down`]).

#![allow(dead_code)]

#[macro_use]
mod print;

use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::time::Duration;

use uhca::driver::addr::{AhAttr, Gid, Mac, StaticRate};
use uhca::driver::caps::LinkLayer;
use uhca::driver::verbs::{
    Cq, InitAttr, Mr, Pd, Qp, QpCaps, QpInitAttr, QpTransport, Rc, RecvWr, RtrAttr, RtsAttr,
    SendWr, WcStatus, WorkCompletion,
};
use uhca::driver::{Hca, HcaConfig};
use uhca::fwif::consts::{AccessFlags, IbMtu};
use uhca::hal::Platform;
use uhca::mock::fabric::PumpHandle;
use uhca::mock::{Fabric, MockConfig, MockHca, MockPlatform, UdpHca};
use uhca::oob::{Dest, OobError, RdmaDest, Session};

/// What the examples return: any error, printed by [`run_modes`] with the example's name.
pub type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Where the HCA comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Two mock HCAs in this process, client and server, over the in-memory fabric.
    Mock,
    /// One mock HCA whose RoCEv2 port is `LOCAL_IP:4791` on a kernel UDP socket.
    Udp(Ipv4Addr),
    /// A real ConnectX bound to vfio-pci.
    Device(String),
}

/// The flags of rdma-core's pingpong examples and perftest, plus the uhca modes.
#[derive(Clone, Debug)]
pub struct Args {
    /// `--mock`, `--udp IP`, `--device BDF`.
    pub mode: Mode,
    /// `-p`: TCP port of the out-of-band exchange.
    pub port: u16,
    /// `-i`: HCA port.
    pub ib_port: u8,
    /// `-s`: message size.
    pub size: usize,
    /// `-n`: iterations.
    pub iters: u64,
    /// `-r`: receive queue depth.
    pub rx_depth: u32,
    /// `-g`: GID index (`None`: no GID, InfiniBand LID routing).
    pub gid_index: Option<u8>,
    /// `-m`: path MTU.
    pub mtu: IbMtu,
    /// `-l`: service level.
    pub sl: u8,
    /// `-d`: device name (informational; the mode selects the device).
    pub device_name: Option<String>,
    /// `--dmac`: the peer's MAC on real RoCE hardware (no kernel to resolve it).
    pub dmac: Option<Mac>,
    /// `-t`/`--test`: the operation (for the bandwidth and latency examples).
    pub op: Option<String>,
    /// The server to connect to; none means "be the server".
    pub server: Option<String>,
    /// `-e`/`--events`: sleep on completion events instead of polling the CQ (rdma-core's
    /// `--events`).
    pub events: bool,
    /// Under `--device -e`: the interrupt the driver's event queue raises (MSI-X vector 0,
    /// through VFIO's eventfd). Without it, events are waited for by serving the event
    /// queue in a loop.
    pub interrupt: Option<Interrupt>,
    /// `--ip ADDR` (with `--device`, on an Ethernet port): the IP address whose RoCEv2 GID
    /// the example installs at `-g` (default 0) before it starts. Without a kernel driver
    /// nobody else fills the port's GID table.
    pub ip: Option<IpAddr>,
    /// `-c`/`--chk`: check every message received (see [`Chk`]).
    pub chk: bool,
}

/// `--chk` (rdma-core's `ibv_rc_pingpong --chk` marks a page's first byte with 0): what the
/// ping-pong examples send and expect. The client sends [`Chk::CLIENT_FILL`] with 0 at each
/// 4 KiB page's first byte and checks that every pong is exactly that (a round trip through
/// the peer's receive and send); the server starts its buffer as [`Chk::SERVER_FILL`] (so a
/// receive that wrote nothing shows) and checks every ping is what a client sends: uhca's,
/// or rdma-core's (0x7b, with the page marks when it ran with `--chk`).
pub struct Chk;

impl Chk {
    /// The byte of uhca's client messages.
    pub const CLIENT_FILL: u8 = 0xc5;
    /// The byte a server's buffer starts with.
    pub const SERVER_FILL: u8 = 0x5a;
    /// The byte of rdma-core's ping-pong messages.
    pub const RDMA_CORE_FILL: u8 = 0x7b;
    const PAGE: usize = 4096;

    /// Fills `len` bytes at `off` of `mem` as this side starts them.
    pub fn fill<M: uhca::hal::DmaMem>(mem: &mut M, off: usize, len: usize, client: bool) {
        if client {
            mem.fill(off, len, Self::CLIENT_FILL);
            for p in (0..len).step_by(Self::PAGE) {
                mem.write_u8(off + p, 0);
            }
        } else {
            mem.fill(off, len, Self::SERVER_FILL);
        }
    }

    /// Checks a received message (`len` bytes at `off`).
    pub fn check<M: uhca::hal::DmaMem>(mem: &M, off: usize, len: usize, client: bool) -> Res<()> {
        let mut got = vec![0u8; len];
        mem.read_bytes(off, &mut got);
        let expect = |fill: u8, marks: bool| {
            got.iter().enumerate().all(|(i, &b)| {
                b == if marks && i % Self::PAGE == 0 {
                    0
                } else {
                    fill
                }
            })
        };
        let ok = if client {
            expect(Self::CLIENT_FILL, true)
        } else {
            expect(Self::CLIENT_FILL, true)
                || expect(Self::RDMA_CORE_FILL, true)
                || expect(Self::RDMA_CORE_FILL, false)
        };
        if ok {
            return Ok(());
        }
        let bad = got
            .iter()
            .position(|&b| b != Self::CLIENT_FILL && b != Self::RDMA_CORE_FILL);
        Err(format!(
            "--chk: a received message of {len} bytes is not what was sent (first bytes {:02x?}, first foreign byte at {bad:?})",
            &got[..got.len().min(8)]
        )
        .into())
    }
}

/// A wait for an interrupt: returns how many arrived within the given time (0: none).
#[derive(Clone)]
pub struct Interrupt(pub std::sync::Arc<dyn Fn(Duration) -> std::io::Result<u64> + Send + Sync>);

impl std::fmt::Debug for Interrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Interrupt")
    }
}

/// Parses the command line with the given defaults for `-s` and `-n`.
pub fn parse_args(name: &str, default_size: usize, default_iters: u64) -> Args {
    parse_args_with(name, default_size, default_iters, &[]).0
}

fn num<T: std::str::FromStr>(s: &str) -> Option<T> {
    s.parse().ok()
}

fn parse_mac(s: &str) -> Option<Mac> {
    let v: Vec<u8> = s
        .split(':')
        .filter_map(|p| u8::from_str_radix(p, 16).ok())
        .collect();
    (v.len() == 6).then(|| Mac([v[0], v[1], v[2], v[3], v[4], v[5]]))
}

/// Bring-up settings for mock HCAs (short timeouts: the model answers at once).
pub fn mock_config() -> HcaConfig {
    HcaConfig {
        fw_pre_init_timeout_ns: 5_000_000_000,
        cmd_timeout_ns: 5_000_000_000,
        ..HcaConfig::default()
    }
}

/// A mock HCA brought up by the driver, attached to `fabric`, with a RoCEv2 GID for
/// `10.0.0.n` (or `ip`) at index 0 on Ethernet.
pub fn mock_node(
    fabric: &Fabric,
    n: u8,
    ip: Option<Ipv4Addr>,
) -> Result<(MockHca, Hca<MockPlatform>), uhca::driver::Error> {
    let mac = Mac([0x02, 0x00, 0x00, 0x00, 0x01, n]);
    let dev = MockHca::new(MockConfig {
        port_type: uhca::mock::LinkLayer::Ethernet,
        mac: mac.0,
        ..MockConfig::default()
    });
    let mut hca = Hca::open_with(dev.platform(), mock_config())?;
    fabric.attach(&dev);
    let ip = ip.unwrap_or(Ipv4Addr::new(10, 0, 0, n));
    hca.add_roce_ip(1, 0, IpAddr::V4(ip))?;
    Ok((dev, hca))
}

/// The in-memory fabric with a real-time pump (the examples poll like real programs).
pub fn mock_fabric() -> (Fabric, PumpHandle) {
    let fabric = Fabric::ethernet();
    let pump = fabric.start_pump(20);
    (fabric, pump)
}

/// One mock HCA whose port is `local:4791` on a UDP socket ([`MockHca::udp`], to keep
/// alive), brought up by the driver with `::ffff:local` as GID 0.
pub fn udp_node(local: Ipv4Addr) -> Res<(UdpHca, Hca<MockPlatform>)> {
    let node = MockHca::udp(local)?;
    let mut hca = Hca::open_with(node.platform(), mock_config())?;
    hca.add_roce_ip(1, 0, IpAddr::V4(local))?;
    Ok((node, hca))
}

/// This side's address for the exchange.
pub fn my_dest<P: Platform>(
    hca: &mut Hca<P>,
    args: &Args,
    qpn: u32,
    psn: u32,
) -> Result<Dest, uhca::driver::Error> {
    let port = hca.query_port(args.ib_port)?;
    let gid = match args.gid_index {
        Some(i) => hca.query_gid(args.ib_port, i as u16)?.gid,
        None => Gid::ZERO,
    };
    Ok(Dest {
        lid: port.lid,
        qpn,
        psn,
        gid,
    })
}

/// This side's address for the exchange of the bandwidth and latency examples: the QP as
/// in [`my_dest`] and the first `len` bytes of `mr`, which the peer may read and write.
pub fn my_rdma_dest<P: Platform>(
    hca: &mut Hca<P>,
    args: &Args,
    qpn: u32,
    psn: u32,
    mr: &Mr<P>,
    len: usize,
) -> Res<RdmaDest> {
    Ok(RdmaDest {
        dest: my_dest(hca, args, qpn, psn)?,
        rkey: mr.rkey(),
        addr: mr.iova(),
        len: u32::try_from(len).map_err(|_| format!("a buffer of {len} bytes is too large"))?,
    })
}

/// rdma-core's pingpong address line (`what` is `"local address: "` or `"remote address:"`).
pub fn print_dest(what: &str, d: &Dest) {
    println!(
        "  {what} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        d.lid, d.qpn, d.psn, d.gid
    );
}

/// What one side of an example asks for before the exchange: one CQ of `cq_depth` entries
/// for both queues, an MR of `mr_len` bytes with `access`, and a QP with room for
/// `send_wr` sends and `recv_wr` receives (one scatter/gather entry each, no inline data)
/// that peers may reach with `access`'s remote rights (UD: with Q_Key `qkey`).
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// CQ entries.
    pub cq_depth: u32,
    /// The MR's length in bytes.
    pub mr_len: usize,
    /// The MR's rights; the QP gets its remote ones.
    pub access: AccessFlags,
    /// Send queue depth.
    pub send_wr: u32,
    /// Receive queue depth.
    pub recv_wr: u32,
    /// The Q_Key (UD; 0 otherwise).
    pub qkey: u32,
}

/// A side's verbs objects from [`open_objects`] (torn down by [`take_down`]): the PD, the
/// CQ of both of the QP's queues, the registered buffer, and the QP in INIT on port `-i`.
pub type Objects<P, T> = (Pd<P>, Cq<P>, Mr<P>, Qp<P, T>);

/// Allocates what `spec` asks for, in the order rdma-core's examples do (PD, CQ, MR, QP),
/// and moves the QP to INIT on port `-i`.
pub fn open_objects<P: Platform, T: QpTransport>(
    hca: &mut Hca<P>,
    args: &Args,
    spec: &Spec,
) -> Res<Objects<P, T>> {
    let pd = hca.alloc_pd()?;
    let cq = hca.create_cq(spec.cq_depth)?;
    let mr = hca.alloc_mr(&pd, spec.mr_len, spec.access)?;
    let cap = QpCaps {
        max_send_wr: spec.send_wr,
        max_recv_wr: spec.recv_wr,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let attr = QpInitAttr {
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        cap,
    };
    let mut qp = hca.create_qp::<T>(&pd, &attr)?;
    let init = InitAttr {
        port: args.ib_port,
        access: spec.access - AccessFlags::LOCAL_WRITE,
        qkey: spec.qkey,
        ..InitAttr::default()
    };
    qp.to_init(hca, init)?;
    Ok((pd, cq, mr, qp))
}

/// The path to the peer, as rdma-core's pingpong builds it: global (GRH / RoCE) when the
/// peer sent a GID, LID-routed otherwise.
pub fn path_to<P: Platform>(hca: &Hca<P>, args: &Args, peer: &Dest) -> AhAttr {
    match hca.caps().link_layer {
        LinkLayer::Ethernet => AhAttr::RoceV2 {
            sgid_index: args.gid_index.unwrap_or(0),
            dgid: peer.gid,
            dmac: args.dmac.unwrap_or(Mac([0xff; 6])),
            udp_sport: 0xc000 | (peer.qpn as u16 & 0x3fff),
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            sl: args.sl,
        },
        LinkLayer::InfiniBand => AhAttr::Ib {
            dlid: peer.lid,
            sl: args.sl,
            src_path_bits: 0,
            static_rate: StaticRate::PortCurrent,
            grh: (!peer.gid.is_zero()).then(|| uhca::driver::addr::Grh {
                dgid: peer.gid,
                sgid_index: args.gid_index.unwrap_or(0),
                flow_label: 0,
                hop_limit: 1,
                traffic_class: 0,
            }),
        },
    }
}

/// A random 24-bit PSN (rdma-core uses `lrand48() & 0xffffff`).
pub fn random_psn() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let x = (t.as_nanos() as u64) ^ (std::process::id() as u64).rotate_left(32);
    (x.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as u32 & 0xff_ffff
}

/// How long any out-of-band step may take.
pub const OOB_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the ping-pong examples' `wr_id`s come from (as in rdma-core's).
pub const RECV_WRID: u64 = 1;
/// The send `wr_id`.
pub const SEND_WRID: u64 = 2;

/// Posts up to `n` copies of `recv`; returns how many went in.
pub fn post_recvs<P: Platform, T: QpTransport>(
    qp: &mut Qp<P, T>,
    recv: &RecvWr<'_>,
    n: u32,
) -> u32 {
    (0..n)
        .take_while(|_| qp.post_recv(std::slice::from_ref(recv)).is_ok())
        .count() as u32
}

/// Fills the receive queue with `-r` copies of `recv` before the exchange, as rdma-core's
/// ping-pong does, so that the peer's first message finds one.
pub fn post_rx_depth<P: Platform, T: QpTransport>(
    qp: &mut Qp<P, T>,
    recv: &RecvWr<'_>,
    args: &Args,
) -> Res<()> {
    let routs = post_recvs(qp, recv, args.rx_depth);
    if routs < args.rx_depth {
        return Err(format!("couldn't post receive ({routs})").into());
    }
    Ok(())
}

/// rdma-core's ping-pong loop: the client sends first; each side sends again once its
/// previous send and a receive completed; receives are reposted when they run low (the
/// queue starts with `-r` of them, [`post_rx_depth`]). Each send is `send`, each receive
/// `recv`, on `qp`, whose completions go to `cq`; `on_recv` runs at each receive
/// completion (`--chk` checks the message there) and stops the loop with its error.
/// Returns the elapsed seconds and prints rdma-core's two result lines.
#[allow(clippy::too_many_arguments)]
pub fn pingpong_loop<P: Platform, T: QpTransport>(
    hca: &mut Hca<P>,
    cq: &mut Cq<P>,
    qp: &mut Qp<P, T>,
    args: &Args,
    client: bool,
    send: &SendWr<'_>,
    recv: &RecvWr<'_>,
    mut on_recv: impl FnMut() -> Res<()>,
) -> Res<f64> {
    let post_send = |qp: &mut Qp<P, T>| {
        qp.post_send(std::slice::from_ref(send))
            .map_err(|e| format!("couldn't post send: {e:?}"))
    };
    let mut routs = args.rx_depth;
    let start = std::time::Instant::now();
    let mut pending = RECV_WRID;
    if client {
        post_send(qp)?;
        pending |= SEND_WRID;
    }
    let (mut rcnt, mut scnt) = (0u64, 0u64);
    let mut wc = [WorkCompletion::default(); 2];
    let mut last_progress = std::time::Instant::now();
    let (mut num_events, mut interrupts) = (0u64, 0u64);
    if args.events {
        cq.req_notify(false);
    }
    while rcnt < args.iters || scnt < args.iters {
        let n = cq.poll(&mut wc)?;
        if n == 0 && args.events {
            wait_cq_event(hca, cq, args, &mut interrupts)?;
            num_events += 1;
            continue;
        }
        if n == 0 {
            if last_progress.elapsed() > OOB_TIMEOUT {
                return Err(format!(
                    "no completion for {OOB_TIMEOUT:?} ({rcnt} received, {scnt} sent)"
                )
                .into());
            }
            relax(matches!(args.mode, Mode::Device(_)));
            continue;
        }
        last_progress = std::time::Instant::now();
        for c in &wc[..n] {
            if c.status != WcStatus::Success {
                return Err(format!("failed status {:?} for wr_id {}", c.status, c.wr_id).into());
            }
            match c.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    on_recv()?;
                    routs -= 1;
                    if routs <= 1 {
                        routs += post_recvs(qp, recv, args.rx_depth - routs);
                        if routs < args.rx_depth {
                            return Err(format!("couldn't post receive ({routs})").into());
                        }
                    }
                    rcnt += 1;
                }
                other => return Err(format!("completion for unknown wr_id {other}").into()),
            }
            pending &= !c.wr_id;
            if scnt < args.iters && pending == 0 {
                post_send(qp)?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let bytes = args.size as u64 * args.iters * 2;
    println!(
        "{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec",
        bytes as f64 * 8.0 / secs / 1e6
    );
    println!(
        "{} iters in {secs:.2} seconds = {:.2} usec/iter",
        args.iters,
        secs * 1e6 / args.iters as f64
    );
    if args.events {
        println!("{num_events} completion events, {interrupts} interrupts");
    }
    Ok(secs)
}

/// Waits up to [`OOB_TIMEOUT`] for the next completion event of `cq` (`ibv_get_cq_event`),
/// acknowledges it and arms the CQ again (`ibv_ack_cq_events`, `ibv_req_notify_cq`). With
/// `args.interrupt` it sleeps on the interrupt between visits to the event queue, and
/// counts in `interrupts` every interrupt delivered to it: the ones it slept on, and the
/// ones that arrived while it was busy, taken (without waiting) when it takes the event, so
/// that a later sleep does not wake on an old one. Without, it serves the event queue in a
/// loop. A missing interrupt is a timeout, not a fall back to polling.
pub fn wait_cq_event<P: Platform>(
    hca: &mut Hca<P>,
    cq: &mut Cq<P>,
    args: &Args,
    interrupts: &mut u64,
) -> Res<()> {
    let deadline = std::time::Instant::now() + OOB_TIMEOUT;
    loop {
        hca.process_events()?;
        if cq.take_event(hca) {
            cq.req_notify(false);
            if let Some(irq) = &args.interrupt {
                *interrupts += (irq.0)(Duration::ZERO)?;
            }
            return Ok(());
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(format!(
                "no completion event for {OOB_TIMEOUT:?} ({interrupts} interrupts so far)"
            )
            .into());
        }
        match &args.interrupt {
            Some(irq) => *interrupts += (irq.0)(left)?,
            None => relax(false),
        }
    }
}

/// A message of an out-of-band exchange: rdma-core's pingpong address ([`Dest`]), or
/// uhca's ([`RdmaDest`]: the same and the buffer's key, address and length), which leaves a
/// line [`Session`] open behind it.
pub trait OobMessage: Sized {
    /// What the exchange leaves open: nothing for rdma-core's, the line session for uhca's.
    type Session;
    /// The queue pair the message names.
    fn dest(&self) -> &Dest;
    /// The client half: connects to `server:port`, sends `me`, returns the server's.
    fn client(server: &str, port: u16, me: &Self) -> Result<(Self, Self::Session), OobError>;
    /// The server half: reads the client's message on `listener`, calls `connect` with it,
    /// then answers with `me`.
    fn server(
        listener: &TcpListener,
        me: &Self,
        connect: impl FnOnce(&Self) -> Result<(), String>,
    ) -> Result<(Self, Self::Session), OobError>;
}

impl OobMessage for Dest {
    type Session = ();
    fn dest(&self) -> &Dest {
        self
    }
    fn client(server: &str, port: u16, me: &Self) -> Result<(Self, ()), OobError> {
        Ok((
            uhca::oob::client_exchange(server, port, me, OOB_TIMEOUT)?,
            (),
        ))
    }
    fn server(
        listener: &TcpListener,
        me: &Self,
        connect: impl FnOnce(&Self) -> Result<(), String>,
    ) -> Result<(Self, ()), OobError> {
        Ok((
            uhca::oob::server_exchange(listener, me, OOB_TIMEOUT, connect)?,
            (),
        ))
    }
}

impl OobMessage for RdmaDest {
    type Session = Session;
    fn dest(&self) -> &Dest {
        &self.dest
    }
    fn client(server: &str, port: u16, me: &Self) -> Result<(Self, Session), OobError> {
        uhca::oob::rdma_client_exchange(server, port, me, OOB_TIMEOUT)
    }
    fn server(
        listener: &TcpListener,
        me: &Self,
        connect: impl FnOnce(&Self) -> Result<(), String>,
    ) -> Result<(Self, Session), OobError> {
        uhca::oob::rdma_server_exchange(listener, me, OOB_TIMEOUT, connect)
    }
}

/// Where one side of an example stands: the flags, the server to connect to (`None`: be
/// the server) and, for a server, a listener already bound (`None`: bind `-p` when the
/// exchange starts).
pub struct Side<'a> {
    /// The flags.
    pub args: &'a Args,
    /// The server to connect to; `None` to be the server.
    pub server: Option<&'a str>,
    /// The server's bound listener, if any.
    pub listener: Option<TcpListener>,
}

impl<'a> Side<'a> {
    /// The side the command line asks for: a client of `SERVER` if given, a server on `-p`
    /// otherwise.
    pub fn of(args: &'a Args) -> Side<'a> {
        Side {
            args,
            server: args.server.as_deref(),
            listener: None,
        }
    }

    /// Whether this side is the client (it connects, sends first, prints the results).
    pub fn is_client(&self) -> bool {
        self.server.is_some()
    }
}

/// The one out-of-band exchange of every example: the client half towards the server,
/// then `connect`; or the server half on the side's listener (or on `-p`), which
/// `connect`s before it answers, as rdma-core's examples do. Returns the peer's message,
/// what the exchange leaves open, and what `connect` made.
pub fn exchange<M: OobMessage, T>(
    side: &mut Side<'_>,
    me: &M,
    connect: impl FnOnce(&M) -> Res<T>,
) -> Res<(M, M::Session, T)> {
    if let Some(s) = side.server {
        let (peer, session) = M::client(s, side.args.port, me)?;
        let t = connect(&peer)?;
        return Ok((peer, session, t));
    }
    let listener = match side.listener.take() {
        Some(l) => l,
        None => TcpListener::bind(("0.0.0.0", side.args.port))?,
    };
    let mut out = None;
    let (peer, session) = M::server(&listener, me, |peer| {
        out = Some(connect(peer).map_err(|e| e.to_string())?);
        Ok(())
    })?;
    Ok((peer, session, out.ok_or("not connected")?))
}

/// An RC QP ready to send.
pub type RcRts<P> = Qp<P, Rc>;

/// [`exchange`] for an RC QP: `qp` goes from INIT to RTS towards the peer (its first send
/// PSN the one `me` announces, up to `rd_atomic` RDMA READs at once; [`rc_connect`]).
pub fn exchange_rc<P: Platform, M: OobMessage>(
    hca: &mut Hca<P>,
    side: &mut Side<'_>,
    me: &M,
    qp: Qp<P, Rc>,
    rd_atomic: u8,
) -> Res<(M, M::Session, RcRts<P>)> {
    let psn = me.dest().psn;
    let args = side.args;
    exchange(side, me, |peer| {
        rc_connect(hca, args, qp, peer.dest(), psn, rd_atomic)
    })
}

/// One side of an example, on a mock HCA that is up.
pub type MockSide = fn(&mut Hca<MockPlatform>, Side<'_>) -> Res<()>;

/// Runs `side` as server (10.0.0.2, on a thread) and client (10.0.0.1) on two mock HCAs
/// over the in-memory fabric, the out-of-band exchange over loopback TCP.
pub fn run_mock_pair(args: &Args, side: MockSide) -> Res<()> {
    let (fabric, _pump) = mock_fabric();
    let (_dev_s, mut hca_s) = mock_node(&fabric, 2, None)?;
    let (_dev_c, mut hca_c) = mock_node(&fabric, 1, None)?;
    let listener = TcpListener::bind(("127.0.0.1", 0))?;
    let mut cargs = args.clone();
    cargs.port = listener.local_addr()?.port();
    cargs.gid_index.get_or_insert(0);
    let sargs = cargs.clone();
    let server = std::thread::spawn(move || -> Result<(), String> {
        let me = Side {
            args: &sargs,
            server: None,
            listener: Some(listener),
        };
        side(&mut hca_s, me).map_err(|e| format!("server: {e}"))?;
        hca_s.close().map_err(|e| e.to_string())
    });
    let me = Side {
        args: &cargs,
        server: Some("127.0.0.1"),
        listener: None,
    };
    let client = side(&mut hca_c, me);
    let server = server.join().map_err(|_| "server thread panicked")?;
    client.map_err(|e| format!("client: {e}"))?;
    server?;
    hca_c.close()?;
    Ok(())
}

/// Runs `side` on one mock HCA behind a UDP socket on `ip` (GID index 0 by default).
pub fn run_udp(args: &Args, ip: Ipv4Addr, side: MockSide) -> Res<()> {
    let (node, mut hca) = udp_node(ip)?;
    let mut a = args.clone();
    a.gid_index.get_or_insert(0);
    side(&mut hca, Side::of(&a))?;
    // A send completes when the model's engine has built its packets; they leave through
    // the UDP socket on the pump's next steps. Let them go before the process exits (a
    // last UD reply would otherwise be lost and the peer would wait for it).
    let start = std::time::Instant::now();
    while (node.hca.tx_pending() > 0 || node.fabric.in_flight() > 0)
        && start.elapsed() < Duration::from_secs(2)
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    // The pump thread may be starved on a loaded machine: give it a moment more.
    std::thread::sleep(Duration::from_millis(300));
    hca.close()?;
    Ok(())
}

/// [`parse_args`] for examples with flags of their own: each `extra` entry names a flag
/// that takes a value and how the usage line shows it (`("--tx-depth", "N")`); the values
/// given come back in the same order (the last one given wins).
pub fn parse_args_with(
    name: &str,
    default_size: usize,
    default_iters: u64,
    extra: &[(&str, &str)],
) -> (Args, Vec<Option<String>>) {
    let mut a = Args {
        mode: Mode::Mock,
        port: uhca::oob::DEFAULT_PORT,
        ib_port: 1,
        size: default_size,
        iters: default_iters,
        rx_depth: 500,
        gid_index: None,
        mtu: IbMtu::Mtu1024,
        sl: 0,
        device_name: None,
        dmac: None,
        op: None,
        server: None,
        events: false,
        interrupt: None,
        ip: None,
        chk: false,
    };
    let mut values = vec![None; extra.len()];
    let extra_usage: String = extra.iter().map(|(f, v)| format!(" [{f} {v}]")).collect();
    let mut mode = None;
    let mut it = std::env::args().skip(1);
    let usage = |msg: &str| -> ! {
        eprintln!("{name}: {msg}");
        eprintln!(
            "usage: {name} (--mock | --udp LOCAL_IP | --device BDF) [-p port] [-i ib_port] [-s size] \
             [-n iters] [-r rx_depth] [-g gid_index] [-m mtu] [-l sl] [-d dev] [--dmac MAC] [-t op]\
             [-e] [-c] [--ip ADDR] {extra_usage} [SERVER]"
        );
        std::process::exit(2);
    };
    while let Some(arg) = it.next() {
        let mut val = |flag: &str| {
            it.next()
                .unwrap_or_else(|| usage(&format!("{flag} needs a value")))
        };
        if let Some(i) = extra.iter().position(|(f, _)| *f == arg) {
            values[i] = Some(val(&arg));
            continue;
        }
        match arg.as_str() {
            "--mock" => mode = Some(Mode::Mock),
            "--udp" => {
                let v = val("--udp");
                mode =
                    Some(Mode::Udp(v.parse().unwrap_or_else(|_| {
                        usage(&format!("bad IPv4 address {v:?}"))
                    })));
            }
            "--device" => mode = Some(Mode::Device(val("--device"))),
            "-p" | "--port" => a.port = num(&val("-p")).unwrap_or_else(|| usage("bad -p")),
            "-i" | "--ib-port" => a.ib_port = num(&val("-i")).unwrap_or_else(|| usage("bad -i")),
            "-s" | "--size" => a.size = num(&val("-s")).unwrap_or_else(|| usage("bad -s")),
            "-n" | "--iters" => a.iters = num(&val("-n")).unwrap_or_else(|| usage("bad -n")),
            "-r" | "--rx-depth" => a.rx_depth = num(&val("-r")).unwrap_or_else(|| usage("bad -r")),
            "-g" | "--gid-idx" => {
                a.gid_index = Some(num(&val("-g")).unwrap_or_else(|| usage("bad -g")))
            }
            "-m" | "--mtu" => {
                let bytes: u32 = num(&val("-m")).unwrap_or_else(|| usage("bad -m"));
                a.mtu = IbMtu::from_bytes(bytes)
                    .unwrap_or_else(|| usage("-m must be 256, 512, 1024, 2048 or 4096"));
            }
            "-l" | "--sl" => a.sl = num(&val("-l")).unwrap_or_else(|| usage("bad -l")),
            "-d" | "--ib-dev" => a.device_name = Some(val("-d")),
            "-t" | "--test" => a.op = Some(val("-t")),
            "--dmac" => {
                a.dmac = Some(parse_mac(&val("--dmac")).unwrap_or_else(|| usage("bad --dmac")))
            }
            "-e" | "--events" => a.events = true,
            "-c" | "--chk" => a.chk = true,
            "--ip" => {
                let v = val("--ip");
                a.ip = Some(
                    v.parse()
                        .unwrap_or_else(|_| usage(&format!("bad IP address {v:?}"))),
                );
            }
            "-h" | "--help" => usage("help"),
            s if s.starts_with('-') => usage(&format!("unknown flag {s}")),
            s => a.server = Some(s.to_string()),
        }
    }
    a.mode = mode.unwrap_or_else(|| usage("choose --mock, --udp LOCAL_IP or --device BDF"));
    if a.size == 0 || a.iters == 0 || a.rx_depth == 0 {
        usage("size, iterations and rx depth must be positive");
    }
    (a, values)
}

/// Polls `cq` into `wc` until it returns at least one completion, or fails after
/// [`OOB_TIMEOUT`] without one. On the mock the fabric moves packets on a pump thread,
/// so an empty poll yields the CPU to it; on hardware (`spin`) it spins as perftest does.
pub fn poll_some<P: Platform>(cq: &mut Cq<P>, wc: &mut [WorkCompletion], spin: bool) -> Res<usize> {
    let start = std::time::Instant::now();
    let mut n = 0u32;
    loop {
        let got = cq.poll(wc)?;
        if got > 0 {
            return Ok(got);
        }
        relax(spin);
        n = n.wrapping_add(1);
        if n.is_multiple_of(1024) && start.elapsed() > OOB_TIMEOUT {
            return Err(format!("no completion for {OOB_TIMEOUT:?}").into());
        }
    }
}

/// One turn of a busy-wait: a spin hint on hardware, a yield to the mock's pump thread
/// otherwise.
pub fn relax(spin: bool) {
    if spin {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// Brings an RC QP from INIT to RTS towards `peer` with first send PSN `psn`, answering
/// and issuing up to `rd_atomic` RDMA READs at once (the bandwidth and latency examples).
pub fn rc_connect<P: Platform>(
    hca: &mut Hca<P>,
    args: &Args,
    mut qp: Qp<P, Rc>,
    peer: &Dest,
    psn: u32,
    rd_atomic: u8,
) -> Res<Qp<P, Rc>> {
    let rtr = RtrAttr {
        path_mtu: args.mtu,
        dest_qpn: peer.qpn,
        rq_psn: peer.psn,
        max_dest_rd_atomic: rd_atomic,
        min_rnr_timer: 12,
        ah: path_to(hca, args, peer),
    };
    qp.to_rtr(hca, rtr)?;
    let rts = RtsAttr {
        sq_psn: psn,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: rd_atomic,
    };
    qp.to_rts(hca, rts)?;
    Ok(qp)
}

/// The RDMA READs an RC QP may have outstanding in the bandwidth and latency examples:
/// 16 (perftest's default on ConnectX), or less if the device says so.
pub fn rd_atomic_depth<P: Platform>(hca: &Hca<P>) -> u8 {
    let caps = hca.caps();
    caps.max_qp_rd_atom
        .min(caps.max_qp_init_rd_atom)
        .clamp(1, 16) as u8
}

/// The test of the bandwidth and latency examples (`-t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// SEND into the peer's posted receives.
    Send,
    /// RDMA WRITE into the peer's buffer.
    Write,
    /// RDMA READ from the peer's buffer.
    Read,
}

impl Op {
    /// The name `-t` takes.
    pub fn name(self) -> &'static str {
        match self {
            Op::Send => "send",
            Op::Write => "write",
            Op::Read => "read",
        }
    }

    /// perftest's title of the test, for `kind` `"BW"` or `"Latency"`.
    pub fn title(self, kind: &str) -> String {
        let what = match self {
            Op::Send => "Send",
            Op::Write => "RDMA_Write",
            Op::Read => "RDMA_Read",
        };
        format!("{what} {kind} Test")
    }

    /// The test `-t` names, `default` without `-t`; an unknown one is an error that lists
    /// the tests, `default` first.
    pub fn parse(args: &Args, default: Op) -> Result<Op, String> {
        let all = [Op::Write, Op::Read, Op::Send];
        let Some(name) = args.op.as_deref() else {
            return Ok(default);
        };
        if let Some(op) = all.into_iter().find(|o| o.name() == name) {
            return Ok(op);
        }
        let others: Vec<&str> = all
            .into_iter()
            .filter(|&o| o != default)
            .map(Op::name)
            .collect();
        Err(format!(
            "-t {name}: the tests are {}, {} and {}",
            default.name(),
            others[0],
            others[1]
        ))
    }
}

/// Both sides say what test they run (`what`) and must say the same, so that flags that
/// differ between client and server fail at once with a clear message.
pub fn agree(session: &mut Session, what: &str) -> Res<()> {
    let theirs = session.exchange_line(what)?;
    if theirs != what {
        return Err(format!(
            "the peer runs \"{theirs}\", this side \"{what}\": give both sides the same -t, -s and -n"
        )
        .into());
    }
    Ok(())
}

/// The byte at `off` of buffer `slot` in the bandwidth and latency examples: the sender
/// fills its buffers with it and the receiver checks what arrived against it.
pub fn pattern(slot: usize, off: usize) -> u8 {
    let x = (off as u32).wrapping_mul(0x9e37_79b1) ^ (slot as u32).wrapping_mul(0x85eb_ca6b);
    (x >> 24) as u8 ^ (off as u8)
}

/// Buffer `slot` of `len` bytes filled with [`pattern`].
pub fn pattern_buf(slot: usize, len: usize) -> Vec<u8> {
    (0..len).map(|off| pattern(slot, off)).collect()
}

/// Checks `got` (buffer `slot`) against [`pattern`]; says where it first differs.
pub fn check_pattern(slot: usize, got: &[u8]) -> Result<(), String> {
    match got
        .iter()
        .enumerate()
        .find(|&(off, &b)| b != pattern(slot, off))
    {
        None => Ok(()),
        Some((off, &b)) => Err(format!(
            "buffer {slot}, byte {off}: expected {:#04x}, found {b:#04x}",
            pattern(slot, off)
        )),
    }
}

/// perftest's banner: the dashed rule, the test's title and its settings.
pub fn perftest_banner<P: Platform>(
    hca: &Hca<P>,
    args: &Args,
    title: &str,
    settings: &[(&str, String)],
) {
    let rule = "-".repeat(87);
    println!("{rule}");
    println!("{:>width$}", title, width = 20 + title.len());
    let link = match hca.caps().link_layer {
        LinkLayer::Ethernet => "Ethernet",
        LinkLayer::InfiniBand => "IB",
    };
    println!(" Number of qps   : 1\t\tTransport type : IB");
    println!(" Connection type : RC\t\tUsing SRQ      : OFF");
    for (k, v) in settings {
        println!(" {k:<15} : {v}");
    }
    println!(" Mtu             : {}[B]", args.mtu.bytes().unwrap_or(0));
    println!(" Link type       : {link}");
    if let Some(g) = args.gid_index {
        println!(" GID index       : {g}");
    }
    println!(" Max inline data : 0[B]");
    println!(" Data ex. method : Ethernet");
    println!("{rule}");
}

/// perftest's address lines for one side.
pub fn perftest_address(side: &str, d: &RdmaDest) {
    println!(
        " {side} address: LID {:04x} QPN {:#06x} PSN {:#08x} RKey {:#08x} VAddr {:#016x}",
        d.dest.lid, d.dest.qpn, d.dest.psn, d.rkey, d.addr
    );
    println!(" GID: {}", d.dest.gid);
}

/// perftest's header once both sides are connected: the banner, both address lines and
/// the rule under them.
pub fn perftest_header<P: Platform>(
    hca: &Hca<P>,
    args: &Args,
    title: &str,
    settings: &[(&str, String)],
    me: &RdmaDest,
    peer: &RdmaDest,
) {
    perftest_banner(hca, args, title, settings);
    perftest_address("local", me);
    perftest_address("remote", peer);
    println!("{}", "-".repeat(87));
}

/// Runs `side` on a real ConnectX under VFIO (`--device BDF`).
#[cfg(feature = "vfio")]
pub fn device(
    args: &Args,
    bdf: &str,
    side: impl FnOnce(&mut Hca<uhca::driver::vfio::VfioPlatform>, &Args) -> Res<()>,
) -> Res<()> {
    let platform = uhca::driver::vfio::VfioPlatform::open(bdf)?;
    let mut hca = Hca::open(platform.clone())?;
    let mut args = args.clone();
    if hca.caps().link_layer == LinkLayer::Ethernet {
        let index = *args.gid_index.get_or_insert(0);
        match args.ip {
            Some(ip) => {
                let gid = hca.add_roce_ip(args.ib_port, u16::from(index), ip)?;
                let mac = hca.endpoint(args.ib_port, index)?.mac;
                println!("  RoCEv2 GID {index}: {gid} ({ip}, MAC {mac})");
            }
            None if hca.query_gid(args.ib_port, u16::from(index))?.gid.is_zero() => {
                return Err(format!(
                    "port {} is Ethernet and its GID {index} is empty (no kernel driver fills \
                     the GID table under VFIO): give the port an address with --ip ADDR",
                    args.ib_port
                )
                .into());
            }
            None => {}
        }
    }
    if args.events {
        // The driver's event queue raises MSI-X vector 0 (its `intr`); VFIO signals this
        // eventfd for it.
        let mut fds = platform.enable_interrupts(uhca::driver::vfio::IrqKind::MsiX, 1)?;
        let irq = fds.remove(0);
        args.interrupt = Some(Interrupt(std::sync::Arc::new(move |t| irq.wait(t))));
    }
    side(&mut hca, &args)?;
    if args.events {
        platform.disable_interrupts()?;
    }
    hca.close()?;
    Ok(())
}

/// Without the `vfio` feature there is no `--device`.
#[cfg(not(feature = "vfio"))]
pub fn device(
    _: &Args,
    _: &str,
    _side: impl FnOnce(&mut Hca<MockPlatform>, &Args) -> Res<()>,
) -> Res<()> {
    Err("--device needs the VFIO platform: build with `--features vfio`".into())
}

/// Runs an example's `side` (`fn(&mut Hca<P>, Side) -> Res<()>`, generic over the
/// platform) in the mode the flags chose, and exits with status 1 and the example's name
/// on failure.
#[allow(unused_macros)] // not every example has all three modes
macro_rules! run_modes {
    ($name:expr, $args:expr, $side:path) => {{
        let args: &common::Args = &$args;
        let result = match &args.mode {
            common::Mode::Mock => common::run_mock_pair(args, $side),
            common::Mode::Udp(ip) => common::run_udp(args, *ip, $side),
            common::Mode::Device(bdf) => {
                common::device(args, bdf, |hca, a| $side(hca, common::Side::of(a)))
            }
        };
        if let Err(e) = result {
            eprintln!("{}: {e}", $name);
            std::process::exit(1);
        }
    }};
}
#[allow(unused_imports)]
pub(crate) use run_modes;

/// Takes an example's objects down in order: the QP to ERR, its last completions drained,
/// then QP, CQ, MR (its memory comes back and is dropped) and PD destroyed.
pub fn take_down<P, T>(
    hca: &mut Hca<P>,
    mut qp: Qp<P, T>,
    mut cq: Cq<P>,
    mr: Mr<P>,
    pd: Pd<P>,
) -> Res<()>
where
    P: Platform,
    T: QpTransport,
{
    qp.to_err(hca)?;
    let mut drain = [WorkCompletion::default(); 16];
    while cq.poll(&mut drain)? != 0 {}
    // A refused destroy gives the object back; here only its error matters.
    qp.destroy(hca).map_err(uhca::driver::Error::from)?;
    cq.destroy(hca).map_err(uhca::driver::Error::from)?;
    mr.destroy(hca).map_err(uhca::driver::Error::from)?;
    pd.destroy(hca).map_err(uhca::driver::Error::from)?;
    Ok(())
}
