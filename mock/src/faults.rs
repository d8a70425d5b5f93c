//! Faults the model can be told to produce.

use uhca_fwif::consts::{CmdOpcode, CmdStatus};

/// What an injected command fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommandFault {
    /// The command is taken but never completes: the entry stays owned by hardware and no
    /// completion event is posted, until [`crate::MockHca::complete_hung_commands`].
    Hang,
    /// The command completes without executing, with this status and syndrome.
    Fail {
        /// Status written to the output header.
        status: CmdStatus,
        /// Syndrome written to the output header.
        syndrome: u32,
    },
}

/// One armed command fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ArmedCommandFault {
    /// Which opcode it applies to (`None`: the next command, whatever it is).
    pub(crate) opcode: Option<CmdOpcode>,
    /// How many more commands it applies to.
    pub(crate) remaining: u32,
    pub(crate) fault: CommandFault,
}

/// A function every command's output passes through before it is written back (see
/// [`crate::MockHca::set_command_output_filter`]).
pub type OutputFilter = dyn FnMut(CmdOpcode, &mut [u8]) + Send;

/// The armed output filter (shared, so that [`Faults`] stays `Clone`).
#[derive(Clone)]
pub(crate) struct ArmedOutputFilter(pub(crate) std::sync::Arc<std::sync::Mutex<Box<OutputFilter>>>);

impl core::fmt::Debug for ArmedOutputFilter {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("ArmedOutputFilter")
    }
}

/// Every fault currently configured.
#[derive(Clone, Debug, Default)]
pub(crate) struct Faults {
    pub(crate) commands: Vec<ArmedCommandFault>,
    /// The firmware never finishes initializing.
    pub(crate) stuck_initializing: bool,
    /// Every PCI read (config space and BAR) returns all ones; writes are dropped.
    pub(crate) pci_all_ones: bool,
    /// Send doorbells are logged but the engine does not fetch the WQEs they announce.
    pub(crate) hold_send_doorbells: bool,
    /// The most pages each of the next MANAGE_PAGES TAKE replies returns, in order.
    pub(crate) page_returns: Vec<u32>,
    /// Rewrites every command output (a lying firmware).
    pub(crate) output_filter: Option<ArmedOutputFilter>,
}

impl Faults {
    /// Takes the first armed fault matching `opcode`, if any.
    pub(crate) fn take_command_fault(&mut self, opcode: CmdOpcode) -> Option<CommandFault> {
        let i = self
            .commands
            .iter()
            .position(|f| f.opcode.is_none_or(|o| o == opcode) && f.remaining > 0)?;
        let f = &mut self.commands[i];
        f.remaining -= 1;
        let fault = f.fault;
        if f.remaining == 0 {
            self.commands.remove(i);
        }
        Some(fault)
    }
}
