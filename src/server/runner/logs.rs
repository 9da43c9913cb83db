//! Job logs on disk: `<data-dir>/logs/<job>.log`, one line per container output line, prefixed by
//! dockerd's timestamp and the stream (`2026-11-29T09:00:00.123456789Z o text`). The prefix lets a
//! re-adopted job resume after the latest line written without writing one twice, and readers
//! strip it.

use crate::server::runtime::{json_log, LogLine, LogStream};
use std::collections::HashSet;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Appends a container's lines to its log file, up to a size cap that the file, the line saying
/// the output was cut included, never passes. It also stops at the end of dockerd's first file of
/// the job's output (see [`json_log`]): past it, dockerd may have rotated lines away unread.
pub struct LogWriter {
    file: std::fs::File,
    written: u64,
    cap: u64,
    /// What the lines read so far took in dockerd's file (never less than it wrote).
    docker_written: u64,
    /// dockerd's `max-size`: its first file ends there.
    docker_file: u64,
    /// The latest timestamp in the file when it was opened: where dockerd resends from.
    last_at: Option<String>,
    /// Lines already in the file that dockerd will send again (those of `last_at`'s second and
    /// later, as `"<at> <stream>"`): each is skipped once.
    resent: HashSet<String>,
    cut: bool,
}

impl LogWriter {
    /// Opens (or continues) a job's log. A partial last line left by a crash is cut off, so the file
    /// always ends on a whole line, and the last timestamp tells where to resume. Only the end of
    /// the file is read (a re-adopting runner opens every running job's log at once).
    pub fn open(path: &Path, cap: u64) -> std::io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        let (from, end) = read_end(path)?;
        let mut whole = end.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        if from > 0 && whole == 0 {
            // No line end in the window: a line longer than it was being written. Keep it.
            whole = end.len();
        }
        file.set_len(from + whole as u64)?;
        // Read from the middle of the file, the first line of the window may be cut: skip it.
        let first = match from {
            0 => 0,
            _ => end[..whole]
                .iter()
                .position(|b| *b == b'\n')
                .map_or(whole, |i| i + 1),
        };
        // dockerd writes stdout and stderr from two copiers, so a file's lines are not always in
        // timestamp order: the latest one is the maximum, not the last line.
        let kept: Vec<&str> = end[first..whole]
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
        let cut = kept
            .last()
            .is_some_and(|l| text_of(l).starts_with(CUT_PREFIX));
        let written = from + whole as u64;
        Ok(LogWriter {
            file,
            written,
            cap,
            docker_written: docker_estimate(&kept, written),
            docker_file: json_log::file_bytes(docker_cap(cap)),
            last_at,
            resent,
            cut,
        })
    }

    /// The timestamp of the last line kept: resume strictly after it.
    pub fn last_at(&self) -> Option<&str> {
        self.last_at.as_deref()
    }

    /// Whether the log reached its cap: it says so in its last line, takes no more lines, and the
    /// job's output need not be read any further.
    pub fn is_cut(&self) -> bool {
        self.cut
    }

    /// Appends one line unless the file already held it when opened (dockerd resends the whole
    /// second it resumes from) or the cap is reached (then a single line says the output was cut,
    /// within the cap). Lines are kept in the order dockerd sends them, even when a stderr line
    /// arrives after a later-stamped stdout line.
    pub fn push(&mut self, line: &LogLine) -> std::io::Result<()> {
        let stream = match line.stream {
            LogStream::Stdout => 'o',
            LogStream::Stderr => 'e',
        };
        if !self.resent.is_empty() && self.resent.remove(&resent_key(&line.at, stream)) {
            return Ok(());
        }
        if self.cut {
            return Ok(());
        }
        let text = line.text.trim_end_matches(['\n', '\r']);
        let record = format!("{} {stream} {text}\n", line.at);
        self.docker_written += json_log::line_len(&line.at, &line.text);
        // Room is kept for the line saying the output was cut, so the file never passes the cap.
        if self.written + record.len() as u64 + CUT_ROOM > self.cap {
            let marker = format!(
                "{} e {CUT_PREFIX} of {} bytes reached (--log-max-bytes): the rest of this \
                 job's output was cut and not read]\n",
                line.at, self.cap
            );
            return self.cut_with(&marker);
        }
        if self.docker_written > self.docker_file {
            let marker = format!(
                "{} e {CUT_PREFIX} reached: this job's output filled dockerd's copy ({} bytes of \
                 JSON, many escaped characters) first; the rest was cut and not read]\n",
                line.at, self.docker_file
            );
            return self.cut_with(&marker);
        }
        self.file.write_all(record.as_bytes())?;
        self.written += record.len() as u64;
        Ok(())
    }

    /// Ends the log with `marker`, the line saying why the rest of the output was cut.
    fn cut_with(&mut self, marker: &str) -> std::io::Result<()> {
        self.cut = true;
        self.file.write_all(marker.as_bytes())?;
        self.written += marker.len() as u64;
        Ok(())
    }
}

/// The cap dockerd's copy of a job's output is sized from ([`json_log::file_bytes`]): gpuq's cap,
/// within what a launch asks of dockerd.
pub fn docker_cap(cap: u64) -> u64 {
    cap.clamp(1024, 64 * 1024 * 1024)
}

/// What a log of `written` bytes whose last lines are `kept` (stored lines) took in dockerd's
/// file: exactly, when `kept` is the whole log; else in the same proportion as those lines (a log
/// reopened after a restart of the runner is read only at its end).
fn docker_estimate(kept: &[&str], written: u64) -> u64 {
    let (mut stored, mut docker) = (0u64, 0u64);
    for line in kept {
        let mut parts = line.splitn(3, ' ');
        let at = parts.next().unwrap_or("");
        stored += line.len() as u64 + 1;
        docker += json_log::line_len(at, parts.nth(1).unwrap_or(""));
    }
    if stored >= written || stored == 0 {
        return docker;
    }
    (docker as f64 * written as f64 / stored as f64) as u64
}

/// How much of a log's end [`LogWriter::open`] reads to find where to resume.
const RESUME_WINDOW: u64 = 1 << 20;

/// Where the last [`RESUME_WINDOW`] bytes of the file start, and those bytes (none when there is
/// no file).
fn read_end(path: &Path) -> std::io::Result<(u64, Vec<u8>)> {
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((0, Vec::new())),
        Err(e) => return Err(e),
    };
    let from = f.metadata()?.len().saturating_sub(RESUME_WINDOW);
    f.seek(SeekFrom::Start(from))?;
    let mut bytes = Vec::new();
    f.take(RESUME_WINDOW).read_to_end(&mut bytes)?;
    Ok((from, bytes))
}

/// How a line already in the file is known again when dockerd resends it: its stamp and stream.
fn resent_key(at: &str, stream: impl std::fmt::Display) -> String {
    format!("{at} {stream}")
}

/// Length of a docker timestamp's whole-second prefix (`2026-01-01T00:00:01`).
const SECOND: usize = 19;

/// How the line saying a log reached its cap begins (its earlier wording began the same way).
const CUT_PREFIX: &str = "[gpuq: log size limit";

/// Room kept under the cap for that line: its stamp, stream and words with the cap's digits.
const CUT_ROOM: u64 = 256;

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

    #[test]
    fn a_cut_log_stays_within_its_cap_says_so_and_stays_cut_when_reopened() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j.log");
        let cap = 4096;
        let mut w = LogWriter::open(&p, cap).unwrap();
        let mut i = 0;
        while !w.is_cut() {
            i += 1;
            let at = format!("2026-01-01T00:00:01.{i:09}Z");
            w.push(&line(&at, &"x".repeat(i % 97))).unwrap();
        }
        drop(w);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.len() as u64 <= cap, "{} bytes", text.len());
        let last = text.lines().last().map(text_of).unwrap();
        assert!(
            last.contains("of 4096 bytes reached") && last.contains("cut"),
            "{last}"
        );
        let mut w = LogWriter::open(&p, cap).unwrap();
        assert!(w.is_cut(), "a re-adopted job's cut log is not read again");
        w.push(&line("2026-01-01T00:00:09Z", "more")).unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), text);
    }

    #[test]
    fn output_dockerd_escapes_heavily_is_cut_at_the_end_of_dockerds_first_file() {
        // Lines of `<`, which dockerd writes as `\u003c`: its first file (3 × 4096 bytes) fills
        // before gpuq's 4096 bytes do, and the log stops there, saying why.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j.log");
        let cap = 4096;
        let mut w = LogWriter::open(&p, cap).unwrap();
        let mut docker = 0;
        let mut i = 0;
        while !w.is_cut() {
            i += 1;
            let l = line(&format!("2026-01-01T00:00:01.{i:09}Z"), &"<".repeat(60));
            docker += json_log::line_len(&l.at, &l.text);
            w.push(&l).unwrap();
        }
        assert!(
            docker > json_log::file_bytes(cap),
            "cut before dockerd's file was full"
        );
        assert!(
            docker - json_log::line_len("2026-01-01T00:00:01.000000001Z", &"<".repeat(60))
                <= json_log::file_bytes(cap),
            "read past dockerd's first file"
        );
        drop(w);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.len() < (cap - CUT_ROOM) as usize,
            "{} bytes",
            text.len()
        );
        let last = text.lines().last().map(text_of).unwrap();
        assert!(
            last.contains("filled dockerd's copy (12288 bytes"),
            "{last}"
        );
        // Reopened, it stays cut, and counts what dockerd holds as it did.
        let w = LogWriter::open(&p, cap).unwrap();
        assert!(w.is_cut());
    }

    #[test]
    fn a_reopened_log_knows_what_dockerds_file_holds() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j.log");
        let mut w = LogWriter::open(&p, 1 << 20).unwrap();
        for i in 0..1000u32 {
            w.push(&line(
                &format!("2026-01-01T00:00:01.{i:09}Z"),
                "a \"quoted\" line",
            ))
            .unwrap();
        }
        let counted = w.docker_written;
        drop(w);
        assert_eq!(
            LogWriter::open(&p, 1 << 20).unwrap().docker_written,
            counted
        );
    }

    #[test]
    fn resuming_a_long_log_reads_only_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("j.log");
        let mut w = LogWriter::open(&p, 64 << 20).unwrap();
        for i in 0..100_000u32 {
            let at = format!("2026-01-01T00:{:02}:{:02}.{i:09}Z", i / 6000, i / 100 % 60);
            w.push(&line(&at, "a line of some length")).unwrap();
        }
        drop(w);
        assert!(std::fs::metadata(&p).unwrap().len() > 2 * RESUME_WINDOW);
        let w = LogWriter::open(&p, 64 << 20).unwrap();
        assert_eq!(w.last_at(), Some("2026-01-01T00:16:39.000099999Z"));
        assert_eq!(
            w.resent.len(),
            100,
            "the lines of the last second are known again"
        );
        assert!(!w.is_cut());
    }
}
