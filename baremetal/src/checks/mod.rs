//! The checks added on top of the RC pair of `main.rs`, one file each: atomics
//! ([`atomics`]).

pub mod atomics;
