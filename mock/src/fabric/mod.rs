//! The fabric: an in-memory switch connecting any number of [`MockHca`]s, with a virtual
//! clock for deterministic runs, seeded fault injection and a pcap tap.
//!
//! HCAs queue the frames they emit (a doorbell never delivers anything re-entrantly); the
//! fabric moves them when it is pumped: [`Fabric::step`] takes every queued frame, applies
//! the faults, schedules it `latency_ns` later on the destination port, delivers the frames
//! that are due (as one burst per port), fires the HCAs' due timers, and when nothing is due
//! moves the virtual clock to the next event. [`Fabric::run_until_idle`] steps until no
//! frame is in flight and no timer runs. [`Fabric::start_pump`] does the same on a thread
//! in real time, for examples.
//!
//! ```
//! use uhca_mock::{Fabric, FaultConfig, MockConfig, MockHca};
//! let a = MockHca::new(MockConfig::ethernet());
//! let b = MockHca::new(MockConfig { mac: [2, 0, 0, 0, 0, 2], ..MockConfig::ethernet() });
//! let fabric = Fabric::ethernet();
//! fabric.attach(&a);
//! fabric.attach(&b);
//! fabric.set_faults(FaultConfig::lossy(42, 10));
//! // ... bring both up, connect QPs, ring doorbells ...
//! assert!(fabric.run_until_idle());
//! ```

mod faults;
mod pcap_tap;
mod sm;
mod switch;
pub mod udp;

pub use faults::FaultConfig;
pub use sm::SM_LID;

use crate::MockHca;
use crate::wire::pcap::LinkType;
use faults::FaultInjector;
use pcap_tap::PcapTap;
use std::collections::{BTreeMap, VecDeque};
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

pub use crate::caps::LinkLayer;

/// What the fabric did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FabricCounters {
    /// Frames taken from HCAs.
    pub sent: u64,
    /// Frames delivered to HCAs (duplicates included).
    pub delivered: u64,
    /// Frames for no attached port (unknown MAC, IP or LID, or unparsable headers).
    pub no_route: u64,
    /// Frames dropped by fault injection.
    pub dropped: u64,
    /// Frames duplicated by fault injection.
    pub duplicated: u64,
    /// Frames corrupted by fault injection.
    pub corrupted: u64,
    /// Frames held back (reordered or delayed) by fault injection.
    pub delayed: u64,
}

/// Default one-way latency of the switch, nanoseconds.
pub const DEFAULT_LATENCY_NS: u64 = 1_000;
/// Default bound of [`Fabric::run_until_idle`]: model time it may advance, nanoseconds.
pub const DEFAULT_IDLE_HORIZON_NS: u64 = 10_000_000_000;
/// Default bound of [`Fabric::run_until_idle`]: steps it may take.
pub const DEFAULT_MAX_STEPS: u64 = 2_000_000;

struct Inner {
    link: LinkLayer,
    ports: Vec<MockHca>,
    now: u64,
    /// Frames in flight, in delivery order.
    in_flight: InFlight,
    seq: u64,
    latency_ns: u64,
    faults: FaultInjector,
    tap: Option<PcapTap>,
    counters: FabricCounters,
    sm: sm::SubnetManager,
    udp: Vec<udp::UdpPort>,
    /// While a real-time pump runs: wall-clock origin and the model time it maps to.
    realtime: Option<(std::time::Instant, u64)>,
    /// Per port: the burst being delivered to it.
    bursts: Vec<Burst>,
    /// Per port: its MAC address (fixed by its configuration), for the switch.
    macs: Vec<[u8; 6]>,
    /// Per port: buffers of frames it sent that were delivered (or dropped), handed back to
    /// it for its next frames when the fabric next takes what it sent.
    returns: Vec<Vec<Vec<u8>>>,
    /// Frames taken from a port, being scheduled.
    taken: Vec<Vec<u8>>,
}

/// Frames being delivered to one port, and the port each came from.
type Burst = (Vec<Vec<u8>>, Vec<Option<usize>>);

/// A frame in flight.
struct Flight {
    at: u64,
    seq: u64,
    dst: usize,
    /// The port that sent it (None: the UDP uplink), which gets its buffer back.
    src: Option<usize>,
    frame: Vec<u8>,
}

/// Frames in flight, ordered by (delivery time, sequence). Nearly every frame is due
/// `latency_ns` after the fabric's time, which never goes back, so frames arrive in order
/// and are appended to a queue; the few that would go before the last one (held back by a
/// fault, a lowered latency) wait in a B-tree. The earliest of the two fronts is next.
#[derive(Default)]
struct InFlight {
    fifo: VecDeque<Flight>,
    late: BTreeMap<(u64, u64), Flight>,
}

impl InFlight {
    fn len(&self) -> usize {
        self.fifo.len() + self.late.len()
    }

    fn push(&mut self, f: Flight) {
        match self.fifo.back() {
            Some(b) if (b.at, b.seq) > (f.at, f.seq) => {
                self.late.insert((f.at, f.seq), f);
            }
            _ => self.fifo.push_back(f),
        }
    }

    /// The (time, sequence) of the next frame.
    fn next_key(&self) -> Option<(u64, u64)> {
        let a = self.fifo.front().map(|f| (f.at, f.seq));
        let b = self.late.keys().next().copied();
        match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes the next frame if it is due at `now`.
    fn pop_due(&mut self, now: u64) -> Option<Flight> {
        let (at, seq) = self.next_key()?;
        if at > now {
            return None;
        }
        if self
            .fifo
            .front()
            .is_some_and(|f| (f.at, f.seq) == (at, seq))
        {
            self.fifo.pop_front()
        } else {
            self.late.pop_first().map(|(_, f)| f)
        }
    }
}

/// An in-memory switch between mock HCAs. Cheap to clone (clones share the fabric).
#[derive(Clone)]
pub struct Fabric {
    inner: Arc<Mutex<Inner>>,
}

impl core::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let i = self.lock();
        f.debug_struct("Fabric")
            .field("link", &i.link)
            .field("ports", &i.ports.len())
            .field("now", &i.now)
            .finish_non_exhaustive()
    }
}

/// A real-time pump thread; stops (and joins) when dropped or on [`PumpHandle::stop`].
#[derive(Debug)]
pub struct PumpHandle {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PumpHandle {
    /// Stops the pump and waits for its thread.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for PumpHandle {
    fn drop(&mut self) {
        self.halt();
    }
}

impl Fabric {
    /// A fabric of the given link layer.
    pub fn new(link: LinkLayer) -> Self {
        Fabric {
            inner: Arc::new(Mutex::new(Inner {
                link,
                ports: Vec::new(),
                now: 0,
                in_flight: InFlight::default(),
                seq: 0,
                latency_ns: DEFAULT_LATENCY_NS,
                faults: FaultInjector::new(FaultConfig::default()),
                tap: None,
                counters: FabricCounters::default(),
                sm: sm::SubnetManager::default(),
                udp: Vec::new(),
                realtime: None,
                bursts: Vec::new(),
                macs: Vec::new(),
                returns: Vec::new(),
                taken: Vec::new(),
            })),
        }
    }

    /// An Ethernet (RoCEv2) fabric.
    pub fn ethernet() -> Self {
        Self::new(LinkLayer::Ethernet)
    }

    /// An InfiniBand fabric with its subnet manager.
    pub fn infiniband() -> Self {
        Self::new(LinkLayer::InfiniBand)
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The link layer.
    pub fn link_layer(&self) -> LinkLayer {
        self.lock().link
    }

    /// Connects an HCA; returns its port number on the switch. On InfiniBand the subnet
    /// manager gives it a LID (1, 2, ... in attach order), the SM LID and an ACTIVE port.
    ///
    /// # Panics
    ///
    /// If the HCA's port type is not the fabric's link layer (a programming error).
    pub fn attach(&self, hca: &MockHca) -> usize {
        let mut i = self.lock();
        assert_eq!(
            hca.config().port_type,
            i.link,
            "an HCA attached to a fabric of another link layer"
        );
        if i.link == LinkLayer::InfiniBand {
            i.sm.configure(hca);
        }
        hca.advance_clock_to(i.now);
        if i.realtime.is_some() {
            hca.set_kick(Some(self.kick()));
        }
        i.ports.push(hca.clone());
        i.bursts.push((Vec::new(), Vec::new()));
        i.macs.push(hca.config().mac);
        i.returns.push(Vec::new());
        i.ports.len() - 1
    }

    /// The attached HCAs, in port order.
    pub fn ports(&self) -> Vec<MockHca> {
        self.lock().ports.clone()
    }

    /// Sets the one-way latency of the switch.
    pub fn set_latency_ns(&self, ns: u64) {
        self.lock().latency_ns = ns;
    }

    /// Replaces the fault configuration (and reseeds the generator).
    pub fn set_faults(&self, cfg: FaultConfig) {
        self.lock().faults = FaultInjector::new(cfg);
    }

    /// The fault configuration.
    pub fn faults(&self) -> FaultConfig {
        self.lock().faults.cfg
    }

    /// Starts a pcap capture of every frame sent from now on into `w` (link type Ethernet
    /// for an Ethernet fabric, DLT_USER0 for InfiniBand).
    pub fn capture_to(&self, w: Box<dyn Write + Send>) -> io::Result<()> {
        let mut i = self.lock();
        let link = match i.link {
            LinkLayer::Ethernet => LinkType::Ethernet,
            LinkLayer::InfiniBand => LinkType::User0,
        };
        i.tap = Some(PcapTap::new(w, link)?);
        Ok(())
    }

    /// Starts a pcap capture into a new file at `path`.
    pub fn capture_file(&self, path: impl AsRef<std::path::Path>) -> io::Result<()> {
        let f = std::fs::File::create(path)?;
        self.capture_to(Box::new(io::BufWriter::new(f)))
    }

    /// Stops the capture, flushes it and returns how many frames it holds.
    pub fn stop_capture(&self) -> io::Result<u64> {
        let tap = self.lock().tap.take();
        match tap {
            Some(mut t) => {
                t.writer.flush()?;
                if t.failed {
                    return Err(io::Error::other("pcap write failed"));
                }
                Ok(t.frames)
            }
            None => Ok(0),
        }
    }

    /// The fabric's counters.
    pub fn counters(&self) -> FabricCounters {
        self.lock().counters
    }

    /// The fabric's model time, nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.lock().now
    }

    /// Frames in flight.
    pub fn in_flight(&self) -> usize {
        self.lock().in_flight.len()
    }

    /// Moves the clocks forward by `ns` without delivering anything (frames and timers that
    /// become due are handled by the next step).
    pub fn advance_ns(&self, ns: u64) {
        let mut i = self.lock();
        i.now += ns;
        let now = i.now;
        for p in &i.ports {
            p.advance_clock_to(now);
        }
    }

    /// One step: takes queued frames, delivers those due now, fires due timers; if nothing
    /// was due, moves the clock to the next event. Returns false when there is nothing left
    /// to do (no frame queued or in flight, no timer running).
    pub fn step(&self) -> bool {
        let mut i = self.lock();
        i.step()
    }

    /// Steps until idle, or until model time has advanced by [`DEFAULT_IDLE_HORIZON_NS`] or
    /// [`DEFAULT_MAX_STEPS`] steps were taken (for example an RNR retry that never ends).
    /// Returns whether it became idle.
    pub fn run_until_idle(&self) -> bool {
        self.run_until_idle_within(DEFAULT_IDLE_HORIZON_NS)
    }

    /// Steps until idle, or until model time has advanced by `horizon_ns` or
    /// [`DEFAULT_MAX_STEPS`] steps were taken.
    pub fn run_until_idle_within(&self, horizon_ns: u64) -> bool {
        let mut i = self.lock();
        let end = i.now.saturating_add(horizon_ns);
        for _ in 0..DEFAULT_MAX_STEPS {
            if !i.step() {
                return true;
            }
            if i.now > end {
                return false;
            }
        }
        false
    }

    /// Steps until `done()` returns true (checked between steps, without the fabric's lock
    /// held, so it may poll CQs), the fabric is idle, or `horizon_ns` of model time passed.
    /// Returns whether `done()` became true.
    pub fn run_until(&self, horizon_ns: u64, mut done: impl FnMut() -> bool) -> bool {
        let end = self.now_ns().saturating_add(horizon_ns);
        for _ in 0..DEFAULT_MAX_STEPS {
            if done() {
                return true;
            }
            if !self.step() || self.now_ns() > end {
                return done();
            }
        }
        done()
    }

    /// Steps until model time has advanced by `ns` (or the fabric is idle).
    pub fn run_for(&self, ns: u64) {
        let mut i = self.lock();
        let end = i.now.saturating_add(ns);
        while i.now < end {
            if !i.step() {
                break;
            }
        }
        i.now = i.now.max(end);
        let now = i.now;
        for p in &i.ports {
            p.advance_clock_to(now);
        }
    }

    /// Runs the fabric on a thread that steps it every `period_us` microseconds of wall time
    /// (for examples with real-time clocks or drivers that spin on the CPU). Model time
    /// follows wall time from the start of the pump (virtual clocks are moved along) or
    /// the fastest HCA clock, whichever is ahead.
    ///
    /// While it runs, a send doorbell that leaves frames to send moves them at once, on the
    /// thread that rang it: the fabric delivers them, lets the receivers answer, and goes on
    /// while the next frames are due within the switch latency (model time may run that
    /// far ahead of wall time), so a message and its acknowledgement cross the fabric
    /// without waiting for the pump's period. Frames a fault delays, and timers, wait for
    /// their time as before.
    pub fn start_pump(&self, period_us: u64) -> PumpHandle {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let f = self.clone();
        {
            let mut i = self.lock();
            i.realtime = Some((std::time::Instant::now(), i.now));
            let kick = self.kick();
            for p in &i.ports {
                p.set_kick(Some(kick.clone()));
            }
        }
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Acquire) {
                f.lock().realtime_burst();
                std::thread::sleep(std::time::Duration::from_micros(period_us.max(1)));
            }
            let mut i = f.lock();
            for p in &i.ports {
                p.set_kick(None);
            }
            i.realtime = None;
        });
        PumpHandle {
            stop,
            thread: Some(thread),
        }
    }

    /// Holds the fabric for `d`, as a process the OS does not schedule holds it: no frame
    /// moves and no timer fires meanwhile, and what arrives on its UDP sockets waits in
    /// them. For tests of what such a pause leaves behind.
    pub fn stall_for(&self, d: std::time::Duration) {
        let _held = self.lock();
        std::thread::sleep(d);
    }

    /// What an HCA runs after a doorbell left frames to send while the pump runs: a
    /// real-time burst. It holds the fabric only weakly, so the HCAs do not keep it alive.
    fn kick(&self) -> crate::model::Kick {
        let weak = Arc::downgrade(&self.inner);
        Arc::new(move || {
            if let Some(inner) = weak.upgrade() {
                inner
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .realtime_burst();
            }
        })
    }

    pub(crate) fn with_inner<R>(&self, f: impl FnOnce(&mut Vec<udp::UdpPort>) -> R) -> R {
        f(&mut self.lock().udp)
    }
}

impl Inner {
    /// Follows the HCAs' clocks (a driver's delay moves its HCA's clock) and keeps all
    /// clocks at the fabric's time.
    fn sync_time(&mut self) {
        let t = self.ports.iter().map(|p| p.now_ns()).max().unwrap_or(0);
        self.now = self.now.max(t);
        let now = self.now;
        for p in &self.ports {
            p.advance_clock_to(now);
        }
    }

    /// Takes every HCA's queued frames and schedules them.
    fn collect(&mut self) -> bool {
        let mut any = false;
        let mut taken = std::mem::take(&mut self.taken);
        for src in 0..self.ports.len() {
            // One visit: the port gets back the buffers of its delivered frames and hands
            // over what it sent since.
            self.ports[src].exchange_tx_frames(&mut self.returns[src], &mut taken);
            for f in taken.drain(..) {
                any = true;
                self.schedule(f, Some(src));
            }
        }
        self.taken = taken;
        if !self.udp.is_empty() {
            let udp_frames: Vec<Vec<u8>> = self.udp.iter_mut().flat_map(|u| u.poll()).collect();
            for f in udp_frames {
                any = true;
                self.schedule(f, None);
            }
        }
        any
    }

    /// Hands a frame's buffer back to the port that sent it (to be reused for its next
    /// frames).
    fn give_back(&mut self, src: Option<usize>, f: Vec<u8>) {
        if let Some(r) = src.and_then(|s| self.returns.get_mut(s))
            && r.len() < crate::engine::SPARE_FRAMES
        {
            r.push(f);
        }
    }

    fn schedule(&mut self, mut f: Vec<u8>, src: Option<usize>) {
        self.counters.sent += 1;
        if let Some(t) = self.tap.as_mut() {
            t.record(self.now, &f);
        }
        let v = self.faults.judge(f.len());
        if v.drop {
            self.counters.dropped += 1;
            self.give_back(src, f);
            return;
        }
        if let Some((at, bit)) = v.corrupt_at
            && let Some(b) = f.get_mut(at)
        {
            *b ^= bit;
            self.counters.corrupted += 1;
        }
        // A UDP port takes frames for its peer address.
        if let Some(u) = self.udp.iter_mut().find(|u| u.wants(&f)) {
            u.send(&f);
            self.counters.delivered += 1;
            self.give_back(src, f);
            return;
        }
        let Some(dst) = switch::route(self.link, &self.ports, &self.macs, &f) else {
            self.counters.no_route += 1;
            self.give_back(src, f);
            return;
        };
        if v.extra_ns > 0 {
            self.counters.delayed += 1;
        }
        let at = self.now + self.latency_ns + v.extra_ns;
        if v.duplicate {
            self.counters.duplicated += 1;
            self.seq += 1;
            self.in_flight.push(Flight {
                at: at + 1,
                seq: self.seq,
                dst,
                src: None,
                frame: f.clone(),
            });
        }
        self.seq += 1;
        self.in_flight.push(Flight {
            at,
            seq: self.seq,
            dst,
            src,
            frame: f,
        });
    }

    /// Delivers every frame due now, one burst per port in time order.
    fn deliver_due(&mut self) -> bool {
        let mut any = false;
        while let Some(f) = self.in_flight.pop_due(self.now) {
            any = true;
            match self.bursts.get_mut(f.dst) {
                Some((frames, srcs)) => {
                    frames.push(f.frame);
                    srcs.push(f.src);
                }
                None => self.give_back(f.src, f.frame),
            }
        }
        if !any {
            return false;
        }
        for port in 0..self.bursts.len() {
            if self.bursts[port].0.is_empty() {
                continue;
            }
            let (mut frames, mut srcs) = std::mem::take(&mut self.bursts[port]);
            self.counters.delivered += frames.len() as u64;
            self.ports[port].receive_frames(&frames);
            for (f, src) in frames.drain(..).zip(srcs.drain(..)) {
                self.give_back(src, f);
            }
            self.bursts[port] = (frames, srcs);
        }
        true
    }

    fn step(&mut self) -> bool {
        self.sync_time();
        let mut did = self.collect();
        did |= self.deliver_due();
        let now = self.now;
        for p in &self.ports {
            if p.next_deadline_ns().is_some_and(|t| t <= now) {
                p.service();
                did = true;
            }
            // QPs in the error state flush receive WQEs posted later.
            if p.tx_pending() > 0 {
                did = true;
            }
        }
        did |= self.collect();
        if did {
            return true;
        }
        // Nothing due now: move to the next event.
        let next_frame = self.in_flight.next_key().map(|k| k.0);
        let next_timer = self.ports.iter().filter_map(|p| p.next_deadline_ns()).min();
        let next = match (next_frame, next_timer) {
            (Some(a), Some(b)) => a.min(b),
            (a, b) => match a.or(b) {
                Some(t) => t,
                None => {
                    for p in &self.ports {
                        p.service();
                    }
                    return self.collect();
                }
            },
        };
        self.now = self.now.max(next);
        let now = self.now;
        for p in &self.ports {
            p.advance_clock_to(now);
        }
        true
    }

    /// Most steps one real-time burst takes (a bound, not a rhythm: a burst ends as soon
    /// as nothing is due within the switch latency).
    const BURST_STEPS: usize = 256;

    /// Real-time steps: model time follows wall time from the pump's start (or the fastest
    /// HCA clock, whichever is ahead); what is due is handled, then while the next frame in
    /// flight is due within the switch latency, time moves to it and the next step runs.
    ///
    /// What the UDP sockets hold is taken in first, at the time the fabric last had: it
    /// arrived while this thread was not running (a process the OS did not schedule), and
    /// a response that came in time must reach its requester before the clock catches up
    /// with the wall and the requester's ACK timer is looked at, as an HCA takes packets
    /// off the link as they come. Otherwise a burst of READ responses larger than one poll
    /// of the socket made the requester time out and send every READ again.
    fn realtime_burst(&mut self) {
        let Some((start, base)) = self.realtime else {
            return;
        };
        self.drain_udp();
        let wall = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.now = self.now.max(base.saturating_add(wall));
        for _ in 0..Self::BURST_STEPS {
            self.step_now_only();
            match self.in_flight.next_key() {
                Some((at, _)) if at <= self.now.saturating_add(self.latency_ns) => {
                    self.now = self.now.max(at);
                }
                _ => break,
            }
        }
    }

    /// Most polls of the UDP sockets [`Self::drain_udp`] takes before the clock moves (each
    /// up to a batch of datagrams per socket: a bound on the time a flood can hold it).
    const DRAIN_ROUNDS: usize = 64;

    /// Takes in and delivers what the UDP sockets hold, each round one batch per socket at
    /// the switch latency after the fabric's current time, until they are empty.
    fn drain_udp(&mut self) {
        for _ in 0..Self::DRAIN_ROUNDS {
            if self.udp.is_empty() {
                return;
            }
            let frames: Vec<Vec<u8>> = self.udp.iter_mut().flat_map(|u| u.poll()).collect();
            if frames.is_empty() {
                return;
            }
            for f in frames {
                self.schedule(f, None);
            }
            self.now = self.now.saturating_add(self.latency_ns);
            self.step_now_only();
        }
    }

    /// A real-time step: handles what is due at the current time without jumping ahead.
    fn step_now_only(&mut self) {
        self.sync_time();
        self.collect();
        self.deliver_due();
        for p in &self.ports {
            p.service();
        }
        self.collect();
    }
}
