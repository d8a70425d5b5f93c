//! One HCA: bring-up, command execution while serving events, health, teardown.
//!
//! [`Hca::open`] brings a device up in the order rdma-core's VFIO provider uses (Linux's
//! `mlx5_core` is the same apart from where the EQ comes): enable the PCI function, wait
//! for the firmware, set up the command queue, ENABLE_HCA, QUERY_ISSI/SET_ISSI, boot pages,
//! the host-endianness register, QUERY_HCA_CAP/SET_HCA_CAP (general, RoCE, and atomic:
//! 8-byte atomic results in host order), init pages,
//! INIT_HCA, RoCE enable on Ethernet ports, ALLOC_UAR, and an EQ for command completions,
//! page requests, port changes, CQ and QP errors and internal errors. From then on every
//! command completes through that EQ, and page requests are answered while commands wait.
//!
//! [`Hca::close`] (or dropping the [`Hca`]) first destroys the objects dropped without
//! `destroy` ([`crate::release`]), then tears down in the opposite order: DESTROY_EQ,
//! DEALLOC_UAR, TEARDOWN_HCA (fast when the device supports it), page reclaim,
//! DISABLE_HCA, bus mastering off, and only then is DMA memory freed.

use uhca_fwif::cmd::{
    ACCESS_REGISTER_OP_MOD_WRITE, AccessRegisterIn, AllocUarIn, Command, CreateEqIn, DeallocPdIn,
    DeallocTransportDomainIn, DeallocUarIn, DestroyCqIn, DestroyEqIn, DestroyMkeyIn, DestroyQpIn,
    DestroyRmpIn, DisableHcaIn, EnableHcaIn, InitHcaIn, ModifyNicVportContextIn, QueryHcaCapIn,
    QueryIssiIn, QueryPagesIn, REG_HOST_ENDIANNESS, SetHcaCapIn, SetIssiIn, TeardownHcaIn,
    query_hca_cap_op_mod, set_hca_cap_op_mod,
};
use uhca_fwif::consts::{ADAPTER_PAGE_SIZE, CmdStatus, HcaCapMode, HcaCapType, QueryPagesOpMod};
use uhca_fwif::ctx::{AtomicCaps, CmdHcaCap, RegisterHostEndianness, RoceCap};
use uhca_fwif::zerocopy::IntoBytes;
use uhca_hal::Platform;
use uhca_hal::cmdq::{CmdError, CmdQueue, CmdQueueConfig, CompletionMode, WaitContext};
use uhca_hal::dma::{DmaBuf, DmaMem};
use uhca_hal::eq::EqRing;
use uhca_hal::init_seg::{
    FW_INIT_TIMEOUT_NS, FW_PRE_INIT_TIMEOUT_NS, FatalHealth, HealthMonitor, HealthStatus, InitSeg,
    NicInterface,
};

use crate::caps::{
    DeviceCaps, LinkLayer, RoceCaps, atomic_caps_to_set, atomics_offered, general_caps_to_set,
    roce_caps_to_set,
};
use crate::error::{Arg, Error, InvalidArgument, Result};
pub use crate::events::{AsyncEvent, MAX_PENDING_EVENTS, NUM_SPARE_EQE};
use crate::events::{EQ_EVENTS, EventQueue, EventService};
use crate::pages::{PageFunction, PageOwners, PagePool, give_pages, take_pages_once};
use crate::release::{AfterClose, ObjectKind, ReleaseQueue, Ticket};

/// PCI vendor id of Mellanox/NVIDIA networking.
pub const MELLANOX_VENDOR_ID: u16 = 0x15b3;
/// PCI configuration-space offset of the command register.
const PCI_COMMAND: u16 = 0x04;
/// Command register: memory space enable.
const PCI_COMMAND_MEMORY: u16 = 1 << 1;
/// Command register: bus master enable.
const PCI_COMMAND_MASTER: u16 = 1 << 2;

/// TEARDOWN_HCA profiles.
const TEARDOWN_GRACEFUL: u16 = 0;
const TEARDOWN_PREPARE_FAST: u16 = 2;
/// How long a fast teardown may take to disable the NIC interface (Linux: 3 s).
const FAST_TEARDOWN_TIMEOUT_NS: u64 = 3_000_000_000;
/// How long page reclaim at teardown waits for the firmware to return pages, from its
/// last progress (Linux `lib/tout.c` RECLAIM_PAGES, 5 s, in `mlx5_reclaim_root_pages`).
const RECLAIM_PAGES_TIMEOUT_NS: u64 = 5_000_000_000;
/// Pause between MANAGE_PAGES TAKE commands after an empty reply at teardown.
const RECLAIM_RETRY_US: u32 = 1_000;
/// The identity of the next HCA opened in this process.
static NEXT_HCA_ID: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(1);
/// Most EQ pages the driver's CREATE_EQ lists (so at most 4096 EQEs).
const MAX_EQ_PAGES: usize = 64;

/// How to tear the HCA down.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TeardownMode {
    /// Fast teardown when the device supports it, graceful otherwise (the default).
    #[default]
    Auto,
    /// Always graceful: the firmware returns its pages one by one.
    Graceful,
}

/// Settings for bring-up and command execution. The defaults are Linux's timeouts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HcaConfig {
    /// How long to wait for the firmware before the command queue exists (120 s).
    pub fw_pre_init_timeout_ns: u64,
    /// How long to wait for the firmware after the command queue address is set (2 s).
    pub fw_init_timeout_ns: u64,
    /// How long one command may take (60 s).
    pub cmd_timeout_ns: u64,
    /// Delay between checks while waiting, microseconds.
    pub poll_us: u32,
    /// log2 of the number of events the driver's event queue holds before it is served
    /// (command completions, page requests, asynchronous events, and one completion event
    /// per armed CQ). The queue gets [`NUM_SPARE_EQE`] more entries, rounded up to a power
    /// of two, as Linux and rdma-core size theirs; at most 11.
    pub log_eq_size: u8,
    /// How to tear down.
    pub teardown: TeardownMode,
    /// The most 4 KiB pages the firmware may hold at once (boot, init and run-time pages
    /// together): a request beyond it gets [`Error::PageBudget`] before anything is
    /// allocated, so a device asking for absurd amounts cannot grow host memory. At most
    /// and by default [`MAX_FIRMWARE_PAGES`](crate::pages::MAX_FIRMWARE_PAGES) (256 MiB).
    pub max_firmware_pages: u32,
}

impl Default for HcaConfig {
    fn default() -> Self {
        HcaConfig {
            fw_pre_init_timeout_ns: FW_PRE_INIT_TIMEOUT_NS,
            fw_init_timeout_ns: FW_INIT_TIMEOUT_NS,
            cmd_timeout_ns: uhca_hal::cmdq::CMD_TIMEOUT_NS,
            poll_us: 10,
            log_eq_size: 7,
            teardown: TeardownMode::Auto,
            max_firmware_pages: crate::pages::MAX_FIRMWARE_PAGES,
        }
    }
}

/// Bring-up facts worth showing a user (`devinfo`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BringUpInfo {
    /// Firmware version (major, minor, subminor).
    pub fw_version: (u16, u16, u16),
    /// The interface step in use (ISSI).
    pub issi: u16,
    /// Boot pages given.
    pub boot_pages: u32,
    /// Init pages given.
    pub init_pages: u32,
    /// Command-queue slots.
    pub cmdq_slots: usize,
}

/// One HCA, brought up and ready for verbs objects.
pub struct Hca<P: Platform> {
    p: P,
    cfg: HcaConfig,
    // Field order matters for drop: the command queue and the EQ memory are freed before
    // the page pool, and all after `close` has disabled the device.
    cmdq: Option<CmdQueue<P>>,
    /// The EQ, the firmware pages, the events for the user, the live CQ numbers.
    ev: EventService<P>,
    /// This HCA among all opened in the process: every object it creates carries it, so an
    /// object handed to another HCA is refused ([`Error::WrongHca`]).
    id: u64,
    /// Objects dropped without `destroy` (`crate::release`).
    release: ReleaseQueue<P>,
    /// Dropped objects whose destroy failed (their memory leaked).
    objects_leaked: u64,
    health: HealthMonitor,
    fatal: Option<FatalHealth>,
    caps: DeviceCaps,
    hca_cap: CmdHcaCap,
    roce_cap: Option<RoceCap>,
    atomic_caps: Option<AtomicCaps>,
    uar: Option<u32>,
    info: BringUpInfo,
    hca_enabled: bool,
    hca_initialized: bool,
}

impl<P: Platform> core::fmt::Debug for Hca<P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Hca")
            .field("info", &self.info)
            .field("uar", &self.uar)
            .field("pages", &self.ev.pages)
            .field("fatal", &self.fatal)
            .finish_non_exhaustive()
    }
}

impl<P: Platform> Hca<P> {
    /// Brings the device behind `p` up with the default settings.
    ///
    /// # Errors
    ///
    /// Any [`Error`]; on error, whatever was set up is torn down again.
    pub fn open(p: P) -> Result<Self> {
        Self::open_with(p, HcaConfig::default())
    }

    /// Brings the device behind `p` up.
    ///
    /// # Errors
    ///
    /// Any [`Error`]; on error, whatever was set up is torn down again (the returned error
    /// is the first one).
    pub fn open_with(p: P, cfg: HcaConfig) -> Result<Self> {
        let vendor = p.config_read16(0x00)?;
        let device = p.config_read16(0x02)?;
        if vendor != MELLANOX_VENDOR_ID {
            return Err(Error::NotAConnectX { vendor, device });
        }
        let cmd = p.config_read16(PCI_COMMAND)?;
        p.config_write16(PCI_COMMAND, cmd | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER)?;

        let iseg = InitSeg::new(&p);
        iseg.wait_ready(&p, cfg.fw_pre_init_timeout_ns, cfg.poll_us.max(1))?;
        // Before the command queue: once the device knows the queue's address, nothing may
        // fail until the Hca exists to tear it down.
        let release = ReleaseQueue::new(&p, 16)?;
        let cmdq = CmdQueue::new(
            p.clone(),
            CmdQueueConfig {
                timeout_ns: cfg.cmd_timeout_ns,
                poll_us: cfg.poll_us,
                completion: CompletionMode::Polling,
            },
        )?;
        let id = NEXT_HCA_ID.fetch_add(1, core::sync::atomic::Ordering::Relaxed);
        let mut hca = Hca {
            release,
            objects_leaked: 0,
            ev: EventService::new(&p, cfg.max_firmware_pages),
            cmdq: Some(cmdq),
            id,
            health: HealthMonitor::new(),
            fatal: None,
            caps: DeviceCaps::from_hca_cap(&CmdHcaCap::default()),
            hca_cap: CmdHcaCap::default(),
            roce_cap: None,
            atomic_caps: None,
            uar: None,
            info: BringUpInfo {
                fw_version: iseg.fw_rev(),
                issi: 0,
                boot_pages: 0,
                init_pages: 0,
                cmdq_slots: 0,
            },
            hca_enabled: false,
            hca_initialized: false,
            p,
            cfg,
        };
        hca.info.cmdq_slots = hca.cmdq.as_ref().map_or(0, |q| q.slots());
        match hca.bring_up() {
            Ok(()) => Ok(hca),
            Err(e) => {
                let _ = hca.teardown();
                Err(e)
            }
        }
    }

    /// Bring-up after the command queue exists, step by step in the order the device
    /// needs.
    fn bring_up(&mut self) -> Result<()> {
        InitSeg::new(&self.p).wait_ready(
            &self.p,
            self.cfg.fw_init_timeout_ns,
            self.cfg.poll_us.max(1),
        )?;
        self.cmd(&EnableHcaIn::new_cmd())?;
        self.hca_enabled = true;
        self.set_issi()?;
        self.info.boot_pages = self.give_startup_pages(QueryPagesOpMod::BootPages)?;
        self.set_host_endianness()?;
        self.set_general_caps()?;
        self.set_up_roce_caps()?;
        self.set_up_atomics()?;
        self.info.init_pages = self.give_startup_pages(QueryPagesOpMod::InitPages)?;
        self.cmd(&InitHcaIn::new_cmd())?;
        self.hca_initialized = true;
        self.enable_roce()?;
        let uar = self.cmd(&AllocUarIn::new_cmd())?.uar();
        self.uar = Some(uar);
        self.create_eq(uar)?;
        if let Some(q) = self.cmdq.as_mut() {
            q.set_completion_mode(CompletionMode::Events);
        }
        Ok(())
    }

    /// QUERY_ISSI, SET_ISSI 1. ISSI 1 is what every current driver speaks; firmware that
    /// does not know QUERY_ISSI (BAD_OP) only speaks ISSI 0, which this driver does not
    /// support.
    fn set_issi(&mut self) -> Result<()> {
        let issi = match self.cmd(&QueryIssiIn::new_cmd()) {
            Ok(out) => out,
            Err(e) if e.command_status() == Some(CmdStatus::BadOpErr) => {
                return Err(Error::Unsupported(
                    "ISSI 1 (firmware does not know QUERY_ISSI)",
                ));
            }
            Err(e) => return Err(e),
        };
        if issi.supported_issi_dw0() & (1 << 1) == 0 {
            return Err(Error::Unsupported("ISSI 1"));
        }
        self.cmd(SetIssiIn::new_cmd().set_current_issi(1))?;
        self.info.issi = 1;
        Ok(())
    }

    /// The host-endianness register: 0 for a little-endian host, 1 (bit 7) for big.
    fn set_host_endianness(&mut self) -> Result<()> {
        let mut reg = AccessRegisterIn::new_cmd();
        reg.set_op_mod(ACCESS_REGISTER_OP_MOD_WRITE)
            .set_register_id(REG_HOST_ENDIANNESS);
        let mut he = RegisterHostEndianness::default();
        he.set_he(cfg!(target_endian = "big"));
        let mut he_out = [0u8; 16];
        self.exec(&reg, he.as_bytes(), &mut he_out)?;
        Ok(())
    }

    /// QUERY_HCA_CAP (current and maximum), SET_HCA_CAP of what the driver wants, and the
    /// current capabilities read back.
    fn set_general_caps(&mut self) -> Result<()> {
        let cur = self.query_general_caps(HcaCapMode::GetCur)?;
        let max = self.query_general_caps(HcaCapMode::GetMax)?;
        let mut set = SetHcaCapIn::new_cmd();
        set.set_op_mod(set_hca_cap_op_mod(HcaCapType::General));
        *set.cmd_hca_cap_mut() = general_caps_to_set(&cur, &max);
        self.cmd(&set)?;
        self.hca_cap = self.query_general_caps(HcaCapMode::GetCur)?;
        self.caps = DeviceCaps::from_hca_cap(&self.hca_cap);
        Ok(())
    }

    /// The RoCE capability page, set as the driver wants it, on a RoCE-capable device.
    fn set_up_roce_caps(&mut self) -> Result<()> {
        if !self.hca_cap.roce() {
            return Ok(());
        }
        let cur = self.query_roce_caps(HcaCapMode::GetCur)?;
        let max = self.query_roce_caps(HcaCapMode::GetMax)?;
        if let Some(roce) = roce_caps_to_set(&cur, &max) {
            let mut set = SetHcaCapIn::new_cmd();
            set.set_op_mod(set_hca_cap_op_mod(HcaCapType::Roce));
            set.capability_mut()[..RoceCap::default().as_bytes().len()]
                .copy_from_slice(roce.as_bytes());
            self.cmd(&set)?;
        }
        self.roce_cap = Some(self.query_roce_caps(HcaCapMode::GetCur)?);
        Ok(())
    }

    /// RoCE on in the NIC vport context, on an Ethernet port of a RoCE-capable device.
    fn enable_roce(&mut self) -> Result<()> {
        if self.caps.link_layer == LinkLayer::Ethernet && self.hca_cap.roce() {
            let mut m = ModifyNicVportContextIn::new_cmd();
            m.field_select_mut().set_roce_en(true);
            m.nic_vport_context_mut().set_roce_en(true);
            self.cmd(&m)?;
        }
        Ok(())
    }

    fn query_general_caps(&mut self, mode: HcaCapMode) -> Result<CmdHcaCap> {
        let mut q = QueryHcaCapIn::new_cmd();
        q.set_op_mod(query_hca_cap_op_mod(HcaCapType::General, mode));
        Ok(*self.cmd(&q)?.cmd_hca_cap())
    }

    /// Reads the atomic capability page when the device has atomics and asks for the
    /// fetched value in host order, as Linux's `handle_hca_cap_atomic` (`mlx5/core/main.c`)
    /// does; atomics are offered only if the page supports what the driver posts.
    fn set_up_atomics(&mut self) -> Result<()> {
        self.caps.atomic = false;
        if !self.hca_cap.atomic() {
            return Ok(());
        }
        let mut page = self.query_atomic_caps()?;
        if let Some(set_page) = atomic_caps_to_set(&page) {
            let mut set = SetHcaCapIn::new_cmd();
            set.set_op_mod(set_hca_cap_op_mod(HcaCapType::Atomic));
            set.capability_mut()[..AtomicCaps::default().as_bytes().len()]
                .copy_from_slice(set_page.as_bytes());
            self.cmd(&set)?;
            page = self.query_atomic_caps()?;
        }
        self.caps.atomic = atomics_offered(&page);
        self.atomic_caps = Some(page);
        Ok(())
    }

    fn query_atomic_caps(&mut self) -> Result<AtomicCaps> {
        let mut q = QueryHcaCapIn::new_cmd();
        q.set_op_mod(query_hca_cap_op_mod(HcaCapType::Atomic, HcaCapMode::GetCur));
        Ok(*self.cmd(&q)?.atomic_caps())
    }

    fn query_roce_caps(&mut self, mode: HcaCapMode) -> Result<RoceCap> {
        let mut q = QueryHcaCapIn::new_cmd();
        q.set_op_mod(query_hca_cap_op_mod(HcaCapType::Roce, mode));
        Ok(*self.cmd(&q)?.roce_cap())
    }

    /// QUERY_PAGES for boot or init pages, then MANAGE_PAGES to give them.
    fn give_startup_pages(&mut self, which: QueryPagesOpMod) -> Result<u32> {
        let mut q = QueryPagesIn::new_cmd();
        q.set_op_mod(which.raw());
        let out = self.cmd(&q)?;
        let n = out.num_pages() as i32;
        if n < 0 {
            return Err(Error::DeviceMisbehaved(
                "QUERY_PAGES asked to return startup pages",
            ));
        }
        // The pages go to the function the firmware named, not to "function 0".
        let function = PageFunction {
            id: out.function_id(),
            ec: out.embedded_cpu_function(),
        };
        let Hca { cmdq, ev, .. } = self;
        let cmdq = cmdq.as_mut().ok_or(Error::TornDown)?;
        give_pages(
            &mut ev.pages,
            &mut ev.owners,
            function,
            n as u32,
            &mut |i, pas, out| cmdq.manage_pages(i, pas, out),
        )?;
        Ok(n as u32)
    }

    fn create_eq(&mut self, uar: u32) -> Result<()> {
        if self.cfg.log_eq_size > 11 {
            return Err(
                InvalidArgument::max(Arg::LogEqSize, self.cfg.log_eq_size.into(), 11).into(),
            );
        }
        let entries = ((1u32 << self.cfg.log_eq_size) + NUM_SPARE_EQE).next_power_of_two();
        let log = entries.trailing_zeros() as u8;
        let bytes = (64usize << log).next_multiple_of(ADAPTER_PAGE_SIZE);
        let buf = DmaBuf::alloc(self.p.clone(), bytes, ADAPTER_PAGE_SIZE)?;
        let iova = buf.iova();
        // EQ number 0 until the firmware names it; the ring only uses it for doorbells.
        let ring = EqRing::new(buf, 0, log).map_err(|_| {
            InvalidArgument::rule(
                Arg::LogEqSize,
                self.cfg.log_eq_size.into(),
                "the HAL refused the EQ's layout (a driver bug)",
            )
        })?;
        let mut c = CreateEqIn::new_cmd();
        c.eq_context_entry_mut()
            .set_log_eq_size(log)
            .set_uar_page(uar)
            .set_intr(0)
            .set_log_page_size(0);
        let mask: u64 = EQ_EVENTS.iter().fold(0, |m, e| m | 1u64 << e.raw());
        c.event_bitmask_mut()[..8].copy_from_slice(&mask.to_be_bytes());
        let npages = bytes / ADAPTER_PAGE_SIZE;
        let mut pas = [0u8; MAX_EQ_PAGES * 8];
        if npages > MAX_EQ_PAGES {
            return Err(
                InvalidArgument::max(Arg::LogEqSize, self.cfg.log_eq_size.into(), 11).into(),
            );
        }
        for i in 0..npages {
            let a = iova + (i * ADAPTER_PAGE_SIZE) as u64;
            pas[i * 8..i * 8 + 8].copy_from_slice(&a.to_be_bytes());
        }
        let out = self.exec(&c, &pas[..npages * 8], &mut [])?;
        let mut ring = ring;
        ring.set_eqn(out.eq_number());
        let uar_offset = uar as usize * ADAPTER_PAGE_SIZE;
        ring.arm(&self.p, uar_offset);
        self.ev.eq = Some(EventQueue { ring, uar_offset });
        Ok(())
    }

    raw_pub! {
        /// Executes a firmware command, serving events (command completions, page requests,
        /// asynchronous events) while it is outstanding. Objects dropped without `destroy` are
        /// destroyed first ([`crate::release`]). `extra_in` is appended to the input
        /// (a flexible array such as `pas`); `out_extra` receives the output bytes past
        /// `C::Out` (for outputs with a flexible array).
        ///
        /// # Errors
        ///
        /// [`Error::Fatal`] if the device is dead (checked before sending),
        /// [`Error::Command`] if the command fails, [`Error::TornDown`] after teardown.
        fn exec<C: Command>(
            &mut self,
            input: &C,
            extra_in: &[u8],
            out_extra: &mut [u8],
        ) -> Result<C::Out> {
            self.release_dropped();
            self.exec_now(input, extra_in, out_extra)
        }
    }

    /// Sends a command with no flexible input or output array: [`Hca::exec`] for the
    /// common case, so that a call reads as the command it sends.
    ///
    /// # Errors
    ///
    /// As [`Hca::exec`].
    pub(crate) fn cmd<C: Command>(&mut self, input: &C) -> Result<C::Out> {
        self.exec(input, &[], &mut [])
    }

    /// [`Hca::cmd`] without releasing dropped objects first.
    fn cmd_now<C: Command>(&mut self, input: &C) -> Result<C::Out> {
        self.exec_now(input, &[], &mut [])
    }

    /// [`Hca::exec`] without releasing dropped objects first.
    fn exec_now<C: Command>(
        &mut self,
        input: &C,
        extra_in: &[u8],
        out_extra: &mut [u8],
    ) -> Result<C::Out> {
        self.check_fatal()?;
        let Hca { p, cmdq, ev, .. } = self;
        let cmdq = cmdq.as_mut().ok_or(Error::TornDown)?;
        let mut hook_error = None;
        let result = if ev.eq.is_some() {
            let mut serve = |ctx: &mut WaitContext<'_, P>| {
                let mut completed = 0u32;
                let r = ev.serve(p, &mut |v| completed |= v, &mut |i, pas, out| {
                    ctx.manage_pages(i, pas, out)
                });
                if completed != 0 {
                    ctx.report_completions(completed);
                }
                if let Err(e) = r {
                    hook_error.get_or_insert(e);
                }
                // A device that turned fatal will never complete the command (its
                // completion EQE may be the one an overrun lost): give it up now
                // rather than at the command timeout; the error is classified as
                // fatal below.
                if HealthMonitor::new().poll(&InitSeg::new(p)).is_err() {
                    ctx.abandon();
                }
            };
            cmdq.exec_with(input, extra_in, out_extra, &mut serve)
        } else {
            cmdq.exec(input, extra_in, out_extra)
        };
        let out = match (result, hook_error) {
            // The command failed because the firmware could not have the pages the budget
            // refused: the budget is the cause worth reporting (unless the device died).
            (Err(e), Some(budget @ Error::PageBudget { .. })) => {
                return Err(match self.classify(e) {
                    fatal @ Error::Fatal(_) => fatal,
                    _ => budget,
                });
            }
            (result, hook_error) => {
                let out = result.map_err(|e| self.classify(e))?;
                if let Some(e) = hook_error {
                    return Err(e);
                }
                out
            }
        };
        Ok(out)
    }

    /// A command error after which the device turned out to be dead is reported as fatal.
    fn classify(&mut self, e: CmdError) -> Error {
        match self.check_fatal() {
            Err(fatal) => fatal,
            Ok(()) => Error::Command(e),
        }
    }

    /// Checks the fatal health sensors now (no history needed): firmware version all ones,
    /// NIC interface disabled or in reset, recovery flow required.
    fn check_fatal(&mut self) -> Result<()> {
        if let Some(f) = self.fatal {
            return Err(Error::Fatal(f));
        }
        if let Err(f) = HealthMonitor::new().poll(&InitSeg::new(&self.p)) {
            self.fatal = Some(f);
            return Err(Error::Fatal(f));
        }
        Ok(())
    }

    /// Polls the device's health, including the health counter's liveness (call it at a
    /// steady interval, about once a second; three polls without the counter moving mean
    /// the firmware is dead). A fatal state is remembered: every later call fails with
    /// [`Error::Fatal`] instead of waiting on a dead device.
    ///
    /// # Errors
    ///
    /// [`Error::Fatal`].
    pub fn poll_health(&mut self) -> Result<HealthStatus> {
        if let Some(f) = self.fatal {
            return Err(Error::Fatal(f));
        }
        match self.health.poll(&InitSeg::new(&self.p)) {
            Ok(s) => Ok(s),
            Err(f) => {
                self.fatal = Some(f);
                Err(Error::Fatal(f))
            }
        }
    }

    /// Serves the event queue outside a command: answers page requests and collects
    /// asynchronous events. Call it from the application's loop (rdma-core's VFIO provider
    /// asks the same of its users). Objects dropped without `destroy` are destroyed here
    /// too ([`crate::release`]).
    ///
    /// # Errors
    ///
    /// [`Error::Fatal`], or the error of a page command.
    pub fn process_events(&mut self) -> Result<()> {
        self.check_fatal()?;
        self.release_dropped();
        let Hca { p, cmdq, ev, .. } = self;
        let (Some(cmdq), true) = (cmdq.as_mut(), ev.eq.is_some()) else {
            return Err(Error::TornDown);
        };
        let mut completed = 0u32;
        let r = ev.serve(p, &mut |v| completed |= v, &mut |i, pas, out| {
            cmdq.manage_pages(i, pas, out)
        });
        if completed != 0 {
            cmdq.report_completions(completed);
        }
        r
    }

    /// Sends the destroy commands of the objects dropped without `destroy` (in release
    /// order: QPs, SRQs, CQs, memory keys, PDs, transport domains) and frees each one's
    /// memory once its destroy succeeded. An object the device finds busy (still used by
    /// another the application holds) waits for the next round; one whose destroy fails
    /// otherwise is leaked, counted and reported ([`AsyncEvent::ReleaseFailed`]). On a dead
    /// device nothing is sent: teardown frees the memory once bus mastering is off.
    fn release_dropped(&mut self) {
        if self.fatal.is_some() || self.cmdq.is_none() {
            return;
        }
        if !self.release.has_work() {
            return;
        }
        while let Some(d) = self.release.take_next() {
            let r = self.destroy_now(d.kind, d.number);
            match r {
                Ok(()) => {
                    if let Some(q) = &d.qp {
                        // Its CQEs still in a CQ are dropped from now on.
                        q.mark_destroyed();
                    }
                    if d.kind == ObjectKind::Cq {
                        // Completion events still waiting for this CQ go with it.
                        while self.ev.log.completions.take(d.number) {}
                        self.ev.cq_numbers.remove(d.number);
                    }
                    // The device no longer uses the memory: free it.
                    drop(d);
                    self.release.finished();
                }
                Err(e) if e.command_status() == Some(CmdStatus::ResBusy) => {
                    self.release.put_back(d);
                }
                Err(Error::Fatal(_)) => {
                    // Teardown frees it once bus mastering is off.
                    self.release.put_back(d);
                    return;
                }
                Err(_) => {
                    let (object, number) = (d.kind, d.number);
                    d.held.leak();
                    self.release.finished();
                    self.objects_leaked += 1;
                    self.ev
                        .log
                        .push(AsyncEvent::ReleaseFailed { object, number });
                }
            }
        }
    }

    /// Destroys one object: the destroy path `destroy` and a creation rolled back share
    /// with the release of dropped objects (objects dropped before are released first, as
    /// before every command).
    ///
    /// # Errors
    ///
    /// The command's error (RES_BUSY while another object uses it).
    pub(crate) fn destroy_object(&mut self, kind: ObjectKind, number: u32) -> Result<()> {
        self.release_dropped();
        self.destroy_now(kind, number)
    }

    /// Undoes a creation that failed after its create command succeeded: destroys the
    /// object, then frees `mem`. If the destroy fails the memory is leaked (the device may
    /// still use it), counted and reported as for a dropped object
    /// ([`AsyncEvent::ReleaseFailed`]).
    pub(crate) fn roll_back<M>(&mut self, kind: ObjectKind, number: u32, mem: M) {
        match self.destroy_object(kind, number) {
            Ok(()) => drop(mem),
            Err(_) => {
                core::mem::forget(mem);
                self.objects_leaked += 1;
                self.ev.log.push(AsyncEvent::ReleaseFailed {
                    object: kind,
                    number,
                });
            }
        }
    }

    /// The destroy command of each kind of object, built here only, sent without
    /// releasing dropped objects first.
    fn destroy_now(&mut self, kind: ObjectKind, n: u32) -> Result<()> {
        match kind {
            ObjectKind::Qp => self.cmd_now(DestroyQpIn::new_cmd().set_qpn(n)).map(drop),
            ObjectKind::Srq => self.cmd_now(DestroyRmpIn::new_cmd().set_rmpn(n)).map(drop),
            ObjectKind::Cq => self.cmd_now(DestroyCqIn::new_cmd().set_cqn(n)).map(drop),
            ObjectKind::Mr => self
                .cmd_now(DestroyMkeyIn::new_cmd().set_mkey_index(n))
                .map(drop),
            ObjectKind::Pd => self.cmd_now(DeallocPdIn::new_cmd().set_pd(n)).map(drop),
            ObjectKind::TransportDomain => self
                .cmd_now(DeallocTransportDomainIn::new_cmd().set_transport_domain(n))
                .map(drop),
        }
    }

    /// A reservation in the release queue for an object about to be created (so that
    /// dropping it never allocates).
    pub(crate) fn release_ticket(&self) -> Result<Ticket<P>> {
        self.release.reserve()
    }

    /// Objects dropped without `destroy` whose destroy command then failed: their memory
    /// is leaked (never freed), since the device may still use it. Each one is also
    /// reported as an [`AsyncEvent::ReleaseFailed`].
    pub fn objects_leaked(&self) -> u64 {
        self.objects_leaked
    }

    /// The next asynchronous event, oldest first.
    pub fn next_event(&mut self) -> Option<AsyncEvent> {
        self.ev.log.pending.pop_front()
    }

    /// Events dropped because the user did not read them fast enough.
    pub fn events_dropped(&self) -> u64 {
        self.ev.log.dropped
    }

    /// The CQ of the next completion event (`ibv_get_cq_event`), oldest first. Events
    /// arrive when [`Hca::process_events`] (or a command) serves the event queue; the CQ
    /// must have been armed ([`Cq::req_notify`](crate::verbs::Cq::req_notify)). Tell the
    /// CQ with [`Cq::ack_event`](crate::verbs::Cq::ack_event) before arming it again.
    pub fn next_completion_event(&mut self) -> Option<u32> {
        self.ev.log.completions.pop()
    }

    /// Whether a completion event of CQ `cqn` is waiting (without taking it): what makes a
    /// completion channel readable.
    pub fn has_completion_event(&self, cqn: u32) -> bool {
        self.ev.log.completions.has(cqn)
    }

    /// Whether an asynchronous event is waiting for [`Hca::next_event`] (without taking it).
    pub fn has_async_event(&self) -> bool {
        !self.ev.log.pending.is_empty()
    }

    /// Takes one completion event of CQ `cqn`, if one is waiting.
    pub fn take_completion_event(&mut self, cqn: u32) -> bool {
        self.ev.log.completions.take(cqn)
    }

    /// Completion and CQ error events the device raised for a CQ this HCA does not have
    /// (dropped: a device bug, or a hostile one).
    pub fn unknown_cq_events(&self) -> u64 {
        self.ev.log.unknown_cq
    }

    /// Notes a CQ about to be created (room for its number first, so that noting it
    /// after cannot fail), created, and destroyed.
    pub(crate) fn reserve_cq_number(&mut self) -> Result<()> {
        self.ev.cq_numbers.reserve_one()
    }

    pub(crate) fn cq_created(&mut self, cqn: u32) {
        self.ev.cq_numbers.insert(cqn);
    }

    pub(crate) fn cq_destroyed(&mut self, cqn: u32) {
        self.ev.cq_numbers.remove(cqn);
    }

    /// Notes a QP created (its state moves to ERR on a QP-fatal event). A destroyed QP
    /// needs no note: marked destroyed, it stays in the map as a tombstone.
    pub(crate) fn qp_created(&mut self, qp: crate::verbs::dp::QpHandle<P>) -> Result<()> {
        match self.ev.qps.as_mut() {
            Some(map) => map.insert(qp),
            None => {
                let mut map = crate::verbs::dp::QpMap::new(self.platform().clone(), 16)?;
                map.insert(qp)?;
                self.ev.qps = Some(map);
                Ok(())
            }
        }
    }

    /// Completion events dropped because events of too many CQs were waiting
    /// ([`MAX_PENDING_CQ_EVENTS`](crate::verbs::MAX_PENDING_CQ_EVENTS)).
    pub fn completion_events_dropped(&self) -> u64 {
        self.ev.log.completions.dropped
    }

    /// This HCA's identity among the HCAs of the process (objects carry it).
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Checks that an object carrying HCA identity `id` was created by this HCA.
    ///
    /// # Errors
    ///
    /// [`Error::WrongHca`].
    #[inline]
    pub(crate) fn check_owner(&self, id: u64) -> Result<()> {
        if id == self.id {
            Ok(())
        } else {
            Err(Error::WrongHca)
        }
    }

    /// The platform.
    pub fn platform(&self) -> &P {
        &self.p
    }

    /// The decoded general capabilities (current, after SET_HCA_CAP).
    pub fn caps(&self) -> &DeviceCaps {
        &self.caps
    }

    /// The raw general capabilities (current).
    pub fn hca_cap(&self) -> &CmdHcaCap {
        &self.hca_cap
    }

    /// The decoded RoCE capabilities, on a RoCE-capable device.
    pub fn roce_caps(&self) -> Option<RoceCaps> {
        self.roce_cap.as_ref().map(RoceCaps::from_roce_cap)
    }

    /// The raw RoCE capabilities (current), on a RoCE-capable device.
    pub(crate) fn roce_cap(&self) -> Option<&RoceCap> {
        self.roce_cap.as_ref()
    }

    /// The atomic capability page (current, after SET_HCA_CAP), on a device with the
    /// `atomic` capability.
    pub fn atomic_caps(&self) -> Option<&AtomicCaps> {
        self.atomic_caps.as_ref()
    }

    /// Bring-up facts.
    pub fn info(&self) -> &BringUpInfo {
        &self.info
    }

    /// Pages the firmware holds now.
    pub fn firmware_pages(&self) -> usize {
        self.ev.pages.given()
    }

    /// The UAR page the driver allocated (its doorbells are at `uar * 4096` in BAR0).
    pub fn uar(&self) -> u32 {
        self.uar.unwrap_or(0)
    }

    /// The EQ number of the driver's event queue (completion events of CQs go there).
    pub fn eqn(&self) -> u8 {
        self.ev.eq.as_ref().map_or(0, |e| e.ring.eqn())
    }

    /// The fatal health state, if the device died.
    pub fn fatal(&self) -> Option<FatalHealth> {
        self.fatal
    }

    raw_pub! {
        /// Allocates coherent DMA memory for a queue or doorbell record.
        ///
        /// # Errors
        ///
        /// [`Error::Dma`].
        fn alloc_dma(&self, len: usize, align: usize) -> Result<DmaBuf<P>> {
            Ok(DmaBuf::alloc(self.p.clone(), len, align)?)
        }
    }

    /// Tears the HCA down and reports what happened.
    ///
    /// # Errors
    ///
    /// The first error met; teardown goes on past errors and always disables bus mastering
    /// before freeing DMA memory.
    pub fn close(mut self) -> Result<()> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<()> {
        let mut first: Result<()> = Ok(());
        let mut note = |r: Result<()>| {
            if let (Ok(()), Err(e)) = (&first, r) {
                first = Err(e);
            }
        };
        let alive = self.cmdq.is_some() && self.check_fatal().is_ok();
        if alive {
            // Objects dropped without destroy go first, while the device can still
            // destroy them and before DESTROY_EQ (a CQ still on the EQ makes it fail).
            self.release_dropped();
        }
        // The EQ's memory stays allocated until the device can no longer write it: if
        // DESTROY_EQ fails (objects still use it), the device keeps posting events there.
        let mut retired_eq = None;
        if alive {
            if let Some(eq) = self.ev.eq.take() {
                let mut d = DestroyEqIn::new_cmd();
                d.set_eq_number(eq.ring.eqn());
                // The EQ is going away: commands complete by polling from here on.
                if let Some(q) = self.cmdq.as_mut() {
                    q.set_completion_mode(CompletionMode::Polling);
                }
                retired_eq = Some(eq);
                note(self.cmd(&d).map(drop));
            }
            if let Some(uar) = self.uar.take() {
                let mut d = DeallocUarIn::new_cmd();
                d.set_uar(uar);
                note(self.cmd(&d).map(drop));
            }
            if self.hca_initialized {
                note(self.teardown_hca());
            }
            if self.hca_enabled && self.ev.pages.given() > 0 {
                note(self.reclaim_pages());
            }
            if self.hca_enabled {
                note(self.cmd(&DisableHcaIn::new_cmd()).map(drop));
                self.hca_enabled = false;
            }
        } else if let Some(f) = self.fatal {
            note(Err(Error::Fatal(f)));
        }
        // No more DMA from the device, then free everything it could have touched. If bus
        // mastering cannot be turned off, the memory is leaked instead: the device might
        // still write it.
        let quiet = self.p.config_read16(PCI_COMMAND).and_then(|cmd| {
            self.p
                .config_write16(PCI_COMMAND, cmd & !PCI_COMMAND_MASTER)
        });
        match quiet {
            Ok(()) => {
                self.release.close(AfterClose::Free);
                drop(retired_eq);
                self.ev.eq = None;
                self.cmdq = None;
                self.ev.pages.forget_all();
                self.ev.owners = PageOwners::default();
                self.ev.pages.shrink();
            }
            Err(e) => {
                note(Err(Error::from(e)));
                self.release.close(AfterClose::Leak);
                core::mem::forget(retired_eq);
                core::mem::forget(self.ev.eq.take());
                core::mem::forget(self.cmdq.take());
                let pages = core::mem::replace(
                    &mut self.ev.pages,
                    PagePool::with_budget(self.p.clone(), self.cfg.max_firmware_pages),
                );
                core::mem::forget(pages);
            }
        }
        first
    }

    fn teardown_hca(&mut self) -> Result<()> {
        self.hca_initialized = false;
        if self.cfg.teardown == TeardownMode::Auto && self.caps.fast_teardown {
            let mut t = TeardownHcaIn::new_cmd();
            t.set_profile(TEARDOWN_PREPARE_FAST);
            // `state` 0 is FORCE_STATE_SUCCESS: the firmware is ready for the NIC
            // interface to be disabled.
            if !self.cmd(&t)?.state() {
                let iseg = InitSeg::new(&self.p);
                iseg.set_nic_interface(NicInterface::Disabled);
                let start = self.p.now_ns();
                while iseg.nic_interface() != NicInterface::Disabled {
                    if self.p.now_ns().saturating_sub(start) > FAST_TEARDOWN_TIMEOUT_NS {
                        return Err(Error::DeviceMisbehaved("NIC interface did not disable"));
                    }
                    self.p.delay_us(self.cfg.poll_us.max(1));
                }
                // The firmware let go of its pages and the function is disabled.
                self.ev.pages.forget_all();
                self.ev.owners = PageOwners::default();
                self.hca_enabled = false;
                return Ok(());
            }
        }
        let mut t = TeardownHcaIn::new_cmd();
        t.set_profile(TEARDOWN_GRACEFUL);
        self.cmd(&t)?;
        Ok(())
    }

    /// Takes every page back after TEARDOWN_HCA, function by function. The firmware may
    /// return fewer pages than asked, or none for a while: as Linux's
    /// `mlx5_reclaim_root_pages` (`pagealloc.c`), keep asking until it has returned them
    /// all, and give up only when it made no progress for [`RECLAIM_PAGES_TIMEOUT_NS`].
    fn reclaim_pages(&mut self) -> Result<()> {
        let Hca { p, cmdq, ev, .. } = self;
        let (pages, page_owners) = (&mut ev.pages, &mut ev.owners);
        let cmdq = cmdq.as_mut().ok_or(Error::TornDown)?;
        let mut last_progress = p.now_ns();
        while let Some(function) = page_owners.first() {
            let n = page_owners.count(function);
            let got = take_pages_once(pages, page_owners, function, n, &mut |i, pas, out| {
                cmdq.manage_pages(i, pas, out)
            })?;
            if got > 0 {
                last_progress = p.now_ns();
            } else if p.now_ns().saturating_sub(last_progress) >= RECLAIM_PAGES_TIMEOUT_NS {
                return Err(Error::DeviceMisbehaved(
                    "firmware kept pages after teardown",
                ));
            } else {
                p.delay_us(RECLAIM_RETRY_US);
            }
        }
        if pages.given() > 0 {
            return Err(Error::DeviceMisbehaved(
                "firmware kept pages after teardown",
            ));
        }
        Ok(())
    }
}

impl<P: Platform> Drop for Hca<P> {
    fn drop(&mut self) {
        if self.cmdq.is_some() {
            let _ = self.teardown();
        }
    }
}
