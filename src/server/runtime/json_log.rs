//! dockerd's own copy of a job's output (its `json-file` log driver), sized so that gpuq's log can
//! always hold the first `--log-max-bytes` of the output.
//!
//! The runner reads a job's output from dockerd as the job prints it. dockerd writes each line as a
//! JSON object (`{"log":"…\n","stream":"stdout","time":"…"}`), about 40 bytes more than gpuq's own
//! line and more again for characters JSON escapes. Were dockerd's file capped at gpuq's cap, it
//! would be full before gpuq's log is and be truncated (with one file, dockerd truncates it in
//! place) under a runner still reading it: a fast printer's output then jumps from one line to a
//! much later one. So:
//!
//! - dockerd's file holds [`FACTOR`] times gpuq's cap, enough for any ordinary output (lines of
//!   digits, the worst ordinary case, take 2.1 times their size in gpuq's log);
//! - dockerd keeps [`FILES`] files, so a full file is renamed, not truncated: a reader that has it
//!   open reads it to its end, however far the job has printed meanwhile;
//! - the runner counts what each line it reads took in dockerd's file ([`line_len`], never less
//!   than dockerd wrote) and stops reading at the end of dockerd's first file (see
//!   `runner::logs::LogWriter`), so it never reads on into a later file it may have lost part of.
//!
//! dockerd's copy of one job's output is thus at most `FILES × FACTOR × cap`, and goes with the
//! job's container.

/// dockerd's `max-size` per file, as a multiple of gpuq's cap on a job's log.
pub const FACTOR: u64 = 3;

/// dockerd's `max-file`: files of a container's log it keeps.
pub const FILES: u64 = 2;

/// dockerd's `max-size` for a job whose log gpuq caps at `cap` bytes.
pub fn file_bytes(cap: u64) -> u64 {
    cap.saturating_mul(FACTOR)
}

/// The `{"log":"`, `\n`, `","stream":"stdout","time":"`, `"}` and newline around a line in
/// dockerd's file (`stderr` is as long as `stdout`).
const FRAME: u64 = 8 + 2 + 28 + 2 + 1;

/// At least the bytes dockerd's json-file driver wrote for a line stamped `at` (the API's fixed-width
/// stamp, never shorter than the one in the file) holding `text` (without its newline, as gpuq read
/// it).
pub fn line_len(at: &str, text: &str) -> u64 {
    FRAME + at.len() as u64 + text.chars().map(escaped_len).sum::<u64>()
}

/// Bytes dockerd's JSON encoder writes for one character, or more, never fewer.
fn escaped_len(c: char) -> u64 {
    match c {
        '"' | '\\' | '\n' | '\r' => 2,
        // `\u003c` and the like: dockerd escapes these for HTML, and other control characters
        // (a tab too) as `\u00XX`.
        '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => 6,
        c if (c as u32) < 0x20 => 6,
        // gpuq reads invalid UTF-8 as U+FFFD, one per invalid sequence of up to 3 bytes; dockerd
        // writes `\ufffd` for each byte.
        '\u{fffd}' => 18,
        c => c.len_utf8() as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AT: &str = "2026-11-29T09:00:00.123456789Z";

    #[test]
    fn a_line_is_counted_as_dockerd_writes_it() {
        // What dockerd 20.10 wrote for `echo 'a "b" <c>'` and `printf 'x\ty\rz\n'` (the time as
        // the API gives it).
        let written = format!(
            "{{\"log\":\"a \\\"b\\\" \\u003cc\\u003e\\n\",\"stream\":\"stdout\",\"time\":\"{AT}\"}}\n"
        );
        assert_eq!(line_len(AT, "a \"b\" <c>"), written.len() as u64);
        let written =
            format!("{{\"log\":\"x\\u0009y\\rz\\n\",\"stream\":\"stdout\",\"time\":\"{AT}\"}}\n");
        assert_eq!(line_len(AT, "x\ty\rz"), written.len() as u64);
        let empty = format!("{{\"log\":\"\\n\",\"stream\":\"stderr\",\"time\":\"{AT}\"}}\n");
        assert_eq!(line_len(AT, ""), empty.len() as u64);
    }

    #[test]
    fn ordinary_output_fits_dockerds_file_before_gpuqs_cap() {
        // gpuq's stored line: stamp, stream letter, text, newline.
        let gpuq = |text: &str| (AT.len() + 3 + text.len() + 1) as u64;
        for text in [
            "",
            "1",
            "12345",
            "epoch 3 step 1200 loss 0.4412",
            "{\"step\": 1, \"loss\": 0.5, \"lr\": 0.001}",
            "\tindented\twith\ttabs",
        ] {
            let ratio = line_len(AT, text) as f64 / gpuq(text) as f64;
            assert!(ratio < FACTOR as f64, "{text:?}: {ratio}");
        }
    }
}
