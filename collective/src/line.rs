//! The text form of an [`Endpoint`] for an out-of-band exchange between processes (what
//! `all_reduce_perf --udp` sends over TCP): one line per pair of ranks,
//! `from to gid mac lid qpn psn inbox rkey` (GID and MAC in hex, the rest in decimal).
//!
//! ```
//! use uhca_collective::line::{endpoint_line, parse_endpoint_line};
//! use uhca_collective::{Endpoint, PortAddr};
//! use uhca_driver::addr::{Gid, Mac};
//! let e = Endpoint {
//!     addr: PortAddr { gid: Gid([0xfe; 16]), mac: Mac([2, 0, 0, 0, 0, 1]), lid: 0 },
//!     qpn: 0x104,
//!     psn: 7,
//!     inbox: 0x10000,
//!     rkey: 0x300,
//! };
//! let line = endpoint_line(0, 1, &e);
//! assert_eq!(parse_endpoint_line(&line), Ok((0, 1, e)));
//! assert!(parse_endpoint_line("0 1 nonsense").is_err());
//! ```

use alloc::format;
use alloc::string::String;
use core::fmt::Write;

use uhca_driver::addr::{Gid, Mac};

use crate::{Endpoint, PortAddr};

/// A line that is not `from to gid mac lid qpn psn inbox rkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadLine {
    /// Which part is wrong.
    pub what: &'static str,
}

impl core::fmt::Display for BadLine {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "bad endpoint line: {}", self.what)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for BadLine {}

/// `e`, the endpoint rank `from` offers rank `to`, as one line ending in a newline.
pub fn endpoint_line(from: usize, to: usize, e: &Endpoint) -> String {
    let mut hex = String::new();
    for b in e.addr.gid.0.iter().chain(e.addr.mac.0.iter()) {
        let _ = write!(hex, "{b:02x}");
    }
    let (gid, mac) = hex.split_at(32);
    format!(
        "{from} {to} {gid} {mac} {} {} {} {} {}\n",
        e.addr.lid, e.qpn, e.psn, e.inbox, e.rkey
    )
}

/// Fills `out` from exactly `2 * out.len()` hex digits.
fn unhex(s: &str, out: &mut [u8], what: &'static str) -> Result<(), BadLine> {
    let bad = BadLine { what };
    // Digits only: a peer's multi-byte characters never reach the pairwise slicing below.
    if s.len() != 2 * out.len() || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(bad);
    }
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad)?;
    }
    Ok(())
}

/// Parses a line made by [`endpoint_line`] (surrounding white space allowed): the ranks
/// `(from, to)` and the endpoint.
///
/// # Errors
///
/// [`BadLine`] for anything else.
pub fn parse_endpoint_line(line: &str) -> Result<(usize, usize, Endpoint), BadLine> {
    let mut f = line.split_whitespace();
    let mut next = |what| f.next().ok_or(BadLine { what });
    let num = |s: &str, what| s.parse().map_err(|_| BadLine { what });
    let from = num(next("from")?, "from")?;
    let to = num(next("to")?, "to")?;
    let mut gid = [0u8; 16];
    unhex(next("gid")?, &mut gid, "gid")?;
    let mut mac = [0u8; 6];
    unhex(next("mac")?, &mut mac, "mac")?;
    let lid = next("lid")?.parse().map_err(|_| BadLine { what: "lid" })?;
    let qpn = next("qpn")?.parse().map_err(|_| BadLine { what: "qpn" })?;
    let psn = next("psn")?.parse().map_err(|_| BadLine { what: "psn" })?;
    let inbox = next("inbox")?
        .parse()
        .map_err(|_| BadLine { what: "inbox" })?;
    let rkey = next("rkey")?
        .parse()
        .map_err(|_| BadLine { what: "rkey" })?;
    if f.next().is_some() {
        return Err(BadLine {
            what: "more than nine fields",
        });
    }
    Ok((
        from,
        to,
        Endpoint {
            addr: PortAddr {
                gid: Gid(gid),
                mac: Mac(mac),
                lid,
            },
            qpn,
            psn,
            inbox,
            rkey,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Endpoint {
        Endpoint {
            addr: PortAddr {
                gid: Gid([0xfe; 16]),
                mac: Mac([2, 0xc0, 0x11, 0xec, 1, 3]),
                lid: 0,
            },
            qpn: 0x104,
            psn: 0xab_cdef,
            inbox: 0x7f00_0000_1000,
            rkey: 0x300,
        }
    }

    #[test]
    fn a_line_reads_back_as_written() {
        let line = endpoint_line(3, 1, &sample());
        assert!(line.starts_with("3 1 fefefefefefefefefefefefefefefefe 02c011ec0103 0 260 "));
        assert_eq!(parse_endpoint_line(&line), Ok((3, 1, sample())));
    }

    /// A GID of the right byte length whose characters are not ASCII: an error, not a
    /// panic on a slice inside a character (found by the fuzz target `oob_collective`;
    /// `all_reduce_perf` had panicked on such a line from a peer).
    #[test]
    fn non_ascii_hex_is_an_error() {
        let line = endpoint_line(0, 1, &sample());
        let gid = "fe".repeat(16);
        // 'f', then a two-byte character across the first pair of digits.
        let bad = line.replacen(&gid, &format!("fé{}", &gid[3..]), 1);
        assert_eq!(bad.len(), line.len());
        assert_eq!(parse_endpoint_line(&bad), Err(BadLine { what: "gid" }));
        let bad_mac = line.replacen("02c011ec0103", "0éc011ec010", 1);
        assert_eq!(bad_mac.len(), line.len());
        assert_eq!(parse_endpoint_line(&bad_mac), Err(BadLine { what: "mac" }));
    }

    #[test]
    fn short_long_and_bad_numbers_are_errors() {
        let line = endpoint_line(0, 1, &sample());
        assert!(parse_endpoint_line("").is_err());
        assert!(parse_endpoint_line(line.trim_end().rsplit_once(' ').unwrap().0).is_err());
        assert!(parse_endpoint_line(&format!("{} 9", line.trim_end())).is_err());
        assert!(parse_endpoint_line(&line.replacen("0 1", "0 -1", 1)).is_err());
    }
}
