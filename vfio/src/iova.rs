//! I/O virtual address ranges and a first-fit IOVA allocator over them.

use core::fmt;

/// A range of I/O virtual addresses, both ends inclusive (as the kernel reports them, so a
/// range can reach `u64::MAX`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IovaRange {
    /// First address.
    pub start: u64,
    /// Last address (inclusive).
    pub last: u64,
}

impl IovaRange {
    /// The range `start..=last`. Panics if `last < start` (a programming error).
    pub const fn new(start: u64, last: u64) -> Self {
        assert!(last >= start, "IovaRange: last < start");
        IovaRange { start, last }
    }

    /// Number of addresses in the range (up to 2^64, hence `u128`).
    pub fn len(&self) -> u128 {
        u128::from(self.last - self.start) + 1
    }

    /// Always false: a range holds at least one address.
    pub fn is_empty(&self) -> bool {
        false
    }
}

impl fmt::Display for IovaRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}..={:#x}", self.start, self.last)
    }
}

/// Why [`IovaAllocator::free`] refused a range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IovaFreeError {
    /// The size is zero or the range wraps around 2^64.
    Invalid,
    /// Part of the range is already free (a double free, or a range never allocated).
    NotAllocated,
}

/// A first-fit allocator of IOVA space.
///
/// It keeps the free space as a sorted list of disjoint, non-adjacent ranges. `alloc` takes
/// the lowest suitably aligned address that fits (so devices with few address bits get low
/// addresses first), `free` returns a range and merges it with its neighbours, and refuses a
/// range that is partly free already. Allocation is O(number of free ranges), which stays
/// small because the driver allocates in large blocks.
#[derive(Clone, Debug, Default)]
pub struct IovaAllocator {
    free: Vec<IovaRange>,
}

fn align_up(x: u64, align: u64) -> Option<u64> {
    debug_assert!(align.is_power_of_two());
    x.checked_add(align - 1).map(|v| v & !(align - 1))
}

impl IovaAllocator {
    /// An allocator over `ranges` (overlapping or unsorted ranges are merged).
    pub fn new(ranges: &[IovaRange]) -> Self {
        let mut a = IovaAllocator { free: Vec::new() };
        let mut sorted = ranges.to_vec();
        sorted.sort();
        for r in sorted {
            match a.free.last_mut() {
                Some(prev) if prev.last == u64::MAX || r.start <= prev.last + 1 => {
                    prev.last = prev.last.max(r.last);
                }
                _ => a.free.push(r),
            }
        }
        a
    }

    /// Removes every address below `min` and above `max` from the free space (for a minimum
    /// IOVA, or a device that can only address `max + 1` bytes).
    pub fn clamp(&mut self, min: u64, max: u64) {
        self.free.retain_mut(|r| {
            if r.last < min || r.start > max {
                return false;
            }
            r.start = r.start.max(min);
            r.last = r.last.min(max);
            true
        });
    }

    /// The free ranges, sorted.
    pub fn free_ranges(&self) -> &[IovaRange] {
        &self.free
    }

    /// Total free bytes.
    pub fn free_bytes(&self) -> u128 {
        self.free.iter().map(IovaRange::len).sum()
    }

    /// Allocates `size` bytes aligned to `align` (a power of two); `None` when `size` is zero,
    /// `align` is not a power of two, or no free range can hold it.
    pub fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
        self.alloc_in(size, align, 0, u64::MAX)
    }

    /// Like [`alloc`](Self::alloc), but only inside `lo..=hi` (for a device that reaches
    /// fewer address bits than the others sharing the IOVA space).
    pub fn alloc_in(&mut self, size: u64, align: u64, lo: u64, hi: u64) -> Option<u64> {
        if size == 0 || !align.is_power_of_two() {
            return None;
        }
        for i in 0..self.free.len() {
            let r = self.free[i];
            let (from, to) = (r.start.max(lo), r.last.min(hi));
            if from > to {
                continue;
            }
            let Some(start) = align_up(from, align) else {
                continue;
            };
            let Some(last) = start.checked_add(size - 1) else {
                continue;
            };
            if start < from || last > to {
                continue;
            }
            // Carve start..=last out of r: up to two pieces remain.
            let before = (start > r.start).then(|| IovaRange::new(r.start, start - 1));
            let after = (last < r.last).then(|| IovaRange::new(last + 1, r.last));
            match (before, after) {
                (None, None) => {
                    self.free.remove(i);
                }
                (Some(b), None) => self.free[i] = b,
                (None, Some(a)) => self.free[i] = a,
                (Some(b), Some(a)) => {
                    self.free[i] = b;
                    self.free.insert(i + 1, a);
                }
            }
            return Some(start);
        }
        None
    }

    /// Returns `size` bytes at `start` to the free space.
    pub fn free(&mut self, start: u64, size: u64) -> Result<(), IovaFreeError> {
        if size == 0 {
            return Err(IovaFreeError::Invalid);
        }
        let last = start.checked_add(size - 1).ok_or(IovaFreeError::Invalid)?;
        // Index of the first free range starting after `start`.
        let i = self.free.partition_point(|r| r.start <= start);
        if i > 0 && self.free[i - 1].last >= start {
            return Err(IovaFreeError::NotAllocated);
        }
        if i < self.free.len() && self.free[i].start <= last {
            return Err(IovaFreeError::NotAllocated);
        }
        let merge_prev = i > 0 && self.free[i - 1].last + 1 == start;
        let merge_next = i < self.free.len() && last != u64::MAX && self.free[i].start == last + 1;
        match (merge_prev, merge_next) {
            (true, true) => {
                self.free[i - 1].last = self.free[i].last;
                self.free.remove(i);
            }
            (true, false) => self.free[i - 1].last = last,
            (false, true) => self.free[i].start = start,
            (false, false) => self.free.insert(i, IovaRange::new(start, last)),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_input_ranges() {
        let a = IovaAllocator::new(&[
            IovaRange::new(0x3000, 0x3fff),
            IovaRange::new(0x1000, 0x1fff),
            IovaRange::new(0x2000, 0x2fff),
            IovaRange::new(0x8000, 0x8fff),
            IovaRange::new(0x8800, 0x9fff),
        ]);
        assert_eq!(
            a.free_ranges(),
            [
                IovaRange::new(0x1000, 0x3fff),
                IovaRange::new(0x8000, 0x9fff)
            ]
        );
        assert_eq!(a.free_bytes(), 0x3000 + 0x2000);
    }

    #[test]
    fn first_fit_alignment_and_exhaustion() {
        let mut a = IovaAllocator::new(&[IovaRange::new(0x1000, 0x0fff_ffff)]);
        assert_eq!(a.alloc(0x1000, 0x1000), Some(0x1000));
        // 2 MiB alignment skips to 0x20_0000 and leaves the hole before it free.
        assert_eq!(a.alloc(0x20_0000, 0x20_0000), Some(0x20_0000));
        assert_eq!(a.alloc(0x1000, 0x1000), Some(0x2000));
        assert_eq!(a.alloc(0, 0x1000), None);
        assert_eq!(a.alloc(0x1000, 3), None);
        assert_eq!(a.alloc(0x1000_0000, 0x1000), None, "larger than the space");
        a.free(0x1000, 0x1000).unwrap();
        assert_eq!(
            a.alloc(0x1000, 0x1000),
            Some(0x1000),
            "freed space is reused"
        );
    }

    #[test]
    fn ranges_up_to_the_top_of_the_address_space() {
        let mut a = IovaAllocator::new(&[IovaRange::new(u64::MAX - 0x1fff, u64::MAX)]);
        assert_eq!(a.free_bytes(), 0x2000);
        assert_eq!(a.alloc(0x1000, 0x1000), Some(u64::MAX - 0x1fff));
        assert_eq!(a.alloc(0x1000, 0x1000), Some(u64::MAX - 0xfff));
        assert_eq!(a.alloc(0x1000, 0x1000), None);
        a.free(u64::MAX - 0xfff, 0x1000).unwrap();
        a.free(u64::MAX - 0x1fff, 0x1000).unwrap();
        assert_eq!(
            a.free_ranges(),
            [IovaRange::new(u64::MAX - 0x1fff, u64::MAX)]
        );
        // Alignment that would wrap fails cleanly.
        assert_eq!(a.alloc(0x1000, 1 << 63), None);
        let mut full = IovaAllocator::new(&[IovaRange::new(0, u64::MAX)]);
        assert_eq!(full.free_bytes(), 1u128 << 64);
        assert_eq!(full.alloc(u64::MAX, 1), Some(0));
        assert_eq!(full.free_bytes(), 1);
    }

    #[test]
    fn double_free_and_overlap_are_refused() {
        let mut a = IovaAllocator::new(&[IovaRange::new(0x1000, 0xffff)]);
        let x = a.alloc(0x2000, 0x1000).unwrap();
        a.free(x, 0x2000).unwrap();
        assert_eq!(a.free(x, 0x2000), Err(IovaFreeError::NotAllocated));
        let y = a.alloc(0x2000, 0x1000).unwrap();
        assert_eq!(a.free(y + 0x1000, 0x2000), Err(IovaFreeError::NotAllocated));
        assert_eq!(a.free(y, 0), Err(IovaFreeError::Invalid));
        assert_eq!(a.free(u64::MAX, 2), Err(IovaFreeError::Invalid));
        a.free(y, 0x2000).unwrap();
        assert_eq!(a.free_ranges(), [IovaRange::new(0x1000, 0xffff)]);
    }

    #[test]
    fn allocation_inside_a_window() {
        let mut a = IovaAllocator::new(&[IovaRange::new(0x1_0000, 0xffff_ffff)]);
        // Someone with 64 address bits took the low space first.
        assert_eq!(a.alloc(0x20_0000, 0x20_0000), Some(0x20_0000));
        // A 28-bit device gets the next space below 256 MiB.
        assert_eq!(a.alloc_in(0x1000, 0x1000, 0, (1 << 28) - 1), Some(0x1_0000));
        // A window above some address.
        let hi = a.alloc_in(0x1000, 0x1000, 0x8000_0000, u64::MAX).unwrap();
        assert_eq!(hi, 0x8000_0000);
        // Nothing fits in a window that is too small or outside the space.
        assert_eq!(a.alloc_in(0x2000, 0x1000, 0x1_0000, 0x1_1fff), None);
        assert_eq!(a.alloc_in(0x1000, 0x1000, 0x1_0000_0000, u64::MAX), None);
        // Everything returns to one range.
        a.free(0x20_0000, 0x20_0000).unwrap();
        a.free(0x1_0000, 0x1000).unwrap();
        a.free(hi, 0x1000).unwrap();
        assert_eq!(a.free_ranges(), [IovaRange::new(0x1_0000, 0xffff_ffff)]);
    }

    #[test]
    fn clamp_to_a_window() {
        let mut a = IovaAllocator::new(&[
            IovaRange::new(0, 0xfedf_ffff),
            IovaRange::new(0xfef0_0000, (1 << 48) - 1),
        ]);
        a.clamp(0x1_0000, (1 << 28) - 1);
        assert_eq!(a.free_ranges(), [IovaRange::new(0x1_0000, 0x0fff_ffff)]);
        a.clamp(0x2000_0000, u64::MAX);
        assert!(a.free_ranges().is_empty());
    }

    /// Random allocations and frees against a byte-exact model: no two live allocations
    /// overlap, every allocation lies inside the original ranges with its alignment, and
    /// freeing everything restores the original free space.
    #[test]
    fn random_against_a_model() {
        let ranges = [
            IovaRange::new(0x1_0000, 0xfedf_ffff),
            IovaRange::new(0xfef0_0000, 0x1_ffff_ffff),
        ];
        let mut a = IovaAllocator::new(&ranges);
        let total = a.free_bytes();
        let mut live: Vec<(u64, u64)> = Vec::new();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            if live.is_empty() || rnd() % 3 != 0 {
                let size = (rnd() % 64 + 1) * 0x1000 * if rnd() % 8 == 0 { 512 } else { 1 };
                let align = 0x1000u64 << (rnd() % 10);
                if let Some(s) = a.alloc(size, align) {
                    assert_eq!(s % align, 0);
                    assert!(
                        ranges
                            .iter()
                            .any(|r| s >= r.start && s + size - 1 <= r.last),
                        "{s:#x}+{size:#x} outside the ranges"
                    );
                    for &(o, osz) in &live {
                        assert!(s + size <= o || o + osz <= s, "overlap");
                    }
                    live.push((s, size));
                }
            } else {
                let i = (rnd() as usize) % live.len();
                let (s, size) = live.swap_remove(i);
                a.free(s, size).unwrap();
            }
            let used: u128 = live.iter().map(|&(_, sz)| u128::from(sz)).sum();
            assert_eq!(a.free_bytes() + used, total);
        }
        for (s, size) in live.drain(..) {
            a.free(s, size).unwrap();
        }
        assert_eq!(a.free_ranges(), ranges);
    }
}
