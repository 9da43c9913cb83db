//! Reading a stored log without holding it in memory. A whole log streams from the file a chunk at
//! a time; a tail reads backwards from the end, never more than [`MAX_TAIL_LINES`] lines or
//! [`MAX_TAIL_BYTES`] bytes; and every read waits for a place under a bound on reads at once, per
//! process and per user ([`LogReads`]). gpuq is shielded from the OOM killer, so memory it takes
//! for reads is taken from the jobs: none of these may grow with the size of a log.

use crate::model::AppError;
use crate::server::runner::logs::text_of;
use bytes::Bytes;
use futures_util::stream::{self, BoxStream, StreamExt};
use std::collections::HashMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use uuid::Uuid;

/// The most lines a `tail` may ask for; past it the whole log is streamed by leaving `tail` out.
pub const MAX_TAIL_LINES: usize = 10_000;
/// The most bytes of the file a tail reads, from its end: a tail of long lines holds fewer lines.
pub const MAX_TAIL_BYTES: u64 = 4 << 20;
/// Log reads one user may have in progress at once, on one node.
pub const READS_PER_USER: usize = 4;
/// Log reads one node serves at once unless `--log-reads` says otherwise.
pub const DEFAULT_LOG_READS: usize = 16;
/// How long a read waits for a place when every place is taken, before it is refused.
const WAIT: Duration = Duration::from_secs(3);
/// The most of the file read (and held) at once by a streaming read or a follow.
pub(super) const CHUNK: u64 = 256 << 10;
/// The first line of a tail cut short by [`MAX_TAIL_BYTES`].
pub const TAIL_CUT: &str =
    "[gpuq: only the lines in the last 4 MiB of the log are shown; read it without `tail` for all]";

/// A log as it streams: text chunks, whole lines each (a forwarded one as the owning node sent it).
pub type LogStream = BoxStream<'static, std::io::Result<Bytes>>;

/// The bound on log reads (whole logs and tails) in progress on this node: `size` at once, of
/// which [`READS_PER_USER`] per user, so one member cannot take every place.
#[derive(Clone, Debug)]
pub struct LogReads {
    places: Arc<Semaphore>,
    size: usize,
    per_user: Arc<Mutex<HashMap<Uuid, usize>>>,
}

/// A place under [`LogReads`], held for as long as the read streams; dropping it frees it.
#[derive(Debug)]
pub struct ReadPlace {
    _place: OwnedSemaphorePermit,
    _mine: UserPlace,
}

#[derive(Debug)]
struct UserPlace {
    per_user: Arc<Mutex<HashMap<Uuid, usize>>>,
    user: Uuid,
}

impl Drop for UserPlace {
    fn drop(&mut self) {
        let mut held = self.per_user.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.user);
            }
        }
    }
}

impl Default for LogReads {
    fn default() -> Self {
        LogReads::new(DEFAULT_LOG_READS)
    }
}

impl LogReads {
    /// A bound of `size` reads at once (at least one).
    pub fn new(size: usize) -> Self {
        let size = size.max(1);
        LogReads {
            places: Arc::new(Semaphore::new(size)),
            size,
            per_user: Arc::default(),
        }
    }

    /// A place for a read by `user`: refused at once (429) when they have [`READS_PER_USER`] in
    /// progress, and (503) when no place frees up within a few seconds.
    pub async fn enter(&self, user: Uuid) -> Result<ReadPlace, AppError> {
        let mine = {
            let mut held = self.per_user.lock().unwrap_or_else(|e| e.into_inner());
            let n = held.entry(user).or_default();
            if *n >= READS_PER_USER {
                return Err(AppError::OverCap {
                    message: format!(
                        "you already have {READS_PER_USER} log reads in progress, the most one \
                         user may have at once; wait for one to end"
                    ),
                    retry_after_s: 1,
                });
            }
            *n += 1;
            UserPlace {
                per_user: Arc::clone(&self.per_user),
                user,
            }
        };
        match tokio::time::timeout(WAIT, Arc::clone(&self.places).acquire_owned()).await {
            Ok(Ok(place)) => Ok(ReadPlace {
                _place: place,
                _mine: mine,
            }),
            Ok(Err(_)) => Err(AppError::Internal),
            Err(_) => Err(AppError::Busy {
                message: format!(
                    "this node is serving {} log reads, the most it serves at once",
                    self.size
                ),
                retry_after_s: 2,
            }),
        }
    }
}

/// Refuses a `tail` longer than [`MAX_TAIL_LINES`], naming the field.
pub fn check_tail(tail: Option<usize>) -> Result<(), AppError> {
    match tail {
        Some(n) if n > MAX_TAIL_LINES => Err(AppError::invalid(
            "tail",
            format!(
                "{n} lines is more than the {MAX_TAIL_LINES} a tail may hold; leave `tail` out \
                 to stream the whole log"
            ),
        )),
        _ => Ok(()),
    }
}

/// The whole log at `path` as it is now (up to its last whole line), read a chunk at a time as
/// the client takes it, holding `place` until the stream ends or is dropped. A missing file is an
/// empty log.
pub fn whole(path: PathBuf, place: ReadPlace) -> LogStream {
    let st = Whole {
        path,
        file: None,
        offset: 0,
        end: 0,
        _place: place,
    };
    stream::unfold(Some(st), |st| async move {
        let st = st?;
        let step = tokio::task::spawn_blocking(move || {
            let mut st = st;
            st.next().map(|text| text.map(|t| (t, st)))
        })
        .await;
        match step {
            Ok(Ok(Some((text, st)))) => Some((Ok(Bytes::from(text)), Some(st))),
            Ok(Ok(None)) => None,
            Ok(Err(e)) => Some((Err(e), None)),
            Err(e) => Some((Err(std::io::Error::other(e)), None)),
        }
    })
    .boxed()
}

struct Whole {
    path: PathBuf,
    /// Opened on the first read; kept open, so a log removed meanwhile is still read whole.
    file: Option<File>,
    offset: u64,
    /// The file's length when it was opened: lines written later belong to a follow.
    end: u64,
    _place: ReadPlace,
}

impl Whole {
    /// The next chunk of text, or `None` at the end.
    fn next(&mut self) -> std::io::Result<Option<String>> {
        if self.file.is_none() {
            let f = match File::open(&self.path) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(e),
            };
            self.end = f.metadata()?.len();
            self.file = Some(f);
        }
        let Some(f) = self.file.as_mut() else {
            return Ok(None);
        };
        if self.offset >= self.end {
            return Ok(None);
        }
        let (text, consumed) = next_lines(f, self.offset, self.end)?;
        self.offset += consumed;
        Ok((consumed > 0).then_some(text))
    }
}

/// The whole lines from `offset` (not past `end`), at most [`CHUNK`] bytes of the file, as text;
/// and how many bytes of the file they took. A line longer than a chunk is passed on in pieces
/// rather than stall.
pub(super) fn next_lines(f: &mut File, offset: u64, end: u64) -> std::io::Result<(String, u64)> {
    let want = CHUNK.min(end.saturating_sub(offset));
    f.seek(SeekFrom::Start(offset))?;
    let mut bytes = Vec::with_capacity(want as usize);
    f.by_ref().take(want).read_to_end(&mut bytes)?;
    let mut whole = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    if whole == 0 && bytes.len() as u64 == CHUNK {
        whole = bytes.len();
    }
    let mut out = String::with_capacity(whole);
    for l in String::from_utf8_lossy(&bytes[..whole]).lines() {
        out.push_str(text_of(l));
        out.push('\n');
    }
    Ok((out, whole as u64))
}

/// The text of the last `n` whole lines in the last [`MAX_TAIL_BYTES`] of the log (after a
/// [`TAIL_CUT`] line when fewer than `n` fit), and the byte offset where following continues.
/// Reads backwards from the end a block at a time, so its cost follows the lines asked for, not
/// the size of the log. A missing file is an empty log.
pub(super) fn tail_of(path: &Path, n: usize) -> std::io::Result<(String, u64)> {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((String::new(), 0)),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len();
    let (start, bytes, cut) = read_last_lines(&mut f, len, n)?;
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
    let skip = lines.len().saturating_sub(n);
    let mut out = String::new();
    if cut {
        out.push_str(TAIL_CUT);
        out.push('\n');
    }
    for l in &lines[skip..] {
        out.push_str(text_of(l));
        out.push('\n');
    }
    Ok((out, start + whole as u64))
}

/// Reads whole blocks backwards from the end until the bytes hold more than `n` line ends (so at
/// least `n` whole lines after the first, possibly cut, one), the file's start, or
/// [`MAX_TAIL_BYTES`]. Returns where the bytes start in the file, the bytes, and whether the byte
/// bound stopped it short of `n` lines.
fn read_last_lines(f: &mut File, len: u64, n: usize) -> std::io::Result<(u64, Vec<u8>, bool)> {
    const BLOCK: u64 = 64 * 1024;
    let floor = len.saturating_sub(MAX_TAIL_BYTES);
    let mut pos = len;
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    let mut ends = 0usize;
    while pos > floor && ends <= n {
        let step = BLOCK.min(pos - floor);
        pos -= step;
        f.seek(SeekFrom::Start(pos))?;
        let mut block = vec![0u8; step as usize];
        f.read_exact(&mut block)?;
        ends += block.iter().filter(|b| **b == b'\n').count();
        blocks.push(block);
    }
    let cut = pos > 0 && ends <= n;
    blocks.reverse();
    Ok((pos, blocks.concat(), cut))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn log_of(lines: usize, partial: bool) -> (tempfile::TempDir, PathBuf, u64) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.log");
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        for i in 0..lines {
            writeln!(f, "2026-12-01T00:00:00Z out line {i:07}").unwrap();
        }
        if partial {
            write!(f, "2026-12-01T00:00:00Z out half-writ").unwrap();
        }
        f.flush().unwrap();
        let whole = (lines * "2026-12-01T00:00:00Z out line 0000000\n".len()) as u64;
        (dir, path, whole)
    }

    async fn read_whole(path: &Path) -> String {
        let place = LogReads::new(1).enter(Uuid::nil()).await.unwrap();
        let chunks: Vec<_> = whole(path.to_owned(), place).collect().await;
        let mut text = String::new();
        for c in chunks {
            let c = c.unwrap();
            assert!(c.len() as u64 <= CHUNK, "one chunk at a time");
            text.push_str(std::str::from_utf8(&c).unwrap());
        }
        text
    }

    #[test]
    fn a_tail_is_the_last_whole_lines_from_anywhere_in_the_file() {
        // 200,000 lines (about 7 MiB): the tail crosses many 64 KiB blocks only when asked to.
        let (_d, path, whole) = log_of(200_000, true);
        for n in [0usize, 1, 3, 1_000, 1_900, 5_000] {
            let (text, offset) = tail_of(&path, n).unwrap();
            let want: String = (200_000 - n..200_000)
                .map(|i| format!("line {i:07}\n"))
                .collect();
            assert_eq!(text, want, "tail {n}");
            assert_eq!(offset, whole, "following resumes after the last whole line");
        }
    }

    #[test]
    fn a_tail_longer_than_the_log_is_the_whole_log() {
        let (_d, path, whole) = log_of(10, false);
        let (text, offset) = tail_of(&path, 50).unwrap();
        assert_eq!(text.lines().count(), 10);
        assert!(text.starts_with("line 0000000\n"));
        assert_eq!(offset, whole);
        let missing = path.with_file_name("none.log");
        assert_eq!(tail_of(&missing, 5).unwrap(), (String::new(), 0));
    }

    #[test]
    fn a_tail_of_long_lines_stops_at_the_byte_bound_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("job.log");
        let line = format!("2026-12-01T00:00:00Z o {}\n", "x".repeat(16 * 1024));
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        for _ in 0..1_000 {
            f.write_all(line.as_bytes()).unwrap();
        }
        f.flush().unwrap();
        let (text, _) = tail_of(&path, MAX_TAIL_LINES).unwrap();
        assert!(text.len() as u64 <= MAX_TAIL_BYTES, "{} bytes", text.len());
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(TAIL_CUT));
        assert!(lines.all(|l| l.len() == 16 * 1024));
        // A tail that fits says nothing of the kind.
        let (text, _) = tail_of(&path, 3).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert!(!text.contains(TAIL_CUT));
    }

    #[test]
    fn a_tail_past_the_most_lines_is_refused_naming_the_field() {
        assert!(check_tail(Some(MAX_TAIL_LINES)).is_ok() && check_tail(None).is_ok());
        let e = check_tail(Some(usize::MAX)).unwrap_err();
        assert_eq!(e.field(), Some("tail"), "{e}");
        assert_eq!(e.status(), 400);
    }

    #[tokio::test]
    async fn a_whole_log_streams_in_chunks_as_it_was_when_opened() {
        let (_d, path, _) = log_of(200_000, true);
        let text = read_whole(&path).await;
        let want: String = (0..200_000).map(|i| format!("line {i:07}\n")).collect();
        assert_eq!(
            text, want,
            "every whole line once, in order, the half-written one left out"
        );
        assert_eq!(read_whole(&path.with_file_name("none.log")).await, "");
    }

    #[tokio::test]
    async fn reads_past_the_bounds_are_refused_until_places_free_up() {
        let reads = LogReads::new(2);
        let (alice, bob) = (Uuid::new_v4(), Uuid::new_v4());
        let per_user = LogReads::new(100);
        let mut held = Vec::new();
        for _ in 0..READS_PER_USER {
            held.push(per_user.enter(alice).await.unwrap());
        }
        let e = per_user.enter(alice).await.unwrap_err();
        assert_eq!((e.status(), e.retry_after_s()), (429, Some(1)), "{e}");
        assert!(
            per_user.enter(bob).await.is_ok(),
            "another user still reads"
        );
        held.pop();
        assert!(
            per_user.enter(alice).await.is_ok(),
            "a place freed is taken again"
        );

        let a = reads.enter(alice).await.unwrap();
        let _b = reads.enter(bob).await.unwrap();
        let e = reads.enter(Uuid::new_v4()).await.unwrap_err();
        assert_eq!((e.status(), e.retry_after_s()), (503, Some(2)), "{e}");
        drop(a);
        assert!(reads.enter(Uuid::new_v4()).await.is_ok());
    }
}
