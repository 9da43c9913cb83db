//! The table's own shape, every statement's move against it, and the scan that keeps every write
//! of `jobs.status` in this module.

use super::*;
use std::path::Path;

/// Every statement's declared move and the actors that call it.
fn statements() -> Vec<(Move, &'static [Actor])> {
    vec![
        (enter::ENTER, &[Actor::Owner]),
        (place::ADMIT, &[Actor::Scheduler]),
        (place::UNRUNNABLE, &[Actor::Scheduler, Actor::Runner]),
        (place::NODE_FORGOTTEN, &[Actor::Admin]),
        (place::NODE_LOST_REQUEUE, &[Actor::Scheduler]),
        (run::CLAIM, &[Actor::Runner]),
        (run::RUNNING, &[Actor::Runner]),
        (run::UNCLAIM, &[Actor::Runner]),
        (run::FINISH, &[Actor::Runner]),
        (stop::CANCEL_UNSTARTED, &[Actor::Owner, Actor::Admin]),
        (stop::CANCEL_ADMITTED, &[Actor::Owner, Actor::Admin]),
        (stop::REQUEUE_ADMITTED, &[Actor::Admin, Actor::Scheduler]),
        (
            depend::DEPENDENCY_BROKEN,
            &[Actor::Owner, Actor::Admin, Actor::Scheduler],
        ),
    ]
}

#[test]
fn every_statement_is_allowed_for_its_callers_and_refused_to_everyone_else() {
    let everyone = [Actor::Owner, Actor::Admin, Actor::Scheduler, Actor::Runner];
    for (mv, callers) in statements() {
        for by in everyone {
            let ok = permit(&mv, by).is_ok();
            assert_eq!(ok, callers.contains(&by), "{} by {by:?}", mv.name);
        }
    }
}

#[test]
fn every_transition_in_the_table_is_made_by_some_statement() {
    for t in TRANSITIONS {
        for &by in t.by {
            let made = statements()
                .iter()
                .any(|(mv, callers)| callers.contains(&by) && mv.pairs().contains(&(t.from, t.to)));
            assert!(made, "{:?} → {} by {by:?} has no statement", t.from, t.to);
        }
    }
}

#[test]
fn the_table_has_no_way_out_of_an_end_and_every_status_is_reachable() {
    for t in TRANSITIONS {
        if let Some(from) = t.from {
            assert!(
                !from.is_terminal(),
                "{from} is an end, yet {from} → {}",
                t.to
            );
        }
        assert!(!t.by.is_empty() && !t.when.is_empty());
    }
    let mut seen = vec![None];
    while let Some(next) = TRANSITIONS
        .iter()
        .find(|t| seen.contains(&t.from) && !seen.contains(&Some(t.to)))
    {
        seen.push(Some(next.to));
    }
    for s in JobStatus::ALL {
        assert!(seen.contains(&Some(*s)), "{s} cannot be reached");
    }
}

#[test]
fn a_refusal_names_the_actor_and_the_change() {
    let e = permit(&stop::CANCEL_UNSTARTED, Actor::Runner).unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("Runner") && text.contains("cancelled"),
        "{text}"
    );
    assert!(permit(&place::ADMIT, Actor::Owner).is_err());
    assert!(permit(&run::FINISH, Actor::Admin).is_err());
}

#[test]
fn the_guard_lists_exactly_the_moves_from_statuses() {
    assert_eq!(
        run::FINISH.guard("status"),
        "status IN ('starting', 'running')"
    );
    assert_eq!(place::ADMIT.guard("j.status"), "j.status IN ('queued')");
}

/// Lines of `text` (1-based) holding a statement that writes `jobs.status`: an `INSERT INTO jobs`
/// or an `UPDATE jobs … SET` whose SET list names `status`.
fn status_writes(text: &str) -> Vec<usize> {
    let lower = text.to_ascii_lowercase();
    let line_of = |at: usize| lower[..at].matches('\n').count() + 1;
    let mut found = Vec::new();
    for (at, _) in lower.match_indices("insert into jobs") {
        let next = lower[at + "insert into jobs".len()..].chars().next();
        if matches!(next, Some(' ' | '(' | '\n' | '\\')) {
            found.push(line_of(at));
        }
    }
    for (at, _) in lower.match_indices("update jobs") {
        let rest = &lower[at..];
        // The SET list: up to the WHERE, RETURNING or the end of the string literal.
        let end = ["where", "returning", "\")"]
            .iter()
            .filter_map(|w| rest.find(w))
            .min()
            .unwrap_or(rest.len().min(800));
        let Some(set) = rest[..end].find(" set ") else {
            continue;
        };
        let list = &rest[set..end];
        let writes = list.match_indices("status").any(|(i, _)| {
            let before = list[..i].chars().last();
            let after = list[i + "status".len()..].trim_start();
            !matches!(before, Some(c) if c.is_ascii_alphanumeric() || c == '_')
                && after.starts_with('=')
        });
        if writes {
            found.push(line_of(at));
        }
    }
    found
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("reading src/") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_scan_catches_a_planted_write_and_passes_what_only_reads() {
    let planted =
        "sqlx::query(\"UPDATE jobs SET priority = 1, status = 'queued' WHERE id = $1\")\n\
                   sqlx::query(\"UPDATE jobs j SET status='failed' FROM t WHERE j.id = t.id\")\n\
                   sqlx::query(\"INSERT INTO jobs (owner_id, status) VALUES ($1, 'queued')\")";
    assert_eq!(status_writes(planted), vec![3, 1, 2]);
    let benign = "sqlx::query(\"UPDATE jobs SET status_reason = $2, stop_status = 1 WHERE status = 'queued'\")\n\
                  sqlx::query(\"INSERT INTO job_events (job_id) VALUES ($1)\")";
    assert!(status_writes(benign).is_empty());
}

#[test]
fn only_the_lifecycle_module_writes_a_jobs_status() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let home = src.join("server/db/lifecycle");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() > 100,
        "the scan found only {} files",
        files.len()
    );
    let mut offenders = Vec::new();
    for f in files.iter().filter(|f| !f.starts_with(&home)) {
        let text = std::fs::read_to_string(f).expect("reading a source file");
        for line in status_writes(&text) {
            offenders.push(format!("{}:{line}", f.display()));
        }
    }
    assert!(
        offenders.is_empty(),
        "jobs.status is written outside server::db::lifecycle: {offenders:?}"
    );
    // The module itself is seen by the same scan (it is not blind to its own statements).
    let mut own = Vec::new();
    rust_files(&home, &mut own);
    let writes: usize = own
        .iter()
        .map(|f| status_writes(&std::fs::read_to_string(f).expect("reading")).len())
        .sum();
    assert!(
        writes >= 8,
        "the scan saw only {writes} writes in the lifecycle module"
    );
}
