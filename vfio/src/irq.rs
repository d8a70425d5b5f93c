//! Interrupts through eventfds (optional: polling always works).

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::time::Duration;

use vmm_sys_util::eventfd::EventFd;

/// A kind of PCI interrupt, as VFIO indexes them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IrqKind {
    /// Legacy INTx (one vector).
    Intx,
    /// MSI (up to 32 vectors). QEMU's edu device uses it.
    Msi,
    /// MSI-X. ConnectX uses it.
    MsiX,
}

impl IrqKind {
    /// The VFIO IRQ index (`VFIO_PCI_INTX_IRQ_INDEX` and so on).
    pub fn vfio_index(self) -> u32 {
        use vfio_bindings::bindings::vfio::{
            VFIO_PCI_INTX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
        };
        match self {
            IrqKind::Intx => VFIO_PCI_INTX_IRQ_INDEX,
            IrqKind::Msi => VFIO_PCI_MSI_IRQ_INDEX,
            IrqKind::MsiX => VFIO_PCI_MSIX_IRQ_INDEX,
        }
    }
}

impl fmt::Display for IrqKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            IrqKind::Intx => "INTx",
            IrqKind::Msi => "MSI",
            IrqKind::MsiX => "MSI-X",
        })
    }
}

/// The eventfd one interrupt vector signals. Non-blocking; wait on it with
/// [`wait`](Self::wait) or hand its fd to an event loop (epoll, tokio's `AsyncFd`).
///
/// Dropping it closes this process's fd only: the kernel keeps signalling its own reference
/// until the interrupts are disabled.
#[derive(Debug)]
pub struct InterruptFd {
    fd: EventFd,
    kind: IrqKind,
    vector: u32,
}

impl InterruptFd {
    pub(crate) fn new(kind: IrqKind, vector: u32) -> io::Result<Self> {
        Ok(InterruptFd {
            fd: EventFd::new(libc::EFD_NONBLOCK | libc::EFD_CLOEXEC)?,
            kind,
            vector,
        })
    }

    pub(crate) fn eventfd(&self) -> &EventFd {
        &self.fd
    }

    /// The kind of interrupt.
    pub fn kind(&self) -> IrqKind {
        self.kind
    }

    /// The vector number within its kind.
    pub fn vector(&self) -> u32 {
        self.vector
    }

    /// Takes the count of interrupts signalled since the last take, without waiting:
    /// `Ok(0)` when none.
    pub fn take(&self) -> io::Result<u64> {
        match self.fd.read() {
            Ok(n) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Waits up to `timeout` for an interrupt; returns how many arrived (0 on timeout).
    pub fn wait(&self, timeout: Duration) -> io::Result<u64> {
        let n = self.take()?;
        if n > 0 {
            return Ok(n);
        }
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
        loop {
            // SAFETY: `pfd` is one valid pollfd and the count passed is 1.
            let r = unsafe { libc::poll(&mut pfd, 1, ms) };
            if r >= 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        self.take()
    }
}

impl AsRawFd for InterruptFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for InterruptFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the fd is open for as long as `self` (the EventFd owns it), and the
        // returned BorrowedFd cannot outlive `self`.
        unsafe { BorrowedFd::borrow_raw(self.fd.as_raw_fd()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_take_and_timeout() {
        let i = InterruptFd::new(IrqKind::MsiX, 3).unwrap();
        assert_eq!((i.kind(), i.vector()), (IrqKind::MsiX, 3));
        assert_eq!(i.take().unwrap(), 0);
        let t = std::time::Instant::now();
        assert_eq!(i.wait(Duration::from_millis(20)).unwrap(), 0);
        assert!(t.elapsed() >= Duration::from_millis(19));
        i.eventfd().write(2).unwrap();
        assert_eq!(i.wait(Duration::from_secs(5)).unwrap(), 2);
        assert_eq!(i.take().unwrap(), 0);
        assert_eq!(IrqKind::MsiX.vfio_index(), 2);
        assert_eq!(IrqKind::Msi.to_string(), "MSI");
    }
}
