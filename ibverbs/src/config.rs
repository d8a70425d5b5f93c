//! The devices this library offers, from the `UHCA_DEVICES` environment variable.
//!
//! The syntax (see the crate's README): entries separated by `;`, each
//! `KIND:NAME=WHERE`:
//!
//! - `mock:NAME=udp:IPV4` — a mock ConnectX in this process whose RoCEv2 port is a kernel UDP
//!   socket bound to `IPV4:4791` (as the examples' `--udp` mode), with the RoCEv2 GID of
//!   `IPV4` at index 0;
//! - `vfio:NAME=BDF` — a ConnectX function bound to vfio-pci at PCI address `BDF`
//!   (`0000:3b:00.0`), brought up by uhca's VFIO platform on the first open;
//! - `vfio:NAME=BDF,ip=IPV4` — the same, on an Ethernet port: the port's RoCEv2 GID at index
//!   0 is `IPV4`'s. Under VFIO no kernel driver fills the GID table from the interfaces'
//!   addresses, so a RoCE device needs `ip=` (its open fails with `EADDRNOTAVAIL` and says
//!   so when the table is empty); an InfiniBand port needs none (its LID comes from the
//!   subnet manager), and `ip=` is refused there at open.
//!
//! `NAME` is what `ibv_get_device_name` returns: 1 to 63 of `A-Z a-z 0-9 _ -`, unique.
//! Spaces around entries and parts are ignored; an empty entry (a trailing `;`) is allowed.

use std::fmt;
use std::net::Ipv4Addr;

/// The environment variable that lists the devices.
pub const ENV: &str = "UHCA_DEVICES";

/// The UDP port of RoCEv2 (the mock binds `IP:4791`).
pub const ROCE_UDP_PORT: u16 = 4791;

/// One configured device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceSpec {
    /// The verbs device name.
    pub name: String,
    /// What backs it.
    pub kind: DeviceKind,
}

/// What backs a configured device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// A mock HCA in this process, its RoCEv2 port a UDP socket on `ip:4791`.
    MockUdp {
        /// The local address the socket binds, and the port's RoCEv2 GID.
        ip: Ipv4Addr,
    },
    /// A PCI function bound to vfio-pci.
    Vfio {
        /// The PCI address, `DDDD:BB:DD.F`.
        bdf: String,
        /// `ip=`: the IPv4 address whose RoCEv2 GID the open installs at index 0 of an
        /// Ethernet port.
        ip: Option<Ipv4Addr>,
    },
}

/// A malformed `UHCA_DEVICES`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The entry at fault (as written).
    pub entry: String,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{ENV}: entry {:?}: {}", self.entry, self.reason)
    }
}

impl std::error::Error for ConfigError {}

fn valid_name(n: &str) -> bool {
    (1..=63).contains(&n.len())
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn valid_bdf(s: &str) -> bool {
    // DDDD:BB:DD.F, hexadecimal.
    let b = s.as_bytes();
    b.len() == 12
        && b[4] == b':'
        && b[7] == b':'
        && b[10] == b'.'
        && b.iter()
            .enumerate()
            .all(|(i, c)| matches!(i, 4 | 7 | 10) || c.is_ascii_hexdigit())
        && b[11] <= b'7'
}

/// Parses the value of `UHCA_DEVICES`.
///
/// # Errors
///
/// The first malformed entry, or a repeated name.
pub fn parse(s: &str) -> Result<Vec<DeviceSpec>, ConfigError> {
    let mut out: Vec<DeviceSpec> = Vec::new();
    for entry in s.split(';') {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let err = |reason: &str| ConfigError {
            entry: entry.to_string(),
            reason: reason.to_string(),
        };
        let (kind, rest) = entry
            .split_once(':')
            .ok_or_else(|| err("expected KIND:NAME=WHERE (KIND is mock or vfio)"))?;
        let (name, place) = rest
            .split_once('=')
            .ok_or_else(|| err("expected KIND:NAME=WHERE"))?;
        let (kind, name, place) = (kind.trim(), name.trim(), place.trim());
        if !valid_name(name) {
            return Err(err(
                "a device name is 1 to 63 of A-Z, a-z, 0-9, '_' and '-'",
            ));
        }
        if out.iter().any(|d| d.name == name) {
            return Err(err("this name is already configured"));
        }
        let kind = match kind {
            "mock" => {
                let ip = place
                    .strip_prefix("udp:")
                    .ok_or_else(|| err("a mock device's port is udp:IPV4 (e.g. udp:127.0.0.1)"))?;
                let ip = ip
                    .trim()
                    .parse::<Ipv4Addr>()
                    .map_err(|_| err("udp: takes an IPv4 address (the port is always 4791)"))?;
                if out
                    .iter()
                    .any(|d| matches!(d.kind, DeviceKind::MockUdp { ip: o } if o == ip))
                {
                    return Err(err("two mock devices cannot bind one address"));
                }
                DeviceKind::MockUdp { ip }
            }
            "vfio" => {
                let mut parts = place.split(',');
                let bdf = parts.next().unwrap_or("").trim();
                if !valid_bdf(bdf) {
                    return Err(err(
                        "a VFIO device is a PCI address DDDD:BB:DD.F, then optionally ,ip=IPV4",
                    ));
                }
                let mut ip = None;
                for opt in parts {
                    let (key, value) = opt
                        .split_once('=')
                        .ok_or_else(|| err("a VFIO device's option is KEY=VALUE (ip=IPV4)"))?;
                    match key.trim() {
                        "ip" if ip.is_some() => return Err(err("ip= is given twice")),
                        "ip" => ip = Some(value.trim().parse::<Ipv4Addr>().map_err(|_| {
                            err("ip= takes an IPv4 address (the RoCEv2 GID's, e.g. ip=10.0.0.1)")
                        })?),
                        _ => return Err(err("a VFIO device's only option is ip=IPV4")),
                    }
                }
                DeviceKind::Vfio {
                    bdf: bdf.to_ascii_lowercase(),
                    ip,
                }
            }
            _ => return Err(err("KIND is mock or vfio")),
        };
        out.push(DeviceSpec {
            name: name.to_string(),
            kind,
        });
    }
    Ok(out)
}

/// The line printed on stderr when no device is configured.
pub const HINT: &str = "uhca libibverbs: no devices configured; set UHCA_DEVICES, e.g. \
UHCA_DEVICES=\"mock:uhca0=udp:127.0.0.1\" (see the uhca-ibverbs README)";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mock_and_vfio() {
        let d = parse(" mock:uhca0=udp:127.0.0.1 ; vfio:uhca1=0000:3B:00.0;").unwrap();
        assert_eq!(
            d,
            vec![
                DeviceSpec {
                    name: "uhca0".into(),
                    kind: DeviceKind::MockUdp {
                        ip: Ipv4Addr::new(127, 0, 0, 1)
                    }
                },
                DeviceSpec {
                    name: "uhca1".into(),
                    kind: DeviceKind::Vfio {
                        bdf: "0000:3b:00.0".into(),
                        ip: None,
                    }
                },
            ]
        );
    }

    #[test]
    fn vfio_with_an_address() {
        let d = parse("vfio:a=0000:00:04.0,ip=10.0.0.1; vfio:b = 0000:00:05.0 , ip = 10.0.0.2")
            .unwrap();
        assert_eq!(
            d.iter().map(|d| d.kind.clone()).collect::<Vec<_>>(),
            vec![
                DeviceKind::Vfio {
                    bdf: "0000:00:04.0".into(),
                    ip: Some(Ipv4Addr::new(10, 0, 0, 1)),
                },
                DeviceKind::Vfio {
                    bdf: "0000:00:05.0".into(),
                    ip: Some(Ipv4Addr::new(10, 0, 0, 2)),
                },
            ]
        );
        for bad in [
            "vfio:a=0000:00:04.0,",
            "vfio:a=0000:00:04.0,ip",
            "vfio:a=0000:00:04.0,ip=",
            "vfio:a=0000:00:04.0,ip=10.0.0",
            "vfio:a=0000:00:04.0,ip=fe80::1",
            "vfio:a=0000:00:04.0,ip=10.0.0.1,ip=10.0.0.2",
            "vfio:a=0000:00:04.0,mac=02:00:00:00:00:01",
            "vfio:a=ip=10.0.0.1",
        ] {
            let e = parse(bad).expect_err(bad);
            assert!(!e.reason.is_empty(), "{bad:?}");
        }
    }

    #[test]
    fn empty_is_no_device() {
        assert_eq!(parse(""), Ok(vec![]));
        assert_eq!(parse(" ; "), Ok(vec![]));
    }

    #[test]
    fn refusals() {
        for bad in [
            "uhca0",
            "mock:uhca0",
            "mock:uhca0=127.0.0.1",
            "mock:uhca0=udp:localhost",
            "mock:uhca0=udp:127.0.0.1:4791",
            "mock:=udp:127.0.0.1",
            "mock:a b=udp:127.0.0.1",
            "rxe:uhca0=udp:127.0.0.1",
            "vfio:x=3b:00.0",
            "vfio:x=0000:3b:00.8",
            "mock:a=udp:127.0.0.1;mock:a=udp:127.0.0.2",
            "mock:a=udp:127.0.0.1;mock:b=udp:127.0.0.1",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} was accepted");
        }
        let long = format!("mock:{}=udp:127.0.0.1", "x".repeat(64));
        assert!(parse(&long).is_err());
    }

    /// A mock device's MAC, and so its GUIDs, follow from its address: two processes on two
    /// addresses never show the same node GUID.
    #[test]
    fn mac_and_guid_follow_the_address() {
        let (a, b) = (Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3));
        let d = |ip| {
            crate::device::Device::new(DeviceSpec {
                name: "m".into(),
                kind: DeviceKind::MockUdp { ip },
            })
        };
        assert_eq!(uhca_mock::MockConfig::udp(a).mac, [2, 0, 127, 0, 0, 2]);
        assert_eq!(d(a).node_guid(), 0x0000_7fff_fe00_0002);
        assert_ne!(d(a).node_guid(), d(b).node_guid());
    }
}
