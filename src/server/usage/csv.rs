//! CSV exports of a range: every raw sample, and per-job accounting. Rows are streamed from the
//! database in chunks, so a month of samples never sits in memory at once.

use super::report::RUNS;
use super::Range;
use crate::model::{gpu_id, JobStatus, CUSTOM_VRAM};
use chrono::{DateTime, SecondsFormat, Utc};
use futures_util::{Stream, StreamExt};
use sqlx::{FromRow, PgPool};
use std::fmt::Write as _;
use uuid::Uuid;

/// Header of the samples file.
pub const SAMPLES_HEADER: &str =
    "at,node,gpu_uuid,gpu_index,model,total_mib,reserved_mib,used_mib,external_mib,utilization_pct";

/// Header of the per-job file.
pub const JOBS_HEADER: &str =
    "job_id,name,owner,workload,status,gpu_count,reserved_mib,created_at,\
admitted_at,started_at,finished_at,wait_s,run_hours_in_range,gpu_hours,vram_gib_hours";

const CHUNK: usize = 64 * 1024;

#[derive(FromRow)]
struct SampleRow {
    at: DateTime<Utc>,
    node: String,
    gpu_uuid: Uuid,
    idx: i32,
    model: String,
    total_mib: i64,
    reserved_mib: i64,
    used_mib: Option<i64>,
    external_mib: Option<i64>,
    utilization_pct: Option<i32>,
}

/// Every sample in the range, oldest first; unknown figures are empty cells.
pub fn samples(pool: PgPool, range: Range) -> impl Stream<Item = Result<String, std::io::Error>> {
    stream(SAMPLES_HEADER, move |tx| async move {
        let mut rows = sqlx::query_as::<_, SampleRow>(
            "SELECT s.at, s.node, s.gpu_uuid, g.idx, g.model, s.total_mib, s.reserved_mib, \
               s.used_mib, s.external_mib, s.utilization_pct \
             FROM gpu_samples s JOIN gpus g ON g.uuid = s.gpu_uuid \
             WHERE s.at >= $1 AND s.at < $2 ORDER BY s.at, s.node, g.idx",
        )
        .bind(range.from)
        .bind(range.to)
        .fetch(&pool);
        let mut buf = String::new();
        while let Some(row) = rows.next().await {
            let r = row?;
            let _ = writeln!(
                buf,
                "{},{},{},{},{},{},{},{},{},{}",
                time(r.at),
                text(&r.node),
                gpu_id(&r.gpu_uuid),
                r.idx,
                text(&r.model),
                r.total_mib,
                r.reserved_mib,
                opt(r.used_mib),
                opt(r.external_mib),
                opt(r.utilization_pct)
            );
            flush_if_full(&tx, &mut buf).await?;
        }
        Ok(buf)
    })
}

#[derive(FromRow)]
struct RunRow {
    id: Uuid,
    name: String,
    owner: String,
    workload: String,
    gpu_count: i32,
    status: JobStatus,
    created_at: DateTime<Utc>,
    admitted_at: Option<DateTime<Utc>>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    reserved_mib: i64,
    hours: f64,
}

/// One row per job that ran during the range, with the same figures the report adds up.
pub fn jobs(
    pool: PgPool,
    range: Range,
    now: DateTime<Utc>,
) -> impl Stream<Item = Result<String, std::io::Error>> {
    stream(JOBS_HEADER, move |tx| async move {
        let sql = format!("SELECT * FROM ({RUNS}) runs ORDER BY started_at, id");
        let mut rows = sqlx::query_as::<_, RunRow>(&sql)
            .bind(range.from)
            .bind(range.to)
            .bind(now)
            .bind(CUSTOM_VRAM)
            .fetch(&pool);
        let mut buf = String::new();
        while let Some(row) = rows.next().await {
            let r = row?;
            let wait = r
                .admitted_at
                .map(|a| format!("{:.3}", (a - r.created_at).num_milliseconds() as f64 / 1e3));
            let _ = writeln!(
                buf,
                "{},{},{},{},{},{},{},{},{},{},{},{},{:.6},{:.6},{:.6}",
                r.id,
                text(&r.name),
                text(&r.owner),
                text(&r.workload),
                r.status,
                r.gpu_count,
                r.reserved_mib,
                time(r.created_at),
                opt(r.admitted_at.map(time)),
                opt(r.started_at.map(time)),
                opt(r.finished_at.map(time)),
                opt(wait),
                r.hours,
                r.hours * f64::from(r.gpu_count),
                r.hours * r.reserved_mib as f64 / 1024.0
            );
            flush_if_full(&tx, &mut buf).await?;
        }
        Ok(buf)
    })
}

type Sender = tokio::sync::mpsc::Sender<Result<String, std::io::Error>>;

/// Runs `produce` in its own task, sending the header, the chunks it flushes and its remainder.
/// A database error mid-way is logged and ends the body with an error, so the client sees a broken
/// download rather than a file that silently stops.
fn stream<F, Fut>(
    header: &'static str,
    produce: F,
) -> impl Stream<Item = Result<String, std::io::Error>>
where
    F: FnOnce(Sender) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<String, Failed>> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::spawn(async move {
        if tx.send(Ok(format!("{header}\n"))).await.is_err() {
            return;
        }
        match produce(tx.clone()).await {
            Ok(rest) => {
                let _ = tx.send(Ok(rest)).await;
            }
            Err(Failed::Gone) => {}
            Err(Failed::Db(e)) => {
                tracing::error!(error = %e, "exporting usage CSV");
                let _ = tx
                    .send(Err(std::io::Error::other(
                        "database error; see the server log",
                    )))
                    .await;
            }
        }
    });
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) })
}

/// Why a producer stopped early.
enum Failed {
    /// The client went away.
    Gone,
    /// Reading failed.
    Db(sqlx::Error),
}

impl From<sqlx::Error> for Failed {
    fn from(e: sqlx::Error) -> Self {
        Failed::Db(e)
    }
}

async fn flush_if_full(tx: &Sender, buf: &mut String) -> Result<(), Failed> {
    if buf.len() >= CHUNK {
        tx.send(Ok(std::mem::take(buf)))
            .await
            .map_err(|_| Failed::Gone)?;
    }
    Ok(())
}

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// A text cell: quoted when it holds a separator, quote or line break; a leading `=`, `+`, `-` or
/// `@` is defused with `'` so a spreadsheet does not run a user's job name as a formula.
fn text(s: &str) -> String {
    let defused = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_owned()
    };
    if defused.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", defused.replace('"', "\"\""))
    } else {
        defused
    }
}

#[cfg(test)]
mod tests {
    use super::text;

    #[test]
    fn cells_are_quoted_and_formulas_defused() {
        assert_eq!(text("plain"), "plain");
        assert_eq!(text("a,b"), "\"a,b\"");
        assert_eq!(text("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(text("=cmd()"), "'=cmd()");
        assert_eq!(text("-1,2"), "\"'-1,2\"");
    }
}
