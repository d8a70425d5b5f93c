//! A vfio-user client for the tests, speaking the protocol as QEMU 11.1's `vfio-user-pci`
//! does (VERSION with JSON capabilities, DMA_MAP of guest RAM with its memfd, posted region
//! writes, SET_IRQS with eventfds), and a [`uhca_hal::Platform`] over it
//! ([`SocketPlatform`]) so the real driver can be brought up through the socket: BAR0 and
//! configuration accesses become messages, DMA memory comes from the memfd the client
//! mapped, and the device reaches it through the server's map of the same file.
//!
//! The `unsafe` here is the client side's (its own mmap of the memfd and the platform
//! traits), as a VMM's would be; the server and the driver have none of it.

#![allow(dead_code)]

use std::io::{IoSlice, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use uhca_hal::{Bar, Clock, ConfigError, Dma, DmaError, DmaRegion, PciConfig};
use uhca_mock::{ClockMode, MockConfig, MockHca};
use uhca_vfio_user::proto::{self, Header, cmd};
use uhca_vfio_user::{Function, Stats};

/// Where the client maps its memfd for the device (a guest-physical address as QEMU would
/// give it, unrelated to the server's addresses).
pub const RAM_IOVA: u64 = 0x4000_0000;
/// Size of the client's "guest RAM".
pub const RAM_SIZE: usize = 64 << 20;

/// A reply: its header and payload.
#[derive(Debug)]
pub struct Reply {
    pub hdr: Header,
    pub payload: Vec<u8>,
}

impl Reply {
    /// The errno of an error reply, 0 for success.
    pub fn errno(&self) -> u32 {
        if self.hdr.flags & proto::FLAG_ERROR != 0 {
            self.hdr.error
        } else {
            0
        }
    }
}

/// A mock function with a real-time clock, as the server binary builds them.
pub fn realtime_hca() -> MockHca {
    MockHca::new(MockConfig {
        clock: ClockMode::RealTime,
        init_delay_us: 2_000,
        ..MockConfig::ethernet()
    })
}

/// The client end of a connection, with the server running on a thread.
pub struct Client {
    stream: UnixStream,
    next_id: u16,
    server: Option<JoinHandle<std::io::Result<Stats>>>,
}

impl Client {
    /// Connects to a server serving `f` on a socket pair.
    pub fn start(f: &Function) -> Client {
        let (ours, theirs) = UnixStream::pair().expect("socket pair");
        ours.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let f = f.clone();
        let server = std::thread::spawn(move || uhca_vfio_user::serve(theirs, &f, false));
        Client {
            stream: ours,
            next_id: 1,
            server: Some(server),
        }
    }

    /// Sends raw bytes, the first chunk with `fds` attached.
    pub fn send_raw(&mut self, bytes: &[u8], fds: &[BorrowedFd<'_>]) {
        let first = bytes.len().min(4096);
        let mut space = [MaybeUninit::<u8>::uninit(); rustix::cmsg_space!(ScmRights(16))];
        let mut anc = rustix::net::SendAncillaryBuffer::new(&mut space);
        if !fds.is_empty() {
            assert!(anc.push(rustix::net::SendAncillaryMessage::ScmRights(fds)));
        }
        let n = rustix::net::sendmsg(
            self.stream.as_fd(),
            &[IoSlice::new(&bytes[..first])],
            &mut anc,
            rustix::net::SendFlags::empty(),
        )
        .expect("sendmsg");
        self.stream.write_all(&bytes[n..]).expect("send the rest");
    }

    /// Sends a command and returns its id.
    pub fn post(
        &mut self,
        command: u16,
        payload: &[u8],
        fds: &[BorrowedFd<'_>],
        no_reply: bool,
    ) -> u16 {
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let hdr = Header {
            id,
            command,
            size: (proto::HEADER_SIZE + payload.len()) as u32,
            flags: if no_reply { proto::FLAG_NO_REPLY } else { 0 },
            error: 0,
        };
        let mut m = hdr.encode().to_vec();
        m.extend_from_slice(payload);
        self.send_raw(&m, fds);
        id
    }

    /// Reads one reply.
    pub fn reply(&mut self) -> Reply {
        let mut h = [0u8; proto::HEADER_SIZE];
        self.stream.read_exact(&mut h).expect("reply header");
        let hdr = Header::decode(&h);
        assert!(hdr.size as usize >= proto::HEADER_SIZE, "{hdr:?}");
        let mut payload = vec![0u8; hdr.size as usize - proto::HEADER_SIZE];
        self.stream.read_exact(&mut payload).expect("reply payload");
        assert!(hdr.is_reply(), "{hdr:?}");
        Reply { hdr, payload }
    }

    /// Sends a command and waits for its reply (checking it answers this command).
    pub fn call(&mut self, command: u16, payload: &[u8], fds: &[BorrowedFd<'_>]) -> Reply {
        let id = self.post(command, payload, fds, false);
        let r = self.reply();
        assert_eq!(
            (r.hdr.id, r.hdr.command),
            (id, command),
            "reply out of step"
        );
        r
    }

    /// VERSION as QEMU 11.1 proposes it.
    pub fn version(&mut self) -> Reply {
        let caps = br#"{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535,"write_multiple":true}}"#;
        let mut p = vec![0, 0, 0, 0];
        p.extend_from_slice(caps);
        p.push(0);
        self.call(cmd::VERSION, &p, &[])
    }

    /// DMA_MAP of `size` bytes of `fd` from `offset` at `iova`.
    pub fn dma_map(
        &mut self,
        fd: Option<BorrowedFd<'_>>,
        offset: u64,
        iova: u64,
        size: u64,
        flags: u32,
    ) -> Reply {
        let mut p = Vec::new();
        p.extend_from_slice(&32u32.to_le_bytes());
        p.extend_from_slice(&flags.to_le_bytes());
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(&iova.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        match fd {
            Some(fd) => self.call(cmd::DMA_MAP, &p, &[fd]),
            None => self.call(cmd::DMA_MAP, &p, &[]),
        }
    }

    /// DMA_UNMAP.
    pub fn dma_unmap(&mut self, iova: u64, size: u64, flags: u32) -> Reply {
        let mut p = Vec::new();
        p.extend_from_slice(&24u32.to_le_bytes());
        p.extend_from_slice(&flags.to_le_bytes());
        p.extend_from_slice(&iova.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        self.call(cmd::DMA_UNMAP, &p, &[])
    }

    /// A region read; the data, or the errno.
    pub fn region_read(&mut self, region: u32, offset: u64, count: u32) -> Result<Vec<u8>, u32> {
        let mut p = Vec::new();
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(&region.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
        let r = self.call(cmd::REGION_READ, &p, &[]);
        match r.errno() {
            0 => {
                assert_eq!(&r.payload[..16], &p[..], "the reply echoes the access");
                Ok(r.payload[16..].to_vec())
            }
            e => Err(e),
        }
    }

    /// A region write, posted (no reply) as QEMU sends them, or waited for.
    pub fn region_write(&mut self, region: u32, offset: u64, data: &[u8], posted: bool) -> u32 {
        let mut p = Vec::new();
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(&region.to_le_bytes());
        p.extend_from_slice(&(data.len() as u32).to_le_bytes());
        p.extend_from_slice(data);
        if posted {
            self.post(cmd::REGION_WRITE, &p, &[], true);
            0
        } else {
            self.call(cmd::REGION_WRITE, &p, &[]).errno()
        }
    }

    /// SET_IRQS of eventfds for `count` vectors from `start` of `index`.
    pub fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        data: &[u8],
        fds: &[BorrowedFd<'_>],
    ) -> Reply {
        let mut p = Vec::new();
        p.extend_from_slice(&((20 + data.len()) as u32).to_le_bytes());
        p.extend_from_slice(&flags.to_le_bytes());
        p.extend_from_slice(&index.to_le_bytes());
        p.extend_from_slice(&start.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
        p.extend_from_slice(data);
        self.call(cmd::DEVICE_SET_IRQS, &p, fds)
    }

    /// Closes the connection and returns what the server did.
    pub fn finish(mut self) -> Stats {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        self.server
            .take()
            .unwrap()
            .join()
            .expect("the server thread did not panic")
            .expect("the server ended cleanly")
    }
}

/// The client's "guest RAM": a memfd, mapped in this process too.
pub struct Ram {
    pub fd: OwnedFd,
    base: NonNull<u8>,
    len: usize,
    next: Mutex<usize>,
}

// SAFETY: `base` points to a shared mapping owned by this value; it is only accessed with
// volatile accesses by the driver and the device, never through references.
unsafe impl Send for Ram {}
// SAFETY: as above; the bump allocator is behind a mutex.
unsafe impl Sync for Ram {}

impl Ram {
    /// A memfd of `len` bytes, mapped.
    pub fn new(len: usize) -> Ram {
        let fd = rustix::fs::memfd_create("uhca-test-guest-ram", rustix::fs::MemfdFlags::CLOEXEC)
            .expect("memfd_create");
        rustix::fs::ftruncate(&fd, len as u64).expect("ftruncate");
        // SAFETY: a new shared mapping of the whole file at an address the kernel picks; it
        // replaces nothing and is unmapped only in Drop.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                &fd,
                0,
            )
        }
        .expect("mmap");
        Ram {
            fd,
            base: NonNull::new(p.cast()).unwrap(),
            len,
            next: Mutex::new(0),
        }
    }

    /// Reads bytes at `offset` of the file, through the client's mapping.
    pub fn read(&self, offset: usize, buf: &mut [u8]) {
        assert!(offset + buf.len() <= self.len);
        for (i, b) in buf.iter_mut().enumerate() {
            // SAFETY: in bounds (checked above); a volatile byte read of shared memory.
            *b = unsafe { self.base.as_ptr().add(offset + i).read_volatile() };
        }
    }

    /// Writes bytes at `offset` of the file, through the client's mapping.
    pub fn write(&self, offset: usize, data: &[u8]) {
        assert!(offset + data.len() <= self.len);
        for (i, &b) in data.iter().enumerate() {
            // SAFETY: in bounds (checked above); a volatile byte write of shared memory.
            unsafe { self.base.as_ptr().add(offset + i).write_volatile(b) };
        }
    }
}

impl Drop for Ram {
    fn drop(&mut self) {
        // SAFETY: the range mmap returned in `new`, unmapped once; the platform that handed
        // out pointers into it holds an Arc to this value, so none is in use any more.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

struct Inner {
    client: Mutex<Client>,
    ram: Arc<Ram>,
    start: Instant,
}

/// The driver's platform over a vfio-user connection: what a VMM's guest does with a
/// vfio-user device, without the VM. Cheap to clone.
#[derive(Clone)]
pub struct SocketPlatform {
    inner: Arc<Inner>,
}

impl SocketPlatform {
    /// A platform over `client`, whose DMA memory is `ram` mapped at [`RAM_IOVA`].
    pub fn new(client: Client, ram: Arc<Ram>) -> Self {
        SocketPlatform {
            inner: Arc::new(Inner {
                client: Mutex::new(client),
                ram,
                start: Instant::now(),
            }),
        }
    }

    /// The connection, for messages of the test's own.
    pub fn client(&self) -> std::sync::MutexGuard<'_, Client> {
        self.inner.client.lock().unwrap()
    }

    fn bar_read(&self, offset: usize, n: u32) -> Vec<u8> {
        assert!(
            offset.is_multiple_of(n as usize) && offset + n as usize <= uhca_mock::pci::BAR0_SIZE
        );
        self.client()
            .region_read(proto::PCI_BAR0_REGION_INDEX, offset as u64, n)
            .expect("BAR0 read")
    }

    fn bar_write(&self, offset: usize, data: &[u8]) {
        assert!(
            offset.is_multiple_of(data.len()) && offset + data.len() <= uhca_mock::pci::BAR0_SIZE
        );
        self.client()
            .region_write(proto::PCI_BAR0_REGION_INDEX, offset as u64, data, true);
    }
}

// SAFETY: every access is one REGION_READ/WRITE message of exactly the access's width, in
// order on one socket under a mutex (never torn or merged); no reference to device memory
// exists; misaligned or out-of-bounds offsets panic in the asserts before any message.
unsafe impl Bar for SocketPlatform {
    fn bar_len(&self) -> usize {
        uhca_mock::pci::BAR0_SIZE
    }
    fn read32(&self, offset: usize) -> u32 {
        let b = self.bar_read(offset, 4);
        u32::from_ne_bytes([b[0], b[1], b[2], b[3]])
    }
    fn write32(&self, offset: usize, value: u32) {
        self.bar_write(offset, &value.to_ne_bytes());
    }
    fn read64(&self, offset: usize) -> u64 {
        let b = self.bar_read(offset, 8);
        u64::from_ne_bytes(b.try_into().unwrap())
    }
    fn write64(&self, offset: usize, value: u64) {
        self.bar_write(offset, &value.to_ne_bytes());
    }
}

// SAFETY: allocations are disjoint ranges of the memfd mapping (a bump allocator that never
// reuses memory, so freed ranges are never handed out again), zero because the file starts
// zeroed and nothing reuses it; the IOVA is RAM_IOVA plus the same offset, which the server
// maps to the same file bytes; the mapping lives as long as any clone of the platform.
unsafe impl Dma for SocketPlatform {
    fn alloc_coherent(&self, len: usize, align: usize) -> Result<DmaRegion, DmaError> {
        if len == 0 || !align.is_power_of_two() {
            return Err(DmaError::InvalidRequest);
        }
        let ram = &self.inner.ram;
        let mut next = ram.next.lock().unwrap();
        let off = next.next_multiple_of(align.max(4096));
        if off + len > ram.len {
            return Err(DmaError::OutOfMemory);
        }
        *next = off + len;
        // SAFETY: `off + len <= ram.len`, inside the mapping.
        let cpu = unsafe { ram.base.add(off) };
        Ok(DmaRegion {
            cpu,
            iova: RAM_IOVA + off as u64,
            len,
        })
    }

    unsafe fn free_coherent(&self, _region: DmaRegion) {}

    unsafe fn map(&self, cpu: NonNull<u8>, len: usize) -> Result<u64, DmaError> {
        // Only memory of the shared file is reachable by the device.
        let ram = &self.inner.ram;
        let off = (cpu.as_ptr() as usize).wrapping_sub(ram.base.as_ptr() as usize);
        if off < ram.len && off + len <= ram.len {
            Ok(RAM_IOVA + off as u64)
        } else {
            Err(DmaError::MappingFailed(14))
        }
    }

    unsafe fn unmap(&self, _iova: u64, _len: usize) -> Result<(), DmaError> {
        Ok(())
    }
}

impl PciConfig for SocketPlatform {
    fn config_read8(&self, offset: u16) -> Result<u8, ConfigError> {
        let b = self
            .client()
            .region_read(proto::PCI_CONFIG_REGION_INDEX, offset as u64, 1)
            .map_err(|e| ConfigError::Io(e as i32))?;
        Ok(b[0])
    }
    fn config_read16(&self, offset: u16) -> Result<u16, ConfigError> {
        let b = self
            .client()
            .region_read(proto::PCI_CONFIG_REGION_INDEX, offset as u64, 2)
            .map_err(|e| ConfigError::Io(e as i32))?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn config_read32(&self, offset: u16) -> Result<u32, ConfigError> {
        let b = self
            .client()
            .region_read(proto::PCI_CONFIG_REGION_INDEX, offset as u64, 4)
            .map_err(|e| ConfigError::Io(e as i32))?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn config_write16(&self, offset: u16, value: u16) -> Result<(), ConfigError> {
        match self.client().region_write(
            proto::PCI_CONFIG_REGION_INDEX,
            offset as u64,
            &value.to_le_bytes(),
            false,
        ) {
            0 => Ok(()),
            e => Err(ConfigError::Io(e as i32)),
        }
    }
    fn config_write32(&self, offset: u16, value: u32) -> Result<(), ConfigError> {
        match self.client().region_write(
            proto::PCI_CONFIG_REGION_INDEX,
            offset as u64,
            &value.to_le_bytes(),
            false,
        ) {
            0 => Ok(()),
            e => Err(ConfigError::Io(e as i32)),
        }
    }
}

// SAFETY: host memory from the global allocator (the trait's default bodies);
// memory never given to the server.
unsafe impl uhca_hal::HostMem for SocketPlatform {}

impl Clock for SocketPlatform {
    fn now_ns(&self) -> u64 {
        self.inner.start.elapsed().as_nanos() as u64
    }
    fn delay_us(&self, us: u32) {
        std::thread::sleep(Duration::from_micros(us as u64));
    }
}

/// A non-blocking eventfd.
pub fn eventfd() -> OwnedFd {
    rustix::event::eventfd(
        0,
        rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK,
    )
    .expect("eventfd")
}

/// Waits up to `timeout` for `fd` to be signalled; returns the counter it read (0: none).
pub fn wait_eventfd(fd: &OwnedFd, timeout: Duration) -> u64 {
    let end = Instant::now() + timeout;
    loop {
        let mut b = [0u8; 8];
        match rustix::io::read(fd, &mut b) {
            Ok(8) => return u64::from_ne_bytes(b),
            Ok(_) => return 0,
            Err(rustix::io::Errno::AGAIN) => {}
            Err(e) => panic!("eventfd read: {e}"),
        }
        if Instant::now() >= end {
            return 0;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}
