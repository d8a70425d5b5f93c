//! The sockets behind completion channels' `fd` and contexts' `async_fd`, readable exactly
//! while an event is waiting for them, as a kernel's are.
//!
//! Each socket holds one byte while an event it signals is waiting (a completion event of
//! one of the channel's CQs; any asynchronous event of the device) and none otherwise:
//! [`Wakers::sync`] writes or reads that byte, under the device's lock, after every change
//! of the events waiting. A program that `poll(2)`s the descriptor and calls the verb on
//! each wake-up (UCX does, and asserts that the event was there) never sees a wake-up for
//! nothing, and a descriptor stays readable while an event it has not taken waits.
//!
//! The device's interrupts (the mock's MSI-X handler, which runs in the model's thread with
//! the model locked, or the VFIO interrupt thread) only [`Kicker::kick`] the device's
//! [`Dispatcher`], a thread that takes the device's lock, serves the event queue and syncs
//! the sockets. Threads waiting in `ibv_get_cq_event` or `ibv_get_async_event` wait on
//! [`Wakers::wait_change`], never on the sockets, which only `sync` reads.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// What a socket signals.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A completion channel: a completion event of one of its CQs.
    Cq,
    /// A context's `async_fd`: an asynchronous event of the device.
    Async,
}

/// One socket pair: the application's end (`reader`, a duplicate of the descriptor it
/// holds) and the device's.
struct Waker {
    writer: UnixStream,
    reader: UnixStream,
    kind: Kind,
    /// Whether the byte is in the socket.
    signalled: bool,
}

#[derive(Default)]
struct Map {
    wakers: HashMap<u32, Waker>,
    /// Counts the syncs that signalled something, and the dispatcher's passes.
    generation: u64,
}

/// A device's sockets, by id.
#[derive(Default)]
pub(crate) struct Wakers {
    map: Mutex<Map>,
    changed: Condvar,
}

/// How long a drain may wait for the byte it knows is there (only if the program read the
/// socket itself, which no verbs program does).
const DRAIN_TIMEOUT: Duration = Duration::from_millis(10);

impl Wakers {
    fn lock(&self) -> MutexGuard<'_, Map> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new socket pair `id` of `kind`, not signalled; returns the application's end.
    pub(crate) fn add(&self, id: u32, kind: Kind) -> std::io::Result<UnixStream> {
        let (reader, writer) = UnixStream::pair()?;
        writer.set_nonblocking(true)?;
        let dup = reader.try_clone()?;
        dup.set_read_timeout(Some(DRAIN_TIMEOUT))?;
        self.lock().wakers.insert(
            id,
            Waker {
                writer,
                reader: dup,
                kind,
                signalled: false,
            },
        );
        Ok(reader)
    }

    /// Forgets socket `id` (the application's end closes with its channel or context).
    pub(crate) fn remove(&self, id: u32) {
        self.lock().wakers.remove(&id);
    }

    /// The current generation, for [`Wakers::wait_change`].
    pub(crate) fn generation(&self) -> u64 {
        self.lock().generation
    }

    /// Waits until the generation is no longer `seen` (a socket was signalled, or the
    /// dispatcher served the event queue), for `max` at most.
    pub(crate) fn wait_change(&self, seen: u64, max: Duration) {
        let g = self.lock();
        if g.generation == seen {
            let _ = self
                .changed
                .wait_timeout(g, max)
                .unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Brings every socket in line with `pending(kind, id)`: the byte in it while an event
    /// it signals waits, none otherwise. Called with the device locked, after every change
    /// of the events waiting.
    pub(crate) fn sync(&self, pending: impl Fn(Kind, u32) -> bool, bump: bool) {
        let mut m = self.lock();
        let mut woke = bump;
        for (id, w) in m.wakers.iter_mut() {
            let p = pending(w.kind, *id);
            if p && !w.signalled {
                // Non-blocking; the socket is empty, so one byte fits.
                if (&w.writer).write(&[1]).is_ok() {
                    w.signalled = true;
                    woke = true;
                }
            } else if !p && w.signalled {
                let mut b = [0u8; 1];
                let _ = (&w.reader).read(&mut b);
                w.signalled = false;
            }
        }
        if woke {
            m.generation = m.generation.wrapping_add(1);
            self.changed.notify_all();
        }
    }
}

/// What the device's interrupts call: wakes the [`Dispatcher`] without blocking.
#[derive(Clone)]
pub(crate) struct Kicker(Arc<UnixStream>);

impl Kicker {
    /// Wakes the dispatcher (a full socket is readable already: nothing lost).
    pub(crate) fn kick(&self) {
        let _ = (&*self.0).write(&[1]);
    }
}

/// The thread that serves a device's event queue on its interrupts and syncs its sockets.
/// It holds only shared handles: stopping it does not wait for it (it may be waiting for
/// the device's lock, which the closing thread holds); it ends at its next pass.
pub(crate) struct Dispatcher {
    stop: Arc<AtomicBool>,
    kicker: Kicker,
}

/// How often the dispatcher serves the event queue without an interrupt (events of a
/// device whose interrupts are off, and the stop flag).
const DISPATCH_PERIOD: Duration = Duration::from_millis(100);

impl Dispatcher {
    /// Starts the thread `name`, which calls `pass` on every kick and every
    /// [`DISPATCH_PERIOD`] until stopped; `pass` returns false when the device is gone.
    pub(crate) fn start(
        name: String,
        pass: impl Fn(&AtomicBool) -> bool + Send + 'static,
    ) -> std::io::Result<Self> {
        let (reader, writer) = UnixStream::pair()?;
        writer.set_nonblocking(true)?;
        reader.set_read_timeout(Some(DISPATCH_PERIOD))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        std::thread::Builder::new().name(name).spawn(move || {
            let mut buf = [0u8; 64];
            while !stop2.load(Ordering::Acquire) {
                match (&reader).read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e)
                        if matches!(
                            e.kind(),
                            ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                        ) => {}
                    Err(_) => break,
                }
                if !pass(&stop2) {
                    break;
                }
            }
        })?;
        Ok(Self {
            stop,
            kicker: Kicker(Arc::new(writer)),
        })
    }

    /// What the interrupts call.
    pub(crate) fn kicker(&self) -> Kicker {
        self.kicker.clone()
    }
}

impl Drop for Dispatcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.kicker.kick();
    }
}
