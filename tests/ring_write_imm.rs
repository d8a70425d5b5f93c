//! A four-rank ring of RDMA WRITE with immediate, written as a transport author would:
//! one `use uhca::prelude::*;` and the testbed (issue 10 asked for it to be short; it
//! took 32 names from six modules of four crates before).

use std::time::Duration;

use uhca::prelude::*;
use uhca::testbed::{RcConfig, Testbed};

const RANKS: usize = 4;
const LEN: usize = 4096;

fn pattern(rank: usize) -> Vec<u8> {
    (0..LEN).map(|i| (i * 7 + rank * 31) as u8).collect()
}

fn ring(mut tb: Testbed) -> Result<(), Box<dyn std::error::Error>> {
    // Rank r sends to rank r + 1 over links[r]: `.0` on rank r, `.1` on rank r + 1.
    let mut links = Vec::new();
    for r in 0..RANKS {
        links.push(tb.connect_rc(r, (r + 1) % RANKS, &RcConfig::default())?);
    }
    for (r, (src, dst)) in links.iter_mut().enumerate() {
        src.mr.mem_mut().write_bytes(0, &pattern(r));
        // A WRITE with immediate consumes a receive (with no scatter list) at the target.
        dst.qp.post_recv(&[RecvWr {
            wr_id: r as u64,
            sg_list: &[],
        }])?;
        let (remote_addr, rkey, imm) = (dst.mr.iova() + 1024, dst.mr.rkey(), 0xa000 + r as u32);
        let op = SendOp::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm,
        };
        src.qp
            .post_send(&[SendWr::new(r as u64, op, &[src.mr.sge(0, LEN)?])])?;
    }
    let wait = Duration::from_secs(10);
    for (r, (src, dst)) in links.iter_mut().enumerate() {
        let sent = tb.poll_until(&mut src.cq, 1, wait)?[0];
        assert_eq!(
            (sent.status, sent.opcode),
            (WcStatus::Success, WcOpcode::RdmaWrite)
        );
        let got = tb.poll_until(&mut dst.cq, 1, wait)?[0];
        assert_eq!(
            (got.status, got.opcode),
            (WcStatus::Success, WcOpcode::RecvRdmaWithImm)
        );
        assert_eq!(
            (got.imm_data, got.byte_len),
            (0xa000 + r as u32, LEN as u32)
        );
        let mut landed = vec![0u8; LEN + 1024];
        dst.mr.mem().read_bytes(0, &mut landed);
        assert!(
            landed[..1024].iter().all(|&b| b == 0),
            "nothing before the offset"
        );
        assert_eq!(
            landed[1024..],
            pattern(r)[..],
            "rank {r}'s data at the next rank"
        );
    }
    for (a, b) in links {
        tb.destroy(a)?;
        tb.destroy(b)?;
    }
    Ok(tb.close()?)
}

#[test]
fn four_rank_ring_of_write_with_imm_over_roce() {
    ring(Testbed::ethernet(RANKS).unwrap()).unwrap();
}

#[test]
fn four_rank_ring_of_write_with_imm_over_infiniband() {
    ring(Testbed::infiniband(RANKS).unwrap()).unwrap();
}

#[test]
fn poll_until_gives_a_typed_timeout_not_a_hang() {
    let mut tb = Testbed::ethernet(2).unwrap();
    let (_a, mut b) = tb.connect_rc(0, 1, &RcConfig::default()).unwrap();
    let t = std::time::Instant::now();
    let err = tb
        .poll_until(&mut b.cq, 1, Duration::from_millis(100))
        .unwrap_err();
    assert!(
        matches!(
            err,
            uhca::testbed::TestbedError::Timeout {
                wanted: 1,
                got: 0,
                ..
            }
        ),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    assert!(matches!(
        tb.connect_rc(0, 2, &RcConfig::default()),
        Err(uhca::testbed::TestbedError::NoSuchHca { index: 2, count: 2 })
    ));
}
