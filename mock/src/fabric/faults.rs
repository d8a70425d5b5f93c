//! Seeded fault injection on the fabric: drop, duplicate, reorder, corrupt and delay, each
//! with a per-mille rate, from a deterministic pseudo-random generator.

/// Fault rates (per mille, 0-1000) and parameters. The default injects nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultConfig {
    /// Seed of the generator: the same seed and traffic give the same faults.
    pub seed: u64,
    /// Frames dropped, per mille.
    pub drop_per_mille: u16,
    /// Frames delivered twice, per mille.
    pub duplicate_per_mille: u16,
    /// Frames held back so that later frames overtake them, per mille.
    pub reorder_per_mille: u16,
    /// Frames with one bit flipped (after the first 16 bytes), per mille: the receiver's
    /// checksum or CRC check drops them.
    pub corrupt_per_mille: u16,
    /// Frames delayed by `delay_ns`, per mille.
    pub delay_per_mille: u16,
    /// Extra latency of a delayed frame, nanoseconds.
    pub delay_ns: u64,
    /// Most extra latency of a reordered frame, nanoseconds (at least 1 µs is used).
    pub reorder_window_ns: u64,
}

impl FaultConfig {
    /// Drop, duplicate and reorder each at `per_mille`, with `seed`.
    pub fn lossy(seed: u64, per_mille: u16) -> Self {
        FaultConfig {
            seed,
            drop_per_mille: per_mille,
            duplicate_per_mille: per_mille,
            reorder_per_mille: per_mille,
            reorder_window_ns: 20_000,
            ..Self::default()
        }
    }

    /// Drop every frame.
    pub fn drop_all() -> Self {
        FaultConfig {
            drop_per_mille: 1000,
            ..Self::default()
        }
    }
}

/// What happens to one frame.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub(crate) drop: bool,
    pub(crate) duplicate: bool,
    pub(crate) corrupt_at: Option<(usize, u8)>,
    pub(crate) extra_ns: u64,
}

/// The injector: a configuration and its generator (xorshift64*).
#[derive(Clone, Debug)]
pub(crate) struct FaultInjector {
    pub(crate) cfg: FaultConfig,
    state: u64,
}

impl FaultInjector {
    pub(crate) fn new(cfg: FaultConfig) -> Self {
        FaultInjector {
            cfg,
            state: cfg.seed ^ 0x9e37_79b9_7f4a_7c15 | 1,
        }
    }

    fn next(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.state = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn hit(&mut self, per_mille: u16) -> bool {
        per_mille > 0 && self.next() % 1000 < per_mille as u64
    }

    #[inline]
    pub(crate) fn judge(&mut self, len: usize) -> Verdict {
        // No rate set (the default): nothing happens, and the generator, which only a
        // rate above zero draws from, stays where it is.
        let c = &self.cfg;
        if c.drop_per_mille
            | c.duplicate_per_mille
            | c.corrupt_per_mille
            | c.reorder_per_mille
            | c.delay_per_mille
            == 0
        {
            return Verdict::default();
        }
        self.draw(len)
    }

    /// [`Self::judge`] with at least one rate set.
    #[inline(never)]
    fn draw(&mut self, len: usize) -> Verdict {
        let c = self.cfg;
        let mut v = Verdict::default();
        if self.hit(c.drop_per_mille) {
            v.drop = true;
            return v;
        }
        v.duplicate = self.hit(c.duplicate_per_mille);
        if self.hit(c.corrupt_per_mille) && len > 16 {
            let at = 16 + (self.next() % (len as u64 - 16)) as usize;
            v.corrupt_at = Some((at, 1 << (self.next() % 8)));
        }
        if self.hit(c.reorder_per_mille) {
            let w = c.reorder_window_ns.max(1_000);
            v.extra_ns += 1 + self.next() % w;
        }
        if self.hit(c.delay_per_mille) {
            v.extra_ns += c.delay_ns;
        }
        v
    }
}
