//! What the type1 IOMMU reports: page sizes, usable IOVA ranges, DMA mapping budget.

use super::iova::IovaRange;

/// The IOVA ranges assumed when the kernel does not report them (Linux before 5.4 has no
/// `VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE`): 64 KiB up to 39 address bits (what every VT-d
/// and AMD-Vi implementation translates), minus the x86 MSI window 0xfee0_0000..=0xfeef_ffff
/// that interrupt remapping reserves. The x86 values are the conservative choice on other
/// architectures too.
pub const LEGACY_IOVA_RANGES: [IovaRange; 2] = [
    IovaRange::new(0x1_0000, 0xfedf_ffff),
    IovaRange::new(0xfef0_0000, (1 << 39) - 1),
];

/// `VFIO_IOMMU_INFO_PGSIZES`: `iova_pgsizes` is valid.
const INFO_PGSIZES: u32 = vfio_bindings::bindings::vfio::VFIO_IOMMU_INFO_PGSIZES;
/// `VFIO_IOMMU_INFO_CAPS`: `cap_offset` is valid.
const INFO_CAPS: u32 = vfio_bindings::bindings::vfio::VFIO_IOMMU_INFO_CAPS;
/// Capability id of the IOVA range list.
const CAP_IOVA_RANGE: u16 =
    vfio_bindings::bindings::vfio::VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE as u16;
/// Capability id of the remaining DMA mapping count.
const CAP_DMA_AVAIL: u16 = vfio_bindings::bindings::vfio::VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL as u16;
/// `sizeof(struct vfio_iommu_type1_info)`.
const INFO_LEN: usize =
    core::mem::size_of::<vfio_bindings::bindings::vfio::vfio_iommu_type1_info>();
/// `sizeof(struct vfio_info_cap_header)`.
const CAP_HEADER_LEN: usize =
    core::mem::size_of::<vfio_bindings::bindings::vfio::vfio_info_cap_header>();

/// What `VFIO_IOMMU_GET_INFO` said about the container's IOMMU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IommuInfo {
    /// Bitmap of the IOMMU page sizes (bit n set: 2^n-byte pages); 0 if not reported.
    pub page_sizes: u64,
    /// The usable IOVA ranges, sorted.
    pub iova_ranges: Vec<IovaRange>,
    /// Whether `iova_ranges` came from the kernel (else [`LEGACY_IOVA_RANGES`]).
    pub ranges_reported: bool,
    /// How many more `VFIO_IOMMU_MAP_DMA` mappings the kernel allows, when it says.
    pub dma_mappings_available: Option<u32>,
}

impl IommuInfo {
    /// The smallest IOMMU page size (4 KiB when not reported).
    pub fn min_page_size(&self) -> u64 {
        if self.page_sizes == 0 {
            4096
        } else {
            1 << self.page_sizes.trailing_zeros()
        }
    }
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(off..off + 2)?.try_into().ok()?))
}
fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(off..off + 4)?.try_into().ok()?))
}
fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

/// Parses `struct vfio_iommu_type1_info` and its capability chain (host byte order, as the
/// kernel writes it). Offsets in the chain are from the start of the structure; a chain that
/// points outside the buffer, backwards, or loops is an error rather than a hang.
pub fn parse_iommu_info(b: &[u8]) -> Result<IommuInfo, &'static str> {
    if b.len() < INFO_LEN {
        return Err("IOMMU info shorter than struct vfio_iommu_type1_info");
    }
    let flags = u32_at(b, 4).ok_or("truncated")?;
    let page_sizes = if flags & INFO_PGSIZES != 0 {
        u64_at(b, 8).ok_or("truncated")?
    } else {
        0
    };
    let mut ranges = Vec::new();
    let mut reported = false;
    let mut dma_avail = None;
    if flags & INFO_CAPS != 0 {
        let mut off = u32_at(b, 16).ok_or("truncated")? as usize;
        let mut hops = 0;
        while off != 0 {
            hops += 1;
            if hops > 64 {
                return Err("IOMMU capability chain too long");
            }
            if off < INFO_LEN || !off.is_multiple_of(4) || off + CAP_HEADER_LEN > b.len() {
                return Err("IOMMU capability offset out of bounds");
            }
            let id = u16_at(b, off).ok_or("truncated")?;
            let next = u32_at(b, off + 4).ok_or("truncated")? as usize;
            match id {
                CAP_IOVA_RANGE => {
                    let n = u32_at(b, off + 8).ok_or("IOVA range capability truncated")? as usize;
                    let first = off + 16;
                    if n > 4096 || first + n * 16 > b.len() {
                        return Err("IOVA range capability truncated");
                    }
                    for i in 0..n {
                        let start = u64_at(b, first + i * 16).ok_or("truncated")?;
                        let last = u64_at(b, first + i * 16 + 8).ok_or("truncated")?;
                        if last < start {
                            return Err("IOVA range with end before start");
                        }
                        ranges.push(IovaRange::new(start, last));
                    }
                    reported = true;
                }
                CAP_DMA_AVAIL => {
                    dma_avail = Some(u32_at(b, off + 8).ok_or("DMA avail capability truncated")?);
                }
                _ => {}
            }
            if next != 0 && next <= off {
                return Err("IOMMU capability chain goes backwards");
            }
            off = next;
        }
    }
    if !reported {
        ranges = LEGACY_IOVA_RANGES.to_vec();
    }
    ranges.sort();
    Ok(IommuInfo {
        page_sizes,
        iova_ranges: ranges,
        ranges_reported: reported,
        dma_mappings_available: dma_avail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put32(b: &mut Vec<u8>, off: usize, v: u32) {
        if b.len() < off + 4 {
            b.resize(off + 4, 0);
        }
        b[off..off + 4].copy_from_slice(&v.to_ne_bytes());
    }
    fn put64(b: &mut Vec<u8>, off: usize, v: u64) {
        if b.len() < off + 8 {
            b.resize(off + 8, 0);
        }
        b[off..off + 8].copy_from_slice(&v.to_ne_bytes());
    }
    fn put_cap(b: &mut Vec<u8>, off: usize, id: u16, next: u32) {
        put32(b, off + 4, next);
        // id, then version 1, each a host-order u16.
        b[off..off + 2].copy_from_slice(&id.to_ne_bytes());
        b[off + 2..off + 4].copy_from_slice(&1u16.to_ne_bytes());
    }

    /// What a 6.x kernel with VT-d returns: 4K|2M|1G pages, a DMA budget, then two IOVA
    /// ranges around the MSI window.
    fn sample() -> Vec<u8> {
        let mut b = vec![0u8; 24];
        put32(&mut b, 4, INFO_PGSIZES | INFO_CAPS);
        put64(&mut b, 8, (1 << 12) | (1 << 21) | (1 << 30));
        put32(&mut b, 16, 24);
        put_cap(&mut b, 24, CAP_DMA_AVAIL, 40);
        put32(&mut b, 32, 65535);
        put_cap(&mut b, 40, CAP_IOVA_RANGE, 0);
        put32(&mut b, 48, 2);
        put64(&mut b, 56, 0);
        put64(&mut b, 64, 0xfedf_ffff);
        put64(&mut b, 72, 0xfef0_0000);
        put64(&mut b, 80, (1 << 48) - 1);
        b
    }

    #[test]
    fn parses_page_sizes_ranges_and_budget() {
        let i = parse_iommu_info(&sample()).unwrap();
        assert_eq!(i.min_page_size(), 4096);
        assert_eq!(i.page_sizes, (1 << 12) | (1 << 21) | (1 << 30));
        assert!(i.ranges_reported);
        assert_eq!(
            i.iova_ranges,
            [
                IovaRange::new(0, 0xfedf_ffff),
                IovaRange::new(0xfef0_0000, (1 << 48) - 1)
            ]
        );
        assert_eq!(i.dma_mappings_available, Some(65535));
    }

    #[test]
    fn without_capabilities_uses_the_legacy_ranges() {
        let mut b = vec![0u8; 24];
        put32(&mut b, 4, INFO_PGSIZES);
        put64(&mut b, 8, 1 << 16);
        let i = parse_iommu_info(&b).unwrap();
        assert_eq!(i.min_page_size(), 65536);
        assert!(!i.ranges_reported);
        assert_eq!(i.iova_ranges, LEGACY_IOVA_RANGES);
        assert_eq!(i.dma_mappings_available, None);
        // Nothing valid at all: still usable defaults.
        let i = parse_iommu_info(&[0u8; 24]).unwrap();
        assert_eq!(i.min_page_size(), 4096);
    }

    #[test]
    fn malformed_chains_are_errors() {
        assert!(parse_iommu_info(&[0u8; 16]).is_err());
        // Offset beyond the buffer.
        let mut b = sample();
        put32(&mut b, 16, 4096);
        assert!(parse_iommu_info(&b).is_err());
        // A loop.
        let mut b = sample();
        put32(&mut b, 44, 24);
        assert_eq!(
            parse_iommu_info(&b).unwrap_err(),
            "IOMMU capability chain goes backwards"
        );
        // Too many ranges for the buffer.
        let mut b = sample();
        put32(&mut b, 48, 3);
        assert!(parse_iommu_info(&b).is_err());
        // Inverted range.
        let mut b = sample();
        put64(&mut b, 56, 0xffff_0000);
        put64(&mut b, 64, 0x1000);
        assert!(parse_iommu_info(&b).is_err());
    }
}
