//! The initialization segment at offset 0 of BAR0, and the health buffer inside it.
//!
//! The driver reads and writes it with 32-bit big-endian accesses; the [`initial_seg`]
//! field descriptors say which dword and which bits each field occupies.

mod layouts;
pub use layouts::*;
