//! Capture files: pcap (both byte orders, micro- and nanosecond) and pcapng (section,
//! interface, enhanced and simple packet blocks, anything else skipped), read to the end or
//! the first error, each record judged as `uhca-wirecheck` judges it. Nothing may panic,
//! and the reader never returns more packet bytes than the capture holds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use uhca_mock::wire::check::check;
use uhca_mock::wire::pcap::PcapReader;

fuzz_target!(|data: &[u8]| {
    let Ok(mut rd) = PcapReader::new(data) else {
        return;
    };
    let _ = rd.link_type();
    let mut bytes = 0usize;
    while let Ok(Some(p)) = rd.next_packet() {
        bytes += p.data.len();
        assert!(
            bytes <= data.len(),
            "more packet bytes than the capture holds"
        );
        let _ = check(p.link_type, &p.data);
    }
});
