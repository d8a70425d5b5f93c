//! `rc_pingpong`: rdma-core's `ibv_rc_pingpong`, on uhca. The out-of-band exchange is the
//! same bytes on the same TCP port, so either side can be the rdma-core tool.
//!
//! ```sh
//! cargo run --example rc_pingpong -- --mock                 # server and client in one process
//! cargo run --example rc_pingpong -- --udp 10.0.0.1 -g 0    # server, RoCEv2 over real UDP
//! cargo run --example rc_pingpong -- --udp 10.0.0.2 -g 0 10.0.0.1   # client
//! ibv_rc_pingpong -d rxe0 -g 1 10.0.0.1                     # or rdma-core as the client
//! ```
//!
//! As in rdma-core: the client sends `size` bytes, the server answers with the same, for
//! `iters` round trips, each side keeping `rx_depth` receives posted.

#[path = "common/mod.rs"]
mod common;

use std::net::TcpListener;
use std::time::Instant;

use common::{Args, Mode};
use uhca::driver::Hca;
use uhca::driver::verbs::{
    InitAttr, Qp, QpCaps, QpInitAttr, Rc, RecvReady, RecvWr, RtrAttr, RtsAttr, SendOp, SendWr, Sge,
    WcStatus, WorkCompletion, state,
};
use uhca::fwif::consts::AccessFlags;
use uhca::hal::{DmaMem, Platform};
use uhca::oob::{self, Dest};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

/// Posts up to `n` copies of `recv`; returns how many went in.
fn post_recvs<P: Platform + Clone, S: RecvReady>(
    qp: &mut Qp<P, Rc, S>,
    hca: &mut Hca<P>,
    recv: RecvWr<'_>,
    n: u32,
) -> u32 {
    let mut posted = 0;
    for _ in 0..n {
        if qp.post_recv(hca, &[recv]).is_err() {
            break;
        }
        posted += 1;
    }
    posted
}

/// One side of the ping-pong on an HCA that is up. `server`: `None` to listen.
fn pingpong<P: Platform + Clone>(
    hca: &mut Hca<P>,
    args: &Args,
    server: Option<&str>,
    listener: Option<TcpListener>,
) -> Res<(u64, f64)> {
    let pd = hca.alloc_pd()?;
    let cq = hca.create_cq(args.rx_depth + 1)?;
    let mut mr = hca.alloc_mr(&pd, args.size, AccessFlags::LOCAL_WRITE)?;
    let cap = QpCaps {
        max_send_wr: 1,
        max_recv_wr: args.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = hca.create_qp::<Rc>(
        &pd,
        &QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap,
        },
    )?;
    let mut qp = qp
        .to_init(
            hca,
            InitAttr {
                port: args.ib_port,
                ..InitAttr::default()
            },
        )
        .map_err(|f| f.error)?;
    let mut cq = cq;

    let sge = [Sge {
        addr: mr.iova(),
        len: args.size as u32,
        lkey: mr.lkey(),
    }];
    let recv = RecvWr {
        wr_id: RECV_WRID,
        sg_list: &sge,
    };
    let mut routs = post_recvs(&mut qp, hca, recv, args.rx_depth);
    if routs < args.rx_depth {
        return Err(format!("couldn't post receive ({routs})").into());
    }

    let psn = common::random_psn();
    let me = common::my_dest(hca, args, qp.qpn(), psn)?;
    println!(
        "  local address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        me.lid, me.qpn, me.psn, me.gid
    );
    let connect = |hca: &mut Hca<P>, qp, peer: &Dest| -> Res<_> {
        let rtr = RtrAttr {
            path_mtu: args.mtu,
            dest_qpn: peer.qpn,
            rq_psn: peer.psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah: common::path_to(hca, args, peer),
        };
        let qp = Qp::<P, Rc, state::Init>::to_rtr(qp, hca, rtr).map_err(|f| f.error)?;
        let rts = RtsAttr {
            sq_psn: psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        };
        Ok(Qp::<P, Rc, state::Rtr>::to_rts(qp, hca, rts).map_err(|f| f.error)?)
    };
    let (peer, mut qp) = match server {
        Some(s) => {
            let peer = oob::client_exchange(s, args.port, &me, common::OOB_TIMEOUT)?;
            (peer, connect(hca, qp, &peer)?)
        }
        None => {
            let listener = match listener {
                Some(l) => l,
                None => TcpListener::bind(("0.0.0.0", args.port))?,
            };
            let mut connected = None;
            let mut qp_slot = Some(qp);
            let peer = oob::server_exchange(&listener, &me, common::OOB_TIMEOUT, |peer| {
                let qp = qp_slot.take().ok_or("QP already connected")?;
                connected = Some(connect(hca, qp, peer).map_err(|e| e.to_string())?);
                Ok(())
            })?;
            (peer, connected.ok_or("not connected")?)
        }
    };
    println!(
        "  remote address: LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        peer.lid, peer.qpn, peer.psn, peer.gid
    );

    mr.mem_mut().fill(0, args.size, 0x7b);
    let send = SendWr::new(SEND_WRID, SendOp::Send, &sge);
    let start = Instant::now();
    let mut pending = RECV_WRID;
    if server.is_some() {
        qp.post_send(hca, &[send])
            .map_err(|e| format!("couldn't post send: {e:?}"))?;
        pending |= SEND_WRID;
    }
    let (mut rcnt, mut scnt) = (0u64, 0u64);
    let mut wc = [WorkCompletion::default(); 2];
    let deadline = std::time::Duration::from_secs(60);
    while rcnt < args.iters || scnt < args.iters {
        let n = cq.poll(hca, &mut wc)?;
        if n == 0 {
            if start.elapsed() > deadline {
                return Err(format!(
                    "no completion for {deadline:?} ({rcnt} received, {scnt} sent)"
                )
                .into());
            }
            std::hint::spin_loop();
            continue;
        }
        for c in &wc[..n] {
            if c.status != WcStatus::Success {
                return Err(format!("failed status {:?} for wr_id {}", c.status, c.wr_id).into());
            }
            match c.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    routs -= 1;
                    if routs <= 1 {
                        routs += post_recvs(&mut qp, hca, recv, args.rx_depth - routs);
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
                qp.post_send(hca, &[send])
                    .map_err(|e| format!("couldn't post send: {e:?}"))?;
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

    // Drain: the peer's last completions are in; take the QP down in order.
    let qp = qp.to_err(hca).map_err(|f| f.error)?;
    let mut drain = [WorkCompletion::default(); 16];
    while cq.poll(hca, &mut drain)? != 0 {}
    qp.destroy(hca).map_err(|f| f.error)?;
    cq.destroy(hca).map_err(|f| f.error)?;
    let _ = mr.destroy(hca).map_err(|f| f.error)?;
    pd.destroy(hca).map_err(|f| f.error)?;
    Ok((args.iters, secs))
}

fn main() {
    let args = common::parse_args("rc_pingpong", 4096, 1000);
    if let Err(e) = run(&args) {
        eprintln!("rc_pingpong: {e}");
        std::process::exit(1);
    }
}

fn run(args: &Args) -> Res<()> {
    match &args.mode {
        Mode::Mock => {
            // Server (10.0.0.2) on a thread, client (10.0.0.1) here, over the in-memory fabric;
            // the out-of-band exchange runs over loopback TCP, as between two processes.
            let (fabric, _pump) = common::mock_fabric();
            let (_dev_s, mut hca_s) = common::mock_node(&fabric, 2, None)?;
            let (_dev_c, mut hca_c) = common::mock_node(&fabric, 1, None)?;
            let listener = TcpListener::bind(("127.0.0.1", 0))?;
            let mut cargs = args.clone();
            cargs.port = listener.local_addr()?.port();
            cargs.gid_index.get_or_insert(0);
            let sargs = cargs.clone();
            let server = std::thread::spawn(move || -> Result<(), String> {
                println!("server:");
                pingpong(&mut hca_s, &sargs, None, Some(listener)).map_err(|e| e.to_string())?;
                hca_s.close().map_err(|e| e.to_string())
            });
            let client = pingpong(&mut hca_c, &cargs, Some("127.0.0.1"), None);
            let server = server.join().map_err(|_| "server thread panicked")?;
            client?;
            server?;
            hca_c.close()?;
            Ok(())
        }
        Mode::Udp(ip) => {
            let (_fabric, _pump, _dev, mut hca) = common::udp_node(*ip)?;
            let mut a = args.clone();
            a.gid_index.get_or_insert(0);
            pingpong(&mut hca, &a, args.server.as_deref(), None)?;
            hca.close()?;
            Ok(())
        }
        Mode::Device(bdf) => device(args, bdf),
    }
}

#[cfg(feature = "vfio")]
fn device(args: &Args, bdf: &str) -> Res<()> {
    let platform = uhca::driver::vfio::VfioPlatform::open(bdf)?;
    let mut hca = Hca::open(&platform)?;
    pingpong(&mut hca, args, args.server.as_deref(), None)?;
    hca.close()?;
    Ok(())
}

#[cfg(not(feature = "vfio"))]
fn device(_: &Args, _: &str) -> Res<()> {
    Err("--device needs the VFIO platform: build with `--features vfio`".into())
}
