//! Cooperative fibers on one CPU: how this program runs several ranks of a collective in
//! one guest. A collective call blocks its caller until every rank has done its part, so
//! N ranks on one CPU need N stacks; `uhca-collective` calls its configuration's `idle`
//! hook whenever a wait made no progress, and [`idle`] (that hook here) switches to the
//! next fiber. Nothing of uhca depends on this file: a bare-metal rank with a CPU of its
//! own (the usual case) needs no fibers.
//!
//! A switch saves the callee-saved registers and the stack pointer of one fiber and loads
//! another's (`bm_fiber_switch`); the first switch into a fiber "returns" into
//! `bm_fiber_start`, which calls its task. Single CPU, interrupts not involved: the state
//! is only touched between switches, by the one running context.

use alloc::vec::Vec;
use core::arch::global_asm;
use core::cell::UnsafeCell;

/// The most fibers [`run`] takes.
pub const MAX: usize = 8;
/// Bytes of each fiber's stack.
pub const STACK: usize = 256 << 10;

global_asm!(
    r#"
    .section .text
    .global bm_fiber_switch
    /* bm_fiber_switch(save: *mut usize (rdi), load: usize (rsi)) */
bm_fiber_switch:
    push rbx
    push rbp
    push r12
    push r13
    push r14
    push r15
    mov [rdi], rsp
    mov rsp, rsi
    pop r15
    pop r14
    pop r13
    pop r12
    pop rbp
    pop rbx
    ret

    .global bm_fiber_start
    /* Entered by the first switch into a fiber, the stack 16-byte aligned. */
bm_fiber_start:
    call {main}
    ud2
"#,
    main = sym fiber_main,
);

unsafe extern "C" {
    fn bm_fiber_switch(save: *mut usize, load: usize);
    fn bm_fiber_start();
}

struct State {
    /// Saved stack pointers: fibers 0..n, then the caller of [`run`] at `MAX`.
    sp: [usize; MAX + 1],
    /// The tasks, as raw fat pointers (valid while [`run`] runs).
    tasks: [Option<*mut (dyn FnMut() + 'static)>; MAX],
    done: [bool; MAX],
    n: usize,
    /// The running fiber; `MAX` when none (outside [`run`]).
    current: usize,
}

struct Cell(UnsafeCell<State>);
// SAFETY: one CPU; the state is reached only by the running context, never from an
// interrupt handler.
unsafe impl Sync for Cell {}

static STATE: Cell = Cell(UnsafeCell::new(State {
    sp: [0; MAX + 1],
    tasks: [None; MAX],
    done: [false; MAX],
    n: 0,
    current: MAX,
}));

fn state() -> *mut State {
    STATE.0.get()
}

/// Switches from the running context to fiber `to` (or to [`run`]'s caller, `MAX`).
fn switch(to: usize) {
    let st = state();
    // SAFETY: single CPU, no reference into the state is held across the switch (only raw
    // pointers); `to`'s saved stack pointer is one a switch saved or the initial frame
    // [`run`] built on a live stack.
    unsafe {
        let from = (*st).current;
        (*st).current = to;
        let save = &raw mut (*st).sp[from];
        let load = (*st).sp[to];
        bm_fiber_switch(save, load);
    }
}

/// The next fiber after the running one that has not finished, if any other.
fn next() -> Option<usize> {
    let st = state();
    // SAFETY: as in `switch`: read between switches by the running context.
    unsafe {
        let (cur, n) = ((*st).current, (*st).n);
        (1..=n)
            .map(|k| (cur + k) % n)
            .find(|&i| i != cur && !(*st).done[i])
    }
}

extern "C" fn fiber_main() -> ! {
    let st = state();
    // SAFETY: the task pointer was stored by `run` from a `&mut dyn FnMut()` that outlives
    // the fibers, and only this fiber calls it.
    unsafe {
        let me = (*st).current;
        if let Some(t) = (*st).tasks[me] {
            (*t)();
        }
        (*st).done[me] = true;
    }
    match next() {
        Some(i) => switch(i),
        None => switch(MAX),
    }
    unreachable!("a finished fiber was resumed")
}

/// The `idle` hook: lets the next unfinished fiber run (returns at once outside [`run`] or
/// when the running fiber is the only one left).
pub fn idle(_rounds: u32) {
    // SAFETY: as in `switch`.
    let inside = unsafe { (*state()).current } != MAX;
    if inside && let Some(i) = next() {
        switch(i);
    }
}

/// Runs every task on its own fiber until all have returned, switching at each [`idle`].
///
/// # Panics
///
/// With more than [`MAX`] tasks or when called from inside a fiber.
pub fn run(tasks: &mut [&mut dyn FnMut()]) {
    let n = tasks.len();
    assert!(n <= MAX, "fiber::run: at most {MAX} tasks");
    let st = state();
    // SAFETY: as in `switch`.
    assert!(unsafe { (*st).current } == MAX, "fiber::run inside a fiber");
    if n == 0 {
        return;
    }
    let mut stacks: Vec<Vec<u64>> = (0..n).map(|_| alloc::vec![0u64; STACK / 8]).collect();
    for (i, (t, stack)) in tasks.iter_mut().zip(stacks.iter_mut()).enumerate() {
        // The initial frame: six zeroed callee-saved registers, then bm_fiber_start as the
        // return address, with the stack 16-byte aligned once it is popped.
        let words = stack.len();
        let top = (stack.as_mut_ptr() as usize + words * 8) & !15;
        let frame = top - 8 * 7;
        let base = frame as *mut usize;
        // SAFETY: `frame..top` lies inside this fiber's stack, which lives until `run`
        // returns; the task reference outlives every fiber (they all finish before `run`
        // returns), so erasing its lifetime for the raw pointer is sound.
        unsafe {
            for k in 0..6 {
                base.add(k).write(0);
            }
            base.add(6).write(bm_fiber_start as *const () as usize);
            (*st).sp[i] = frame;
            (*st).done[i] = false;
            let p: *mut (dyn FnMut() + '_) = &mut **t;
            (*st).tasks[i] = Some(core::mem::transmute::<
                *mut (dyn FnMut() + '_),
                *mut (dyn FnMut() + 'static),
            >(p));
        }
    }
    // SAFETY: as in `switch`.
    unsafe {
        (*st).n = n;
        (*st).current = MAX;
    }
    switch(0);
    // Back when every fiber finished.
    // SAFETY: as in `switch`.
    unsafe {
        (*st).n = 0;
        (*st).current = MAX;
        (*st).tasks = [None; MAX];
    }
    drop(stacks);
}
