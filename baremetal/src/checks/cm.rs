//! An RC connection made in band: functions 0 and 1 each create their port's QP1 and a
//! communication manager (`uhca_driver::cm`), and function 0's RC QP is connected to
//! function 1's by REQ, REP and RTU on the fabric. Nothing but where function 1's port is
//! (its LID from the subnet manager, or its RoCEv2 GID and MAC from the address plan
//! 10.0.0.n) is known to function 0 beforehand: QP numbers, PSNs, the path MTU and the
//! read/atomic depths come in the MADs, and function 1 learns function 0's from the REQ.
//! Then a REQ for a service nobody listens on must come back as a REJ (invalid service ID),
//! and the connection carries a SEND ping-pong with its payload checked.
//!
//! Both sides are in this guest on one CPU, so the check steps them in turn
//! (`Cm::progress`); a bare-metal rank with a CPU of its own calls `Cm::establish`.

use uhca_driver::Hca;
use uhca_driver::addr::Endpoint;
use uhca_driver::cm::msg::{RejReason, Rejected};
use uhca_driver::cm::{Cm, CmConfig, CmError, Connection};

use crate::platform::{self, BareMetal};
use crate::qp_up::{self, RcQp};
use crate::{Addr, Res, RtsSide, check, ms, open_side, pingpong, take_down};

/// The service both sides agree on (rdma_cm's TCP port space, port 18515).
const SERVICE: u64 = 0x0000_0000_0106_4853;
/// Round trips on the CM-made connection.
const ROUNDS: u32 = 10;
/// How long setting up a connection may take.
const CONNECT_NS: u64 = 10_000_000_000;

fn endpoint(link: uhca_driver::caps::LinkLayer, a: &Addr) -> Endpoint {
    Endpoint {
        link_layer: link,
        lid: a.lid,
        gid: a.gid,
        mac: a.mac,
        gid_index: 0,
    }
}

/// One side of the connection being made: its HCA, CM, connection and RC QP.
type Party<'a, 'p> = (
    &'a mut Hca<&'p BareMetal>,
    &'a mut Cm<&'p BareMetal>,
    &'a mut Connection,
    &'a mut RcQp<'p>,
);

/// Steps the active side (`a`) and the passive side (`b`) in turn until both are
/// established or one fails; at most [`CONNECT_NS`].
fn drive(a: Party<'_, '_>, b: Party<'_, '_>) -> Result<(), CmError> {
    let deadline = platform::now_ns() + CONNECT_NS;
    let (mut da, mut db) = (false, false);
    loop {
        da = a.1.progress(a.0, a.2, a.3)? || da;
        db = b.1.progress(b.0, b.2, b.3)? || db;
        if da && db {
            return Ok(());
        }
        if platform::now_ns() > deadline {
            return Err(CmError::Timeout {
                waiting_for: uhca_driver::cm::Waiting::Rep,
                tries: a.2.tries(),
            });
        }
    }
}

/// The check, on functions 0 and 1.
pub fn run<'p>(ha: &mut Hca<&'p BareMetal>, hb: &mut Hca<&'p BareMetal>, ab: &Addr) {
    let link = ha.caps().link_layer;
    let name = crate::link_name(link);
    let cfg = CmConfig {
        response_timeout_ns: 500_000_000,
        ..CmConfig::default()
    };
    let set = check(
        format_args!("cm ({name}): QP1 and a communication manager on fn0 and fn1"),
        (|| -> Res<_> {
            let (pda, cqa, mra) = open_side(ha)?;
            let (pdb, cqb, mrb) = open_side(hb)?;
            let cma = Cm::new(ha, &pda, cfg).map_err(|e| msg!("fn0: {e}"))?;
            let cmb = Cm::new(hb, &pdb, cfg).map_err(|e| msg!("fn1: {e}"))?;
            let qa = qp_up::create(ha, &pda, &cqa)?;
            let qb = qp_up::create(hb, &pdb, &cqb)?;
            println!(
                "  QP1 of fn0 is firmware QPN {:#x}, of fn1 {:#x}; RC QPs {:#x} and {:#x} in INIT",
                cma.qp1_qpn(),
                cmb.qp1_qpn(),
                qa.qpn(),
                qb.qpn()
            );
            Ok(((pda, cqa, mra, qa), (pdb, cqb, mrb, qb), cma, cmb))
        })(),
    );
    let Some((mut a, mut b, mut cma, mut cmb)) = set else {
        return;
    };
    let peer = endpoint(link, ab);
    let mut cb = match cmb.listen(SERVICE, b"fn1 accepts") {
        Ok(c) => c,
        Err(e) => {
            check(
                format_args!("cm ({name}): listen"),
                Err::<(), _>(msg!("{e}")),
            );
            return;
        }
    };
    // A REQ for a service nobody listens on: refused, the listener untouched.
    check(
        format_args!(
            "cm ({name}): a REQ for another service is answered with a REJ (invalid service ID)"
        ),
        (|| -> Res<()> {
            let mut wrong = cma
                .connect(ha, &mut a.3, &peer, SERVICE + 1, &[])
                .map_err(|e| msg!("connect: {e}"))?;
            let deadline = platform::now_ns() + CONNECT_NS;
            loop {
                cmb.progress(hb, &mut cb, &mut b.3)
                    .map_err(|e| msg!("fn1: {e}"))?;
                match cma.progress(ha, &mut wrong, &mut a.3) {
                    Err(CmError::Rejected {
                        reason: RejReason::INVALID_SERVICE_ID,
                        message: Rejected::Req,
                    }) => return Ok(()),
                    Err(e) => return Err(msg!("fn0: {e}")),
                    Ok(true) => return Err(msg!("connected to a service nobody listens on")),
                    Ok(false) if platform::now_ns() > deadline => {
                        return Err(msg!("no REJ in {} ms", ms(CONNECT_NS)));
                    }
                    Ok(false) => {}
                }
            }
        })(),
    );
    let t0 = platform::now_ns();
    let connected = check(
        format_args!(
            "cm ({name}): fn0's RC QP connected to fn1's by REQ, REP and RTU on QP1 (nothing exchanged out of band)"
        ),
        (|| -> Res<()> {
            let mut ca = cma
                .connect(ha, &mut a.3, &peer, SERVICE, b"fn0 connects")
                .map_err(|e| msg!("connect: {e}"))?;
            drive(
                (ha, &mut cma, &mut ca, &mut a.3),
                (hb, &mut cmb, &mut cb, &mut b.3),
            )
            .map_err(|e| msg!("{e}"))?;
            if ca.remote_qpn() != b.3.qpn() || cb.remote_qpn() != a.3.qpn() {
                return Err(msg!(
                    "QPNs learnt {:#x}/{:#x}, the QPs are {:#x}/{:#x}",
                    ca.remote_qpn(),
                    cb.remote_qpn(),
                    b.3.qpn(),
                    a.3.qpn()
                ));
            }
            if !cb.private_data().starts_with(b"fn0 connects")
                || !ca.private_data().starts_with(b"fn1 accepts")
            {
                return Err(msg!("the private data did not arrive"));
            }
            println!(
                "  connected in {} ms: fn0 QP {:#x} PSN {:#x} <-> fn1 QP {:#x} PSN {:#x}, MTU {} B; fn0 sent {} MADs, fn1 {}",
                ms(platform::now_ns() - t0),
                a.3.qpn(),
                ca.psns().0,
                b.3.qpn(),
                cb.psns().0,
                ca.path_mtu().bytes().unwrap_or(0),
                cma.stats().sent,
                cmb.stats().sent
            );
            Ok(())
        })(),
    );
    if connected.is_some() {
        check(
            format_args!(
                "cm ({name}): {ROUNDS} SEND round trips on the CM-made connection, payload checked"
            ),
            pingpong(&mut a, &mut b, ROUNDS).map(|_| ()),
        );
    }
    drop((cma, cmb));
    check(
        format_args!("cm ({name}): objects torn down"),
        finish(ha, a).and_then(|()| finish(hb, b)),
    );
}

fn finish<'p>(hca: &mut Hca<&'p BareMetal>, s: RtsSide<'p>) -> Res<()> {
    take_down(hca, s)
}
