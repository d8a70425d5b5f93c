//! The objects the firmware creates and the datapath engine uses: the tables of QPs, CQs,
//! SRQs, memory keys, EQs, UARs, PDs, transport and XRC domains and queue counters.
//!
//! The firmware's commands create, modify and destroy them; the engine reads them and
//! advances the counters the hardware keeps in them (producer indices, arm state).

use std::collections::{BTreeMap, BTreeSet};
use uhca_fwif::consts::QpServiceType;
use uhca_fwif::ctx::{Cqc, Eqc, Mkc, Qpc, Rmpc, Srqc, XrcSrqc};

/// Every object table; emptied by teardown and disable, renewed by a function level reset.
#[derive(Clone, Debug)]
pub(crate) struct Objects {
    pub(crate) uars: BTreeSet<u32>,
    pub(crate) pds: BTreeSet<u32>,
    pub(crate) tds: BTreeSet<u32>,
    /// XRC domains.
    pub(crate) xrcds: BTreeSet<u32>,
    pub(crate) q_counters: BTreeSet<u8>,
    pub(crate) mkeys: BTreeMap<u32, Mkey>,
    pub(crate) eqs: BTreeMap<u8, Eq>,
    pub(crate) cqs: BTreeMap<u32, Cq>,
    pub(crate) qps: BTreeMap<u32, Qp>,
    pub(crate) srqs: BTreeMap<u32, Srq>,
    pub(crate) next_id: u32,
}

impl Default for Objects {
    fn default() -> Self {
        Objects {
            uars: BTreeSet::new(),
            pds: BTreeSet::new(),
            tds: BTreeSet::new(),
            xrcds: BTreeSet::new(),
            q_counters: BTreeSet::new(),
            mkeys: BTreeMap::new(),
            eqs: BTreeMap::new(),
            cqs: BTreeMap::new(),
            qps: BTreeMap::new(),
            srqs: BTreeMap::new(),
            next_id: 1,
        }
    }
}

impl Objects {
    /// The firmware QPN of the port's QP0 or QP1, if it exists.
    pub(crate) fn special_qpn(&self, st: QpServiceType) -> Option<u32> {
        self.qps
            .iter()
            .find(|(_, qp)| QpServiceType::from_raw(qp.qpc.st()) == st)
            .map(|(&qpn, _)| qpn)
    }

    /// Drops every object (teardown, disable); object numbers keep counting.
    pub(crate) fn clear(&mut self) {
        *self = Objects {
            next_id: self.next_id,
            ..Objects::default()
        };
    }

    /// A fresh object number (never reused while the firmware runs, like hardware that
    /// rotates its tables; numbers are 24 bits).
    pub(crate) fn alloc_id(&mut self) -> u32 {
        let id = self.next_id & 0x00ff_ffff;
        self.next_id = self.next_id.wrapping_add(1).max(1);
        id
    }

    /// The lowest-numbered EQ subscribed to `event_type`.
    pub(crate) fn eq_for(&self, event_type: u8) -> Option<u8> {
        if event_type >= 64 {
            return None;
        }
        self.eqs
            .iter()
            .find(|(_, e)| e.mask & (1u64 << event_type) != 0)
            .map(|(&n, _)| n)
    }
}

/// An event queue.
#[derive(Clone, Debug)]
pub(crate) struct Eq {
    pub(crate) eqc: Eqc,
    /// The event types it receives (CREATE_EQ's `event_bitmask`).
    pub(crate) mask: u64,
    /// The queue buffer's pages.
    pub(crate) pas: Vec<u64>,
    /// The buffer's page size in bytes.
    pub(crate) page_size: u64,
    /// log2 of the number of EQEs.
    pub(crate) log_size: u8,
    /// The UAR page its doorbell is rung through.
    pub(crate) uar: u32,
    /// The MSI-X vector it interrupts on.
    pub(crate) intr: u16,
    /// Producer counter (EQEs written).
    pub(crate) pi: u32,
    /// Consumer counter (from the EQ doorbell).
    pub(crate) ci: u32,
    pub(crate) armed: bool,
    pub(crate) overruns: u64,
}

/// A completion queue.
#[derive(Clone, Debug)]
pub(crate) struct Cq {
    pub(crate) cqc: Cqc,
    /// The queue buffer's pages (read by the datapath engine).
    pub(crate) pas: Vec<u64>,
    /// Producer counter (CQEs written; the datapath engine advances it).
    pub(crate) pi: u32,
    /// The last arm request from the CQ doorbell: (sequence number, solicited only,
    /// consumer index).
    pub(crate) arm: Option<(u8, bool, u32)>,
}

/// A queue pair.
#[derive(Clone, Debug)]
pub(crate) struct Qp {
    pub(crate) qpc: Qpc,
    /// The work queue buffer's pages (read by the datapath engine).
    pub(crate) pas: Vec<u64>,
}

/// A shared receive queue: an SRQ (CREATE_SRQ, ISSI 0), an RMP (CREATE_RMP, ISSI 1) or an
/// XRC SRQ (CREATE_XRC_SRQ). All hold linked-list receive WQEs with a "next" segment and a
/// doorbell record whose first dword counts the WQEs posted; QPs name an SRQ or an RMP in
/// `srqn_rmpn_xrqn`, XRC senders name an XRC SRQ in each message's XRCETH.
#[derive(Clone, Debug)]
pub(crate) struct Srq {
    pub(crate) ctx: SrqCtx,
    /// The queue buffer's pages (read by the datapath engine).
    pub(crate) pas: Vec<u64>,
}

/// The context a shared receive queue was created with.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SrqCtx {
    /// CREATE_SRQ's `srqc`.
    Srq(Srqc),
    /// CREATE_RMP's `rmpc` (the queue in its `wq`).
    Rmp(Rmpc),
    /// CREATE_XRC_SRQ's `xrc_srqc`.
    Xrc(XrcSrqc),
}

/// One expression for the fields an SRQ's `srqc` and an XRC SRQ's `xrc_srqc` name alike
/// (`c` binds either context), another for an RMP (`c` binds its `rmpc`).
macro_rules! srq_or_xrc {
    ($ctx:expr, $c:ident => $same:expr, rmp => $rmp:expr) => {
        match $ctx {
            SrqCtx::Srq($c) => $same,
            SrqCtx::Xrc($c) => $same,
            #[allow(unused_variables)]
            SrqCtx::Rmp($c) => $rmp,
        }
    };
}

impl Srq {
    /// The PD.
    pub(crate) fn pd(&self) -> u32 {
        srq_or_xrc!(&self.ctx, c => c.pd(), rmp => c.wq().pd())
    }

    /// The doorbell record's address.
    pub(crate) fn dbr_addr(&self) -> u64 {
        match &self.ctx {
            SrqCtx::Srq(c) => c.dbr_addr(),
            SrqCtx::Rmp(c) => c.wq().dbr_addr(),
            SrqCtx::Xrc(c) => xrc_srq_dbr_addr(c),
        }
    }

    /// log2 of the number of WQEs.
    pub(crate) fn log_size(&self) -> u8 {
        match &self.ctx {
            SrqCtx::Srq(c) => c.log_srq_size(),
            SrqCtx::Rmp(c) => c.wq().log_wq_sz(),
            SrqCtx::Xrc(c) => c.log_xrc_srq_size(),
        }
    }

    /// The WQE stride in bytes (`srqc.log_rq_stride` counts 16-byte units,
    /// `wq.log_wq_stride` bytes).
    pub(crate) fn stride(&self) -> u64 {
        srq_or_xrc!(&self.ctx, c => 16u64 << c.log_rq_stride(), rmp => 1u64 << c.wq().log_wq_stride())
    }

    /// Where the queue starts in its first page, in 64ths of the page size
    /// (`srqc.page_offset`, `wq.page_offset`, `xrc_srqc.page_offset`).
    pub(crate) fn page_offset(&self) -> u8 {
        srq_or_xrc!(&self.ctx, c => c.page_offset(), rmp => c.wq().page_offset())
    }

    /// log2 of the buffer's page size in 4 KiB units.
    pub(crate) fn log_page_size(&self) -> u8 {
        srq_or_xrc!(&self.ctx, c => c.log_page_size(), rmp => c.wq().log_wq_pg_sz())
    }

    /// Whether its receive WQEs may use the reserved lkey (`srqc.rlky`, `xrc_srqc.rlky`; an
    /// RMP's `rmpc` has no such bit, so never).
    pub(crate) fn rlky(&self) -> bool {
        srq_or_xrc!(&self.ctx, c => c.rlky(), rmp => false)
    }

    /// The armed limit (`lwm`; 0: not armed).
    pub(crate) fn lwm(&self) -> u16 {
        srq_or_xrc!(&self.ctx, c => c.lwm(), rmp => c.wq().lwm())
    }

    /// Sets the limit (0 disarms it).
    pub(crate) fn set_lwm(&mut self, lwm: u16) {
        srq_or_xrc!(&mut self.ctx, c => {
            c.set_lwm(lwm);
        }, rmp => {
            c.wq_mut().set_lwm(lwm);
        })
    }

    /// The completion queue of an XRC SRQ: CREATE_XRC_SRQ's, or an ISSI-0 SRQ created in
    /// an XRC domain (never for an RMP).
    pub(crate) fn xrc_cqn(&self) -> Option<u32> {
        match &self.ctx {
            SrqCtx::Srq(c) if c.xrcd() != 0 => Some(c.cqn()),
            SrqCtx::Xrc(c) => Some(c.cqn()),
            _ => None,
        }
    }

    /// The XRC domain it belongs to (`None`: not an XRC SRQ).
    pub(crate) fn xrcd(&self) -> Option<u32> {
        match &self.ctx {
            SrqCtx::Srq(c) if c.xrcd() != 0 => Some(c.xrcd()),
            SrqCtx::Xrc(c) => Some(c.xrcd()),
            _ => None,
        }
    }
}

/// A memory key.
#[derive(Clone, Debug)]
pub(crate) struct Mkey {
    pub(crate) mkc: Mkc,
    pub(crate) mtt: Vec<u64>,
}

/// An XRC SRQ's doorbell record address (`xrc_srqc` splits it into a high dword and the
/// low dword's upper 30 bits).
pub(crate) fn xrc_srq_dbr_addr(c: &XrcSrqc) -> u64 {
    ((c.db_record_addr_h() as u64) << 32) | ((c.db_record_addr_l() as u64) << 2)
}

/// The reserved lkey QUERY_SPECIAL_CONTEXTS reports.
pub const RESERVED_LKEY: u32 = 0x0000_0300;

/// The QP types the datapath treats as datagram queues (Q_Key, datagram segments).
pub(crate) fn is_datagram_qp(st: QpServiceType) -> bool {
    matches!(
        st,
        QpServiceType::Ud | QpServiceType::Qp0 | QpServiceType::Qp1
    )
}

/// The QPN a QP's datagrams carry as their source (DETH): 0 and 1 for the port's QP0 and
/// QP1, the firmware QPN for any other.
pub(crate) fn wire_qpn(st: QpServiceType, qpn: u32) -> u32 {
    match st {
        QpServiceType::Qp0 => 0,
        QpServiceType::Qp1 => 1,
        _ => qpn,
    }
}
