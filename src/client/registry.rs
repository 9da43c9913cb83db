//! `gpuq registry login|list|logout`: registry credentials over the REST API (admins). The
//! password is read from standard input or a prompt without echo, never from the command line,
//! where `ps` and the shell's history would show it.

use anyhow::{bail, Result};
use reqwest::Method;
use serde_json::json;

use super::api::{path_segment, ApiClient};
use crate::model::{RegistryView, Secret};

/// Arguments of `gpuq registry`.
#[derive(Debug, Clone, clap::Args)]
pub struct RegistryArgs {
    /// What to do
    #[command(subcommand)]
    pub action: RegistryAction,
}

/// What `gpuq registry` does.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum RegistryAction {
    /// Store the credentials the nodes pull from HOST with (admins); the password is read from
    /// stdin, or prompted for without echo on a terminal
    Login {
        /// Registry host[:port]; docker.io for Docker Hub
        host: String,
        /// The registry account
        #[arg(long, short)]
        username: String,
    },
    /// List the registries with stored credentials: host, user, when and by whom (never a password)
    List {
        /// Print the server's JSON
        #[arg(long)]
        json: bool,
    },
    /// Remove the credentials of HOST (admins)
    Logout {
        /// Registry host[:port]
        host: String,
    },
}

/// Runs one `gpuq registry` command; the text to print.
pub async fn run(api: &ApiClient, args: RegistryArgs) -> Result<String> {
    match args.action {
        RegistryAction::Login { host, username } => {
            let prompt = format!("Password for {username} at registry {host}: ");
            let password = Secret::from(super::read_password(&prompt)?);
            if password.expose().is_empty() {
                bail!("empty password: nothing stored");
            }
            let body = json!({ "username": username, "password": password });
            let answer = api
                .call(Method::PUT, &registry_path(&host), Some(&body))
                .await?;
            let v: RegistryView = super::typed(answer)?;
            Ok(format!(
                "credentials for {} stored (user {}); the password is not shown again\n",
                v.host, v.username
            ))
        }
        RegistryAction::List { json } => {
            let answer = api.call(Method::GET, "/api/v1/registries", None).await?;
            if json {
                return super::pretty(&answer);
            }
            Ok(table(&super::typed::<Vec<RegistryView>>(answer)?))
        }
        RegistryAction::Logout { host } => {
            api.call(Method::DELETE, &registry_path(&host), None)
                .await?;
            Ok(format!("credentials for {host} removed\n"))
        }
    }
}

fn registry_path(host: &str) -> String {
    format!("/api/v1/registries/{}", path_segment(host))
}

/// The list as a table.
pub fn table(list: &[RegistryView]) -> String {
    if list.is_empty() {
        return "no registry has credentials\n".to_owned();
    }
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|r| {
            vec![
                r.host.clone(),
                r.username.clone(),
                r.set_at.format("%Y-%m-%d %H:%M UTC").to_string(),
                r.set_by.clone(),
            ]
        })
        .collect();
    super::render::table(&["REGISTRY", "USER", "SET", "BY"], &rows, &[])
}
