//! The communication manager's messages on the wire: the MAD common header (IBA volume 1,
//! 13.4.2) and the REQ, REP, RTU and REJ attributes (IBA 12.6.5, 12.6.8, 12.6.9, 12.6.7).
//!
//! A MAD is 256 bytes: the 24-byte common header, then the 232 bytes of the attribute. The
//! offsets below are the spec's tables', counted from the attribute's first byte (byte 24
//! of the MAD); bit fields are numbered from the most significant bit of their byte, as
//! the spec draws them, and every multi-byte field is big-endian. Decoding checks the
//! header and the fields whose values the CM relies on; it never panics on any 256 bytes.

use crate::addr::Gid;

/// Bytes of a MAD.
pub const MAD_LEN: usize = 256;
/// Bytes of the MAD common header; the attribute follows.
pub const MAD_HDR_LEN: usize = 24;
/// `BaseVersion` of every MAD this module speaks.
pub const BASE_VERSION: u8 = 1;
/// `MgmtClass` of the communication manager.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// `ClassVersion` of the communication manager (IBA 1.2 and later).
pub const CM_CLASS_VERSION: u8 = 2;
/// The `Send` method: every CM message is one (the CM has no request/response MADs).
pub const METHOD_SEND: u8 = 0x03;
/// Bytes of a REQ's private data.
pub const REQ_PRIVATE_LEN: usize = 92;
/// Bytes of a REP's private data.
pub const REP_PRIVATE_LEN: usize = 196;
/// Bytes of an RTU's private data.
pub const RTU_PRIVATE_LEN: usize = 224;
/// Bytes of a REJ's private data.
pub const REJ_PRIVATE_LEN: usize = 148;
/// Bytes of a REJ's additional rejection information.
pub const REJ_ARI_LEN: usize = 72;

/// The CM's attribute IDs (IBA table 104) that this module knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum AttrId {
    /// ConnectRequest (REQ).
    ConnectRequest = 0x0010,
    /// MsgRcptAck (MRA).
    MsgRcptAck = 0x0011,
    /// ConnectReject (REJ).
    ConnectReject = 0x0012,
    /// ConnectReply (REP).
    ConnectReply = 0x0013,
    /// ReadyToUse (RTU).
    ReadyToUse = 0x0014,
    /// DisconnectRequest (DREQ).
    DisconnectRequest = 0x0015,
    /// DisconnectReply (DREP).
    DisconnectReply = 0x0016,
}

impl AttrId {
    /// The attribute of a raw ID, if the module knows it.
    pub fn from_raw(v: u16) -> Option<AttrId> {
        Some(match v {
            0x0010 => AttrId::ConnectRequest,
            0x0011 => AttrId::MsgRcptAck,
            0x0012 => AttrId::ConnectReject,
            0x0013 => AttrId::ConnectReply,
            0x0014 => AttrId::ReadyToUse,
            0x0015 => AttrId::DisconnectRequest,
            0x0016 => AttrId::DisconnectReply,
            _ => return None,
        })
    }
}

/// Why 256 bytes are not a CM message this module takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MadError {
    /// Fewer than 256 bytes.
    Short(usize),
    /// `BaseVersion` is not 1.
    BaseVersion(u8),
    /// `MgmtClass` is not the CM's.
    Class(u8),
    /// `ClassVersion` is not 2.
    ClassVersion(u8),
    /// The method is not `Send`.
    Method(u8),
    /// An attribute ID the CM does not define or this module does not take.
    Attribute(u16),
}

impl core::fmt::Display for MadError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            MadError::Short(n) => write!(f, "a MAD of {n} bytes (256 expected)"),
            MadError::BaseVersion(v) => write!(f, "MAD base version {v} (1 expected)"),
            MadError::Class(c) => write!(f, "management class {c:#04x} (the CM's is 0x07)"),
            MadError::ClassVersion(v) => write!(f, "CM class version {v} (2 expected)"),
            MadError::Method(m) => write!(f, "MAD method {m:#04x} (Send, 0x03, expected)"),
            MadError::Attribute(a) => write!(f, "CM attribute {a:#06x} not taken here"),
        }
    }
}

impl core::error::Error for MadError {}

/// The MAD common header (IBA 13.4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MadHeader {
    /// `BaseVersion`.
    pub base_version: u8,
    /// `MgmtClass`.
    pub mgmt_class: u8,
    /// `ClassVersion`.
    pub class_version: u8,
    /// `R` (bit 7) and `Method`.
    pub method: u8,
    /// `Status`.
    pub status: u16,
    /// `ClassSpecific`.
    pub class_specific: u16,
    /// `TransactionID`.
    pub transaction_id: u64,
    /// `AttributeID`.
    pub attr_id: u16,
    /// `AttributeModifier`.
    pub attr_mod: u32,
}

impl MadHeader {
    /// A CM `Send` header for attribute `attr` in transaction `tid`.
    pub const fn cm(attr: AttrId, tid: u64) -> MadHeader {
        MadHeader {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            transaction_id: tid,
            attr_id: attr as u16,
            attr_mod: 0,
        }
    }

    /// Writes the header into the first 24 bytes of `mad`.
    pub fn write(&self, mad: &mut [u8; MAD_LEN]) {
        mad[0] = self.base_version;
        mad[1] = self.mgmt_class;
        mad[2] = self.class_version;
        mad[3] = self.method;
        mad[4..6].copy_from_slice(&self.status.to_be_bytes());
        mad[6..8].copy_from_slice(&self.class_specific.to_be_bytes());
        mad[8..16].copy_from_slice(&self.transaction_id.to_be_bytes());
        mad[16..18].copy_from_slice(&self.attr_id.to_be_bytes());
        mad[18..20].fill(0);
        mad[20..24].copy_from_slice(&self.attr_mod.to_be_bytes());
    }

    /// Reads the header of `mad`, whatever it holds.
    pub fn read(mad: &[u8; MAD_LEN]) -> MadHeader {
        let b = Bits(mad);
        MadHeader {
            base_version: mad[0],
            mgmt_class: mad[1],
            class_version: mad[2],
            method: mad[3],
            status: b.u16_at(4),
            class_specific: b.u16_at(6),
            transaction_id: b.u64_at(8),
            attr_id: b.u16_at(16),
            attr_mod: b.u32_at(20),
        }
    }

    /// Checks that this is a CM `Send` MAD of a known attribute and returns the attribute.
    ///
    /// # Errors
    ///
    /// The first header field that is not what the CM sends.
    pub fn check_cm(&self) -> Result<AttrId, MadError> {
        if self.base_version != BASE_VERSION {
            return Err(MadError::BaseVersion(self.base_version));
        }
        if self.mgmt_class != MGMT_CLASS_CM {
            return Err(MadError::Class(self.mgmt_class));
        }
        if self.class_version != CM_CLASS_VERSION {
            return Err(MadError::ClassVersion(self.class_version));
        }
        if self.method != METHOD_SEND {
            return Err(MadError::Method(self.method));
        }
        AttrId::from_raw(self.attr_id).ok_or(MadError::Attribute(self.attr_id))
    }
}

/// Reads bit fields of a MAD at attribute offsets (bit 0 the most significant bit of the
/// byte, fields of up to 32 bits that may cross byte boundaries).
struct Bits<'a>(&'a [u8; MAD_LEN]);

impl Bits<'_> {
    fn u16_at(&self, off: usize) -> u16 {
        u16::from_be_bytes([self.0[off], self.0[off + 1]])
    }
    fn u32_at(&self, off: usize) -> u32 {
        let mut b = [0; 4];
        b.copy_from_slice(&self.0[off..off + 4]);
        u32::from_be_bytes(b)
    }
    fn u64_at(&self, off: usize) -> u64 {
        let mut b = [0; 8];
        b.copy_from_slice(&self.0[off..off + 8]);
        u64::from_be_bytes(b)
    }
    /// The `width`-bit field of the attribute starting `bit` bits into its byte `byte`.
    fn get(&self, byte: usize, bit: u32, width: u32) -> u32 {
        let at = MAD_HDR_LEN + byte;
        let mut w = [0u8; 8];
        let n = (MAD_LEN - at).min(8);
        w[..n].copy_from_slice(&self.0[at..at + n]);
        let v = u64::from_be_bytes(w);
        ((v >> (64 - bit - width)) & ((1u64 << width) - 1)) as u32
    }
    fn gid(&self, byte: usize) -> Gid {
        let mut g = [0u8; 16];
        g.copy_from_slice(&self.0[MAD_HDR_LEN + byte..MAD_HDR_LEN + byte + 16]);
        Gid(g)
    }
    fn bytes<const N: usize>(&self, byte: usize) -> [u8; N] {
        let mut d = [0u8; N];
        d.copy_from_slice(&self.0[MAD_HDR_LEN + byte..MAD_HDR_LEN + byte + N]);
        d
    }
    fn a64(&self, byte: usize) -> u64 {
        self.u64_at(MAD_HDR_LEN + byte)
    }
}

/// Writes bit fields of a MAD at attribute offsets (as [`Bits`] reads them).
struct BitsMut<'a>(&'a mut [u8; MAD_LEN]);

impl BitsMut<'_> {
    /// Sets the `width`-bit field starting `bit` bits into attribute byte `byte` to the
    /// low bits of `v` (higher bits of `v` are dropped).
    fn set(&mut self, byte: usize, bit: u32, width: u32, v: u32) {
        let at = MAD_HDR_LEN + byte;
        let n = (MAD_LEN - at).min(8);
        let mut w = [0u8; 8];
        w[..n].copy_from_slice(&self.0[at..at + n]);
        let mut x = u64::from_be_bytes(w);
        let shift = 64 - bit - width;
        let mask = ((1u64 << width) - 1) << shift;
        x = (x & !mask) | ((u64::from(v) << shift) & mask);
        self.0[at..at + n].copy_from_slice(&x.to_be_bytes()[..n]);
    }
    fn set64(&mut self, byte: usize, v: u64) {
        let at = MAD_HDR_LEN + byte;
        self.0[at..at + 8].copy_from_slice(&v.to_be_bytes());
    }
    fn put(&mut self, byte: usize, d: &[u8]) {
        let at = MAD_HDR_LEN + byte;
        self.0[at..at + d.len()].copy_from_slice(d);
    }
}

/// One path of a REQ (primary at attribute byte 52, alternate at 96; IBA table 106).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReqPath {
    /// `Local Port LID` (the sender's; 0xFFFF, permissive, on RoCE).
    pub local_lid: u16,
    /// `Remote Port LID`.
    pub remote_lid: u16,
    /// `Local Port GID`.
    pub local_gid: Gid,
    /// `Remote Port GID`.
    pub remote_gid: Gid,
    /// `Flow Label` (20 bits).
    pub flow_label: u32,
    /// `PacketRate` (6 bits, IBA's rate code; 2 = 2.5 Gb/s).
    pub packet_rate: u8,
    /// `Traffic Class`.
    pub traffic_class: u8,
    /// `Hop Limit`.
    pub hop_limit: u8,
    /// `SL` (4 bits).
    pub sl: u8,
    /// `Subnet Local`: the path stays in the subnet (no GRH needed on InfiniBand).
    pub subnet_local: bool,
    /// `Local ACK Timeout` (5 bits, 4.096 µs × 2^value).
    pub local_ack_timeout: u8,
}

impl ReqPath {
    fn write(&self, m: &mut BitsMut<'_>, at: usize) {
        m.set(at, 0, 16, self.local_lid.into());
        m.set(at + 2, 0, 16, self.remote_lid.into());
        m.put(at + 4, &self.local_gid.0);
        m.put(at + 20, &self.remote_gid.0);
        m.set(at + 36, 0, 20, self.flow_label);
        m.set(at + 39, 2, 6, self.packet_rate.into());
        m.set(at + 40, 0, 8, self.traffic_class.into());
        m.set(at + 41, 0, 8, self.hop_limit.into());
        m.set(at + 42, 0, 4, self.sl.into());
        m.set(at + 42, 4, 1, self.subnet_local.into());
        m.set(at + 43, 0, 5, self.local_ack_timeout.into());
    }

    fn read(b: &Bits<'_>, at: usize) -> ReqPath {
        ReqPath {
            local_lid: b.get(at, 0, 16) as u16,
            remote_lid: b.get(at + 2, 0, 16) as u16,
            local_gid: b.gid(at + 4),
            remote_gid: b.gid(at + 20),
            flow_label: b.get(at + 36, 0, 20),
            packet_rate: b.get(at + 39, 2, 6) as u8,
            traffic_class: b.get(at + 40, 0, 8) as u8,
            hop_limit: b.get(at + 41, 0, 8) as u8,
            sl: b.get(at + 42, 0, 4) as u8,
            subnet_local: b.get(at + 42, 4, 1) != 0,
            local_ack_timeout: b.get(at + 43, 0, 5) as u8,
        }
    }
}

/// A ConnectRequest (REQ, IBA 12.6.5, table 106).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Req {
    /// `Local Communication ID`.
    pub local_comm_id: u32,
    /// `ServiceID`.
    pub service_id: u64,
    /// `Local CA GUID`.
    pub local_ca_guid: u64,
    /// `Local Q_Key` (datagram services only).
    pub local_qkey: u32,
    /// `Local QPN` (24 bits).
    pub local_qpn: u32,
    /// `Responder Resources`: RDMA READs and atomics the sender's QP answers at once.
    pub responder_resources: u8,
    /// `Local EECN` (24 bits, RD only).
    pub local_eecn: u32,
    /// `Initiator Depth`: RDMA READs and atomics the sender's QP issues at once.
    pub initiator_depth: u8,
    /// `Remote EECN` (24 bits, RD only).
    pub remote_eecn: u32,
    /// `Remote CM Response Timeout` (5 bits): how long the sender waits for a reply.
    pub remote_cm_response_timeout: u8,
    /// `Transport Service Type` (2 bits: 0 RC, 1 UC, 3 RD).
    pub transport_service_type: u8,
    /// `End-to-End Flow Control`.
    pub end_to_end_flow_control: bool,
    /// `Starting PSN` (24 bits): the first PSN the sender's QP sends.
    pub starting_psn: u32,
    /// `Local CM Response Timeout` (5 bits): how long the sender takes to answer.
    pub local_cm_response_timeout: u8,
    /// `Retry Count` (3 bits): transport retries for the connection.
    pub retry_count: u8,
    /// `Partition Key`.
    pub partition_key: u16,
    /// `Path Packet Payload MTU` (4 bits, the IB MTU code: 1 = 256 ... 5 = 4096).
    pub path_mtu: u8,
    /// `RDC Exists`.
    pub rdc_exists: bool,
    /// `RNR Retry Count` (3 bits).
    pub rnr_retry_count: u8,
    /// `Max CM Retries` (4 bits).
    pub max_cm_retries: u8,
    /// `SRQ`: the sender's QP takes its receives from a shared receive queue.
    pub srq: bool,
    /// `Extended Transport Type` (3 bits; 0 unless XRC).
    pub extended_transport_type: u8,
    /// The primary path.
    pub primary: ReqPath,
    /// The alternate path (all zero: none).
    pub alternate: ReqPath,
    /// `Private Data`.
    pub private_data: [u8; REQ_PRIVATE_LEN],
}

impl Req {
    /// The MAD of this REQ in transaction `tid`.
    pub fn encode(&self, tid: u64, mad: &mut [u8; MAD_LEN]) {
        mad.fill(0);
        MadHeader::cm(AttrId::ConnectRequest, tid).write(mad);
        let mut m = BitsMut(mad);
        m.set(0, 0, 32, self.local_comm_id);
        m.set64(8, self.service_id);
        m.set64(16, self.local_ca_guid);
        m.set(28, 0, 32, self.local_qkey);
        m.set(32, 0, 24, self.local_qpn);
        m.set(35, 0, 8, self.responder_resources.into());
        m.set(36, 0, 24, self.local_eecn);
        m.set(39, 0, 8, self.initiator_depth.into());
        m.set(40, 0, 24, self.remote_eecn);
        m.set(43, 0, 5, self.remote_cm_response_timeout.into());
        m.set(43, 5, 2, self.transport_service_type.into());
        m.set(43, 7, 1, self.end_to_end_flow_control.into());
        m.set(44, 0, 24, self.starting_psn);
        m.set(47, 0, 5, self.local_cm_response_timeout.into());
        m.set(47, 5, 3, self.retry_count.into());
        m.set(48, 0, 16, self.partition_key.into());
        m.set(50, 0, 4, self.path_mtu.into());
        m.set(50, 4, 1, self.rdc_exists.into());
        m.set(50, 5, 3, self.rnr_retry_count.into());
        m.set(51, 0, 4, self.max_cm_retries.into());
        m.set(51, 4, 1, self.srq.into());
        m.set(51, 5, 3, self.extended_transport_type.into());
        self.primary.write(&mut m, 52);
        self.alternate.write(&mut m, 96);
        m.put(140, &self.private_data);
    }

    /// The REQ in `mad` (whose header [`MadHeader::check_cm`] found to be a REQ).
    pub fn decode(mad: &[u8; MAD_LEN]) -> Req {
        let b = Bits(mad);
        Req {
            local_comm_id: b.get(0, 0, 32),
            service_id: b.a64(8),
            local_ca_guid: b.a64(16),
            local_qkey: b.get(28, 0, 32),
            local_qpn: b.get(32, 0, 24),
            responder_resources: b.get(35, 0, 8) as u8,
            local_eecn: b.get(36, 0, 24),
            initiator_depth: b.get(39, 0, 8) as u8,
            remote_eecn: b.get(40, 0, 24),
            remote_cm_response_timeout: b.get(43, 0, 5) as u8,
            transport_service_type: b.get(43, 5, 2) as u8,
            end_to_end_flow_control: b.get(43, 7, 1) != 0,
            starting_psn: b.get(44, 0, 24),
            local_cm_response_timeout: b.get(47, 0, 5) as u8,
            retry_count: b.get(47, 5, 3) as u8,
            partition_key: b.get(48, 0, 16) as u16,
            path_mtu: b.get(50, 0, 4) as u8,
            rdc_exists: b.get(50, 4, 1) != 0,
            rnr_retry_count: b.get(50, 5, 3) as u8,
            max_cm_retries: b.get(51, 0, 4) as u8,
            srq: b.get(51, 4, 1) != 0,
            extended_transport_type: b.get(51, 5, 3) as u8,
            primary: ReqPath::read(&b, 52),
            alternate: ReqPath::read(&b, 96),
            private_data: b.bytes(140),
        }
    }
}

/// A ConnectReply (REP, IBA 12.6.8, table 110).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rep {
    /// `Local Communication ID` (the replier's).
    pub local_comm_id: u32,
    /// `Remote Communication ID` (the REQ's local one).
    pub remote_comm_id: u32,
    /// `Local Q_Key`.
    pub local_qkey: u32,
    /// `Local QPN` (24 bits).
    pub local_qpn: u32,
    /// `Local EE Context Number` (24 bits, RD only).
    pub local_eecn: u32,
    /// `Starting PSN` (24 bits): the first PSN the replier's QP sends.
    pub starting_psn: u32,
    /// `Responder Resources`.
    pub responder_resources: u8,
    /// `Initiator Depth`.
    pub initiator_depth: u8,
    /// `Target ACK Delay` (5 bits).
    pub target_ack_delay: u8,
    /// `Failover Accepted` (2 bits: 0 accepted, 1 not supported, 2 rejected).
    pub failover_accepted: u8,
    /// `End-to-End Flow Control`.
    pub end_to_end_flow_control: bool,
    /// `RNR Retry Count` (3 bits).
    pub rnr_retry_count: u8,
    /// `SRQ`.
    pub srq: bool,
    /// `Local CA GUID`.
    pub local_ca_guid: u64,
    /// `Private Data`.
    pub private_data: [u8; REP_PRIVATE_LEN],
}

impl Rep {
    /// The MAD of this REP in transaction `tid`.
    pub fn encode(&self, tid: u64, mad: &mut [u8; MAD_LEN]) {
        mad.fill(0);
        MadHeader::cm(AttrId::ConnectReply, tid).write(mad);
        let mut m = BitsMut(mad);
        m.set(0, 0, 32, self.local_comm_id);
        m.set(4, 0, 32, self.remote_comm_id);
        m.set(8, 0, 32, self.local_qkey);
        m.set(12, 0, 24, self.local_qpn);
        m.set(16, 0, 24, self.local_eecn);
        m.set(20, 0, 24, self.starting_psn);
        m.set(24, 0, 8, self.responder_resources.into());
        m.set(25, 0, 8, self.initiator_depth.into());
        m.set(26, 0, 5, self.target_ack_delay.into());
        m.set(26, 5, 2, self.failover_accepted.into());
        m.set(26, 7, 1, self.end_to_end_flow_control.into());
        m.set(27, 0, 3, self.rnr_retry_count.into());
        m.set(27, 3, 1, self.srq.into());
        m.set64(28, self.local_ca_guid);
        m.put(36, &self.private_data);
    }

    /// The REP in `mad`.
    pub fn decode(mad: &[u8; MAD_LEN]) -> Rep {
        let b = Bits(mad);
        Rep {
            local_comm_id: b.get(0, 0, 32),
            remote_comm_id: b.get(4, 0, 32),
            local_qkey: b.get(8, 0, 32),
            local_qpn: b.get(12, 0, 24),
            local_eecn: b.get(16, 0, 24),
            starting_psn: b.get(20, 0, 24),
            responder_resources: b.get(24, 0, 8) as u8,
            initiator_depth: b.get(25, 0, 8) as u8,
            target_ack_delay: b.get(26, 0, 5) as u8,
            failover_accepted: b.get(26, 5, 2) as u8,
            end_to_end_flow_control: b.get(26, 7, 1) != 0,
            rnr_retry_count: b.get(27, 0, 3) as u8,
            srq: b.get(27, 3, 1) != 0,
            local_ca_guid: b.a64(28),
            private_data: b.bytes(36),
        }
    }
}

/// A ReadyToUse (RTU, IBA 12.6.9, table 111).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rtu {
    /// `Local Communication ID` (the sender's).
    pub local_comm_id: u32,
    /// `Remote Communication ID`.
    pub remote_comm_id: u32,
    /// `Private Data`.
    pub private_data: [u8; RTU_PRIVATE_LEN],
}

impl Rtu {
    /// The MAD of this RTU in transaction `tid`.
    pub fn encode(&self, tid: u64, mad: &mut [u8; MAD_LEN]) {
        mad.fill(0);
        MadHeader::cm(AttrId::ReadyToUse, tid).write(mad);
        let mut m = BitsMut(mad);
        m.set(0, 0, 32, self.local_comm_id);
        m.set(4, 0, 32, self.remote_comm_id);
        m.put(8, &self.private_data);
    }

    /// The RTU in `mad`.
    pub fn decode(mad: &[u8; MAD_LEN]) -> Rtu {
        let b = Bits(mad);
        Rtu {
            local_comm_id: b.get(0, 0, 32),
            remote_comm_id: b.get(4, 0, 32),
            private_data: b.bytes(8),
        }
    }
}

/// A MsgRcptAck (MRA, IBA 12.6.6, table 107): the peer got the message and needs longer
/// than the sender's response timeout to answer it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mra {
    /// `Local Communication ID` (the sender's).
    pub local_comm_id: u32,
    /// `Remote Communication ID`.
    pub remote_comm_id: u32,
    /// `Message MRAed` (2 bits: 0 REQ, 1 REP, 2 LAP), as [`Rejected`] names them.
    pub message_mraed: Rejected,
    /// `Service Timeout` (5 bits, 4.096 µs × 2^value): how much longer the answer takes.
    pub service_timeout: u8,
}

impl Mra {
    /// The MAD of this MRA in transaction `tid` (no private data).
    pub fn encode(&self, tid: u64, mad: &mut [u8; MAD_LEN]) {
        mad.fill(0);
        MadHeader::cm(AttrId::MsgRcptAck, tid).write(mad);
        let mut m = BitsMut(mad);
        m.set(0, 0, 32, self.local_comm_id);
        m.set(4, 0, 32, self.remote_comm_id);
        m.set(8, 0, 2, self.message_mraed.raw());
        m.set(9, 0, 5, self.service_timeout.into());
    }

    /// The MRA in `mad`.
    pub fn decode(mad: &[u8; MAD_LEN]) -> Mra {
        let b = Bits(mad);
        Mra {
            local_comm_id: b.get(0, 0, 32),
            remote_comm_id: b.get(4, 0, 32),
            message_mraed: Rejected::from_raw(b.get(8, 0, 2)),
            service_timeout: b.get(9, 0, 5) as u8,
        }
    }
}

/// Which message a REJ rejects (`Message REJected`, 2 bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rejected {
    /// The REQ (0).
    Req,
    /// The REP (1).
    Rep,
    /// No message, or another (2).
    Other,
}

impl Rejected {
    fn raw(self) -> u32 {
        match self {
            Rejected::Req => 0,
            Rejected::Rep => 1,
            Rejected::Other => 2,
        }
    }
    fn from_raw(v: u32) -> Rejected {
        match v {
            0 => Rejected::Req,
            1 => Rejected::Rep,
            _ => Rejected::Other,
        }
    }
}

/// A REJ's `Reason` (IBA table 109); the codes this module sends or names, any other
/// kept as its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RejReason(pub u16);

impl RejReason {
    /// 1: no QP available.
    pub const NO_QP: RejReason = RejReason(1);
    /// 3: no resources available.
    pub const NO_RESOURCES: RejReason = RejReason(3);
    /// 4: timeout.
    pub const TIMEOUT: RejReason = RejReason(4);
    /// 5: unsupported request.
    pub const UNSUPPORTED_REQUEST: RejReason = RejReason(5);
    /// 6: invalid communication ID.
    pub const INVALID_COMM_ID: RejReason = RejReason(6);
    /// 8: invalid service ID (nobody listens on it).
    pub const INVALID_SERVICE_ID: RejReason = RejReason(8);
    /// 9: invalid transport service type.
    pub const INVALID_TRANSPORT_TYPE: RejReason = RejReason(9);
    /// 26: invalid path MTU.
    pub const INVALID_PATH_MTU: RejReason = RejReason(26);
    /// 28: consumer reject (the application said no).
    pub const CONSUMER_REJECT: RejReason = RejReason(28);
    /// 31: unsupported class version.
    pub const INVALID_CLASS_VERSION: RejReason = RejReason(31);
}

/// A ConnectReject (REJ, IBA 12.6.7, table 108).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rej {
    /// `Local Communication ID` (the rejecter's; 0 if it has none).
    pub local_comm_id: u32,
    /// `Remote Communication ID` (the rejected side's).
    pub remote_comm_id: u32,
    /// `Message REJected`.
    pub message_rejected: Rejected,
    /// `Reject Info Length` (7 bits): bytes of `ari` that mean something.
    pub reject_info_length: u8,
    /// `Reason`.
    pub reason: RejReason,
    /// `Additional Rejection Information`.
    pub ari: [u8; REJ_ARI_LEN],
    /// `Private Data`.
    pub private_data: [u8; REJ_PRIVATE_LEN],
}

impl Rej {
    /// A REJ of `message_rejected` for `reason`, with no additional information.
    pub const fn new(
        local_comm_id: u32,
        remote_comm_id: u32,
        message_rejected: Rejected,
        reason: RejReason,
    ) -> Rej {
        Rej {
            local_comm_id,
            remote_comm_id,
            message_rejected,
            reject_info_length: 0,
            reason,
            ari: [0; REJ_ARI_LEN],
            private_data: [0; REJ_PRIVATE_LEN],
        }
    }

    /// The MAD of this REJ in transaction `tid`.
    pub fn encode(&self, tid: u64, mad: &mut [u8; MAD_LEN]) {
        mad.fill(0);
        MadHeader::cm(AttrId::ConnectReject, tid).write(mad);
        let mut m = BitsMut(mad);
        m.set(0, 0, 32, self.local_comm_id);
        m.set(4, 0, 32, self.remote_comm_id);
        m.set(8, 0, 2, self.message_rejected.raw());
        m.set(9, 0, 7, self.reject_info_length.into());
        m.set(10, 0, 16, self.reason.0.into());
        m.put(12, &self.ari);
        m.put(84, &self.private_data);
    }

    /// The REJ in `mad`.
    pub fn decode(mad: &[u8; MAD_LEN]) -> Rej {
        let b = Bits(mad);
        Rej {
            local_comm_id: b.get(0, 0, 32),
            remote_comm_id: b.get(4, 0, 32),
            message_rejected: Rejected::from_raw(b.get(8, 0, 2)),
            reject_info_length: b.get(9, 0, 7) as u8,
            reason: RejReason(b.get(10, 0, 16) as u16),
            ari: b.bytes(12),
            private_data: b.bytes(84),
        }
    }
}

/// A CM message this module takes, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmMsg {
    /// A REQ.
    Req(Req),
    /// A REP.
    Rep(Rep),
    /// An RTU.
    Rtu(Rtu),
    /// A REJ.
    Rej(Rej),
    /// An MRA.
    Mra(Mra),
}

/// Decodes a received MAD: its header and, for REQ, REP, RTU and REJ, the message.
///
/// # Errors
///
/// [`MadError`] for fewer than 256 bytes, a header that is not a CM `Send`, or another
/// CM attribute (DREQ, DREP, LAP, ...), which this module does not take.
pub fn decode(bytes: &[u8]) -> Result<(MadHeader, CmMsg), MadError> {
    let mad: &[u8; MAD_LEN] = bytes
        .get(..MAD_LEN)
        .and_then(|b| b.try_into().ok())
        .ok_or(MadError::Short(bytes.len()))?;
    let h = MadHeader::read(mad);
    let msg = match h.check_cm()? {
        AttrId::ConnectRequest => CmMsg::Req(Req::decode(mad)),
        AttrId::ConnectReply => CmMsg::Rep(Rep::decode(mad)),
        AttrId::ReadyToUse => CmMsg::Rtu(Rtu::decode(mad)),
        AttrId::ConnectReject => CmMsg::Rej(Rej::decode(mad)),
        AttrId::MsgRcptAck => CmMsg::Mra(Mra::decode(mad)),
        other => return Err(MadError::Attribute(other as u16)),
    };
    Ok((h, msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A byte of the MAD at attribute offset `off` (the spec's tables count from the
    /// attribute, which starts at MAD byte 24).
    fn at(mad: &[u8; MAD_LEN], off: usize) -> u8 {
        mad[24 + off]
    }

    fn be(mad: &[u8; MAD_LEN], off: usize, n: usize) -> u64 {
        mad[24 + off..24 + off + n]
            .iter()
            .fold(0, |a, &b| (a << 8) | u64::from(b))
    }

    fn sample_req() -> Req {
        let mut pd = [0u8; REQ_PRIVATE_LEN];
        for (i, b) in pd.iter_mut().enumerate() {
            *b = i as u8 ^ 0x5a;
        }
        Req {
            local_comm_id: 0x1122_3344,
            service_id: 0x0000_0000_0106_4e21,
            local_ca_guid: 0x0002_c903_00ab_cdef,
            local_qkey: 0x0bad_f00d,
            local_qpn: 0x00ab_cdef,
            responder_resources: 0x04,
            local_eecn: 0x0012_3456,
            initiator_depth: 0x08,
            remote_eecn: 0x0065_4321,
            remote_cm_response_timeout: 0x13,
            transport_service_type: 0,
            end_to_end_flow_control: true,
            starting_psn: 0x00fe_dcba,
            local_cm_response_timeout: 0x15,
            retry_count: 6,
            partition_key: 0xffff,
            path_mtu: 3,
            rdc_exists: false,
            rnr_retry_count: 7,
            max_cm_retries: 15,
            srq: true,
            extended_transport_type: 0,
            primary: ReqPath {
                local_lid: 0x0102,
                remote_lid: 0x0304,
                local_gid: Gid([0xfe; 16]),
                remote_gid: Gid([0x80; 16]),
                flow_label: 0xabcde,
                packet_rate: 0x2a,
                traffic_class: 0x60,
                hop_limit: 0x40,
                sl: 0xb,
                subnet_local: true,
                local_ack_timeout: 0x12,
            },
            alternate: ReqPath::default(),
            private_data: pd,
        }
    }

    #[test]
    fn the_header_is_the_spec_s_common_mad_header() {
        let mut mad = [0u8; MAD_LEN];
        sample_req().encode(0x0102_0304_0506_0708, &mut mad);
        // IBA 13.4.2: BaseVersion, MgmtClass, ClassVersion, Method; Status 4-5,
        // ClassSpecific 6-7; TransactionID 8-15; AttributeID 16-17; AttributeModifier 20-23.
        assert_eq!(&mad[..4], &[1, 0x07, 2, 0x03]);
        assert_eq!(&mad[4..8], &[0; 4]);
        assert_eq!(&mad[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&mad[16..18], &[0x00, 0x10]);
        assert_eq!(&mad[20..24], &[0; 4]);
    }

    #[test]
    fn req_fields_sit_at_the_offsets_of_table_106() {
        let r = sample_req();
        let mut mad = [0u8; MAD_LEN];
        r.encode(7, &mut mad);
        assert_eq!(be(&mad, 0, 4), 0x1122_3344); // Local Communication ID
        assert_eq!(be(&mad, 4, 4), 0); // reserved
        assert_eq!(be(&mad, 8, 8), 0x0106_4e21); // ServiceID
        assert_eq!(be(&mad, 16, 8), 0x0002_c903_00ab_cdef); // Local CA GUID
        assert_eq!(be(&mad, 24, 4), 0); // reserved
        assert_eq!(be(&mad, 28, 4), 0x0bad_f00d); // Local Q_Key
        assert_eq!(be(&mad, 32, 3), 0xab_cdef); // Local QPN, 24 bits
        assert_eq!(at(&mad, 35), 0x04); // Responder Resources
        assert_eq!(be(&mad, 36, 3), 0x12_3456); // Local EECN
        assert_eq!(at(&mad, 39), 0x08); // Initiator Depth
        assert_eq!(be(&mad, 40, 3), 0x65_4321); // Remote EECN
        // Remote CM Response Timeout (5) | Transport Service Type (2) | E2E flow control (1)
        assert_eq!(at(&mad, 43), (0x13 << 3) | 1); // transport type RC = 0
        assert_eq!(be(&mad, 44, 3), 0xfe_dcba); // Starting PSN
        // Local CM Response Timeout (5) | Retry Count (3)
        assert_eq!(at(&mad, 47), 0x15 << 3 | 6);
        assert_eq!(be(&mad, 48, 2), 0xffff); // Partition Key
        // Path Packet Payload MTU (4) | RDC Exists (1) | RNR Retry Count (3)
        assert_eq!(at(&mad, 50), 3 << 4 | 7);
        // Max CM Retries (4) | SRQ (1) | Extended Transport Type (3)
        assert_eq!(at(&mad, 51), 15 << 4 | 1 << 3);
        assert_eq!(be(&mad, 52, 2), 0x0102); // Primary Local Port LID
        assert_eq!(be(&mad, 54, 2), 0x0304); // Primary Remote Port LID
        assert_eq!(&mad[24 + 56..24 + 72], &[0xfe; 16]); // Primary Local Port GID
        assert_eq!(&mad[24 + 72..24 + 88], &[0x80; 16]); // Primary Remote Port GID
        // Primary Flow Label (20) | reserved (6) | Primary Packet Rate (6)
        assert_eq!(be(&mad, 88, 4), 0xabcde << 12 | 0x2a);
        assert_eq!(at(&mad, 92), 0x60); // Primary Traffic Class
        assert_eq!(at(&mad, 93), 0x40); // Primary Hop Limit
        assert_eq!(at(&mad, 94), 0xb << 4 | 1 << 3); // Primary SL (4) | Subnet Local (1)
        assert_eq!(at(&mad, 95), 0x12 << 3); // Primary Local ACK Timeout (5)
        assert!(mad[24 + 96..24 + 140].iter().all(|&b| b == 0)); // no alternate path
        assert_eq!(&mad[24 + 140..], &r.private_data[..]); // Private Data, 92 bytes
        let (h, m) = decode(&mad).unwrap();
        assert_eq!((h.transaction_id, m), (7, CmMsg::Req(r)));
    }

    #[test]
    fn rep_fields_sit_at_the_offsets_of_table_110() {
        let mut pd = [0u8; REP_PRIVATE_LEN];
        pd[0] = 0xaa;
        pd[REP_PRIVATE_LEN - 1] = 0x55;
        let r = Rep {
            local_comm_id: 0xa1a2_a3a4,
            remote_comm_id: 0xb1b2_b3b4,
            local_qkey: 0x1357_9bdf,
            local_qpn: 0x0012_3457,
            local_eecn: 0x0076_5432,
            starting_psn: 0x00ab_0001,
            responder_resources: 0x10,
            initiator_depth: 0x20,
            target_ack_delay: 0x1f,
            failover_accepted: 1,
            end_to_end_flow_control: true,
            rnr_retry_count: 5,
            srq: true,
            local_ca_guid: 0x1122_3344_5566_7788,
            private_data: pd,
        };
        let mut mad = [0u8; MAD_LEN];
        r.encode(9, &mut mad);
        assert_eq!(&mad[16..18], &[0x00, 0x13]);
        assert_eq!(be(&mad, 0, 4), 0xa1a2_a3a4);
        assert_eq!(be(&mad, 4, 4), 0xb1b2_b3b4);
        assert_eq!(be(&mad, 8, 4), 0x1357_9bdf);
        assert_eq!(be(&mad, 12, 3), 0x12_3457);
        assert_eq!(at(&mad, 15), 0);
        assert_eq!(be(&mad, 16, 3), 0x76_5432);
        assert_eq!(be(&mad, 20, 3), 0xab_0001);
        assert_eq!(at(&mad, 24), 0x10);
        assert_eq!(at(&mad, 25), 0x20);
        // Target ACK Delay (5) | Failover Accepted (2) | End-to-End Flow Control (1)
        assert_eq!(at(&mad, 26), 0x1f << 3 | 1 << 1 | 1);
        // RNR Retry Count (3) | SRQ (1) | reserved (4)
        assert_eq!(at(&mad, 27), 5 << 5 | 1 << 4);
        assert_eq!(be(&mad, 28, 8), 0x1122_3344_5566_7788); // Local CA GUID, unaligned
        assert_eq!((at(&mad, 36), mad[255]), (0xaa, 0x55)); // Private Data, 196 bytes
        assert_eq!(decode(&mad).unwrap().1, CmMsg::Rep(r));
    }

    #[test]
    fn rtu_and_rej_fields_sit_at_the_offsets_of_tables_111_and_108() {
        let mut pd = [0u8; RTU_PRIVATE_LEN];
        pd[0] = 1;
        pd[RTU_PRIVATE_LEN - 1] = 2;
        let rtu = Rtu {
            local_comm_id: 0x0102_0304,
            remote_comm_id: 0x0506_0708,
            private_data: pd,
        };
        let mut mad = [0u8; MAD_LEN];
        rtu.encode(1, &mut mad);
        assert_eq!(&mad[16..18], &[0x00, 0x14]);
        assert_eq!(&mad[24..32], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!((at(&mad, 8), mad[255]), (1, 2));
        assert_eq!(decode(&mad).unwrap().1, CmMsg::Rtu(rtu));

        let mut rej = Rej::new(0x0a0b_0c0d, 0x0e0f_1011, Rejected::Rep, RejReason(28));
        rej.reject_info_length = 0x45;
        rej.ari[0] = 0x99;
        rej.private_data[REJ_PRIVATE_LEN - 1] = 0x77;
        rej.encode(2, &mut mad);
        assert_eq!(&mad[16..18], &[0x00, 0x12]);
        assert_eq!(be(&mad, 0, 4), 0x0a0b_0c0d);
        assert_eq!(be(&mad, 4, 4), 0x0e0f_1011);
        assert_eq!(at(&mad, 8), 1 << 6); // Message REJected (2)
        assert_eq!(at(&mad, 9), 0x45 << 1); // Reject Info Length (7)
        assert_eq!(be(&mad, 10, 2), 28); // Reason
        assert_eq!(at(&mad, 12), 0x99); // ARI, 72 bytes
        assert_eq!(mad[24 + 84 - 1], 0); // ARI ends before the private data
        assert_eq!(mad[255], 0x77); // Private Data, 148 bytes
        assert_eq!(decode(&mad).unwrap().1, CmMsg::Rej(rej));
    }

    #[test]
    fn headers_that_are_not_a_cm_send_are_refused() {
        let mut mad = [0u8; MAD_LEN];
        sample_req().encode(1, &mut mad);
        assert_eq!(decode(&mad[..255]).unwrap_err(), MadError::Short(255));
        for (i, v, e) in [
            (0, 2, MadError::BaseVersion(2)),
            (1, 0x81, MadError::Class(0x81)),
            (2, 1, MadError::ClassVersion(1)),
            (3, 0x81, MadError::Method(0x81)),
        ] {
            let mut m = mad;
            m[i] = v;
            assert_eq!(decode(&m).unwrap_err(), e);
        }
        let mra = Mra {
            local_comm_id: 0x0102_0304,
            remote_comm_id: 0x0506_0708,
            message_mraed: Rejected::Rep,
            service_timeout: 0x17,
        };
        let mut m = [0u8; MAD_LEN];
        mra.encode(3, &mut m);
        assert_eq!(&m[16..18], &[0x00, 0x11]);
        assert_eq!(&m[24..32], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(m[24 + 8], 1 << 6); // Message MRAed (2)
        assert_eq!(m[24 + 9], 0x17 << 3); // Service Timeout (5)
        assert_eq!(decode(&m).unwrap().1, CmMsg::Mra(mra));
        let mut m = mad;
        m[17] = 0x15; // DREQ: known to the spec, not taken here
        assert_eq!(decode(&m).unwrap_err(), MadError::Attribute(0x15));
    }
}
