//! A caller's buffer registered at an address the caller chooses ([`Hca::reg_user_mr_at`],
//! what `ibv_reg_mr_iova2` and `ibv_reg_mr` need): a peer's RDMA WRITE, RDMA READ and
//! fetch-and-add name that address with the rkey and reach the buffer, wherever the
//! platform mapped it; the buffer's own IOVA is not an address of the key; an address
//! whose offset within a 4 KiB page is not the buffer's is refused before any command.

use uhca_driver::Error;
use uhca_driver::error::Arg;
use uhca_driver::verbs::{RtsAttr, SendOp, SendWr, WcOpcode, WcStatus};
use uhca_fwif::consts::AccessFlags;
use uhca_hal::DmaMem;
use uhca_mock::LinkLayer;

mod common;

use common::*;

/// Where the key of B's buffer starts: far from any IOVA the mock hands out.
const CHOSEN: u64 = 0x5555_0000_0000;

#[test]
fn peers_reach_a_caller_buffer_at_the_address_it_was_registered_at() {
    let (fabric, mut a, mut b, mut qa, _qb) = rc_pair(LinkLayer::InfiniBand, RtsAttr::default());
    let mut data = vec![0u8; 8192];
    data[1024..1032].copy_from_slice(&41u64.to_ne_bytes());
    for (i, x) in data[2048..2048 + 256].iter_mut().enumerate() {
        *x = (i as u8) ^ 0xa5;
    }
    let mem = b.hca.map_host_buf(data).unwrap();
    let mapped_at = mem.iova();
    let addr = CHOSEN + mapped_at % 4096;
    assert!(
        mapped_at + 8192 <= CHOSEN || mapped_at >= addr + 8192,
        "the chosen range is not the mapping's"
    );
    let rights = AccessFlags::LOCAL_WRITE
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ
        | AccessFlags::REMOTE_ATOMIC;
    let mr = b.hca.reg_user_mr_at(&b.pd, mem, addr, rights).unwrap();
    assert_eq!(mr.iova(), addr);
    assert_eq!(mr.sge(8, 16).unwrap().addr, addr + 8);
    let rkey = mr.rkey();

    // A's side: [0, 100) the WRITE's source, [4096, ..) the READ's and the atomic's results.
    let pattern: Vec<u8> = (0..100u8)
        .map(|i| i.wrapping_mul(3).wrapping_add(1))
        .collect();
    a.mr.mem_mut().write_bytes(0, &pattern);
    let src = [a.mr.sge(0, 100).unwrap()];
    let read_to = [a.mr.sge(4096, 256).unwrap()];
    let old = [a.mr.sge(8192, 8).unwrap()];
    let wrs = [
        SendWr::new(
            1,
            SendOp::RdmaWrite {
                remote_addr: addr + 100,
                rkey,
            },
            &src,
        ),
        SendWr::new(
            2,
            SendOp::RdmaRead {
                remote_addr: addr + 2048,
                rkey,
            },
            &read_to,
        ),
        SendWr::new(
            3,
            SendOp::AtomicFetchAdd {
                remote_addr: addr + 1024,
                rkey,
                add: 1,
            },
            &old,
        ),
    ];
    qa.post_send(&wrs).unwrap();
    run(&fabric);
    let wcs = poll(&mut a);
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        got,
        [
            (1, WcStatus::Success, WcOpcode::RdmaWrite),
            (2, WcStatus::Success, WcOpcode::RdmaRead),
            (3, WcStatus::Success, WcOpcode::FetchAdd),
        ]
    );
    let mut written = [0u8; 100];
    mr.mem().read_bytes(100, &mut written);
    assert_eq!(written[..], pattern[..], "the WRITE landed at addr + 100");
    let mut read = [0u8; 256];
    a.mr.mem().read_bytes(4096, &mut read);
    let want: Vec<u8> = (0..=255u8).map(|i| i ^ 0xa5).collect();
    assert_eq!(read[..], want[..], "the READ came from addr + 2048");
    let word = |m: &dyn Fn(usize, &mut [u8]), off| {
        let mut w = [0u8; 8];
        m(off, &mut w);
        u64::from_ne_bytes(w)
    };
    assert_eq!(
        word(&|o, d| a.mr.mem().read_bytes(o, d), 8192),
        41,
        "fetch-add returned the old word"
    );
    assert_eq!(
        word(&|o, d| mr.mem().read_bytes(o, d), 1024),
        42,
        "and added to it"
    );

    // The IOVA the buffer is mapped at is no address of the key: a remote access error.
    let stray = [SendWr::new(
        4,
        SendOp::RdmaWrite {
            remote_addr: mapped_at + 100,
            rkey,
        },
        &src,
    )];
    qa.post_send(&stray).unwrap();
    run(&fabric);
    let wcs = poll(&mut a);
    assert_eq!((wcs[0].wr_id, wcs[0].status), (4, WcStatus::RemoteAccess));
    let mut after = [0u8; 100];
    mr.mem().read_bytes(100, &mut after);
    assert_eq!(after[..], pattern[..], "nothing else was written");

    let mem = mr.destroy(&mut b.hca).unwrap();
    let back = mem.unmap().map_err(Error::from).unwrap();
    drop(back);
}

#[test]
fn an_address_off_the_buffers_page_offset_is_refused_and_the_buffer_comes_back() {
    let (dev, mut hca) = open(LinkLayer::InfiniBand);
    let pd = hca.alloc_pd().unwrap();
    let mem = hca.map_host_buf(vec![1u8; 4096]).unwrap();
    let addr = CHOSEN + (mem.iova() + 8) % 4096;
    let sent = dev.command_log().len();
    let f = hca
        .reg_user_mr_at(&pd, mem, addr, AccessFlags::LOCAL_WRITE)
        .unwrap_err();
    match f.error {
        Error::InvalidArgument(e) => assert_eq!(e.arg, Arg::MrIova),
        e => panic!("{e:?}"),
    }
    assert_eq!(dev.command_log().len(), sent, "no command was sent");
    let mem = f.object.expect("the buffer comes back");
    // Registered at its page offset, it works.
    let addr = CHOSEN + mem.iova() % 4096;
    let mr = hca
        .reg_user_mr_at(&pd, mem, addr, AccessFlags::LOCAL_WRITE)
        .unwrap();
    assert_eq!(mr.mem().read_u8(4095), 1);
    drop(mr.destroy(&mut hca).unwrap());
}
