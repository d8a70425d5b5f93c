//! PCI addresses ("bus/device/function", BDF) as Linux writes them in sysfs.

use core::fmt;
use core::str::FromStr;

use super::error::VfioError;

/// The address of one PCI function: `domain:bus:device.function`, e.g. `0000:3b:00.0`.
///
/// Parsed from the form `lspci -D` prints (`DDDD:BB:DD.F`, hexadecimal) or the short form
/// `lspci` prints without `-D` (`BB:DD.F`, domain 0). Displayed in the full form sysfs uses
/// (`/sys/bus/pci/devices/0000:3b:00.0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    /// PCI segment (domain). Usually 0; VMD and some servers use larger values.
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device number, 0 to 31.
    pub device: u8,
    /// Function number, 0 to 7.
    pub function: u8,
}

impl PciAddress {
    /// Parses a BDF such as `0000:3b:00.0` or `3b:00.0`; see [`PciAddress`].
    pub fn parse(input: &str) -> Result<Self, VfioError> {
        parse_bdf(input.trim()).map_err(|reason| VfioError::InvalidAddress {
            input: input.to_owned(),
            reason,
        })
    }
}

impl FromStr for PciAddress {
    type Err = VfioError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

fn hex_field(s: &str, max_digits: usize, what: &'static str) -> Result<u32, &'static str> {
    if s.is_empty() {
        return Err(match what {
            "domain" => "the domain is empty",
            "bus" => "the bus number is empty",
            "device" => "the device number is empty",
            _ => "the function number is empty",
        });
    }
    if s.len() > max_digits {
        return Err(match what {
            "domain" => "the domain has more than 8 hex digits",
            "bus" => "the bus number has more than 2 hex digits",
            "device" => "the device number has more than 2 hex digits",
            _ => "the function number has more than 1 digit",
        });
    }
    if !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err("only hexadecimal digits, ':' and '.' are allowed");
    }
    u32::from_str_radix(s, 16).map_err(|_| "only hexadecimal digits, ':' and '.' are allowed")
}

fn parse_bdf(s: &str) -> Result<PciAddress, &'static str> {
    if s.is_empty() {
        return Err("the address is empty");
    }
    let (rest, function) = s
        .rsplit_once('.')
        .ok_or("missing '.function' (expected DDDD:BB:DD.F, e.g. 0000:3b:00.0)")?;
    let parts: Vec<&str> = rest.split(':').collect();
    let (domain, bus, device) = match parts.as_slice() {
        [d, b, v] => (hex_field(d, 8, "domain")?, *b, *v),
        [b, v] => (0, *b, *v),
        _ => return Err("expected DDDD:BB:DD.F or BB:DD.F (e.g. 0000:3b:00.0)"),
    };
    let bus = hex_field(bus, 2, "bus")?;
    let device = hex_field(device, 2, "device")?;
    let function = hex_field(function, 1, "function")?;
    if device > 0x1f {
        return Err("the device number must be 00 to 1f");
    }
    if function > 7 {
        return Err("the function number must be 0 to 7");
    }
    Ok(PciAddress {
        domain,
        bus: bus as u8,
        device: device as u8,
        function: function as u8,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_full_and_short_forms() {
        let a = PciAddress::parse("0000:3b:00.0").unwrap();
        assert_eq!(
            a,
            PciAddress {
                domain: 0,
                bus: 0x3b,
                device: 0,
                function: 0
            }
        );
        assert_eq!(a.to_string(), "0000:3b:00.0");
        let b: PciAddress = "af:1f.7".parse().unwrap();
        assert_eq!(b.to_string(), "0000:af:1f.7");
        let c = PciAddress::parse("10000:00:02.1").unwrap();
        assert_eq!(c.domain, 0x10000);
        assert_eq!(c.to_string(), "10000:00:02.1");
        // Upper case and surrounding whitespace (a line from a file) are accepted.
        assert_eq!(PciAddress::parse(" 0000:3B:00.1\n").unwrap().bus, 0x3b);
    }

    #[test]
    fn rejects_bad_addresses_with_a_reason() {
        let cases = [
            ("", "the address is empty"),
            ("0000:3b:00", "missing '.function'"),
            ("3b", "missing '.function'"),
            ("0000:3b:20.0", "device number must be 00 to 1f"),
            ("0000:3b:00.8", "function number must be 0 to 7"),
            ("0000:3b:00.10", "more than 1 digit"),
            ("0000:3bb:00.0", "bus number has more than 2 hex digits"),
            ("0000:3g:00.0", "only hexadecimal digits"),
            ("0:0:0:00.0", "expected DDDD:BB:DD.F"),
            (":00.0", "bus number is empty"),
            ("0000:3b:.0", "device number is empty"),
            ("0000:3b:00.", "function number is empty"),
            ("/dev/vfio/3", "missing '.function'"),
        ];
        for (input, want) in cases {
            let err = PciAddress::parse(input).unwrap_err();
            let msg = err.to_string();
            assert!(
                msg.contains(want),
                "{input:?}: message {msg:?} lacks {want:?}"
            );
            assert!(msg.contains("invalid PCI address"), "{msg}");
            assert!(matches!(err, VfioError::InvalidAddress { .. }));
        }
    }
}
