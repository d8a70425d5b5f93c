//! The hostile platform on its own (no driver): BAR and configuration reads under its
//! lies, and lies that wait for their chance.

use uhca_fwif::init_seg::{health_buffer, initial_seg};
use uhca_hal::{Bar, PciConfig};
use uhca_mock::{HostilePlatform, Lie, MockHca};

fn read(p: &HostilePlatform, f: uhca_fwif::field::Field) -> u32 {
    f.from_dword(p.read_be32(f.dword_byte_offset()))
}

fn health(f: uhca_fwif::field::Field) -> uhca_fwif::field::Field {
    uhca_fwif::field::Field {
        name: f.name,
        bit_offset: initial_seg::health_buffer.bit_offset + f.bit_offset,
        bit_width: f.bit_width,
    }
}

#[test]
fn forwards_everything_until_a_lie_is_armed() {
    let hca = MockHca::default();
    let honest = hca.platform();
    let p = HostilePlatform::new(&hca, 1);
    for off in (0..0x1100).step_by(4) {
        if off == initial_seg::health_counter.dword_byte_offset() {
            continue; // moves with model time
        }
        assert_eq!(p.read32(off), honest.read32(off), "offset {off:#x}");
    }
    assert_eq!(p.config_read16(0).unwrap(), 0x15b3);
    assert!(p.told().is_empty());
}

#[test]
fn health_lies_rewrite_only_their_fields() {
    let hca = MockHca::default();
    let p = HostilePlatform::new(&hca, 1);
    let fw = read(&p, initial_seg::fw_rev_major);
    p.arm(Lie::HealthSyndromeGarbage);
    p.arm(Lie::HealthCounterStuck);
    assert_eq!(read(&p, health(health_buffer::synd)), 0xee);
    assert_eq!(read(&p, health(health_buffer::rfr)), 1);
    let c = read(&p, initial_seg::health_counter);
    hca.advance_us(10_000_000);
    assert_eq!(read(&p, initial_seg::health_counter), c, "stuck");
    assert_eq!(
        read(&p, initial_seg::fw_rev_major),
        fw,
        "other fields untouched"
    );
    p.arm(Lie::InitSegChanges);
    assert_ne!(read(&p, initial_seg::fw_rev_major), fw);
    assert_eq!(read(&p, initial_seg::initializing), 1);
    assert_eq!(p.told().len(), 3);
}

#[test]
fn surprise_removal_reads_all_ones_and_drops_writes() {
    let hca = MockHca::default();
    let p = HostilePlatform::new(&hca, 1);
    p.arm(Lie::SurpriseRemoval);
    assert!(p.removed());
    assert_eq!(p.read32(0), u32::MAX);
    assert_eq!(p.read64(0x1000 * 8), u64::MAX);
    assert_eq!(p.config_read16(0).unwrap(), 0xffff);
    assert_eq!(p.config_read32(0).unwrap(), u32::MAX);
    // A write reaches nothing: the model's command-queue address stays as it was.
    p.write32(
        initial_seg::cmdq_phy_addr_63_32.dword_byte_offset(),
        0x1234_5678,
    );
    assert_ne!(
        read_honest(&hca, initial_seg::cmdq_phy_addr_63_32),
        u32::from_be(0x1234_5678)
    );
}

fn read_honest(hca: &MockHca, f: uhca_fwif::field::Field) -> u32 {
    f.from_dword(hca.platform().read_be32(f.dword_byte_offset()))
}

#[test]
fn cqe_and_command_lies_wait_for_their_chance() {
    let hca = MockHca::default();
    let p = HostilePlatform::new(&hca, 1);
    p.arm(Lie::CqeDuplicate);
    p.arm(Lie::EqeUnknownType);
    p.arm(Lie::CmdStatusOutOfEnum);
    // No queue and no command yet: nothing to lie about.
    p.tamper();
    assert_eq!(p.armed(), 3);
    assert!(p.told().is_empty());
    assert!(p.cqs().is_empty());
    p.disarm();
    assert_eq!(p.armed(), 0);
}
