//! `hostile_target`: the target of the hostile-network comparison (`tests/hostile_net/`).
//!
//! One mock HCA whose RoCEv2 port is a real UDP socket on `LOCAL_IP:4791` (as the examples'
//! `--udp`), driven by uhca, creating on command the queue pair that crafted packets are
//! then thrown at, and reporting afterwards what the packets did to it: its state, the
//! completions it produced and a hash of every byte of its memory regions. The C program
//! `tests/vm/src/hostile_verbs.c` does the same on Linux Soft-RoCE with libibverbs; both
//! speak this line protocol on standard input and output (`tests/hostile_net/hostile.py`
//! drives either):
//!
//! ```text
//! rc PEER_IP PEER_QPN RQ_PSN MAX_DEST_RD_ATOMIC  -> QP qpn=N rkey=K va=V len=L rkey_other=K2 va_other=V2
//! uc PEER_IP PEER_QPN RQ_PSN                     -> the same, for a UC QP (remote write only)
//! ud QKEY                                        -> QP qpn=N qkey=Q
//! reset                                          -> QP qpn=N               (an RC QP left in RESET)
//! state                                          -> STATE state=RTS hash=H recv=STATUS:SRC_QP:LEN,...|none
//! quit
//! ```
//!
//! An `rc` QP is in RTS, connected to `PEER_QPN` at `::ffff:PEER_IP`, path MTU 1024, with
//! remote write, read and atomic access, and one receive posted. Its memory: one region
//! (`va`, `len` = 8192 bytes: the packets aim at its first half, the second half is the
//! receive buffer) in its PD, and a second region (`va_other`, 4096 bytes) in another PD.
//! Both are filled with a fixed pattern at every `rc`/`ud`/`reset`.
//!
//! ```sh
//! cargo run --example hostile_target -- --udp 127.0.13.1
//! ```

#[path = "common/mod.rs"]
#[macro_use] // println!/eprintln! that stay quiet on a closed pipe (common/print.rs)
mod common;

use std::io::BufRead;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use uhca::driver::Hca;
use uhca::driver::addr::{AhAttr, Gid};
use uhca::driver::verbs::{
    Cq, InitAttr, Mr, Qp, QpCaps, QpInitAttr, QpTransport, Rc, RecvWr, RtrAttr, RtsAttr, Sge, Uc,
    Ud, WcStatus, WorkCompletion,
};
use uhca::fwif::consts::AccessFlags;
use uhca::hal::{DmaMem, Platform};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// Bytes of the part of the region the packets aim at; the receive buffer follows it.
const WINDOW: usize = 4096;
/// The receive buffer (a UD receive gets the 40-byte GRH first).
const RECV: usize = 4096;

/// The pattern every region holds before a case.
fn pattern(i: usize) -> u8 {
    ((i * 31 + 7) & 0xff) as u8
}

/// 64-bit FNV-1a of `bytes`, continuing from `h`.
fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The one QP alive at a time.
enum Target<P: Platform> {
    None,
    Rc(Qp<P, Rc>),
    Uc(Qp<P, Uc>),
    Ud(Qp<P, Ud>),
    Reset(Qp<P, Rc>),
}

struct Ctx<P: Platform> {
    pd: uhca::driver::verbs::Pd<P>,
    cq: Cq<P>,
    mr: Mr<P>,
    mr_other: Mr<P>,
    target: Target<P>,
    recvs: Vec<String>,
}

fn refill<P: Platform>(mr: &mut Mr<P>) {
    let n = mr.mem().len();
    let bytes: Vec<u8> = (0..n).map(pattern).collect();
    mr.mem_mut().write_bytes(0, &bytes);
}

/// INIT → RTR of a connected QP: to `peer_qpn` at `::ffff:peer`, path MTU 1024.
fn rtr_attr(peer: Ipv4Addr, peer_qpn: u32, rq_psn: u32, rd: u8) -> RtrAttr {
    RtrAttr {
        dest_qpn: peer_qpn,
        rq_psn,
        max_dest_rd_atomic: rd,
        ah: AhAttr::RoceV2 {
            sgid_index: 0,
            dgid: Gid::from_ipv4(peer.octets()),
            dmac: uhca::driver::addr::Mac([0xff; 6]),
            udp_sport: 0xc000,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            sl: 0,
        },
        ..RtrAttr::default()
    }
}

fn caps() -> QpCaps {
    QpCaps {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

impl<P: Platform> Ctx<P> {
    /// Destroys the current QP and starts the next case from clean memory and an empty CQ.
    fn clear(&mut self, hca: &mut Hca<P>) -> Res<()> {
        let r = match std::mem::replace(&mut self.target, Target::None) {
            Target::None => Ok(()),
            Target::Rc(q) => q.destroy(hca).map_err(uhca::driver::Error::from),
            Target::Uc(q) => q.destroy(hca).map_err(uhca::driver::Error::from),
            Target::Ud(q) => q.destroy(hca).map_err(uhca::driver::Error::from),
            Target::Reset(q) => q.destroy(hca).map_err(uhca::driver::Error::from),
        };
        r?;
        let mut wc = [WorkCompletion::default(); 8];
        while self.cq.poll(&mut wc).map_err(|e| format!("{e:?}"))? > 0 {}
        self.recvs.clear();
        refill(&mut self.mr);
        refill(&mut self.mr_other);
        Ok(())
    }

    /// A new QP of transport `T` in RESET, both its queues on the one CQ.
    fn create<T: QpTransport>(&self, hca: &mut Hca<P>) -> Res<Qp<P, T>> {
        let attr = QpInitAttr {
            send_cq: &self.cq,
            recv_cq: &self.cq,
            srq: None,
            cap: caps(),
        };
        Ok(hca.create_qp::<T>(&self.pd, &attr)?)
    }

    /// A new QP of transport `T` in INIT (with `init`), one receive posted into the
    /// receive buffer that follows the window.
    fn create_init<T: QpTransport>(&self, hca: &mut Hca<P>, init: InitAttr) -> Res<Qp<P, T>> {
        let mut qp = self.create::<T>(hca)?;
        qp.to_init(hca, init)?;
        let sge = [Sge {
            addr: self.mr.iova() + WINDOW as u64,
            len: RECV as u32,
            lkey: self.mr.lkey(),
        }];
        qp.post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &sge,
        }])
        .map_err(|e| format!("post_recv: {e:?}"))?;
        Ok(qp)
    }

    fn rc(
        &mut self,
        hca: &mut Hca<P>,
        peer: Ipv4Addr,
        peer_qpn: u32,
        rq_psn: u32,
        rd: u8,
    ) -> Res<String> {
        self.clear(hca)?;
        let access =
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
        let init = InitAttr {
            port: 1,
            access,
            ..InitAttr::default()
        };
        let mut qp = self.create_init::<Rc>(hca, init)?;
        qp.to_rtr(hca, rtr_attr(peer, peer_qpn, rq_psn, rd))?;
        let rts = RtsAttr {
            sq_psn: 0x100,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        };
        qp.to_rts(hca, rts)?;
        let line = self.connected_line(qp.qpn());
        self.target = Target::Rc(qp);
        Ok(line)
    }

    fn uc(&mut self, hca: &mut Hca<P>, peer: Ipv4Addr, peer_qpn: u32, rq_psn: u32) -> Res<String> {
        self.clear(hca)?;
        let init = InitAttr {
            port: 1,
            access: AccessFlags::REMOTE_WRITE,
            ..InitAttr::default()
        };
        let mut qp = self.create_init::<Uc>(hca, init)?;
        qp.to_rtr(hca, rtr_attr(peer, peer_qpn, rq_psn, 0))?;
        qp.to_rts(hca, 0x100)?;
        let line = self.connected_line(qp.qpn());
        self.target = Target::Uc(qp);
        Ok(line)
    }

    /// What `rc` and `uc` answer.
    fn connected_line(&self, qpn: u32) -> String {
        format!(
            "QP qpn={qpn} rkey={} va={} len={} rkey_other={} va_other={}",
            self.mr.rkey(),
            self.mr.iova(),
            WINDOW + RECV,
            self.mr_other.rkey(),
            self.mr_other.iova()
        )
    }

    fn ud(&mut self, hca: &mut Hca<P>, qkey: u32) -> Res<String> {
        self.clear(hca)?;
        let init = InitAttr {
            port: 1,
            qkey,
            ..InitAttr::default()
        };
        let mut qp = self.create_init::<Ud>(hca, init)?;
        qp.to_rtr(hca)?;
        qp.to_rts(hca, 0x100)?;
        let line = format!("QP qpn={} qkey={qkey}", qp.qpn());
        self.target = Target::Ud(qp);
        Ok(line)
    }

    fn reset(&mut self, hca: &mut Hca<P>) -> Res<String> {
        self.clear(hca)?;
        let qp = self.create::<Rc>(hca)?;
        let line = format!(
            "QP qpn={} rkey={} va={} len={}",
            qp.qpn(),
            self.mr.rkey(),
            self.mr.iova(),
            WINDOW + RECV
        );
        self.target = Target::Reset(qp);
        Ok(line)
    }

    fn state(&mut self, hca: &mut Hca<P>) -> Res<String> {
        // Completions the packets produced (the model writes them at once; give the pump
        // a moment anyway).
        let start = Instant::now();
        let mut wc = [WorkCompletion::default(); 8];
        while start.elapsed() < Duration::from_millis(50) {
            let n = self.cq.poll(&mut wc).map_err(|e| format!("{e:?}"))?;
            for w in &wc[..n] {
                self.recvs.push(match w.status {
                    WcStatus::Success => format!("ok:{}:{}", w.src_qp, w.byte_len),
                    WcStatus::WrFlushed => "flush".to_string(),
                    s => format!("err({s:?})"),
                });
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let qpn = match &self.target {
            Target::None => None,
            Target::Rc(q) => Some(q.query(hca)?.state),
            Target::Uc(q) => Some(q.query(hca)?.state),
            Target::Ud(q) => Some(q.query(hca)?.state),
            Target::Reset(q) => Some(q.query(hca)?.state),
        };
        let st = match qpn {
            None => "NONE".to_string(),
            Some(s) => format!("{s:?}").to_uppercase(),
        };
        let mut bytes = vec![0u8; self.mr.mem().len()];
        self.mr.mem().read_bytes(0, &mut bytes);
        let mut h = fnv1a(0xcbf2_9ce4_8422_2325, &bytes);
        let mut other = vec![0u8; self.mr_other.mem().len()];
        self.mr_other.mem().read_bytes(0, &mut other);
        h = fnv1a(h, &other);
        let recv = if self.recvs.is_empty() {
            "none".to_string()
        } else {
            self.recvs.join(",")
        };
        Ok(format!("STATE state={st} hash={h:016x} recv={recv}"))
    }
}

fn serve<P: Platform>(hca: &mut Hca<P>) -> Res<()> {
    let pd = hca.alloc_pd()?;
    let pd_other = hca.alloc_pd()?;
    let cq = hca.create_cq(16)?;
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mr = hca.alloc_mr(&pd, WINDOW + RECV, access)?;
    let mr_other = hca.alloc_mr(&pd_other, WINDOW, access)?;
    let mut ctx = Ctx {
        pd,
        cq,
        mr,
        mr_other,
        target: Target::None,
        recvs: Vec::new(),
    };
    println!("READY");
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let w: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| -> Res<u32> {
            let s = w.get(i).ok_or("missing argument")?;
            Ok(match s.strip_prefix("0x") {
                Some(h) => u32::from_str_radix(h, 16)?,
                None => s.parse()?,
            })
        };
        let out = match w.first().copied() {
            Some("rc") => {
                let ip: Ipv4Addr = w.get(1).ok_or("missing PEER_IP")?.parse()?;
                ctx.rc(hca, ip, num(2)?, num(3)?, num(4)? as u8)
            }
            Some("uc") => {
                let ip: Ipv4Addr = w.get(1).ok_or("missing PEER_IP")?.parse()?;
                ctx.uc(hca, ip, num(2)?, num(3)?)
            }
            Some("ud") => ctx.ud(hca, num(1)?),
            Some("reset") => ctx.reset(hca),
            Some("state") => ctx.state(hca),
            Some("quit") => break,
            _ => Err(format!("unknown command: {line}").into()),
        };
        match out {
            Ok(s) => println!("{s}"),
            Err(e) => println!("ERROR {e}"),
        }
    }
    Ok(())
}

fn main() {
    let mut it = std::env::args().skip(1);
    let ip: Ipv4Addr = match (it.next().as_deref(), it.next()) {
        (Some("--udp"), Some(ip)) => ip.parse().unwrap_or_else(|e| {
            eprintln!("hostile_target: bad --udp address {ip}: {e}");
            std::process::exit(2)
        }),
        _ => {
            eprintln!("usage: hostile_target --udp LOCAL_IP (commands on standard input)");
            std::process::exit(2)
        }
    };
    let r = (|| -> Res<()> {
        let (_node, mut hca) = common::udp_node(ip)?;
        serve(&mut hca)
    })();
    if let Err(e) = r {
        eprintln!("hostile_target: {e}");
        std::process::exit(1);
    }
}
