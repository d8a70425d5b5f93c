//! The server against a client that speaks vfio-user as QEMU 11.1's `vfio-user-pci` does:
//! the messages of a guest boot in their order, what a driver would read from them, and
//! hostile messages that must get an error reply while the stream stays in step.

mod common;

use common::{Client, RAM_IOVA, RAM_SIZE, Ram, eventfd, realtime_hca, wait_eventfd};
use std::os::fd::AsFd;
use std::time::Duration;
use uhca_vfio_user::Function;
use uhca_vfio_user::proto::{self, cmd, errno};

fn le32(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

fn le64(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

/// The boot sequence QEMU sends (VERSION, DMA_MAP of RAM with its memfd, DEVICE_GET_INFO,
/// GET_REGION_INFO 0-7, GET_IRQ_INFO, configuration reads including BAR sizing and the
/// MSI-X capability), answered as a ConnectX function with a trapped 32 MiB BAR0.
#[test]
fn qemu_boot_sequence_describes_a_connectx_function() {
    let hca = realtime_hca();
    let f = Function::new(hca.clone());
    let mut c = Client::start(&f);

    let v = c.version();
    assert_eq!(v.errno(), 0);
    assert_eq!(&v.payload[..4], &[0, 0, 0, 0], "version 0.0");
    let json = std::str::from_utf8(&v.payload[4..v.payload.len() - 1]).unwrap();
    assert!(json.contains("\"max_msg_fds\":16"), "{json}");
    assert!(json.contains("\"max_data_xfer_size\":1048576"), "{json}");
    assert!(
        !json.contains("write_multiple"),
        "REGION_WRITE_MULTI is not agreed: {json}"
    );
    assert_eq!(*v.payload.last().unwrap(), 0, "NUL-terminated");

    let ram = Ram::new(RAM_SIZE);
    let m = c.dma_map(
        Some(ram.fd.as_fd()),
        0,
        RAM_IOVA,
        RAM_SIZE as u64,
        proto::DMA_MAP_FLAG_READ | proto::DMA_MAP_FLAG_WRITE,
    );
    assert_eq!(m.errno(), 0);
    assert!(hca.is_mapped(RAM_IOVA, RAM_SIZE));
    // The device's view is the client's memory: what the client writes the model reads.
    ram.write(0x1234, b"guest bytes");
    let mut seen = [0u8; 11];
    assert!(hca.host_read(RAM_IOVA + 0x1234, &mut seen));
    assert_eq!(&seen, b"guest bytes");

    let info = c.call(
        cmd::DEVICE_GET_INFO,
        &[16, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        &[],
    );
    assert_eq!(info.errno(), 0);
    assert_eq!(
        le32(&info.payload, 4),
        proto::DEVICE_FLAGS_RESET | proto::DEVICE_FLAGS_PCI
    );
    assert_eq!(le32(&info.payload, 8), 9, "regions");
    assert_eq!(le32(&info.payload, 12), 5, "interrupt types");

    for index in 0..8u32 {
        let mut p = vec![0u8; 32];
        p[0..4].copy_from_slice(&32u32.to_le_bytes());
        p[8..12].copy_from_slice(&index.to_le_bytes());
        let r = c.call(cmd::DEVICE_GET_REGION_INFO, &p, &[]);
        assert_eq!(r.errno(), 0);
        assert_eq!(le32(&r.payload, 8), index);
        let (flags, size) = (le32(&r.payload, 4), le64(&r.payload, 16));
        match index {
            0 => assert_eq!(
                (flags, size),
                (3, 32 << 20),
                "BAR0: read/write, not mmappable"
            ),
            7 => assert_eq!((flags, size), (3, 4096), "configuration space"),
            _ => assert_eq!((flags, size), (0, 0), "region {index} absent"),
        }
    }
    for index in 0..5u32 {
        let mut p = vec![0u8; 16];
        p[0..4].copy_from_slice(&16u32.to_le_bytes());
        p[8..12].copy_from_slice(&index.to_le_bytes());
        let r = c.call(cmd::DEVICE_GET_IRQ_INFO, &p, &[]);
        assert_eq!(r.errno(), 0);
        let (flags, count) = (le32(&r.payload, 4), le32(&r.payload, 12));
        match index {
            2 => {
                assert_eq!(count, 64, "MSI-X vectors");
                assert_ne!(flags & proto::IRQ_INFO_EVENTFD, 0);
            }
            0 => assert_eq!(count, 1, "INTx"),
            3 | 4 => {
                assert_eq!(
                    count, 1,
                    "error and request interrupts, as vfio-pci has them"
                );
                assert_ne!(flags & proto::IRQ_INFO_EVENTFD, 0);
            }
            _ => assert_eq!(count, 0),
        }
    }

    // Configuration space in one read, as QEMU takes it.
    let cfg = c.region_read(7, 0, 4096).unwrap();
    assert_eq!(u16::from_le_bytes([cfg[0], cfg[1]]), 0x15b3);
    assert_eq!(u16::from_le_bytes([cfg[2], cfg[3]]), 0x101d);
    assert_eq!(
        &cfg[9..12],
        &[0x00, 0x00, 0x02],
        "class: Ethernet controller"
    );
    // Walk the capability list to MSI-X.
    let mut at = cfg[0x34] as usize;
    let mut msix = None;
    for _ in 0..16 {
        if at == 0 {
            break;
        }
        if cfg[at] == 0x11 {
            msix = Some(at);
        }
        at = cfg[at + 1] as usize;
    }
    let msix = msix.expect("an MSI-X capability");
    let ctl = u16::from_le_bytes([cfg[msix + 2], cfg[msix + 3]]);
    assert_eq!((ctl & 0x7ff) + 1, 64, "table size");
    assert_eq!(le32(&cfg, msix + 4), 0x2000, "table in BAR0 at 0x2000");
    assert_eq!(le32(&cfg, msix + 8), 0x3000, "PBA in BAR0 at 0x3000");

    // BAR sizing: all ones, read back, restore.
    let bar_lo = le32(&cfg, 0x10);
    c.region_write(7, 0x10, &[0xff; 4], true);
    c.region_write(7, 0x14, &[0xff; 4], true);
    let lo = le32(&c.region_read(7, 0x10, 4).unwrap(), 0);
    let hi = le32(&c.region_read(7, 0x14, 4).unwrap(), 0);
    assert_eq!(lo & !0xf, !((32u32 << 20) - 1), "32 MiB");
    assert_eq!(lo & 0xf, 0xc, "64-bit prefetchable memory");
    assert_eq!(hi, 0xffff_ffff);
    c.region_write(7, 0x10, &bar_lo.to_le_bytes(), true);
    c.region_write(7, 0x14, &[0; 4], true);
    assert_eq!(le32(&c.region_read(7, 0x10, 4).unwrap(), 0), bar_lo);

    // The initialization segment through BAR0: firmware revision and command interface
    // revision 5, big-endian as on hardware.
    let (maj, min, sub) = hca.config().fw_rev;
    let d0 = c.region_read(0, 0, 4).unwrap();
    assert_eq!(
        u32::from_be_bytes(d0.clone().try_into().unwrap()),
        ((min as u32) << 16) | maj as u32
    );
    let d1 = c.region_read(0, 4, 4).unwrap();
    let d1 = u32::from_be_bytes(d1.try_into().unwrap());
    assert_eq!((d1 >> 16, d1 & 0xffff), (5, sub as u32));
    // An 8-byte read is one access of the same bytes.
    let q = c.region_read(0, 0, 8).unwrap();
    assert_eq!(&q[..4], &d0[..]);
    // The health counter moves in real time.
    let h1 = c.region_read(0, 0x1010, 4).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    let h2 = c.region_read(0, 0x1010, 4).unwrap();
    assert_ne!(h1, h2, "health counter ticks");

    // The PBA (the one part of the MSI-X structures QEMU forwards) reads as zero.
    assert_eq!(c.region_read(0, 0x3000, 8).unwrap(), vec![0; 8]);

    // SET_IRQS with eventfds for every MSI-X vector, then a client-side trigger of vector 3
    // (DATA_BOOL) signals exactly that eventfd.
    let fds: Vec<_> = (0..64).map(|_| eventfd()).collect();
    let bfds: Vec<_> = fds.iter().take(16).map(|f| f.as_fd()).collect();
    let r = c.set_irqs(
        2,
        proto::IRQ_SET_DATA_EVENTFD | proto::IRQ_SET_ACTION_TRIGGER,
        0,
        16,
        &[],
        &bfds,
    );
    assert_eq!(r.errno(), 0);
    assert_eq!(f.msix_eventfds(), 16);
    let mut bools = [0u8; 4];
    bools[3] = 1;
    let r = c.set_irqs(
        2,
        proto::IRQ_SET_DATA_BOOL | proto::IRQ_SET_ACTION_TRIGGER,
        0,
        4,
        &bools,
        &[],
    );
    assert_eq!(r.errno(), 0);
    assert_eq!(wait_eventfd(&fds[3], Duration::from_secs(2)), 1);
    assert_eq!(wait_eventfd(&fds[2], Duration::from_millis(10)), 0);
    // Disable all: count 0 with DATA_NONE.
    let r = c.set_irqs(
        2,
        proto::IRQ_SET_DATA_NONE | proto::IRQ_SET_ACTION_TRIGGER,
        0,
        0,
        &[],
        &[],
    );
    assert_eq!(r.errno(), 0);
    assert_eq!(f.msix_eventfds(), 0);

    // DEVICE_RESET is a function level reset of the model.
    let before = hca.reset_count();
    let r = c.call(cmd::DEVICE_RESET, &[], &[]);
    assert_eq!(r.errno(), 0);
    assert_eq!(hca.reset_count(), before + 1);

    // DMA_UNMAP of all RAM (what QEMU sends when the guest turns DMA remapping on) echoes
    // the entry and the device no longer reaches the memory.
    let r = c.dma_unmap(RAM_IOVA, RAM_SIZE as u64, 0);
    assert_eq!(r.errno(), 0);
    assert_eq!(le64(&r.payload, 8), RAM_IOVA);
    assert!(!hca.is_mapped(RAM_IOVA, 1));

    let stats = c.finish();
    assert_eq!(stats.errors, 0, "{stats:?}");
    assert_eq!(stats.resets, 1);
}

/// Hostile and broken messages: each gets an error reply with the errno that says why, and
/// the next message is read from its start (a VERSION after each one is answered, with its
/// own id). The server never panics and ends cleanly.
#[test]
fn hostile_messages_get_errors_and_the_stream_stays_in_step() {
    let hca = realtime_hca();
    let f = Function::new(hca.clone());
    let mut c = Client::start(&f);
    let expect_in_step = |c: &mut Client| {
        let v = c.version();
        assert_eq!(v.errno(), 0, "the stream is still in step");
    };
    expect_in_step(&mut c);

    // A header whose size is below its own.
    let bad = proto::Header {
        id: 77,
        command: cmd::DEVICE_GET_INFO,
        size: 8,
        flags: 0,
        error: 0,
    };
    c.send_raw(&bad.encode(), &[]);
    let r = c.reply();
    assert_eq!((r.hdr.id, r.errno()), (77, errno::EINVAL));
    expect_in_step(&mut c);

    // Larger than max_data_xfer_size allows: the payload is read and dropped.
    let big = vec![0xa5u8; proto::MAX_MESSAGE + 100 - proto::HEADER_SIZE];
    let id = c.post(cmd::REGION_WRITE, &big, &[], false);
    let r = c.reply();
    assert_eq!((r.hdr.id, r.errno()), (id, errno::E2BIG));
    expect_in_step(&mut c);

    // An unknown command with a payload: answered after its payload is consumed.
    let id = c.post(99, &[0x5a; 300], &[], false);
    let r = c.reply();
    assert_eq!((r.hdr.id, r.errno()), (id, errno::ENOSYS));
    expect_in_step(&mut c);

    // Payloads too short for their command.
    for command in [
        cmd::DMA_MAP,
        cmd::DMA_UNMAP,
        cmd::DEVICE_GET_INFO,
        cmd::DEVICE_GET_REGION_INFO,
        cmd::DEVICE_GET_IRQ_INFO,
        cmd::DEVICE_SET_IRQS,
        cmd::REGION_READ,
        cmd::REGION_WRITE,
        cmd::VERSION,
    ] {
        let r = c.call(command, &[1, 2, 3], &[]);
        assert_eq!(r.errno(), errno::EINVAL, "command {command}");
        assert!(r.payload.is_empty(), "an error reply is the header alone");
    }
    expect_in_step(&mut c);

    // DMA maps: outside the file, overlapping, misaligned.
    let ram = Ram::new(1 << 20);
    let rw = proto::DMA_MAP_FLAG_READ | proto::DMA_MAP_FLAG_WRITE;
    assert_eq!(
        c.dma_map(Some(ram.fd.as_fd()), 0, 0x10_0000, 2 << 20, rw)
            .errno(),
        errno::EINVAL
    );
    assert_eq!(
        c.dma_map(Some(ram.fd.as_fd()), 1 << 20, 0x10_0000, 4096, rw)
            .errno(),
        errno::EINVAL
    );
    assert_eq!(
        c.dma_map(Some(ram.fd.as_fd()), 0, 0x10_0000, 1 << 20, rw)
            .errno(),
        0
    );
    assert_eq!(
        c.dma_map(Some(ram.fd.as_fd()), 0, 0x18_0000, 4096, rw)
            .errno(),
        errno::EEXIST
    );
    assert_eq!(
        c.dma_map(Some(ram.fd.as_fd()), 0, 0x0f_f000, 8192, rw)
            .errno(),
        errno::EEXIST
    );
    assert_eq!(
        c.dma_map(Some(ram.fd.as_fd()), 0, 0x30_0800, 4096, rw)
            .errno(),
        errno::EINVAL
    );
    assert_eq!(
        c.dma_map(Some(ram.fd.as_fd()), 0, 0x40_0000, 0, rw).errno(),
        errno::EINVAL
    );
    assert_eq!(
        c.dma_map(Some(ram.fd.as_fd()), 0, u64::MAX - 4095, 8192, rw)
            .errno(),
        errno::EINVAL
    );
    // Two files for one map.
    let p = {
        let mut p = Vec::new();
        p.extend_from_slice(&32u32.to_le_bytes());
        p.extend_from_slice(&rw.to_le_bytes());
        p.extend_from_slice(&0u64.to_le_bytes());
        p.extend_from_slice(&0x80_0000u64.to_le_bytes());
        p.extend_from_slice(&4096u64.to_le_bytes());
        p
    };
    let r = c.call(cmd::DMA_MAP, &p, &[ram.fd.as_fd(), ram.fd.as_fd()]);
    assert_eq!(r.errno(), errno::EBADF);
    // An unmap that cuts a map in two, at its start or its end; an empty one.
    assert_eq!(c.dma_unmap(0x10_0000, 4096, 0).errno(), errno::EINVAL);
    assert_eq!(c.dma_unmap(0x0f_f000, 8192, 0).errno(), errno::EINVAL);
    assert_eq!(c.dma_unmap(0x10_0000, 0, 0).errno(), errno::EINVAL);
    assert!(hca.is_mapped(0x10_0000, 1 << 20), "the good map stands");
    // Descriptors sent with a command that takes none are refused (and closed).
    let efd = eventfd();
    let r = c.call(cmd::DEVICE_RESET, &[], &[efd.as_fd()]);
    assert_eq!(r.errno(), errno::EINVAL);
    expect_in_step(&mut c);

    // Region accesses out of range, of odd widths, of absent regions.
    assert_eq!(c.region_read(0, (32 << 20) - 4, 8), Err(errno::EINVAL));
    assert_eq!(c.region_read(0, u64::MAX - 3, 4), Err(errno::EINVAL));
    assert_eq!(c.region_read(0, 1, 3), Err(errno::EINVAL));
    assert_eq!(c.region_read(7, 4095, 2), Err(errno::EINVAL));
    assert_eq!(c.region_read(1, 0, 4), Err(errno::EINVAL));
    assert_eq!(c.region_read(0, 0, 0), Err(errno::EINVAL));
    assert_eq!(c.region_read(0, 0, (2 << 20) as u32), Err(errno::EINVAL));
    assert_eq!(c.region_write(0, 0x100002, &[1, 2], false), errno::EINVAL);
    // A write whose count disagrees with its data.
    let mut p = Vec::new();
    p.extend_from_slice(&0x14u64.to_le_bytes());
    p.extend_from_slice(&0u32.to_le_bytes());
    p.extend_from_slice(&64u32.to_le_bytes());
    p.extend_from_slice(&[0; 4]);
    assert_eq!(c.call(cmd::REGION_WRITE, &p, &[]).errno(), errno::EINVAL);
    expect_in_step(&mut c);

    // SET_IRQS: past the vectors, mixed flags, eventfd count differing from count.
    let trig = proto::IRQ_SET_DATA_EVENTFD | proto::IRQ_SET_ACTION_TRIGGER;
    assert_eq!(c.set_irqs(2, trig, 60, 8, &[], &[]).errno(), errno::EINVAL);
    assert_eq!(
        c.set_irqs(2, trig | proto::IRQ_SET_DATA_BOOL, 0, 1, &[], &[])
            .errno(),
        errno::EINVAL
    );
    assert_eq!(
        c.set_irqs(2, trig, 0, 2, &[], &[efd.as_fd()]).errno(),
        errno::EBADF
    );
    assert_eq!(
        c.set_irqs(9, trig, 0, 1, &[], &[efd.as_fd()]).errno(),
        errno::EINVAL
    );
    assert_eq!(c.set_irqs(3, trig, 0, 2, &[], &[]).errno(), errno::EINVAL);
    assert_eq!(
        c.set_irqs(
            2,
            proto::IRQ_SET_DATA_BOOL | proto::IRQ_SET_ACTION_TRIGGER,
            0,
            8,
            &[1],
            &[]
        )
        .errno(),
        errno::EINVAL
    );
    assert_eq!(f.msix_eventfds(), 0);

    // A message typed as a reply gets no answer; the next command is answered.
    let stray = proto::Header {
        id: 500,
        command: cmd::VERSION,
        size: 16,
        flags: proto::FLAG_TYPE_REPLY,
        error: 0,
    };
    c.send_raw(&stray.encode(), &[]);
    expect_in_step(&mut c);

    // A broken message with no-reply set is dropped silently, and the stream goes on.
    c.post(cmd::DMA_MAP, &[0; 4], &[], true);
    expect_in_step(&mut c);

    let stats = c.finish();
    assert!(stats.errors >= 30, "{stats:?}");
    assert!(hca.notes().iter().all(|n| !n.text.contains("panic")));
    // The client went: its maps are gone.
    assert!(!hca.is_mapped(0x10_0000, 1));
}

/// A client that closes the socket in the middle of a message ends the connection
/// cleanly (an error from `serve`, no panic), and its maps and eventfds are dropped all
/// the same; so are those of a client that closes between messages.
#[test]
fn a_client_gone_mid_message_leaves_no_maps() {
    let hca = realtime_hca();
    let f = Function::new(hca.clone());
    let ram = Ram::new(1 << 20);
    let rw = proto::DMA_MAP_FLAG_READ | proto::DMA_MAP_FLAG_WRITE;
    let mut c = common::Client::start(&f);
    assert_eq!(
        c.dma_map(Some(ram.fd.as_fd()), 0, 0x10_0000, 1 << 20, rw)
            .errno(),
        0
    );
    c.finish();
    assert!(!hca.is_mapped(0x10_0000, 1));

    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    let f2 = f.clone();
    let server = std::thread::spawn(move || uhca_vfio_user::serve(theirs, &f2, false));
    // A map and an eventfd, then half a header, then gone.
    let mut p = Vec::new();
    p.extend_from_slice(&32u32.to_le_bytes());
    p.extend_from_slice(&rw.to_le_bytes());
    p.extend_from_slice(&0u64.to_le_bytes());
    p.extend_from_slice(&0x20_0000u64.to_le_bytes());
    p.extend_from_slice(&(1u64 << 20).to_le_bytes());
    let hdr = proto::Header {
        id: 1,
        command: cmd::DMA_MAP,
        size: 48,
        flags: proto::FLAG_NO_REPLY,
        error: 0,
    };
    let mut m = hdr.encode().to_vec();
    m.extend_from_slice(&p);
    let mut space = [std::mem::MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut anc = rustix::net::SendAncillaryBuffer::new(&mut space);
    let fds = [ram.fd.as_fd()];
    assert!(anc.push(rustix::net::SendAncillaryMessage::ScmRights(&fds)));
    rustix::net::sendmsg(
        &ours,
        &[std::io::IoSlice::new(&m)],
        &mut anc,
        rustix::net::SendFlags::empty(),
    )
    .unwrap();
    use std::io::Write;
    let mut ours = ours;
    ours.write_all(&[1, 0, 1, 0, 40]).unwrap();
    // The map is made before the broken header arrives.
    let t = std::time::Instant::now();
    while !hca.is_mapped(0x20_0000, 1) && t.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(hca.is_mapped(0x20_0000, 1 << 20));
    drop(ours);
    let r = server.join().expect("no panic");
    assert!(r.is_err(), "an unexpected end is reported: {r:?}");
    assert!(
        !hca.is_mapped(0x20_0000, 1),
        "the map of a client gone mid-message is dropped"
    );
}

/// What QEMU 11.1 sends once the guest turns on its IOMMU (seen in the VM rig): maps of
/// memory it cannot share, without a file (its ROMs), and invalidations that unmap whole
/// power-of-two ranges of the IOVA space, most of them empty. Both are answered as Linux
/// VFIO (type1 v2) answers them: the file-less map is recorded (the device cannot reach it),
/// an unmap removes every map inside its range and is not an error when there is none. And
/// the error and request interrupts take their eventfds (QEMU's "error recovery").
#[test]
fn qemu_viommu_maps_and_range_unmaps_are_answered_as_linux_vfio_does() {
    let hca = realtime_hca();
    let f = Function::new(hca.clone());
    let mut c = Client::start(&f);
    assert_eq!(c.version().errno(), 0);
    let ram = Ram::new(1 << 20);
    let rw = proto::DMA_MAP_FLAG_READ | proto::DMA_MAP_FLAG_WRITE;
    assert_eq!(
        c.dma_map(Some(ram.fd.as_fd()), 0, 0x7000_0000, 0x4000, rw)
            .errno(),
        0
    );
    assert_eq!(
        c.dma_map(Some(ram.fd.as_fd()), 0x4000, 0x7000_8000, 0x4000, rw)
            .errno(),
        0
    );
    // A ROM: no file.
    assert_eq!(
        c.dma_map(None, 0, 0xfffc_0000, 0x4_0000, proto::DMA_MAP_FLAG_READ)
            .errno(),
        0
    );
    assert!(
        !hca.is_mapped(0xfffc_0000, 1),
        "not reachable by the device"
    );
    assert_eq!(
        c.dma_map(Some(ram.fd.as_fd()), 0, 0xfffd_0000, 0x1000, rw)
            .errno(),
        errno::EEXIST,
        "but its IOVA range is taken"
    );
    // Invalidation of empty ranges: fine, including one that reaches the top of the
    // 64-bit IOVA space (QEMU unmaps everything above an address this way).
    for (iova, size) in [
        (0x1_0000_0000u64, 0x1_0000_0000u64),
        (0x8000_0000, 0x4000_0000),
        (0x1_0000_0000, 0u64.wrapping_sub(0x1_0000_0000)),
    ] {
        let r = c.dma_unmap(iova, size, 0);
        assert_eq!(r.errno(), 0, "{iova:#x}+{size:#x}");
    }
    assert!(hca.is_mapped(0x7000_0000, 0x4000));
    // One range over both file maps removes both.
    assert_eq!(c.dma_unmap(0x4000_0000, 0x4000_0000, 0).errno(), 0);
    assert!(!hca.is_mapped(0x7000_0000, 1) && !hca.is_mapped(0x7000_8000, 1));
    // And the ROM's range goes with its own invalidation: the IOVA is free again.
    assert_eq!(c.dma_unmap(0xff00_0000, 0x100_0000, 0).errno(), 0);
    assert_eq!(
        c.dma_map(Some(ram.fd.as_fd()), 0, 0xfffd_0000, 0x1000, rw)
            .errno(),
        0
    );

    let efd = eventfd();
    let trig = proto::IRQ_SET_DATA_EVENTFD | proto::IRQ_SET_ACTION_TRIGGER;
    assert_eq!(
        c.set_irqs(3, trig, 0, 1, &[], &[efd.as_fd()]).errno(),
        0,
        "error interrupt"
    );
    assert_eq!(
        c.set_irqs(4, trig, 0, 1, &[], &[efd.as_fd()]).errno(),
        0,
        "request interrupt"
    );
    let stats = c.finish();
    assert_eq!(stats.errors, 1, "only the overlapping map: {stats:?}");
}
