//! rdma-core's pingpong out-of-band message (`LID:QPN:PSN:GID`, 52 bytes with its NUL), as
//! `uhca::oob::Dest::parse` reads it from the peer. Bad input is `OobError::Malformed`,
//! never a panic; what parses is within its fields' ranges and writes back to a message
//! that parses to the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uhca::oob::{Dest, MSG_LEN, OobError};

fuzz_target!(|data: &[u8]| {
    match Dest::parse(data) {
        Ok(d) => {
            assert!(d.qpn <= 0xff_ffff && d.psn <= 0xff_ffff);
            let wire = d.to_wire();
            assert_eq!(wire.len(), MSG_LEN);
            assert_eq!(Dest::parse(&wire).unwrap(), d);
        }
        Err(OobError::Malformed(_)) => {}
        Err(e) => panic!("parsing gave {e:?}, not Malformed"),
    }
});
