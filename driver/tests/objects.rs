//! Verbs objects on the mock ConnectX: create, query and destroy of every object, the QP
//! state machine as the device sees it, input the driver refuses before sending anything,
//! port queries on InfiniBand and Ethernet, and the RoCE GID table.

mod common;

use common::{cfg, open};

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use uhca_driver::addr::{AhAttr, Gid, Mac, StaticRate};
use uhca_driver::verbs::{
    CqModeration, GidType, InitAttr, PhysPortState, QpCaps, QpInitAttr, Rc, RtrAttr, RtsAttr,
    SrqInitAttr, Uc, Ud, WorkCompletion,
};
use uhca_driver::{Error, Hca};
use uhca_fwif::consts::{
    AccessFlags, CmdOpcode, CmdStatus, IbMtu, MkcAccessMode, PortState, QpState,
};
use uhca_hal::{DmaBuf, DmaMem};
use uhca_mock::{ClockMode, LinkLayer, MockConfig, MockHca, MockPlatform, ObjectCounts};

type TestHca = Hca<MockPlatform>;

/// Objects the driver itself holds after bring-up (one UAR, one EQ).
fn baseline() -> ObjectCounts {
    ObjectCounts {
        uars: 1,
        eqs: 1,
        ..ObjectCounts::default()
    }
}

fn commands(dev: &MockHca) -> usize {
    dev.command_log().len()
}

const MAC: Mac = Mac([0x02, 0xc0, 0xff, 0xee, 0x00, 0x01]);

fn roce_path(dgid: Gid) -> AhAttr {
    AhAttr::RoceV2 {
        sgid_index: 0,
        dgid,
        dmac: Mac([0x02, 0, 0, 0, 0, 0x22]),
        udp_sport: 0xc123,
        traffic_class: 0,
        hop_limit: 64,
        flow_label: 0,
        sl: 0,
    }
}

fn ib_path(dlid: u16) -> AhAttr {
    AhAttr::Ib {
        dlid,
        sl: 0,
        src_path_bits: 0,
        static_rate: StaticRate::PortCurrent,
        grh: None,
    }
}

#[test]
fn pd_and_transport_domain_round_trip() {
    let (dev, mut hca) = open(LinkLayer::Ethernet);
    let pd = hca.alloc_pd().unwrap();
    let pd2 = hca.alloc_pd().unwrap();
    let td = hca.alloc_transport_domain().unwrap();
    assert_ne!(pd.pdn(), pd2.pdn());
    let o = dev.objects();
    assert_eq!((o.pds, o.transport_domains), (2, 1));
    pd.destroy(&mut hca).unwrap();
    pd2.destroy(&mut hca).unwrap();
    td.destroy(&mut hca).unwrap();
    assert_eq!(dev.objects(), baseline());
    hca.close().unwrap();
}

#[test]
fn memory_region_keys_cover_the_buffer_and_query_back() {
    let (dev, mut hca) = open(LinkLayer::Ethernet);
    let pd = hca.alloc_pd().unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let mut mr = hca.alloc_mr(&pd, 3 * 4096 + 100, access).unwrap();
    assert_eq!(mr.lkey(), (mr.mkey_index() << 8) | (mr.lkey() & 0xff));
    assert_eq!(mr.lkey(), mr.rkey());
    let a = mr.query(&mut hca).unwrap();
    assert_eq!(a.start_addr, mr.iova());
    assert_eq!(a.len, 3 * 4096 + 100);
    assert_eq!(a.access, access);
    assert_eq!(a.pdn, pd.pdn());
    assert_eq!(a.mkey_7_0 as u32, mr.lkey() & 0xff);
    assert_eq!(a.access_mode, MkcAccessMode::Mtt);
    assert_eq!(a.log_page_size, 12);
    // The MTT went out with one entry per 4 KiB page, read and write bits set.
    let create = dev.last_command(CmdOpcode::CreateMkey).unwrap();
    assert_eq!(create.status, CmdStatus::Ok);

    // The application's data is where the key says.
    mr.mem_mut().write_bytes(16, b"hello, device");
    let mut got = [0u8; 13];
    assert!(dev.host_read(mr.iova() + 16, &mut got));
    assert_eq!(&got, b"hello, device");

    // A second key over part of a buffer of the application's own.
    let buf = DmaBuf::alloc(hca.platform().clone(), 8192, 4096).unwrap();
    let part = hca
        .reg_mr(&pd, buf, 4096, 512, AccessFlags::empty())
        .unwrap();
    assert_eq!(part.iova(), part.mem().iova() + 4096);
    assert_eq!(part.query(&mut hca).unwrap().access, AccessFlags::empty());
    assert_ne!(part.lkey(), mr.lkey());
    assert_eq!(dev.objects().mkeys, 2);

    // The PD is busy while keys use it.
    let pd = pd.destroy(&mut hca).unwrap_err().object;
    let buf = mr.destroy(&mut hca).unwrap();
    assert_eq!(buf.len(), 3 * 4096 + 100);
    part.destroy(&mut hca).unwrap();
    pd.destroy(&mut hca).unwrap();
    assert_eq!(dev.objects(), baseline());
    assert!(dev.iommu_faults().is_empty());
    hca.close().unwrap();
}

#[test]
fn bad_memory_registrations_are_refused_before_any_command() {
    let (dev, mut hca) = open(LinkLayer::Ethernet);
    let pd = hca.alloc_pd().unwrap();
    let before = commands(&dev);
    let e = hca.alloc_mr(&pd, 0, AccessFlags::LOCAL_WRITE).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = hca
        .alloc_mr(&pd, 4096, AccessFlags::REMOTE_WRITE)
        .unwrap_err();
    assert!(e.to_string().contains("local write"), "{e}");
    let buf = DmaBuf::alloc(hca.platform().clone(), 4096, 4096).unwrap();
    let f = hca
        .reg_mr(&pd, buf, 4000, 200, AccessFlags::LOCAL_WRITE)
        .unwrap_err();
    assert!(matches!(f.error, Error::InvalidArgument(_)));
    let f = hca
        .reg_mr(&pd, f.object.unwrap(), 0, 0, AccessFlags::LOCAL_WRITE)
        .unwrap_err();
    assert!(matches!(f.error, Error::InvalidArgument(_)));
    assert_eq!(commands(&dev), before, "no command was sent");
    pd.destroy(&mut hca).unwrap();
}

#[test]
fn cq_create_query_moderate_destroy() {
    let (dev, mut hca) = open(LinkLayer::Ethernet);
    let mut cq = hca.create_cq(100).unwrap();
    assert_eq!(cq.cqe(), 127, "100 + 1 rounded up to 128 entries");
    let a = cq.query(&mut hca).unwrap();
    assert_eq!(a.log_cq_size, 7);
    assert_eq!(a.uar_page, hca.uar());
    assert_eq!(a.eqn, hca.eqn() as u32);
    assert_eq!(a.dbr_addr, cq.ring().dbr_iova());
    assert_eq!((a.producer_counter, a.consumer_counter), (0, 0));
    // Every CQE is invalid (opcode 0xf) with owner 1: nothing to poll.
    let mut op_own = [0u8; 1];
    for i in [0u64, 1, 127] {
        assert!(dev.host_read(cq.ring().mem().iova() + i * 64 + 63, &mut op_own));
        assert_eq!(op_own[0], 0xf1);
    }
    assert_eq!(cq.poll(&mut [WorkCompletion::default(); 4]).unwrap(), 0);

    cq.modify_moderation(
        &mut hca,
        CqModeration {
            period_us: 16,
            max_count: 32,
        },
    )
    .unwrap();
    let m = cq.query(&mut hca).unwrap().moderation;
    assert_eq!((m.period_us, m.max_count), (16, 32));

    // Arming rings the CQ doorbell on the HCA's UAR.
    cq.req_notify(false);
    assert_eq!(dev.cq_arm(cq.cqn()), Some((0, false, 0)));

    cq.destroy(&mut hca).unwrap();
    assert_eq!(dev.objects(), baseline());
    hca.close().unwrap();
}

#[test]
fn a_cq_too_large_is_refused_before_any_command() {
    let (dev, mut hca) = open(LinkLayer::Ethernet);
    let max = hca.caps().max_cqe;
    let before = commands(&dev);
    let e = hca.create_cq(max).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(matches!(hca.create_cq(0), Err(Error::InvalidArgument(_))));
    assert_eq!(commands(&dev), before);
    // The largest that fits is accepted.
    let cq = hca.create_cq(max - 1).unwrap();
    assert_eq!(cq.cqe(), max - 1);
    cq.destroy(&mut hca).unwrap();
}

fn caps() -> QpCaps {
    common::qp_caps(64, 2, 64)
}

#[test]
fn rc_qp_walks_the_state_machine_on_roce() {
    let (dev, mut hca) = open(LinkLayer::Ethernet);
    let gid = hca
        .add_roce_gid(1, 0, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), MAC, None)
        .unwrap();
    let pd = hca.alloc_pd().unwrap();
    let scq = hca.create_cq(64).unwrap();
    let rcq = hca.create_cq(64).unwrap();
    let attr = QpInitAttr {
        send_cq: &scq,
        recv_cq: &rcq,
        srq: None,
        cap: caps(),
    };
    let mut qp = hca.create_qp::<Rc>(&pd, &attr).unwrap();
    let qpn = qp.qpn();
    assert_eq!(dev.qp_state(qpn), Some(QpState::Rst));
    assert!(qp.caps().max_send_wr >= 64 && qp.caps().max_inline_data >= 64);
    assert_eq!(qp.cqns(), (scq.cqn(), rcq.cqn()));
    // The rings are ready for the datapath: doorbell record zero, queues empty.
    // 64 WRs of 128 bytes (48 fixed + 64 inline bytes and their header, rounded up).
    assert_eq!(qp.rings().sq_free(), 128);
    assert_eq!(qp.rings().rq_free(), 64);
    let q = qp.query(&mut hca).unwrap();
    assert_eq!(q.qpc.dbr_addr(), qp.rings().dbr_iova());
    assert_eq!(q.qpc.log_rq_size(), 6);
    assert_eq!(q.qpc.uar_page(), hca.uar());

    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    qp.to_init(
        &mut hca,
        InitAttr {
            access,
            ..InitAttr::default()
        },
    )
    .unwrap();
    assert_eq!(dev.qp_state(qpn), Some(QpState::Init));
    let q = qp.query(&mut hca).unwrap();
    assert_eq!((q.state, q.port), (QpState::Init, 1));
    assert!(q.qpc.rre() && q.qpc.rwe() && !q.qpc.rae());

    qp.to_rtr(
        &mut hca,
        RtrAttr {
            path_mtu: IbMtu::Mtu1024,
            dest_qpn: 0x1234,
            rq_psn: 0x100,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 12,
            ah: roce_path(gid),
        },
    )
    .unwrap();
    assert_eq!(dev.qp_state(qpn), Some(QpState::Rtr));
    let q = qp.query(&mut hca).unwrap();
    assert_eq!(
        (q.dest_qpn, q.rq_psn, q.path_mtu),
        (0x1234, 0x100, IbMtu::Mtu1024)
    );
    assert_eq!(q.qpc.primary_address_path().udp_sport(), 0xc123);
    assert_eq!(q.qpc.log_rra_max(), 2);

    qp.to_rts(
        &mut hca,
        RtsAttr {
            sq_psn: 0x200,
            ..RtsAttr::default()
        },
    )
    .unwrap();
    assert_eq!(dev.qp_state(qpn), Some(QpState::Rts));
    let q = qp.query(&mut hca).unwrap();
    assert_eq!((q.state, q.sq_psn), (QpState::Rts, 0x200));
    assert_eq!(q.qpc.retry_count(), 7);
    assert_eq!(q.qpc.primary_address_path().ack_timeout(), 14);

    qp.to_err(&mut hca).unwrap();
    assert_eq!(dev.qp_state(qpn), Some(QpState::Err));
    qp.to_reset(&mut hca).unwrap();
    assert_eq!(dev.qp_state(qpn), Some(QpState::Rst));
    assert_eq!(qp.state(), QpState::Rst);

    // A CQ in use cannot go; it comes back and goes after the QP.
    let scq = scq.destroy(&mut hca).unwrap_err().object;
    qp.destroy(&mut hca).unwrap();
    scq.destroy(&mut hca).unwrap();
    rcq.destroy(&mut hca).unwrap();
    pd.destroy(&mut hca).unwrap();
    assert_eq!(dev.objects(), baseline());
    assert!(dev.iommu_faults().is_empty(), "{:?}", dev.iommu_faults());
    hca.close().unwrap();
}

/// An RC QP's transitions ask the requester for an ACK every 2^8 packets, as Linux's
/// `mlx5_ib` does (`log_ack_req_freq` 8 in every context it sends): left 0, a ConnectX sets
/// AckReq on every packet and the responder answers each one. The field means nothing to a
/// UD QP, which stays at 0. Read from the commands' bytes, as the device gets them.
#[test]
fn rc_transitions_ask_for_an_ack_every_256_packets() {
    use uhca_fwif::field::get_bits;
    use uhca_fwif::{cmd, ctx};
    let (dev, mut hca) = open(LinkLayer::InfiniBand);
    dev.record_command_bytes(true);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(64).unwrap();
    let attr = common::on_cq(&cq, caps());
    let mut rc = hca.create_qp::<Rc>(&pd, &attr).unwrap();
    rc.to_init(&mut hca, InitAttr::default()).unwrap();
    let own = rc.qpn();
    rc.to_rtr(
        &mut hca,
        RtrAttr {
            path_mtu: IbMtu::Mtu1024,
            dest_qpn: own,
            rq_psn: 0,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ah: ib_path(dev.config().lid),
        },
    )
    .unwrap();
    rc.to_rts(&mut hca, RtsAttr::default()).unwrap();
    let mut ud = hca.create_qp::<Ud>(&pd, &attr).unwrap();
    ud.to_init(&mut hca, InitAttr::default()).unwrap();
    ud.to_rtr(&mut hca).unwrap();
    ud.to_rts(&mut hca, 0).unwrap();
    // The QPC sits at the same offset in the three modify commands.
    assert_eq!(
        cmd::rst2init_qp_in::qpc.bit_offset,
        cmd::init2rtr_qp_in::qpc.bit_offset
    );
    assert_eq!(
        cmd::rst2init_qp_in::qpc.bit_offset,
        cmd::rtr2rts_qp_in::qpc.bit_offset
    );
    let bit =
        (cmd::rst2init_qp_in::qpc.bit_offset + ctx::qpc::log_ack_req_freq.bit_offset) as usize;
    let qpn_bit = cmd::rst2init_qp_in::qpn.bit_offset as usize;
    let mut seen = Vec::new();
    for c in dev.take_command_bytes() {
        let op = c.record.opcode;
        if matches!(
            op,
            CmdOpcode::Rst2initQp | CmdOpcode::Init2rtrQp | CmdOpcode::Rtr2rtsQp
        ) {
            let qpn = get_bits(&c.input, qpn_bit, 24) as u32;
            seen.push((op, qpn, get_bits(&c.input, bit, 4)));
        }
    }
    let (r, u) = (rc.qpn(), ud.qpn());
    assert_eq!(
        seen,
        vec![
            (CmdOpcode::Rst2initQp, r, 8),
            (CmdOpcode::Init2rtrQp, r, 8),
            (CmdOpcode::Rtr2rtsQp, r, 8),
            (CmdOpcode::Rst2initQp, u, 0),
            (CmdOpcode::Init2rtrQp, u, 0),
            (CmdOpcode::Rtr2rtsQp, u, 0),
        ]
    );
    assert_eq!(dev.qp_state(r), Some(QpState::Rts));
    assert_eq!(dev.qp_state(u), Some(QpState::Rts));
}

#[test]
fn uc_and_ud_qps_on_infiniband() {
    let (dev, mut hca) = open(LinkLayer::InfiniBand);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(16).unwrap();
    let attr = common::on_cq(&cq, caps());
    let mut uc = hca.create_qp::<Uc>(&pd, &attr).unwrap();
    let ucn = uc.qpn();
    uc.to_init(
        &mut hca,
        InitAttr {
            access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE,
            ..InitAttr::default()
        },
    )
    .unwrap();
    uc.to_rtr(
        &mut hca,
        RtrAttr {
            dest_qpn: 0x99,
            ah: ib_path(7),
            ..RtrAttr::default()
        },
    )
    .unwrap();
    assert_eq!(
        uc.query(&mut hca)
            .unwrap()
            .qpc
            .primary_address_path()
            .rlid(),
        7
    );
    uc.to_rts(&mut hca, 5).unwrap();
    assert_eq!(dev.qp_state(ucn), Some(QpState::Rts));
    assert_eq!(uc.query(&mut hca).unwrap().sq_psn, 5);

    let mut ud = hca.create_qp::<Ud>(&pd, &attr).unwrap();
    let udn = ud.qpn();
    ud.to_init(
        &mut hca,
        InitAttr {
            qkey: 0x1111_1111,
            ..InitAttr::default()
        },
    )
    .unwrap();
    assert_eq!(ud.query(&mut hca).unwrap().qkey, 0x1111_1111);
    ud.to_rtr(&mut hca).unwrap();
    ud.to_rts(&mut hca, 0).unwrap();
    assert_eq!(dev.qp_state(udn), Some(QpState::Rts));

    // A UD destination: an address handle with its prepared address vector.
    let ah = hca.create_ah(1, ib_path(3)).unwrap();
    let av = ah.av(0x77, 0x1111_1111);
    assert_eq!(
        (av.dqpn(), av.rlid.get(), av.qkey.get()),
        (0x77, 3, 0x1111_1111)
    );
    assert_eq!(ah.attr(), &ib_path(3));
    let e = hca.create_ah(1, roce_path(Gid::ZERO)).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument(_)),
        "RoCE path on an IB port: {e}"
    );
    assert!(matches!(
        hca.create_ah(2, ib_path(3)),
        Err(Error::InvalidArgument(_))
    ));

    // A RoCE path on an InfiniBand port is refused before the command.
    let n = commands(&dev);
    let mut uc2 = hca.create_qp::<Uc>(&pd, &attr).unwrap();
    uc2.to_init(&mut hca, InitAttr::default()).unwrap();
    let f2 = uc2
        .to_rtr(
            &mut hca,
            RtrAttr {
                ah: roce_path(Gid::ZERO),
                ..RtrAttr::default()
            },
        )
        .unwrap_err();
    assert!(matches!(f2, Error::InvalidArgument(_)));
    assert_eq!(
        uc2.state(),
        QpState::Init,
        "a refused argument changes nothing"
    );
    assert_eq!(commands(&dev), n + 2, "CREATE_QP and RST2INIT only");
    // UC gives remote write only.
    let mut uc3 = hca.create_qp::<Uc>(&pd, &attr).unwrap();
    let f = uc3
        .to_init(
            &mut hca,
            InitAttr {
                access: AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
                ..InitAttr::default()
            },
        )
        .unwrap_err();
    assert!(matches!(f, Error::InvalidArgument(_)));

    uc3.destroy(&mut hca).unwrap();
    uc2.destroy(&mut hca).unwrap();
    uc.destroy(&mut hca).unwrap();
    ud.destroy(&mut hca).unwrap();
    cq.destroy(&mut hca).unwrap();
    pd.destroy(&mut hca).unwrap();
    assert_eq!(dev.objects(), baseline());
    hca.close().unwrap();
}

#[test]
fn a_transition_the_device_refuses_is_a_typed_error_and_the_qp_comes_back() {
    let (dev, mut hca) = open(LinkLayer::InfiniBand);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(16).unwrap();
    let attr = common::on_cq(&cq, caps());
    let mut qp = hca.create_qp::<Rc>(&pd, &attr).unwrap();
    let qpn = qp.qpn();
    qp.to_init(&mut hca, InitAttr::default()).unwrap();
    qp.to_rtr(
        &mut hca,
        RtrAttr {
            ah: ib_path(2),
            ..RtrAttr::default()
        },
    )
    .unwrap();
    // The datapath moved the QP to ERR behind the driver's back.
    assert!(dev.force_qp_state(qpn, QpState::Err));
    let failed = qp.to_rts(&mut hca, RtsAttr::default()).unwrap_err();
    match failed {
        Error::BadQpState {
            qpn: n,
            command,
            device_state,
            ..
        } => {
            assert_eq!(n, qpn);
            assert_eq!(command, CmdOpcode::Rtr2rtsQp);
            assert_eq!(device_state, Some(QpState::Err));
        }
        ref e => panic!("not a BadQpState: {e}"),
    }
    assert_eq!(failed.command_status(), Some(CmdStatus::BadQpStateErr));
    assert!(failed.to_string().contains("ERR"), "{failed}");
    // The driver took the device's state as its own; RESET works from anywhere.
    assert_eq!(qp.state(), QpState::Err);
    qp.to_reset(&mut hca).unwrap();
    assert_eq!(dev.qp_state(qpn), Some(QpState::Rst));

    // SQER → RTS only when the device has the QP in SQER.
    qp.to_init(&mut hca, InitAttr::default()).unwrap();
    qp.to_rtr(
        &mut hca,
        RtrAttr {
            ah: ib_path(2),
            ..RtrAttr::default()
        },
    )
    .unwrap();
    qp.to_rts(&mut hca, RtsAttr::default()).unwrap();
    let f = qp.recover_sq(&mut hca).unwrap_err();
    assert!(matches!(
        f,
        Error::BadQpState {
            device_state: Some(QpState::Rts),
            ..
        }
    ));
    dev.force_qp_state(qpn, QpState::Sqer);
    qp.recover_sq(&mut hca).unwrap();
    assert_eq!(dev.qp_state(qpn), Some(QpState::Rts));

    // `?` turns a failed destroy into its error.
    fn via_question_mark(
        hca: &mut TestHca,
        qp: uhca_driver::verbs::Qp<MockPlatform, Rc>,
    ) -> Result<(), Error> {
        qp.destroy(hca)?;
        Ok(())
    }
    via_question_mark(&mut hca, qp).unwrap();
    cq.destroy(&mut hca).unwrap();
    pd.destroy(&mut hca).unwrap();
    assert_eq!(dev.objects(), baseline());
}

#[test]
fn bad_qp_capabilities_are_refused_before_any_command() {
    let (dev, mut hca) = open(LinkLayer::InfiniBand);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(16).unwrap();
    let before = commands(&dev);
    let with = |cap: QpCaps| common::on_cq(&cq, cap);
    for (name, cap) in [
        (
            "send SGEs",
            QpCaps {
                max_send_wr: 1,
                max_send_sge: 64,
                ..QpCaps::default()
            },
        ),
        (
            "receive SGEs",
            QpCaps {
                max_recv_wr: 1,
                max_recv_sge: 64,
                ..QpCaps::default()
            },
        ),
        (
            "inline",
            QpCaps {
                max_send_wr: 1,
                max_inline_data: 2000,
                ..QpCaps::default()
            },
        ),
        (
            "send WRs",
            QpCaps {
                max_send_wr: 1 << 20,
                ..QpCaps::default()
            },
        ),
    ] {
        let e = hca.create_qp::<Rc>(&pd, &with(cap)).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{name}: {e}");
    }
    let mut qp = hca.create_qp::<Rc>(&pd, &with(caps())).unwrap();
    let n = commands(&dev);
    let f = qp
        .to_init(
            &mut hca,
            InitAttr {
                port: 2,
                ..InitAttr::default()
            },
        )
        .unwrap_err();
    assert!(matches!(f, Error::InvalidArgument(_)));
    assert_eq!(commands(&dev), n);
    assert_eq!(
        commands(&dev),
        before + 1,
        "only the good CREATE_QP went out"
    );
    qp.destroy(&mut hca).unwrap();
    cq.destroy(&mut hca).unwrap();
    pd.destroy(&mut hca).unwrap();
}

/// At ISSI 1 an SRQ is an RMP (issue 18 item 1): the driver sends CREATE_RMP,
/// MODIFY_RMP, QUERY_RMP and DESTROY_RMP, never the ISSI-0 SRQ commands (which the device
/// refuses at ISSI 1), and a QP attaches to the RMP number with `rq_type` 1.
#[test]
fn srq_create_query_arm_destroy_and_a_qp_on_it() {
    let (dev, mut hca) = open(LinkLayer::Ethernet);
    assert_eq!(hca.info().issi, 1);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(16).unwrap();
    let mut srq = hca
        .create_srq(
            &pd,
            SrqInitAttr {
                max_wr: 100,
                max_sge: 3,
                srq_limit: 0,
            },
        )
        .unwrap();
    assert_eq!((srq.max_wr(), srq.max_sge()), (127, 3));
    let a = srq.query(&mut hca).unwrap();
    assert_eq!((a.log_srq_size, a.log_rq_stride, a.pdn), (7, 2, pd.pdn()));
    assert_eq!(a.dbr_addr, srq.mem().iova() + srq.dbr_offset() as u64);
    // The free list links each WQE to the next.
    assert_eq!(srq.mem().read_be16(2), 1);
    assert_eq!(srq.mem().read_be16((127 << srq.log_stride()) + 2), 0);
    srq.arm_limit(&mut hca, 10).unwrap();
    assert_eq!(srq.query(&mut hca).unwrap().limit, 10);
    let n = commands(&dev);
    assert!(matches!(
        srq.arm_limit(&mut hca, 128),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(commands(&dev), n);

    let qp = hca
        .create_qp::<Rc>(
            &pd,
            &common::on_srq(
                &cq,
                &srq,
                QpCaps {
                    max_send_wr: 8,
                    max_send_sge: 1,
                    ..QpCaps::default()
                },
            ),
        )
        .unwrap();
    let q = qp.query(&mut hca).unwrap().qpc;
    assert_eq!((q.rq_type(), q.srqn_rmpn_xrqn()), (1, srq.srqn()));
    assert_eq!(qp.srqn(), Some(srq.srqn()));
    let srq = srq.destroy(&mut hca).unwrap_err().object;
    qp.destroy(&mut hca).unwrap();
    srq.destroy(&mut hca).unwrap();
    cq.destroy(&mut hca).unwrap();
    pd.destroy(&mut hca).unwrap();
    assert_eq!(dev.objects(), baseline());
    let sent: Vec<CmdOpcode> = dev.command_log().iter().map(|r| r.opcode).collect();
    for op in [
        CmdOpcode::CreateRmp,
        CmdOpcode::ModifyRmp,
        CmdOpcode::QueryRmp,
        CmdOpcode::DestroyRmp,
    ] {
        assert!(sent.contains(&op), "{op:?} not sent: {sent:?}");
    }
    for op in [
        CmdOpcode::CreateSrq,
        CmdOpcode::ArmRq,
        CmdOpcode::QuerySrq,
        CmdOpcode::DestroySrq,
    ] {
        assert!(!sent.contains(&op), "{op:?} sent at ISSI 1");
    }
    hca.close().unwrap();
}

#[test]
fn infiniband_port_query() {
    let (dev, mut hca) = open(LinkLayer::InfiniBand);
    let p = hca.query_port(1).unwrap();
    assert_eq!(p.link_layer, uhca_driver::caps::LinkLayer::InfiniBand);
    assert_eq!(p.state, PortState::Active);
    assert_eq!(p.phys_state, PhysPortState::LinkUp);
    let cfg = dev.config();
    assert_eq!((p.lid, p.sm_lid), (cfg.lid, cfg.sm_lid));
    assert_eq!(p.active_mtu, IbMtu::Mtu4096);
    assert_eq!(p.node_guid, cfg.node_guid());
    assert_eq!(p.pkey_table_len, 128);
    assert_eq!(p.gid_table_len, 8);
    // GID 0 is the link-local prefix and the port GUID.
    let g = hca.query_gid(1, 0).unwrap();
    assert_eq!(g.kind, GidType::Ib);
    assert_eq!(g.gid, Gid::from_parts(0xfe80 << 48, cfg.node_guid()));
    assert!(matches!(hca.query_port(0), Err(Error::InvalidArgument(_))));
    assert!(matches!(hca.query_port(2), Err(Error::InvalidArgument(_))));
    // RoCE GIDs do not exist on InfiniBand.
    let e = hca
        .add_roce_gid(1, 0, IpAddr::V4(Ipv4Addr::LOCALHOST), MAC, None)
        .unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");

    dev.set_port_up(false);
    hca.process_events().unwrap();
    let p = hca.query_port(1).unwrap();
    assert_eq!(p.state, PortState::Down);
    assert_ne!(p.phys_state, PhysPortState::LinkUp);
}

#[test]
fn ethernet_port_query() {
    let (dev, mut hca) = open(LinkLayer::Ethernet);
    let p = hca.query_port(1).unwrap();
    assert_eq!(p.link_layer, uhca_driver::caps::LinkLayer::Ethernet);
    assert_eq!(p.state, PortState::Active);
    assert_eq!(p.phys_state, PhysPortState::LinkUp);
    assert_eq!(p.mac, Some(Mac(dev.config().mac)));
    assert_eq!(p.eth_mtu, Some(1500));
    assert_eq!(
        p.active_mtu,
        IbMtu::Mtu1024,
        "1500-byte Ethernet carries 1024-byte RoCE"
    );
    assert_eq!(p.max_mtu, IbMtu::Mtu4096);
    assert_eq!(p.gid_table_len, 256);
    assert_eq!(p.lid, 0);
    dev.set_port_up(false);
    let p = hca.query_port(1).unwrap();
    assert_eq!(
        (p.state, p.phys_state),
        (PortState::Down, PhysPortState::Disabled)
    );
}

#[test]
fn endpoint_needs_a_roce_gid_which_add_roce_ip_installs_with_the_ports_mac() {
    let (dev, mut hca) = open(LinkLayer::Ethernet);
    let mac = Mac(dev.config().mac);
    // Under VFIO nothing fills the GID table: an endpoint of an empty entry is refused.
    let e = hca.endpoint(1, 2).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(e.to_string().contains("add_roce_ip"), "{e}");
    let gid = hca
        .add_roce_ip(1, 2, IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)))
        .unwrap();
    assert_eq!(gid, Gid::from_ipv4([10, 1, 2, 3]));
    let entry = hca.query_gid(1, 2).unwrap();
    assert_eq!(
        (entry.gid, entry.kind, entry.mac, entry.vlan),
        (gid, GidType::RoceV2Ipv4, Some(mac), None)
    );
    let me = hca.endpoint(1, 2).unwrap();
    assert_eq!(
        me,
        uhca_driver::addr::Endpoint {
            link_layer: uhca_driver::caps::LinkLayer::Ethernet,
            lid: 0,
            gid,
            mac,
            gid_index: 2,
        }
    );
    let peer = uhca_driver::addr::Endpoint {
        gid: Gid::from_ipv4([10, 1, 2, 4]),
        mac: MAC,
        ..me
    };
    assert_eq!(
        me.path_to(&peer, 0x104, 0x105),
        AhAttr::roce_v2(2, peer.gid, MAC, 0x104, 0x105)
    );
    // No port 2, and no RoCE on InfiniBand: refused before any command.
    let n = commands(&dev);
    assert!(matches!(
        hca.add_roce_ip(2, 0, IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(commands(&dev), n);
    let (ib_dev, mut ib) = open(LinkLayer::InfiniBand);
    let n = commands(&ib_dev);
    assert!(matches!(
        ib.add_roce_ip(1, 0, IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3))),
        Err(Error::Unsupported(_))
    ));
    assert_eq!(commands(&ib_dev), n);
    // On InfiniBand the endpoint is the port's LID, and paths go by LID.
    let ep = ib.endpoint(1, 0).unwrap();
    assert_eq!(ep.link_layer, uhca_driver::caps::LinkLayer::InfiniBand);
    assert_eq!(ep.lid, ib.query_port(1).unwrap().lid);
    let to = uhca_driver::addr::Endpoint { lid: 7, ..ep };
    assert_eq!(ep.path_to(&to, 1, 2), AhAttr::ib(7));
}

#[test]
fn roce_gids_install_query_and_clear() {
    let (dev, mut hca) = open(LinkLayer::Ethernet);
    assert_eq!(hca.query_gid(1, 3).unwrap().kind, GidType::Empty);
    let g4 = hca
        .add_roce_gid(1, 3, IpAddr::V4(Ipv4Addr::new(192, 168, 7, 9)), MAC, None)
        .unwrap();
    assert_eq!(g4, Gid::from_ipv4([192, 168, 7, 9]));
    let e = hca.query_gid(1, 3).unwrap();
    assert_eq!(e.gid, g4);
    assert_eq!(e.kind, GidType::RoceV2Ipv4);
    assert_eq!(e.mac, Some(MAC));
    assert_eq!(e.vlan, None);
    let last = dev.last_command(CmdOpcode::SetRoceAddress).unwrap();
    assert_eq!(last.status, CmdStatus::Ok);

    let v6 = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x42);
    let g6 = hca
        .add_roce_gid(1, 4, IpAddr::V6(v6), MAC, Some(100))
        .unwrap();
    let e = hca.query_gid(1, 4).unwrap();
    assert_eq!(
        (e.gid, e.kind, e.vlan),
        (g6, GidType::RoceV2Ipv6, Some(100))
    );
    assert_eq!(e.gid.0, v6.octets());

    let n = commands(&dev);
    for (idx, ip, vlan) in [
        (256u16, IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4)), None),
        (5, IpAddr::V4(Ipv4Addr::UNSPECIFIED), None),
        (5, IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4)), Some(4096)),
    ] {
        let e = hca.add_roce_gid(1, idx, ip, MAC, vlan).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    }
    assert_eq!(commands(&dev), n);

    hca.del_roce_gid(1, 3).unwrap();
    assert_eq!(hca.query_gid(1, 3).unwrap().kind, GidType::Empty);
    assert_eq!(hca.query_gid(1, 4).unwrap().gid, g6);
    hca.close().unwrap();
}

#[test]
fn an_object_dropped_without_destroy_keeps_its_memory_until_the_hca_destroys_it() {
    let (dev, mut hca) = open(LinkLayer::Ethernet);
    let pd = hca.alloc_pd().unwrap();
    let mr = hca.alloc_mr(&pd, 4096, AccessFlags::LOCAL_WRITE).unwrap();
    let iova = mr.iova();
    drop(mr);
    // The key still names the memory, so the memory stays mapped (never reused).
    assert!(dev.is_mapped(iova, 4096));
    assert_eq!(dev.objects().mkeys, 1);
    // Close destroys it (and the PD) before the teardown, then frees its memory.
    let n = commands(&dev);
    drop(pd);
    hca.close().unwrap();
    let ops: Vec<CmdOpcode> = dev.command_log()[n..].iter().map(|c| c.opcode).collect();
    assert_eq!(&ops[..2], &[CmdOpcode::DestroyMkey, CmdOpcode::DeallocPd]);
    assert!(!dev.is_mapped(iova, 4096));
    assert_eq!(dev.hca_state(), uhca_mock::HcaState::TornDown);
    assert!(dev.iommu_faults().is_empty(), "{:?}", dev.iommu_faults());
}

/// Drives the rings directly (`Qp::rings_mut`, the `raw` feature).
#[cfg(feature = "raw")]
#[test]
fn the_rings_of_a_new_qp_and_cq_are_ready_for_the_datapath() {
    use uhca_fwif::consts::{WqeCtrlFlags, WqeOpcode};
    use uhca_hal::wq::Sge;
    let (dev, mut hca) = open(LinkLayer::InfiniBand);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(16).unwrap();
    let mr = hca.alloc_mr(&pd, 4096, AccessFlags::LOCAL_WRITE).unwrap();
    let attr = common::on_cq(&cq, caps());
    let mut qp = hca.create_qp::<Rc>(&pd, &attr).unwrap();
    qp.to_init(&mut hca, InitAttr::default()).unwrap();
    qp.to_rtr(
        &mut hca,
        RtrAttr {
            ah: ib_path(2),
            ..RtrAttr::default()
        },
    )
    .unwrap();
    qp.to_rts(&mut hca, RtsAttr::default()).unwrap();
    let qpn = qp.qpn();

    // A receive: the WQE lands at the start of the QP buffer (RQ first) and the receive
    // counter in the doorbell record moves.
    let idx = qp
        .rings_mut()
        .post_recv(&[Sge {
            addr: mr.iova(),
            len: 4096,
            lkey: mr.lkey(),
        }])
        .unwrap();
    qp.rings_mut().ring_rq_doorbell();
    assert_eq!(idx, 0);
    let mut seg = [0u8; 16];
    assert!(dev.host_read(qp.rings().mem().iova(), &mut seg));
    assert_eq!(&seg[4..8], &mr.lkey().to_be_bytes());
    assert_eq!(&seg[8..16], &mr.iova().to_be_bytes());
    let mut dbr = [0u8; 8];
    assert!(dev.host_read(qp.rings().dbr_iova(), &mut dbr));
    assert_eq!(u32::from_be_bytes(dbr[0..4].try_into().unwrap()), 1);

    // A send: the doorbell goes to the HCA's UAR, naming this QP.
    dev.take_doorbells();
    let mut w = qp
        .rings_mut()
        .sq_wqe(WqeOpcode::Send, WqeCtrlFlags::CQ_UPDATE)
        .unwrap();
    w.data(mr.iova(), 64, mr.lkey()).unwrap();
    let posted = w.finish();
    qp.rings_mut().ring_sq_doorbell(hca.platform());
    assert_eq!(posted.wqe_index, 0);
    let db = dev.take_doorbells();
    let send = db
        .iter()
        .find(|d| d.offset >= 0x800)
        .expect("a send doorbell");
    assert_eq!(send.uar, hca.uar());
    assert!(send.allocated);
    assert_eq!((send.value_be() >> 8) as u32 & 0x00ff_ffff, qpn, "qpn_ds");
    assert!(dev.host_read(qp.rings().dbr_iova(), &mut dbr));
    assert_eq!(
        u32::from_be_bytes(dbr[4..8].try_into().unwrap()),
        1,
        "send counter"
    );

    qp.destroy(&mut hca).unwrap();
    mr.destroy(&mut hca).unwrap();
    cq.destroy(&mut hca).unwrap();
    pd.destroy(&mut hca).unwrap();
    assert_eq!(dev.objects(), baseline());
    assert!(dev.iommu_faults().is_empty(), "{:?}", dev.iommu_faults());
}

#[test]
fn a_creation_that_times_out_is_a_typed_error_and_the_hca_stays_usable() {
    let (dev, mut hca) = open(LinkLayer::Ethernet);
    dev.hang_next_command(CmdOpcode::CreateCq);
    let e = hca.create_cq(8).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Command(uhca_hal::cmdq::CmdError::Timeout {
                opcode: CmdOpcode::CreateCq,
                ..
            })
        ),
        "{e}"
    );
    // The device finishes the command late: the CQ it made points at memory the driver
    // kept (leaked) rather than freed, so nothing faults.
    dev.complete_hung_commands();
    assert_eq!(dev.objects().cqs, 1);
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(8).unwrap();
    cq.destroy(&mut hca).unwrap();
    pd.destroy(&mut hca).unwrap();
    assert!(dev.iommu_faults().is_empty(), "{:?}", dev.iommu_faults());
}

/// Issue 18 item 9: an RC, UC or UD QP takes its `ts_format` from the QP timestamp
/// capability (the RoCE page's `qp_ts_format`), as Linux's `get_qp_ts_format` does, not
/// from the send queues' `sq_ts_format`. Here send queues are free-running only and QPs
/// real time only: free-running would be refused, so the QP gets the default format.
#[test]
fn qp_timestamp_format_comes_from_the_roce_qp_capability() {
    let dev = MockHca::new(MockConfig {
        port_type: LinkLayer::Ethernet,
        clock: ClockMode::Virtual,
        init_delay_us: 5_000,
        ..MockConfig::default()
    });
    dev.set_ts_format_caps(0, 1);
    let mut hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(64).unwrap();
    let attr = common::on_cq(&cq, caps());
    let rc = hca.create_qp::<Rc>(&pd, &attr).expect("RC QP");
    let uc = hca.create_qp::<Uc>(&pd, &attr).expect("UC QP");
    let ud = hca.create_qp::<Ud>(&pd, &attr).expect("UD QP");
    assert_eq!(rc.query(&mut hca).unwrap().qpc.ts_format(), 1);
    assert_eq!(uc.query(&mut hca).unwrap().qpc.ts_format(), 1);
    assert_eq!(ud.query(&mut hca).unwrap().qpc.ts_format(), 1);

    // The other way round (QPs free-running, send queues real time only): free-running.
    let dev = MockHca::new(MockConfig {
        clock: ClockMode::Virtual,
        init_delay_us: 5_000,
        ..MockConfig::default()
    });
    dev.set_ts_format_caps(1, 0);
    let mut hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(64).unwrap();
    let attr = common::on_cq(&cq, caps());
    let rc = hca.create_qp::<Rc>(&pd, &attr).expect("RC QP");
    assert_eq!(rc.query(&mut hca).unwrap().qpc.ts_format(), 0);
}

/// Issue 18 item 5: the driver fills the port fields of the vport and RoCE address
/// commands only where the PRM gives them a meaning, as Linux does:
/// QUERY_HCA_VPORT_*'s `port_num` on a dual-port function (`num_ports` 2), the RoCE
/// address table's `vhca_port_num` on a function with vHCA ports (`num_vhca_ports` > 0).
/// The mock, like the device, refuses a non-zero value where the field is reserved.
#[test]
fn port_fields_are_filled_only_where_the_device_reads_them() {
    // A single-port InfiniBand function: port_num stays 0.
    let (dev, mut hca) = open(LinkLayer::InfiniBand);
    assert_eq!(hca.hca_cap().num_ports(), 1);
    let p = hca.query_port(1).expect("QUERY_HCA_VPORT_CONTEXT");
    assert_eq!(p.lid, dev.config().lid);
    assert_eq!(hca.query_gid(1, 0).unwrap().kind, GidType::Ib);
    hca.close().unwrap();

    // An Ethernet function without vHCA ports: vhca_port_num stays 0.
    let dev = MockHca::new(MockConfig {
        clock: ClockMode::Virtual,
        init_delay_us: 5_000,
        ..MockConfig::default()
    });
    dev.set_num_vhca_ports(0);
    let mut hca = Hca::open_with(dev.platform(), cfg()).expect("bring-up");
    assert_eq!(hca.hca_cap().num_vhca_ports(), 0);
    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 7));
    let gid = hca
        .add_roce_gid(1, 2, ip, MAC, None)
        .expect("SET_ROCE_ADDRESS");
    assert_eq!(hca.query_gid(1, 2).expect("QUERY_ROCE_ADDRESS").gid, gid);
    assert!(dev.roce_gids().contains(&gid.0));
    hca.del_roce_gid(1, 2).unwrap();
    assert_eq!(hca.query_gid(1, 2).unwrap().kind, GidType::Empty);
    hca.close().unwrap();

    // With vHCA ports (the default profile) the port is named.
    let (dev, mut hca) = open(LinkLayer::Ethernet);
    assert_eq!(hca.hca_cap().num_vhca_ports(), 1);
    let gid = hca.add_roce_gid(1, 2, ip, MAC, None).unwrap();
    assert_eq!(hca.query_gid(1, 2).unwrap().gid, gid);
    assert!(dev.roce_gids().contains(&gid.0));
    hca.close().unwrap();
}

/// A verbs static rate reaches the device in the PRM's encoding, clamped to the rates it
/// lists in `stat_rate_support` (the mock's stops at 200 Gb/s), in a QP's path and in a UD
/// address vector alike; the mock refuses a code it does not list.
#[test]
fn static_rates_are_mapped_to_the_device_encoding_and_clamped() {
    let (dev, mut hca) = open(LinkLayer::InfiniBand);
    let support = hca.hca_cap().stat_rate_support();
    assert_eq!(support & (1 << 6), 0, "the mock offers no 400 Gb/s");
    let pd = hca.alloc_pd().unwrap();
    let cq = hca.create_cq(16).unwrap();
    let attr = common::on_cq(&cq, caps());
    // (verbs rate, PRM code the path must carry)
    for (rate, code) in [
        (StaticRate::PortCurrent, 0),
        (StaticRate::Gbps10, 8),
        (StaticRate::Gbps2_5, 7),
        (StaticRate::Gbps25, 2),
        (StaticRate::Gbps100, 3),
        (StaticRate::Gbps400, 4),
        (StaticRate::Gbps14, 8),
    ] {
        let mut qp = hca.create_qp::<Rc>(&pd, &attr).unwrap();
        qp.to_init(&mut hca, InitAttr::default()).unwrap();
        let ah = AhAttr::Ib {
            dlid: 7,
            sl: 0,
            src_path_bits: 0,
            static_rate: rate,
            grh: None,
        };
        qp.to_rtr(
            &mut hca,
            RtrAttr {
                dest_qpn: 0x99,
                ah,
                ..RtrAttr::default()
            },
        )
        .unwrap_or_else(|e| panic!("{rate:?}: {e}"));
        let q = qp.query(&mut hca).unwrap();
        assert_eq!(q.qpc.primary_address_path().stat_rate(), code, "{rate:?}");
        let av = hca.create_ah(1, ah).unwrap().av(0x99, 0x1111);
        assert_eq!(av.stat_rate_sl >> 4, code, "{rate:?} in the AV");
        qp.destroy(&mut hca).unwrap();
    }
    assert!(dev.command_log().iter().all(|c| c.status == CmdStatus::Ok));
    cq.destroy(&mut hca).unwrap();
    pd.destroy(&mut hca).unwrap();
    hca.close().unwrap();
}
