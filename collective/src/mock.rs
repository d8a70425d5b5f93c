//! N ranks on N mock HCAs of one mock fabric, each rank on its own thread.
//!
//! ```
//! use uhca_collective::{Config, ReduceOp, mock::MockCluster};
//! let mut cluster = MockCluster::new(4, uhca_mock::LinkLayer::Ethernet, Config::default())?;
//! let sums = cluster.run(|comm| {
//!     let mut v = vec![comm.rank() as i32; 1000];
//!     comm.all_reduce(&mut v, ReduceOp::Sum).map(|()| v[0])
//! });
//! assert!(sums.iter().all(|s| *s.as_ref().unwrap() == 6));
//! cluster.close()?;
//! # Ok::<(), uhca_collective::Error>(())
//! ```
//!
//! The fabric is pumped by its real-time pump thread while the cluster lives (a
//! doorbell moves its frames at once; the pump fires retransmission timers and delivers
//! delayed frames), and each rank's thread spins on its CQ, yielding when idle.

use std::net::{IpAddr, Ipv4Addr};
use std::vec::Vec;

use uhca_driver::addr::{Gid, Mac};
use uhca_driver::{Hca, HcaConfig};
use uhca_mock::fabric::PumpHandle;
use uhca_mock::{ClockMode, Fabric, FaultConfig, LinkLayer, MockConfig, MockHca, MockPlatform};

use crate::{Arg, Communicator, Config, Endpoint, Error, InvalidArgument, PortAddr};

/// The communicator of one mock rank.
pub type MockComm = Communicator<MockPlatform>;

/// One rank: its mock device, its HCA and its communicator.
pub struct MockRank {
    /// The device model (kept alive with the HCA).
    pub dev: MockHca,
    /// The HCA, brought up by the driver.
    pub hca: Hca<MockPlatform>,
    /// The communicator.
    pub comm: MockComm,
}

/// N mock ranks connected all to all on one fabric.
pub struct MockCluster {
    /// The fabric (set faults on it with [`Fabric::set_faults`]).
    pub fabric: Fabric,
    /// The ranks, by rank.
    pub ranks: Vec<MockRank>,
    pump: Option<PumpHandle>,
}

/// The idle hook of mock ranks, which are threads that may outnumber the CPUs: yield for
/// a few rounds, then sleep briefly, so that the rank that holds the next step gets a
/// CPU instead of waiting for spinning ranks' time slices to end.
pub fn share_cpu(rounds: u32) {
    if rounds < 32 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_micros(SLEEP_US));
    }
}

/// How long an idle mock rank sleeps.
const SLEEP_US: u64 = 20;

/// Bring-up settings for the mock: short timeouts, polling every 100 µs.
fn hca_config() -> HcaConfig {
    HcaConfig {
        fw_pre_init_timeout_ns: 2_000_000_000,
        fw_init_timeout_ns: 200_000_000,
        cmd_timeout_ns: 500_000_000,
        poll_us: 100,
        ..HcaConfig::default()
    }
}

impl MockCluster {
    /// Brings up `n` mock HCAs on a fabric of `link`, creates a communicator on each with
    /// `cfg` (its idle hook set to [`share_cpu`] when it has none), exchanges the endpoints and connects them, and starts the fabric's pump.
    ///
    /// # Errors
    ///
    /// [`Error::Setup`] naming the rank and the step that failed; [`Error::InvalidArgument`]
    /// for `n` of 0 or above 250.
    pub fn new(n: usize, link: LinkLayer, mut cfg: Config) -> Result<Self, Error> {
        if n == 0 {
            return Err(InvalidArgument::min(Arg::Size, n, 1).into());
        }
        if n > 250 {
            return Err(InvalidArgument::max(Arg::Size, n, 250).into());
        }
        if cfg.idle.is_none() {
            cfg.idle = Some(share_cpu);
        }
        let fabric = Fabric::new(link);
        let mut devs = Vec::with_capacity(n);
        let mut pending = Vec::with_capacity(n);
        let mut hcas = Vec::with_capacity(n);
        for rank in 0..n {
            let host = rank as u8 + 1;
            let mac = Mac([0x02, 0xc0, 0x11, 0xec, 0x00, host]);
            let dev = MockHca::new(MockConfig {
                port_type: link,
                clock: ClockMode::Virtual,
                mac: mac.0,
                ..MockConfig::default()
            });
            let setup = |what| move |error| Error::Setup { rank, what, error };
            let mut hca =
                Hca::open_with(dev.platform(), hca_config()).map_err(setup("bring-up"))?;
            fabric.attach(&dev);
            let addr = match link {
                LinkLayer::Ethernet => {
                    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, host));
                    let gid = hca
                        .add_roce_gid(1, 0, ip, mac, None)
                        .map_err(setup("adding the RoCE GID"))?;
                    PortAddr { gid, mac, lid: 0 }
                }
                LinkLayer::InfiniBand => {
                    let lid = hca.query_port(1).map_err(setup("QUERY_PORT"))?.lid;
                    PortAddr {
                        gid: Gid::ZERO,
                        mac,
                        lid,
                    }
                }
            };
            pending.push(Communicator::create(&mut hca, rank, n, addr, cfg)?);
            devs.push(dev);
            hcas.push(hca);
        }
        let endpoints: Vec<Vec<_>> = (0..n)
            .map(|me| {
                (0..n)
                    .map(|peer| {
                        if peer == me {
                            // Ignored by `connect`.
                            Endpoint {
                                addr: pending[me].port_addr(),
                                qpn: 0,
                                psn: 0,
                                inbox: 0,
                                rkey: 0,
                            }
                        } else {
                            pending[peer].endpoint(me)
                        }
                    })
                    .collect()
            })
            .collect();
        let mut ranks = Vec::with_capacity(n);
        for (((dev, mut hca), p), eps) in devs.into_iter().zip(hcas).zip(pending).zip(endpoints) {
            let comm = p.connect(&mut hca, &eps)?;
            ranks.push(MockRank { dev, hca, comm });
        }
        let pump = Some(fabric.start_pump(20));
        Ok(MockCluster {
            fabric,
            ranks,
            pump,
        })
    }

    /// Sets the fabric's seeded faults (drop, duplicate, reorder, …).
    pub fn set_faults(&self, faults: FaultConfig) {
        self.fabric.set_faults(faults);
    }

    /// Runs `f` on every rank's communicator, each on its own thread, and returns the
    /// results by rank.
    pub fn run<R: Send>(&mut self, f: impl Fn(&mut MockComm) -> R + Sync) -> Vec<R> {
        let f = &f;
        std::thread::scope(|s| {
            let handles: Vec<_> = self
                .ranks
                .iter_mut()
                .map(|r| s.spawn(move || f(&mut r.comm)))
                .collect();
            handles
                .into_iter()
                .map(|h| match h.join() {
                    Ok(r) => r,
                    Err(p) => std::panic::resume_unwind(p),
                })
                .collect()
        })
    }

    /// Stops the pump and tears every rank down in order (communicator, then HCA).
    ///
    /// # Errors
    ///
    /// The first rank's failure.
    pub fn close(mut self) -> Result<(), Error> {
        if let Some(p) = self.pump.take() {
            p.stop();
        }
        let mut first = Ok(());
        for (rank, r) in self.ranks.drain(..).enumerate() {
            let MockRank { dev, mut hca, comm } = r;
            let res = comm.destroy(&mut hca).and_then(|()| {
                hca.close().map_err(|error| Error::Setup {
                    rank,
                    what: "teardown",
                    error,
                })
            });
            drop(dev);
            if first.is_ok() {
                first = res;
            }
        }
        first
    }
}

impl Drop for MockCluster {
    fn drop(&mut self) {
        if let Some(p) = self.pump.take() {
            p.stop();
        }
    }
}
