//! Dropping a verbs object releases it on the device: its destroy command goes out at the
//! HCA's next command (or `process_events`, or `close`), in an order the device accepts,
//! and its DMA memory is given back only after the destroy succeeded.

mod common;

use common::open_ib as open;

use uhca_driver::ObjectKind;
use uhca_driver::hca::AsyncEvent;
use uhca_driver::verbs::{QpCaps, Rc, SrqInitAttr};
use uhca_fwif::consts::{AccessFlags, CmdOpcode, CmdStatus};
use uhca_hal::DmaMem;
use uhca_mock::{MockHca, ObjectCounts};

/// Objects the driver itself holds after bring-up (one UAR, one EQ).
fn baseline() -> ObjectCounts {
    ObjectCounts {
        uars: 1,
        eqs: 1,
        ..ObjectCounts::default()
    }
}

fn caps() -> QpCaps {
    common::qp_caps(16, 1, 0)
}

/// The opcodes of the commands sent since `from`, with their status.
fn sent(dev: &MockHca, from: usize) -> Vec<(CmdOpcode, CmdStatus)> {
    dev.command_log()[from..]
        .iter()
        .map(|c| (c.opcode, c.status))
        .collect()
}

#[test]
fn dropped_objects_are_destroyed_users_first_and_their_memory_freed() {
    let (dev, mut hca) = open();
    let pd = hca.alloc_pd().unwrap();
    let td = hca.alloc_transport_domain().unwrap();
    let cq = hca.create_cq(16).unwrap();
    let mr = hca.alloc_mr(&pd, 8192, AccessFlags::LOCAL_WRITE).unwrap();
    let srq = hca
        .create_srq(
            &pd,
            SrqInitAttr {
                max_wr: 16,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    let qp = hca
        .create_qp::<Rc>(&pd, &common::on_srq(&cq, &srq, caps()))
        .unwrap();
    let mem = [
        (mr.iova(), mr.len()),
        (cq.ring().mem().iova(), cq.ring().mem().len()),
        (srq.mem().iova(), srq.mem().len()),
        (qp.rings().mem().iova(), qp.rings().mem().len()),
    ];
    let n = dev.command_log().len();
    // Dropped in the worst order: what is used before what uses it.
    drop(pd);
    drop(td);
    drop(cq);
    drop(mr);
    drop(srq);
    drop(qp);
    // Dropping sends nothing and frees nothing: the device may still use the memory.
    assert_eq!(dev.command_log().len(), n);
    assert_eq!(dev.objects().qps, 1);
    for &(iova, len) in &mem {
        assert!(dev.is_mapped(iova, len));
    }

    hca.process_events().unwrap();
    assert_eq!(
        sent(&dev, n),
        vec![
            (CmdOpcode::DestroyQp, CmdStatus::Ok),
            (CmdOpcode::DestroyRmp, CmdStatus::Ok),
            (CmdOpcode::DestroyCq, CmdStatus::Ok),
            (CmdOpcode::DestroyMkey, CmdStatus::Ok),
            (CmdOpcode::DeallocPd, CmdStatus::Ok),
            (CmdOpcode::DeallocTransportDomain, CmdStatus::Ok),
        ]
    );
    assert_eq!(dev.objects(), baseline());
    for &(iova, len) in &mem {
        assert!(!dev.is_mapped(iova, len), "{iova:#x} given back");
    }
    assert_eq!(hca.objects_leaked(), 0);
    // Nothing left to do: the next command is only itself.
    let n = dev.command_log().len();
    let pd = hca.alloc_pd().unwrap();
    assert_eq!(sent(&dev, n), vec![(CmdOpcode::AllocPd, CmdStatus::Ok)]);
    pd.destroy(&mut hca).unwrap();
    hca.close().unwrap();
    assert!(dev.iommu_faults().is_empty(), "{:?}", dev.iommu_faults());
}

#[test]
fn a_dropped_object_is_destroyed_before_the_next_command() {
    let (dev, mut hca) = open();
    let cq = hca.create_cq(8).unwrap();
    let cqn = cq.cqn();
    let (iova, len) = (cq.ring().mem().iova(), cq.ring().mem().len());
    drop(cq);
    let n = dev.command_log().len();
    let pd = hca.alloc_pd().unwrap();
    assert_eq!(
        sent(&dev, n),
        vec![
            (CmdOpcode::DestroyCq, CmdStatus::Ok),
            (CmdOpcode::AllocPd, CmdStatus::Ok)
        ]
    );
    assert_eq!(
        dev.last_command(CmdOpcode::DestroyCq).map(|c| c.status),
        Some(CmdStatus::Ok)
    );
    assert_eq!(dev.objects().cqs, 0, "CQ {cqn} gone");
    assert!(!dev.is_mapped(iova, len));
    drop(pd);
    hca.close().unwrap();
    assert_eq!(dev.objects().pds, 0);
}

#[test]
fn a_qp_dropped_after_its_cq_or_before_it() {
    let (dev, mut hca) = open();
    let pd = hca.alloc_pd().unwrap();

    // QP first, then the CQ: one round, no refusal.
    let cq = hca.create_cq(8).unwrap();
    let attr = common::on_cq(&cq, caps());
    let qp = hca.create_qp::<Rc>(&pd, &attr).unwrap();
    drop(qp);
    drop(cq);
    let n = dev.command_log().len();
    hca.process_events().unwrap();
    assert_eq!(
        sent(&dev, n),
        vec![
            (CmdOpcode::DestroyQp, CmdStatus::Ok),
            (CmdOpcode::DestroyCq, CmdStatus::Ok)
        ]
    );

    // The CQ dropped while the application keeps its QP: the device refuses it once
    // (RES_BUSY), it stays queued with its memory, and goes once the QP is destroyed.
    let cq = hca.create_cq(8).unwrap();
    let (iova, len) = (cq.ring().mem().iova(), cq.ring().mem().len());
    let attr = common::on_cq(&cq, caps());
    let qp = hca.create_qp::<Rc>(&pd, &attr).unwrap();
    drop(cq);
    let n = dev.command_log().len();
    hca.process_events().unwrap();
    hca.process_events().unwrap();
    let _ = qp.query(&mut hca).unwrap();
    assert_eq!(
        sent(&dev, n),
        vec![
            (CmdOpcode::DestroyCq, CmdStatus::ResBusy),
            (CmdOpcode::QueryQp, CmdStatus::Ok)
        ],
        "a busy CQ is not retried until something else is destroyed"
    );
    assert_eq!(dev.objects().cqs, 1);
    assert!(dev.is_mapped(iova, len), "kept while the device may use it");
    assert_eq!(hca.objects_leaked(), 0);
    let n = dev.command_log().len();
    qp.destroy(&mut hca).unwrap();
    hca.process_events().unwrap();
    assert_eq!(
        sent(&dev, n),
        vec![
            (CmdOpcode::DestroyQp, CmdStatus::Ok),
            (CmdOpcode::DestroyCq, CmdStatus::Ok)
        ]
    );
    assert!(!dev.is_mapped(iova, len));

    // The same, with the QP dropped as well: both go in one round, QP first.
    let cq = hca.create_cq(8).unwrap();
    let attr = common::on_cq(&cq, caps());
    let qp = hca.create_qp::<Rc>(&pd, &attr).unwrap();
    drop(cq);
    drop(qp);
    let n = dev.command_log().len();
    hca.process_events().unwrap();
    assert_eq!(
        sent(&dev, n),
        vec![
            (CmdOpcode::DestroyQp, CmdStatus::Ok),
            (CmdOpcode::DestroyCq, CmdStatus::Ok)
        ]
    );
    pd.destroy(&mut hca).unwrap();
    assert_eq!(dev.objects(), baseline());
    hca.close().unwrap();
}

#[test]
fn close_destroys_dropped_objects_first_and_reports_no_error() {
    let (dev, mut hca) = open();
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(8).unwrap();
    let mr = hca.alloc_mr(&pd, 4096, AccessFlags::LOCAL_WRITE).unwrap();
    let attr = common::on_cq(&cq, caps());
    let qp = hca.create_qp::<Rc>(&pd, &attr).unwrap();
    let qp_mem = (qp.rings().mem().iova(), qp.rings().mem().len());
    drop((pd, cq, mr, qp));
    let n = dev.command_log().len();
    // A CQ left on the EQ would make DESTROY_EQ fail: it is destroyed before.
    hca.close().unwrap();
    let ops: Vec<CmdOpcode> = sent(&dev, n).into_iter().map(|(o, _)| o).collect();
    assert_eq!(
        &ops[..5],
        &[
            CmdOpcode::DestroyQp,
            CmdOpcode::DestroyCq,
            CmdOpcode::DestroyMkey,
            CmdOpcode::DeallocPd,
            CmdOpcode::DestroyEq
        ]
    );
    assert!(sent(&dev, n).iter().all(|&(_, s)| s == CmdStatus::Ok));
    assert!(!dev.is_mapped(qp_mem.0, qp_mem.1));
    assert!(dev.iommu_faults().is_empty(), "{:?}", dev.iommu_faults());
}

#[test]
fn a_refused_destroy_leaks_the_memory_and_is_reported() {
    let (dev, mut hca) = open();
    let cq = hca.create_cq(8).unwrap();
    let cqn = cq.cqn();
    let (iova, len) = (cq.ring().mem().iova(), cq.ring().mem().len());
    dev.fail_next_command(CmdOpcode::DestroyCq, CmdStatus::BadParamErr, 0x1234);
    drop(cq);
    hca.process_events().unwrap();
    assert_eq!(hca.objects_leaked(), 1);
    assert_eq!(
        hca.next_event(),
        Some(AsyncEvent::ReleaseFailed {
            object: ObjectKind::Cq,
            number: cqn
        })
    );
    // Never freed: the device kept the CQ and may still write its ring.
    assert!(dev.is_mapped(iova, len));
    assert_eq!(dev.objects().cqs, 1);
    // Not tried again.
    let n = dev.command_log().len();
    hca.process_events().unwrap();
    assert_eq!(dev.command_log().len(), n);
    // Teardown removes the CQ with everything else (DESTROY_EQ is refused while a CQ
    // reports to the EQ, and close says so).
    let _ = hca.close();
    assert!(dev.iommu_faults().is_empty(), "{:?}", dev.iommu_faults());
}

#[test]
fn objects_dropped_after_their_hca_neither_panic_nor_hang() {
    let (dev, mut hca) = open();
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(8).unwrap();
    let mr = hca.alloc_mr(&pd, 4096, AccessFlags::LOCAL_WRITE).unwrap();
    let attr = common::on_cq(&cq, caps());
    let qp = hca.create_qp::<Rc>(&pd, &attr).unwrap();
    let mem = [
        (mr.iova(), mr.len()),
        (qp.rings().mem().iova(), qp.rings().mem().len()),
        (cq.ring().mem().iova(), cq.ring().mem().len()),
    ];
    // The QP is dropped while the HCA lives: queued, and torn down with the HCA.
    drop(qp);
    // Dropping the HCA tears the device down (the CQ is still on the EQ, so DESTROY_EQ
    // fails, as it always did with live objects); bus mastering goes off.
    drop(hca);
    assert_eq!(dev.hca_state(), uhca_mock::HcaState::TornDown);
    // The queued QP's rings are freed at teardown, after bus mastering is off.
    assert!(!dev.is_mapped(mem[1].0, mem[1].1));
    // The rest, dropped afterwards on another thread, are freed there: the device can no
    // longer reach them.
    std::thread::spawn(move || drop((mr, cq, pd)))
        .join()
        .unwrap();
    for &(iova, len) in &mem {
        assert!(!dev.is_mapped(iova, len), "{iova:#x} freed");
    }
    assert!(dev.iommu_faults().is_empty(), "{:?}", dev.iommu_faults());

    // A PD of a closed HCA dropped while a new HCA runs is not deallocated by the new one.
    let (dev1, mut hca1) = open();
    let pd1 = hca1.alloc_pd().unwrap();
    hca1.close().unwrap();
    let (dev2, mut hca2) = open();
    let pd2 = hca2.alloc_pd().unwrap();
    drop(pd1);
    let n = dev2.command_log().len();
    hca2.process_events().unwrap();
    assert_eq!(dev2.command_log().len(), n);
    pd2.destroy(&mut hca2).unwrap();
    hca2.close().unwrap();
    drop(dev1);
}

#[test]
fn an_object_dropped_on_another_thread_is_released_by_the_hca() {
    let (dev, mut hca) = open();
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(8).unwrap();
    let attr = common::on_cq(&cq, caps());
    let qp = hca.create_qp::<Rc>(&pd, &attr).unwrap();
    let qpn = qp.qpn();
    std::thread::spawn(move || drop((qp, cq, pd)))
        .join()
        .unwrap();
    hca.process_events().unwrap();
    assert_eq!(dev.objects(), baseline(), "QP {qpn} and the rest gone");
    hca.close().unwrap();
}

#[test]
fn many_dropped_objects_grow_the_queue_at_creation() {
    let (dev, mut hca) = open();
    let pd = hca.alloc_pd().unwrap();
    let mrs: Vec<_> = (0..100)
        .map(|_| hca.alloc_mr(&pd, 4096, AccessFlags::LOCAL_WRITE).unwrap())
        .collect();
    let mem: Vec<_> = mrs.iter().map(|m| (m.iova(), m.len())).collect();
    drop(mrs);
    drop(pd);
    hca.process_events().unwrap();
    assert_eq!(dev.objects(), baseline());
    assert!(mem.iter().all(|&(iova, len)| !dev.is_mapped(iova, len)));
    assert_eq!(hca.objects_leaked(), 0);
    hca.close().unwrap();
}

#[test]
fn on_a_dead_device_dropped_objects_are_freed_once_bus_mastering_is_off() {
    let (dev, mut hca) = open();
    let cq = hca.create_cq(8).unwrap();
    let (iova, len) = (cq.ring().mem().iova(), cq.ring().mem().len());
    dev.set_fatal_health(0x1, 0);
    drop(cq);
    let n = dev.command_log().len();
    assert!(matches!(
        hca.process_events(),
        Err(uhca_driver::Error::Fatal(_))
    ));
    // Nothing is sent to a dead device, and the memory stays while it may still write it.
    assert_eq!(dev.command_log().len(), n);
    assert!(dev.is_mapped(iova, len));
    assert!(hca.close().is_err());
    assert_eq!(dev.command_log().len(), n);
    assert!(
        !dev.is_mapped(iova, len),
        "freed after bus mastering went off"
    );
}

#[test]
fn any_number_of_dropped_domains_are_deallocated() {
    let (dev, mut hca) = open();
    // More than a fixed table would hold between two commands (it was 64).
    let pds: Vec<_> = (0..100).map(|_| hca.alloc_pd().unwrap()).collect();
    let tds: Vec<_> = (0..100)
        .map(|_| hca.alloc_transport_domain().unwrap())
        .collect();
    assert_eq!(dev.objects().pds, 100);
    let from = dev.command_log().len();
    drop(pds);
    drop(tds);
    hca.process_events().unwrap();
    assert_eq!(dev.objects(), baseline());
    let sent = sent(&dev, from);
    assert_eq!(sent.len(), 200);
    assert!(sent.iter().all(|&(_, s)| s == CmdStatus::Ok), "{sent:?}");
    assert_eq!(hca.objects_leaked(), 0);
    hca.close().unwrap();
}

#[test]
fn every_one_of_many_open_hcas_releases_what_is_dropped() {
    // More HCAs open at once than a process-wide table had room for (it was 64).
    const HCAS: usize = 70;
    let mut open_hcas: Vec<_> = (0..HCAS).map(|_| open()).collect();
    let objects: Vec<_> = open_hcas
        .iter_mut()
        .map(|(_, hca)| {
            let pd = hca.alloc_pd().unwrap();
            let td = hca.alloc_transport_domain().unwrap();
            let cq = hca.create_cq(8).unwrap();
            let mr = hca.alloc_mr(&pd, 4096, AccessFlags::LOCAL_WRITE).unwrap();
            (mr, cq, td, pd)
        })
        .collect();
    drop(objects);
    for (i, (dev, hca)) in open_hcas.iter_mut().enumerate() {
        hca.process_events().unwrap();
        assert_eq!(dev.objects(), baseline(), "HCA {i}");
        assert_eq!(hca.objects_leaked(), 0, "HCA {i}");
    }
    for (_, hca) in open_hcas {
        hca.close().unwrap();
    }
}

#[test]
fn a_dropped_caller_memory_region_is_destroyed_then_unmapped() {
    let (dev, mut hca) = open();
    let pd = hca.alloc_pd().unwrap();
    let mapped = hca.map_host_buf(vec![0u8; 4096]).unwrap();
    let (iova, len) = (mapped.iova(), mapped.len());
    let mr = hca
        .reg_user_mr(&pd, mapped, AccessFlags::LOCAL_WRITE)
        .unwrap();
    assert_eq!(dev.objects().mkeys, 1);
    let from = dev.command_log().len();
    drop(mr);
    assert!(
        dev.is_mapped(iova, len),
        "mapped until the key is destroyed"
    );
    hca.process_events().unwrap();
    assert_eq!(sent(&dev, from), [(CmdOpcode::DestroyMkey, CmdStatus::Ok)]);
    assert_eq!(dev.objects().mkeys, 0);
    assert!(!dev.is_mapped(iova, len), "unmapped after DESTROY_MKEY");
    pd.destroy(&mut hca).unwrap();
    hca.close().unwrap();
}
