//! Event queue entries and the event data of the events the driver serves.

use crate::consts::EventType;
use zerocopy::byteorder::big_endian::{U16, U32};

crate::dp_struct! {
    /// A 64-byte event queue entry.
    pub struct Eqe = "mlx5_eqe" {
        /// Reserved.
        pub rsvd0: u8,
        /// Event type ([`EventType`]).
        pub r#type: u8,
        /// Reserved.
        pub rsvd1: u8,
        /// Event sub-type.
        pub sub_type: u8,
        /// Reserved.
        pub rsvd2: [U32; 7],
        /// Event data (28 bytes), read as one of the `Eqe*` types of this module.
        pub data: [u8; 28],
        /// Reserved.
        pub rsvd3: U16,
        /// Signature.
        pub signature: u8,
        /// Bit 0: owner.
        pub owner: u8,
    }

    /// Event data of a command completion: a bit vector of completed command slots.
    pub struct EqeCmd = "mlx5_eqe_cmd" {
        /// Bit n set: the command in slot n completed.
        pub vector: U32,
        /// Reserved.
        pub rsvd: [U32; 6],
    }

    /// Event data of a completion event.
    pub struct EqeComp = "mlx5_eqe_comp" {
        /// Reserved.
        pub reserved: [U32; 6],
        /// Bits 23:0: the CQ number.
        pub cqn: U32,
    }

    /// Event data of a page request: the firmware wants pages (positive) or gives them back
    /// (negative).
    pub struct EqePageReq = "mlx5_eqe_page_req" {
        /// Embedded CPU function.
        pub ec_function: U16,
        /// Function id.
        pub func_id: U16,
        /// Pages requested, as a signed 32-bit count.
        pub num_pages: U32,
        /// Reserved.
        pub rsvd1: [U32; 5],
    }

    /// Event data of a port change (its C type is a 9-byte prefix of the data).
    pub struct EqePortState = "mlx5_eqe_port_state" {
        /// Reserved.
        pub reserved0: [u8; 8],
        /// Bits 7:4: port number.
        pub port: u8,
    }

    /// Event data of a CQ error (a 12-byte prefix of the data).
    pub struct EqeCqErr = "mlx5_eqe_cq_err" {
        /// Bits 23:0: the CQ number.
        pub cqn: U32,
        /// Reserved.
        pub reserved1: [u8; 7],
        /// Syndrome (1: CQ overrun, 2: access violation).
        pub syndrome: u8,
    }

    /// Event data of QP and SRQ events (communication established, last WQE reached,
    /// catastrophic, invalid request and access errors).
    pub struct EqeQpSrq = "mlx5_eqe_qp_srq" {
        /// Reserved.
        pub reserved1: [U32; 5],
        /// 0: QP (or RQ), 1: SRQ.
        pub r#type: u8,
        /// Reserved.
        pub reserved2: [u8; 3],
        /// Bits 23:0: the QP or SRQ number.
        pub qp_srq_n: U32,
    }
}

impl Eqe {
    /// The event type.
    #[inline]
    pub const fn event_type(&self) -> EventType {
        EventType::from_raw(self.r#type)
    }

    /// The owner bit.
    #[inline]
    pub const fn owner_bit(&self) -> u8 {
        self.owner & 1
    }

    /// Reads the event data as `T` (one of this module's event data types).
    #[inline]
    pub fn data_as<T: zerocopy::FromBytes + zerocopy::KnownLayout + zerocopy::Immutable>(
        &self,
    ) -> &T {
        match T::ref_from_prefix(&self.data) {
            Ok((t, _)) => t,
            Err(_) => panic!("event data type larger than the EQE's 28 data bytes"),
        }
    }
}

impl EqePortState {
    /// The port number (`port >> 4`).
    #[inline]
    pub const fn port_num(&self) -> u8 {
        self.port >> 4
    }
}

impl EqePageReq {
    /// The signed page count: positive when the firmware wants pages, negative when it
    /// returns them.
    #[inline]
    pub fn num_pages_signed(&self) -> i32 {
        self.num_pages.get() as i32
    }
}

/// Byte offset of the event data in an EQE.
pub const EQE_DATA_OFFSET: usize = 0x20;

const _: () = assert!(core::mem::size_of::<Eqe>() == 64);
