//! The driver's reading of every command output it consumes, from a device that lies: a
//! mock HCA whose firmware passes each output (header included) through a filter driven by
//! the fuzz input (`MockHca::set_command_output_filter`) before writing it back. The driver
//! then brings the HCA up and runs a fixed script of verbs (port and GID queries, PD,
//! CQ, MR, SRQ, an RC QP through INIT, RTR and RTS, queries, destruction, teardown), each
//! command seeing whatever output the fuzzer chose.
//!
//! The input: a config byte (bit 0: InfiniBand port), then edits of seven bytes each,
//! `[index, kind, at, v0, v1, v2, v3]`: the output of the `index`-th command (from 0, in
//! completion order) gets one byte set (`kind % 4` 0 or 1: byte `at * 7` becomes `v0`),
//! one big-endian word set (2: word `at` becomes `v0..v3`), or its status and syndrome
//! set (3: status `at`, syndrome `v0..v3`). Outputs no edit names are left as the model
//! wrote them.
//!
//! Properties: nothing panics, every wait ends (the model's clock is virtual: a timeout
//! costs no wall time), and every failure is a typed error.
#![no_main]

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};

use libfuzzer_sys::fuzz_target;
use uhca_driver::addr::{AhAttr, Gid, Mac, StaticRate};
use uhca_driver::verbs::{InitAttr, QpCaps, QpInitAttr, Rc, RtrAttr, RtsAttr, SrqInitAttr};
use uhca_driver::{Hca, HcaConfig};
use uhca_fwif::consts::{AccessFlags, CmdOpcode, IbMtu};
use uhca_mock::{LinkLayer, MockConfig, MockHca};

/// One lie: what to change in the output of the `index`-th command (from 0, in the order
/// the firmware completes them).
#[derive(Clone, Copy, Debug)]
struct Edit {
    index: u8,
    kind: u8,
    at: u8,
    value: [u8; 4],
}

/// The lies, and how many commands have completed.
struct Edits {
    edits: Vec<Edit>,
    seen: usize,
}

impl Edits {
    fn parse(data: &[u8]) -> Edits {
        let edits = data
            .chunks_exact(7)
            .map(|c| Edit {
                index: c[0],
                kind: c[1],
                at: c[2],
                value: [c[3], c[4], c[5], c[6]],
            })
            .collect();
        Edits { edits, seen: 0 }
    }

    fn apply(&mut self, _op: CmdOpcode, out: &mut [u8]) {
        let n = self.seen;
        self.seen += 1;
        for e in self.edits.iter().filter(|e| usize::from(e.index) == n) {
            let at = usize::from(e.at);
            match e.kind % 4 {
                // One byte, anywhere in the first 1792 bytes.
                0 | 1 => {
                    if let Some(b) = out.get_mut(at * 7 % out.len().max(1)) {
                        *b = e.value[0];
                    }
                }
                // One big-endian word.
                2 => {
                    let words = out.len() / 4;
                    if words > 0 {
                        let i = 4 * (at % words);
                        out[i..i + 4].copy_from_slice(&e.value);
                    }
                }
                // The status and the syndrome.
                _ => {
                    if out.len() >= 8 {
                        out[0] = e.at;
                        out[4..8].copy_from_slice(&e.value);
                    }
                }
            }
        }
    }
}

fn script(dev: &MockHca, ib: bool) -> Option<()> {
    let cfg = HcaConfig {
        // Short (virtual) waits polled coarsely: a lie that makes the driver wait costs a
        // few hundred polls, not the default timeouts' hundreds of thousands.
        fw_pre_init_timeout_ns: 2_000_000_000,
        fw_init_timeout_ns: 200_000_000,
        cmd_timeout_ns: 200_000_000,
        poll_us: 1000,
        ..HcaConfig::default()
    };
    let mut hca = Hca::open_with(dev.platform(), cfg).ok()?;
    let _ = hca.caps();
    let port = hca.query_port(1).ok();
    let mac = Mac(dev.mac());
    let ah = if ib {
        AhAttr::Ib {
            dlid: port.map_or(1, |p| p.lid),
            sl: 0,
            src_path_bits: 0,
            static_rate: StaticRate::PortCurrent,
            grh: None,
        }
    } else {
        let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let gid = hca.add_roce_gid(1, 0, ip, mac, None).unwrap_or(Gid::ZERO);
        let _ = hca.query_gid(1, 0);
        AhAttr::RoceV2 {
            sgid_index: 0,
            dgid: gid,
            dmac: mac,
            udp_sport: 0xc000,
            traffic_class: 0,
            hop_limit: 64,
            flow_label: 0,
            sl: 0,
        }
    };
    let pd = hca.alloc_pd().ok()?;
    let cq = hca.create_cq(16).ok()?;
    let _ = cq.query(&mut hca);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mr = hca.alloc_mr(&pd, 8192, access).ok();
    if let Some(mr) = &mr {
        let _ = mr.query(&mut hca);
    }
    let srq = hca
        .create_srq(
            &pd,
            SrqInitAttr {
                max_wr: 16,
                max_sge: 1,
                srq_limit: 0,
            },
        )
        .ok();
    let attr = QpInitAttr {
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        cap: QpCaps {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 32,
        },
    };
    let mut qp = hca.create_qp::<Rc>(&pd, &attr).ok()?;
    let qpn = qp.qpn();
    let _ = qp.query(&mut hca);
    qp.to_init(
        &mut hca,
        InitAttr {
            access,
            ..InitAttr::default()
        },
    )
    .ok()?;
    qp.to_rtr(
        &mut hca,
        RtrAttr {
            path_mtu: IbMtu::Mtu1024,
            dest_qpn: qpn,
            rq_psn: 0x100,
            max_dest_rd_atomic: 4,
            ah,
            ..RtrAttr::default()
        },
    )
    .ok()?;
    qp.to_rts(
        &mut hca,
        RtsAttr {
            sq_psn: 0x100,
            max_rd_atomic: 4,
            ..RtsAttr::default()
        },
    )
    .ok()?;
    let _ = qp.query(&mut hca);
    let _ = qp.destroy(&mut hca);
    if let Some(srq) = srq {
        let _ = srq.destroy(&mut hca);
    }
    if let Some(mr) = mr {
        let _ = mr.destroy(&mut hca);
    }
    let _ = cq.destroy(&mut hca);
    let _ = pd.destroy(&mut hca);
    let _ = hca.close();
    Some(())
}

fuzz_target!(|data: &[u8]| {
    let Some((&cfg, edits)) = data.split_first() else {
        return;
    };
    let ib = cfg & 1 != 0;
    let dev = MockHca::new(MockConfig {
        port_type: if ib {
            LinkLayer::InfiniBand
        } else {
            LinkLayer::Ethernet
        },
        ..MockConfig::default()
    });
    let edits = Arc::new(Mutex::new(Edits::parse(edits)));
    let e = edits.clone();
    dev.set_command_output_filter(Some(Box::new(move |op, out| {
        e.lock().unwrap().apply(op, out)
    })));
    // Objects the script gives up on are dropped with the HCA: their destruction and the
    // teardown read outputs too.
    let _ = script(&dev, ib);
});
