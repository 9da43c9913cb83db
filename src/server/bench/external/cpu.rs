//! CPU time of the processes a container passes through, from `/proc` (Linux only): the gpuq
//! server (given by PID), dockerd and containerd (found by name), every Postgres process, this
//! bench, and the whole machine (which also holds what no column names: `containerd-shim`, `runc`,
//! the kernel's work for them, and anything else that ran).

use std::collections::HashMap;
use std::fs;

/// `/proc` counts CPU time in USER_HZ ticks, which Linux fixes at 100 per second for user space.
const TICKS_PER_S: f64 = 100.0;

/// The processes to watch.
pub(super) struct Watched {
    server: Option<u32>,
    dockerd: Option<u32>,
    containerd: Option<u32>,
}

impl Watched {
    /// The server's PID as given, dockerd and containerd by their names.
    pub(super) fn find(server: Option<u32>) -> Self {
        Watched {
            server,
            dockerd: pids_named("dockerd").into_iter().next(),
            containerd: pids_named("containerd").into_iter().next(),
        }
    }

    /// CPU seconds used so far by each.
    pub(super) fn sample(&self) -> Sample {
        Sample {
            server: self.server.and_then(cpu_seconds),
            dockerd: self.dockerd.and_then(cpu_seconds),
            containerd: self.containerd.and_then(cpu_seconds),
            postgres: pids_named("postgres")
                .into_iter()
                .filter_map(|p| cpu_seconds(p).map(|s| (p, s)))
                .collect(),
            bench: cpu_seconds(std::process::id()).unwrap_or_default(),
            machine: machine_busy_seconds().unwrap_or_default(),
        }
    }
}

/// CPU seconds used so far.
pub(super) struct Sample {
    server: Option<f64>,
    dockerd: Option<f64>,
    containerd: Option<f64>,
    postgres: HashMap<u32, f64>,
    bench: f64,
    machine: f64,
}

/// CPU seconds used between two samples (`None`: the process was not found).
#[derive(Debug, Clone, Copy)]
pub(super) struct Used {
    pub server: Option<f64>,
    pub dockerd: Option<f64>,
    pub containerd: Option<f64>,
    /// Every Postgres process: those that ended in between are missing, new ones count whole.
    pub postgres: f64,
    pub bench: f64,
    pub machine: f64,
}

impl Sample {
    /// What was used from `self` to `later`.
    pub(super) fn until(&self, later: &Sample) -> Used {
        let diff = |a: Option<f64>, b: Option<f64>| Some(b? - a?);
        Used {
            server: diff(self.server, later.server),
            dockerd: diff(self.dockerd, later.dockerd),
            containerd: diff(self.containerd, later.containerd),
            postgres: later
                .postgres
                .iter()
                .map(|(pid, s)| s - self.postgres.get(pid).copied().unwrap_or_default())
                .sum(),
            bench: later.bench - self.bench,
            machine: later.machine - self.machine,
        }
    }
}

impl Used {
    /// Nothing used yet.
    pub(super) fn zero() -> Used {
        Used {
            server: Some(0.0),
            dockerd: Some(0.0),
            containerd: Some(0.0),
            postgres: 0.0,
            bench: 0.0,
            machine: 0.0,
        }
    }

    /// Both windows together.
    pub(super) fn plus(&self, other: &Used) -> Used {
        let sum = |a: Option<f64>, b: Option<f64>| Some(a? + b?);
        Used {
            server: sum(self.server, other.server),
            dockerd: sum(self.dockerd, other.dockerd),
            containerd: sum(self.containerd, other.containerd),
            postgres: self.postgres + other.postgres,
            bench: self.bench + other.bench,
            machine: self.machine + other.machine,
        }
    }

    /// The figures in column order: server, dockerd, containerd, Postgres, bench, machine.
    pub(super) fn columns(&self) -> [Option<f64>; 6] {
        [
            self.server,
            self.dockerd,
            self.containerd,
            Some(self.postgres),
            Some(self.bench),
            Some(self.machine),
        ]
    }
}

/// Column heads matching [`Used::columns`].
pub(super) const HEADS: [&str; 6] = [
    "gpuq server",
    "dockerd",
    "containerd",
    "postgres",
    "this bench",
    "whole machine",
];

/// PIDs whose command name (`/proc/<pid>/comm`) is exactly `name`, lowest first.
fn pids_named(name: &str) -> Vec<u32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid: &u32| {
            fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim_end() == name)
        })
        .collect();
    pids.sort_unstable();
    pids
}

/// utime + stime of one process, in seconds.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// Fields 14 and 15 of `/proc/<pid>/stat`; the command name (field 2) may hold spaces and
/// parentheses, so counting starts after its last `)`.
fn parse_stat(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) as f64 / TICKS_PER_S)
}

/// Busy time of all CPUs together (everything but idle and iowait), in seconds.
fn machine_busy_seconds() -> Option<f64> {
    let stat = fs::read_to_string("/proc/stat").ok()?;
    parse_machine(stat.lines().next()?)
}

/// The `cpu` line: user nice system idle iowait irq softirq steal (guest time is inside user).
fn parse_machine(line: &str) -> Option<f64> {
    let ticks: Vec<u64> = line
        .strip_prefix("cpu ")?
        .split_whitespace()
        .take(8)
        .map(|t| t.parse().ok())
        .collect::<Option<_>>()?;
    let busy: u64 = ticks.iter().sum::<u64>() - ticks.get(3)? - ticks.get(4)?;
    Some(busy as f64 / TICKS_PER_S)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_command_name() {
        let line = "42 (a (b) c) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 8 0 1 1 1";
        assert_eq!(parse_stat(line), Some(3.0));
        assert_eq!(parse_stat("42 (x) S 1"), None);
    }

    #[test]
    fn machine_busy_leaves_out_idle_and_iowait() {
        let line = "cpu  100 5 50 1000 30 2 3 10 0 0";
        assert_eq!(parse_machine(line), Some(1.7));
        assert_eq!(parse_machine("intr 1 2 3"), None);
    }

    #[test]
    fn this_process_is_found() {
        assert!(cpu_seconds(std::process::id()).is_some());
    }
}
