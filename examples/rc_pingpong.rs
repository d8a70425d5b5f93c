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
//! posted (default 500); path MTU 1024 unless `-m`. `-c`/`--chk` checks every message
//! received, as rdma-core's `--chk` does and more: the client sends 0xc5 bytes with 0 at
//! each page's first byte (rdma-core's mark) and checks each answer is exactly that; the
//! server checks each message is what uhca's or rdma-core's client sends
//! (`common::Chk`).

#[path = "common/mod.rs"]
#[macro_use] // println!/eprintln! that stay quiet on a closed pipe (common/print.rs)
mod common;

use common::{RECV_WRID, Res, SEND_WRID, Side};
use uhca::driver::Hca;
use uhca::driver::verbs::{Rc, RecvWr, SendOp, SendWr};
use uhca::fwif::consts::AccessFlags;
use uhca::hal::{DmaMem, Platform};

/// One side of the ping-pong on an HCA that is up (`side`: client or server).
fn pingpong<P: Platform>(hca: &mut Hca<P>, mut side: Side<'_>) -> Res<()> {
    let args = side.args;
    let spec = common::Spec {
        cq_depth: args.rx_depth + 1,
        mr_len: args.size,
        access: AccessFlags::LOCAL_WRITE,
        send_wr: 1,
        recv_wr: args.rx_depth,
        qkey: 0,
    };
    let (pd, mut cq, mut mr, mut qp) = common::open_objects::<_, Rc>(hca, args, &spec)?;
    let client = side.is_client();
    if args.chk {
        common::Chk::fill(mr.mem_mut(), 0, args.size, client);
    } else {
        mr.mem_mut().fill(0, args.size, 0x7b);
    }
    let sge = [mr.sge(0, args.size)?];
    let recv = RecvWr {
        wr_id: RECV_WRID,
        sg_list: &sge,
    };
    common::post_rx_depth(&mut qp, &recv, args)?;

    let me = common::my_dest(hca, args, qp.qpn(), common::random_psn())?;
    common::print_dest("local address: ", &me);
    let (peer, (), mut qp) = common::exchange_rc(hca, &mut side, &me, qp, 1)?;
    common::print_dest("remote address:", &peer);

    let send = SendWr::new(SEND_WRID, SendOp::Send, &sge);
    let mut checked = 0u64;
    common::pingpong_loop(hca, &mut cq, &mut qp, args, client, &send, &recv, || {
        if args.chk {
            common::Chk::check(mr.mem(), 0, args.size, client)?;
            checked += 1;
        }
        Ok(())
    })?;
    if args.chk {
        println!("--chk: {checked} messages received as sent");
    }

    // Take the QP down in order: flush what is left, then destroy.
    common::take_down(hca, qp, cq, mr, pd)
}

fn main() {
    let args = common::parse_args("rc_pingpong", 4096, 1000);
    common::run_modes!("rc_pingpong", args, pingpong);
}
