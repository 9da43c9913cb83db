//! The judging, as pure functions of one reading and the time, so that it can be tested
//! exhaustively: what a reading says of a job, how a job's track follows, and when it is flagged,
//! cleared or stopped.

use crate::model::IdleAction;
use chrono::{DateTime, Duration, TimeZone, Utc};
use std::collections::VecDeque;

/// Readings a track keeps: its short history, newest last (what [`super::Engine::tracked`] shows
/// of a job; the verdicts need only the times in the track).
pub const HISTORY: usize = 64;

/// What one reading says of one job's cards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// A process of the job was at or above the threshold; the newest such sample's time.
    Busy(DateTime<Utc>),
    /// It has processes on its cards, all below the threshold.
    Quiet,
    /// No process of it on its cards.
    NoProcess,
    /// Nothing is known (samples unsupported or unreadable on one of its cards, a failed
    /// reading): never counted as idle.
    Unknown,
}

/// The launch policy's idle rules, in the units the judging uses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rules {
    /// `idle_action`.
    pub action: IdleAction,
    /// `idle_after_min`.
    pub after: Duration,
    /// `idle_sm_percent`: a sample below it is quiet.
    pub sm_percent: u32,
    /// `idle_grace_min`.
    pub grace: Duration,
}

impl Rules {
    /// From the launch policy's minutes (fractions allowed).
    pub fn new(action: IdleAction, after_min: f64, sm_percent: u32, grace_min: f64) -> Self {
        Rules {
            action,
            after: minutes(after_min),
            sm_percent,
            grace: minutes(grace_min),
        }
    }
}

/// `min` minutes as a duration, to the millisecond.
fn minutes(min: f64) -> Duration {
    Duration::milliseconds((min.max(0.0) * 60_000.0).round() as i64)
}

/// A sample's NVML timestamp (microseconds since the epoch) as a time.
pub fn sample_time(at_us: u64) -> DateTime<Utc> {
    let us = i64::try_from(at_us).unwrap_or(i64::MAX);
    Utc.timestamp_micros(us)
        .single()
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// What the engine remembers of one job.
#[derive(Debug, Clone, PartialEq)]
pub struct Track {
    /// Its last activity: the newest busy sample, an unknown reading, or the first reading.
    pub last_active: DateTime<Utc>,
    /// Since when it has had no process on its cards (`None` while it has some).
    pub no_process_since: Option<DateTime<Utc>>,
    /// When it was flagged, while it is.
    pub flagged_at: Option<DateTime<Utc>>,
    /// A stop was asked for.
    pub stopped: bool,
    /// Its last readings, newest last, at most [`HISTORY`].
    pub history: VecDeque<(DateTime<Utc>, Seen)>,
}

/// What the engine must do about one job after a reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing.
    Nothing,
    /// Flag it: quiet since `quiet_since`.
    Flag {
        /// Its last activity.
        quiet_since: DateTime<Utc>,
    },
    /// A flagged job got busy again.
    Clear,
    /// Stop it.
    Stop {
        /// Its last activity.
        quiet_since: DateTime<Utc>,
    },
}

impl Track {
    /// A job first read at `now`.
    pub fn new(now: DateTime<Utc>) -> Self {
        Track {
            last_active: now,
            no_process_since: None,
            flagged_at: None,
            stopped: false,
            history: VecDeque::new(),
        }
    }

    /// Takes one reading at `now`.
    pub fn see(&mut self, now: DateTime<Utc>, seen: Seen) {
        match seen {
            // A sample stamped after the reading (clock skew) counts as now.
            Seen::Busy(at) => self.last_active = self.last_active.max(at.min(now)),
            Seen::Unknown => self.last_active = now,
            Seen::Quiet | Seen::NoProcess => {}
        }
        if seen == Seen::NoProcess {
            self.no_process_since.get_or_insert(now);
        } else {
            self.no_process_since = None;
        }
        self.history.push_back((now, seen));
        while self.history.len() > HISTORY {
            self.history.pop_front();
        }
    }

    /// Whether it has been idle for the rules' window at `now`.
    pub fn idle(&self, rules: &Rules, now: DateTime<Utc>) -> bool {
        now - self.last_active >= rules.after
    }

    /// When a flagged job will be stopped under `stop` (unless it gets busy).
    pub fn stop_at(&self, rules: &Rules) -> Option<DateTime<Utc>> {
        (rules.action == IdleAction::Stop)
            .then_some(self.flagged_at)
            .flatten()
            .map(|f| f + rules.grace)
    }

    /// What to do at `now` (after [`Track::see`]); the track is updated as if it were done.
    /// An exempt job, or any job under `off`, is never flagged, and loses a flag it had.
    pub fn decide(&mut self, rules: &Rules, exempt: bool, now: DateTime<Utc>) -> Verdict {
        if self.stopped {
            return Verdict::Nothing;
        }
        let judged = rules.action != IdleAction::Off && !exempt;
        match self.flagged_at {
            None if judged && self.idle(rules, now) => {
                self.flagged_at = Some(now);
                Verdict::Flag {
                    quiet_since: self.last_active,
                }
            }
            Some(_) if !judged || !self.idle(rules, now) => {
                self.flagged_at = None;
                Verdict::Clear
            }
            Some(_) if self.stop_at(rules).is_some_and(|at| now >= at) => {
                self.stopped = true;
                Verdict::Stop {
                    quiet_since: self.last_active,
                }
            }
            _ => Verdict::Nothing,
        }
    }
}

/// The reason a job stopped for idling ends with.
pub fn reason(rules: &Rules, no_process: bool, quiet_since: DateTime<Utc>) -> String {
    let what = if no_process {
        "no process on its cards".to_owned()
    } else {
        format!("no process above {} % SM", rules.sm_percent)
    };
    format!(
        "idle: {what} since {} ({} min), stopped {} min after the warning",
        quiet_since.format("%Y-%m-%d %H:%M:%S UTC"),
        fmt_min(rules.after),
        fmt_min(rules.grace)
    )
}

/// Minutes as the policy wrote them (`30`, `0.1`).
fn fmt_min(d: Duration) -> String {
    let m = d.num_milliseconds() as f64 / 60_000.0;
    let s = format!("{m:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
#[path = "judge_tests.rs"]
mod tests;
