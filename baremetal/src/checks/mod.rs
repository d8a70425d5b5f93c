//! The checks added on top of the RC pair of `main.rs`, one file each: atomics
//! ([`atomics`]) `uhca-collective` over four functions ([`collective`]) , a function-level reset
//! under the driver ([`flr`]) and a device that stops answering or disappears ([`hostile`]).

pub mod atomics;
pub mod cm;
pub mod collective;
pub mod duo;
pub mod flr;
pub mod hostile;
