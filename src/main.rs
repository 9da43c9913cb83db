//! The `gpuq` binary: parse the command line and hand over.

#[cfg(feature = "ssr")]
#[tokio::main]
async fn main() -> std::process::ExitCode {
    use clap::Parser;
    use gpuq::server::cli::{BenchCommand, Cli, Command, LogFormat, UserCommand};
    use gpuq::server::{commands, serve};

    let cli = Cli::parse();
    let logs = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("GPUQ_LOG")
                .unwrap_or_else(|_| "info,sqlx=warn,tower_sessions=warn".into()),
        )
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
    let cli_json = cli.log_format == LogFormat::Json;
    let result = match cli.command {
        Command::Serve(args) => serve::serve(*args).await,
        Command::Doctor(args) => commands::host::doctor(*args).await,
        Command::Firewall(args) => commands::host::firewall(args).await,
        Command::User(UserCommand::Add(args)) => commands::user_add(args).await,
        Command::User(UserCommand::Set(args)) => gpuq::client::team::user_set(args, cli.conn).await,
        Command::Bench(BenchCommand::Admission(args)) => commands::bench::admission(args).await,
        Command::Bench(BenchCommand::Runner(args)) => commands::bench::runner(args).await,
        Command::Bench(BenchCommand::Vram(args)) => commands::bench::vram(args).await,
        Command::Bench(BenchCommand::Failover(args)) => commands::bench::failover(args).await,
        Command::Bench(BenchCommand::Logs(args)) => commands::bench::logs(args).await,
        Command::Bench(BenchCommand::Replay(args)) => commands::bench::replay(args),
        Command::Bench(BenchCommand::Fairness(args)) => commands::bench::fairness(args),
        Command::Bench(BenchCommand::Backfill(args)) => commands::bench::backfill(args),
        Command::Bench(BenchCommand::Deps(args)) => commands::bench::deps(args).await,
        Command::Bench(BenchCommand::Pull(args)) => commands::bench::pull(args).await,
        Command::Bench(BenchCommand::External(args)) => {
            commands::bench::external(args, cli.conn.url, cli.conn.token).await
        }
        Command::Client(cmd) => gpuq::client::run(cmd, cli.conn).await,
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        // `gpuq wait`'s code: what it had to say is printed already.
        Err(e) if e.downcast_ref::<gpuq::client::wait::Exit>().is_some() => {
            let code = e
                .downcast_ref::<gpuq::client::wait::Exit>()
                .map_or(1, |x| x.0);
            std::process::ExitCode::from(code)
        }
        Err(e) => {
            if cli_json {
                tracing::error!(error = format!("{e:#}"), "gpuq failed");
            } else {
                eprintln!("gpuq: {e:#}");
            }
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(not(feature = "ssr"))]
fn main() {
    // The browser bundle starts from `hydrate()` in lib.rs; this binary needs the `ssr` feature.
}
