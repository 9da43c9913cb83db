//! The `job-uids` check: the uids (and gids) gpuq gives jobs must belong to nobody else on this
//! host: no account in `/etc/passwd` or group in `/etc/group`, and no range handed out for user
//! namespaces in `/etc/subuid` and `/etc/subgid` (rootless containers, podman, systemd-nspawn).
//! A job running as a uid some account or container also has owns that one's files, and theirs.
//! With dockerd's `userns-remap`, a job's uid must also fit the remapped range, which it does not.

use super::Check;
use crate::server::db::job_uids::JobUidRange;

const NAME: &str = "job-uids";

/// One owner of ids on this host that overlaps the job range: where it is written and what.
#[derive(Debug, PartialEq, Eq)]
pub struct Clash {
    /// The file it is written in.
    pub file: &'static str,
    /// The entry, as `name uid` or `name first-last`.
    pub entry: String,
}

/// The entries of `text` (an `/etc/passwd` or `/etc/group`: `name:x:ID:…`) whose id is in `range`.
fn accounts(file: &'static str, text: &str, range: JobUidRange) -> Vec<Clash> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let id: u32 = f.nth(1)?.trim().parse().ok()?;
            (range.first..=range.last).contains(&id).then(|| Clash {
                file,
                entry: format!("{name} {id}"),
            })
        })
        .collect()
}

/// The ranges of `text` (an `/etc/subuid` or `/etc/subgid`: `name:FIRST:COUNT`) that overlap
/// `range`.
fn sub_ranges(file: &'static str, text: &str, range: JobUidRange) -> Vec<Clash> {
    text.lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let first: u64 = f.next()?.trim().parse().ok()?;
            let count: u64 = f.next()?.trim().parse().ok()?;
            let last = (first + count).checked_sub(1)?;
            let overlaps = first <= u64::from(range.last) && last >= u64::from(range.first);
            overlaps.then(|| Clash {
                file,
                entry: format!("{name} {first}-{last}"),
            })
        })
        .collect()
}

/// Every clash of `range` with the host's account and subordinate-id files, read by `read`.
pub fn clashes(range: JobUidRange, read: impl Fn(&str) -> Option<String>) -> Vec<Clash> {
    let mut out = Vec::new();
    for (file, sub) in [
        ("/etc/passwd", false),
        ("/etc/group", false),
        ("/etc/subuid", true),
        ("/etc/subgid", true),
    ] {
        if let Some(text) = read(file) {
            if sub {
                out.extend(sub_ranges(file, &text, range));
            } else {
                out.extend(accounts(file, &text, range));
            }
        }
    }
    out
}

/// The check on this host's files, and on dockerd's user namespaces (`userns_remap`, when Docker
/// answered).
pub(super) fn job_uids(range: JobUidRange, userns_remap: Option<bool>) -> Check {
    let shown = format!("{}-{}", range.first, range.last);
    if userns_remap == Some(true) {
        return Check::fail(
            NAME,
            format!(
                "dockerd remaps user namespaces (userns-remap): a job's uid must fall inside the \
                 remapped range (usually 65536 ids), and jobs' uids {shown} do not, so their \
                 containers cannot start"
            ),
            "turn userns-remap off for the dockerd gpuq uses (jobs already run as uids of their \
             own, never root), or give gpuq a dockerd of its own without it",
        );
    }
    let found = clashes(range, |f| std::fs::read_to_string(f).ok());
    if found.is_empty() {
        return Check::pass(
            NAME,
            format!("jobs' uids {shown} belong to no account, group or subordinate id range here"),
        );
    }
    let listed: Vec<String> = found
        .iter()
        .take(5)
        .map(|c| format!("{} in {}", c.entry, c.file))
        .collect();
    let more = found.len().saturating_sub(5);
    Check::warn(
        NAME,
        format!(
            "jobs' uids {shown} are also given here: {}{}; a job would own their files",
            listed.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ),
        "set --job-uid-range (GPUQ_JOB_UID_RANGE) to ids nothing else on this host uses, \
         before the first job runs (ids already given stay given)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const RANGE: JobUidRange = JobUidRange {
        first: 200_000,
        last: 299_999,
    };

    #[test]
    fn accounts_and_subordinate_ranges_inside_the_job_range_clash() {
        let files = |f: &str| {
            Some(
                match f {
                    "/etc/passwd" => {
                        "root:x:0:0::/root:/bin/sh\nbob:x:250000:250000::/home/bob:/bin/sh\n"
                    }
                    "/etc/group" => "root:x:0:\nlab:x:299999:\n",
                    // The second user's rootless range, as useradd hands them out.
                    "/etc/subuid" => "alice:100000:65536\ncarol:165536:65536\n",
                    "/etc/subgid" => "alice:100000:65536\n",
                    _ => return None,
                }
                .to_string(),
            )
        };
        let found = clashes(RANGE, files);
        let entries: Vec<(&str, &str)> = found.iter().map(|c| (c.file, c.entry.as_str())).collect();
        assert_eq!(
            entries,
            vec![
                ("/etc/passwd", "bob 250000"),
                ("/etc/group", "lab 299999"),
                ("/etc/subuid", "carol 165536-231071"),
            ]
        );
    }

    #[test]
    fn ranges_that_only_touch_the_edges_do_not_clash() {
        let files = |f: &str| {
            Some(
                match f {
                    "/etc/subuid" => "a:100000:100000\nb:300000:65536\nbad line\nc:x:1\n",
                    "/etc/passwd" => "nobody:x:65534:65534::/:/bin/false\n",
                    _ => return None,
                }
                .to_string(),
            )
        };
        assert_eq!(clashes(RANGE, files), vec![]);
        let c = super::job_uids(RANGE, Some(false));
        assert!(c.detail.contains("200000-299999"));
    }

    #[test]
    fn a_dockerd_that_remaps_user_namespaces_fails_the_check() {
        let c = super::job_uids(JobUidRange::default(), Some(true));
        assert_eq!(c.status, super::super::Status::Fail);
        assert!(c.detail.contains("userns-remap"), "{}", c.detail);
    }
}
