//! The serial console: COM1 (I/O port 0x3f8), 115200 8N1, polled. QEMU's `-serial` shows it.

use crate::port::{inb, outb};

const COM1: u16 = 0x3f8;

/// Programs COM1: no interrupts, 115200 baud, 8 data bits, no parity, 1 stop bit, FIFO on.
pub fn init() {
    outb(COM1 + 1, 0x00);
    outb(COM1 + 3, 0x80);
    outb(COM1, 0x01);
    outb(COM1 + 1, 0x00);
    outb(COM1 + 3, 0x03);
    outb(COM1 + 2, 0xc7);
    outb(COM1 + 4, 0x03);
}

fn put(b: u8) {
    // Wait for the transmit holding register to be empty (line status bit 5).
    while inb(COM1 + 5) & 0x20 == 0 {
        core::hint::spin_loop();
    }
    outb(COM1, b);
}

/// `core::fmt` onto COM1 (`\n` becomes `\r\n`).
pub struct Serial;

impl core::fmt::Write for Serial {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                put(b'\r');
            }
            put(b);
        }
        Ok(())
    }
}

/// `print!` onto the serial console.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {{
        let _ = core::fmt::Write::write_fmt(&mut $crate::serial::Serial, format_args!($($arg)*));
    }};
}

/// `println!` onto the serial console.
#[macro_export]
macro_rules! println {
    () => { $crate::print!("\n") };
    ($($arg:tt)*) => {{ $crate::print!($($arg)*); $crate::print!("\n"); }};
}
