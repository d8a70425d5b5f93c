//! No cap on QPs but the device's: 65,536 QPs on one mock HCA, all completing to one CQ,
//! with the host memory each costs reported, and completions still finding their QP.

mod common;

use uhca_driver::verbs::{InitAttr, Qp, QpCaps, Rc, RecvWr, Sge, WcStatus};
use uhca_fwif::consts::AccessFlags;
use uhca_hal::DmaMem;
use uhca_mock::{LinkLayer, MockPlatform};

type P = MockPlatform;

/// QPs created on one HCA.
const QPS: usize = 65_536;

#[test]
fn sixty_five_thousand_qps_on_one_hca_and_one_cq() {
    let (dev, mut hca) = common::open(LinkLayer::InfiniBand);
    let pd = hca.alloc_pd().unwrap();
    let mut cq = hca.create_cq(1024).unwrap();
    let mr = hca
        .alloc_mr(&pd, 4096, AccessFlags::LOCAL_WRITE)
        .expect("a memory region");
    let cap = QpCaps {
        max_send_wr: 1,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let started = std::time::Instant::now();
    let mut qps: Vec<Qp<P, Rc>> = Vec::with_capacity(QPS);
    for i in 0..QPS {
        let qp = hca
            .create_qp::<Rc>(&pd, &common::on_cq(&cq, cap))
            .unwrap_or_else(|e| panic!("QP {i} of {QPS}: {e}"));
        qps.push(qp);
    }
    let created = started.elapsed();
    assert_eq!(dev.objects().qps, QPS);
    let (in_map, map_cap) = cq.qp_map_occupancy();
    assert_eq!(in_map, QPS, "every QP is in its CQ's map");
    let table_bytes = qps[0].host_bytes();
    let map_bytes = map_cap * (4 + 8) / QPS;
    let dma_bytes = qps[0].rings().mem().len();
    println!(
        "{QPS} QPs created in {created:.2?}; host memory per QP: {table_bytes} B of \
         work-request tables + {map_bytes} B of the CQ's map; DMA per QP: {dma_bytes} B of \
         queues and doorbell record"
    );
    // The small-QP bookkeeping stays small: a few hundred bytes of host memory.
    assert!(
        table_bytes + map_bytes <= 512,
        "{table_bytes} + {map_bytes}"
    );

    // Completions of QPs spread over the whole range still find their QP: receives on a
    // sample of QPs, which then go to ERR and flush them.
    let picks: Vec<usize> = (0..16)
        .map(|k| k * (QPS / 16) + k * 977 % (QPS / 16))
        .collect();
    let sge = [Sge {
        addr: mr.iova(),
        len: 64,
        lkey: mr.lkey(),
    }];
    let mut moved = Vec::new();
    for &i in picks.iter().rev() {
        let mut qp = qps.swap_remove(i);
        qp.to_init(
            &mut hca,
            InitAttr {
                access: AccessFlags::REMOTE_WRITE,
                ..InitAttr::default()
            },
        )
        .unwrap();
        qp.post_recv(&[RecvWr {
            wr_id: 1_000_000 + i as u64,
            sg_list: &sge,
        }])
        .unwrap();
        let qpn = qp.qpn();
        qp.to_err(&mut hca).unwrap();
        moved.push((qpn, 1_000_000 + i as u64, qp));
    }
    let mut wc = [Default::default(); 32];
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while seen.len() < moved.len() {
        assert!(std::time::Instant::now() < deadline, "flushes: {seen:?}");
        hca.process_events().unwrap();
        let n = cq.poll(&mut wc).expect("every CQE names a QP on this CQ");
        seen.extend(wc[..n].iter().map(|c| {
            assert_eq!(c.status, WcStatus::WrFlushed);
            (c.qp_num, c.wr_id)
        }));
    }
    seen.sort();
    let mut want: Vec<_> = moved.iter().map(|(qpn, id, _)| (*qpn, *id)).collect();
    want.sort();
    assert_eq!(seen, want);

    let started = std::time::Instant::now();
    for (_, _, qp) in moved {
        qp.destroy(&mut hca).unwrap();
    }
    for qp in qps {
        qp.destroy(&mut hca).unwrap();
    }
    println!("{QPS} QPs destroyed in {:.2?}", started.elapsed());
    assert_eq!(dev.objects().qps, 0);
    mr.destroy(&mut hca).unwrap();
    cq.destroy(&mut hca).unwrap();
    pd.destroy(&mut hca).unwrap();
    hca.close().unwrap();
}
