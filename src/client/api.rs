//! HTTP calls to the gpuq REST API and mapping of error responses.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use reqwest::{Method, RequestBuilder, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};
use uuid::Uuid;

use crate::model::{JobPage, Secret};

/// Hint appended to 401 errors.
pub const LOGIN_HINT: &str = "run `gpuq login USERNAME` or set GPUQ_TOKEN";

/// An error response from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code.
    pub status: u16,
    /// The server's `error` message (or a fallback built from the status).
    pub message: String,
    /// The server's `kind`, when given.
    pub kind: Option<String>,
    /// The request field the error is about, when given.
    pub field: Option<String>,
    /// Advice appended to the message.
    pub hint: Option<String>,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)?;
        if let Some(field) = &self.field {
            write!(f, " (field: {field})")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "; {hint}")?;
        }
        Ok(())
    }
}

impl StdError for ApiError {}

#[derive(Deserialize)]
struct ErrorBody {
    error: String,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    field: Option<String>,
}

/// Maps a non-2xx response (status and body text) to an [`ApiError`].
/// A 401 carries [`LOGIN_HINT`].
pub fn map_error(status: u16, body: &str) -> ApiError {
    let parsed = serde_json::from_str::<ErrorBody>(body).ok();
    let hint = (status == 401).then(|| LOGIN_HINT.to_owned());
    match parsed {
        Some(b) => ApiError {
            status,
            // The message may quote other people's strings: no terminal control gets through.
            message: super::sanitize::strip_controls(&b.error),
            kind: b.kind,
            field: b.field.filter(|f| !f.is_empty()),
            hint,
        },
        None => {
            let reason = StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("error");
            let mut message = format!("HTTP {status} {reason}");
            let text: String = super::sanitize::strip_controls(body.trim())
                .chars()
                .take(200)
                .collect();
            if !text.is_empty() {
                message.push_str(": ");
                message.push_str(&text);
            }
            ApiError {
                status,
                message,
                kind: None,
                field: None,
                hint,
            }
        }
    }
}

/// Picks the single job id starting with `prefix` (case-insensitive).
pub fn match_prefix(prefix: &str, ids: &[Uuid]) -> Result<Uuid> {
    let p = prefix.to_ascii_lowercase();
    let mut found: Vec<Uuid> = ids
        .iter()
        .copied()
        .filter(|id| id.to_string().starts_with(&p))
        .collect();
    found.sort();
    found.dedup();
    match found.as_slice() {
        [] => bail!("no job matches ID {prefix}"),
        [one] => Ok(*one),
        many => {
            let list: Vec<String> = many.iter().map(Uuid::to_string).collect();
            bail!("ID {prefix} is ambiguous: {}", list.join(", "))
        }
    }
}

/// Client for one gpuq server.
#[derive(Debug, Clone)]
pub struct ApiClient {
    http: reqwest::Client,
    base: String,
    token: Option<Secret>,
}

impl ApiClient {
    /// A client for the server at `url`, authenticating with `token` if any.
    pub fn new(url: &str, token: Option<Secret>) -> Result<Self> {
        let parsed =
            reqwest::Url::parse(url).with_context(|| format!("invalid server URL {url}"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            bail!("invalid server URL {url}: expected http:// or https://");
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(120))
            .user_agent(concat!("gpuq-client/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("cannot build HTTP client")?;
        Ok(Self {
            http,
            base: url.trim_end_matches('/').to_owned(),
            token,
        })
    }

    /// Server URL in use, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// `POST /api/v1/tokens`: creates an API token (expiring after `expires_in_days` when given).
    pub async fn create_token(
        &self,
        username: &str,
        password: &str,
        name: &str,
        expires_in_days: Option<u32>,
    ) -> Result<Value> {
        let mut body = json!({"username": username, "password": password, "name": name});
        if let Some(days) = expires_in_days {
            body["expires_in_days"] = json!(days);
        }
        let req = self.request(Method::POST, "/api/v1/tokens").json(&body);
        self.send(req, false).await
    }

    /// `POST /api/v1/jobs`: submits a job.
    pub async fn submit(&self, body: &Value) -> Result<Value> {
        let req = self.request(Method::POST, "/api/v1/jobs").json(body);
        self.send(req, true).await
    }

    /// `GET /api/v1/jobs` with the given query parameters.
    pub async fn list_jobs(&self, query: &[(&str, String)]) -> Result<Value> {
        let req = self.request(Method::GET, "/api/v1/jobs").query(query);
        self.send(req, true).await
    }

    /// `GET /api/v1/jobs/{id}`.
    pub async fn get_job(&self, id: Uuid) -> Result<Value> {
        let req = self.request(Method::GET, &format!("/api/v1/jobs/{id}"));
        self.send(req, true).await
    }

    /// `GET /api/v1/jobs/{id}/events`: the job's trail.
    pub async fn job_events(&self, id: Uuid) -> Result<Value> {
        let req = self.request(Method::GET, &format!("/api/v1/jobs/{id}/events"));
        self.send(req, true).await
    }

    /// `GET /api/v1/arrays/{id}`: an array's counts per status.
    pub async fn get_array(&self, id: Uuid) -> Result<Value> {
        let req = self.request(Method::GET, &format!("/api/v1/arrays/{id}"));
        self.send(req, true).await
    }

    /// `POST /api/v1/arrays/{id}/cancel`: cancels every element of an array not yet ended.
    pub async fn cancel_array(&self, id: Uuid) -> Result<Value> {
        let req = self.request(Method::POST, &format!("/api/v1/arrays/{id}/cancel"));
        self.send(req, true).await
    }

    /// `POST /api/v1/arrays/{id}/resubmit`: submits again the array's failed elements.
    pub async fn resubmit_array(&self, id: Uuid) -> Result<Value> {
        let req = self.request(Method::POST, &format!("/api/v1/arrays/{id}/resubmit"));
        self.send(req, true).await
    }

    /// `POST /api/v1/jobs/{id}/cancel`.
    pub async fn cancel_job(&self, id: Uuid) -> Result<Value> {
        let req = self.request(Method::POST, &format!("/api/v1/jobs/{id}/cancel"));
        self.send(req, true).await
    }

    /// `GET /api/v1/jobs/{id}/logs`: writes the log to `out` as it arrives (with `follow`, until the
    /// job ends).
    pub async fn logs(
        &self,
        id: Uuid,
        tail: Option<usize>,
        follow: bool,
        out: &mut (impl std::io::Write + Send),
    ) -> Result<()> {
        let mut query = vec![("follow", follow.to_string())];
        if let Some(n) = tail {
            query.push(("tail", n.to_string()));
        }
        let mut req = self
            .request(Method::GET, &format!("/api/v1/jobs/{id}/logs"))
            .query(&query);
        if follow {
            // A followed log lasts as long as the job: no overall timeout.
            req = req.timeout(Duration::from_secs(365 * 24 * 3600));
        }
        let mut resp = req
            .send()
            .await
            .map_err(|e| anyhow!("cannot reach gpuq at {}: {}", self.base, chain(&e)))?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            return Err(map_error(status.as_u16(), &text).into());
        }
        while let Some(chunk) = resp
            .chunk()
            .await
            .map_err(|e| anyhow!("log stream from {} broke: {}", self.base, chain(&e)))?
        {
            out.write_all(&chunk)?;
            out.flush()?;
        }
        Ok(())
    }

    /// `GET /api/v1/manifest/suggestions`.
    pub async fn manifest_suggestions(&self) -> Result<Value> {
        let req = self.request(Method::GET, "/api/v1/manifest/suggestions");
        self.send(req, true).await
    }

    /// `GET /api/v1/gpus`.
    pub async fn gpus(&self) -> Result<Value> {
        let req = self.request(Method::GET, "/api/v1/gpus");
        self.send(req, true).await
    }

    /// `GET /api/v1/me/budget`: the caller's own budgets.
    pub async fn my_budget(&self) -> Result<Value> {
        let req = self.request(Method::GET, "/api/v1/me/budget");
        self.send(req, true).await
    }

    /// `GET /api/v1/fair-share`.
    pub async fn fair_share(&self) -> Result<Value> {
        let req = self.request(Method::GET, "/api/v1/fair-share");
        self.send(req, true).await
    }

    /// `GET /api/v1/nodes`.
    pub async fn nodes(&self) -> Result<Value> {
        let req = self.request(Method::GET, "/api/v1/nodes");
        self.send(req, true).await
    }

    /// `PATCH /api/v1/nodes/{name}` with `{"state": state}` (`drained` or `up`).
    pub async fn set_node_state(&self, name: &str, state: &str) -> Result<Value> {
        let req = self
            .request(
                Method::PATCH,
                &format!("/api/v1/nodes/{}", path_segment(name)),
            )
            .json(&json!({ "state": state }));
        self.send(req, true).await
    }

    /// `DELETE /api/v1/nodes/{name}`: forgets a lost node.
    pub async fn forget_node(&self, name: &str) -> Result<Value> {
        let req = self.request(
            Method::DELETE,
            &format!("/api/v1/nodes/{}", path_segment(name)),
        );
        self.send(req, true).await
    }

    /// `method path` with `body` as JSON, if any: for the commands that need nothing more.
    pub async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value> {
        let mut req = self.request(method, path);
        if let Some(body) = body {
            req = req.json(body);
        }
        self.send(req, true).await
    }

    /// Turns a full job ID, or a unique prefix of one (as shown by
    /// `gpuq jobs`), into the job's UUID. Prefixes are looked up among the
    /// jobs the server lists.
    pub async fn resolve_job_id(&self, id: &str) -> Result<Uuid> {
        if let Ok(uuid) = Uuid::parse_str(id) {
            return Ok(uuid);
        }
        let valid = id.len() >= 4 && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
        if !valid {
            bail!("invalid job ID {id:?}: give the full ID or at least its first 4 characters");
        }
        let mut ids = Vec::new();
        for page in 1..=100u64 {
            let query = [("page", page.to_string()), ("per_page", "100".to_owned())];
            let value = self.list_jobs(&query).await?;
            let list: JobPage = serde_json::from_value(value).context("unexpected job list")?;
            if list.jobs.is_empty() {
                break;
            }
            ids.extend(list.jobs.iter().map(|j| j.id));
            if i64::try_from(ids.len()).unwrap_or(i64::MAX) >= list.total {
                break;
            }
        }
        match_prefix(id, &ids)
    }

    fn request(&self, method: Method, path: &str) -> RequestBuilder {
        let req = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(token) => req.bearer_auth(token.expose()),
            None => req,
        }
    }

    async fn send(&self, req: RequestBuilder, hint_on_401: bool) -> Result<Value> {
        let resp = req.send().await.map_err(|e| {
            // reqwest's own message repeats the URL: start at its cause.
            let cause = e.source().map_or_else(|| chain(&e), chain);
            anyhow!("cannot reach gpuq at {}: {cause}", self.base)
        })?;
        let status = resp.status();
        let text = resp
            .text()
            .await
            .map_err(|e| anyhow!("error reading the answer of {}: {}", self.base, chain(&e)))?;
        if !status.is_success() {
            let mut err = map_error(status.as_u16(), &text);
            if !hint_on_401 {
                err.hint = None;
            }
            return Err(err.into());
        }
        if text.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&text)
            .with_context(|| format!("invalid JSON in the answer of {}", self.base))
    }
}

/// What a path segment escapes: all but RFC 3986's unreserved characters, so a node name with
/// `/` or `?` stays one segment.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `text` percent-encoded for use as one path segment.
pub(crate) fn path_segment(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

/// An error and its sources, joined by `: `, without repeats.
fn chain(err: &dyn StdError) -> String {
    let mut parts: Vec<String> = vec![err.to_string()];
    let mut source = err.source();
    while let Some(s) = source {
        let text = s.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}
