//! The device behind the lock: PCI function, IOMMU, firmware and the logs.

use crate::MockConfig;
use crate::engine_state::EngineState;
use crate::faults::Faults;
use crate::fw_state::{FwState, HEALTH_TICK_NS};
use crate::iommu::Iommu;
use crate::log::{CommandBytes, CommandRecord, DoorbellRecord, Note, Ring};
use crate::objects::Objects;
use crate::pci::PciFunction;

/// The whole model state, guarded by the device mutex.
#[derive(Debug)]
pub(crate) struct Device {
    pub(crate) config: MockConfig,
    pub(crate) pci: PciFunction,
    pub(crate) iommu: Iommu,
    pub(crate) fw: FwState,
    /// The objects the firmware created: QPs, CQs, SRQs, memory keys, EQs, UARs, PDs...
    pub(crate) objs: Objects,
    pub(crate) faults: Faults,
    pub(crate) commands: Ring<CommandRecord>,
    /// Each command's input and output bytes, when recording them was asked for.
    pub(crate) command_bytes: Option<Ring<CommandBytes>>,
    pub(crate) doorbells: Ring<DoorbellRecord>,
    pub(crate) notes: Ring<Note>,
    pub(crate) msix_table: Vec<u8>,
    pub(crate) interrupts: Vec<u64>,
    /// What runs when the device raises an MSI-X vector (a vfio-user server's eventfds).
    pub(crate) interrupt_handler: Option<InterruptHandler>,
    pub(crate) resets: u64,
    /// The datapath engine's state.
    pub(crate) engine: EngineState,
}

/// What runs when the device raises an MSI-X vector: it gets the vector number. It runs with
/// the device's lock held, so it must not call back into the HCA.
#[derive(Clone)]
pub(crate) struct InterruptHandler(pub(crate) std::sync::Arc<dyn Fn(u16) + Send + Sync>);

impl core::fmt::Debug for InterruptHandler {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("InterruptHandler")
    }
}

impl Device {
    /// Counts an interrupt on MSI-X `vector` and hands it to the interrupt handler.
    pub(crate) fn raise_interrupt(&mut self, vector: u16) {
        if let Some(c) = self.interrupts.get_mut(vector as usize) {
            *c += 1;
            if let Some(h) = &self.interrupt_handler {
                (h.0)(vector);
            }
        }
    }

    pub(crate) fn new(config: MockConfig, now: u64) -> Self {
        let infiniband = config.port_type == crate::LinkLayer::InfiniBand;
        let vectors = crate::caps::MSIX_VECTORS;
        Device {
            pci: PciFunction::new(infiniband, vectors),
            iommu: Iommu::new(),
            fw: FwState::new(&config, now),
            objs: Objects::default(),
            faults: Faults::default(),
            commands: Ring::new(),
            command_bytes: None,
            doorbells: Ring::new(),
            notes: Ring::new(),
            msix_table: msix_power_on(vectors),
            interrupts: vec![0; vectors as usize],
            interrupt_handler: None,
            resets: 0,
            engine: EngineState::default(),
            config,
        }
    }

    /// Logs one command: its record, and its bytes when they are being recorded.
    pub(crate) fn log_command(&mut self, record: CommandRecord, input: &[u8], output: &[u8]) {
        self.commands.push(record);
        if let Some(ring) = &mut self.command_bytes {
            ring.push(CommandBytes {
                record,
                input: input.to_vec(),
                output: output.to_vec(),
            });
        }
    }

    /// Records a note about something the driver probably did wrong.
    pub(crate) fn note(&mut self, now: u64, text: String) {
        self.notes.push(Note { time_ns: now, text });
    }

    /// Function level reset: back to the power-on state, except the host side (IOMMU
    /// mappings, which belong to the platform), the injected faults other than the fatal
    /// health state (the firmware restarts), and the port's LID and SM LID: the subnet
    /// manager owns those and gives a port back the LID it had (OpenSM keeps a GUID-to-LID
    /// table), so a reset does not undo what the fabric's subnet manager configured.
    pub(crate) fn function_level_reset(&mut self, now: u64) {
        let infiniband = self.config.port_type == crate::LinkLayer::InfiniBand;
        let vectors = crate::caps::MSIX_VECTORS;
        self.pci = PciFunction::new(infiniband, vectors);
        self.iommu.set_bus_master(false);
        let (lid, sm_lid) = (self.fw.lid, self.fw.sm_lid);
        self.fw = FwState::new(&self.config, now);
        self.objs = Objects::default();
        self.fw.lid = lid;
        self.fw.sm_lid = sm_lid;
        self.msix_table = msix_power_on(vectors);
        self.engine = EngineState::default();
        self.resets += 1;
    }

    /// The firmware enters a fatal error: the health buffer reports `synd` and `ext_synd`
    /// with "recovery flow required", the health counter stops and commands are ignored
    /// until a function level reset.
    pub(crate) fn enter_fatal(&mut self, synd: u8, ext_synd: u16, now: u64) {
        let since = now.saturating_sub(self.fw.boot_ns);
        self.fw.frozen_counter = ((since / HEALTH_TICK_NS) & 0x00ff_ffff) as u32;
        self.fw.fatal = Some((synd, ext_synd));
    }

    /// Whether the firmware still reports `initializing`.
    pub(crate) fn initializing(&self, now: u64) -> bool {
        self.faults.stuck_initializing || now < self.fw.ready_ns
    }
}

/// MSI-X table at power-on: every vector masked (vector control bit 0).
fn msix_power_on(vectors: u16) -> Vec<u8> {
    let mut t = vec![0u8; vectors as usize * 16];
    for v in 0..vectors as usize {
        t[v * 16 + 12] = 1;
    }
    t
}
