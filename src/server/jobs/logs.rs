//! Reading a job's log: the last lines, or a live tail that ends when the job does. A follow
//! wakes when this process's runner appends to the log or the job's end is announced; it never
//! polls the file or the database on a timer of its own.

use crate::model::{AppError, JobChange, LiveEvent, Role};
use crate::server::auth::CurrentUser;
use crate::server::db::jobs;
use crate::server::error::OrInternal;
use crate::server::notifier::{Note, Subscription};
use crate::server::runner::logs::{log_path, text_of};
use crate::server::AppState;
use futures_util::stream::{self, Stream};
use sqlx::PgPool;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use tokio::sync::broadcast;
use uuid::Uuid;

/// The last `tail` lines of a job's log (all when `None`).
pub async fn tail(
    state: &AppState,
    viewer: &CurrentUser,
    id: Uuid,
    tail: Option<usize>,
) -> Result<String, AppError> {
    let path = readable_log(state, viewer, id).await?;
    Ok(snapshot_of(path, tail).await?.0)
}

/// The last `tail` lines of a job's log, then new lines as they come until the job has ended.
pub async fn follow(
    state: &AppState,
    viewer: &CurrentUser,
    id: Uuid,
    tail: Option<usize>,
) -> Result<impl Stream<Item = std::io::Result<String>> + Send + 'static, AppError> {
    let path = readable_log(state, viewer, id).await?;
    // Listen before reading: an end announced in between is then heard, not lost.
    let notes = state.notifier.subscribe();
    let grew = state.notifier.subscribe_logs();
    let (text, offset) = snapshot_of(path.clone(), tail).await?;
    let st = Follow {
        pool: state.pool.clone(),
        id,
        path,
        offset,
        ended: false,
        checked: false,
        notes,
        grew,
    };
    let first = stream::once(async move { Ok::<_, std::io::Error>(text) });
    Ok(futures_util::StreamExt::chain(first, follow_stream(st)))
}

/// The log's path, when the viewer may read it: its owner, managers and admins.
async fn readable_log(
    state: &AppState,
    viewer: &CurrentUser,
    id: Uuid,
) -> Result<PathBuf, AppError> {
    let job = jobs::get(&state.pool, id)
        .await
        .or_internal("reading a job")?
        .ok_or_else(|| AppError::NotFound(format!("no job {id}")))?;
    if job.owner_id != viewer.id && !viewer.role.at_least(Role::Manager) {
        return Err(AppError::Forbidden(
            "members read only their own jobs' logs".into(),
        ));
    }
    Ok(log_path(&state.logs_dir, id))
}

async fn snapshot_of(path: PathBuf, tail: Option<usize>) -> Result<(String, u64), AppError> {
    tokio::task::spawn_blocking(move || snapshot(&path, tail))
        .await
        .or_internal("reading a log")?
        .or_internal("reading a log")
}

/// The text of the last `tail` whole lines, and the byte offset where following continues.
fn snapshot(path: &PathBuf, tail: Option<usize>) -> std::io::Result<(String, u64)> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let text = String::from_utf8_lossy(&bytes[..whole]);
    let lines: Vec<&str> = text.lines().collect();
    let skip = tail.map_or(0, |n| lines.len().saturating_sub(n));
    let mut out = String::new();
    for l in &lines[skip..] {
        out.push_str(text_of(l));
        out.push('\n');
    }
    Ok((out, whole as u64))
}

struct Follow {
    pool: PgPool,
    id: Uuid,
    path: PathBuf,
    offset: u64,
    /// The job has ended: read once more, then stop.
    ended: bool,
    /// The database has been asked whether the job ended since the last possible gap.
    checked: bool,
    notes: Subscription,
    grew: broadcast::Receiver<Uuid>,
}

/// Why a follow woke up.
enum Wake {
    /// The log may have grown.
    Read,
    /// The job's end was announced.
    Ended,
    /// A notification may have been missed: ask the database.
    Check,
}

fn follow_stream(st: Follow) -> impl Stream<Item = std::io::Result<String>> + Send {
    stream::unfold(st, |mut st| async move {
        loop {
            if let Some(chunk) = read_from(&mut st).await {
                return Some((Ok(chunk), st));
            }
            if st.ended {
                return None;
            }
            if !st.checked {
                // Read once more after the job ended: the runner writes the last lines before it
                // records the end.
                st.ended = job_ended(&st.pool, st.id).await;
                st.checked = true;
                continue;
            }
            match st.wait().await {
                Wake::Read => {}
                Wake::Ended => st.ended = true,
                Wake::Check => st.checked = false,
            }
        }
    })
}

impl Follow {
    /// Waits for something that concerns this job's log.
    async fn wait(&mut self) -> Wake {
        loop {
            tokio::select! {
                grew = self.grew.recv() => match grew {
                    Ok(job) if job == self.id => return Wake::Read,
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return Wake::Read,
                    Err(broadcast::error::RecvError::Closed) => return Wake::Check,
                },
                note = self.notes.recv() => match note {
                    Note::Event(LiveEvent::Job { job_id, status: JobChange::Status(s) })
                        if job_id == self.id && s.is_terminal() => return Wake::Ended,
                    Note::Missed | Note::Backstop => return Wake::Check,
                    Note::Wake | Note::Event(_) => {}
                },
            }
        }
    }
}

/// Whether the job is over (or gone): its log will not grow any more.
async fn job_ended(pool: &PgPool, id: Uuid) -> bool {
    jobs::get(pool, id)
        .await
        .ok()
        .flatten()
        .is_none_or(|j| j.released_at.is_some() || j.finished_at.is_some())
}

/// New whole lines since the offset, as text, or `None` when there are none.
async fn read_from(st: &mut Follow) -> Option<String> {
    let path = st.path.clone();
    let offset = st.offset;
    let (text, consumed) =
        tokio::task::spawn_blocking(move || -> std::io::Result<(String, u64)> {
            let mut f = std::fs::File::open(&path)?;
            f.seek(SeekFrom::Start(offset))?;
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes)?;
            let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            let mut out = String::new();
            for l in String::from_utf8_lossy(&bytes[..whole]).lines() {
                out.push_str(text_of(l));
                out.push('\n');
            }
            Ok((out, whole as u64))
        })
        .await
        .ok()?
        .ok()?;
    st.offset += consumed;
    (!text.is_empty()).then_some(text)
}
