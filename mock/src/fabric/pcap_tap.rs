//! The pcap tap: every frame the fabric carries, as sent, in a pcap stream (Ethernet link
//! type for RoCEv2, DLT_USER0 (147) for native InfiniBand, see `crate::wire::pcap`).

use crate::wire::pcap::{LinkType, PcapWriter};
use std::io::{self, Write};

/// Where the tap writes.
pub(crate) struct PcapTap {
    pub(crate) writer: PcapWriter<Box<dyn Write + Send>>,
    pub(crate) frames: u64,
    pub(crate) failed: bool,
}

impl core::fmt::Debug for PcapTap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PcapTap")
            .field("frames", &self.frames)
            .finish_non_exhaustive()
    }
}

impl PcapTap {
    pub(crate) fn new(w: Box<dyn Write + Send>, link: LinkType) -> io::Result<Self> {
        Ok(PcapTap {
            writer: PcapWriter::new(w, link)?,
            frames: 0,
            failed: false,
        })
    }

    pub(crate) fn record(&mut self, time_ns: u64, frame: &[u8]) {
        if self.failed {
            return;
        }
        if self.writer.write_packet(time_ns, frame).is_err() {
            self.failed = true;
        } else {
            self.frames += 1;
        }
    }
}
