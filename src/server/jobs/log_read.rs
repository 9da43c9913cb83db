//! Reading a stored log without holding it in memory. A whole log streams from the file a chunk at
//! a time; a tail reads backwards from the end, never more than [`MAX_TAIL_LINES`] lines or
//! [`MAX_TAIL_BYTES`] bytes; and every read waits for a place under a bound on reads at once, per
//! process and per user ([`crate::server::limits::LogReads`]). gpuq is shielded from the OOM killer, so memory it takes
//! for reads is taken from the jobs: none of these may grow with the size of a log.

use crate::model::AppError;
use crate::server::limits::ReadPlace;
use crate::server::runner::logs::text_of;
use bytes::Bytes;
use futures_util::stream::{self, BoxStream, StreamExt};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The most lines a `tail` may ask for; past it the whole log is streamed by leaving `tail` out.
pub const MAX_TAIL_LINES: usize = 10_000;
/// The most bytes of the file a tail reads, from its end: a tail of long lines holds fewer lines.
pub const MAX_TAIL_BYTES: u64 = 4 << 20;
/// The most of the file read (and held) at once by a streaming read or a follow.
pub(super) const CHUNK: u64 = 256 << 10;
/// The first line of a tail cut short by [`MAX_TAIL_BYTES`].
pub const TAIL_CUT: &str =
    "[gpuq: only the lines in the last 4 MiB of the log are shown; read it without `tail` for all]";

/// A log as it streams: text chunks, whole lines each (a forwarded one as the owning node sent it).
pub type LogStream = BoxStream<'static, std::io::Result<Bytes>>;

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
    use crate::server::limits::LogReads;
    use std::io::Write;
    use uuid::Uuid;

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
}
