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
//! 0x11111111, receive buffers 40 bytes larger for the GRH the HCA places first. `-c`/
//! `--chk` checks every datagram received, as `rc_pingpong --chk` does (rdma-core's
//! `ibv_ud_pingpong` has no such check; its datagrams are 0x7b bytes).

#[path = "common/mod.rs"]
#[macro_use] // println!/eprintln! that stay quiet on a closed pipe (common/print.rs)
mod common;

use common::{RECV_WRID, Res, SEND_WRID, Side};
use uhca::driver::Hca;
use uhca::driver::verbs::{RecvWr, SendOp, SendWr, Ud, UdDest};
use uhca::fwif::consts::AccessFlags;
use uhca::hal::{DmaMem, Platform};

/// rdma-core's Q_Key for the UD ping-pong.
const QKEY: u32 = 0x1111_1111;
/// The GRH the HCA writes at the start of every UD receive buffer.
const GRH_BYTES: usize = 40;

/// One side of the ping-pong on an HCA that is up (`side`: client or server).
fn pingpong<P: Platform>(hca: &mut Hca<P>, mut side: Side<'_>) -> Res<()> {
    let args = side.args;
    let mtu = hca.query_port(args.ib_port)?.active_mtu;
    if let Some(m) = mtu.bytes().filter(|&m| args.size > m as usize) {
        return Err(format!(
            "requested size {} is larger than the port MTU ({m}); ask for at most {m} with -s",
            args.size
        )
        .into());
    }
    let spec = common::Spec {
        cq_depth: args.rx_depth + 1,
        mr_len: args.size + GRH_BYTES,
        access: AccessFlags::LOCAL_WRITE,
        send_wr: 1,
        recv_wr: args.rx_depth,
        qkey: QKEY,
    };
    let (pd, mut cq, mut mr, mut qp) = common::open_objects::<_, Ud>(hca, args, &spec)?;
    let client = side.is_client();
    if args.chk {
        common::Chk::fill(mr.mem_mut(), GRH_BYTES, args.size, client);
    } else {
        mr.mem_mut().fill(0, args.size + GRH_BYTES, 0x7b);
    }
    // Each receive takes the GRH and the datagram; each send is the datagram alone.
    let rsge = [mr.sge(0, args.size + GRH_BYTES)?];
    let recv = RecvWr {
        wr_id: RECV_WRID,
        sg_list: &rsge,
    };
    common::post_rx_depth(&mut qp, &recv, args)?;
    let psn = common::random_psn();
    qp.to_rtr(hca)?;
    qp.to_rts(hca, psn)?;

    let me = common::my_dest(hca, args, qp.qpn(), psn)?;
    common::print_dest("local address: ", &me);
    let (peer, (), ah) = common::exchange(&mut side, &me, |peer| {
        Ok(hca.create_ah(args.ib_port, common::path_to(hca, args, peer))?)
    })?;
    common::print_dest("remote address:", &peer);

    let ssge = [mr.sge(GRH_BYTES, args.size)?];
    let dest = UdDest {
        ah: &ah,
        remote_qpn: peer.qpn,
        remote_qkey: QKEY,
    };
    let send = SendWr::new(SEND_WRID, SendOp::Send, &ssge).with_ud(dest);
    let mut checked = 0u64;
    common::pingpong_loop(hca, &mut cq, &mut qp, args, client, &send, &recv, || {
        if args.chk {
            // The datagram, after the GRH the HCA placed first.
            common::Chk::check(mr.mem(), GRH_BYTES, args.size, client)?;
            checked += 1;
        }
        Ok(())
    })?;
    if args.chk {
        println!("--chk: {checked} messages received as sent");
    }

    common::take_down(hca, qp, cq, mr, pd)
}

fn main() {
    let args = common::parse_args("ud_pingpong", 2048, 1000);
    common::run_modes!("ud_pingpong", args, pingpong);
}
