//! The `gpuq` command line: one clap struct per subcommand, every flag also readable from `GPUQ_*`.

use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

/// gpuq: GPU job admission and isolation for shared multi-GPU servers.
#[derive(Debug, Parser)]
#[command(name = "gpuq", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the server: web UI, REST API and background tasks.
    Serve(ServeArgs),
    /// Manage users directly in the database (for scripts and first set-up).
    #[command(subcommand)]
    User(UserCommand),
}

/// Where the database is: an external server, or the embedded cluster under the data directory.
#[derive(Debug, Clone, Args)]
pub struct DbArgs {
    /// Directory for gpuq's state: the embedded Postgres cluster (`pg/`), logs.
    #[arg(long, env = "GPUQ_DATA_DIR", default_value = "./gpuq-data")]
    pub data_dir: PathBuf,
    /// Postgres URL. Without it gpuq runs its own cluster under `<data-dir>/pg`.
    #[arg(long, env = "GPUQ_DATABASE_URL")]
    pub database_url: Option<String>,
    /// Unprivileged system user that runs the embedded Postgres when gpuq runs as root.
    #[arg(long, env = "GPUQ_PG_USER", default_value = "postgres")]
    pub pg_user: String,
    /// Largest number of pooled database connections.
    #[arg(long, env = "GPUQ_DB_MAX_CONNECTIONS", default_value_t = 16)]
    pub db_max_connections: u32,
}

/// Flags of `gpuq serve`.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address and port the web UI and API listen on.
    #[arg(long, env = "GPUQ_LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,
    /// Database location.
    #[command(flatten)]
    pub db: DbArgs,
    /// Folder with the built browser bundle (`pkg/`) and static files.
    #[arg(long, env = "GPUQ_SITE_ROOT", default_value = "target/site")]
    pub site_root: PathBuf,
    /// Password for the `admin` user created on first start; random (printed once) when unset.
    #[arg(long, env = "GPUQ_BOOTSTRAP_ADMIN_PASSWORD", hide_env_values = true)]
    pub bootstrap_admin_password: Option<String>,
    /// Mark the session cookie `Secure` (set when served over HTTPS).
    #[arg(long, env = "GPUQ_SECURE_COOKIES", default_value_t = false)]
    pub secure_cookies: bool,
}

/// `gpuq user …`
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Create a user; the password is read from standard input (one line).
    Add(UserAddArgs),
}

/// Flags of `gpuq user add`.
#[derive(Debug, Args)]
pub struct UserAddArgs {
    /// Login name of the new user.
    pub name: String,
    /// Role: member, manager or admin.
    #[arg(long, default_value = "member")]
    pub role: String,
    /// Database location.
    #[command(flatten)]
    pub db: DbArgs,
}
