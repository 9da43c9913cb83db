//! Reading a job's log: the last lines, or a live tail that ends when the job does.

use crate::model::{AppError, Role};
use crate::server::auth::CurrentUser;
use crate::server::db::jobs;
use crate::server::http::OrInternal;
use crate::server::runner::logs::{log_path, text_of};
use crate::server::AppState;
use axum::body::Body;
use futures_util::stream::{self, Stream};
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::time::Duration;
use uuid::Uuid;

/// A job's log as a body: the last `tail` lines (all when `None`), then, with `follow`, new lines
/// as they come until the job has ended.
pub async fn read(
    state: &AppState,
    viewer: &CurrentUser,
    id: Uuid,
    tail: Option<usize>,
    follow: bool,
) -> Result<Body, AppError> {
    let job = jobs::get(&state.pool, id)
        .await
        .or_internal("reading a job")?
        .ok_or_else(|| AppError::NotFound(format!("no job {id}")))?;
    if job.owner_id != viewer.id && !viewer.role.at_least(Role::Manager) {
        return Err(AppError::Forbidden(
            "members read only their own jobs' logs".into(),
        ));
    }
    let path = log_path(&state.logs_dir, id);
    let (text, offset) = tokio::task::spawn_blocking({
        let path = path.clone();
        move || snapshot(&path, tail)
    })
    .await
    .or_internal("reading a log")?
    .or_internal("reading a log")?;
    if !follow {
        return Ok(Body::from(text));
    }
    let first = stream::once(async move { Ok::<_, std::io::Error>(text) });
    Ok(Body::from_stream(futures_util::StreamExt::chain(
        first,
        follow_stream(state.pool.clone(), id, path, offset),
    )))
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
    pool: sqlx::PgPool,
    id: Uuid,
    path: PathBuf,
    offset: u64,
    ended: bool,
}

fn follow_stream(
    pool: sqlx::PgPool,
    id: Uuid,
    path: PathBuf,
    offset: u64,
) -> impl Stream<Item = Result<String, std::io::Error>> + Send {
    let state = Follow {
        pool,
        id,
        path,
        offset,
        ended: false,
    };
    stream::unfold(state, |mut st| async move {
        loop {
            if let Some(chunk) = read_from(&mut st).await {
                return Some((Ok(chunk), st));
            }
            if st.ended {
                return None;
            }
            // Read once more after the job ended: the runner writes the last lines before it
            // records the end.
            st.ended = jobs::get(&st.pool, st.id)
                .await
                .ok()
                .flatten()
                .is_none_or(|j| j.released_at.is_some() || j.finished_at.is_some());
            if !st.ended {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    })
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
