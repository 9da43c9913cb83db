//! Job logs on disk: `<data-dir>/logs/<job>.log`, one line per container output line, prefixed by
//! dockerd's timestamp and the stream (`2026-11-29T09:00:00.123456789Z o text`). The prefix lets a
//! re-adopted job resume after the latest line written without writing one twice, and readers
//! strip it.

use crate::server::runtime::{LogLine, LogStream};
use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Appends a container's lines to its log file, up to a size cap.
pub struct LogWriter {
    file: std::fs::File,
    written: u64,
    cap: u64,
    /// The latest timestamp in the file when it was opened: where dockerd resends from.
    last_at: Option<String>,
    /// Lines already in the file that dockerd will send again (those of `last_at`'s second and
    /// later, as `"<at> <stream>"`): each is skipped once.
    resent: HashSet<String>,
    truncated: bool,
}

impl LogWriter {
    /// Opens (or continues) a job's log. A partial last line left by a crash is cut off, so the file
    /// always ends on a whole line, and the last timestamp tells where to resume.
    pub fn open(path: &Path, cap: u64) -> std::io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let existing = std::fs::read(path).unwrap_or_default();
        let whole = existing
            .iter()
            .rposition(|b| *b == b'\n')
            .map_or(0, |i| i + 1);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        file.set_len(whole as u64)?;
        // dockerd writes stdout and stderr from two copiers, so a file's lines are not always in
        // timestamp order: the latest one is the maximum, not the last line.
        let kept: Vec<&str> = existing[..whole]
            .split(|b| *b == b'\n')
            .filter_map(|l| std::str::from_utf8(l).ok())
            .filter(|l| !l.is_empty())
            .collect();
        let last_at = kept
            .iter()
            .filter_map(|l| l.split(' ').next())
            .max()
            .map(str::to_owned);
        let resent = match &last_at {
            Some(last) => {
                let second = &last[..last.len().min(SECOND)];
                kept.iter()
                    .filter(|l| l.get(..SECOND).is_some_and(|s| s >= second))
                    .filter_map(|l| {
                        let mut parts = l.splitn(3, ' ');
                        Some(resent_key(parts.next()?, parts.next()?))
                    })
                    .collect()
            }
            None => HashSet::new(),
        };
        let truncated = existing[..whole].ends_with(TRUNCATED.as_bytes());
        Ok(LogWriter {
            file,
            written: whole as u64,
            cap,
            last_at,
            resent,
            truncated,
        })
    }

    /// The timestamp of the last line kept: resume strictly after it.
    pub fn last_at(&self) -> Option<&str> {
        self.last_at.as_deref()
    }

    /// Appends one line unless the file already held it when opened (dockerd resends the whole
    /// second it resumes from) or the cap is reached (then a single marker line says so). Lines are
    /// kept in the order dockerd sends them, even when a stderr line arrives after a later-stamped
    /// stdout line.
    pub fn push(&mut self, line: &LogLine) -> std::io::Result<()> {
        let stream = match line.stream {
            LogStream::Stdout => 'o',
            LogStream::Stderr => 'e',
        };
        if !self.resent.is_empty() && self.resent.remove(&resent_key(&line.at, stream)) {
            return Ok(());
        }
        if self.truncated {
            return Ok(());
        }
        let text = line.text.trim_end_matches(['\n', '\r']);
        let record = format!("{} {stream} {text}\n", line.at);
        if self.written + record.len() as u64 > self.cap {
            self.truncated = true;
            let marker = format!("{} e {TRUNCATED}\n", line.at);
            self.file.write_all(marker.as_bytes())?;
            return Ok(());
        }
        self.file.write_all(record.as_bytes())?;
        self.written += record.len() as u64;
        Ok(())
    }
}

/// How a line already in the file is known again when dockerd resends it: its stamp and stream.
fn resent_key(at: &str, stream: impl std::fmt::Display) -> String {
    format!("{at} {stream}")
}

/// Length of a docker timestamp's whole-second prefix (`2026-01-01T00:00:01`).
const SECOND: usize = 19;

const TRUNCATED: &str = "[gpuq: log size limit reached; later lines were dropped]";

/// The whole-second Unix time of a docker timestamp, for dockerd's (inclusive) `since`.
pub fn since_unix(at: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(at)
        .ok()
        .map(|t| t.timestamp())
}

/// Path of a job's log.
pub fn log_path(dir: &Path, job: uuid::Uuid) -> PathBuf {
    dir.join(format!("{job}.log"))
}

/// The text of a stored log line (timestamp and stream stripped).
pub fn text_of(stored: &str) -> &str {
    stored.splitn(3, ' ').nth(2).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(at: &str, text: &str) -> LogLine {
        LogLine {
            stream: LogStream::Stdout,
            at: at.into(),
            text: text.into(),
        }
    }

    #[test]
    fn resumes_after_the_last_line_without_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j.log");
        let mut w = LogWriter::open(&p, 1 << 20).unwrap();
        w.push(&line("2026-01-01T00:00:01.000000001Z", "one\n"))
            .unwrap();
        w.push(&line("2026-01-01T00:00:01.000000002Z", "two"))
            .unwrap();
        drop(w);
        // A crash left half a line behind.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&p)
            .unwrap()
            .write_all(b"2026-01-01T00:00:0")
            .unwrap();
        let mut w = LogWriter::open(&p, 1 << 20).unwrap();
        assert_eq!(w.last_at(), Some("2026-01-01T00:00:01.000000002Z"));
        assert_eq!(since_unix(w.last_at().unwrap()), Some(1767225601));
        // Docker resends the whole second: the first two are skipped.
        for (at, t) in [
            ("2026-01-01T00:00:01.000000001Z", "one"),
            ("2026-01-01T00:00:01.000000002Z", "two"),
            ("2026-01-01T00:00:01.000000003Z", "three"),
        ] {
            w.push(&line(at, t)).unwrap();
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().map(text_of).collect();
        assert_eq!(lines, ["one", "two", "three"]);
    }

    #[test]
    fn a_stderr_line_stamped_before_the_last_stdout_line_is_kept() {
        // dockerd's stdout and stderr copiers can hand over lines out of timestamp order.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j.log");
        let mut w = LogWriter::open(&p, 1 << 20).unwrap();
        let mut two = line("2026-01-01T00:00:01.000000002Z", "two");
        two.stream = LogStream::Stderr;
        for l in [
            line("2026-01-01T00:00:01.000000001Z", "one"),
            line("2026-01-01T00:00:01.000000003Z", "three"),
            two.clone(),
        ] {
            w.push(&l).unwrap();
        }
        drop(w);
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().map(text_of).collect();
        assert_eq!(lines, ["one", "three", "two"]);
        // Resuming: the latest stamp, not the last line, is where dockerd resends from, and the
        // resent second adds nothing twice.
        let mut w = LogWriter::open(&p, 1 << 20).unwrap();
        assert_eq!(w.last_at(), Some("2026-01-01T00:00:01.000000003Z"));
        for l in [
            line("2026-01-01T00:00:01.000000001Z", "one"),
            two,
            line("2026-01-01T00:00:01.000000003Z", "three"),
            line("2026-01-01T00:00:02.000000001Z", "four"),
        ] {
            w.push(&l).unwrap();
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().map(text_of).collect();
        assert_eq!(lines, ["one", "three", "two", "four"]);
    }

    #[test]
    fn stops_at_the_cap_with_one_marker() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j.log");
        let mut w = LogWriter::open(&p, 100).unwrap();
        for i in 0..10 {
            w.push(&line(
                &format!("2026-01-01T00:00:01.00000000{i}Z"),
                "0123456789",
            ))
            .unwrap();
        }
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.lines().count() < 10);
        assert_eq!(text.matches("log size limit").count(), 1);
    }
}
