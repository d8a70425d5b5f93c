//! The communicator: its queue pairs and memory, the chunk engine, the collectives.

use alloc::vec;
use alloc::vec::Vec;

use uhca_driver::Hca;
use uhca_driver::addr::{AhAttr, Gid, Mac, StaticRate};
use uhca_driver::caps::LinkLayer;
use uhca_driver::verbs::{
    Cq, InitAttr, Mr, Pd, Qp, QpCaps, QpInitAttr, Rc, RecvWr, RtrAttr, RtsAttr, SendOp, SendWr,
    Sge, WcFlags, WcOpcode, WorkCompletion,
};
use uhca_fwif::consts::{AccessFlags, IbMtu, QpState};
use uhca_hal::{DmaMem, Platform};

use crate::dtype::{Element, ReduceOp};
use crate::plan::{Cursor, Plan, Segments, Stream};
use crate::{Arg, Collective, Config, Error, InvalidArgument, Step};

/// Completions taken from the CQ per poll.
const POLL_BATCH: usize = 32;
/// `wr_id` bit of a data WRITE (the others are credits).
const WR_DATA: u64 = 1 << 63;
/// First PSN of every QP (both directions).
const START_PSN: u32 = 0x100;

/// How the peers reach this rank's port: its GID and MAC (RoCE) or LID (InfiniBand).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAddr {
    /// The port's GID (RoCEv2: the IP address as a GID; InfiniBand: unused here).
    pub gid: Gid,
    /// The port's MAC (RoCE).
    pub mac: Mac,
    /// The port's LID (InfiniBand).
    pub lid: u16,
}

/// What a peer needs to connect its QP to one of this rank's: exchanged out of band.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// This rank's port.
    pub addr: PortAddr,
    /// The QP this rank uses for that peer.
    pub qpn: u32,
    /// The QP's first PSN.
    pub psn: u32,
    /// The IOVA of the inbox the peer writes into (`window` slots of `chunk_bytes`).
    pub inbox: u64,
    /// The rkey of the memory region holding the inbox.
    pub rkey: u32,
}

/// A communicator whose QPs are created but not connected: hand each peer its
/// [`Pending::endpoint`], gather theirs, and [`Pending::connect`].
pub struct Pending<P: Platform> {
    rank: usize,
    size: usize,
    cfg: Config,
    addr: PortAddr,
    pd: Pd<P>,
    cq: Cq<P>,
    mr: Mr<P>,
    qps: Vec<Option<Qp<P, Rc>>>,
}

/// One peer: the QP, where to write, and the flow-control counters (all cumulative, in
/// chunks, since the communicator was connected).
struct Channel<P: Platform> {
    qp: Qp<P, Rc>,
    remote_inbox: u64,
    rkey: u32,
    /// Offsets in the memory region.
    inbox_off: usize,
    outbox_off: usize,
    /// Data chunks posted to the peer.
    sent: u64,
    /// Of those, the ones whose WRITE completed (their outbox slots are free again).
    send_done: u64,
    /// Of those, the ones the peer consumed (its inbox slots are free again).
    credited: u64,
    /// Data chunks that landed in the inbox.
    arrived: u64,
    /// Of those, the ones consumed.
    consumed: u64,
    /// The consumed count last reported to the peer.
    credit_sent: u64,
    /// Send work requests not yet completed.
    sq_outstanding: usize,
    /// The length of the chunk in each inbox slot.
    slot_len: Vec<u32>,
}

/// A communicator of `size` ranks, this one being `rank`: an RC QP to every other rank
/// on one CQ, and one memory region for the inboxes and outboxes.
///
/// Every rank must call the same collectives in the same order with the same counts.
pub struct Communicator<P: Platform> {
    rank: usize,
    size: usize,
    cfg: Config,
    pd: Pd<P>,
    cq: Cq<P>,
    mr: Mr<P>,
    clock: P,
    channels: Vec<Option<Channel<P>>>,
    /// Chunk staging between the caller's elements and the registered memory.
    scratch: Vec<u8>,
    wc: [WorkCompletion; POLL_BATCH],
    sq_depth: usize,
    /// Where the running collective is (for errors).
    step: Step,
    broken: bool,
}

/// The [`Error::Setup`] of `rank` for the driver call `what`.
fn setup<E: Into<uhca_driver::Error>>(rank: usize, what: &'static str) -> impl FnOnce(E) -> Error {
    move |error| Error::Setup {
        rank,
        what,
        error: error.into(),
    }
}

/// Send queue and receive queue depth for a window: `window` data chunks and `window`
/// credits in flight each way, and some room.
fn queue_depth(window: usize) -> usize {
    2 * window + 4
}

impl<P: Platform> Communicator<P> {
    /// Creates the objects of rank `rank` of `size` on `hca` (port 1): a PD, a CQ, a
    /// memory region of 2 × (size − 1) × window × chunk_bytes bytes and an RC QP in INIT
    /// (with its receives posted) per peer.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a rank outside `0..size`, `size` 0, or a chunk size
    /// or window the device cannot take; [`Error::Setup`] for the driver's refusal.
    pub fn create(
        hca: &mut Hca<P>,
        rank: usize,
        size: usize,
        addr: PortAddr,
        cfg: Config,
    ) -> Result<Pending<P>, Error> {
        if size == 0 {
            return Err(InvalidArgument::min(Arg::Size, 0, 1).into());
        }
        if rank >= size {
            return Err(InvalidArgument::max(Arg::Rank, rank, size - 1).into());
        }
        if cfg.chunk_bytes < 8 {
            return Err(InvalidArgument::min(Arg::ChunkBytes, cfg.chunk_bytes, 8).into());
        }
        if cfg.chunk_bytes > 1 << 30 {
            return Err(InvalidArgument::max(Arg::ChunkBytes, cfg.chunk_bytes, 1 << 30).into());
        }
        if !cfg.chunk_bytes.is_multiple_of(8) {
            return Err(
                InvalidArgument::rule(Arg::ChunkBytes, cfg.chunk_bytes, "a multiple of 8").into(),
            );
        }
        if cfg.window == 0 {
            return Err(InvalidArgument::min(Arg::Window, 0, 1).into());
        }
        if cfg.window > 1024 {
            return Err(InvalidArgument::max(Arg::Window, cfg.window, 1024).into());
        }
        let peers = size - 1;
        let depth = queue_depth(cfg.window);
        let pd = hca.alloc_pd().map_err(setup(rank, "ALLOC_PD"))?;
        // Every QP's send and receive completions, with the queues rounded up to powers
        // of two as the driver sizes them.
        let cqe = (peers.max(1) * 2 * depth.next_power_of_two()) as u32;
        if cqe > hca.caps().max_cqe {
            // The most peers whose completions the device's largest CQ holds.
            let peers_max = hca.caps().max_cqe as usize / (2 * depth.next_power_of_two());
            return Err(InvalidArgument::max(Arg::Size, size, peers_max + 1).into());
        }
        let cq = hca.create_cq(cqe).map_err(setup(rank, "CREATE_CQ"))?;
        let mr_len = (2 * peers * cfg.window * cfg.chunk_bytes).max(64);
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        let mr = hca
            .alloc_mr(&pd, mr_len, access)
            .map_err(setup(rank, "registering the inboxes and outboxes"))?;
        let mut qps = Vec::with_capacity(size);
        for peer in 0..size {
            if peer == rank {
                qps.push(None);
                continue;
            }
            let attr = QpInitAttr {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCaps {
                    max_send_wr: depth as u32,
                    max_recv_wr: depth as u32,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
            };
            let mut qp = hca
                .create_qp::<Rc>(&pd, &attr)
                .map_err(setup(rank, "CREATE_QP"))?;
            qp.to_init(
                hca,
                InitAttr {
                    access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
                    ..InitAttr::default()
                },
            )
            .map_err(setup(rank, "RST2INIT_QP"))?;
            // Receives for WRITE with immediate and for credits: they carry no data.
            let none: [Sge; 0] = [];
            for _ in 0..depth {
                qp.post_recv(&[RecvWr {
                    wr_id: peer as u64,
                    sg_list: &none,
                }])
                .map_err(|_| {
                    InvalidArgument::rule(
                        Arg::Window,
                        cfg.window,
                        "the receive queue the device gave is smaller than the window needs",
                    )
                })?;
            }
            qps.push(Some(qp));
        }
        Ok(Pending {
            rank,
            size,
            cfg,
            addr,
            pd,
            cq,
            mr,
            qps,
        })
    }
}

impl<P: Platform> Pending<P> {
    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How the peers reach this rank's port.
    pub fn port_addr(&self) -> PortAddr {
        self.addr
    }

    /// What `peer` needs to connect to this rank.
    ///
    /// # Panics
    ///
    /// If `peer` is this rank or not below the size.
    pub fn endpoint(&self, peer: usize) -> Endpoint {
        let qp = self.qps[peer].as_ref().expect("no QP to oneself");
        let slot = self.mr.iova() + self.inbox_off(peer) as u64;
        Endpoint {
            addr: self.addr,
            qpn: qp.qpn(),
            psn: START_PSN,
            inbox: slot,
            rkey: self.mr.rkey(),
        }
    }

    /// The QP this rank uses for `peer` (in INIT, its receives posted), for a connection
    /// manager that connects it in band (`uhca_driver::cm`, which moves it to RTS from the
    /// REQ and REP): [`Pending::connect`] then uses a QP in RTS as it is, taking only the
    /// inbox and rkey of that peer's endpoint. `None` for this rank itself or a rank not
    /// below the size.
    pub fn qp_mut(&mut self, peer: usize) -> Option<&mut Qp<P, Rc>> {
        self.qps.get_mut(peer)?.as_mut()
    }

    fn inbox_off(&self, peer: usize) -> usize {
        slot_base(self.rank, peer, self.cfg).0
    }

    /// Connects every QP (INIT → RTR → RTS) with `remote[p]`, the endpoint rank `p` gave
    /// for this rank (`remote[rank]` is ignored). A QP already in RTS (connected through
    /// [`Pending::qp_mut`]) stays as it is; of its endpoint only `inbox` and `rkey` count.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a slice of the wrong length; [`Error::Setup`].
    pub fn connect(self, hca: &mut Hca<P>, remote: &[Endpoint]) -> Result<Communicator<P>, Error> {
        if remote.len() != self.size {
            return Err(InvalidArgument::rule(
                Arg::Endpoints,
                remote.len(),
                "one endpoint per rank (the communicator's size)",
            )
            .into());
        }
        let Pending {
            rank,
            size,
            cfg,
            addr: _,
            pd,
            cq,
            mr,
            qps,
        } = self;
        let link = hca.caps().link_layer;
        let mut channels = Vec::with_capacity(size);
        for (peer, qp) in qps.into_iter().enumerate() {
            let Some(mut qp) = qp else {
                channels.push(None);
                continue;
            };
            let r = remote[peer];
            let ah = match link {
                LinkLayer::Ethernet => AhAttr::RoceV2 {
                    sgid_index: 0,
                    dgid: r.addr.gid,
                    dmac: r.addr.mac,
                    udp_sport: 0xc000 | (rank as u16 & 0xff) << 4 | (peer as u16 & 0xf),
                    traffic_class: 0,
                    hop_limit: 64,
                    flow_label: 0,
                    sl: 0,
                },
                LinkLayer::InfiniBand => AhAttr::Ib {
                    dlid: r.addr.lid,
                    sl: 0,
                    src_path_bits: 0,
                    static_rate: StaticRate::PortCurrent,
                    grh: None,
                },
            };
            if qp.state() == QpState::Rts {
                // Connected in band already (see `Pending::qp_mut`).
            } else {
                qp.to_rtr(
                    hca,
                    RtrAttr {
                        path_mtu: IbMtu::Mtu4096,
                        dest_qpn: r.qpn,
                        rq_psn: r.psn,
                        max_dest_rd_atomic: 1,
                        min_rnr_timer: 1,
                        ah,
                    },
                )
                .map_err(setup(rank, "INIT2RTR_QP"))?;
                qp.to_rts(
                    hca,
                    RtsAttr {
                        sq_psn: START_PSN,
                        timeout: cfg.ack_timeout,
                        retry_cnt: cfg.retry_cnt,
                        rnr_retry: 7,
                        max_rd_atomic: 1,
                    },
                )
                .map_err(setup(rank, "RTR2RTS_QP"))?;
            }
            let (inbox_off, outbox_off) = slot_base(rank, peer, cfg);
            channels.push(Some(Channel {
                qp,
                remote_inbox: r.inbox,
                rkey: r.rkey,
                inbox_off,
                outbox_off,
                sent: 0,
                send_done: 0,
                credited: 0,
                arrived: 0,
                consumed: 0,
                credit_sent: 0,
                sq_outstanding: 0,
                slot_len: vec![0; cfg.window],
            }));
        }
        let clock = mr.mem().allocator().clone();
        Ok(Communicator {
            rank,
            size,
            cfg,
            pd,
            cq,
            mr,
            clock,
            channels,
            scratch: vec![0; cfg.chunk_bytes],
            wc: [WorkCompletion::default(); POLL_BATCH],
            sq_depth: queue_depth(cfg.window),
            step: Step {
                collective: Collective::AllReduceRing,
                step: 0,
            },
            broken: false,
        })
    }
}

/// Offsets of the inbox and outbox of `peer` in the memory region of `rank`: for each
/// peer in rank order (the rank itself has none), its inbox then its outbox, each
/// `window` slots of `chunk_bytes`.
fn slot_base(rank: usize, peer: usize, cfg: Config) -> (usize, usize) {
    let size = cfg.window * cfg.chunk_bytes;
    let index = if peer < rank { peer } else { peer - 1 };
    (2 * index * size, (2 * index + 1) * size)
}

impl<P: Platform> Communicator<P> {
    /// This rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The settings.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Whether an earlier collective failed (every later one returns [`Error::Broken`]).
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Sums (or max, min) `buf` over all ranks, in place: recursive doubling up to
    /// [`Config::small_bytes`], the ring above.
    ///
    /// # Errors
    ///
    /// See [`Error`]; the buffer's content is then unspecified.
    pub fn all_reduce<T: Element>(&mut self, buf: &mut [T], op: ReduceOp) -> Result<(), Error> {
        if buf.len() * T::SIZE <= self.cfg.small_bytes {
            self.all_reduce_recursive_doubling(buf, op)
        } else {
            self.all_reduce_ring(buf, op)
        }
    }

    /// Ring all-reduce (reduce-scatter then all-gather), in place.
    ///
    /// # Errors
    ///
    /// See [`Error`].
    pub fn all_reduce_ring<T: Element>(
        &mut self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        let n = self.size;
        let r = self.rank;
        self.begin(Collective::AllReduceRing)?;
        if n == 1 || buf.is_empty() {
            return Ok(());
        }
        let plan = Plan {
            next: (r + 1) % n,
            prev: (r + n - 1) % n,
            segs: Segments {
                total: buf.len(),
                parts: n,
            },
            out: Stream {
                first: (r + n - 1) % n,
                steps: 2 * (n - 1),
            },
            inp: Stream {
                first: (r + n - 2) % n,
                steps: 2 * (n - 1),
            },
            out_initial_step: true,
            reduce_steps: n - 1,
            op,
            step_base: 0,
        };
        self.run(&plan, buf)
    }

    /// Reduce-scatter, in place: `buf` holds `size` blocks of `buf.len() / size` elements
    /// (block k of every rank is reduced); afterwards block `rank` holds this rank's
    /// result and the other blocks are unspecified.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `buf.len()` is not a multiple of the size; see
    /// [`Error`].
    pub fn reduce_scatter<T: Element>(&mut self, buf: &mut [T], op: ReduceOp) -> Result<(), Error> {
        let n = self.size;
        let r = self.rank;
        if !buf.len().is_multiple_of(n) {
            return Err(InvalidArgument::rule(
                Arg::BufferLen,
                buf.len(),
                "reduce_scatter: a multiple of the communicator's size",
            )
            .into());
        }
        self.begin(Collective::ReduceScatter)?;
        if n == 1 || buf.is_empty() {
            return Ok(());
        }
        let plan = Plan {
            next: (r + 1) % n,
            prev: (r + n - 1) % n,
            segs: Segments {
                total: buf.len(),
                parts: n,
            },
            out: Stream {
                first: (r + n - 1) % n,
                steps: n - 1,
            },
            inp: Stream {
                first: (r + n - 2) % n,
                steps: n - 1,
            },
            out_initial_step: true,
            reduce_steps: n - 1,
            op,
            step_base: 0,
        };
        self.run(&plan, buf)
    }

    /// All-gather, in place: `buf` holds `size` blocks of `buf.len() / size` elements;
    /// block `rank` is this rank's contribution, and afterwards block k holds rank k's.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] if `buf.len()` is not a multiple of the size; see
    /// [`Error`].
    pub fn all_gather<T: Element>(&mut self, buf: &mut [T]) -> Result<(), Error> {
        let n = self.size;
        let r = self.rank;
        if !buf.len().is_multiple_of(n) {
            return Err(InvalidArgument::rule(
                Arg::BufferLen,
                buf.len(),
                "all_gather: a multiple of the communicator's size",
            )
            .into());
        }
        self.begin(Collective::AllGather)?;
        if n == 1 || buf.is_empty() {
            return Ok(());
        }
        let plan = Plan {
            next: (r + 1) % n,
            prev: (r + n - 1) % n,
            segs: Segments {
                total: buf.len(),
                parts: n,
            },
            out: Stream {
                first: r,
                steps: n - 1,
            },
            inp: Stream {
                first: (r + n - 1) % n,
                steps: n - 1,
            },
            out_initial_step: true,
            reduce_steps: 0,
            op: ReduceOp::Sum,
            step_base: 0,
        };
        self.run(&plan, buf)
    }

    /// Broadcast from `root`, in place: afterwards every rank's `buf` holds the root's.
    /// The data goes around the ring from the root, pipelined by chunks.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a root outside the communicator; see [`Error`].
    pub fn broadcast<T: Element>(&mut self, buf: &mut [T], root: usize) -> Result<(), Error> {
        let n = self.size;
        let r = self.rank;
        if root >= n {
            return Err(InvalidArgument::max(Arg::Root, root, n - 1).into());
        }
        self.begin(Collective::Broadcast)?;
        if n == 1 || buf.is_empty() {
            return Ok(());
        }
        // Position along the chain: the root is 0, its successor 1, … the last n − 1.
        let pos = (r + n - root) % n;
        let one = |on: bool| Stream {
            first: 0,
            steps: on as usize,
        };
        let plan = Plan {
            next: (r + 1) % n,
            prev: (r + n - 1) % n,
            segs: Segments {
                total: buf.len(),
                parts: 1,
            },
            out: one(pos < n - 1),
            inp: one(pos > 0),
            out_initial_step: pos == 0,
            reduce_steps: 0,
            op: ReduceOp::Sum,
            step_base: 0,
        };
        self.run(&plan, buf)
    }

    /// Recursive-doubling all-reduce, in place: for small messages (each round moves the
    /// whole buffer, in log₂ N rounds instead of the ring's 2(N − 1) steps).
    ///
    /// # Errors
    ///
    /// See [`Error`].
    pub fn all_reduce_recursive_doubling<T: Element>(
        &mut self,
        buf: &mut [T],
        op: ReduceOp,
    ) -> Result<(), Error> {
        let n = self.size;
        let r = self.rank;
        self.begin(Collective::AllReduceRecursiveDoubling)?;
        if n == 1 || buf.is_empty() {
            return Ok(());
        }
        // The largest power of two not above n; ranks p.. fold into ranks 0..n-p.
        let p = 1usize << (usize::BITS - 1 - n.leading_zeros());
        let rounds = p.trailing_zeros();
        let whole = Segments {
            total: buf.len(),
            parts: 1,
        };
        let one = |on: bool| Stream {
            first: 0,
            steps: on as usize,
        };
        let pass = |peer: usize, send: bool, recv: bool, reduce: bool, step: u32| Plan {
            next: peer,
            prev: peer,
            segs: whole,
            out: one(send),
            inp: one(recv),
            out_initial_step: true,
            reduce_steps: reduce as usize,
            op,
            step_base: step,
        };
        if r >= p {
            // Hand the data to r - p, get the result back.
            self.run(&pass(r - p, true, false, false, 0), buf)?;
            return self.run(&pass(r - p, false, true, false, rounds + 1), buf);
        }
        if r + p < n {
            self.run(&pass(r + p, false, true, true, 0), buf)?;
        }
        for k in 0..rounds {
            self.run(&pass(r ^ (1 << k), true, true, true, k + 1), buf)?;
        }
        if r + p < n {
            self.run(&pass(r + p, true, false, false, rounds + 1), buf)?;
        }
        Ok(())
    }

    /// Orderly teardown: DESTROY_QP for every QP, then the memory region, the CQ and the
    /// PD.
    ///
    /// # Errors
    ///
    /// [`Error::Setup`] naming the first command refused (the objects after it are
    /// leaked).
    pub fn destroy(self, hca: &mut Hca<P>) -> Result<(), Error> {
        let rank = self.rank;
        for ch in self.channels.into_iter().flatten() {
            ch.qp.destroy(hca).map_err(setup(rank, "DESTROY_QP"))?;
        }
        self.mr.destroy(hca).map_err(setup(rank, "DESTROY_MKEY"))?;
        self.cq.destroy(hca).map_err(setup(rank, "DESTROY_CQ"))?;
        self.pd.destroy(hca).map_err(setup(rank, "DEALLOC_PD"))?;
        Ok(())
    }

    fn begin(&mut self, collective: Collective) -> Result<(), Error> {
        if self.broken {
            return Err(Error::Broken { rank: self.rank });
        }
        self.step = Step {
            collective,
            step: 0,
        };
        Ok(())
    }

    /// Runs one pass; on error the communicator is broken.
    fn run<T: Element>(&mut self, plan: &Plan, buf: &mut [T]) -> Result<(), Error> {
        let r = self.run_pass(plan, buf);
        if r.is_err() {
            self.broken = true;
        }
        r
    }

    fn run_pass<T: Element>(&mut self, plan: &Plan, buf: &mut [T]) -> Result<(), Error> {
        let ce = (self.cfg.chunk_bytes / T::SIZE).max(1);
        let out_total = plan.chunks(&plan.out, ce);
        let in_total = plan.chunks(&plan.inp, ce);
        let out_initial = if plan.out_initial_step && plan.out.steps > 0 {
            plan.chunks_in_step(&plan.out, 0, ce)
        } else {
            0
        };
        let mut out = Cursor::start(plan, &plan.out, ce);
        let mut inp = Cursor::start(plan, &plan.inp, ce);
        let (mut out_posted, mut in_done) = (0usize, 0usize);
        let mut last_progress = self.clock.now_ns();
        let mut idle_rounds = 0u32;
        loop {
            let mut moved = false;
            // Inbound: chunks that landed, in order. A chunk is taken only once the
            // outbound chunks of the caller's own data up to it have been staged, so a
            // pairwise exchange never sends data it already reduced.
            while in_done < in_total {
                if out_posted < out_initial.min(in_done + 1) {
                    break;
                }
                let ch = self.channels[plan.prev].as_mut().expect("a peer");
                if ch.arrived == ch.consumed {
                    break;
                }
                let range = inp.range(plan, &plan.inp, ce);
                let step = Step {
                    collective: self.step.collective,
                    step: plan.step_base + inp.step as u32,
                };
                self.step = step;
                let slot = (ch.consumed % self.cfg.window as u64) as usize;
                let bytes = range.len() * T::SIZE;
                if ch.slot_len[slot] as usize != bytes {
                    return Err(Error::Protocol {
                        rank: self.rank,
                        peer: plan.prev,
                        step,
                        what: "a chunk of the wrong length",
                    });
                }
                let off = self.mr.buffer_offset() + ch.inbox_off + slot * self.cfg.chunk_bytes;
                self.mr.mem().read_bytes(off, &mut self.scratch[..bytes]);
                ch.consumed += 1;
                let dst = &mut buf[range];
                if inp.step < plan.reduce_steps {
                    T::reduce_from_le(plan.op, dst, &self.scratch[..bytes]);
                } else {
                    T::copy_from_le(dst, &self.scratch[..bytes]);
                }
                inp.advance(plan, &plan.inp, ce);
                in_done += 1;
                moved = true;
            }
            // Outbound: the caller's own chunks, then what came in, as the window allows.
            while out_posted < out_total && out_posted < out_initial + in_done {
                let ch = self.channels[plan.next].as_mut().expect("a peer");
                let window = self.cfg.window as u64;
                if ch.sent - ch.credited >= window
                    || ch.sent - ch.send_done >= window
                    || ch.sq_outstanding >= self.sq_depth
                {
                    break;
                }
                let range = out.range(plan, &plan.out, ce);
                let step = plan.step_base + out.step as u32;
                if in_done >= in_total {
                    self.step.step = step;
                }
                let bytes = range.len() * T::SIZE;
                T::copy_to_le(&buf[range], &mut self.scratch[..bytes]);
                let slot = (ch.sent % window) as usize;
                let off = ch.outbox_off + slot * self.cfg.chunk_bytes;
                let mem_off = self.mr.buffer_offset() + off;
                self.mr
                    .mem_mut()
                    .write_bytes(mem_off, &self.scratch[..bytes]);
                let sge = [Sge {
                    addr: self.mr.iova() + off as u64,
                    len: bytes as u32,
                    lkey: self.mr.lkey(),
                }];
                let wr = SendWr::new(
                    WR_DATA | ch.sent,
                    SendOp::RdmaWriteWithImm {
                        remote_addr: ch.remote_inbox + (slot * self.cfg.chunk_bytes) as u64,
                        rkey: ch.rkey,
                        imm: ch.sent as u32,
                    },
                    &sge,
                );
                if let Err(error) = ch.qp.post_send(&[wr]) {
                    return Err(Error::Post {
                        rank: self.rank,
                        peer: plan.next,
                        step: Step {
                            collective: self.step.collective,
                            step,
                        },
                        error,
                    });
                }
                ch.sent += 1;
                ch.sq_outstanding += 1;
                out.advance(plan, &plan.out, ce);
                out_posted += 1;
                moved = true;
            }
            moved |= self.progress()?;
            let done = out_posted == out_total && in_done == in_total && {
                let ch = self.channels[plan.next].as_ref().expect("a peer");
                out_total == 0 || ch.send_done == ch.sent
            };
            if done {
                return Ok(());
            }
            let now = self.clock.now_ns();
            if moved {
                last_progress = now;
                idle_rounds = 0;
            } else if now.saturating_sub(last_progress) > self.cfg.stall_timeout_ns {
                let peer = if in_done < in_total {
                    plan.prev
                } else {
                    plan.next
                };
                return Err(Error::Timeout {
                    rank: self.rank,
                    peer,
                    step: self.step,
                });
            } else {
                idle_rounds = idle_rounds.saturating_add(1);
                if let Some(idle) = self.cfg.idle {
                    idle(idle_rounds);
                }
            }
        }
    }

    /// Polls the CQ once (handling credits, arrivals and send completions) and returns
    /// credits that are due. Returns whether anything happened.
    fn progress(&mut self) -> Result<bool, Error> {
        let rank = self.rank;
        let step = self.step;
        let k = self
            .cq
            .poll(&mut self.wc)
            .map_err(|error| Error::Poll { rank, step, error })?;
        for i in 0..k {
            let c = self.wc[i];
            let Some(peer) = self
                .channels
                .iter()
                .position(|ch| ch.as_ref().is_some_and(|ch| ch.qp.qpn() == c.qp_num))
            else {
                return Err(Error::Protocol {
                    rank,
                    peer: usize::MAX,
                    step,
                    what: "a completion for a QP the communicator does not own",
                });
            };
            let ch = self.channels[peer].as_mut().expect("found");
            if !c.status.is_success() {
                return Err(Error::Completion {
                    rank,
                    peer,
                    step,
                    status: c.status,
                    opcode: c.opcode,
                    vendor_err: c.vendor_err,
                });
            }
            let protocol = |what| Error::Protocol {
                rank,
                peer,
                step,
                what,
            };
            if !c.opcode.is_recv() {
                ch.sq_outstanding -= 1;
                if c.wr_id & WR_DATA != 0 {
                    ch.send_done += 1;
                }
                continue;
            }
            let none: [Sge; 0] = [];
            ch.qp
                .post_recv(&[RecvWr {
                    wr_id: peer as u64,
                    sg_list: &none,
                }])
                .map_err(|error| Error::Post {
                    rank,
                    peer,
                    step,
                    error,
                })?;
            if !c.wc_flags.contains(WcFlags::WITH_IMM) {
                return Err(protocol("a message without an immediate"));
            }
            match c.opcode {
                WcOpcode::RecvRdmaWithImm => {
                    if c.imm_data != ch.arrived as u32 {
                        return Err(protocol("a chunk out of sequence"));
                    }
                    if ch.arrived - ch.consumed >= self.cfg.window as u64 {
                        return Err(protocol("a chunk beyond the credit window"));
                    }
                    let slot = (ch.arrived % self.cfg.window as u64) as usize;
                    ch.slot_len[slot] = c.byte_len;
                    ch.arrived += 1;
                }
                _ => {
                    // A credit: the peer's count of consumed chunks (mod 2^32).
                    let delta = c.imm_data.wrapping_sub(ch.credited as u32) as u64;
                    if ch.credited + delta > ch.sent {
                        return Err(protocol("a credit for chunks never sent"));
                    }
                    ch.credited += delta;
                }
            }
        }
        // Give back the slots consumed since the last credit, where the SQ has room.
        let mut sent_credit = false;
        for (peer, ch) in self.channels.iter_mut().enumerate() {
            let Some(ch) = ch else { continue };
            if ch.consumed == ch.credit_sent || ch.sq_outstanding >= self.sq_depth {
                continue;
            }
            let none: [Sge; 0] = [];
            let wr = SendWr::new(
                ch.consumed,
                SendOp::SendWithImm {
                    imm: ch.consumed as u32,
                },
                &none,
            );
            ch.qp.post_send(&[wr]).map_err(|error| Error::Post {
                rank,
                peer,
                step,
                error,
            })?;
            ch.sq_outstanding += 1;
            ch.credit_sent = ch.consumed;
            sent_credit = true;
        }
        Ok(k > 0 || sent_credit)
    }
}
