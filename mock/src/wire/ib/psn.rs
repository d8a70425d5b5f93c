//! 24-bit packet sequence number arithmetic (IBTA Vol 1 9.7.1: PSNs wrap modulo 2^24 and are
//! compared within a window of half the space).

/// The PSN space: PSNs are 24 bits.
pub const PSN_MASK: u32 = 0x00FF_FFFF;

/// `psn + n` modulo 2^24.
pub const fn add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & PSN_MASK
}

/// The signed distance from `b` to `a` (`a - b`) in the 24-bit space, in
/// `-2^23 ..= 2^23 - 1`: positive if `a` is after `b`.
pub const fn diff(a: u32, b: u32) -> i32 {
    // Shift the 24-bit difference into the top of an i32 and back, sign-extending it.
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

/// Whether `a` comes before `b` (within half the PSN space).
pub const fn before(a: u32, b: u32) -> bool {
    diff(a, b) < 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraparound() {
        assert_eq!(add(0xFF_FFFF, 1), 0);
        assert_eq!(add(0xFF_FFFE, 5), 3);
        assert_eq!(diff(0, 0xFF_FFFF), 1);
        assert_eq!(diff(0xFF_FFFF, 0), -1);
        assert_eq!(diff(5, 5), 0);
        assert_eq!(diff(0x7F_FFFF, 0), 0x7F_FFFF);
        assert_eq!(diff(0x80_0000, 0), -0x80_0000);
        assert!(before(0xFF_FFF0, 2));
        assert!(!before(2, 0xFF_FFF0));
        for (a, n) in [(0u32, 7u32), (0xFF_FFFA, 9), (0x12_3456, 0x7F_FFFF)] {
            assert_eq!(diff(add(a, n), a), n as i32);
        }
    }
}
