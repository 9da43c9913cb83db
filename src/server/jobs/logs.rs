//! Reading a job's log: the last lines, or a live tail that ends when the job does. A follow
//! wakes when this process's runner appends to the log or the job's end is announced; it never
//! polls the file or the database on a timer of its own.
//!
//! A log lives on the disk of the node that ran the job. Asked on another node, that node checks
//! the viewer's right to it and fetches it from the owning node (see [`crate::server::peers`]); a
//! lost node's log is refused with a message saying so, never answered empty.

use crate::model::{AppError, JobChange, LiveEvent, NodeState};
use crate::server::auth::CurrentUser;
use crate::server::db::{jobs, nodes};
use crate::server::error::OrInternal;
use crate::server::notifier::{Note, Subscription};
use crate::server::runner::logs::{log_path, text_of};
use crate::server::AppState;
use bytes::Bytes;
use futures_util::stream::{self, BoxStream, Stream, StreamExt};
use sqlx::PgPool;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::SystemTime;
use tokio::sync::broadcast;
use uuid::Uuid;

/// A log as it streams: text chunks, whole lines each (a forwarded one as the owning node sent it).
pub type LogStream = BoxStream<'static, std::io::Result<Bytes>>;

/// Where a job's log is read.
enum Source {
    /// In this node's log folder.
    Here(PathBuf),
    /// On node `node`, reached at `url`.
    There { node: String, url: String },
}

/// The last `tail` lines of a job's log (all when `None`).
pub async fn tail(
    state: &AppState,
    viewer: &CurrentUser,
    id: Uuid,
    tail: Option<usize>,
) -> Result<String, AppError> {
    match source(state, viewer, id).await? {
        Source::Here(path) => Ok(snapshot_of(path, tail).await?.0),
        Source::There { node, url } => {
            let peers = state.peers.as_ref().ok_or(AppError::Internal)?;
            let answer = peers.log(&node, &url, id, viewer.id, tail, false).await?;
            answer.text().await.map_err(|e| {
                AppError::Unavailable(format!(
                    "node `{node}` broke off sending job {id}'s log: {e}"
                ))
            })
        }
    }
}

/// The last `tail` lines of a job's log, then new lines as they come until the job has ended.
pub async fn follow(
    state: &AppState,
    viewer: &CurrentUser,
    id: Uuid,
    tail: Option<usize>,
) -> Result<LogStream, AppError> {
    let source = source(state, viewer, id).await?;
    let slot = state.streams.take(viewer)?;
    match source {
        Source::Here(path) => follow_here(state, path, id, tail, slot).await,
        Source::There { node, url } => {
            let peers = state.peers.as_ref().ok_or(AppError::Internal)?;
            let answer = peers.log(&node, &url, id, viewer.id, tail, true).await?;
            // The slot is held while the far node streams; an error ends the stream once told.
            let chunks = stream::unfold(Some((answer, slot)), |held| async move {
                let (mut answer, slot) = held?;
                match answer.chunk().await {
                    Ok(Some(bytes)) => Some((Ok(bytes), Some((answer, slot)))),
                    Ok(None) => None,
                    Err(e) => Some((Err(std::io::Error::other(e)), None)),
                }
            });
            Ok(chunks.boxed())
        }
    }
}

/// A log asked for by another node for a viewer it vouches for with a grant (see
/// [`crate::server::peers`]): only a log this node holds, never forwarded again. Without
/// `follow`, the tail alone.
pub async fn for_peer(
    state: &AppState,
    id: Uuid,
    grant: Option<&str>,
    tail: Option<usize>,
    follow: bool,
) -> Result<LogStream, AppError> {
    let Some(peers) = &state.peers else {
        return Err(AppError::NotFound(
            "this process serves no other node".into(),
        ));
    };
    let Some(secret) = &peers.secret else {
        return Err(AppError::NotFound(
            "this node has no --cluster-secret, so it hands logs to no other node".into(),
        ));
    };
    let grant = grant.ok_or(AppError::Unauthorized)?;
    let user = secret.check(grant, id, SystemTime::now()).map_err(|why| {
        tracing::warn!(job = %id, %why, "refused a forwarded log read");
        AppError::Unauthorized
    })?;
    let job = super::find(&state.pool, id).await?;
    if job.job.node.as_deref() != Some(peers.node.as_str()) {
        return Err(AppError::NotFound(format!(
            "job {id} did not run on node `{}`",
            peers.node
        )));
    }
    let path = log_path(&state.logs_dir, id);
    if follow {
        let slot = state.streams.take_for(user)?;
        follow_here(state, path, id, tail, slot).await
    } else {
        let text = snapshot_of(path, tail).await?.0;
        Ok(stream::once(async move { Ok(Bytes::from(text)) }).boxed())
    }
}

/// Where the viewer reads job `id`'s log, when they may read it: its owner, managers and admins.
/// Here when this process is alone, ran the job, or holds its log file; otherwise on the job's
/// node, unless that node is lost.
async fn source(state: &AppState, viewer: &CurrentUser, id: Uuid) -> Result<Source, AppError> {
    let job = super::find(&state.pool, id).await?;
    if !super::access::sees_details(viewer, job.owner_id) {
        return Err(AppError::Forbidden(
            "members read only their own jobs' logs".into(),
        ));
    }
    let path = log_path(&state.logs_dir, id);
    let (Some(peers), Some(node)) = (&state.peers, job.job.node) else {
        return Ok(Source::Here(path));
    };
    if node == peers.node || tokio::fs::try_exists(&path).await.unwrap_or(false) {
        return Ok(Source::Here(path));
    }
    let Some(row) = nodes::get(&state.pool, &node)
        .await
        .or_internal("reading a node")?
    else {
        // A node that never registered (a record older than nodes): what this node has.
        return Ok(Source::Here(path));
    };
    if row.state == NodeState::Lost {
        let why = match row.forgotten_at {
            Some(at) => format!(
                "an admin forgot it at {}",
                at.format("%Y-%m-%d %H:%M:%S UTC")
            ),
            None => format!("no heartbeat for {} s", row.heartbeat_age_s),
        };
        return Err(AppError::Unavailable(format!(
            "job {id} ran on node `{node}`, which is lost ({why}): its log is on that host's disk \
             and can be read again once the node is back"
        )));
    }
    Ok(Source::There {
        node,
        url: row.advertise_url,
    })
}

/// Follows a log in this node's folder from its last `tail` lines.
async fn follow_here(
    state: &AppState,
    path: PathBuf,
    id: Uuid,
    tail: Option<usize>,
    slot: super::live::StreamSlot,
) -> Result<LogStream, AppError> {
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
        _slot: slot,
    };
    let first = stream::once(async move { Ok::<_, std::io::Error>(text) });
    Ok(first
        .chain(follow_stream(st))
        .map(|chunk| chunk.map(Bytes::from))
        .boxed())
}

async fn snapshot_of(path: PathBuf, tail: Option<usize>) -> Result<(String, u64), AppError> {
    tokio::task::spawn_blocking(move || snapshot(&path, tail))
        .await
        .or_internal("reading a log")?
        .or_internal("reading a log")
}

/// The text of the last `tail` whole lines, and the byte offset where following continues. A tail
/// reads the file backwards from its end, a block at a time, so its cost follows the lines asked
/// for, not the size of the log.
fn snapshot(path: &PathBuf, tail: Option<usize>) -> std::io::Result<(String, u64)> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((String::new(), 0)),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len();
    let (start, bytes) = match tail {
        None => {
            let mut bytes = Vec::new();
            f.read_to_end(&mut bytes)?;
            (0, bytes)
        }
        Some(n) => read_last_lines(&mut f, len, n)?,
    };
    let whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    // Read from the middle of the file, the first line is cut: it is not one of the last `n`.
    let first = if start > 0 {
        bytes
            .iter()
            .position(|b| *b == b'\n')
            .map_or(whole, |i| i + 1)
            .min(whole)
    } else {
        0
    };
    let text = String::from_utf8_lossy(&bytes[first..whole]);
    let lines: Vec<&str> = text.lines().collect();
    let skip = tail.map_or(0, |n| lines.len().saturating_sub(n));
    let mut out = String::new();
    for l in &lines[skip..] {
        out.push_str(text_of(l));
        out.push('\n');
    }
    Ok((out, start + whole as u64))
}

/// Reads whole blocks backwards from the end until the bytes hold more than `n` line ends (so at
/// least `n` whole lines after the first, possibly cut, one) or the file's start. Returns where
/// the bytes start in the file.
fn read_last_lines(f: &mut std::fs::File, len: u64, n: usize) -> std::io::Result<(u64, Vec<u8>)> {
    const BLOCK: u64 = 64 * 1024;
    let mut pos = len;
    let mut bytes: Vec<u8> = Vec::new();
    let mut ends = 0usize;
    while pos > 0 && ends <= n {
        let step = BLOCK.min(pos);
        pos -= step;
        f.seek(SeekFrom::Start(pos))?;
        let mut block = vec![0u8; step as usize];
        f.read_exact(&mut block)?;
        ends += block.iter().filter(|b| **b == b'\n').count();
        block.extend_from_slice(&bytes);
        bytes = block;
    }
    Ok((pos, bytes))
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
    /// This follow's place under the viewer's bound on live streams, freed when it ends.
    _slot: super::live::StreamSlot,
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
        .is_none_or(|j| j.job.released_at.is_some() || j.job.finished_at.is_some())
}

/// The most a follow reads from the log at once.
const FOLLOW_CHUNK: u64 = 1 << 20;

/// New whole lines since the offset, as text, or `None` when there are none.
async fn read_from(st: &mut Follow) -> Option<String> {
    let path = st.path.clone();
    let offset = st.offset;
    let (text, consumed) =
        tokio::task::spawn_blocking(move || -> std::io::Result<(String, u64)> {
            let mut f = std::fs::File::open(&path)?;
            f.seek(SeekFrom::Start(offset))?;
            // At most a chunk per read, so a log that grew by gigabytes streams in pieces.
            let mut bytes = Vec::new();
            f.take(FOLLOW_CHUNK).read_to_end(&mut bytes)?;
            let mut whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
            if whole == 0 && bytes.len() as u64 == FOLLOW_CHUNK {
                // One line longer than a chunk: pass it on in pieces rather than stall.
                whole = bytes.len();
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn log_of(lines: usize, partial: bool) -> (tempfile::TempDir, PathBuf, u64) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.log");
        let mut f = std::fs::File::create(&path).unwrap();
        for i in 0..lines {
            writeln!(f, "2026-12-01T00:00:00Z out line {i:07}").unwrap();
        }
        let whole = f.metadata().unwrap().len();
        if partial {
            write!(f, "2026-12-01T00:00:00Z out half-writ").unwrap();
        }
        (dir, path, whole)
    }

    #[test]
    fn a_tail_is_the_last_whole_lines_from_anywhere_in_the_file() {
        // 200,000 lines (about 7 MiB): the tail crosses many 64 KiB blocks only when asked to.
        let (_d, path, whole) = log_of(200_000, true);
        for n in [0usize, 1, 3, 1_000, 1_900, 5_000] {
            let (text, offset) = snapshot(&path, Some(n)).unwrap();
            let want: String = (200_000 - n..200_000)
                .map(|i| format!("line {i:07}\n"))
                .collect();
            assert_eq!(text, want, "tail {n}");
            assert_eq!(offset, whole, "following resumes after the last whole line");
        }
        let (all, offset) = snapshot(&path, None).unwrap();
        assert_eq!(all.lines().count(), 200_000);
        assert_eq!(offset, whole);
    }

    #[test]
    fn a_tail_longer_than_the_log_is_the_whole_log() {
        let (_d, path, whole) = log_of(10, false);
        let (text, offset) = snapshot(&path, Some(50)).unwrap();
        assert_eq!(text.lines().count(), 10);
        assert!(text.starts_with("line 0000000\n"));
        assert_eq!(offset, whole);
        let missing = path.with_file_name("none.log");
        assert_eq!(snapshot(&missing, Some(5)).unwrap(), (String::new(), 0));
    }
}
