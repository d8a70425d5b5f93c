//! Memory regions over memory the caller already has.
//!
//! rdma-core's `ibv_reg_mr` registers any buffer of the process. Here the caller hands the
//! buffer over (a `Box<[u8]>` or `Vec<u8>` with the HAL's `alloc` feature, or a
//! `&'static mut [u8]`), [`Hca::map_host_buf`] maps it for the device through the
//! platform's `Dma::map` (under VFIO: `VFIO_IOMMU_MAP_DMA` into the container's IOVA
//! space, the call rdma-core's VFIO provider makes for the memory it shares with the device,
//! `mlx5_vfio_register_mem` in `providers/mlx5/mlx5_vfio.c:59-78`; on the mock: its IOMMU
//! table) into a HAL
//! [`MappedBuf`], and [`Hca::reg_user_mr`] makes a memory key over it (CREATE_MKEY, MTT
//! access mode, exactly as for [`Hca::reg_mr`]). The region owns the buffer while the key
//! lives: the buffer comes back from [`UserMr::destroy`] after DESTROY_MKEY succeeded, and
//! is unmapped when that [`MappedBuf`] is dropped or [`MappedBuf::unmap`]ped (which gives
//! the `Box` or the slice back). No `unsafe` is needed in the driver or the caller: the
//! HAL owns the memory while the device may reach it.
//!
//! A key addresses the region from the IOVA it is mapped at ([`Hca::reg_user_mr`]), or from
//! an address the caller chooses ([`Hca::reg_user_mr_at`], the `iova` of rdma-core's
//! `ibv_reg_mr_iova2`; `ibv_reg_mr` chooses the buffer's virtual address): the key's
//! `start_addr` is that address while its translation entries still name the pages the
//! buffer is mapped at, so work requests and remote peers use the chosen address and the
//! device reaches the buffer. As on Linux (`ib_umem_find_best_pgsz`), the chosen address
//! must have the buffer's offset within a 4 KiB page; the mapping keeps the buffer's own
//! offset, so an application's virtual address always qualifies.

use uhca_fwif::consts::AccessFlags;
use uhca_hal::Platform;
use uhca_hal::dma::{DmaMem, HostBuf, MappedBuf};

use super::mr::{MttRegion, region_sge};
use super::{Failed, Pd, Sge};
use crate::error::Result;
use crate::hca::Hca;

/// A registered memory region over a caller's buffer (an MTT memory key over a
/// [`MappedBuf`] it owns).
#[derive(Debug)]
pub struct UserMr<P: Platform> {
    reg: MttRegion<P, MappedBuf<P>>,
    /// The address of the first byte as the key names it.
    start: u64,
}

impl<P: Platform> UserMr<P> {
    /// The local key, for scatter/gather entries.
    pub fn lkey(&self) -> u32 {
        self.reg.key
    }

    /// The remote key (the same value), for peers' RDMA and atomic requests.
    pub fn rkey(&self) -> u32 {
        self.reg.key
    }

    /// The memory key index.
    pub fn mkey_index(&self) -> u32 {
        self.reg.mkey_index
    }

    /// The address of the region's first byte as the device and the peers use it: the
    /// IOVA the buffer is mapped at ([`Hca::reg_user_mr`]) or the address chosen at
    /// registration ([`Hca::reg_user_mr_at`]).
    pub fn iova(&self) -> u64 {
        self.start
    }

    /// The region's length in bytes (the whole buffer).
    pub fn len(&self) -> usize {
        self.mem().len()
    }

    /// Whether the region is empty (never: an empty buffer cannot be mapped).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The access rights it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.reg.access
    }

    /// The PD number.
    pub fn pdn(&self) -> u32 {
        self.reg.pdn
    }

    /// The buffer, for reading (volatile accesses by offset: the device may write it).
    pub fn mem(&self) -> &MappedBuf<P> {
        self.reg.mem()
    }

    /// The buffer, for writing (the device may read it at any time).
    pub fn mem_mut(&mut self) -> &mut MappedBuf<P> {
        self.reg.mem_mut()
    }

    /// The scatter/gather entry for `len` bytes at `offset` (see [`Mr::sge`](super::Mr::sge)).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a range outside the region or longer than 4 GiB - 1.
    pub fn sge(&self, offset: usize, len: usize) -> Result<Sge> {
        region_sge(self.iova(), self.len(), self.reg.key, offset, len)
    }

    /// The scatter/gather entry for the whole region.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a region longer than 4 GiB - 1.
    pub fn sge_all(&self) -> Result<Sge> {
        self.sge(0, self.len())
    }

    /// DESTROY_MKEY, then gives the mapped buffer back: drop it (or call
    /// [`MappedBuf::unmap`] to get the `Box` or slice back) to unmap it.
    ///
    /// # Errors
    ///
    /// The region back with the error; its buffer stays registered and mapped.
    pub fn destroy(mut self, hca: &mut Hca<P>) -> core::result::Result<MappedBuf<P>, Failed<Self>> {
        match self.reg.destroy(hca) {
            Ok(m) => Ok(m),
            Err(error) => Err(Failed {
                object: self,
                error,
            }),
        }
    }
}

impl<P: Platform> Hca<P> {
    /// Maps a caller's buffer for this HCA's device (the platform's `Dma::map`), taking
    /// ownership of it until it is unmapped. Register it with [`Hca::reg_user_mr`].
    ///
    /// # Errors
    ///
    /// The buffer back with [`Error::Dma`](crate::Error::Dma): an empty or not
    /// 8-byte-aligned buffer (`InvalidRequest`), or the platform's refusal to map it.
    pub fn map_host_buf(
        &self,
        buf: impl Into<HostBuf>,
    ) -> core::result::Result<MappedBuf<P>, Failed<HostBuf>> {
        MappedBuf::new(self.platform().clone(), buf).map_err(|(object, e)| Failed {
            object,
            error: e.into(),
        })
    }

    /// Registers the whole of a mapped caller buffer (CREATE_MKEY, MTT access mode, as
    /// `ibv_reg_mr`). `lr` is always set; `access` adds local write, remote read, remote
    /// write and remote atomic.
    ///
    /// ```
    /// # use uhca_driver::{Hca, HcaConfig};
    /// # use uhca_fwif::consts::AccessFlags;
    /// # use uhca_hal::DmaMem;
    /// # let dev = uhca_mock::MockHca::new(uhca_mock::MockConfig::default());
    /// # let mut hca = Hca::open_with(dev.platform(), HcaConfig::default())?;
    /// let pd = hca.alloc_pd()?;
    /// let mem = hca.map_host_buf(vec![7u8; 8192])?;
    /// let mr = hca.reg_user_mr(&pd, mem, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    /// assert_eq!(mr.mem().read_u8(100), 7);
    /// let mem = mr.destroy(&mut hca)?;           // the key is gone, the buffer still mapped
    /// let buf = mem.unmap().map_err(uhca_driver::Error::from)?; // unmapped: the memory is ours again
    /// # drop(buf);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// The buffer back with the error: [`Error::InvalidArgument`](crate::Error::InvalidArgument) for bad access flags or a
    /// region larger than the device allows (no command is sent); [`Error::WrongHca`](crate::Error::WrongHca) for a
    /// PD of another HCA; the command's error. The buffer is `None` (leaked, mapped, never
    /// freed) when the device may have made the key anyway: the command timed out or the
    /// device died.
    pub fn reg_user_mr(
        &mut self,
        pd: &Pd<P>,
        mem: MappedBuf<P>,
        access: AccessFlags,
    ) -> core::result::Result<UserMr<P>, Failed<Option<MappedBuf<P>>>> {
        let len = mem.len();
        let start = mem.iova();
        let reg = self.register_mtt(pd, mem, 0, len, None, access)?;
        Ok(UserMr { reg, start })
    }

    /// Registers the whole of a mapped caller buffer as [`Hca::reg_user_mr`] does, but
    /// addressed from `addr`: the region's byte `i` is `addr + i` in work requests (its
    /// [`UserMr::sge`]s) and in peers' RDMA and atomic requests with its rkey, whatever IOVA
    /// the buffer is mapped at. This is `ibv_reg_mr_iova2` (`addr` is its `iova`), and
    /// `ibv_reg_mr` with the buffer's virtual address as `addr`.
    ///
    /// ```
    /// # use uhca_driver::{Hca, HcaConfig};
    /// # use uhca_fwif::consts::AccessFlags;
    /// # use uhca_hal::DmaMem;
    /// # let dev = uhca_mock::MockHca::new(uhca_mock::MockConfig::default());
    /// # let mut hca = Hca::open_with(dev.platform(), HcaConfig::default())?;
    /// let pd = hca.alloc_pd()?;
    /// let mem = hca.map_host_buf(vec![0u8; 8192])?;
    /// let addr = 0x7000_0000_0000 + mem.iova() % 4096; // the same offset in a 4 KiB page
    /// let mr = hca.reg_user_mr_at(&pd, mem, addr, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ)?;
    /// assert_eq!(mr.iova(), addr);
    /// assert_eq!(mr.sge(16, 32)?.addr, addr + 16);
    /// # let mem = mr.destroy(&mut hca)?;
    /// # drop(mem);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Hca::reg_user_mr`]; also [`Error::InvalidArgument`](crate::Error::InvalidArgument)
    /// ([`Arg::MrIova`](crate::error::Arg::MrIova)) when `addr`'s offset within a 4 KiB
    /// page is not the buffer's IOVA's, or `addr + len` wraps (no command is sent, the
    /// buffer comes back).
    pub fn reg_user_mr_at(
        &mut self,
        pd: &Pd<P>,
        mem: MappedBuf<P>,
        addr: u64,
        access: AccessFlags,
    ) -> core::result::Result<UserMr<P>, Failed<Option<MappedBuf<P>>>> {
        let len = mem.len();
        let reg = self.register_mtt(pd, mem, 0, len, Some(addr), access)?;
        Ok(UserMr { reg, start: addr })
    }
}
