//! A function-level reset while the driver runs, and a bring-up after it. Function 0 is
//! reopened with a short command timeout, an RC pair with function 1 moves data, then
//! function 0 is reset through its PCIe device-control register ("initiate function level
//! reset", bit 15), as a bare-metal user would after a hang. Checked: the driver's next
//! command on the reset function fails with a typed error (the device forgot the command
//! queue), the old HCA closes with all its DMA memory back (its objects are dropped, not
//! destroyed: the device no longer has them), a bring-up after the reset succeeds, and a
//! new RC pair moves data again. Function 1 is untouched and keeps running throughout.

use core::sync::atomic::Ordering;

use uhca_driver::Hca;

use crate::platform::{self, BareMetal};
use crate::{Addr, Res, RtsSide, bring_up, check, ms, open_side, pci, pingpong, qp_up, take_down};

/// The command timeout of function 0 across the reset: every command to the reset device
/// (the old objects' and the old HCA's teardown) waits this long before it fails.
const FLR_CMD_TIMEOUT_NS: u64 = 200_000_000;
/// The most DMA memory the old HCA may keep after its close: the command queue's page and
/// two mailboxes (of one to four 4 KiB pages) for each of its 32 slots.
const KEPT_MAX: usize = 4096 * (1 + 32 * 2 * 4);
/// Round trips before and after the reset.
const ROUNDS: u32 = 10;
/// PCIe: capability id, device control offset in it, "initiate function level reset".
const CAP_PCIE: u8 = 0x10;
const DEVCTL: u8 = 0x08;
const DEVCTL_FLR: u16 = 1 << 15;

type Up<'p> = (Hca<&'p BareMetal>, Addr);

/// Connects a pair and runs `ROUNDS` SEND round trips.
fn pair<'p>(a: &mut Up<'p>, b: &mut Up<'p>) -> Res<(RtsSide<'p>, RtsSide<'p>)> {
    let (pda, cqa, mra) = open_side(&mut a.0)?;
    let (pdb, cqb, mrb) = open_side(&mut b.0)?;
    let (qa, qb) = qp_up::rc_pair(
        qp_up::End {
            hca: &mut a.0,
            pd: &pda,
            cq: &cqa,
            addr: &a.1,
            psn: 0x3000,
        },
        qp_up::End {
            hca: &mut b.0,
            pd: &pdb,
            cq: &cqb,
            addr: &b.1,
            psn: 0x4000,
        },
    )?;
    let mut sa = (pda, cqa, mra, qa);
    let mut sb = (pdb, cqb, mrb, qb);
    pingpong(&mut sa, &mut sb, ROUNDS)?;
    Ok((sa, sb))
}

/// Initiates an FLR of `p`'s function and waits the 100 ms PCIe gives it to complete.
fn flr(p: &BareMetal) -> Res<()> {
    let bdf = p.bdf();
    let mut cap = pci::read8(bdf, 0x34) & 0xfc;
    while cap != 0 && pci::read8(bdf, cap) != CAP_PCIE {
        cap = pci::read8(bdf, cap + 1) & 0xfc;
    }
    if cap == 0 {
        return Err(msg!("no PCI Express capability"));
    }
    if pci::read32(bdf, cap + 4) & (1 << 28) == 0 {
        return Err(msg!("the function does not advertise FLR"));
    }
    let ctl = pci::read16(bdf, cap + DEVCTL);
    pci::write16(bdf, cap + DEVCTL, ctl | DEVCTL_FLR);
    uhca_hal::platform::Clock::delay_us(p, 100_000);
    Ok(())
}

/// The reset checks on function 0 (`slot0`, replaced by the HCA brought up after the
/// reset) with function 1 (`b`) as the peer (seven PASS/FAIL lines).
pub fn run<'p>(link: &str, p0: &'p BareMetal, slot0: &mut Option<Up<'p>>, b: &mut Up<'p>) {
    // Function 0 again, with a short command timeout.
    let Some((hca, _)) = slot0.take() else { return };
    let reopened = check(
        format_args!(
            "flr ({link}): fn0 closed and reopened with a {} ms command timeout",
            ms(FLR_CMD_TIMEOUT_NS)
        ),
        hca.close()
            .map_err(|e| msg!("close: {e}"))
            .and_then(|()| bring_up(p0, 0, FLR_CMD_TIMEOUT_NS)),
    );
    let Some(mut a) = reopened else { return };
    let Some((sa, sb)) = check(
        format_args!(
            "flr ({link}): before the reset, {ROUNDS} SEND round trips fn0-fn1, payload checked"
        ),
        pair(&mut a, b),
    ) else {
        return;
    };
    let reset = check(
        format_args!(
            "flr ({link}): fn0 reset through PCIe device control (initiate FLR) while its QP is connected"
        ),
        flr(p0),
    );
    if reset.is_none() {
        return;
    }
    let t = platform::now_ns();
    check(
        format_args!("flr ({link}): the driver's next command on fn0 fails with a typed error"),
        match a.0.query_port(1) {
            Ok(_) => Err(msg!("QUERY_PORT answered by a function that was reset")),
            Err(e) => {
                println!("  error: {e} ({} ms)", ms(platform::now_ns() - t));
                Ok(())
            }
        },
    );
    // The peer's QP and objects go the usual way. The old HCA of fn0 is closed first, every
    // command to it failing after the timeout, and bus mastering off; its objects are
    // dropped after that (the device lost them): the driver then frees their memory at
    // once. Dropped before the close, they would be destroyed by commands that time out,
    // and the driver keeps the memory of an object whose destruction it could not confirm.
    let t = platform::now_ns();
    let peer_down = take_down(&mut b.0, sb);
    let closed = a.0.close();
    drop(sa);
    let took = platform::now_ns() - t;
    check(
        format_args!(
            "flr ({link}): the reset fn0's old HCA closed in {} ms, its objects' DMA memory back; fn1's objects destroyed",
            ms(took)
        ),
        peer_down.and_then(|()| {
            if let Err(e) = closed {
                println!("  close of the old HCA: {e}");
            }
            // The HAL's command queue never frees the queue page or the mailboxes of a slot
            // whose command timed out (the device might still write them), even with bus
            // mastering off: a bounded amount, counted and excused in the final checks.
            let kept = p0.dma_live();
            if kept > KEPT_MAX {
                return Err(msg!(
                    "{kept} B of fn0's DMA memory still held (more than the {KEPT_MAX} B of a command queue and its timed-out slots' mailboxes)"
                ));
            }
            println!(
                "  the old HCA's command queue keeps {kept} B (its page and the mailboxes of the slots that timed out)"
            );
            crate::KEPT_AFTER_FLR.store(kept, Ordering::Relaxed);
            Ok(())
        }),
    );
    let t = platform::now_ns();
    let Some(mut again) = check(
        format_args!("flr ({link}): fn0 brought up again after the reset"),
        bring_up(p0, 0, crate::CMD_TIMEOUT_NS),
    ) else {
        return;
    };
    println!(
        "  bring-up after the reset in {} ms, {} firmware pages",
        ms(platform::now_ns() - t),
        again.0.firmware_pages()
    );
    check(
        format_args!(
            "flr ({link}): after the reset, {ROUNDS} SEND round trips fn0-fn1 on new QPs, payload checked, torn down"
        ),
        pair(&mut again, b).and_then(|(sa, sb)| {
            take_down(&mut again.0, sa)?;
            take_down(&mut b.0, sb)
        }),
    );
    *slot0 = Some(again);
}
