//! Reading a job's log: the last lines, or a live tail that ends when the job does, or when its
//! viewer may no longer read it (disabled, or demoted from manager while following another
//! member's job). A follow wakes when this process's runner appends to the log, the job's end is
//! announced or a user is edited; it never polls the file or the database on a timer of its own.
//!
//! A log lives on the disk of the node that ran the job. Asked on another node, that node checks
//! the viewer's right to it and fetches it from the owning node (see [`crate::server::peers`]); a
//! lost node's log is refused with a message saying so, never answered empty.

use super::log_read::{self, check_tail, LogStream};
use crate::model::{AppError, AuditKind, JobChange, LiveEvent, NodeState, Role};
use crate::server::auth::CurrentUser;
use crate::server::db::{jobs, nodes, users};
use crate::server::error::OrInternal;
use crate::server::notifier::{Note, Subscription};
use crate::server::runner::logs::log_path;
use crate::server::Ctx;
use bytes::Bytes;
use futures_util::stream::{self, Stream, StreamExt};
use sqlx::PgPool;
use std::path::PathBuf;
use std::time::SystemTime;
use tokio::sync::broadcast;
use uuid::Uuid;

/// Where a job's log is read.
enum Source {
    /// In this node's log folder.
    Here(PathBuf),
    /// On node `node`, reached at `url`.
    There { node: String, url: String },
}

/// A job's log as it streams: its last `tail` lines, or (`None`) the whole log read from the file
/// a chunk at a time (see [`log_read`] for the bounds).
pub async fn read(
    ctx: &Ctx,
    viewer: &CurrentUser,
    id: Uuid,
    tail: Option<usize>,
) -> Result<LogStream, AppError> {
    check_tail(tail)?;
    match source(ctx, viewer, id).await?.0 {
        Source::Here(path) => read_here(ctx, viewer.id, path, tail).await,
        Source::There { node, url } => {
            let peers = ctx.peers.as_ref().ok_or(AppError::Internal)?;
            let answer = peers.log(&node, &url, id, viewer.id, tail, false).await?;
            Ok(relay(answer, ()))
        }
    }
}

/// The last `tail` lines of a job's log, as one text (the job's page).
pub async fn tail(
    ctx: &Ctx,
    viewer: &CurrentUser,
    id: Uuid,
    tail: usize,
) -> Result<String, AppError> {
    check_tail(Some(tail))?;
    let mut chunks = read(ctx, viewer, id, Some(tail)).await?;
    let mut text = Vec::new();
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| {
            AppError::Unavailable(format!("job {id}'s log broke off while being read: {e}"))
        })?;
        // A node answers at most a bounded tail; one that sends more is not believed.
        if (text.len() + chunk.len()) as u64 > 2 * log_read::MAX_TAIL_BYTES {
            return Err(AppError::Unavailable(format!(
                "job {id}'s log came back longer than a tail may be"
            )));
        }
        text.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&text).into_owned())
}

/// A log in this node's folder, under the bound on reads at once.
async fn read_here(
    ctx: &Ctx,
    user: Uuid,
    path: PathBuf,
    tail: Option<usize>,
) -> Result<LogStream, AppError> {
    let place = ctx.log_reads.enter(user).await?;
    match tail {
        None => Ok(log_read::whole(path, place)),
        Some(_) => {
            let text = snapshot_of(path, tail).await?.0;
            drop(place);
            Ok(stream::once(async move { Ok(Bytes::from(text)) }).boxed())
        }
    }
}

/// The body of another node's answer as it comes, holding `held` (a stream slot) until it ends;
/// an error ends the stream once told.
fn relay<T: Send + 'static>(answer: reqwest::Response, held: T) -> LogStream {
    stream::unfold(Some((answer, held)), |held| async move {
        let (mut answer, held) = held?;
        match answer.chunk().await {
            Ok(Some(bytes)) => Some((Ok(bytes), Some((answer, held)))),
            Ok(None) => None,
            Err(e) => Some((Err(std::io::Error::other(e)), None)),
        }
    })
    .boxed()
}

/// The last `tail` lines of a job's log (the whole log when `None`, streamed from the file), then
/// new lines as they come until the job has ended.
pub async fn follow(
    ctx: &Ctx,
    viewer: &CurrentUser,
    id: Uuid,
    tail: Option<usize>,
) -> Result<LogStream, AppError> {
    check_tail(tail)?;
    let (source, owner) = source(ctx, viewer, id).await?;
    let slot = ctx.streams.take(viewer)?;
    match source {
        Source::Here(path) => {
            let reader = Reader {
                viewer: viewer.id,
                owner,
            };
            follow_here(ctx, path, id, reader, tail, slot).await
        }
        Source::There { node, url } => {
            let peers = ctx.peers.as_ref().ok_or(AppError::Internal)?;
            let answer = peers.log(&node, &url, id, viewer.id, tail, true).await?;
            // The slot is held while the far node streams.
            Ok(relay(answer, slot))
        }
    }
}

/// A log asked for by another node for a viewer it vouches for with a grant (see
/// [`crate::server::peers`]): only a log this node holds, never forwarded again. Without
/// `follow`, the tail (or the whole log) alone.
pub async fn for_peer(
    ctx: &Ctx,
    id: Uuid,
    grant: Option<&str>,
    tail: Option<usize>,
    follow: bool,
) -> Result<LogStream, AppError> {
    let Some(peers) = &ctx.peers else {
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
    check_tail(tail)?;
    let job = super::find(&ctx.pool, id).await?;
    if job.job.node.as_deref() != Some(peers.node.as_str()) {
        return Err(AppError::NotFound(format!(
            "job {id} did not run on node `{}`",
            peers.node
        )));
    }
    let path = log_path(&ctx.logs_dir, id);
    if follow {
        let slot = ctx.streams.take_for(user)?;
        let reader = Reader {
            viewer: user,
            owner: job.owner_id,
        };
        follow_here(ctx, path, id, reader, tail, slot).await
    } else {
        read_here(ctx, user, path, tail).await
    }
}

/// Where the viewer reads job `id`'s log, when they may read it (its owner, managers and
/// admins), and the job's owner. Here when this process is alone, ran the job, or holds its log
/// file; otherwise on the job's node, unless that node is lost.
async fn source(ctx: &Ctx, viewer: &CurrentUser, id: Uuid) -> Result<(Source, Uuid), AppError> {
    let job = super::find(&ctx.pool, id).await?;
    let owner = job.owner_id;
    if !super::access::sees_details(viewer, owner) {
        return Err(AppError::Forbidden(
            "members read only their own jobs' logs".into(),
        ));
    }
    let path = log_path(&ctx.logs_dir, id);
    let (Some(peers), Some(node)) = (&ctx.peers, job.job.node) else {
        return Ok((Source::Here(path), owner));
    };
    if node == peers.node || tokio::fs::try_exists(&path).await.unwrap_or(false) {
        return Ok((Source::Here(path), owner));
    }
    let Some(row) = nodes::get(&ctx.pool, &node)
        .await
        .or_internal("reading a node")?
    else {
        // A node that never registered (a record older than nodes): what this node has.
        return Ok((Source::Here(path), owner));
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
    Ok((
        Source::There {
            node,
            url: row.advertise_url,
        },
        owner,
    ))
}

/// Who follows a log, and whose job it is: the follow lasts only while the viewer may read it.
#[derive(Debug, Clone, Copy)]
struct Reader {
    viewer: Uuid,
    owner: Uuid,
}

impl Reader {
    /// Whether the viewer may still read the log: their account is enabled, and they own the job
    /// or are a manager or an admin. An account that cannot be read ends the follow (a stream is
    /// not kept open on a guess), as it ends an event stream.
    async fn may_read(&self, pool: &PgPool) -> bool {
        let row = match users::active_by_id(pool, self.viewer).await {
            Ok(Some(row)) => row,
            Ok(None) => return false,
            Err(e) => {
                tracing::warn!(user = %self.viewer, error = %e, "log follow: cannot read its user again; ending it");
                return false;
            }
        };
        match row.role() {
            Ok(role) => self.viewer == self.owner || role.at_least(Role::Manager),
            Err(_) => false,
        }
    }
}

/// Follows a log in this node's folder from its last `tail` lines (for `reader`, who holds
/// `slot`), or from its start.
async fn follow_here(
    ctx: &Ctx,
    path: PathBuf,
    id: Uuid,
    reader: Reader,
    tail: Option<usize>,
    slot: crate::server::limits::StreamSlot,
) -> Result<LogStream, AppError> {
    // Listen before reading: an end announced in between is then heard, not lost.
    let notes = ctx.notifier.subscribe();
    let grew = ctx.notifier.subscribe_logs();
    // A tail is read whole before it is sent: it takes a place under the bound on reads.
    let place = match tail {
        Some(_) => Some(ctx.log_reads.enter(reader.viewer).await?),
        None => None,
    };
    let (text, offset) = snapshot_of(path.clone(), tail).await?;
    drop(place);
    let st = Follow {
        pool: ctx.pool.clone(),
        id,
        reader,
        path,
        offset,
        ended: false,
        checked: false,
        notes,
        grew,
        _slot: slot,
    };
    let first = stream::iter((!text.is_empty()).then_some(Ok::<_, std::io::Error>(text)));
    Ok(first
        .chain(follow_stream(st))
        .map(|chunk| chunk.map(Bytes::from))
        .boxed())
}

/// The last `tail` lines and where following continues; nothing (and the start) without a tail,
/// which a follow then reads from the file a chunk at a time.
async fn snapshot_of(path: PathBuf, tail: Option<usize>) -> Result<(String, u64), AppError> {
    let Some(n) = tail else {
        return Ok((String::new(), 0));
    };
    tokio::task::spawn_blocking(move || log_read::tail_of(&path, n))
        .await
        .or_internal("reading a log")?
        .or_internal("reading a log")
}

struct Follow {
    pool: PgPool,
    id: Uuid,
    reader: Reader,
    path: PathBuf,
    offset: u64,
    /// The job has ended: read once more, then stop.
    ended: bool,
    /// The database has been asked whether the job ended since the last possible gap.
    checked: bool,
    notes: Subscription,
    grew: broadcast::Receiver<Uuid>,
    /// This follow's place under the viewer's bound on live streams, freed when it ends.
    _slot: crate::server::limits::StreamSlot,
}

/// Why a follow woke up.
enum Wake {
    /// The log may have grown.
    Read,
    /// The job's end was announced.
    Ended,
    /// A notification may have been missed: ask the database.
    Check,
    /// A user was edited: the viewer may have been disabled or demoted.
    Viewer,
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
                if !st.reader.may_read(&st.pool).await {
                    return None;
                }
                continue;
            }
            match st.wait().await {
                Wake::Read => {}
                Wake::Ended => st.ended = true,
                Wake::Check => st.checked = false,
                Wake::Viewer if !st.reader.may_read(&st.pool).await => {
                    tracing::info!(job = %st.id, user = %st.reader.viewer, "log follow ended: its viewer may no longer read the log");
                    return None;
                }
                Wake::Viewer => {}
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
                    Note::Event(LiveEvent::Changed { what: AuditKind::UserUpdate, .. }) => {
                        return Wake::Viewer
                    }
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

/// New whole lines since the offset, at most a chunk of them, as text, or `None` when there are
/// none.
async fn read_from(st: &mut Follow) -> Option<String> {
    let path = st.path.clone();
    let offset = st.offset;
    let (text, consumed) = tokio::task::spawn_blocking(move || {
        let mut f = std::fs::File::open(&path)?;
        log_read::next_lines(&mut f, offset, u64::MAX)
    })
    .await
    .ok()?
    .ok()?;
    st.offset += consumed;
    (!text.is_empty()).then_some(text)
}
