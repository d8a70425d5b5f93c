//! A testbed on the device model (feature `mock`): N mock HCAs brought up by the driver on
//! one in-memory fabric, RC connections made in one call, and a poll that moves the fabric
//! until completions arrive or a deadline passes.
//!
//! It is what a test of a transport built on uhca needs before its first work request:
//!
//! ```
//! use std::time::Duration;
//! use uhca::prelude::*;
//! use uhca::testbed::{RcConfig, Testbed};
//!
//! let mut tb = Testbed::ethernet(2)?;                       // two HCAs, RoCEv2
//! let (mut a, mut b) = tb.connect_rc(0, 1, &RcConfig::default())?;
//! a.mr.mem_mut().write_bytes(0, b"hello");
//! b.qp.post_recv(&[RecvWr { wr_id: 1, sg_list: &[b.mr.sge(0, 64)?] }])?;
//! a.qp.post_send(&[SendWr::new(2, SendOp::Send, &[a.mr.sge(0, 5)?])])?;
//! let wc = tb.poll_until(&mut b.cq, 1, Duration::from_secs(5))?;
//! assert_eq!((wc[0].status, wc[0].byte_len), (WcStatus::Success, 5));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Each HCA `i` (from 0) has MAC `02:00:00:00:00:<i+1>`; on Ethernet its port has the
//! RoCEv2 GID of `10.0.0.<i+1>` at index 0, on InfiniBand the subnet manager gives it LID
//! `i+1`. The fabric runs on the model's virtual clock, moved only by
//! [`Testbed::poll_until`] (or by the caller through [`Testbed::fabric`]), so runs are
//! deterministic.

use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use uhca_driver::addr::{AhAttr, Endpoint, Gid, Mac};
use uhca_driver::verbs::{
    BadWr, Cq, InitAttr, Mr, Pd, PollError, Qp, QpCaps, QpInitAttr, Rc, RtrAttr, RtsAttr,
    WorkCompletion,
};
use uhca_driver::{Error, Failed, Hca, HcaConfig};
use uhca_fwif::consts::{AccessFlags, IbMtu};
use uhca_mock::{Fabric, IommuFault, LinkLayer, MockConfig, MockHca, MockPlatform};

/// The platform of every testbed HCA.
pub type TestbedPlatform = MockPlatform;

/// Why a testbed call failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum TestbedError {
    /// A driver call failed (bring-up, a command, a completion the driver refused).
    Driver(Error),
    /// A work request was refused.
    Post(BadWr),
    /// [`Testbed::poll_until`]'s deadline passed before enough completions arrived.
    Timeout {
        /// Completions asked for.
        wanted: usize,
        /// Completions that arrived.
        got: usize,
        /// The deadline.
        timeout: Duration,
    },
    /// There is no HCA of that index.
    NoSuchHca {
        /// The index asked for.
        index: usize,
        /// HCAs in the testbed.
        count: usize,
    },
    /// A testbed of more HCAs than it can address (at most 254), or of none.
    BadSize(usize),
    /// The device model recorded accesses outside the memory mapped for it (reported by
    /// [`Testbed::close`]).
    IommuFaults(Vec<IommuFault>),
    /// Starting or stopping a packet capture failed.
    Io(std::io::Error),
}

impl std::fmt::Display for TestbedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TestbedError::Driver(e) => e.fmt(f),
            TestbedError::Post(e) => e.fmt(f),
            TestbedError::Timeout {
                wanted,
                got,
                timeout,
            } => write!(
                f,
                "{got} of {wanted} completions within {:.3} s",
                timeout.as_secs_f64()
            ),
            TestbedError::NoSuchHca { index, count } => {
                write!(f, "no HCA {index} in a testbed of {count}")
            }
            TestbedError::BadSize(n) => write!(f, "a testbed of {n} HCAs (1 to 254)"),
            TestbedError::IommuFaults(v) => write!(f, "{} IOMMU faults: {v:?}", v.len()),
            TestbedError::Io(e) => write!(f, "capture: {e}"),
        }
    }
}

impl std::error::Error for TestbedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TestbedError::Driver(e) => Some(e),
            TestbedError::Post(e) => Some(e),
            TestbedError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<Error> for TestbedError {
    fn from(e: Error) -> Self {
        TestbedError::Driver(e)
    }
}

impl<T> From<Failed<T>> for TestbedError {
    fn from(f: Failed<T>) -> Self {
        TestbedError::Driver(f.error)
    }
}

impl From<PollError> for TestbedError {
    fn from(e: PollError) -> Self {
        TestbedError::Driver(e.into())
    }
}

impl From<BadWr> for TestbedError {
    fn from(e: BadWr) -> Self {
        TestbedError::Post(e)
    }
}

impl From<std::io::Error> for TestbedError {
    fn from(e: std::io::Error) -> Self {
        TestbedError::Io(e)
    }
}

/// What [`Testbed::connect_rc`] makes on each side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RcConfig {
    /// Bytes of each side's memory region.
    pub mr_len: usize,
    /// Entries of each side's CQ (both queues of the QP complete to it).
    pub cq_entries: u32,
    /// The QPs' queue sizes.
    pub caps: QpCaps,
    /// The path MTU.
    pub mtu: IbMtu,
    /// The first PSN of the first and of the second HCA named.
    pub psn: (u32, u32),
    /// RDMA READs and atomics in flight, each way (`max_rd_atomic`, `max_dest_rd_atomic`).
    pub max_rd_atomic: u8,
}

impl Default for RcConfig {
    /// 64 KiB regions, 256-entry CQs, 64 requests each way with one SGE and 64 bytes
    /// inline, MTU 1024, PSNs 0, one READ or atomic in flight.
    fn default() -> Self {
        RcConfig {
            mr_len: 64 << 10,
            cq_entries: 256,
            caps: QpCaps {
                max_send_wr: 64,
                max_recv_wr: 64,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 64,
            },
            mtu: IbMtu::Mtu1024,
            psn: (0, 0),
            max_rd_atomic: 1,
        }
    }
}

/// One side of an RC connection: its PD, CQ, memory region and QP (ready to send), on
/// HCA [`RcEnd::hca`] of the testbed.
#[derive(Debug)]
pub struct RcEnd {
    /// The HCA's index in the testbed.
    pub hca: usize,
    /// The protection domain of the MR and the QP.
    pub pd: Pd<TestbedPlatform>,
    /// The CQ both of the QP's queues complete to.
    pub cq: Cq<TestbedPlatform>,
    /// Zeroed memory, registered for local write, remote write and remote read (and
    /// remote atomics when the device offers them).
    pub mr: Mr<TestbedPlatform>,
    /// The QP, in RTS.
    pub qp: Qp<TestbedPlatform, Rc>,
}

struct Node {
    dev: MockHca,
    hca: Hca<TestbedPlatform>,
    mac: Mac,
    /// What a peer needs to reach this HCA's port 1 (GID index 0).
    ep: Endpoint,
}

/// N mock HCAs on one fabric, brought up by the driver.
pub struct Testbed {
    fabric: Fabric,
    nodes: Vec<Node>,
}

impl std::fmt::Debug for Testbed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Testbed")
            .field("link", &self.fabric.link_layer())
            .field("hcas", &self.nodes.len())
            .finish()
    }
}

impl Testbed {
    /// `n` HCAs (1 to 254) with Ethernet ports on a RoCEv2 fabric.
    ///
    /// # Errors
    ///
    /// [`TestbedError::BadSize`]; a bring-up or GID-install error.
    pub fn ethernet(n: usize) -> Result<Testbed, TestbedError> {
        Self::new(LinkLayer::Ethernet, n)
    }

    /// `n` HCAs (1 to 254) with InfiniBand ports on a fabric with a subnet manager.
    ///
    /// # Errors
    ///
    /// [`TestbedError::BadSize`]; a bring-up error.
    pub fn infiniband(n: usize) -> Result<Testbed, TestbedError> {
        Self::new(LinkLayer::InfiniBand, n)
    }

    fn new(link: LinkLayer, n: usize) -> Result<Testbed, TestbedError> {
        if !(1..=254).contains(&n) {
            return Err(TestbedError::BadSize(n));
        }
        let fabric = Fabric::new(link);
        let mut nodes = Vec::with_capacity(n);
        for i in 0..n {
            let k = i as u8 + 1;
            let mac = Mac([0x02, 0, 0, 0, 0, k]);
            let dev = MockHca::new(MockConfig {
                port_type: link,
                mac: mac.0,
                ..MockConfig::default()
            });
            let mut hca = Hca::open_with(dev.platform(), HcaConfig::default())?;
            fabric.attach(&dev);
            if link == LinkLayer::Ethernet {
                hca.add_roce_ip(1, 0, IpAddr::V4(Ipv4Addr::new(10, 0, 0, k)))?;
            }
            let ep = hca.endpoint(1, 0)?;
            nodes.push(Node { dev, hca, mac, ep });
        }
        Ok(Testbed { fabric, nodes })
    }

    /// How many HCAs.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are none (never: a testbed has at least one HCA).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    fn node(&self, i: usize) -> Result<&Node, TestbedError> {
        self.nodes.get(i).ok_or(TestbedError::NoSuchHca {
            index: i,
            count: self.nodes.len(),
        })
    }

    /// The driver's HCA `i`, for commands (creating and destroying objects, queries).
    ///
    /// # Panics
    ///
    /// If there is no HCA `i` (as indexing a slice does).
    pub fn hca(&mut self, i: usize) -> &mut Hca<TestbedPlatform> {
        &mut self.nodes[i].hca
    }

    /// The device model behind HCA `i` (its command log, IOMMU faults, counters).
    ///
    /// # Panics
    ///
    /// If there is no HCA `i`.
    pub fn device(&self, i: usize) -> &MockHca {
        &self.nodes[i].dev
    }

    /// The fabric (packet capture, fault injection, its clock).
    pub fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// HCA `i`'s MAC address.
    ///
    /// # Panics
    ///
    /// If there is no HCA `i`.
    pub fn mac(&self, i: usize) -> Mac {
        self.nodes[i].mac
    }

    /// HCA `i`'s GID at index 0: the RoCEv2 GID of `10.0.0.(i + 1)` on Ethernet, the port
    /// GID on InfiniBand (where paths use LIDs).
    ///
    /// # Panics
    ///
    /// If there is no HCA `i`.
    pub fn gid(&self, i: usize) -> Gid {
        self.nodes[i].ep.gid
    }

    /// HCA `i`'s LID (InfiniBand; 0 on Ethernet).
    ///
    /// # Panics
    ///
    /// If there is no HCA `i`.
    pub fn lid(&self, i: usize) -> u16 {
        self.nodes[i].ep.lid
    }

    /// The path from HCA `from` to HCA `to` for a connection of QP `local_qpn` (on `from`)
    /// with `remote_qpn` (on `to`), as [`Endpoint::path_to`] builds it: [`AhAttr::roce_v2`]
    /// to `to`'s GID and MAC on Ethernet, [`AhAttr::ib`] to its LID on InfiniBand.
    ///
    /// # Errors
    ///
    /// [`TestbedError::NoSuchHca`].
    pub fn path(
        &self,
        from: usize,
        to: usize,
        local_qpn: u32,
        remote_qpn: u32,
    ) -> Result<AhAttr, TestbedError> {
        let peer = &self.node(to)?.ep;
        Ok(self.node(from)?.ep.path_to(peer, local_qpn, remote_qpn))
    }

    /// Connects HCA `a` to HCA `b` (they may be the same HCA) with an RC QP on each side,
    /// each with its own PD, CQ and zeroed memory region, both QPs in RTS.
    ///
    /// # Errors
    ///
    /// [`TestbedError::NoSuchHca`]; any command's error.
    pub fn connect_rc(
        &mut self,
        a: usize,
        b: usize,
        cfg: &RcConfig,
    ) -> Result<(RcEnd, RcEnd), TestbedError> {
        self.node(a)?;
        self.node(b)?;
        let (qa, ea) = self.rc_side(a, cfg)?;
        let (qb, eb) = self.rc_side(b, cfg)?;
        let (na, nb) = (qa.qpn(), qb.qpn());
        let qa = self.ready(a, qa, b, nb, cfg.psn.0, cfg.psn.1, cfg)?;
        let qb = self.ready(b, qb, a, na, cfg.psn.1, cfg.psn.0, cfg)?;
        Ok((ea.with_qp(qa), eb.with_qp(qb)))
    }

    /// Everything of one side but the connected QP, and the QP in INIT.
    fn rc_side(
        &mut self,
        i: usize,
        cfg: &RcConfig,
    ) -> Result<(Qp<TestbedPlatform, Rc>, Half), TestbedError> {
        let hca = &mut self.nodes[i].hca;
        let mut access =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        if hca.caps().atomic {
            access |= AccessFlags::REMOTE_ATOMIC;
        }
        let pd = hca.alloc_pd()?;
        let cq = hca.create_cq(cfg.cq_entries)?;
        let mr = hca.alloc_mr(&pd, cfg.mr_len, access)?;
        let attr = QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: cfg.caps,
        };
        let mut qp = hca.create_qp::<Rc>(&pd, &attr)?;
        qp.to_init(
            hca,
            InitAttr {
                access,
                ..InitAttr::default()
            },
        )?;
        Ok((qp, Half { hca: i, pd, cq, mr }))
    }

    #[allow(clippy::too_many_arguments)]
    fn ready(
        &mut self,
        i: usize,
        mut qp: Qp<TestbedPlatform, Rc>,
        peer: usize,
        peer_qpn: u32,
        psn: u32,
        peer_psn: u32,
        cfg: &RcConfig,
    ) -> Result<Qp<TestbedPlatform, Rc>, TestbedError> {
        let ah = self.path(i, peer, qp.qpn(), peer_qpn)?;
        let hca = &mut self.nodes[i].hca;
        let rtr = RtrAttr {
            path_mtu: cfg.mtu,
            dest_qpn: peer_qpn,
            rq_psn: peer_psn,
            max_dest_rd_atomic: cfg.max_rd_atomic,
            ah,
            ..RtrAttr::default()
        };
        qp.to_rtr(hca, rtr)?;
        qp.to_rts(
            hca,
            RtsAttr {
                sq_psn: psn,
                max_rd_atomic: cfg.max_rd_atomic,
                ..RtsAttr::default()
            },
        )?;
        Ok(qp)
    }

    /// Moves the fabric and polls `cq` until `n` completions arrived (in order, whatever
    /// their status: check it) or `timeout` of real time passed. The fabric runs on its
    /// virtual clock, so retransmissions and RNR retries happen as fast as the host allows.
    ///
    /// # Errors
    ///
    /// [`TestbedError::Timeout`] with the count that arrived (those completions are
    /// lost to the caller); a completion the driver refused ([`TestbedError::Driver`]
    /// with [`Error::BadCompletion`]).
    pub fn poll_until(
        &self,
        cq: &mut Cq<TestbedPlatform>,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<WorkCompletion>, TestbedError> {
        let start = Instant::now();
        let mut out = Vec::with_capacity(n);
        let mut wc = [WorkCompletion::default(); 16];
        loop {
            let idle = self.fabric.run_until_idle();
            while out.len() < n {
                let want = (n - out.len()).min(wc.len());
                let got = cq.poll(&mut wc[..want])?;
                out.extend_from_slice(&wc[..got]);
                if got < want {
                    break;
                }
            }
            if out.len() == n {
                return Ok(out);
            }
            if start.elapsed() >= timeout {
                return Err(TestbedError::Timeout {
                    wanted: n,
                    got: out.len(),
                    timeout,
                });
            }
            if idle {
                // Nothing left in the model: only another thread can make progress.
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Destroys one side of a connection (QP, MR, CQ, PD, in that order) on its HCA.
    ///
    /// # Errors
    ///
    /// The first command that failed (what was not destroyed yet is leaked).
    pub fn destroy(&mut self, end: RcEnd) -> Result<(), TestbedError> {
        let RcEnd {
            hca,
            pd,
            cq,
            mr,
            qp,
        } = end;
        let hca = &mut self.nodes[hca].hca;
        qp.destroy(hca)?;
        let _buf = mr.destroy(hca)?;
        cq.destroy(hca)?;
        pd.destroy(hca)?;
        Ok(())
    }

    /// Closes every HCA (destroy their objects first: see [`Hca::close`]) and checks that
    /// no device touched memory outside what was mapped for it.
    ///
    /// # Errors
    ///
    /// The first HCA's close error; [`TestbedError::IommuFaults`].
    pub fn close(self) -> Result<(), TestbedError> {
        let mut faults = Vec::new();
        let mut first = None;
        for node in self.nodes {
            if let Err(e) = node.hca.close() {
                first.get_or_insert(e);
            }
            faults.extend(node.dev.iommu_faults());
        }
        if let Some(e) = first {
            return Err(e.into());
        }
        if !faults.is_empty() {
            return Err(TestbedError::IommuFaults(faults));
        }
        Ok(())
    }
}

/// A side without its QP yet.
struct Half {
    hca: usize,
    pd: Pd<TestbedPlatform>,
    cq: Cq<TestbedPlatform>,
    mr: Mr<TestbedPlatform>,
}

impl Half {
    fn with_qp(self, qp: Qp<TestbedPlatform, Rc>) -> RcEnd {
        RcEnd {
            hca: self.hca,
            pd: self.pd,
            cq: self.cq,
            mr: self.mr,
            qp,
        }
    }
}
