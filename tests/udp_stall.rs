//! A requester whose process is not scheduled while its READ responses arrive: two mock
//! HCAs in one process, each behind its own kernel UDP socket (`127.0.0.97`, `.98`), RC
//! connected; 16 RDMA READs of 16 KiB in flight (256 KiB of responses, several polls of
//! the socket) while the requester's fabric is held for 300 ms, longer than the QP's ACK
//! timeout (67 ms). The responses waited in the socket and came in time: every READ
//! completes with its data, and the requester neither timed out nor sent a request again.

use std::net::Ipv4Addr;
use uhca::mock::MockHca;
use uhca::prelude::*;

const READS: usize = 16;
const LEN: usize = 16 * 1024;

#[test]
fn responses_waiting_in_the_socket_are_taken_before_the_ack_timer() {
    let (ip_a, ip_b) = (Ipv4Addr::new(127, 0, 0, 97), Ipv4Addr::new(127, 0, 0, 98));
    let (node_a, node_b) = match (MockHca::udp(ip_a), MockHca::udp(ip_b)) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => {
            let e = a.err().or(b.err()).expect("one failed");
            assert!(
                std::env::var("UHCA_REQUIRE_UDP").as_deref() != Ok("1"),
                "UHCA_REQUIRE_UDP=1 but cannot bind: {e}"
            );
            eprintln!("SKIPPED: cannot bind the loopback addresses: {e}");
            return;
        }
    };
    let mut a = Hca::open(node_a.platform()).unwrap();
    let mut b = Hca::open(node_b.platform()).unwrap();
    a.add_roce_ip(1, 0, ip_a.into()).unwrap();
    b.add_roce_ip(1, 0, ip_b.into()).unwrap();
    let (ea, eb) = (a.endpoint(1, 0).unwrap(), b.endpoint(1, 0).unwrap());
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (mut cqa, cqb) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let all = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ;
    let mra = a.alloc_mr(&pa, READS * LEN, all).unwrap();
    let mut mrb = b.alloc_mr(&pb, READS * LEN, all).unwrap();
    let caps = QpCaps::new(READS as u32, 1);
    let mut qa = a
        .create_qp::<Rc>(&pa, &QpInitAttr::new(&cqa, caps))
        .unwrap();
    let mut qb = b
        .create_qp::<Rc>(&pb, &QpInitAttr::new(&cqb, caps))
        .unwrap();
    let pattern = |i: usize| (i * 31 + 7) as u8;
    let data: Vec<u8> = (0..READS * LEN).map(pattern).collect();
    mrb.mem_mut().write_bytes(0, &data);
    let init = InitAttr::new(AccessFlags::REMOTE_READ);
    let mut rtr = RtrAttr::new(ea.path_to(&eb, qa.qpn(), qb.qpn()), qb.qpn(), 0x100);
    rtr.max_dest_rd_atomic = READS as u8;
    let rts = RtsAttr {
        max_rd_atomic: READS as u8,
        ..RtsAttr::new(0x200)
    };
    qa.connect(&mut a, &init, &rtr, &rts).unwrap();
    let mut rtr_b = RtrAttr::new(eb.path_to(&ea, qb.qpn(), qa.qpn()), qa.qpn(), 0x200);
    rtr_b.max_dest_rd_atomic = READS as u8;
    let rts_b = RtsAttr {
        max_rd_atomic: READS as u8,
        ..RtsAttr::new(0x100)
    };
    qb.connect(&mut b, &init, &rtr_b, &rts_b).unwrap();

    let sges: Vec<[Sge; 1]> = (0..READS)
        .map(|i| [mra.sge(i * LEN, LEN).unwrap()])
        .collect();
    let wrs: Vec<SendWr<'_>> = (0..READS)
        .map(|i| {
            let op = SendOp::RdmaRead {
                remote_addr: mrb.iova() + (i * LEN) as u64,
                rkey: mrb.rkey(),
            };
            SendWr::new(i as u64, op, &sges[i])
        })
        .collect();
    qa.post_send(&wrs).unwrap();
    // The requests left with the doorbell; the responses pile up in A's socket meanwhile.
    node_a
        .fabric
        .stall_for(std::time::Duration::from_millis(300));

    let mut done = 0;
    let mut wc = [WorkCompletion::default(); READS];
    while done < READS {
        let n = cqa.poll_timeout(&mut wc[done..], 30_000_000_000).unwrap();
        assert!(n > 0, "only {done} of {READS} READs completed within 30 s");
        for w in &wc[done..done + n] {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
        }
        done += n;
    }
    let mut got = vec![0u8; READS * LEN];
    mra.mem().read_bytes(0, &mut got);
    assert!(got == data, "the READs brought the responder's bytes");
    let c = node_a.hca.datapath_counters();
    assert_eq!(
        (c.timeouts, c.retransmitted_packets),
        (0, 0),
        "the requester timed out or sent again although every response had come in time"
    );
    drop((qa, qb, mra, mrb, cqa, cqb, pa, pb));
    a.close().unwrap();
    b.close().unwrap();
}
