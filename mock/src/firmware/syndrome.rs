//! The syndromes the model's firmware reports with a failed command.
//!
//! Real firmware syndromes are internal codes without a public table; the model uses its own
//! values, one per check, so a test can tell which check refused a command. The high half
//! says which family of checks it is.

/// op_mod is not one the command accepts.
pub const BAD_OP_MOD: u32 = 0x0001_0001;
/// `uid` is not zero (user contexts are not modelled).
pub const BAD_UID: u32 = 0x0001_0002;
/// The input is shorter than the command's layout (with its flexible array).
pub const BAD_INPUT_LEN: u32 = 0x0001_0003;
/// The output is shorter than the command's layout.
pub const BAD_OUTPUT_LEN: u32 = 0x0001_0004;
/// The opcode is not implemented.
pub const BAD_OPCODE: u32 = 0x0001_0005;
/// The opcode exists but not at the interface step (ISSI) in use: the ISSI-0 SRQ
/// commands (CREATE_SRQ, DESTROY_SRQ, QUERY_SRQ, ARM_RQ) after SET_ISSI 1, the RMP
/// commands at ISSI 0. Reported with BAD_OP, the status of an opcode the firmware does not
/// take (which is how Linux recognises firmware without QUERY_ISSI).
pub const OPCODE_NOT_AT_ISSI: u32 = 0x0001_0007;
/// A function other than this one was addressed (`function_id`, `other_function`,
/// `other_vport`, `embedded_cpu_function`).
pub const BAD_FUNCTION: u32 = 0x0001_0006;

/// The HCA is not enabled (ENABLE_HCA missing) for a command that needs it.
pub const HCA_NOT_ENABLED: u32 = 0x0002_0001;
/// ENABLE_HCA on an enabled HCA.
pub const HCA_ALREADY_ENABLED: u32 = 0x0002_0002;
/// The HCA is not initialized (INIT_HCA missing).
pub const HCA_NOT_INITIALIZED: u32 = 0x0002_0003;
/// INIT_HCA or SET_HCA_CAP or SET_ISSI after INIT_HCA.
pub const HCA_ALREADY_INITIALIZED: u32 = 0x0002_0004;
/// The HCA was torn down; only page reclaim and DISABLE_HCA are accepted.
pub const HCA_TORN_DOWN: u32 = 0x0002_0005;
/// The ISSI asked for is not supported.
pub const BAD_ISSI: u32 = 0x0002_0006;
/// The capability type is not modelled.
pub const BAD_CAP_TYPE: u32 = 0x0002_0007;
/// SET_HCA_CAP asked for more than the maximum of a settable field.
pub const CAP_ABOVE_MAX: u32 = 0x0002_0008;
/// An unknown TEARDOWN_HCA profile.
pub const BAD_TEARDOWN_PROFILE: u32 = 0x0002_0009;
/// The register is not modelled.
pub const BAD_REGISTER: u32 = 0x0002_000a;
/// A write to a register that can only be read (MCAM, MCQS, MCQI).
pub const READ_ONLY_REGISTER: u32 = 0x0002_000b;
/// A register access names something the model does not have: an MCAM feature or
/// register group beyond the first four, a firmware component other than the boot image,
/// an MCQI information type other than the version, or a pending image.
pub const BAD_REGISTER_INDEX: u32 = 0x0002_000c;

/// Boot pages were not given.
pub const NO_BOOT_PAGES: u32 = 0x0003_0001;
/// Init pages were not given (INIT_HCA).
pub const NO_INIT_PAGES: u32 = 0x0003_0002;
/// Regular pages are missing and no event queue receives page requests.
pub const NO_REGULAR_PAGES: u32 = 0x0003_0003;
/// The driver answered a page request with MANAGE_PAGES "cannot give".
pub const PAGES_REFUSED: u32 = 0x0003_0004;
/// A page address is not 4 KiB aligned.
pub const PAGE_NOT_ALIGNED: u32 = 0x0003_0005;
/// A page was given twice.
pub const PAGE_DUPLICATE: u32 = 0x0003_0006;
/// A page address is not mapped by the IOMMU.
pub const PAGE_NOT_MAPPED: u32 = 0x0003_0007;
/// `input_num_entries` does not match the input length.
pub const PAGE_COUNT: u32 = 0x0003_0008;

/// An object number that does not exist (UAR, PD, TD, MKEY, CQ, EQ, QP, SRQ, counter).
pub const NO_SUCH_OBJECT: u32 = 0x0004_0001;
/// The object is still referenced by another object.
pub const OBJECT_IN_USE: u32 = 0x0004_0002;
/// The object table is full.
pub const TABLE_FULL: u32 = 0x0004_0003;
/// A queue size above the maximum.
pub const BAD_QUEUE_SIZE: u32 = 0x0004_0004;
/// The number of page addresses does not cover the queue buffer.
pub const BAD_PAS_COUNT: u32 = 0x0004_0005;
/// A referenced UAR page is not allocated.
pub const BAD_UAR: u32 = 0x0004_0006;
/// A referenced PD does not exist.
pub const BAD_PD: u32 = 0x0004_0007;
/// A referenced CQ does not exist.
pub const BAD_CQ: u32 = 0x0004_0008;
/// A referenced EQ does not exist.
pub const BAD_EQ: u32 = 0x0004_0009;
/// A referenced SRQ does not exist.
pub const BAD_SRQ: u32 = 0x0004_000a;
/// A doorbell record address not aligned to 8 bytes.
pub const BAD_DBR_ADDR: u32 = 0x0004_000b;
/// A feature the capabilities do not offer (umem, CQE compression, ODP, resize ...).
pub const UNSUPPORTED_FEATURE: u32 = 0x0004_000c;
/// A page size (`log_page_size`, `page_offset`) the model does not accept.
pub const BAD_PAGE_SIZE: u32 = 0x0004_000d;
/// The MSI-X vector is out of range.
pub const BAD_VECTOR: u32 = 0x0004_000e;
/// An unknown CQE size.
pub const BAD_CQE_SIZE: u32 = 0x0004_000f;
/// A referenced XRC domain is not allocated.
pub const BAD_XRCD: u32 = 0x0004_0010;

/// An access mode the model does not implement (only PA and MTT).
pub const BAD_ACCESS_MODE: u32 = 0x0005_0001;
/// Remote write or atomic access without local write.
pub const BAD_ACCESS_RIGHTS: u32 = 0x0005_0002;
/// The memory key's range overflows, or is empty.
pub const BAD_MKEY_RANGE: u32 = 0x0005_0003;
/// Too few translation entries for the range.
pub const BAD_MTT_COUNT: u32 = 0x0005_0004;
/// A translation entry not aligned to the page size.
pub const BAD_MTT_ENTRY: u32 = 0x0005_0005;
/// `mkc.qpn` is not 0xffffff.
pub const BAD_MKEY_QPN: u32 = 0x0005_0006;

/// An unknown QP service type.
pub const BAD_QP_TYPE: u32 = 0x0006_0001;
/// The transition is not allowed from the QP's current state (status BAD_QP_STATE).
pub const BAD_QP_TRANSITION: u32 = 0x0006_0002;
/// The MTU encoding is not 1..=5.
pub const BAD_MTU: u32 = 0x0006_0003;
/// The port number is not 1.
pub const BAD_PORT: u32 = 0x0006_0004;
/// The source GID index has no valid GID table entry.
pub const BAD_GID_INDEX: u32 = 0x0006_0005;
/// The P_Key index is out of range.
pub const BAD_PKEY_INDEX: u32 = 0x0006_0006;
/// An RC/UC QP on an Ethernet port whose RoCE is disabled (and no force-loopback).
pub const ROCE_DISABLED: u32 = 0x0006_0007;
/// Outstanding RDMA read/atomic depth above the maximum.
pub const BAD_RDMA_DEPTH: u32 = 0x0006_0008;
/// The message size above the maximum.
pub const BAD_MSG_SIZE: u32 = 0x0006_0009;
/// An unknown timestamp format.
pub const BAD_TS_FORMAT: u32 = 0x0006_000a;
/// An unknown RQ type.
pub const BAD_RQ_TYPE: u32 = 0x0006_000b;
/// `input_qpn` given without `qp_by_name`.
pub const BAD_INPUT_QPN: u32 = 0x0006_000c;
/// The low-water mark is not below the SRQ size.
pub const BAD_LWM: u32 = 0x0006_000d;
/// `qpc.pm_state` is not MIGRATED: ARMED and REARM need an alternate path, which the
/// model (like ConnectX's mlx5 interface) does not offer.
pub const BAD_PM_STATE: u32 = 0x0006_000e;
/// An address path's `stat_rate` is a code the device does not list in
/// `stat_rate_support`.
pub const BAD_STAT_RATE: u32 = 0x0006_000f;
/// An RMP state that is not RDY at CREATE_RMP, not RDY or ERR as MODIFY_RMP's next state,
/// or (with BAD_RES_STATE) a MODIFY_RMP whose `rmp_state` is not the RMP's state.
pub const BAD_RMP_STATE: u32 = 0x0006_0010;

/// A second QP0 or QP1 while the port's first one exists (one of each per port), or QP0 on
/// an Ethernet port (which has no subnet management interface).
pub const SPECIAL_QP_TAKEN: u32 = 0x0006_0020;
/// QP1's context names a Q_Key other than the general services interface's well-known
/// 0x8001_0000.
pub const BAD_QP1_Q_KEY: u32 = 0x0006_0021;
/// A REG_UMR QP with a receive queue (it only sends).
pub const UMR_QP_WITH_RQ: u32 = 0x0006_0022;

/// A GID or RoCE address index beyond the table.
pub const BAD_ADDRESS_INDEX: u32 = 0x0007_0001;
/// A RoCE version or L3 type that does not exist.
pub const BAD_ROCE_VERSION: u32 = 0x0007_0002;
/// A command for the other port type (for example SET_ROCE_ADDRESS on InfiniBand).
pub const WRONG_PORT_TYPE: u32 = 0x0007_0003;
/// MODIFY_NIC_VPORT_CONTEXT selected a field the model does not let this function change.
pub const BAD_FIELD_SELECT: u32 = 0x0007_0004;
/// The MAD is malformed.
pub const BAD_MAD: u32 = 0x0007_0005;

/// The model could not read or write host memory for the command (see the IOMMU faults).
pub const DMA_FAULT: u32 = 0x0008_0001;
