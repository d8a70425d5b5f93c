//! The out-of-band exchange of `all_reduce_perf --udp` (uhca-collective's endpoints between
//! processes): one line per pair of ranks, `from to gid mac lid qpn psn inbox rkey`, as
//! `uhca_collective::line::parse_endpoint_line` reads it from a peer. Bad input is a
//! `BadLine`, never a panic; a parsed line writes back to one that parses to the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uhca_collective::line::{endpoint_line, parse_endpoint_line};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((from, to, e)) = parse_endpoint_line(text) {
        let again = endpoint_line(from, to, &e);
        assert_eq!(parse_endpoint_line(&again), Ok((from, to, e)));
    }
});
