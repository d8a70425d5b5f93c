//! `rc_pingpong`: rdma-core's `ibv_rc_pingpong`, on uhca. The out-of-band exchange is the
//! same bytes on the same TCP port, so either side can be the rdma-core tool.
//!
//! ```sh
//! cargo run --example rc_pingpong -- --mock                 # server and client in one process
//! cargo run --example rc_pingpong -- --udp 10.0.0.1         # server, RoCEv2 over real UDP
//! cargo run --example rc_pingpong -- --udp 10.0.0.2 10.0.0.1   # client
//! ibv_rc_pingpong -d rxe0 -g 1 10.0.0.1                     # or rdma-core as the client
//! ```
//!
//! As in rdma-core: the client sends `size` bytes (default 4096), the server answers with
//! the same, for `iters` round trips (default 1000), each side keeping `rx_depth` receives
//! posted (default 500); path MTU 1024 unless `-m`.

#[path = "common/mod.rs"]
#[macro_use] // println!/eprintln! that stay quiet on a closed pipe (common/print.rs)
mod common;

use std::net::TcpListener;

use common::{Args, RECV_WRID, SEND_WRID};
use uhca::driver::Hca;
use uhca::driver::verbs::{
    InitAttr, Qp, QpCaps, QpInitAttr, Rc, RecvWr, RtrAttr, RtsAttr, SendOp, SendWr, Sge, state,
};
use uhca::fwif::consts::AccessFlags;
use uhca::hal::{DmaMem, Platform};
use uhca::oob::Dest;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// One side of the ping-pong on an HCA that is up. `server`: `None` to listen.
fn pingpong<P: Platform + Clone>(
    hca: &mut Hca<P>,
    args: &Args,
    server: Option<&str>,
    listener: Option<TcpListener>,
) -> Res<()> {
    let pd = hca.alloc_pd()?;
    let mut cq = hca.create_cq(args.rx_depth + 1)?;
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
    let init = InitAttr {
        port: args.ib_port,
        ..InitAttr::default()
    };
    let mut qp = qp.to_init(hca, init).map_err(|f| f.error)?;

    let sge = [Sge {
        addr: mr.iova(),
        len: args.size as u32,
        lkey: mr.lkey(),
    }];
    let recv = RecvWr {
        wr_id: RECV_WRID,
        sg_list: &sge,
    };
    let routs = common::post_recvs(&mut qp, &recv, args.rx_depth);
    if routs < args.rx_depth {
        return Err(format!("couldn't post receive ({routs})").into());
    }

    let psn = common::random_psn();
    let me = common::my_dest(hca, args, qp.qpn(), psn)?;
    print_dest("local address: ", &me);
    let (peer, mut qp) = common::exchange(args, server, listener, &me, |peer| {
        let rtr = RtrAttr {
            path_mtu: args.mtu,
            dest_qpn: peer.qpn,
            rq_psn: peer.psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah: common::path_to(hca, args, peer),
        };
        let qp: Qp<P, Rc, state::Rtr> = qp.to_rtr(hca, rtr).map_err(|f| f.error)?;
        let rts = RtsAttr {
            sq_psn: psn,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        };
        Ok(qp.to_rts(hca, rts).map_err(|f| f.error)?)
    })?;
    print_dest("remote address:", &peer);

    mr.mem_mut().fill(0, args.size, 0x7b);
    let send = SendWr::new(SEND_WRID, SendOp::Send, &sge);
    common::pingpong_loop(
        hca,
        &mut cq,
        &mut qp,
        args,
        server.is_some(),
        routs,
        &send,
        &recv,
    )?;

    // Take the QP down in order: flush what is left, then destroy.
    common::take_down(hca, qp, cq, mr, pd)
}

fn print_dest(what: &str, d: &Dest) {
    println!(
        "  {what} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        d.lid, d.qpn, d.psn, d.gid
    );
}

fn main() {
    let args = common::parse_args("rc_pingpong", 4096, 1000);
    common::run_modes!("rc_pingpong", args, pingpong);
}
