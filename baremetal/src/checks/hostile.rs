//! A device that misbehaves under the program, chosen by the kernel command line
//! (`hostile=...`, QEMU's `-append`); `tests/vm/baremetal.sh` sets the server up to match.
//! In each case the expected result is a typed error on the console within the driver's
//! timeouts, then the usual tally and exit: never a hang.
//!
//! * `hostile=hang`: the server never completes CREATE_CQ (`--hang-opcode 0x400`). After
//!   bring-up, `create_cq` must fail with the command timeout naming CREATE_CQ, and the
//!   function must still answer other commands (one quarantined slot is not a dead device).
//! * `hostile=removal`: the program brings function 0 up, prints [`REMOVAL_READY`], and
//!   issues a QUERY_PORT every millisecond; when the host script sees that line it has the
//!   server remove the function (`--removal-file`: every read all ones, writes dropped, as
//!   for a device gone from the bus). The next command must fail with a typed error (a
//!   timeout, or the driver's all-ones detection) within [`REMOVAL_LIMIT_NS`]. Killing the
//!   server instead is no test of the guest: QEMU 11.1's vfio-user client then aborts.

use uhca_driver::{Error, Hca, HcaConfig};
use uhca_fwif::consts::CmdOpcode;
use uhca_hal::cmdq::CmdError;

use crate::platform::{self, BareMetal};
use crate::{Res, check, ms};

/// The line the host script waits for before it kills the server.
pub const REMOVAL_READY: &str = "hostile: ready for surprise removal";
/// How long the program waits for the removal to show.
pub const REMOVAL_LIMIT_NS: u64 = 30_000_000_000;
/// The command timeout the hostile cases run with.
const CMD_TIMEOUT_NS: u64 = 500_000_000;

fn open(p: &BareMetal) -> Res<Hca<&BareMetal>> {
    let cfg = HcaConfig {
        fw_pre_init_timeout_ns: 10_000_000_000,
        cmd_timeout_ns: CMD_TIMEOUT_NS,
        ..HcaConfig::default()
    };
    Hca::open_with(p, cfg).map_err(|e| msg!("open: {e}"))
}

fn hang(p: &BareMetal) {
    let Some(mut hca) = check(format_args!("hostile hang: bring-up"), open(p)) else {
        return;
    };
    let t = platform::now_ns();
    let r = hca.create_cq(32);
    let took = platform::now_ns() - t;
    check(
        format_args!(
            "hostile hang: CREATE_CQ never answered: create_cq fails with the typed command timeout in {} ms (limit {} ms)",
            ms(took),
            ms(CMD_TIMEOUT_NS)
        ),
        match r {
            Err(Error::Command(CmdError::Timeout {
                opcode: CmdOpcode::CreateCq,
                slot,
                waited_ns,
            })) => {
                println!(
                    "  error: {}",
                    Error::Command(CmdError::Timeout {
                        opcode: CmdOpcode::CreateCq,
                        slot,
                        waited_ns
                    })
                );
                if took > 4 * CMD_TIMEOUT_NS {
                    Err(msg!("took {} ms", ms(took)))
                } else {
                    Ok(())
                }
            }
            Err(e) => Err(msg!("a different error: {e}")),
            Ok(_) => Err(msg!(
                "create_cq succeeded on a device that never answers it"
            )),
        },
    );
    check(
        format_args!("hostile hang: the function still answers other commands (QUERY_PORT)"),
        hca.query_port(1)
            .map(|_| ())
            .map_err(|e| msg!("query_port: {e}")),
    );
    // Teardown with a slot still owned by the device: reported, not counted (the firmware
    // may keep pages it was given while the command hangs).
    match hca.close() {
        Ok(()) => println!("  close: ok"),
        Err(e) => println!("  close: {e}"),
    }
}

fn removal(p: &BareMetal) {
    let Some(mut hca) = check(format_args!("hostile removal: bring-up"), open(p)) else {
        return;
    };
    println!("{REMOVAL_READY}");
    let t = platform::now_ns();
    let mut n = 0u64;
    let r = loop {
        match hca.query_port(1) {
            Ok(_) => n += 1,
            Err(e) => break Ok(e),
        }
        if platform::now_ns() - t > REMOVAL_LIMIT_NS {
            break Err(msg!(
                "{n} QUERY_PORTs answered in {} s: the removal never showed",
                REMOVAL_LIMIT_NS / 1_000_000_000
            ));
        }
        uhca_hal::platform::Clock::delay_us(p, 1000);
    };
    let took = platform::now_ns() - t;
    let (bar, _) = p.bar0();
    let fw = uhca_hal::platform::Bar::read32(p, 0);
    check(
        format_args!(
            "hostile removal: the device removed under the driver: a typed error after {n} good commands, {} ms after the ready line, no hang",
            ms(took)
        ),
        r.map(|e| println!("  error: {e}; BAR0 at {bar:#x} now reads {fw:#010x} at offset 0")),
    );
    // The HCA is dropped without a teardown: the device is gone.
    core::mem::forget(hca);
}

/// Runs the case `mode` names on the first function.
pub fn run(mode: &str, p: Option<&BareMetal>) {
    let Some(p) = p else {
        check(
            format_args!("hostile {mode}: a function"),
            Err::<(), _>(msg!("no function found")),
        );
        return;
    };
    match mode {
        "hang" => hang(p),
        "removal" => removal(p),
        _ => {
            check(
                format_args!("hostile {mode}"),
                Err::<(), _>(msg!("unknown case (hang, removal)")),
            );
        }
    }
}
