//! Human-readable rendering of API responses. All functions are pure: the
//! current time is passed in.

use chrono::{DateTime, SecondsFormat, Utc};

use crate::model::{GpuList, GpuView, JobPage, JobStatus, JobView, ManifestSuggestions, NodeView};

/// Width the jobs table is kept within (by truncating the WAIT column).
pub const MAX_WIDTH: usize = 120;
/// Longest job name shown in the jobs table.
pub const MAX_NAME: usize = 32;
/// Narrowest the WAIT column is squeezed to.
const MIN_WAIT: usize = 12;

/// Compact age of `then` at `now`: `5s`, `3m`, `2h`, `4d` (rounded down;
/// times in the future count as `0s`).
pub fn format_age(then: DateTime<Utc>, now: DateTime<Utc>) -> String {
    let s = (now - then).num_seconds().max(0);
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// Cuts `text` to at most `max` characters, ending in `…` when cut.
pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// Aligned plain-text table: columns separated by two spaces, columns whose
/// index is in `right` right-aligned, no trailing whitespace.
pub fn table(headers: &[&str], rows: &[Vec<String>], right: &[usize]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let header: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    let mut out = String::new();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let width = widths.get(i).copied().unwrap_or(0);
            let pad = " ".repeat(width.saturating_sub(cell.chars().count()));
            if i > 0 {
                line.push_str("  ");
            }
            if right.contains(&i) {
                line.push_str(&pad);
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&pad);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

fn short_id(id: &uuid::Uuid) -> String {
    id.to_string().chars().take(8).collect()
}

fn or_dash(value: Option<&str>) -> String {
    match value {
        Some(v) if !v.is_empty() => v.to_owned(),
        _ => "-".to_owned(),
    }
}

fn gpus_cell(job: &JobView) -> String {
    if job.assigned_gpus.is_empty() {
        return job.gpu_count.to_string();
    }
    let idx: Vec<String> = job
        .assigned_gpus
        .iter()
        .map(|g| g.index.to_string())
        .collect();
    format!("{} [{}]", job.gpu_count, idx.join(","))
}

fn wait_cell(job: &JobView) -> String {
    let reason = job.wait_reason.as_deref().filter(|r| !r.is_empty());
    match (job.queue_position, reason) {
        (Some(p), Some(r)) => format!("#{p} {r}"),
        (Some(p), None) => format!("#{p}"),
        (None, Some(r)) => r.to_owned(),
        (None, None) => String::new(),
    }
}

/// How far ahead `at` is: `now` when it is not ahead, `in 12m` otherwise.
fn format_ahead(at: DateTime<Utc>, now: DateTime<Utc>) -> String {
    if at <= now {
        "now".to_owned()
    } else {
        format!("in {}", format_age(now, at))
    }
}

/// A queued job's start estimate in a table cell: `in 12m (by 1h)`, `never`, or `-` before the
/// first figure (or when it is someone else's job).
pub fn start_cell(job: &JobView, now: DateTime<Utc>) -> String {
    if job.cannot_start.is_some() {
        return "never".to_owned();
    }
    match (job.estimated_start_at, job.latest_start_at) {
        (Some(e), Some(l)) => format!(
            "{} (by {})",
            format_ahead(e, now),
            format_ahead(l, now).trim_start_matches("in ")
        ),
        (Some(e), None) => format_ahead(e, now),
        _ => "-".to_owned(),
    }
}

/// An estimate's time in `gpuq show`: the instant and how far ahead it is.
fn ahead_cell(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    match t {
        Some(t) => format!(
            "{} ({})",
            t.to_rfc3339_opts(SecondsFormat::Secs, true),
            format_ahead(t, now)
        ),
        None => "-".to_owned(),
    }
}

/// The `gpuq jobs` table and its `page X of Y (N jobs)` footer.
pub fn jobs_table(list: &JobPage, now: DateTime<Utc>) -> String {
    let mut rows: Vec<Vec<String>> = list
        .jobs
        .iter()
        .map(|job| {
            vec![
                short_id(&job.id),
                truncate(&or_dash(Some(&job.name)), MAX_NAME),
                or_dash(Some(&job.owner)),
                job.status.to_string(),
                gpus_cell(job),
                format_age(job.created_at, now),
            ]
        })
        .collect();
    let mut headers = vec!["ID", "NAME", "OWNER", "STATUS", "GPUS", "AGE"];
    let any_queued = list.jobs.iter().any(|j| j.status == JobStatus::Queued);
    if any_queued {
        for (row, job) in rows.iter_mut().zip(&list.jobs) {
            row.push(if job.status == JobStatus::Queued {
                start_cell(job, now)
            } else {
                String::new()
            });
        }
        headers.push("START");
        // Width of the columns before WAIT, separators included.
        let mut used = 0;
        for (i, h) in headers.iter().enumerate() {
            let w = rows
                .iter()
                .map(|r| r[i].chars().count())
                .fold(h.chars().count(), usize::max);
            used += w + 2;
        }
        let room = MAX_WIDTH.saturating_sub(used).max(MIN_WAIT);
        for (row, job) in rows.iter_mut().zip(&list.jobs) {
            let wait = if job.status == JobStatus::Queued {
                truncate(&wait_cell(job), room)
            } else {
                String::new()
            };
            row.push(wait);
        }
        headers.push("WAIT");
    }
    let mut out = if rows.is_empty() {
        "no jobs\n".to_owned()
    } else {
        table(&headers, &rows, &[])
    };
    out.push_str(&page_footer(list));
    out.push('\n');
    out
}

/// `page X of Y (N jobs)`.
pub fn page_footer(list: &JobPage) -> String {
    let total = u64::try_from(list.total).unwrap_or(0);
    let pages = match u64::try_from(list.per_page) {
        Ok(per_page) if per_page > 0 => total.div_ceil(per_page).max(1),
        _ => 1,
    };
    let noun = if list.total == 1 { "job" } else { "jobs" };
    format!(
        "page {} of {pages} ({} {noun})",
        list.page.max(1),
        list.total
    )
}

fn gpu_jobs_cell(gpu: &GpuView) -> String {
    if gpu.jobs.is_empty() {
        return "-".to_owned();
    }
    let names: Vec<String> = gpu
        .jobs
        .iter()
        .map(|j| match j.name.as_str() {
            "" => short_id(&j.id),
            name => name.to_owned(),
        })
        .collect();
    names.join(", ")
}

/// The `gpuq gpus` table, sorted by node and index; memory in MiB.
pub fn gpus_table(list: &GpuList) -> String {
    if list.gpus.is_empty() {
        return "no GPUs\n".to_owned();
    }
    let mut gpus: Vec<&GpuView> = list.gpus.iter().collect();
    gpus.sort_by(|a, b| (&a.node, a.index).cmp(&(&b.node, b.index)));
    let rows: Vec<Vec<String>> = gpus
        .iter()
        .map(|g| {
            vec![
                g.node.clone(),
                g.index.to_string(),
                g.model.clone(),
                g.state.to_string(),
                g.total_mib.to_string(),
                g.reserved_mib.to_string(),
                g.external_mib.to_string(),
                g.free_mib.to_string(),
                gpu_jobs_cell(g),
            ]
        })
        .collect();
    let headers = [
        "NODE", "IDX", "MODEL", "STATE", "TOTAL", "RESERVED", "EXTERNAL", "FREE", "JOBS",
    ];
    table(&headers, &rows, &[4, 5, 6, 7])
}

/// The `gpuq manifest suggest` tables: per workload type × model, then (when there are any)
/// raw-declared jobs per image × model. Figures in MiB; `-` where there is none.
pub fn suggestions_table(s: &ManifestSuggestions) -> String {
    let opt = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), |v| v.to_string());
    let mut out = format!(
        "suggested = p95 + {} %, rounded up to {} MiB, from at least {} finished (job, card) records\n\n",
        s.margin_percent, s.round_mib, s.min_samples
    );
    if s.workloads.is_empty() {
        out.push_str("no finished job of a workload type has an observed peak yet\n");
    } else {
        let rows: Vec<Vec<String>> = s
            .workloads
            .iter()
            .map(|w| {
                stats_row(
                    &w.workload,
                    &w.gpu_model,
                    opt(w.declared_mib),
                    &w.observed.stats,
                    opt(w.observed.suggested_mib),
                )
            })
            .collect();
        out.push_str(&stats_table("WORKLOAD", &rows));
    }
    if !s.images.is_empty() {
        out.push_str("\njobs without a workload type, per image (a hint to create one):\n");
        let rows: Vec<Vec<String>> = s
            .images
            .iter()
            .map(|i| {
                stats_row(
                    &i.image,
                    &i.gpu_model,
                    i.declared_max_mib.to_string(),
                    &i.observed.stats,
                    opt(i.observed.suggested_mib),
                )
            })
            .collect();
        out.push_str(&stats_table("IMAGE", &rows));
    }
    out
}

/// One row of a suggestions table: what it is about, the model, the declared figure, the observed
/// figures and the suggestion (`-` where there is none).
fn stats_row(
    about: &str,
    model: &str,
    declared: String,
    stats: &crate::model::PeakStats,
    suggested: String,
) -> Vec<String> {
    vec![
        about.to_owned(),
        model.to_owned(),
        declared,
        stats.n.to_string(),
        stats.p50_mib.to_string(),
        stats.p95_mib.to_string(),
        stats.max_mib.to_string(),
        suggested,
    ]
}

/// A suggestions table whose first column is `about` (WORKLOAD or IMAGE), numbers right-aligned.
fn stats_table(about: &str, rows: &[Vec<String>]) -> String {
    let headers = [
        about,
        "MODEL",
        "DECLARED",
        "N",
        "P50",
        "P95",
        "MAX",
        "SUGGESTED",
    ];
    table(&headers, rows, &[2, 3, 4, 5, 6, 7])
}

/// The `gpuq nodes` table, by name.
pub fn nodes_table(nodes: &[NodeView]) -> String {
    if nodes.is_empty() {
        return "no nodes\n".to_owned();
    }
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            vec![
                n.name.clone(),
                n.state.to_string(),
                format!("{} s", n.heartbeat_age_s),
                n.version.clone(),
                if n.runs_jobs { "yes" } else { "no" }.to_owned(),
                n.cards.to_string(),
                n.running_jobs.to_string(),
                n.advertise_url.clone(),
            ]
        })
        .collect();
    let headers = [
        "NODE",
        "STATE",
        "HEARTBEAT",
        "VERSION",
        "RUNNER",
        "CARDS",
        "RUNNING",
        "URL",
    ];
    table(&headers, &rows, &[2, 5, 6])
}

/// `gpuq fair-share`: users, then teams, one row each.
pub fn fair_share_table(r: &crate::model::FairShareReport) -> String {
    let pct = |v: f64| format!("{:.1} %", v * 100.0);
    let row = |kind: &str, x: &crate::model::FairShareRow| {
        vec![
            kind.to_owned(),
            x.name.clone(),
            x.team.clone(),
            format!("{}", x.weight),
            format!("{:.2}", x.decayed_gpu_hours),
            pct(x.share_of_recent),
            pct(x.owed_share),
            x.budget.map_or("-".to_owned(), |b| {
                format!("{} h/{} ({})", b.gpu_hours, b.period, b.kind)
            }),
            x.budget_left_gpu_hours
                .map_or("-".to_owned(), |h| format!("{h:.2} h")),
        ]
    };
    let rows: Vec<Vec<String>> = r
        .users
        .iter()
        .map(|u| row("user", u))
        .chain(r.teams.iter().map(|t| row("team", t)))
        .collect();
    let headers = [
        "",
        "NAME",
        "TEAM",
        "WEIGHT",
        "GPU-H (DECAYED)",
        "RECENT",
        "OWED",
        "BUDGET",
        "LEFT",
    ];
    let state = if r.fair_share { "on" } else { "off" };
    format!(
        "fair share {state}, half-life {} h\n{}",
        r.half_life_h,
        table(&headers, &rows, &[3, 4, 5, 6, 8])
    )
}

/// Quotes an argv element for display when it is not shell-safe.
fn shell_quote(arg: &str) -> String {
    let safe = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if safe {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

fn time_cell(t: Option<DateTime<Utc>>, now: DateTime<Utc>) -> String {
    match t {
        Some(t) => format!(
            "{} ({} ago)",
            t.to_rfc3339_opts(SecondsFormat::Secs, true),
            format_age(t, now)
        ),
        None => "-".to_owned(),
    }
}

/// The `gpuq show` key: value listing of one job.
pub fn job_details(job: &JobView, now: DateTime<Utc>) -> String {
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
    let status = match job.status_reason.as_deref().filter(|r| !r.is_empty()) {
        Some(r) => format!("{} ({r})", job.status),
        None => job.status.to_string(),
    };
    let status = if job.node_lost {
        format!("{status}; node lost: not started elsewhere, its cards stay held")
    } else {
        status
    };
    let command = if job.details_hidden {
        "(hidden: someone else's job)".to_owned()
    } else {
        let argv: Vec<String> = job.command.iter().map(|a| shell_quote(a)).collect();
        argv.join(" ")
    };
    let mut lines: Vec<(&str, String)> = vec![
        ("ID", job.id.to_string()),
        ("Seq", job.seq.to_string()),
        ("Name", or_dash(Some(&job.name))),
        ("Owner", or_dash(Some(&job.owner))),
        ("Status", status),
        ("Image", or_dash(Some(&job.image))),
        ("Command", command),
        ("GPUs", job.gpu_count.to_string()),
        ("Workload", or_dash(job.workload.as_deref())),
        ("Min VRAM", opt(job.min_vram_mb.map(|m| format!("{m} MB")))),
        (
            "Exclusive",
            if job.exclusive { "yes" } else { "no" }.to_owned(),
        ),
        ("Priority", job.priority.to_string()),
        ("Timeout", format!("{}s", job.timeout_s)),
    ];
    let env = job.env.as_ref().filter(|e| !e.is_empty());
    match env {
        Some(env) => lines.extend(env.iter().map(|(k, v)| ("Env", format!("{k}={v}")))),
        None => lines.push(("Env", "-".to_owned())),
    }
    if job.volumes.is_empty() {
        lines.push(("Volumes", "-".to_owned()));
    }
    lines.extend(job.volumes.iter().map(|v| ("Volumes", v.clone())));
    lines.push(("Node", or_dash(job.node.as_deref())));
    if job.assigned_gpus.is_empty() {
        lines.push(("Assigned GPUs", "-".to_owned()));
    }
    lines.extend(job.assigned_gpus.iter().map(|g| {
        let mut text = format!("#{} {} {} ({} MiB)", g.index, g.uuid, g.model, g.vram_mib);
        if let Some(used) = g.used_mib {
            text.push_str(&format!("; uses {used} MiB"));
        }
        if let Some(peak) = g.peak_mib {
            text.push_str(&format!("; peak {peak} MiB"));
        }
        if g.over_commitment {
            text.push_str("; went over its reservation");
        }
        ("Assigned GPUs", text)
    }));
    lines.extend([
        ("Exit code", opt(job.exit_code.map(|c| c.to_string()))),
        ("Created", time_cell(Some(job.created_at), now)),
        ("Admitted", time_cell(job.admitted_at, now)),
        ("Started", time_cell(job.started_at, now)),
        ("Finished", time_cell(job.finished_at, now)),
        ("Released", time_cell(job.released_at, now)),
        (
            "Queue position",
            opt(job.queue_position.map(|p| p.to_string())),
        ),
        ("Wait reason", or_dash(job.wait_reason.as_deref())),
    ]);
    if job.status == JobStatus::Queued {
        match job.cannot_start.as_deref() {
            Some(why) => lines.push(("Expected start", format!("never: {why}"))),
            None => lines.extend([
                ("Expected start", ahead_cell(job.estimated_start_at, now)),
                ("Latest start", ahead_cell(job.latest_start_at, now)),
            ]),
        }
    }
    let width = lines.iter().map(|(k, _)| k.len() + 1).max().unwrap_or(0);
    let mut out = String::new();
    let mut previous = "";
    for (key, value) in lines {
        // Repeated keys (several env vars, volumes, GPUs) are shown once.
        let label = if key == previous {
            String::new()
        } else {
            format!("{key}:")
        };
        previous = key;
        out.push_str(format!("{label:<width$}  {value}").trim_end());
        out.push('\n');
    }
    out
}

/// `gpuq events`: one row per step of a job's life, oldest first.
pub fn events_table(events: &[crate::model::JobEventView]) -> String {
    let rows: Vec<Vec<String>> = events
        .iter()
        .map(|e| {
            vec![
                e.at.format("%Y-%m-%d %H:%M:%S%.3f").to_string(),
                e.actor.clone(),
                e.kind.to_string(),
                e.detail.clone(),
            ]
        })
        .collect();
    table(&["AT", "ACTOR", "EVENT", "DETAIL"], &rows, &[])
}

/// `gpuq array show`: the array's size, limit and its elements per status.
pub fn array_summary(a: &crate::model::batch::ArrayView) -> String {
    let counts: Vec<String> = a.counts.iter().map(|(s, n)| format!("{s} {n}")).collect();
    let limit = a
        .running_limit
        .map_or("none".to_owned(), |n| format!("{n} at once"));
    format!(
        "Array:   {}\nName:    {}\nOwner:   {}\nSize:    {}\nLimit:   {limit}\nStatus:  {}\n",
        a.array_id,
        a.name,
        a.owner,
        a.size,
        counts.join(", ")
    )
}

/// `gpuq budget`: one line per budget that applies to the caller, or a line saying there is none.
pub fn budget_lines(budgets: &[crate::model::BudgetUse]) -> String {
    if budgets.is_empty() {
        return "no budget applies to you\n".into();
    }
    budgets.iter().map(|u| format!("{}\n", u.line())).collect()
}
