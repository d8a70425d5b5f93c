//! Memory keys: CREATE_MKEY (PA and MTT access modes), DESTROY_MKEY, QUERY_MKEY.

use super::{CmdResult, Ctx, Firmware, Mkey, bad_param, bad_res, lim, out, pas_list, syndrome};
use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::*;
use uhca_fwif::consts::MkcAccessMode;

/// First memory key index handed out (lower indices are reserved, e.g. the reserved lkey).
pub const FIRST_MKEY_INDEX: u32 = 0x10;
/// An MTT entry's permission bits: readable (bit 0) and writable (bit 1), a page present.
const MTT_PRESENT: u64 = 3;
/// Most translation entries one memory key may have in the model.
pub const MAX_MTT: u64 = 1 << 20;

impl Mkey {
    /// The access mode (`access_mode_4_2 << 2 | access_mode_1_0`).
    pub(crate) fn access_mode(&self) -> MkcAccessMode {
        MkcAccessMode::from_raw((self.mkc.access_mode_4_2() << 2) | self.mkc.access_mode_1_0())
    }
}

impl Firmware<'_> {
    pub(crate) fn cmd_create_mkey(&mut self, c: &Ctx, i: &CreateMkeyIn) -> CmdResult {
        let mkc = *i.memory_key_mkey_entry();
        if i.mkey_umem_valid() {
            return Err(bad_param(syndrome::UNSUPPORTED_FEATURE));
        }
        if !self.objs.pds.contains(&mkc.pd()) {
            return Err(bad_param(syndrome::BAD_PD));
        }
        if mkc.qpn() != 0x00ff_ffff {
            return Err(bad_param(syndrome::BAD_MKEY_QPN));
        }
        if (mkc.rw() || mkc.a()) && !mkc.lw() {
            return Err(bad_param(syndrome::BAD_ACCESS_RIGHTS));
        }
        let mode = MkcAccessMode::from_raw((mkc.access_mode_4_2() << 2) | mkc.access_mode_1_0());
        let mut mtt = Vec::new();
        match mode {
            MkcAccessMode::Pa => {
                if !mkc.length64()
                    && (mkc.len() == 0 || mkc.start_addr().checked_add(mkc.len()).is_none())
                {
                    return Err(bad_param(syndrome::BAD_MKEY_RANGE));
                }
            }
            MkcAccessMode::Mtt => {
                if mkc.length64() || mkc.len() == 0 {
                    return Err(bad_param(syndrome::BAD_MKEY_RANGE));
                }
                let shift = mkc.log_page_size();
                if !(12..=30).contains(&shift) {
                    return Err(bad_param(syndrome::BAD_PAGE_SIZE));
                }
                let ps = 1u64 << shift;
                let Some(span) = (mkc.start_addr() % ps).checked_add(mkc.len()) else {
                    return Err(bad_param(syndrome::BAD_MKEY_RANGE));
                };
                let npages = span.div_ceil(ps);
                let given = i.translations_octword_actual_size() as u64 * 2;
                if npages > MAX_MTT || given < npages {
                    return Err(bad_param(syndrome::BAD_MTT_COUNT));
                }
                mtt = pas_list(c.raw, CreateMkeyIn::SIZE, npages as usize)?;
                // Bits 0 and 1 of an entry are its read/write permissions.
                if mtt.iter().any(|e| (e & !3) % ps != 0) {
                    return Err(bad_param(syndrome::BAD_MTT_ENTRY));
                }
                // `pg_access`: the entries' permission bits count (Linux sets it with the
                // `pg` capability, rdma-core's VFIO provider always, both with every entry
                // readable and writable, "present"). A page not present would fault
                // (on-demand paging), which the model does not have.
                if i.pg_access() && mtt.iter().any(|e| e & MTT_PRESENT != MTT_PRESENT) {
                    return Err(bad_param(syndrome::UNSUPPORTED_FEATURE));
                }
            }
            _ => return Err(bad_param(syndrome::BAD_ACCESS_MODE)),
        }
        if i.pg_access() && mode != MkcAccessMode::Mtt {
            return Err(bad_param(syndrome::UNSUPPORTED_FEATURE));
        }
        self.need_regular_pages()?;
        if self.objs.mkeys.len() >= 1 << self.state.caps.general_cur.log_max_mkey() {
            return Err(lim(syndrome::TABLE_FULL));
        }
        let index = (self.objs.alloc_id() + FIRST_MKEY_INDEX) & 0x00ff_ffff;
        self.objs.mkeys.insert(index, Mkey { mkc, mtt });
        let mut o = CreateMkeyOut::default();
        o.set_mkey_index(index);
        Ok(out(&o))
    }

    pub(crate) fn cmd_destroy_mkey(&mut self, _c: &Ctx, i: &DestroyMkeyIn) -> CmdResult {
        if self.objs.mkeys.remove(&i.mkey_index()).is_none() {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        }
        Ok(out(&DestroyMkeyOut::default()))
    }

    pub(crate) fn cmd_query_mkey(&mut self, _c: &Ctx, i: &QueryMkeyIn) -> CmdResult {
        if i.pg_access() {
            return Err(bad_param(syndrome::UNSUPPORTED_FEATURE));
        }
        let Some(m) = self.objs.mkeys.get(&i.mkey_index()) else {
            return Err(bad_res(syndrome::NO_SUCH_OBJECT));
        };
        let mut o = QueryMkeyOut::default();
        *o.memory_key_mkey_entry_mut() = m.mkc;
        Ok(out(&o))
    }
}
