//! Where the VFIO platform looks for devices, and the sysfs checks that turn "it does not
//! work" into a precise diagnosis before any ioctl is tried.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::address::PciAddress;
use super::error::{GroupMember, VfioError};

/// The PCI vendor ID of NVIDIA networking (formerly Mellanox).
pub const MELLANOX_VENDOR_ID: u16 = 0x15b3;

/// The file-system roots the platform consults.
///
/// The defaults are the real ones; tests point them at a fake tree. The sysfs root is used
/// for every check and for the device's sysfs path handed to vfio-ioctls. The `/dev/vfio`
/// directory is used for the checks (it exists, the group's node exists) and for error
/// messages; the vfio-ioctls crate itself always opens `/dev/vfio/vfio` and
/// `/dev/vfio/<group>`, so a non-default `dev_vfio` only makes sense in tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VfioPaths {
    /// The sysfs mount point, `/sys` by default.
    pub sys: PathBuf,
    /// The VFIO device directory, `/dev/vfio` by default.
    pub dev_vfio: PathBuf,
}

impl Default for VfioPaths {
    fn default() -> Self {
        VfioPaths {
            sys: PathBuf::from("/sys"),
            dev_vfio: PathBuf::from("/dev/vfio"),
        }
    }
}

impl VfioPaths {
    /// Paths rooted elsewhere (for tests with a fake sysfs tree).
    pub fn new(sys: impl Into<PathBuf>, dev_vfio: impl Into<PathBuf>) -> Self {
        VfioPaths {
            sys: sys.into(),
            dev_vfio: dev_vfio.into(),
        }
    }

    /// `/sys/bus/pci/devices/<address>`.
    pub fn pci_device_dir(&self, address: &PciAddress) -> PathBuf {
        self.sys.join("bus/pci/devices").join(address.to_string())
    }

    /// `/sys/kernel/iommu_groups/<group>/devices`.
    pub fn iommu_group_devices_dir(&self, group: u32) -> PathBuf {
        self.sys
            .join("kernel/iommu_groups")
            .join(group.to_string())
            .join("devices")
    }

    /// `/sys/kernel/mm/hugepages/hugepages-2048kB`.
    pub fn hugepages_2m_dir(&self) -> PathBuf {
        self.sys.join("kernel/mm/hugepages/hugepages-2048kB")
    }

    /// `/dev/vfio/<group>`.
    pub fn group_node(&self, group: u32) -> PathBuf {
        self.dev_vfio.join(group.to_string())
    }
}

/// What sysfs says about a device that passed every check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SysfsDevice {
    pub(crate) dir: PathBuf,
    pub(crate) vendor: u16,
    pub(crate) device: u16,
    pub(crate) group: u32,
}

fn read_sysfs(path: &Path) -> Result<String, VfioError> {
    fs::read_to_string(path).map_err(|source| VfioError::Sysfs {
        path: path.to_owned(),
        source,
    })
}

fn read_id(path: &Path) -> Result<u16, VfioError> {
    let text = read_sysfs(path)?;
    let t = text.trim();
    let hex = t.strip_prefix("0x").unwrap_or(t);
    u16::from_str_radix(hex, 16).map_err(|_| VfioError::Sysfs {
        path: path.to_owned(),
        source: io::Error::new(
            io::ErrorKind::InvalidData,
            format!("expected a hexadecimal ID, found {t:?}"),
        ),
    })
}

/// The last component of a symlink's target (`driver` → `vfio-pci`, `iommu_group` → `7`), or
/// `None` when the link does not exist.
fn link_name(path: &Path) -> Result<Option<String>, VfioError> {
    match fs::read_link(path) {
        Ok(target) => Ok(target.file_name().map(|n| n.to_string_lossy().into_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(VfioError::Sysfs {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Whether `driver` presents the VFIO device API: vfio-pci itself or one of its variant
/// drivers (e.g. `mlx5_vfio_pci`).
pub(crate) fn is_vfio_driver(driver: &str) -> bool {
    driver == "vfio-pci" || driver.ends_with("vfio_pci") || driver.ends_with("vfio-pci")
}

/// Whether a group member bound to `driver` still lets the group be used by VFIO (the
/// kernel accepts VFIO drivers, pci-stub, and PCIe port drivers of bridges in the group).
fn driver_allows_viable_group(driver: &str) -> bool {
    is_vfio_driver(driver) || driver == "pci-stub" || driver == "pcieport"
}

/// Checks in sysfs, in the order that gives the most useful first message: the device
/// exists, it is a ConnectX (if `require_connectx`), the IOMMU gave it a group, it is bound
/// to vfio-pci, and `/dev/vfio/<group>` exists.
pub(crate) fn probe(
    paths: &VfioPaths,
    address: &PciAddress,
    require_connectx: bool,
) -> Result<SysfsDevice, VfioError> {
    let dir = paths.pci_device_dir(address);
    if !dir.exists() {
        return Err(VfioError::NoSuchDevice {
            address: *address,
            path: dir,
        });
    }
    let vendor = read_id(&dir.join("vendor"))?;
    let device = read_id(&dir.join("device"))?;
    if require_connectx && vendor != MELLANOX_VENDOR_ID {
        return Err(VfioError::NotAConnectX {
            address: *address,
            vendor,
            device,
        });
    }
    let group = match link_name(&dir.join("iommu_group"))? {
        None => return Err(VfioError::NoIommu { address: *address }),
        Some(name) => name.parse::<u32>().map_err(|_| VfioError::Sysfs {
            path: dir.join("iommu_group"),
            source: io::Error::new(
                io::ErrorKind::InvalidData,
                format!("IOMMU group link ends in {name:?}, not a number"),
            ),
        })?,
    };
    let driver = link_name(&dir.join("driver"))?;
    if !driver.as_deref().is_some_and(is_vfio_driver) {
        return Err(VfioError::NotBoundToVfio {
            address: *address,
            driver,
        });
    }
    if !paths.dev_vfio.exists() {
        return Err(VfioError::VfioUnavailable {
            path: paths.dev_vfio.clone(),
        });
    }
    let node = paths.group_node(group);
    if !node.exists() {
        if paths.dev_vfio.join(format!("noiommu-{group}")).exists() {
            return Err(VfioError::Unsupported {
                what: format!(
                    "{address} is in VFIO's no-IOMMU mode (/dev/vfio/noiommu-{group}): \
                     it has no DMA isolation and no IOVA translation, which this platform \
                     needs; enable the IOMMU (intel_iommu=on or amd_iommu=on) and turn \
                     vfio.enable_unsafe_noiommu_mode off"
                ),
            });
        }
        return Err(VfioError::VfioUnavailable { path: node });
    }
    Ok(SysfsDevice {
        dir,
        vendor,
        device,
        group,
    })
}

/// The members of `group` (other than `address`) whose drivers keep the group from being
/// viable. Best effort: unreadable entries are skipped.
pub(crate) fn group_blockers(
    paths: &VfioPaths,
    group: u32,
    address: &PciAddress,
) -> Vec<GroupMember> {
    let me = address.to_string();
    let Ok(entries) = fs::read_dir(paths.iommu_group_devices_dir(group)) else {
        return Vec::new();
    };
    let mut out: Vec<GroupMember> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if name == me {
                return None;
            }
            let driver = link_name(&e.path().join("driver")).ok().flatten();
            match &driver {
                Some(d) if driver_allows_viable_group(d) => None,
                None => None,
                Some(_) => Some(GroupMember { name, driver }),
            }
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Free 2 MiB hugepages according to sysfs, `None` when the kernel does not say.
pub(crate) fn free_hugepages_2m(paths: &VfioPaths) -> Option<u64> {
    fs::read_to_string(paths.hugepages_2m_dir().join("free_hugepages"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
pub(crate) mod fake {
    //! A fake sysfs and /dev/vfio tree in a temporary directory.
    use super::*;
    use std::os::unix::fs::symlink;
    use vmm_sys_util::tempdir::TempDir;

    pub(crate) struct FakeSys {
        pub(crate) tmp: TempDir,
    }

    impl FakeSys {
        pub(crate) fn new() -> Self {
            let tmp = TempDir::new_with_prefix("/tmp/uhca-vfio-test-").unwrap();
            fs::create_dir_all(tmp.as_path().join("sys/bus/pci/devices")).unwrap();
            fs::create_dir_all(tmp.as_path().join("sys/kernel/iommu_groups")).unwrap();
            FakeSys { tmp }
        }
        pub(crate) fn paths(&self) -> VfioPaths {
            VfioPaths::new(
                self.tmp.as_path().join("sys"),
                self.tmp.as_path().join("dev/vfio"),
            )
        }
        pub(crate) fn add_device(&self, bdf: &str, vendor: u16, device: u16) -> PathBuf {
            // Real sysfs: /sys/bus/pci/devices/X is a symlink into /sys/devices/pci…/X.
            let real = self.tmp.as_path().join("sys/devices/pci0000:00").join(bdf);
            fs::create_dir_all(&real).unwrap();
            fs::write(real.join("vendor"), format!("0x{vendor:04x}\n")).unwrap();
            fs::write(real.join("device"), format!("0x{device:04x}\n")).unwrap();
            symlink(
                &real,
                self.tmp.as_path().join("sys/bus/pci/devices").join(bdf),
            )
            .unwrap();
            real
        }
        pub(crate) fn bind(&self, bdf: &str, driver: &str) {
            let dir = self.tmp.as_path().join("sys/bus/pci/devices").join(bdf);
            let _ = fs::remove_file(dir.join("driver"));
            symlink(
                format!("../../../bus/pci/drivers/{driver}"),
                dir.join("driver"),
            )
            .unwrap();
        }
        pub(crate) fn set_group(&self, bdf: &str, group: u32) {
            let gdir = self
                .tmp
                .as_path()
                .join(format!("sys/kernel/iommu_groups/{group}"));
            fs::create_dir_all(gdir.join("devices")).unwrap();
            let dir = self.tmp.as_path().join("sys/bus/pci/devices").join(bdf);
            symlink(&gdir, dir.join("iommu_group")).unwrap();
            symlink(
                fs::canonicalize(&dir).unwrap(),
                gdir.join("devices").join(bdf),
            )
            .unwrap();
        }
        pub(crate) fn add_group_node(&self, group: u32) {
            let d = self.tmp.as_path().join("dev/vfio");
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("vfio"), b"").unwrap();
            fs::write(d.join(group.to_string()), b"").unwrap();
        }
        pub(crate) fn set_free_hugepages(&self, n: u64) {
            let d = self.paths().hugepages_2m_dir();
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("free_hugepages"), format!("{n}\n")).unwrap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::FakeSys;
    use super::*;

    const CX6: &str = "0000:3b:00.0";

    fn addr(s: &str) -> PciAddress {
        PciAddress::parse(s).unwrap()
    }

    fn msg(e: VfioError) -> String {
        e.to_string()
    }

    #[test]
    fn a_fully_set_up_device_passes() {
        let f = FakeSys::new();
        f.add_device(CX6, 0x15b3, 0x101d);
        f.set_group(CX6, 42);
        f.bind(CX6, "vfio-pci");
        f.add_group_node(42);
        let d = probe(&f.paths(), &addr(CX6), true).unwrap();
        assert_eq!((d.vendor, d.device, d.group), (0x15b3, 0x101d, 42));
        assert!(d.dir.ends_with(CX6));
        // A vfio-pci variant driver is accepted too.
        f.bind(CX6, "mlx5_vfio_pci");
        assert!(probe(&f.paths(), &addr(CX6), true).is_ok());
    }

    #[test]
    fn missing_device() {
        let f = FakeSys::new();
        let e = probe(&f.paths(), &addr("0000:3b:00.1"), true).unwrap_err();
        assert!(matches!(e, VfioError::NoSuchDevice { .. }));
        let m = msg(e);
        assert!(m.contains("no PCI device 0000:3b:00.1"), "{m}");
        assert!(m.contains("lspci -D"), "{m}");
    }

    #[test]
    fn not_a_connectx_unless_generic() {
        let f = FakeSys::new();
        f.add_device("0000:00:03.0", 0x1234, 0x11e8);
        f.set_group("0000:00:03.0", 3);
        f.bind("0000:00:03.0", "vfio-pci");
        f.add_group_node(3);
        let e = probe(&f.paths(), &addr("0000:00:03.0"), true).unwrap_err();
        let m = msg(e);
        assert!(m.contains("not a ConnectX"), "{m}");
        assert!(m.contains("1234:11e8"), "{m}");
        assert!(m.contains("open_any"), "{m}");
        // The generic path accepts QEMU's edu device.
        let d = probe(&f.paths(), &addr("0000:00:03.0"), false).unwrap();
        assert_eq!((d.vendor, d.device, d.group), (0x1234, 0x11e8, 3));
    }

    #[test]
    fn no_iommu_group() {
        let f = FakeSys::new();
        f.add_device(CX6, 0x15b3, 0x101d);
        f.bind(CX6, "mlx5_core");
        let m = msg(probe(&f.paths(), &addr(CX6), true).unwrap_err());
        assert!(m.contains("no IOMMU group"), "{m}");
        assert!(m.contains("intel_iommu=on"), "{m}");
        assert!(m.contains("amd_iommu=on"), "{m}");
    }

    #[test]
    fn bound_to_another_driver_or_none() {
        let f = FakeSys::new();
        f.add_device(CX6, 0x15b3, 0x101d);
        f.set_group(CX6, 42);
        f.add_group_node(42);
        f.bind(CX6, "mlx5_core");
        let e = probe(&f.paths(), &addr(CX6), true).unwrap_err();
        assert!(matches!(
            &e,
            VfioError::NotBoundToVfio { driver: Some(d), .. } if d == "mlx5_core"
        ));
        let m = msg(e);
        assert!(m.contains("bound to mlx5_core, not to vfio-pci"), "{m}");
        assert!(
            m.contains("echo 0000:3b:00.0 > /sys/bus/pci/devices/0000:3b:00.0/driver/unbind"),
            "{m}"
        );
        assert!(
            m.contains("echo vfio-pci > /sys/bus/pci/devices/0000:3b:00.0/driver_override"),
            "{m}"
        );
        assert!(
            m.contains("echo 0000:3b:00.0 > /sys/bus/pci/drivers_probe"),
            "{m}"
        );
        assert!(
            m.contains("driverctl set-override 0000:3b:00.0 vfio-pci"),
            "{m}"
        );

        let f = FakeSys::new();
        f.add_device(CX6, 0x15b3, 0x101d);
        f.set_group(CX6, 42);
        let m = msg(probe(&f.paths(), &addr(CX6), true).unwrap_err());
        assert!(m.contains("not bound to any driver"), "{m}");
        assert!(m.contains("driver_override"), "{m}");
    }

    #[test]
    fn no_dev_vfio() {
        let f = FakeSys::new();
        f.add_device(CX6, 0x15b3, 0x101d);
        f.set_group(CX6, 42);
        f.bind(CX6, "vfio-pci");
        let e = probe(&f.paths(), &addr(CX6), true).unwrap_err();
        let m = msg(e);
        assert!(m.contains("dev/vfio does not exist"), "{m}");
        assert!(m.contains("modprobe vfio-pci"), "{m}");
        // /dev/vfio exists but not the group's node.
        f.add_group_node(7);
        let m = msg(probe(&f.paths(), &addr(CX6), true).unwrap_err());
        assert!(m.contains("dev/vfio/42 does not exist"), "{m}");
        // No-IOMMU mode is recognised and refused with the reason.
        fs::write(f.paths().dev_vfio.join("noiommu-42"), b"").unwrap();
        let m = msg(probe(&f.paths(), &addr(CX6), true).unwrap_err());
        assert!(m.contains("no-IOMMU mode"), "{m}");
        assert!(m.contains("enable_unsafe_noiommu_mode"), "{m}");
    }

    #[test]
    fn bad_sysfs_contents_are_reported() {
        let f = FakeSys::new();
        let real = f.add_device(CX6, 0x15b3, 0x101d);
        fs::write(real.join("vendor"), "garbage\n").unwrap();
        let m = msg(probe(&f.paths(), &addr(CX6), true).unwrap_err());
        assert!(m.contains("vendor"), "{m}");
        assert!(m.contains("expected a hexadecimal ID"), "{m}");
    }

    #[test]
    fn blockers_of_a_group() {
        let f = FakeSys::new();
        for (bdf, drv) in [
            (CX6, Some("vfio-pci")),
            ("0000:3b:00.1", Some("mlx5_core")),
            ("0000:3a:00.0", Some("pcieport")),
            ("0000:3b:00.2", None),
            ("0000:3b:00.3", Some("pci-stub")),
            ("0000:3b:00.4", Some("nvme")),
        ] {
            f.add_device(bdf, 0x15b3, 0x101d);
            f.set_group(bdf, 9);
            if let Some(d) = drv {
                f.bind(bdf, d);
            }
        }
        let b = group_blockers(&f.paths(), 9, &addr(CX6));
        let names: Vec<_> = b.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["0000:3b:00.1", "0000:3b:00.4"]);
        let e = VfioError::GroupNotViable {
            address: addr(CX6),
            group: 9,
            blockers: b,
        };
        let m = msg(e);
        assert!(
            m.contains("IOMMU group 9 of 0000:3b:00.0 is not viable"),
            "{m}"
        );
        assert!(m.contains("0000:3b:00.1 (bound to mlx5_core)"), "{m}");
        assert!(m.contains("0000:3b:00.4 (bound to nvme)"), "{m}");
        // Unknown membership still gives a pointer to where to look.
        let m = msg(VfioError::GroupNotViable {
            address: addr(CX6),
            group: 9,
            blockers: vec![],
        });
        assert!(m.contains("/sys/kernel/iommu_groups/9/devices"), "{m}");
    }

    #[test]
    fn hugepage_count() {
        let f = FakeSys::new();
        assert_eq!(free_hugepages_2m(&f.paths()), None);
        f.set_free_hugepages(17);
        assert_eq!(free_hugepages_2m(&f.paths()), Some(17));
    }
}
