//! The out-of-band exchange of rdma-core's pingpong examples (`ibv_rc_pingpong`,
//! `ibv_uc_pingpong`, `ibv_ud_pingpong`), so that either side of uhca's pingpong examples
//! can be the rdma-core tool.
//!
//! Each side describes its queue pair as the text `LID:QPN:PSN:GID` — `%04x:%06x:%06x:`
//! then the GID as 32 hex digits, its bytes in order — in a fixed 52-byte message that
//! includes the terminating NUL. The client connects over TCP (port 18515 by default),
//! sends its message, reads the server's, and sends `"done"` with its NUL; the server
//! accepts, reads the client's message, connects its QP, answers with its own and waits
//! for `"done"`. Every read and write here has a timeout.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use uhca_driver::addr::Gid;

/// The TCP port rdma-core's pingpong examples use by default.
pub const DEFAULT_PORT: u16 = 18515;
/// Length of one address message, NUL included.
pub const MSG_LEN: usize = "0000:000000:000000:00000000000000000000000000000000".len() + 1;
/// The closing message, NUL included.
const DONE: &[u8; 5] = b"done\0";

/// One side's queue pair, as the pingpong examples exchange it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dest {
    /// Port LID (0 on RoCE).
    pub lid: u16,
    /// QP number (24 bits).
    pub qpn: u32,
    /// First packet sequence number (24 bits).
    pub psn: u32,
    /// GID (all zeros when the sender uses no GID).
    pub gid: Gid,
}

/// Why the exchange failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum OobError {
    /// A socket operation failed (connect, accept, read, write, or a timeout).
    Io(std::io::Error),
    /// The peer's message is not `LID:QPN:PSN:GID` as rdma-core writes it.
    Malformed(String),
    /// The peer closed the connection before the exchange finished.
    Closed,
    /// The caller's hook (connecting the QP) failed.
    Connect(String),
}

impl std::fmt::Display for OobError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OobError::Io(e) => write!(f, "out-of-band exchange: {e}"),
            OobError::Malformed(m) => write!(f, "out-of-band exchange: malformed address {m:?}"),
            OobError::Closed => f.write_str("out-of-band exchange: peer closed the connection"),
            OobError::Connect(e) => write!(f, "could not connect the QP: {e}"),
        }
    }
}

impl std::error::Error for OobError {}

impl From<std::io::Error> for OobError {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            OobError::Closed
        } else {
            OobError::Io(e)
        }
    }
}

impl Dest {
    /// The 52-byte message, NUL-terminated, exactly as rdma-core's `sprintf` makes it.
    pub fn to_wire(&self) -> [u8; MSG_LEN] {
        let mut text = format!(
            "{:04x}:{:06x}:{:06x}:",
            self.lid,
            self.qpn & 0xff_ffff,
            self.psn & 0xff_ffff
        );
        for b in self.gid.0 {
            text.push_str(&format!("{b:02x}"));
        }
        let mut msg = [0u8; MSG_LEN];
        msg[..text.len()].copy_from_slice(text.as_bytes());
        msg
    }

    /// Parses a message the way rdma-core's `sscanf("%x:%x:%x:%s")` reads it.
    ///
    /// # Errors
    ///
    /// [`OobError::Malformed`] for anything else.
    pub fn parse(msg: &[u8]) -> Result<Dest, OobError> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end])
            .map_err(|_| OobError::Malformed(String::from_utf8_lossy(msg).into()))?;
        let bad = || OobError::Malformed(text.to_string());
        let mut parts = text.splitn(4, ':');
        let mut field = |max: u32| -> Result<u32, OobError> {
            let p = parts.next().ok_or_else(bad)?;
            let v = u32::from_str_radix(p, 16).map_err(|_| bad())?;
            if v > max { Err(bad()) } else { Ok(v) }
        };
        let lid = field(0xffff)? as u16;
        let qpn = field(0xff_ffff)?;
        let psn = field(0xff_ffff)?;
        let gid_text = parts.next().ok_or_else(bad)?;
        if gid_text.len() != 32 || !gid_text.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad());
        }
        let mut gid = [0u8; 16];
        for (i, byte) in gid.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&gid_text[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Dest {
            lid,
            qpn,
            psn,
            gid: Gid(gid),
        })
    }
}

fn configure(stream: &TcpStream, timeout: Duration) -> Result<(), OobError> {
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    Ok(())
}

/// The client side: connects to `server:port`, sends `mine`, returns the server's.
///
/// # Errors
///
/// [`OobError`]; every step is bounded by `timeout`.
pub fn client_exchange(
    server: &str,
    port: u16,
    mine: &Dest,
    timeout: Duration,
) -> Result<Dest, OobError> {
    let mut last = None;
    let mut stream = None;
    for addr in (server, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let mut stream = match (stream, last) {
        (Some(s), _) => s,
        (None, Some(e)) => return Err(e.into()),
        (None, None) => return Err(OobError::Malformed(format!("no address for {server}"))),
    };
    configure(&stream, timeout)?;
    stream.write_all(&mine.to_wire())?;
    let mut msg = [0u8; MSG_LEN];
    stream.read_exact(&mut msg)?;
    let theirs = Dest::parse(&msg)?;
    stream.write_all(DONE)?;
    Ok(theirs)
}

/// The server side: waits (at most `timeout`) for one client on `port`, reads its
/// address, calls `connect` with it (to bring the QP to RTR/RTS before answering, as
/// rdma-core does), sends `mine` and waits for `"done"`.
///
/// # Errors
///
/// [`OobError`]; [`OobError::Connect`] if `connect` fails.
pub fn server_exchange(
    listener: &TcpListener,
    mine: &Dest,
    timeout: Duration,
    connect: impl FnOnce(&Dest) -> Result<(), String>,
) -> Result<Dest, OobError> {
    let mut stream = accept_within(listener, timeout)?;
    let mut msg = [0u8; MSG_LEN];
    stream.read_exact(&mut msg)?;
    let theirs = Dest::parse(&msg)?;
    connect(&theirs).map_err(OobError::Connect)?;
    stream.write_all(&mine.to_wire())?;
    let mut done = [0u8; DONE.len()];
    stream.read_exact(&mut done)?;
    Ok(theirs)
}

/// One client of `listener` within `timeout`, its reads and writes bounded by `timeout`.
fn accept_within(listener: &TcpListener, timeout: Duration) -> Result<TcpStream, OobError> {
    listener.set_nonblocking(true)?;
    let start = std::time::Instant::now();
    let stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if start.elapsed() > timeout {
                    return Err(OobError::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no client connected",
                    )));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e.into()),
        }
    };
    stream.set_nonblocking(false)?;
    configure(&stream, timeout)?;
    Ok(stream)
}

/// A TCP connection between the two sides of a program, over which each sends the other
/// messages of a length both know ([`Link::swap`]): what a first example needs to trade
/// endpoints, QP numbers and keys.
///
/// ```no_run
/// # fn main() -> Result<(), uhca::oob::OobError> {
/// use std::time::Duration;
/// use uhca::oob::Link;
/// // The server passes None; the client the server's host name.
/// let mut link = Link::meet(Some("server-host"), 18515, Duration::from_secs(60))?;
/// let theirs = link.swap(b"my QPN and key")?;
/// assert_eq!(theirs.len(), 14);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Link {
    stream: TcpStream,
}

impl Link {
    /// The client (`server` given) connects to `server:port`, trying again until the
    /// server listens; the server (`None`) takes one client on `port` of every address.
    /// Each gives up after `timeout`, which also bounds every later read and write.
    ///
    /// # Errors
    ///
    /// [`OobError::Io`] (a timeout among them).
    pub fn meet(server: Option<&str>, port: u16, timeout: Duration) -> Result<Link, OobError> {
        let Some(host) = server else {
            let listener = TcpListener::bind(("0.0.0.0", port))?;
            return Ok(Link {
                stream: accept_within(&listener, timeout)?,
            });
        };
        let start = std::time::Instant::now();
        let stream = loop {
            match TcpStream::connect((host, port)) {
                Ok(s) => break s,
                Err(e) if start.elapsed() > timeout => return Err(e.into()),
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        configure(&stream, timeout)?;
        Ok(Link { stream })
    }

    /// Sends `mine` and returns as many bytes from the peer, which sends a message of the
    /// same length.
    ///
    /// # Errors
    ///
    /// [`OobError::Closed`] if the peer closed the connection, [`OobError::Io`].
    pub fn swap(&mut self, mine: &[u8]) -> Result<Vec<u8>, OobError> {
        self.stream.write_all(mine)?;
        let mut theirs = vec![0; mine.len()];
        self.stream.read_exact(&mut theirs)?;
        Ok(theirs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client started before its server waits for it; the two swap equal-length
    /// messages both ways, in order.
    #[test]
    fn a_link_meets_a_late_server_and_swaps_messages() {
        let port = {
            let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
            l.local_addr().unwrap().port()
        };
        let client = std::thread::spawn(move || {
            let mut l = Link::meet(Some("127.0.0.1"), port, Duration::from_secs(10)).unwrap();
            (l.swap(b"from the client").unwrap(), l.swap(b"2c").unwrap())
        });
        std::thread::sleep(Duration::from_millis(300));
        let mut s = Link::meet(None, port, Duration::from_secs(10)).unwrap();
        assert_eq!(s.swap(b"from the server").unwrap(), b"from the client");
        assert_eq!(s.swap(b"2s").unwrap(), b"2c");
        let (a, b) = client.join().unwrap();
        assert_eq!(
            (a.as_slice(), b.as_slice()),
            (&b"from the server"[..], &b"2s"[..])
        );
    }

    /// A server no client comes to gives up after its timeout with an error.
    #[test]
    fn a_link_without_a_peer_times_out() {
        let port = {
            let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
            l.local_addr().unwrap().port()
        };
        let start = std::time::Instant::now();
        assert!(matches!(
            Link::meet(None, port, Duration::from_millis(200)),
            Err(OobError::Io(_))
        ));
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn message_is_byte_for_byte_what_rdma_core_writes() {
        let d = Dest {
            lid: 0x1,
            qpn: 0x12,
            psn: 0xab_cdef,
            gid: Gid::from_ipv4([10, 0, 0, 1]),
        };
        let msg = d.to_wire();
        assert_eq!(msg.len(), 52);
        assert_eq!(
            &msg[..51],
            b"0001:000012:abcdef:00000000000000000000ffff0a000001"
        );
        assert_eq!(msg[51], 0);
        assert_eq!(Dest::parse(&msg).unwrap(), d);
    }

    #[test]
    fn malformed_messages_are_errors() {
        for bad in [
            &b"0001:000012:abcdef"[..],
            b"zzzz:000012:abcdef:00000000000000000000ffff0a000001",
            b"0001:1000000:000000:00000000000000000000ffff0a000001",
            b"0001:000012:abcdef:00ff",
            b"\xff\xfe",
        ] {
            assert!(
                matches!(Dest::parse(bad), Err(OobError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn client_and_server_exchange_over_loopback() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = Dest {
            lid: 2,
            qpn: 0x99,
            psn: 0x42,
            gid: Gid::ZERO,
        };
        let client = Dest {
            lid: 3,
            qpn: 0x77,
            psn: 0x24,
            gid: Gid::from_ipv4([127, 0, 0, 1]),
        };
        let t = std::thread::spawn(move || {
            let mut seen = None;
            let got = server_exchange(&listener, &server, Duration::from_secs(5), |d| {
                seen = Some(*d);
                Ok(())
            })
            .unwrap();
            assert_eq!(seen, Some(got));
            got
        });
        let got = client_exchange("127.0.0.1", port, &client, Duration::from_secs(5)).unwrap();
        assert_eq!(got, server);
        assert_eq!(t.join().unwrap(), client);
    }

    #[test]
    fn a_server_with_no_client_times_out() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let me = Dest {
            lid: 0,
            qpn: 1,
            psn: 1,
            gid: Gid::ZERO,
        };
        let err =
            server_exchange(&listener, &me, Duration::from_millis(50), |_| Ok(())).unwrap_err();
        assert!(matches!(err, OobError::Io(_)), "{err}");
    }
}

// ---------------------------------------------------------------------------------------
// The exchange of the bandwidth and latency examples (`rdma_bw`, `rdma_lat`).
// ---------------------------------------------------------------------------------------

/// Length of one [`RdmaDest`] message, NUL included: the pingpong text, then the remote
/// key, the buffer's address and its length.
pub const RDMA_MSG_LEN: usize =
    "0000:000000:000000:00000000000000000000000000000000:00000000:0000000000000000:00000000".len()
        + 1;

/// Longest line [`Session::send_line`] sends and [`Session::recv_line`] accepts (newline
/// excluded).
pub const MAX_LINE: usize = 255;

/// One side of the bandwidth and latency examples: its queue pair as in the pingpong
/// exchange, and the buffer the peer may read or write with RDMA.
///
/// On the wire it is the text `LID:QPN:PSN:GID:RKEY:VADDR:LEN` — the pingpong message's
/// `%04x:%06x:%06x:` and 32 GID hex digits, then `:%08x:%016x:%08x` — in a fixed 87-byte
/// message that includes the terminating NUL ([`RDMA_MSG_LEN`]). The exchange is
/// uhca's own (perftest's is different): the client connects over TCP and sends its
/// message, the server reads it, connects its QP and answers with its own. The connection
/// then stays open as a [`Session`] for lines of text (`text\n`) that the two sides use
/// to agree on the test and to synchronise its start and end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RdmaDest {
    /// The queue pair, as in the pingpong exchange.
    pub dest: Dest,
    /// The remote key of the buffer.
    pub rkey: u32,
    /// The buffer's address as the peer names it in RDMA requests (an IOVA).
    pub addr: u64,
    /// The buffer's length in bytes.
    pub len: u32,
}

impl RdmaDest {
    /// The 87-byte message, NUL-terminated.
    pub fn to_wire(&self) -> [u8; RDMA_MSG_LEN] {
        let base = self.dest.to_wire();
        let text = format!(
            "{}:{:08x}:{:016x}:{:08x}",
            String::from_utf8_lossy(&base[..MSG_LEN - 1]),
            self.rkey,
            self.addr,
            self.len
        );
        let mut msg = [0u8; RDMA_MSG_LEN];
        msg[..text.len()].copy_from_slice(text.as_bytes());
        msg
    }

    /// Parses a message made by [`RdmaDest::to_wire`].
    ///
    /// # Errors
    ///
    /// [`OobError::Malformed`] for anything else.
    pub fn parse(msg: &[u8]) -> Result<RdmaDest, OobError> {
        let end = msg.iter().position(|&b| b == 0).unwrap_or(msg.len());
        let text = std::str::from_utf8(&msg[..end])
            .map_err(|_| OobError::Malformed(String::from_utf8_lossy(msg).into()))?;
        let bad = || OobError::Malformed(text.to_string());
        if text.len() != RDMA_MSG_LEN - 1 {
            return Err(bad());
        }
        // Where the pingpong text should end may fall inside a character of a peer's
        // non-ASCII bytes: that is a malformed message, not a place to split.
        let (base, tail) = text.split_at_checked(MSG_LEN - 1).ok_or_else(bad)?;
        let dest = Dest::parse(base.as_bytes()).map_err(|_| bad())?;
        let fields: Vec<&str> = tail.split(':').collect();
        let hex = |s: &str, digits: usize| -> Result<u64, OobError> {
            if s.len() != digits || !s.bytes().all(|c| c.is_ascii_hexdigit()) {
                return Err(bad());
            }
            u64::from_str_radix(s, 16).map_err(|_| bad())
        };
        match fields.as_slice() {
            ["", rkey, addr, len] => Ok(RdmaDest {
                dest,
                rkey: hex(rkey, 8)? as u32,
                addr: hex(addr, 16)?,
                len: hex(len, 8)? as u32,
            }),
            _ => Err(bad()),
        }
    }
}

/// The TCP connection of a bandwidth or latency test after the exchange of
/// [`RdmaDest`]s: lines of text, each at most [`MAX_LINE`] bytes and ended by `\n`.
#[derive(Debug)]
pub struct Session {
    stream: TcpStream,
}

impl Session {
    /// Bounds every later read and write by `timeout` (a side that waits for the other's
    /// test to end may need longer than the exchange did).
    ///
    /// # Errors
    ///
    /// [`OobError::Io`].
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<(), OobError> {
        configure(&self.stream, timeout)
    }

    /// Sends `line` and a newline.
    ///
    /// # Errors
    ///
    /// [`OobError::Malformed`] for a line that is too long or contains a newline;
    /// [`OobError::Io`].
    pub fn send_line(&mut self, line: &str) -> Result<(), OobError> {
        if line.len() > MAX_LINE || line.contains('\n') {
            return Err(OobError::Malformed(line.to_string()));
        }
        let mut msg = Vec::with_capacity(line.len() + 1);
        msg.extend_from_slice(line.as_bytes());
        msg.push(b'\n');
        self.stream.write_all(&msg)?;
        Ok(())
    }

    /// Reads one line (without its newline).
    ///
    /// # Errors
    ///
    /// [`OobError::Closed`] if the peer closed the connection, [`OobError::Malformed`]
    /// for a line longer than [`MAX_LINE`] or not UTF-8, [`OobError::Io`].
    pub fn recv_line(&mut self) -> Result<String, OobError> {
        read_line(&mut self.stream)
    }

    /// Sends `line` and returns the peer's: both sides call it to meet (a barrier) and
    /// compare what they said.
    ///
    /// # Errors
    ///
    /// As [`Session::send_line`] and [`Session::recv_line`].
    pub fn exchange_line(&mut self, line: &str) -> Result<String, OobError> {
        self.send_line(line)?;
        self.recv_line()
    }
}

/// Reads one line of a [`Session`] from `r` (without its newline), one byte at a time so
/// that nothing past the newline is consumed: what [`Session::recv_line`] does on its socket.
///
/// # Errors
///
/// [`OobError::Closed`] at the end of the stream, [`OobError::Malformed`] for a line longer
/// than [`MAX_LINE`] or not UTF-8, [`OobError::Io`].
pub fn read_line(r: &mut impl Read) -> Result<String, OobError> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        r.read_exact(&mut byte)?;
        if byte[0] == b'\n' {
            break;
        }
        if line.len() == MAX_LINE {
            return Err(OobError::Malformed(
                String::from_utf8_lossy(&line).into_owned(),
            ));
        }
        line.push(byte[0]);
    }
    String::from_utf8(line)
        .map_err(|e| OobError::Malformed(String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

fn connect_stream(server: &str, port: u16, timeout: Duration) -> Result<TcpStream, OobError> {
    let mut last = None;
    for addr in (server, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                configure(&s, timeout)?;
                return Ok(s);
            }
            Err(e) => last = Some(e),
        }
    }
    match last {
        Some(e) => Err(e.into()),
        None => Err(OobError::Malformed(format!("no address for {server}"))),
    }
}

fn accept_stream(listener: &TcpListener, timeout: Duration) -> Result<TcpStream, OobError> {
    listener.set_nonblocking(true)?;
    let start = std::time::Instant::now();
    let stream = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if start.elapsed() > timeout {
                    return Err(OobError::Io(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "no client connected",
                    )));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(e.into()),
        }
    };
    stream.set_nonblocking(false)?;
    configure(&stream, timeout)?;
    Ok(stream)
}

/// The client side of the [`RdmaDest`] exchange: connects to `server:port`, sends
/// `mine`, returns the server's and the open [`Session`].
///
/// # Errors
///
/// [`OobError`]; every step is bounded by `timeout`.
pub fn rdma_client_exchange(
    server: &str,
    port: u16,
    mine: &RdmaDest,
    timeout: Duration,
) -> Result<(RdmaDest, Session), OobError> {
    let mut stream = connect_stream(server, port, timeout)?;
    stream.write_all(&mine.to_wire())?;
    let mut msg = [0u8; RDMA_MSG_LEN];
    stream.read_exact(&mut msg)?;
    Ok((RdmaDest::parse(&msg)?, Session { stream }))
}

/// The server side of the [`RdmaDest`] exchange: waits (at most `timeout`) for one client
/// on `listener`, reads its message, calls `connect` with it (to bring the QP up before
/// answering), sends `mine` and returns the client's and the open [`Session`].
///
/// # Errors
///
/// [`OobError`]; [`OobError::Connect`] if `connect` fails.
pub fn rdma_server_exchange(
    listener: &TcpListener,
    mine: &RdmaDest,
    timeout: Duration,
    connect: impl FnOnce(&RdmaDest) -> Result<(), String>,
) -> Result<(RdmaDest, Session), OobError> {
    let mut stream = accept_stream(listener, timeout)?;
    let mut msg = [0u8; RDMA_MSG_LEN];
    stream.read_exact(&mut msg)?;
    let theirs = RdmaDest::parse(&msg)?;
    connect(&theirs).map_err(OobError::Connect)?;
    stream.write_all(&mine.to_wire())?;
    Ok((theirs, Session { stream }))
}

#[cfg(test)]
mod rdma_tests {
    use super::*;

    fn sample() -> RdmaDest {
        RdmaDest {
            dest: Dest {
                lid: 0x1,
                qpn: 0x12,
                psn: 0xab_cdef,
                gid: Gid::from_ipv4([10, 0, 0, 1]),
            },
            rkey: 0x1234_5678,
            addr: 0x7f00_1234_5000,
            len: 0x10000,
        }
    }

    #[test]
    fn rdma_message_is_the_pingpong_text_then_key_address_and_length() {
        let msg = sample().to_wire();
        assert_eq!(msg.len(), 87);
        assert_eq!(
            &msg[..86],
            &b"0001:000012:abcdef:00000000000000000000ffff0a000001:12345678:00007f0012345000:00010000"[..]
        );
        assert_eq!(msg[86], 0);
        assert_eq!(RdmaDest::parse(&msg).unwrap(), sample());
    }

    #[test]
    fn malformed_rdma_messages_are_errors() {
        let good = sample().to_wire();
        let mut short = good;
        short[80] = 0;
        let mut bad_hex = good;
        bad_hex[55] = b'g';
        let mut bad_sep = good;
        bad_sep[65] = b':';
        let pingpong = sample().dest.to_wire();
        for bad in [
            &short[..],
            &bad_hex[..],
            &bad_sep[..],
            &pingpong[..],
            b"\xff",
        ] {
            assert!(
                matches!(RdmaDest::parse(bad), Err(OobError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    /// A peer's message of the right length whose byte 51 (where the pingpong text ends)
    /// is inside a two-byte UTF-8 character: malformed, not a panic (found by the fuzz
    /// target `oob_rdma`).
    #[test]
    fn a_character_across_the_pingpong_text_end_is_malformed() {
        let mut msg = sample().to_wire();
        msg[50..52].copy_from_slice("ς".as_bytes());
        assert!(std::str::from_utf8(&msg[..86]).is_ok());
        assert!(matches!(RdmaDest::parse(&msg), Err(OobError::Malformed(_))));
    }

    /// `read_line` reads exactly one line, refuses one longer than `MAX_LINE` or not UTF-8,
    /// and says `Closed` at the end of the stream.
    #[test]
    fn read_line_takes_one_line_at_a_time() {
        let mut r: &[u8] = b"start\nend\n\xff\n";
        assert_eq!(read_line(&mut r).unwrap(), "start");
        assert_eq!(r, b"end\n\xff\n");
        assert_eq!(read_line(&mut r).unwrap(), "end");
        assert!(matches!(read_line(&mut r), Err(OobError::Malformed(_))));
        assert!(matches!(read_line(&mut r), Err(OobError::Closed)));
        let long = vec![b'x'; MAX_LINE + 1];
        assert!(matches!(
            read_line(&mut &long[..]),
            Err(OobError::Malformed(_))
        ));
    }

    #[test]
    fn rdma_exchange_then_lines_over_loopback() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = RdmaDest { len: 2, ..sample() };
        let client = sample();
        let t = std::thread::spawn(move || {
            let mut seen = None;
            let (got, mut s) =
                rdma_server_exchange(&listener, &server, Duration::from_secs(5), |d| {
                    seen = Some(*d);
                    Ok(())
                })
                .unwrap();
            assert_eq!(seen, Some(got));
            assert_eq!(s.exchange_line("start").unwrap(), "start");
            s.send_line("verified").unwrap();
            got
        });
        let (got, mut s) =
            rdma_client_exchange("127.0.0.1", port, &client, Duration::from_secs(5)).unwrap();
        assert_eq!(got, server);
        assert_eq!(s.exchange_line("start").unwrap(), "start");
        assert_eq!(s.recv_line().unwrap(), "verified");
        assert_eq!(t.join().unwrap(), client);
        assert!(matches!(s.recv_line(), Err(OobError::Closed)));
        assert!(s.send_line("a\nb").is_err());
        assert!(s.send_line(&"x".repeat(MAX_LINE + 1)).is_err());
    }
}
