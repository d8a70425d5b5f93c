//! The field model of the PRM's `mlx5_ifc` layouts, and the macros that declare them.
//!
//! The PRM describes every command and context as a big-endian bit string. A field is a
//! (bit offset, bit width) pair, where bit 0 is the most significant bit of the first byte,
//! exactly like Linux's `MLX5_SET`/`MLX5_GET` and the `bit_offset` column of the reference
//! tables. [`prm_struct!`](crate::prm_struct) declares a layout once per field; the getters,
//! the setters, the [`Field`] descriptors and the conformance table are all generated from
//! that one declaration, so they cannot drift apart.

/// One field of a PRM layout: where it sits, in the PRM's big-endian bit numbering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Field {
    /// The PRM name of the field, as in `MLX5_SET(layout, p, name, v)`.
    pub name: &'static str,
    /// Offset of the field's most significant bit from the start of the layout.
    pub bit_offset: u32,
    /// Width in bits.
    pub bit_width: u32,
}

impl Field {
    /// Byte offset of the 32-bit big-endian dword that holds this field's first bit.
    pub const fn dword_byte_offset(&self) -> usize {
        (self.bit_offset as usize / 32) * 4
    }

    /// Byte offset of the field's first bit.
    pub const fn byte_offset(&self) -> usize {
        self.bit_offset as usize / 8
    }

    /// Right shift that brings this field to bit 0 of its host-order dword
    /// (`32 - offset % 32 - width`). Only meaningful for a field within one dword.
    pub const fn dword_shift(&self) -> u32 {
        32 - (self.bit_offset % 32) - self.bit_width
    }

    /// Mask of the field's value once shifted down (`width` low bits set).
    pub const fn value_mask(&self) -> u64 {
        if self.bit_width >= 64 {
            u64::MAX
        } else {
            (1u64 << self.bit_width) - 1
        }
    }

    /// Whether the field lies within one 32-bit dword, so it can be read with one 32-bit
    /// access (the initialization segment is read that way).
    pub const fn within_dword(&self) -> bool {
        self.bit_width <= 32 && (self.bit_offset % 32) + self.bit_width <= 32
    }

    /// Extracts this field from the host-order value of its dword.
    pub const fn from_dword(&self, dword: u32) -> u32 {
        ((dword >> self.dword_shift()) as u64 & self.value_mask()) as u32
    }

    /// Returns `dword` with this field replaced by `value` (masked to the field's width).
    pub const fn into_dword(&self, dword: u32, value: u32) -> u32 {
        let mask = (self.value_mask() as u32) << self.dword_shift();
        (dword & !mask) | ((value << self.dword_shift()) & mask)
    }
}

/// Identity of one declared layout, for the conformance test and for diagnostics.
#[derive(Clone, Copy, Debug)]
pub struct LayoutInfo {
    /// The tag in the PRM reference table, e.g. `mlx5_ifc_create_cq_in_bits`.
    pub prm_name: &'static str,
    /// Total size in bits.
    pub size_bits: u32,
    /// Every declared field.
    pub fields: &'static [Field],
    /// Writes all ones into one field through its generated setter, by field index. The
    /// conformance test uses this to prove that each setter touches exactly the declared bits.
    pub fill_field: fn(&mut [u8], usize),
}

/// Reads `width` bits at big-endian bit offset `off` of `buf`, right-aligned.
///
/// # Panics
///
/// If `width > 64` or the field lies outside `buf`; the generated accessors only call it with
/// in-bounds compile-time constants.
#[inline(always)]
pub const fn get_bits(buf: &[u8], off: usize, width: usize) -> u64 {
    assert!(width <= 64 && width > 0);
    let first = off / 8;
    let last = (off + width - 1) / 8;
    let mut acc: u128 = 0;
    let mut i = first;
    while i <= last {
        acc = (acc << 8) | buf[i] as u128;
        i += 1;
    }
    let total_bits = (last - first + 1) * 8;
    let shift = total_bits - (off % 8) - width;
    let mask: u128 = (1u128 << width) - 1;
    ((acc >> shift) & mask) as u64
}

/// Writes the low `width` bits of `value` at big-endian bit offset `off` of `buf`, leaving
/// every other bit as it was. Higher bits of `value` are ignored, as with `MLX5_SET`.
///
/// # Panics
///
/// As [`get_bits`].
#[inline(always)]
pub fn set_bits(buf: &mut [u8], off: usize, width: usize, value: u64) {
    assert!(width <= 64 && width > 0);
    let first = off / 8;
    let last = (off + width - 1) / 8;
    let total_bits = (last - first + 1) * 8;
    let shift = total_bits - (off % 8) - width;
    let mask: u128 = ((1u128 << width) - 1) << shift;
    let mut acc: u128 = 0;
    for &b in &buf[first..=last] {
        acc = (acc << 8) | b as u128;
    }
    acc = (acc & !mask) | (((value as u128) << shift) & mask);
    for i in (first..=last).rev() {
        buf[i] = acc as u8;
        acc >>= 8;
    }
}

/// A Rust type that a PRM scalar field is read as: `bool` for one bit, else the smallest
/// unsigned integer that holds the width.
pub trait FieldValue: Copy {
    /// Converts from the raw right-aligned bits.
    fn from_raw(raw: u64) -> Self;
    /// Converts to raw bits (the setter masks them to the field's width).
    fn into_raw(self) -> u64;
    /// All ones, as wide as the type (used by the conformance probe).
    const ALL_ONES: Self;
    /// The widest field this type can hold.
    const BITS: u32;
}

macro_rules! field_value_int {
    ($($t:ty),*) => {$(
        impl FieldValue for $t {
            #[inline(always)]
            fn from_raw(raw: u64) -> Self { raw as $t }
            #[inline(always)]
            fn into_raw(self) -> u64 { self as u64 }
            const ALL_ONES: Self = <$t>::MAX;
            const BITS: u32 = <$t>::BITS;
        }
    )*};
}
field_value_int!(u8, u16, u32, u64);

impl FieldValue for bool {
    #[inline(always)]
    fn from_raw(raw: u64) -> Self {
        raw != 0
    }
    #[inline(always)]
    fn into_raw(self) -> u64 {
        self as u64
    }
    const ALL_ONES: Self = true;
    const BITS: u32 = 1;
}

/// Implemented by every declared PRM layout.
pub trait PrmLayout:
    zerocopy::FromBytes + zerocopy::IntoBytes + zerocopy::KnownLayout + zerocopy::Immutable + Sized
{
    /// Reference-table identity and fields of this layout.
    const LAYOUT: LayoutInfo;
    /// Size in bytes.
    const SIZE: usize;

    /// Reads any declared field by descriptor (for generic code such as the mock's
    /// decoders); prefer the typed getters.
    fn get(&self, field: Field) -> u64 {
        get_bits(
            self.as_bytes(),
            field.bit_offset as usize,
            field.bit_width as usize,
        )
    }

    /// Writes any declared field by descriptor; prefer the typed setters.
    fn set(&mut self, field: Field, value: u64) {
        set_bits(
            self.as_mut_bytes(),
            field.bit_offset as usize,
            field.bit_width as usize,
            value,
        )
    }
}

/// Declares PRM layouts.
///
/// Each layout becomes a byte-image struct (`#[repr(transparent)]` over `[u8; N]`, all
/// zerocopy traits, alignment 1) and a module, named after the PRM layout, holding one
/// [`Field`] constant per field. Field kinds:
///
/// * `name / set_name @ off, width : u8;` (also `bool`, `u16`, `u32`, `u64`): a scalar with
///   a getter `name()` and a setter `set_name(v)`;
/// * `name / name_mut @ off, width : [u8];`: a byte-aligned byte string with `name()` →
///   `&[u8; N]` and `name_mut()`;
/// * `name / name_mut @ off, width : struct T;`: a nested layout with `name()` → `&T` and
///   `name_mut()`;
/// * `name @ off : flex T;`: a flexible array after the fixed part; only its descriptor
///   exists (width 0), since it lies outside the fixed-size struct.
///
/// Offsets and widths are in the PRM's big-endian bit numbering. A module-level `LAYOUTS`
/// table lists every layout of one invocation for the conformance test.
#[macro_export]
macro_rules! prm_struct {
    (
        $(
            $(#[$meta:meta])*
            pub struct $name:ident : $module:ident = $prm:literal, $bits:literal bits {
                $( $(#[$fmeta:meta])* $field:ident $(/ $setter:ident)? @ $off:literal $(, $width:literal)? : $kind:tt $($ty:ty)? ; )*
            }
        )*
    ) => {
        $(
            $(#[$meta])*
            #[doc = ""]
            #[doc = concat!("PRM layout `", $prm, "`, ", stringify!($bits), " bits.")]
            #[derive(Clone, Copy, PartialEq, Eq, zerocopy::FromBytes, zerocopy::IntoBytes,
                     zerocopy::KnownLayout, zerocopy::Immutable, zerocopy::Unaligned)]
            #[repr(transparent)]
            pub struct $name(pub [u8; $bits / 8]);

            #[doc = concat!("Field descriptors of [`", stringify!($name), "`] (PRM `", $prm, "`).")]
            #[allow(non_upper_case_globals, missing_docs)]
            pub mod $module {
                $(
                    $(#[$fmeta])*
                    pub const $field: $crate::field::Field = $crate::field::Field {
                        name: stringify!($field),
                        bit_offset: $off,
                        bit_width: $crate::prm_struct!(@width $($width)?),
                    };
                )*
            }

            impl Default for $name {
                fn default() -> Self {
                    Self([0; $bits / 8])
                }
            }

            impl core::fmt::Debug for $name {
                fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                    f.debug_struct(stringify!($name))
                        .field("bytes", &self.0.len())
                        .finish_non_exhaustive()
                }
            }

            impl $crate::field::PrmLayout for $name {
                const LAYOUT: $crate::field::LayoutInfo = $crate::field::LayoutInfo {
                    prm_name: $prm,
                    size_bits: $bits,
                    fields: &[$($module::$field),*],
                    fill_field: {
                        #[allow(unused_variables, unused_mut, unused_assignments)]
                        fn fill(buf: &mut [u8], index: usize) {
                            let mut s = $name::default();
                            let mut i = 0usize;
                            $(
                                if i == index {
                                    $crate::prm_struct!(@fill s, $field $(/ $setter)?, $kind $($ty)?);
                                }
                                i += 1;
                            )*
                            buf.copy_from_slice(&s.0);
                        }
                        fill
                    },
                };
                const SIZE: usize = $bits / 8;
            }

            const _: () = assert!($bits % 8 == 0);
            $(
                const _: () = $crate::prm_struct!(@check $module::$field, $bits, $kind $($ty)?);
            )*

            // PRM field names keep their capitals (`atomic_req_8B_endianness_mode`).
            #[allow(missing_docs, clippy::len_without_is_empty, non_snake_case)]
            impl $name {
                $(
                    $crate::prm_struct!(@acc $(#[$fmeta])* $module, $field $(/ $setter)?, $kind $($ty)?);
                )*
            }
        )*

        /// Every layout declared in this module, for the conformance test.
        pub const LAYOUTS: &[$crate::field::LayoutInfo] = &[
            $( <$name as $crate::field::PrmLayout>::LAYOUT ),*
        ];
    };

    (@width) => { 0 };
    (@width $w:literal) => { $w };

    // Compile-time checks of each declaration's shape.
    (@check $f:path, $bits:literal, [u8]) => {{
        let f = $f;
        assert!(f.bit_offset + f.bit_width <= $bits, "field past the end of its layout");
        assert!(f.bit_offset % 8 == 0 && f.bit_width % 8 == 0, "byte string not byte-aligned");
    }};
    (@check $f:path, $bits:literal, struct $t:ty) => {{
        let f = $f;
        assert!(f.bit_offset + f.bit_width <= $bits, "field past the end of its layout");
        assert!(f.bit_offset % 8 == 0, "nested layout not byte-aligned");
        assert!(f.bit_width as usize == <$t as $crate::field::PrmLayout>::SIZE * 8, "nested layout size");
    }};
    (@check $f:path, $bits:literal, flex $t:ty) => {{
        let f = $f;
        assert!(f.bit_offset == $bits && f.bit_width == 0, "flexible array not at the end");
    }};

    (@check $f:path, $bits:literal, $kind:ident) => {{
        let f = $f;
        assert!(f.bit_offset + f.bit_width <= $bits, "field past the end of its layout");
        assert!(f.bit_width <= <$kind as $crate::field::FieldValue>::BITS && f.bit_width > 0,
            "field wider than its Rust type");
    }};

    (@fill $s:ident, $field:ident / $setter:ident, [u8]) => {
        $s.$setter().fill(0xff)
    };
    (@fill $s:ident, $field:ident / $setter:ident, struct $t:ty) => {
        $s.$setter().0.fill(0xff)
    };
    (@fill $s:ident, $field:ident, flex $t:ty) => {
        {}
    };
    (@fill $s:ident, $field:ident / $setter:ident, $kind:ident) => {
        $s.$setter(<$kind as $crate::field::FieldValue>::ALL_ONES)
    };

    (@acc $(#[$fmeta:meta])* $module:ident, $field:ident / $setter:ident, [u8]) => {
        $(#[$fmeta])*
        #[doc = concat!("`", stringify!($field), "` as bytes.")]
        #[inline]
        pub fn $field(&self) -> &[u8; $module::$field.bit_width as usize / 8] {
            const F: $crate::field::Field = $module::$field;
            const START: usize = F.bit_offset as usize / 8;
            const LEN: usize = F.bit_width as usize / 8;
            match <&[u8; LEN]>::try_from(&self.0[START..START + LEN]) {
                Ok(r) => r,
                Err(_) => unreachable!(),
            }
        }
        #[doc = concat!("`", stringify!($field), "` as mutable bytes.")]
        #[inline]
        pub fn $setter(&mut self) -> &mut [u8; $module::$field.bit_width as usize / 8] {
            const F: $crate::field::Field = $module::$field;
            const START: usize = F.bit_offset as usize / 8;
            const LEN: usize = F.bit_width as usize / 8;
            match <&mut [u8; LEN]>::try_from(&mut self.0[START..START + LEN]) {
                Ok(r) => r,
                Err(_) => unreachable!(),
            }
        }
    };
    (@acc $(#[$fmeta:meta])* $module:ident, $field:ident / $setter:ident, struct $t:ty) => {
        $(#[$fmeta])*
        #[doc = concat!("`", stringify!($field), "`, a nested [`", stringify!($t), "`].")]
        #[inline]
        pub fn $field(&self) -> &$t {
            const F: $crate::field::Field = $module::$field;
            const START: usize = F.bit_offset as usize / 8;
            const LEN: usize = F.bit_width as usize / 8;
            match <$t as zerocopy::FromBytes>::ref_from_bytes(&self.0[START..START + LEN]) {
                Ok(r) => r,
                Err(_) => unreachable!(),
            }
        }
        #[doc = concat!("`", stringify!($field), "`, a nested [`", stringify!($t), "`], mutable.")]
        #[inline]
        pub fn $setter(&mut self) -> &mut $t {
            const F: $crate::field::Field = $module::$field;
            const START: usize = F.bit_offset as usize / 8;
            const LEN: usize = F.bit_width as usize / 8;
            match <$t as zerocopy::FromBytes>::mut_from_bytes(&mut self.0[START..START + LEN]) {
                Ok(r) => r,
                Err(_) => unreachable!(),
            }
        }
    };
    (@acc $(#[$fmeta:meta])* $module:ident, $field:ident, flex $t:ty) => {};
    (@acc $(#[$fmeta:meta])* $module:ident, $field:ident / $setter:ident, $kind:ident) => {
        $(#[$fmeta])*
        #[doc = concat!("`", stringify!($field), "`.")]
        #[inline]
        pub fn $field(&self) -> $kind {
            let f = $module::$field;
            <$kind as $crate::field::FieldValue>::from_raw($crate::field::get_bits(
                &self.0, f.bit_offset as usize, f.bit_width as usize))
        }
        #[doc = concat!("Sets `", stringify!($field), "` (bits beyond its width are dropped).")]
        #[inline]
        pub fn $setter(&mut self, value: $kind) -> &mut Self {
            let f = $module::$field;
            $crate::field::set_bits(&mut self.0, f.bit_offset as usize, f.bit_width as usize,
                <$kind as $crate::field::FieldValue>::into_raw(value));
            self
        }
    };
}

/// Declares a PRM constant group as an enum that keeps unknown values (`Unknown(x)`), with
/// lossless conversions from and to the raw integer and a table of (PRM name, value) rows
/// for the conformance test.
#[macro_export]
macro_rules! prm_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident : $repr:ty = $group:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal => $cname:literal, )*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum $name {
            $( $(#[$vmeta])* #[doc = concat!("`", $cname, "`")] $variant, )*
            /// A value this crate does not name, kept as it was read.
            Unknown($repr),
        }

        impl $name {
            /// Every named value: (PRM name, value), for the conformance test.
            pub const PRM_VALUES: &'static [(&'static str, u64)] = &[ $( ($cname, $value), )* ];
            /// The reference-table group these values belong to.
            pub const PRM_GROUP: &'static str = $group;

            /// The raw value.
            #[inline]
            pub const fn raw(self) -> $repr {
                match self {
                    $( Self::$variant => $value, )*
                    Self::Unknown(v) => v,
                }
            }

            /// Decodes a raw value; never fails.
            #[inline]
            pub const fn from_raw(v: $repr) -> Self {
                match v {
                    $( $value => Self::$variant, )*
                    other => Self::Unknown(other),
                }
            }

            /// The PRM name of the value, if it is named.
            pub const fn prm_name(self) -> Option<&'static str> {
                match self {
                    $( Self::$variant => Some($cname), )*
                    Self::Unknown(_) => None,
                }
            }
        }

        impl From<$repr> for $name {
            fn from(v: $repr) -> Self {
                Self::from_raw(v)
            }
        }

        impl From<$name> for $repr {
            fn from(v: $name) -> Self {
                v.raw()
            }
        }

        impl core::fmt::Display for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                match self.prm_name() {
                    Some(n) => f.write_str(n),
                    None => write!(f, "{}({:#x})", stringify!($name), self.raw()),
                }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn get_set_bits_match_mlx5_set_semantics() {
        // 5 bits at bit 107: dword 3, bits 11..16 of it, host shift 32-11-5 = 16.
        let mut b = [0u8; 64];
        set_bits(&mut b, 107, 5, 0x1f);
        assert_eq!(&b[12..16], &[0x00, 0x1f, 0x00, 0x00]);
        assert_eq!(get_bits(&b, 107, 5), 0x1f);
        // A field straddling bytes: 12 bits at offset 4.
        let mut b = [0u8; 4];
        set_bits(&mut b, 4, 12, 0xabc);
        assert_eq!(b, [0x0a, 0xbc, 0, 0]);
        // Neighbours survive.
        let mut b = [0xffu8; 4];
        set_bits(&mut b, 4, 12, 0);
        assert_eq!(b, [0xf0, 0x00, 0xff, 0xff]);
        // A 64-bit field not aligned to a byte.
        let mut b = [0u8; 10];
        set_bits(&mut b, 4, 64, 0x0123_4567_89ab_cdef);
        assert_eq!(get_bits(&b, 4, 64), 0x0123_4567_89ab_cdef);
        assert_eq!(b[0], 0x00);
        assert_eq!(b[1], 0x12);
        assert_eq!(b[7], 0xde);
        assert_eq!(b[8], 0xf0);
        assert_eq!(b[9], 0x00);
        // Values wider than the field are truncated, as MLX5_SET does.
        let mut b = [0u8; 1];
        set_bits(&mut b, 0, 3, 0xff);
        assert_eq!(b, [0xe0]);
    }

    #[test]
    fn field_dword_helpers() {
        let f = Field {
            name: "log_cmdq_size",
            bit_offset: 0x20 * 8 - 32 + 24,
            bit_width: 4,
        };
        assert!(f.within_dword());
        assert_eq!(f.dword_shift(), 4);
        assert_eq!(f.from_dword(0x0000_00a5), 0xa);
        assert_eq!(f.into_dword(0xffff_ffff, 0), 0xffff_ff0f);
    }
}

/// One field of a datapath (C-struct) layout, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteField {
    /// The field's name in the C header (`mlx5_wqe_ctrl_seg.qpn_ds` → `qpn_ds`).
    pub name: &'static str,
    /// Offset from the start of the struct, bytes.
    pub byte_offset: usize,
    /// Size, bytes.
    pub byte_size: usize,
}

/// Identity of one declared datapath layout, for the conformance test.
#[derive(Clone, Copy, Debug)]
pub struct ByteLayoutInfo {
    /// The struct tag in the reference table, e.g. `mlx5_wqe_ctrl_seg`.
    pub c_name: &'static str,
    /// `size_of` the struct.
    pub size: usize,
    /// Every declared field.
    pub fields: &'static [ByteField],
}

/// Declares datapath layouts: `#[repr(C)]` structs of zerocopy big-endian integers and byte
/// arrays (alignment 1, no padding), with a table of their fields' offsets and sizes taken
/// from the compiled struct (not restated), which the conformance test checks against the
/// reference table. A module-level `BYTE_LAYOUTS` lists them.
#[macro_export]
macro_rules! dp_struct {
    (
        $(
            $(#[$meta:meta])*
            pub struct $name:ident = $cname:literal {
                $( $(#[$fmeta:meta])* pub $field:ident : $ty:ty, )*
            }
        )*
    ) => {
        $(
            $(#[$meta])*
            #[doc = ""]
            #[doc = concat!("C layout `struct ", $cname, "`.")]
            #[derive(Clone, Copy, Debug, PartialEq, Eq, zerocopy::FromBytes,
                     zerocopy::IntoBytes, zerocopy::KnownLayout, zerocopy::Immutable,
                     zerocopy::Unaligned)]
            #[repr(C)]
            pub struct $name {
                $( $(#[$fmeta])* pub $field: $ty, )*
            }

            impl Default for $name {
                fn default() -> Self {
                    <Self as zerocopy::FromZeros>::new_zeroed()
                }
            }

            impl $name {
                /// Reference-table identity and fields of this layout.
                pub const LAYOUT: $crate::field::ByteLayoutInfo = $crate::field::ByteLayoutInfo {
                    c_name: $cname,
                    size: core::mem::size_of::<$name>(),
                    fields: &[$(
                        $crate::field::ByteField {
                            name: stringify!($field),
                            byte_offset: memoffset::offset_of!($name, $field),
                            byte_size: core::mem::size_of::<$ty>(),
                        },
                    )*],
                };
            }
        )*

        /// Every datapath layout declared in this module, for the conformance test.
        pub const BYTE_LAYOUTS: &[$crate::field::ByteLayoutInfo] = &[ $( $name::LAYOUT ),* ];
    };
}
