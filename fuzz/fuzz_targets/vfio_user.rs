//! The vfio-user server's per-connection handler (`uhca_vfio_user::serve`) reading an
//! arbitrary byte stream from its client, with no file descriptors: headers of any size
//! and flags, commands known and unknown, payloads short, long or cut off, region
//! accesses anywhere in BAR0 and configuration space (which drive the mock HCA behind it).
//!
//! Properties: nothing panics; the server answers exactly the messages that asked for a
//! reply, in order, each reply carrying its command's id and command number (it stays in
//! step with the stream whatever the messages say); it ends with `Ok` when the stream ends
//! between messages and with `UnexpectedEof` when it ends inside one.
#![no_main]

use std::io::{ErrorKind, Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;

use libfuzzer_sys::fuzz_target;
use uhca_mock::{MockConfig, MockHca};
use uhca_vfio_user::proto::{self, FLAG_TYPE_REPLY, HEADER_SIZE, Header};
use uhca_vfio_user::{Function, serve};

/// The replies the stream asks for, `(id, command)` in order, and whether it ends inside a
/// message.
fn expected(mut s: &[u8]) -> (Vec<(u16, u16)>, bool) {
    let mut out = Vec::new();
    loop {
        if s.is_empty() {
            return (out, false);
        }
        let Some(h) = s.first_chunk::<HEADER_SIZE>() else {
            return (out, true);
        };
        let h = Header::decode(h);
        s = &s[HEADER_SIZE..];
        let size = h.size as usize;
        if size >= HEADER_SIZE {
            let body = size - HEADER_SIZE;
            if s.len() < body {
                return (out, true);
            }
            s = &s[body..];
        }
        // A message with a bad size is refused, with a reply unless it wants none.
        if !h.no_reply() && !h.is_reply() {
            out.push((h.id, h.command));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let f = Function::new(MockHca::new(MockConfig::default()));
    let (mut client, server) = UnixStream::pair().unwrap();
    let server_thread = {
        let f = f.clone();
        std::thread::spawn(move || serve(server, &f, false))
    };
    // Replies may be large (a region read of up to 1 MiB): write from another thread while
    // this one reads.
    let writer = {
        let mut w = client.try_clone().unwrap();
        let data = data.to_vec();
        std::thread::spawn(move || {
            // The server may have stopped reading (the stream ended inside a message it
            // gave up on): a broken pipe is fine.
            let _ = w.write_all(&data);
            let _ = w.shutdown(Shutdown::Write);
        })
    };
    let mut replies = Vec::new();
    client.read_to_end(&mut replies).unwrap();
    writer.join().unwrap();
    let result = server_thread.join().expect("the server thread panicked");

    let (want, cut) = expected(data);
    match &result {
        Ok(stats) => {
            assert!(
                !cut,
                "the stream ended inside a message, yet the server said Ok"
            );
            assert!(stats.messages >= want.len() as u64);
        }
        Err(e) => assert!(
            cut && e.kind() == ErrorKind::UnexpectedEof,
            "the server failed with {e:?} (stream cut inside a message: {cut})"
        ),
    }
    let mut r = &replies[..];
    for (i, &(id, command)) in want.iter().enumerate() {
        let h = r
            .first_chunk::<HEADER_SIZE>()
            .map(Header::decode)
            .unwrap_or_else(|| panic!("reply {i} of {} missing", want.len()));
        assert_eq!((h.id, h.command), (id, command), "reply {i} out of step");
        assert_eq!(h.flags & proto::FLAG_TYPE_MASK, FLAG_TYPE_REPLY);
        let size = h.size as usize;
        assert!(
            size >= HEADER_SIZE && size <= r.len(),
            "reply {i} has a bad size"
        );
        if h.flags & proto::FLAG_ERROR != 0 {
            assert_ne!(h.error, 0, "an error reply without an errno");
        }
        r = &r[size..];
    }
    assert!(r.is_empty(), "replies nobody asked for");
});
