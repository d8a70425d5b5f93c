//! What the firmware knows besides its objects: the HCA's life cycle, page accounting,
//! the command queue's address, the port and the health state. Device holds it; the
//! command handlers read and change it.

use crate::caps::{Caps, LinkLayer};
use std::collections::BTreeSet;
use uhca_fwif::cmd::NODE_DESC_BYTES;
use uhca_fwif::consts::PortState;
use uhca_fwif::ctx::{NicVportContext, RoceAddrLayout};

/// Nanoseconds per health-counter tick while the firmware is alive.
pub const HEALTH_TICK_NS: u64 = 1_000_000;

/// The node description the firmware starts with, reported by the subnet management agent
/// (SubnGet(NodeDescription)) and the NODE_DESC register (Linux's `mlx5_ib` shows it as the
/// device's `node_desc`).
pub const NODE_DESCRIPTION: &[u8] = b"uhca mock HCA";

/// The life cycle of the HCA as the command interface sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HcaState {
    /// After power-on, function level reset or DISABLE_HCA: only ENABLE_HCA is accepted.
    Disabled,
    /// After ENABLE_HCA: ISSI, pages, capabilities, registers, then INIT_HCA.
    Enabled,
    /// After INIT_HCA: objects may be created.
    Initialized,
    /// After TEARDOWN_HCA: pages may be reclaimed, then DISABLE_HCA.
    TornDown,
}

/// Page accounting.
#[derive(Clone, Debug, Default)]
pub(crate) struct Pages {
    /// Pages the driver gave, by IOVA.
    pub(crate) held: BTreeSet<u64>,
    pub(crate) boot: u32,
    pub(crate) init: u32,
    /// Regular pages the firmware wants beyond boot and init pages.
    pub(crate) regular: u32,
    /// Pages asked for with PAGE_REQUEST events and not yet given.
    pub(crate) requested: u32,
    /// Pages the firmware announced it returns (negative PAGE_REQUEST) and not yet posted.
    pub(crate) to_return: u32,
    /// After teardown every page may be reclaimed.
    pub(crate) released: bool,
    /// The driver answered with MANAGE_PAGES "cannot give": fail the waiting commands.
    pub(crate) refused: bool,
}

impl Pages {
    pub(crate) fn total_needed(&self) -> u64 {
        if self.released {
            0
        } else {
            self.boot as u64 + self.init as u64 + self.regular as u64
        }
    }
    fn outstanding(&self, threshold: u64, of: u32) -> u32 {
        threshold
            .saturating_sub(self.held.len() as u64)
            .min(of as u64) as u32
    }
    pub(crate) fn boot_outstanding(&self) -> u32 {
        if self.released {
            0
        } else {
            self.outstanding(self.boot as u64, self.boot)
        }
    }
    pub(crate) fn init_outstanding(&self) -> u32 {
        if self.released {
            0
        } else {
            self.outstanding(self.boot as u64 + self.init as u64, self.init)
        }
    }
    pub(crate) fn regular_outstanding(&self) -> u32 {
        if self.released {
            0
        } else {
            self.outstanding(self.total_needed(), self.regular)
        }
    }
    /// Pages the firmware can hand back now.
    pub(crate) fn surplus(&self) -> u64 {
        (self.held.len() as u64).saturating_sub(self.total_needed())
    }
}

/// Everything the firmware knows; reset by a function level reset.
#[derive(Clone, Debug)]
pub(crate) struct FwState {
    /// Model time at which the firmware started (power-on or reset).
    pub(crate) boot_ns: u64,
    /// Model time at which `initializing` clears.
    pub(crate) ready_ns: u64,
    pub(crate) cmdq_addr_h: u32,
    pub(crate) cmdq_addr_l: u32,
    pub(crate) nic_interface: u8,
    pub(crate) state: HcaState,
    pub(crate) issi: u16,
    pub(crate) caps: Caps,
    pub(crate) host_endianness_he: bool,
    /// The node description (NODE_DESC register, SubnGet(NodeDescription)).
    pub(crate) node_desc: [u8; NODE_DESC_BYTES],
    pub(crate) pages: Pages,
    pub(crate) fast_teardown_prepared: bool,

    pub(crate) nic_vport: NicVportContext,
    pub(crate) roce_addrs: Vec<Option<RoceAddrLayout>>,
    pub(crate) port_state: PortState,
    pub(crate) lid: u16,
    pub(crate) sm_lid: u16,

    /// Slots whose command hangs (injected).
    pub(crate) hung: BTreeSet<u8>,
    /// Slots whose command waits for pages.
    pub(crate) deferred: Vec<u8>,
    /// Health: injected fatal syndrome and extended syndrome.
    pub(crate) fatal: Option<(u8, u16)>,
    /// Health counter value frozen at the fatal error.
    pub(crate) frozen_counter: u32,
    /// Events that could not be posted yet (no subscribed EQ): (type, sub type, data).
    pub(crate) pending_events: Vec<(u8, u8, [u8; 28])>,
}

/// First UAR index the firmware hands out (pages 0 to 7 hold the initialization segment,
/// the clocks and health counter, the MSI-X table and its pending bits).
pub const FIRST_UAR: u32 = 8;
/// First QP number handed out (lower numbers are reserved for special QPs).
pub const FIRST_QPN: u32 = 0x100;

impl FwState {
    pub(crate) fn new(cfg: &crate::MockConfig, now: u64) -> Self {
        let caps = Caps::new(cfg.port_type);
        let mut nic = NicVportContext::default();
        let mac = cfg.mac;
        nic.set_mtu(1500)
            .set_system_image_guid(cfg.node_guid())
            .set_node_guid(cfg.node_guid())
            .set_port_guid(cfg.node_guid());
        nic.permanent_address_mut()
            .set_mac_addr_47_32(u16::from_be_bytes([mac[0], mac[1]]))
            .set_mac_addr_31_0(u32::from_be_bytes([mac[2], mac[3], mac[4], mac[5]]));
        let table = match cfg.port_type {
            LinkLayer::Ethernet => crate::caps::ROCE_ADDRESS_TABLE_ENTRIES,
            LinkLayer::InfiniBand => 0,
        };
        FwState {
            boot_ns: now,
            ready_ns: now.saturating_add(cfg.init_delay_us.saturating_mul(1000)),
            cmdq_addr_h: 0,
            cmdq_addr_l: 0,
            nic_interface: 0,
            state: HcaState::Disabled,
            issi: 0,
            caps,
            host_endianness_he: false,
            node_desc: {
                let mut d = [0u8; NODE_DESC_BYTES];
                d[..NODE_DESCRIPTION.len()].copy_from_slice(NODE_DESCRIPTION);
                d
            },
            pages: Pages {
                boot: cfg.boot_pages,
                init: cfg.init_pages,
                regular: cfg.regular_pages,
                ..Pages::default()
            },
            fast_teardown_prepared: false,
            nic_vport: nic,
            roce_addrs: vec![None; table],
            port_state: if cfg.port_up {
                PortState::Active
            } else {
                PortState::Down
            },
            lid: cfg.lid,
            sm_lid: cfg.sm_lid,
            hung: BTreeSet::new(),
            deferred: Vec::new(),
            fatal: None,
            frozen_counter: 0,
            pending_events: Vec::new(),
        }
    }

    /// The command queue's IOVA.
    pub(crate) fn cmdq_iova(&self) -> u64 {
        ((self.cmdq_addr_h as u64) << 32) | (self.cmdq_addr_l as u64 & !0xfff)
    }

    /// Drops what the firmware keeps about the objects (teardown, disable): the events not
    /// yet posted and the RoCE address table. The object tables are [`crate::objects`]'.
    pub(crate) fn drop_objects(&mut self) {
        self.pending_events.clear();
        for a in self.roce_addrs.iter_mut() {
            *a = None;
        }
    }

    pub(crate) fn port_type(&self) -> LinkLayer {
        self.caps.port_type()
    }
}
