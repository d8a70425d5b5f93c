//! The checks (see main.rs).

use std::process::ExitCode;
use std::time::Instant;

use uhca_driver::verbs::{QpCaps, QpInitAttr, Rc};
use uhca_driver::vfio::VfioPlatform;
use uhca_driver::{Hca, HcaConfig, TeardownMode};

pub(crate) type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// PASS/FAIL lines and their tally.
#[derive(Default)]
pub(crate) struct Report {
    passed: u32,
    failed: u32,
}

impl Report {
    pub(crate) fn check(&mut self, ok: bool, what: &str) -> bool {
        if ok {
            println!("PASS {what}");
            self.passed += 1;
        } else {
            println!("FAIL {what}");
            self.failed += 1;
        }
        ok
    }

    /// A step that must work for the next ones to mean anything.
    pub(crate) fn require<T>(&mut self, what: &str, r: Res<T>) -> Option<T> {
        match r {
            Ok(v) => {
                self.check(true, what);
                Some(v)
            }
            Err(e) => {
                self.check(false, &format!("{what}: {e}"));
                None
            }
        }
    }
}

/// The objects of a test on a running HCA: a PD, a CQ and an RC QP (in RESET).
struct Objects {
    pd: uhca_driver::verbs::Pd<VfioPlatform>,
    cq: uhca_driver::verbs::Cq<VfioPlatform>,
    qp: uhca_driver::verbs::Qp<VfioPlatform, Rc>,
}

impl Objects {
    fn create(hca: &mut Hca<VfioPlatform>) -> Res<Self> {
        let pd = hca.alloc_pd()?;
        let cq = hca.create_cq(16)?;
        let qp = hca.create_qp::<Rc>(
            &pd,
            &QpInitAttr {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: QpCaps {
                    max_send_wr: 4,
                    max_recv_wr: 4,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
            },
        )?;
        Ok(Objects { pd, cq, qp })
    }

    fn destroy(self, hca: &mut Hca<VfioPlatform>) -> Res<()> {
        self.qp.destroy(hca)?;
        self.cq.destroy(hca)?;
        self.pd.destroy(hca)?;
        Ok(())
    }
}

fn port_active(hca: &mut Hca<VfioPlatform>) -> Res<bool> {
    Ok(format!("{:?}", hca.query_port(1)?.state) == "Active")
}

fn run(r: &mut Report, bdf: &str) -> Option<()> {
    let t = Instant::now();
    let p = r.require(
        "open the function through VFIO",
        VfioPlatform::open(bdf).map_err(Into::into),
    )?;
    r.check(p.supports_reset(), "VFIO offers a reset for the function");

    // 1. Bring-up, graceful teardown, second bring-up in one process.
    let graceful = HcaConfig {
        teardown: TeardownMode::Graceful,
        ..HcaConfig::default()
    };
    let hca = r.require(
        "first bring-up",
        Hca::open_with(p.clone(), graceful).map_err(Into::into),
    )?;
    r.require("graceful teardown", hca.close().map_err(Into::into))?;
    let mut hca = r.require(
        "second bring-up in the same process",
        Hca::open(p.clone()).map_err(Into::into),
    )?;

    // 2. VFIO_DEVICE_RESET while this driver runs, with objects on the device.
    let objects = r.require("PD, CQ and RC QP created", Objects::create(&mut hca))?;
    let first_qpn = objects.qp.qpn();
    println!("first QP of the running HCA: 0x{first_qpn:06x}");
    r.require(
        "VFIO_DEVICE_RESET while the driver runs",
        p.reset().map_err(Into::into),
    )?;
    // The reset destroyed what this handle and its objects owned on the device: neither
    // destroyed nor torn down through it (their memory is leaked, as for any object the
    // device may still hold).
    std::mem::forget(objects);
    std::mem::forget(hca);

    // 3. The driver comes back up on the reset function.
    let mut hca = r.require(
        "bring-up after the reset",
        Hca::open(p.clone()).map_err(Into::into),
    )?;
    let objects = r.require("objects created after the reset", Objects::create(&mut hca))?;
    let qpn = objects.qp.qpn();
    println!("first QP after the reset: 0x{qpn:06x}");
    r.check(
        qpn == first_qpn,
        "the firmware started over: the first QP after the reset has the number the \
         first QP before it had (the old QP went with the reset)",
    );
    r.check(
        port_active(&mut hca).unwrap_or(false),
        "port 1 active after the reset",
    );
    r.require("objects destroyed", objects.destroy(&mut hca))?;

    // 4. A DMA to an IOVA the driver never mapped (see dma.rs).
    if let Some(o) = crate::dma::check(r, &p, &mut hca) {
        r.require(
            "the DMA-fault checks' objects destroyed",
            o.destroy(&mut hca),
        )?;
    }
    r.require(
        "fast teardown after the reset",
        hca.close().map_err(Into::into),
    )?;
    println!(
        "vfio_mlx5: checks done in {:.2} s",
        t.elapsed().as_secs_f64()
    );
    Some(())
}

pub fn main() -> ExitCode {
    let Some(bdf) = std::env::args().nth(1) else {
        eprintln!("usage: vfio_mlx5 BDF   (a mock ConnectX function bound to vfio-pci)");
        return ExitCode::from(2);
    };
    let mut r = Report::default();
    if run(&mut r, &bdf).is_none() {
        println!("(stopped at the first failed step)");
    }
    println!("{} passed, {} failed", r.passed, r.failed);
    if r.failed == 0 && r.passed > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
