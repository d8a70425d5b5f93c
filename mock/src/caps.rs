//! The capability profile: what QUERY_HCA_CAP reports (maximum and current), and which
//! fields SET_HCA_CAP may change. Modelled on a ConnectX-6 Dx; values are realistic but
//! not copied from any particular firmware.

use uhca_fwif::PrmLayout;
use uhca_fwif::consts::PortTypeCap;
use uhca_fwif::consts::{
    ATOMIC_OPS_CMP_SWAP, ATOMIC_OPS_FETCH_ADD, ATOMIC_REQ_MODE_HOST_ENDIANNESS,
    ATOMIC_SIZE_QP_8BYTES,
};
use uhca_fwif::ctx::{AtomicCaps, CmdHcaCap, RoceCap, atomic_caps, cmd_hca_cap, roce_cap};
use uhca_fwif::field::Field;

/// `stat_rate_support`: bit n set when static-rate code n is supported (every code but 6,
/// 400 Gb/s).
pub const STAT_RATE_SUPPORT: u16 = 0xffbf;

/// The link layer of a port: the modelled function's (`cmd_hca_cap.port_type`, encoded by
/// [`LinkLayer::cap`]) and a fabric's, which every HCA attached to it must share.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LinkLayer {
    /// InfiniBand: native IB packets, delivered by DLID; LIDs from a subnet manager,
    /// MAD_IFC.
    InfiniBand,
    /// Ethernet carrying RoCE: RoCEv2 frames, delivered by destination MAC or IP.
    #[default]
    Ethernet,
}

impl LinkLayer {
    /// The `cmd_hca_cap.port_type` encoding.
    pub fn cap(self) -> PortTypeCap {
        match self {
            LinkLayer::InfiniBand => PortTypeCap::Ib,
            LinkLayer::Ethernet => PortTypeCap::Eth,
        }
    }
}

/// Number of P_Key table entries (`pkey_table_size` 0 encodes 128).
pub const PKEY_TABLE_ENTRIES: usize = 128;
/// Entries of the GID table of an InfiniBand port.
pub const IB_GID_TABLE_ENTRIES: usize = 8;
/// `gid_table_size` is an encoding, `8 << n` entries (Linux `mlx5_get_gid_table_len`): 0
/// encodes [`IB_GID_TABLE_ENTRIES`].
pub const GID_TABLE_SIZE_ENCODED: u16 = 0;
/// Entries of the RoCE address (GID) table of an Ethernet port.
pub const ROCE_ADDRESS_TABLE_ENTRIES: usize = 256;
/// Number of MSI-X vectors, as reported by the MSI-X capability.
pub const MSIX_VECTORS: u16 = 64;
/// Device clock frequency in kHz (1 GHz: internal timer ticks are nanoseconds).
pub const DEVICE_FREQUENCY_KHZ: u32 = 1_000_000;

/// General capability fields SET_HCA_CAP may change. Numeric fields must not exceed the
/// maximum; one-bit fields may be set only where the maximum has them.
pub const SETTABLE_GENERAL: &[Field] = &[
    cmd_hca_cap::cmdif_checksum,
    cmd_hca_cap::log_max_qp,
    cmd_hca_cap::pkey_table_size,
    cmd_hca_cap::uar_4k,
    cmd_hca_cap::log_uar_page_sz,
    cmd_hca_cap::cache_line_128byte,
    cmd_hca_cap::release_all_pages,
    cmd_hca_cap::roce,
    cmd_hca_cap::mkey_by_name,
    cmd_hca_cap::num_vhca_ports,
    cmd_hca_cap::abs_native_port_num,
    cmd_hca_cap::disable_link_up_by_init_hca,
    cmd_hca_cap::pci_sync_for_fw_update_event,
    cmd_hca_cap::drain_sigerr,
    cmd_hca_cap::dct,
];

/// RoCE capability fields SET_HCA_CAP may change.
pub const SETTABLE_ROCE: &[Field] = &[
    roce_cap::sw_r_roce_src_udp_port,
    roce_cap::qp_ooo_transmit_default,
];

/// Atomic capability fields SET_HCA_CAP may change: the requester's 8-byte endianness
/// mode (its maximum is 1 when `supported_atomic_req_8B_endianness_mode_1` is offered).
pub const SETTABLE_ATOMIC: &[Field] = &[atomic_caps::atomic_req_8B_endianness_mode];

/// Maximum and current capabilities of one function.
#[derive(Clone, Debug)]
pub(crate) struct Caps {
    pub(crate) general_max: CmdHcaCap,
    pub(crate) general_cur: CmdHcaCap,
    pub(crate) roce_max: RoceCap,
    pub(crate) roce_cur: RoceCap,
    pub(crate) atomic_max: AtomicCaps,
    pub(crate) atomic_cur: AtomicCaps,
}

impl Caps {
    pub(crate) fn new(port: LinkLayer) -> Self {
        let mut g = CmdHcaCap::default();
        g.set_log_max_srq_sz(15)
            .set_log_max_qp_sz(15)
            .set_log_max_qp(17)
            .set_log_max_srq(20)
            .set_log_max_rmp(20)
            .set_log_max_cq_sz(22)
            .set_log_max_cq(16)
            .set_log_max_eq_sz(22)
            .set_log_max_mkey(24)
            .set_log_max_eq(6)
            .set_fast_teardown(true)
            .set_force_teardown(true)
            .set_max_indirection(0)
            .set_log_max_mrw_sz(64)
            .set_log_max_klm_list_size(16)
            .set_log_max_ra_req_qp(4)
            .set_log_max_ra_res_qp(4)
            .set_release_all_pages(true)
            .set_cache_line_128byte(false)
            .set_gid_table_size(GID_TABLE_SIZE_ENCODED)
            .set_max_qp_cnt(128)
            .set_pkey_table_size(0)
            .set_local_ca_ack_delay(16)
            .set_port_type(port.cap().raw())
            .set_num_ports(1)
            .set_log_max_msg(30)
            // Every PRM static rate up to 200 Gb/s (codes 0-5 and 7-15), not 400 Gb/s
            // (code 6): the rates of a 200 Gb/s adapter.
            .set_stat_rate_support(STAT_RATE_SUPPORT)
            .set_cqe_version(1)
            .set_cmdif_checksum(0)
            .set_roce(port == LinkLayer::Ethernet)
            .set_cq_oi(true)
            .set_cq_moderation(true)
            .set_qkv(true)
            .set_pkv(true)
            .set_ud(true)
            .set_uc(true)
            .set_rc(true)
            .set_uar_4k(true)
            .set_umem_uid_0(true)
            .set_log_pg_sz(12)
            .set_bf(true)
            .set_log_bf_reg_size(9)
            .set_max_wqe_sz_sq(1024)
            .set_max_wqe_sz_rq(512)
            .set_max_wqe_sz_sq_dc(0)
            .set_log_max_transport_domain(20)
            .set_log_max_pd(23)
            // XRC: domains (ALLOC_XRCD), XRC SRQs (CREATE_XRC_SRQ) and XRC QPs.
            .set_xrc(true)
            .set_log_max_xrcd(24)
            // The engine executes no UMR work request (MODEL.md): a UMR can change no memory
            // key's translation size, atomic setting or indirection. With these bits set a
            // kernel driver registers memory with CREATE_MKEY (Linux's mlx5_ib keeps its
            // cache of pre-made UMR-enabled keys empty).
            .set_umr_modify_entity_size_disabled(true)
            .set_umr_modify_atomic_disabled(true)
            .set_umr_indirect_mkey_disabled(true)
            .set_q_counter_aggregation(false)
            .set_sq_ts_format(0)
            .set_rq_ts_format(0)
            .set_log_uar_page_sz(0)
            .set_device_frequency_khz(DEVICE_FREQUENCY_KHZ)
            .set_num_of_uars_per_page(1)
            .set_num_vhca_ports(1)
            .set_abs_native_port_num(true)
            .set_disable_link_up_by_init_hca(true)
            .set_drain_sigerr(false)
            .set_atomic(true)
            // MCAM and, through it, the firmware component registers MCQS and MCQI.
            .set_mcam_reg(true)
            // 8-byte atomics (compare-and-swap, fetch-and-add), which the engine executes.
            .set_log_max_atomic_size_qp(3);
        let general_max = g;
        let mut general_cur = g;
        // Bits a driver turns on (they start off) and limits it lowers.
        general_cur
            .set_abs_native_port_num(false)
            .set_disable_link_up_by_init_hca(false)
            .set_release_all_pages(false);

        let mut r = RoceCap::default();
        if port == LinkLayer::Ethernet {
            r.set_sw_r_roce_src_udp_port(true)
                .set_fl_rc_qp_when_roce_disabled(true)
                .set_fl_rc_qp_when_roce_enabled(true)
                .set_qp_ts_format(0)
                .set_l3_type(0x3)
                .set_roce_version(0x5)
                .set_r_roce_dest_udp_port(4791)
                .set_r_roce_max_src_udp_port(0xffff)
                .set_r_roce_min_src_udp_port(0xc000)
                .set_roce_address_table_size(ROCE_ADDRESS_TABLE_ENTRIES as u16);
        }
        let roce_max = r;
        let mut roce_cur = r;
        roce_cur.set_sw_r_roce_src_udp_port(false);
        let (atomic_max, atomic_cur) = atomic_pages(
            ATOMIC_OPS_CMP_SWAP | ATOMIC_OPS_FETCH_ADD,
            ATOMIC_SIZE_QP_8BYTES,
            true,
        );
        Caps {
            general_max,
            general_cur,
            roce_max,
            roce_cur,
            atomic_max,
            atomic_cur,
        }
    }

    pub(crate) fn port_type(&self) -> LinkLayer {
        if self.general_cur.port_type() == PortTypeCap::Ib.raw() {
            LinkLayer::InfiniBand
        } else {
            LinkLayer::Ethernet
        }
    }
}

/// Applies the settable fields of `req` onto `cur`, checking each against `max`. Returns the
/// first offending field.
/// The atomic capability page, maximum and current: `operations` (`atomic_operations`
/// bits), `size_qp` (`atomic_size_qp` bits) and whether the requester may write 8-byte
/// results in host endianness (`supported_atomic_req_8B_endianness_mode_1`; the maximum of
/// `atomic_req_8B_endianness_mode` is then 1). The current mode starts big-endian (0).
pub(crate) fn atomic_pages(
    operations: u16,
    size_qp: u16,
    host_endianness: bool,
) -> (AtomicCaps, AtomicCaps) {
    let mut a = AtomicCaps::default();
    a.set_atomic_operations(operations)
        .set_atomic_size_qp(size_qp)
        .set_supported_atomic_req_8B_endianness_mode_1(host_endianness);
    let mut max = a;
    if host_endianness {
        max.set_atomic_req_8B_endianness_mode(ATOMIC_REQ_MODE_HOST_ENDIANNESS);
    }
    (max, a)
}

pub(crate) fn apply_settable<T: PrmLayout + Copy>(
    cur: &mut T,
    max: &T,
    req: &T,
    settable: &[Field],
) -> Result<(), Field> {
    let mut next = *cur;
    for &f in settable {
        let want = req.get(f);
        let limit = max.get(f);
        // log_uar_page_sz: the model has 4 KiB UAR pages only.
        if f == cmd_hca_cap::log_uar_page_sz {
            if want != 0 {
                return Err(f);
            }
        } else if want > limit {
            return Err(f);
        }
        next.set(f, want);
    }
    *cur = next;
    Ok(())
}

/// The default P_Key (full member of the default partition), entry 0 of the P_Key table.
pub const DEFAULT_PKEY: u16 = 0xffff;
/// The link-local GID prefix (fe80::/64).
pub const GID_PREFIX: u64 = 0xfe80_0000_0000_0000;
