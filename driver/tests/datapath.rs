//! End to end: two mock HCAs brought up by the driver, connected by the mock fabric
//! (RoCEv2 over Ethernet and native InfiniBand), moving data with `post_send`,
//! `post_recv` and `Cq::poll`: SEND, SEND with immediate, RDMA WRITE (with immediate),
//! RDMA READ, compare-and-swap and fetch-and-add with the data checked in memory; UD with
//! address handles; SRQ receives; completion events; and the error paths — a wrong rkey
//! (remote access error) and no receive posted (RNR retry exceeded) put the QP in error,
//! later requests flush, and the QP comes back through RESET.

use uhca_driver::verbs::{
    InitAttr, Qp, Rc, RecvWr, RtrAttr, RtsAttr, SendFlags, SendOp, SendWr, Sge, Srq, SrqInitAttr,
    Uc, Ud, UdDest, WcFlags, WcOpcode, WcStatus, WorkCompletion, WrError,
};
use uhca_fwif::consts::{AccessFlags, QpState};
use uhca_hal::DmaMem;
use uhca_mock::{Fabric, FaultConfig, LinkLayer};

mod common;

use common::*;

fn rc_every_opcode(link: LinkLayer) {
    let (fabric, mut a, mut b, mut qa, mut qb) = rc_pair(link, RtsAttr::default());
    let (la, lb) = (a.mr.lkey(), b.mr.lkey());
    let (ia, ib) = (a.mr.iova(), b.mr.iova());
    let rkey = b.mr.rkey();
    // A's memory: [0, 4096) source pattern; 8192.. READ target; 12288.. atomic results.
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    a.mr.mem_mut().write_bytes(0, &pattern);
    // B's memory: [0, 1024) receive 1; [1024, 2048) receive 2; [2048, 3072) receive 3;
    // [4096, 8192) WRITE target; [8192, 9216) READ source; [9216, 10240) fenced WRITE
    // target; 12288 CAS word, 12296 FAA word.
    let secret: Vec<u8> = (0..1024u32).map(|i| (i ^ 0x5a) as u8).collect();
    b.mr.mem_mut().write_bytes(8192, &secret);
    // The atomic targets in the host's byte order: the driver set the 8-byte atomic
    // endianness mode to host endianness at bring-up, as Linux does.
    b.mr.mem_mut().write_bytes(12288, &1000u64.to_ne_bytes());
    b.mr.mem_mut().write_bytes(12296, &40u64.to_ne_bytes());

    let r = |i: u64| {
        [Sge {
            addr: ib + i * 1024,
            len: 1024,
            lkey: lb,
        }]
    };
    let (r0, r1, r2) = (r(0), r(1), r(2));
    qb.post_recv(&[
        RecvWr {
            wr_id: 200,
            sg_list: &r0,
        },
        RecvWr {
            wr_id: 201,
            sg_list: &r1,
        },
        RecvWr {
            wr_id: 202,
            sg_list: &r2,
        },
    ])
    .unwrap();

    let src100 = [Sge {
        addr: ia + 100,
        len: 300,
        lkey: la,
    }];
    let src4k = [Sge {
        addr: ia,
        len: 4096,
        lkey: la,
    }];
    let read_to = [Sge {
        addr: ia + 8192,
        len: 1024,
        lkey: la,
    }];
    let cas_to = [Sge {
        addr: ia + 12288,
        len: 8,
        lkey: la,
    }];
    let faa_to = [Sge {
        addr: ia + 12296,
        len: 8,
        lkey: la,
    }];
    let wrs = [
        SendWr::new(1, SendOp::Send, &[]).with_inline(b"hello over the mock fabric"),
        SendWr::new(2, SendOp::SendWithImm { imm: 0x1234_5678 }, &src100)
            .with_flags(SendFlags::SIGNALED | SendFlags::SOLICITED),
        SendWr::new(
            3,
            SendOp::RdmaWrite {
                remote_addr: ib + 4096,
                rkey,
            },
            &src4k,
        ),
        SendWr::new(
            4,
            SendOp::RdmaWriteWithImm {
                remote_addr: ib + 4096,
                rkey,
                imm: 77,
            },
            &src100,
        ),
        SendWr::new(
            5,
            SendOp::RdmaRead {
                remote_addr: ib + 8192,
                rkey,
            },
            &read_to,
        ),
        // Fenced (the WQE's fence bits are checked in post_poll.rs; the data ordering in
        // `fence_orders_a_write_after_a_read`).
        SendWr::new(
            8,
            SendOp::RdmaWrite {
                remote_addr: ib + 9216,
                rkey,
            },
            &read_to,
        )
        .with_flags(SendFlags::SIGNALED | SendFlags::FENCE),
        SendWr::new(
            6,
            SendOp::AtomicCmpSwap {
                remote_addr: ib + 12288,
                rkey,
                compare: 1000,
                swap: 2000,
            },
            &cas_to,
        )
        .with_flags(SendFlags::SIGNALED | SendFlags::FENCE),
        SendWr::new(
            7,
            SendOp::AtomicFetchAdd {
                remote_addr: ib + 12296,
                rkey,
                add: 2,
            },
            &faa_to,
        ),
    ];
    // The model offers 8-byte atomics (the `atomic` capability).
    assert!(a.hca.caps().atomic && b.hca.caps().atomic);
    qa.post_send(&wrs).unwrap();
    run(&fabric);

    let wa = poll(&mut a);
    let got: Vec<_> = wa.iter().map(|c| (c.wr_id, c.status, c.opcode)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success, WcOpcode::Send),
            (2, WcStatus::Success, WcOpcode::Send),
            (3, WcStatus::Success, WcOpcode::RdmaWrite),
            (4, WcStatus::Success, WcOpcode::RdmaWrite),
            (5, WcStatus::Success, WcOpcode::RdmaRead),
            (8, WcStatus::Success, WcOpcode::RdmaWrite),
            (6, WcStatus::Success, WcOpcode::CompSwap),
            (7, WcStatus::Success, WcOpcode::FetchAdd),
        ]
    );
    assert_eq!(wa[4].byte_len, 1024);
    assert!(wa.iter().all(|c| c.qp_num == qa.qpn()));

    let wb = poll(&mut b);
    assert_eq!(wb.len(), 3);
    assert_eq!(
        (wb[0].wr_id, wb[0].opcode, wb[0].byte_len),
        (200, WcOpcode::Recv, 26)
    );
    assert_eq!(
        (wb[1].wr_id, wb[1].byte_len, wb[1].imm_data, wb[1].wc_flags),
        (201, 300, 0x1234_5678, WcFlags::WITH_IMM)
    );
    assert_eq!(
        (wb[2].wr_id, wb[2].opcode, wb[2].imm_data),
        (202, WcOpcode::RecvRdmaWithImm, 77)
    );

    // The data, where each operation put it.
    let bm = b.mr.mem();
    let mut got = vec![0u8; 300];
    bm.read_bytes(0, &mut got[..26]);
    assert_eq!(&got[..26], b"hello over the mock fabric");
    bm.read_bytes(1024, &mut got);
    assert_eq!(got, pattern[100..400]);
    let mut w = vec![0u8; 4096];
    bm.read_bytes(4096, &mut w);
    // The second WRITE overwrote the first 300 bytes with pattern[100..400].
    assert_eq!(&w[..300], &pattern[100..400]);
    assert_eq!(&w[300..], &pattern[300..]);
    let mut rd = vec![0u8; 1024];
    a.mr.mem().read_bytes(8192, &mut rd);
    assert_eq!(rd, secret);
    // Atomics: the remote words and the original values landing in the local buffer are
    // in the host's byte order (the driver set the 8-byte atomic endianness mode to host
    // endianness, as Linux does; rdma-core users and Soft-RoCE read them the same way).
    assert_eq!((wa[6].byte_len, wa[7].byte_len), (8, 8));
    let mut words = [0u8; 16];
    bm.read_bytes(12288, &mut words);
    assert_eq!(words[..8], 2000u64.to_ne_bytes(), "CAS target, host order");
    assert_eq!(words[8..], 42u64.to_ne_bytes(), "FAA target, host order");
    let mut orig = [0u8; 16];
    a.mr.mem().read_bytes(12288, &mut orig);
    assert_eq!(orig[..8], 1000u64.to_ne_bytes(), "CAS original, host order");
    assert_eq!(orig[8..], 40u64.to_ne_bytes(), "FAA original, host order");
}

#[test]
fn rc_every_opcode_over_rocev2() {
    rc_every_opcode(LinkLayer::Ethernet);
}

#[test]
fn rc_every_opcode_over_infiniband() {
    rc_every_opcode(LinkLayer::InfiniBand);
}

/// `Cq::poll_timeout`: on an empty CQ it gives up once the timeout has passed on the
/// platform's clock (a virtual one here, which its wait moves along), and it waits for a
/// completion that the fabric delivers only later, from another thread.
#[test]
fn poll_timeout_gives_up_in_time_and_waits_for_a_later_completion() {
    let (fabric, mut a, b, mut qa, _qb) = rc_pair(LinkLayer::Ethernet, RtsAttr::default());
    let mut wc = [WorkCompletion::default(); 4];
    let t0 = a.dev.now_ns();
    assert_eq!(a.cq.poll_timeout(&mut wc, 3_000_000).unwrap(), 0);
    let waited = a.dev.now_ns() - t0;
    assert!(
        (3_000_000..4_000_000).contains(&waited),
        "waited {waited} ns"
    );
    a.mr.mem_mut().write_bytes(0, b"late");
    let sge = [a.mr.sge(0, 4).unwrap()];
    let op = SendOp::RdmaWrite {
        remote_addr: b.mr.iova(),
        rkey: b.mr.rkey(),
    };
    qa.post_send(&[SendWr::new(9, op, &sge)]).unwrap();
    let f = fabric.clone();
    let mover = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(20));
        f.run_until_idle()
    });
    let n = a.cq.poll_timeout(&mut wc, 60_000_000_000).unwrap();
    assert!(mover.join().unwrap(), "the fabric settles");
    assert_eq!(n, 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (9, WcStatus::Success));
    let mut got = [0u8; 4];
    b.mr.mem().read_bytes(0, &mut got);
    assert_eq!(&got, b"late");
}

/// Issue 31 F2: compare-and-swap compares with the remote word read in the host's byte
/// order (the mode the driver set at bring-up): a compare equal to the host-order word
/// swaps, one equal to the same bytes read big-endian does not.
#[test]
fn compare_and_swap_compares_with_the_remote_word_in_host_order() {
    let (fabric, mut a, mut b, mut qa, _qb) = rc_pair(LinkLayer::InfiniBand, RtsAttr::default());
    let (la, ia, ib, rkey) = (a.mr.lkey(), a.mr.iova(), b.mr.iova(), b.mr.rkey());
    let word = 0x0000_0000_ffff_ffffu64;
    b.mr.mem_mut().write_bytes(0, &word.to_ne_bytes());
    let to = [Sge {
        addr: ia,
        len: 8,
        lkey: la,
    }];
    let cas = |id, compare| {
        SendWr::new(
            id,
            SendOp::AtomicCmpSwap {
                remote_addr: ib,
                rkey,
                compare,
                swap: 7,
            },
            &to,
        )
        .with_flags(SendFlags::SIGNALED)
    };
    // The same bytes read the other way round: no match, nothing swapped.
    let other = word.swap_bytes();
    qa.post_send(&[cas(1, other)]).unwrap();
    run(&fabric);
    assert_eq!(poll(&mut a)[0].status, WcStatus::Success);
    let mut got = [0u8; 8];
    b.mr.mem().read_bytes(0, &mut got);
    assert_eq!(got, word.to_ne_bytes(), "no swap");
    a.mr.mem().read_bytes(0, &mut got);
    assert_eq!(
        u64::from_ne_bytes(got),
        word,
        "the original value, host order"
    );
    // The host-order word: swapped.
    qa.post_send(&[cas(2, word)]).unwrap();
    run(&fabric);
    assert_eq!(poll(&mut a)[0].status, WcStatus::Success);
    b.mr.mem().read_bytes(0, &mut got);
    assert_eq!(u64::from_ne_bytes(got), 7, "swapped");
}

#[test]
fn many_batches_with_unsignalled_requests_wrap_the_queues() {
    let (fabric, mut a, mut b, mut qa, mut qb) = rc_pair(LinkLayer::Ethernet, RtsAttr::default());
    let (la, lb) = (a.mr.lkey(), b.mr.lkey());
    let (ia, ib) = (a.mr.iova(), b.mr.iova());
    let mut next_recv = 0u64;
    let mut received = 0u64;
    let mut sent_signalled = 0u64;
    for round in 0..40u64 {
        let rbuf: Vec<[Sge; 1]> = (0..8u64)
            .map(|i| {
                [Sge {
                    addr: ib + (i % 16) * 64,
                    len: 64,
                    lkey: lb,
                }]
            })
            .collect();
        let rwrs: Vec<RecvWr<'_>> = rbuf
            .iter()
            .map(|s| {
                next_recv += 1;
                RecvWr {
                    wr_id: next_recv,
                    sg_list: s,
                }
            })
            .collect();
        qb.post_recv(&rwrs).unwrap();
        let src: Vec<[Sge; 1]> = (0..8u64)
            .map(|i| {
                [Sge {
                    addr: ia + i * 8,
                    len: 8,
                    lkey: la,
                }]
            })
            .collect();
        // Every fourth request signalled: the others retire with it.
        let swrs: Vec<SendWr<'_>> = src
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let flags = if i % 4 == 3 {
                    SendFlags::SIGNALED
                } else {
                    SendFlags::empty()
                };
                SendWr::new(round * 8 + i as u64, SendOp::Send, s).with_flags(flags)
            })
            .collect();
        qa.post_send(&swrs).unwrap();
        run(&fabric);
        let wa = poll(&mut a);
        assert_eq!(
            wa.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
            [round * 8 + 3, round * 8 + 7]
        );
        sent_signalled += wa.len() as u64;
        let wb = poll(&mut b);
        for c in &wb {
            received += 1;
            assert_eq!(
                (c.wr_id, c.status, c.byte_len),
                (received, WcStatus::Success, 8)
            );
        }
    }
    assert_eq!((received, sent_signalled), (320, 80));
}

#[test]
fn ud_send_and_receive_with_address_handles() {
    for link in [LinkLayer::Ethernet, LinkLayer::InfiniBand] {
        let fabric = Fabric::new(link);
        let mut a = node(&fabric, 1);
        let mut b = node(&fabric, 2);
        let ud = |n: &mut Node| {
            let attr = common::on_cq(&n.cq, caps());
            let mut qp = n.hca.create_qp::<Ud>(&n.pd, &attr).unwrap();
            qp.to_init(
                &mut n.hca,
                InitAttr {
                    qkey: 0x1111_2222,
                    ..InitAttr::default()
                },
            )
            .unwrap();
            qp.to_rtr(&mut n.hca).unwrap();
            qp.to_rts(&mut n.hca, 0).unwrap();
            qp
        };
        let mut qa: Qp<P, Ud> = ud(&mut a);
        let mut qb = ud(&mut b);
        let rbuf = [Sge {
            addr: b.mr.iova(),
            len: 1024,
            lkey: b.mr.lkey(),
        }];
        qb.post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: &rbuf,
        }])
        .unwrap();
        let ah = a.hca.create_ah(1, path(&fabric, &b)).unwrap();
        let dest = UdDest {
            ah: &ah,
            remote_qpn: qb.qpn(),
            remote_qkey: 0x1111_2222,
        };
        let msg = b"a datagram";
        qa.post_send(&[SendWr::new(1, SendOp::SendWithImm { imm: 5 }, &[])
            .with_inline(msg)
            .with_ud(dest)])
            .unwrap();
        run(&fabric);
        let wa = poll(&mut a);
        assert_eq!((wa[0].wr_id, wa[0].status), (1, WcStatus::Success));
        let wb = poll(&mut b);
        assert_eq!(wb.len(), 1, "{link:?}");
        let c = wb[0];
        assert_eq!(
            (c.wr_id, c.status, c.opcode, c.imm_data),
            (9, WcStatus::Success, WcOpcode::Recv, 5)
        );
        assert_eq!(c.src_qp, qa.qpn());
        // A UD receive buffer starts with 40 bytes for the GRH, counted in byte_len
        // whether or not the datagram had one (RoCEv2 over IPv4 always does: the IPv4
        // header sits in the last 20 of them).
        let grh = 40;
        if link == LinkLayer::InfiniBand {
            assert_eq!(c.slid, a.lid);
            assert!(
                !c.wc_flags.contains(WcFlags::GRH),
                "the AH asked for no GRH"
            );
        } else {
            assert!(
                c.wc_flags.contains(WcFlags::GRH),
                "a RoCE datagram always has its L3 header, reported as a GRH"
            );
        }
        assert_eq!(c.byte_len as usize, grh + msg.len());
        let mut got = [0u8; 10];
        b.mr.mem().read_bytes(grh, &mut got);
        assert_eq!(&got, msg);
    }
}

#[test]
fn srq_receives_from_two_qps() {
    let fabric = Fabric::ethernet();
    let mut a = node(&fabric, 1);
    let mut b = node(&fabric, 2);
    let mut srq: Srq<P> = b
        .hca
        .create_srq(
            &b.pd,
            SrqInitAttr {
                max_wr: 15,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    let mk_b = |b: &mut Node, srq: &Srq<P>| {
        let attr = common::on_srq(&b.cq, srq, caps());
        let mut qp = b.hca.create_qp::<Rc>(&b.pd, &attr).unwrap();
        let access = qp_access(&b.hca);
        qp.to_init(
            &mut b.hca,
            InitAttr {
                access,
                ..InitAttr::default()
            },
        )
        .unwrap();
        qp
    };
    let (b1, b2) = (mk_b(&mut b, &srq), mk_b(&mut b, &srq));
    let (a1, a2) = (rc_qp(&mut a), rc_qp(&mut a));
    let (na1, na2, nb1, nb2) = (a1.qpn(), a2.qpn(), b1.qpn(), b2.qpn());
    let mut a1 = connect(&fabric, &mut a, a1, &b, nb1, RtsAttr::default());
    let mut a2 = connect(&fabric, &mut a, a2, &b, nb2, RtsAttr::default());
    let _b1 = connect(&fabric, &mut b, b1, &a, na1, RtsAttr::default());
    let _b2 = connect(&fabric, &mut b, b2, &a, na2, RtsAttr::default());
    let mut total = 0;
    for round in 0..6u64 {
        let bufs: Vec<[Sge; 1]> = (0..4u64)
            .map(|i| {
                [Sge {
                    addr: b.mr.iova() + i * 256,
                    len: 256,
                    lkey: b.mr.lkey(),
                }]
            })
            .collect();
        let wrs: Vec<_> = bufs
            .iter()
            .enumerate()
            .map(|(i, s)| RecvWr {
                wr_id: 1000 + round * 4 + i as u64,
                sg_list: s,
            })
            .collect();
        srq.post_recv(&wrs).unwrap();
        a1.post_send(&[SendWr::new(1, SendOp::Send, &[]).with_inline(b"one")])
            .unwrap();
        a2.post_send(&[SendWr::new(2, SendOp::Send, &[]).with_inline(b"two!")])
            .unwrap();
        a1.post_send(&[SendWr::new(3, SendOp::Send, &[]).with_inline(b"three")])
            .unwrap();
        a2.post_send(&[SendWr::new(4, SendOp::Send, &[]).with_inline(b"four!!")])
            .unwrap();
        run(&fabric);
        assert_eq!(poll(&mut a).len(), 4);
        let wb = poll(&mut b);
        assert_eq!(wb.len(), 4);
        let mut ids: Vec<_> = wb.iter().map(|c| c.wr_id).collect();
        ids.sort();
        assert_eq!(
            ids,
            (0..4).map(|i| 1000 + round * 4 + i).collect::<Vec<_>>()
        );
        let mut lens: Vec<_> = wb.iter().map(|c| (c.qp_num, c.byte_len)).collect();
        lens.sort();
        let mut want = vec![(nb1, 3), (nb1, 5), (nb2, 4), (nb2, 6)];
        want.sort();
        assert_eq!(lens, want);
        total += wb.len();
    }
    assert_eq!(total, 24, "the SRQ's 16 WQEs were reused");
}

/// The SRQ limit end to end (issue 18 item 1): armed with MODIFY_RMP, it raises one
/// SRQ_LIMIT event, for this SRQ, once receives leave fewer WQEs posted than the limit,
/// and is disarmed after it.
#[test]
fn srq_limit_event_reaches_the_user_once() {
    use uhca_driver::AsyncEvent;
    use uhca_fwif::consts::EventType;
    let fabric = Fabric::ethernet();
    let mut a = node(&fabric, 1);
    let mut b = node(&fabric, 2);
    let mut srq: Srq<P> = b
        .hca
        .create_srq(
            &b.pd,
            SrqInitAttr {
                max_wr: 15,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    let attr = common::on_srq(&b.cq, &srq, caps());
    let mut qb = b.hca.create_qp::<Rc>(&b.pd, &attr).unwrap();
    let access = qp_access(&b.hca);
    qb.to_init(
        &mut b.hca,
        InitAttr {
            access,
            ..InitAttr::default()
        },
    )
    .unwrap();
    let qa = rc_qp(&mut a);
    let (na, nb) = (qa.qpn(), qb.qpn());
    let mut qa = connect(&fabric, &mut a, qa, &b, nb, RtsAttr::default());
    let _qb = connect(&fabric, &mut b, qb, &a, na, RtsAttr::default());
    let bufs: Vec<[Sge; 1]> = (0..4u64)
        .map(|i| {
            [Sge {
                addr: b.mr.iova() + i * 256,
                len: 256,
                lkey: b.mr.lkey(),
            }]
        })
        .collect();
    let wrs: Vec<_> = bufs
        .iter()
        .enumerate()
        .map(|(i, s)| RecvWr {
            wr_id: i as u64,
            sg_list: s,
        })
        .collect();
    srq.post_recv(&wrs).unwrap();
    srq.arm_limit(&mut b.hca, 3).unwrap();
    assert_eq!(srq.query(&mut b.hca).unwrap().limit, 3);
    let limit_events = |b: &mut Node| {
        b.hca.process_events().unwrap();
        let mut n = Vec::new();
        while let Some(e) = b.hca.next_event() {
            if let AsyncEvent::QpSrq {
                event: EventType::SrqRqLimit,
                number,
                srq,
            } = e
            {
                n.push((number, srq));
            }
        }
        n
    };
    // One receive: three WQEs left, not fewer than the limit.
    qa.post_send(&[SendWr::new(1, SendOp::Send, &[]).with_inline(b"one")])
        .unwrap();
    run(&fabric);
    assert_eq!(poll(&mut b).len(), 1);
    assert_eq!(limit_events(&mut b), []);
    // Two more: one left, below the limit: one event, then disarmed.
    for i in 2..4 {
        qa.post_send(&[SendWr::new(i, SendOp::Send, &[]).with_inline(b"more")])
            .unwrap();
    }
    run(&fabric);
    assert_eq!(poll(&mut b).len(), 2);
    assert_eq!(limit_events(&mut b), [(srq.srqn(), true)]);
    assert_eq!(srq.query(&mut b.hca).unwrap().limit, 0, "disarmed");
    assert_eq!(srq.query(&mut b.hca).unwrap().hw_counter, 3);
    assert_eq!(poll(&mut a).len(), 3);
}

#[test]
fn completion_events_reach_an_armed_cq() {
    let (fabric, mut a, mut b, mut qa, mut qb) = rc_pair(LinkLayer::Ethernet, RtsAttr::default());
    let rbuf = [Sge {
        addr: b.mr.iova(),
        len: 64,
        lkey: b.mr.lkey(),
    }];
    qb.post_recv(&[
        RecvWr {
            wr_id: 1,
            sg_list: &rbuf,
        },
        RecvWr {
            wr_id: 2,
            sg_list: &rbuf,
        },
    ])
    .unwrap();
    b.cq.req_notify(false);
    qa.post_send(&[SendWr::new(1, SendOp::Send, &[]).with_inline(b"ping")])
        .unwrap();
    run(&fabric);
    b.hca.process_events().unwrap();
    assert_eq!(b.hca.next_completion_event(), Some(b.cq.cqn()));
    assert_eq!(b.hca.next_completion_event(), None);
    b.cq.ack_event();
    assert_eq!(poll(&mut b).len(), 1);
    // Not armed: a second completion raises no event.
    qa.post_send(&[SendWr::new(2, SendOp::Send, &[]).with_inline(b"pong")])
        .unwrap();
    run(&fabric);
    b.hca.process_events().unwrap();
    assert_eq!(b.hca.next_completion_event(), None);
    // Armed again (sequence number 1): the CQ already holds a CQE, so an event comes.
    b.cq.req_notify(false);
    run(&fabric);
    b.hca.process_events().unwrap();
    assert!(b.cq.take_event(&mut b.hca));
    assert_eq!(poll(&mut b).len(), 1);
    assert_eq!(poll(&mut a).len(), 2);
}

#[test]
fn remote_access_error_puts_the_qp_in_error_and_flushes_the_rest() {
    let (fabric, mut a, b, mut qa, _qb) = rc_pair(LinkLayer::Ethernet, RtsAttr::default());
    let src = [Sge {
        addr: a.mr.iova(),
        len: 64,
        lkey: a.mr.lkey(),
    }];
    let good = b.mr.rkey();
    let before = {
        let mut v = vec![0u8; 64];
        b.mr.mem().read_bytes(0, &mut v);
        v
    };
    a.mr.mem_mut().write_bytes(0, &[0xee; 64]);
    let wrs = [
        // Wrong rkey.
        SendWr::new(
            1,
            SendOp::RdmaWrite {
                remote_addr: b.mr.iova(),
                rkey: good ^ 0x100,
            },
            &src,
        ),
        SendWr::new(
            2,
            SendOp::RdmaWrite {
                remote_addr: b.mr.iova(),
                rkey: good,
            },
            &src,
        ),
        SendWr::new(
            3,
            SendOp::RdmaWrite {
                remote_addr: b.mr.iova(),
                rkey: good,
            },
            &src,
        )
        .with_flags(SendFlags::empty()),
        SendWr::new(4, SendOp::Send, &src),
    ];
    qa.post_send(&wrs).unwrap();
    run(&fabric);
    let wa = poll(&mut a);
    assert_eq!(wa[0].wr_id, 1);
    assert_eq!(wa[0].status, WcStatus::RemoteAccess);
    assert!(
        wa[1..].iter().all(|c| c.status == WcStatus::WrFlushed),
        "{wa:?}"
    );
    assert_eq!(wa.last().unwrap().wr_id, 4, "every WQE retired");
    assert!(qa.in_error());
    assert_eq!(a.dev.qp_state(qa.qpn()), Some(QpState::Err));
    let mut after = vec![0u8; 64];
    b.mr.mem().read_bytes(0, &mut after);
    assert_eq!(after, before, "nothing written");
    let e = qa.post_send(&wrs[1..2]).unwrap_err();
    assert_eq!(e.error, WrError::QpInError { qpn: qa.qpn() });
    // Back through RESET.
    qa.to_reset(&mut a.hca).unwrap();
    assert!(!qa.in_error());
}

#[test]
fn rnr_retry_exceeded_without_a_receive() {
    let (fabric, mut a, _b, mut qa, _qb) = rc_pair(
        LinkLayer::Ethernet,
        RtsAttr {
            rnr_retry: 1,
            ..RtsAttr::default()
        },
    );
    let src = [Sge {
        addr: a.mr.iova(),
        len: 16,
        lkey: a.mr.lkey(),
    }];
    qa.post_send(&[
        SendWr::new(1, SendOp::Send, &src),
        SendWr::new(2, SendOp::Send, &src),
    ])
    .unwrap();
    run(&fabric);
    let wa = poll(&mut a);
    assert_eq!(
        wa.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(1, WcStatus::RnrRetryExceeded), (2, WcStatus::WrFlushed)]
    );
    assert!(qa.in_error());
    let e = qa
        .post_send(&[SendWr::new(3, SendOp::Send, &src)])
        .unwrap_err();
    assert_eq!(e.error, WrError::QpInError { qpn: qa.qpn() });
}

#[test]
fn uc_send_and_write_with_immediate() {
    let fabric = Fabric::ethernet();
    let mut a = node(&fabric, 1);
    let mut b = node(&fabric, 2);
    let uc = |n: &mut Node| {
        let attr = common::on_cq(&n.cq, caps());
        let mut qp = n.hca.create_qp::<Uc>(&n.pd, &attr).unwrap();
        qp.to_init(
            &mut n.hca,
            InitAttr {
                access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
                ..InitAttr::default()
            },
        )
        .unwrap();
        qp
    };
    let (mut qa, mut qb) = (uc(&mut a), uc(&mut b));
    let (na, nb) = (qa.qpn(), qb.qpn());
    let rtr = |to: &Node, dest_qpn| RtrAttr {
        dest_qpn,
        rq_psn: 7,
        ah: path(&fabric, to),
        ..RtrAttr::default()
    };
    qa.to_rtr(&mut a.hca, rtr(&b, nb)).unwrap();
    qb.to_rtr(&mut b.hca, rtr(&a, na)).unwrap();
    qa.to_rts(&mut a.hca, 7).unwrap();
    qb.to_rts(&mut b.hca, 7).unwrap();
    let r = [Sge {
        addr: b.mr.iova(),
        len: 64,
        lkey: b.mr.lkey(),
    }];
    qb.post_recv(&[
        RecvWr {
            wr_id: 1,
            sg_list: &r,
        },
        RecvWr {
            wr_id: 2,
            sg_list: &r,
        },
    ])
    .unwrap();
    let src = [Sge {
        addr: a.mr.iova(),
        len: 8,
        lkey: a.mr.lkey(),
    }];
    a.mr.mem_mut().write_bytes(0, b"uc write");
    let read = SendWr::new(
        9,
        SendOp::RdmaRead {
            remote_addr: 0,
            rkey: 0,
        },
        &src,
    );
    let e = qa.post_send([&read]).unwrap_err();
    assert_eq!(e.error, WrError::OpNotSupported, "UC has no RDMA READ");
    qa.post_send(&[
        SendWr::new(10, SendOp::Send, &[]).with_inline(b"uc send"),
        SendWr::new(
            11,
            SendOp::RdmaWriteWithImm {
                remote_addr: b.mr.iova() + 1024,
                rkey: b.mr.rkey(),
                imm: 0xfeed,
            },
            &src,
        ),
    ])
    .unwrap();
    run(&fabric);
    let wa = poll(&mut a);
    assert_eq!(
        wa.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(10, WcStatus::Success), (11, WcStatus::Success)]
    );
    let wb = poll(&mut b);
    assert_eq!(
        wb.iter()
            .map(|c| (c.wr_id, c.opcode, c.byte_len, c.imm_data))
            .collect::<Vec<_>>(),
        [
            (1, WcOpcode::Recv, 7, 0),
            (2, WcOpcode::RecvRdmaWithImm, 8, 0xfeed)
        ]
    );
    let mut got = [0u8; 8];
    b.mr.mem().read_bytes(1024, &mut got);
    assert_eq!(&got, b"uc write");
}

#[test]
fn moving_a_qp_to_err_flushes_its_receives_then_reset_brings_it_back() {
    let (fabric, mut a, mut b, mut qa, mut qb) = rc_pair(LinkLayer::Ethernet, RtsAttr::default());
    let r = [Sge {
        addr: b.mr.iova(),
        len: 64,
        lkey: b.mr.lkey(),
    }];
    let wrs: Vec<_> = (0..5)
        .map(|i| RecvWr {
            wr_id: 50 + i,
            sg_list: &r,
        })
        .collect();
    qb.post_recv(&wrs).unwrap();
    // One is used, four are outstanding when the QP goes to ERR.
    qa.post_send(&[SendWr::new(1, SendOp::Send, &[]).with_inline(b"x")])
        .unwrap();
    run(&fabric);
    assert_eq!(poll(&mut a).len(), 1);
    qb.to_err(&mut b.hca).unwrap();
    run(&fabric);
    let wb = poll(&mut b);
    assert_eq!(
        wb.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [
            (50, WcStatus::Success),
            (51, WcStatus::WrFlushed),
            (52, WcStatus::WrFlushed),
            (53, WcStatus::WrFlushed),
            (54, WcStatus::WrFlushed),
        ]
    );
    assert!(qb.in_error());
    // Drained: back to RESET and up again, the shadow starts over.
    qb.to_reset(&mut b.hca).unwrap();
    assert!(!qb.in_error());
    let qb = rc_init(&mut b.hca, qb);
    let mut qb = connect(&fabric, &mut b, qb, &a, qa.qpn(), RtsAttr::default());
    qb.post_recv(&wrs[..1]).unwrap();
    assert_eq!(qb.rings().rq_head(), 1, "the RQ starts over at 0");
}

#[test]
fn fence_orders_a_write_after_a_read() {
    let (fabric, mut a, mut b, mut qa, _qb) = rc_pair(LinkLayer::Ethernet, RtsAttr::default());
    let secret: Vec<u8> = (0..1024u32).map(|i| (i * 13) as u8).collect();
    b.mr.mem_mut().write_bytes(0, &secret);
    let (ib, rkey) = (b.mr.iova(), b.mr.rkey());
    let here = [Sge {
        addr: a.mr.iova(),
        len: 1024,
        lkey: a.mr.lkey(),
    }];
    qa.post_send(&[
        SendWr::new(
            1,
            SendOp::RdmaRead {
                remote_addr: ib,
                rkey,
            },
            &here,
        ),
        // Sends what the READ brings back only if it waits for it.
        SendWr::new(
            2,
            SendOp::RdmaWrite {
                remote_addr: ib + 4096,
                rkey,
            },
            &here,
        )
        .with_flags(SendFlags::SIGNALED | SendFlags::FENCE),
    ])
    .unwrap();
    run(&fabric);
    assert_eq!(poll(&mut a).len(), 2);
    let mut got = vec![0u8; 1024];
    b.mr.mem().read_bytes(4096, &mut got);
    assert!(
        got == secret,
        "the fenced WRITE carried what the READ brought"
    );
}

#[test]
fn solicited_only_arming_waits_for_a_solicited_send() {
    let (fabric, mut a, mut b, mut qa, mut qb) = rc_pair(LinkLayer::Ethernet, RtsAttr::default());
    let r = [Sge {
        addr: b.mr.iova(),
        len: 64,
        lkey: b.mr.lkey(),
    }];
    let recvs = [RecvWr {
        wr_id: 0,
        sg_list: &r,
    }; 2];
    qb.post_recv(&recvs).unwrap();
    b.cq.req_notify(true);
    let plain = SendWr::new(1, SendOp::Send, &[]).with_inline(b"quiet");
    qa.post_send([&plain]).unwrap();
    run(&fabric);
    b.hca.process_events().unwrap();
    assert!(
        !b.cq.take_event(&mut b.hca),
        "an unsolicited send raises no event"
    );
    let loud = SendWr::new(2, SendOp::Send, &[])
        .with_inline(b"wake up")
        .with_flags(SendFlags::SIGNALED | SendFlags::SOLICITED);
    qa.post_send([&loud]).unwrap();
    run(&fabric);
    b.hca.process_events().unwrap();
    assert!(b.cq.take_event(&mut b.hca), "a solicited send does");
    assert_eq!(poll(&mut b).len(), 2);
    assert_eq!(poll(&mut a).len(), 2);
}

#[test]
fn leftover_cqes_of_a_reset_or_destroyed_qp_are_dropped() {
    let (fabric, mut a, mut b, mut qa, mut qb) = rc_pair(LinkLayer::Ethernet, RtsAttr::default());
    let rb = [Sge {
        addr: b.mr.iova(),
        len: 64,
        lkey: b.mr.lkey(),
    }];
    let recvs = [RecvWr {
        wr_id: 7,
        sg_list: &rb,
    }; 3];
    qb.post_recv(&recvs).unwrap();
    // ERR flushes the three receives into B's CQ; RESET comes before anyone polls them.
    let cqes = b.dev.datapath_counters().cqes;
    qb.to_err(&mut b.hca).unwrap();
    run(&fabric);
    assert_eq!(
        b.dev.datapath_counters().cqes,
        cqes + 3,
        "three flush CQEs wait"
    );
    qb.to_reset(&mut b.hca).unwrap();
    assert!(
        poll(&mut b).is_empty(),
        "the old incarnation's CQEs are dropped"
    );
    // Up again: its new CQEs count.
    let qb = rc_init(&mut b.hca, qb);
    let mut qb = connect(&fabric, &mut b, qb, &a, qa.qpn(), RtsAttr::default());
    qb.post_recv(&recvs[..1]).unwrap();
    let ra = [Sge {
        addr: a.mr.iova(),
        len: 64,
        lkey: a.mr.lkey(),
    }];
    qa.post_recv(&[RecvWr {
        wr_id: 8,
        sg_list: &ra,
    }])
    .unwrap();
    qb.post_send(&[SendWr::new(9, SendOp::Send, &[]).with_inline(b"again")])
        .unwrap();
    run(&fabric);
    assert_eq!(
        poll(&mut b).iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        [9]
    );
    assert_eq!(
        poll(&mut a).iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        [8]
    );
    // A destroyed QP's flushes are dropped too.
    qa.post_recv(&[RecvWr {
        wr_id: 10,
        sg_list: &ra,
    }])
    .unwrap();
    let cqes = a.dev.datapath_counters().cqes;
    qa.to_err(&mut a.hca).unwrap();
    run(&fabric);
    assert_eq!(
        a.dev.datapath_counters().cqes,
        cqes + 1,
        "a flush CQE waits"
    );
    qa.destroy(&mut a.hca).unwrap();
    assert!(poll(&mut a).is_empty());
}

#[test]
fn a_destroyed_qps_leftover_srq_receive_gives_its_wqe_back() {
    let fabric = Fabric::ethernet();
    let mut a = node(&fabric, 1);
    let mut b = node(&fabric, 2);
    let mut srq = b
        .hca
        .create_srq(
            &b.pd,
            SrqInitAttr {
                max_wr: 3,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .unwrap();
    let attr = common::on_srq(&b.cq, &srq, caps());
    let qb = b.hca.create_qp::<Rc>(&b.pd, &attr).unwrap();
    let qb = rc_init(&mut b.hca, qb);
    let qa = rc_qp(&mut a);
    let (na, nb) = (qa.qpn(), qb.qpn());
    let mut qa = connect(&fabric, &mut a, qa, &b, nb, RtsAttr::default());
    let qb = connect(&fabric, &mut b, qb, &a, na, RtsAttr::default());
    let s = [Sge {
        addr: b.mr.iova(),
        len: 64,
        lkey: b.mr.lkey(),
    }];
    let r = |wr_id| RecvWr { wr_id, sg_list: &s };
    srq.post_recv(&[r(1), r(2), r(3)]).unwrap();
    qa.post_send(&[SendWr::new(1, SendOp::Send, &[]).with_inline(b"to the SRQ")])
        .unwrap();
    run(&fabric);
    assert_eq!(poll(&mut a).len(), 1);
    // The receive's CQE waits in B's CQ while its QP is destroyed.
    qb.destroy(&mut b.hca).unwrap();
    assert!(poll(&mut b).is_empty(), "the destroyed QP's CQE is dropped");
    // ... and its SRQ WQE is free again: exactly one more receive fits.
    let e = srq.post_recv(&[r(4), r(5)]).unwrap_err();
    assert_eq!(
        e,
        uhca_driver::verbs::BadWr {
            index: 1,
            error: WrError::QueueFull
        }
    );
}

/// Through the driver, over a fabric that drops, duplicates and reorders 10% of the packets
/// each: 100,000 RC SENDs arrive exactly once, in order and intact, and every send
/// completes successfully (the mock's requester retransmits; its responder discards
/// duplicates).
#[test]
fn a_hundred_thousand_rc_sends_through_a_lossy_fabric() {
    const N: u64 = 100_000;
    const BATCH: u64 = 32;
    const LEN: usize = 64;
    let (fabric, mut a, mut b, mut qa, mut qb) = rc_pair(LinkLayer::Ethernet, RtsAttr::default());
    fabric.set_faults(FaultConfig::lossy(0x00c0_ffee, 100));
    let (la, lb) = (a.mr.lkey(), b.mr.lkey());
    let (ia, ib) = (a.mr.iova(), b.mr.iova());
    let payload = |seq: u64, j: usize| (seq as u8).wrapping_mul(31).wrapping_add(j as u8);
    let mut next = 0u64;
    let mut received = 0u64;
    let mut wc = [WorkCompletion::default(); BATCH as usize];
    while next < N {
        let k = BATCH.min(N - next);
        // Receives into slots 0..k of B's buffer, sends from slots 0..k of A's.
        let rs: Vec<[Sge; 1]> = (0..k)
            .map(|i| {
                [Sge {
                    addr: ib + i * LEN as u64,
                    len: LEN as u32,
                    lkey: lb,
                }]
            })
            .collect();
        let recvs: Vec<RecvWr> = rs
            .iter()
            .enumerate()
            .map(|(i, s)| RecvWr {
                wr_id: next + i as u64,
                sg_list: s,
            })
            .collect();
        qb.post_recv(&recvs).unwrap();
        let mut msg = [0u8; LEN];
        for i in 0..k {
            let seq = next + i;
            msg[..8].copy_from_slice(&seq.to_be_bytes());
            for (j, m) in msg.iter_mut().enumerate().skip(8) {
                *m = payload(seq, j);
            }
            a.mr.mem_mut().write_bytes(i as usize * LEN, &msg);
        }
        let ss: Vec<[Sge; 1]> = (0..k)
            .map(|i| {
                [Sge {
                    addr: ia + i * LEN as u64,
                    len: LEN as u32,
                    lkey: la,
                }]
            })
            .collect();
        let sends: Vec<SendWr> = ss
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let flags = if i as u64 == k - 1 {
                    SendFlags::SIGNALED
                } else {
                    SendFlags::empty()
                };
                SendWr::new(next + i as u64, SendOp::Send, s).with_flags(flags)
            })
            .collect();
        qa.post_send(&sends).unwrap();
        run(&fabric);
        let mut got_recv = 0;
        while got_recv < k {
            let n = b.cq.poll(&mut wc).unwrap();
            assert!(
                n > 0,
                "receives missing after the fabric settled: {got_recv} of {k}"
            );
            for c in &wc[..n] {
                assert_eq!(c.status, WcStatus::Success);
                assert_eq!(c.wr_id, received, "in order, exactly once");
                let slot = (c.wr_id - next) as usize;
                let mut m = [0u8; LEN];
                b.mr.mem().read_bytes(slot * LEN, &mut m);
                assert_eq!(
                    u64::from_be_bytes(m[..8].try_into().unwrap()),
                    received,
                    "the right message in the slot"
                );
                assert!(
                    m[8..]
                        .iter()
                        .enumerate()
                        .all(|(j, &x)| x == payload(received, j + 8)),
                    "intact"
                );
                received += 1;
                got_recv += 1;
            }
        }
        let n = a.cq.poll(&mut wc).unwrap();
        assert_eq!(n, 1, "one signalled completion per batch");
        assert_eq!(
            (wc[0].wr_id, wc[0].status),
            (next + k - 1, WcStatus::Success)
        );
        next += k;
    }
    assert_eq!(received, N);
    let f = fabric.counters();
    assert!(
        f.dropped > N / 20 && f.duplicated > N / 20 && f.delayed > 0,
        "{f:?}"
    );
    assert_eq!(qa.query(&mut a.hca).unwrap().state, QpState::Rts);
}

/// A receiver that runs out of receives mid-stream: the SENDs past its last receive are
/// RNR-NAKed, the requester waits and retries (RNR retry 7: for ever), and once receives
/// are posted again every SEND arrives, in order, and completes successfully.
#[test]
fn sends_past_the_receivers_last_receive_wait_for_the_next_receives() {
    const K: u64 = 32;
    const LEN: u64 = 64;
    let (fabric, mut a, mut b, mut qa, mut qb) = rc_pair(LinkLayer::Ethernet, RtsAttr::default());
    let (la, lb) = (a.mr.lkey(), b.mr.lkey());
    let (ia, ib) = (a.mr.iova(), b.mr.iova());
    let post_recvs = |qb: &mut RcRts, from: u64, n: u64| {
        let rs: Vec<[Sge; 1]> = (from..from + n)
            .map(|i| {
                [Sge {
                    addr: ib + i * LEN,
                    len: LEN as u32,
                    lkey: lb,
                }]
            })
            .collect();
        let recvs: Vec<RecvWr> = rs
            .iter()
            .zip(from..)
            .map(|(s, i)| RecvWr {
                wr_id: i,
                sg_list: s,
            })
            .collect();
        qb.post_recv(&recvs).unwrap();
    };
    post_recvs(&mut qb, 0, K / 2);
    let ss: Vec<[Sge; 1]> = (0..K)
        .map(|i| {
            [Sge {
                addr: ia + i * LEN,
                len: LEN as u32,
                lkey: la,
            }]
        })
        .collect();
    for i in 0..K {
        a.mr.mem_mut()
            .write_bytes((i * LEN) as usize, &i.to_be_bytes());
    }
    let sends: Vec<SendWr> = ss
        .iter()
        .zip(0..)
        .map(|(s, i)| SendWr::new(i, SendOp::Send, s).with_flags(SendFlags::SIGNALED))
        .collect();
    qa.post_send(&sends).unwrap();
    // 10 ms of model time: the first half arrives, the rest is RNR-NAKed and retried.
    fabric.run_for(10_000_000);
    let first = poll(&mut b);
    let early = poll(&mut a);
    assert_eq!(
        early.len() as u64,
        K / 2,
        "the rest wait, RNR-NAKed: {early:?}"
    );
    assert_eq!(first.len() as u64, K / 2, "the posted receives are used");
    post_recvs(&mut qb, K / 2, K / 2);
    fabric.run_for(100_000_000);
    let second = poll(&mut b);
    let got: Vec<u64> = first.iter().chain(&second).map(|c| c.wr_id).collect();
    assert_eq!(got, (0..K).collect::<Vec<_>>(), "every SEND, in order");
    assert!(
        a.dev.datapath_counters().rnr_naks_received >= 8,
        "RNR rounds beyond 7"
    );
    for (c, i) in first.iter().chain(&second).zip(0u64..) {
        assert_eq!(c.status, WcStatus::Success);
        let mut m = [0u8; 8];
        b.mr.mem().read_bytes((i * LEN) as usize, &mut m);
        assert_eq!(u64::from_be_bytes(m), i);
    }
    let sent: Vec<WorkCompletion> = early.into_iter().chain(poll(&mut a)).collect();
    assert_eq!(sent.len() as u64, K);
    assert!(
        sent.iter().all(|c| c.status == WcStatus::Success),
        "{:?}",
        sent.iter().map(|c| c.status).collect::<Vec<_>>()
    );
}
