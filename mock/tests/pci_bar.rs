//! PCI configuration space, function level reset and BAR0 (initialization segment, health,
//! UAR doorbells), driven through the platform traits.

mod common;

use common::Harness;
use uhca_fwif::cmd::*;
use uhca_fwif::consts::*;
use uhca_fwif::init_seg::initial_seg;
use uhca_hal::{Bar, Clock, ConfigError, PciConfig};
use uhca_mock::{HcaState, LinkLayer, MockConfig, MockHca};

#[test]
fn identity_and_class_follow_the_port_type() {
    let eth = MockHca::new(MockConfig::ethernet()).platform();
    assert_eq!(eth.config_read16(0x00).unwrap(), 0x15b3);
    assert_eq!(eth.config_read16(0x02).unwrap(), 0x101d);
    assert_eq!(eth.config_read32(0x08).unwrap() >> 8, 0x02_00_00);
    let ib = MockHca::new(MockConfig::infiniband()).platform();
    assert_eq!(ib.config_read32(0x08).unwrap() >> 8, 0x0c_06_00);
    assert_eq!(eth.config_read16(0x2c).unwrap(), 0x15b3);
    assert_eq!(eth.config_read8(0x0e).unwrap(), 0, "header type 0");
    assert_eq!(eth.config_read16(0x1000 - 2), Ok(0));
    assert_eq!(eth.config_read32(0x1000), Err(ConfigError::OutOfRange));
    assert_eq!(
        eth.config_read16(0x03),
        Err(ConfigError::OutOfRange),
        "misaligned"
    );
}

#[test]
fn the_pcie_link_reads_as_16_gts_x16() {
    let p = MockHca::new(MockConfig::default()).platform();
    let pcie = uhca_mock::pci::CAP_PCIE;
    assert_eq!(
        p.config_read16(pcie + 2).unwrap() & 0xf,
        2,
        "capability version 2"
    );
    let lnkcap = p.config_read32(pcie + 0x0c).unwrap();
    let lnksta = p.config_read16(pcie + 0x12).unwrap();
    let lnkcap2 = p.config_read32(pcie + 0x2c).unwrap();
    assert_eq!((lnkcap >> 4) & 0x3f, 16, "maximum width x16");
    assert_eq!((lnksta >> 4) & 0x3f, 16, "negotiated width x16");
    // Speeds above 5 GT/s are indexes into link capabilities 2's supported speeds vector
    // (bit n: speed n; 16 GT/s is bit 4): the maximum and the current speed must name a
    // supported one, and 16 GT/s with every slower speed is supported.
    assert_eq!(lnkcap2 & 0xfe, 0b1_1110);
    assert_eq!(lnkcap & 0xf, 4);
    assert_eq!(lnksta & 0xf, 4);
    assert_ne!(lnkcap2 & (1 << (lnkcap & 0xf)), 0);
}

#[test]
fn bar0_is_64bit_prefetchable_32mib_with_size_probe() {
    let p = MockHca::new(MockConfig::default()).platform();
    assert_eq!(p.config_read32(0x10).unwrap() & 0xf, 0xc);
    p.config_write32(0x10, 0xffff_ffff).unwrap();
    p.config_write32(0x14, 0xffff_ffff).unwrap();
    let lo = p.config_read32(0x10).unwrap();
    let hi = p.config_read32(0x14).unwrap();
    let mask = ((hi as u64) << 32) | (lo & !0xf) as u64;
    assert_eq!((!mask).wrapping_add(1), 32 << 20);
    p.config_write32(0x10, 0xd000_0000).unwrap();
    p.config_write32(0x14, 0x0000_0038).unwrap();
    assert_eq!(p.config_read32(0x10).unwrap(), 0xd000_000c);
    assert_eq!(p.config_read32(0x14).unwrap(), 0x38);
    assert_eq!(p.bar_len(), 32 << 20);
}

/// Walks the capability list: PM, PCI Express (FLR capable), MSI-X (table in BAR0),
/// vendor-specific.
#[test]
fn capability_list() {
    let p = MockHca::new(MockConfig::default()).platform();
    assert_ne!(
        p.config_read16(0x06).unwrap() & 0x10,
        0,
        "status: capability list"
    );
    let mut ptr = p.config_read8(0x34).unwrap();
    let mut found = Vec::new();
    while ptr != 0 {
        let id = p.config_read8(ptr as u16).unwrap();
        found.push((id, ptr));
        ptr = p.config_read8(ptr as u16 + 1).unwrap();
    }
    let ids: Vec<u8> = found.iter().map(|f| f.0).collect();
    assert_eq!(ids, vec![0x01, 0x10, 0x11, 0x09]);
    let pcie = found[1].1 as u16;
    assert_ne!(
        p.config_read32(pcie + 4).unwrap() & (1 << 28),
        0,
        "FLR supported"
    );
    let msix = found[2].1 as u16;
    assert_eq!(p.config_read16(msix + 2).unwrap() & 0x7ff, 63, "64 vectors");
    assert_eq!(
        p.config_read32(msix + 4).unwrap(),
        0x2000,
        "table in BAR0 at 0x2000"
    );
}

#[test]
fn command_register_bus_master_gates_dma() {
    let mut h = Harness::new(MockConfig::default());
    assert!(h.wait_ready());
    assert_eq!(
        h.p.config_read16(4).unwrap() & 0x4,
        0,
        "bus master off at power-on"
    );
    h.set_cmdq_address();
    h.post(0, EnableHcaIn::new_cmd().0.as_slice(), 16);
    h.ring(0);
    assert!(!h.result(0, 16).completed, "no DMA without bus mastering");
    let faults = h.hca.iommu_faults();
    assert_eq!(
        faults.last().unwrap().kind,
        uhca_mock::FaultKind::BusMasterDisabled
    );
    h.set_bus_master(true);
    assert_eq!(h.p.config_read16(4).unwrap() & 0x6, 0x6);
    let r = h.exec_raw(EnableHcaIn::new_cmd().0.as_slice(), 16);
    assert!(r.completed);
    assert_eq!(r.status(), CmdStatus::Ok);
}

#[test]
fn function_level_reset_returns_to_power_on() {
    let mut h = Harness::ready(MockConfig::default());
    h.alloc_pd();
    assert_eq!(h.hca.hca_state(), HcaState::Initialized);
    assert!(h.hca.pages().held > 0);
    // PCIe device control: initiate FLR.
    let devctl = 0x60 + 8;
    let v = h.p.config_read16(devctl).unwrap();
    h.p.config_write16(devctl, v | 0x8000).unwrap();
    assert_eq!(
        h.p.config_read16(devctl).unwrap() & 0x8000,
        0,
        "FLR bit reads 0"
    );
    assert_eq!(h.hca.reset_count(), 1);
    assert_eq!(h.hca.hca_state(), HcaState::Disabled);
    assert_eq!(h.hca.objects(), Default::default());
    assert_eq!(h.hca.pages().held, 0);
    assert_eq!(h.p.config_read16(4).unwrap() & 0x4, 0, "bus master cleared");
    assert_ne!(h.p.read_be32(0x1fc) & 0x8000_0000, 0, "initializing again");
    assert_eq!(h.p.read_be32(0x10), 0, "command queue address cleared");
    // The device can be brought up again.
    assert!(h.wait_ready());
    h.set_bus_master(true);
    h.set_cmdq_address();
    h.ok(&EnableHcaIn::new_cmd(), &[]);
}

#[test]
fn initialization_segment() {
    let h = Harness::new(MockConfig {
        fw_rev: (22, 39, 1002),
        init_delay_us: 5_000,
        ..Default::default()
    });
    let p = &h.p;
    let d0 = p.read_be32(0);
    assert_eq!(initial_seg::fw_rev_major.from_dword(d0), 22);
    assert_eq!(initial_seg::fw_rev_minor.from_dword(d0), 39);
    let d1 = p.read_be32(4);
    assert_eq!(
        initial_seg::cmd_interface_rev.from_dword(d1),
        CMD_IF_REV as u32
    );
    assert_eq!(initial_seg::fw_rev_subminor.from_dword(d1), 1002);
    // initializing clears after the configured delay of model time.
    assert_ne!(p.read_be32(0x1fc) & 0x8000_0000, 0);
    p.delay_us(4_000);
    assert_ne!(p.read_be32(0x1fc) & 0x8000_0000, 0);
    p.delay_us(1_000);
    assert_eq!(p.read_be32(0x1fc) & 0x8000_0000, 0);
    // Queue size and stride are read-only and survive the address write.
    p.write_be32(0x10, 0x0000_00f0);
    p.write_be32(0x14, 0x1234_5000 | 0xff);
    assert_eq!(p.read_be32(0x10), 0xf0);
    let lo = p.read_be32(0x14);
    assert_eq!(lo & 0xffff_f000, 0x1234_5000);
    assert_eq!(initial_seg::log_cmdq_size.from_dword(lo), 5);
    assert_eq!(initial_seg::log_cmdq_stride.from_dword(lo), 6);
    assert!(h.hca.notes().iter().any(|n| n.text.contains("read-only")));
    // The internal timer and the health counter advance with time.
    let t0 = p.read_be32(0x1004);
    let c0 = p.read_be32(0x1010) & 0xff_ffff;
    p.delay_us(3_000);
    assert!(p.read_be32(0x1004).wrapping_sub(t0) >= 3_000_000);
    assert!((p.read_be32(0x1010) & 0xff_ffff) > c0);
    // 64-bit read of the timer.
    let t = p.read_be64(0x1000);
    assert!(t >= 8_000_000);
}

#[test]
fn fatal_health_freezes_the_counter_and_stops_commands() {
    let mut h = Harness::ready(MockConfig::default());
    h.hca.set_fatal_health(0x8, 0x1234);
    let hb = 0x200;
    assert_eq!(
        h.p.read_be32(hb + 0x3c) & 0xff_ffff,
        (0x08 << 16) | 0x1234,
        "synd, ext_synd"
    );
    assert_ne!(h.p.read_be32(hb + 0x38) & 0x8000_0000, 0, "rfr");
    assert_eq!(h.p.read_be32(0x1010) >> 24, 0x8, "health syndrome");
    let c = h.p.read_be32(0x1010) & 0xff_ffff;
    h.p.delay_us(10_000);
    assert_eq!(h.p.read_be32(0x1010) & 0xff_ffff, c, "counter frozen");
    h.post(0, AllocPdIn::new_cmd().0.as_slice(), 16);
    h.ring(0);
    assert!(!h.result(0, 16).completed);
    // A function level reset recovers.
    h.hca.function_level_reset();
    assert_eq!(h.p.read_be32(hb + 0x3c), 0);
}

#[test]
fn stuck_initializing_and_all_ones() {
    let h = Harness::new(MockConfig::default());
    h.hca.set_stuck_initializing(true);
    h.p.delay_us(1_000_000);
    assert_ne!(h.p.read_be32(0x1fc) & 0x8000_0000, 0);
    assert!(!h.wait_ready(), "the wait times out");
    h.hca.set_stuck_initializing(false);
    assert!(h.wait_ready());

    h.hca.set_pci_all_ones(true);
    assert_eq!(h.p.config_read32(0).unwrap(), 0xffff_ffff);
    assert_eq!(h.p.read32(0), 0xffff_ffff);
    assert_eq!(
        h.p.read_be32(0x200 + 0x30),
        0xffff_ffff,
        "health fw_ver reads all ones"
    );
    h.p.config_write16(4, 0x6).unwrap();
    h.hca.set_pci_all_ones(false);
    assert_eq!(h.p.config_read16(4).unwrap() & 0x4, 0, "write was dropped");
}

#[test]
fn memory_decoding_off_reads_all_ones() {
    let h = Harness::new(MockConfig::default());
    h.p.config_write16(4, 0).unwrap();
    assert_eq!(h.p.read32(4), 0xffff_ffff);
    h.p.config_write16(4, 2).unwrap();
    assert_eq!(h.p.read_be32(4) >> 16, 5);
}

#[test]
fn uar_doorbells_are_logged() {
    let mut h = Harness::ready(MockConfig::default());
    let uar = h.alloc_uar();
    assert!(
        uar >= 8,
        "UARs do not overlap the init segment, clocks or MSI-X table"
    );
    let base = uar as usize * 4096;
    h.p.write_be64(base + 0x800, 0x0000_0a01_0001_0002);
    h.p.write_be64(base + 0x900, 0x0000_0b01_0001_0002);
    let dbs = h.hca.take_doorbells();
    assert_eq!(dbs.len(), 2);
    assert!(
        dbs.iter()
            .all(|d| d.uar == uar && d.allocated && d.is_send_doorbell())
    );
    assert_eq!(dbs[0].offset, 0x800);
    assert_eq!(dbs[0].value_be(), 0x0000_0a01_0001_0002);
    assert_eq!(dbs[1].offset, 0x900);
    assert!(h.hca.doorbells().is_empty());
    // A doorbell on a page nobody allocated is recorded and noted.
    h.p.write_be64((uar as usize + 1) * 4096 + 0x800, 1);
    assert!(!h.hca.doorbells()[0].allocated);
    assert!(
        h.hca
            .notes()
            .iter()
            .any(|n| n.text.contains("not allocated"))
    );
}

#[test]
#[should_panic(expected = "misaligned or out of bounds")]
fn out_of_bounds_bar_access_panics() {
    let p = MockHca::new(MockConfig::default()).platform();
    p.read32(32 << 20);
}

#[test]
fn port_type_configures_capabilities() {
    let mut h = Harness::initialized(MockConfig {
        port_type: LinkLayer::InfiniBand,
        ..Default::default()
    });
    let mut q = QueryHcaCapIn::new_cmd();
    q.set_op_mod(query_hca_cap_op_mod(
        HcaCapType::General,
        HcaCapMode::GetCur,
    ));
    let o = h.ok(&q, &[]);
    assert_eq!(o.cmd_hca_cap().port_type(), PortTypeCap::Ib.raw());
    assert!(!o.cmd_hca_cap().roce());
}

#[test]
fn virtual_clock_is_deterministic() {
    let a = MockHca::new(MockConfig::default());
    assert_eq!(a.now_ns(), 0);
    a.platform().delay_us(7);
    assert_eq!(a.now_ns(), 7_000);
    let b = MockHca::new(MockConfig {
        clock: uhca_mock::ClockMode::RealTime,
        init_delay_us: 0,
        ..Default::default()
    });
    let p = b.platform();
    let t0 = p.now_ns();
    p.delay_us(200);
    assert!(p.now_ns() - t0 >= 200_000);
}

/// The LIDs the fabric's subnet manager gave survive a function level reset of a port (a
/// VMM resets each function when it starts): two InfiniBand functions keep distinct LIDs
/// instead of both falling back to the configured default.
#[test]
fn function_level_reset_keeps_the_subnet_managers_lids() {
    let fabric = uhca_mock::Fabric::infiniband();
    let a = uhca_mock::MockHca::new(MockConfig::infiniband());
    let b = uhca_mock::MockHca::new(MockConfig::infiniband());
    fabric.attach(&a);
    fabric.attach(&b);
    assert_eq!((a.lid(), b.lid()), (1, 2));
    a.function_level_reset();
    b.function_level_reset();
    assert_eq!(
        (a.lid(), b.lid()),
        (1, 2),
        "the SM's LIDs, not MockConfig's"
    );
}
