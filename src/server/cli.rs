//! The top of the `gpuq` command line: which subcommand, and the flags that belong to the
//! subcommands that join several layers (benchmarks, the client). The flags of `gpuq serve` and of
//! the database are in [`crate::server::config`], which imports nothing of the crate.

use crate::server::config::{DbArgs, DoctorArgs, FirewallArgs, ServeArgs, UserAddArgs};
use clap::{Args, Parser, Subcommand};

/// gpuq: GPU job admission and isolation for shared multi-GPU servers.
#[derive(Debug, Parser)]
#[command(name = "gpuq", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Server and token for the client subcommands.
    #[command(flatten)]
    pub conn: crate::client::ConnArgs,
    /// How log lines are written to standard error: `text` for people, `json` (one JSON object
    /// per line) for log collectors.
    #[arg(long, global = true, env = "GPUQ_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// The format of log lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server: web UI, REST API and background tasks.
    Serve(Box<ServeArgs>),
    /// Check that this host is ready for gpuq (driver, Docker, database, disk, clock, listen
    /// address); prints pass, warn or fail per check, and exits non-zero on any fail.
    Doctor(Box<DoctorArgs>),
    /// The host firewall that keeps jobs on the job network from the host, the private ranges
    /// and link-local (cloud metadata): `apply`, `check` or `remove` (as root).
    Firewall(FirewallArgs),
    /// Manage users: `add` directly in the database (for scripts and first set-up); `set` a
    /// user's team, weight or budget over the REST API (admins).
    #[command(subcommand)]
    User(UserCommand),
    /// Benchmarks that print figures (run them on a scratch database).
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Client subcommands: talk to a gpuq server over its REST API.
    #[command(flatten)]
    Client(crate::client::ClientCommand),
}

/// `gpuq user …`
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user; the password is read from standard input (one line).
    Add(UserAddArgs),
    /// Move a user to a team and/or set their share weight or GPU-hour budget (admins, over the
    /// REST API).
    Set(crate::client::team::UserSetArgs),
}

/// `gpuq bench …`
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Planner time, whole-pass time and burst admission rate (needs an empty, scratch database).
    Admission(BenchAdmissionArgs),
    /// Submit → container start overhead and exit → next start (needs dockerd and a scratch database).
    Runner(BenchRunnerArgs),
    /// Idle cost, cancel → SIGTERM and burst throughput of a running server, measured from
    /// outside (REST API, its database's statistics, dockerd), so old and new builds compare.
    External(BenchExternalArgs),
    /// VRAM policing: overuse → event and short card → stop latencies, and the sampler's CPU
    /// per card (needs dockerd and a scratch database).
    Vram(BenchVramArgs),
    /// kill -9 of a node, repeatedly: time until its cards are withdrawn, and duplicate runs
    /// (needs dockerd, the test image and a scratch database given by --database-url).
    Failover(BenchFailoverArgs),
    /// The server's resident memory while it answers many whole-log reads and tails at once
    /// (needs a scratch database given by --database-url; --server measures another build).
    Logs(BenchLogsArgs),
    /// The start estimate's error on a replayed synthetic day of a team's jobs, in virtual time
    /// against the real planner (needs no database).
    Replay(BenchReplayArgs),
    /// Fair share on a replayed day: three users, one submitting a 200-job sweep first; each
    /// user's wait and share of GPU-hours with fair share off and on (needs no database).
    Fairness(BenchFairnessArgs),
    /// Backfill on and off on a replayed synthetic day with real run times, in virtual time
    /// against the real planner: packing and waits (needs no database).
    Backfill(BenchBackfillArgs),
    /// Dependencies: parent end → dependent admitted, p50/p99, on an idle queue and with ~1000
    /// unrelated jobs queued (needs a scratch database).
    Deps(BenchDepsArgs),
    /// Submit → running for a job whose image must be pulled from a local registry, against
    /// `docker pull` + `docker run` by hand, in interleaved rounds (needs dockerd,
    /// docker-registry and a scratch database).
    Pull(BenchPullArgs),
}

/// Flags of `gpuq bench fairness`.
#[derive(Debug, Args)]
pub struct BenchFairnessArgs {
    /// The day's seed and half-life.
    #[command(flatten)]
    pub opts: crate::server::bench::fairness::FairnessOptions,
}

/// Flags of `gpuq bench replay`.
#[derive(Debug, Args)]
pub struct BenchReplayArgs {
    /// The trace and the cluster's policy.
    #[command(flatten)]
    pub opts: crate::server::bench::replay::ReplayOptions,
}

/// Flags of `gpuq bench backfill`.
#[derive(Debug, Args)]
pub struct BenchBackfillArgs {
    /// The trace.
    #[command(flatten)]
    pub opts: crate::server::bench::backfill::BackfillOptions,
}

/// Flags of `gpuq bench deps`.
#[derive(Debug, Args)]
pub struct BenchDepsArgs {
    /// Database location (a scratch one).
    #[command(flatten)]
    pub db: DbArgs,
    /// Rounds and queue size.
    #[command(flatten)]
    pub opts: crate::server::bench::deps::DepsBenchOptions,
}

/// Flags of `gpuq bench pull`.
#[derive(Debug, Args)]
pub struct BenchPullArgs {
    /// Database location (a scratch one).
    #[command(flatten)]
    pub db: DbArgs,
    /// Rounds and image size.
    #[command(flatten)]
    pub opts: crate::server::bench::pull::PullBenchOptions,
}

/// Flags of `gpuq bench logs`.
#[derive(Debug, Args)]
pub struct BenchLogsArgs {
    /// Database location (a scratch one; --database-url, which the measured server shares).
    #[command(flatten)]
    pub db: DbArgs,
    /// Readers, log size and the server measured.
    #[command(flatten)]
    pub opts: crate::server::bench::logs::LogsBenchOptions,
}

/// Flags of `gpuq bench failover`.
#[derive(Debug, Args)]
pub struct BenchFailoverArgs {
    /// Database location (a scratch one; --database-url, which the killed nodes share).
    #[command(flatten)]
    pub db: DbArgs,
    /// Rounds and settings.
    #[command(flatten)]
    pub opts: crate::server::bench::failover::FailoverBenchOptions,
}

/// Flags of `gpuq bench vram`.
#[derive(Debug, Args)]
pub struct BenchVramArgs {
    /// Database location (a scratch one).
    #[command(flatten)]
    pub db: DbArgs,
    /// Sizes and settings.
    #[command(flatten)]
    pub opts: crate::server::bench::vram::VramBenchOptions,
}

/// Flags of `gpuq bench external`; the server and its token are the global `--url` and `--token`.
#[derive(Debug, Args)]
pub struct BenchExternalArgs {
    /// Sign-in, database, sizes and image.
    #[command(flatten)]
    pub opts: crate::server::bench::external::ExternalBenchOptions,
}

/// Flags of `gpuq bench runner`.
#[derive(Debug, Args)]
pub struct BenchRunnerArgs {
    /// Database location (a scratch one).
    #[command(flatten)]
    pub db: DbArgs,
    /// Sizes and image.
    #[command(flatten)]
    pub opts: crate::server::bench::launch::RunnerBenchOptions,
}

/// Flags of `gpuq bench admission`.
#[derive(Debug, Args)]
pub struct BenchAdmissionArgs {
    /// Database location (use a scratch one: the bench refuses a database that has jobs or cards).
    #[command(flatten)]
    pub db: DbArgs,
    /// Sizes and repeats.
    #[command(flatten)]
    pub opts: crate::server::bench::BenchOptions,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_set_parses_beside_the_global_flags() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let argv = [
            "gpuq", "user", "set", "alice", "--team", "ml", "--weight", "2",
        ];
        let cli = Cli::try_parse_from(argv.iter().chain(&["--url", "http://h:1"])).unwrap();
        match cli.command {
            Command::User(UserCommand::Set(a)) => {
                assert_eq!((a.team.as_deref(), a.weight), (Some("ml"), Some(2.0)));
            }
            other => panic!("parsed as {other:?}"),
        }
        assert_eq!(cli.conn.url, "http://h:1");
        let bad = Cli::try_parse_from(["gpuq", "user", "set", "alice", "--budget", "9/year/soft"]);
        assert!(bad.unwrap_err().to_string().contains("--budget"));
    }

    fn serve(args: &[&str]) -> Result<ServeArgs, clap::Error> {
        let argv = ["gpuq", "serve"].iter().chain(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Serve(a) => Ok(*a),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn the_gpu_source_has_a_new_name_and_the_old_one_still_works_with_a_warning() {
        let a = serve(&["--gpu-source", "sim"]).unwrap();
        assert_eq!(a.gpu_source(), ("sim", None));
        let a = serve(&["--gpus", "nvml"]).unwrap();
        let (source, warning) = a.gpu_source();
        assert_eq!(source, "nvml");
        assert!(warning.unwrap().contains("--gpu-source"));
        assert_eq!(serve(&[]).unwrap().gpu_source(), ("auto", None));
        let both = serve(&["--gpus", "sim", "--gpu-source", "nvml"]).unwrap_err();
        assert_eq!(both.kind(), clap::error::ErrorKind::ArgumentConflict);
    }

    #[test]
    fn trusted_proxies_are_cidrs_or_addresses_and_anything_else_is_refused_by_name() {
        let a = serve(&["--trusted-proxy", "10.0.0.0/8, 127.0.0.1,::1"]).unwrap();
        let shown: Vec<String> = a.trusted_proxy.iter().map(|n| n.to_string()).collect();
        assert_eq!(shown, ["10.0.0.0/8", "127.0.0.1/32", "::1/128"]);
        assert!(serve(&[]).unwrap().trusted_proxy.is_empty());
        let bad = serve(&["--trusted-proxy", "10.0.0.0/8,10.0.0.300/8"]).unwrap_err();
        let text = bad.to_string();
        assert!(text.contains("--trusted-proxy"), "{text}");
        assert!(text.contains("`10.0.0.300/8` is not a CIDR"), "{text}");
    }
}
