//! The model's clock: a deterministic virtual clock, or the host's monotonic clock.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// How the model measures time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ClockMode {
    /// A virtual clock that starts at zero and moves only when `delay_us` is called (or the
    /// test advances it): runs are deterministic and waits cost no wall time.
    #[default]
    Virtual,
    /// The host's monotonic clock; `delay_us` sleeps.
    RealTime,
}

/// The clock shared by the model and its platform handle.
#[derive(Debug)]
pub(crate) struct ModelClock {
    mode: ClockMode,
    virtual_ns: AtomicU64,
    start: Instant,
}

impl ModelClock {
    pub(crate) fn new(mode: ClockMode) -> Self {
        ModelClock {
            mode,
            virtual_ns: AtomicU64::new(0),
            start: Instant::now(),
        }
    }

    pub(crate) fn mode(&self) -> ClockMode {
        self.mode
    }

    /// Nanoseconds since the model was created.
    pub(crate) fn now_ns(&self) -> u64 {
        match self.mode {
            ClockMode::Virtual => self.virtual_ns.load(Ordering::Acquire),
            ClockMode::RealTime => {
                u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
            }
        }
    }

    /// Moves the virtual clock forward to `ns` if it is behind (nothing in real-time mode).
    pub(crate) fn advance_to(&self, ns: u64) {
        if self.mode == ClockMode::Virtual {
            self.virtual_ns.fetch_max(ns, Ordering::AcqRel);
        }
    }

    /// Advances the virtual clock by `ns` (sleeps in real-time mode).
    pub(crate) fn advance_ns(&self, ns: u64) {
        match self.mode {
            ClockMode::Virtual => {
                self.virtual_ns.fetch_add(ns, Ordering::AcqRel);
            }
            ClockMode::RealTime => std::thread::sleep(std::time::Duration::from_nanos(ns)),
        }
    }
}
