//! Other people's strings (job names, owners, commands, logs, error messages) are printed to the
//! user's terminal; a string carrying escape sequences could recolour the screen, rewrite earlier
//! lines, set the window title, or plant a hyperlink or clipboard write. So control characters are
//! removed before printing, unless `--raw` asks for the bytes as they are.

/// `text` without terminal control: escape sequences (CSI, OSC, DCS and the like) are dropped
/// whole; other C0 and C1 controls, DEL and the Unicode direction overrides are dropped. Newlines
/// and tabs stay.
pub fn strip_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\n' | '\t' => out.push(c),
            '\u{1b}' => skip_escape(&mut chars),
            // C1 CSI, DCS, OSC, SOS, PM, APC: their payload goes too.
            '\u{9b}' => skip_csi(&mut chars),
            '\u{90}' | '\u{9d}' | '\u{98}' | '\u{9e}' | '\u{9f}' => skip_string(&mut chars),
            c if is_dropped(c) => {}
            c => out.push(c),
        }
    }
    out
}

/// Control characters and the invisible direction overrides ("Trojan Source").
fn is_dropped(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

type Chars<'a> = std::iter::Peekable<std::str::Chars<'a>>;

/// After ESC: the rest of the sequence.
fn skip_escape(chars: &mut Chars<'_>) {
    match chars.next() {
        Some('[') => skip_csi(chars),
        Some(']' | 'P' | 'X' | '^' | '_') => skip_string(chars),
        // ESC + intermediates (0x20–0x2F) + one final character.
        Some(c) if ('\u{20}'..='\u{2f}').contains(&c) => {
            while chars
                .next_if(|c| ('\u{20}'..='\u{2f}').contains(c))
                .is_some()
            {}
            chars.next();
        }
        _ => {}
    }
}

/// A control sequence: parameters and intermediates, then one final byte (0x40–0x7E).
fn skip_csi(chars: &mut Chars<'_>) {
    for c in chars.by_ref() {
        if ('\u{40}'..='\u{7e}').contains(&c) {
            return;
        }
    }
}

/// A string command (OSC, DCS, …): up to BEL, ST (ESC \) or C1 ST.
fn skip_string(chars: &mut Chars<'_>) {
    while let Some(c) = chars.next() {
        match c {
            '\u{7}' | '\u{9c}' => return,
            '\u{1b}' => {
                chars.next_if_eq(&'\\');
                return;
            }
            _ => {}
        }
    }
}

/// A writer that strips control characters from what passes through it (for streamed logs). A
/// sequence split across two writes is held back until it is complete.
pub struct StripWriter<W: std::io::Write> {
    inner: W,
    pending: Vec<u8>,
}

impl<W: std::io::Write> StripWriter<W> {
    /// Wraps `inner`.
    pub fn new(inner: W) -> Self {
        StripWriter {
            inner,
            pending: Vec::new(),
        }
    }
}

impl<W: std::io::Write> std::io::Write for StripWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.pending.extend_from_slice(buf);
        // Hold back an incomplete UTF-8 character or escape sequence at the end (up to 4 KiB).
        let mut cut = match std::str::from_utf8(&self.pending) {
            Ok(_) => self.pending.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.pending.len(),
        };
        if let Some(esc) = self.pending[..cut].iter().rposition(|&b| b == 0x1b) {
            let tail = &self.pending[esc..cut];
            let complete = tail.len() > 1
                && (tail.contains(&0x07)
                    || tail.windows(2).any(|w| w == b"\x1b\\")
                    || (tail[1] == b'[' && tail[2..].iter().any(|b| (0x40..=0x7e).contains(b)))
                    || !matches!(tail[1], b'[' | b']' | b'P' | b'X' | b'^' | b'_'));
            if !complete && cut - esc < 4096 {
                cut = esc;
            }
        }
        let text = String::from_utf8_lossy(&self.pending[..cut]).into_owned();
        self.inner.write_all(strip_controls(&text).as_bytes())?;
        self.pending.drain(..cut);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<W: std::io::Write> Drop for StripWriter<W> {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            let text = String::from_utf8_lossy(&self.pending).into_owned();
            let _ = self.inner.write_all(strip_controls(&text).as_bytes());
            let _ = self.inner.flush();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn escapes_and_controls_go_text_stays() {
        assert_eq!(strip_controls("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(strip_controls("\x1b[31mred\x1b[0m"), "red");
        assert_eq!(strip_controls("a\x1b]0;pwned title\x07b"), "ab");
        assert_eq!(
            strip_controls("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\"),
            "link"
        );
        assert_eq!(strip_controls("x\x1b[2J\x1b[Hy"), "xy");
        assert_eq!(strip_controls("over\rwrite\x08\x7f"), "overwrite");
        assert_eq!(strip_controls("c1\u{9b}31mcsi"), "c1csi");
        assert_eq!(strip_controls("ab\u{202e}cd"), "abcd");
        assert_eq!(strip_controls("ünïcødé 日本"), "ünïcødé 日本");
        assert_eq!(strip_controls("\x1b(Bcharset"), "charset");
    }

    #[test]
    fn a_sequence_split_across_writes_is_still_removed() {
        let mut out = Vec::new();
        {
            let mut w = StripWriter::new(&mut out);
            w.write_all(b"line one \x1b[3").unwrap();
            w.write_all(b"1mred\x1b]0;ti").unwrap();
            w.write_all(b"tle\x07 end\n").unwrap();
        }
        assert_eq!(String::from_utf8(out).unwrap(), "line one red end\n");
    }
}
