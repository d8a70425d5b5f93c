//! `uhca-collective` over two guests on one server: this guest holds two ranks of four
//! (`-append duo=0` ranks 0 and 1, `duo=1` ranks 2 and 3), one per function, and the other
//! guest the other two. First step, until the collective connects through the driver's IB
//! CM (which `checks::cm` uses between two functions): the endpoints
//! for the other guest's ranks travel through the host script, as console lines
//! `EP from to lid gid mac qpn psn inbox rkey` (hexadecimal) that the host's relay copies to
//! the other guest's serial input. Then an all-reduce (ring), an all-gather and a broadcast
//! run on both guests at once, each guest checking its ranks' results.

use alloc::vec::Vec;

use uhca_collective::{Communicator, Endpoint, PortAddr, ReduceOp};
use uhca_driver::Hca;
use uhca_driver::addr::{Gid, Mac};

use crate::checks::collective::{config, value};
use crate::platform::{self, BareMetal};
use crate::{Addr, Res, check};

/// Ranks in all, and in this guest.
const SIZE: usize = 4;
const LOCAL: usize = 2;
/// How long the program waits for the other guest's endpoints.
const EXCHANGE_NS: u64 = 60_000_000_000;

fn hex(s: &str) -> Res<u64> {
    u64::from_str_radix(s, 16).map_err(|_| msg!("bad number {s:?}"))
}

/// Parses `EP from to lid gid mac qpn psn inbox rkey`.
fn parse(line: &str) -> Res<(usize, usize, Endpoint)> {
    let mut w = line.split(' ');
    if w.next() != Some("EP") {
        return Err(msg!("not an endpoint line"));
    }
    let mut f = [""; 9];
    for x in &mut f {
        *x = w.next().ok_or(msg!("short endpoint line"))?;
    }
    let mut gid = [0u8; 16];
    let mut mac = [0u8; 6];
    if f[3].len() != 32 || f[4].len() != 12 {
        return Err(msg!("bad GID or MAC"));
    }
    for (i, b) in gid.iter_mut().enumerate() {
        *b = hex(&f[3][2 * i..2 * i + 2])? as u8;
    }
    for (i, b) in mac.iter_mut().enumerate() {
        *b = hex(&f[4][2 * i..2 * i + 2])? as u8;
    }
    Ok((
        hex(f[0])? as usize,
        hex(f[1])? as usize,
        Endpoint {
            addr: PortAddr {
                gid: Gid(gid),
                mac: Mac(mac),
                lid: hex(f[2])? as u16,
            },
            qpn: hex(f[5])? as u32,
            psn: hex(f[6])? as u32,
            inbox: hex(f[7])?,
            rkey: hex(f[8])? as u32,
        },
    ))
}

fn print_ep(from: usize, to: usize, e: &Endpoint) {
    print!("EP {from:x} {to:x} {:x} ", e.addr.lid);
    for b in e.addr.gid.0 {
        print!("{b:02x}");
    }
    print!(" ");
    for b in e.addr.mac.0 {
        print!("{b:02x}");
    }
    println!(" {:x} {:x} {:x} {:x}", e.qpn, e.psn, e.inbox, e.rkey);
}

type Comm<'p> = Communicator<&'p BareMetal>;

fn connect<'p>(g: usize, hcas: &mut [&mut (Hca<&'p BareMetal>, Addr)]) -> Res<Vec<Comm<'p>>> {
    let base = g * LOCAL;
    let mut pending = Vec::new();
    for (i, (hca, a)) in hcas.iter_mut().map(|x| &mut **x).enumerate() {
        let addr = PortAddr {
            gid: a.gid,
            mac: a.mac,
            lid: a.lid,
        };
        pending.push(
            Communicator::create(hca, base + i, SIZE, addr, config())
                .map_err(|e| msg!("rank {}: create: {e}", base + i))?,
        );
    }
    let local = |r: usize| r >= base && r < base + LOCAL;
    for (i, p) in pending.iter().enumerate() {
        for to in (0..SIZE).filter(|&t| !local(t)) {
            print_ep(base + i, to, &p.endpoint(to));
        }
    }
    // remote[i][from]: what rank `from` of the other guest gave local rank base + i.
    let mut remote: [[Option<Endpoint>; SIZE]; LOCAL] = [[None; SIZE]; LOCAL];
    let mut missing = LOCAL * (SIZE - LOCAL);
    let deadline = platform::now_ns() + EXCHANGE_NS;
    let mut buf = [0u8; 200];
    while missing > 0 {
        let n = crate::serial::read_line(&mut buf, deadline).ok_or(msg!(
            "{missing} endpoints of the other guest missing after 60 s"
        ))?;
        let line = core::str::from_utf8(&buf[..n]).unwrap_or("");
        let Ok((from, to, e)) = parse(line) else {
            continue;
        };
        if local(to) && !local(from) && from < SIZE && remote[to - base][from].is_none() {
            remote[to - base][from] = Some(e);
            missing -= 1;
        }
    }
    let mut comms = Vec::new();
    let all: Vec<_> = (0..LOCAL)
        .map(|i| {
            (0..SIZE)
                .map(|p| {
                    let me = base + i;
                    if p == me {
                        // Ignored by `connect`.
                        pending[(i + 1) % LOCAL].endpoint(me)
                    } else if local(p) {
                        pending[p - base].endpoint(me)
                    } else {
                        remote[i][p].expect("every remote endpoint arrived")
                    }
                })
                .collect::<Vec<_>>()
        })
        .collect();
    for ((i, p), eps) in pending.into_iter().enumerate().zip(all) {
        let (hca, _) = &mut *hcas[i];
        comms.push(
            p.connect(hca, &eps)
                .map_err(|e| msg!("rank {}: connect: {e}", base + i))?,
        );
    }
    Ok(comms)
}

fn verify(g: usize, bufs: &[Vec<i32>], want: impl Fn(usize) -> i32) -> Res<()> {
    for (i, b) in bufs.iter().enumerate() {
        if let Some(k) = (0..b.len()).find(|&k| b[k] != want(k)) {
            return Err(msg!(
                "rank {}: element {k} is {}, expected {}",
                g * LOCAL + i,
                b[k],
                want(k)
            ));
        }
    }
    Ok(())
}

/// The two-guest checks on this guest's two functions (`hcas`), as guest `g` (six lines).
pub fn run(g: usize, link: &str, hcas: &mut [&mut (Hca<&BareMetal>, Addr)]) {
    let base = g * LOCAL;
    let Some(mut comms) = check(
        format_args!(
            "duo ({link}): ranks {base} and {} of {SIZE}, endpoints exchanged with the other guest through the host, connected",
            base + 1
        ),
        if hcas.len() == LOCAL && g < 2 {
            connect(g, hcas)
        } else {
            Err(msg!(
                "{} functions up, {LOCAL} needed (or a bad guest number)",
                hcas.len()
            ))
        },
    ) else {
        return;
    };
    let len = 24 << 10;
    let mut bufs: Vec<Vec<i32>> = (0..LOCAL)
        .map(|i| (0..len).map(|k| value(base + i, k)).collect())
        .collect();
    check(
        format_args!(
            "duo ({link}): all-reduce (sum, ring) of {len} i32 over two guests, every element"
        ),
        crate::checks::collective::on_all(&mut comms, &mut bufs, |c, b| {
            c.all_reduce(b, ReduceOp::Sum)
        })
        .and_then(|_| verify(g, &bufs, |k| (0..SIZE).map(|r| value(r, k)).sum())),
    );
    let block = 4 << 10;
    let mut bufs: Vec<Vec<i32>> = (0..LOCAL)
        .map(|i| {
            let r = base + i;
            let mut b = alloc::vec![0; SIZE * block];
            for (k, x) in b[r * block..(r + 1) * block].iter_mut().enumerate() {
                *x = value(r, k);
            }
            b
        })
        .collect();
    check(
        format_args!(
            "duo ({link}): all-gather of {SIZE} blocks of {block} i32 over two guests, every block"
        ),
        crate::checks::collective::on_all(&mut comms, &mut bufs, |c, b| c.all_gather(b))
            .and_then(|_| verify(g, &bufs, |k| value(k / block, k % block))),
    );
    let root = 3;
    let mut bufs: Vec<Vec<i32>> = (0..LOCAL)
        .map(|i| {
            if base + i == root {
                (0..len).map(|k| value(root, k)).collect()
            } else {
                alloc::vec![-1; len]
            }
        })
        .collect();
    check(
        format_args!(
            "duo ({link}): broadcast of {len} i32 from rank {root} over two guests, every copy"
        ),
        crate::checks::collective::on_all(&mut comms, &mut bufs, |c, b| c.broadcast(b, root))
            .and_then(|_| verify(g, &bufs, |k| value(root, k))),
    );
    check(
        format_args!("duo ({link}): communicators destroyed"),
        comms
            .into_iter()
            .zip(hcas.iter_mut())
            .try_for_each(|(c, h)| c.destroy(&mut h.0).map_err(|e| msg!("destroy: {e}"))),
    );
}
