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
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpListener, TcpStream};
use std::time::{Duration, Instant};
use uhca::prelude::*;

type Res<T> = Result<T, Box<dyn std::error::Error>>;
const WRITTEN: &[u8] = b"written by the client's RDMA WRITE";
const SENT: &[u8] = b"hello from the client's SEND";
const USAGE: &str = "usage: first_rc (--device BDF [--ip IP] | --udp IP) [-p PORT] [SERVER] \
                     (--device needs `--features vfio`)";

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opt = |f: &str| args.windows(2).find(|w| w[0] == f).map(|w| w[1].clone());
    let port: u16 = opt("-p").map_or(Ok(18515), |p| p.parse())?;
    // The client names the server (the last argument, not a flag's value).
    let server = args
        .last()
        .filter(|a| args.len() % 2 == 1 && !a.starts_with('-'))
        .cloned();
    let client = server.is_some();
    // The server listens before its bring-up, so a client that starts soon after finds it.
    let listener = server
        .is_none()
        .then(|| TcpListener::bind(("0.0.0.0", port)))
        .transpose()?;
    let tcp = move || match (listener, server) {
        (Some(l), _) => Ok(l.accept()?.0),
        (None, host) => TcpStream::connect((host.unwrap_or_default(), port)),
    };
    #[cfg(feature = "vfio")]
    if let Some(bdf) = opt("--device") {
        let ip: Option<IpAddr> = opt("--ip").map(|s| s.parse()).transpose()?;
        let hca = Hca::open(uhca::driver::vfio::VfioPlatform::open(&bdf)?)?;
        return run(hca, ip, client, tcp);
    }
    // No --device: a mock ConnectX whose RoCEv2 port is a UDP socket on the --udp address.
    let local: Ipv4Addr = opt("--udp").ok_or(USAGE)?.parse()?;
    let [a, b, c, d] = local.octets();
    let mac = [2, 0, a, b, c, d];
    let config = uhca::mock::MockConfig {
        mac,
        ..Default::default()
    };
    let dev = uhca::mock::MockHca::new(config);
    let fabric = uhca::mock::Fabric::ethernet();
    fabric.attach(&dev);
    fabric.attach_udp(&dev, local)?;
    let _pump = fabric.start_pump(20);
    let hca = Hca::open(dev.platform())?;
    run(hca, Some(IpAddr::V4(local)), client, tcp)
}

fn run<P: Platform>(
    mut hca: Hca<P>,
    ip: Option<IpAddr>,
    client: bool,
    tcp: impl FnOnce() -> std::io::Result<TcpStream>,
) -> Res<()> {
    if let Some(ip) = ip {
        let gid = hca.add_roce_ip(1, 0, ip)?;
        println!("RoCEv2 GID 0 installed: {gid} ({ip})");
    }
    let me = hca.endpoint(1, 0)?;
    let pd = hca.alloc_pd()?;
    let mut cq = hca.create_cq(16)?;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mut mr = hca.alloc_mr(&pd, 4096, access)?;
    let cap = QpCaps {
        max_send_wr: 4,
        max_recv_wr: 4,
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
    let mut qp = hca.create_qp::<Rc>(&pd, &attr)?;
    let mut tcp = tcp()?;
    tcp.set_read_timeout(Some(Duration::from_secs(60)))?;
    // Out of band: the endpoint, QP number, first PSN, and the MR's key and address.
    let psn = 0x1000 | qp.qpn();
    let mut msg = me.to_bytes().to_vec();
    for v in [qp.qpn(), psn, mr.rkey()] {
        msg.extend(v.to_be_bytes());
    }
    msg.extend(mr.iova().to_be_bytes());
    let peer_msg = swap(&mut tcp, &msg)?;
    let (ep, nums) = peer_msg.split_at(Endpoint::LEN);
    let peer = Endpoint::from_bytes(ep.try_into()?).ok_or("not an endpoint")?;
    let word = |i: usize| u32::from_be_bytes(nums[4 * i..4 * i + 4].try_into().unwrap());
    let (peer_qpn, peer_psn, rkey) = (word(0), word(1), word(2));
    let remote_addr = u64::from_be_bytes(nums[12..20].try_into()?);
    println!("local QPN {:#x}, LID {}, GID {}", qp.qpn(), me.lid, me.gid);
    println!(
        "remote QPN {peer_qpn:#x}, LID {}, GID {}",
        peer.lid, peer.gid
    );
    let init = InitAttr {
        access: AccessFlags::REMOTE_WRITE,
        ..InitAttr::default()
    };
    let ah = me.path_to(&peer, qp.qpn(), peer_qpn);
    let rtr = RtrAttr {
        dest_qpn: peer_qpn,
        rq_psn: peer_psn,
        ah,
        ..RtrAttr::default()
    };
    let rts = RtsAttr {
        sq_psn: psn,
        ..RtsAttr::default()
    };
    qp.connect(&mut hca, &init, &rtr, &rts)?; // RESET -> INIT -> RTR -> RTS
    if client {
        mr.mem_mut().write_bytes(0, WRITTEN);
        mr.mem_mut().write_bytes(64, SENT);
        swap(&mut tcp, b"r")?; // the server's receive is posted
        let (wsge, ssge) = ([mr.sge(0, WRITTEN.len())?], [mr.sge(64, SENT.len())?]);
        qp.post_send(&[
            SendWr::new(1, SendOp::RdmaWrite { remote_addr, rkey }, &wsge),
            SendWr::new(2, SendOp::Send, &ssge),
        ])?;
        let (a, b) = (poll(&mut cq)?.opcode, poll(&mut cq)?.opcode);
        let (w, s) = (WRITTEN.len(), SENT.len());
        println!("client: RDMA WRITE of {w} B and SEND of {s} B completed ({a:?}, {b:?})");
    } else {
        qp.post_recv(&[RecvWr {
            wr_id: 7,
            sg_list: &[mr.sge(64, 64)?],
        }])?;
        swap(&mut tcp, b"r")?; // tell the client
        let wc = poll(&mut cq)?;
        let (mut got, mut written) = (vec![0; wc.byte_len as usize], vec![0; WRITTEN.len()]);
        mr.mem().read_bytes(64, &mut got);
        mr.mem().read_bytes(0, &mut written);
        let (text, w) = (
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(&written),
        );
        println!("server: received a SEND of {} B: {text:?}", wc.byte_len);
        println!("server: the RDMA WRITE left {w:?} in this side's memory");
        if got != SENT || written != WRITTEN {
            return Err("the data is not what the client sent".into());
        }
    }
    swap(&mut tcp, b"d")?; // both sides done: the last acknowledgement has arrived
    drop((qp, mr, cq, pd));
    hca.close()?;
    println!("first_rc: done");
    Ok(())
}

/// Sends `mine` and returns as many bytes from the peer (who sends the same kind of message).
fn swap(tcp: &mut TcpStream, mine: &[u8]) -> Res<Vec<u8>> {
    tcp.write_all(mine)?;
    let mut theirs = vec![0; mine.len()];
    tcp.read_exact(&mut theirs)?;
    Ok(theirs)
}

/// Waits for one completion (at most 30 s) and checks that it succeeded.
fn poll<P: Platform>(cq: &mut Cq<P>) -> Res<WorkCompletion> {
    let (mut wc, start) = ([WorkCompletion::default()], Instant::now());
    while cq.poll(&mut wc)? == 0 {
        if start.elapsed() > Duration::from_secs(30) {
            return Err("no completion within 30 s".into());
        }
        std::thread::yield_now();
    }
    match wc[0].status {
        WcStatus::Success => Ok(wc[0]),
        s => Err(format!("work request {} completed with {s:?}", wc[0].wr_id).into()),
    }
}
