//! `ud_pingpong`: rdma-core's `ibv_ud_pingpong`, on uhca, with the same out-of-band
//! exchange, so either side can be the rdma-core tool.
//!
//! ```sh
//! cargo run --example ud_pingpong -- --mock                 # server and client in one process
//! cargo run --example ud_pingpong -- --udp 10.0.0.1         # server, RoCEv2 over real UDP
//! cargo run --example ud_pingpong -- --udp 10.0.0.2 10.0.0.1   # client
//! ```
//!
//! As in rdma-core: datagrams of `size` bytes (default 2048, at most the path MTU), Q_Key
//! 0x11111111, receive buffers 40 bytes larger for the GRH the HCA places first.

#[path = "common/mod.rs"]
#[macro_use] // println!/eprintln! that stay quiet on a closed pipe (common/print.rs)
mod common;

use std::net::TcpListener;

use common::{Args, RECV_WRID, SEND_WRID};
use uhca::driver::Hca;
use uhca::driver::verbs::{InitAttr, QpCaps, QpInitAttr, RecvWr, SendOp, SendWr, Sge, Ud, UdDest};
use uhca::fwif::consts::AccessFlags;
use uhca::hal::{DmaMem, Platform};
use uhca::oob::Dest;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// rdma-core's Q_Key for the UD ping-pong.
const QKEY: u32 = 0x1111_1111;
/// The GRH the HCA writes at the start of every UD receive buffer.
const GRH_BYTES: usize = 40;

fn pingpong<P: Platform + Clone>(
    hca: &mut Hca<P>,
    args: &Args,
    server: Option<&str>,
    listener: Option<TcpListener>,
) -> Res<()> {
    let mtu = hca.query_port(args.ib_port)?.active_mtu;
    if let Some(m) = mtu.bytes().filter(|&m| args.size > m as usize) {
        return Err(format!(
            "requested size {} is larger than the port MTU ({m}); ask for at most {m} with -s",
            args.size
        )
        .into());
    }
    let pd = hca.alloc_pd()?;
    let mut cq = hca.create_cq(args.rx_depth + 1)?;
    let mut mr = hca.alloc_mr(&pd, args.size + GRH_BYTES, AccessFlags::LOCAL_WRITE)?;
    let cap = QpCaps {
        max_send_wr: 1,
        max_recv_wr: args.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = hca.create_qp::<Ud>(
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
        qkey: QKEY,
        ..InitAttr::default()
    };
    let mut qp = qp.to_init(hca, init).map_err(|f| f.error)?;

    let rsge = [Sge {
        addr: mr.iova(),
        len: (args.size + GRH_BYTES) as u32,
        lkey: mr.lkey(),
    }];
    let recv = RecvWr {
        wr_id: RECV_WRID,
        sg_list: &rsge,
    };
    let routs = common::post_recvs(&mut qp, &recv, args.rx_depth);
    if routs < args.rx_depth {
        return Err(format!("couldn't post receive ({routs})").into());
    }
    let psn = common::random_psn();
    let qp = qp.to_rtr(hca).map_err(|f| f.error)?;
    let mut qp = qp.to_rts(hca, psn).map_err(|f| f.error)?;

    let me = common::my_dest(hca, args, qp.qpn(), psn)?;
    print_dest("local address: ", &me);
    let (peer, ah) = common::exchange(args, server, listener, &me, |peer| {
        Ok(hca.create_ah(args.ib_port, common::path_to(hca, args, peer))?)
    })?;
    print_dest("remote address:", &peer);

    mr.mem_mut().fill(0, args.size + GRH_BYTES, 0x7b);
    let ssge = [Sge {
        addr: mr.iova() + GRH_BYTES as u64,
        len: args.size as u32,
        lkey: mr.lkey(),
    }];
    let dest = UdDest {
        ah: &ah,
        remote_qpn: peer.qpn,
        remote_qkey: QKEY,
    };
    let send = SendWr::new(SEND_WRID, SendOp::Send, &ssge).with_ud(dest);
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

    common::take_down(hca, qp, cq, mr, pd)
}

fn print_dest(what: &str, d: &Dest) {
    println!(
        "  {what} LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        d.lid, d.qpn, d.psn, d.gid
    );
}

fn main() {
    let args = common::parse_args("ud_pingpong", 2048, 1000);
    common::run_modes!("ud_pingpong", args, pingpong);
}
