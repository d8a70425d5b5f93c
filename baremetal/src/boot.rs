//! Boot: the PVH entry (QEMU's `-kernel` with a 64-bit ELF), the 32-bit stub that enters long
//! mode, and the identity map. Nothing here is specific to uhca: a bare-metal user with a
//! boot loader of their own keeps only [`platform`](crate::platform).
//!
//! QEMU loads the ELF, finds the `XEN_ELFNOTE_PHYS32_ENTRY` note (type 18) through its
//! `PT_NOTE` program header (for a 64-bit ELF the note's descriptor is an 8-byte address) and
//! jumps there in 32-bit protected mode, paging and interrupts off, with `%ebx` pointing at
//! the `hvm_start_info` structure (memory map, command line). The stub sets a stack, builds
//! page tables that identity-map the first 4 GiB in 2 MiB pages (RAM write-back; 3-4 GiB,
//! where the PCI window, the HPET and the local APIC live, uncached), enables PAE, long mode
//! and paging, loads a GDT with a 64-bit code segment and calls [`crate::bm_main`] with the
//! `hvm_start_info` address.

use core::arch::global_asm;

/// Bytes of the boot stack.
pub const STACK_SIZE: usize = 1 << 20;

global_asm!(
    r#"
    .section .note.pvh, "a"
    .p2align 2
    .long 4                      /* name size: "Xen\0" */
    .long 8                      /* descriptor size: a 64-bit address */
    .long 18                     /* XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .p2align 2
    .quad pvh_start32

    .section .bss
    .p2align 12
boot_pml4:  .skip 4096
boot_pdpt:  .skip 4096
boot_pd:    .skip 4096 * 4      /* four page directories: 4 GiB of 2 MiB pages */
boot_stack: .skip {stack}
boot_stack_top:

    .section .rodata
    .p2align 3
boot_gdt:
    .quad 0                      /* null */
    .quad 0x00af9a000000ffff     /* 0x08: 64-bit code, ring 0 */
    .quad 0x00cf92000000ffff     /* 0x10: data */
boot_gdt_end:
boot_gdt_ptr:
    .word boot_gdt_end - boot_gdt - 1
    .quad boot_gdt

    .section .text.boot, "ax"
    .code32
    .global pvh_start32
pvh_start32:
    cli
    cld
    mov %ebx, %esi               /* hvm_start_info, kept for bm_main */
    mov $boot_stack_top, %esp
    /* Page tables: zeroed, then PML4[0] -> PDPT, PDPT[0..4] -> the four PDs. */
    mov $boot_pml4, %edi
    mov $((4096 * 6) / 4), %ecx
    xor %eax, %eax
    rep stosl
    mov $boot_pdpt, %eax
    or $3, %eax
    mov %eax, boot_pml4
    mov $boot_pd, %eax
    or $3, %eax
    mov $boot_pdpt, %edi
    mov $4, %ecx
1:  mov %eax, (%edi)
    add $4096, %eax
    add $8, %edi
    loop 1b
    /* 2048 entries of 2 MiB: present, writable, large; from 3 GiB on also PCD|PWT. */
    mov $boot_pd, %edi
    xor %ecx, %ecx
2:  mov %ecx, %eax
    shl $21, %eax
    or $0x83, %eax
    cmp $1536, %ecx
    jb 3f
    or $0x18, %eax
3:  mov %eax, (%edi,%ecx,8)
    inc %ecx
    cmp $2048, %ecx
    jb 2b
    /* CR4.PAE, CR3, EFER.LME, then CR0.PG (with PE): long mode, compatibility segment. */
    mov %cr4, %eax
    or $0x20, %eax
    mov %eax, %cr4
    mov $boot_pml4, %eax
    mov %eax, %cr3
    mov $0xc0000080, %ecx
    rdmsr
    or $0x100, %eax
    wrmsr
    mov %cr0, %eax
    or $0x80000001, %eax
    mov %eax, %cr0
    lgdt boot_gdt_ptr
    ljmp $0x08, $4f

    .code64
4:  mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    xor %ax, %ax
    mov %ax, %fs
    mov %ax, %gs
    mov $boot_stack_top, %rsp
    mov %esi, %edi
    call bm_main
5:  cli
    hlt
    jmp 5b
"#,
    stack = const STACK_SIZE,
    options(att_syntax)
);

/// The parts of PVH's `hvm_start_info` the program reads (version 1 and later).
#[repr(C)]
pub struct StartInfo {
    /// `0x336ec578`.
    pub magic: u32,
    /// Structure version.
    pub version: u32,
    /// Flags.
    pub flags: u32,
    /// Modules.
    pub nr_modules: u32,
    /// Module list.
    pub modlist_paddr: u64,
    /// Command line (NUL-terminated).
    pub cmdline_paddr: u64,
    /// ACPI RSDP.
    pub rsdp_paddr: u64,
    /// The memory map (version 1).
    pub memmap_paddr: u64,
    /// Its entries.
    pub memmap_entries: u32,
    /// Reserved.
    pub reserved: u32,
}

/// One entry of the memory map (E820 types: 1 = RAM).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemMapEntry {
    /// Start.
    pub addr: u64,
    /// Length.
    pub size: u64,
    /// Type.
    pub kind: u32,
    /// Reserved.
    pub reserved: u32,
}

/// `hvm_start_info.magic`.
pub const START_INFO_MAGIC: u32 = 0x336e_c578;

unsafe extern "C" {
    static __image_start: u8;
    static __image_end: u8;
}

/// The image's physical range (code, data, bss with the stack and page tables).
pub fn image_range() -> (usize, usize) {
    // Only the symbols' addresses are taken (the linker script defines them).
    (
        core::ptr::addr_of!(__image_start) as usize,
        core::ptr::addr_of!(__image_end) as usize,
    )
}

/// The memory map PVH handed over, or none if `info` is not a valid `hvm_start_info`.
///
/// # Safety
///
/// `info` must be the address the PVH entry received (identity-mapped, not yet reused).
pub unsafe fn memory_map(info: usize) -> Option<&'static [MemMapEntry]> {
    // SAFETY: the caller passes the loader's hvm_start_info; it lies in RAM we never write.
    let si = unsafe { &*(info as *const StartInfo) };
    if si.magic != START_INFO_MAGIC || si.version < 1 || si.memmap_paddr == 0 {
        return None;
    }
    // SAFETY: the loader wrote `memmap_entries` entries at `memmap_paddr`, read-only to us.
    Some(unsafe {
        core::slice::from_raw_parts(
            si.memmap_paddr as *const MemMapEntry,
            si.memmap_entries as usize,
        )
    })
}

/// The kernel command line PVH handed over (QEMU's `-append`), or `""` when there is none
/// or it is not ASCII.
///
/// # Safety
///
/// As for [`memory_map`].
pub unsafe fn cmdline(info: usize) -> &'static str {
    // SAFETY: the caller passes the loader's hvm_start_info; it lies in RAM we never write.
    let si = unsafe { &*(info as *const StartInfo) };
    if si.magic != START_INFO_MAGIC || si.cmdline_paddr == 0 {
        return "";
    }
    let p = si.cmdline_paddr as *const u8;
    // SAFETY: the loader wrote a NUL-terminated string there, read-only to us; the length
    // is bounded at 4 KiB.
    let len = (0..4096)
        .find(|&i| unsafe { p.add(i).read() } == 0)
        .unwrap_or(0);
    // SAFETY: `len` bytes at `p` were just read above.
    let bytes = unsafe { core::slice::from_raw_parts(p, len) };
    core::str::from_utf8(bytes).unwrap_or("")
}
