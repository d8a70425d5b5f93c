//! The host side of a mock served to another process (the vfio-user server's needs): memory
//! of a file mapped at the client's IOVA, read-only maps, and the interrupt handler that
//! turns a raised MSI-X vector into a signal.

mod common;

use common::Harness;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::*;
use uhca_fwif::cmdq::CmdProtBlock;
use uhca_fwif::consts::*;
use uhca_hal::DmaError;
use uhca_mock::{FaultKind, MapFdError, MockConfig, MockHca};
use zerocopy::IntoBytes;

fn memfd(len: u64) -> OwnedFd {
    let fd = rustix::fs::memfd_create("uhca-mock-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, len).unwrap();
    fd
}

const IOVA: u64 = 0x1_0000_0000;

#[test]
fn a_file_mapped_at_the_clients_iova_is_the_devices_memory() {
    let hca = MockHca::new(MockConfig::default());
    let fd = memfd(64 << 10);
    hca.map_fd(IOVA, fd.as_fd(), 4096, 32 << 10, true).unwrap();
    assert!(hca.is_mapped(IOVA, 32 << 10));
    assert!(!hca.is_mapped(IOVA + (32 << 10) - 1, 2), "exact bounds");
    // What the device side writes is in the file, at the map's file offset.
    assert!(hca.host_write(IOVA + 16, b"through the map"));
    let mut back = [0u8; 15];
    rustix::io::pread(&fd, &mut back, 4096 + 16).unwrap();
    assert_eq!(&back, b"through the map");

    // Overlaps on either side, past the end of the file, misaligned, empty.
    let e = |iova, off, len| hca.map_fd(iova, fd.as_fd(), off, len, true);
    assert_eq!(e(IOVA + 4096, 0, 4096), Err(MapFdError::Overlap));
    assert_eq!(e(IOVA - 4096, 0, 8192), Err(MapFdError::Overlap));
    assert_eq!(e(IOVA - (1 << 20), 0, 2 << 20), Err(MapFdError::Overlap));
    assert_eq!(e(0x1000, 60 << 10, 8192), Err(MapFdError::OutsideFile));
    assert_eq!(
        e(0x1000, u64::MAX - 4095, 8192),
        Err(MapFdError::OutsideFile)
    );
    assert_eq!(e(0x1800, 0, 4096), Err(MapFdError::Invalid));
    assert_eq!(e(0x1000, 0, 0), Err(MapFdError::Invalid));
    assert_eq!(e(u64::MAX - 4095, 0, 8192), Err(MapFdError::Invalid));

    // Unmaps work on ranges, as Linux VFIO's: one that cuts a map is refused, one over
    // nothing is fine, one over several maps removes them all.
    assert_eq!(hca.unmap_fd(IOVA, 4096), Err(DmaError::InvalidRequest));
    assert_eq!(
        hca.unmap_fd(IOVA - 4096, 8192),
        Err(DmaError::InvalidRequest)
    );
    assert!(
        hca.is_mapped(IOVA, 32 << 10),
        "nothing removed by a refused unmap"
    );
    assert_eq!(hca.unmap_fd(0, 1 << 30), Ok(0));
    // Up to the top of the 64-bit IOVA space, as QEMU unmaps above an address.
    assert_eq!(
        hca.unmap_fd(0x2_0000_0000, 0u64.wrapping_sub(0x2_0000_0000)),
        Ok(0)
    );
    assert_eq!(hca.unmap_fd(u64::MAX, 2), Err(DmaError::InvalidRequest));
    assert_eq!(hca.unmap_fd(IOVA, 32 << 10), Ok(1));
    assert!(!hca.is_mapped(IOVA, 1));
    hca.map_fd(IOVA, fd.as_fd(), 0, 4096, true).unwrap();
    hca.map_unbacked(IOVA + 4096, 4096).unwrap();
    assert_eq!(hca.unmap_fd(IOVA - (1 << 20), 2 << 20), Ok(2));
    hca.map_fd(IOVA, fd.as_fd(), 0, 4096, true).unwrap();
    hca.map_fd(IOVA + 8192, fd.as_fd(), 0, 4096, true).unwrap();
    assert_eq!(hca.unmap_all_fds(), 2);
    assert!(!hca.is_mapped(IOVA + 8192, 1));
}

/// A device write to a map the client gave read-only is refused as an IOMMU fault (the
/// firmware reports the command's output mailbox unreachable), and the file is unchanged.
#[test]
fn a_device_write_to_a_read_only_map_is_an_iommu_fault() {
    let mut h = Harness::ready(MockConfig::default());
    let fd = memfd(4096);
    let outlen = QueryIssiOut::SIZE;
    let mut e = h.post(0, QueryIssiIn::new_cmd().as_bytes(), outlen);
    // The client's output mailbox, prepared in its file, then mapped for device reads only.
    let b = CmdProtBlock {
        token: e.token,
        ..Default::default()
    };
    rustix::io::pwrite(&fd, b.as_bytes(), 0).unwrap();
    h.hca.map_fd(IOVA, fd.as_fd(), 0, 4096, false).unwrap();
    e.out_ptr = IOVA.into();
    h.write_entry(0, &e);
    h.hca.clear_iommu_faults();
    h.ring(0);
    let f = h.hca.iommu_faults();
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(
        (f[0].kind, f[0].iova, f[0].write),
        (FaultKind::ReadOnly, IOVA, true)
    );
    let mut back = vec![0u8; b.as_bytes().len()];
    rustix::io::pread(&fd, &mut back, 0).unwrap();
    assert_eq!(back, b.as_bytes(), "the read-only memory is unchanged");
    assert!(
        !h.hca.host_write(IOVA, &[1]),
        "nor may the host side write it"
    );
}

/// A range the client mapped without a file takes IOVA space, and a device access to it is
/// an IOMMU fault of its own kind (the model does not carry DMA over messages).
#[test]
fn a_device_access_to_a_map_without_memory_is_an_unbacked_fault() {
    let mut h = Harness::ready(MockConfig::default());
    h.hca.map_unbacked(IOVA, 8192).unwrap();
    let fd = memfd(4096);
    assert_eq!(
        h.hca.map_fd(IOVA + 4096, fd.as_fd(), 0, 4096, true),
        Err(MapFdError::Overlap)
    );
    let mut e = h.post(0, QueryIssiIn::new_cmd().as_bytes(), QueryIssiOut::SIZE);
    e.out_ptr = (IOVA + 4096).into();
    h.write_entry(0, &e);
    h.hca.clear_iommu_faults();
    h.ring(0);
    let f = h.hca.iommu_faults();
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].kind, f[0].iova), (FaultKind::Unbacked, IOVA + 4096));
}

/// The interrupt handler gets each vector the device raises, as the interrupt count does.
#[test]
fn the_interrupt_handler_sees_every_raised_vector() {
    let mut h = Harness::ready(MockConfig::default());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    h.hca
        .set_interrupt_handler(Some(Arc::new(move |v| s.lock().unwrap().push(v))));
    let uar = h.alloc_uar();
    let eq = h.create_eq(uar, 4, &[EventType::Cmd]);
    h.eq_doorbell(&eq, true);
    h.ok(&AllocPdIn::new_cmd(), &[]);
    assert_eq!(h.hca.interrupts(0), 1);
    assert_eq!(*seen.lock().unwrap(), vec![0u16]);
    // Unarmed: no interrupt, no call.
    h.ok(&AllocPdIn::new_cmd(), &[]);
    assert_eq!(seen.lock().unwrap().len(), 1);
    // Removed: counted, not handed over.
    h.hca.set_interrupt_handler(None);
    h.eq_doorbell(&eq, true);
    h.ok(&AllocPdIn::new_cmd(), &[]);
    assert_eq!(h.hca.interrupts(0), 2);
    assert_eq!(seen.lock().unwrap().len(), 1);
}
