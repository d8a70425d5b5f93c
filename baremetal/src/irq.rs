//! Interrupts for the MSI-X check: an IDT (CPU exceptions print a FAIL line and exit instead
//! of triple-faulting; one vector counts MSI-X messages), the 8259s masked, the local APIC
//! enabled, and MSI-X table entry 0 of a function aimed at this CPU. The driver itself only
//! polls; an interrupt-driven user adds this much to the platform.

use core::arch::{asm, global_asm};
use core::sync::atomic::{AtomicU32, Ordering};

use crate::pci::{self, Bdf};
use crate::port::outb;

/// The vector MSI-X entry 0 raises.
pub const MSIX_VECTOR: u8 = 0x40;
const LAPIC: usize = 0xfee0_0000;

/// MSI-X messages received.
pub static MSIX_COUNT: AtomicU32 = AtomicU32::new(0);

global_asm!(
    r#"
    .section .text
    .global irq_msix_stub
irq_msix_stub:
    push rax
    push rcx
    push rdx
    push rsi
    push rdi
    push r8
    push r9
    push r10
    push r11
    cld
    call irq_msix
    pop r11
    pop r10
    pop r9
    pop r8
    pop rdi
    pop rsi
    pop rdx
    pop rcx
    pop rax
    iretq
    .global irq_exception_stub
irq_exception_stub:
    cld
    and rsp, -16
    call irq_exception
    ud2
"#
);

unsafe extern "C" {
    fn irq_msix_stub();
    fn irq_exception_stub();
}

#[unsafe(no_mangle)]
extern "C" fn irq_msix() {
    MSIX_COUNT.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the local APIC's end-of-interrupt register, identity-mapped uncached.
    unsafe { ((LAPIC + 0xb0) as *mut u32).write_volatile(0) };
}

#[unsafe(no_mangle)]
extern "C" fn irq_exception() -> ! {
    panic!("CPU exception (an IDT vector below 32)");
}

#[derive(Clone, Copy)]
#[repr(C)]
struct Gate {
    off_lo: u16,
    sel: u16,
    ist: u8,
    attr: u8,
    off_mid: u16,
    off_hi: u32,
    zero: u32,
}

impl Gate {
    const EMPTY: Gate = Gate {
        off_lo: 0,
        sel: 0,
        ist: 0,
        attr: 0,
        off_mid: 0,
        off_hi: 0,
        zero: 0,
    };
    fn new(handler: unsafe extern "C" fn()) -> Gate {
        let a = handler as usize;
        Gate {
            off_lo: a as u16,
            sel: 0x08,
            ist: 0,
            attr: 0x8e, // present, ring 0, 64-bit interrupt gate
            off_mid: (a >> 16) as u16,
            off_hi: (a >> 32) as u32,
            zero: 0,
        }
    }
}

#[repr(C, align(16))]
struct Idt([Gate; 256]);

static mut IDT: Idt = Idt([Gate::EMPTY; 256]);

/// Loads the IDT, masks both 8259s (SeaBIOS leaves the PIT's timer on) and enables the
/// local APIC. Interrupts stay off until [`wait_msix`]. Returns this CPU's APIC id.
pub fn init() -> u8 {
    // SAFETY: called once, before interrupts are ever enabled: nothing else reads the IDT.
    let idt = unsafe { &mut *core::ptr::addr_of_mut!(IDT) };
    for g in &mut idt.0[..32] {
        *g = Gate::new(irq_exception_stub);
    }
    idt.0[usize::from(MSIX_VECTOR)] = Gate::new(irq_msix_stub);
    #[repr(C, packed)]
    struct Ptr {
        limit: u16,
        base: u64,
    }
    let ptr = Ptr {
        limit: (core::mem::size_of::<Idt>() - 1) as u16,
        base: idt as *const Idt as u64,
    };
    // SAFETY: the IDT is static and its gates point at the stubs above.
    unsafe { asm!("lidt [{}]", in(reg) &ptr, options(readonly, nostack)) };
    outb(0x21, 0xff);
    outb(0xa1, 0xff);
    // SAFETY: the local APIC's registers, identity-mapped uncached: spurious vector 0xff
    // with the APIC software-enabled, then its id.
    unsafe {
        ((LAPIC + 0xf0) as *mut u32).write_volatile(0x1ff);
        (((LAPIC + 0x20) as *const u32).read_volatile() >> 24) as u8
    }
}

/// Finds `bdf`'s MSI-X capability and aims table entry 0 (in BAR0 at `bar`) at `apic_id`
/// with [`MSIX_VECTOR`], unmasked, then enables MSI-X with the function mask clear.
pub fn enable_msix(bdf: Bdf, bar: u64, bar_len: u64, apic_id: u8) -> Result<(), &'static str> {
    let mut cap = pci::read8(bdf, 0x34) & 0xfc;
    while cap != 0 && pci::read8(bdf, cap) != 0x11 {
        cap = pci::read8(bdf, cap + 1) & 0xfc;
    }
    if cap == 0 {
        return Err("no MSI-X capability");
    }
    let table = pci::read32(bdf, cap + 4);
    if table & 7 != 0 {
        return Err("the MSI-X table is not in BAR0");
    }
    let off = u64::from(table & !7);
    if off + 16 > bar_len {
        return Err("the MSI-X table lies beyond BAR0");
    }
    let e = (bar + off) as *mut u32;
    // SAFETY: entry 0 of the table inside BAR0 (checked), identity-mapped uncached; the
    // driver never touches the MSI-X table.
    unsafe {
        e.write_volatile(0xfee0_0000 | u32::from(apic_id) << 12);
        e.add(1).write_volatile(0);
        e.add(2).write_volatile(u32::from(MSIX_VECTOR));
        e.add(3).write_volatile(0);
    }
    let ctl = pci::read16(bdf, cap + 2);
    pci::write16(bdf, cap + 2, (ctl | 0x8000) & !0x4000);
    Ok(())
}

/// Turns MSI-X off again on `bdf`.
pub fn disable_msix(bdf: Bdf) {
    let mut cap = pci::read8(bdf, 0x34) & 0xfc;
    while cap != 0 && pci::read8(bdf, cap) != 0x11 {
        cap = pci::read8(bdf, cap + 1) & 0xfc;
    }
    if cap != 0 {
        let ctl = pci::read16(bdf, cap + 2);
        pci::write16(bdf, cap + 2, ctl & !0x8000);
    }
}

/// Enables interrupts until [`MSIX_COUNT`] passes `seen` or `timeout_ns` pass; returns
/// whether it did.
pub fn wait_msix(seen: u32, timeout_ns: u64) -> bool {
    let end = crate::platform::now_ns() + timeout_ns;
    // SAFETY: the IDT is loaded and every enabled source has a gate (the 8259s are masked).
    unsafe { asm!("sti", options(nomem, nostack)) };
    let ok = loop {
        if MSIX_COUNT.load(Ordering::Relaxed) > seen {
            break true;
        }
        if crate::platform::now_ns() > end {
            break false;
        }
        core::hint::spin_loop();
    };
    // SAFETY: back to polling with interrupts off.
    unsafe { asm!("cli", options(nomem, nostack)) };
    ok
}
