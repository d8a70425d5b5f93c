//! The whole path without a VM: uhca's driver brought up over a vfio-user connection. Every
//! BAR0 and configuration access is a socket message, every byte of DMA (command queue,
//! mailboxes, firmware pages, the EQ) lives in the client's memfd that the server mapped,
//! and the event queue's interrupt arrives on the eventfd given in SET_IRQS.

mod common;

use common::{
    Client, RAM_IOVA, RAM_SIZE, Ram, SocketPlatform, eventfd, realtime_hca, wait_eventfd,
};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;
use uhca_driver::{Hca, HcaConfig};
use uhca_fwif::consts::CmdOpcode;
use uhca_hal::Bar;
use uhca_mock::{FaultKind, HcaState, MockHca};
use uhca_vfio_user::Function;
use uhca_vfio_user::proto::{self, cmd};

fn cfg() -> HcaConfig {
    HcaConfig {
        fw_pre_init_timeout_ns: 5_000_000_000,
        fw_init_timeout_ns: 2_000_000_000,
        cmd_timeout_ns: 2_000_000_000,
        poll_us: 20,
        ..HcaConfig::default()
    }
}

/// A connected client as QEMU leaves it before the guest's driver runs: version agreed, RAM
/// mapped with its memfd, eventfds for the first 16 MSI-X vectors.
fn connect() -> (MockHca, Function, SocketPlatform, Arc<Ram>, Vec<OwnedFd>) {
    let hca = realtime_hca();
    let f = Function::new(hca.clone());
    let mut c = Client::start(&f);
    assert_eq!(c.version().errno(), 0);
    let ram = Arc::new(Ram::new(RAM_SIZE));
    let rw = proto::DMA_MAP_FLAG_READ | proto::DMA_MAP_FLAG_WRITE;
    assert_eq!(
        c.dma_map(Some(ram.fd.as_fd()), 0, RAM_IOVA, RAM_SIZE as u64, rw)
            .errno(),
        0
    );
    let fds: Vec<_> = (0..16).map(|_| eventfd()).collect();
    let b: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
    let trig = proto::IRQ_SET_DATA_EVENTFD | proto::IRQ_SET_ACTION_TRIGGER;
    assert_eq!(
        c.set_irqs(proto::PCI_MSIX_IRQ_INDEX, trig, 0, 16, &[], &b)
            .errno(),
        0
    );
    let p = SocketPlatform::new(c, ram.clone());
    (hca, f, p, ram, fds)
}

/// The vector the model raised last time (the one whose count moved).
fn raised(hca: &MockHca, before: &[u64]) -> Option<usize> {
    (0..16).find(|&v| hca.interrupts(v as u16) > before[v])
}

#[test]
fn the_driver_comes_up_over_the_socket_with_dma_in_the_memfd_and_msix_on_the_eventfd() {
    let (dev, _f, p, ram, fds) = connect();
    let mut hca = Hca::open_with(p.clone(), cfg()).expect("bring-up over vfio-user");
    assert!(dev.iommu_faults().is_empty(), "{:?}", dev.iommu_faults());
    assert_eq!(dev.hca_state(), HcaState::Initialized);
    assert!(hca.firmware_pages() > 0);
    assert_eq!(
        dev.pages().held,
        hca.firmware_pages(),
        "driver and firmware agree on pages"
    );
    assert!(dev.last_command(CmdOpcode::InitHca).is_some());
    // The command queue the driver gave the device lies in the client's memory: the
    // init segment, read back through BAR0, holds an IOVA of the memfd's map.
    let cmdq = ((p.read_be32(0x10) as u64) << 32) | (p.read_be32(0x14) as u64 & !0xfff);
    assert!(
        (RAM_IOVA..RAM_IOVA + RAM_SIZE as u64).contains(&cmdq),
        "{cmdq:#x}"
    );
    // ... and the entry the device wrote its status into is visible in the client's mapping
    // of the file: the ownership bit of slot 0 went back to software.
    let mut entry = [0u8; 64];
    ram.read((cmdq - RAM_IOVA) as usize, &mut entry);
    assert_eq!(
        entry[0x3f] & 1,
        0,
        "slot 0 owned by software after its completion"
    );
    assert_eq!(entry[0], 7, "command queue entry type (PCIe)");

    // A page request from the firmware: the armed EQ gets an EQE, its vector fires the
    // eventfd, and the driver serves the request through the socket.
    // The regular pages the firmware asks for after INIT_HCA first.
    // BAR writes are posted, as QEMU sends them: a read returns after every earlier write
    // reached the model (the EQ's arm doorbell among them), as on PCI. An arm that finds
    // EQEs the driver has not read yet (a command's completion written after the drain)
    // interrupts at once and is used up, so serve events until an arm finds the EQ empty:
    // then it stays armed for the page request below.
    let mut quiet = false;
    for _ in 0..10 {
        hca.process_events().unwrap();
        p.read32(0);
        let signalled: u64 = fds.iter().map(|fd| wait_eventfd(fd, Duration::ZERO)).sum();
        if signalled == 0 {
            quiet = true;
            break;
        }
    }
    assert!(
        quiet,
        "the EQ kept interrupting after its events were served"
    );
    let before: Vec<u64> = (0..16).map(|v| dev.interrupts(v)).collect();
    let pages = hca.firmware_pages();
    dev.request_pages(1);
    let v = raised(&dev, &before).expect("an MSI-X vector was raised");
    assert!(
        wait_eventfd(&fds[v], Duration::from_secs(5)) >= 1,
        "eventfd of vector {v}"
    );
    for (i, fd) in fds.iter().enumerate() {
        if i != v {
            assert_eq!(
                wait_eventfd(fd, Duration::ZERO),
                0,
                "vector {i} stayed quiet"
            );
        }
    }
    hca.process_events().unwrap();
    assert_eq!(hca.firmware_pages(), pages + 1);
    assert_eq!(dev.pages().held, pages + 1);

    // A verbs object: a PD and a CQ, commands through the BAR0 doorbell and memfd mailboxes.
    let pd = hca.alloc_pd().expect("PD");
    let cq = hca.create_cq(64).expect("CQ");
    assert_eq!(dev.objects().cqs, 1);
    assert!(cq.destroy(&mut hca).is_ok(), "DESTROY_CQ");
    assert!(pd.destroy(&mut hca).is_ok(), "DEALLOC_PD");
    assert_eq!(dev.objects().cqs, 0);
    hca.close().expect("teardown over the socket");
    assert!(dev.iommu_faults().is_empty(), "{:?}", dev.iommu_faults());
}

/// Bring-up, teardown, DEVICE_RESET (a function level reset of the model) and a second
/// bring-up in one process, as `VFIO_DEVICE_RESET` between two runs of a program does.
#[test]
fn device_reset_is_a_function_level_reset_and_the_driver_comes_back() {
    let (dev, _f, p, _ram, _fds) = connect();
    // A graceful teardown (pages returned, DISABLE_HCA) leaves the function ready for the
    // next bring-up; a fast teardown leaves it for the function level reset that closing a
    // VFIO device brings, which the last bring-up below gets from DEVICE_RESET.
    let graceful = HcaConfig {
        teardown: uhca_driver::TeardownMode::Graceful,
        ..cfg()
    };
    let hca = Hca::open_with(p.clone(), graceful).expect("first bring-up");
    hca.close().expect("teardown");
    assert_eq!(dev.hca_state(), HcaState::Disabled);
    let hca = Hca::open_with(p.clone(), cfg()).expect("second bring-up in the same process");
    assert_eq!(dev.hca_state(), HcaState::Initialized);
    let resets = dev.reset_count();
    let r = p.client().call(cmd::DEVICE_RESET, &[], &[]);
    assert_eq!(r.errno(), 0);
    assert_eq!(dev.reset_count(), resets + 1);
    assert_eq!(
        dev.hca_state(),
        HcaState::Disabled,
        "the reset took the running HCA down"
    );
    assert_eq!(
        dev.pages().held,
        0,
        "the firmware's pages went with the reset"
    );
    assert_eq!(dev.objects().eqs, 0);
    // The reset destroyed what this handle owned on the device; it is not torn down again.
    std::mem::forget(hca);
    // Bus mastering went off with the reset; the driver turns it on again.
    let hca = Hca::open_with(p.clone(), cfg()).expect("bring-up after the reset");
    assert_eq!(dev.hca_state(), HcaState::Initialized);
    assert!(dev.iommu_faults().is_empty(), "{:?}", dev.iommu_faults());
    hca.close().expect("fast teardown after the reset");
    let r = p.client().call(cmd::DEVICE_RESET, &[], &[]);
    assert_eq!(r.errno(), 0);
    let hca = Hca::open_with(p.clone(), cfg()).expect("bring-up after a fast teardown and a reset");
    hca.close().expect("last teardown");
}

/// After the client withdraws its memory (DMA_UNMAP), a device write to it is an IOMMU
/// fault of the model: nothing in the file changes and no interrupt fires.
#[test]
fn dma_after_the_client_unmapped_its_memory_is_an_iommu_fault() {
    let (dev, _f, p, ram, fds) = connect();
    let hca = Hca::open_with(p.clone(), cfg()).expect("bring-up");
    let mut snapshot = vec![0u8; 1 << 20];
    ram.read(0, &mut snapshot);
    p.read32(0); // the posted writes (the EQ's arm) reached the model
    // The bring-up's arm interrupts at once if the EQ then held EQEs the driver had not
    // read (an armed EQ that is not empty interrupts): take those signals first.
    for fd in &fds {
        wait_eventfd(fd, Duration::ZERO);
    }
    let r = p.client().dma_unmap(RAM_IOVA, RAM_SIZE as u64, 0);
    assert_eq!(r.errno(), 0);
    let before: Vec<u64> = (0..16).map(|v| dev.interrupts(v)).collect();
    dev.request_pages(1);
    let faults = dev.iommu_faults();
    let fault = faults.last().expect("an IOMMU fault");
    assert_eq!(fault.kind, FaultKind::Unmapped);
    assert!(fault.write);
    assert!(
        (RAM_IOVA..RAM_IOVA + RAM_SIZE as u64).contains(&fault.iova),
        "{fault:?}"
    );
    assert_eq!(
        raised(&dev, &before),
        None,
        "no interrupt for an EQE never written"
    );
    assert!(fds.iter().all(|fd| wait_eventfd(fd, Duration::ZERO) == 0));
    let mut after = vec![0u8; 1 << 20];
    ram.read(0, &mut after);
    assert!(snapshot == after, "the client's memory is unchanged");
    std::mem::forget(hca); // its memory is gone from the device; no teardown through it
}
