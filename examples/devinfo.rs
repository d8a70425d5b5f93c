//! `devinfo`: describes an mlx5 HCA the way `ibv_devinfo -v` does: firmware, GUIDs, the
//! device limits, the ports with their link layer, state, LID or GIDs and MTU, and the
//! firmware page counts.
//!
//! ```text
//! cargo run --example devinfo -- --mock            # a mock ConnectX, Ethernet (RoCE) port
//! cargo run --example devinfo -- --mock --ib       # a mock ConnectX, InfiniBand port
//! cargo run --example devinfo --features vfio -- --device 0000:3b:00.0
//! ```
//!
//! On the mock's Ethernet port it installs one RoCEv2 GID (192.0.2.1, a documentation
//! address) so the GID table shows an entry, as a host's IP stack would have.

// println!/eprintln! that stay quiet on a closed pipe (`| head`).
#[macro_use]
#[path = "common/print.rs"]
mod print;

use std::net::{IpAddr, Ipv4Addr};
use std::process::ExitCode;

use uhca::driver::caps::LinkLayer;
use uhca::driver::verbs::{GidType, PortAttr};
use uhca::driver::{Error, Hca, HcaConfig};
use uhca::fwif::consts::{IbMtu, PortState};
use uhca::hal::Platform;

const USAGE: &str = "usage: devinfo --mock [--ib] | --device <PCI address, e.g. 0000:3b:00.0>";

/// The example RoCEv2 address installed on the mock's Ethernet port.
const MOCK_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut mock = false;
    let mut ib = false;
    let mut device = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--mock" => mock = true,
            "--ib" => ib = true,
            "--device" => match it.next() {
                Some(bdf) => device = Some(bdf.clone()),
                None => {
                    eprintln!("--device needs a PCI address\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => {
                eprintln!("unknown argument {other:?}\n{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    let result = match (mock, device) {
        (true, None) => run_mock(ib),
        (false, Some(bdf)) => {
            if ib {
                eprintln!("--ib only applies to --mock (a real port's link layer is its own)");
                return ExitCode::from(2);
            }
            run_device(&bdf)
        }
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("devinfo: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "mock")]
fn run_mock(ib: bool) -> Result<(), Box<dyn std::error::Error>> {
    use uhca::mock::{ClockMode, MockConfig, MockHca};
    let dev = MockHca::new(MockConfig {
        port_type: if ib {
            uhca::mock::LinkLayer::InfiniBand
        } else {
            uhca::mock::LinkLayer::Ethernet
        },
        clock: ClockMode::Virtual,
        ..MockConfig::default()
    });
    let mut hca = Hca::open_with(dev.platform(), HcaConfig::default())?;
    if hca.caps().link_layer == LinkLayer::Ethernet {
        let mac = hca.query_port(1)?.mac.unwrap_or_default();
        hca.add_roce_gid(1, 0, IpAddr::V4(MOCK_IP), mac, None)?;
    }
    describe(&mut hca, "uhca_mock0 (mock ConnectX)")?;
    hca.close()?;
    Ok(())
}

#[cfg(not(feature = "mock"))]
fn run_mock(_ib: bool) -> Result<(), Box<dyn std::error::Error>> {
    Err("this build has no mock: build with the `mock` feature (the default)".into())
}

#[cfg(feature = "vfio")]
fn run_device(bdf: &str) -> Result<(), Box<dyn std::error::Error>> {
    let platform = uhca::driver::vfio::VfioPlatform::open(bdf)?;
    let mut hca = Hca::open(platform)?;
    describe(&mut hca, bdf)?;
    hca.close()?;
    Ok(())
}

#[cfg(not(feature = "vfio"))]
fn run_device(_bdf: &str) -> Result<(), Box<dyn std::error::Error>> {
    Err(
        "--device needs the VFIO platform: build with `cargo run --example devinfo \
         --features vfio -- --device <BDF>`"
            .into(),
    )
}

fn guid(g: u64) -> String {
    let b = g.to_be_bytes();
    format!(
        "{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}:{:02x}{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]
    )
}

fn mtu(m: IbMtu) -> String {
    match m.bytes() {
        Some(b) => format!("{b} ({})", m.raw()),
        None => format!("invalid ({})", m.raw()),
    }
}

fn port_state(s: PortState) -> String {
    let name = match s {
        PortState::Down => "PORT_DOWN",
        PortState::Init => "PORT_INIT",
        PortState::Armed => "PORT_ARMED",
        PortState::Active => "PORT_ACTIVE",
        PortState::ActiveDefer => "PORT_ACTIVE_DEFER",
        _ => "PORT_NOP",
    };
    format!("{name} ({})", s.raw())
}

fn describe<P: Platform>(hca: &mut Hca<P>, name: &str) -> Result<(), Error> {
    let vendor = hca.platform().config_read16(0)?;
    let part = hca.platform().config_read16(2)?;
    let info = *hca.info();
    let caps = *hca.caps();
    let raw = *hca.hca_cap();
    let roce = hca.roce_caps();
    let ports: Vec<PortAttr> = (1..=caps.num_ports.max(1))
        .map(|p| hca.query_port(p))
        .collect::<Result<_, _>>()?;
    let first = ports.first();

    // Send SGEs of an RC WQE (control, remote address and atomic segments first), receive
    // SGEs of a receive WQE: the smaller is what every QP type offers.
    let send_desc = (caps.max_send_wqe_bytes as usize).min(63 * 16);
    let max_sge = (send_desc.saturating_sub(48) / 16).min(caps.max_recv_wqe_bytes as usize / 16);

    println!("hca_id:\t{name}");
    println!(
        "\ttransport:\t\t\tInfiniBand (0)\n\tfw_ver:\t\t\t\t{}.{}.{}",
        info.fw_version.0, info.fw_version.1, info.fw_version.2
    );
    if let Some(p) = first {
        println!("\tnode_guid:\t\t\t{}", guid(p.node_guid));
        println!("\tsys_image_guid:\t\t\t{}", guid(p.system_image_guid));
    }
    println!("\tvendor_id:\t\t\t{vendor:#06x}");
    println!("\tvendor_part_id:\t\t\t{part}");
    println!("\tphys_port_cnt:\t\t\t{}", caps.num_ports);
    println!("\tissi:\t\t\t\t{}", info.issi);
    println!("\tcmdq_slots:\t\t\t{}", info.cmdq_slots);
    let log_mr = raw.log_max_mrw_sz();
    if log_mr >= 64 {
        println!("\tmax_mr_size:\t\t\t0xffffffffffffffff");
    } else {
        println!("\tmax_mr_size:\t\t\t{:#x}", 1u64 << log_mr);
    }
    println!("\tpage_size_cap:\t\t\t{:#x}", 4096u64);
    println!("\tmax_qp:\t\t\t\t{}", caps.max_qp);
    println!("\tmax_qp_wr:\t\t\t{}", caps.max_qp_wr);
    println!("\tmax_sge:\t\t\t{max_sge}");
    println!("\tmax_cq:\t\t\t\t{}", caps.max_cq);
    println!("\tmax_cqe:\t\t\t{}", caps.max_cqe.saturating_sub(1));
    println!("\tmax_mr:\t\t\t\t{}", caps.max_mr);
    println!("\tmax_pd:\t\t\t\t{}", caps.max_pd);
    // Verbs names: rd_atom is what a QP answers (log_max_ra_res_qp), init_rd_atom what it
    // issues (log_max_ra_req_qp).
    println!("\tmax_qp_rd_atom:\t\t\t{}", 1u32 << raw.log_max_ra_res_qp());
    println!(
        "\tmax_qp_init_rd_atom:\t\t{}",
        1u32 << raw.log_max_ra_req_qp()
    );
    println!(
        "\tatomic_cap:\t\t\t{}",
        if caps.atomic {
            "ATOMIC_HCA (1)"
        } else {
            "ATOMIC_NONE (0)"
        }
    );
    println!("\tmax_srq:\t\t\t{}", caps.max_srq);
    println!("\tmax_srq_wr:\t\t\t{}", caps.max_srq_wr.saturating_sub(1));
    println!(
        "\tmax_srq_sge:\t\t\t{}",
        (caps.max_recv_wqe_bytes as u32 / 16).saturating_sub(1)
    );
    println!("\tmax_msg_sz:\t\t\t{:#x}", caps.max_msg_sz);
    println!(
        "\ttransports:\t\t\t{}{}{}",
        if caps.rc { "RC " } else { "" },
        if caps.uc { "UC " } else { "" },
        if caps.ud { "UD" } else { "" }
    );
    match roce {
        Some(r) => {
            let mut v = Vec::new();
            if r.roce_version & 1 != 0 {
                v.push("v1");
            }
            if r.roce_version & 2 != 0 {
                v.push("v1.5");
            }
            if r.v2() {
                v.push("v2");
            }
            println!(
                "\troce_versions:\t\t\t{} (UDP port {}, source ports {:#x}-{:#x})",
                v.join(", "),
                r.udp_dest_port,
                r.udp_src_port_range.0,
                r.udp_src_port_range.1
            );
        }
        None => println!("\troce_versions:\t\t\tnone"),
    }
    println!("\tcqe_version:\t\t\t{}", caps.cqe_version);
    if caps.device_frequency_khz != 0 {
        println!("\thca_core_clock:\t\t\t{}kHZ", caps.device_frequency_khz);
    }
    println!(
        "\tfirmware_pages:\t\t\tboot {}, init {}, now {}",
        info.boot_pages,
        info.init_pages,
        hca.firmware_pages()
    );

    for p in &ports {
        println!("\t\tport:\t{}", p.port);
        println!("\t\t\tstate:\t\t\t{}", port_state(p.state));
        println!("\t\t\tmax_mtu:\t\t{}", mtu(p.max_mtu));
        println!("\t\t\tactive_mtu:\t\t{}", mtu(p.active_mtu));
        println!("\t\t\tsm_lid:\t\t\t{}", p.sm_lid);
        println!("\t\t\tport_lid:\t\t{}", p.lid);
        println!("\t\t\tport_lmc:\t\t{:#04x}", p.lmc);
        println!("\t\t\tlink_layer:\t\t{}", p.link_layer);
        if p.link_layer == LinkLayer::InfiniBand {
            println!("\t\t\tsm_sl:\t\t\t{}", p.sm_sl);
            println!("\t\t\tport_guid:\t\t{}", guid(p.port_guid));
        }
        if let Some(mac) = p.mac {
            println!("\t\t\tmac:\t\t\t{mac}");
        }
        if let Some(m) = p.eth_mtu {
            println!("\t\t\teth_mtu:\t\t{m}");
        }
        println!("\t\t\tmax_msg_sz:\t\t{:#x}", caps.max_msg_sz);
        println!("\t\t\tpkey_tbl_len:\t\t{}", p.pkey_table_len);
        println!("\t\t\tgid_tbl_len:\t\t{}", p.gid_table_len);
        println!(
            "\t\t\tphys_state:\t\t{} ({})",
            p.phys_state,
            p.phys_state.raw()
        );
        let mut shown = 0;
        for i in 0..p.gid_table_len.min(u16::MAX as u32) as u16 {
            let g = hca.query_gid(p.port, i)?;
            if g.kind == GidType::Empty {
                continue;
            }
            shown += 1;
            let mut line = format!("\t\t\tGID[{i:>3}]:\t\t{}", g.gid);
            if let Some(ip) = g.gid.ipv4() {
                line += &format!(", {}", Ipv4Addr::from(ip));
            }
            line += &format!(", {}", g.kind);
            if let Some(v) = g.vlan {
                line += &format!(", VLAN {v}");
            }
            println!("{line}");
        }
        if shown == 0 {
            println!("\t\t\tGIDs:\t\t\tnone installed");
        }
    }
    Ok(())
}
