// Declarations bootstrapped by tools/gen_layouts.py from the PRM reference tables;
// maintained by hand since. The conformance test checks every line.
#![allow(missing_docs)]

crate::prm_struct! {
    /// PRM `initial_seg`.
    pub struct InitialSeg : initial_seg = "mlx5_ifc_initial_seg_bits", 131168 bits {
        fw_rev_minor / set_fw_rev_minor @ 0, 16 : u16;
        fw_rev_major / set_fw_rev_major @ 16, 16 : u16;
        cmd_interface_rev / set_cmd_interface_rev @ 32, 16 : u16;
        fw_rev_subminor / set_fw_rev_subminor @ 48, 16 : u16;
        cmdq_phy_addr_63_32 / set_cmdq_phy_addr_63_32 @ 128, 32 : u32;
        cmdq_phy_addr_31_12 / set_cmdq_phy_addr_31_12 @ 160, 20 : u32;
        nic_interface / set_nic_interface @ 182, 2 : u8;
        log_cmdq_size / set_log_cmdq_size @ 184, 4 : u8;
        log_cmdq_stride / set_log_cmdq_stride @ 188, 4 : u8;
        command_doorbell_vector / set_command_doorbell_vector @ 192, 32 : u32;
        initializing / set_initializing @ 4064, 1 : bool;
        nic_interface_supported / set_nic_interface_supported @ 4069, 3 : u8;
        embedded_cpu / set_embedded_cpu @ 4072, 1 : bool;
        health_buffer / health_buffer_mut @ 4096, 512 : struct crate::init_seg::HealthBuffer;
        no_dram_nic_offset / set_no_dram_nic_offset @ 4608, 32 : u32;
        internal_timer_h / set_internal_timer_h @ 32768, 32 : u32;
        internal_timer_l / set_internal_timer_l @ 32800, 32 : u32;
        clear_int / set_clear_int @ 32895, 1 : bool;
        health_syndrome / set_health_syndrome @ 32896, 8 : u8;
        health_counter / set_health_counter @ 32904, 24 : u32;
        real_time / set_real_time @ 33280, 64 : u64;
    }
    /// PRM `health_buffer`.
    pub struct HealthBuffer : health_buffer = "mlx5_ifc_health_buffer_bits", 512 bits {
        assert_existptr / set_assert_existptr @ 256, 32 : u32;
        assert_callra / set_assert_callra @ 288, 32 : u32;
        time / set_time @ 352, 32 : u32;
        fw_version / set_fw_version @ 384, 32 : u32;
        hw_id / set_hw_id @ 416, 32 : u32;
        rfr / set_rfr @ 448, 1 : bool;
        valid / set_valid @ 452, 1 : bool;
        severity / set_severity @ 453, 3 : u8;
        irisc_index / set_irisc_index @ 480, 8 : u8;
        synd / set_synd @ 488, 8 : u8;
        ext_synd / set_ext_synd @ 496, 16 : u16;
    }
}
