//! Parsing of the clap types as a host binary would embed them.

use clap::{CommandFactory, Parser};

use crate::client::{ClientCommand, ConnArgs, SubmitArgs};
use crate::model::Secret;

#[derive(Parser)]
#[command(name = "gpuq")]
pub(super) struct Cli {
    #[command(flatten)]
    pub(super) conn: ConnArgs,
    #[command(subcommand)]
    pub(super) cmd: ClientCommand,
}

pub(super) fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("gpuq").chain(args.iter().copied()))
}

pub(super) fn submit(args: &[&str]) -> SubmitArgs {
    let mut full = vec!["submit"];
    full.extend_from_slice(args);
    match parse(&full).expect("parses").cmd {
        ClientCommand::Submit(s) => s,
        other => panic!("not submit: {other:?}"),
    }
}

#[test]
fn clap_definitions_are_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn global_url_and_token_after_subcommand() {
    let cli = parse(&["jobs", "--url", "http://h:1", "--token", "t"]).expect("parses");
    assert_eq!(cli.conn.url, "http://h:1");
    assert_eq!(cli.conn.token.as_ref().map(Secret::expose), Some("t"));
    assert!(!format!("{:?}", cli.conn).contains("\"t\""));
}

#[test]
fn submit_requires_image_and_command_unless_file() {
    assert!(parse(&["submit", "--image", "x"]).is_err());
    assert!(parse(&["submit", "--", "true"]).is_err());
    assert!(parse(&["submit", "--file", "spec.json"]).is_ok());
    assert!(parse(&["submit", "--file", "-", "--image", "x"]).is_err());
    assert!(parse(&["submit", "--file", "-", "--", "true"]).is_err());
}

#[test]
fn workload_and_vram_conflict() {
    let err = parse(&[
        "submit",
        "--image",
        "x",
        "--workload",
        "w",
        "--vram-mib",
        "1",
        "--",
        "true",
    ]);
    assert!(err.is_err());
}

#[test]
fn negative_priority_parses() {
    let s = submit(&["--image", "x", "--priority", "-5", "--", "true"]);
    assert_eq!(s.priority, Some(-5));
}

#[test]
fn jobs_status_list_is_split_on_commas() {
    let cli = parse(&["jobs", "--status", "queued,running", "--status", "failed"]).expect("ok");
    match cli.cmd {
        ClientCommand::Jobs(j) => assert_eq!(j.status, ["queued", "running", "failed"]),
        other => panic!("not jobs: {other:?}"),
    }
}
