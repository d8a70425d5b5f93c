//! uhca on bare metal, under QEMU: boots by PVH, finds every mock ConnectX function the VMM
//! presents (`vfio-user-pci` devices served by `uhca-vfio-user-server`), brings each up with
//! uhca's driver on this crate's platform ([`platform`]), runs RC SEND ping-pong, RDMA WRITE
//! and RDMA READ between the first two with every payload checked and completions polled,
//! takes one completion event as an MSI-X interrupt,
//! tears everything down, prints `PASS name` / `FAIL name: reason` per check and
//! `N passed, M failed`, and exits through isa-debug-exit: QEMU's status is 1 only when
//! every check passed.
//!
//! Layout: [`boot`] (PVH entry, long mode, identity map), [`serial`] and [`port`] (console,
//! port I/O, exit), [`pci`] (configuration ports, scan, BAR sizing), [`platform`] (the
//! `uhca_hal` platform a bare-metal user copies), [`irq`] (IDT, local APIC, MSI-X: only for
//! the interrupt check), and this file, the test program.
#![no_std]
#![no_main]

extern crate alloc;

mod boot;
mod fiber;
mod heap;
mod irq;
mod pci;
mod platform;
mod port;
#[macro_use]
mod serial;

use core::fmt::Write;
use core::net::{IpAddr, Ipv4Addr};
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use uhca_driver::addr::{Gid, Mac};
use uhca_driver::caps::LinkLayer;
use uhca_driver::verbs::{Cq, Mr, Pd, RecvWr, SendOp, SendWr, Sge, WcStatus, WorkCompletion};
use uhca_driver::{Hca, HcaConfig, TeardownMode};
use uhca_fwif::consts::AccessFlags;
use uhca_hal::DmaMem;

use platform::{BareMetal, DMA_POOL, HOST_POOL};

// ---------------------------------------------------------------------------------------
// Reporting

static PASSED: AtomicU32 = AtomicU32::new(0);
static FAILED: AtomicU32 = AtomicU32::new(0);
/// DMA memory the driver keeps for good after the FLR check (see `checks::flr`), excused
/// in the teardown checks.
static KEPT_AFTER_FLR: AtomicUsize = AtomicUsize::new(0);
/// When the first completion was polled (ns after entry; 0: none yet).
static FIRST_COMPLETION_NS: AtomicU64 = AtomicU64::new(0);

/// A failure's reason, formatted into a fixed buffer (no allocator).
struct Msg {
    buf: [u8; 200],
    len: usize,
}

impl Msg {
    fn new(args: core::fmt::Arguments<'_>) -> Msg {
        let mut m = Msg {
            buf: [0; 200],
            len: 0,
        };
        let _ = m.write_fmt(args);
        m
    }
    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("(bad utf-8)")
    }
}

impl Write for Msg {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        for &b in s.as_bytes() {
            if self.len == self.buf.len() {
                break;
            }
            self.buf[self.len] = b;
            self.len += 1;
        }
        Ok(())
    }
}

macro_rules! msg {
    ($($arg:tt)*) => { $crate::Msg::new(format_args!($($arg)*)) };
}

mod checks;
mod qp_up;

use qp_up::RcQp;

type Res<T> = Result<T, Msg>;

/// Prints `PASS name` or `FAIL name: reason`, counts it, and hands back the value.
fn check<T>(name: core::fmt::Arguments<'_>, r: Res<T>) -> Option<T> {
    match r {
        Ok(v) => {
            println!("PASS {name}");
            PASSED.fetch_add(1, Ordering::Relaxed);
            Some(v)
        }
        Err(e) => {
            println!("FAIL {name}: {}", e.as_str());
            FAILED.fetch_add(1, Ordering::Relaxed);
            None
        }
    }
}

fn finish() -> ! {
    let (p, f) = (
        PASSED.load(Ordering::Relaxed),
        FAILED.load(Ordering::Relaxed),
    );
    println!("{p} passed, {f} failed");
    port::exit(if f == 0 && p > 0 { 0 } else { 1 })
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    println!("FAIL panic: {info}");
    FAILED.fetch_add(1, Ordering::Relaxed);
    finish()
}

fn ms(ns: u64) -> u64 {
    ns / 1_000_000
}

// ---------------------------------------------------------------------------------------
// Memory

/// Bytes of the host-memory pool (the driver's bookkeeping).
const HOST_POOL_BYTES: usize = 4 << 20;

/// Hands the pools the largest RAM range of the PVH memory map above the image: the host
/// pool first, the DMA pool after it.
fn memory(info: usize) -> Res<()> {
    // SAFETY: `info` is what the PVH entry received in %ebx.
    let map = unsafe { boot::memory_map(info) }.ok_or(msg!("no PVH memory map"))?;
    let (_, image_end) = boot::image_range();
    let mut best = (0usize, 0usize);
    for e in map {
        let (start, end) = (e.addr as usize, (e.addr + e.size) as usize);
        println!("  memory {start:#010x}-{end:#010x} type {}", e.kind);
        if e.kind != 1 || end <= image_end {
            continue;
        }
        let start = start.max(image_end).next_multiple_of(2 << 20);
        // Only the identity-mapped first 3 GiB hold RAM we may use (write-back).
        let end = end.min(3 << 30);
        if end > start && end - start > best.1 - best.0 {
            best = (start, end);
        }
    }
    let (start, end) = best;
    let fixed = HOST_POOL_BYTES + heap::HEAP_BYTES;
    if end - start < fixed + (16 << 20) {
        return Err(msg!("no RAM range of at least 36 MiB above the image"));
    }
    // SAFETY: RAM above the image per the loader's map; nothing else in the program uses it.
    let host = unsafe { HOST_POOL.init(start, HOST_POOL_BYTES) };
    // SAFETY: as above, the next part of that range.
    let heap = unsafe { heap::HEAP_POOL.init(start + HOST_POOL_BYTES, heap::HEAP_BYTES) };
    // SAFETY: as above, the rest of that range.
    let dma = unsafe { DMA_POOL.init(start + fixed, end - start - fixed) };
    println!(
        "  host pool {} KiB at {start:#x}, heap {} MiB at {:#x}, DMA pool {} MiB at {:#x}",
        host >> 10,
        heap >> 20,
        start + HOST_POOL_BYTES,
        dma >> 20,
        start + fixed
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// One function

/// A function found: where, its device id and class, BAR0's address and length.
type Found = (pci::Bdf, u16, u32, u64, u64);

/// The most functions the program drives.
const MAX_FUNCTIONS: usize = 8;

fn link_name(l: LinkLayer) -> &'static str {
    match l {
        LinkLayer::InfiniBand => "InfiniBand",
        LinkLayer::Ethernet => "Ethernet",
    }
}

/// Where a peer is: its LID (InfiniBand) or GID and MAC (RoCEv2).
#[derive(Clone, Copy)]
pub struct Addr {
    lid: u16,
    gid: Gid,
    mac: Mac,
}

/// The command timeout of the functions' bring-up.
const CMD_TIMEOUT_NS: u64 = 10_000_000_000;

/// Brings `p` up and gives its port an address: waits for a LID from the fabric's subnet
/// manager (InfiniBand) or installs RoCEv2 GID 0 for 10.0.0.`n + 1` (Ethernet).
fn bring_up(p: &BareMetal, n: usize, cmd_timeout_ns: u64) -> Res<(Hca<&BareMetal>, Addr)> {
    let cfg = HcaConfig {
        fw_pre_init_timeout_ns: 10_000_000_000,
        cmd_timeout_ns,
        // The firmware hands back every page at teardown (MANAGE_PAGES), which the server's
        // log then shows as 0 pages held; fast teardown would let it drop them instead.
        teardown: TeardownMode::Graceful,
        ..HcaConfig::default()
    };
    let mut hca = Hca::open_with(p, cfg).map_err(|e| msg!("open: {e}"))?;
    let mut addr = Addr {
        lid: 0,
        gid: Gid::ZERO,
        mac: Mac([0; 6]),
    };
    match hca.caps().link_layer {
        LinkLayer::InfiniBand => {
            let deadline = platform::now_ns() + 5_000_000_000;
            loop {
                let port = hca.query_port(1).map_err(|e| msg!("query_port: {e}"))?;
                if port.lid != 0 {
                    addr.lid = port.lid;
                    break;
                }
                if platform::now_ns() > deadline {
                    return Err(msg!("no LID from the subnet manager after 5 s"));
                }
                uhca_hal::platform::Clock::delay_us(p, 1000);
            }
        }
        LinkLayer::Ethernet => {
            let port = hca.query_port(1).map_err(|e| msg!("query_port: {e}"))?;
            addr.mac = port.mac.ok_or(msg!("the Ethernet port has no MAC"))?;
            let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, n as u8 + 1));
            addr.gid = hca
                .add_roce_gid(1, 0, ip, addr.mac, None)
                .map_err(|e| msg!("add_roce_gid: {e}"))?;
        }
    }
    Ok((hca, addr))
}

// ---------------------------------------------------------------------------------------
// Two functions: RC

/// Bytes of each message and of each of the three areas of a side's MR.
const SIZE: usize = 4096;
/// Ping-pong round trips.
const ROUNDS: u32 = 100;
/// How long any one completion may take.
const TIMEOUT_NS: u64 = 5_000_000_000;

const SEND_ID: u64 = 1;
const RECV_ID: u64 = 2;
const WRITE_ID: u64 = 4;
const READ_ID: u64 = 8;

/// An RC side's objects before its QP: a PD, a CQ of 32 entries and an MR of three areas,
/// at 0 (receives land), SIZE (sends and READ sources), 2 * SIZE (RDMA and atomic targets).
type Objects<'p> = (Pd<&'p BareMetal>, Cq<&'p BareMetal>, Mr<&'p BareMetal>);

fn open_side<'p>(hca: &mut Hca<&'p BareMetal>) -> Res<Objects<'p>> {
    let access = AccessFlags::LOCAL_WRITE | qp_up::REMOTE;
    let pd = hca.alloc_pd().map_err(|e| msg!("alloc_pd: {e}"))?;
    let cq = hca.create_cq(32).map_err(|e| msg!("create_cq: {e}"))?;
    let mr = hca
        .alloc_mr(&pd, 3 * SIZE, access)
        .map_err(|e| msg!("alloc_mr: {e}"))?;
    Ok((pd, cq, mr))
}

/// Polls `cq` until a completion for each bit of `ids` arrived, each successful; returns
/// the receive's byte count (0 if `ids` has no receive).
fn wait(cq: &mut Cq<&BareMetal>, ids: u64, what: &str) -> Res<u32> {
    let mut pending = ids;
    let mut recv_len = 0;
    let mut wc = [WorkCompletion::default(); 4];
    let deadline = platform::now_ns() + TIMEOUT_NS;
    while pending != 0 {
        let n = cq.poll(&mut wc).map_err(|e| msg!("{what}: poll: {e:?}"))?;
        for w in &wc[..n] {
            let _ = FIRST_COMPLETION_NS.compare_exchange(
                0,
                platform::now_ns(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            if w.status != WcStatus::Success {
                return Err(msg!(
                    "{what}: wr_id {} completed with {:?}",
                    w.wr_id,
                    w.status
                ));
            }
            if pending & w.wr_id == 0 {
                return Err(msg!("{what}: unexpected completion of wr_id {}", w.wr_id));
            }
            if w.wr_id == RECV_ID {
                recv_len = w.byte_len;
            }
            pending &= !w.wr_id;
        }
        if n == 0 && platform::now_ns() > deadline {
            return Err(msg!(
                "{what}: no completion in 5 s (pending wr_ids {pending:#x})"
            ));
        }
    }
    Ok(recv_len)
}

fn pattern(seed: u32, i: usize) -> u8 {
    ((i as u32).wrapping_mul(7) ^ (i as u32 >> 8) ^ seed.wrapping_mul(13)) as u8
}

fn fill(mr: &mut Mr<&BareMetal>, off: usize, seed: u32) {
    let mut buf = [0u8; SIZE];
    for (i, b) in buf.iter_mut().enumerate() {
        *b = pattern(seed, i);
    }
    mr.mem_mut().write_bytes(off, &buf);
}

fn expect(mr: &Mr<&BareMetal>, off: usize, seed: u32, what: &str) -> Res<()> {
    let mut buf = [0u8; SIZE];
    mr.mem().read_bytes(off, &mut buf);
    match (0..SIZE).find(|&i| buf[i] != pattern(seed, i)) {
        None => Ok(()),
        Some(i) => Err(msg!(
            "{what}: byte {i} is {:#04x}, expected {:#04x}",
            buf[i],
            pattern(seed, i)
        )),
    }
}

fn sge(mr: &Mr<&BareMetal>, off: usize) -> Res<Sge> {
    mr.sge(off, SIZE).map_err(|e| msg!("sge: {e}"))
}

fn post_recv(qp: &mut RcQp<'_>, mr: &Mr<&BareMetal>) -> Res<()> {
    let s = [sge(mr, 0)?];
    qp.post_recv(&[RecvWr {
        wr_id: RECV_ID,
        sg_list: &s,
    }])
    .map_err(|e| msg!("post_recv: {e:?}"))
}

fn post_send(qp: &mut RcQp<'_>, mr: &Mr<&BareMetal>, id: u64, off: usize, op: SendOp) -> Res<()> {
    let s = [sge(mr, off)?];
    qp.post_send(&[SendWr::new(id, op, &s)])
        .map_err(|e| msg!("post_send: {e:?}"))
}

/// An RC side connected: PD, CQ, MR and its QP in RTS.
type RtsSide<'p> = (
    Pd<&'p BareMetal>,
    Cq<&'p BareMetal>,
    Mr<&'p BareMetal>,
    RcQp<'p>,
);

/// SEND ping-pong: A sends SIZE bytes of round `r`'s pattern, B checks them and sends them
/// back, A checks the echo.
fn pingpong(a: &mut RtsSide<'_>, b: &mut RtsSide<'_>, rounds: u32) -> Res<u64> {
    let t0 = platform::now_ns();
    for r in 0..rounds {
        post_recv(&mut a.3, &a.2)?;
        post_recv(&mut b.3, &b.2)?;
        fill(&mut a.2, SIZE, r);
        post_send(&mut a.3, &a.2, SEND_ID, SIZE, SendOp::Send)?;
        let n = wait(&mut b.1, RECV_ID, "B's receive")?;
        if n as usize != SIZE {
            return Err(msg!("round {r}: B received {n} bytes, expected {SIZE}"));
        }
        expect(&b.2, 0, r, "B's receive")?;
        let mut echo = [0u8; SIZE];
        b.2.mem().read_bytes(0, &mut echo);
        b.2.mem_mut().write_bytes(SIZE, &echo);
        post_send(&mut b.3, &b.2, SEND_ID, SIZE, SendOp::Send)?;
        wait(&mut b.1, SEND_ID, "B's send")?;
        let n = wait(&mut a.1, SEND_ID | RECV_ID, "A's send and receive")?;
        if n as usize != SIZE {
            return Err(msg!("round {r}: A received {n} bytes, expected {SIZE}"));
        }
        expect(&a.2, 0, r, "A's echo")?;
    }
    Ok(platform::now_ns() - t0)
}

/// A writes its pattern into B's target area; B's memory must hold it.
fn rdma_write(a: &mut RtsSide<'_>, b: &mut RtsSide<'_>) -> Res<()> {
    fill(&mut a.2, SIZE, 0x51);
    b.2.mem_mut().fill(2 * SIZE, SIZE, 0);
    let op = SendOp::RdmaWrite {
        remote_addr: b.2.iova() + 2 * SIZE as u64,
        rkey: b.2.rkey(),
    };
    post_send(&mut a.3, &a.2, WRITE_ID, SIZE, op)?;
    wait(&mut a.1, WRITE_ID, "A's RDMA WRITE")?;
    expect(&b.2, 2 * SIZE, 0x51, "B's memory after the WRITE")
}

/// A reads B's pattern into its own target area.
fn rdma_read(a: &mut RtsSide<'_>, b: &mut RtsSide<'_>) -> Res<()> {
    fill(&mut b.2, SIZE, 0xa7);
    a.2.mem_mut().fill(2 * SIZE, SIZE, 0);
    let op = SendOp::RdmaRead {
        remote_addr: b.2.iova() + SIZE as u64,
        rkey: b.2.rkey(),
    };
    post_send(&mut a.3, &a.2, READ_ID, 2 * SIZE, op)?;
    wait(&mut a.1, READ_ID, "A's RDMA READ")?;
    expect(&a.2, 2 * SIZE, 0xa7, "A's memory after the READ")
}

/// MSI-X: entry 0 of A's function aimed at this CPU; A's CQ armed; B sends; the device's
/// completion event on A's event queue must arrive as an interrupt, and the event name A's CQ.
fn msix<'p>(
    ha: &mut Hca<&'p BareMetal>,
    a: &mut RtsSide<'p>,
    b: &mut RtsSide<'p>,
    apic: u8,
) -> Res<()> {
    #[allow(clippy::explicit_auto_deref)] // keeps the platform's own lifetime, not ha's
    let p: &'p BareMetal = *ha.platform();
    let (bar, len) = p.bar0();
    ha.process_events()
        .map_err(|e| msg!("process_events: {e}"))?;
    irq::enable_msix(p.bdf(), bar, len, apic).map_err(|e| msg!("{e}"))?;
    let seen = irq::MSIX_COUNT.load(Ordering::Relaxed);
    a.1.req_notify(false);
    post_recv(&mut a.3, &a.2)?;
    fill(&mut b.2, SIZE, 0x33);
    post_send(&mut b.3, &b.2, SEND_ID, SIZE, SendOp::Send)?;
    wait(&mut b.1, SEND_ID, "B's send")?;
    let interrupted = irq::wait_msix(seen, TIMEOUT_NS);
    irq::disable_msix(p.bdf());
    ha.process_events()
        .map_err(|e| msg!("process_events: {e}"))?;
    let event = a.1.take_event(ha);
    wait(&mut a.1, RECV_ID, "A's receive")?;
    expect(&a.2, 0, 0x33, "A's receive")?;
    if !interrupted {
        return Err(msg!(
            "no MSI-X message (vector {:#x}) in 5 s",
            irq::MSIX_VECTOR
        ));
    }
    if !event {
        return Err(msg!("an interrupt, but no completion event for A's CQ"));
    }
    Ok(())
}

/// The QP to ERR, its completions drained, then QP, CQ, MR and PD destroyed.
fn take_down<'p>(hca: &mut Hca<&'p BareMetal>, s: RtsSide<'p>) -> Res<()> {
    let (pd, mut cq, mr, mut qp) = s;
    qp_up::to_err(hca, &mut qp)?;
    let mut wc = [WorkCompletion::default(); 16];
    while cq.poll(&mut wc).map_err(|e| msg!("drain: {e:?}"))? != 0 {}
    qp.destroy(hca)
        .map_err(|f| msg!("destroy QP: {}", f.error))?;
    cq.destroy(hca)
        .map_err(|f| msg!("destroy CQ: {}", f.error))?;
    mr.destroy(hca)
        .map_err(|f| msg!("destroy MR: {}", f.error))?;
    pd.destroy(hca)
        .map_err(|f| msg!("destroy PD: {}", f.error))?;
    Ok(())
}

/// Everything between the first two functions.
fn rc_pair<'p>(
    ha: &mut Hca<&'p BareMetal>,
    aa: &Addr,
    hb: &mut Hca<&'p BareMetal>,
    ab: &Addr,
    apic: u8,
) {
    let link = link_name(ha.caps().link_layer);
    let (dma0, host0) = (DMA_POOL.used(), HOST_POOL.used());
    let sides = check(
        format_args!("rc ({link}): PD, CQ and MR on each function"),
        open_side(ha).and_then(|a| Ok((a, open_side(hb)?))),
    );
    let Some(((pda, cqa, mra), (pdb, cqb, mrb))) = sides else {
        return;
    };
    let conn = check(
        format_args!("rc ({link}): an RC QP on each, connected (INIT, RTR, RTS)"),
        qp_up::rc_pair(
            qp_up::End {
                hca: ha,
                pd: &pda,
                cq: &cqa,
                addr: aa,
                psn: 0x1000,
            },
            qp_up::End {
                hca: hb,
                pd: &pdb,
                cq: &cqb,
                addr: ab,
                psn: 0x2000,
            },
        ),
    );
    let Some((qpa, qpb)) = conn else { return };
    println!("  QPs {:#x} and {:#x}", qpa.qpn(), qpb.qpn());
    let mut a = (pda, cqa, mra, qpa);
    let mut b = (pdb, cqb, mrb, qpb);
    println!(
        "  objects of the pair (2 x PD, CQ of 32, MR of {} KiB, RC QP of 8 + 8): {} KiB of DMA memory, {} B of host memory",
        (3 * SIZE) >> 10,
        (DMA_POOL.used() - dma0) >> 10,
        HOST_POOL.used() - host0
    );
    if let Some(ns) = check(
        format_args!("rc ({link}): {ROUNDS} SEND round trips of {SIZE} B, payload checked"),
        pingpong(&mut a, &mut b, ROUNDS),
    ) {
        println!(
            "  {ROUNDS} round trips in {} ms ({} us each)",
            ms(ns),
            ns / 1000 / u64::from(ROUNDS)
        );
    }
    check(
        format_args!("rc ({link}): RDMA WRITE of {SIZE} B, target memory checked"),
        rdma_write(&mut a, &mut b),
    );
    check(
        format_args!("rc ({link}): RDMA READ of {SIZE} B, data checked"),
        rdma_read(&mut a, &mut b),
    );
    checks::atomics::run(link, &mut a, &mut b);
    check(
        format_args!(
            "msix ({link}): a completion event on an armed CQ arrives as MSI-X vector {:#x} (local APIC {apic})",
            irq::MSIX_VECTOR
        ),
        msix(ha, &mut a, &mut b, apic),
    );
    check(
        format_args!("rc ({link}): objects torn down (QP to ERR, drained, destroyed)"),
        take_down(ha, a).and_then(|()| take_down(hb, b)),
    );
}

/// The single-guest run: RC between the first two functions, the collective over four, the
/// FLR of function 0.
fn everything<'p>(
    hcas: &mut [Option<(Hca<&'p BareMetal>, Addr)>; MAX_FUNCTIONS],
    plats: &'p [Option<BareMetal>; MAX_FUNCTIONS],
    apic: u8,
) {
    // RC between the first two functions that came up.
    let mut up = hcas.iter_mut().flatten();
    match (up.next(), up.next()) {
        (Some((ha, aa)), Some((hb, ab))) => {
            let (aa, ab) = (*aa, *ab);
            rc_pair(ha, &aa, hb, &ab, apic);
            checks::cm::run(ha, hb, &ab);
        }
        _ => {
            check(
                format_args!("rc: two functions up"),
                Err::<(), _>(msg!("fewer than two functions came up")),
            );
        }
    }
    // The collective over the first four functions that came up.
    {
        let link = hcas
            .iter()
            .flatten()
            .next()
            .map_or("?", |(h, _)| link_name(h.caps().link_layer));
        let mut ranks: alloc::vec::Vec<_> = hcas
            .iter_mut()
            .flatten()
            .take(checks::collective::RANKS)
            .collect();
        let (dma0, host0, heap0) = (DMA_POOL.used(), HOST_POOL.used(), heap::HEAP_POOL.used());
        DMA_POOL.reset_peak();
        HOST_POOL.reset_peak();
        heap::HEAP_POOL.reset_peak();
        checks::collective::run(link, &mut ranks);
        println!(
            "  collective: peaks of {} KiB of DMA memory, {} B of host memory, {} KiB of heap for {} ranks",
            (DMA_POOL.peak() - dma0) >> 10,
            HOST_POOL.peak() - host0,
            (heap::HEAP_POOL.peak() - heap0) >> 10,
            ranks.len()
        );
    }
    // A function-level reset of function 0 under the driver, function 1 its peer.
    if let (Some(p0), [s0, s1, ..]) = (plats[0].as_ref(), &mut hcas[..])
        && s0.is_some()
        && let Some(b) = s1.as_mut()
    {
        let link = link_name(b.0.caps().link_layer);
        checks::flr::run(link, p0, s0, b);
    }
}

// ---------------------------------------------------------------------------------------
// The program

/// Entered from the boot stub in long mode with the `hvm_start_info` address.
#[unsafe(no_mangle)]
extern "C" fn bm_main(start_info: usize) -> ! {
    // SAFETY: rdtsc only reads the time-stamp counter (zero at reset on x86).
    let tsc_entry = unsafe { core::arch::x86_64::_rdtsc() };
    serial::init();
    let fs = platform::clock_init();
    // The TSC's rate against the HPET over 10 ms, to put the time before entry (firmware,
    // loading) in nanoseconds.
    let since_reset = {
        // SAFETY: as above.
        let t0 = unsafe { core::arch::x86_64::_rdtsc() };
        let h0 = platform::now_ns();
        while platform::now_ns() - h0 < 10_000_000 {}
        // SAFETY: as above.
        let t1 = unsafe { core::arch::x86_64::_rdtsc() };
        let hz = u128::from(t1 - t0) * 1_000_000_000 / u128::from(platform::now_ns() - h0);
        (u128::from(tsc_entry) * 1_000_000_000 / hz.max(1)) as u64
    };
    println!(
        "uhca-baremetal: entered {} ms after reset (TSC)",
        ms(since_reset)
    );
    let (img_start, img_end) = boot::image_range();
    println!(
        "uhca-baremetal: image {img_start:#x}-{img_end:#x}, HPET at {} MHz",
        1_000_000_000 / fs
    );
    let apic = irq::init();
    if check(format_args!("memory map and pools"), memory(start_info)).is_none() {
        finish();
    }

    // The mlx5 functions (vendor 0x15b3).
    let mut found: [Option<Found>; MAX_FUNCTIONS] = [None; MAX_FUNCTIONS];
    let mut n = 0;
    let t_scan = platform::now_ns();
    pci::scan(|f| {
        println!(
            "  pci {}: {:04x}:{:04x} class {:06x}",
            f.bdf, f.vendor, f.device, f.class
        );
        if f.vendor == 0x15b3
            && n < MAX_FUNCTIONS
            && let Some((addr, len)) = pci::bar0(f.bdf)
        {
            found[n] = Some((f.bdf, f.device, f.class, addr, len));
            n += 1;
        }
    });
    println!("  scan took {} us", (platform::now_ns() - t_scan) / 1000);
    check(
        format_args!("pci: {n} mlx5 function(s) with a memory BAR0 inside the identity map"),
        if n == 0 {
            Err(msg!("no function of vendor 0x15b3"))
        } else if let Some(f) = found.iter().flatten().find(|f| f.3 + f.4 > 1 << 32) {
            Err(msg!(
                "{}: BAR0 at {:#x} is beyond the identity map",
                f.0,
                f.3
            ))
        } else {
            Ok(())
        },
    );

    // Their platforms (they outlive the driver's handles on them).
    let plats: [Option<BareMetal>; MAX_FUNCTIONS] = core::array::from_fn(|i| {
        found[i]
            .filter(|f| f.3 + f.4 <= 1 << 32)
            .map(|(bdf, _, _, addr, len)| {
                // SAFETY: the BAR SeaBIOS assigned to this function, sized above, in the
                // uncached 3-4 GiB window of the identity map; only this platform uses it.
                unsafe { BareMetal::new(bdf, addr, len) }
            })
    });

    // A hostile case instead of the run (the kernel command line's `hostile=...`).
    // SAFETY: `start_info` is what the PVH entry received.
    let cmdline = unsafe { boot::cmdline(start_info) };
    if let Some(mode) = cmdline.split(' ').find_map(|w| w.strip_prefix("hostile=")) {
        checks::hostile::run(mode, plats.iter().flatten().next());
        finish();
    }
    // One of two guests of a collective (`duo=0` or `duo=1`; see `checks::duo`).
    let duo: Option<usize> = cmdline
        .split(' ')
        .find_map(|w| w.strip_prefix("duo="))
        .map(|g| g.parse().unwrap_or(usize::MAX));
    let first_n = duo.map_or(0, |g| g.min(1) * 2);

    // Bring every function up.
    let mut hcas: [Option<(Hca<&BareMetal>, Addr)>; MAX_FUNCTIONS] = Default::default();
    for (i, p) in plats.iter().enumerate() {
        let Some(p) = p else { continue };
        let (_, dev, class, addr, len) = found[i].unwrap();
        let t = platform::now_ns();
        let (dma0, host0) = (DMA_POOL.used(), HOST_POOL.used());
        DMA_POOL.reset_peak();
        HOST_POOL.reset_peak();
        let r = bring_up(p, first_n + i, CMD_TIMEOUT_NS);
        let took = platform::now_ns() - t;
        let ok = r
            .as_ref()
            .map(|(h, a)| (link_name(h.caps().link_layer), h.firmware_pages(), a.lid));
        let label = match &ok {
            Ok((link, _, lid)) if *link == "InfiniBand" => msg!("{link}, LID {lid}"),
            Ok((link, _, _)) => msg!("{link}, RoCEv2 GID 0 = 10.0.0.{}", first_n + i + 1),
            Err(_) => msg!("?"),
        };
        if let Some(v) = check(
            format_args!(
                "bring-up fn{i} ({}, {dev:04x} class {class:06x}, BAR0 {} MiB at {addr:#x}): {}",
                p.bdf(),
                len >> 20,
                label.as_str()
            ),
            r,
        ) {
            println!(
                "  fn{i}: up in {} ms; the driver holds {} KiB of DMA memory ({} firmware pages) and {} B of host memory (peaks during bring-up: {} KiB, {} B)",
                ms(took),
                p.dma_live() >> 10,
                v.0.firmware_pages(),
                HOST_POOL.used() - host0,
                (DMA_POOL.peak() - dma0) >> 10,
                HOST_POOL.peak() - host0,
            );
            hcas[i] = Some(v);
        }
    }

    if let Some(g) = duo {
        let link = hcas
            .iter()
            .flatten()
            .next()
            .map_or("?", |(h, _)| link_name(h.caps().link_layer));
        let mut ranks: alloc::vec::Vec<_> = hcas.iter_mut().flatten().collect();
        checks::duo::run(g, link, &mut ranks);
    } else {
        everything(&mut hcas, &plats, apic);
    }
    let first = FIRST_COMPLETION_NS.load(Ordering::Relaxed);
    if first != 0 {
        println!(
            "  first work completion polled {} ms after entry ({} ms after reset by the TSC)",
            ms(first),
            ms(first + since_reset)
        );
    }

    // Teardown: every function closed, every byte of both pools back.
    for (i, slot) in hcas.iter_mut().enumerate() {
        let Some((hca, _)) = slot.take() else {
            continue;
        };
        let p: &BareMetal = hca.platform();
        check(
            format_args!("teardown fn{i}: closed, all its DMA memory returned"),
            hca.close().map_err(|e| msg!("close: {e}")).and_then(|()| {
                let kept = if i == 0 {
                    KEPT_AFTER_FLR.load(Ordering::Relaxed)
                } else {
                    0
                };
                match p.dma_live() {
                    b if b == kept => Ok(()),
                    b => Err(msg!("{b} B of DMA memory still held ({kept} B expected)")),
                }
            }),
        );
    }
    check(
        format_args!("teardown: all three pools empty"),
        match (
            DMA_POOL.used() - KEPT_AFTER_FLR.load(Ordering::Relaxed),
            HOST_POOL.used(),
            heap::HEAP_POOL.used(),
        ) {
            (0, 0, 0) => Ok(()),
            (d, h, a) => Err(msg!(
                "{d} B DMA, {h} B host memory and {a} B of heap still allocated"
            )),
        },
    );
    println!("  total {} ms after entry", ms(platform::now_ns()));
    finish()
}
