use super::*;

fn t(s: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_700_000_000 + s, 0).unwrap()
}

/// 30 min window, 5 %, 30 min grace.
fn rules(action: IdleAction) -> Rules {
    Rules::new(action, 30.0, 5, 30.0)
}

/// Feeds one reading a minute from `from` (seconds) for `mins` minutes, returning the verdicts
/// that were not `Nothing`, with their minute.
fn run(
    track: &mut Track,
    rules: &Rules,
    from: i64,
    mins: i64,
    seen: impl Fn(DateTime<Utc>) -> Seen,
) -> Vec<(i64, Verdict)> {
    let mut out = Vec::new();
    for m in 0..mins {
        let now = t(from + m * 60);
        track.see(now, seen(now));
        let v = track.decide(rules, false, now);
        if v != Verdict::Nothing {
            out.push(((from + m * 60) / 60, v));
        }
    }
    out
}

#[test]
fn a_quiet_job_is_flagged_after_the_window_and_stopped_after_the_grace() {
    let r = rules(IdleAction::Stop);
    let mut track = Track::new(t(0));
    let verdicts = run(&mut track, &r, 0, 70, |_| Seen::Quiet);
    assert_eq!(
        verdicts,
        vec![
            (30, Verdict::Flag { quiet_since: t(0) }),
            (60, Verdict::Stop { quiet_since: t(0) })
        ]
    );
    assert!(track.stopped);
    assert_eq!(track.stop_at(&r), Some(t(3600)));
}

#[test]
fn a_job_without_a_process_is_flagged_and_stopped_too() {
    let r = rules(IdleAction::Stop);
    let mut track = Track::new(t(0));
    let verdicts = run(&mut track, &r, 0, 61, |_| Seen::NoProcess);
    assert_eq!(verdicts.len(), 2, "{verdicts:?}");
    assert_eq!(track.no_process_since, Some(t(0)));
    let why = reason(&r, true, t(0));
    assert!(why.starts_with("idle: no process on its cards"), "{why}");
    assert!(reason(&r, false, t(0)).starts_with("idle: no process above 5 % SM"));
}

#[test]
fn a_bursty_job_is_never_flagged() {
    // Busy, then five quiet minutes of data loading, then busy: over and over for five hours.
    let r = rules(IdleAction::Stop);
    let mut track = Track::new(t(0));
    let verdicts = run(&mut track, &r, 0, 300, |now| {
        let minute = (now - t(0)).num_minutes();
        if minute % 15 < 5 {
            Seen::Quiet
        } else {
            Seen::Busy(now)
        }
    });
    assert_eq!(verdicts, Vec::new());
    assert!(!track.stopped);
}

#[test]
fn activity_during_the_grace_clears_the_flag_and_the_clock_starts_again() {
    let r = rules(IdleAction::Stop);
    let mut track = Track::new(t(0));
    run(&mut track, &r, 0, 31, |_| Seen::Quiet);
    assert!(track.flagged_at.is_some());
    // A sample at minute 40, seen at minute 41 (samples carry their own time).
    let now = t(41 * 60);
    track.see(now, Seen::Busy(t(40 * 60)));
    assert_eq!(track.decide(&r, false, now), Verdict::Clear);
    assert_eq!(track.flagged_at, None);
    // Quiet again: flagged 30 min after that sample, not after the reading.
    let verdicts = run(&mut track, &r, 42 * 60, 40, |_| Seen::Quiet);
    assert_eq!(
        verdicts[0],
        (
            70,
            Verdict::Flag {
                quiet_since: t(40 * 60)
            }
        )
    );
}

#[test]
fn unknown_readings_are_never_idle() {
    let r = rules(IdleAction::Stop);
    let mut track = Track::new(t(0));
    let verdicts = run(&mut track, &r, 0, 200, |_| Seen::Unknown);
    assert_eq!(verdicts, Vec::new());
    // Unknown in the middle of a quiet spell restarts the clock.
    let mut track = Track::new(t(0));
    run(&mut track, &r, 0, 20, |_| Seen::Quiet);
    track.see(t(20 * 60), Seen::Unknown);
    let verdicts = run(&mut track, &r, 21 * 60, 29, |_| Seen::Quiet);
    assert_eq!(
        verdicts,
        Vec::new(),
        "the window counts from the unknown reading"
    );
}

#[test]
fn warn_flags_but_never_stops_and_off_or_exempt_never_flag() {
    let warn = rules(IdleAction::Warn);
    let mut track = Track::new(t(0));
    let verdicts = run(&mut track, &warn, 0, 600, |_| Seen::Quiet);
    assert_eq!(verdicts, vec![(30, Verdict::Flag { quiet_since: t(0) })]);
    assert_eq!(track.stop_at(&warn), None);

    let off = rules(IdleAction::Off);
    let mut track = Track::new(t(0));
    assert_eq!(run(&mut track, &off, 0, 600, |_| Seen::Quiet), Vec::new());

    let stop = rules(IdleAction::Stop);
    let mut track = Track::new(t(0));
    for m in 0..200 {
        let now = t(m * 60);
        track.see(now, Seen::NoProcess);
        assert_eq!(track.decide(&stop, true, now), Verdict::Nothing);
    }
    // Turned off (or made exempt) while flagged: the flag goes.
    let mut track = Track::new(t(0));
    run(&mut track, &stop, 0, 31, |_| Seen::Quiet);
    assert!(track.flagged_at.is_some());
    assert_eq!(track.decide(&off, false, t(32 * 60)), Verdict::Clear);
}

#[test]
fn the_history_is_bounded_and_fractional_minutes_are_kept() {
    let r = Rules::new(IdleAction::Stop, 0.1, 5, 0.05);
    assert_eq!(r.after, Duration::seconds(6));
    assert_eq!(r.grace, Duration::seconds(3));
    assert!(reason(&r, false, t(0)).contains("(0.1 min), stopped 0.05 min after"));
    let mut track = Track::new(t(0));
    for s in 0..200 {
        track.see(t(s), Seen::Quiet);
    }
    assert_eq!(track.history.len(), HISTORY);
    assert_eq!(track.history.back().map(|h| h.0), Some(t(199)));
    assert_eq!(sample_time(1_700_000_000_000_000), t(0));
}
