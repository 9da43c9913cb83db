//! `gpuq` client subcommands: talk to a gpuq server over its REST API.
//!
//! The host binary flattens [`ConnArgs`] into its top-level parser, adds
//! [`ClientCommand`]'s variants to its subcommands and calls [`run`].
//!
//! Answers are read into the server's own wire types ([`crate::model`]), so the CLI and the server
//! cannot drift apart. Fields the client does not know are ignored and missing optional ones are
//! `None`; a value it does not know (a status of a newer server) is an error that names it, and
//! `--json` prints any answer as it came.

pub mod api;
pub mod credentials;
pub mod registry;
pub mod render;
pub mod request;
pub mod sanitize;
pub mod team;
pub mod wait;

#[cfg(test)]
mod tests;

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{bail, Context, Result};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::model::{CreatedToken, GpuList, JobAck, JobPage, JobView, NodeView, Secret};
use api::ApiClient;
use credentials::Credentials;

/// Where the gpuq server is and how to authenticate to it.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnArgs {
    /// Server URL
    #[arg(
        long,
        env = "GPUQ_URL",
        default_value = "http://127.0.0.1:3000",
        global = true
    )]
    pub url: String,
    /// API token (else the one saved by `gpuq login`)
    #[arg(long, env = "GPUQ_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<Secret>,
    /// Print other people's strings (names, commands, logs) as they are, terminal control
    /// characters included (by default they are removed)
    #[arg(long, global = true)]
    pub raw: bool,
}

/// The client subcommands.
// Parsed once per process: the size of the largest variant (submit's flags) costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ClientCommand {
    /// Sign in: create an API token and save it for later commands
    Login(LoginArgs),
    /// Submit a job
    Submit(SubmitArgs),
    /// List jobs
    Jobs(JobsArgs),
    /// Show one job in detail
    Show(ShowArgs),
    /// Cancel a job
    Cancel(CancelArgs),
    /// Print a job's log (`-f` follows it until the job ends)
    Logs(LogsArgs),
    /// List GPUs and what they hold
    Gpus(GpusArgs),
    /// The manifest (`gpuq manifest suggest`: what finished jobs used, and suggested needs)
    Manifest(ManifestArgs),
    /// Your budgets: GPU-hours used this week or month, what is left, when each resets
    Budget(NodesArgs),
    /// List the nodes: state (up, drained, lost), heartbeat age, version, cards, running jobs
    Nodes(NodesArgs),
    /// Drain, undrain or forget a node (admins)
    Node(NodeArgs),
    /// Fair share: each user's and team's weight, decayed GPU-hours, share of the recent total,
    /// owed share and budget (members: their own and their team's)
    FairShare(FairShareArgs),
    /// Registry credentials the nodes pull with: login, list, logout (admins)
    Registry(registry::RegistryArgs),
    /// Teams, their share weights and GPU-hour budgets: list (managers), add, set (admins)
    Team(team::TeamArgs),
    /// Wait until jobs end; exit with the job's exit code (124 timed out, 125 ended without an
    /// exit code, 130 cancelled)
    Wait(WaitArgs),
    /// A job's trail: every step of its life, oldest first
    Events(EventsArgs),
    /// An array as a whole: `show` (counts per status), `cancel`, `resubmit` (its failed
    /// elements)
    Array(ArrayArgs),
}

/// Arguments of `gpuq array`.
#[derive(Debug, Clone, clap::Args)]
pub struct ArrayArgs {
    /// What to do with the array
    #[command(subcommand)]
    pub action: ArrayAction,
}

/// What `gpuq array` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ArrayAction {
    /// Its size, running limit and elements per status
    Show {
        /// Array ID (the submit answer's `array_id`)
        id: uuid::Uuid,
        /// Print the server's JSON
        #[arg(long)]
        json: bool,
    },
    /// Cancel every element that has not ended
    Cancel {
        /// Array ID
        id: uuid::Uuid,
    },
    /// Submit its failed and timed-out elements again, as a new array
    Resubmit {
        /// Array ID
        id: uuid::Uuid,
    },
}

/// Arguments of `gpuq wait`.
#[derive(Debug, Clone, clap::Args)]
pub struct WaitArgs {
    /// Job IDs (or unique prefixes)
    #[arg(required = true, value_name = "ID")]
    pub ids: Vec<String>,
    /// Return when every job ended; the first (in the order given) that did not succeed decides
    /// the exit code (the default)
    #[arg(long, conflicts_with = "any")]
    pub all: bool,
    /// Return when the first job ends, with its exit code
    #[arg(long)]
    pub any: bool,
    /// Give up after this many seconds (exit 124)
    #[arg(long, value_name = "S")]
    pub timeout: Option<u64>,
}

/// Arguments of `gpuq events`.
#[derive(Debug, Clone, clap::Args)]
pub struct EventsArgs {
    /// Job ID (or a unique prefix of it)
    pub id: String,
    /// Print the server's JSON
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `gpuq manifest`.
#[derive(Debug, Clone, clap::Args)]
pub struct ManifestArgs {
    /// What to do with the manifest
    #[command(subcommand)]
    pub command: ManifestCommand,
}

/// The `gpuq manifest` subcommands.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ManifestCommand {
    /// Observed VRAM peaks of finished jobs per workload type and GPU model (n, p50, p95, max)
    /// beside the declared need, and the suggested need (p95 + 10 %, rounded up to 256 MiB)
    Suggest(SuggestArgs),
}

/// Arguments of `gpuq manifest suggest`.
#[derive(Debug, Clone, clap::Args)]
pub struct SuggestArgs {
    /// Print the server's JSON
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `gpuq nodes`.
#[derive(Debug, Clone, clap::Args)]
pub struct NodesArgs {
    /// Print the server's JSON
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `gpuq fair-share`.
#[derive(Debug, Clone, clap::Args)]
pub struct FairShareArgs {
    /// Print the server's JSON
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `gpuq node`.
#[derive(Debug, Clone, clap::Args)]
pub struct NodeArgs {
    /// What to do to the node
    #[command(subcommand)]
    pub action: NodeAction,
}

/// What `gpuq node` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum NodeAction {
    /// Take no new jobs on the node; its running jobs run out
    Drain {
        /// Node name
        name: String,
    },
    /// Let the node take new jobs again
    Undrain {
        /// Node name
        name: String,
    },
    /// Forget a lost node: its jobs end failed (node_lost) and their cards are released
    Forget {
        /// Node name
        name: String,
    },
}

/// Arguments of `gpuq login`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoginArgs {
    /// User name (the password is read from stdin, or prompted for on a terminal)
    pub username: String,
    /// Name of the token to create [default: gpuq-cli-<UTC time>]
    #[arg(long, value_name = "NAME")]
    pub token_name: Option<String>,
    /// Days until the token stops working [default: never]
    #[arg(long, value_name = "DAYS")]
    pub expires_in_days: Option<u32>,
}

/// Arguments of `gpuq submit`.
#[derive(Debug, Clone, clap::Args)]
pub struct SubmitArgs {
    /// Container image
    #[arg(long, value_name = "IMG", required_unless_present = "file")]
    pub image: Option<String>,
    /// Number of GPUs
    #[arg(long, value_name = "N")]
    pub gpus: Option<u32>,
    /// Workload profile that sets the VRAM needed per GPU
    #[arg(long, value_name = "W", conflicts_with = "vram_mib")]
    pub workload: Option<String>,
    /// Minimum free VRAM per GPU, MiB
    #[arg(long, value_name = "N")]
    pub vram_mib: Option<u64>,
    /// Environment variable for the job (repeatable)
    #[arg(long, value_name = "K=V")]
    pub env: Vec<String>,
    /// Volume mount (repeatable)
    #[arg(long, value_name = "H:C[:ro]")]
    pub volume: Vec<String>,
    /// Job name
    #[arg(long, value_name = "N")]
    pub name: Option<String>,
    /// Run-time limit in seconds
    #[arg(long, value_name = "S")]
    pub timeout: Option<u64>,
    /// Scheduling priority
    #[arg(long, value_name = "P", allow_negative_numbers = true)]
    pub priority: Option<i64>,
    /// Ask for the GPUs exclusively
    #[arg(long)]
    pub exclusive: bool,
    /// Put the job back in the queue if its node is lost (else it waits for that node)
    #[arg(long)]
    pub requeue_on_node_loss: bool,
    /// An interactive session: the one HTTP port (1-65535) the job serves, which gpuq proxies at
    /// the job's own session origin (`gpuq` prints where once it runs)
    #[arg(long)]
    pub port: Option<i64>,
    /// Print the server's JSON answer
    #[arg(long)]
    pub json: bool,
    /// Start only after this job succeeded (repeatable); cancelled if it ends otherwise
    #[arg(long, value_name = "ID")]
    pub after_ok: Vec<String>,
    /// Start only after this job ended, however it ended (repeatable)
    #[arg(long, value_name = "ID")]
    pub after_any: Vec<String>,
    /// Start only after this job failed or timed out (repeatable); cancelled if it succeeds
    #[arg(long, value_name = "ID")]
    pub after_failed: Vec<String>,
    /// An array of jobs: indexes `0-99`, `0,3,7` or `0-9,20`, and `%N` for at most N running at
    /// once (each gets GPUQ_ARRAY_INDEX)
    #[arg(long, value_name = "SPEC")]
    pub array: Option<String>,
    /// A sweep: `KEY=V1,V2,...` (repeatable); one job per combination, each with its values in
    /// its environment (KEY upper-cased)
    #[arg(long, value_name = "K=V,V")]
    pub sweep: Vec<String>,
    /// Wait until the job (or every job of the array) ends, and exit as `gpuq wait` does
    #[arg(long)]
    pub wait: bool,
    /// With --wait: print the job's log as it runs
    #[arg(long, requires = "wait")]
    pub follow: bool,
    /// Job spec as a JSON request body (`-` = stdin), instead of the flags
    #[arg(long, value_name = "PATH", conflicts_with_all = [
        "image", "gpus", "workload", "vram_mib", "env", "volume", "name",
        "timeout", "priority", "exclusive", "requeue_on_node_loss", "port", "command",
    ])]
    pub file: Option<String>,
    /// Command and its arguments, after `--`
    #[arg(last = true, value_name = "CMD", required_unless_present = "file")]
    pub command: Vec<String>,
}

/// Arguments of `gpuq jobs`.
#[derive(Debug, Clone, clap::Args)]
pub struct JobsArgs {
    /// Only jobs in these statuses (comma separated)
    #[arg(long, value_name = "S[,S]", value_delimiter = ',')]
    pub status: Vec<String>,
    /// Only jobs of this user
    #[arg(long, value_name = "U")]
    pub owner: Option<String>,
    /// Only my jobs
    #[arg(long)]
    pub mine: bool,
    /// Page number (from 1)
    #[arg(long, value_name = "N")]
    pub page: Option<u32>,
    /// Jobs per page
    #[arg(long, value_name = "N")]
    pub per_page: Option<u32>,
    /// Print the server's JSON
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `gpuq show`.
#[derive(Debug, Clone, clap::Args)]
pub struct ShowArgs {
    /// Job ID (or a unique prefix of it)
    pub id: String,
    /// Print the server's JSON
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `gpuq cancel`.
#[derive(Debug, Clone, clap::Args)]
pub struct CancelArgs {
    /// Job ID (or a unique prefix of it)
    pub id: String,
}

/// Arguments of `gpuq logs`.
#[derive(Debug, Clone, clap::Args)]
pub struct LogsArgs {
    /// Job ID (or a unique prefix of it)
    pub id: String,
    /// Keep printing new lines until the job ends
    #[arg(short, long)]
    pub follow: bool,
    /// Only the last N lines
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
}

/// Arguments of `gpuq gpus`.
#[derive(Debug, Clone, clap::Args)]
pub struct GpusArgs {
    /// Print the server's JSON
    #[arg(long)]
    pub json: bool,
}

/// Runs one client subcommand against the server named by `conn`, printing
/// its result on standard output.
pub async fn run(cmd: ClientCommand, conn: ConnArgs) -> Result<()> {
    if let ClientCommand::Login(args) = cmd {
        return login(args, &conn).await;
    }
    let token = credentials::token_for(conn.token.as_ref().map(Secret::expose), &conn.url)?;
    let api = ApiClient::new(&conn.url, Some(token))?;
    let now = chrono::Utc::now();
    let text = match cmd {
        ClientCommand::Login(_) => String::new(),
        ClientCommand::Submit(args) => {
            let mut body = match &args.file {
                Some(path) => request::read_spec(path)?,
                None => request::submit_body(&args)?,
            };
            request::add_submit_extras(&mut body, &args, &api).await?;
            let answer = api.submit(&body).await?;
            let ids = submitted_ids(&answer);
            let text = if args.json {
                pretty(&answer)?
            } else if let Some(array) = answer["array_id"].as_str() {
                format!("submitted array {array} ({} jobs)\n", ids.len())
            } else {
                let r: JobAck = typed(answer)?;
                format!("submitted {} ({})\n", r.job_id, r.status)
            };
            if !args.wait {
                text
            } else {
                emit(&text)?;
                if args.follow {
                    follow_first(&api, &ids, conn.raw).await?;
                }
                return wait_for(&api, &ids, wait::Until::All, None).await;
            }
        }
        ClientCommand::Wait(args) => {
            let mut ids = Vec::with_capacity(args.ids.len());
            for id in &args.ids {
                ids.push(api.resolve_job_id(id).await?);
            }
            let until = if args.any {
                wait::Until::Any
            } else {
                wait::Until::All
            };
            let timeout = args.timeout.map(std::time::Duration::from_secs);
            return wait_for(&api, &ids, until, timeout).await;
        }
        ClientCommand::Array(args) => match args.action {
            ArrayAction::Show { id, json } => {
                let answer = api.get_array(id).await?;
                if json {
                    pretty(&answer)?
                } else {
                    render::array_summary(&typed(answer)?)
                }
            }
            ArrayAction::Cancel { id } => {
                let r: crate::model::batch::ArrayAck = typed(api.cancel_array(id).await?)?;
                format!(
                    "{}: {} cancelled, {} asked to stop\n",
                    r.array_id, r.cancelled, r.stopping
                )
            }
            ArrayAction::Resubmit { id } => {
                let r: JobAck = typed(api.resubmit_array(id).await?)?;
                let n = r.job_ids.as_ref().map_or(1, Vec::len);
                let new = r.array_id.map(|a| a.to_string()).unwrap_or_default();
                format!("resubmitted {n} failed element(s) of {id} as array {new}\n")
            }
        },
        ClientCommand::Events(args) => {
            let id = api.resolve_job_id(&args.id).await?;
            let answer = api.job_events(id).await?;
            if args.json {
                pretty(&answer)?
            } else {
                render::events_table(&typed::<Vec<crate::model::JobEventView>>(answer)?)
            }
        }
        ClientCommand::Jobs(args) => {
            let answer = api.list_jobs(&request::jobs_query(&args)).await?;
            if args.json {
                pretty(&answer)?
            } else {
                render::jobs_table(&typed::<JobPage>(answer)?, now)
            }
        }
        ClientCommand::Show(args) => {
            let id = api.resolve_job_id(&args.id).await?;
            let answer = api.get_job(id).await?;
            if args.json {
                pretty(&answer)?
            } else {
                render::job_details(&typed::<JobView>(answer)?, now)
            }
        }
        ClientCommand::Cancel(args) => {
            let id = api.resolve_job_id(&args.id).await?;
            let r: JobAck = typed(api.cancel_job(id).await?)?;
            format!("{}: {}\n", r.job_id, r.status)
        }
        ClientCommand::Logs(args) => {
            let id = api.resolve_job_id(&args.id).await?;
            if conn.raw {
                api.logs(id, args.tail, args.follow, &mut std::io::stdout())
                    .await?;
            } else {
                let mut out = sanitize::StripWriter::new(std::io::stdout());
                api.logs(id, args.tail, args.follow, &mut out).await?;
            }
            return Ok(());
        }
        ClientCommand::Gpus(args) => {
            let answer = api.gpus().await?;
            if args.json {
                pretty(&answer)?
            } else {
                render::gpus_table(&typed::<GpuList>(answer)?)
            }
        }
        ClientCommand::Manifest(ManifestArgs {
            command: ManifestCommand::Suggest(args),
        }) => {
            let answer = api.manifest_suggestions().await?;
            if args.json {
                pretty(&answer)?
            } else {
                render::suggestions_table(&typed(answer)?)
            }
        }
        ClientCommand::Budget(args) => {
            let answer = api.my_budget().await?;
            if args.json {
                pretty(&answer)?
            } else {
                render::budget_lines(&typed::<Vec<crate::model::BudgetUse>>(answer)?)
            }
        }
        ClientCommand::Nodes(args) => {
            let answer = api.nodes().await?;
            if args.json {
                pretty(&answer)?
            } else {
                render::nodes_table(&typed::<Vec<NodeView>>(answer)?)
            }
        }
        ClientCommand::FairShare(args) => {
            let answer = api.fair_share().await?;
            if args.json {
                pretty(&answer)?
            } else {
                render::fair_share_table(&typed::<crate::model::FairShareReport>(answer)?)
            }
        }
        ClientCommand::Node(args) => match args.action {
            NodeAction::Drain { name } => {
                api.set_node_state(&name, "drained").await?;
                format!("{name}: drained\n")
            }
            NodeAction::Undrain { name } => {
                api.set_node_state(&name, "up").await?;
                format!("{name}: up\n")
            }
            NodeAction::Forget { name } => {
                let answer = api.forget_node(&name).await?;
                let failed = answer["jobs_failed"].as_u64().unwrap_or(0);
                format!("{name}: forgotten; {failed} job(s) ended failed (node_lost)\n")
            }
        },
        ClientCommand::Registry(args) => registry::run(&api, args).await?,
        ClientCommand::Team(args) => team::run(&api, args).await?,
    };
    if conn.raw {
        emit(&text)
    } else {
        emit(&sanitize::strip_controls(&text))
    }
}

/// The jobs a submission made: the one job, or every element of an array.
fn submitted_ids(answer: &Value) -> Vec<uuid::Uuid> {
    match answer["job_ids"].as_array() {
        Some(ids) => ids
            .iter()
            .filter_map(|v| v.as_str().and_then(|s| s.parse().ok()))
            .collect(),
        None => answer["job_id"]
            .as_str()
            .and_then(|s| s.parse().ok())
            .into_iter()
            .collect(),
    }
}

/// Waits for `ids`, prints one line per ended job, and ends the process with the wait's exit code.
async fn wait_for(
    api: &ApiClient,
    ids: &[uuid::Uuid],
    until: wait::Until,
    timeout: Option<std::time::Duration>,
) -> Result<()> {
    let waited = wait::wait(api, ids, until, timeout).await?;
    emit(&sanitize::strip_controls(&wait::summary(&waited, timeout)))?;
    match waited.exit_code(ids, until) {
        0 => Ok(()),
        code => Err(wait::Exit(code).into()),
    }
}

/// `submit --wait --follow`: once the first job has started, prints its log until it ends.
async fn follow_first(api: &ApiClient, ids: &[uuid::Uuid], raw: bool) -> Result<()> {
    let Some(&id) = ids.first() else {
        return Ok(());
    };
    loop {
        let view: JobView = typed(api.get_job(id).await?)?;
        if view.status.is_terminal() && view.started_at.is_none() {
            return Ok(());
        }
        if view.started_at.is_some() || view.status == crate::model::JobStatus::Running {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
    }
    if raw {
        api.logs(id, None, true, &mut std::io::stdout()).await
    } else {
        let mut out = sanitize::StripWriter::new(std::io::stdout());
        api.logs(id, None, true, &mut out).await
    }
}

async fn login(args: LoginArgs, conn: &ConnArgs) -> Result<()> {
    let dir = credentials::config_dir()?;
    let prompt = format!("Password for {} at {}: ", args.username, conn.url);
    let password = read_password(&prompt)?;
    let name = args
        .token_name
        .unwrap_or_else(|| format!("gpuq-cli-{}", chrono::Utc::now().format("%Y%m%dT%H%M%SZ")));
    let api = ApiClient::new(&conn.url, None)?;
    let answer = api
        .create_token(&args.username, &password, &name, args.expires_in_days)
        .await?;
    let r: CreatedToken = typed(answer)?;
    if r.token.expose().is_empty() {
        bail!("the server returned no token");
    }
    let creds = Credentials {
        url: conn.url.clone(),
        token: r.token,
    };
    let path = credentials::save(&dir, &creds)?;
    emit(&format!(
        "signed in to {} as {}; token saved to {}\n",
        conn.url,
        args.username,
        path.display()
    ))
}

/// One line from stdin when it is not a terminal, else a prompt without echo.
fn read_password(prompt: &str) -> Result<String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return rpassword::prompt_password(prompt).context("cannot read the password");
    }
    let mut line = String::new();
    let n = stdin
        .lock()
        .read_line(&mut line)
        .context("cannot read the password from stdin")?;
    if n == 0 {
        bail!("no password on standard input");
    }
    let trimmed = line.strip_suffix('\n').unwrap_or(&line);
    Ok(trimmed.strip_suffix('\r').unwrap_or(trimmed).to_owned())
}

fn typed<T: DeserializeOwned>(value: Value) -> Result<T> {
    serde_json::from_value(value).context("unexpected answer from the server")
}

fn pretty(value: &Value) -> Result<String> {
    let mut text = serde_json::to_string_pretty(value)?;
    text.push('\n');
    Ok(text)
}

/// Writes to stdout; a closed pipe (`gpuq jobs | head`) is not an error.
fn emit(text: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("cannot write to stdout")
        }
        _ => Ok(()),
    }
}
