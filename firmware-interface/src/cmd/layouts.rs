// Declarations bootstrapped by tools/gen_layouts.py from the PRM reference tables;
// maintained by hand since. The conformance test checks every line.
#![allow(missing_docs)]

crate::prm_struct! {
    /// PRM `mbox_in`.
    pub struct MboxIn : mbox_in = "mlx5_ifc_mbox_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
    }
    /// PRM `mbox_out`.
    pub struct MboxOut : mbox_out = "mlx5_ifc_mbox_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `enable_hca_in`.
    pub struct EnableHcaIn : enable_hca_in = "mlx5_ifc_enable_hca_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        embedded_cpu_function / set_embedded_cpu_function @ 64, 1 : bool;
        function_id_type / set_function_id_type @ 67, 1 : bool;
        function_id / set_function_id @ 80, 16 : u16;
    }
    /// PRM `enable_hca_out`.
    pub struct EnableHcaOut : enable_hca_out = "mlx5_ifc_enable_hca_out_bits", 96 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `disable_hca_in`.
    pub struct DisableHcaIn : disable_hca_in = "mlx5_ifc_disable_hca_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        embedded_cpu_function / set_embedded_cpu_function @ 64, 1 : bool;
        function_id_type / set_function_id_type @ 67, 1 : bool;
        function_id / set_function_id @ 80, 16 : u16;
    }
    /// PRM `disable_hca_out`.
    pub struct DisableHcaOut : disable_hca_out = "mlx5_ifc_disable_hca_out_bits", 96 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `query_adapter_in`.
    pub struct QueryAdapterIn : query_adapter_in = "mlx5_ifc_query_adapter_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
    }
    /// PRM `query_adapter_out`.
    pub struct QueryAdapterOut : query_adapter_out = "mlx5_ifc_query_adapter_out_bits", 2176 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        query_adapter_struct / query_adapter_struct_mut @ 128, 2048 : struct crate::ctx::QueryAdapterParamBlock;
    }
    /// PRM `query_issi_in`.
    pub struct QueryIssiIn : query_issi_in = "mlx5_ifc_query_issi_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
    }
    /// PRM `query_issi_out`.
    pub struct QueryIssiOut : query_issi_out = "mlx5_ifc_query_issi_out_bits", 896 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        current_issi / set_current_issi @ 80, 16 : u16;
        supported_issi_dw0 / set_supported_issi_dw0 @ 864, 32 : u32;
    }
    /// PRM `set_issi_in`.
    pub struct SetIssiIn : set_issi_in = "mlx5_ifc_set_issi_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        current_issi / set_current_issi @ 80, 16 : u16;
    }
    /// PRM `set_issi_out`.
    pub struct SetIssiOut : set_issi_out = "mlx5_ifc_set_issi_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `query_pages_in`.
    pub struct QueryPagesIn : query_pages_in = "mlx5_ifc_query_pages_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        embedded_cpu_function / set_embedded_cpu_function @ 64, 1 : bool;
        function_id / set_function_id @ 80, 16 : u16;
    }
    /// PRM `query_pages_out`.
    pub struct QueryPagesOut : query_pages_out = "mlx5_ifc_query_pages_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        embedded_cpu_function / set_embedded_cpu_function @ 64, 1 : bool;
        function_id / set_function_id @ 80, 16 : u16;
        num_pages / set_num_pages @ 96, 32 : u32;
    }
    /// PRM `manage_pages_in`.
    pub struct ManagePagesIn : manage_pages_in = "mlx5_ifc_manage_pages_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        embedded_cpu_function / set_embedded_cpu_function @ 64, 1 : bool;
        function_id / set_function_id @ 80, 16 : u16;
        input_num_entries / set_input_num_entries @ 96, 32 : u32;
        pas @ 128 : flex [u8; 8];
    }
    /// PRM `manage_pages_out`.
    pub struct ManagePagesOut : manage_pages_out = "mlx5_ifc_manage_pages_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        output_num_entries / set_output_num_entries @ 64, 32 : u32;
        pas @ 128 : flex [u8; 8];
    }
    /// PRM `query_hca_cap_in`.
    pub struct QueryHcaCapIn : query_hca_cap_in = "mlx5_ifc_query_hca_cap_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        other_function / set_other_function @ 64, 1 : bool;
        ec_vf_function / set_ec_vf_function @ 65, 1 : bool;
        function_id_type / set_function_id_type @ 67, 1 : bool;
        function_id / set_function_id @ 80, 16 : u16;
    }
    /// PRM `query_hca_cap_out`.
    pub struct QueryHcaCapOut : query_hca_cap_out = "mlx5_ifc_query_hca_cap_out_bits", 32896 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        capability / capability_mut @ 128, 32768 : [u8];
    }
    /// PRM `set_hca_cap_in`.
    pub struct SetHcaCapIn : set_hca_cap_in = "mlx5_ifc_set_hca_cap_in_bits", 32896 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        other_function / set_other_function @ 64, 1 : bool;
        ec_vf_function / set_ec_vf_function @ 65, 1 : bool;
        function_id_type / set_function_id_type @ 67, 1 : bool;
        function_id / set_function_id @ 80, 16 : u16;
        capability / capability_mut @ 128, 32768 : [u8];
    }
    /// PRM `set_hca_cap_out`.
    pub struct SetHcaCapOut : set_hca_cap_out = "mlx5_ifc_set_hca_cap_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `init_hca_in`.
    pub struct InitHcaIn : init_hca_in = "mlx5_ifc_init_hca_in_bits", 256 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        sw_vhca_id / set_sw_vhca_id @ 98, 14 : u16;
        sw_owner_id / sw_owner_id_mut @ 128, 128 : [u8];
    }
    /// PRM `init_hca_out`.
    pub struct InitHcaOut : init_hca_out = "mlx5_ifc_init_hca_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `teardown_hca_in`.
    pub struct TeardownHcaIn : teardown_hca_in = "mlx5_ifc_teardown_hca_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        profile / set_profile @ 80, 16 : u16;
    }
    /// PRM `teardown_hca_out`.
    pub struct TeardownHcaOut : teardown_hca_out = "mlx5_ifc_teardown_hca_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        state / set_state @ 127, 1 : bool;
    }
    /// PRM `access_register_in`.
    pub struct AccessRegisterIn : access_register_in = "mlx5_ifc_access_register_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        register_id / set_register_id @ 80, 16 : u16;
        argument / set_argument @ 96, 32 : u32;
        register_data @ 128 : flex [u8; 4];
    }
    /// PRM `access_register_out`.
    pub struct AccessRegisterOut : access_register_out = "mlx5_ifc_access_register_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        register_data @ 128 : flex [u8; 4];
    }
    /// PRM `query_special_contexts_in`.
    pub struct QuerySpecialContextsIn : query_special_contexts_in = "mlx5_ifc_query_special_contexts_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
    }
    /// PRM `query_special_contexts_out`.
    pub struct QuerySpecialContextsOut : query_special_contexts_out = "mlx5_ifc_query_special_contexts_out_bits", 256 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        dump_fill_mkey / set_dump_fill_mkey @ 64, 32 : u32;
        resd_lkey / set_resd_lkey @ 96, 32 : u32;
        null_mkey / set_null_mkey @ 128, 32 : u32;
        terminate_scatter_list_mkey / set_terminate_scatter_list_mkey @ 160, 32 : u32;
        repeated_mkey / set_repeated_mkey @ 192, 32 : u32;
    }
    /// PRM `alloc_uar_in`.
    pub struct AllocUarIn : alloc_uar_in = "mlx5_ifc_alloc_uar_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
    }
    /// PRM `alloc_uar_out`.
    pub struct AllocUarOut : alloc_uar_out = "mlx5_ifc_alloc_uar_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        uar / set_uar @ 72, 24 : u32;
    }
    /// PRM `dealloc_uar_in`.
    pub struct DeallocUarIn : dealloc_uar_in = "mlx5_ifc_dealloc_uar_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        uar / set_uar @ 72, 24 : u32;
    }
    /// PRM `dealloc_uar_out`.
    pub struct DeallocUarOut : dealloc_uar_out = "mlx5_ifc_dealloc_uar_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `create_eq_in`.
    pub struct CreateEqIn : create_eq_in = "mlx5_ifc_create_eq_in_bits", 2176 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        eq_context_entry / eq_context_entry_mut @ 128, 512 : struct crate::ctx::Eqc;
        event_bitmask / event_bitmask_mut @ 704, 256 : [u8];
        pas @ 2176 : flex [u8; 8];
    }
    /// PRM `create_eq_out`.
    pub struct CreateEqOut : create_eq_out = "mlx5_ifc_create_eq_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        eq_number / set_eq_number @ 88, 8 : u8;
    }
    /// PRM `destroy_eq_in`.
    pub struct DestroyEqIn : destroy_eq_in = "mlx5_ifc_destroy_eq_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        eq_number / set_eq_number @ 88, 8 : u8;
    }
    /// PRM `destroy_eq_out`.
    pub struct DestroyEqOut : destroy_eq_out = "mlx5_ifc_destroy_eq_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `query_eq_in`.
    pub struct QueryEqIn : query_eq_in = "mlx5_ifc_query_eq_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        eq_number / set_eq_number @ 88, 8 : u8;
    }
    /// PRM `query_eq_out`.
    pub struct QueryEqOut : query_eq_out = "mlx5_ifc_query_eq_out_bits", 2176 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        eq_context_entry / eq_context_entry_mut @ 128, 512 : struct crate::ctx::Eqc;
        event_bitmask / set_event_bitmask @ 704, 64 : u64;
        pas @ 2176 : flex [u8; 8];
    }
    /// PRM `alloc_pd_in`.
    pub struct AllocPdIn : alloc_pd_in = "mlx5_ifc_alloc_pd_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
    }
    /// PRM `alloc_pd_out`.
    pub struct AllocPdOut : alloc_pd_out = "mlx5_ifc_alloc_pd_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        pd / set_pd @ 72, 24 : u32;
    }
    /// PRM `dealloc_pd_in`.
    pub struct DeallocPdIn : dealloc_pd_in = "mlx5_ifc_dealloc_pd_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        pd / set_pd @ 72, 24 : u32;
    }
    /// PRM `dealloc_pd_out`.
    pub struct DeallocPdOut : dealloc_pd_out = "mlx5_ifc_dealloc_pd_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `alloc_transport_domain_in`.
    pub struct AllocTransportDomainIn : alloc_transport_domain_in = "mlx5_ifc_alloc_transport_domain_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
    }
    /// PRM `alloc_transport_domain_out`.
    pub struct AllocTransportDomainOut : alloc_transport_domain_out = "mlx5_ifc_alloc_transport_domain_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        transport_domain / set_transport_domain @ 72, 24 : u32;
    }
    /// PRM `alloc_xrcd_in`.
    pub struct AllocXrcdIn : alloc_xrcd_in = "mlx5_ifc_alloc_xrcd_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
    }
    /// PRM `alloc_xrcd_out`.
    pub struct AllocXrcdOut : alloc_xrcd_out = "mlx5_ifc_alloc_xrcd_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        xrcd / set_xrcd @ 72, 24 : u32;
    }
    /// PRM `dealloc_xrcd_in`.
    pub struct DeallocXrcdIn : dealloc_xrcd_in = "mlx5_ifc_dealloc_xrcd_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        xrcd / set_xrcd @ 72, 24 : u32;
    }
    /// PRM `dealloc_xrcd_out`.
    pub struct DeallocXrcdOut : dealloc_xrcd_out = "mlx5_ifc_dealloc_xrcd_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `dealloc_transport_domain_in`.
    pub struct DeallocTransportDomainIn : dealloc_transport_domain_in = "mlx5_ifc_dealloc_transport_domain_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        transport_domain / set_transport_domain @ 72, 24 : u32;
    }
    /// PRM `dealloc_transport_domain_out`.
    pub struct DeallocTransportDomainOut : dealloc_transport_domain_out = "mlx5_ifc_dealloc_transport_domain_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `create_mkey_in`.
    pub struct CreateMkeyIn : create_mkey_in = "mlx5_ifc_create_mkey_in_bits", 2176 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        pg_access / set_pg_access @ 96, 1 : bool;
        mkey_umem_valid / set_mkey_umem_valid @ 97, 1 : bool;
        data_direct / set_data_direct @ 98, 1 : bool;
        memory_key_mkey_entry / memory_key_mkey_entry_mut @ 128, 512 : struct crate::ctx::Mkc;
        translations_octword_actual_size / set_translations_octword_actual_size @ 768, 32 : u32;
        mkey_umem_id / set_mkey_umem_id @ 800, 32 : u32;
        mkey_umem_offset / set_mkey_umem_offset @ 832, 64 : u64;
        klm_pas_mtt @ 2176 : flex [u8; 4];
    }
    /// PRM `create_mkey_out`.
    pub struct CreateMkeyOut : create_mkey_out = "mlx5_ifc_create_mkey_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        mkey_index / set_mkey_index @ 72, 24 : u32;
    }
    /// PRM `destroy_mkey_in`.
    pub struct DestroyMkeyIn : destroy_mkey_in = "mlx5_ifc_destroy_mkey_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        mkey_index / set_mkey_index @ 72, 24 : u32;
    }
    /// PRM `destroy_mkey_out`.
    pub struct DestroyMkeyOut : destroy_mkey_out = "mlx5_ifc_destroy_mkey_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `query_mkey_in`.
    pub struct QueryMkeyIn : query_mkey_in = "mlx5_ifc_query_mkey_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        mkey_index / set_mkey_index @ 72, 24 : u32;
        pg_access / set_pg_access @ 96, 1 : bool;
    }
    /// PRM `query_mkey_out`.
    pub struct QueryMkeyOut : query_mkey_out = "mlx5_ifc_query_mkey_out_bits", 2432 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        memory_key_mkey_entry / memory_key_mkey_entry_mut @ 128, 512 : struct crate::ctx::Mkc;
        bsf0_klm0_pas_mtt0_1 / bsf0_klm0_pas_mtt0_1_mut @ 2176, 128 : [u8];
        bsf1_klm1_pas_mtt2_3 / bsf1_klm1_pas_mtt2_3_mut @ 2304, 128 : [u8];
    }
    /// PRM `create_cq_in`.
    pub struct CreateCqIn : create_cq_in = "mlx5_ifc_create_cq_in_bits", 2176 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        cq_context / cq_context_mut @ 128, 512 : struct crate::ctx::Cqc;
        cq_umem_offset / set_cq_umem_offset @ 640, 64 : u64;
        cq_umem_id / set_cq_umem_id @ 704, 32 : u32;
        cq_umem_valid / set_cq_umem_valid @ 736, 1 : bool;
        pas @ 2176 : flex [u8; 8];
    }
    /// PRM `create_cq_out`.
    pub struct CreateCqOut : create_cq_out = "mlx5_ifc_create_cq_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        cqn / set_cqn @ 72, 24 : u32;
    }
    /// PRM `destroy_cq_in`.
    pub struct DestroyCqIn : destroy_cq_in = "mlx5_ifc_destroy_cq_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        cqn / set_cqn @ 72, 24 : u32;
    }
    /// PRM `destroy_cq_out`.
    pub struct DestroyCqOut : destroy_cq_out = "mlx5_ifc_destroy_cq_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `query_cq_in`.
    pub struct QueryCqIn : query_cq_in = "mlx5_ifc_query_cq_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        cqn / set_cqn @ 72, 24 : u32;
    }
    /// PRM `query_cq_out`.
    pub struct QueryCqOut : query_cq_out = "mlx5_ifc_query_cq_out_bits", 2176 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        cq_context / cq_context_mut @ 128, 512 : struct crate::ctx::Cqc;
        pas @ 2176 : flex [u8; 8];
    }
    /// PRM `modify_cq_in`.
    pub struct ModifyCqIn : modify_cq_in = "mlx5_ifc_modify_cq_in_bits", 2176 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        cqn / set_cqn @ 72, 24 : u32;
        modify_field_select_resize_field_select / set_modify_field_select_resize_field_select @ 96, 32 : u32;
        cq_context / cq_context_mut @ 128, 512 : struct crate::ctx::Cqc;
        cq_umem_valid / set_cq_umem_valid @ 736, 1 : bool;
        pas @ 2176 : flex [u8; 8];
    }
    /// PRM `modify_cq_out`.
    pub struct ModifyCqOut : modify_cq_out = "mlx5_ifc_modify_cq_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `create_qp_in`.
    pub struct CreateQpIn : create_qp_in = "mlx5_ifc_create_qp_in_bits", 2176 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        qpc_ext / set_qpc_ext @ 64, 1 : bool;
        input_qpn / set_input_qpn @ 72, 24 : u32;
        opt_param_mask / set_opt_param_mask @ 128, 32 : u32;
        ece / set_ece @ 160, 32 : u32;
        qpc / qpc_mut @ 192, 1856 : struct crate::ctx::Qpc;
        wq_umem_offset / set_wq_umem_offset @ 2048, 64 : u64;
        wq_umem_id / set_wq_umem_id @ 2112, 32 : u32;
        wq_umem_valid / set_wq_umem_valid @ 2144, 1 : bool;
        pas @ 2176 : flex [u8; 8];
    }
    /// PRM `create_qp_out`.
    pub struct CreateQpOut : create_qp_out = "mlx5_ifc_create_qp_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        qpn / set_qpn @ 72, 24 : u32;
        ece / set_ece @ 96, 32 : u32;
    }
    /// PRM `destroy_qp_in`.
    pub struct DestroyQpIn : destroy_qp_in = "mlx5_ifc_destroy_qp_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        qpn / set_qpn @ 72, 24 : u32;
    }
    /// PRM `destroy_qp_out`.
    pub struct DestroyQpOut : destroy_qp_out = "mlx5_ifc_destroy_qp_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `query_qp_in`.
    pub struct QueryQpIn : query_qp_in = "mlx5_ifc_query_qp_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        qpc_ext / set_qpc_ext @ 64, 1 : bool;
        qpn / set_qpn @ 72, 24 : u32;
    }
    /// PRM `query_qp_out`.
    pub struct QueryQpOut : query_qp_out = "mlx5_ifc_query_qp_out_bits", 3712 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        opt_param_mask / set_opt_param_mask @ 128, 32 : u32;
        ece / set_ece @ 160, 32 : u32;
        qpc / qpc_mut @ 192, 1856 : struct crate::ctx::Qpc;
        qp_pas_or_qpc_ext_and_pas / qp_pas_or_qpc_ext_and_pas_mut @ 2176, 1536 : [u8];
    }
    /// PRM `rst2init_qp_in`.
    pub struct Rst2initQpIn : rst2init_qp_in = "mlx5_ifc_rst2init_qp_in_bits", 2176 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        qpn / set_qpn @ 72, 24 : u32;
        opt_param_mask / set_opt_param_mask @ 128, 32 : u32;
        ece / set_ece @ 160, 32 : u32;
        qpc / qpc_mut @ 192, 1856 : struct crate::ctx::Qpc;
    }
    /// PRM `rst2init_qp_out`.
    pub struct Rst2initQpOut : rst2init_qp_out = "mlx5_ifc_rst2init_qp_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        ece / set_ece @ 96, 32 : u32;
    }
    /// PRM `init2init_qp_in`.
    pub struct Init2initQpIn : init2init_qp_in = "mlx5_ifc_init2init_qp_in_bits", 2176 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        qpn / set_qpn @ 72, 24 : u32;
        opt_param_mask / set_opt_param_mask @ 128, 32 : u32;
        ece / set_ece @ 160, 32 : u32;
        qpc / qpc_mut @ 192, 1856 : struct crate::ctx::Qpc;
    }
    /// PRM `init2init_qp_out`.
    pub struct Init2initQpOut : init2init_qp_out = "mlx5_ifc_init2init_qp_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        ece / set_ece @ 96, 32 : u32;
    }
    /// PRM `init2rtr_qp_in`.
    pub struct Init2rtrQpIn : init2rtr_qp_in = "mlx5_ifc_init2rtr_qp_in_bits", 2176 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        qpn / set_qpn @ 72, 24 : u32;
        opt_param_mask / set_opt_param_mask @ 128, 32 : u32;
        ece / set_ece @ 160, 32 : u32;
        qpc / qpc_mut @ 192, 1856 : struct crate::ctx::Qpc;
    }
    /// PRM `init2rtr_qp_out`.
    pub struct Init2rtrQpOut : init2rtr_qp_out = "mlx5_ifc_init2rtr_qp_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        ece / set_ece @ 96, 32 : u32;
    }
    /// PRM `rtr2rts_qp_in`.
    pub struct Rtr2rtsQpIn : rtr2rts_qp_in = "mlx5_ifc_rtr2rts_qp_in_bits", 2176 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        qpn / set_qpn @ 72, 24 : u32;
        opt_param_mask / set_opt_param_mask @ 128, 32 : u32;
        ece / set_ece @ 160, 32 : u32;
        qpc / qpc_mut @ 192, 1856 : struct crate::ctx::Qpc;
    }
    /// PRM `rtr2rts_qp_out`.
    pub struct Rtr2rtsQpOut : rtr2rts_qp_out = "mlx5_ifc_rtr2rts_qp_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        ece / set_ece @ 96, 32 : u32;
    }
    /// PRM `rts2rts_qp_in`.
    pub struct Rts2rtsQpIn : rts2rts_qp_in = "mlx5_ifc_rts2rts_qp_in_bits", 2176 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        qpn / set_qpn @ 72, 24 : u32;
        opt_param_mask / set_opt_param_mask @ 128, 32 : u32;
        ece / set_ece @ 160, 32 : u32;
        qpc / qpc_mut @ 192, 1856 : struct crate::ctx::Qpc;
    }
    /// PRM `rts2rts_qp_out`.
    pub struct Rts2rtsQpOut : rts2rts_qp_out = "mlx5_ifc_rts2rts_qp_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        ece / set_ece @ 96, 32 : u32;
    }
    /// PRM `sqerr2rts_qp_in`.
    pub struct Sqerr2rtsQpIn : sqerr2rts_qp_in = "mlx5_ifc_sqerr2rts_qp_in_bits", 2176 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        qpn / set_qpn @ 72, 24 : u32;
        opt_param_mask / set_opt_param_mask @ 128, 32 : u32;
        qpc / qpc_mut @ 192, 1856 : struct crate::ctx::Qpc;
    }
    /// PRM `sqerr2rts_qp_out`.
    pub struct Sqerr2rtsQpOut : sqerr2rts_qp_out = "mlx5_ifc_sqerr2rts_qp_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `qp_2err_in`.
    pub struct Qp2errIn : qp_2err_in = "mlx5_ifc_qp_2err_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        qpn / set_qpn @ 72, 24 : u32;
    }
    /// PRM `qp_2err_out`.
    pub struct Qp2errOut : qp_2err_out = "mlx5_ifc_qp_2err_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `qp_2rst_in`.
    pub struct Qp2rstIn : qp_2rst_in = "mlx5_ifc_qp_2rst_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        qpn / set_qpn @ 72, 24 : u32;
    }
    /// PRM `qp_2rst_out`.
    pub struct Qp2rstOut : qp_2rst_out = "mlx5_ifc_qp_2rst_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `create_srq_in`.
    pub struct CreateSrqIn : create_srq_in = "mlx5_ifc_create_srq_in_bits", 2176 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        srq_context_entry / srq_context_entry_mut @ 128, 512 : struct crate::ctx::Srqc;
        pas @ 2176 : flex [u8; 8];
    }
    /// PRM `create_srq_out`.
    pub struct CreateSrqOut : create_srq_out = "mlx5_ifc_create_srq_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        srqn / set_srqn @ 72, 24 : u32;
    }
    /// PRM `destroy_srq_in`.
    pub struct DestroySrqIn : destroy_srq_in = "mlx5_ifc_destroy_srq_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        srqn / set_srqn @ 72, 24 : u32;
    }
    /// PRM `destroy_srq_out`.
    pub struct DestroySrqOut : destroy_srq_out = "mlx5_ifc_destroy_srq_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `query_srq_in`.
    pub struct QuerySrqIn : query_srq_in = "mlx5_ifc_query_srq_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        srqn / set_srqn @ 72, 24 : u32;
    }
    /// PRM `query_srq_out`.
    pub struct QuerySrqOut : query_srq_out = "mlx5_ifc_query_srq_out_bits", 2176 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        srq_context_entry / srq_context_entry_mut @ 128, 512 : struct crate::ctx::Srqc;
        pas @ 2176 : flex [u8; 8];
    }
    /// PRM `create_rmp_in` (the page list follows, as `ctx.wq.pas`).
    pub struct CreateRmpIn : create_rmp_in = "mlx5_ifc_create_rmp_in_bits", 2176 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        ctx / ctx_mut @ 256, 1920 : struct crate::ctx::Rmpc;
    }
    /// PRM `create_rmp_out`.
    pub struct CreateRmpOut : create_rmp_out = "mlx5_ifc_create_rmp_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        rmpn / set_rmpn @ 72, 24 : u32;
    }
    /// PRM `modify_rmp_in`.
    pub struct ModifyRmpIn : modify_rmp_in = "mlx5_ifc_modify_rmp_in_bits", 2176 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        rmp_state / set_rmp_state @ 64, 4 : u8;
        rmpn / set_rmpn @ 72, 24 : u32;
        bitmask / bitmask_mut @ 128, 64 : struct crate::ctx::RmpBitmask;
        ctx / ctx_mut @ 256, 1920 : struct crate::ctx::Rmpc;
    }
    /// PRM `modify_rmp_out`.
    pub struct ModifyRmpOut : modify_rmp_out = "mlx5_ifc_modify_rmp_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `query_rmp_in`.
    pub struct QueryRmpIn : query_rmp_in = "mlx5_ifc_query_rmp_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        rmpn / set_rmpn @ 72, 24 : u32;
    }
    /// PRM `query_rmp_out`.
    pub struct QueryRmpOut : query_rmp_out = "mlx5_ifc_query_rmp_out_bits", 2176 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        rmp_context / rmp_context_mut @ 256, 1920 : struct crate::ctx::Rmpc;
    }
    /// PRM `destroy_rmp_in`.
    pub struct DestroyRmpIn : destroy_rmp_in = "mlx5_ifc_destroy_rmp_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        rmpn / set_rmpn @ 72, 24 : u32;
    }
    /// PRM `destroy_rmp_out`.
    pub struct DestroyRmpOut : destroy_rmp_out = "mlx5_ifc_destroy_rmp_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `arm_rq_in`.
    pub struct ArmRqIn : arm_rq_in = "mlx5_ifc_arm_rq_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        srq_number / set_srq_number @ 72, 24 : u32;
        lwm / set_lwm @ 112, 16 : u16;
    }
    /// PRM `arm_rq_out`.
    pub struct ArmRqOut : arm_rq_out = "mlx5_ifc_arm_rq_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `create_xrc_srq_in`: an XRC SRQ, a shared receive queue of an XRC domain whose
    /// completions go to its own CQ (the page list follows).
    pub struct CreateXrcSrqIn : create_xrc_srq_in = "mlx5_ifc_create_xrc_srq_in_bits", 2176 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        xrc_srq_context_entry / xrc_srq_context_entry_mut @ 128, 512 : struct crate::ctx::XrcSrqc;
        xrc_srq_umem_valid / set_xrc_srq_umem_valid @ 736, 1 : bool;
        pas @ 2176 : flex [u8; 8];
    }
    /// PRM `create_xrc_srq_out`.
    pub struct CreateXrcSrqOut : create_xrc_srq_out = "mlx5_ifc_create_xrc_srq_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        xrc_srqn / set_xrc_srqn @ 72, 24 : u32;
    }
    /// PRM `destroy_xrc_srq_in`.
    pub struct DestroyXrcSrqIn : destroy_xrc_srq_in = "mlx5_ifc_destroy_xrc_srq_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        xrc_srqn / set_xrc_srqn @ 72, 24 : u32;
    }
    /// PRM `destroy_xrc_srq_out`.
    pub struct DestroyXrcSrqOut : destroy_xrc_srq_out = "mlx5_ifc_destroy_xrc_srq_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `query_xrc_srq_in`.
    pub struct QueryXrcSrqIn : query_xrc_srq_in = "mlx5_ifc_query_xrc_srq_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        xrc_srqn / set_xrc_srqn @ 72, 24 : u32;
    }
    /// PRM `query_xrc_srq_out`.
    pub struct QueryXrcSrqOut : query_xrc_srq_out = "mlx5_ifc_query_xrc_srq_out_bits", 2176 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        xrc_srq_context_entry / xrc_srq_context_entry_mut @ 128, 512 : struct crate::ctx::XrcSrqc;
        pas @ 2176 : flex [u8; 8];
    }
    /// PRM `arm_xrc_srq_in`: arms an XRC SRQ's limit (`op_mod` is
    /// [`ARM_XRC_SRQ_OP_MOD_XRC_SRQ`](crate::cmd::ARM_XRC_SRQ_OP_MOD_XRC_SRQ)).
    pub struct ArmXrcSrqIn : arm_xrc_srq_in = "mlx5_ifc_arm_xrc_srq_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        xrc_srqn / set_xrc_srqn @ 72, 24 : u32;
        lwm / set_lwm @ 112, 16 : u16;
    }
    /// PRM `arm_xrc_srq_out`.
    pub struct ArmXrcSrqOut : arm_xrc_srq_out = "mlx5_ifc_arm_xrc_srq_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `query_nic_vport_context_in`.
    pub struct QueryNicVportContextIn : query_nic_vport_context_in = "mlx5_ifc_query_nic_vport_context_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        other_vport / set_other_vport @ 64, 1 : bool;
        vport_number / set_vport_number @ 80, 16 : u16;
        allowed_list_type / set_allowed_list_type @ 101, 3 : u8;
    }
    /// PRM `query_nic_vport_context_out`.
    pub struct QueryNicVportContextOut : query_nic_vport_context_out = "mlx5_ifc_query_nic_vport_context_out_bits", 2176 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        nic_vport_context / nic_vport_context_mut @ 128, 2048 : struct crate::ctx::NicVportContext;
    }
    /// PRM `modify_nic_vport_context_in`.
    pub struct ModifyNicVportContextIn : modify_nic_vport_context_in = "mlx5_ifc_modify_nic_vport_context_in_bits", 4096 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        other_vport / set_other_vport @ 64, 1 : bool;
        vport_number / set_vport_number @ 80, 16 : u16;
        field_select / field_select_mut @ 96, 32 : struct crate::ctx::ModifyNicVportFieldSelect;
        nic_vport_context / nic_vport_context_mut @ 2048, 2048 : struct crate::ctx::NicVportContext;
    }
    /// PRM `modify_nic_vport_context_out`.
    pub struct ModifyNicVportContextOut : modify_nic_vport_context_out = "mlx5_ifc_modify_nic_vport_context_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `query_hca_vport_context_in`.
    pub struct QueryHcaVportContextIn : query_hca_vport_context_in = "mlx5_ifc_query_hca_vport_context_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        other_vport / set_other_vport @ 64, 1 : bool;
        port_num / set_port_num @ 76, 4 : u8;
        vport_number / set_vport_number @ 80, 16 : u16;
    }
    /// PRM `query_hca_vport_context_out`.
    pub struct QueryHcaVportContextOut : query_hca_vport_context_out = "mlx5_ifc_query_hca_vport_context_out_bits", 4224 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        hca_vport_context / hca_vport_context_mut @ 128, 4096 : struct crate::ctx::HcaVportContext;
    }
    /// PRM `query_hca_vport_gid_in`.
    pub struct QueryHcaVportGidIn : query_hca_vport_gid_in = "mlx5_ifc_query_hca_vport_gid_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        other_vport / set_other_vport @ 64, 1 : bool;
        port_num / set_port_num @ 76, 4 : u8;
        vport_number / set_vport_number @ 80, 16 : u16;
        gid_index / set_gid_index @ 112, 16 : u16;
    }
    /// PRM `query_hca_vport_gid_out`.
    pub struct QueryHcaVportGidOut : query_hca_vport_gid_out = "mlx5_ifc_query_hca_vport_gid_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        gids_num / set_gids_num @ 96, 16 : u16;
        gid @ 128 : flex [u8; 16];
    }
    /// PRM `query_hca_vport_pkey_in`.
    pub struct QueryHcaVportPkeyIn : query_hca_vport_pkey_in = "mlx5_ifc_query_hca_vport_pkey_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        other_vport / set_other_vport @ 64, 1 : bool;
        port_num / set_port_num @ 76, 4 : u8;
        vport_number / set_vport_number @ 80, 16 : u16;
        pkey_index / set_pkey_index @ 112, 16 : u16;
    }
    /// PRM `query_hca_vport_pkey_out`.
    pub struct QueryHcaVportPkeyOut : query_hca_vport_pkey_out = "mlx5_ifc_query_hca_vport_pkey_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        pkey @ 128 : flex [u8; 4];
    }
    /// PRM `query_vport_state_in`.
    pub struct QueryVportStateIn : query_vport_state_in = "mlx5_ifc_query_vport_state_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        other_vport / set_other_vport @ 64, 1 : bool;
        vport_number / set_vport_number @ 80, 16 : u16;
    }
    /// PRM `query_vport_state_out`.
    pub struct QueryVportStateOut : query_vport_state_out = "mlx5_ifc_query_vport_state_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        max_tx_speed / set_max_tx_speed @ 96, 16 : u16;
        admin_state / set_admin_state @ 120, 4 : u8;
        state / set_state @ 124, 4 : u8;
    }
    /// PRM `set_roce_address_in`.
    pub struct SetRoceAddressIn : set_roce_address_in = "mlx5_ifc_set_roce_address_in_bits", 384 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        roce_address_index / set_roce_address_index @ 64, 16 : u16;
        vhca_port_num / set_vhca_port_num @ 92, 4 : u8;
        roce_address / roce_address_mut @ 128, 256 : struct crate::ctx::RoceAddrLayout;
    }
    /// PRM `set_roce_address_out`.
    pub struct SetRoceAddressOut : set_roce_address_out = "mlx5_ifc_set_roce_address_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `query_roce_address_in`.
    pub struct QueryRoceAddressIn : query_roce_address_in = "mlx5_ifc_query_roce_address_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        roce_address_index / set_roce_address_index @ 64, 16 : u16;
        vhca_port_num / set_vhca_port_num @ 92, 4 : u8;
    }
    /// PRM `query_roce_address_out`.
    pub struct QueryRoceAddressOut : query_roce_address_out = "mlx5_ifc_query_roce_address_out_bits", 384 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        roce_address / roce_address_mut @ 128, 256 : struct crate::ctx::RoceAddrLayout;
    }
    /// PRM `mad_ifc_in`.
    pub struct MadIfcIn : mad_ifc_in = "mlx5_ifc_mad_ifc_in_bits", 2176 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        remote_lid / set_remote_lid @ 64, 16 : u16;
        plane_index / set_plane_index @ 80, 8 : u8;
        port / set_port @ 88, 8 : u8;
        mad / mad_mut @ 128, 2048 : [u8];
    }
    /// PRM `mad_ifc_out`.
    pub struct MadIfcOut : mad_ifc_out = "mlx5_ifc_mad_ifc_out_bits", 2176 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        response_mad_packet / response_mad_packet_mut @ 128, 2048 : [u8];
    }
    /// PRM `alloc_q_counter_in`.
    pub struct AllocQCounterIn : alloc_q_counter_in = "mlx5_ifc_alloc_q_counter_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
    }
    /// PRM `alloc_q_counter_out`.
    pub struct AllocQCounterOut : alloc_q_counter_out = "mlx5_ifc_alloc_q_counter_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        counter_set_id / set_counter_set_id @ 88, 8 : u8;
    }
    /// PRM `dealloc_q_counter_in`.
    pub struct DeallocQCounterIn : dealloc_q_counter_in = "mlx5_ifc_dealloc_q_counter_in_bits", 128 bits {
        opcode / set_opcode @ 0, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        counter_set_id / set_counter_set_id @ 88, 8 : u8;
    }
    /// PRM `dealloc_q_counter_out`.
    pub struct DeallocQCounterOut : dealloc_q_counter_out = "mlx5_ifc_dealloc_q_counter_out_bits", 128 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
    }
    /// PRM `query_q_counter_in`.
    pub struct QueryQCounterIn : query_q_counter_in = "mlx5_ifc_query_q_counter_in_bits", 256 bits {
        opcode / set_opcode @ 0, 16 : u16;
        uid / set_uid @ 16, 16 : u16;
        op_mod / set_op_mod @ 48, 16 : u16;
        other_vport / set_other_vport @ 64, 1 : bool;
        vport_number / set_vport_number @ 80, 16 : u16;
        clear / set_clear @ 192, 1 : bool;
        aggregate / set_aggregate @ 193, 1 : bool;
        counter_set_id / set_counter_set_id @ 248, 8 : u8;
    }
    /// PRM `query_q_counter_out`.
    pub struct QueryQCounterOut : query_q_counter_out = "mlx5_ifc_query_q_counter_out_bits", 2048 bits {
        status / set_status @ 0, 8 : u8;
        syndrome / set_syndrome @ 32, 32 : u32;
        rx_write_requests / set_rx_write_requests @ 128, 32 : u32;
        rx_read_requests / set_rx_read_requests @ 192, 32 : u32;
        rx_atomic_requests / set_rx_atomic_requests @ 256, 32 : u32;
        rx_dct_connect / set_rx_dct_connect @ 320, 32 : u32;
        out_of_buffer / set_out_of_buffer @ 384, 32 : u32;
        out_of_sequence / set_out_of_sequence @ 448, 32 : u32;
        duplicate_request / set_duplicate_request @ 512, 32 : u32;
        rnr_nak_retry_err / set_rnr_nak_retry_err @ 576, 32 : u32;
        packet_seq_err / set_packet_seq_err @ 640, 32 : u32;
        implied_nak_seq_err / set_implied_nak_seq_err @ 704, 32 : u32;
        local_ack_timeout_err / set_local_ack_timeout_err @ 768, 32 : u32;
        req_rnr_retries_exceeded / set_req_rnr_retries_exceeded @ 896, 32 : u32;
        resp_local_length_error / set_resp_local_length_error @ 960, 32 : u32;
        req_local_length_error / set_req_local_length_error @ 992, 32 : u32;
        resp_local_qp_error / set_resp_local_qp_error @ 1024, 32 : u32;
        local_operation_error / set_local_operation_error @ 1056, 32 : u32;
        resp_local_protection / set_resp_local_protection @ 1088, 32 : u32;
        req_local_protection / set_req_local_protection @ 1120, 32 : u32;
        resp_cqe_error / set_resp_cqe_error @ 1152, 32 : u32;
        req_cqe_error / set_req_cqe_error @ 1184, 32 : u32;
        req_mw_binding / set_req_mw_binding @ 1216, 32 : u32;
        req_bad_response / set_req_bad_response @ 1248, 32 : u32;
        req_remote_invalid_request / set_req_remote_invalid_request @ 1280, 32 : u32;
        resp_remote_invalid_request / set_resp_remote_invalid_request @ 1312, 32 : u32;
        req_remote_access_errors / set_req_remote_access_errors @ 1344, 32 : u32;
        resp_remote_access_errors / set_resp_remote_access_errors @ 1376, 32 : u32;
        req_remote_operation_errors / set_req_remote_operation_errors @ 1408, 32 : u32;
        req_transport_retries_exceeded / set_req_transport_retries_exceeded @ 1440, 32 : u32;
        cq_overflow / set_cq_overflow @ 1472, 32 : u32;
        resp_cqe_flush_error / set_resp_cqe_flush_error @ 1504, 32 : u32;
        req_cqe_flush_error / set_req_cqe_flush_error @ 1536, 32 : u32;
        roce_adp_retrans / set_roce_adp_retrans @ 1600, 32 : u32;
        roce_adp_retrans_to / set_roce_adp_retrans_to @ 1632, 32 : u32;
        roce_slow_restart / set_roce_slow_restart @ 1664, 32 : u32;
        roce_slow_restart_cnps / set_roce_slow_restart_cnps @ 1696, 32 : u32;
        roce_slow_restart_trans / set_roce_slow_restart_trans @ 1728, 32 : u32;
    }
}
