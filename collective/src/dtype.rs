//! Element types and reduction operations.
//!
//! Elements travel in little-endian byte order (the order of the registered buffers the
//! peers write into), so ranks on hosts of either byte order agree. Reductions run on
//! the host CPU.
//!
//! | type | name (nccl-tests) | sum | max / min |
//! | --- | --- | --- | --- |
//! | `f32` | `float` | IEEE addition, rounded per operation | IEEE `max`/`min` (a NaN loses to a number) |
//! | [`F16`] | `half` | computed in `f32`, rounded to nearest even | compared as `f32` |
//! | [`Bf16`] | `bfloat16` | computed in `f32`, rounded to nearest even | compared as `f32` |
//! | `i32` | `int32` | wrapping (exact modulo 2^32) | exact |
//! | `u8` | `uint8` | wrapping (exact modulo 2^8) | exact |
//!
//! # Float tolerance
//!
//! A floating-point sum depends on the order of the additions, and a collective adds the
//! ranks' values in an order that depends on the algorithm and on where an element falls
//! in the buffer. Every rank ends with the same bits (each element is reduced once, on
//! one rank, and then copied), but those bits may differ from a sum taken in rank order.
//! For N ranks the difference from the exact sum is at most (N − 1) rounding errors of at
//! most `EPSILON / 2 × Σ|xᵢ|` each, plus one rounding of the reference to the type, so
//! checks use `|got − exact| ≤ N × EPSILON × Σ|xᵢ|` with [`Element::EPSILON`] (2⁻²³ for
//! `f32`, 2⁻¹⁰ for `half`, 2⁻⁷ for `bfloat16`); integers, max and min are exact.

/// A reduction operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum (`ncclSum`).
    Sum,
    /// Maximum (`ncclMax`).
    Max,
    /// Minimum (`ncclMin`).
    Min,
}

impl ReduceOp {
    /// Every operation.
    pub const ALL: [ReduceOp; 3] = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min];

    /// The name nccl-tests prints in its `redop` column.
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
        }
    }
}

/// The element types, by the names nccl-tests prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// `f32`.
    Float,
    /// IEEE 754 binary16 ([`F16`]).
    Half,
    /// bfloat16 ([`Bf16`]).
    Bfloat16,
    /// `i32`.
    Int32,
    /// `u8`.
    Uint8,
}

impl DataType {
    /// The name nccl-tests prints in its `type` column.
    pub const fn name(self) -> &'static str {
        match self {
            DataType::Float => "float",
            DataType::Half => "half",
            DataType::Bfloat16 => "bfloat16",
            DataType::Int32 => "int32",
            DataType::Uint8 => "uint8",
        }
    }

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DataType::Float | DataType::Int32 => 4,
            DataType::Half | DataType::Bfloat16 => 2,
            DataType::Uint8 => 1,
        }
    }
}

/// An element a collective moves and reduces.
pub trait Element: Copy + PartialEq + core::fmt::Debug + Send + Sync + 'static {
    /// Bytes per element on the wire.
    const SIZE: usize;
    /// The type's name.
    const DATATYPE: DataType;
    /// The relative rounding unit of one operation (0 for integers): see the module's
    /// tolerance.
    const EPSILON: f64;
    /// Reads an element from `SIZE` little-endian bytes.
    fn read_le(b: &[u8]) -> Self;
    /// Writes the element as `SIZE` little-endian bytes.
    fn write_le(self, b: &mut [u8]);
    /// `op(a, b)`.
    fn reduce(op: ReduceOp, a: Self, b: Self) -> Self;
    /// The value as `f64` (for checks against a reference).
    fn to_f64(self) -> f64;
    /// The element nearest to `v` (integers: wrapped from the truncated value).
    fn from_f64(v: f64) -> Self;

    /// `dst[i] = op(dst[i], src[i])` for the elements encoded in `src`
    /// (`src.len() == dst.len() * SIZE`).
    fn reduce_from_le(op: ReduceOp, dst: &mut [Self], src: &[u8]) {
        for (d, s) in dst.iter_mut().zip(src.chunks_exact(Self::SIZE)) {
            *d = Self::reduce(op, *d, Self::read_le(s));
        }
    }
    /// `dst[i] = src[i]` for the elements encoded in `src`.
    fn copy_from_le(dst: &mut [Self], src: &[u8]) {
        for (d, s) in dst.iter_mut().zip(src.chunks_exact(Self::SIZE)) {
            *d = Self::read_le(s);
        }
    }
    /// Encodes `src` into `dst` (`dst.len() == src.len() * SIZE`).
    fn copy_to_le(src: &[Self], dst: &mut [u8]) {
        for (s, d) in src.iter().zip(dst.chunks_exact_mut(Self::SIZE)) {
            s.write_le(d);
        }
    }
}

impl Element for f32 {
    const SIZE: usize = 4;
    const DATATYPE: DataType = DataType::Float;
    const EPSILON: f64 = f32::EPSILON as f64;
    fn read_le(b: &[u8]) -> Self {
        f32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
    fn write_le(self, b: &mut [u8]) {
        b[..4].copy_from_slice(&self.to_le_bytes());
    }
    fn reduce(op: ReduceOp, a: Self, b: Self) -> Self {
        match op {
            ReduceOp::Sum => a + b,
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl Element for i32 {
    const SIZE: usize = 4;
    const DATATYPE: DataType = DataType::Int32;
    const EPSILON: f64 = 0.0;
    fn read_le(b: &[u8]) -> Self {
        i32::from_le_bytes([b[0], b[1], b[2], b[3]])
    }
    fn write_le(self, b: &mut [u8]) {
        b[..4].copy_from_slice(&self.to_le_bytes());
    }
    fn reduce(op: ReduceOp, a: Self, b: Self) -> Self {
        match op {
            ReduceOp::Sum => a.wrapping_add(b),
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as i64 as i32
    }
}

impl Element for u8 {
    const SIZE: usize = 1;
    const DATATYPE: DataType = DataType::Uint8;
    const EPSILON: f64 = 0.0;
    fn read_le(b: &[u8]) -> Self {
        b[0]
    }
    fn write_le(self, b: &mut [u8]) {
        b[0] = self;
    }
    fn reduce(op: ReduceOp, a: Self, b: Self) -> Self {
        match op {
            ReduceOp::Sum => a.wrapping_add(b),
            ReduceOp::Max => a.max(b),
            ReduceOp::Min => a.min(b),
        }
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as i64 as u8
    }
}

/// An IEEE 754 binary16 value (`half`): 1 sign bit, 5 exponent bits, 10 mantissa bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct F16(pub u16);

impl F16 {
    /// The value as `f32` (exact).
    pub fn to_f32(self) -> f32 {
        let h = self.0 as u32;
        let sign = (h & 0x8000) << 16;
        let exp = (h >> 10) & 0x1f;
        let man = h & 0x3ff;
        let bits = match exp {
            0 if man == 0 => sign,
            // Subnormal: man × 2^-24, exact in f32.
            0 => {
                let v = man as f32 * (1.0 / 16_777_216.0);
                return if sign != 0 { -v } else { v };
            }
            0x1f => sign | 0x7f80_0000 | (man << 13),
            _ => sign | ((exp + 112) << 23) | (man << 13),
        };
        f32::from_bits(bits)
    }

    /// The `half` nearest to `v` (ties to even; too large gives infinity, NaN stays NaN).
    pub fn from_f32(v: f32) -> Self {
        let x = v.to_bits();
        let sign = ((x >> 16) & 0x8000) as u16;
        let exp = ((x >> 23) & 0xff) as i32;
        let man = x & 0x7f_ffff;
        if exp == 0xff {
            let nan = if man != 0 {
                0x200 | (man >> 13) as u16
            } else {
                0
            };
            return F16(sign | 0x7c00 | nan);
        }
        let half_exp = exp - 127 + 15;
        if half_exp >= 0x1f {
            return F16(sign | 0x7c00);
        }
        if half_exp <= 0 {
            // A subnormal half (or zero): the mantissa with its implicit bit, shifted.
            let shift = (14 - half_exp) as u32;
            if shift > 24 {
                return F16(sign);
            }
            let m = man | 0x80_0000;
            let r = round_shift(m, shift);
            return F16(sign | r as u16);
        }
        // A carry out of the mantissa moves into the exponent, up to infinity: right.
        let r = ((half_exp as u32) << 10) + round_shift(man, 13);
        F16(sign | r as u16)
    }
}

/// `m >> shift`, rounded to nearest, ties to even (`shift` ≥ 1).
fn round_shift(m: u32, shift: u32) -> u32 {
    let q = m >> shift;
    let half = 1u32 << (shift - 1);
    let rest = m & ((half << 1) - 1);
    if rest > half || (rest == half && q & 1 == 1) {
        q + 1
    } else {
        q
    }
}

impl Element for F16 {
    const SIZE: usize = 2;
    const DATATYPE: DataType = DataType::Half;
    const EPSILON: f64 = 1.0 / 1024.0;
    fn read_le(b: &[u8]) -> Self {
        F16(u16::from_le_bytes([b[0], b[1]]))
    }
    fn write_le(self, b: &mut [u8]) {
        b[..2].copy_from_slice(&self.0.to_le_bytes());
    }
    fn reduce(op: ReduceOp, a: Self, b: Self) -> Self {
        F16::from_f32(f32::reduce(op, a.to_f32(), b.to_f32()))
    }
    fn to_f64(self) -> f64 {
        self.to_f32() as f64
    }
    fn from_f64(v: f64) -> Self {
        F16::from_f32(v as f32)
    }
}

/// A bfloat16 value: the upper 16 bits of an `f32` (8 exponent bits, 7 mantissa bits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bf16(pub u16);

impl Bf16 {
    /// The value as `f32` (exact).
    pub fn to_f32(self) -> f32 {
        f32::from_bits((self.0 as u32) << 16)
    }

    /// The `bfloat16` nearest to `v` (ties to even; NaN stays NaN).
    pub fn from_f32(v: f32) -> Self {
        let x = v.to_bits();
        if v.is_nan() {
            return Bf16(((x >> 16) as u16) | 0x40);
        }
        Bf16((round_shift(x & 0x7fff_ffff, 16) | ((x >> 16) & 0x8000)) as u16)
    }
}

impl Element for Bf16 {
    const SIZE: usize = 2;
    const DATATYPE: DataType = DataType::Bfloat16;
    const EPSILON: f64 = 1.0 / 128.0;
    fn read_le(b: &[u8]) -> Self {
        Bf16(u16::from_le_bytes([b[0], b[1]]))
    }
    fn write_le(self, b: &mut [u8]) {
        b[..2].copy_from_slice(&self.0.to_le_bytes());
    }
    fn reduce(op: ReduceOp, a: Self, b: Self) -> Self {
        Bf16::from_f32(f32::reduce(op, a.to_f32(), b.to_f32()))
    }
    fn to_f64(self) -> f64 {
        self.to_f32() as f64
    }
    fn from_f64(v: f64) -> Self {
        Bf16::from_f32(v as f32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_round_trips_every_finite_value_and_rounds_ties_to_even() {
        for h in 0..=0xffffu16 {
            let f = F16(h).to_f32();
            if f.is_nan() {
                assert!(F16::from_f32(f).to_f32().is_nan());
                continue;
            }
            assert_eq!(F16::from_f32(f), F16(h), "{h:#x} = {f}");
        }
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1).
        assert_eq!(F16::from_f32(1.0 + 1.0 / 2048.0), F16(0x3c00));
        // 1 + 3 × 2^-11 is halfway between 1 + 2^-10 and 1 + 2^-9: to the even one.
        assert_eq!(F16::from_f32(1.0 + 3.0 / 2048.0), F16(0x3c02));
        assert_eq!(F16::from_f32(65504.0), F16(0x7bff));
        assert_eq!(F16::from_f32(65520.0), F16(0x7c00), "rounds up to infinity");
        assert_eq!(
            F16::from_f32(1e-8),
            F16(0),
            "below half the smallest subnormal"
        );
        assert_eq!(F16::from_f32(5.960_464_5e-8), F16(1), "smallest subnormal");
    }

    #[test]
    fn bfloat16_rounds_to_nearest_even() {
        assert_eq!(Bf16::from_f32(1.0), Bf16(0x3f80));
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
        assert_eq!(Bf16::from_f32(1.0 + 1.0 / 256.0), Bf16(0x3f80));
        assert_eq!(Bf16::from_f32(1.0 + 3.0 / 256.0), Bf16(0x3f82));
        assert_eq!(Bf16::from_f32(-2.5).to_f32(), -2.5);
        assert!(Bf16::from_f32(f32::NAN).to_f32().is_nan());
    }

    #[test]
    fn integer_sums_wrap_and_max_min_are_exact() {
        assert_eq!(u8::reduce(ReduceOp::Sum, 200, 100), 44);
        assert_eq!(i32::reduce(ReduceOp::Sum, i32::MAX, 1), i32::MIN);
        assert_eq!(i32::reduce(ReduceOp::Min, -3, 2), -3);
        assert_eq!(f32::reduce(ReduceOp::Max, f32::NAN, 1.0), 1.0);
    }
}
