//! Addressing: the headers in front of the BTH, from a QP's address path (RC, UC) or a UD
//! address vector, for RoCEv2 (GID table entries installed with SET_ROCE_ADDRESS) and
//! native InfiniBand (LRH, and a GRH when asked for).

use super::mem::KeyError;
use crate::caps::{DEFAULT_PKEY, GID_PREFIX};
use crate::caps::{IB_GID_TABLE_ENTRIES, LinkLayer};
use crate::device::Device;
use crate::wire::icrc::{ICRC_LEN, VCRC_LEN};
use crate::wire::{
    EthernetRepr, GrhRepr, IbPacketRepr, IbTransportRepr, IpRepr, Ipv4Repr, Ipv6Repr,
    LinkNextHeader, LrhRepr, RoceV2Repr,
};
use uhca_fwif::ctx::Ads;
use uhca_fwif::wqe::Av;

/// Writes a packet's payload straight into its frame (the bytes given), from memory.
pub(crate) type PayloadFill<'a> = dyn FnMut(&mut Device, &mut [u8]) -> Result<(), KeyError> + 'a;

/// The most header bytes a [`HeaderTemplate`] keeps: Ethernet with a VLAN tag, IPv6, UDP,
/// BTH and XRCETH (82), or LRH, GRH, BTH and XRCETH (64).
const TEMPLATE_MAX: usize = 96;

/// The headers of a packet the requester sent, kept to build the next packets of the same
/// message that differ from it only in BTH:PSN and payload (its middle packets: the same
/// opcode, length and address headers), as a hardware send engine reuses a QP's header
/// template. The packets built from it are byte for byte what a full emit would give
/// (`mock/tests/header_template.rs`).
#[derive(Clone, Debug)]
pub(crate) struct HeaderTemplate {
    bytes: [u8; TEMPLATE_MAX],
    header_len: usize,
    payload_len: usize,
    frame_len: usize,
    ib: bool,
}

impl HeaderTemplate {
    /// The template of `frame`, a packet on `path` whose payload of `payload_len` bytes
    /// needs no pad and ends where the ICRC (and VCRC) begins; `None` if it does not fit.
    pub(crate) fn of(path: &Path, frame: &[u8], payload_len: usize) -> Option<Self> {
        let ib = matches!(path, Path::Ib { .. });
        let trailer = if ib { ICRC_LEN + VCRC_LEN } else { ICRC_LEN };
        let header_len = frame.len().checked_sub(payload_len + trailer)?;
        if header_len > TEMPLATE_MAX || !payload_len.is_multiple_of(4) {
            return None;
        }
        let mut bytes = [0u8; TEMPLATE_MAX];
        bytes[..header_len].copy_from_slice(&frame[..header_len]);
        Some(HeaderTemplate {
            bytes,
            header_len,
            payload_len,
            frame_len: frame.len(),
            ib,
        })
    }

    /// The payload length of the packets built from this template.
    pub(crate) fn payload_len(&self) -> usize {
        self.payload_len
    }
}

/// The default UDP source port when the path gives none.
pub const DEFAULT_UDP_SPORT: u16 = 0xc000;

/// Where packets of a QP (or a UD work request) go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Path {
    /// RoCEv2.
    Roce {
        smac: [u8; 6],
        dmac: [u8; 6],
        sip: [u8; 16],
        dip: [u8; 16],
        ipv4: bool,
        udp_sport: u16,
        hop_limit: u8,
        tclass: u8,
        flow_label: u32,
    },
    /// Native InfiniBand.
    Ib {
        slid: u16,
        dlid: u16,
        sl: u8,
        grh: Option<GrhRepr>,
    },
}

/// Whether a GID is an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`).
pub(crate) fn is_v4_mapped(g: &[u8; 16]) -> bool {
    g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff
}

/// The IPv4 address of an IPv4-mapped GID.
pub(crate) fn v4_of(g: &[u8; 16]) -> [u8; 4] {
    [g[12], g[13], g[14], g[15]]
}

impl Device {
    /// The GID at `index` of the port's table (IB: index 0 is the link-local GID).
    pub(crate) fn sgid(&self, index: usize) -> Option<[u8; 16]> {
        match self.fw.port_type() {
            LinkLayer::InfiniBand => {
                if index >= IB_GID_TABLE_ENTRIES {
                    return None;
                }
                let mut g = [0u8; 16];
                g[..8].copy_from_slice(&GID_PREFIX.to_be_bytes());
                g[8..].copy_from_slice(&self.config.node_guid().to_be_bytes());
                (index == 0).then_some(g)
            }
            LinkLayer::Ethernet => {
                let e = self.fw.roce_addrs.get(index)?.as_ref()?;
                Some(*e.source_l3_address())
            }
        }
    }

    /// The RoCE entry's source MAC (or the port's MAC).
    fn smac(&self, index: usize) -> [u8; 6] {
        if let Some(Some(e)) = self.fw.roce_addrs.get(index) {
            let h = e.source_mac_47_32().to_be_bytes();
            let l = e.source_mac_31_0().to_be_bytes();
            let m = [h[0], h[1], l[0], l[1], l[2], l[3]];
            if m != [0; 6] {
                return m;
            }
        }
        self.config.mac
    }

    #[allow(clippy::too_many_arguments)]
    fn roce_path(
        &self,
        sgid_index: usize,
        dgid: [u8; 16],
        dmac: [u8; 6],
        udp_sport: u16,
        hop_limit: u8,
        tclass: u8,
        flow_label: u32,
    ) -> Option<Path> {
        let sip = self.sgid(sgid_index)?;
        let ipv4 = self
            .fw
            .roce_addrs
            .get(sgid_index)
            .and_then(|e| e.as_ref())
            .map(|e| e.roce_l3_type() == 0)
            .unwrap_or(false)
            && is_v4_mapped(&sip);
        Some(Path::Roce {
            smac: self.smac(sgid_index),
            dmac,
            sip,
            dip: dgid,
            ipv4,
            udp_sport: if udp_sport == 0 {
                DEFAULT_UDP_SPORT
            } else {
                udp_sport
            },
            hop_limit: if hop_limit == 0 { 64 } else { hop_limit },
            tclass,
            flow_label,
        })
    }

    /// The destination IP address of the RoCE path [`Self::qp_path`] builds from `ads`
    /// (`Path::Roce`'s `dip`), without building the rest of it: `None` exactly when that
    /// path is not a RoCE one (an InfiniBand port, or a source GID index without an entry).
    /// The responder checks every packet's source address against it.
    pub(crate) fn qp_remote_ip(&self, ads: &Ads) -> Option<[u8; 16]> {
        match self.fw.port_type() {
            LinkLayer::Ethernet if ads.fl() => {
                Some(self.sgid(ads.src_addr_index() as usize).unwrap_or([0; 16]))
            }
            LinkLayer::Ethernet => {
                self.sgid(ads.src_addr_index() as usize)?;
                let mut dgid = [0u8; 16];
                dgid.copy_from_slice(ads.rgid_rip());
                Some(dgid)
            }
            LinkLayer::InfiniBand => None,
        }
    }

    /// The path of an RC or UC QP (its primary address path).
    pub(crate) fn qp_path(&self, ads: &Ads) -> Option<Path> {
        match self.fw.port_type() {
            LinkLayer::Ethernet if ads.fl() => {
                // Force loopback: to this port's own MAC, from GID `src_addr_index` if it
                // is programmed, else between unspecified addresses.
                let mac = self.config.mac;
                let idx = ads.src_addr_index() as usize;
                let sip = self.sgid(idx).unwrap_or([0; 16]);
                Some(Path::Roce {
                    smac: mac,
                    dmac: mac,
                    sip,
                    dip: sip,
                    ipv4: is_v4_mapped(&sip),
                    udp_sport: if ads.udp_sport() == 0 {
                        DEFAULT_UDP_SPORT
                    } else {
                        ads.udp_sport()
                    },
                    hop_limit: 64,
                    tclass: ads.tclass(),
                    flow_label: 0,
                })
            }
            LinkLayer::Ethernet => {
                let h = ads.rmac_47_32().to_be_bytes();
                let l = ads.rmac_31_0().to_be_bytes();
                let mut dgid = [0u8; 16];
                dgid.copy_from_slice(ads.rgid_rip());
                self.roce_path(
                    ads.src_addr_index() as usize,
                    dgid,
                    [h[0], h[1], l[0], l[1], l[2], l[3]],
                    ads.udp_sport(),
                    ads.hop_limit(),
                    ads.tclass(),
                    ads.flow_label(),
                )
            }
            LinkLayer::InfiniBand => {
                let grh = if ads.grh() {
                    let mut dgid = [0u8; 16];
                    dgid.copy_from_slice(ads.rgid_rip());
                    let mut g = GrhRepr::new(self.sgid(ads.src_addr_index() as usize)?, dgid);
                    g.traffic_class = ads.tclass();
                    g.flow_label = ads.flow_label();
                    g.hop_limit = ads.hop_limit();
                    Some(g)
                } else {
                    None
                };
                Some(Path::Ib {
                    slid: self.fw.lid | (ads.mlid() as u16 & 0x7f),
                    dlid: ads.rlid(),
                    sl: ads.sl(),
                    grh,
                })
            }
        }
    }

    /// The path of a UD work request (its address vector).
    pub(crate) fn av_path(&self, av: &Av) -> Option<Path> {
        match self.fw.port_type() {
            LinkLayer::Ethernet => self.roce_path(
                av.sgid_index() as usize,
                av.rgid,
                av.rmac,
                av.rlid.get(),
                av.hop_limit,
                av.tclass,
                av.flow_label(),
            ),
            LinkLayer::InfiniBand => {
                let grh = if av.grh_gid_fl.get() & Av::GRH_GID_FL_GRH != 0 {
                    let mut g = GrhRepr::new(self.sgid(av.sgid_index() as usize)?, av.rgid);
                    g.traffic_class = av.tclass;
                    g.flow_label = av.flow_label();
                    g.hop_limit = av.hop_limit;
                    Some(g)
                } else {
                    None
                };
                Some(Path::Ib {
                    slid: self.fw.lid | (av.fl_mlid as u16 & 0x7f),
                    dlid: av.rlid.get(),
                    sl: av.sl(),
                    grh,
                })
            }
        }
    }

    /// Emits one packet on `path` and queues it for the wire.
    pub(crate) fn emit_packet(&mut self, path: &Path, t: &IbTransportRepr<'_>) {
        let _ = self.emit_packet_filled(path, t, None);
    }

    /// Emits one packet on `path` and queues it for the wire; with `fill`, the payload
    /// (`t.payload` is then `&PAYLOAD_IN_PLACE[..n]`, see
    /// [`crate::wire::ib::PAYLOAD_IN_PLACE`]) is written by `fill` straight into the frame
    /// before the headers and CRCs around it (no copy through another buffer). If `fill`
    /// fails, nothing is sent and its error is returned.
    pub(crate) fn emit_packet_filled(
        &mut self,
        path: &Path,
        t: &IbTransportRepr<'_>,
        fill: Option<&mut PayloadFill<'_>>,
    ) -> Result<(), KeyError> {
        if let Some(frame) = self.build_packet(path, t, fill)? {
            self.push_frame(frame);
        }
        Ok(())
    }

    /// Sends a packet built from `template` (the headers of an earlier packet of the same
    /// message and length) with BTH:PSN `psn` and the payload `fill` writes: the headers
    /// copied, the PSN set, the ICRC (and VCRC, or IPv6's UDP checksum) computed again. If
    /// `fill` fails, nothing is sent and its error is returned.
    pub(crate) fn emit_from_template(
        &mut self,
        template: &HeaderTemplate,
        psn: u32,
        fill: &mut PayloadFill<'_>,
    ) -> Result<(), KeyError> {
        let h = template.header_len;
        // Every byte is written below (headers, payload, ICRC and VCRC): no zeroing.
        let mut f = self
            .engine
            .frame_buffer(template.frame_len, template.frame_len);
        f[..h].copy_from_slice(&template.bytes[..h]);
        fill(self, &mut f[h..h + template.payload_len])?;
        let sealed = if template.ib {
            crate::wire::ib::reseal_packet(&mut f, psn)
        } else {
            crate::wire::roce::reseal_frame(&mut f, psn)
        };
        // The template came from a frame this model emitted, so it always re-seals; were it
        // not to, the packet is not sent (the requester's timer sends it again) and the
        // model says why.
        match sealed {
            Ok(()) => self.push_frame(f),
            Err(e) => {
                debug_assert!(false, "a header template that does not re-seal: {e:?}");
                let now = self.engine.now;
                self.note(
                    now,
                    format!("a header template did not re-seal ({e:?}): PSN {psn:#x} not sent"),
                );
            }
        }
        Ok(())
    }

    /// Builds one packet on `path` (see [`Device::emit_packet_filled`]) without queueing
    /// it: `None` if the headers could not be emitted (nothing to send).
    pub(crate) fn build_packet(
        &mut self,
        path: &Path,
        t: &IbTransportRepr<'_>,
        mut fill: Option<&mut PayloadFill<'_>>,
    ) -> Result<Option<Vec<u8>>, KeyError> {
        let mut t = *t;
        t.bth.pkey = DEFAULT_PKEY;
        let frame = match *path {
            Path::Roce {
                smac,
                dmac,
                sip,
                dip,
                ipv4,
                udp_sport,
                hop_limit,
                tclass,
                flow_label,
            } => {
                let ip = if ipv4 {
                    let mut r = Ipv4Repr::new(v4_of(&sip), v4_of(&dip));
                    r.ttl = hop_limit;
                    r.dscp = tclass >> 2;
                    r.ecn = tclass & 3;
                    IpRepr::Ipv4(r)
                } else {
                    let mut r = Ipv6Repr::new(sip, dip);
                    r.hop_limit = hop_limit;
                    r.traffic_class = tclass;
                    r.flow_label = flow_label & 0x000f_ffff;
                    IpRepr::Ipv6(r)
                };
                let r = RoceV2Repr {
                    eth: EthernetRepr {
                        dst: dmac,
                        src: smac,
                        vlan: None,
                    },
                    ip,
                    udp_src_port: udp_sport,
                    transport: t,
                };
                // Payload, pad and ICRC are all written by the emitter.
                let tail = t.payload.len() + usize::from(t.pad_count()) + ICRC_LEN;
                let mut f = self.engine.frame_buffer(r.buffer_len(), tail);
                if let Some(fill) = fill.as_mut() {
                    let at = f.len() - tail;
                    fill(self, &mut f[at..at + t.payload.len()])?;
                }
                if r.emit(&mut f).is_err() {
                    return Ok(None);
                }
                f
            }
            Path::Ib {
                slid,
                dlid,
                sl,
                grh,
            } => {
                let r = IbPacketRepr {
                    lrh: LrhRepr {
                        vl: 0,
                        lver: 0,
                        sl,
                        lnh: LinkNextHeader::IbaLocal,
                        dlid,
                        packet_length: 0,
                        slid,
                    },
                    grh,
                    transport: t,
                };
                // Payload, pad, ICRC and VCRC are all written by the emitter.
                let tail = t.payload.len() + usize::from(t.pad_count()) + ICRC_LEN + VCRC_LEN;
                let mut f = self.engine.frame_buffer(r.buffer_len(), tail);
                if let Some(fill) = fill.as_mut() {
                    let at = f.len() - tail;
                    fill(self, &mut f[at..at + t.payload.len()])?;
                }
                if r.emit(&mut f).is_err() {
                    return Ok(None);
                }
                f
            }
        };
        Ok(Some(frame))
    }
}
