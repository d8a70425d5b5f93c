//! The uhca demo: two mock ConnectX HCAs talking.
//!
//! Today it shows the layer that is done, the firmware interface: it builds the first
//! commands of a bring-up exactly as they go to the device. Bring-up, queue pairs and the
//! RoCEv2 exchange between two mock HCAs are not implemented yet (see the README's support
//! table).

use uhca::fwif::PrmLayout;
use uhca::fwif::cmd::{Command, EnableHcaIn, QueryHcaCapIn, QueryIssiIn, query_hca_cap_op_mod};
use uhca::fwif::consts::{HcaCapMode, HcaCapType};
use zerocopy::IntoBytes;

fn show<C: Command + IntoBytes + zerocopy::Immutable>(name: &str, cmd: &C) {
    let bytes = cmd.as_bytes();
    let head: Vec<String> = bytes.iter().take(16).map(|b| format!("{b:02x}")).collect();
    println!(
        "  {name:<14} opcode {:#06x}  in {:>4} B  out {:>5} B  first bytes {}",
        C::OPCODE.raw(),
        C::SIZE,
        <C::Out as PrmLayout>::SIZE,
        head.join(" ")
    );
}

fn main() {
    println!("uhca demo");
    println!("The first commands of an mlx5 bring-up, as uhca-fwif builds them:");
    show("ENABLE_HCA", &EnableHcaIn::new_cmd());
    show("QUERY_ISSI", &QueryIssiIn::new_cmd());
    let mut caps = QueryHcaCapIn::new_cmd();
    caps.set_op_mod(query_hca_cap_op_mod(
        HcaCapType::General,
        HcaCapMode::GetCur,
    ));
    show("QUERY_HCA_CAP", &caps);
    println!();
    println!("Bring-up on the mock and the two-HCA RoCEv2 exchange are not implemented yet.");
}
