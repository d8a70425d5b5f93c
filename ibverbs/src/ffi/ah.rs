//! The C ABI of address handles, `ibv_query_gid_ex`, `ibv_query_gid_table` and the multicast verbs (see
//! [`crate::ah`]).

use core::ffi::{c_int, c_void};
use core::ptr;

use uhca_driver::verbs::Ah;

use super::{CPd, Entry, ctx_entry, report, set_errno};
use crate::abi::{IbvAh, IbvAhAttr, IbvContext, IbvGidEntry, IbvGrh, IbvPd, IbvWc};
use crate::ah::{ah_attr_from_grh, gid_type};

/// An AH: the `struct ibv_ah`, then the device and the driver's handle (software only, as
/// mlx5's).
#[repr(C)]
struct CAh {
    ibv: IbvAh,
    entry: &'static Entry,
    ah: Ah,
}

export!("ibv_create_ah" @ "IBVERBS_1.1" => create_ah);
unsafe extern "C" fn create_ah(pd: *mut IbvPd, attr: *mut IbvAhAttr) -> *mut IbvAh {
    if pd.is_null() || attr.is_null() {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    // SAFETY: pd came from alloc_pd; attr is the caller's ibv_ah_attr.
    let (p, a) = unsafe { (&*(pd as *mut CPd), &*attr) };
    match p.entry.dev.create_ah(p.ibv.handle, a) {
        Ok(ah) => Box::into_raw(Box::new(CAh {
            ibv: IbvAh {
                context: p.ibv.context,
                pd,
                handle: 0,
            },
            entry: p.entry,
            ah,
        })) as *mut IbvAh,
        Err(e) => {
            set_errno(report(&e));
            ptr::null_mut()
        }
    }
}

/// The driver's AH behind `ah` for a UD send on a QP of `entry`; `None` for NULL or an AH
/// of another device.
///
/// # Safety
///
/// `ah` is NULL or came from `ibv_create_ah`/`ibv_create_ah_from_wc` and stays alive while
/// the reference is used (during one post).
pub(super) unsafe fn ud_dest<'a>(ah: *mut IbvAh, entry: &Entry) -> Option<&'a Ah> {
    if ah.is_null() {
        return None;
    }
    // SAFETY: the caller's contract; a CAh begins with its ibv_ah.
    let a = unsafe { &*(ah as *const CAh) };
    ptr::eq(a.entry, entry).then_some(&a.ah)
}

export!("ibv_destroy_ah" @ "IBVERBS_1.1" => destroy_ah);
unsafe extern "C" fn destroy_ah(ah: *mut IbvAh) -> c_int {
    if ah.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: ah came from create_ah (or create_ah_from_wc) and is freed once, here.
    let a = unsafe { Box::from_raw(ah as *mut CAh) };
    // Nothing on the device to release (mlx5 AHs are software); UD sends read the encoded
    // path while they are posted.
    let CAh {
        entry: _, ah: _, ..
    } = *a;
    0
}

export!("ibv_create_ah_from_wc" @ "IBVERBS_1.1" => create_ah_from_wc);
/// The path back to the sender of `wc`, from the GRH that preceded its data.
unsafe extern "C" fn create_ah_from_wc(
    pd: *mut IbvPd,
    wc: *mut IbvWc,
    grh: *mut IbvGrh,
    port: u8,
) -> *mut IbvAh {
    if pd.is_null() || wc.is_null() || grh.is_null() {
        set_errno(libc::EINVAL);
        return ptr::null_mut();
    }
    // SAFETY: pd came from alloc_pd; wc and grh are the caller's (the GRH's 40 bytes may
    // sit unaligned at the start of a receive buffer, hence the unaligned read).
    let (p, w, g) = unsafe { (&*(pd as *mut CPd), &*wc, ptr::read_unaligned(grh)) };
    let dev = &p.entry.dev;
    match ah_attr_from_grh(w.wc_flags, w.sl, &g, port, |gid| dev.find_gid(port, gid)) {
        // SAFETY: pd is as above and the attributes live on this stack.
        Ok(mut a) => unsafe { create_ah(pd, &mut a) },
        Err(e) => {
            set_errno(report(&e));
            ptr::null_mut()
        }
    }
}

export!("_ibv_query_gid_ex" @ "IBVERBS_1.11" => query_gid_ex);
/// What `verbs.h`'s `ibv_query_gid_ex` calls: 0 or the errno (`ENODATA` for an empty
/// entry, `EINVAL` for flags or an entry smaller than this one).
unsafe extern "C" fn query_gid_ex(
    ctx: *mut IbvContext,
    port: u32,
    index: u32,
    entry: *mut IbvGidEntry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    // SAFETY: ctx is the caller's open context.
    let Some(e) = (unsafe { ctx_entry(ctx) }) else {
        return libc::EINVAL;
    };
    if entry.is_null() || flags != 0 || entry_size < size_of::<IbvGidEntry>() {
        return libc::EINVAL;
    }
    let Ok(port8) = u8::try_from(port) else {
        return libc::EINVAL;
    };
    match gid_entry(e, port8, index) {
        Ok(Some(g)) => {
            // SAFETY: entry points to at least size_of::<IbvGidEntry>() writable bytes.
            unsafe { entry.write(g) };
            0
        }
        Ok(None) => libc::ENODATA,
        Err(errno) => errno,
    }
}

/// The GID at `index` of `port` as `struct ibv_gid_entry`; `None` for an empty entry.
fn gid_entry(e: &Entry, port: u8, index: u32) -> Result<Option<IbvGidEntry>, c_int> {
    let g = e.dev.query_gid(port, index).map_err(|err| report(&err))?;
    Ok(gid_type(g.kind).map(|t| IbvGidEntry {
        gid: g.gid.0,
        gid_index: index,
        port_num: u32::from(port),
        gid_type: t,
        // No network device stands behind a mock's port.
        ndev_ifindex: 0,
    }))
}

export!("_ibv_query_gid_table" @ "IBVERBS_1.11" => query_gid_table);
/// What `verbs.h`'s `ibv_query_gid_table` calls: the valid GIDs of every port, written
/// `entry_size` bytes apart; the count, or a negative errno (`-EINVAL` for flags, an entry
/// smaller than this one, or fewer than `max_entries` places than there are GIDs).
unsafe extern "C" fn query_gid_table(
    ctx: *mut IbvContext,
    entries: *mut IbvGidEntry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let einval = -(libc::EINVAL as isize);
    // SAFETY: ctx is the caller's open context.
    let Some(e) = (unsafe { ctx_entry(ctx) }) else {
        return einval;
    };
    if (entries.is_null() && max_entries > 0) || flags != 0 || entry_size < size_of::<IbvGidEntry>()
    {
        return einval;
    }
    let mut n = 0usize;
    // Ports are numbered from 1; the first one the device lacks ends the walk.
    for port in 1..=u8::MAX {
        let Ok(attr) = e.dev.query_port(port) else {
            break;
        };
        for index in 0..attr.gid_table_len {
            match gid_entry(e, port, index) {
                Ok(Some(g)) => {
                    if n == max_entries {
                        return einval;
                    }
                    // SAFETY: the caller gave max_entries places of entry_size bytes each
                    // (at least an IbvGidEntry, checked above), n < max_entries; the
                    // stride may leave them unaligned for this type.
                    unsafe {
                        ptr::write_unaligned(
                            (entries as *mut u8).add(n * entry_size) as *mut IbvGidEntry,
                            g,
                        )
                    };
                    n += 1;
                }
                Ok(None) => {}
                Err(errno) => return -(errno as isize),
            }
        }
    }
    n as isize
}

export!("ibv_attach_mcast" @ "IBVERBS_1.1" => attach_mcast);
/// Multicast needs UD QPs, which this library does not create: `EOPNOTSUPP`.
unsafe extern "C" fn attach_mcast(_qp: *mut c_void, _gid: *const c_void, _lid: u16) -> c_int {
    libc::EOPNOTSUPP
}

export!("ibv_detach_mcast" @ "IBVERBS_1.1" => detach_mcast);
/// As `ibv_attach_mcast`: `EOPNOTSUPP`.
unsafe extern "C" fn detach_mcast(_qp: *mut c_void, _gid: *const c_void, _lid: u16) -> c_int {
    libc::EOPNOTSUPP
}
