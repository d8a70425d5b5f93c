//! The devices and their object tables, without the C ABI: bring-up on first open, the
//! queries the verbs answer from, and PDs and CQs by handle.

use std::collections::HashMap;
use std::fmt;
use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use uhca_driver::verbs::{Cq, GidEntry, Pd, PortAttr, Srq, SrqInitAttr, UserMr};
use uhca_driver::{Hca, HcaConfig};
use uhca_fwif::consts::AccessFlags;
use uhca_hal::HostBuf;
use uhca_hal::{PciConfig, Platform};
use uhca_mock::fabric::PumpHandle;
use uhca_mock::{Fabric, MockConfig, MockHca};

use crate::config::{DeviceKind, DeviceSpec};
use crate::platform::DevPlatform;
use crate::wake::{Dispatcher, Kicker, Kind, Wakers};

/// A verb's failure: the errno it returns (or sets) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerbsError {
    /// The errno value (`libc::EINVAL`, ...).
    pub errno: i32,
    /// What went wrong.
    pub msg: String,
}

impl VerbsError {
    /// A failure with `errno`.
    pub fn new(errno: i32, msg: impl Into<String>) -> Self {
        Self {
            errno,
            msg: msg.into(),
        }
    }

    pub(crate) fn driver(what: &str, e: impl fmt::Debug) -> Self {
        Self::new(libc::EIO, format!("{what}: {e:?}"))
    }
}

impl fmt::Display for VerbsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (errno {})", self.msg, self.errno)
    }
}

impl std::error::Error for VerbsError {}

/// A result of a verb.
pub type VResult<T> = Result<T, VerbsError>;

pub(crate) fn io_errno(e: std::io::Error) -> VerbsError {
    let errno = if e.kind() == ErrorKind::WouldBlock {
        libc::EAGAIN
    } else {
        e.raw_os_error().unwrap_or(libc::EIO)
    };
    VerbsError::new(errno, format!("completion channel: {e}"))
}

/// What `ibv_query_device` reports, gathered from the driver.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Firmware version.
    pub fw_version: (u16, u16, u16),
    /// Node GUID (host order).
    pub node_guid: u64,
    /// System image GUID (host order).
    pub sys_image_guid: u64,
    /// PCI vendor ID.
    pub vendor_id: u16,
    /// PCI device ID.
    pub vendor_part_id: u16,
    /// The driver's device limits.
    pub caps: uhca_driver::caps::DeviceCaps,
    /// log2 of the largest MR.
    pub log_max_mr_size: u8,
    /// Scatter/gather entries every QP type offers.
    pub max_sge: u32,
}

/// The hardware behind an open device: the driver's HCA and what keeps its platform alive.
pub(crate) struct MockHw {
    pub(crate) hca: Hca<MockP>,
    // Dropped after the HCA.
    backing: Backing,
}

/// What a device's HCA runs on, besides its platform handle.
enum Backing {
    /// `mock:NAME=udp:IP`: the fabric with its UDP uplink and pump. Dropped in this order:
    /// the pump stops, then the model and the fabric go.
    Mock {
        _pump: PumpHandle,
        dev: MockHca,
        _fabric: Fabric,
    },
    /// `vfio:NAME=BDF`: the function's VFIO platform and the thread that turns its MSI-X
    /// interrupts into completion-channel wake-ups.
    Vfio(crate::vfio::VfioHw),
}

/// An open device: the HCA and the objects the application holds on it.
pub struct Open {
    users: usize,
    pub(crate) hw: MockHw,
    next_handle: u32,
    pub(crate) pds: HashMap<u32, Pd<MockP>>,
    pub(crate) cqs: HashMap<u32, Cq<MockP>>,
    /// SRQ handle → the SRQ and its PD's handle.
    pub(crate) srqs: HashMap<u32, (Srq<MockP>, u32)>,
    mrs: HashMap<u32, Registered>,
    pub(crate) qps: HashMap<u32, crate::qp::QpEntry>,
    /// CQ handle → (the completion channel's id, the CQ's tag): the channel's
    /// [`ChannelFd::id`] and an opaque value of the C layer (its pointer), so that an
    /// event names what the application holds.
    channels: HashMap<u32, (usize, usize)>,
    /// Serves the event queue on the device's interrupts (stops when the device closes).
    _dispatcher: Dispatcher,
}

/// Brings the device's sockets in line with the events waiting (see [`crate::wake`]).
fn sync_wakes(o: &Open, wakers: &Wakers, bump: bool) {
    wakers.sync(
        |kind, id| match kind {
            Kind::Async => o.hw.hca.has_async_event(),
            Kind::Cq => o.channels.iter().any(|(h, (ch, _))| {
                *ch == id as usize
                    && o.cqs
                        .get(h)
                        .is_some_and(|c| o.hw.hca.has_completion_event(c.cqn()))
            }),
        },
        bump,
    );
}

impl Open {
    /// A fresh handle.
    pub(crate) fn handle(&mut self) -> u32 {
        let h = self.next_handle;
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        h
    }

    /// The device address of `len` bytes at the application's address `addr` under
    /// `lkey`.
    pub(crate) fn translate(&self, lkey: u32, addr: u64, len: u32) -> VResult<uhca_hal::wq::Sge> {
        let r = self
            .mrs
            .values()
            .find(|r| r.mr.lkey() == lkey)
            .ok_or_else(|| VerbsError::new(libc::EINVAL, format!("no MR has lkey {lkey:#x}")))?;
        let off = addr
            .checked_sub(r.va)
            .filter(|off| off.saturating_add(u64::from(len)) <= r.len as u64)
            .ok_or_else(|| VerbsError::new(libc::EINVAL, "an SGE outside its MR"))?;
        r.mr.sge(off as usize, len as usize)
            .map_err(|e| VerbsError::driver("SGE", e))
    }
}

/// A registration of the application's memory: uhca's key over the range, and the
/// address of its first byte its SGEs and peers name (the key's: the buffer's virtual
/// address, or the `iova` of `ibv_reg_mr_iova2`).
struct Registered {
    mr: UserMr<MockP>,
    pd: u32,
    va: u64,
    len: usize,
}

/// What `ibv_reg_mr` hands back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MrKeys {
    /// The MR's handle.
    pub handle: u32,
    /// The local key.
    pub lkey: u32,
    /// The remote key.
    pub rkey: u32,
}

/// A completion channel's (or a context's `async_fd`'s) readable end: its file descriptor
/// is the channel's `fd`, readable exactly while a completion event of one of its armed
/// CQs (for `async_fd`: an asynchronous event) waits to be taken, so `poll(2)`/`epoll` on
/// it wait for events (`src/wake.rs`).
#[derive(Debug)]
pub struct ChannelFd {
    id: u32,
    pub(crate) reader: UnixStream,
}

impl ChannelFd {
    /// The file descriptor (the channel's `fd`; it stays the channel's).
    pub fn raw_fd(&self) -> i32 {
        std::os::fd::AsRawFd::as_raw_fd(&self.reader)
    }

    /// The channel's id on its device ([`Device::attach_channel`] and
    /// [`Device::take_cq_event`] name the channel by it).
    pub fn id(&self) -> usize {
        self.id as usize
    }
}

/// How long a blocked `ibv_get_cq_event` or `ibv_get_async_event` waits for a wake-up
/// before it serves the event queue again itself.
const EVENT_RECHECK: Duration = Duration::from_millis(100);

/// One configured device.
pub struct Device {
    spec: DeviceSpec,
    open: Arc<Mutex<Option<Open>>>,
    wakers: Arc<Wakers>,
    next_channel: std::sync::atomic::AtomicU32,
}

fn mock_config(ip: Ipv4Addr) -> MockConfig {
    MockConfig {
        port_type: uhca_mock::LinkLayer::Ethernet,
        mac: DeviceSpec::mock_mac(ip),
        ..MockConfig::default()
    }
}

impl Device {
    /// A device for `spec`, not yet brought up.
    pub fn new(spec: DeviceSpec) -> Self {
        Self {
            spec,
            open: Arc::new(Mutex::new(None)),
            wakers: Arc::new(Wakers::default()),
            next_channel: std::sync::atomic::AtomicU32::new(1),
        }
    }

    /// Its configuration.
    pub fn spec(&self) -> &DeviceSpec {
        &self.spec
    }

    /// The node GUID (host order) without bringing the device up: a mock's follows from its
    /// MAC address; a VFIO function's is known only once open (0 before).
    pub fn node_guid(&self) -> u64 {
        match &self.spec.kind {
            DeviceKind::MockUdp { ip } => mock_config(*ip).node_guid(),
            DeviceKind::Vfio { .. } => self
                .with(|o| o.hw.hca.query_port(1).map(|p| p.node_guid).unwrap_or(0))
                .unwrap_or(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Open>> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Opens the device (brings it up on the first open).
    ///
    /// # Errors
    ///
    /// A failed bring-up or UDP bind; for a VFIO function, what stopped the VFIO platform
    /// (not bound to vfio-pci, no IOMMU group, permissions, locked memory: see
    /// [`crate::vfio`]) or an Ethernet port without a RoCEv2 GID (`EADDRNOTAVAIL`).
    pub fn open(&self) -> VResult<()> {
        let mut g = self.lock();
        if let Some(o) = g.as_mut() {
            o.users += 1;
            return Ok(());
        }
        let dispatcher = self.start_dispatcher()?;
        let hw = match &self.spec.kind {
            DeviceKind::MockUdp { ip } => self.open_mock(*ip, dispatcher.kicker())?,
            DeviceKind::Vfio { bdf, ip } => {
                let (hca, hw) = crate::vfio::open(bdf, *ip, dispatcher.kicker())?;
                MockHw {
                    hca,
                    backing: Backing::Vfio(hw),
                }
            }
        };
        *g = Some(Open {
            users: 1,
            hw,
            next_handle: 1,
            pds: HashMap::new(),
            cqs: HashMap::new(),
            srqs: HashMap::new(),
            mrs: HashMap::new(),
            qps: HashMap::new(),
            channels: HashMap::new(),
            _dispatcher: dispatcher,
        });
        Ok(())
    }

    /// The thread that serves the event queue on the device's interrupts and syncs the
    /// channels' sockets with it ([`crate::wake`]).
    fn start_dispatcher(&self) -> VResult<Dispatcher> {
        let open = self.open.clone();
        let wakers = self.wakers.clone();
        Dispatcher::start(format!("uhca-ev-{}", self.spec.name), move |stop| {
            let mut g = open.lock().unwrap_or_else(|p| p.into_inner());
            // The flag is read with the lock held: a device closed (and perhaps opened
            // again) since is not this thread's any more.
            if stop.load(Ordering::Acquire) {
                return false;
            }
            let Some(o) = g.as_mut() else {
                return false;
            };
            let _ = o.hw.hca.process_events();
            sync_wakes(o, &wakers, true);
            true
        })
        .map_err(|e| VerbsError::new(libc::EAGAIN, format!("event thread: {e}")))
    }

    /// Brings up a mock HCA with its RoCEv2 port on a UDP socket at `ip:4791`.
    fn open_mock(&self, ip: Ipv4Addr, kicker: Kicker) -> VResult<MockHw> {
        let cfg = mock_config(ip);
        let mac = cfg.mac;
        let fabric = Fabric::ethernet();
        let dev = MockHca::new(cfg);
        let hcfg = HcaConfig {
            fw_pre_init_timeout_ns: 5_000_000_000,
            cmd_timeout_ns: 5_000_000_000,
            ..HcaConfig::default()
        };
        let mut hca = Hca::open_with(DevPlatform::Mock(dev.platform()), hcfg)
            .map_err(|e| VerbsError::driver("bring-up", e))?;
        fabric.attach(&dev);
        let up = (|| {
            hca.add_roce_gid(1, 0, IpAddr::V4(ip), uhca_driver::addr::Mac(mac), None)
                .map_err(|e| VerbsError::driver("installing the RoCEv2 GID", e))?;
            fabric.attach_udp(&dev, ip).map_err(|e| {
                VerbsError::new(
                    libc::EADDRINUSE,
                    format!("binding UDP {ip}:{}: {e}", crate::config::ROCE_UDP_PORT),
                )
            })
        })();
        if let Err(e) = up {
            let _ = hca.close();
            return Err(e);
        }
        // Every MSI-X interrupt of the model kicks the device's event thread, which serves
        // the event queue and wakes the channels with events waiting. The handler runs in
        // the model's thread with the model locked: it only writes to a socket (never
        // blocking).
        dev.set_interrupt_handler(Some(Arc::new(move |_vector| kicker.kick())));
        let pump = fabric.start_pump(20);
        Ok(MockHw {
            hca,
            backing: Backing::Mock {
                _pump: pump,
                dev,
                _fabric: fabric,
            },
        })
    }

    /// Closes one open; the last one destroys what is left and closes the HCA.
    ///
    /// # Errors
    ///
    /// EINVAL if the device is not open; EIO if the teardown failed.
    pub fn close(&self) -> VResult<()> {
        let mut g = self.lock();
        let o = g
            .as_mut()
            .ok_or_else(|| VerbsError::new(libc::EINVAL, "device not open"))?;
        o.users -= 1;
        if o.users > 0 {
            return Ok(());
        }
        let qps: Vec<u32> = o.qps.keys().copied().collect();
        drop(g);
        for h in qps {
            let _ = self.destroy_qp(h);
        }
        let mut g = self.lock();
        let mut o = g.take().expect("open");
        for (_, r) in o.mrs.drain() {
            // The memory stays the application's: unmapped, never freed (HostBuf::Static).
            if let Ok(m) = r.mr.destroy(&mut o.hw.hca) {
                let _ = m.unmap();
            }
        }
        for (_, (srq, _)) in o.srqs.drain() {
            let _ = srq.destroy(&mut o.hw.hca);
        }
        for (_, cq) in o.cqs.drain() {
            let _ = cq.destroy(&mut o.hw.hca);
        }
        for (_, pd) in o.pds.drain() {
            let _ = pd.destroy(&mut o.hw.hca);
        }
        let MockHw { hca, backing } = o.hw;
        match &backing {
            Backing::Mock { dev, .. } => dev.set_interrupt_handler(None),
            // The interrupt thread stops before the teardown.
            Backing::Vfio(v) => v.stop_interrupts(),
        }
        // The platform (the mock's fabric, the VFIO function) goes after the HCA's teardown.
        let closed = hca.close().map_err(|e| VerbsError::driver("close", e));
        drop(backing);
        closed
    }

    pub(crate) fn with_open<R>(&self, f: impl FnOnce(&mut Open) -> R) -> VResult<R> {
        self.with(f)
    }

    fn with<R>(&self, f: impl FnOnce(&mut Open) -> R) -> VResult<R> {
        let mut g = self.lock();
        let o = g
            .as_mut()
            .ok_or_else(|| VerbsError::new(libc::EINVAL, "device not open"))?;
        Ok(f(o))
    }

    /// `ibv_query_device`.
    ///
    /// # Errors
    ///
    /// Not open, or a failed query.
    pub fn query_device(&self) -> VResult<DeviceInfo> {
        self.with(|o| {
            let hca = &mut o.hw.hca;
            let vendor_id = hca
                .platform()
                .config_read16(0)
                .map_err(|e| VerbsError::driver("config read", e))?;
            let vendor_part_id = hca
                .platform()
                .config_read16(2)
                .map_err(|e| VerbsError::driver("config read", e))?;
            let p = hca
                .query_port(1)
                .map_err(|e| VerbsError::driver("query port", e))?;
            let caps = *hca.caps();
            // Send SGEs of an RC WQE (control, remote address and atomic segments first),
            // receive SGEs of a receive WQE: the smaller is what every QP type offers.
            let send_desc = (caps.max_send_wqe_bytes as usize).min(63 * 16);
            let max_sge = (send_desc.saturating_sub(48) / 16)
                .min(caps.max_recv_wqe_bytes as usize / 16) as u32;
            Ok(DeviceInfo {
                fw_version: hca.info().fw_version,
                node_guid: p.node_guid,
                sys_image_guid: p.system_image_guid,
                vendor_id,
                vendor_part_id,
                caps,
                log_max_mr_size: hca.hca_cap().log_max_mrw_sz(),
                max_sge,
            })
        })?
    }

    /// `ibv_query_port`.
    ///
    /// # Errors
    ///
    /// Not open, or no such port.
    pub fn query_port(&self, port: u8) -> VResult<PortAttr> {
        self.with(|o| {
            let n = o.hw.hca.caps().num_ports;
            if port == 0 || port > n {
                return Err(VerbsError::new(libc::EINVAL, format!("no port {port}")));
            }
            o.hw.hca
                .query_port(port)
                .map_err(|e| VerbsError::driver("query port", e))
        })?
    }

    /// `ibv_query_gid`.
    ///
    /// # Errors
    ///
    /// Not open, no such port or index.
    pub fn query_gid(&self, port: u8, index: u32) -> VResult<GidEntry> {
        let p = self.query_port(port)?;
        if index >= p.gid_table_len {
            return Err(VerbsError::new(
                libc::EINVAL,
                format!("no GID index {index}"),
            ));
        }
        self.with(|o| {
            o.hw.hca
                .query_gid(port, index as u16)
                .map_err(|e| VerbsError::driver("query GID", e))
        })?
    }

    /// `ibv_query_pkey`: the P_Key at `index` (host order).
    ///
    /// # Errors
    ///
    /// Not open, no such port or index; EOPNOTSUPP on an InfiniBand port (the driver has no
    /// P_Key table query yet).
    pub fn query_pkey(&self, port: u8, index: u16) -> VResult<u16> {
        let p = self.query_port(port)?;
        if u32::from(index) >= p.pkey_table_len {
            return Err(VerbsError::new(
                libc::EINVAL,
                format!("no P_Key index {index}"),
            ));
        }
        match p.link_layer {
            // A RoCE port has the default P_Key only.
            uhca_driver::caps::LinkLayer::Ethernet if index == 0 => Ok(0xffff),
            _ => Err(VerbsError::new(
                libc::EOPNOTSUPP,
                "P_Key table query on an InfiniBand port",
            )),
        }
    }

    /// `ibv_alloc_pd`: the new PD's handle.
    ///
    /// # Errors
    ///
    /// Not open, or the driver's failure.
    pub fn alloc_pd(&self) -> VResult<u32> {
        self.with(|o| {
            let pd =
                o.hw.hca
                    .alloc_pd()
                    .map_err(|e| VerbsError::driver("alloc PD", e))?;
            let h = o.next_handle;
            o.next_handle = o.next_handle.wrapping_add(1).max(1);
            o.pds.insert(h, pd);
            Ok(h)
        })?
    }

    /// `ibv_dealloc_pd`.
    ///
    /// # Errors
    ///
    /// Not open, an unknown handle, or the driver's failure (EBUSY while objects use it:
    /// the PD stays).
    pub fn dealloc_pd(&self, handle: u32) -> VResult<()> {
        self.with(|o| {
            let pd = o
                .pds
                .remove(&handle)
                .ok_or_else(|| VerbsError::new(libc::EINVAL, "unknown PD"))?;
            pd.destroy(&mut o.hw.hca).map_err(|f| {
                o.pds.insert(handle, f.object);
                VerbsError::new(libc::EBUSY, format!("dealloc PD: {:?}", f.error))
            })
        })?
    }

    /// `ibv_create_cq`: the handle and the number of entries it holds.
    ///
    /// # Errors
    ///
    /// Not open, a depth out of range, or the driver's failure.
    pub fn create_cq(&self, cqe: u32) -> VResult<(u32, u32)> {
        self.with(|o| {
            if cqe == 0 || cqe > o.hw.hca.caps().max_cqe.saturating_sub(1) {
                return Err(VerbsError::new(libc::EINVAL, format!("{cqe} CQ entries")));
            }
            let cq =
                o.hw.hca
                    .create_cq(cqe)
                    .map_err(|e| VerbsError::driver("create CQ", e))?;
            let n = cq.cqe();
            let h = o.next_handle;
            o.next_handle = o.next_handle.wrapping_add(1).max(1);
            o.cqs.insert(h, cq);
            Ok((h, n))
        })?
    }

    /// Attaches CQ `handle` to a completion channel: its events go to `channel`, and are
    /// reported as `tag` (both opaque here).
    ///
    /// # Errors
    ///
    /// Not open, or an unknown CQ.
    pub fn attach_channel(&self, handle: u32, channel: usize, tag: usize) -> VResult<()> {
        self.with(|o| {
            if !o.cqs.contains_key(&handle) {
                return Err(VerbsError::new(libc::EINVAL, "unknown CQ"));
            }
            o.channels.insert(handle, (channel, tag));
            Ok(())
        })?
    }

    /// `ibv_req_notify_cq`: arms the CQ for its next (solicited) completion.
    ///
    /// # Errors
    ///
    /// Not open, an unknown CQ, or one on no completion channel.
    pub fn req_notify_cq(&self, handle: u32, solicited_only: bool) -> VResult<()> {
        self.with(|o| {
            if !o.channels.contains_key(&handle) {
                return Err(VerbsError::new(
                    libc::EINVAL,
                    "a CQ on no completion channel",
                ));
            }
            let cq = o
                .cqs
                .get_mut(&handle)
                .ok_or_else(|| VerbsError::new(libc::EINVAL, "unknown CQ"))?;
            cq.req_notify(solicited_only);
            Ok(())
        })?
    }

    /// One completion event of a CQ on `channel`, if one arrived: serves the event queue,
    /// then takes (and acknowledges to the device) the first CQ's event. Returns the CQ's tag.
    ///
    /// # Errors
    ///
    /// Not open, or the event queue's failure.
    pub fn take_cq_event(&self, channel: usize) -> VResult<Option<usize>> {
        self.with(|o| {
            o.hw.hca
                .process_events()
                .map_err(|e| VerbsError::driver("event queue", e))?;
            let mut got = None;
            for (h, (ch, tag)) in &o.channels {
                if *ch != channel {
                    continue;
                }
                if let Some(cq) = o.cqs.get_mut(h)
                    && cq.take_event(&mut o.hw.hca)
                {
                    got = Some(*tag);
                    break;
                }
            }
            sync_wakes(o, &self.wakers, false);
            Ok(got)
        })?
    }

    /// `ibv_create_srq` on PD `pd`: the handle and the sizes it got (`max_wr`, `max_sge`).
    ///
    /// # Errors
    ///
    /// Not open, an unknown PD, sizes out of the device's range (EINVAL), or the driver's
    /// failure.
    pub fn create_srq(
        &self,
        pd: u32,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> VResult<(u32, u32, u32)> {
        self.with(|o| {
            let p = o
                .pds
                .get(&pd)
                .ok_or_else(|| VerbsError::new(libc::EINVAL, "unknown PD"))?;
            let srq_limit = u16::try_from(limit)
                .ok()
                .filter(|_| max_wr > 0 && limit < max_wr)
                .ok_or_else(|| VerbsError::new(libc::EINVAL, "SRQ sizes"))?;
            let attr = SrqInitAttr {
                max_wr,
                max_sge: max_sge.max(1),
                srq_limit,
            };
            let srq = o.hw.hca.create_srq(p, attr).map_err(|e| match e {
                uhca_driver::Error::InvalidArgument(a) => {
                    VerbsError::new(libc::EINVAL, format!("create SRQ: {a}"))
                }
                e => VerbsError::driver("create SRQ", e),
            })?;
            let got = (srq.max_wr(), srq.max_sge());
            let h = o.handle();
            o.srqs.insert(h, (srq, pd));
            Ok((h, got.0, got.1))
        })?
    }

    /// `ibv_modify_srq` with `IBV_SRQ_LIMIT`: arms the limit event at `limit` WQEs.
    ///
    /// # Errors
    ///
    /// Not open, an unknown SRQ, a limit not below the SRQ's size (EINVAL), or the
    /// driver's failure.
    pub fn arm_srq_limit(&self, handle: u32, limit: u32) -> VResult<()> {
        self.with(|o| {
            let (srq, _) = o
                .srqs
                .get_mut(&handle)
                .ok_or_else(|| VerbsError::new(libc::EINVAL, "unknown SRQ"))?;
            let limit = u16::try_from(limit)
                .ok()
                .filter(|l| u32::from(*l) < srq.max_wr())
                .ok_or_else(|| VerbsError::new(libc::EINVAL, "srq_limit beyond the SRQ"))?;
            srq.arm_limit(&mut o.hw.hca, limit).map_err(|e| match e {
                uhca_driver::Error::InvalidArgument(a) => {
                    VerbsError::new(libc::EINVAL, format!("arm SRQ limit: {a}"))
                }
                e => VerbsError::driver("arm SRQ limit", e),
            })
        })?
    }

    /// `ibv_query_srq`: `max_wr`, `max_sge` and the armed limit (0 once its event fired).
    ///
    /// # Errors
    ///
    /// Not open, an unknown SRQ, or the driver's failure.
    pub fn query_srq(&self, handle: u32) -> VResult<(u32, u32, u32)> {
        self.with(|o| {
            let (srq, _) = o
                .srqs
                .get(&handle)
                .ok_or_else(|| VerbsError::new(libc::EINVAL, "unknown SRQ"))?;
            let a = srq
                .query(&mut o.hw.hca)
                .map_err(|e| VerbsError::driver("query SRQ", e))?;
            Ok((srq.max_wr(), srq.max_sge(), u32::from(a.limit)))
        })?
    }

    /// `ibv_destroy_srq`.
    ///
    /// # Errors
    ///
    /// Not open, an unknown handle, EBUSY while QPs receive from it, or the driver's
    /// failure (the SRQ stays).
    pub fn destroy_srq(&self, handle: u32) -> VResult<()> {
        self.with(|o| {
            let (srq, pd) = o
                .srqs
                .remove(&handle)
                .ok_or_else(|| VerbsError::new(libc::EINVAL, "unknown SRQ"))?;
            srq.destroy(&mut o.hw.hca).map_err(|f| {
                o.srqs.insert(handle, (f.object, pd));
                VerbsError::new(libc::EBUSY, format!("destroy SRQ: {:?}", f.error))
            })
        })?
    }

    /// `ibv_create_comp_channel`: a channel whose file descriptor becomes readable on the
    /// device's interrupts (see [`ChannelFd`]).
    ///
    /// # Errors
    ///
    /// The socket pair could not be made (the OS's errno).
    pub fn create_channel(&self) -> VResult<ChannelFd> {
        self.new_channel(Kind::Cq)
    }

    /// A context's `async_fd`: readable while an asynchronous event of the device waits.
    ///
    /// # Errors
    ///
    /// The socket pair could not be made (the OS's errno).
    pub fn create_async_fd(&self) -> VResult<ChannelFd> {
        self.new_channel(Kind::Async)
    }

    fn new_channel(&self, kind: Kind) -> VResult<ChannelFd> {
        let id = self.next_channel.fetch_add(1, Ordering::Relaxed);
        let reader: UnixStream = self.wakers.add(id, kind).map_err(io_errno)?;
        let ch = ChannelFd { id, reader };
        // An asynchronous event may be waiting already.
        let _ = self.with(|o| sync_wakes(o, &self.wakers, false));
        Ok(ch)
    }

    /// `ibv_destroy_comp_channel` (and a context's close for its `async_fd`): it is not
    /// woken any more; its fd closes with it.
    pub fn destroy_channel(&self, ch: ChannelFd) {
        self.wakers.remove(ch.id);
    }

    /// `ibv_get_cq_event`: the tag of a CQ on channel `channel` (its [`ChannelFd::id`];
    /// the tag given to [`Device::attach_channel`]) with a completion event, waiting until
    /// one comes (as rdma-core's, as long as it takes: woken by the device's event thread,
    /// and serving the event queue itself every 100 ms); with `nonblocking` (the
    /// application set `O_NONBLOCK` on the channel's fd) EAGAIN instead of waiting.
    ///
    /// # Errors
    ///
    /// EAGAIN (non-blocking and no event), not open, or the event queue's failure.
    pub fn wait_cq_event(&self, channel: usize, nonblocking: bool) -> VResult<usize> {
        self.wait_for(nonblocking, || self.take_cq_event(channel))
    }

    /// Waits like [`Device::wait_cq_event`] for `take` to find something.
    pub(crate) fn wait_for<T>(
        &self,
        nonblocking: bool,
        mut take: impl FnMut() -> VResult<Option<T>>,
    ) -> VResult<T> {
        loop {
            let seen = self.wakers.generation();
            if let Some(t) = take()? {
                return Ok(t);
            }
            if nonblocking {
                return Err(VerbsError::new(libc::EAGAIN, "no event"));
            }
            self.wakers.wait_change(seen, EVENT_RECHECK);
        }
    }

    /// Syncs the device's sockets with the events waiting, with the device locked.
    pub(crate) fn sync_wakes(&self, o: &Open) {
        sync_wakes(o, &self.wakers, false);
    }

    /// `ibv_destroy_cq`.
    ///
    /// # Errors
    ///
    /// Not open, an unknown handle, or the driver's failure (the CQ stays).
    pub fn destroy_cq(&self, handle: u32) -> VResult<()> {
        self.with(|o| {
            let cq = o
                .cqs
                .remove(&handle)
                .ok_or_else(|| VerbsError::new(libc::EINVAL, "unknown CQ"))?;
            cq.destroy(&mut o.hw.hca)
                .map(|()| {
                    o.channels.remove(&handle);
                    sync_wakes(o, &self.wakers, false);
                })
                .map_err(|f| {
                    o.cqs.insert(handle, f.object);
                    VerbsError::new(libc::EBUSY, format!("destroy CQ: {:?}", f.error))
                })
        })?
    }

    /// `ibv_reg_mr_iova2` (and `ibv_reg_mr`, with `iova` the buffer's address): registers
    /// `buf`, the application's memory, on the PD `pd`, addressed from `iova`: the
    /// application's SGEs with the lkey and its peers' RDMA and atomic requests with the rkey
    /// name `iova + offset` (uhca's key starts there, whatever IOVA the range is mapped at).
    ///
    /// # Errors
    ///
    /// Not open, an unknown PD, remote write or atomic rights without local write (EINVAL,
    /// as verbs requires), an `iova` whose offset within a 4 KiB page is not the buffer's
    /// (EINVAL, as Linux), a buffer that is not 8-byte aligned (EINVAL), or the driver's
    /// failure. Nothing is registered then.
    pub fn reg_mr(&self, pd: u32, iova: u64, buf: HostBuf, access: AccessFlags) -> VResult<MrKeys> {
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC)
            && !access.contains(AccessFlags::LOCAL_WRITE)
        {
            return Err(VerbsError::new(
                libc::EINVAL,
                "remote write or atomic rights without local write",
            ));
        }
        let va = iova;
        self.with(|o| {
            let p = o
                .pds
                .get(&pd)
                .ok_or_else(|| VerbsError::new(libc::EINVAL, "unknown PD"))?;
            let mapped =
                o.hw.hca
                    .map_host_buf(buf)
                    .map_err(|f| VerbsError::new(libc::EINVAL, format!("map: {:?}", f.error)))?;
            let len = uhca_hal::DmaMem::len(&mapped);
            let mr = match o.hw.hca.reg_user_mr_at(p, mapped, iova, access) {
                Ok(mr) => mr,
                Err(f) => {
                    if let Some(m) = f.object {
                        let _ = m.unmap();
                    }
                    return Err(match f.error {
                        uhca_driver::Error::InvalidArgument(e) => {
                            VerbsError::new(libc::EINVAL, format!("register: {e}"))
                        }
                        e => VerbsError::driver("register", e),
                    });
                }
            };
            let keys = MrKeys {
                handle: o.next_handle,
                lkey: mr.lkey(),
                rkey: mr.rkey(),
            };
            o.next_handle = o.next_handle.wrapping_add(1).max(1);
            o.mrs.insert(keys.handle, Registered { mr, pd, va, len });
            Ok(keys)
        })?
    }

    /// `ibv_dereg_mr`: the key goes, the range is unmapped; the memory was and stays the
    /// application's.
    ///
    /// # Errors
    ///
    /// Not open, an unknown handle, or the driver's failure (the MR stays).
    pub fn dereg_mr(&self, handle: u32) -> VResult<()> {
        self.with(|o| {
            let r = o
                .mrs
                .remove(&handle)
                .ok_or_else(|| VerbsError::new(libc::EINVAL, "unknown MR"))?;
            let Registered { mr, pd, va, len } = r;
            match mr.destroy(&mut o.hw.hca) {
                Ok(m) => m
                    .unmap()
                    .map(drop)
                    .map_err(|e| VerbsError::driver("unmap", e)),
                Err(f) => {
                    o.mrs.insert(
                        handle,
                        Registered {
                            mr: f.object,
                            pd,
                            va,
                            len,
                        },
                    );
                    Err(VerbsError::new(
                        libc::EBUSY,
                        format!("dereg MR: {:?}", f.error),
                    ))
                }
            }
        })?
    }

    /// The device address of `len` bytes at the application's address `addr` under `lkey`
    /// (an SGE of the application turned into uhca's).
    ///
    /// # Errors
    ///
    /// EINVAL if no MR of that key covers the range.
    pub fn translate(&self, lkey: u32, addr: u64, len: u32) -> VResult<uhca_hal::wq::Sge> {
        self.with(|o| o.translate(lkey, addr, len))?
    }

    /// Reads `dst.len()` bytes at offset `off` of MR `handle`'s memory (volatile reads: the
    /// device may write it), as the application reads its own buffer (for tests of the
    /// core, which has no `unsafe` to read it by address).
    ///
    /// # Errors
    ///
    /// Not open, an unknown MR, or a range outside it.
    pub fn read_mr(&self, handle: u32, off: usize, dst: &mut [u8]) -> VResult<()> {
        self.with(|o| {
            let r = o
                .mrs
                .get(&handle)
                .ok_or_else(|| VerbsError::new(libc::EINVAL, "unknown MR"))?;
            if off.checked_add(dst.len()).is_none_or(|e| e > r.len) {
                return Err(VerbsError::new(libc::EINVAL, "outside the MR"));
            }
            uhca_hal::DmaMem::read_bytes(r.mr.mem(), off, dst);
            Ok(())
        })?
    }

    /// Writes `src` at offset `off` of MR `handle`'s memory (see [`Device::read_mr`]).
    ///
    /// # Errors
    ///
    /// Not open, an unknown MR, or a range outside it.
    pub fn write_mr(&self, handle: u32, off: usize, src: &[u8]) -> VResult<()> {
        self.with(|o| {
            let r = o
                .mrs
                .get_mut(&handle)
                .ok_or_else(|| VerbsError::new(libc::EINVAL, "unknown MR"))?;
            if off.checked_add(src.len()).is_none_or(|e| e > r.len) {
                return Err(VerbsError::new(libc::EINVAL, "outside the MR"));
            }
            uhca_hal::DmaMem::write_bytes(r.mr.mem_mut(), off, src);
            Ok(())
        })?
    }

    /// How many PDs and CQs the application holds (for tests).
    pub fn object_counts(&self) -> (usize, usize) {
        self.with(|o| (o.pds.len(), o.cqs.len())).unwrap_or((0, 0))
    }
}

/// The platform type of every device's objects, mock or VFIO (the name is from when only
/// mock devices opened; the QP layer uses it).
pub type MockP = DevPlatform;

const _: fn() = || {
    fn send<T: Send>() {}
    send::<Device>();
    fn plat<P: Platform + Clone>() {}
    plat::<MockP>();
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mock_device_over_udp() {
        // An address of its own, so other tests and programs keep theirs.
        let ip = Ipv4Addr::new(127, 0, 0, 91);
        let d = Device::new(DeviceSpec {
            name: "uhca-t".into(),
            kind: DeviceKind::MockUdp { ip },
        });
        assert_eq!(d.query_device().unwrap_err().errno, libc::EINVAL);
        let guid = d.node_guid();
        d.open().unwrap();
        d.open().unwrap();
        let info = d.query_device().unwrap();
        assert_eq!(info.vendor_id, 0x15b3);
        assert_eq!(info.node_guid, guid);
        let p = d.query_port(1).unwrap();
        assert_eq!(p.link_layer, uhca_driver::caps::LinkLayer::Ethernet);
        assert_eq!(d.query_port(2).unwrap_err().errno, libc::EINVAL);
        let g = d.query_gid(1, 0).unwrap();
        assert_eq!(g.gid.0[10..], [0xff, 0xff, 127, 0, 0, 91]);
        assert_eq!(g.kind, GidTypeAlias::RoceV2Ipv4);
        assert_eq!(d.query_pkey(1, 0), Ok(0xffff));
        assert!(d.query_pkey(1, 1).is_err());
        let pd = d.alloc_pd().unwrap();
        let (cq, n) = d.create_cq(16).unwrap();
        assert!(n >= 16);
        assert_eq!(d.object_counts(), (1, 1));
        assert_eq!(d.dealloc_pd(pd + 100).unwrap_err().errno, libc::EINVAL);
        d.destroy_cq(cq).unwrap();
        d.dealloc_pd(pd).unwrap();
        assert_eq!(d.destroy_cq(cq).unwrap_err().errno, libc::EINVAL);
        // The first close keeps the device up for the second opener.
        d.close().unwrap();
        assert!(d.query_port(1).is_ok());
        // Left-over objects go with the last close.
        d.alloc_pd().unwrap();
        d.close().unwrap();
        assert_eq!(d.close().unwrap_err().errno, libc::EINVAL);
        // And it opens again (the UDP address was let go).
        d.open().unwrap();
        d.close().unwrap();
    }

    #[test]
    fn memory_the_application_owns() {
        let ip = Ipv4Addr::new(127, 0, 0, 92);
        let d = Device::new(DeviceSpec {
            name: "uhca-m".into(),
            kind: DeviceKind::MockUdp { ip },
        });
        d.open().unwrap();
        let pd = d.alloc_pd().unwrap();
        let buf: &'static mut [u8] = Box::leak(vec![0u8; 8192].into_boxed_slice());
        let va = buf.as_ptr() as u64;
        let remote = d.reg_mr(
            pd,
            va,
            HostBuf::from(&mut [0u8; 0][..]),
            AccessFlags::REMOTE_WRITE,
        );
        assert_eq!(
            remote.unwrap_err().errno,
            libc::EINVAL,
            "remote write needs local write"
        );
        // An iova off the buffer's offset within its page: EINVAL, nothing registered.
        let other: &'static mut [u8] = Box::leak(vec![0u8; 4096].into_boxed_slice());
        let off = other.as_ptr() as u64 % 4096;
        let bad = d.reg_mr(
            pd,
            0x10_0000_0000 + (off + 8) % 4096,
            HostBuf::from(other),
            AccessFlags::LOCAL_WRITE,
        );
        assert_eq!(bad.unwrap_err().errno, libc::EINVAL);
        // At a chosen iova (ibv_reg_mr_iova2) with remote rights: SGEs name the iova.
        let other: &'static mut [u8] = Box::leak(vec![0u8; 4096].into_boxed_slice());
        let (ova, iova) = (
            other.as_ptr() as u64,
            0x10_0000_0000 + other.as_ptr() as u64 % 4096,
        );
        let all = AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC;
        let ki = d.reg_mr(pd, iova, HostBuf::from(other), all).unwrap();
        assert_eq!(ki.lkey, ki.rkey);
        let sge = d.translate(ki.lkey, iova + 100, 50).unwrap();
        assert_eq!((sge.addr, sge.len), (iova + 100, 50));
        assert!(d.translate(ki.lkey, ova + 100, 50).is_err());
        d.dereg_mr(ki.handle).unwrap();
        let k = d
            .reg_mr(pd, va, HostBuf::from(buf), AccessFlags::LOCAL_WRITE)
            .unwrap();
        let sge = d.translate(k.lkey, va + 100, 50).unwrap();
        assert_eq!((sge.addr, sge.len, sge.lkey), (va + 100, 50, k.lkey));
        assert!(d.translate(k.lkey, va + 8190, 4).is_err());
        assert!(d.translate(k.lkey, va - 1, 4).is_err());
        assert!(d.translate(k.lkey ^ 0x100, va, 4).is_err());
        // The PD is in use.
        assert_eq!(d.dealloc_pd(pd).unwrap_err().errno, libc::EBUSY);
        d.dereg_mr(k.handle).unwrap();
        assert!(d.translate(k.lkey, va, 4).is_err());
        d.dealloc_pd(pd).unwrap();
        d.close().unwrap();
    }

    #[test]
    fn a_vfio_function_that_is_not_there() {
        // No PCI function at this address (domain ffff is never used): the VFIO platform's
        // refusal, as an errno and a message naming the address.
        let d = Device::new(DeviceSpec {
            name: "v".into(),
            kind: DeviceKind::Vfio {
                bdf: "ffff:3b:00.0".into(),
                ip: None,
            },
        });
        let e = d.open().unwrap_err();
        assert_eq!(e.errno, libc::ENODEV, "{e}");
        assert!(e.msg.contains("ffff:3b:00.0"), "{e}");
        assert_eq!(d.node_guid(), 0);
        assert_eq!(d.query_device().unwrap_err().errno, libc::EINVAL);
    }

    use uhca_driver::verbs::GidType as GidTypeAlias;
}
