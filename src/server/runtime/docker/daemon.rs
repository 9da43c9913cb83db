//! When the dockerd behind a unix socket started, so that a container killed by a restart of the
//! daemon can be told from one that was stopped. Read from the host, not from Docker's API (which
//! does not say): the socket's peer (`SO_PEERCRED`), or dockerd's pid file when systemd handed it
//! the socket, and that process's start time in `/proc`. `None` whenever the host does not say
//! for sure (another pid namespace, a peer that is not dockerd): callers then fall back on what
//! they saw themselves.

use chrono::{DateTime, Utc};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// The default sockets, behind which dockerd's default pid file names the daemon.
const DEFAULT_SOCKETS: [&str; 2] = ["/var/run/docker.sock", "/run/docker.sock"];
const DEFAULT_PID_FILE: &str = "/var/run/docker.pid";

/// The start time of the dockerd serving `socket`, if this host can tell; an error when nothing
/// takes a connection there (a daemon going down has closed its socket before it stops its
/// containers).
pub(super) fn started_at(socket: &Path) -> std::io::Result<Option<DateTime<Utc>>> {
    let stream = UnixStream::connect(socket)?;
    let peer = nix::sys::socket::getsockopt(&stream, nix::sys::socket::sockopt::PeerCredentials)
        .ok()
        .map(|c| c.pid());
    // Under socket activation the peer is systemd (the socket's creator), not dockerd.
    let pid_file = DEFAULT_SOCKETS
        .iter()
        .any(|s| Path::new(s) == socket)
        .then(|| std::fs::read_to_string(DEFAULT_PID_FILE).ok())
        .flatten()
        .and_then(|p| p.trim().parse::<i32>().ok());
    Ok([peer, pid_file]
        .into_iter()
        .flatten()
        .filter(|pid| *pid > 0)
        .find(|pid| is_dockerd(*pid))
        .and_then(process_started_at))
}

fn is_dockerd(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "dockerd")
}

/// A process's start: boot time (`btime` of `/proc/stat`) plus its `starttime` (field 22 of
/// `/proc/<pid>/stat`, in clock ticks since boot).
fn process_started_at(pid: i32) -> Option<DateTime<Utc>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let ticks = start_ticks(&stat)?;
    let boot: i64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|hz| *hz > 0)?;
    let millis = i64::try_from(ticks).ok()?.checked_mul(1000)? / hz;
    DateTime::from_timestamp(boot, 0)?.checked_add_signed(chrono::Duration::milliseconds(millis))
}

/// Field 22 of a `/proc/<pid>/stat` line. The second field (the command, in parentheses) may hold
/// spaces and parentheses itself, so fields are counted after its last `)`.
fn start_ticks(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts with field 3 (the state); field 22 is the 20th from there.
    rest.split_whitespace().nth(19)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_field_is_counted_after_the_command() {
        let stat = "4242 (my (odd) cmd) S 1 4242 4242 0 -1 4194560 900 0 0 0 12 3 0 0 20 0 \
                    11 0 987654 123456789 4000 18446744073709551615";
        assert_eq!(start_ticks(stat), Some(987654));
        assert_eq!(start_ticks("4242 (x) S 1"), None);
    }

    #[test]
    fn this_process_started_before_now_and_after_boot() {
        let me = i32::try_from(std::process::id()).unwrap();
        let at = process_started_at(me).unwrap();
        let now = Utc::now();
        assert!(at <= now + chrono::Duration::seconds(1), "{at} vs {now}");
        assert!(now - at < chrono::Duration::days(2), "{at}");
    }
}
