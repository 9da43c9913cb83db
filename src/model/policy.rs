//! The admin's launch policy: which images and host folders jobs may use, and their limits.

use super::vocab::vocabulary;
use serde::{Deserialize, Serialize};

vocabulary! {
    /// What gpuq does about a job whose observed VRAM on a card stays above its commitment.
    #[derive(Default)]
    pub enum VramEnforcement {
        /// Nothing: readings are recorded and shown, no event, no stop.
        Off = "off",
        /// A `vram_over_commitment` event and a badge, never a stop.
        Warn = "warn",
        /// As warn; and when the card runs short (free below `--vram-reserve-mib`), the job most
        /// over its commitment there is stopped, so that its neighbours survive.
        #[default]
        Stop = "stop",
    }
}

vocabulary! {
    /// When a node fetches a job's image from its registry (`docker pull`), always before the
    /// job's cards are held.
    #[derive(Default)]
    pub enum PullPolicy {
        /// Pull only when the node does not have the image yet.
        #[default]
        IfNotPresent = "if_not_present",
        /// Resolve the tag again for every job: a job runs what its tag named after it was
        /// queued.
        Always = "always",
        /// Never pull: only images already on the node run; a job naming another fails.
        Never = "never",
    }
}

vocabulary! {
    /// What gpuq does about a job that holds cards and leaves them idle (see
    /// docs/admission.md#idle-cards).
    #[derive(Default)]
    pub enum IdleAction {
        /// Nothing is read or judged.
        Off = "off",
        /// The job is flagged and its owner told; it runs on.
        #[default]
        Warn = "warn",
        /// As warn; and after `idle_grace_min` still idle, the job is stopped with the reason
        /// `idle`.
        Stop = "stop",
    }
}

/// The longest fair-share half-life, hours (ten years).
pub const MAX_HALF_LIFE_H: f64 = 87_600.0;
/// The longest idle window, grace or session idle time, minutes (a week).
pub const MAX_IDLE_MIN: f64 = 10_080.0;

/// A host folder jobs may mount (and everything below it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct VolumeRule {
    /// Absolute host path; symlinks in it are resolved when checking.
    pub path: String,
    /// Mounts from here must be read-only.
    #[serde(default)]
    pub read_only: bool,
}

/// The network a job's container joins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum JobNetwork {
    /// gpuq's own bridge with traffic between containers disabled: a job reaches out, not its
    /// neighbours.
    #[default]
    Isolated,
    /// No network at all (loopback only).
    None,
}

impl JobNetwork {
    pub fn as_str(self) -> &'static str {
        match self {
            JobNetwork::Isolated => "isolated",
            JobNetwork::None => "none",
        }
    }
}

/// The largest `image_disk_max_gib` (a pebibyte): beyond it the figure is surely a typo.
pub const MAX_IMAGE_DISK_GIB: f64 = 1_048_576.0;
/// The longest `image_keep_days` (ten years); 0 keeps images for good.
pub const MAX_IMAGE_KEEP_DAYS: u32 = 3650;

/// Launch policy, stored in the `settings` table and edited by admins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "ssr", derive(utoipa::ToSchema))]
#[serde(default, deny_unknown_fields)]
pub struct LaunchPolicy {
    /// Image patterns a job may use; `*` matches any run of characters. Patterns and images are
    /// compared in their full form (`busybox` is `docker.io/library/busybox:latest`, see
    /// `model::image_ref`).
    pub image_allowlist: Vec<String>,
    /// When a node pulls a job's image.
    pub pull: PullPolicy,
    /// Host folders jobs may mount. Empty: no volumes at all.
    pub volume_allowlist: Vec<VolumeRule>,
    /// Run-time limit of jobs that do not set one.
    pub default_timeout_s: u64,
    /// Longest run-time limit a job may ask for.
    pub max_timeout_s: u64,
    /// Memory limit of every container, MiB.
    pub memory_limit_mib: u64,
    /// Process limit of every container.
    pub pids_limit: i64,
    /// Image patterns whose jobs may run as root (uid 0). Every other job runs as its owner's
    /// job uid.
    pub root_images: Vec<String>,
    /// Jobs one user may have waiting at once; 0 = unlimited. Admins are not capped.
    pub max_queued_per_user: u32,
    /// Jobs one user may have running at once (more wait in the queue); 0 = unlimited. Admins are
    /// not capped.
    pub max_running_per_user: u32,
    /// CPU cores one job may use (fractional); 0 = no CPU limit.
    pub cpus_per_job: f64,
    /// Size of each job's `/dev/shm`, MiB (PyTorch data loaders need far more than Docker's 64).
    pub shm_mib: u64,
    /// The container's root filesystem is read-only, so no job can fill Docker's disk (which every
    /// job and the daemon share): a job writes to `/tmp` (a tmpfs of `tmp_mib`), `/dev/shm` and its
    /// volumes. Off: the root filesystem is writable and nothing bounds what a job writes there.
    pub read_only_rootfs: bool,
    /// Size of the tmpfs at `/tmp` when the root filesystem is read-only, MiB. What a job keeps
    /// there is memory, so it counts against the memory limit.
    pub tmp_mib: u64,
    /// The least VRAM a GPU job may ask for, MiB, so that no one packs a card with tiny jobs.
    pub min_vram_mib: u64,
    /// Jobs without a GPU that may run at once on one node; 0 = unlimited.
    pub max_cpu_jobs_per_node: u32,
    /// Days a finished job's log is kept; 0 = forever.
    pub log_retention_days: u32,
    /// Total size of each node's log folder, MiB; over it the oldest finished jobs' logs go first.
    /// 0 = a tenth of the filesystem holding the folder, measured on each node.
    pub log_total_mib: u64,
    /// Size of one user's job logs in each node's log folder, MiB; over it that user's oldest
    /// finished jobs' logs go first. 0 = a quarter of the folder's cap.
    pub log_user_mib: u64,
    /// The network jobs join.
    pub network: JobNetwork,
    /// What happens to a job that uses more VRAM than it committed.
    pub vram_enforcement: VramEnforcement,
    /// Sets environment keys that keep frameworks which take the whole card by default (JAX/XLA,
    /// TensorFlow) within the job's commitment. Jobs cannot override them.
    pub framework_memory_hints: bool,
    /// Where members' webhooks may go beyond the public internet: hosts (`host`), a host's port
    /// (`host:port`, `[v6]:port`) or networks (CIDR, `10.1.0.0/16`). Everything else that is
    /// loopback, link-local, private, CGNAT, multicast, unspecified, or a gpuq node is refused.
    pub webhook_allowlist: Vec<String>,
    /// Days an image gpuq pulled stays on a node after the last job that used it there; then the
    /// node's image collector removes it. 0 = kept (only `image_disk_max_gib` removes it). Images
    /// an admin loaded by hand are never removed.
    pub image_keep_days: u32,
    /// GiB the images gpuq pulled may take on each node; past it the least recently used go first.
    /// Fractions allowed; 0 = no bound.
    pub image_disk_max_gib: f64,
    /// The queue orders jobs of one priority by their owner's recent use of the cards against
    /// their share (teams' and users' weights), least first, before submission time. Off: by
    /// submission time alone.
    pub fair_share: bool,
    /// Hours after which a GPU-hour used counts half in fair share (and a quarter after twice
    /// as long). Fractions allowed.
    pub fair_share_half_life_h: f64,
    /// What happens to a job whose cards stay idle.
    pub idle_action: IdleAction,
    /// Minutes a job's processes must all stay below `idle_sm_percent` (or the job have no
    /// process on its cards) before it is flagged idle. Fractions allowed.
    pub idle_after_min: f64,
    /// SM utilisation, percent, below which a process counts as idle.
    pub idle_sm_percent: u32,
    /// Minutes between the flag and the stop under `idle_action: stop`; activity meanwhile
    /// clears the flag. Fractions allowed.
    pub idle_grace_min: f64,
    /// Workload types never judged idle (e.g. a data-loading stage known to be quiet).
    pub idle_exempt_workloads: Vec<String>,
    /// Interactive sessions (jobs with a `port`) one user may have running or waiting at once;
    /// 0 = unlimited.
    pub max_sessions_per_user: u32,
    /// Minutes without HTTP or WebSocket traffic (and without GPU activity) after which a session
    /// is warned, then stopped with the reason `idle`. Fractions allowed.
    pub session_idle_min: f64,
    /// Admins may open any member's session. Off: only its owner may.
    pub admins_open_sessions: bool,
    /// Backfill: when the first waiting job of a priority level does not fit, the cards it could
    /// start on soonest (every job holding cards taken to run to its deadline) are kept for it
    /// from then; a later job takes them now only if its timeout ends it before, or it fits
    /// beside. Off: a later job takes any card it fits on (until the starvation guard).
    pub backfill: bool,
}

impl Default for LaunchPolicy {
    fn default() -> Self {
        LaunchPolicy {
            image_allowlist: vec!["*".into()],
            pull: PullPolicy::IfNotPresent,
            volume_allowlist: Vec::new(),
            default_timeout_s: 3600,
            max_timeout_s: 7 * 24 * 3600,
            memory_limit_mib: 16 * 1024,
            pids_limit: 4096,
            root_images: Vec::new(),
            max_queued_per_user: 100,
            max_running_per_user: 0,
            cpus_per_job: 0.0,
            shm_mib: 2048,
            read_only_rootfs: true,
            tmp_mib: 4096,
            min_vram_mib: 256,
            max_cpu_jobs_per_node: 8,
            log_retention_days: 30,
            log_total_mib: 0,
            log_user_mib: 0,
            network: JobNetwork::Isolated,
            vram_enforcement: VramEnforcement::Stop,
            framework_memory_hints: true,
            webhook_allowlist: Vec::new(),
            image_keep_days: 14,
            image_disk_max_gib: 0.0,
            fair_share: true,
            fair_share_half_life_h: 168.0,
            idle_action: IdleAction::Warn,
            idle_after_min: 30.0,
            idle_sm_percent: 5,
            idle_grace_min: 30.0,
            idle_exempt_workloads: Vec::new(),
            max_sessions_per_user: 2,
            session_idle_min: 60.0,
            admins_open_sessions: false,
            backfill: true,
        }
    }
}

impl LaunchPolicy {
    /// Checks the policy itself, naming the field at fault.
    pub fn check(&self) -> Result<(), (String, String)> {
        if self.max_timeout_s == 0 || self.default_timeout_s == 0 {
            return Err(("max_timeout_s".into(), "timeouts must be positive".into()));
        }
        if self.default_timeout_s > self.max_timeout_s {
            return Err((
                "default_timeout_s".into(),
                "the default timeout must not exceed the maximum".into(),
            ));
        }
        if self.memory_limit_mib < 16 || self.pids_limit < 16 {
            return Err((
                "memory_limit_mib".into(),
                "memory limit must be at least 16 MiB and pids limit at least 16".into(),
            ));
        }
        for (i, rule) in self.volume_allowlist.iter().enumerate() {
            if !rule.path.starts_with('/') || rule.path == "/" {
                return Err((
                    format!("volume_allowlist[{i}]"),
                    "must be an absolute path other than /".into(),
                ));
            }
        }
        for (list, patterns) in [
            ("image_allowlist", &self.image_allowlist),
            ("root_images", &self.root_images),
        ] {
            for (i, p) in patterns.iter().enumerate() {
                if p.is_empty() || p.chars().any(char::is_whitespace) {
                    return Err((
                        format!("{list}[{i}]"),
                        "patterns must be non-empty, without spaces".into(),
                    ));
                }
            }
        }
        for (i, entry) in self.webhook_allowlist.iter().enumerate() {
            if let Err(why) = check_webhook_allow(entry) {
                return Err((format!("webhook_allowlist[{i}]"), why));
            }
        }
        if self.log_total_mib > 0 && self.log_user_mib > self.log_total_mib {
            return Err((
                "log_user_mib".into(),
                format!(
                    "one user's logs ({} MiB) cannot exceed the log folder's cap \
                     (log_total_mib = {} MiB)",
                    self.log_user_mib, self.log_total_mib
                ),
            ));
        }
        if !self.cpus_per_job.is_finite() || !(0.0..=1024.0).contains(&self.cpus_per_job) {
            return Err((
                "cpus_per_job".into(),
                "must be between 0 (no limit) and 1024 cores".into(),
            ));
        }
        if self.cpus_per_job > 0.0 && self.cpus_per_job < 0.01 {
            return Err((
                "cpus_per_job".into(),
                "must be at least 0.01 cores, or 0".into(),
            ));
        }
        if self.shm_mib < 1 || self.shm_mib > self.memory_limit_mib {
            return Err((
                "shm_mib".into(),
                "must be at least 1 MiB and at most the memory limit".into(),
            ));
        }
        if self.read_only_rootfs && (self.tmp_mib < 1 || self.tmp_mib > self.memory_limit_mib) {
            return Err((
                "tmp_mib".into(),
                "must be at least 1 MiB and at most the memory limit".into(),
            ));
        }
        if !self.image_disk_max_gib.is_finite()
            || !(0.0..=MAX_IMAGE_DISK_GIB).contains(&self.image_disk_max_gib)
        {
            return Err((
                "image_disk_max_gib".into(),
                format!("must be between 0 (no bound) and {MAX_IMAGE_DISK_GIB} GiB"),
            ));
        }
        if self.image_keep_days > MAX_IMAGE_KEEP_DAYS {
            return Err((
                "image_keep_days".into(),
                format!("must be at most {MAX_IMAGE_KEEP_DAYS} days (0: kept)"),
            ));
        }
        self.check_fairness()
    }

    /// The fair-share, idle and session fields of [`LaunchPolicy::check`].
    fn check_fairness(&self) -> Result<(), (String, String)> {
        let h = self.fair_share_half_life_h;
        if !h.is_finite() || h <= 0.0 || h > MAX_HALF_LIFE_H {
            return Err((
                "fair_share_half_life_h".into(),
                format!("must be more than 0 and at most {MAX_HALF_LIFE_H} hours"),
            ));
        }
        for (field, min, zero_ok) in [
            ("idle_after_min", self.idle_after_min, false),
            ("idle_grace_min", self.idle_grace_min, true),
            ("session_idle_min", self.session_idle_min, false),
        ] {
            let low_ok = if zero_ok { min >= 0.0 } else { min > 0.0 };
            if !min.is_finite() || !low_ok || min > MAX_IDLE_MIN {
                let low = if zero_ok { "at least 0" } else { "more than 0" };
                return Err((
                    field.into(),
                    format!("must be {low} and at most {MAX_IDLE_MIN} minutes (a week)"),
                ));
            }
        }
        if self.idle_sm_percent > 100 {
            return Err((
                "idle_sm_percent".into(),
                "must be a percentage, 0 to 100".into(),
            ));
        }
        for (i, w) in self.idle_exempt_workloads.iter().enumerate() {
            if w.is_empty() || w.len() > 128 || w.chars().any(char::is_whitespace) {
                return Err((
                    format!("idle_exempt_workloads[{i}]"),
                    "workload type names are non-empty, without spaces, at most 128 characters"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    /// The bound on the images gpuq pulled on one node, bytes; `None` when there is none.
    pub fn image_disk_max_bytes(&self) -> Option<u64> {
        (self.image_disk_max_gib > 0.0)
            .then(|| (self.image_disk_max_gib * (1u64 << 30) as f64).round() as u64)
    }

    /// Whether an image reference matches one of the allowed patterns, both in their full form
    /// (a reference that does not parse is never allowed).
    pub fn image_allowed(&self, image: &str) -> bool {
        self.image_allowlist
            .iter()
            .any(|p| super::image_ref::allowed_by(p, image))
    }

    /// Whether jobs of this image may run as root (patterns in their full form, as above).
    pub fn root_allowed(&self, image: &str) -> bool {
        self.root_images
            .iter()
            .any(|p| super::image_ref::allowed_by(p, image))
    }

    /// The size of the tmpfs at `/tmp`, MiB, when the root filesystem is read-only; `None` when it
    /// is writable.
    pub fn tmpfs_mib(&self) -> Option<u64> {
        self.read_only_rootfs.then_some(self.tmp_mib)
    }

    /// Docker's CPU limit for one job, in billionths of a core; `None` when unlimited.
    pub fn nano_cpus(&self) -> Option<i64> {
        (self.cpus_per_job > 0.0).then(|| (self.cpus_per_job * 1e9).round() as i64)
    }
}

/// Checks one `webhook_allowlist` entry: a CIDR, `host:port` or `host`.
pub fn check_webhook_allow(entry: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("`{entry}`: {why}"));
    if entry.is_empty() || entry.len() > 253 || entry.chars().any(|c| c.is_whitespace()) {
        return bad("a host, host:port or CIDR, without spaces");
    }
    if let Some((ip, bits)) = entry.split_once('/') {
        let max = match ip.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V4(_)) => 32,
            Ok(std::net::IpAddr::V6(_)) => 128,
            Err(_) => return bad("a CIDR is an IP address, `/` and a prefix length"),
        };
        return match bits.parse::<u8>() {
            Ok(b) if b <= max => Ok(()),
            _ => bad("the prefix length is out of range"),
        };
    }
    if entry.parse::<std::net::IpAddr>().is_ok() || entry.parse::<std::net::SocketAddr>().is_ok() {
        return Ok(());
    }
    let host = match entry.rsplit_once(':') {
        Some((h, port)) => {
            if port.parse::<u16>().is_err() {
                return bad("the port must be a number up to 65535");
            }
            h
        }
        None => entry,
    };
    let label_ok = |l: &str| {
        !l.is_empty() && l.len() <= 63 && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if host.split('.').all(label_ok) {
        Ok(())
    } else {
        bad("not a host name")
    }
}

/// `*`-only glob matching (no other metacharacters), linear in practice for short patterns.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(at) => rest = &rest[at + mid.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_allowlist_entries_are_hosts_ports_or_networks() {
        for ok in [
            "hooks.lan",
            "hooks.lan:8443",
            "127.0.0.1:9000",
            "[fd00::5]:443",
            "10.20.0.0/16",
            "fd00::/8",
            "192.0.2.1",
        ] {
            assert_eq!(check_webhook_allow(ok), Ok(()), "{ok}");
        }
        for bad in ["", "a b", "10.0.0.0/33", "host:99999", "bad_host!", "x/8"] {
            assert!(check_webhook_allow(bad).is_err(), "{bad} accepted");
        }
        let p = LaunchPolicy {
            webhook_allowlist: vec!["ok.lan".into(), "10.0.0.0/99".into()],
            ..Default::default()
        };
        assert_eq!(p.check().unwrap_err().0, "webhook_allowlist[1]");
    }

    #[test]
    fn globs() {
        assert!(glob_match("*", "anything:tag"));
        assert!(glob_match("registry.local/*", "registry.local/team/x:1"));
        assert!(!glob_match("registry.local/*", "docker.io/x"));
        assert!(glob_match("pytorch/*:2.*", "pytorch/pytorch:2.3"));
        assert!(!glob_match("pytorch/*:2.*", "pytorch/pytorch:1.9"));
        assert!(glob_match("busybox", "busybox"));
        assert!(!glob_match("busybox", "busybox:1"));
        assert!(!glob_match("a*a", "a"));
    }

    #[test]
    fn policy_checks() {
        assert!(LaunchPolicy::default().check().is_ok());
        let bad = LaunchPolicy {
            default_timeout_s: 10,
            max_timeout_s: 5,
            ..Default::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "default_timeout_s");
        let bad = LaunchPolicy {
            cpus_per_job: -1.0,
            ..Default::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "cpus_per_job");
        let bad = LaunchPolicy {
            shm_mib: 1 << 40,
            ..Default::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "shm_mib");
        let bad = LaunchPolicy {
            tmp_mib: 0,
            ..Default::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "tmp_mib");
        let bad = LaunchPolicy {
            log_total_mib: 100,
            log_user_mib: 101,
            ..Default::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "log_user_mib");
        let automatic_total = LaunchPolicy {
            log_user_mib: 1 << 30,
            ..Default::default()
        };
        assert!(
            automatic_total.check().is_ok(),
            "a tenth of the disk is known on each node only"
        );
        let bad = LaunchPolicy {
            tmp_mib: 32 * 1024,
            ..Default::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "tmp_mib");
        // A writable root filesystem has no /tmp of its own: its size is not read.
        let writable = LaunchPolicy {
            read_only_rootfs: false,
            tmp_mib: 0,
            ..Default::default()
        };
        assert!(writable.check().is_ok());
        assert_eq!(writable.tmpfs_mib(), None);
        let bad = LaunchPolicy {
            root_images: vec!["a b".into()],
            ..Default::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "root_images[0]");
        for gib in [-1.0, f64::NAN, f64::INFINITY, 2.0 * MAX_IMAGE_DISK_GIB] {
            let bad = LaunchPolicy {
                image_disk_max_gib: gib,
                ..Default::default()
            };
            assert_eq!(bad.check().unwrap_err().0, "image_disk_max_gib", "{gib}");
        }
        let bad = LaunchPolicy {
            image_keep_days: MAX_IMAGE_KEEP_DAYS + 1,
            ..Default::default()
        };
        assert_eq!(bad.check().unwrap_err().0, "image_keep_days");
    }

    #[test]
    fn fair_share_idle_and_session_settings_are_checked_naming_the_field() {
        let p = LaunchPolicy::default();
        assert!(p.fair_share && p.fair_share_half_life_h == 168.0);
        assert_eq!(p.idle_action, IdleAction::Warn);
        let bad = |f: fn(&mut LaunchPolicy)| {
            let mut p = LaunchPolicy::default();
            f(&mut p);
            p.check().unwrap_err().0
        };
        assert_eq!(
            bad(|p| p.fair_share_half_life_h = 0.0),
            "fair_share_half_life_h"
        );
        assert_eq!(
            bad(|p| p.fair_share_half_life_h = f64::NAN),
            "fair_share_half_life_h"
        );
        assert_eq!(bad(|p| p.idle_after_min = 0.0), "idle_after_min");
        assert_eq!(bad(|p| p.idle_grace_min = -1.0), "idle_grace_min");
        assert_eq!(bad(|p| p.session_idle_min = 1e9), "session_idle_min");
        assert_eq!(bad(|p| p.idle_sm_percent = 101), "idle_sm_percent");
        assert_eq!(
            bad(|p| p.idle_exempt_workloads = vec!["a b".into()]),
            "idle_exempt_workloads[0]"
        );
        let ok = LaunchPolicy {
            idle_grace_min: 0.0,
            idle_after_min: 0.1,
            ..LaunchPolicy::default()
        };
        assert!(ok.check().is_ok());
        let e =
            serde_json::from_value::<LaunchPolicy>(serde_json::json!({ "idle_action": "kill" }))
                .unwrap_err()
                .to_string();
        assert!(e.contains("kill") && e.contains("warn"), "{e}");
    }

    #[test]
    fn the_image_disk_bound_is_off_at_zero_and_reads_fractions_of_a_gib() {
        let p = LaunchPolicy::default();
        assert_eq!((p.image_keep_days, p.image_disk_max_bytes()), (14, None));
        let p = LaunchPolicy {
            image_disk_max_gib: 0.5,
            ..p
        };
        assert_eq!(p.image_disk_max_bytes(), Some(1 << 29));
        assert!(p.check().is_ok());
    }

    #[test]
    fn pull_is_one_of_three_and_a_bad_one_names_the_field() {
        for (text, want) in [
            ("if_not_present", PullPolicy::IfNotPresent),
            ("always", PullPolicy::Always),
            ("never", PullPolicy::Never),
        ] {
            let p: LaunchPolicy =
                serde_json::from_value(serde_json::json!({ "pull": text })).unwrap();
            assert_eq!(p.pull, want);
        }
        let e = serde_json::from_value::<LaunchPolicy>(serde_json::json!({ "pull": "sometimes" }))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sometimes") && e.contains("if_not_present"),
            "{e}"
        );
    }

    #[test]
    fn allowlists_compare_full_references() {
        let p = LaunchPolicy {
            image_allowlist: vec!["gpuq-test/*".into(), "busybox".into()],
            root_images: vec!["nvidia/cuda:*".into()],
            ..Default::default()
        };
        assert!(p.image_allowed("gpuq-test/busybox:latest"));
        assert!(p.image_allowed("docker.io/gpuq-test/busybox:latest"));
        assert!(p.image_allowed("docker.io/library/busybox:latest"));
        assert!(!p.image_allowed("busybox:1"));
        assert!(!p.image_allowed("evil.example/gpuq-test/x"));
        assert!(!p.image_allowed("127.0.0.1:5000/gpuq-test/busybox:latest"));
        assert!(p.root_allowed("docker.io/nvidia/cuda:12"));
        assert!(!p.root_allowed("evil.example/nvidia/cuda:12"));
        assert!(LaunchPolicy::default().image_allowed("anything.example/x:1"));
    }

    #[test]
    fn old_policies_read_with_new_defaults() {
        let p: LaunchPolicy = serde_json::from_str(r#"{"pids_limit": 100}"#).unwrap();
        assert_eq!(p.pids_limit, 100);
        assert_eq!(p.shm_mib, 2048);
        assert_eq!(p.tmpfs_mib(), Some(4096));
        assert_eq!(p.network, JobNetwork::Isolated);
        assert_eq!(p.pull, PullPolicy::IfNotPresent);
        assert_eq!(p.nano_cpus(), None);
        let p = LaunchPolicy {
            cpus_per_job: 1.5,
            root_images: vec!["nvidia/*".into()],
            ..p
        };
        assert_eq!(p.nano_cpus(), Some(1_500_000_000));
        assert!(p.root_allowed("nvidia/cuda:12"));
        assert!(!p.root_allowed("busybox"));
    }
}
