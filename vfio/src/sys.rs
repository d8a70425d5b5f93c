//! The few system calls the VFIO platform makes itself, beside vfio-ioctls.
//!
//! vfio-ioctls 0.10 opens the container, the group and the device, selects the type1v2
//! IOMMU, maps and unmaps DMA and sets up interrupts. It does not return the IOMMU info
//! (page sizes, the IOVA-range capability), its region reads and writes and its reset swallow
//! errors, and its device flags are private. For those this module issues the ioctls itself,
//! with the request numbers computed the way the kernel's `<linux/vfio.h>` defines them
//! (`_IO(VFIO_TYPE, VFIO_BASE + n)`) and the structures of the vfio-bindings crate.

use std::io;
use std::os::fd::AsRawFd;
use std::os::raw::c_ulong;

use vfio_bindings::bindings::vfio::{
    VFIO_BASE, VFIO_TYPE, vfio_device_info, vfio_iommu_type1_info, vfio_region_info,
};
use vmm_sys_util::ioctl::{_IOC_NONE, ioctl, ioctl_expr, ioctl_with_mut_ptr, ioctl_with_mut_ref};

/// `_IO(VFIO_TYPE, VFIO_BASE + nr)`: every VFIO ioctl is declared without a size; the
/// argument structure carries its own `argsz`.
const fn vfio_io(nr: u32) -> c_ulong {
    ioctl_expr(_IOC_NONE, VFIO_TYPE as u32, VFIO_BASE + nr, 0)
}

/// `VFIO_DEVICE_GET_INFO`: `_IO(VFIO_TYPE, VFIO_BASE + 7)`.
pub(crate) const VFIO_DEVICE_GET_INFO: c_ulong = vfio_io(7);
/// `VFIO_DEVICE_GET_REGION_INFO`: `_IO(VFIO_TYPE, VFIO_BASE + 8)`.
pub(crate) const VFIO_DEVICE_GET_REGION_INFO: c_ulong = vfio_io(8);
/// `VFIO_DEVICE_RESET`: `_IO(VFIO_TYPE, VFIO_BASE + 11)`.
pub(crate) const VFIO_DEVICE_RESET: c_ulong = vfio_io(11);
/// `VFIO_IOMMU_GET_INFO`: `_IO(VFIO_TYPE, VFIO_BASE + 12)`.
pub(crate) const VFIO_IOMMU_GET_INFO: c_ulong = vfio_io(12);

fn argsz<T>() -> u32 {
    core::mem::size_of::<T>() as u32
}

/// `VFIO_DEVICE_GET_INFO` on a device fd.
pub(crate) fn device_info(device: &impl AsRawFd) -> io::Result<vfio_device_info> {
    let mut info = vfio_device_info {
        argsz: argsz::<vfio_device_info>(),
        ..Default::default()
    };
    // SAFETY: `device` is an open VFIO device fd; the kernel writes at most `argsz` bytes
    // into `info`, which is exactly that large and lives across the call.
    let ret = unsafe { ioctl_with_mut_ref(device, VFIO_DEVICE_GET_INFO, &mut info) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

/// `VFIO_DEVICE_GET_REGION_INFO` for region `index` (without its capability chain).
pub(crate) fn region_info(device: &impl AsRawFd, index: u32) -> io::Result<vfio_region_info> {
    let mut info = vfio_region_info {
        argsz: argsz::<vfio_region_info>(),
        index,
        ..Default::default()
    };
    // SAFETY: as for `device_info`: a VFIO device fd and a structure of `argsz` bytes. With
    // `argsz` equal to the bare structure the kernel writes no capability chain after it.
    let ret = unsafe { ioctl_with_mut_ref(device, VFIO_DEVICE_GET_REGION_INFO, &mut info) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

/// `VFIO_DEVICE_RESET`: a function-level (or other device-specific) reset.
pub(crate) fn device_reset(device: &impl AsRawFd) -> io::Result<()> {
    // SAFETY: `device` is an open VFIO device fd; VFIO_DEVICE_RESET takes no argument.
    let ret = unsafe { ioctl(device, VFIO_DEVICE_RESET) };
    if ret < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `VFIO_IOMMU_GET_INFO` on a container with its IOMMU set, returning the raw bytes of
/// `vfio_iommu_type1_info` followed by its capability chain.
pub(crate) fn iommu_info_bytes(container: &impl AsRawFd) -> io::Result<Vec<u8>> {
    let base = argsz::<vfio_iommu_type1_info>();
    let mut size = base;
    // The first call says how large the capability chain is (the kernel raises `argsz`);
    // the second fetches it. Loop in case it grew in between, a bounded number of times.
    for _ in 0..4 {
        // A u64 buffer keeps the 8-byte alignment of the structure and its capabilities.
        let words = (size as usize).div_ceil(8);
        let mut buf = vec![0u64; words];
        let header = vfio_iommu_type1_info {
            argsz: size,
            ..Default::default()
        };
        let ptr = buf.as_mut_ptr().cast::<vfio_iommu_type1_info>();
        // SAFETY: `buf` holds at least `size >= size_of::<vfio_iommu_type1_info>()` bytes,
        // 8-byte aligned, so writing the header at its start is in bounds and aligned.
        unsafe { ptr.write(header) };
        // SAFETY: `container` is an open VFIO container fd with an IOMMU set; the kernel
        // writes at most `argsz` bytes, and `buf` holds `words * 8 >= argsz` bytes.
        let ret = unsafe { ioctl_with_mut_ptr(container, VFIO_IOMMU_GET_INFO, ptr) };
        if ret < 0 {
            return Err(io::Error::last_os_error());
        }
        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let wanted = u32::from_ne_bytes(bytes[0..4].try_into().unwrap_or_default());
        if wanted <= size {
            return Ok(bytes);
        }
        size = wanted;
    }
    Err(io::Error::other(
        "VFIO_IOMMU_GET_INFO: capability chain keeps growing",
    ))
}

/// `pread` of exactly `buf.len()` bytes at `offset`, retrying on EINTR and short reads.
pub(crate) fn pread_exact(fd: &impl AsRawFd, buf: &mut [u8], offset: u64) -> Result<(), i32> {
    let mut done = 0;
    while done < buf.len() {
        let off = offset.checked_add(done as u64).ok_or(libc::EINVAL)?;
        let off = libc::off_t::try_from(off).map_err(|_| libc::EINVAL)?;
        // SAFETY: the pointer and length describe the unfilled tail of `buf`, which is
        // writable for that many bytes; `fd` is an open fd.
        let n = unsafe {
            libc::pread(
                fd.as_raw_fd(),
                buf[done..].as_mut_ptr().cast(),
                buf.len() - done,
                off,
            )
        };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(libc::EIO),
            _ => {
                let e = io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO);
                if e != libc::EINTR {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// `pwrite` of exactly `buf` at `offset`, retrying on EINTR and short writes.
pub(crate) fn pwrite_all(fd: &impl AsRawFd, buf: &[u8], offset: u64) -> Result<(), i32> {
    let mut done = 0;
    while done < buf.len() {
        let off = offset.checked_add(done as u64).ok_or(libc::EINVAL)?;
        let off = libc::off_t::try_from(off).map_err(|_| libc::EINVAL)?;
        // SAFETY: the pointer and length describe the unwritten tail of `buf`, readable for
        // that many bytes; `fd` is an open fd.
        let n = unsafe {
            libc::pwrite(
                fd.as_raw_fd(),
                buf[done..].as_ptr().cast(),
                buf.len() - done,
                off,
            )
        };
        match n {
            n if n > 0 => done += n as usize,
            0 => return Err(libc::EIO),
            _ => {
                let e = io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO);
                if e != libc::EINTR {
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let ret = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(ret, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The soft `RLIMIT_MEMLOCK` in bytes, `None` when unlimited or unknown.
pub(crate) fn memlock_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `r` is a valid, writable rlimit.
    let ret = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) };
    if ret != 0 || r.rlim_cur == libc::RLIM_INFINITY {
        None
    } else {
        Some(r.rlim_cur)
    }
}

/// The CPU page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as usize } else { 4096 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The request numbers match `<linux/vfio.h>` (`';' << 8 | (100 + n)`, no direction, no
    /// size), as `strace` prints them.
    #[test]
    fn ioctl_numbers_match_the_kernel_header() {
        assert_eq!(VFIO_DEVICE_GET_INFO, 0x3b6b);
        assert_eq!(VFIO_DEVICE_GET_REGION_INFO, 0x3b6c);
        assert_eq!(VFIO_DEVICE_RESET, 0x3b6f);
        assert_eq!(VFIO_IOMMU_GET_INFO, 0x3b70);
    }

    #[test]
    fn clock_is_monotonic_and_memlock_readable() {
        let a = monotonic_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let b = monotonic_ns();
        assert!(b >= a + 2_000_000, "{a} {b}");
        let _ = memlock_limit();
        assert!(page_size().is_power_of_two());
    }

    /// The ioctl wrappers report the kernel's errno (a regular file is not a VFIO fd).
    #[test]
    fn ioctls_on_a_non_vfio_fd_fail_with_the_errno() {
        let f = vmm_sys_util::tempfile::TempFile::new().unwrap();
        let file = f.as_file();
        assert_eq!(
            device_info(file).unwrap_err().raw_os_error(),
            Some(libc::ENOTTY)
        );
        assert_eq!(
            region_info(file, 0).unwrap_err().raw_os_error(),
            Some(libc::ENOTTY)
        );
        assert_eq!(
            device_reset(file).unwrap_err().raw_os_error(),
            Some(libc::ENOTTY)
        );
        assert_eq!(
            iommu_info_bytes(file).unwrap_err().raw_os_error(),
            Some(libc::ENOTTY)
        );
    }

    #[test]
    fn pread_pwrite_on_a_file() {
        let f = vmm_sys_util::tempfile::TempFile::new().unwrap();
        let file = f.as_file();
        pwrite_all(file, &[1, 2, 3, 4], 8).unwrap();
        let mut b = [0u8; 4];
        pread_exact(file, &mut b, 8).unwrap();
        assert_eq!(b, [1, 2, 3, 4]);
        // Reading past the end is an error, not a short read passed off as data.
        assert_eq!(pread_exact(file, &mut b, 10), Err(libc::EIO));
    }
}
