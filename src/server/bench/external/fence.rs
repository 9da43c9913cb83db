//! Section 3: what the fence costs a start. One container at a time, the legs taken in turn (so a
//! busy spell of the machine falls on all of them alike): dockerd plain, each element of the fence
//! alone on top of plain, the whole fence, each of gpuq's own looks on top of the whole fence, and
//! gpuq itself from submit to running, with where its time goes (see `phases`).

use super::floor::{self, Checks, Make, Sample, Shape};
use super::{phases, wait_for, wait_removed, Ctx};
use crate::model::JobNetwork;
use crate::server::bench::percentile;
use crate::server::runtime::fence::FencePart::{self, *};
use anyhow::{bail, Result};
use serde_json::json;
use std::io::Write;
use std::time::Duration;
use uuid::Uuid;

/// One row of the table.
struct Leg {
    name: &'static str,
    kind: Kind,
    /// The row its difference is taken from.
    base: usize,
}

enum Kind {
    Floor {
        make: Make,
        checks: Checks,
        bind: bool,
        argv: &'static [&'static str],
    },
    Gpuq,
}

/// Rows of [`legs`] the summary names.
pub(super) const PLAIN: usize = 0;
pub(super) const WHOLE: usize = 8;

const TRUE: &[&str] = &["true"];
const PARTS_ALL: &[FencePart] = &FencePart::ALL;
const NO_CHECKS: Checks = Checks {
    image: false,
    verify: false,
    mounts: false,
};

fn floor_leg(name: &'static str, make: Make, base: usize) -> Leg {
    Leg {
        name,
        kind: Kind::Floor {
            make,
            checks: NO_CHECKS,
            bind: false,
            argv: TRUE,
        },
        base,
    }
}

/// The rows, on the server's policy network `net` wherever the fence's network is used.
fn legs(net: JobNetwork) -> Vec<Leg> {
    let parts = |p: &'static [FencePart]| Make::Parts(p, net);
    let checked = |name, checks, bind, argv| Leg {
        name,
        kind: Kind::Floor {
            make: parts(PARTS_ALL),
            checks,
            bind,
            argv,
        },
        base: WHOLE,
    };
    let mut bind = floor_leg("  + one read-only bind", parts(&[Binds]), PLAIN);
    if let Kind::Floor { bind: b, .. } = &mut bind.kind {
        *b = true;
    }
    vec![
        floor_leg(
            "dockerd plain (default bridge, image's user)",
            parts(&[]),
            PLAIN,
        ),
        floor_leg(
            "  + network none",
            Make::Parts(&[Network], JobNetwork::None),
            PLAIN,
        ),
        floor_leg(
            "  + job network (gpuq-jobs, no traffic between jobs)",
            Make::Parts(&[Network], JobNetwork::Isolated),
            PLAIN,
        ),
        floor_leg(
            "  + read-only root, tmpfs /tmp",
            parts(&[ReadOnlyRoot]),
            PLAIN,
        ),
        floor_leg("  + job uid (not root)", parts(&[User]), PLAIN),
        floor_leg("  + the card's device node", parts(&[Devices]), PLAIN),
        floor_leg(
            "  + no caps, no-new-privileges, limits",
            parts(&[Limits]),
            PLAIN,
        ),
        bind,
        floor_leg("dockerd, the whole fence", parts(PARTS_ALL), PLAIN),
        checked(
            "  + image inspect (its VOLUMEs)",
            Checks {
                image: true,
                ..NO_CHECKS
            },
            false,
            TRUE,
        ),
        checked(
            "  + verify (inspect, compare)",
            Checks {
                verify: true,
                ..NO_CHECKS
            },
            false,
            TRUE,
        ),
        checked(
            "  + a bind and the mount check (`sleep 1`)",
            Checks {
                mounts: true,
                ..NO_CHECKS
            },
            true,
            &["sleep", "1"],
        ),
        floor_leg(
            "gpuq's Docker::create (Fenced), then start",
            Make::GpuqCreate,
            WHOLE,
        ),
        Leg {
            name: "gpuq: submit → running",
            kind: Kind::Gpuq,
            base: WHOLE,
        },
    ]
}

/// The sorted start latencies of the rows the summary names.
pub(super) struct Latency {
    pub plain: Vec<Duration>,
    pub whole: Vec<Duration>,
    pub gpuq: Vec<Duration>,
}

pub(super) async fn section(ctx: &Ctx, shape: &Shape, out: &mut impl Write) -> Result<Latency> {
    let n = ctx.opts.latency_samples;
    let legs = legs(shape.policy.network);
    writeln!(
        out,
        "== Start latency: {n} containers per row, one at a time, rows taken in turn ({}) ==",
        shape.image
    )?;
    writeln!(
        out,
        "  dockerd rows: create → start answered (with the checks named); gpuq: submit → its \
         `started` event"
    )?;
    let watch = phases::Watch::start(&ctx.docker);
    let mut samples: Vec<Vec<Sample>> = legs.iter().map(|_| Vec::with_capacity(n)).collect();
    let mut jobs = Vec::with_capacity(n);
    for round in 0..n {
        eprintln!("bench: latency round {}/{n}", round + 1);
        for (leg, got) in legs.iter().zip(samples.iter_mut()) {
            match &leg.kind {
                Kind::Floor {
                    make,
                    checks,
                    bind,
                    argv,
                } => {
                    let req = shape.request(round, argv, *bind)?;
                    let origin = shape.bind.as_ref().map(|(_, o)| o);
                    got.push(floor::one(&ctx.docker, &req, *make, *checks, origin).await?);
                }
                Kind::Gpuq => jobs.push(one_job(ctx, round).await?),
            }
        }
    }
    let ids: Vec<Uuid> = jobs.iter().map(|j| j.0).collect();
    let gpuq = phases::of(ctx, &watch.stop(&ids).await?, &jobs).await?;
    let gpuq_total: Vec<Duration> = gpuq.iter().map(|j| j.total).collect();
    for (leg, got) in legs.iter().zip(samples.iter_mut()) {
        if matches!(leg.kind, Kind::Gpuq) {
            *got = gpuq_total
                .iter()
                .map(|&total| Sample {
                    total,
                    ..Sample::default()
                })
                .collect();
        }
    }
    print_table(out, &legs, &samples)?;
    phases::print(out, &gpuq)?;
    let sorted = |i: usize| {
        let mut v: Vec<Duration> = samples[i].iter().map(|s| s.total).collect();
        v.sort_unstable();
        v
    };
    Ok(Latency {
        plain: sorted(PLAIN),
        whole: sorted(WHOLE),
        gpuq: sorted(legs.len() - 1),
    })
}

/// Submits one one-card `true` job and waits for it to succeed and its container to go; returns
/// its id and when the submit was sent (Unix nanoseconds).
async fn one_job(ctx: &Ctx, i: usize) -> Result<(Uuid, i64)> {
    let body = json!({
        "image": ctx.opts.image, "command": ["true"], "min_vram_mb": 256,
        "name": format!("bench-start-{i}"),
    });
    let sent = super::idle::now_unix_nanos();
    let id = ctx.api.submit(&body).await?;
    let ids = [id];
    let limit = Duration::from_secs(60);
    // Not often: the figures come from the job's trail, and a busy poll would slow its start.
    wait_for(
        &ctx.pool,
        &ids,
        &["succeeded"],
        Duration::from_millis(100),
        limit,
    )
    .await?;
    wait_removed(&ctx.docker, &ids).await?;
    Ok((id, sent))
}

/// Milliseconds with one decimal.
pub(super) fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn print_table(out: &mut impl Write, legs: &[Leg], samples: &[Vec<Sample>]) -> Result<()> {
    writeln!(
        out,
        "  {:<54} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "", "p50", "p90", "create", "start", "Δ p50"
    )?;
    let p50 = |v: &[Sample]| {
        let mut t: Vec<Duration> = v.iter().map(|s| s.total).collect();
        t.sort_unstable();
        percentile(&t, 50.0)
    };
    for (leg, got) in legs.iter().zip(samples) {
        if got.is_empty() {
            bail!("no samples for {}", leg.name);
        }
        let mut total: Vec<Duration> = got.iter().map(|s| s.total).collect();
        total.sort_unstable();
        let part = |f: fn(&Sample) -> Duration| {
            let mut v: Vec<Duration> = got.iter().map(f).collect();
            v.sort_unstable();
            match percentile(&v, 50.0) {
                d if d.is_zero() => "-".to_string(),
                d => ms(d),
            }
        };
        let here = percentile(&total, 50.0).as_secs_f64();
        let base = p50(&samples[leg.base]).as_secs_f64();
        let delta = if std::ptr::eq(leg, &legs[leg.base]) {
            String::new()
        } else {
            format!("{:+.1} ms", 1e3 * (here - base))
        };
        writeln!(
            out,
            "  {:<54} {:>10} {:>10} {:>10} {:>10} {:>10}",
            leg.name,
            ms(percentile(&total, 50.0)),
            ms(percentile(&total, 90.0)),
            part(|s| s.create),
            part(|s| s.start),
            delta
        )?;
    }
    let gpuq = p50(&samples[legs.len() - 1]).as_secs_f64();
    let whole = p50(&samples[WHOLE]).as_secs_f64();
    writeln!(
        out,
        "  {:<54} {:>10.2}",
        "gpuq / dockerd with the whole fence (p50)",
        gpuq / whole.max(1e-9)
    )?;
    writeln!(
        out,
        "  (Δ: the row's p50 less the p50 of the row it builds on: plain for the fence's \
         elements, the whole fence for gpuq's looks and gpuq)\n"
    )?;
    Ok(())
}
