//! uhca's own out-of-band exchange (the bandwidth, latency and RDMA examples): the 87-byte
//! `LID:QPN:PSN:GID:RKEY:VADDR:LEN` message (`uhca::oob::RdmaDest::parse`), then the
//! session's lines of text (`uhca::oob::read_line`, what `Session::recv_line` runs on its
//! socket). The first byte picks which. Bad input is a typed error, never a panic; a parsed
//! message writes back to itself; no line is longer than `MAX_LINE`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uhca::oob::{MAX_LINE, OobError, RdmaDest, read_line};

fuzz_target!(|data: &[u8]| {
    let Some((&which, b)) = data.split_first() else {
        return;
    };
    if which & 1 == 0 {
        match RdmaDest::parse(b) {
            Ok(d) => assert_eq!(RdmaDest::parse(&d.to_wire()).unwrap(), d),
            Err(OobError::Malformed(_)) => {}
            Err(e) => panic!("parsing gave {e:?}, not Malformed"),
        }
    } else {
        let mut r = b;
        loop {
            let before = r.len();
            match read_line(&mut r) {
                Ok(line) => {
                    assert!(line.len() <= MAX_LINE && !line.contains('\n'));
                    assert!(r.len() < before, "a line that consumed nothing");
                }
                Err(OobError::Closed) => break,
                Err(OobError::Malformed(_)) => {
                    // A session stops at a malformed line; go on reading to test the rest.
                    if r.len() == before {
                        break;
                    }
                }
                Err(e) => panic!("reading lines gave {e:?}"),
            }
        }
    }
});
