//! The uhca demo: two mock ConnectX HCAs in one process.
//!
//! What it does today: brings two mock HCAs up through the driver (one RoCE/Ethernet, one
//! InfiniBand), exactly as it would bring up a real ConnectX under VFIO, shows what each
//! device reports and what the bring-up cost in commands and firmware pages, serves a
//! run-time page request, and tears both down. The RoCEv2 exchange between the two HCAs
//! (SEND, WRITE, READ, atomics, with a pcap) comes with the datapath; see the README.

use uhca::driver::{Hca, HcaConfig};
use uhca::mock::{ClockMode, MockConfig, MockHca, PortType};

fn bring_up(
    name: &str,
    port_type: PortType,
) -> Result<(MockHca, Hca<uhca::mock::MockPlatform>), uhca::driver::Error> {
    let dev = MockHca::new(MockConfig {
        port_type,
        clock: ClockMode::Virtual,
        ..MockConfig::default()
    });
    let hca = Hca::open_with(dev.platform(), HcaConfig::default())?;
    let (major, minor, sub) = hca.info().fw_version;
    let caps = hca.caps();
    println!(
        "{name}: ConnectX-6 Dx model, firmware {major}.{minor}.{sub}, ISSI {}",
        hca.info().issi
    );
    println!(
        "  link layer {}, {} port(s), max QP {}, max WR {}, max CQE {}, max MR {}, RoCE {}",
        caps.link_layer,
        caps.num_ports,
        caps.max_qp,
        caps.max_qp_wr,
        caps.max_cqe,
        caps.max_mr,
        caps.roce
    );
    println!(
        "  bring-up: {} commands, {} boot + {} init pages, {} pages held by the firmware now",
        dev.command_log().len(),
        hca.info().boot_pages,
        hca.info().init_pages,
        hca.firmware_pages()
    );
    Ok((dev, hca))
}

fn main() -> Result<(), uhca::driver::Error> {
    println!("uhca demo: two mock ConnectX HCAs, brought up by the driver\n");
    let (roce_dev, mut roce) = bring_up("hca0 (RoCE)", PortType::Ethernet)?;
    let (ib_dev, ib) = bring_up("hca1 (InfiniBand)", PortType::InfiniBand)?;

    roce.process_events()?;
    let before = roce.firmware_pages();
    roce_dev.request_pages(64);
    roce.process_events()?;
    println!(
        "\nhca0's firmware asked for 64 more pages at run time (PAGE_REQUEST event): {} -> {}",
        before,
        roce.firmware_pages()
    );

    roce.close()?;
    ib.close()?;
    println!(
        "both torn down: {} and {} IOMMU faults, {} and {} objects left",
        roce_dev.iommu_faults().len(),
        ib_dev.iommu_faults().len(),
        roce_dev.objects().eqs + roce_dev.objects().uars,
        ib_dev.objects().eqs + ib_dev.objects().uars
    );
    println!("\nNot yet: queue pairs and the RoCEv2 exchange between the two HCAs (the datapath).");
    Ok(())
}
