//! # uhca
//!
//! A userspace and bare-metal verbs driver for NVIDIA ConnectX HCAs (the "mlx5" interface,
//! ConnectX-4 and later), with a model of the device so that everything can be tested
//! without hardware. This crate re-exports the layers so a user depends on one crate:
//!
//! * [`fwif`]: the firmware interface (layouts and constants);
//! * [`hal`]: typed hardware access (platform traits, command queue, rings);
//! * [`driver`]: bring-up, verbs objects and the datapath;
//! * `mock` (feature `mock`): the device model;
//! * [`oob`] (feature `std`): the out-of-band exchange of rdma-core's pingpong examples;
//! * [`prelude`]: the names a transport author needs, in one `use uhca::prelude::*;`;
//! * `testbed` (feature `mock`): N mock HCAs on one fabric, RC connections in one call,
//!   and a poll that moves the fabric until completions arrive or a deadline passes.
#![cfg_attr(not(feature = "std"), no_std)]
#![forbid(unsafe_code)]

pub use uhca_driver as driver;
pub use uhca_fwif as fwif;
pub use uhca_hal as hal;
#[cfg(feature = "mock")]
pub use uhca_mock as mock;

#[cfg(feature = "std")]
pub mod oob;

#[cfg(feature = "mock")]
pub mod testbed;

pub mod prelude {
    //! The names a transport author needs to open an HCA, make its objects, connect queue
    //! pairs and move data, so that one `use uhca::prelude::*;` suffices:
    //!
    //! * the HCA, its errors and its platform: [`Hca`], [`HcaConfig`], [`Error`], [`Failed`],
    //!   [`Platform`] (the trait every object is generic over);
    //! * the objects: [`Pd`], [`Mr`], [`UserMr`], [`Cq`], [`Qp`] with its transports
    //!   ([`Rc`], [`Uc`], [`Ud`]; its state is checked at run time), [`Srq`];
    //! * their attributes: [`QpInitAttr`], [`QpCaps`], [`InitAttr`], [`RtrAttr`], [`RtsAttr`],
    //!   [`SrqInitAttr`], [`AccessFlags`], [`IbMtu`];
    //! * the datapath: [`SendWr`], [`SendOp`], [`SendFlags`], [`RecvWr`], [`Sge`], [`UdDest`],
    //!   [`WorkCompletion`], [`WcStatus`], [`WcOpcode`], [`BadWr`], [`PollError`];
    //! * addressing: [`AhAttr`], [`Gid`], [`Mac`], [`Grh`], [`StaticRate`], and
    //!   [`Endpoint`] with [`LinkLayer`] (what a peer needs to build its path to a port:
    //!   [`Hca::endpoint`], [`Endpoint::path_to`]; on RoCE, [`Hca::add_roce_ip`] installs
    //!   the port's GID first);
    //! * memory: [`DmaMem`] (the trait whose methods read and write a region's memory),
    //!   [`MappedBuf`] and [`HostBuf`] (a caller's buffer mapped for the device).
    //!
    //! ```
    //! use uhca::prelude::*;
    //!
    //! fn write_with_imm<P: Platform>(
    //!     qp: &mut Qp<P, Rc>,
    //!     mr: &Mr<P>,
    //!     remote_addr: u64,
    //!     rkey: u32,
    //! ) -> Result<(), Box<dyn std::error::Error>> {
    //!     let sge = [mr.sge(0, 64)?];
    //!     let op = SendOp::RdmaWriteWithImm { remote_addr, rkey, imm: 7 };
    //!     qp.post_send(&[SendWr::new(1, op, &sge)])?;
    //!     Ok(())
    //! }
    //! ```

    pub use uhca_driver::addr::{AhAttr, Endpoint, Gid, Grh, Mac, StaticRate};
    pub use uhca_driver::caps::LinkLayer;
    pub use uhca_driver::verbs::{
        BadWr, Cq, InitAttr, Mr, Pd, PollError, Qp, QpCaps, QpInitAttr, Rc, RecvWr, RtrAttr,
        RtsAttr, SendFlags, SendOp, SendWr, Sge, Srq, SrqInitAttr, Uc, Ud, UdDest, UserMr,
        WcOpcode, WcStatus, WorkCompletion,
    };
    pub use uhca_driver::{Error, Failed, Hca, HcaConfig, Platform};
    pub use uhca_fwif::consts::{AccessFlags, IbMtu};
    pub use uhca_hal::{DmaMem, HostBuf, MappedBuf};
}

/// The README's examples, compiled and run as doctests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
