//! # uhca-mock: a model of a ConnectX (mlx5) HCA
//!
//! Written from the PRM and the `uhca-fwif` layouts, never from the driver: it decodes
//! commands and WQEs and encodes CQEs, EQEs and packets by itself, so a misreading of the
//! PRM in the driver shows up as a failing test instead of being mirrored.
//!
//! A [`MockHca`] is one PCI function: configuration space ([`pci`]), BAR0 (initialization
//! segment, health buffer, UAR pages), an IOMMU in front of host memory ([`iommu`]) and
//! firmware that executes commands ([`firmware`]). A driver talks to it through a
//! [`MockPlatform`], which implements the HAL's platform traits; doorbells are processed
//! synchronously inside the `Bar` write. `MODEL.md` lists what the model implements.
//!
//! The datapath [`engine`] executes send WQEs when their doorbell rings and turns them into
//! real InfiniBand or RoCEv2 packets ([`wire`]); a [`Fabric`] connects several HCAs (an
//! in-memory switch with a virtual clock, seeded fault injection, a pcap tap and a UDP
//! uplink) and moves those packets when it is pumped.
//!
//! ```
//! use uhca_mock::{MockConfig, MockHca};
//! use uhca_hal::{Bar, PciConfig};
//! let hca = MockHca::new(MockConfig::ethernet());
//! let platform = hca.platform();
//! assert_eq!(platform.config_read16(0).unwrap(), 0x15b3);
//! // cmdif_rev 5 in the initialization segment.
//! assert_eq!(platform.read_be32(4) >> 16, 5);
//! ```

pub mod bar;
pub mod caps;
pub mod clock;
pub(crate) mod device;
pub mod engine;
mod engine_state;
pub mod fabric;
pub mod faults;
pub mod firmware;
mod fw_state;
pub mod hostile;
pub mod iommu;
pub mod log;
pub(crate) mod model;
mod objects;
pub mod pci;
pub mod wire;

pub use caps::LinkLayer;
pub use clock::ClockMode;
pub use engine::DatapathCounters;
pub use fabric::udp::UdpHca;
pub use fabric::{Fabric, FabricCounters, FaultConfig};
pub use faults::CommandFault;
pub use firmware::HcaState;
pub use hostile::{HostilePlatform, Lie, Told};
pub use iommu::{FaultKind, IommuFault, MapFdError};
pub use log::{CommandBytes, CommandOutcome, CommandRecord, DoorbellRecord, LOG_CAPACITY, Note};
pub use model::{MockConfig, MockHca, MockPlatform, ObjectCounts, PageCounts};
