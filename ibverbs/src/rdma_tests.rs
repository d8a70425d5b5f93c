//! Two devices of this library in one process (mock HCAs with UDP ports on two loopback
//! addresses), an RC QP each, and every `ibv_post_send` opcode the library turns into the
//! driver's between them: RDMA WRITE, WRITE with immediate, SEND with immediate, RDMA READ,
//! compare-and-swap and fetch-and-add, on memory registered at the application's virtual
//! address (`ibv_reg_mr`) and at a chosen `iova` (`ibv_reg_mr_iova2`), the data checked in
//! the application's memory, and a key without remote write refused by the responder.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use uhca_driver::verbs::{QpCaps, SendFlags, SendOp, WcFlags, WcOpcode, WcStatus, WorkCompletion};
use uhca_fwif::consts::AccessFlags;
use uhca_hal::HostBuf;

use crate::config::{DeviceKind, DeviceSpec};
use crate::device::{Device, MrKeys};
use crate::qp::{AppSendWr, AppSge, Av, Modify, QpState};

struct Side {
    d: Device,
    pd: u32,
    cq: u32,
    qp: u32,
    qpn: u32,
    va: u64,
    mr: MrKeys,
    gid: [u8; 16],
}

const ALL: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::REMOTE_ATOMIC);

fn side(ip: Ipv4Addr, name: &str) -> Side {
    let d = Device::new(DeviceSpec {
        name: name.into(),
        kind: DeviceKind::MockUdp { ip },
    });
    d.open().unwrap();
    let pd = d.alloc_pd().unwrap();
    let (cq, _) = d.create_cq(64).unwrap();
    let buf: &'static mut [u8] = Box::leak(vec![0u8; 16384].into_boxed_slice());
    let va = buf.as_ptr() as u64;
    let mr = d.reg_mr(pd, va, HostBuf::from(buf), ALL).unwrap();
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let (qp, qpn, _) = d
        .create_qp(crate::qp::Transport::Rc, pd, cq, cq, None, caps, false)
        .unwrap();
    let gid = d.query_gid(1, 0).unwrap().gid.0;
    Side {
        d,
        pd,
        cq,
        qp,
        qpn,
        va,
        mr,
        gid,
    }
}

fn connect(s: &Side, peer: &Side) {
    to_init(s);
    to_rts(s, peer);
}

/// RESET -> INIT with every right.
fn to_init(s: &Side) {
    let m = Modify {
        state: Some(QpState::Init),
        port: Some(1),
        pkey_index: Some(0),
        access: Some(ALL),
        ..Modify::default()
    };
    s.d.modify_qp(s.qp, &m).unwrap();
}

/// INIT -> RTR -> RTS towards `peer`.
fn to_rts(s: &Side, peer: &Side) {
    let m = Modify {
        state: Some(QpState::Rtr),
        path_mtu: Some(3),
        dest_qpn: Some(peer.qpn),
        rq_psn: Some(0x10),
        max_dest_rd_atomic: Some(4),
        min_rnr_timer: Some(1),
        av: Some(Av {
            is_global: true,
            dgid: peer.gid,
            sgid_index: 0,
            hop_limit: 64,
            ..Av::default()
        }),
        ..Modify::default()
    };
    s.d.modify_qp(s.qp, &m).unwrap();
    let m = Modify {
        state: Some(QpState::Rts),
        sq_psn: Some(0x10),
        timeout: Some(14),
        retry_cnt: Some(7),
        rnr_retry: Some(7),
        max_rd_atomic: Some(4),
        ..Modify::default()
    };
    s.d.modify_qp(s.qp, &m).unwrap();
}

fn wait(s: &Side, n: usize) -> Vec<WorkCompletion> {
    let mut all = Vec::new();
    let t = Instant::now();
    while all.len() < n && t.elapsed() < Duration::from_secs(10) {
        let mut wc = [WorkCompletion::default(); 16];
        let k = s.d.poll_cq(s.cq, &mut wc).unwrap();
        all.extend_from_slice(&wc[..k]);
        if k == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    all
}

fn wr(wr_id: u64, op: SendOp, addr: u64, len: u32, lkey: u32) -> AppSendWr<'static> {
    AppSendWr {
        wr_id,
        op,
        sges: Box::leak(Box::new([AppSge { addr, len, lkey }])),
        flags: SendFlags::SIGNALED,
        inline: None,
        ud: None,
    }
}

#[test]
fn every_opcode_between_two_devices_on_application_memory() {
    let a = side(Ipv4Addr::new(127, 0, 0, 94), "uhca-ra");
    let b = side(Ipv4Addr::new(127, 0, 0, 95), "uhca-rb");
    connect(&a, &b);
    connect(&b, &a);
    let pattern: Vec<u8> = (0..200u32).map(|i| (i * 7 + 1) as u8).collect();
    a.d.write_mr(a.mr.handle, 0, &pattern).unwrap();
    let secret: Vec<u8> = (0..300u32).map(|i| (i ^ 0x3c) as u8).collect();
    b.d.write_mr(b.mr.handle, 4096, &secret).unwrap();
    b.d.write_mr(b.mr.handle, 8192, &1000u64.to_ne_bytes())
        .unwrap();
    b.d.write_mr(b.mr.handle, 8200, &40u64.to_ne_bytes())
        .unwrap();
    // Receives at B for the SEND with immediate and the WRITE with immediate.
    let recv = |id, off: u64| -> (u64, &'static [AppSge]) {
        (
            id,
            Box::leak(Box::new([AppSge {
                addr: b.va + off,
                len: 256,
                lkey: b.mr.lkey,
            }])),
        )
    };
    b.d.post_recv(b.qp, &[recv(100, 12288), recv(101, 12544)])
        .unwrap();

    let (la, rk) = (a.mr.lkey, b.mr.rkey);
    let wrs = [
        wr(
            1,
            SendOp::RdmaWrite {
                remote_addr: b.va + 100,
                rkey: rk,
            },
            a.va,
            200,
            la,
        ),
        wr(
            2,
            SendOp::RdmaRead {
                remote_addr: b.va + 4096,
                rkey: rk,
            },
            a.va + 1024,
            300,
            la,
        ),
        wr(
            3,
            SendOp::AtomicCmpSwap {
                remote_addr: b.va + 8192,
                rkey: rk,
                compare: 1000,
                swap: 7,
            },
            a.va + 2048,
            8,
            la,
        ),
        wr(
            4,
            SendOp::AtomicFetchAdd {
                remote_addr: b.va + 8200,
                rkey: rk,
                add: 2,
            },
            a.va + 2056,
            8,
            la,
        ),
        wr(5, SendOp::SendWithImm { imm: 0x1234_5678 }, a.va, 16, la),
        wr(
            6,
            SendOp::RdmaWriteWithImm {
                remote_addr: b.va + 600,
                rkey: rk,
                imm: 0x9abc_def0,
            },
            a.va,
            8,
            la,
        ),
    ];
    a.d.post_send(a.qp, &wrs, &[]).unwrap();
    let got = wait(&a, 6);
    let seen: Vec<_> = got.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        seen,
        [
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::RdmaRead),
            (3, WcStatus::Success, WcOpcode::CompSwap),
            (4, WcStatus::Success, WcOpcode::FetchAdd),
            (5, WcStatus::Success, WcOpcode::Send),
            (6, WcStatus::Success, WcOpcode::RdmaWrite),
        ]
    );
    let mut m = vec![0u8; 300];
    b.d.read_mr(b.mr.handle, 100, &mut m[..200]).unwrap();
    assert_eq!(m[..200], pattern[..], "the WRITE landed at B's va + 100");
    a.d.read_mr(a.mr.handle, 1024, &mut m).unwrap();
    assert_eq!(m, secret, "the READ brought B's va + 4096");
    let word = |d: &Device, h, off| {
        let mut w = [0u8; 8];
        d.read_mr(h, off, &mut w).unwrap();
        u64::from_ne_bytes(w)
    };
    assert_eq!(
        word(&a.d, a.mr.handle, 2048),
        1000,
        "CAS returned the old word"
    );
    assert_eq!(word(&b.d, b.mr.handle, 8192), 7, "and swapped");
    assert_eq!(
        word(&a.d, a.mr.handle, 2056),
        40,
        "fetch-add returned the old word"
    );
    assert_eq!(word(&b.d, b.mr.handle, 8200), 42, "and added");
    let r = wait(&b, 2);
    let seen: Vec<_> = r
        .iter()
        .map(|w| {
            (
                w.wr_id,
                w.opcode,
                w.byte_len,
                w.imm_data,
                w.wc_flags.contains(WcFlags::WITH_IMM),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (100, WcOpcode::Recv, 16, 0x1234_5678, true),
            (101, WcOpcode::RecvRdmaWithImm, 8, 0x9abc_def0, true),
        ]
    );
    b.d.read_mr(b.mr.handle, 12288, &mut m[..16]).unwrap();
    assert_eq!(m[..16], pattern[..16]);
    b.d.read_mr(b.mr.handle, 600, &mut m[..8]).unwrap();
    assert_eq!(m[..8], pattern[..8]);

    // A key registered at a chosen iova (ibv_reg_mr_iova2) and without remote write: a READ
    // at the iova works; a WRITE is refused by B (remote access error at A), and B's
    // memory is unchanged.
    let other: &'static mut [u8] = Box::leak(vec![0u8; 4096].into_boxed_slice());
    let iova = 0x20_0000_0000 + other.as_ptr() as u64 % 4096;
    let ro =
        b.d.reg_mr(
            b.pd,
            iova,
            HostBuf::from(other),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        )
        .unwrap();
    b.d.write_mr(ro.handle, 64, b"read me at the iova").unwrap();
    let rd = wr(
        7,
        SendOp::RdmaRead {
            remote_addr: iova + 64,
            rkey: ro.rkey,
        },
        a.va + 3072,
        19,
        la,
    );
    a.d.post_send(a.qp, &[rd], &[]).unwrap();
    let got = wait(&a, 1);
    assert_eq!((got[0].wr_id, got[0].status), (7, WcStatus::Success));
    a.d.read_mr(a.mr.handle, 3072, &mut m[..19]).unwrap();
    assert_eq!(&m[..19], b"read me at the iova");
    let wrt = wr(
        8,
        SendOp::RdmaWrite {
            remote_addr: iova + 64,
            rkey: ro.rkey,
        },
        a.va,
        19,
        la,
    );
    a.d.post_send(a.qp, &[wrt], &[]).unwrap();
    let got = wait(&a, 1);
    assert_eq!((got[0].wr_id, got[0].status), (8, WcStatus::RemoteAccess));
    b.d.read_mr(ro.handle, 64, &mut m[..19]).unwrap();
    assert_eq!(&m[..19], b"read me at the iova", "B's memory is unchanged");
    a.d.close().unwrap();
    b.d.close().unwrap();
}

/// A's RDMA WRITE of 8 bytes into B's MR: its completion's status.
fn write_status(a: &Side, b: &Side, wr_id: u64) -> WcStatus {
    let w = wr(
        wr_id,
        SendOp::RdmaWrite {
            remote_addr: b.va + 512,
            rkey: b.mr.rkey,
        },
        a.va,
        8,
        a.mr.lkey,
    );
    a.d.post_send(a.qp, &[w], &[]).unwrap();
    let got = wait(a, 1);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].wr_id, wr_id);
    got[0].status
}

#[test]
fn modify_qp_init_to_init_takes_access_flags_the_peer_then_meets() {
    let a = side(Ipv4Addr::new(127, 0, 0, 96), "uhca-ia");
    let b = side(Ipv4Addr::new(127, 0, 0, 97), "uhca-ib");
    connect(&a, &b);
    to_init(&b);
    // ibv_modify_qp(INIT -> INIT, IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX): remote read
    // only. Without IBV_QP_STATE the transition is to the state the QP is in.
    let m = Modify {
        access: Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ),
        pkey_index: Some(0),
        ..Modify::default()
    };
    assert_eq!(b.d.modify_qp(b.qp, &m).unwrap(), QpState::Init);
    // Another port is refused.
    let other = Modify {
        state: Some(QpState::Init),
        port: Some(2),
        ..Modify::default()
    };
    assert_eq!(
        b.d.modify_qp(b.qp, &other).unwrap_err().errno,
        libc::EOPNOTSUPP
    );
    to_rts(&b, &a);
    assert_eq!(write_status(&a, &b, 1), WcStatus::RemoteAccess);
    a.d.close().unwrap();
    b.d.close().unwrap();
}

#[test]
fn modify_qp_rts_to_rts_takes_timers_and_access_flags() {
    let a = side(Ipv4Addr::new(127, 0, 0, 98), "uhca-sa");
    let b = side(Ipv4Addr::new(127, 0, 0, 99), "uhca-sb");
    connect(&a, &b);
    connect(&b, &a);
    assert_eq!(write_status(&a, &b, 1), WcStatus::Success);
    // ibv_modify_qp(RTS -> RTS, IBV_QP_MIN_RNR_TIMER | IBV_QP_TIMEOUT).
    let m = Modify {
        state: Some(QpState::Rts),
        min_rnr_timer: Some(20),
        timeout: Some(16),
        ..Modify::default()
    };
    assert_eq!(a.d.modify_qp(a.qp, &m).unwrap(), QpState::Rts);
    assert_eq!(write_status(&a, &b, 2), WcStatus::Success);
    // RTS -> RTS cannot change the send PSN.
    let psn = Modify {
        state: Some(QpState::Rts),
        sq_psn: Some(5),
        ..Modify::default()
    };
    assert_eq!(a.d.modify_qp(a.qp, &psn).unwrap_err().errno, libc::EINVAL);
    // B takes remote write away in RTS (IBV_QP_ACCESS_FLAGS): A's WRITE is refused.
    let m = Modify {
        access: Some(AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ),
        ..Modify::default()
    };
    assert_eq!(b.d.modify_qp(b.qp, &m).unwrap(), QpState::Rts);
    assert_eq!(write_status(&a, &b, 3), WcStatus::RemoteAccess);
    a.d.close().unwrap();
    b.d.close().unwrap();
}

#[test]
fn posts_go_in_batches_of_16_requests_and_64_sges() {
    use crate::qp::in_batches;
    let mut seen = Vec::new();
    // 40 one-SGE requests: 16, 16, 8.
    in_batches(
        40,
        |_| 1,
        |r| {
            seen.push(r);
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(seen, [0..16, 16..32, 32..40]);
    // SGE counts 30, 30, 10, 30, 70, 1: 30 + 30 fit and a 10 more would pass 64, so it
    // begins the next batch with the 30 after it; the 70 goes alone (and is refused when
    // translated), the 1 after it in a batch of its own.
    let lens = [30, 30, 10, 30, 70, 1];
    seen.clear();
    in_batches(
        lens.len(),
        |i| lens[i],
        |r| {
            seen.push(r);
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(seen, [0..2, 2..4, 4..5, 5..6]);
    // A failure names the request from the first, and stops there.
    let mut batches = 0;
    let r = in_batches(
        40,
        |_| 1,
        |r| {
            batches += 1;
            if r.start == 16 {
                Err((3, libc::EINVAL))
            } else {
                Ok(())
            }
        },
    );
    assert_eq!((r, batches), (Err((19, libc::EINVAL)), 2));
}
