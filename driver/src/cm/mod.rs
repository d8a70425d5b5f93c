//! The InfiniBand communication manager (IBA volume 1, chapter 12), enough of it to connect
//! two RC QPs in band: REQ, REP and RTU on the port's QP1, with retries, a timeout on
//! every wait, REJ for a request nobody can take, and the peer's REJ as a typed error.
//! Linux's `ib_cm` speaks the same messages.
//!
//! A bare-metal program has no network stack through which to exchange QP numbers and
//! PSNs; with the CM it needs only where the peer's port is (its LID on InfiniBand, its
//! GID and MAC on RoCEv2: the [`Endpoint`] the fabric gives it, as an IP address would be
//! known) and a service ID both sides agree on. What else the application needs (an
//! rkey, an address) travels in the private data of REQ and REP.
//!
//! # How it is used
//!
//! A [`Cm`] owns the port's [`Gsi`] QP (QP1, which the HCA has once per port), its CQs
//! and a memory region of MAD slots; it allocates nothing after [`Cm::new`] and needs no
//! allocator. One connection is set up at a time per `Cm`, in a [`Connection`]:
//!
//! * passive side: [`Cm::listen`] on a service ID, then [`Cm::progress`] (or the
//!   blocking [`Cm::establish`]) with the RC QP to connect: a REQ for the service is
//!   answered by moving the QP (RESET or INIT) through INIT, RTR and RTS towards the
//!   requester and sending a REP; the RTU establishes the connection. A REQ for another
//!   service is refused with a REJ (invalid service ID), one for another transport than
//!   RC, or for a path MTU above [`CmConfig::path_mtu`], with the REJ that says so.
//! * active side: [`Cm::connect`] sends a REQ for the RC QP; on the REP the QP goes to RTR
//!   and RTS and the RTU is sent.
//!
//! Each side resends its last message when no answer came within
//! [`CmConfig::response_timeout_ns`], at most [`CmConfig::max_retries`] times, then fails
//! with [`CmError::Timeout`]; a REJ from the peer is [`CmError::Rejected`]. A duplicate REQ
//! is answered with the REP again, a duplicate REP (the RTU was lost) with the RTU again,
//! as long as the side keeps calling [`Cm::progress`] on its connection.
//!
//! # What it does not do (yet)
//!
//! An MRA from the peer (it needs longer to answer) pushes the wait back by its service
//! timeout; this side never sends one, nor DREQ/DREP, LAP/APR or SIDR; no alternate path;
//! one connection in flight per `Cm` (MADs for another are dropped, or a REQ refused);
//! P_Key index 0 only. On RoCEv2
//! the passive side learns the requester's GID from the REQ but not its MAC: it asks
//! [`CmConfig::mac_of`], whose default answers the broadcast address (the mock's fabric
//! and its UDP uplink route by IP; a real Ethernet network needs a neighbour table).
//!
//! The message layouts are in [`msg`].

pub mod msg;

use crate::addr::{AhAttr, Endpoint, Gid, Mac};
use crate::caps::LinkLayer;
use crate::error::{Error, PollError};
use crate::verbs::{
    BadWr, Cq, GSI_Q_KEY, Gsi, InitAttr, Mr, Pd, Qp, QpCaps, QpInitAttr, Rc, RecvWr, RtrAttr,
    RtsAttr, SendOp, SendWr, UdDest, WcOpcode, WcStatus, WorkCompletion,
};
use crate::{Hca, Platform};
use msg::{
    CmMsg, MAD_LEN, MadError, REP_PRIVATE_LEN, REQ_PRIVATE_LEN, Rej, RejReason, Rejected, Rep, Req,
    ReqPath, Rtu,
};
use uhca_fwif::consts::{AccessFlags, IbMtu, QpState};
use uhca_hal::dma::DmaMem;

/// Receive slots (MADs the CM can hold before it reads them).
const RECV_SLOTS: usize = 8;
/// Bytes of a receive slot: the 40-byte GRH area every datagram receive starts with, then
/// the MAD.
const RECV_STRIDE: usize = 512;
/// Bytes of the GRH area at the start of a datagram receive.
const GRH_LEN: usize = 40;
/// Send slots.
const SEND_SLOTS: usize = 4;
/// Where the send slots start in the MAD region.
const SEND_BASE: usize = RECV_SLOTS * RECV_STRIDE;
/// Bytes of the MAD region.
const REGION_LEN: usize = SEND_BASE + SEND_SLOTS * MAD_LEN;
/// The `wr_id` of a receive slot (send slots are their index).
const RECV_ID: u64 = 1 << 32;
/// The default P_Key.
const DEFAULT_PKEY: u16 = 0xffff;

/// How a [`Cm`] connects.
#[derive(Clone, Copy, Debug)]
pub struct CmConfig {
    /// The HCA port (from 1).
    pub port: u8,
    /// The source GID index (RoCEv2; 0 on InfiniBand).
    pub gid_index: u8,
    /// How long a side waits for the answer to each message before it sends it again.
    pub response_timeout_ns: u64,
    /// How many times a message is sent again before [`CmError::Timeout`] (at most 15:
    /// the REQ's `Max CM Retries` has 4 bits).
    pub max_retries: u8,
    /// The path MTU an active side asks for, and the largest a passive side takes (a REQ
    /// for more is refused with REJ reason 26, invalid path MTU: the REP cannot lower it).
    pub path_mtu: IbMtu,
    /// RDMA READs and atomics this side's QP answers at once.
    pub responder_resources: u8,
    /// RDMA READs and atomics this side's QP issues at once.
    pub initiator_depth: u8,
    /// The transport retry count asked for in the REQ (0..=7).
    pub retry_count: u8,
    /// The RNR retry count asked of the peer (0..=7, 7 = forever).
    pub rnr_retry: u8,
    /// The local ACK timeout code (5 bits: 4.096 µs × 2^value).
    pub ack_timeout: u8,
    /// The RNR NAK timer code of this side's QP.
    pub min_rnr_timer: u8,
    /// The remote access rights the RC QP gets in RESET → INIT.
    pub access: AccessFlags,
    /// The MAC behind a RoCE GID (the passive side's only way to the requester's MAC);
    /// `None` sends to the broadcast address.
    pub mac_of: fn(&Gid) -> Option<Mac>,
    /// Microseconds between two looks at the CQ in [`Cm::establish`].
    pub poll_us: u32,
}

fn no_mac(_: &Gid) -> Option<Mac> {
    None
}

impl Default for CmConfig {
    fn default() -> Self {
        CmConfig {
            port: 1,
            gid_index: 0,
            response_timeout_ns: 100_000_000,
            max_retries: 4,
            path_mtu: IbMtu::Mtu1024,
            responder_resources: 4,
            initiator_depth: 4,
            retry_count: 7,
            rnr_retry: 7,
            ack_timeout: 14,
            min_rnr_timer: 12,
            access: AccessFlags::LOCAL_WRITE
                .union(AccessFlags::REMOTE_WRITE)
                .union(AccessFlags::REMOTE_READ),
            mac_of: no_mac,
            poll_us: 10,
        }
    }
}

/// What a side was waiting for when it gave up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// A REQ for the service listened on.
    Req,
    /// The REP to this side's REQ.
    Rep,
    /// The RTU to this side's REP.
    Rtu,
}

/// Why a connection could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmError {
    /// A verbs call failed (creating the CM's objects, a QP transition).
    Verbs(Error),
    /// A MAD could not be posted.
    Post(BadWr),
    /// The CM's CQ held a completion that does not match what was posted.
    Poll(PollError),
    /// A MAD send or receive completed in error.
    Completion(WcStatus),
    /// No answer came in time: after `tries` sends of this side's message (or, for
    /// [`Waiting::Req`], within the time [`Cm::establish`] was given).
    Timeout {
        /// What was awaited.
        waiting_for: Waiting,
        /// How many times this side's message was sent.
        tries: u8,
    },
    /// The peer refused with a REJ.
    Rejected {
        /// The REJ's reason.
        reason: RejReason,
        /// Which message it rejected.
        message: Rejected,
    },
    /// The RC QP is in a state a connection cannot start from (RESET or INIT needed).
    QpState(QpState),
    /// More private data than the message carries.
    PrivateDataTooLong {
        /// Bytes given.
        given: usize,
        /// Bytes the message carries.
        max: usize,
    },
    /// [`Cm::progress`] on a connection that failed already.
    Failed,
}

impl core::fmt::Display for CmError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CmError::Verbs(e) => write!(f, "CM: {e}"),
            CmError::Post(e) => write!(f, "CM: posting a MAD: {e}"),
            CmError::Poll(e) => write!(f, "CM: the MAD CQ: {e}"),
            CmError::Completion(s) => write!(f, "CM: a MAD completed with {s:?}"),
            CmError::Timeout { waiting_for, tries } => {
                write!(f, "CM: no {waiting_for:?} after {tries} send(s)")
            }
            CmError::Rejected { reason, message } => write!(
                f,
                "CM: the peer rejected the {message:?} (REJ reason {})",
                reason.0
            ),
            CmError::QpState(s) => write!(f, "CM: the QP is in {s:?} (RESET or INIT needed)"),
            CmError::PrivateDataTooLong { given, max } => {
                write!(f, "CM: {given} bytes of private data (at most {max})")
            }
            CmError::Failed => write!(f, "CM: the connection failed already"),
        }
    }
}

impl core::error::Error for CmError {}

impl From<Error> for CmError {
    fn from(e: Error) -> Self {
        CmError::Verbs(e)
    }
}
impl From<BadWr> for CmError {
    fn from(e: BadWr) -> Self {
        CmError::Post(e)
    }
}
impl From<PollError> for CmError {
    fn from(e: PollError) -> Self {
        CmError::Poll(e)
    }
}

/// What a [`Cm`] counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CmStats {
    /// MADs sent (resends included).
    pub sent: u32,
    /// Of those, resends (after a timeout or for a duplicate).
    pub resent: u32,
    /// MADs received.
    pub received: u32,
    /// Received MADs dropped: not a CM message this module takes ([`MadError`]), or for
    /// no connection in flight.
    pub dropped: u32,
    /// REJs sent.
    pub rejects_sent: u32,
    /// MRAs taken (each pushed the deadline of this side's message back).
    pub mras: u32,
    /// The last MAD that could not be decoded, and why.
    pub last_bad: Option<MadError>,
}

/// Where a connection is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnState {
    /// Passive, waiting for a REQ.
    Listening,
    /// Active, the REQ sent, waiting for the REP.
    ReqSent,
    /// Passive, the REP sent (the QP in RTS), waiting for the RTU.
    RepSent,
    /// Both QPs in RTS.
    Established,
    /// Rejected or timed out.
    Failed,
}

/// One connection being set up (or set up) by a [`Cm`].
#[derive(Clone, Debug)]
pub struct Connection {
    state: ConnState,
    service_id: u64,
    local_comm_id: u32,
    remote_comm_id: u32,
    remote_ca_guid: u64,
    tid: u64,
    /// The path to the peer's QP1.
    peer_cm: Option<AhAttr>,
    /// The last message sent, for resends.
    last: [u8; MAD_LEN],
    deadline_ns: u64,
    tries: u8,
    local_qpn: u32,
    local_psn: u32,
    remote_qpn: u32,
    remote_psn: u32,
    path_mtu: IbMtu,
    /// The private data this side sends (REQ or REP), and its length.
    private_out: [u8; REP_PRIVATE_LEN],
    private_out_len: usize,
    /// The private data the peer sent (REQ or REP).
    private_in: [u8; REP_PRIVATE_LEN],
    private_in_len: usize,
}

impl Connection {
    fn new(state: ConnState, service_id: u64) -> Connection {
        Connection {
            state,
            service_id,
            local_comm_id: 0,
            remote_comm_id: 0,
            remote_ca_guid: 0,
            tid: 0,
            peer_cm: None,
            last: [0; MAD_LEN],
            deadline_ns: 0,
            tries: 0,
            local_qpn: 0,
            local_psn: 0,
            remote_qpn: 0,
            remote_psn: 0,
            path_mtu: IbMtu::Mtu256,
            private_out: [0; REP_PRIVATE_LEN],
            private_out_len: 0,
            private_in: [0; REP_PRIVATE_LEN],
            private_in_len: 0,
        }
    }

    /// Where the connection is.
    pub fn state(&self) -> ConnState {
        self.state
    }
    /// The service ID.
    pub fn service_id(&self) -> u64 {
        self.service_id
    }
    /// This side's communication ID (0 before the first message).
    pub fn local_comm_id(&self) -> u32 {
        self.local_comm_id
    }
    /// The peer's communication ID (0 until it is known).
    pub fn remote_comm_id(&self) -> u32 {
        self.remote_comm_id
    }
    /// The peer's CA GUID.
    pub fn remote_ca_guid(&self) -> u64 {
        self.remote_ca_guid
    }
    /// The peer's QP number (0 until it is known).
    pub fn remote_qpn(&self) -> u32 {
        self.remote_qpn
    }
    /// The first PSN of this side's QP, and of the peer's.
    pub fn psns(&self) -> (u32, u32) {
        (self.local_psn, self.remote_psn)
    }
    /// The connection's path MTU (once both sides spoke).
    pub fn path_mtu(&self) -> IbMtu {
        self.path_mtu
    }
    /// The private data the peer sent: the REQ's 92 bytes on the passive side, the REP's
    /// 196 on the active side; empty before.
    pub fn private_data(&self) -> &[u8] {
        &self.private_in[..self.private_in_len]
    }
    /// How many times this side sent its current message.
    pub fn tries(&self) -> u8 {
        self.tries
    }

    fn waiting(&self) -> Waiting {
        match self.state {
            ConnState::ReqSent => Waiting::Rep,
            ConnState::RepSent => Waiting::Rtu,
            _ => Waiting::Req,
        }
    }
}

/// A received MAD and where it came from.
struct Received {
    msg: CmMsg,
    tid: u64,
    slid: u16,
}

/// The communication manager of one port: its QP1, CQs and MAD slots (see the module
/// documentation).
pub struct Cm<P: Platform> {
    qp: Qp<P, Gsi>,
    send_cq: Cq<P>,
    recv_cq: Cq<P>,
    mr: Mr<P>,
    me: Endpoint,
    ca_guid: u64,
    cfg: CmConfig,
    next_comm_id: u32,
    next_send: usize,
    busy: u8,
    stats: CmStats,
}

impl<P: Platform> core::fmt::Debug for Cm<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Cm")
            .field("qp1", &self.qp.qpn())
            .field("endpoint", &self.me)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl<P: Platform> Cm<P> {
    /// Creates the port's QP1 in `pd` (RESET → INIT → RTR → RTS with the well-known
    /// Q_Key), a send and a receive CQ, and a memory region of 8 receive and 4 send MAD
    /// slots; posts the receives.
    ///
    /// # Errors
    ///
    /// [`CmError::Verbs`] from any of these (a second QP1 on the port is refused by the
    /// device); on Ethernet an empty GID entry at `cfg.gid_index`.
    pub fn new(hca: &mut Hca<P>, pd: &Pd<P>, cfg: CmConfig) -> Result<Cm<P>, CmError> {
        let me = hca.endpoint(cfg.port, cfg.gid_index)?;
        let ca_guid = hca.query_port(cfg.port)?.node_guid;
        let send_cq = hca.create_cq(2 * SEND_SLOTS as u32)?;
        let recv_cq = hca.create_cq(2 * RECV_SLOTS as u32)?;
        let cap = QpCaps {
            max_send_wr: SEND_SLOTS as u32,
            max_recv_wr: RECV_SLOTS as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let attr = QpInitAttr {
            send_cq: &send_cq,
            recv_cq: &recv_cq,
            srq: None,
            cap,
        };
        let mut qp = hca.create_qp::<Gsi>(pd, &attr)?;
        let init = InitAttr {
            port: cfg.port,
            qkey: GSI_Q_KEY,
            ..InitAttr::default()
        };
        qp.connect(hca, &init, 0)?;
        let mr = hca.alloc_mr(pd, REGION_LEN, AccessFlags::LOCAL_WRITE)?;
        let seed = hca.platform().now_ns() as u32;
        let mut cm = Cm {
            qp,
            send_cq,
            recv_cq,
            mr,
            me,
            ca_guid,
            cfg,
            next_comm_id: seed ^ (me.lid as u32) << 16 ^ 0x5eed,
            next_send: 0,
            busy: 0,
            stats: CmStats::default(),
        };
        for slot in 0..RECV_SLOTS {
            cm.post_recv(slot)?;
        }
        Ok(cm)
    }

    /// The port's address as this CM sends it.
    pub fn endpoint(&self) -> Endpoint {
        self.me
    }

    /// The firmware QPN of the CM's QP1 (on the wire it is QP 1).
    pub fn qp1_qpn(&self) -> u32 {
        self.qp.qpn()
    }

    /// What the CM counted.
    pub fn stats(&self) -> CmStats {
        self.stats
    }

    /// A passive connection: waits for a REQ for `service_id`, answered with a REP
    /// carrying `private_data` (at most 196 bytes). Nothing is sent yet.
    ///
    /// # Errors
    ///
    /// [`CmError::PrivateDataTooLong`].
    pub fn listen(&self, service_id: u64, private_data: &[u8]) -> Result<Connection, CmError> {
        let mut c = Connection::new(ConnState::Listening, service_id);
        c.private_out_len = set_private(&mut c.private_out, private_data, REP_PRIVATE_LEN)?;
        Ok(c)
    }

    /// An active connection of `qp` (in RESET or INIT; RESET is moved to INIT with
    /// [`CmConfig::access`]) to the service `service_id` of the port at `peer`: sends the
    /// REQ with `private_data` (at most 92 bytes).
    ///
    /// # Errors
    ///
    /// [`CmError::QpState`], [`CmError::PrivateDataTooLong`], the transition's or the
    /// send's error.
    pub fn connect(
        &mut self,
        hca: &mut Hca<P>,
        qp: &mut Qp<P, Rc>,
        peer: &Endpoint,
        service_id: u64,
        private_data: &[u8],
    ) -> Result<Connection, CmError> {
        let mut c = Connection::new(ConnState::ReqSent, service_id);
        let n = set_private(&mut c.private_out, private_data, REQ_PRIVATE_LEN)?;
        c.private_out_len = n;
        self.to_init(hca, qp)?;
        c.local_comm_id = self.comm_id();
        c.tid = u64::from(c.local_comm_id) << 32 | 1;
        c.local_qpn = qp.qpn();
        c.local_psn = psn_of(c.local_comm_id, qp.qpn());
        c.peer_cm = Some(self.me.path_to(peer, 1, 1));
        let ib = self.me.link_layer == LinkLayer::InfiniBand;
        let mut private = [0u8; REQ_PRIVATE_LEN];
        private.copy_from_slice(&c.private_out[..REQ_PRIVATE_LEN]);
        let timeout = timeout_code(self.cfg.response_timeout_ns);
        let req = Req {
            local_comm_id: c.local_comm_id,
            service_id,
            local_ca_guid: self.ca_guid,
            local_qkey: 0,
            local_qpn: qp.qpn(),
            responder_resources: self.cfg.responder_resources,
            local_eecn: 0,
            initiator_depth: self.cfg.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: timeout,
            transport_service_type: 0,
            end_to_end_flow_control: true,
            starting_psn: c.local_psn,
            local_cm_response_timeout: timeout,
            retry_count: self.cfg.retry_count.min(7),
            partition_key: DEFAULT_PKEY,
            path_mtu: self.cfg.path_mtu.raw(),
            rdc_exists: false,
            rnr_retry_count: self.cfg.rnr_retry.min(7),
            max_cm_retries: self.cfg.max_retries.min(15),
            srq: false,
            extended_transport_type: 0,
            primary: ReqPath {
                // RoCE has no LIDs: the permissive LID, as Linux's ib_cm writes for a
                // routed path.
                local_lid: if ib { self.me.lid } else { 0xffff },
                remote_lid: if ib { peer.lid } else { 0xffff },
                local_gid: self.me.gid,
                remote_gid: peer.gid,
                flow_label: 0,
                packet_rate: 0,
                traffic_class: 0,
                hop_limit: if ib { 0 } else { 64 },
                sl: 0,
                subnet_local: ib,
                local_ack_timeout: self.cfg.ack_timeout.min(31),
            },
            alternate: ReqPath::default(),
            private_data: private,
        };
        req.encode(c.tid, &mut c.last);
        self.send_last(hca, &mut c)?;
        Ok(c)
    }

    /// Reads what arrived and moves `conn` on with `qp` (the RC QP it connects); resends
    /// this side's message when its answer is late. Returns whether the connection is
    /// established. Call it again on an established connection to answer a duplicate REP
    /// (the RTU was lost) for as long as the peer may resend.
    ///
    /// # Errors
    ///
    /// [`CmError::Rejected`] for the peer's REJ, [`CmError::Timeout`] once the retries are
    /// spent (the connection is then [`ConnState::Failed`] and further calls return
    /// [`CmError::Failed`]); a transition's or a MAD's error.
    pub fn progress(
        &mut self,
        hca: &mut Hca<P>,
        conn: &mut Connection,
        qp: &mut Qp<P, Rc>,
    ) -> Result<bool, CmError> {
        if conn.state == ConnState::Failed {
            return Err(CmError::Failed);
        }
        self.reap_sends()?;
        while let Some(r) = self.recv_one()? {
            if let Err(e) = self.handle(hca, conn, qp, r) {
                if !matches!(e, CmError::Post(_) | CmError::Poll(_)) {
                    conn.state = ConnState::Failed;
                }
                return Err(e);
            }
        }
        if conn.state == ConnState::Established {
            return Ok(true);
        }
        if matches!(conn.state, ConnState::ReqSent | ConnState::RepSent)
            && hca.platform().now_ns() >= conn.deadline_ns
        {
            if conn.tries > self.cfg.max_retries {
                let waiting_for = conn.waiting();
                conn.state = ConnState::Failed;
                return Err(CmError::Timeout {
                    waiting_for,
                    tries: conn.tries,
                });
            }
            self.stats.resent += 1;
            self.send_last(hca, conn)?;
        }
        Ok(false)
    }

    /// [`Cm::progress`] until the connection is established, at most `timeout_ns`
    /// (resends included: give it more than `(max_retries + 1) × response_timeout_ns` for
    /// the retries to be spent first).
    ///
    /// # Errors
    ///
    /// As [`Cm::progress`]; [`CmError::Timeout`] when `timeout_ns` passed first.
    pub fn establish(
        &mut self,
        hca: &mut Hca<P>,
        conn: &mut Connection,
        qp: &mut Qp<P, Rc>,
        timeout_ns: u64,
    ) -> Result<(), CmError> {
        let end = hca.platform().now_ns().saturating_add(timeout_ns);
        loop {
            if self.progress(hca, conn, qp)? {
                return Ok(());
            }
            if hca.platform().now_ns() >= end {
                return Err(CmError::Timeout {
                    waiting_for: conn.waiting(),
                    tries: conn.tries,
                });
            }
            hca.platform().delay_us(self.cfg.poll_us.max(1));
        }
    }

    fn handle(
        &mut self,
        hca: &mut Hca<P>,
        c: &mut Connection,
        qp: &mut Qp<P, Rc>,
        r: Received,
    ) -> Result<(), CmError> {
        match r.msg {
            CmMsg::Req(req) => self.on_req(hca, c, qp, &req, r.tid, r.slid),
            CmMsg::Rep(rep) => {
                let ours = rep.remote_comm_id == c.local_comm_id && c.local_comm_id != 0;
                match c.state {
                    ConnState::ReqSent if ours => self.on_rep(hca, c, qp, &rep),
                    ConnState::Established if ours && c.remote_comm_id == rep.local_comm_id => {
                        // Our RTU was lost: the peer sent its REP again.
                        self.stats.resent += 1;
                        self.send_last(hca, c)
                    }
                    _ => {
                        self.stats.dropped += 1;
                        Ok(())
                    }
                }
            }
            CmMsg::Rtu(rtu) => {
                if c.state == ConnState::RepSent
                    && rtu.remote_comm_id == c.local_comm_id
                    && rtu.local_comm_id == c.remote_comm_id
                {
                    c.state = ConnState::Established;
                } else {
                    self.stats.dropped += 1;
                }
                Ok(())
            }
            CmMsg::Mra(mra) => {
                // The peer needs longer: wait its service timeout on top of ours, without
                // counting a try.
                let ours = mra.remote_comm_id == c.local_comm_id && c.local_comm_id != 0;
                let pending = matches!(
                    (c.state, mra.message_mraed),
                    (ConnState::ReqSent, Rejected::Req) | (ConnState::RepSent, Rejected::Rep)
                );
                if ours && pending {
                    let extra = 4096u64 << mra.service_timeout.min(31);
                    c.deadline_ns = hca
                        .platform()
                        .now_ns()
                        .saturating_add(extra)
                        .saturating_add(self.cfg.response_timeout_ns);
                    self.stats.mras += 1;
                } else {
                    self.stats.dropped += 1;
                }
                Ok(())
            }
            CmMsg::Rej(rej) => {
                let ours = rej.remote_comm_id == c.local_comm_id && c.local_comm_id != 0;
                if ours && matches!(c.state, ConnState::ReqSent | ConnState::RepSent) {
                    return Err(CmError::Rejected {
                        reason: rej.reason,
                        message: rej.message_rejected,
                    });
                }
                self.stats.dropped += 1;
                Ok(())
            }
        }
    }

    /// The path back to a REQ's sender: its QP1 and its QP.
    fn paths_of(&self, req: &Req, slid: u16, remote_qpn: u32, local_qpn: u32) -> (AhAttr, AhAttr) {
        match self.me.link_layer {
            LinkLayer::InfiniBand => {
                let lid = match req.primary.local_lid {
                    0 | 0xffff => slid,
                    l => l,
                };
                (AhAttr::ib(slid.max(1)), AhAttr::ib(lid))
            }
            LinkLayer::Ethernet => {
                let gid = req.primary.local_gid;
                let mac = (self.cfg.mac_of)(&gid).unwrap_or(Mac([0xff; 6]));
                let g = self.me.gid_index;
                (
                    AhAttr::roce_v2(g, gid, mac, 1, 1),
                    AhAttr::roce_v2(g, gid, mac, local_qpn, remote_qpn),
                )
            }
        }
    }

    fn on_req(
        &mut self,
        hca: &mut Hca<P>,
        c: &mut Connection,
        qp: &mut Qp<P, Rc>,
        req: &Req,
        tid: u64,
        slid: u16,
    ) -> Result<(), CmError> {
        let (to_cm, to_qp) = self.paths_of(req, slid, req.local_qpn, qp.qpn());
        if c.state == ConnState::RepSent
            && req.local_comm_id == c.remote_comm_id
            && req.local_ca_guid == c.remote_ca_guid
        {
            // Our REP was lost: the requester sent its REQ again.
            self.stats.resent += 1;
            return self.send_last(hca, c);
        }
        if c.state == ConnState::Established
            && req.local_comm_id == c.remote_comm_id
            && req.local_ca_guid == c.remote_ca_guid
        {
            // A late duplicate of the REQ this connection answered.
            self.stats.dropped += 1;
            return Ok(());
        }
        // The requester chose the path MTU (a REP has none): take it or refuse it.
        let mtu_ok = IbMtu::from_raw(req.path_mtu).bytes().is_some()
            && req.path_mtu <= self.cfg.path_mtu.raw();
        let reason = if c.state != ConnState::Listening || req.service_id != c.service_id {
            Some(RejReason::INVALID_SERVICE_ID)
        } else if req.transport_service_type != 0 || req.extended_transport_type != 0 {
            Some(RejReason::INVALID_TRANSPORT_TYPE)
        } else if !mtu_ok {
            Some(RejReason::INVALID_PATH_MTU)
        } else {
            None
        };
        if let Some(reason) = reason {
            let rej = Rej::new(0, req.local_comm_id, Rejected::Req, reason);
            let mut mad = [0u8; MAD_LEN];
            rej.encode(tid, &mut mad);
            self.stats.rejects_sent += 1;
            return self.send(hca, &to_cm, &mad);
        }
        self.to_init(hca, qp)?;
        let mtu = IbMtu::from_raw(req.path_mtu);
        // What each side's QP may have outstanding: no more than the other answers.
        let responder = req.initiator_depth.min(self.cfg.responder_resources);
        let initiator = req.responder_resources.min(self.cfg.initiator_depth);
        c.local_comm_id = self.comm_id();
        c.remote_comm_id = req.local_comm_id;
        c.remote_ca_guid = req.local_ca_guid;
        c.tid = tid;
        c.peer_cm = Some(to_cm);
        c.local_qpn = qp.qpn();
        c.local_psn = psn_of(c.local_comm_id, qp.qpn());
        c.remote_qpn = req.local_qpn;
        c.remote_psn = req.starting_psn;
        c.path_mtu = mtu;
        c.private_in[..REQ_PRIVATE_LEN].copy_from_slice(&req.private_data);
        c.private_in_len = REQ_PRIVATE_LEN;
        let moved = qp
            .to_rtr(
                hca,
                RtrAttr {
                    path_mtu: mtu,
                    dest_qpn: req.local_qpn,
                    rq_psn: req.starting_psn,
                    max_dest_rd_atomic: responder.max(1),
                    min_rnr_timer: self.cfg.min_rnr_timer,
                    ah: to_qp,
                },
            )
            .and_then(|()| {
                qp.to_rts(
                    hca,
                    RtsAttr {
                        sq_psn: c.local_psn,
                        timeout: req.primary.local_ack_timeout.max(self.cfg.ack_timeout),
                        retry_cnt: req.retry_count,
                        rnr_retry: req.rnr_retry_count,
                        max_rd_atomic: initiator.max(1),
                    },
                )
            });
        if let Err(e) = moved {
            let rej = Rej::new(
                c.local_comm_id,
                req.local_comm_id,
                Rejected::Req,
                RejReason::NO_RESOURCES,
            );
            let mut mad = [0u8; MAD_LEN];
            rej.encode(tid, &mut mad);
            self.stats.rejects_sent += 1;
            let _ = self.send(hca, &to_cm, &mad);
            return Err(e.into());
        }
        let rep = Rep {
            local_comm_id: c.local_comm_id,
            remote_comm_id: req.local_comm_id,
            local_qkey: 0,
            local_qpn: qp.qpn(),
            local_eecn: 0,
            starting_psn: c.local_psn,
            responder_resources: responder,
            initiator_depth: initiator,
            target_ack_delay: 0,
            failover_accepted: 1,
            end_to_end_flow_control: true,
            rnr_retry_count: self.cfg.rnr_retry.min(7),
            srq: false,
            local_ca_guid: self.ca_guid,
            private_data: c.private_out,
        };
        rep.encode(tid, &mut c.last);
        c.state = ConnState::RepSent;
        c.tries = 0;
        self.send_last(hca, c)
    }

    fn on_rep(
        &mut self,
        hca: &mut Hca<P>,
        c: &mut Connection,
        qp: &mut Qp<P, Rc>,
        rep: &Rep,
    ) -> Result<(), CmError> {
        c.remote_comm_id = rep.local_comm_id;
        c.remote_ca_guid = rep.local_ca_guid;
        c.remote_qpn = rep.local_qpn;
        c.remote_psn = rep.starting_psn;
        c.path_mtu = self.cfg.path_mtu;
        c.private_in = rep.private_data;
        c.private_in_len = REP_PRIVATE_LEN;
        // The QP's path is the one to the peer's port (on RoCE with the UDP source port
        // of this QP pair's flow).
        let ah = match c.peer_cm.ok_or(CmError::Failed)? {
            AhAttr::RoceV2 {
                sgid_index,
                dgid,
                dmac,
                ..
            } => AhAttr::roce_v2(sgid_index, dgid, dmac, qp.qpn(), rep.local_qpn),
            a => a,
        };
        qp.to_rtr(
            hca,
            RtrAttr {
                path_mtu: c.path_mtu,
                dest_qpn: rep.local_qpn,
                rq_psn: rep.starting_psn,
                max_dest_rd_atomic: self.cfg.responder_resources.max(1),
                min_rnr_timer: self.cfg.min_rnr_timer,
                ah,
            },
        )?;
        qp.to_rts(
            hca,
            RtsAttr {
                sq_psn: c.local_psn,
                timeout: self.cfg.ack_timeout,
                retry_cnt: self.cfg.retry_count.min(7),
                rnr_retry: rep.rnr_retry_count,
                max_rd_atomic: rep.responder_resources.min(self.cfg.initiator_depth).max(1),
            },
        )?;
        let rtu = Rtu {
            local_comm_id: c.local_comm_id,
            remote_comm_id: rep.local_comm_id,
            private_data: [0; msg::RTU_PRIVATE_LEN],
        };
        rtu.encode(c.tid, &mut c.last);
        c.state = ConnState::Established;
        self.send_last(hca, c)
    }

    /// RESET → INIT with the configured rights; INIT stays; any other state is refused.
    fn to_init(&self, hca: &mut Hca<P>, qp: &mut Qp<P, Rc>) -> Result<(), CmError> {
        match qp.state() {
            QpState::Rst => {
                let attr = InitAttr {
                    port: self.cfg.port,
                    access: self.cfg.access,
                    ..InitAttr::default()
                };
                Ok(qp.to_init(hca, attr)?)
            }
            QpState::Init => Ok(()),
            s => Err(CmError::QpState(s)),
        }
    }

    fn comm_id(&mut self) -> u32 {
        // Never 0: a REJ's "no communication ID".
        self.next_comm_id = self.next_comm_id.wrapping_add(0x0001_0001) | 1;
        self.next_comm_id
    }

    /// Sends `c.last` to the peer's CM and arms the answer's deadline.
    fn send_last(&mut self, hca: &mut Hca<P>, c: &mut Connection) -> Result<(), CmError> {
        let to = c.peer_cm.ok_or(CmError::Failed)?;
        let mad = c.last;
        self.send(hca, &to, &mad)?;
        c.tries = c.tries.saturating_add(1);
        c.deadline_ns = hca
            .platform()
            .now_ns()
            .saturating_add(self.cfg.response_timeout_ns);
        Ok(())
    }

    /// Sends one MAD to QP 1 at `to`.
    fn send(&mut self, hca: &mut Hca<P>, to: &AhAttr, mad: &[u8; MAD_LEN]) -> Result<(), CmError> {
        self.reap_sends()?;
        let slot = self.next_send;
        if self.busy & (1 << slot) != 0 {
            // Every slot still in flight: the oldest send never completed.
            return Err(CmError::Completion(WcStatus::RetryExceeded));
        }
        let ah = hca.create_ah(self.cfg.port, *to)?;
        let off = SEND_BASE + slot * MAD_LEN;
        self.mr.mem_mut().write_bytes(off, mad);
        let sge = [self.mr.sge(off, MAD_LEN)?];
        let wr = SendWr::new(slot as u64, SendOp::Send, &sge).with_ud(UdDest {
            ah: &ah,
            remote_qpn: 1,
            remote_qkey: GSI_Q_KEY,
        });
        self.qp.post_send(&[wr])?;
        self.busy |= 1 << slot;
        self.next_send = (slot + 1) % SEND_SLOTS;
        self.stats.sent += 1;
        Ok(())
    }

    /// Frees the send slots whose sends completed.
    fn reap_sends(&mut self) -> Result<(), CmError> {
        let mut wc = [WorkCompletion::default(); SEND_SLOTS];
        let n = self.send_cq.poll(&mut wc)?;
        for w in &wc[..n] {
            self.busy &= !(1 << (w.wr_id as usize % SEND_SLOTS));
            if w.status != WcStatus::Success {
                return Err(CmError::Completion(w.status));
            }
        }
        Ok(())
    }

    fn post_recv(&mut self, slot: usize) -> Result<(), CmError> {
        let sge = [self.mr.sge(slot * RECV_STRIDE, GRH_LEN + MAD_LEN)?];
        self.qp
            .post_recv(&[RecvWr::new(RECV_ID | slot as u64, &sge)])?;
        Ok(())
    }

    /// The next received CM message, if any (MADs that are not are counted and dropped).
    fn recv_one(&mut self) -> Result<Option<Received>, CmError> {
        loop {
            let mut wc = [WorkCompletion::default()];
            if self.recv_cq.poll(&mut wc)? == 0 {
                return Ok(None);
            }
            let w = wc[0];
            let slot = (w.wr_id & 0xff) as usize % RECV_SLOTS;
            if w.status != WcStatus::Success {
                return Err(CmError::Completion(w.status));
            }
            let mut mad = [0u8; MAD_LEN];
            let len = (w.byte_len as usize).saturating_sub(GRH_LEN).min(MAD_LEN);
            self.mr
                .mem()
                .read_bytes(slot * RECV_STRIDE + GRH_LEN, &mut mad[..len]);
            self.post_recv(slot)?;
            self.stats.received += 1;
            debug_assert_eq!(w.opcode, WcOpcode::Recv);
            match msg::decode(&mad[..len]) {
                Ok((h, msg)) => {
                    return Ok(Some(Received {
                        msg,
                        tid: h.transaction_id,
                        slid: w.slid,
                    }));
                }
                Err(e) => {
                    self.stats.dropped += 1;
                    self.stats.last_bad = Some(e);
                }
            }
        }
    }
}

/// Copies `d` into `out`; at most `max` bytes.
fn set_private(out: &mut [u8; REP_PRIVATE_LEN], d: &[u8], max: usize) -> Result<usize, CmError> {
    if d.len() > max {
        return Err(CmError::PrivateDataTooLong {
            given: d.len(),
            max,
        });
    }
    out[..d.len()].copy_from_slice(d);
    Ok(d.len())
}

/// A first PSN from the communication ID and the QPN (24 bits).
fn psn_of(comm_id: u32, qpn: u32) -> u32 {
    (comm_id.rotate_left(7) ^ qpn.wrapping_mul(0x9e37)) & 0xff_ffff
}

/// The 5-bit CM response timeout code for `ns` (4.096 µs × 2^code, rounded up).
fn timeout_code(ns: u64) -> u8 {
    let mut code = 0u8;
    while code < 31 && 4096u64 << code < ns {
        code += 1;
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeout_codes_round_up_to_the_spec_s_powers_of_two() {
        assert_eq!(timeout_code(0), 0);
        assert_eq!(timeout_code(4096), 0);
        assert_eq!(timeout_code(4097), 1);
        assert_eq!(timeout_code(100_000_000), 15); // 4.096 µs × 2^15 ≈ 134 ms
        assert_eq!(timeout_code(u64::MAX), 31);
    }

    #[test]
    fn first_psns_are_24_bits() {
        assert!(psn_of(u32::MAX, 0xff_ffff) <= 0xff_ffff);
        assert_ne!(psn_of(1, 0x100), psn_of(3, 0x100));
    }
}
