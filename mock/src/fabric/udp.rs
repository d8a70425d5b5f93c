//! A UDP transport: an uplink from the fabric to real RoCEv2 peers over kernel UDP sockets.
//!
//! [`crate::Fabric::attach_udp`] binds `LOCAL_IP:4791`. Frames an HCA sends from
//! `LOCAL_IP` (its GID is the IPv4-mapped `::ffff:LOCAL_IP`) to another address leave as UDP
//! datagrams carrying BTH to ICRC (the ICRC computed as over an IPv4 header with
//! Identification 0 and DF, which is what Linux sends from a socket set to `IP_PMTUDISC_DO`);
//! datagrams that arrive are wrapped
//! into a RoCEv2 frame for the HCA's MAC, so the HCA's own parser checks the ICRC.
//!
//! The IPv4 Identification of an incoming datagram is covered by its ICRC but is not visible
//! through a UDP socket. Another UDP-socket sender (uhca) uses 0; Linux Soft-RoCE (rxe) picks
//! one with `__ip_select_ident`. The CRC is affine in the bits of its input, so when the
//! ICRC does not match Identification 0 the uplink solves for the one Identification (with
//! DF set, or else clear) under which it does match ([`ipv4_ident_for_icrc`]) and rebuilds
//! the frame with it; the HCA then verifies the ICRC as usual. Sixteen of the ICRC's 32 bits
//! still check the packet (a corrupted one passes with probability 2^-16); a datagram with
//! no such Identification is dropped and counted as malformed.

use crate::MockHca;
use crate::wire::eth::{EtherType, EthernetFrame, EthernetRepr};
use crate::wire::ip::{IpRepr, Ipv4Packet, Ipv4Repr};
use crate::wire::roce::{ROCEV2_UDP_PORT, emit_ip_datagram, parse_ip_datagram, udp_payload_icrc};
use crate::wire::udp::UDP_HEADER_LEN;
use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4, UdpSocket};

/// Most datagrams one poll takes from the socket: the HCA answers (and acknowledges) a
/// batch before the next one is read, so a deep socket queue does not hold back every ACK.
const UDP_POLL_BATCH: usize = 64;

/// A UDP uplink of one HCA.
#[derive(Debug)]
pub(crate) struct UdpPort {
    sock: UdpSocket,
    local: Ipv4Addr,
    hca: MockHca,
    /// Datagrams that did not parse.
    pub(crate) malformed: u64,
    /// Datagrams whose ICRC matched a non-zero IPv4 Identification (senders like rxe).
    pub(crate) ident_recovered: u64,
    /// [`IdentBasis`] by UDP payload length and DF.
    basis: HashMap<(usize, bool), IdentBasis>,
}

/// How each bit of the IPv4 Identification changes the ICRC of a UDP payload of one length:
/// `icrc(ident) = icrc(0) ^ XOR of bits[i] for each bit i set in ident`.
type IdentBasis = [u32; 16];

/// The MAC the fabric puts as the source of frames that came in over UDP.
pub const UDP_GATEWAY_MAC: [u8; 6] = [0x02, 0x55, 0x44, 0x50, 0x00, 0x01];

impl UdpPort {
    pub(crate) fn bind(hca: &MockHca, local: Ipv4Addr) -> io::Result<Self> {
        let sock = UdpSocket::bind(SocketAddrV4::new(local, ROCEV2_UDP_PORT))?;
        sock.set_nonblocking(true)?;
        set_pmtudisc_do(&sock)?;
        size_socket_buffers(&sock);
        Ok(UdpPort {
            sock,
            local,
            hca: hca.clone(),
            malformed: 0,
            ident_recovered: 0,
            basis: HashMap::new(),
        })
    }

    /// Whether a frame from the fabric leaves through this uplink: IPv4 from our address to
    /// another one.
    pub(crate) fn wants(&self, f: &[u8]) -> bool {
        let Ok(e) = EthernetFrame::new_checked(f) else {
            return false;
        };
        if e.ethertype() != EtherType::Ipv4 {
            return false;
        }
        let Ok(ip) = Ipv4Packet::new_checked(e.payload()) else {
            return false;
        };
        ip.src_addr() == self.local.octets() && ip.dst_addr() != self.local.octets()
    }

    /// Sends a frame's UDP payload (BTH to ICRC) to its destination IP, port 4791.
    pub(crate) fn send(&mut self, f: &[u8]) {
        let Ok(e) = EthernetFrame::new_checked(f) else {
            return;
        };
        let Ok(ip) = Ipv4Packet::new_checked(e.payload()) else {
            return;
        };
        let dst = Ipv4Addr::from(ip.dst_addr());
        let Some(payload) = ip.payload().get(UDP_HEADER_LEN..) else {
            return;
        };
        let Some(end) = payload.len().checked_sub(4) else {
            return;
        };
        // The kernel sends from our port 4791, whatever the frame's source port was: the
        // ICRC covers the UDP header, so compute it again for the datagram that leaves.
        let ipr = IpRepr::Ipv4(Ipv4Repr::new(self.local.octets(), dst.octets()));
        let Ok(icrc) = udp_payload_icrc(&ipr, ROCEV2_UDP_PORT, &payload[..end]) else {
            return;
        };
        let mut out = payload.to_vec();
        out[end..].copy_from_slice(&icrc.to_le_bytes());
        let _ = self
            .sock
            .send_to(&out, SocketAddrV4::new(dst, ROCEV2_UDP_PORT));
    }

    /// Datagrams that arrived, as RoCEv2 frames for the HCA.
    pub(crate) fn poll(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut buf = vec![0u8; 65_536];
        while out.len() < UDP_POLL_BATCH
            && let Ok((n, from)) = self.sock.recv_from(&mut buf)
        {
            let std::net::SocketAddr::V4(from) = from else {
                continue;
            };
            match self.wrap(&buf[..n], *from.ip(), from.port()) {
                Some(f) => out.push(f),
                None => self.malformed += 1,
            }
        }
        out
    }

    fn wrap(&mut self, payload: &[u8], src: Ipv4Addr, sport: u16) -> Option<Vec<u8>> {
        // Rebuild the IP datagram the peer sent (its Identification recovered from the
        // ICRC if it is not 0), then check it parses.
        let mut ipv4 = Ipv4Repr::new(src.octets(), self.local.octets());
        let t = crate::wire::roce::parse_udp_payload_unverified(payload).ok()?;
        let end = payload.len() - 4;
        let stored = u32::from_le_bytes(payload[end..].try_into().ok()?);
        let zero = udp_payload_icrc(&IpRepr::Ipv4(ipv4), sport, &payload[..end]).ok()?;
        if zero != stored {
            let (ident, df) = [true, false].into_iter().find_map(|df| {
                let v4 = Ipv4Repr {
                    dont_frag: df,
                    ..ipv4
                };
                let base = if df {
                    zero
                } else {
                    udp_payload_icrc(&IpRepr::Ipv4(v4), sport, &payload[..end]).ok()?
                };
                let basis = *self
                    .basis
                    .entry((payload.len(), df))
                    .or_insert_with(|| ident_basis(v4, sport, &payload[..end], base));
                solve_ident(&basis, base ^ stored).map(|id| (id, df))
            })?;
            ipv4.ident = ident;
            ipv4.dont_frag = df;
            self.ident_recovered += 1;
        }
        let ip = IpRepr::Ipv4(ipv4);
        let eth = EthernetRepr {
            dst: self.hca.mac(),
            src: UDP_GATEWAY_MAC,
            vlan: None,
        };
        let dlen = crate::wire::roce::ip_datagram_len(&ip, &t);
        let mut frame = vec![0u8; eth.buffer_len() + dlen];
        eth.emit(&mut frame, EtherType::Ipv4).ok()?;
        let at = eth.buffer_len();
        emit_ip_datagram(&ip, sport, &t, &mut frame[at..]).ok()?;
        // Keep the peer's ICRC (the HCA verifies it).
        let icrc_at = frame.len() - 4;
        frame[icrc_at..].copy_from_slice(payload.get(payload.len() - 4..)?);
        parse_ip_datagram(&frame[at..]).ok()?;
        Some(frame)
    }
}

/// `IP_MTU_DISCOVER` = `IP_PMTUDISC_DO`: Linux then sends with DF set and, since the
/// socket is not connected, Identification 0, which the ICRC of [`UdpPort::send`] assumes.
/// With the default (`IP_PMTUDISC_WANT`) the kernel sets DF but picks an Identification
/// (`ignore_df`), and a peer that checks the ICRC over the real header (rxe) drops every
/// packet.
#[cfg(target_os = "linux")]
fn set_pmtudisc_do(sock: &UdpSocket) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let v: libc::c_int = libc::IP_PMTUDISC_DO;
    // SAFETY: a valid socket descriptor (borrowed from `sock` for the call), a pointer to a
    // c_int that outlives the call and its size, as setsockopt(2) expects for
    // IP_MTU_DISCOVER (ip(7)).
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            (&raw const v).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn set_pmtudisc_do(_sock: &UdpSocket) -> io::Result<()> {
    Ok(())
}

/// The socket buffer size the uplink asks for, each way (Linux grants twice that, its
/// bookkeeping included): room for the responses to sixteen outstanding 64 KiB RDMA READs
/// (1 MiB of payload in 1 KiB datagrams, which the kernel charges at about 2.3 KiB each)
/// while the process that owns the socket is not scheduled. With the default (about
/// 208 KiB) the kernel drops the rest of such a burst, and go-back-N retransmission
/// resends the whole burst, which overflows again. Twice that room (4 MiB, granted 8), as
/// a resent burst may arrive while the first is still queued; what waits in the queue is
/// taken in before the fabric's clock moves (the pump drains the socket first), so a
/// deep queue does not make the requester time out on responses that came in time.
pub const UDP_SOCKET_BUFFER_BYTES: usize = 4 << 20;

/// Sets `SO_RCVBUF` and `SO_SNDBUF` to [`UDP_SOCKET_BUFFER_BYTES`]. Linux caps these at
/// `net.core.rmem_max` / `wmem_max`; when that leaves less than asked, the privileged
/// `SO_RCVBUFFORCE` / `SO_SNDBUFFORCE` are tried (they need `CAP_NET_ADMIN`). Best effort:
/// a smaller buffer still works, only bursts lose more.
#[cfg(target_os = "linux")]
fn size_socket_buffers(sock: &UdpSocket) {
    let want = UDP_SOCKET_BUFFER_BYTES as libc::c_int;
    for (opt, force) in [
        (libc::SO_RCVBUF, libc::SO_RCVBUFFORCE),
        (libc::SO_SNDBUF, libc::SO_SNDBUFFORCE),
    ] {
        let _ = setsockopt_int(sock, opt, want);
        // Linux reports twice the value it accepted (its bookkeeping overhead).
        if getsockopt_int(sock, opt).is_ok_and(|got| got < want.saturating_mul(2)) {
            let _ = setsockopt_int(sock, force, want);
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn size_socket_buffers(_sock: &UdpSocket) {}

#[cfg(target_os = "linux")]
fn setsockopt_int(sock: &UdpSocket, opt: libc::c_int, v: libc::c_int) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid socket descriptor (borrowed from `sock` for the call), a pointer to a
    // c_int that outlives the call and its size, as socket(7) specifies for the SOL_SOCKET
    // buffer options.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&raw const v).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(target_os = "linux")]
fn getsockopt_int(sock: &UdpSocket, opt: libc::c_int) -> io::Result<libc::c_int> {
    use std::os::fd::AsRawFd;
    let mut v: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid socket descriptor (borrowed from `sock` for the call), a c_int and
    // its length that outlive the call, as socket(7) specifies for the SOL_SOCKET options.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            opt,
            (&raw mut v).cast(),
            &raw mut len,
        )
    };
    if rc == 0 {
        Ok(v)
    } else {
        Err(io::Error::last_os_error())
    }
}

impl UdpPort {
    /// The receive buffer the kernel gave the socket (`SO_RCVBUF` as read back, which
    /// Linux reports doubled), for diagnostics.
    #[cfg(all(test, target_os = "linux"))]
    pub(crate) fn rcvbuf(&self) -> Option<usize> {
        getsockopt_int(&self.sock, libc::SO_RCVBUF)
            .ok()
            .and_then(|v| usize::try_from(v).ok())
    }
}

/// The ICRC change each Identification bit causes, for `transport` (BTH to the last pad
/// byte) under `ip` (Identification ignored) whose ICRC with Identification 0 is `base`.
fn ident_basis(ip: Ipv4Repr, sport: u16, transport: &[u8], base: u32) -> IdentBasis {
    let mut b = [0u32; 16];
    for (i, v) in b.iter_mut().enumerate() {
        let ip = IpRepr::Ipv4(Ipv4Repr {
            ident: 1 << i,
            ..ip
        });
        *v = udp_payload_icrc(&ip, sport, transport).map_or(0, |c| c ^ base);
    }
    b
}

/// The Identification `x` with `XOR of basis[i] for bits i of x == diff`, if there is one
/// (Gaussian elimination over GF(2); the basis vectors are independent for CRC-32).
fn solve_ident(basis: &IdentBasis, diff: u32) -> Option<u16> {
    // Rows: (ICRC difference, the Identification bits that make it).
    let mut rows: Vec<(u32, u16)> = basis
        .iter()
        .enumerate()
        .map(|(i, &v)| (v, 1u16 << i))
        .collect();
    let (mut d, mut x) = (diff, 0u16);
    let mut r = 0;
    for bit in (0..32).rev() {
        let m = 1u32 << bit;
        let Some(p) = (r..rows.len()).find(|&k| rows[k].0 & m != 0) else {
            continue;
        };
        rows.swap(r, p);
        let pivot = rows[r];
        for (k, row) in rows.iter_mut().enumerate() {
            if k != r && row.0 & m != 0 {
                row.0 ^= pivot.0;
                row.1 ^= pivot.1;
            }
        }
        if d & m != 0 {
            d ^= pivot.0;
            x ^= pivot.1;
        }
        r += 1;
    }
    (d == 0).then_some(x)
}

/// The IPv4 Identification (and DF) under which `payload` (BTH to ICRC), received on
/// `dst:4791` from `src:sport`, has a valid ICRC; `None` if there is none.
pub fn ipv4_ident_for_icrc(
    src: Ipv4Addr,
    dst: Ipv4Addr,
    sport: u16,
    payload: &[u8],
) -> Option<(u16, bool)> {
    let end = payload.len().checked_sub(4)?;
    let stored = u32::from_le_bytes(payload[end..].try_into().ok()?);
    [true, false].into_iter().find_map(|df| {
        let ip = Ipv4Repr {
            dont_frag: df,
            ..Ipv4Repr::new(src.octets(), dst.octets())
        };
        let base = udp_payload_icrc(&IpRepr::Ipv4(ip), sport, &payload[..end]).ok()?;
        let basis = ident_basis(ip, sport, &payload[..end], base);
        solve_ident(&basis, base ^ stored).map(|id| (id, df))
    })
}

impl crate::Fabric {
    /// Binds `local:4791` as a UDP uplink for `hca` (which should be attached to this
    /// fabric and use the IPv4-mapped GID `::ffff:local`): its RoCEv2 packets to other
    /// addresses go out as UDP datagrams, and datagrams that arrive are delivered to it.
    /// The fabric must be pumped ([`crate::Fabric::start_pump`] or steps) for traffic to
    /// flow.
    pub fn attach_udp(&self, hca: &MockHca, local: Ipv4Addr) -> io::Result<()> {
        let port = UdpPort::bind(hca, local)?;
        self.with_inner(|u| u.push(port));
        Ok(())
    }
}

/// A mock HCA whose RoCEv2 port is a UDP socket ([`MockHca::udp`]): the device, the
/// Ethernet fabric it is alone on, and the fabric's pump. Keep it alive while the driver
/// uses the device: dropping it stops the pump and closes the socket.
#[derive(Debug)]
pub struct UdpHca {
    // Declared first, so the pump stops before the rest goes.
    _pump: super::PumpHandle,
    /// The device (its [`MockHca::platform`] is what a driver opens).
    pub hca: MockHca,
    /// The fabric between the device and its UDP uplink.
    pub fabric: crate::Fabric,
}

impl UdpHca {
    /// The platform handle for a driver ([`MockHca::platform`] of [`UdpHca::hca`]).
    pub fn platform(&self) -> crate::MockPlatform {
        self.hca.platform()
    }
}

impl MockHca {
    /// A mock Ethernet HCA whose RoCEv2 port is the UDP socket `local:4791`, so that it
    /// talks to mock HCAs in other processes (or rxe) as a ConnectX on a real link would:
    /// its MAC is `02:00` then the address's four bytes, its fabric is pumped in real
    /// time. The driver still installs the GID `::ffff:local` (on the device, GID
    /// tables are the driver's to fill).
    ///
    /// ```
    /// # use std::net::Ipv4Addr;
    /// let node = uhca_mock::MockHca::udp(Ipv4Addr::new(127, 0, 0, 77)).unwrap();
    /// assert_eq!(node.hca.config().mac, [2, 0, 127, 0, 0, 77]);
    /// let _platform = node.platform(); // what `Hca::open` takes
    /// ```
    ///
    /// # Errors
    ///
    /// The socket could not be bound (the address is not local, or the port is taken).
    pub fn udp(local: Ipv4Addr) -> io::Result<UdpHca> {
        let hca = MockHca::new(crate::MockConfig::udp(local));
        let fabric = crate::Fabric::ethernet();
        fabric.attach(&hca);
        fabric.attach_udp(&hca, local)?;
        Ok(UdpHca {
            _pump: fabric.start_pump(20),
            hca,
            fabric,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::RoceV2Repr;
    use crate::wire::ib::{BthRepr, IbTransportRepr, Opcode};
    use crate::wire::roce::ip_datagram_len;

    /// The UDP payload (BTH to ICRC) of a datagram sent with this IPv4 header, as rxe sends
    /// it (its own Identification) and as a UDP socket receives it.
    fn payload_sent_with(ip: Ipv4Repr, sport: u16, t: &IbTransportRepr<'_>) -> Vec<u8> {
        let ip = IpRepr::Ipv4(ip);
        let mut d = vec![0u8; ip_datagram_len(&ip, t)];
        emit_ip_datagram(&ip, sport, t, &mut d).unwrap();
        d[20 + UDP_HEADER_LEN..].to_vec()
    }

    /// A loopback address the test cannot bind (not Linux, a sandbox): skipped with a
    /// message, unless `UHCA_REQUIRE_UDP=1` (CI sets it) makes that a failure.
    fn udp_unavailable(local: Ipv4Addr, e: &io::Error) {
        assert!(
            std::env::var("UHCA_REQUIRE_UDP").as_deref() != Ok("1"),
            "UHCA_REQUIRE_UDP=1 but cannot bind {local}:4791: {e}"
        );
        eprintln!(
            "SKIPPED: cannot bind {local}:4791: {e} (set UHCA_REQUIRE_UDP=1 to fail instead)"
        );
    }

    /// The uplink's socket is in `IP_PMTUDISC_DO` mode (read back with getsockopt(2)), the
    /// mode in which Linux sends Identification 0, which the uplink's ICRC assumes.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_uplink_socket_sends_with_pmtu_discovery_do() {
        use std::os::fd::AsRawFd;
        let hca = MockHca::new(crate::MockConfig::default());
        let local = Ipv4Addr::new(127, 0, 91, 3);
        let port = match UdpPort::bind(&hca, local) {
            Ok(port) => port,
            Err(e) => return udp_unavailable(local, &e),
        };
        let mut v: libc::c_int = -1;
        let mut len = size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: the port's open socket, a c_int and its length that outlive the call, as
        // getsockopt(2) expects for IP_MTU_DISCOVER (ip(7)).
        let rc = unsafe {
            libc::getsockopt(
                port.sock.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                (&raw mut v).cast(),
                &raw mut len,
            )
        };
        assert_eq!(rc, 0, "{}", io::Error::last_os_error());
        assert_eq!(v, libc::IP_PMTUDISC_DO);
    }

    /// A burst the size of the responses to sixteen 64 KiB READs at a 1024-byte MTU (1024
    /// datagrams), sent while the uplink does not poll (its process not scheduled), is all
    /// there when it polls late: none lost to the socket's receive buffer.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_read_response_burst_waits_in_the_socket_for_a_late_poll() {
        let hca = MockHca::new(crate::MockConfig::default());
        let local = Ipv4Addr::new(127, 0, 91, 5);
        let mut port = match UdpPort::bind(&hca, local) {
            Ok(port) => port,
            Err(e) => return udp_unavailable(local, &e),
        };
        let peer = Ipv4Addr::new(127, 0, 91, 6);
        let tx = match UdpSocket::bind(SocketAddrV4::new(peer, 0)) {
            Ok(s) => s,
            Err(e) => return udp_unavailable(peer, &e),
        };
        let sport = tx.local_addr().unwrap().port();
        let n = 1024u32;
        let data = vec![0xa5; 1024];
        let payloads: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                let t = IbTransportRepr::new(
                    BthRepr::new(Opcode::RcRdmaReadResponseMiddle, 0x77, i),
                    &data,
                );
                payload_sent_with(Ipv4Repr::new(peer.octets(), local.octets()), sport, &t)
            })
            .collect();
        // Linux grants up to net.core.rmem_max (doubled), or any size to CAP_NET_ADMIN.
        let rmem_max: usize = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        // SAFETY: geteuid(2) has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let need = UDP_SOCKET_BUFFER_BYTES;
        if !root && rmem_max < need {
            assert!(
                std::env::var("UHCA_REQUIRE_UDP").as_deref() != Ok("1"),
                "UHCA_REQUIRE_UDP=1 but net.core.rmem_max is {rmem_max} (not root), \
                 {need} needed"
            );
            return eprintln!("SKIPPED: net.core.rmem_max {rmem_max} < {need} and not root");
        }
        eprintln!(
            "receive buffer granted: {:?} bytes (net.core.rmem_max {rmem_max})",
            port.rcvbuf()
        );
        for p in &payloads {
            tx.send_to(p, SocketAddrV4::new(local, ROCEV2_UDP_PORT))
                .unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        // Polled in batches, until the socket is empty.
        let mut frames = Vec::new();
        loop {
            let batch = port.poll();
            assert!(batch.len() <= UDP_POLL_BATCH);
            if batch.is_empty() {
                break;
            }
            frames.extend(batch);
        }
        assert_eq!(port.malformed, 0);
        assert_eq!(frames.len(), n as usize, "datagrams lost in the socket");
        for (i, f) in frames.iter().enumerate() {
            let r = RoceV2Repr::parse(f).expect("verified");
            assert_eq!(r.transport.bth.psn, i as u32);
        }
    }

    #[test]
    fn the_identification_is_recovered_from_the_icrc() {
        let (src, dst) = (Ipv4Addr::new(10, 9, 0, 1), Ipv4Addr::new(10, 9, 0, 2));
        let data = vec![0x5a; 1024];
        let t = IbTransportRepr::new(BthRepr::new(Opcode::RcSendOnly, 0x12, 0x345), &data);
        for (ident, df) in [
            (0, true),
            (0xbeef, true),
            (1, true),
            (0x8000, true),
            (0x1234, false),
        ] {
            let ip = Ipv4Repr {
                ident,
                dont_frag: df,
                ..Ipv4Repr::new(src.octets(), dst.octets())
            };
            let p = payload_sent_with(ip, 51234, &t);
            assert_eq!(ipv4_ident_for_icrc(src, dst, 51234, &p), Some((ident, df)));
            // Another source port, address or a flipped payload bit: no Identification fits
            // (for these packets; in general 1 in 2^16 would).
            assert_eq!(ipv4_ident_for_icrc(src, dst, 51235, &p), None);
            assert_eq!(ipv4_ident_for_icrc(dst, src, 51234, &p), None);
            let mut bad = p.clone();
            bad[100] ^= 4;
            assert_eq!(ipv4_ident_for_icrc(src, dst, 51234, &bad), None);
        }
    }

    #[test]
    fn incoming_datagrams_with_any_identification_reach_the_hca_verified() {
        let hca = MockHca::new(crate::MockConfig::default());
        let local = Ipv4Addr::new(127, 0, 91, 1);
        let mut port = match UdpPort::bind(&hca, local) {
            Ok(port) => port,
            Err(e) => return udp_unavailable(local, &e),
        };
        let peer = Ipv4Addr::new(127, 0, 91, 2);
        let t = IbTransportRepr::new(BthRepr::new(Opcode::UdSendOnly, 0x99, 7), b"ping")
            .with_deth(0x1111_1111, 0x11);
        for ident in [0u16, 0x4d2, 0xffff] {
            let ip = Ipv4Repr {
                ident,
                ..Ipv4Repr::new(peer.octets(), local.octets())
            };
            let p = payload_sent_with(ip, 49999, &t);
            let f = port.wrap(&p, peer, 49999).expect("accepted");
            let r = RoceV2Repr::parse(&f).expect("the HCA's parser verifies the ICRC");
            let IpRepr::Ipv4(got) = r.ip else {
                panic!("not IPv4")
            };
            assert_eq!((got.src, got.ident, got.dont_frag), (ip.src, ident, true));
            assert_eq!(r.udp_src_port, 49999);
            let mut bad = p.clone();
            bad[13] ^= 1;
            assert!(
                port.wrap(&bad, peer, 49999).is_none(),
                "a corrupted one is dropped"
            );
        }
        assert_eq!(port.ident_recovered, 2);
    }
}
