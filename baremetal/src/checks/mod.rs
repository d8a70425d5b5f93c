//! The checks added on top of the RC pair of `main.rs`, one file each: atomics
//! ([`atomics`]) and `uhca-collective` over four functions ([`collective`]).

pub mod atomics;
pub mod collective;
