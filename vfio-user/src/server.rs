//! One mock function served over one vfio-user connection.
//!
//! [`Function`] wraps a [`MockHca`] with what the client hands over (eventfds for its MSI-X
//! vectors); [`serve`] runs one connection to its end: it reads each message whole (its header,
//! the file descriptors that came with it, then exactly `size - 16` bytes of payload), handles
//! it, and replies unless the client asked for none. Whatever is wrong with a message (too
//! short for its command, too large, an unknown command, a map that overlaps or reaches past
//! its file) gets an error reply with an errno, and the next message is read from the right
//! place: the stream never goes out of step and nothing panics.

use crate::proto::{self, Header, cmd, errno, le32, le64};
use std::io::{self, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex, MutexGuard};
use uhca_hal::Bar;
use uhca_mock::pci::{BAR0_SIZE, CONFIG_SPACE_SIZE};
use uhca_mock::{MapFdError, MockHca, MockPlatform};

/// The eventfds the client gave for the function's interrupts.
#[derive(Debug, Default)]
struct Irqs {
    msix: Vec<Option<OwnedFd>>,
    intx: Option<OwnedFd>,
    /// The error (AER) and request (device removal) eventfds: kept, never signalled (the
    /// model reports neither).
    err: Option<OwnedFd>,
    req: Option<OwnedFd>,
}

/// Signals an eventfd (adds 1 to its counter).
fn signal(fd: &OwnedFd) {
    // A full counter (2^64 - 2 unread signals) is the only way this fails on an eventfd:
    // the client is then signalled already.
    let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
}

/// A mock function as a vfio-user device: its model and the client's interrupt eventfds.
/// Cheap to clone (clones share the device and the eventfds).
#[derive(Clone, Debug)]
pub struct Function {
    hca: MockHca,
    platform: MockPlatform,
    irqs: Arc<Mutex<Irqs>>,
    vectors: u16,
}

impl Function {
    /// Serves `hca`: installs the model's interrupt handler, which signals the eventfd the
    /// client set for the raised MSI-X vector (none set: the interrupt is only counted, as
    /// by a masked vector).
    pub fn new(hca: MockHca) -> Self {
        let mut ctl = [0u8; 2];
        let vectors = match hca.config_read(uhca_mock::pci::CAP_MSIX + 2, &mut ctl) {
            Ok(()) => (u16::from_le_bytes(ctl) & 0x7ff) + 1,
            Err(_) => 0,
        };
        let irqs = Arc::new(Mutex::new(Irqs {
            msix: (0..vectors).map(|_| None).collect(),
            ..Irqs::default()
        }));
        let weak = Arc::downgrade(&irqs);
        hca.set_interrupt_handler(Some(Arc::new(move |vector: u16| {
            if let Some(irqs) = weak.upgrade() {
                let irqs = irqs.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(Some(fd)) = irqs.msix.get(vector as usize) {
                    signal(fd);
                }
            }
        })));
        Function {
            platform: hca.platform(),
            hca,
            irqs,
            vectors,
        }
    }

    /// The model behind the function.
    pub fn hca(&self) -> &MockHca {
        &self.hca
    }

    /// How many MSI-X vectors the function has (its MSI-X capability's table size).
    pub fn msix_vectors(&self) -> u16 {
        self.vectors
    }

    /// How many MSI-X vectors have an eventfd.
    pub fn msix_eventfds(&self) -> usize {
        self.irqs().msix.iter().filter(|f| f.is_some()).count()
    }

    fn irqs(&self) -> MutexGuard<'_, Irqs> {
        self.irqs.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets what a client set up: its DMA maps (unmapped) and its eventfds (closed). The
    /// device state stays, as the specification asks when a client disconnects.
    pub fn client_gone(&self) {
        self.hca.unmap_all_fds();
        let mut irqs = self.irqs();
        irqs.msix.iter_mut().for_each(|f| *f = None);
        irqs.intx = None;
        irqs.err = None;
        irqs.req = None;
    }
}

/// What a connection did, for logs and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages read.
    pub messages: u64,
    /// Messages answered with an error (or that would have been, had they wanted a reply).
    pub errors: u64,
    /// REGION_READ and REGION_WRITE messages.
    pub region_accesses: u64,
    /// DMA maps made.
    pub dma_maps: u64,
    /// DEVICE_RESET messages served.
    pub resets: u64,
}

/// Why a message failed: the errno of the reply, and a word for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The errno the reply carries.
    pub errno: u32,
    /// What was wrong.
    pub why: &'static str,
}

fn refuse(errno: u32, why: &'static str) -> Refusal {
    Refusal { errno, why }
}

/// Serves one client connection until it closes. Returns what it did; an error only when
/// the socket itself fails (a protocol error is answered, never returned).
///
/// `log`: when set, each refused message is printed to standard error.
pub fn serve(stream: UnixStream, f: &Function, log: bool) -> io::Result<Stats> {
    let result = serve_messages(stream, f, log);
    // However the connection ended, what the client set up goes with it.
    f.client_gone();
    result
}

fn serve_messages(mut stream: UnixStream, f: &Function, log: bool) -> io::Result<Stats> {
    let mut stats = Stats::default();
    let mut payload = Vec::new();
    loop {
        let (hdr, fds) = match read_header(&stream)? {
            Some(h) => h,
            None => return Ok(stats),
        };
        stats.messages += 1;
        let size = hdr.size as usize;
        let outcome = if size < proto::HEADER_SIZE {
            // Nothing more of this message is on the stream (its size cannot be below the
            // header's); the next header follows.
            Err(refuse(errno::EINVAL, "message size below the header's"))
        } else if size > proto::MAX_MESSAGE {
            discard(&mut stream, (size - proto::HEADER_SIZE) as u64)?;
            Err(refuse(
                errno::E2BIG,
                "message larger than max_data_xfer_size allows",
            ))
        } else {
            payload.resize(size - proto::HEADER_SIZE, 0);
            stream.read_exact(&mut payload)?;
            if hdr.is_reply() {
                Err(refuse(errno::EINVAL, "a reply, but no command was sent"))
            } else {
                handle(f, &hdr, &payload, fds, &mut stats)
            }
        };
        if let Err(r) = &outcome {
            stats.errors += 1;
            if log {
                eprintln!(
                    "vfio-user: command {} (id {}, {} bytes) refused: {} (errno {})",
                    hdr.command, hdr.id, hdr.size, r.why, r.errno
                );
            }
        }
        if hdr.no_reply() || hdr.is_reply() {
            continue;
        }
        let (flags, error, body) = match outcome {
            Ok(body) => (proto::FLAG_TYPE_REPLY, 0, body),
            Err(r) => (
                proto::FLAG_TYPE_REPLY | proto::FLAG_ERROR,
                r.errno,
                Vec::new(),
            ),
        };
        let reply = Header {
            id: hdr.id,
            command: hdr.command,
            size: (proto::HEADER_SIZE + body.len()) as u32,
            flags,
            error,
        };
        let mut out = Vec::with_capacity(proto::HEADER_SIZE + body.len());
        out.extend_from_slice(&reply.encode());
        out.extend_from_slice(&body);
        stream.write_all(&out)?;
    }
}

/// Reads the next header and the file descriptors sent with it; `None` at the end of the
/// stream (between messages).
fn read_header(stream: &UnixStream) -> io::Result<Option<(Header, Vec<OwnedFd>)>> {
    let mut buf = [0u8; proto::HEADER_SIZE];
    let mut got = 0;
    let mut fds = Vec::new();
    while got < buf.len() {
        let mut space =
            [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(proto::MAX_MSG_FDS))];
        let mut anc = rustix::net::RecvAncillaryBuffer::new(&mut space);
        let r = rustix::net::recvmsg(
            stream.as_fd(),
            &mut [IoSliceMut::new(&mut buf[got..])],
            &mut anc,
            rustix::net::RecvFlags::CMSG_CLOEXEC,
        );
        let r = match r {
            Ok(r) => r,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        for m in anc.drain() {
            if let rustix::net::RecvAncillaryMessage::ScmRights(it) = m {
                fds.extend(it);
            }
        }
        if r.bytes == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the client closed the socket inside a message header",
            ));
        }
        got += r.bytes;
    }
    Ok(Some((Header::decode(&buf), fds)))
}

/// Reads and drops `n` bytes (the payload of a message too large to take), so the next
/// message is read from its start.
fn discard(stream: &mut UnixStream, n: u64) -> io::Result<()> {
    let copied = io::copy(&mut stream.take(n), &mut io::sink())?;
    if copied < n {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the client closed the socket inside a message",
        ));
    }
    Ok(())
}

type Outcome = Result<Vec<u8>, Refusal>;

fn need(payload: &[u8], n: usize) -> Result<(), Refusal> {
    if payload.len() < n {
        Err(refuse(
            errno::EINVAL,
            "payload shorter than the command's structure",
        ))
    } else {
        Ok(())
    }
}

fn no_fds(fds: &[OwnedFd]) -> Result<(), Refusal> {
    if fds.is_empty() {
        Ok(())
    } else {
        Err(refuse(
            errno::EINVAL,
            "file descriptors sent with a command that takes none",
        ))
    }
}

/// Handles one command; the file descriptors that came with it are closed when it returns
/// unless the command keeps them.
fn handle(f: &Function, hdr: &Header, p: &[u8], fds: Vec<OwnedFd>, stats: &mut Stats) -> Outcome {
    match hdr.command {
        cmd::VERSION => {
            no_fds(&fds)?;
            version(p)
        }
        cmd::DMA_MAP => {
            let r = dma_map(f, p, fds);
            if r.is_ok() {
                stats.dma_maps += 1;
            }
            r
        }
        cmd::DMA_UNMAP => {
            no_fds(&fds)?;
            dma_unmap(f, p)
        }
        cmd::DEVICE_GET_INFO => {
            no_fds(&fds)?;
            need(p, proto::DEVICE_INFO_SIZE)?;
            let mut r = Vec::with_capacity(proto::DEVICE_INFO_SIZE);
            r.extend_from_slice(&(proto::DEVICE_INFO_SIZE as u32).to_le_bytes());
            r.extend_from_slice(
                &(proto::DEVICE_FLAGS_RESET | proto::DEVICE_FLAGS_PCI).to_le_bytes(),
            );
            r.extend_from_slice(&proto::PCI_NUM_REGIONS.to_le_bytes());
            r.extend_from_slice(&proto::PCI_NUM_IRQS.to_le_bytes());
            Ok(r)
        }
        cmd::DEVICE_GET_REGION_INFO => {
            no_fds(&fds)?;
            region_info(p)
        }
        cmd::DEVICE_GET_IRQ_INFO => {
            no_fds(&fds)?;
            irq_info(f, p)
        }
        cmd::DEVICE_SET_IRQS => set_irqs(f, p, fds),
        cmd::REGION_READ => {
            no_fds(&fds)?;
            stats.region_accesses += 1;
            region_read(f, p)
        }
        cmd::REGION_WRITE => {
            no_fds(&fds)?;
            stats.region_accesses += 1;
            region_write(f, p)
        }
        cmd::DEVICE_RESET => {
            no_fds(&fds)?;
            f.hca.function_level_reset();
            stats.resets += 1;
            Ok(Vec::new())
        }
        cmd::DEVICE_GET_REGION_IO_FDS | cmd::DEVICE_FEATURE => Err(refuse(
            errno::ENOTSUP,
            "region I/O fds and device features are not offered",
        )),
        _ => Err(refuse(errno::ENOSYS, "unknown command")),
    }
}

/// VERSION: the client proposes major 0 and a minor; the reply takes minor 0 (the base
/// protocol) and the capabilities this server has.
fn version(p: &[u8]) -> Outcome {
    need(p, 4)?;
    let major = u16::from_le_bytes([p[0], p[1]]);
    if major != 0 {
        return Err(refuse(
            errno::ENOTSUP,
            "protocol major version other than 0",
        ));
    }
    let json = &p[4..];
    let text = json.split(|&b| b == 0).next().unwrap_or(&[]);
    if std::str::from_utf8(text).is_err() {
        return Err(refuse(errno::EINVAL, "capabilities are not UTF-8"));
    }
    let caps = format!(
        "{{\"capabilities\":{{\"max_msg_fds\":{},\"max_data_xfer_size\":{},\"pgsizes\":4096,\"max_dma_maps\":65535}}}}",
        proto::MAX_MSG_FDS,
        proto::MAX_DATA_XFER
    );
    let mut r = Vec::with_capacity(4 + caps.len() + 1);
    r.extend_from_slice(&0u16.to_le_bytes());
    r.extend_from_slice(&0u16.to_le_bytes());
    r.extend_from_slice(caps.as_bytes());
    r.push(0);
    Ok(r)
}

fn dma_map(f: &Function, p: &[u8], mut fds: Vec<OwnedFd>) -> Outcome {
    need(p, proto::DMA_MAP_SIZE)?;
    let flags = le32(p, 4);
    let offset = le64(p, 8);
    let iova = le64(p, 16);
    let size = le64(p, 24);
    if flags & !(proto::DMA_MAP_FLAG_READ | proto::DMA_MAP_FLAG_WRITE) != 0 {
        return Err(refuse(errno::EINVAL, "unknown DMA_MAP flags"));
    }
    let map_err = |e| match e {
        MapFdError::Overlap => refuse(errno::EEXIST, "DMA map overlaps a live map"),
        MapFdError::OutsideFile => refuse(errno::EINVAL, "DMA map reaches past its file"),
        MapFdError::Invalid => refuse(errno::EINVAL, "DMA map size or alignment invalid"),
        MapFdError::Host(_) => refuse(errno::EINVAL, "the file cannot be mapped"),
    };
    if fds.is_empty() {
        // Memory the client cannot share (QEMU maps its ROMs and device memory this way).
        // The device could reach it only through DMA_READ/DMA_WRITE messages, which would
        // stall while the guest's CPU waits on a BAR read: the range is recorded, and a
        // device access to it is an IOMMU fault.
        f.hca.map_unbacked(iova, size).map_err(map_err)?;
        return Ok(Vec::new());
    }
    if fds.len() != 1 {
        return Err(refuse(
            errno::EBADF,
            "DMA_MAP with more than one file descriptor",
        ));
    }
    let fd = fds.remove(0);
    let writable = flags & proto::DMA_MAP_FLAG_WRITE != 0;
    f.hca
        .map_fd(iova, fd.as_fd(), offset, size, writable)
        .map_err(map_err)?;
    // The mapping holds its own reference to the file; the descriptor closes here.
    Ok(Vec::new())
}

fn dma_unmap(f: &Function, p: &[u8]) -> Outcome {
    need(p, proto::DMA_UNMAP_SIZE)?;
    let flags = le32(p, 4);
    let iova = le64(p, 8);
    let size = le64(p, 16);
    if flags & !proto::DMA_UNMAP_FLAG_ALL != 0 {
        return Err(refuse(errno::EINVAL, "unknown DMA_UNMAP flags"));
    }
    if flags & proto::DMA_UNMAP_FLAG_ALL != 0 {
        if iova != 0 || size != 0 {
            return Err(refuse(
                errno::EINVAL,
                "DMA_UNMAP of all with an address or size",
            ));
        }
        f.hca.unmap_all_fds();
    } else {
        // As Linux VFIO (type1 v2) unmaps, which QEMU's vIOMMU relies on when it
        // invalidates whole ranges: every map inside the range goes, none is not an error,
        // a range that cuts a map is refused.
        f.hca
            .unmap_fd(iova, size)
            .map_err(|_| refuse(errno::EINVAL, "DMA_UNMAP range cuts a map"))?;
    }
    Ok(p[..proto::DMA_UNMAP_SIZE].to_vec())
}

fn region_info(p: &[u8]) -> Outcome {
    need(p, proto::REGION_INFO_SIZE)?;
    let index = le32(p, 8);
    let (flags, size) = match index {
        proto::PCI_BAR0_REGION_INDEX => (
            proto::REGION_FLAG_READ | proto::REGION_FLAG_WRITE,
            BAR0_SIZE as u64,
        ),
        proto::PCI_CONFIG_REGION_INDEX => (
            proto::REGION_FLAG_READ | proto::REGION_FLAG_WRITE,
            CONFIG_SPACE_SIZE as u64,
        ),
        i if i < proto::PCI_NUM_REGIONS => (0, 0),
        _ => return Err(refuse(errno::EINVAL, "no such region")),
    };
    let mut r = Vec::with_capacity(proto::REGION_INFO_SIZE);
    r.extend_from_slice(&(proto::REGION_INFO_SIZE as u32).to_le_bytes());
    r.extend_from_slice(&flags.to_le_bytes());
    r.extend_from_slice(&index.to_le_bytes());
    r.extend_from_slice(&0u32.to_le_bytes()); // cap_offset: no capabilities (no mmap)
    r.extend_from_slice(&size.to_le_bytes());
    r.extend_from_slice(&0u64.to_le_bytes()); // offset
    Ok(r)
}

fn irq_info(f: &Function, p: &[u8]) -> Outcome {
    need(p, proto::IRQ_INFO_SIZE)?;
    let index = le32(p, 8);
    let (flags, count) = match index {
        proto::PCI_INTX_IRQ_INDEX => (
            proto::IRQ_INFO_EVENTFD | proto::IRQ_INFO_MASKABLE | proto::IRQ_INFO_AUTOMASKED,
            1,
        ),
        proto::PCI_MSIX_IRQ_INDEX => (
            proto::IRQ_INFO_EVENTFD | proto::IRQ_INFO_NORESIZE,
            f.vectors as u32,
        ),
        // A PCI Express function has one error and one request interrupt, as Linux's
        // vfio-pci reports them; QEMU sets an eventfd on each ("error recovery").
        proto::PCI_ERR_IRQ_INDEX | proto::PCI_REQ_IRQ_INDEX => (proto::IRQ_INFO_EVENTFD, 1),
        i if i < proto::PCI_NUM_IRQS => (0, 0),
        _ => return Err(refuse(errno::EINVAL, "no such interrupt index")),
    };
    let mut r = Vec::with_capacity(proto::IRQ_INFO_SIZE);
    r.extend_from_slice(&(proto::IRQ_INFO_SIZE as u32).to_le_bytes());
    r.extend_from_slice(&flags.to_le_bytes());
    r.extend_from_slice(&index.to_le_bytes());
    r.extend_from_slice(&count.to_le_bytes());
    Ok(r)
}

fn set_irqs(f: &Function, p: &[u8], fds: Vec<OwnedFd>) -> Outcome {
    need(p, proto::IRQ_SET_SIZE)?;
    let flags = le32(p, 4);
    let index = le32(p, 8);
    let start = le32(p, 12);
    let count = le32(p, 16);
    let data =
        flags & (proto::IRQ_SET_DATA_NONE | proto::IRQ_SET_DATA_BOOL | proto::IRQ_SET_DATA_EVENTFD);
    let action = flags
        & (proto::IRQ_SET_ACTION_MASK
            | proto::IRQ_SET_ACTION_UNMASK
            | proto::IRQ_SET_ACTION_TRIGGER);
    if flags & !(data | action) != 0 || data.count_ones() != 1 || action.count_ones() != 1 {
        return Err(refuse(
            errno::EINVAL,
            "SET_IRQS needs one data and one action flag",
        ));
    }
    if data != proto::IRQ_SET_DATA_EVENTFD {
        no_fds(&fds)?;
    }
    let n = match index {
        proto::PCI_INTX_IRQ_INDEX | proto::PCI_ERR_IRQ_INDEX | proto::PCI_REQ_IRQ_INDEX => 1u32,
        proto::PCI_MSIX_IRQ_INDEX => f.vectors as u32,
        _ => return Err(refuse(errno::EINVAL, "interrupt index without interrupts")),
    };
    let disable_all =
        data == proto::IRQ_SET_DATA_NONE && action == proto::IRQ_SET_ACTION_TRIGGER && count == 0;
    if !disable_all && start.checked_add(count).is_none_or(|e| e > n) {
        return Err(refuse(
            errno::EINVAL,
            "SET_IRQS range outside the interrupt index",
        ));
    }
    let mut irqs = f.irqs();
    if action != proto::IRQ_SET_ACTION_TRIGGER {
        // Masking: MSI-X masking is the client's (QEMU emulates the table); INTx is never
        // raised by this device. Accepted, nothing to do.
        if index != proto::PCI_INTX_IRQ_INDEX {
            return Err(refuse(errno::EINVAL, "MSI-X vectors are not maskable here"));
        }
        return Ok(Vec::new());
    }
    match data {
        _ if disable_all => {
            for i in 0..n {
                if let Some(s) = slot(&mut irqs, index, i) {
                    *s = None;
                }
            }
        }
        proto::IRQ_SET_DATA_EVENTFD => {
            if !fds.is_empty() && fds.len() != count as usize {
                return Err(refuse(
                    errno::EBADF,
                    "SET_IRQS eventfd count differs from count",
                ));
            }
            if fds.is_empty() {
                for i in start..start + count {
                    if let Some(s) = slot(&mut irqs, index, i) {
                        *s = None;
                    }
                }
            } else {
                for (i, fd) in (start..start + count).zip(fds) {
                    if let Some(s) = slot(&mut irqs, index, i) {
                        *s = Some(fd);
                    }
                }
            }
        }
        proto::IRQ_SET_DATA_BOOL => {
            need(p, proto::IRQ_SET_SIZE + count as usize)?;
            for i in 0..count {
                if p[proto::IRQ_SET_SIZE + i as usize] != 0
                    && let Some(Some(fd)) = slot(&mut irqs, index, start + i)
                {
                    signal(fd);
                }
            }
        }
        _ => {
            for i in start..start + count {
                if let Some(Some(fd)) = slot(&mut irqs, index, i) {
                    signal(fd);
                }
            }
        }
    }
    Ok(Vec::new())
}

/// The eventfd slot of interrupt `i` of `index` (INTx, MSI-X, error or request).
fn slot(irqs: &mut Irqs, index: u32, i: u32) -> Option<&mut Option<OwnedFd>> {
    match index {
        proto::PCI_INTX_IRQ_INDEX => (i == 0).then_some(&mut irqs.intx),
        proto::PCI_ERR_IRQ_INDEX => (i == 0).then_some(&mut irqs.err),
        proto::PCI_REQ_IRQ_INDEX => (i == 0).then_some(&mut irqs.req),
        _ => irqs.msix.get_mut(i as usize),
    }
}

/// The (offset, region, count) of a region access, checked against the region's size.
fn access(p: &[u8]) -> Result<(u64, u32, usize), Refusal> {
    need(p, proto::REGION_ACCESS_SIZE)?;
    let offset = le64(p, 0);
    let region = le32(p, 8);
    let count = le32(p, 12) as usize;
    let size = match region {
        proto::PCI_BAR0_REGION_INDEX => BAR0_SIZE,
        proto::PCI_CONFIG_REGION_INDEX => CONFIG_SPACE_SIZE,
        _ => return Err(refuse(errno::EINVAL, "region without accesses")),
    };
    if count == 0 || count > proto::MAX_DATA_XFER {
        return Err(refuse(
            errno::EINVAL,
            "access count zero or above max_data_xfer_size",
        ));
    }
    if offset
        .checked_add(count as u64)
        .is_none_or(|e| e > size as u64)
    {
        return Err(refuse(errno::EINVAL, "access outside the region"));
    }
    Ok((offset, region, count))
}

fn region_read(f: &Function, p: &[u8]) -> Outcome {
    let (offset, region, count) = access(p)?;
    let mut r = vec![0u8; proto::REGION_ACCESS_SIZE + count];
    r[..proto::REGION_ACCESS_SIZE].copy_from_slice(&p[..proto::REGION_ACCESS_SIZE]);
    let data = &mut r[proto::REGION_ACCESS_SIZE..];
    if region == proto::PCI_CONFIG_REGION_INDEX {
        f.hca
            .config_read(offset as u16, data)
            .map_err(|_| refuse(errno::EINVAL, "configuration read out of range"))?;
    } else {
        bar_read(&f.platform, offset as usize, data)?;
    }
    Ok(r)
}

fn region_write(f: &Function, p: &[u8]) -> Outcome {
    let (offset, region, count) = access(p)?;
    if p.len() != proto::REGION_ACCESS_SIZE + count {
        return Err(refuse(
            errno::EINVAL,
            "REGION_WRITE count differs from its data",
        ));
    }
    let data = &p[proto::REGION_ACCESS_SIZE..];
    if region == proto::PCI_CONFIG_REGION_INDEX {
        f.hca
            .config_write(offset as u16, data)
            .map_err(|_| refuse(errno::EINVAL, "configuration write out of range"))?;
    } else {
        bar_write(&f.platform, offset as usize, data)?;
    }
    Ok(p[..proto::REGION_ACCESS_SIZE].to_vec())
}

/// A BAR0 read as the model takes them: one 8-byte access, 4-byte accesses, or a byte or
/// two of one 4-byte access; each naturally aligned. (The caller checked the range.)
fn bar_read(bar: &MockPlatform, off: usize, data: &mut [u8]) -> Result<(), Refusal> {
    let n = data.len();
    if n == 8 && off.is_multiple_of(8) {
        data.copy_from_slice(&bar.read64(off).to_ne_bytes());
    } else if n.is_multiple_of(4) && off.is_multiple_of(4) {
        for (i, c) in data.chunks_mut(4).enumerate() {
            c.copy_from_slice(&bar.read32(off + 4 * i).to_ne_bytes());
        }
    } else if (n == 1 || n == 2) && off.is_multiple_of(n) {
        let base = off & !3;
        let v = bar.read32(base).to_ne_bytes();
        data.copy_from_slice(&v[off - base..off - base + n]);
    } else {
        return Err(refuse(
            errno::EINVAL,
            "BAR0 read of an unaligned or odd width",
        ));
    }
    Ok(())
}

/// A BAR0 write: one 8-byte access (a doorbell), or 4-byte accesses (registers), naturally
/// aligned. The mlx5 registers take no narrower writes.
fn bar_write(bar: &MockPlatform, off: usize, data: &[u8]) -> Result<(), Refusal> {
    let n = data.len();
    if n == 8 && off.is_multiple_of(8) {
        let mut v = [0u8; 8];
        v.copy_from_slice(data);
        bar.write64(off, u64::from_ne_bytes(v));
    } else if n.is_multiple_of(4) && off.is_multiple_of(4) {
        for (i, c) in data.chunks(4).enumerate() {
            bar.write32(off + 4 * i, u32::from_ne_bytes([c[0], c[1], c[2], c[3]]));
        }
    } else {
        return Err(refuse(
            errno::EINVAL,
            "BAR0 write of an unaligned or odd width",
        ));
    }
    Ok(())
}
