//! The objects the firmware creates and the datapath engine uses: the tables of QPs, CQs,
//! SRQs, memory keys, EQs, UARs, PDs, transport and XRC domains and queue counters.
//!
//! The firmware's commands create, modify and destroy them; the engine reads them and
//! advances the counters the hardware keeps in them (producer indices, arm state).

use crate::firmware::{Cq, Eq, Mkey, Qp, Srq};
use std::collections::{BTreeMap, BTreeSet};

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
    /// Drops every object (teardown, disable); object numbers keep counting.
    pub(crate) fn clear(&mut self) {
        self.uars.clear();
        self.pds.clear();
        self.tds.clear();
        self.xrcds.clear();
        self.q_counters.clear();
        self.mkeys.clear();
        self.eqs.clear();
        self.cqs.clear();
        self.qps.clear();
        self.srqs.clear();
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
