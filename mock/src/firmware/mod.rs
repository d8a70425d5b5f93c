//! The firmware: the command interface and every command the model implements, the object
//! tables, page accounting and events.
//!
//! One file per command family. Handlers decode their input from `uhca-fwif` layouts and
//! encode their output the same way; a bad input gets the PRM status and one of the
//! [`syndrome`]s, never a panic.

pub mod syndrome;

mod cmdq;
mod cq;
mod eq;
mod hca;
mod mkey;
mod pages;
mod qp;
mod resources;
mod special_qp;
mod srq;
mod vport;
mod xrc;

pub use cmdq::MAX_CMD_LEN;
pub use cq::{
    CQ_MODIFY_COUNT, CQ_MODIFY_OVERRUN, CQ_MODIFY_PERIOD, CQ_OP_MOD_MODIFY, CQ_OP_MOD_RESIZE,
};
pub use eq::{EQE_SIZE, HEALTH_SYNDR_ASYNC_EQ_OVERRUN};
pub use hca::{
    ADAPTER_IEEE_VENDOR_ID, ADAPTER_PSID, ADAPTER_VSD_VENDOR_ID, RESERVED_LKEY, SUPPORTED_ISSI,
    TEARDOWN_FORCE, TEARDOWN_GRACEFUL, TEARDOWN_PREPARE_FAST,
};
pub use mkey::{FIRST_MKEY_INDEX, MAX_MTT};
pub use pages::{FUNCTION_ID, FW_PAGE_FILL, PAGE_REQ_EC_FUNCTION, PAGE_REQ_RELEASE_ALL};
pub use qp::optpar;
pub use special_qp::QP1_Q_KEY;
pub(crate) use special_qp::{is_datagram as is_datagram_qp, wire_qpn};
pub use srq::ARM_RQ_OP_MOD_SRQ;
pub use vport::{
    ALL_ENTRIES, DEFAULT_PKEY, GID_PREFIX, MAD_STATUS_BAD_ATTRIBUTE_VALUE, MAD_STATUS_BAD_CLASS,
    MAD_STATUS_UNSUPPORTED, NODE_DESCRIPTION, PORT_CAPABILITY_MASK,
};

use crate::caps::{Caps, LinkLayer};
use crate::device::Device;
use std::collections::BTreeSet;
use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::*;
use uhca_fwif::consts::{CmdOpcode, CmdStatus, PortState};
use uhca_fwif::ctx::{Cqc, Eqc, Mkc, NicVportContext, Qpc, Rmpc, RoceAddrLayout, Srqc, XrcSrqc};

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

/// Why a command did not produce an output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fail {
    /// A command status and syndrome.
    Cmd(CmdStatus, u32),
    /// The firmware waits for pages: the command stays with hardware.
    Defer,
}

pub(crate) type CmdResult = Result<Vec<u8>, Fail>;

/// QUERY_QP's output up to its trailing page list: status, syndrome, `opt_param_mask`,
/// `ece`, the QP context (`qp_pas_or_qpc_ext_and_pas` starts at bit 2176).
pub const QUERY_QP_OUT_FIXED: usize =
    uhca_fwif::cmd::query_qp_out::qp_pas_or_qpc_ext_and_pas.bit_offset as usize / 8;

/// QUERY_HCA_CAP's output before its capability union (status, syndrome, reserved): the
/// output need reach only as far as the capability page asked for (the union is as large
/// as the largest page; rdma-core's DevX tests, run on ConnectX, read a 2048-byte
/// capability, `tests/mlx5_prm_structs.py` `QueryCmdHcaCapOut`).
pub const QUERY_HCA_CAP_OUT_FIXED: usize =
    uhca_fwif::cmd::query_hca_cap_out::capability.bit_offset as usize / 8;

pub(crate) fn bad_param(s: u32) -> Fail {
    Fail::Cmd(CmdStatus::BadParamErr, s)
}
pub(crate) fn bad_state(s: u32) -> Fail {
    Fail::Cmd(CmdStatus::BadSysStateErr, s)
}
pub(crate) fn bad_res(s: u32) -> Fail {
    Fail::Cmd(CmdStatus::BadResErr, s)
}
pub(crate) fn busy(s: u32) -> Fail {
    Fail::Cmd(CmdStatus::ResBusy, s)
}
pub(crate) fn no_res(s: u32) -> Fail {
    Fail::Cmd(CmdStatus::NoResErr, s)
}
pub(crate) fn lim(s: u32) -> Fail {
    Fail::Cmd(CmdStatus::LimErr, s)
}

/// The bytes of an output layout.
pub(crate) fn out<T: PrmLayout>(v: &T) -> Vec<u8> {
    v.as_bytes().to_vec()
}

/// Decodes an input layout from the start of the input.
pub(crate) fn parse<T: PrmLayout>(input: &[u8]) -> Result<T, Fail> {
    match T::read_from_prefix(input) {
        Ok((v, _)) => Ok(v),
        Err(_) => Err(Fail::Cmd(CmdStatus::BadInpLenErr, syndrome::BAD_INPUT_LEN)),
    }
}

/// The 8-byte page addresses of a flexible `pas` array at `offset` of the input.
pub(crate) fn pas_list(input: &[u8], offset: usize, count: usize) -> Result<Vec<u64>, Fail> {
    let need = count
        .checked_mul(PAS_ENTRY_BYTES)
        .and_then(|n| n.checked_add(offset));
    match need {
        Some(end) if end <= input.len() => Ok(input[offset..end]
            .chunks_exact(PAS_ENTRY_BYTES)
            .map(|c| u64::from_be_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect()),
        _ => Err(Fail::Cmd(CmdStatus::BadInpLenErr, syndrome::BAD_INPUT_LEN)),
    }
}

/// What a handler gets besides its decoded input.
pub(crate) struct Ctx<'a> {
    /// The whole input, for flexible arrays.
    pub(crate) raw: &'a [u8],
    /// The output length the driver provided.
    pub(crate) outlen: usize,
    /// Model time.
    pub(crate) now: u64,
}

/// An event queue.
#[derive(Clone, Debug)]
pub(crate) struct Eq {
    pub(crate) eqc: Eqc,
    pub(crate) mask: u64,
    pub(crate) pas: Vec<u64>,
    pub(crate) page_size: u64,
    pub(crate) log_size: u8,
    pub(crate) uar: u32,
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

impl Srq {
    /// The PD.
    pub(crate) fn pd(&self) -> u32 {
        match &self.ctx {
            SrqCtx::Srq(c) => c.pd(),
            SrqCtx::Rmp(c) => c.wq().pd(),
            SrqCtx::Xrc(c) => c.pd(),
        }
    }

    /// The doorbell record's address.
    pub(crate) fn dbr_addr(&self) -> u64 {
        match &self.ctx {
            SrqCtx::Srq(c) => c.dbr_addr(),
            SrqCtx::Rmp(c) => c.wq().dbr_addr(),
            SrqCtx::Xrc(c) => xrc::xrc_srq_dbr_addr(c),
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
        match &self.ctx {
            SrqCtx::Srq(c) => 16u64 << c.log_rq_stride(),
            SrqCtx::Rmp(c) => 1u64 << c.wq().log_wq_stride(),
            SrqCtx::Xrc(c) => 16u64 << c.log_rq_stride(),
        }
    }

    /// Where the queue starts in its first page, in 64ths of the page size
    /// (`srqc.page_offset`, `wq.page_offset`, `xrc_srqc.page_offset`).
    pub(crate) fn page_offset(&self) -> u8 {
        match &self.ctx {
            SrqCtx::Srq(c) => c.page_offset(),
            SrqCtx::Rmp(c) => c.wq().page_offset(),
            SrqCtx::Xrc(c) => c.page_offset(),
        }
    }

    /// log2 of the buffer's page size in 4 KiB units.
    pub(crate) fn log_page_size(&self) -> u8 {
        match &self.ctx {
            SrqCtx::Srq(c) => c.log_page_size(),
            SrqCtx::Rmp(c) => c.wq().log_wq_pg_sz(),
            SrqCtx::Xrc(c) => c.log_page_size(),
        }
    }

    /// Whether its receive WQEs may use the reserved lkey (`srqc.rlky`, `xrc_srqc.rlky`; an
    /// RMP's `rmpc` has no such bit, so never).
    pub(crate) fn rlky(&self) -> bool {
        match &self.ctx {
            SrqCtx::Srq(c) => c.rlky(),
            SrqCtx::Xrc(c) => c.rlky(),
            SrqCtx::Rmp(_) => false,
        }
    }

    /// The armed limit (`lwm`; 0: not armed).
    pub(crate) fn lwm(&self) -> u16 {
        match &self.ctx {
            SrqCtx::Srq(c) => c.lwm(),
            SrqCtx::Rmp(c) => c.wq().lwm(),
            SrqCtx::Xrc(c) => c.lwm(),
        }
    }

    /// Sets the limit (0 disarms it).
    pub(crate) fn set_lwm(&mut self, lwm: u16) {
        match &mut self.ctx {
            SrqCtx::Srq(c) => {
                c.set_lwm(lwm);
            }
            SrqCtx::Rmp(c) => {
                c.wq_mut().set_lwm(lwm);
            }
            SrqCtx::Xrc(c) => {
                c.set_lwm(lwm);
            }
        }
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
pub(crate) struct Firmware {
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

impl Firmware {
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
        Firmware {
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
                d[..vport::NODE_DESCRIPTION.len()].copy_from_slice(vport::NODE_DESCRIPTION);
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

/// Which HCA state a command needs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Need {
    /// Disabled (ENABLE_HCA).
    Disabled,
    /// Enabled, initialized or torn down.
    Enabled,
    /// Enabled (not yet initialized), with boot pages.
    BeforeInit,
    /// Enabled or initialized, with boot pages.
    Booted,
    /// Initialized.
    Initialized,
    /// Any state.
    Any,
}

fn need_of(op: CmdOpcode) -> Need {
    use CmdOpcode as O;
    match op {
        O::EnableHca => Need::Disabled,
        O::DisableHca | O::Nop => Need::Any,
        O::QueryIssi | O::QueryPages | O::ManagePages | O::TeardownHca => Need::Enabled,
        O::SetIssi | O::SetHcaCap | O::InitHca => Need::BeforeInit,
        O::QueryHcaCap | O::AccessReg => Need::Booted,
        _ => Need::Initialized,
    }
}

impl Device {
    fn check_state(&self, op: CmdOpcode) -> Result<(), Fail> {
        let st = self.fw.state;
        let boot_ok = self.fw.pages.boot_outstanding() == 0;
        match (need_of(op), st) {
            (Need::Any, _) => Ok(()),
            (Need::Disabled, HcaState::Disabled) => Ok(()),
            (Need::Disabled, _) => Err(bad_state(syndrome::HCA_ALREADY_ENABLED)),
            (_, HcaState::Disabled) => Err(bad_state(syndrome::HCA_NOT_ENABLED)),
            (Need::Enabled, _) => Ok(()),
            (_, HcaState::TornDown) => Err(bad_state(syndrome::HCA_TORN_DOWN)),
            (Need::BeforeInit, HcaState::Initialized) => {
                Err(bad_state(syndrome::HCA_ALREADY_INITIALIZED))
            }
            (Need::BeforeInit | Need::Booted, _) if !boot_ok && op != CmdOpcode::SetIssi => {
                Err(no_res(syndrome::NO_BOOT_PAGES))
            }
            (Need::BeforeInit | Need::Booted, _) => Ok(()),
            (Need::Initialized, HcaState::Initialized) => Ok(()),
            (Need::Initialized, _) => Err(bad_state(syndrome::HCA_NOT_INITIALIZED)),
        }
    }

    /// Executes one command's input and returns its output (status OK) or why not.
    pub(crate) fn execute(&mut self, input: &[u8], outlen: usize, now: u64) -> CmdResult {
        let hdr: MboxIn = parse(input)?;
        let op = CmdOpcode::from_raw(hdr.opcode());
        // INIT_HCA's input grew from the 16-byte header to 32 bytes (`sw_vhca_id`,
        // `sw_owner_id`, which matter only with the `sw_owner_id` capability, not offered).
        // Drivers written before that send 16 bytes (rdma-core 44's VFIO provider does)
        // and firmware takes them: the missing bytes read as zero.
        let grown;
        let input = if op == CmdOpcode::InitHca && input.len() < InitHcaIn::SIZE {
            grown = [input, &[0u8; InitHcaIn::SIZE][input.len()..]].concat();
            &grown[..]
        } else {
            input
        };
        let ctx = Ctx {
            raw: input,
            outlen,
            now,
        };

        macro_rules! run {
            ($in:ty, $handler:ident) => {
                run!($in, $handler, op_mod_zero)
            };
            ($in:ty, $handler:ident, $opm:ident) => {
                run!($in, $handler, $opm, <<$in as Command>::Out as PrmLayout>::SIZE)
            };
            // `$min`: the shortest output the command takes (its layout's size, or the part
            // before a trailing list the firmware writes only as far as the output reaches).
            ($in:ty, $handler:ident, $opm:ident, $min:expr) => {{
                if outlen < $min {
                    return Err(Fail::Cmd(CmdStatus::BadOutpLenErr, syndrome::BAD_OUTPUT_LEN));
                }
                let inp: $in = parse(input)?;
                run!(@opm $opm, hdr);
                if hdr.uid() != 0 {
                    return Err(bad_param(syndrome::BAD_UID));
                }
                self.check_state(op)?;
                self.$handler(&ctx, &inp)
            }};
            (@opm op_mod_zero, $hdr:ident) => {
                if $hdr.op_mod() != 0 {
                    return Err(bad_param(syndrome::BAD_OP_MOD));
                }
            };
            (@opm op_mod_any, $hdr:ident) => {};
        }

        use CmdOpcode as O;
        match op {
            O::EnableHca => run!(EnableHcaIn, cmd_enable_hca),
            O::DisableHca => run!(DisableHcaIn, cmd_disable_hca),
            O::QueryIssi => run!(QueryIssiIn, cmd_query_issi),
            O::SetIssi => run!(SetIssiIn, cmd_set_issi),
            O::QueryPages => run!(QueryPagesIn, cmd_query_pages, op_mod_any),
            O::ManagePages => run!(ManagePagesIn, cmd_manage_pages, op_mod_any),
            O::QueryHcaCap => run!(
                QueryHcaCapIn,
                cmd_query_hca_cap,
                op_mod_any,
                QUERY_HCA_CAP_OUT_FIXED
            ),
            O::SetHcaCap => run!(SetHcaCapIn, cmd_set_hca_cap, op_mod_any),
            O::InitHca => run!(InitHcaIn, cmd_init_hca),
            O::TeardownHca => run!(TeardownHcaIn, cmd_teardown_hca),
            O::AccessReg => run!(AccessRegisterIn, cmd_access_register, op_mod_any),
            O::QuerySpecialContexts => run!(QuerySpecialContextsIn, cmd_query_special_contexts),
            O::QueryAdapter => run!(QueryAdapterIn, cmd_query_adapter),
            O::Nop => {
                self.check_state(op)?;
                Ok(vec![0; 16])
            }
            O::AllocUar => run!(AllocUarIn, cmd_alloc_uar),
            O::DeallocUar => run!(DeallocUarIn, cmd_dealloc_uar),
            O::AllocPd => run!(AllocPdIn, cmd_alloc_pd),
            O::DeallocPd => run!(DeallocPdIn, cmd_dealloc_pd),
            O::AllocTransportDomain => run!(AllocTransportDomainIn, cmd_alloc_td),
            O::DeallocTransportDomain => run!(DeallocTransportDomainIn, cmd_dealloc_td),
            O::AllocXrcd => run!(AllocXrcdIn, cmd_alloc_xrcd),
            O::DeallocXrcd => run!(DeallocXrcdIn, cmd_dealloc_xrcd),
            O::AllocQCounter => run!(AllocQCounterIn, cmd_alloc_q_counter),
            O::DeallocQCounter => run!(DeallocQCounterIn, cmd_dealloc_q_counter),
            O::QueryQCounter => run!(QueryQCounterIn, cmd_query_q_counter),
            O::CreateEq => run!(CreateEqIn, cmd_create_eq),
            O::DestroyEq => run!(DestroyEqIn, cmd_destroy_eq),
            O::QueryEq => run!(QueryEqIn, cmd_query_eq),
            O::CreateMkey => run!(CreateMkeyIn, cmd_create_mkey),
            O::DestroyMkey => run!(DestroyMkeyIn, cmd_destroy_mkey),
            O::QueryMkey => run!(QueryMkeyIn, cmd_query_mkey),
            O::CreateCq => run!(CreateCqIn, cmd_create_cq),
            O::DestroyCq => run!(DestroyCqIn, cmd_destroy_cq),
            O::QueryCq => run!(QueryCqIn, cmd_query_cq),
            O::ModifyCq => run!(ModifyCqIn, cmd_modify_cq, op_mod_any),
            O::CreateQp => run!(CreateQpIn, cmd_create_qp),
            O::DestroyQp => run!(DestroyQpIn, cmd_destroy_qp),
            // QUERY_QP's output ends with the QP's page list (or the extended context and the
            // list), written as far as the output reaches: Linux 6.1 reads the context only
            // (272 bytes).
            O::QueryQp => run!(QueryQpIn, cmd_query_qp, op_mod_zero, QUERY_QP_OUT_FIXED),
            O::Rst2initQp => run!(Rst2initQpIn, cmd_rst2init),
            O::Init2rtrQp => run!(Init2rtrQpIn, cmd_init2rtr),
            O::Rtr2rtsQp => run!(Rtr2rtsQpIn, cmd_rtr2rts),
            O::Rts2rtsQp => run!(Rts2rtsQpIn, cmd_rts2rts),
            O::Sqerr2rtsQp => run!(Sqerr2rtsQpIn, cmd_sqerr2rts),
            O::Qp2err => run!(Qp2errIn, cmd_2err),
            O::Qp2rst => run!(Qp2rstIn, cmd_2rst),
            // The ISSI-0 shared receive queue commands and their ISSI-1 replacement, the
            // RMP commands: each family only at its interface step.
            O::CreateSrq | O::DestroySrq | O::QuerySrq | O::ArmRq if self.fw.issi != 0 => {
                Err(Fail::Cmd(CmdStatus::BadOpErr, syndrome::OPCODE_NOT_AT_ISSI))
            }
            O::CreateRmp | O::ModifyRmp | O::QueryRmp | O::DestroyRmp if self.fw.issi == 0 => {
                Err(Fail::Cmd(CmdStatus::BadOpErr, syndrome::OPCODE_NOT_AT_ISSI))
            }
            O::CreateSrq => run!(CreateSrqIn, cmd_create_srq),
            O::DestroySrq => run!(DestroySrqIn, cmd_destroy_srq),
            O::QuerySrq => run!(QuerySrqIn, cmd_query_srq),
            O::ArmRq => run!(ArmRqIn, cmd_arm_rq, op_mod_any),
            O::CreateRmp => run!(CreateRmpIn, cmd_create_rmp),
            O::ModifyRmp => run!(ModifyRmpIn, cmd_modify_rmp),
            O::QueryRmp => run!(QueryRmpIn, cmd_query_rmp),
            O::DestroyRmp => run!(DestroyRmpIn, cmd_destroy_rmp),
            O::CreateXrcSrq => run!(CreateXrcSrqIn, cmd_create_xrc_srq),
            O::DestroyXrcSrq => run!(DestroyXrcSrqIn, cmd_destroy_xrc_srq),
            O::QueryXrcSrq => run!(QueryXrcSrqIn, cmd_query_xrc_srq),
            O::ArmXrcSrq => run!(ArmXrcSrqIn, cmd_arm_xrc_srq, op_mod_any),
            O::QueryNicVportContext => run!(QueryNicVportContextIn, cmd_query_nic_vport),
            O::ModifyNicVportContext => run!(ModifyNicVportContextIn, cmd_modify_nic_vport),
            O::QueryHcaVportContext => run!(QueryHcaVportContextIn, cmd_query_hca_vport),
            O::QueryHcaVportGid => run!(QueryHcaVportGidIn, cmd_query_hca_vport_gid),
            O::QueryHcaVportPkey => run!(QueryHcaVportPkeyIn, cmd_query_hca_vport_pkey),
            O::QueryVportState => run!(QueryVportStateIn, cmd_query_vport_state, op_mod_any),
            O::SetRoceAddress => run!(SetRoceAddressIn, cmd_set_roce_address),
            O::QueryRoceAddress => run!(QueryRoceAddressIn, cmd_query_roce_address),
            O::MadIfc => run!(MadIfcIn, cmd_mad_ifc, op_mod_any),
            _ => Err(Fail::Cmd(CmdStatus::BadOpErr, syndrome::BAD_OPCODE)),
        }
    }
}

/// Copies one field from `src` to `dst` (both images of the same layout, or of layouts that
/// nest `field` at `base_bits`).
pub(crate) fn copy_field(dst: &mut [u8], src: &[u8], base_bits: u32, f: uhca_fwif::Field) {
    let off = (base_bits + f.bit_offset) as usize;
    let w = f.bit_width as usize;
    if w == 0 {
        return;
    }
    if w <= 64 {
        let v = uhca_fwif::field::get_bits(src, off, w);
        uhca_fwif::field::set_bits(dst, off, w, v);
    } else {
        // Byte strings (GIDs): byte aligned by declaration.
        let (a, b) = (off / 8, (off + w) / 8);
        dst[a..b].copy_from_slice(&src[a..b]);
    }
}

/// Number of pages a buffer of `bytes` needs with pages of `page_size` bytes.
pub(crate) fn pages_for(bytes: u64, page_size: u64) -> u64 {
    bytes.div_ceil(page_size)
}
