//! RC atomics between the pair: fetch-and-add and compare-and-swap (a match and a miss)
//! on an 8-byte word of B's memory, with values whose eight bytes all differ, so a
//! byte-order mistake on either side shows. The driver documents both the responder's
//! word and the original value that lands in the requester's buffer as `u64`s in the
//! host's byte order (atomic mode 1, host endianness, which bring-up selects): B's word is
//! written and read with `to_ne_bytes`/`from_ne_bytes`, and so is A's result buffer.

use uhca_driver::verbs::{SendOp, SendWr};
use uhca_hal::DmaMem;

use crate::{Res, RtsSide, SIZE, check, wait};

const ATOMIC_ID: u64 = 16;

/// The target word: the first 8 bytes of B's RDMA-target area.
const TARGET: usize = 2 * SIZE;
/// Where the original value lands: the first 8 bytes of A's RDMA-target area.
const RESULT: usize = 2 * SIZE;

const INITIAL: u64 = 0x0102_0304_0506_0708;
const ADD: u64 = 0x1020_3040_5060_7080;
const SWAP: u64 = 0xa1b2_c3d4_e5f6_0718;

/// Posts one atomic from A, waits for its completion, and returns what landed in A's
/// result buffer and what B's word holds after it.
fn atomic(a: &mut RtsSide<'_>, b: &mut RtsSide<'_>, op: SendOp) -> Res<(u64, u64)> {
    a.2.mem_mut().write_bytes(RESULT, &[0xee; 8]);
    let s = [a.2.sge(RESULT, 8).map_err(|e| msg!("sge: {e}"))?];
    a.3.post_send(&[SendWr::new(ATOMIC_ID, op, &s)])
        .map_err(|e| msg!("post_send: {e:?}"))?;
    wait(&mut a.1, ATOMIC_ID, "A's atomic")?;
    let (mut got, mut word) = ([0u8; 8], [0u8; 8]);
    a.2.mem().read_bytes(RESULT, &mut got);
    b.2.mem().read_bytes(TARGET, &mut word);
    Ok((u64::from_ne_bytes(got), u64::from_ne_bytes(word)))
}

fn expect(what: &str, got: u64, want: u64) -> Res<()> {
    if got == want {
        Ok(())
    } else {
        Err(msg!("{what} is {got:#018x}, expected {want:#018x}"))
    }
}

fn fetch_add(a: &mut RtsSide<'_>, b: &mut RtsSide<'_>) -> Res<()> {
    b.2.mem_mut().write_bytes(TARGET, &INITIAL.to_ne_bytes());
    let op = SendOp::AtomicFetchAdd {
        remote_addr: b.2.iova() + TARGET as u64,
        rkey: b.2.rkey(),
        add: ADD,
    };
    let (orig, word) = atomic(a, b, op)?;
    expect("the fetched value", orig, INITIAL)?;
    expect("B's word", word, INITIAL.wrapping_add(ADD))
}

fn compare_swap(a: &mut RtsSide<'_>, b: &mut RtsSide<'_>) -> Res<()> {
    let before = INITIAL.wrapping_add(ADD);
    b.2.mem_mut().write_bytes(TARGET, &before.to_ne_bytes());
    let (remote_addr, rkey) = (b.2.iova() + TARGET as u64, b.2.rkey());
    let op = |compare| SendOp::AtomicCmpSwap {
        remote_addr,
        rkey,
        compare,
        swap: SWAP,
    };
    // A match: the word becomes SWAP.
    let (orig, word) = atomic(a, b, op(before))?;
    expect("the original value (match)", orig, before)?;
    expect("B's word after a match", word, SWAP)?;
    // A miss (compare = the old value byte-swapped): the word stays.
    let (orig, word) = atomic(a, b, op(before.swap_bytes()))?;
    expect("the original value (miss)", orig, SWAP)?;
    expect("B's word after a miss", word, SWAP)
}

/// The atomics' checks (two PASS/FAIL lines).
pub fn run(link: &str, a: &mut RtsSide<'_>, b: &mut RtsSide<'_>) {
    check(
        format_args!(
            "atomic ({link}): fetch-and-add {ADD:#x} on {INITIAL:#x}: original fetched, sum stored (host byte order)"
        ),
        fetch_add(a, b),
    );
    check(
        format_args!(
            "atomic ({link}): compare-and-swap: a match stores {SWAP:#x}, a miss leaves it, the original fetched each time"
        ),
        compare_swap(a, b),
    );
}
