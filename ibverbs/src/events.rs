//! Asynchronous events (`ibv_get_async_event`): the driver's [`AsyncEvent`]s of a device,
//! named as verbs names them (`enum ibv_event_type`) and pointed at the object the
//! application holds (by the handle of its QP, SRQ or CQ here; the C layer turns it into
//! the pointer it handed out).

use uhca_driver::AsyncEvent;
use uhca_fwif::consts::{EventType, PortChangeSubtype};

use crate::device::{Device, VResult, VerbsError};

/// `enum ibv_event_type` values.
#[allow(missing_docs)]
pub mod kind {
    pub const CQ_ERR: i32 = 0;
    pub const QP_FATAL: i32 = 1;
    pub const QP_REQ_ERR: i32 = 2;
    pub const QP_ACCESS_ERR: i32 = 3;
    pub const COMM_EST: i32 = 4;
    pub const PATH_MIG_ERR: i32 = 7;
    pub const PORT_ACTIVE: i32 = 9;
    pub const PORT_ERR: i32 = 10;
    pub const LID_CHANGE: i32 = 11;
    pub const PKEY_CHANGE: i32 = 12;
    pub const SRQ_ERR: i32 = 14;
    pub const SRQ_LIMIT_REACHED: i32 = 15;
    pub const QP_LAST_WQE_REACHED: i32 = 16;
    pub const CLIENT_REREGISTER: i32 = 17;
    pub const GID_CHANGE: i32 = 18;
}

/// What an event is about (`ibv_async_event.element`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Element {
    /// A QP, by handle.
    Qp(u32),
    /// An SRQ, by handle.
    Srq(u32),
    /// A CQ, by handle.
    Cq(u32),
    /// A port (from 1).
    Port(u8),
}

/// One event for the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// `event_type` (see [`kind`]).
    pub kind: i32,
    /// `element`.
    pub element: Element,
}

/// What the device's event becomes for verbs, with the object's number (a QPN, SRQ number
/// or CQN, still to be found among the application's objects); `None` for what verbs has
/// no event for (the release of a dropped object that failed).
fn translate(e: AsyncEvent) -> Option<(i32, Target)> {
    use kind::*;
    Some(match e {
        AsyncEvent::PortChange { port, subtype } => (
            match subtype {
                PortChangeSubtype::Active => PORT_ACTIVE,
                PortChangeSubtype::Lid => LID_CHANGE,
                PortChangeSubtype::Pkey => PKEY_CHANGE,
                PortChangeSubtype::Guid => GID_CHANGE,
                PortChangeSubtype::ClientRereg => CLIENT_REREGISTER,
                // Down, initialized (and what this table does not know): not active.
                _ => PORT_ERR,
            },
            Target::Port(port),
        ),
        AsyncEvent::CqError { cqn, .. } => (CQ_ERR, Target::Cq(cqn)),
        AsyncEvent::QpSrq { event, number, .. } => match event {
            EventType::WqCatasError => (QP_FATAL, Target::Qp(number)),
            EventType::WqInvalReqError => (QP_REQ_ERR, Target::Qp(number)),
            EventType::WqAccessError => (QP_ACCESS_ERR, Target::Qp(number)),
            EventType::CommEst => (COMM_EST, Target::Qp(number)),
            EventType::PathMigFailed => (PATH_MIG_ERR, Target::Qp(number)),
            // The QP that received from the SRQ, not the SRQ.
            EventType::SrqLastWqe => (QP_LAST_WQE_REACHED, Target::Qp(number)),
            EventType::SrqCatasError => (SRQ_ERR, Target::Srq(number)),
            EventType::SrqRqLimit => (SRQ_LIMIT_REACHED, Target::Srq(number)),
            _ => return None,
        },
        _ => return None,
    })
}

/// An event's object by the device's number.
#[derive(Clone, Copy, Debug)]
enum Target {
    Qp(u32),
    Srq(u32),
    Cq(u32),
    Port(u8),
}

impl Device {
    /// The next asynchronous event for the application, if one is waiting: serves the
    /// device's event queue, then takes the oldest event whose object the application still
    /// holds (events of objects destroyed since are dropped).
    ///
    /// # Errors
    ///
    /// Not open, or the event queue's failure.
    pub fn take_async_event(&self) -> VResult<Option<Event>> {
        self.with_open(|o| {
            o.hw.hca
                .process_events()
                .map_err(|e| VerbsError::driver("event queue", e))?;
            while let Some(e) = o.hw.hca.next_event() {
                let Some((kind, target)) = translate(e) else {
                    continue;
                };
                let element = match target {
                    Target::Port(p) => Some(Element::Port(p)),
                    Target::Qp(n) => o
                        .qps
                        .iter()
                        .find(|(_, q)| q.qpn() == n)
                        .map(|(h, _)| Element::Qp(*h)),
                    Target::Srq(n) => o
                        .srqs
                        .iter()
                        .find(|(_, (s, _))| s.srqn() == n)
                        .map(|(h, _)| Element::Srq(*h)),
                    Target::Cq(n) => o
                        .cqs
                        .iter()
                        .find(|(_, c)| c.cqn() == n)
                        .map(|(h, _)| Element::Cq(*h)),
                };
                if let Some(element) = element {
                    self.sync_wakes(o);
                    return Ok(Some(Event { kind, element }));
                }
            }
            self.sync_wakes(o);
            Ok(None)
        })?
    }

    /// `ibv_get_async_event`: the next event, waiting while there is none (as
    /// [`Device::wait_cq_event`]); with `nonblocking` (the application set `O_NONBLOCK` on
    /// `async_fd`) EAGAIN instead of waiting, as rdma-core.
    ///
    /// # Errors
    ///
    /// Not open, the event queue's failure, EAGAIN.
    pub fn wait_async_event(&self, nonblocking: bool) -> VResult<Event> {
        self.wait_for(nonblocking, || self.take_async_event())
    }
}
