//! The time range of a usage request: parsed once, checked against the retention.

use crate::model::AppError;
use chrono::{DateTime, Duration, NaiveDate, NaiveDateTime, Utc};

/// The range used when none is given.
pub const DEFAULT_SPAN: Duration = Duration::hours(24);

/// A checked range `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// Start (inclusive).
    pub from: DateTime<Utc>,
    /// End (exclusive).
    pub to: DateTime<Utc>,
}

impl Range {
    /// Parses `from` and `to` as the page and the API send them:
    /// - empty: `to` is `now`, `from` is 24 h before `to`;
    /// - `now`, or relative to now: `-30m`, `-6h`, `-7d` (units `s`, `m`, `h`, `d`);
    /// - RFC 3339 (`2025-01-31T08:00:00Z`, any offset);
    /// - `2025-01-31T08:00`, `2025-01-31 08:00:00` or `2025-01-31`, read as UTC.
    ///
    /// Refuses, naming the field, text it cannot read, `from` not before `to`, and a range longer
    /// than the retention (those samples are gone, and the answer would be misleading).
    pub fn parse(
        from: &str,
        to: &str,
        now: DateTime<Utc>,
        retention: Duration,
    ) -> Result<Range, AppError> {
        let to = match to.trim() {
            "" => now,
            text => instant(text, now).ok_or_else(|| unreadable("to", text))?,
        };
        let from = match from.trim() {
            "" => to - DEFAULT_SPAN,
            text => instant(text, now).ok_or_else(|| unreadable("from", text))?,
        };
        if from >= to {
            return Err(AppError::invalid("from", "from must be before to"));
        }
        if to - from > retention {
            return Err(AppError::invalid(
                "from",
                format!(
                    "the range is longer than the {} h samples are kept; choose a later from",
                    retention.num_hours()
                ),
            ));
        }
        Ok(Range { from, to })
    }

    /// Length in whole seconds (at least 1).
    pub fn seconds(&self) -> i64 {
        (self.to - self.from).num_seconds().max(1)
    }
}

fn unreadable(field: &str, text: &str) -> AppError {
    AppError::invalid(
        field,
        format!(
            "`{text}` is not a time: use RFC 3339 (2025-01-31T08:00:00Z), 2025-01-31T08:00 (UTC), \
             now, or a time relative to now such as -6h or -7d"
        ),
    )
}

fn instant(text: &str, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if text == "now" {
        return Some(now);
    }
    if let Some(rel) = text.strip_prefix('-') {
        return Some(now - relative(rel)?);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&Utc));
    }
    for format in [
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%d %H:%M:%S",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(text, format) {
            return Some(t.and_utc());
        }
    }
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
}

fn relative(text: &str) -> Option<Duration> {
    let unit = text.chars().last()?;
    let n: i64 = text[..text.len() - unit.len_utf8()].parse().ok()?;
    if n < 0 {
        return None;
    }
    match unit {
        's' => Duration::try_seconds(n),
        'm' => Duration::try_minutes(n),
        'h' => Duration::try_hours(n),
        'd' => Duration::try_days(n),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 3, 1, 12, 0, 0).unwrap()
    }

    fn parse(from: &str, to: &str) -> Result<Range, AppError> {
        Range::parse(from, to, now(), Duration::hours(720))
    }

    #[test]
    fn empty_means_the_last_day() {
        let r = parse("", "").unwrap();
        assert_eq!(r.to, now());
        assert_eq!(r.from, now() - Duration::hours(24));
    }

    #[test]
    fn relative_and_absolute_forms_are_read() {
        assert_eq!(
            parse("-6h", "now").unwrap().from,
            now() - Duration::hours(6)
        );
        assert_eq!(parse("-7d", "").unwrap().from, now() - Duration::days(7));
        assert_eq!(
            parse("-90m", "").unwrap().from,
            now() - Duration::minutes(90)
        );
        let r = parse("2025-03-01T08:00:00+02:00", "2025-03-01T10:00").unwrap();
        assert_eq!(r.from, Utc.with_ymd_and_hms(2025, 3, 1, 6, 0, 0).unwrap());
        assert_eq!(r.to, Utc.with_ymd_and_hms(2025, 3, 1, 10, 0, 0).unwrap());
        assert_eq!(
            parse("2025-02-28", "").unwrap().from,
            Utc.with_ymd_and_hms(2025, 2, 28, 0, 0, 0).unwrap()
        );
    }

    #[test]
    fn bad_ranges_name_their_field() {
        assert_eq!(parse("yesterday", "").unwrap_err().field(), Some("from"));
        assert_eq!(parse("", "-3x").unwrap_err().field(), Some("to"));
        assert_eq!(parse("-1h", "-2h").unwrap_err().field(), Some("from"));
        assert_eq!(parse("now", "now").unwrap_err().field(), Some("from"));
        let long = parse("-31d", "").unwrap_err();
        assert_eq!(long.field(), Some("from"));
        assert!(long.to_string().contains("720 h"), "{long}");
        assert!(parse("-30d", "").is_ok());
    }
}
