//! Vport contexts, GID and P_Key tables, vport state, the RoCE address table and MAD_IFC.

mod common;

use common::Harness;
use uhca_fwif::cmd::*;
use uhca_fwif::consts::*;
use uhca_mock::MockConfig;
use uhca_mock::firmware::{DEFAULT_PKEY, GID_PREFIX, MAD_STATUS_UNSUPPORTED, syndrome};

#[test]
fn nic_vport_context() {
    let mut h = Harness::ready(MockConfig::default());
    let o = h.ok(&QueryNicVportContextIn::new_cmd(), &[]);
    let c = o.nic_vport_context();
    assert!(!c.roce_en());
    assert_eq!(c.mtu(), 1500);
    assert_eq!(c.permanent_address().mac_addr_47_32(), 0x02c0);
    assert_eq!(c.permanent_address().mac_addr_31_0(), 0xffee_0001);
    assert_eq!(c.node_guid(), MockConfig::default().node_guid());
    h.enable_roce();
    assert!(h.hca.roce_enabled());
    let mut m = ModifyNicVportContextIn::new_cmd();
    m.field_select_mut().set_mtu(true);
    m.nic_vport_context_mut().set_mtu(9000).set_roce_en(false);
    h.ok(&m, &[]);
    let o = h.ok(&QueryNicVportContextIn::new_cmd(), &[]);
    assert_eq!(o.nic_vport_context().mtu(), 9000);
    assert!(o.nic_vport_context().roce_en(), "not selected, unchanged");
    // Fields this function may not change.
    let mut m = ModifyNicVportContextIn::new_cmd();
    m.field_select_mut().set_permanent_address(true);
    assert_eq!(
        h.err(&m, &[]),
        (CmdStatus::BadParamErr, syndrome::BAD_FIELD_SELECT)
    );
    let mut q = QueryNicVportContextIn::new_cmd();
    q.set_other_vport(true).set_vport_number(1);
    assert_eq!(h.err(&q, &[]).1, syndrome::BAD_FUNCTION);
}

#[test]
fn roce_address_table() {
    let mut h = Harness::ready(MockConfig::default());
    h.set_gid(3);
    let mut q = QueryRoceAddressIn::new_cmd();
    q.set_roce_address_index(3);
    let o = h.ok(&q, &[]);
    let a = o.roce_address();
    assert_eq!(a.roce_version(), 2);
    assert_eq!(&a.source_l3_address()[10..], &[0xff, 0xff, 192, 168, 0, 1]);
    // The GID is visible through QUERY_HCA_VPORT_GID too.
    let mut g = QueryHcaVportGidIn::new_cmd();
    g.set_gid_index(3);
    let r = h.exec_ext(&g, &[], 16);
    assert_eq!(r.status(), CmdStatus::Ok);
    assert_eq!(r.as_out::<QueryHcaVportGidOut>().gids_num(), 1);
    assert_eq!(&r.out[16 + 10..32], &[0xff, 0xff, 192, 168, 0, 1]);
    // Clearing an entry: all zeros.
    let mut s = SetRoceAddressIn::new_cmd();
    s.set_roce_address_index(3);
    h.ok(&s, &[]);
    assert_eq!(h.ok(&q, &[]).roce_address().roce_version(), 0);
    // Errors.
    s.set_roce_address_index(256);
    s.roce_address_mut().set_roce_version(2);
    assert_eq!(
        h.err(&s, &[]),
        (CmdStatus::BadParamErr, syndrome::BAD_ADDRESS_INDEX)
    );
    s.set_roce_address_index(1);
    s.roce_address_mut().set_roce_version(3);
    assert_eq!(h.err(&s, &[]).1, syndrome::BAD_ROCE_VERSION);
    s.roce_address_mut().set_roce_version(2).set_roce_l3_type(4);
    assert_eq!(h.err(&s, &[]).1, syndrome::BAD_ROCE_VERSION);
    q.set_roce_address_index(999);
    assert_eq!(h.err(&q, &[]).1, syndrome::BAD_ADDRESS_INDEX);
    q.set_roce_address_index(0).set_vhca_port_num(2);
    assert_eq!(h.err(&q, &[]).1, syndrome::BAD_PORT);
}

#[test]
fn hca_vport_context_and_tables_infiniband() {
    let cfg = MockConfig {
        lid: 0x12,
        sm_lid: 0x3,
        ..MockConfig::infiniband()
    };
    let mut h = Harness::ready(cfg.clone());
    let o = h.ok(&QueryHcaVportContextIn::new_cmd(), &[]);
    let c = o.hca_vport_context();
    assert_eq!(c.lid(), 0x12);
    assert_eq!(c.sm_lid(), 0x3);
    assert_eq!(c.port_state(), PortState::Active.raw());
    assert_eq!(c.port_physical_state(), 5);
    assert!(c.has_smi());
    assert_eq!(c.port_guid(), cfg.node_guid());
    let mut q = QueryHcaVportContextIn::new_cmd();
    q.set_port_num(2);
    assert_eq!(h.err(&q, &[]).1, syndrome::BAD_PORT);
    // GID 0 is the link-local prefix and the port GUID.
    let g = QueryHcaVportGidIn::new_cmd();
    let r = h.exec_ext(&g, &[], 16);
    assert_eq!(&r.out[16..24], &GID_PREFIX.to_be_bytes());
    assert_eq!(&r.out[24..32], &cfg.node_guid().to_be_bytes());
    // All GIDs at once, with too little room: an output length error.
    let mut all = QueryHcaVportGidIn::new_cmd();
    all.set_gid_index(0xffff);
    assert_eq!(h.exec_ext(&all, &[], 16).status(), CmdStatus::BadOutpLenErr);
    let r = h.exec_ext(&all, &[], 16 * 8);
    assert_eq!(r.as_out::<QueryHcaVportGidOut>().gids_num(), 8);
    let mut bad = QueryHcaVportGidIn::new_cmd();
    bad.set_gid_index(8);
    assert_eq!(
        h.exec_ext(&bad, &[], 16).syndrome(),
        syndrome::BAD_ADDRESS_INDEX
    );
    // P_Key table: entry 0 is the default P_Key.
    let p = QueryHcaVportPkeyIn::new_cmd();
    let r = h.exec_ext(&p, &[], 4);
    assert_eq!(r.status(), CmdStatus::Ok);
    assert_eq!(
        u32::from_be_bytes(r.out[16..20].try_into().unwrap()),
        DEFAULT_PKEY as u32
    );
    let mut p = QueryHcaVportPkeyIn::new_cmd();
    p.set_pkey_index(128);
    assert_eq!(h.exec_ext(&p, &[], 4).syndrome(), syndrome::BAD_PKEY_INDEX);
    // RoCE addresses do not exist on InfiniBand.
    let mut s = SetRoceAddressIn::new_cmd();
    s.roce_address_mut().set_roce_version(2);
    assert_eq!(h.err(&s, &[]).1, syndrome::WRONG_PORT_TYPE);
    // Port down.
    h.hca.set_port_up(false);
    let o = h.ok(&QueryHcaVportContextIn::new_cmd(), &[]);
    assert_eq!(o.hca_vport_context().port_state(), PortState::Down.raw());
}

#[test]
fn vport_state() {
    let mut h = Harness::ready(MockConfig::default());
    let o = h.ok(&QueryVportStateIn::new_cmd(), &[]);
    assert_eq!((o.admin_state(), o.state()), (1, 1));
    h.hca.set_port_up(false);
    assert_eq!(h.ok(&QueryVportStateIn::new_cmd(), &[]).state(), 0);
    let mut q = QueryVportStateIn::new_cmd();
    q.set_op_mod(5);
    assert_eq!(h.err(&q, &[]).1, syndrome::BAD_OP_MOD);
}

fn smp_get(attr: u16) -> MadIfcIn {
    let mut m = MadIfcIn::new_cmd();
    m.set_op_mod(3).set_port(1);
    let mad = m.mad_mut();
    mad[0] = 1; // base version
    mad[1] = 0x01; // subnet management, LID routed
    mad[2] = 1; // class version
    mad[3] = 0x01; // Get
    mad[8..16].copy_from_slice(&0x1122_3344_5566_7788u64.to_be_bytes());
    mad[16..18].copy_from_slice(&attr.to_be_bytes());
    m
}

#[test]
fn mad_ifc_node_and_port_info() {
    let cfg = MockConfig {
        lid: 0x21,
        ..MockConfig::infiniband()
    };
    let mut h = Harness::ready(cfg.clone());
    let o = h.ok(&smp_get(0x0011), &[]);
    let r = o.response_mad_packet();
    assert_eq!(r[3], 0x81, "GetResp");
    assert_eq!(&r[4..6], &[0, 0], "status");
    assert_eq!(
        &r[8..16],
        &0x1122_3344_5566_7788u64.to_be_bytes(),
        "transaction id echoed"
    );
    assert_eq!(r[64 + 2], 1, "channel adapter");
    assert_eq!(&r[64 + 12..64 + 20], &cfg.node_guid().to_be_bytes());
    let o = h.ok(&smp_get(0x0015), &[]);
    let r = o.response_mad_packet();
    assert_eq!(u16::from_be_bytes([r[64 + 16], r[64 + 17]]), 0x21, "LID");
    assert_eq!(r[64 + 32] & 0xf, PortState::Active.raw());
    // NodeDescription (Linux's mlx5_ib copies the data as the node description without
    // looking at the MAD status: before, it got an empty string).
    let o = h.ok(&smp_get(0x0010), &[]);
    let r = o.response_mad_packet();
    assert_eq!(&r[4..6], &[0, 0], "status");
    assert_eq!(&r[64..64 + 13], b"uhca mock HCA");
    assert!(r[64 + 13..128].iter().all(|&b| b == 0));
    let o = h.ok(&smp_get(0x0020), &[]);
    assert_eq!(
        u16::from_be_bytes([o.response_mad_packet()[4], o.response_mad_packet()[5]]),
        MAD_STATUS_UNSUPPORTED
    );
    let mut bad = smp_get(0x0011);
    bad.set_port(2);
    assert_eq!(h.err(&bad, &[]).1, syndrome::BAD_PORT);
    let mut bad = smp_get(0x0011);
    bad.mad_mut()[0] = 9;
    assert_eq!(h.err(&bad, &[]).1, syndrome::BAD_MAD);
    // On Ethernet there is no subnet management agent.
    let mut e = Harness::ready(MockConfig::default());
    assert_eq!(e.err(&smp_get(0x0011), &[]).1, syndrome::WRONG_PORT_TYPE);
}

#[test]
fn gid_table_size_capability_is_the_prm_encoding_of_the_served_table() {
    // `gid_table_size` encodes 8 << n entries (Linux `mlx5_get_gid_table_len`); the
    // capability must say as many GIDs as QUERY_HCA_VPORT_GID serves.
    let mut h = Harness::ready(MockConfig::infiniband());
    let mut q = QueryHcaCapIn::new_cmd();
    q.set_op_mod(query_hca_cap_op_mod(
        HcaCapType::General,
        HcaCapMode::GetCur,
    ));
    let enc = h.ok(&q, &[]).cmd_hca_cap().gid_table_size();
    assert!(
        enc <= 4,
        "encoding {enc} is invalid (readers take it as 0 entries)"
    );
    let entries = 8usize << enc;
    let mut all = QueryHcaVportGidIn::new_cmd();
    all.set_gid_index(0xffff);
    let r = h.exec_ext(&all, &[], 16 * entries);
    assert_eq!(r.status(), CmdStatus::Ok);
    assert_eq!(
        r.as_out::<QueryHcaVportGidOut>().gids_num() as usize,
        entries
    );
}

/// The port fields the hardware reads only where they mean something (issue 18 item 5):
/// QUERY_HCA_VPORT_*'s `port_num` on a dual-port function, SET/QUERY_ROCE_ADDRESS's
/// `vhca_port_num` on a function with vHCA ports. On this single-port function, and once
/// it has no vHCA ports, a non-zero value is refused.
#[test]
fn port_fields_are_refused_where_they_are_reserved() {
    let mut h = Harness::ready(MockConfig::infiniband());
    for port in [1, 2] {
        let mut q = QueryHcaVportContextIn::new_cmd();
        q.set_port_num(port);
        assert_eq!(h.err(&q, &[]), (CmdStatus::BadParamErr, syndrome::BAD_PORT));
        let mut g = QueryHcaVportGidIn::new_cmd();
        g.set_port_num(port);
        assert_eq!(
            h.exec_ext(&g, &[], 16).syndrome(),
            syndrome::BAD_PORT,
            "GID, port_num {port}"
        );
        let mut p = QueryHcaVportPkeyIn::new_cmd();
        p.set_port_num(port);
        assert_eq!(
            h.exec_ext(&p, &[], 4).syndrome(),
            syndrome::BAD_PORT,
            "P_Key, port_num {port}"
        );
    }
    h.ok(&QueryHcaVportContextIn::new_cmd(), &[]);

    // Ethernet: one vHCA port (the profile), then none.
    let mut h = Harness::ready(MockConfig::default());
    let mut s = SetRoceAddressIn::new_cmd();
    s.set_roce_address_index(0).set_vhca_port_num(1);
    s.roce_address_mut().set_roce_version(2);
    h.ok(&s, &[]);
    h.hca.set_num_vhca_ports(0);
    assert_eq!(h.err(&s, &[]), (CmdStatus::BadParamErr, syndrome::BAD_PORT));
    let mut q = QueryRoceAddressIn::new_cmd();
    q.set_roce_address_index(0).set_vhca_port_num(1);
    assert_eq!(h.err(&q, &[]), (CmdStatus::BadParamErr, syndrome::BAD_PORT));
    s.set_vhca_port_num(0);
    h.ok(&s, &[]);
    q.set_vhca_port_num(0);
    assert_eq!(h.ok(&q, &[]).roce_address().roce_version(), 2);
}

#[test]
fn the_node_description_register_and_the_smas_answer_agree() {
    let mut h = Harness::ready(MockConfig::infiniband());
    let mut r = AccessRegisterIn::new_cmd();
    r.set_op_mod(ACCESS_REGISTER_OP_MOD_READ)
        .set_register_id(REG_NODE_DESC);
    let raw = h.exec_ext(&r, &[0u8; NODE_DESC_BYTES], NODE_DESC_BYTES);
    assert_eq!(raw.status(), CmdStatus::Ok);
    assert_eq!(&raw.out[16..16 + 13], b"uhca mock HCA");
    assert!(
        raw.out[16 + 13..16 + NODE_DESC_BYTES]
            .iter()
            .all(|&b| b == 0)
    );
    // Written (as Linux's mlx5_ib does when a user sets the node description), read back,
    // and reported by the subnet management agent.
    let mut desc = [0u8; NODE_DESC_BYTES];
    desc[..7].copy_from_slice(b"rack 42");
    let mut w = AccessRegisterIn::new_cmd();
    w.set_op_mod(ACCESS_REGISTER_OP_MOD_WRITE)
        .set_register_id(REG_NODE_DESC);
    assert_eq!(
        h.exec_ext(&w, &desc, NODE_DESC_BYTES).status(),
        CmdStatus::Ok
    );
    let raw = h.exec_ext(&r, &[0u8; NODE_DESC_BYTES], NODE_DESC_BYTES);
    assert_eq!(&raw.out[16..16 + NODE_DESC_BYTES], &desc[..]);
    let o = h.ok(&smp_get(0x0010), &[]);
    assert_eq!(&o.response_mad_packet()[64..128], &desc[..]);
    // A write without the whole description; a read without room for it.
    assert_eq!(
        h.exec_ext(&w, &desc[..10], NODE_DESC_BYTES).status(),
        CmdStatus::BadInpLenErr
    );
    assert_eq!(
        h.exec(&r, &[0u8; NODE_DESC_BYTES]).status(),
        CmdStatus::BadOutpLenErr
    );
}
