// Bootstrapped by tools/gen_consts.py from the PRM constants table; maintained by hand.

use crate::prm_enum;

prm_enum! {
    /// Command opcodes (`MLX5_CMD_OP_*`), the `opcode` of every command input.
    pub enum CmdOpcode : u16 = "cmd_opcode" {
        QueryHcaCap = 0x100 => "MLX5_CMD_OP_QUERY_HCA_CAP",
        QueryAdapter = 0x101 => "MLX5_CMD_OP_QUERY_ADAPTER",
        InitHca = 0x102 => "MLX5_CMD_OP_INIT_HCA",
        TeardownHca = 0x103 => "MLX5_CMD_OP_TEARDOWN_HCA",
        EnableHca = 0x104 => "MLX5_CMD_OP_ENABLE_HCA",
        DisableHca = 0x105 => "MLX5_CMD_OP_DISABLE_HCA",
        QueryPages = 0x107 => "MLX5_CMD_OP_QUERY_PAGES",
        ManagePages = 0x108 => "MLX5_CMD_OP_MANAGE_PAGES",
        SetHcaCap = 0x109 => "MLX5_CMD_OP_SET_HCA_CAP",
        QueryIssi = 0x10a => "MLX5_CMD_OP_QUERY_ISSI",
        SetIssi = 0x10b => "MLX5_CMD_OP_SET_ISSI",
        SetDriverVersion = 0x10d => "MLX5_CMD_OP_SET_DRIVER_VERSION",
        QuerySfPartition = 0x111 => "MLX5_CMD_OP_QUERY_SF_PARTITION",
        AllocSf = 0x113 => "MLX5_CMD_OP_ALLOC_SF",
        DeallocSf = 0x114 => "MLX5_CMD_OP_DEALLOC_SF",
        SuspendVhca = 0x115 => "MLX5_CMD_OP_SUSPEND_VHCA",
        ResumeVhca = 0x116 => "MLX5_CMD_OP_RESUME_VHCA",
        QueryVhcaMigrationState = 0x117 => "MLX5_CMD_OP_QUERY_VHCA_MIGRATION_STATE",
        SaveVhcaState = 0x118 => "MLX5_CMD_OP_SAVE_VHCA_STATE",
        LoadVhcaState = 0x119 => "MLX5_CMD_OP_LOAD_VHCA_STATE",
        CreateMkey = 0x200 => "MLX5_CMD_OP_CREATE_MKEY",
        QueryMkey = 0x201 => "MLX5_CMD_OP_QUERY_MKEY",
        DestroyMkey = 0x202 => "MLX5_CMD_OP_DESTROY_MKEY",
        QuerySpecialContexts = 0x203 => "MLX5_CMD_OP_QUERY_SPECIAL_CONTEXTS",
        PageFaultResume = 0x204 => "MLX5_CMD_OP_PAGE_FAULT_RESUME",
        AllocMemic = 0x205 => "MLX5_CMD_OP_ALLOC_MEMIC",
        DeallocMemic = 0x206 => "MLX5_CMD_OP_DEALLOC_MEMIC",
        ModifyMemic = 0x207 => "MLX5_CMD_OP_MODIFY_MEMIC",
        CreateEq = 0x301 => "MLX5_CMD_OP_CREATE_EQ",
        DestroyEq = 0x302 => "MLX5_CMD_OP_DESTROY_EQ",
        QueryEq = 0x303 => "MLX5_CMD_OP_QUERY_EQ",
        GenEqe = 0x304 => "MLX5_CMD_OP_GEN_EQE",
        CreateCq = 0x400 => "MLX5_CMD_OP_CREATE_CQ",
        DestroyCq = 0x401 => "MLX5_CMD_OP_DESTROY_CQ",
        QueryCq = 0x402 => "MLX5_CMD_OP_QUERY_CQ",
        ModifyCq = 0x403 => "MLX5_CMD_OP_MODIFY_CQ",
        CreateQp = 0x500 => "MLX5_CMD_OP_CREATE_QP",
        DestroyQp = 0x501 => "MLX5_CMD_OP_DESTROY_QP",
        Rst2initQp = 0x502 => "MLX5_CMD_OP_RST2INIT_QP",
        Init2rtrQp = 0x503 => "MLX5_CMD_OP_INIT2RTR_QP",
        Rtr2rtsQp = 0x504 => "MLX5_CMD_OP_RTR2RTS_QP",
        Rts2rtsQp = 0x505 => "MLX5_CMD_OP_RTS2RTS_QP",
        Sqerr2rtsQp = 0x506 => "MLX5_CMD_OP_SQERR2RTS_QP",
        Qp2err = 0x507 => "MLX5_CMD_OP_2ERR_QP",
        Qp2rst = 0x50a => "MLX5_CMD_OP_2RST_QP",
        QueryQp = 0x50b => "MLX5_CMD_OP_QUERY_QP",
        SqdRtsQp = 0x50c => "MLX5_CMD_OP_SQD_RTS_QP",
        Init2initQp = 0x50e => "MLX5_CMD_OP_INIT2INIT_QP",
        CreatePsv = 0x600 => "MLX5_CMD_OP_CREATE_PSV",
        DestroyPsv = 0x601 => "MLX5_CMD_OP_DESTROY_PSV",
        CreateSrq = 0x700 => "MLX5_CMD_OP_CREATE_SRQ",
        DestroySrq = 0x701 => "MLX5_CMD_OP_DESTROY_SRQ",
        QuerySrq = 0x702 => "MLX5_CMD_OP_QUERY_SRQ",
        ArmRq = 0x703 => "MLX5_CMD_OP_ARM_RQ",
        CreateXrcSrq = 0x705 => "MLX5_CMD_OP_CREATE_XRC_SRQ",
        DestroyXrcSrq = 0x706 => "MLX5_CMD_OP_DESTROY_XRC_SRQ",
        QueryXrcSrq = 0x707 => "MLX5_CMD_OP_QUERY_XRC_SRQ",
        ArmXrcSrq = 0x708 => "MLX5_CMD_OP_ARM_XRC_SRQ",
        CreateDct = 0x710 => "MLX5_CMD_OP_CREATE_DCT",
        DestroyDct = 0x711 => "MLX5_CMD_OP_DESTROY_DCT",
        DrainDct = 0x712 => "MLX5_CMD_OP_DRAIN_DCT",
        QueryDct = 0x713 => "MLX5_CMD_OP_QUERY_DCT",
        ArmDctForKeyViolation = 0x714 => "MLX5_CMD_OP_ARM_DCT_FOR_KEY_VIOLATION",
        CreateXrq = 0x717 => "MLX5_CMD_OP_CREATE_XRQ",
        DestroyXrq = 0x718 => "MLX5_CMD_OP_DESTROY_XRQ",
        QueryXrq = 0x719 => "MLX5_CMD_OP_QUERY_XRQ",
        ArmXrq = 0x71a => "MLX5_CMD_OP_ARM_XRQ",
        QueryXrqDcParamsEntry = 0x725 => "MLX5_CMD_OP_QUERY_XRQ_DC_PARAMS_ENTRY",
        SetXrqDcParamsEntry = 0x726 => "MLX5_CMD_OP_SET_XRQ_DC_PARAMS_ENTRY",
        QueryXrqErrorParams = 0x727 => "MLX5_CMD_OP_QUERY_XRQ_ERROR_PARAMS",
        ReleaseXrqError = 0x729 => "MLX5_CMD_OP_RELEASE_XRQ_ERROR",
        ModifyXrq = 0x72a => "MLX5_CMD_OP_MODIFY_XRQ",
        QueryEswFunctions = 0x740 => "MLX5_CMD_OP_QUERY_ESW_FUNCTIONS",
        QueryVportState = 0x750 => "MLX5_CMD_OP_QUERY_VPORT_STATE",
        ModifyVportState = 0x751 => "MLX5_CMD_OP_MODIFY_VPORT_STATE",
        QueryEswVportContext = 0x752 => "MLX5_CMD_OP_QUERY_ESW_VPORT_CONTEXT",
        ModifyEswVportContext = 0x753 => "MLX5_CMD_OP_MODIFY_ESW_VPORT_CONTEXT",
        QueryNicVportContext = 0x754 => "MLX5_CMD_OP_QUERY_NIC_VPORT_CONTEXT",
        ModifyNicVportContext = 0x755 => "MLX5_CMD_OP_MODIFY_NIC_VPORT_CONTEXT",
        QueryRoceAddress = 0x760 => "MLX5_CMD_OP_QUERY_ROCE_ADDRESS",
        SetRoceAddress = 0x761 => "MLX5_CMD_OP_SET_ROCE_ADDRESS",
        QueryHcaVportContext = 0x762 => "MLX5_CMD_OP_QUERY_HCA_VPORT_CONTEXT",
        ModifyHcaVportContext = 0x763 => "MLX5_CMD_OP_MODIFY_HCA_VPORT_CONTEXT",
        QueryHcaVportGid = 0x764 => "MLX5_CMD_OP_QUERY_HCA_VPORT_GID",
        QueryHcaVportPkey = 0x765 => "MLX5_CMD_OP_QUERY_HCA_VPORT_PKEY",
        QueryVnicEnv = 0x76f => "MLX5_CMD_OP_QUERY_VNIC_ENV",
        QueryVportCounter = 0x770 => "MLX5_CMD_OP_QUERY_VPORT_COUNTER",
        AllocQCounter = 0x771 => "MLX5_CMD_OP_ALLOC_Q_COUNTER",
        DeallocQCounter = 0x772 => "MLX5_CMD_OP_DEALLOC_Q_COUNTER",
        QueryQCounter = 0x773 => "MLX5_CMD_OP_QUERY_Q_COUNTER",
        SetMonitorCounter = 0x774 => "MLX5_CMD_OP_SET_MONITOR_COUNTER",
        ArmMonitorCounter = 0x775 => "MLX5_CMD_OP_ARM_MONITOR_COUNTER",
        SetPpRateLimit = 0x780 => "MLX5_CMD_OP_SET_PP_RATE_LIMIT",
        QueryRateLimit = 0x781 => "MLX5_CMD_OP_QUERY_RATE_LIMIT",
        CreateSchedulingElement = 0x782 => "MLX5_CMD_OP_CREATE_SCHEDULING_ELEMENT",
        DestroySchedulingElement = 0x783 => "MLX5_CMD_OP_DESTROY_SCHEDULING_ELEMENT",
        QuerySchedulingElement = 0x784 => "MLX5_CMD_OP_QUERY_SCHEDULING_ELEMENT",
        ModifySchedulingElement = 0x785 => "MLX5_CMD_OP_MODIFY_SCHEDULING_ELEMENT",
        CreateQosParaVport = 0x786 => "MLX5_CMD_OP_CREATE_QOS_PARA_VPORT",
        DestroyQosParaVport = 0x787 => "MLX5_CMD_OP_DESTROY_QOS_PARA_VPORT",
        AllocPd = 0x800 => "MLX5_CMD_OP_ALLOC_PD",
        DeallocPd = 0x801 => "MLX5_CMD_OP_DEALLOC_PD",
        AllocUar = 0x802 => "MLX5_CMD_OP_ALLOC_UAR",
        DeallocUar = 0x803 => "MLX5_CMD_OP_DEALLOC_UAR",
        ConfigIntModeration = 0x804 => "MLX5_CMD_OP_CONFIG_INT_MODERATION",
        AccessReg = 0x805 => "MLX5_CMD_OP_ACCESS_REG",
        AttachToMcg = 0x806 => "MLX5_CMD_OP_ATTACH_TO_MCG",
        DetachFromMcg = 0x807 => "MLX5_CMD_OP_DETACH_FROM_MCG",
        GetDroppedPacketLog = 0x80a => "MLX5_CMD_OP_GET_DROPPED_PACKET_LOG",
        MadIfc = 0x50d => "MLX5_CMD_OP_MAD_IFC",
        QueryMadDemux = 0x80b => "MLX5_CMD_OP_QUERY_MAD_DEMUX",
        SetMadDemux = 0x80c => "MLX5_CMD_OP_SET_MAD_DEMUX",
        Nop = 0x80d => "MLX5_CMD_OP_NOP",
        AllocXrcd = 0x80e => "MLX5_CMD_OP_ALLOC_XRCD",
        DeallocXrcd = 0x80f => "MLX5_CMD_OP_DEALLOC_XRCD",
        AllocTransportDomain = 0x816 => "MLX5_CMD_OP_ALLOC_TRANSPORT_DOMAIN",
        DeallocTransportDomain = 0x817 => "MLX5_CMD_OP_DEALLOC_TRANSPORT_DOMAIN",
        QueryCongStatus = 0x822 => "MLX5_CMD_OP_QUERY_CONG_STATUS",
        ModifyCongStatus = 0x823 => "MLX5_CMD_OP_MODIFY_CONG_STATUS",
        QueryCongParams = 0x824 => "MLX5_CMD_OP_QUERY_CONG_PARAMS",
        ModifyCongParams = 0x825 => "MLX5_CMD_OP_MODIFY_CONG_PARAMS",
        QueryCongStatistics = 0x826 => "MLX5_CMD_OP_QUERY_CONG_STATISTICS",
        AddVxlanUdpDport = 0x827 => "MLX5_CMD_OP_ADD_VXLAN_UDP_DPORT",
        DeleteVxlanUdpDport = 0x828 => "MLX5_CMD_OP_DELETE_VXLAN_UDP_DPORT",
        SetL2TableEntry = 0x829 => "MLX5_CMD_OP_SET_L2_TABLE_ENTRY",
        QueryL2TableEntry = 0x82a => "MLX5_CMD_OP_QUERY_L2_TABLE_ENTRY",
        DeleteL2TableEntry = 0x82b => "MLX5_CMD_OP_DELETE_L2_TABLE_ENTRY",
        SetWolRol = 0x830 => "MLX5_CMD_OP_SET_WOL_ROL",
        QueryWolRol = 0x831 => "MLX5_CMD_OP_QUERY_WOL_ROL",
        CreateLag = 0x840 => "MLX5_CMD_OP_CREATE_LAG",
        ModifyLag = 0x841 => "MLX5_CMD_OP_MODIFY_LAG",
        QueryLag = 0x842 => "MLX5_CMD_OP_QUERY_LAG",
        DestroyLag = 0x843 => "MLX5_CMD_OP_DESTROY_LAG",
        CreateVportLag = 0x844 => "MLX5_CMD_OP_CREATE_VPORT_LAG",
        DestroyVportLag = 0x845 => "MLX5_CMD_OP_DESTROY_VPORT_LAG",
        CreateTir = 0x900 => "MLX5_CMD_OP_CREATE_TIR",
        ModifyTir = 0x901 => "MLX5_CMD_OP_MODIFY_TIR",
        DestroyTir = 0x902 => "MLX5_CMD_OP_DESTROY_TIR",
        QueryTir = 0x903 => "MLX5_CMD_OP_QUERY_TIR",
        CreateSq = 0x904 => "MLX5_CMD_OP_CREATE_SQ",
        ModifySq = 0x905 => "MLX5_CMD_OP_MODIFY_SQ",
        DestroySq = 0x906 => "MLX5_CMD_OP_DESTROY_SQ",
        QuerySq = 0x907 => "MLX5_CMD_OP_QUERY_SQ",
        CreateRq = 0x908 => "MLX5_CMD_OP_CREATE_RQ",
        ModifyRq = 0x909 => "MLX5_CMD_OP_MODIFY_RQ",
        SetDelayDropParams = 0x910 => "MLX5_CMD_OP_SET_DELAY_DROP_PARAMS",
        DestroyRq = 0x90a => "MLX5_CMD_OP_DESTROY_RQ",
        QueryRq = 0x90b => "MLX5_CMD_OP_QUERY_RQ",
        CreateRmp = 0x90c => "MLX5_CMD_OP_CREATE_RMP",
        ModifyRmp = 0x90d => "MLX5_CMD_OP_MODIFY_RMP",
        DestroyRmp = 0x90e => "MLX5_CMD_OP_DESTROY_RMP",
        QueryRmp = 0x90f => "MLX5_CMD_OP_QUERY_RMP",
        CreateTis = 0x912 => "MLX5_CMD_OP_CREATE_TIS",
        ModifyTis = 0x913 => "MLX5_CMD_OP_MODIFY_TIS",
        DestroyTis = 0x914 => "MLX5_CMD_OP_DESTROY_TIS",
        QueryTis = 0x915 => "MLX5_CMD_OP_QUERY_TIS",
        CreateRqt = 0x916 => "MLX5_CMD_OP_CREATE_RQT",
        ModifyRqt = 0x917 => "MLX5_CMD_OP_MODIFY_RQT",
        DestroyRqt = 0x918 => "MLX5_CMD_OP_DESTROY_RQT",
        QueryRqt = 0x919 => "MLX5_CMD_OP_QUERY_RQT",
        SetFlowTableRoot = 0x92f => "MLX5_CMD_OP_SET_FLOW_TABLE_ROOT",
        CreateFlowTable = 0x930 => "MLX5_CMD_OP_CREATE_FLOW_TABLE",
        DestroyFlowTable = 0x931 => "MLX5_CMD_OP_DESTROY_FLOW_TABLE",
        QueryFlowTable = 0x932 => "MLX5_CMD_OP_QUERY_FLOW_TABLE",
        CreateFlowGroup = 0x933 => "MLX5_CMD_OP_CREATE_FLOW_GROUP",
        DestroyFlowGroup = 0x934 => "MLX5_CMD_OP_DESTROY_FLOW_GROUP",
        QueryFlowGroup = 0x935 => "MLX5_CMD_OP_QUERY_FLOW_GROUP",
        SetFlowTableEntry = 0x936 => "MLX5_CMD_OP_SET_FLOW_TABLE_ENTRY",
        QueryFlowTableEntry = 0x937 => "MLX5_CMD_OP_QUERY_FLOW_TABLE_ENTRY",
        DeleteFlowTableEntry = 0x938 => "MLX5_CMD_OP_DELETE_FLOW_TABLE_ENTRY",
        AllocFlowCounter = 0x939 => "MLX5_CMD_OP_ALLOC_FLOW_COUNTER",
        DeallocFlowCounter = 0x93a => "MLX5_CMD_OP_DEALLOC_FLOW_COUNTER",
        QueryFlowCounter = 0x93b => "MLX5_CMD_OP_QUERY_FLOW_COUNTER",
        ModifyFlowTable = 0x93c => "MLX5_CMD_OP_MODIFY_FLOW_TABLE",
        AllocPacketReformatContext = 0x93d => "MLX5_CMD_OP_ALLOC_PACKET_REFORMAT_CONTEXT",
        DeallocPacketReformatContext = 0x93e => "MLX5_CMD_OP_DEALLOC_PACKET_REFORMAT_CONTEXT",
        QueryPacketReformatContext = 0x93f => "MLX5_CMD_OP_QUERY_PACKET_REFORMAT_CONTEXT",
        AllocModifyHeaderContext = 0x940 => "MLX5_CMD_OP_ALLOC_MODIFY_HEADER_CONTEXT",
        DeallocModifyHeaderContext = 0x941 => "MLX5_CMD_OP_DEALLOC_MODIFY_HEADER_CONTEXT",
        QueryModifyHeaderContext = 0x942 => "MLX5_CMD_OP_QUERY_MODIFY_HEADER_CONTEXT",
        FpgaCreateQp = 0x960 => "MLX5_CMD_OP_FPGA_CREATE_QP",
        FpgaModifyQp = 0x961 => "MLX5_CMD_OP_FPGA_MODIFY_QP",
        FpgaQueryQp = 0x962 => "MLX5_CMD_OP_FPGA_QUERY_QP",
        FpgaDestroyQp = 0x963 => "MLX5_CMD_OP_FPGA_DESTROY_QP",
        FpgaQueryQpCounters = 0x964 => "MLX5_CMD_OP_FPGA_QUERY_QP_COUNTERS",
        CreateGeneralObject = 0xa00 => "MLX5_CMD_OP_CREATE_GENERAL_OBJECT",
        ModifyGeneralObject = 0xa01 => "MLX5_CMD_OP_MODIFY_GENERAL_OBJECT",
        QueryGeneralObject = 0xa02 => "MLX5_CMD_OP_QUERY_GENERAL_OBJECT",
        DestroyGeneralObject = 0xa03 => "MLX5_CMD_OP_DESTROY_GENERAL_OBJECT",
        CreateUctx = 0xa04 => "MLX5_CMD_OP_CREATE_UCTX",
        DestroyUctx = 0xa06 => "MLX5_CMD_OP_DESTROY_UCTX",
        CreateUmem = 0xa08 => "MLX5_CMD_OP_CREATE_UMEM",
        DestroyUmem = 0xa0a => "MLX5_CMD_OP_DESTROY_UMEM",
        SyncSteering = 0xb00 => "MLX5_CMD_OP_SYNC_STEERING",
        PspGenSpi = 0xb10 => "MLX5_CMD_OP_PSP_GEN_SPI",
        PspRotateKey = 0xb11 => "MLX5_CMD_OP_PSP_ROTATE_KEY",
        QueryVhcaState = 0xb0d => "MLX5_CMD_OP_QUERY_VHCA_STATE",
        ModifyVhcaState = 0xb0e => "MLX5_CMD_OP_MODIFY_VHCA_STATE",
        SyncCrypto = 0xb12 => "MLX5_CMD_OP_SYNC_CRYPTO",
        AllowOtherVhcaAccess = 0xb16 => "MLX5_CMD_OP_ALLOW_OTHER_VHCA_ACCESS",
        GenerateWqe = 0xb17 => "MLX5_CMD_OP_GENERATE_WQE",
        GeneralEnd = 0xd00 => "MLX5_CMD_OP_GENERAL_END",
        ModUpdateHeaderModifyArgument = 0x1 => "MLX5_CMD_OP_MOD_UPDATE_HEADER_MODIFY_ARGUMENT",
    }
}

prm_enum! {
    /// Command status (`mbox_out.status`).
    pub enum CmdStatus : u8 = "cmd_status" {
        Ok = 0x0 => "MLX5_CMD_STAT_OK",
        IntErr = 0x1 => "MLX5_CMD_STAT_INT_ERR",
        BadOpErr = 0x2 => "MLX5_CMD_STAT_BAD_OP_ERR",
        BadParamErr = 0x3 => "MLX5_CMD_STAT_BAD_PARAM_ERR",
        BadSysStateErr = 0x4 => "MLX5_CMD_STAT_BAD_SYS_STATE_ERR",
        BadResErr = 0x5 => "MLX5_CMD_STAT_BAD_RES_ERR",
        ResBusy = 0x6 => "MLX5_CMD_STAT_RES_BUSY",
        NotReady = 0x7 => "MLX5_CMD_STAT_NOT_READY",
        LimErr = 0x8 => "MLX5_CMD_STAT_LIM_ERR",
        BadResStateErr = 0x9 => "MLX5_CMD_STAT_BAD_RES_STATE_ERR",
        IxErr = 0xa => "MLX5_CMD_STAT_IX_ERR",
        NoResErr = 0xf => "MLX5_CMD_STAT_NO_RES_ERR",
        BadInpLenErr = 0x50 => "MLX5_CMD_STAT_BAD_INP_LEN_ERR",
        BadOutpLenErr = 0x51 => "MLX5_CMD_STAT_BAD_OUTP_LEN_ERR",
        BadQpStateErr = 0x10 => "MLX5_CMD_STAT_BAD_QP_STATE_ERR",
        BadPktErr = 0x30 => "MLX5_CMD_STAT_BAD_PKT_ERR",
        BadSizeOutsCqesErr = 0x40 => "MLX5_CMD_STAT_BAD_SIZE_OUTS_CQES_ERR",
    }
}

prm_enum! {
    /// Command delivery status (`cmd_layout.status_own >> 1`).
    pub enum DeliveryStatus : u8 = "cmd_delivery_status" {
        Ok = 0x0 => "MLX5_CMD_DELIVERY_STAT_OK",
        SignatErr = 0x1 => "MLX5_CMD_DELIVERY_STAT_SIGNAT_ERR",
        TokErr = 0x2 => "MLX5_CMD_DELIVERY_STAT_TOK_ERR",
        BadBlkNumErr = 0x3 => "MLX5_CMD_DELIVERY_STAT_BAD_BLK_NUM_ERR",
        OutPtrAlignErr = 0x4 => "MLX5_CMD_DELIVERY_STAT_OUT_PTR_ALIGN_ERR",
        InPtrAlignErr = 0x5 => "MLX5_CMD_DELIVERY_STAT_IN_PTR_ALIGN_ERR",
        FwErr = 0x6 => "MLX5_CMD_DELIVERY_STAT_FW_ERR",
        InLengthErr = 0x7 => "MLX5_CMD_DELIVERY_STAT_IN_LENGTH_ERR",
        OutLengthErr = 0x8 => "MLX5_CMD_DELIVERY_STAT_OUT_LENGTH_ERR",
        ResFldNotClrErr = 0x9 => "MLX5_CMD_DELIVERY_STAT_RES_FLD_NOT_CLR_ERR",
        CmdDescrErr = 0x10 => "MLX5_CMD_DELIVERY_STAT_CMD_DESCR_ERR",
    }
}

prm_enum! {
    /// Send WQE opcodes (control segment `opcode`).
    pub enum WqeOpcode : u8 = "wqe_opcode" {
        Nop = 0x0 => "MLX5_OPCODE_NOP",
        SendInval = 0x1 => "MLX5_OPCODE_SEND_INVAL",
        RdmaWrite = 0x8 => "MLX5_OPCODE_RDMA_WRITE",
        RdmaWriteImm = 0x9 => "MLX5_OPCODE_RDMA_WRITE_IMM",
        Send = 0xa => "MLX5_OPCODE_SEND",
        SendImm = 0xb => "MLX5_OPCODE_SEND_IMM",
        Lso = 0xe => "MLX5_OPCODE_LSO",
        RdmaRead = 0x10 => "MLX5_OPCODE_RDMA_READ",
        AtomicCs = 0x11 => "MLX5_OPCODE_ATOMIC_CS",
        AtomicFa = 0x12 => "MLX5_OPCODE_ATOMIC_FA",
        AtomicMaskedCs = 0x14 => "MLX5_OPCODE_ATOMIC_MASKED_CS",
        AtomicMaskedFa = 0x15 => "MLX5_OPCODE_ATOMIC_MASKED_FA",
        BindMw = 0x18 => "MLX5_OPCODE_BIND_MW",
        ConfigCmd = 0x1f => "MLX5_OPCODE_CONFIG_CMD",
        EnhancedMpsw = 0x29 => "MLX5_OPCODE_ENHANCED_MPSW",
        SetPsv = 0x20 => "MLX5_OPCODE_SET_PSV",
        GetPsv = 0x21 => "MLX5_OPCODE_GET_PSV",
        CheckPsv = 0x22 => "MLX5_OPCODE_CHECK_PSV",
        Dump = 0x23 => "MLX5_OPCODE_DUMP",
        RgetPsv = 0x26 => "MLX5_OPCODE_RGET_PSV",
        RcheckPsv = 0x27 => "MLX5_OPCODE_RCHECK_PSV",
        Umr = 0x25 => "MLX5_OPCODE_UMR",
        FlowTblAccess = 0x2c => "MLX5_OPCODE_FLOW_TBL_ACCESS",
        AccessAso = 0x2d => "MLX5_OPCODE_ACCESS_ASO",
        Fmr = 0x19 => "MLX5_OPCODE_FMR",
        LocalInval = 0x1b => "MLX5_OPCODE_LOCAL_INVAL",
        TagMatching = 0x28 => "MLX5_OPCODE_TAG_MATCHING",
        Mmo = 0x2f => "MLX5_OPCODE_MMO",
    }
}

prm_enum! {
    /// CQE opcodes (`op_own >> 4`).
    pub enum CqeOpcode : u8 = "cqe_opcode" {
        Req = 0x0 => "MLX5_CQE_REQ",
        RespWrImm = 0x1 => "MLX5_CQE_RESP_WR_IMM",
        RespSend = 0x2 => "MLX5_CQE_RESP_SEND",
        RespSendImm = 0x3 => "MLX5_CQE_RESP_SEND_IMM",
        RespSendInv = 0x4 => "MLX5_CQE_RESP_SEND_INV",
        ResizeCq = 0x5 => "MLX5_CQE_RESIZE_CQ",
        SigErr = 0xc => "MLX5_CQE_SIG_ERR",
        ReqErr = 0xd => "MLX5_CQE_REQ_ERR",
        RespErr = 0xe => "MLX5_CQE_RESP_ERR",
        Invalid = 0xf => "MLX5_CQE_INVALID",
        NoPacket = 0x6 => "MLX5_CQE_NO_PACKET",
    }
}

prm_enum! {
    /// Error CQE syndromes (`mlx5_err_cqe.syndrome`).
    pub enum CqeSyndrome : u8 = "cqe_syndrome" {
        LocalLengthErr = 0x1 => "MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR",
        LocalQpOpErr = 0x2 => "MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR",
        LocalProtErr = 0x4 => "MLX5_CQE_SYNDROME_LOCAL_PROT_ERR",
        WrFlushErr = 0x5 => "MLX5_CQE_SYNDROME_WR_FLUSH_ERR",
        MwBindErr = 0x6 => "MLX5_CQE_SYNDROME_MW_BIND_ERR",
        BadRespErr = 0x10 => "MLX5_CQE_SYNDROME_BAD_RESP_ERR",
        LocalAccessErr = 0x11 => "MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR",
        RemoteInvalReqErr = 0x12 => "MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR",
        RemoteAccessErr = 0x13 => "MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR",
        RemoteOpErr = 0x14 => "MLX5_CQE_SYNDROME_REMOTE_OP_ERR",
        TransportRetryExcErr = 0x15 => "MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR",
        RnrRetryExcErr = 0x16 => "MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR",
        RemoteAbortedErr = 0x22 => "MLX5_CQE_SYNDROME_REMOTE_ABORTED_ERR",
    }
}

prm_enum! {
    /// Event queue entry types (`mlx5_eqe.type`).
    pub enum EventType : u8 = "event_type" {
        Comp = 0x0 => "MLX5_EVENT_TYPE_COMP",
        PathMig = 0x1 => "MLX5_EVENT_TYPE_PATH_MIG",
        CommEst = 0x2 => "MLX5_EVENT_TYPE_COMM_EST",
        SqDrained = 0x3 => "MLX5_EVENT_TYPE_SQ_DRAINED",
        SrqLastWqe = 0x13 => "MLX5_EVENT_TYPE_SRQ_LAST_WQE",
        SrqRqLimit = 0x14 => "MLX5_EVENT_TYPE_SRQ_RQ_LIMIT",
        CqError = 0x4 => "MLX5_EVENT_TYPE_CQ_ERROR",
        WqCatasError = 0x5 => "MLX5_EVENT_TYPE_WQ_CATAS_ERROR",
        PathMigFailed = 0x7 => "MLX5_EVENT_TYPE_PATH_MIG_FAILED",
        WqInvalReqError = 0x10 => "MLX5_EVENT_TYPE_WQ_INVAL_REQ_ERROR",
        WqAccessError = 0x11 => "MLX5_EVENT_TYPE_WQ_ACCESS_ERROR",
        SrqCatasError = 0x12 => "MLX5_EVENT_TYPE_SRQ_CATAS_ERROR",
        ObjectChange = 0x27 => "MLX5_EVENT_TYPE_OBJECT_CHANGE",
        InternalError = 0x8 => "MLX5_EVENT_TYPE_INTERNAL_ERROR",
        PortChange = 0x9 => "MLX5_EVENT_TYPE_PORT_CHANGE",
        GpioEvent = 0x15 => "MLX5_EVENT_TYPE_GPIO_EVENT",
        PortModuleEvent = 0x16 => "MLX5_EVENT_TYPE_PORT_MODULE_EVENT",
        TempWarnEvent = 0x17 => "MLX5_EVENT_TYPE_TEMP_WARN_EVENT",
        XrqError = 0x18 => "MLX5_EVENT_TYPE_XRQ_ERROR",
        RemoteConfig = 0x19 => "MLX5_EVENT_TYPE_REMOTE_CONFIG",
        GeneralEvent = 0x22 => "MLX5_EVENT_TYPE_GENERAL_EVENT",
        MonitorCounter = 0x24 => "MLX5_EVENT_TYPE_MONITOR_COUNTER",
        PpsEvent = 0x25 => "MLX5_EVENT_TYPE_PPS_EVENT",
        DbBfCongestion = 0x1a => "MLX5_EVENT_TYPE_DB_BF_CONGESTION",
        StallEvent = 0x1b => "MLX5_EVENT_TYPE_STALL_EVENT",
        Cmd = 0xa => "MLX5_EVENT_TYPE_CMD",
        PageRequest = 0xb => "MLX5_EVENT_TYPE_PAGE_REQUEST",
        PageFault = 0xc => "MLX5_EVENT_TYPE_PAGE_FAULT",
        NicVportChange = 0xd => "MLX5_EVENT_TYPE_NIC_VPORT_CHANGE",
        EswFunctionsChanged = 0xe => "MLX5_EVENT_TYPE_ESW_FUNCTIONS_CHANGED",
        VhcaStateChange = 0xf => "MLX5_EVENT_TYPE_VHCA_STATE_CHANGE",
        DctDrained = 0x1c => "MLX5_EVENT_TYPE_DCT_DRAINED",
        DctKeyViolation = 0x1d => "MLX5_EVENT_TYPE_DCT_KEY_VIOLATION",
        FpgaError = 0x20 => "MLX5_EVENT_TYPE_FPGA_ERROR",
        FpgaQpError = 0x21 => "MLX5_EVENT_TYPE_FPGA_QP_ERROR",
        DeviceTracer = 0x26 => "MLX5_EVENT_TYPE_DEVICE_TRACER",
    }
}

prm_enum! {
    /// Port change event sub-types (`mlx5_eqe.sub_type`).
    pub enum PortChangeSubtype : u8 = "event_port_change_subtype" {
        Down = 0x1 => "MLX5_PORT_CHANGE_SUBTYPE_DOWN",
        Active = 0x4 => "MLX5_PORT_CHANGE_SUBTYPE_ACTIVE",
        Initialized = 0x5 => "MLX5_PORT_CHANGE_SUBTYPE_INITIALIZED",
        Lid = 0x6 => "MLX5_PORT_CHANGE_SUBTYPE_LID",
        Pkey = 0x7 => "MLX5_PORT_CHANGE_SUBTYPE_PKEY",
        Guid = 0x8 => "MLX5_PORT_CHANGE_SUBTYPE_GUID",
        ClientRereg = 0x9 => "MLX5_PORT_CHANGE_SUBTYPE_CLIENT_REREG",
    }
}

prm_enum! {
    /// RMP states (`rmpc.state`, `modify_rmp_in.rmp_state`).
    pub enum RmpcState : u8 = "sq_rq_rmp_state" {
        Rdy = 0x1 => "MLX5_RMPC_STATE_RDY",
        Err = 0x3 => "MLX5_RMPC_STATE_ERR",
    }
}

prm_enum! {
    /// QP states as the QP context holds them (`qpc.state`).
    pub enum QpState : u8 = "qpc_state" {
        Rst = 0x0 => "MLX5_QPC_STATE_RST",
        Init = 0x1 => "MLX5_QPC_STATE_INIT",
        Rtr = 0x2 => "MLX5_QPC_STATE_RTR",
        Rts = 0x3 => "MLX5_QPC_STATE_RTS",
        Sqer = 0x4 => "MLX5_QPC_STATE_SQER",
        Err = 0x6 => "MLX5_QPC_STATE_ERR",
        Sqd = 0x7 => "MLX5_QPC_STATE_SQD",
        Suspended = 0x9 => "MLX5_QPC_STATE_SUSPENDED",
        Sqdrained = 0x5 => "MLX5_QPC_STATE_SQDRAINED",
    }
}

prm_enum! {
    /// QP service types (`qpc.st`).
    pub enum QpServiceType : u8 = "qpc_service_type" {
        Rc = 0x0 => "MLX5_QPC_ST_RC",
        Uc = 0x1 => "MLX5_QPC_ST_UC",
        Ud = 0x2 => "MLX5_QPC_ST_UD",
        Xrc = 0x3 => "MLX5_QPC_ST_XRC",
        Dci = 0x5 => "MLX5_QPC_ST_DCI",
        Qp0 = 0x7 => "MLX5_QPC_ST_QP0",
        Qp1 = 0x8 => "MLX5_QPC_ST_QP1",
        RawDatagram = 0x9 => "MLX5_QPC_ST_RAW_DATAGRAM",
        RegUmr = 0xc => "MLX5_QPC_ST_REG_UMR",
    }
}

prm_enum! {
    /// Memory key access modes (`mkc.access_mode_1_0`, with `access_mode_4_2`).
    pub enum MkcAccessMode : u8 = "mkey_access_mode" {
        Pa = 0x0 => "MLX5_MKC_ACCESS_MODE_PA",
        Mtt = 0x1 => "MLX5_MKC_ACCESS_MODE_MTT",
        Klms = 0x2 => "MLX5_MKC_ACCESS_MODE_KLMS",
        Ksm = 0x3 => "MLX5_MKC_ACCESS_MODE_KSM",
        SwIcm = 0x4 => "MLX5_MKC_ACCESS_MODE_SW_ICM",
        Memic = 0x5 => "MLX5_MKC_ACCESS_MODE_MEMIC",
        Crossing = 0x6 => "MLX5_MKC_ACCESS_MODE_CROSSING",
    }
}

prm_enum! {
    /// QUERY_PAGES op_mod: which pages the firmware is asked about.
    pub enum QueryPagesOpMod : u16 = "query_pages_op_mod" {
        BootPages = 0x1 => "MLX5_QUERY_PAGES_IN_OP_MOD_BOOT_PAGES",
        InitPages = 0x2 => "MLX5_QUERY_PAGES_IN_OP_MOD_INIT_PAGES",
        RegularPages = 0x3 => "MLX5_QUERY_PAGES_IN_OP_MOD_REGULAR_PAGES",
    }
}

prm_enum! {
    /// MANAGE_PAGES op_mod.
    pub enum ManagePagesOpMod : u16 = "manage_pages_op_mod" {
        CantGive = 0x0 => "MLX5_PAGES_CANT_GIVE",
        Give = 0x1 => "MLX5_PAGES_GIVE",
        Take = 0x2 => "MLX5_PAGES_TAKE",
    }
}

prm_enum! {
    /// Capability types, `op_mod[15:1]` of QUERY_HCA_CAP and SET_HCA_CAP.
    pub enum HcaCapType : u16 = "hca_cap_type" {
        General = 0x0 => "MLX5_CAP_GENERAL",
        EthernetOffloads = 0x1 => "MLX5_CAP_ETHERNET_OFFLOADS",
        Odp = 0x2 => "MLX5_CAP_ODP",
        Atomic = 0x3 => "MLX5_CAP_ATOMIC",
        Roce = 0x4 => "MLX5_CAP_ROCE",
        IpoibOffloads = 0x5 => "MLX5_CAP_IPOIB_OFFLOADS",
        IpoibEnhancedOffloads = 0x6 => "MLX5_CAP_IPOIB_ENHANCED_OFFLOADS",
        FlowTable = 0x7 => "MLX5_CAP_FLOW_TABLE",
        EswitchFlowTable = 0x8 => "MLX5_CAP_ESWITCH_FLOW_TABLE",
        Eswitch = 0x9 => "MLX5_CAP_ESWITCH",
        Qos = 0xc => "MLX5_CAP_QOS",
        Debug = 0xd => "MLX5_CAP_DEBUG",
        Reserved14 = 0xe => "MLX5_CAP_RESERVED_14",
        DevMem = 0xf => "MLX5_CAP_DEV_MEM",
        Reserved16 = 0x10 => "MLX5_CAP_RESERVED_16",
        Tls = 0x11 => "MLX5_CAP_TLS",
        VdpaEmulation = 0x13 => "MLX5_CAP_VDPA_EMULATION",
        DevEvent = 0x14 => "MLX5_CAP_DEV_EVENT",
        Ipsec = 0x15 => "MLX5_CAP_IPSEC",
        Crypto = 0x1a => "MLX5_CAP_CRYPTO",
        Shampo = 0x1d => "MLX5_CAP_SHAMPO",
        Psp = 0x1e => "MLX5_CAP_PSP",
        Macsec = 0x1f => "MLX5_CAP_MACSEC",
        General2 = 0x20 => "MLX5_CAP_GENERAL_2",
        PortSelection = 0x25 => "MLX5_CAP_PORT_SELECTION",
        AdvVirtualization = 0x26 => "MLX5_CAP_ADV_VIRTUALIZATION",
        AdvRdma = 0x28 => "MLX5_CAP_ADV_RDMA",
        TlpEmulation = 0x2a => "MLX5_CAP_TLP_EMULATION",
    }
}

prm_enum! {
    /// `op_mod[0]` of QUERY_HCA_CAP: maximum or current capabilities.
    pub enum HcaCapMode : u16 = "hca_cap_mode" {
        GetMax = 0x0 => "HCA_CAP_OPMOD_GET_MAX",
        GetCur = 0x1 => "HCA_CAP_OPMOD_GET_CUR",
    }
}

prm_enum! {
    /// `cmd_hca_cap.port_type`.
    pub enum PortTypeCap : u8 = "port_type_cap" {
        Ib = 0x0 => "MLX5_CAP_PORT_TYPE_IB",
        Eth = 0x1 => "MLX5_CAP_PORT_TYPE_ETH",
    }
}
