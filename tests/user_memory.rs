//! Memory regions over memory the caller already has (a `Vec<u8>`, a `&'static mut [u8]`):
//! mapped for the device through the platform's `Dma::map`, written by a peer's RDMA
//! WRITE, unmapped only after the key is destroyed, and handed back.

use std::time::Duration;

use uhca::prelude::*;
use uhca::testbed::{RcConfig, Testbed};

#[test]
fn rdma_write_lands_in_a_callers_vec_which_comes_back_after_the_key_is_gone() {
    let mut tb = Testbed::ethernet(2).unwrap();
    let (mut a, b) = tb.connect_rc(0, 1, &RcConfig::default()).unwrap();
    // hca1 registers the caller's own buffer, in the PD of its QP.
    let mem = tb.hca(1).map_host_buf(vec![0xeeu8; 8192]).unwrap();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let user = tb.hca(1).reg_user_mr(&b.pd, mem, access).unwrap();
    let (iova, len) = (user.iova(), user.len());
    assert_eq!(len, 8192);
    assert!(
        tb.device(1).is_mapped(iova, len),
        "mapped in the device's IOMMU"
    );
    assert_eq!(user.sge_all().unwrap().len, 8192);
    assert!(user.sge(8000, 193).is_err());

    let text = b"into memory the application allocated itself";
    a.mr.mem_mut().write_bytes(0, text);
    let op = SendOp::RdmaWrite {
        remote_addr: iova + 100,
        rkey: user.rkey(),
    };
    let sge = [a.mr.sge(0, text.len()).unwrap()];
    a.qp.post_send(&[SendWr::new(1, op, &sge)]).unwrap();
    let wc = tb
        .poll_until(&mut a.cq, 1, Duration::from_secs(10))
        .unwrap();
    assert_eq!(wc[0].status, WcStatus::Success);
    let mut seen = vec![0u8; text.len()];
    user.mem().read_bytes(100, &mut seen);
    assert_eq!(&seen, text);

    // The key goes first; the buffer stays mapped until the caller lets it go.
    let mem = user.destroy(tb.hca(1)).unwrap();
    assert!(
        tb.device(1).is_mapped(iova, len),
        "still mapped after DESTROY_MKEY"
    );
    let HostBuf::Boxed(buf) = mem.unmap().unwrap() else {
        panic!("a Vec comes back boxed");
    };
    assert!(!tb.device(1).is_mapped(iova, len), "unmapped");
    assert_eq!(&buf[100..100 + text.len()], text);
    assert!(
        buf[..100]
            .iter()
            .chain(&buf[100 + text.len()..])
            .all(|&x| x == 0xee)
    );
    assert!(tb.device(1).iommu_faults().is_empty());
}

#[test]
fn dropping_a_mapped_buffer_unmaps_it_and_bad_buffers_are_refused() {
    let mut tb = Testbed::ethernet(1).unwrap();
    let pd = tb.hca(0).alloc_pd().unwrap();
    let leaked: &'static mut [u8] = Box::leak(vec![1u8; 4096].into_boxed_slice());
    let mem = tb.hca(0).map_host_buf(leaked).unwrap();
    let mr = tb
        .hca(0)
        .reg_user_mr(&pd, mem, AccessFlags::LOCAL_WRITE)
        .unwrap();
    let (iova, len) = (mr.iova(), mr.len());
    assert_eq!(mr.mem().read_u8(4095), 1);
    drop(mr.destroy(tb.hca(0)).unwrap());
    assert!(!tb.device(0).is_mapped(iova, len), "dropped: unmapped");

    // Empty, or not 8-byte aligned: refused, and the buffer comes back.
    let refused = tb.hca(0).map_host_buf(Vec::new()).unwrap_err();
    assert!(matches!(
        refused.error,
        Error::Dma(uhca::hal::DmaError::InvalidRequest)
    ));
    assert!(matches!(refused.object, HostBuf::Boxed(b) if b.is_empty()));
    let odd: &'static mut [u8] = &mut Box::leak(vec![0u8; 64].into_boxed_slice())[1..];
    let refused = tb.hca(0).map_host_buf(odd).unwrap_err();
    assert!(matches!(
        refused.error,
        Error::Dma(uhca::hal::DmaError::InvalidRequest)
    ));
    assert!(matches!(refused.object, HostBuf::Static(s) if s.len() == 63));
}

#[test]
fn a_pd_of_another_hca_is_refused_and_the_buffer_comes_back_mapped() {
    let mut tb = Testbed::ethernet(2).unwrap();
    let pd0 = tb.hca(0).alloc_pd().unwrap();
    let mem = tb.hca(1).map_host_buf(vec![5u8; 4096]).unwrap();
    let (iova, len) = (mem.iova(), mem.len());
    let refused = tb
        .hca(1)
        .reg_user_mr(&pd0, mem, AccessFlags::LOCAL_WRITE)
        .unwrap_err();
    assert!(
        matches!(refused.error, Error::WrongHca),
        "{}",
        refused.error
    );
    let mem = refused
        .object
        .expect("nothing was sent, so the buffer comes back");
    assert!(tb.device(1).is_mapped(iova, len));
    assert_eq!(mem.read_u8(4095), 5);
    let HostBuf::Boxed(buf) = mem.unmap().unwrap() else {
        panic!("boxed")
    };
    assert!(!tb.device(1).is_mapped(iova, len));
    assert_eq!(buf.len(), 4096);
}
