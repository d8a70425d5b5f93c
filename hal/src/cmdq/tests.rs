//! Command-queue tests against a fake device running on its own thread.
//!
//! The device thread runs only when the driver waits (the fake clock's delay hands it a
//! tick and waits for it to finish), so its DMA accesses never race with the driver's.
//! It decodes entries and mailbox chains from the fwif layouts by itself, checks tokens
//! and block numbers like the firmware, and answers through a test-provided firmware.

use super::*;
use crate::testing::FakePlatform;
use std::boxed::Box;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::vec::Vec;
use uhca_fwif::PrmLayout;
use uhca_fwif::cmd::{CreateCqIn, CreateCqOut, EnableHcaIn, QueryHcaCapIn, SetHcaCapIn};
use uhca_fwif::init_seg::initial_seg;
use zerocopy::FromBytes;

/// What the fake firmware does with one command.
struct Reply {
    delivery: DeliveryStatus,
    /// Full output (header included), truncated or zero-padded to `outlen`.
    output: Vec<u8>,
    /// Ticks before the completion is written (`None`: never).
    after_ticks: Option<u32>,
}

fn ok(output: Vec<u8>) -> Reply {
    Reply {
        delivery: DeliveryStatus::Ok,
        output,
        after_ticks: Some(0),
    }
}

/// One command as the device saw it.
#[derive(Clone, Debug)]
struct Seen {
    slot: usize,
    token: u8,
    opcode: u16,
    input: Vec<u8>,
    outlen: usize,
}

type Firmware = Box<dyn FnMut(&Seen, &FakePlatform) -> Reply + Send>;

struct Pending {
    seen: Seen,
    reply: Reply,
    out_ptr: u64,
    entry: u64,
}

struct Device {
    fw: Firmware,
    pending: Vec<Pending>,
    log: Arc<Mutex<Vec<Seen>>>,
}

fn read_chain(
    p: &FakePlatform,
    mut ptr: u64,
    len: usize,
    token: u8,
) -> Result<Vec<u8>, DeliveryStatus> {
    let mut v = Vec::new();
    let mut n = 0u32;
    while v.len() < len {
        if ptr == 0 || !ptr.is_multiple_of(MAILBOX_ALIGN as u64) {
            return Err(DeliveryStatus::InPtrAlignErr);
        }
        let mut b = CmdProtBlock::new_zeroed();
        p.dma.device_read(ptr, b.as_mut_bytes());
        if b.token != token {
            return Err(DeliveryStatus::TokErr);
        }
        if b.block_num.get() != n {
            return Err(DeliveryStatus::BadBlkNumErr);
        }
        let take = (len - v.len()).min(CMD_DATA_BLOCK_SIZE);
        v.extend_from_slice(&b.data[..take]);
        ptr = b.next.get();
        n += 1;
    }
    Ok(v)
}

fn write_chain(
    p: &FakePlatform,
    mut ptr: u64,
    data: &[u8],
    token: u8,
) -> Result<(), DeliveryStatus> {
    for (n, chunk) in data.chunks(CMD_DATA_BLOCK_SIZE).enumerate() {
        let mut b = CmdProtBlock::new_zeroed();
        p.dma.device_read(ptr, b.as_mut_bytes());
        if b.token != token || b.block_num.get() != n as u32 {
            return Err(DeliveryStatus::BadBlkNumErr);
        }
        p.dma.device_write(ptr, chunk);
        ptr = b.next.get();
    }
    Ok(())
}

impl Device {
    fn tick(&mut self, p: &FakePlatform) {
        let hi = p.bar.read_be32(0x10) as u64;
        let lo = (p.bar.read_be32(0x14) & 0xffff_f000) as u64;
        let base = hi << 32 | lo;
        let db = p.bar.take_cmd_doorbell();
        for slot in 0..32 {
            if db & (1 << slot) == 0 {
                continue;
            }
            let entry = base + slot as u64 * 64;
            let mut e = CmdLayout::new_zeroed();
            p.dma.device_read(entry, e.as_mut_bytes());
            assert_eq!(e.owner(), CMD_OWNER_HW, "doorbell for a slot software owns");
            assert_eq!(e.r#type, PCI_CMD_XPORT);
            assert_ne!(e.token, 0, "token 0");
            let inlen = e.inlen.get() as usize;
            let mut input: Vec<u8> = e.as_bytes()[IN_OFF..IN_OFF + inlen.min(16)].to_vec();
            let chain = if inlen > 16 {
                read_chain(p, e.in_ptr.get(), inlen - 16, e.token)
            } else {
                Ok(Vec::new())
            };
            let seen = Seen {
                slot,
                token: e.token,
                opcode: (u32::from_be_bytes(input[0..4].try_into().unwrap()) >> 16) as u16,
                input: Vec::new(),
                outlen: e.outlen.get() as usize,
            };
            let reply = match chain {
                Ok(rest) => {
                    input.extend_from_slice(&rest);
                    let seen = Seen {
                        input,
                        ..seen.clone()
                    };
                    self.log.lock().unwrap().push(seen.clone());
                    let r = (self.fw)(&seen, p);
                    self.pending.push(Pending {
                        seen,
                        reply: r,
                        out_ptr: e.out_ptr.get(),
                        entry,
                    });
                    continue;
                }
                Err(d) => Reply {
                    delivery: d,
                    output: Vec::new(),
                    after_ticks: Some(0),
                },
            };
            self.pending.push(Pending {
                seen,
                reply,
                out_ptr: e.out_ptr.get(),
                entry,
            });
        }
        let mut keep = Vec::new();
        for mut pd in self.pending.drain(..) {
            match pd.reply.after_ticks {
                None => keep.push(pd),
                Some(n) if n > 0 => {
                    pd.reply.after_ticks = Some(n - 1);
                    keep.push(pd);
                }
                Some(_) => complete(p, pd),
            }
        }
        self.pending = keep;
    }
}

fn complete(p: &FakePlatform, pd: Pending) {
    let mut out = pd.reply.output;
    out.resize(pd.seen.outlen, 0);
    let mut delivery = pd.reply.delivery;
    let mut e = CmdLayout::new_zeroed();
    p.dma.device_read(pd.entry, e.as_mut_bytes());
    if delivery == DeliveryStatus::Ok {
        let n = out.len().min(16);
        e.as_mut_bytes()[OUT_OFF..OUT_OFF + n].copy_from_slice(&out[..n]);
        if out.len() > 16
            && let Err(d) = write_chain(p, pd.out_ptr, &out[16..], pd.seen.token)
        {
            delivery = d;
        }
    }
    p.dma.device_write(pd.entry, &e.as_bytes()[..63]);
    p.dma
        .device_write(pd.entry + 63, &[delivery.raw() << 1 | CMD_OWNER_SW]);
}

/// Runs `body` with a command queue and a fake device thread answering through `fw`.
fn with_device<R>(
    log_size: u8,
    cfg: CmdQueueConfig,
    fw: impl FnMut(&Seen, &FakePlatform) -> Reply + Send + 'static,
    body: impl FnOnce(&FakePlatform, &mut CmdQueue<&FakePlatform>, &Arc<Mutex<Vec<Seen>>>) -> R,
) -> R {
    let p = FakePlatform::new();
    p.bar.set_field(initial_seg::cmd_interface_rev, 5);
    p.bar.set_field(initial_seg::log_cmdq_size, log_size as u32);
    p.bar.set_field(initial_seg::log_cmdq_stride, 6);
    let log = Arc::new(Mutex::new(Vec::new()));
    let (tick_tx, tick_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    p.on_delay(move |_, _| {
        if tick_tx.send(()).is_ok() {
            let _ = done_rx.recv();
        }
    });
    let mut dev = Device {
        fw: Box::new(fw),
        pending: Vec::new(),
        log: log.clone(),
    };
    std::thread::scope(|s| {
        let pp = &p;
        s.spawn(move || {
            while tick_rx.recv().is_ok() {
                dev.tick(pp);
                if done_tx.send(()).is_err() {
                    break;
                }
            }
        });
        // Ends the device thread (by dropping the tick channel) also when the body panics.
        struct Stop<'a>(&'a FakePlatform);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.clear_on_delay();
            }
        }
        let _stop = Stop(&p);
        let mut q = CmdQueue::new(&p, cfg).unwrap();
        body(&p, &mut q, &log)
    })
}

fn out_header(status: u8, syndrome: u32) -> Vec<u8> {
    let mut v = std::vec![0u8; 16];
    v[0] = status;
    v[4..8].copy_from_slice(&syndrome.to_be_bytes());
    v
}

fn fast() -> CmdQueueConfig {
    CmdQueueConfig {
        timeout_ns: 1_000_000,
        poll_us: 10,
        completion: CompletionMode::Polling,
    }
}

#[test]
fn short_command_round_trip_and_tokens() {
    with_device(
        5,
        fast(),
        |seen, _| {
            let mut o = out_header(0, 0);
            o[8] = seen.token; // echo something from the input side
            ok(o)
        },
        |_, q, log| {
            for i in 0..3u8 {
                let mut inp = EnableHcaIn::new_cmd();
                inp.set_function_id(0x10 + i as u16);
                q.exec(&inp, &[], &mut []).unwrap();
            }
            let log = log.lock().unwrap();
            let tokens: Vec<u8> = log.iter().map(|s| s.token).collect();
            assert_eq!(tokens, [1, 2, 3], "non-zero, incrementing");
            assert!(
                log.iter().all(|s| s.slot == 0),
                "one command at a time uses slot 0"
            );
            assert_eq!(log[2].opcode, CmdOpcode::EnableHca.raw());
            assert_eq!(log[2].input.len(), EnableHcaIn::SIZE);
            let e = EnableHcaIn::read_from_bytes(&log[2].input[..16]).unwrap();
            assert_eq!(e.function_id(), 0x12);
        },
    );
}

#[test]
fn long_input_and_output_use_mailbox_chains() {
    // SET_HCA_CAP (4112 bytes in) then QUERY_HCA_CAP (4112 bytes out): 8 blocks each.
    with_device(
        5,
        fast(),
        |seen, _| {
            let mut o = out_header(0, 0);
            if seen.opcode == CmdOpcode::QueryHcaCap.raw() {
                o.extend((0..seen.outlen - 16).map(|i| (i * 7 % 251) as u8));
            } else {
                // Echo the input after the header so the test can compare.
                o.extend_from_slice(&seen.input[16..]);
            }
            ok(o)
        },
        |_, q, log| {
            let mut set = SetHcaCapIn::new_cmd();
            for (i, b) in set.capability_mut().iter_mut().enumerate() {
                *b = (i % 253) as u8;
            }
            q.exec(&set, &[], &mut []).unwrap();
            let seen = log.lock().unwrap()[0].clone();
            assert_eq!(
                seen.input.as_slice(),
                set.as_bytes(),
                "input intact through 8 blocks"
            );
            let out = q.exec(&QueryHcaCapIn::new_cmd(), &[], &mut []).unwrap();
            assert!(
                out.capability()
                    .iter()
                    .enumerate()
                    .all(|(i, &b)| b == (i * 7 % 251) as u8)
            );
            // MANAGE_PAGES-like flexible arrays: CREATE_CQ with 300 pas entries.
            let pas: Vec<u8> = (0..300u64)
                .flat_map(|i| (0x1000_0000 + i * 4096).to_be_bytes())
                .collect();
            let mut extra_out = [0u8; 100];
            q.exec(&CreateCqIn::new_cmd(), &pas, &mut extra_out)
                .unwrap();
            let seen = log.lock().unwrap()[2].clone();
            assert_eq!(seen.input.len(), CreateCqIn::SIZE + pas.len());
            assert_eq!(&seen.input[CreateCqIn::SIZE..], pas.as_slice());
            assert_eq!(seen.outlen, CreateCqOut::SIZE + 100);
        },
    );
}

#[test]
fn error_status_names_the_opcode() {
    with_device(
        5,
        fast(),
        |_, _| ok(out_header(0x3, 0x1234)),
        |_, q, _| {
            let e = q.exec(&CreateCqIn::new_cmd(), &[], &mut []).unwrap_err();
            assert_eq!(
                e,
                CmdError::Status {
                    opcode: CmdOpcode::CreateCq,
                    status: CmdStatus::BadParamErr,
                    syndrome: 0x1234
                }
            );
            assert_eq!(
                std::format!("{e}"),
                "CREATE_CQ (0x400) failed: BAD_PARAM_ERR (0x3), syndrome 0x1234"
            );
        },
    );
}

#[test]
fn delivery_errors_are_decoded() {
    with_device(
        5,
        fast(),
        |_, _| Reply {
            delivery: DeliveryStatus::InLengthErr,
            output: Vec::new(),
            after_ticks: Some(0),
        },
        |_, q, _| {
            let e = q.exec(&EnableHcaIn::new_cmd(), &[], &mut []).unwrap_err();
            assert_eq!(
                e,
                CmdError::Delivery {
                    opcode: CmdOpcode::EnableHca,
                    status: DeliveryStatus::InLengthErr
                }
            );
            assert_eq!(
                std::format!("{e}"),
                "ENABLE_HCA (0x104) not delivered: IN_LENGTH_ERR (0x7)"
            );
        },
    );
}

#[test]
fn timed_out_slot_is_quarantined_until_the_device_returns_it() {
    let first = Arc::new(AtomicBool::new(true));
    let f2 = first.clone();
    with_device(
        2,
        fast(),
        move |_, _| {
            if f2.swap(false, Ordering::SeqCst) {
                // Completes long after the driver's timeout (1 ms = 100 ticks of 10 µs).
                Reply {
                    delivery: DeliveryStatus::Ok,
                    output: out_header(0, 0),
                    after_ticks: Some(150),
                }
            } else {
                ok(out_header(0, 0))
            }
        },
        |p, q, log| {
            let t0 = p.now_ns();
            let e = q.exec(&EnableHcaIn::new_cmd(), &[], &mut []).unwrap_err();
            assert!(
                matches!(e, CmdError::Timeout { opcode: CmdOpcode::EnableHca, slot: 0, waited_ns } if waited_ns >= 1_000_000)
            );
            assert!(p.now_ns() - t0 <= 1_100_000, "bounded by the timeout");
            assert_eq!(q.quarantined(), 1);
            // The next commands avoid slot 0 while the device still owns it.
            q.exec(&EnableHcaIn::new_cmd(), &[], &mut []).unwrap();
            assert_eq!(log.lock().unwrap().last().unwrap().slot, 1);
            // Let the device finish the old command; slot 0 comes back.
            for _ in 0..60 {
                p.delay_us(10);
            }
            q.exec(&EnableHcaIn::new_cmd(), &[], &mut []).unwrap();
            assert_eq!(log.lock().unwrap().last().unwrap().slot, 0);
            assert_eq!(q.quarantined(), 0);
        },
    );
}

#[test]
fn all_slots_quarantined_means_no_free_slot() {
    // 2 slots: slot 0 for commands, slot 1 for pages.
    with_device(
        1,
        fast(),
        |_, _| Reply {
            delivery: DeliveryStatus::Ok,
            output: Vec::new(),
            after_ticks: None,
        },
        |_, q, _| {
            assert!(matches!(
                q.exec(&EnableHcaIn::new_cmd(), &[], &mut []),
                Err(CmdError::Timeout { .. })
            ));
            assert_eq!(
                q.exec(&EnableHcaIn::new_cmd(), &[], &mut []).unwrap_err(),
                CmdError::NoFreeSlot {
                    opcode: CmdOpcode::EnableHca
                }
            );
        },
    );
}

#[test]
fn page_requests_are_served_on_the_last_slot_while_a_command_waits() {
    // The firmware holds INIT_HCA until it gets pages through MANAGE_PAGES.
    let wants_pages = Arc::new(AtomicBool::new(false));
    let got_pages = Arc::new(AtomicU32::new(0));
    let (w2, g2) = (wants_pages.clone(), got_pages.clone());
    with_device(
        5,
        fast(),
        move |seen, _| {
            if seen.opcode == CmdOpcode::ManagePages.raw() {
                let m = ManagePagesIn::read_from_bytes(&seen.input[..16]).unwrap();
                assert_eq!(seen.input.len(), 16 + 8 * m.input_num_entries() as usize);
                g2.store(m.input_num_entries(), Ordering::SeqCst);
                ok(out_header(0, 0))
            } else {
                w2.store(true, Ordering::SeqCst);
                Reply {
                    delivery: DeliveryStatus::Ok,
                    output: out_header(0, 0),
                    after_ticks: Some(3),
                }
            }
        },
        |_, q, log| {
            let mut served = 0;
            let mut hook = |ctx: &mut WaitContext<'_, &FakePlatform>| {
                if wants_pages.swap(false, Ordering::SeqCst) {
                    let mut mp = ManagePagesIn::new_cmd();
                    mp.set_input_num_entries(70);
                    let pas: Vec<u8> = (0..70u64).flat_map(|i| (i << 12).to_be_bytes()).collect();
                    ctx.manage_pages(&mp, &pas, &mut []).unwrap();
                    served += 1;
                }
            };
            let init = uhca_fwif::cmd::InitHcaIn::new_cmd();
            q.exec_with(&init, &[], &mut [], &mut hook).unwrap();
            assert_eq!(served, 1);
            assert_eq!(got_pages.load(Ordering::SeqCst), 70);
            let log = log.lock().unwrap();
            assert_eq!(log[0].slot, 0);
            assert_eq!(log[1].opcode, CmdOpcode::ManagePages.raw());
            assert_eq!(log[1].slot, 31, "the last slot is kept for page commands");
            assert_ne!(log[0].token, log[1].token);
        },
    );
}

#[test]
fn event_mode_completes_on_reported_vector_only() {
    let cfg = CmdQueueConfig {
        completion: CompletionMode::Events,
        ..fast()
    };
    with_device(
        5,
        cfg,
        |_, _| ok(out_header(0, 0)),
        |p, q, _| {
            // Nobody reports the completion: the command times out even though the owner bit
            // is back.
            assert!(matches!(
                q.exec(&EnableHcaIn::new_cmd(), &[], &mut []),
                Err(CmdError::Timeout { .. })
            ));
            // A hook that reports what a command-completion EQE would carry.
            let mut polls = 0;
            let start = p.now_ns();
            let mut hook = |ctx: &mut WaitContext<'_, &FakePlatform>| {
                polls += 1;
                if polls == 5 {
                    ctx.report_completions(1 << 0 | 1 << 1);
                }
            };
            q.exec_with(&EnableHcaIn::new_cmd(), &[], &mut [], &mut hook)
                .unwrap();
            assert_eq!(polls, 5);
            assert!(p.now_ns() - start >= 40_000, "waited for the report");
        },
    );
}

#[test]
fn queue_setup_programs_the_address_and_checks_the_interface() {
    let p = FakePlatform::new();
    p.bar.set_field(initial_seg::cmd_interface_rev, 3);
    assert_eq!(
        CmdQueue::new(&p, fast()).unwrap_err(),
        CmdInitError::InitSeg(InitSegError::UnsupportedCmdifRev(3))
    );
    p.bar.set_field(initial_seg::cmd_interface_rev, 5);
    p.bar.set_field(initial_seg::log_cmdq_size, 3);
    p.bar.set_field(initial_seg::log_cmdq_stride, 6);
    let q = CmdQueue::new(&p, fast()).unwrap();
    assert_eq!((q.slots(), q.page_slot()), (8, 7));
    let hi = p.bar.read_be32(0x10) as u64;
    let lo = (p.bar.read_be32(0x14) & 0xffff_f000) as u64;
    assert_eq!(hi << 32 | lo, q.page().iova());
    assert_eq!(
        p.bar.read_be32(0x14) & 0xff,
        0x36,
        "read-only sizes untouched"
    );
}

#[test]
fn a_hook_can_abandon_a_command_that_will_never_complete() {
    let cfg = CmdQueueConfig {
        completion: CompletionMode::Events,
        ..fast()
    };
    with_device(
        5,
        cfg,
        |_, _| ok(out_header(0, 0)),
        |p, q, _| {
            // No completion is ever reported; on the third poll the hook learns the device
            // is gone and gives the command up long before the timeout.
            let mut polls = 0;
            let start = p.now_ns();
            let mut hook = |ctx: &mut WaitContext<'_, &FakePlatform>| {
                polls += 1;
                if polls == 3 {
                    ctx.abandon();
                }
            };
            let e = q
                .exec_with(&EnableHcaIn::new_cmd(), &[], &mut [], &mut hook)
                .unwrap_err();
            assert_eq!(
                e,
                CmdError::Abandoned {
                    opcode: CmdOpcode::EnableHca,
                    slot: 0
                }
            );
            assert_eq!(polls, 3);
            assert!(p.now_ns() - start < fast().timeout_ns, "before the timeout");
            assert_eq!(q.quarantined(), 1, "the slot is quarantined");
            assert!(std::format!("{e}").contains("ENABLE_HCA"), "{e}");
        },
    );
}
