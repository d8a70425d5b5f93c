//! The public face of the model: [`MockHca`] (the device, for tests and users) and
//! [`MockPlatform`] (the handle a driver uses, implementing the HAL's platform traits).

use crate::caps::LinkLayer;
use crate::clock::{ClockMode, ModelClock};
use crate::device::Device;
use crate::faults::{ArmedCommandFault, CommandFault};
use crate::firmware::HcaState;
use crate::iommu::IommuFault;
use crate::log::{CommandBytes, CommandRecord, DoorbellRecord, Note, Ring};
use crate::pci::{BAR0_SIZE, CONFIG_SPACE_SIZE, PCI_COMMAND_MASTER};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};
use uhca_fwif::consts::{CmdOpcode, CmdStatus, PortChangeSubtype, QpState};
use uhca_hal::{Bar, Clock, ConfigError, Dma, DmaError, DmaRegion, PciConfig};

/// How to build a mock HCA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MockConfig {
    /// The port's link layer, InfiniBand or Ethernet (RoCE): `cmd_hca_cap.port_type`. Sets
    /// the PCI class code and the capabilities.
    pub port_type: LinkLayer,
    /// Virtual (deterministic) or real-time clock.
    pub clock: ClockMode,
    /// How long the firmware reports `initializing` after power-on or reset, in
    /// microseconds of model time.
    pub init_delay_us: u64,
    /// Pages QUERY_PAGES reports as boot pages.
    pub boot_pages: u32,
    /// Pages QUERY_PAGES reports as init pages (needed by INIT_HCA).
    pub init_pages: u32,
    /// Regular pages the firmware needs after INIT_HCA before it creates CQs, QPs, SRQs and
    /// memory keys; it asks for them with PAGE_REQUEST events (or they can be given up
    /// front after QUERY_PAGES).
    pub regular_pages: u32,
    /// log2 of the number of command-queue slots (read-only `log_cmdq_size`), at most 5.
    pub log_cmdq_size: u8,
    /// Firmware revision (major, minor, subminor).
    pub fw_rev: (u16, u16, u16),
    /// The port's MAC address (the node GUID is derived from it).
    pub mac: [u8; 6],
    /// InfiniBand: the port's LID.
    pub lid: u16,
    /// InfiniBand: the subnet manager's LID.
    pub sm_lid: u16,
    /// Whether the port is up (ACTIVE) at power-on.
    pub port_up: bool,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            port_type: LinkLayer::Ethernet,
            clock: ClockMode::Virtual,
            init_delay_us: 1_000,
            boot_pages: 8,
            init_pages: 32,
            regular_pages: 16,
            log_cmdq_size: 5,
            fw_rev: (22, 39, 1002),
            mac: [0x02, 0xc0, 0xff, 0xee, 0x00, 0x01],
            lid: 1,
            sm_lid: 1,
            port_up: true,
        }
    }
}

impl MockConfig {
    /// An Ethernet (RoCE) function with default settings.
    pub fn ethernet() -> Self {
        Self::default()
    }

    /// An Ethernet function whose RoCEv2 port is to be a UDP socket at `ip` (as
    /// [`MockHca::udp`](crate::MockHca::udp) makes it): its MAC, and so its GUIDs, from the
    /// address, locally administered (`02:00` then the address's four bytes), so that two
    /// processes on two addresses get distinct ones.
    pub fn udp(ip: std::net::Ipv4Addr) -> Self {
        let [a, b, c, d] = ip.octets();
        MockConfig {
            mac: [2, 0, a, b, c, d],
            ..Self::ethernet()
        }
    }

    /// An InfiniBand function with default settings.
    pub fn infiniband() -> Self {
        MockConfig {
            port_type: LinkLayer::InfiniBand,
            ..Self::default()
        }
    }

    /// The node (and port) GUID: the MAC address as a modified EUI-64.
    pub fn node_guid(&self) -> u64 {
        let m = self.mac;
        u64::from_be_bytes([m[0] ^ 0x02, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]])
    }
}

/// Counts of the firmware's objects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ObjectCounts {
    /// UAR pages.
    pub uars: usize,
    /// Protection domains.
    pub pds: usize,
    /// Transport domains.
    pub transport_domains: usize,
    /// Memory keys.
    pub mkeys: usize,
    /// Event queues.
    pub eqs: usize,
    /// Completion queues.
    pub cqs: usize,
    /// Queue pairs.
    pub qps: usize,
    /// Shared receive queues (SRQs at ISSI 0, RMPs at ISSI 1).
    pub srqs: usize,
    /// Queue counters.
    pub q_counters: usize,
}

/// Page accounting as the firmware sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PageCounts {
    /// Pages the driver gave and the firmware holds.
    pub held: usize,
    /// Boot pages still missing.
    pub boot_outstanding: u32,
    /// Init pages still missing.
    pub init_outstanding: u32,
    /// Regular pages still missing.
    pub regular_outstanding: u32,
    /// Pages asked for with PAGE_REQUEST events and not given yet.
    pub requested: u32,
}

struct Shared {
    clock: ModelClock,
    dev: Mutex<Device>,
    /// Called after a BAR write left frames to send (a send doorbell): a real-time fabric
    /// pump installs it to move them at once instead of at its next period.
    kick: Mutex<Option<Kick>>,
}

/// What a fabric pump runs when an HCA has frames to send.
pub(crate) type Kick = Arc<dyn Fn() + Send + Sync>;

/// A mock ConnectX HCA: one PCI function with its firmware. Cheap to clone (clones share the
/// device); several can live in one process.
#[derive(Clone)]
pub struct MockHca {
    shared: Arc<Shared>,
}

impl core::fmt::Debug for MockHca {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MockHca")
            .field("port_type", &self.config().port_type)
            .finish_non_exhaustive()
    }
}

/// The platform handle a driver uses for one mock HCA: BAR0, DMA memory behind the model's
/// IOMMU, PCI configuration space and the model's clock. Implements
/// [`uhca_hal::Platform`]. Cheap to clone.
#[derive(Clone)]
pub struct MockPlatform {
    shared: Arc<Shared>,
}

impl core::fmt::Debug for MockPlatform {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("MockPlatform").finish_non_exhaustive()
    }
}

fn lock(shared: &Shared) -> MutexGuard<'_, Device> {
    shared.dev.lock().unwrap_or_else(|e| e.into_inner())
}

impl Default for MockHca {
    /// An Ethernet (RoCE) HCA with the default configuration.
    fn default() -> Self {
        MockHca::new(MockConfig::default())
    }
}

impl MockHca {
    /// Powers on a mock HCA.
    ///
    /// # Panics
    ///
    /// If `config.log_cmdq_size` is above 5 (the command queue must fit one 4 KiB page).
    pub fn new(mut config: MockConfig) -> Self {
        assert!(config.log_cmdq_size <= 5, "log_cmdq_size above 5");
        config.log_cmdq_size = config.log_cmdq_size.min(5);
        let clock = ModelClock::new(config.clock);
        let now = clock.now_ns();
        let dev = Mutex::new(Device::new(config, now));
        MockHca {
            shared: Arc::new(Shared {
                clock,
                dev,
                kick: Mutex::new(None),
            }),
        }
    }

    /// The platform handle for a driver.
    pub fn platform(&self) -> MockPlatform {
        MockPlatform {
            shared: self.shared.clone(),
        }
    }

    fn dev(&self) -> MutexGuard<'_, Device> {
        lock(&self.shared)
    }

    fn now(&self) -> u64 {
        self.shared.clock.now_ns()
    }

    /// The configuration the HCA was built with.
    pub fn config(&self) -> MockConfig {
        self.dev().config.clone()
    }

    /// Model time in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.now()
    }

    /// Advances the model's clock (virtual clock) or sleeps (real-time clock).
    pub fn advance_us(&self, us: u64) {
        self.shared.clock.advance_ns(us.saturating_mul(1000));
    }

    /// The clock mode.
    pub fn clock_mode(&self) -> ClockMode {
        self.shared.clock.mode()
    }

    // ---- logs -------------------------------------------------------------------------

    /// Every command the firmware processed (most recent last; the oldest are dropped
    /// beyond [`crate::LOG_CAPACITY`]).
    pub fn command_log(&self) -> Vec<CommandRecord> {
        self.dev().commands.snapshot()
    }

    /// Empties the command log.
    pub fn clear_command_log(&self) {
        self.dev().commands.clear();
    }

    /// Starts (`true`) or stops (`false`) keeping every command's input and output bytes
    /// beside the command log (off at power-on; stopping drops what was kept). A function
    /// level reset does not change it. What is kept is read with
    /// [`take_command_bytes`](Self::take_command_bytes).
    pub fn record_command_bytes(&self, on: bool) {
        let mut dev = self.dev();
        match (on, dev.command_bytes.is_some()) {
            (true, false) => dev.command_bytes = Some(Ring::new()),
            (false, true) => dev.command_bytes = None,
            _ => {}
        }
    }

    /// Hands over, and forgets, the commands with their bytes kept since recording started
    /// or since the last call (oldest first; empty when not recording). At most
    /// [`crate::LOG_CAPACITY`] are kept, the oldest dropped first.
    pub fn take_command_bytes(&self) -> Vec<CommandBytes> {
        self.dev()
            .command_bytes
            .as_mut()
            .map(|r| r.drain())
            .unwrap_or_default()
    }

    /// The last command record for `opcode`, if any.
    pub fn last_command(&self, opcode: CmdOpcode) -> Option<CommandRecord> {
        self.dev()
            .commands
            .snapshot()
            .into_iter()
            .rev()
            .find(|r| r.opcode == opcode)
    }

    /// Every UAR write (doorbell) so far, in order.
    pub fn doorbells(&self) -> Vec<DoorbellRecord> {
        self.dev().doorbells.snapshot()
    }

    /// Takes the UAR writes recorded so far (the datapath engine consumes them this way).
    pub fn take_doorbells(&self) -> Vec<DoorbellRecord> {
        self.dev().doorbells.drain()
    }

    /// How many UAR writes were ever recorded.
    pub fn doorbell_count(&self) -> u64 {
        self.dev().doorbells.total()
    }

    /// Device accesses the IOMMU refused.
    pub fn iommu_faults(&self) -> Vec<IommuFault> {
        self.dev().iommu.faults().to_vec()
    }

    /// Takes the recorded IOMMU faults (oldest first), leaving none: a reporter that calls
    /// it now and then sees each fault once (at most [`LOG_CAPACITY`](crate::LOG_CAPACITY)
    /// between two calls are kept).
    pub fn take_iommu_faults(&self) -> Vec<IommuFault> {
        self.dev().iommu.take_faults()
    }

    /// Forgets the recorded IOMMU faults.
    pub fn clear_iommu_faults(&self) {
        self.dev().iommu.clear_faults();
    }

    /// Notes about driver behaviour the model accepted or ignored but that is probably
    /// wrong.
    pub fn notes(&self) -> Vec<Note> {
        self.dev().notes.snapshot()
    }

    // ---- state ------------------------------------------------------------------------

    /// The HCA's life-cycle state.
    pub fn hca_state(&self) -> HcaState {
        self.dev().fw.state
    }

    /// The ISSI in use.
    pub fn issi(&self) -> u16 {
        self.dev().fw.issi
    }

    /// The host-endianness register's `he` bit as last written.
    pub fn host_endianness_big(&self) -> bool {
        self.dev().fw.host_endianness_he
    }

    /// Page accounting.
    pub fn pages(&self) -> PageCounts {
        let d = self.dev();
        let p = &d.fw.pages;
        PageCounts {
            held: p.held.len(),
            boot_outstanding: p.boot_outstanding(),
            init_outstanding: p.init_outstanding(),
            regular_outstanding: p.regular_outstanding(),
            requested: p.requested,
        }
    }

    /// Object counts.
    pub fn objects(&self) -> ObjectCounts {
        let d = self.dev();
        let f = &d.objs;
        ObjectCounts {
            uars: f.uars.len(),
            pds: f.pds.len(),
            transport_domains: f.tds.len(),
            mkeys: f.mkeys.len(),
            eqs: f.eqs.len(),
            cqs: f.cqs.len(),
            qps: f.qps.len(),
            srqs: f.srqs.len(),
            q_counters: f.q_counters.len(),
        }
    }

    /// The state of QP `qpn`, if it exists.
    pub fn qp_state(&self, qpn: u32) -> Option<QpState> {
        self.dev()
            .objs
            .qps
            .get(&qpn)
            .map(|q| QpState::from_raw(q.qpc.state()))
    }

    /// Puts QP `qpn` into `state` as the datapath would (for example SQER after a send
    /// error), for tests of the recovery transitions. Returns false if the QP does not
    /// exist.
    pub fn force_qp_state(&self, qpn: u32, state: QpState) -> bool {
        match self.dev().objs.qps.get_mut(&qpn) {
            Some(q) => {
                q.qpc.set_state(state.raw());
                true
            }
            None => false,
        }
    }

    /// The consumer and producer counters of EQ `eqn`, if it exists.
    pub fn eq_counters(&self, eqn: u8) -> Option<(u32, u32)> {
        self.dev().objs.eqs.get(&eqn).map(|e| (e.ci, e.pi))
    }

    /// How many MSI-X interrupts vector `vector` received (an EQE written to an armed EQ).
    pub fn interrupts(&self, vector: u16) -> u64 {
        self.dev()
            .interrupts
            .get(vector as usize)
            .copied()
            .unwrap_or(0)
    }

    /// The last arm request of CQ `cqn` from the CQ doorbell: (sequence number, solicited
    /// only, consumer index).
    pub fn cq_arm(&self, cqn: u32) -> Option<(u8, bool, u32)> {
        self.dev().objs.cqs.get(&cqn).and_then(|c| c.arm)
    }

    /// Number of function level resets so far.
    pub fn reset_count(&self) -> u64 {
        self.dev().resets
    }

    /// Whether the NIC vport has RoCE enabled.
    pub fn roce_enabled(&self) -> bool {
        self.dev().fw.nic_vport.roce_en()
    }

    // ---- faults and events ------------------------------------------------------------

    /// Arms a fault for the next `times` commands with `opcode` (`None`: any opcode).
    pub fn inject_command_fault(&self, opcode: Option<CmdOpcode>, fault: CommandFault, times: u32) {
        if times > 0 {
            self.dev().faults.commands.push(ArmedCommandFault {
                opcode,
                remaining: times,
                fault,
            });
        }
    }

    /// The next command with `opcode` completes with `status` and `syndrome`, unexecuted.
    pub fn fail_next_command(&self, opcode: CmdOpcode, status: CmdStatus, syndrome: u32) {
        self.inject_command_fault(Some(opcode), CommandFault::Fail { status, syndrome }, 1);
    }

    /// The next command with `opcode` never completes (until
    /// [`MockHca::complete_hung_commands`]).
    pub fn hang_next_command(&self, opcode: CmdOpcode) {
        self.inject_command_fault(Some(opcode), CommandFault::Hang, 1);
    }

    /// The firmware lies about what it did: every command it completes (executed or failed,
    /// not refused at delivery) has its output, header included, passed through `filter`
    /// before it is written back, with its opcode. `None` removes the filter. For tests
    /// and fuzzing of how a driver reads the outputs of a buggy or hostile device; the
    /// model's own state is what the command really did. `filter` runs with the model
    /// locked: it must not call the model.
    pub fn set_command_output_filter(&self, filter: Option<Box<crate::faults::OutputFilter>>) {
        self.dev().faults.output_filter = filter.map(|f| {
            crate::faults::ArmedOutputFilter(std::sync::Arc::new(std::sync::Mutex::new(f)))
        });
    }

    /// Disarms every command fault not yet triggered.
    pub fn clear_command_faults(&self) {
        self.dev().faults.commands.clear();
    }

    /// Executes the hung commands now and completes them (a late completion).
    pub fn complete_hung_commands(&self) {
        let now = self.now();
        self.dev().release_hung(now);
    }

    /// The firmware reports a fatal error in the health buffer (`synd`, `ext_synd`, with
    /// the "recovery flow required" bit), its health counter stops and it stops taking
    /// commands. Only a function level reset recovers.
    pub fn set_fatal_health(&self, synd: u8, ext_synd: u16) {
        let now = self.now();
        self.dev().enter_fatal(synd, ext_synd, now);
    }

    /// Sets `num_vhca_ports` (maximum and current), the number of vHCA ports the function
    /// has (0 on a function without them: SET/QUERY_ROCE_ADDRESS then take
    /// `vhca_port_num` 0 only). Call it before a driver reads the capabilities.
    pub fn set_num_vhca_ports(&self, n: u8) {
        let mut d = self.dev();
        let c = &mut d.fw.caps;
        c.general_max.set_num_vhca_ports(n);
        c.general_cur.set_num_vhca_ports(n);
    }

    /// Sets the timestamp-format capabilities, maximum and current: the general
    /// `sq_ts_format` and `rq_ts_format` to `sq_rq`, the RoCE page's `qp_ts_format` to `qp`
    /// (encoding: 0 free-running only, 1 real time only, 2 both). CREATE_QP then accepts a
    /// `qpc.ts_format` only if the QP capability (`qp_ts_format` with RoCE, `sq_ts_format`
    /// without) offers it. Call it before a driver reads the capabilities.
    pub fn set_ts_format_caps(&self, sq_rq: u8, qp: u8) {
        let mut d = self.dev();
        let c = &mut d.fw.caps;
        for g in [&mut c.general_max, &mut c.general_cur] {
            g.set_sq_ts_format(sq_rq).set_rq_ts_format(sq_rq);
        }
        if c.general_cur.roce() {
            for r in [&mut c.roce_max, &mut c.roce_cur] {
                r.set_qp_ts_format(qp);
            }
        }
    }

    /// The firmware never finishes initializing (or does again, when `false`).
    pub fn set_stuck_initializing(&self, stuck: bool) {
        self.dev().faults.stuck_initializing = stuck;
    }

    /// Every PCI read (configuration space and BAR) returns all ones and writes are
    /// dropped, as when the device fell off the bus.
    pub fn set_pci_all_ones(&self, on: bool) {
        self.dev().faults.pci_all_ones = on;
    }

    /// While on, send doorbells are recorded in the doorbell log but the engine does not
    /// fetch the WQEs they announce: the send queues stand still, as if the doorbells had
    /// not reached the device. Tests use it to read what a driver wrote (WQEs, doorbell
    /// record, doorbell value) before the device acts on it. Turning it off does not replay
    /// the held doorbells; the next doorbell of a QP makes the engine fetch everything up to
    /// the counter it carries.
    pub fn hold_send_doorbells(&self, on: bool) {
        self.dev().faults.hold_send_doorbells = on;
    }

    /// A run-time page request: positive `n`, the firmware wants `n` more pages (it posts a
    /// PAGE_REQUEST event and holds object creation until it gets them); negative, it gives
    /// `-n` pages back (a PAGE_REQUEST with a negative count; the driver takes them).
    pub fn request_pages(&self, n: i32) {
        let now = self.now();
        self.dev().request_pages(n, now);
    }

    /// The firmware releases every page it holds at once and posts a PAGE_REQUEST whose
    /// `ec_function` word has the release-all bit ([`crate::firmware::PAGE_REQ_RELEASE_ALL`];
    /// the driver frees the pages without MANAGE_PAGES). Only when the driver turned the
    /// `release_all_pages` capability on, the HCA is initialized and an EQ takes page
    /// requests; returns whether the event was posted. Afterwards the firmware needs no
    /// pages (as after TEARDOWN_HCA).
    pub fn release_all_pages(&self) -> bool {
        let now = self.now();
        self.dev().release_all_pages(now)
    }

    /// Replaces the atomic capability page (until a function level reset): the
    /// `atomic_operations` bits (compare-and-swap 1, fetch-and-add 2, ...), the
    /// `atomic_size_qp` bits (8 bytes: 1 << 3) and whether the requester can write 8-byte
    /// results in host endianness (`supported_atomic_req_8B_endianness_mode_1`). The
    /// current endianness mode goes back to big-endian. For tests of a driver against
    /// devices with fewer atomics than the default (which offers 8-byte compare-and-swap
    /// and fetch-and-add, and host endianness).
    pub fn set_atomic_caps(&self, operations: u16, size_qp: u16, host_endianness: bool) {
        let (max, cur) = crate::caps::atomic_pages(operations, size_qp, host_endianness);
        let mut d = self.dev();
        d.fw.caps.atomic_max = max;
        d.fw.caps.atomic_cur = cur;
    }

    /// The requester's current 8-byte atomic endianness mode
    /// (`atomic_caps.atomic_req_8B_endianness_mode`: 0 big-endian, 1 host endianness).
    pub fn atomic_req_endianness_mode(&self) -> u8 {
        self.dev()
            .fw
            .caps
            .atomic_cur
            .atomic_req_8B_endianness_mode()
    }

    /// The next MANAGE_PAGES TAKE replies return at most `limits[0]`, `limits[1]`, ...
    /// pages, one limit per reply (0: an empty reply, as firmware that is still busy with
    /// its pages gives); later replies are not limited.
    pub fn limit_page_returns(&self, limits: &[u32]) {
        self.dev().faults.page_returns = limits.to_vec();
    }

    /// Changes the port's state and posts a PORT_CHANGE event (ACTIVE or DOWN) to a
    /// subscribed EQ.
    pub fn set_port_up(&self, up: bool) {
        let now = self.now();
        let mut d = self.dev();
        d.fw.port_state = if up {
            uhca_fwif::consts::PortState::Active
        } else {
            uhca_fwif::consts::PortState::Down
        };
        let sub = if up {
            PortChangeSubtype::Active
        } else {
            PortChangeSubtype::Down
        };
        let mut data = [0u8; 28];
        data[8] = 1 << 4;
        if d.fw.state == HcaState::Initialized {
            d.post_event(
                uhca_fwif::consts::EventType::PortChange.raw(),
                sub.raw(),
                data,
                now,
                false,
            );
        }
    }

    /// Performs a function level reset, as a write of "initiate FLR" to the PCIe device
    /// control register does.
    pub fn function_level_reset(&self) {
        let now = self.now();
        self.dev().function_level_reset(now);
    }

    // ---- datapath and wire -------------------------------------------------------------

    /// Takes the frames the HCA sent since the last call, oldest first: whole RoCEv2
    /// Ethernet frames (Ethernet port) or native InfiniBand packets, LRH to VCRC
    /// (InfiniBand port). Frames emitted inside a doorbell write wait here until taken; a
    /// [`crate::Fabric`] takes them when it is pumped.
    pub fn take_tx_frames(&self) -> Vec<Vec<u8>> {
        self.dev().engine.tx.drain(..).collect()
    }

    /// The fabric's visit, under one lock: takes back the buffers of delivered frames
    /// (`returned`, emptied) for the engine's next frames, and appends the frames sent
    /// since the last visit to `out`, oldest first.
    pub(crate) fn exchange_tx_frames(&self, returned: &mut Vec<Vec<u8>>, out: &mut Vec<Vec<u8>>) {
        let mut d = self.dev();
        d.engine.recycle_frames(returned);
        out.extend(d.engine.tx.drain(..));
    }

    /// Installs (or, with `None`, removes) what runs after a doorbell leaves frames to
    /// send. Called without any lock of this HCA held.
    pub(crate) fn set_kick(&self, kick: Option<Kick>) {
        *self.shared.kick.lock().unwrap_or_else(|e| e.into_inner()) = kick;
    }

    /// How many frames wait to be taken.
    pub fn tx_pending(&self) -> usize {
        self.dev().engine.tx.len()
    }

    /// Delivers frames from the wire to the port, in order, as one burst: the engine
    /// processes each (malformed ones are dropped and counted), then sends the ACKs it owes
    /// (coalesced). Replies are queued for [`MockHca::take_tx_frames`].
    pub fn receive_frames(&self, frames: &[Vec<u8>]) {
        let now = self.now();
        self.dev().receive_frames(frames, now);
    }

    /// Runs the engine's timers that are due at the model's current time (retransmission,
    /// RNR retry), flushes QPs in the error state and sends owed ACKs.
    pub fn service(&self) {
        let now = self.now();
        self.dev().engine_service(now);
    }

    /// The model time of the engine's next timer, if any is running.
    pub fn next_deadline_ns(&self) -> Option<u64> {
        self.dev().next_deadline()
    }

    /// The datapath counters (packets, drops, ACKs, NAKs, retransmissions, CQEs).
    pub fn datapath_counters(&self) -> crate::DatapathCounters {
        self.dev().engine.counters
    }

    /// InfiniBand: the subnet manager configures the port (its LID and the SM's LID).
    pub fn set_lid(&self, lid: u16, sm_lid: u16) {
        let mut d = self.dev();
        d.fw.lid = lid;
        d.fw.sm_lid = sm_lid;
    }

    /// The port's LID (InfiniBand).
    pub fn lid(&self) -> u16 {
        self.dev().fw.lid
    }

    /// The port's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.dev().config.mac
    }

    /// The GIDs (IPv6 or IPv4-mapped addresses) installed in the RoCE address table.
    pub fn roce_gids(&self) -> Vec<[u8; 16]> {
        self.dev()
            .fw
            .roce_addrs
            .iter()
            .flatten()
            .map(|a| *a.source_l3_address())
            .collect()
    }

    /// Whether `gid` is installed in the RoCE address table (the switch's route by
    /// destination IP; no allocation, unlike [`MockHca::roce_gids`]).
    pub(crate) fn has_roce_gid(&self, gid: &[u8; 16]) -> bool {
        self.dev()
            .fw
            .roce_addrs
            .iter()
            .flatten()
            .any(|a| a.source_l3_address() == gid)
    }

    /// Moves a virtual clock forward to `ns` if it is behind (a fabric keeps the clocks of
    /// its HCAs together this way); nothing for a real-time clock.
    pub fn advance_clock_to(&self, ns: u64) {
        self.shared.clock.advance_to(ns);
    }

    // ---- host memory, for tests ------------------------------------------------------

    /// Reads host memory that is mapped for the device, by IOVA, as the CPU would (no
    /// fault is recorded). Returns false if the range is not within one mapping.
    pub fn host_read(&self, iova: u64, buf: &mut [u8]) -> bool {
        self.dev().iommu.host_read(iova, buf)
    }

    /// Writes host memory that is mapped for the device, by IOVA, as the CPU would.
    /// Returns false if the range is not within one mapping.
    pub fn host_write(&self, iova: u64, data: &[u8]) -> bool {
        self.dev().iommu.host_write(iova, data)
    }

    /// Whether `[iova, iova + len)` is mapped.
    pub fn is_mapped(&self, iova: u64, len: usize) -> bool {
        self.dev().iommu.is_mapped(iova, len)
    }

    // ---- the host side of a device served to another process (vfio-user) -------------

    /// Maps `len` bytes of the file `fd` from `offset` for the device at `iova`, as a
    /// VMM's DMA map does: the model maps the file into this process and translates device
    /// accesses to `[iova, iova + len)` into it (the memory of a vfio-user client, shared
    /// through a memfd). Writes fault unless `writable`. The mapping lives until
    /// [`MockHca::unmap_fd`] or [`MockHca::unmap_all_fds`]; a function level reset keeps it
    /// (it belongs to the host, not the device). IOVA, offset and length must be multiples
    /// of 4 KiB, and the range must neither overlap a live mapping nor reach past the end of
    /// the file.
    #[cfg(target_os = "linux")]
    pub fn map_fd(
        &self,
        iova: u64,
        fd: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: u64,
        writable: bool,
    ) -> Result<(), crate::iommu::MapFdError> {
        self.dev().iommu.map_fd(iova, fd, offset, len, writable)
    }

    /// Records `[iova, iova + len)` as mapped by a client without memory the device can
    /// reach (a vfio-user DMA map without a file: ROM or device memory of the VMM). It takes
    /// IOVA space like any map (overlaps are refused, unmaps remove it), and every device
    /// access to it is an IOMMU fault of kind `Unbacked`: the model does not carry DMA over
    /// messages.
    pub fn map_unbacked(&self, iova: u64, len: u64) -> Result<(), crate::iommu::MapFdError> {
        self.dev().iommu.map_unbacked(iova, len)
    }

    /// Removes every client map ([`MockHca::map_fd`], [`MockHca::map_unbacked`]) that lies
    /// entirely inside `[iova, iova + len)`, with the semantics of Linux VFIO's type1 v2
    /// unmap (which QEMU's vIOMMU relies on when it invalidates whole address ranges): a
    /// range that cuts a map at its start or end is refused and removes nothing
    /// (`DmaError::InvalidRequest`); a range without maps is not an error. Returns how many
    /// maps went. The device no longer reaches them once this returns.
    pub fn unmap_fd(&self, iova: u64, len: u64) -> Result<usize, DmaError> {
        self.dev().iommu.unmap_client_range(iova, len)
    }

    /// Removes every client map (a client went away); returns how many there were.
    pub fn unmap_all_fds(&self) -> usize {
        self.dev().iommu.unmap_all_client()
    }

    /// Installs (or, with `None`, removes) what runs each time the device raises an MSI-X
    /// vector (an EQE written to an armed EQ); it gets the vector number. A vfio-user server
    /// signals the client's eventfd for that vector. It runs with the device's lock held, so
    /// it must return promptly and must not call back into this HCA. [`MockHca::interrupts`]
    /// counts the interrupts either way.
    pub fn set_interrupt_handler(&self, handler: Option<Arc<dyn Fn(u16) + Send + Sync>>) {
        self.dev().interrupt_handler = handler.map(crate::device::InterruptHandler);
    }

    /// Reads configuration space bytes at `offset` into `buf`, any length inside the 4 KiB
    /// space (a VMM reads it in bulk). All ones while the device is off the bus.
    pub fn config_read(&self, offset: u16, buf: &mut [u8]) -> Result<(), ConfigError> {
        let off = offset as usize;
        if off
            .checked_add(buf.len())
            .is_none_or(|e| e > CONFIG_SPACE_SIZE)
        {
            return Err(ConfigError::OutOfRange);
        }
        let d = self.dev();
        if d.faults.pci_all_ones {
            buf.fill(0xff);
            return Ok(());
        }
        d.pci.read_into(offset, buf);
        Ok(())
    }

    /// Writes configuration space bytes at `offset` through the registers' write masks, any
    /// length inside the 4 KiB space. Follows the bus-master bit, and a write of "initiate
    /// function level reset" to the PCI Express device control register resets the
    /// function.
    pub fn config_write(&self, offset: u16, data: &[u8]) -> Result<(), ConfigError> {
        self.platform().config_write(offset, data)
    }
}

impl MockPlatform {
    /// The device behind this handle.
    pub fn hca(&self) -> MockHca {
        MockHca {
            shared: self.shared.clone(),
        }
    }

    fn dev(&self) -> MutexGuard<'_, Device> {
        lock(&self.shared)
    }

    fn check(offset: usize, width: usize) {
        assert!(
            offset.is_multiple_of(width)
                && offset.checked_add(width).is_some_and(|e| e <= BAR0_SIZE),
            "BAR0 access of {width} bytes at {offset:#x} is misaligned or out of bounds"
        );
    }
}

// SAFETY: every access is a call into the model under its mutex (so accesses from several
// threads are serialised and never torn), no reference to device memory is created (the
// model returns values), and out-of-bounds or misaligned offsets panic in `check` before any
// access.
unsafe impl Bar for MockPlatform {
    fn bar_len(&self) -> usize {
        BAR0_SIZE
    }

    fn read32(&self, offset: usize) -> u32 {
        Self::check(offset, 4);
        let now = self.shared.clock.now_ns();
        let mut b = [0u8; 4];
        self.dev().bar_read(offset, &mut b, now);
        u32::from_ne_bytes(b)
    }

    fn write32(&self, offset: usize, value: u32) {
        Self::check(offset, 4);
        let now = self.shared.clock.now_ns();
        self.dev().bar_write(offset, &value.to_ne_bytes(), now);
    }

    fn read64(&self, offset: usize) -> u64 {
        Self::check(offset, 8);
        let now = self.shared.clock.now_ns();
        let mut b = [0u8; 8];
        self.dev().bar_read(offset, &mut b, now);
        u64::from_ne_bytes(b)
    }

    fn write64(&self, offset: usize, value: u64) {
        Self::check(offset, 8);
        let now = self.shared.clock.now_ns();
        let sent = {
            let mut d = self.dev();
            d.bar_write(offset, &value.to_ne_bytes(), now);
            !d.engine.tx.is_empty()
        };
        if sent {
            let kick = self
                .shared
                .kick
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if let Some(k) = kick {
                k();
            }
        }
    }
}

// SAFETY: allocations come from the host allocator with the requested alignment (at least
// 4 KiB) and are zeroed; each gets its own IOVA range (never reused while live, with a guard
// page) so allocations and mappings never alias; the memory stays valid until
// `free_coherent` or until the last handle of the HCA is dropped; all methods lock the
// device mutex.
unsafe impl Dma for MockPlatform {
    fn alloc_coherent(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError> {
        self.dev().iommu.alloc_coherent(len, align)
    }

    unsafe fn free_coherent(&self, region: DmaRegion) {
        let now = self.shared.clock.now_ns();
        let mut d = self.dev();
        if !d.iommu.free_coherent(&region) {
            d.note(
                now,
                format!(
                    "free_coherent of {:#x}, which is not a live allocation",
                    region.iova
                ),
            );
        }
    }

    unsafe fn map(&self, cpu: NonNull<u8>, len: usize) -> Result<u64, DmaError> {
        self.dev().iommu.map(cpu, len)
    }

    unsafe fn unmap(&self, iova: u64, len: usize) -> Result<(), DmaError> {
        self.dev().iommu.unmap(iova, len)
    }
}

impl PciConfig for MockPlatform {
    fn config_read8(&self, offset: u16) -> Result<u8, ConfigError> {
        let [b] = self.config_read::<1>(offset)?;
        Ok(b)
    }

    fn config_read16(&self, offset: u16) -> Result<u16, ConfigError> {
        Ok(u16::from_le_bytes(self.config_read::<2>(offset)?))
    }

    fn config_read32(&self, offset: u16) -> Result<u32, ConfigError> {
        Ok(u32::from_le_bytes(self.config_read::<4>(offset)?))
    }

    fn config_write16(&self, offset: u16, value: u16) -> Result<(), ConfigError> {
        if !offset.is_multiple_of(2) {
            return Err(ConfigError::OutOfRange);
        }
        self.config_write(offset, &value.to_le_bytes())
    }

    fn config_write32(&self, offset: u16, value: u32) -> Result<(), ConfigError> {
        if !offset.is_multiple_of(4) {
            return Err(ConfigError::OutOfRange);
        }
        self.config_write(offset, &value.to_le_bytes())
    }
}

impl MockPlatform {
    fn config_read<const N: usize>(&self, offset: u16) -> Result<[u8; N], ConfigError> {
        if !(offset as usize).is_multiple_of(N) || offset as usize + N > CONFIG_SPACE_SIZE {
            return Err(ConfigError::OutOfRange);
        }
        let d = self.dev();
        if d.faults.pci_all_ones {
            return Ok([0xff; N]);
        }
        Ok(d.pci.read::<N>(offset))
    }

    fn config_write(&self, offset: u16, data: &[u8]) -> Result<(), ConfigError> {
        let n = data.len();
        if (offset as usize)
            .checked_add(n)
            .is_none_or(|e| e > CONFIG_SPACE_SIZE)
        {
            return Err(ConfigError::OutOfRange);
        }
        let now = self.shared.clock.now_ns();
        let mut d = self.dev();
        if d.faults.pci_all_ones {
            return Ok(());
        }
        if d.pci.write(offset, data) {
            d.function_level_reset(now);
            return Ok(());
        }
        let master = d.pci.command() & PCI_COMMAND_MASTER != 0;
        d.iommu.set_bus_master(master);
        Ok(())
    }
}

// SAFETY: host memory from the global allocator (the trait's default bodies);
// the model never reaches memory outside its IOMMU view.
unsafe impl uhca_hal::HostMem for MockPlatform {}

impl Clock for MockPlatform {
    fn now_ns(&self) -> u64 {
        self.shared.clock.now_ns()
    }

    fn delay_us(&self, us: u32) {
        self.shared.clock.advance_ns(us as u64 * 1000);
    }
}
