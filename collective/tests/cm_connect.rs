//! A communicator whose QPs the driver's IB CM connected (`Pending::qp_mut`, then
//! `Pending::connect` with only the inbox and rkey of the peer's endpoint): two ranks on
//! two mock HCAs, the CM's REQ and REP carrying the inboxes, then an all-reduce whose every
//! element is checked.

use std::net::{IpAddr, Ipv4Addr};

use uhca_collective::{Communicator, Config, Endpoint, PortAddr, ReduceOp};
use uhca_driver::addr::{Endpoint as Port, Mac};
use uhca_driver::cm::{Cm, CmConfig, Connection};
use uhca_driver::{Hca, HcaConfig};
use uhca_fwif::consts::{IbMtu, QpState};
use uhca_mock::{Fabric, LinkLayer, MockConfig, MockHca};

fn inbox_of(c: &Connection) -> (u64, u32) {
    let d = c.private_data();
    (
        u64::from_be_bytes(d[..8].try_into().unwrap()),
        u32::from_be_bytes(d[8..12].try_into().unwrap()),
    )
}

#[test]
fn a_communicator_connected_by_the_cm_all_reduces() {
    let fabric = Fabric::new(LinkLayer::Ethernet);
    let cfg = Config {
        idle: Some(uhca_collective::mock::share_cpu),
        ..Config::default()
    };
    let mut sides = Vec::new();
    for rank in 0..2u8 {
        let mac = Mac([2, 0, 10, 0, 0, rank + 1]);
        let dev = MockHca::new(MockConfig {
            port_type: LinkLayer::Ethernet,
            mac: mac.0,
            ..MockConfig::default()
        });
        let hc = HcaConfig {
            cmd_timeout_ns: 500_000_000,
            poll_us: 100,
            ..HcaConfig::default()
        };
        let mut hca = Hca::open_with(dev.platform(), hc).unwrap();
        fabric.attach(&dev);
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, rank + 1));
        let gid = hca.add_roce_gid(1, 0, ip, mac, None).unwrap();
        let addr = PortAddr { gid, mac, lid: 0 };
        let p = Communicator::create(&mut hca, rank.into(), 2, addr, cfg).unwrap();
        let pd = hca.alloc_pd().unwrap();
        let cm_cfg = CmConfig {
            path_mtu: IbMtu::Mtu4096,
            responder_resources: 1,
            initiator_depth: 1,
            ..CmConfig::default()
        };
        let cm = Cm::new(&mut hca, &pd, cm_cfg).unwrap();
        sides.push((dev, hca, p, pd, cm));
    }
    let priv_of = |e: &Endpoint| [&e.inbox.to_be_bytes()[..], &e.rkey.to_be_bytes()].concat();
    let (a, b) = sides.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    let to_b = Port {
        link_layer: uhca_driver::caps::LinkLayer::Ethernet,
        lid: 0,
        gid: b.2.port_addr().gid,
        mac: b.2.port_addr().mac,
        gid_index: 0,
    };
    let (ea, eb) = (a.2.endpoint(1), b.2.endpoint(0));
    let mut cb = b.4.listen(7, &priv_of(&eb)).unwrap();
    let mut ca = {
        let qp = a.2.qp_mut(1).unwrap();
        a.4.connect(&mut a.1, qp, &to_b, 7, &priv_of(&ea)).unwrap()
    };
    let (mut da, mut db) = (false, false);
    for _ in 0..50 {
        fabric.run_until_idle();
        db =
            b.4.progress(&mut b.1, &mut cb, b.2.qp_mut(0).unwrap())
                .unwrap()
                || db;
        fabric.run_until_idle();
        da =
            a.4.progress(&mut a.1, &mut ca, a.2.qp_mut(1).unwrap())
                .unwrap()
                || da;
        if da && db {
            break;
        }
    }
    assert!(da && db, "connected");
    assert_eq!(a.2.qp_mut(1).unwrap().state(), QpState::Rts);
    // What each side learnt of the other's inbox, and nothing else: QPN and PSN 0 stand
    // for "connected already".
    let learnt = |c: &Connection, addr| {
        let (inbox, rkey) = inbox_of(c);
        Endpoint {
            addr,
            qpn: 0,
            psn: 0,
            inbox,
            rkey,
        }
    };
    assert_eq!(
        (learnt(&ca, ea.addr).inbox, learnt(&ca, ea.addr).rkey),
        (eb.inbox, eb.rkey)
    );
    let eps_a = vec![ea, learnt(&ca, eb.addr)];
    let eps_b = vec![learnt(&cb, ea.addr), eb];
    let pump = fabric.start_pump(20);
    let mut ranks = Vec::new();
    for ((dev, mut hca, p, pd, cm), eps) in sides.into_iter().zip([eps_a, eps_b]) {
        let comm = p.connect(&mut hca, &eps).unwrap();
        drop((cm, pd));
        ranks.push((dev, hca, comm));
    }
    let results: Vec<Vec<i32>> = std::thread::scope(|s| {
        let hs: Vec<_> = ranks
            .iter_mut()
            .enumerate()
            .map(|(r, (_, _, comm))| {
                s.spawn(move || {
                    let mut buf: Vec<i32> = (0..10_000).map(|k| k * (r as i32 + 1)).collect();
                    comm.all_reduce(&mut buf, ReduceOp::Sum).unwrap();
                    buf
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for buf in &results {
        assert!(buf.iter().enumerate().all(|(k, &v)| v == 3 * k as i32));
    }
    for (_, mut hca, comm) in ranks {
        comm.destroy(&mut hca).unwrap();
        hca.close().unwrap();
    }
    drop(pump);
}
