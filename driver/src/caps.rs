//! Device capabilities: what QUERY_HCA_CAP reports, decoded into the numbers a verbs user
//! asks for (`ibv_query_device`), and the capability policy the driver sets with
//! SET_HCA_CAP during bring-up.

use uhca_fwif::consts::{
    ATOMIC_OPS_CMP_SWAP, ATOMIC_OPS_FETCH_ADD, ATOMIC_REQ_MODE_HOST_ENDIANNESS,
    ATOMIC_SIZE_QP_8BYTES, PortTypeCap,
};
use uhca_fwif::ctx::{AtomicCaps, CmdHcaCap, RoceCap};

/// The link layer of the HCA's ports (`cmd_hca_cap.port_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayer {
    /// Native InfiniBand.
    InfiniBand,
    /// Ethernet (RoCE).
    Ethernet,
}

impl core::fmt::Display for LinkLayer {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            LinkLayer::InfiniBand => "InfiniBand",
            LinkLayer::Ethernet => "Ethernet",
        })
    }
}

/// The general device capabilities a verbs user sees, decoded from `cmd_hca_cap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Link layer of the ports.
    pub link_layer: LinkLayer,
    /// Number of physical ports.
    pub num_ports: u8,
    /// Most QPs (`1 << log_max_qp`).
    pub max_qp: u32,
    /// Most WQEs per work queue (`1 << log_max_qp_sz`).
    pub max_qp_wr: u32,
    /// Most CQs.
    pub max_cq: u32,
    /// Most CQEs per CQ.
    pub max_cqe: u32,
    /// Most EQs.
    pub max_eq: u32,
    /// Most memory keys.
    pub max_mr: u32,
    /// Most protection domains.
    pub max_pd: u32,
    /// Most SRQs.
    pub max_srq: u32,
    /// Most WQEs per SRQ.
    pub max_srq_wr: u32,
    /// Largest message (`1 << log_max_msg`).
    pub max_msg_sz: u64,
    /// Largest send WQE in bytes.
    pub max_send_wqe_bytes: u16,
    /// Largest receive WQE in bytes.
    pub max_recv_wqe_bytes: u16,
    /// Most outstanding RDMA READ/atomic requests a QP may answer as the responder
    /// (`1 << log_max_ra_res_qp`, verbs' `max_qp_rd_atom`).
    pub max_qp_rd_atom: u32,
    /// Most outstanding RDMA READ/atomic requests a QP may issue as the requester
    /// (`1 << log_max_ra_req_qp`, verbs' `max_qp_init_rd_atom`).
    pub max_qp_init_rd_atom: u32,
    /// GID table entries per port (decoded from the PRM's encoding).
    pub gid_table_len: u32,
    /// P_Key table entries per port (decoded).
    pub pkey_table_len: u32,
    /// RoCE is supported.
    pub roce: bool,
    /// 8-byte atomics (compare-and-swap and fetch-and-add on RC QPs) are offered: the
    /// general `atomic` capability is set and the atomic capability page has both
    /// operations, the 8-byte QP size, and the requester writes the original value into the
    /// local buffer in the host's byte order (see [`atomics_offered`]). The word at the
    /// remote address is big-endian (InfiniBand's order).
    pub atomic: bool,
    /// RC, UC, UD transport support.
    pub rc: bool,
    /// UC transport.
    pub uc: bool,
    /// UD transport.
    pub ud: bool,
    /// CQE format version.
    pub cqe_version: u8,
    /// log2 of a BlueFlame register's size.
    pub log_bf_reg_size: u8,
    /// Fast teardown supported.
    pub fast_teardown: bool,
    /// Force teardown supported.
    pub force_teardown: bool,
    /// The device clock, kHz (0 if not reported).
    pub device_frequency_khz: u32,
}

const fn pow2(log: u8) -> u32 {
    if log >= 32 { u32::MAX } else { 1 << log }
}

/// Decodes `gid_table_size`: 8 << n entries for n in 0..=4 (8 to 128), anything larger is
/// invalid and reads as 0, as Linux's mlx5 driver treats it.
const fn gid_table_len(enc: u16) -> u32 {
    if enc > 4 { 0 } else { 8 << enc }
}

/// Decodes `pkey_table_size`: 128 << n entries for n in 0..=5, anything larger reads as 0.
const fn pkey_table_len(enc: u16) -> u32 {
    if enc > 5 { 0 } else { 128 << enc }
}

impl DeviceCaps {
    /// Decodes the general capabilities.
    pub fn from_hca_cap(cap: &CmdHcaCap) -> DeviceCaps {
        DeviceCaps {
            link_layer: match PortTypeCap::from_raw(cap.port_type()) {
                PortTypeCap::Eth => LinkLayer::Ethernet,
                _ => LinkLayer::InfiniBand,
            },
            num_ports: cap.num_ports(),
            max_qp: pow2(cap.log_max_qp()),
            max_qp_wr: pow2(cap.log_max_qp_sz()),
            max_cq: pow2(cap.log_max_cq()),
            max_cqe: pow2(cap.log_max_cq_sz()),
            max_eq: pow2(cap.log_max_eq()),
            max_mr: pow2(cap.log_max_mkey()),
            max_pd: pow2(cap.log_max_pd()),
            max_srq: pow2(cap.log_max_srq()),
            max_srq_wr: pow2(cap.log_max_srq_sz()),
            max_msg_sz: 1u64 << cap.log_max_msg().min(63),
            max_send_wqe_bytes: cap.max_wqe_sz_sq(),
            max_recv_wqe_bytes: cap.max_wqe_sz_rq(),
            max_qp_rd_atom: pow2(cap.log_max_ra_res_qp()),
            max_qp_init_rd_atom: pow2(cap.log_max_ra_req_qp()),
            gid_table_len: gid_table_len(cap.gid_table_size()),
            pkey_table_len: pkey_table_len(cap.pkey_table_size()),
            roce: cap.roce(),
            atomic: cap.atomic(),
            rc: cap.rc(),
            uc: cap.uc(),
            ud: cap.ud(),
            cqe_version: cap.cqe_version(),
            log_bf_reg_size: cap.log_bf_reg_size(),
            fast_teardown: cap.fast_teardown(),
            force_teardown: cap.force_teardown(),
            device_frequency_khz: cap.device_frequency_khz(),
        }
    }
}

/// The RoCE capabilities, decoded from `roce_cap`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RoceCaps {
    /// Supported RoCE versions (bit 0: v1, bit 1: v1.5, bit 2: v2).
    pub roce_version: u8,
    /// Supported L3 types (bit 0: IPv4, bit 1: IPv6 for RoCEv2).
    pub l3_type: u8,
    /// RoCEv2 UDP destination port (4791).
    pub udp_dest_port: u16,
    /// Range of UDP source ports the HCA picks from.
    pub udp_src_port_range: (u16, u16),
    /// The driver may choose the UDP source port per QP.
    pub sw_udp_src_port: bool,
    /// Entries in the RoCE address (GID) table.
    pub address_table_len: u16,
}

impl RoceCaps {
    /// Decodes the RoCE capabilities.
    pub fn from_roce_cap(cap: &RoceCap) -> RoceCaps {
        RoceCaps {
            roce_version: cap.roce_version(),
            l3_type: cap.l3_type(),
            udp_dest_port: cap.r_roce_dest_udp_port(),
            udp_src_port_range: (cap.r_roce_min_src_udp_port(), cap.r_roce_max_src_udp_port()),
            sw_udp_src_port: cap.sw_r_roce_src_udp_port(),
            address_table_len: cap.roce_address_table_size(),
        }
    }

    /// Whether RoCEv2 is supported.
    pub fn v2(&self) -> bool {
        self.roce_version & 0x4 != 0
    }
}

/// The general capabilities the driver sets with SET_HCA_CAP, computed from the current and
/// maximum capabilities, as rdma-core's VFIO provider and Linux do: start from the current
/// values, turn command signatures off (`cmdif_checksum = 0`), use 4 KiB UAR pages
/// (`log_uar_page_sz = 0`) and name memory keys by their index when the device allows.
pub fn general_caps_to_set(current: &CmdHcaCap, max: &CmdHcaCap) -> CmdHcaCap {
    let mut set = *current;
    set.set_cmdif_checksum(0);
    set.set_log_uar_page_sz(0);
    if max.mkey_by_name() {
        set.set_mkey_by_name(true);
    }
    if max.release_all_pages() {
        set.set_release_all_pages(true);
    }
    set
}

/// The atomic capabilities the driver sets: the requester writes an 8-byte atomic's original
/// value into the local buffer in the host's byte order when the device can
/// (`supported_atomic_req_8B_endianness_mode_1`), as Linux's `handle_hca_cap_atomic`
/// (`drivers/net/ethernet/mellanox/mlx5/core/main.c`) sets it; otherwise the value would
/// arrive big-endian. `None` when there is nothing to set.
pub fn atomic_caps_to_set(current: &AtomicCaps) -> Option<AtomicCaps> {
    (current.supported_atomic_req_8B_endianness_mode_1()
        && current.atomic_req_8B_endianness_mode() != ATOMIC_REQ_MODE_HOST_ENDIANNESS)
        .then(|| {
            let mut set = AtomicCaps::default();
            set.set_atomic_req_8B_endianness_mode(ATOMIC_REQ_MODE_HOST_ENDIANNESS);
            set
        })
}

/// Whether the driver offers 8-byte atomics, decided from the current atomic capability
/// page as Linux's `mlx5_ib` does (`get_atomic_caps` in
/// `drivers/infiniband/hw/mlx5/main.c`): compare-and-swap and fetch-and-add, the 8-byte
/// size for QPs, and the original value written in host order (mode 1, or a big-endian
/// host, where network order is host order). An application then reads the fetched value
/// with `u64::from_ne_bytes`, as rdma-core users do on x86.
pub fn atomics_offered(page: &AtomicCaps) -> bool {
    let ops = ATOMIC_OPS_CMP_SWAP | ATOMIC_OPS_FETCH_ADD;
    page.atomic_operations() & ops == ops
        && page.atomic_size_qp() & ATOMIC_SIZE_QP_8BYTES != 0
        && (page.atomic_req_8B_endianness_mode() == ATOMIC_REQ_MODE_HOST_ENDIANNESS
            || cfg!(target_endian = "big"))
}

/// The RoCE capabilities the driver sets: let software choose the RoCEv2 UDP source port per
/// QP when the device allows it (rdma-core's VFIO provider does the same).
pub fn roce_caps_to_set(current: &RoceCap, max: &RoceCap) -> Option<RoceCap> {
    (max.sw_r_roce_src_udp_port() && !current.sw_r_roce_src_udp_port()).then(|| {
        let mut set = *current;
        set.set_sw_r_roce_src_udp_port(true);
        set
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_log_sizes_and_table_encodings() {
        let mut c = CmdHcaCap::default();
        c.set_log_max_qp(18)
            .set_log_max_qp_sz(15)
            .set_num_ports(1)
            .set_port_type(1);
        c.set_gid_table_size(4)
            .set_pkey_table_size(0)
            .set_log_max_msg(30)
            .set_roce(true);
        let d = DeviceCaps::from_hca_cap(&c);
        assert_eq!((d.max_qp, d.max_qp_wr, d.num_ports), (1 << 18, 1 << 15, 1));
        assert_eq!(d.link_layer, LinkLayer::Ethernet);
        assert_eq!((d.gid_table_len, d.pkey_table_len), (128, 128));
        assert_eq!(d.max_msg_sz, 1 << 30);
        assert!(d.roce);
        c.set_gid_table_size(5);
        assert_eq!(
            DeviceCaps::from_hca_cap(&c).gid_table_len,
            0,
            "invalid encoding"
        );
    }

    #[test]
    fn set_policy_turns_checksums_off_and_keeps_the_rest() {
        let mut cur = CmdHcaCap::default();
        cur.set_cmdif_checksum(3)
            .set_log_uar_page_sz(4)
            .set_log_max_qp(10);
        let mut max = CmdHcaCap::default();
        max.set_mkey_by_name(true);
        let set = general_caps_to_set(&cur, &max);
        assert_eq!((set.cmdif_checksum(), set.log_uar_page_sz()), (0, 0));
        assert_eq!(set.log_max_qp(), 10);
        assert!(set.mkey_by_name());
        assert!(!set.release_all_pages(), "not offered, not asked for");
    }

    #[test]
    fn atomics_need_both_operations_the_8_byte_size_and_host_order() {
        let mut page = AtomicCaps::default();
        page.set_atomic_operations(ATOMIC_OPS_CMP_SWAP | ATOMIC_OPS_FETCH_ADD)
            .set_atomic_size_qp(ATOMIC_SIZE_QP_8BYTES)
            .set_supported_atomic_req_8B_endianness_mode_1(true);
        let set = atomic_caps_to_set(&page).expect("host order offered, not yet set");
        assert_eq!(
            set.atomic_req_8B_endianness_mode(),
            ATOMIC_REQ_MODE_HOST_ENDIANNESS
        );
        assert_eq!(atomics_offered(&page), cfg!(target_endian = "big"));
        page.set_atomic_req_8B_endianness_mode(ATOMIC_REQ_MODE_HOST_ENDIANNESS);
        assert!(atomic_caps_to_set(&page).is_none(), "already set");
        assert!(atomics_offered(&page));
        let mut no_fa = page;
        no_fa.set_atomic_operations(ATOMIC_OPS_CMP_SWAP);
        assert!(!atomics_offered(&no_fa));
        let mut no_8b = page;
        no_8b.set_atomic_size_qp(1 << 2);
        assert!(!atomics_offered(&no_8b));
        let mut not_offered = AtomicCaps::default();
        not_offered.set_supported_atomic_req_8B_endianness_mode_1(false);
        assert!(atomic_caps_to_set(&not_offered).is_none());
    }

    #[test]
    fn roce_policy_only_sets_what_is_offered() {
        let cur = RoceCap::default();
        let mut max = RoceCap::default();
        assert!(roce_caps_to_set(&cur, &max).is_none());
        max.set_sw_r_roce_src_udp_port(true);
        assert!(
            roce_caps_to_set(&cur, &max)
                .unwrap()
                .sw_r_roce_src_udp_port()
        );
    }
}
