//! A minimal InfiniBand subnet manager: it assigns LIDs in attach order (from 1), makes the
//! first port's LID the SM LID, and brings every port to ACTIVE.

use crate::MockHca;

/// The subnet manager's state: the next LID to hand out.
#[derive(Clone, Debug)]
pub(crate) struct SubnetManager {
    next_lid: u16,
}

/// The SM LID (the SM lives behind the first port's LID).
pub const SM_LID: u16 = 1;

impl Default for SubnetManager {
    fn default() -> Self {
        SubnetManager { next_lid: 1 }
    }
}

impl SubnetManager {
    /// Configures a newly attached port; returns its LID.
    pub(crate) fn configure(&mut self, hca: &MockHca) -> u16 {
        let lid = self.next_lid;
        self.next_lid = self.next_lid.wrapping_add(1).clamp(1, 0xbfff);
        hca.set_lid(lid, SM_LID);
        hca.set_port_up(true);
        lid
    }
}
