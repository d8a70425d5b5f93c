//! `println!` and `eprintln!` for the examples, in place of std's (a `macro_rules!` defined
//! here shadows the prelude's in every file that brings it in with `#[macro_use]`).
//!
//! std's macros panic when the write fails, and it fails with `EPIPE` as soon as the reader
//! of a pipe has gone: `cargo run --example devinfo -- --mock | head` ended with "failed
//! printing to stdout: Broken pipe". A command-line program stops talking then, nothing
//! more: these drop what cannot be written and the example runs to its end (a ping-pong
//! still completes its exchange with its peer, and the exit status still says whether it
//! worked). Any write error other than `EPIPE` still panics, as std's do.

/// Writes one line to standard output; a reader that has gone (`EPIPE`) is not an error.
#[allow(unused_macros)]
macro_rules! println {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        match ::std::writeln!(::std::io::stdout().lock(), $($arg)*) {
            Ok(()) => {}
            Err(e) if e.kind() == ::std::io::ErrorKind::BrokenPipe => {}
            Err(e) => panic!("failed printing to stdout: {e}"),
        }
    }};
}

/// Writes one line to standard error; a reader that has gone (`EPIPE`, as in `2>&1 | head`)
/// is not an error.
#[allow(unused_macros)]
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        match ::std::writeln!(::std::io::stderr().lock(), $($arg)*) {
            Ok(()) => {}
            Err(e) if e.kind() == ::std::io::ErrorKind::BrokenPipe => {}
            Err(e) => panic!("failed printing to stderr: {e}"),
        }
    }};
}
