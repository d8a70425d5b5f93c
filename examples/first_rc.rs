//! A first RC connection with the prelude alone: open an HCA; make a PD, a CQ, a memory
//! region and an RC QP; swap with the peer over TCP what each needs; connect; the client
//! RDMA WRITEs into the server's memory and SENDs a message; the server checks both.
//!
//! ```text
//! first_rc --device 0000:3b:00.0 [--ip 10.0.0.2]               # server (VFIO)
//! first_rc --device 0000:3c:00.0 [--ip 10.0.0.1] SERVER_HOST   # client
//! ```
//! `--ip` (Ethernet ports) installs the RoCEv2 GID of the address: under VFIO nothing else
//! does. `--udp IP` instead of `--device`: a mock HCA whose RoCEv2 port is a UDP socket.
use std::net::{IpAddr, Ipv4Addr};
use uhca::oob::Link;
use uhca::prelude::*;

type Res<T> = Result<T, Box<dyn std::error::Error>>;
const WRITTEN: &[u8] = b"written by the client's RDMA WRITE";
const SENT: &[u8] = b"hello from the client's SEND";
const MINUTE: std::time::Duration = std::time::Duration::from_secs(60);
const USAGE: &str = "usage: first_rc (--device BDF [--ip IP] | --udp IP) [-p PORT] [SERVER] \
                     (--device needs `--features vfio`)";

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opt = |f: &str| args.windows(2).find(|w| w[0] == f).map(|w| w[1].clone());
    let port: u16 = opt("-p").map_or(Ok(18515), |p| p.parse())?;
    // The client names the server (the last argument, not a flag's value); the server
    // listens and takes the client's connection before its bring-up.
    let odd = args.len() % 2 == 1;
    let server = args.last().filter(|a| odd && !a.starts_with('-'));
    // Each waits for the other 60 s at most (the client tries again until the server listens).
    let peer = (
        server.is_some(),
        Link::meet(server.map(String::as_str), port, MINUTE)?,
    );
    #[cfg(feature = "vfio")]
    if let Some(bdf) = opt("--device") {
        let hca = Hca::open(uhca::driver::vfio::VfioPlatform::open(&bdf)?)?;
        return run(hca, opt("--ip").map(|s| s.parse()).transpose()?, peer);
    }
    let local: Ipv4Addr = opt("--udp").ok_or(USAGE)?.parse()?;
    let node = uhca::mock::MockHca::udp(local)?; // kept alive while the HCA is open
    run(Hca::open(node.platform())?, Some(local.into()), peer)
}

/// Runs the client (`true`) or the server on `hca`, talking to the other over `tcp`.
fn run<P: Platform>(
    mut hca: Hca<P>,
    ip: Option<IpAddr>,
    (client, mut tcp): (bool, Link),
) -> Res<()> {
    if let Some(ip) = ip {
        let gid = hca.add_roce_ip(1, 0, ip)?;
        println!("RoCEv2 GID 0 installed: {gid} ({ip})");
    }
    let (me, pd, mut cq) = (hca.endpoint(1, 0)?, hca.alloc_pd()?, hca.create_cq(16)?);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mut mr = hca.alloc_mr(&pd, 4096, access)?;
    let mut qp = hca.create_qp::<Rc>(&pd, &QpInitAttr::new(&cq, QpCaps::new(4, 4)))?;
    // Out of band: the endpoint, then the QP number, first PSN, the MR's key and address.
    let psn = 0x1000 | qp.qpn();
    let mine = [u64::from(qp.qpn()), psn.into(), mr.rkey().into(), mr.iova()];
    let mut msg = me.to_bytes().to_vec();
    msg.extend(mine.map(u64::to_be_bytes).as_flattened());
    let theirs = tcp.swap(&msg)?;
    let (ep, nums) = theirs.split_at(Endpoint::LEN);
    let peer = Endpoint::from_bytes(ep.try_into()?).ok_or("not an endpoint")?;
    let n = |i: usize| u64::from_be_bytes(nums[8 * i..8 * i + 8].try_into().unwrap());
    let (peer_qpn, peer_psn, rkey, remote_addr) = (n(0) as u32, n(1) as u32, n(2) as u32, n(3));
    let Endpoint { lid, gid, .. } = peer;
    println!("local QPN {:#x}, LID {}, GID {}", qp.qpn(), me.lid, me.gid);
    println!("remote QPN {peer_qpn:#x}, LID {lid}, GID {gid}");
    let init = InitAttr::new(AccessFlags::REMOTE_WRITE);
    let rtr = RtrAttr::new(me.path_to(&peer, qp.qpn(), peer_qpn), peer_qpn, peer_psn);
    qp.connect(&mut hca, &init, &rtr, &RtsAttr::new(psn))?; // RESET -> INIT -> RTR -> RTS
    if client {
        mr.mem_mut().write_bytes(0, WRITTEN);
        mr.mem_mut().write_bytes(64, SENT);
        tcp.swap(b"r")?; // the server's receive is posted
        let (wsge, ssge) = ([mr.sge(0, WRITTEN.len())?], [mr.sge(64, SENT.len())?]);
        qp.post_send(&[
            SendWr::new(1, SendOp::RdmaWrite { remote_addr, rkey }, &wsge),
            SendWr::new(2, SendOp::Send, &ssge),
        ])?;
        let (a, b) = (poll(&mut cq)?.opcode, poll(&mut cq)?.opcode);
        let (w, s) = (WRITTEN.len(), SENT.len());
        println!("client: RDMA WRITE of {w} B and SEND of {s} B completed ({a:?}, {b:?})");
    } else {
        qp.post_recv(&[RecvWr::new(7, &[mr.sge(64, 64)?])])?;
        tcp.swap(b"r")?; // tell the client
        let wc = poll(&mut cq)?;
        let (mut got, mut written) = (vec![0; wc.byte_len as usize], vec![0; WRITTEN.len()]);
        mr.mem().read_bytes(64, &mut got);
        mr.mem().read_bytes(0, &mut written);
        let text = String::from_utf8_lossy(&got);
        println!("server: received a SEND of {} B: {text:?}", wc.byte_len);
        let w = String::from_utf8_lossy(&written);
        println!("server: the RDMA WRITE left {w:?} in this side's memory");
        if got != SENT || written != WRITTEN {
            return Err("the data is not what the client sent".into());
        }
    }
    tcp.swap(b"d")?; // both sides done: the last acknowledgement has arrived
    drop((qp, mr, cq, pd));
    hca.close()?;
    println!("first_rc: done");
    Ok(())
}

/// Waits for one completion (at most 30 s) and checks that it succeeded.
fn poll<P: Platform>(cq: &mut Cq<P>) -> Res<WorkCompletion> {
    let mut wc = [WorkCompletion::default()];
    match (cq.poll_timeout(&mut wc, 30_000_000_000)?, wc[0].status) {
        (0, _) => Err("no completion within 30 s".into()),
        (_, WcStatus::Success) => Ok(wc[0]),
        (_, s) => Err(format!("work request {} completed with {s:?}", wc[0].wr_id).into()),
    }
}
