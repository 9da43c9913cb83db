//! What a submission may ask beyond one plain job: dependencies on other jobs (`after_ok`,
//! `after_any`, `after_failed`) and arrays or sweeps (`array`, `sweep`).
//!
//! [`split`] takes these fields out of the body before the spec parser sees it (the stored spec
//! stays a plain spec, so a resubmission does not repeat them). Parents are checked in the
//! submission's transaction: each must exist and be one the submitter may read the details of
//! (their own, or anyone's for managers and admins); a parent must exist before its child, so no
//! cycle can ever be written. An array's elements are written in that same one transaction.

use crate::model::batch::{self, Batch};
use crate::model::spec::JobSpec;
use crate::model::{AppError, JobAck, JobEventKind, JobStatus};
use crate::server::admission::gates::DepKind;
use crate::server::auth::CurrentUser;
use crate::server::db::{events, lifecycle};
use crate::server::error::OrInternal;
use serde_json::{json, Map, Value};
use sqlx::PgConnection;
use std::collections::{BTreeMap, HashMap};
use uuid::Uuid;

/// The most parents one job may name, over the three fields.
pub const MAX_PARENTS: usize = 64;

/// What a submission asks beyond its spec.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    /// Parents and how the job waits for each, in the order given.
    pub deps: Vec<(Uuid, DepKind)>,
    /// The elements of an array or sweep.
    pub batch: Option<Batch>,
    /// The environment keys a sweep sets (upper-cased), by the key as the sweep named it.
    sweep_keys: BTreeMap<String, String>,
}

impl Extras {
    /// An error the spec parser raised about `env.KEY` where a sweep set `KEY` names the sweep's
    /// field instead.
    pub fn rename_field(&self, e: AppError) -> AppError {
        match e {
            AppError::Invalid { field, message } => {
                let renamed = self
                    .sweep_keys
                    .iter()
                    .find(|(_, env)| field == format!("env.{env}"))
                    .map(|(key, _)| format!("sweep.{key}"));
                AppError::Invalid {
                    field: renamed.unwrap_or(field),
                    message,
                }
            }
            other => other,
        }
    }
}

const DEP_FIELDS: [DepKind; 3] = [DepKind::Ok, DepKind::Any, DepKind::Failed];

/// Takes `after_*`, `array` and `sweep` out of a submission body. The spec left behind is
/// returned as text; a sweep's first element's values are put in its `env`, so that the spec
/// parser checks the sweep's keys as it checks any variable (a reserved name is refused). A body
/// that is not a JSON object is returned as it is, for the spec parser to refuse.
pub fn split(body: &str) -> Result<(Extras, String), AppError> {
    let Ok(Value::Object(mut map)) = serde_json::from_str::<Value>(body) else {
        return Ok((Extras::default(), body.to_owned()));
    };
    let mut extras = Extras::default();
    for kind in DEP_FIELDS {
        let Some(v) = map.remove(kind.field()) else {
            continue;
        };
        let field = kind.field();
        let Value::Array(items) = v else {
            return Err(AppError::invalid(field, "a list of job ids"));
        };
        for (i, item) in items.iter().enumerate() {
            let id = item
                .as_str()
                .and_then(|s| Uuid::parse_str(s).ok())
                .ok_or_else(|| AppError::invalid(format!("{field}[{i}]"), "not a job id"))?;
            if !extras.deps.contains(&(id, kind)) {
                extras.deps.push((id, kind));
            }
        }
    }
    if extras.deps.len() > MAX_PARENTS {
        return Err(AppError::invalid(
            "after_ok",
            format!(
                "{} dependencies: a job has at most {MAX_PARENTS}",
                extras.deps.len()
            ),
        ));
    }
    let array = match map.remove("array") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(_) => {
            return Err(AppError::invalid(
                "array",
                "a string such as \"0-99%8\" or \"0,3,7\"",
            ))
        }
    };
    let sweep = match map.remove("sweep") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(sweep_pairs(m)?),
        Some(_) => {
            return Err(AppError::invalid(
                "sweep",
                "an object of lists, such as {\"lr\": [\"1e-3\", \"3e-4\"]}",
            ))
        }
    };
    extras.batch = batch::parse(array.as_deref(), sweep.as_deref())
        .map_err(|e| AppError::invalid(e.field, e.message))?;
    if let (Some(sweep), Some(b)) = (&sweep, &extras.batch) {
        let env = map
            .entry("env")
            .or_insert_with(|| Value::Object(Map::new()));
        let Value::Object(env) = env else {
            return Err(AppError::invalid("env", "an object of NAME: value"));
        };
        for (key, _) in sweep {
            let upper = key.to_ascii_uppercase();
            if env.contains_key(&upper) {
                return Err(AppError::invalid(
                    format!("sweep.{key}"),
                    format!("{upper} is set in env too: the sweep sets it"),
                ));
            }
            extras.sweep_keys.insert(key.clone(), upper);
        }
        if let Some(first) = b.elements.first() {
            for (k, v) in &first.env {
                env.insert(k.clone(), Value::String(v.clone()));
            }
        }
    }
    Ok((extras, Value::Object(map).to_string()))
}

/// A sweep's lists, values as strings (numbers and booleans are written as JSON writes them).
fn sweep_pairs(m: Map<String, Value>) -> Result<Vec<(String, Vec<String>)>, AppError> {
    let mut pairs = Vec::with_capacity(m.len());
    for (key, v) in m {
        let field = format!("sweep.{key}");
        let Value::Array(items) = v else {
            return Err(AppError::invalid(field, "a list of values"));
        };
        let mut values = Vec::with_capacity(items.len());
        for item in items {
            values.push(match item {
                Value::String(s) => s,
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return Err(AppError::invalid(field, "values are strings or numbers")),
            });
        }
        pairs.push((key, values));
    }
    Ok(pairs)
}

/// Checks that every parent exists and that `user` may read its details; a parent that does not
/// exist and one that is someone else's are refused alike (400 naming the id), so the answer
/// tells nothing about other members' jobs.
pub async fn check_parents(
    db: &mut PgConnection,
    user: &CurrentUser,
    deps: &[(Uuid, DepKind)],
) -> Result<(), AppError> {
    if deps.is_empty() {
        return Ok(());
    }
    let ids: Vec<Uuid> = deps.iter().map(|(id, _)| *id).collect();
    let owners: HashMap<Uuid, Uuid> =
        sqlx::query_as::<_, (Uuid, Uuid)>("SELECT id, owner_id FROM jobs WHERE id = ANY($1)")
            .bind(&ids)
            .fetch_all(&mut *db)
            .await
            .or_internal("reading the parents of a submission")?
            .into_iter()
            .collect();
    for (id, kind) in deps {
        let visible = owners
            .get(id)
            .is_some_and(|owner| super::access::sees_details(user, *owner));
        if !visible {
            return Err(AppError::invalid(
                kind.field(),
                format!("job {id} does not exist or is not one you may depend on (yours)"),
            ));
        }
    }
    Ok(())
}

/// Records that each of `children` waits for `deps`.
pub async fn record_deps(
    db: &mut PgConnection,
    children: &[Uuid],
    deps: &[(Uuid, DepKind)],
) -> Result<(), AppError> {
    if deps.is_empty() {
        return Ok(());
    }
    let (mut c, mut p, mut k) = (Vec::new(), Vec::new(), Vec::new());
    for child in children {
        for (parent, kind) in deps {
            c.push(*child);
            p.push(*parent);
            k.push(kind.as_str());
        }
    }
    sqlx::query(
        "INSERT INTO job_deps (child, parent, kind) \
         SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[])",
    )
    .bind(&c)
    .bind(&p)
    .bind(&k)
    .execute(&mut *db)
    .await
    .or_internal("recording dependencies")?;
    Ok(())
}

/// One element to write: its index, its stored spec and its name.
#[derive(Debug, Clone)]
pub struct ElementRow {
    /// `array_index`.
    pub index: u32,
    /// The spec stored with it (the array's, with its own env and name).
    pub spec: Value,
    /// `<name>-<index>`.
    pub name: String,
}

/// The elements of a submitted array or sweep: the checked spec, each with its own values and
/// name.
pub fn elements_of(spec: &JobSpec, b: &Batch) -> Result<Vec<ElementRow>, AppError> {
    let base = serde_json::to_value(spec).or_internal("encoding a spec")?;
    let mut rows = Vec::with_capacity(b.elements.len());
    for e in &b.elements {
        let name = format!("{}-{}", spec.name(), e.index);
        let mut element = base.clone();
        if !e.env.is_empty() {
            if !element["env"].is_object() {
                element["env"] = json!({});
            }
            for (k, v) in &e.env {
                element["env"][k] = Value::String(v.clone());
            }
        }
        element["name"] = Value::String(name.clone());
        rows.push(ElementRow {
            index: e.index,
            spec: element,
            name,
        });
    }
    Ok(rows)
}

/// Writes an array's elements, in the caller's transaction: the array's row, one queued job per
/// element (what they share from `spec`, their own spec and name from `rows`), their trail
/// and dependencies. Returns the answer with the array's id
/// and every element's.
pub async fn enter_array(
    db: &mut PgConnection,
    user: &CurrentUser,
    (name, spec): (&str, &JobSpec),
    running_limit: Option<u32>,
    rows: Vec<ElementRow>,
    deps: &[(Uuid, DepKind)],
) -> Result<JobAck, AppError> {
    let size = rows.len() as i32;
    let array_id: Uuid = sqlx::query_scalar(
        "INSERT INTO job_arrays (owner_id, name, size, running_limit) VALUES ($1, $2, $3, $4) \
         RETURNING id",
    )
    .bind(user.id)
    .bind(name)
    .bind(size)
    .bind(running_limit.map(|n| n.min(i32::MAX as u32) as i32))
    .fetch_one(&mut *db)
    .await
    .or_internal("recording an array")?;
    let mut ids = Vec::with_capacity(rows.len());
    let mut indexes = Vec::with_capacity(rows.len());
    for e in rows {
        let id = lifecycle::enter(&mut *db, &super::queued_job(user, &e.name, e.spec, spec))
            .await
            .or_internal("storing an array's element")?;
        ids.push(id);
        indexes.push(e.index as i32);
    }
    sqlx::query(
        "UPDATE jobs j SET array_id = $1, array_index = t.i \
         FROM unnest($2::uuid[], $3::int[]) AS t(id, i) WHERE j.id = t.id",
    )
    .bind(array_id)
    .bind(&ids)
    .bind(&indexes)
    .execute(&mut *db)
    .await
    .or_internal("numbering an array's elements")?;
    let detail = json!({ "array_id": array_id });
    sqlx::query(
        "INSERT INTO job_events (job_id, actor, kind, detail) \
         SELECT id, $2, $3, $4 FROM unnest($1::uuid[]) AS t(id)",
    )
    .bind(&ids)
    .bind(&user.username)
    .bind(JobEventKind::Submitted)
    .bind(&detail)
    .execute(&mut *db)
    .await
    .or_internal("recording an array's submission")?;
    record_deps(db, &ids, deps).await?;
    events::wake(&mut *db, "submit")
        .await
        .or_internal("waking the scheduler")?;
    // One announcement: the pages refetch the whole list on any event.
    if let Some(first) = ids.first() {
        events::job_changed(&mut *db, *first, JobStatus::Queued)
            .await
            .or_internal("announcing a submission")?;
    }
    Ok(JobAck {
        job_id: ids.first().copied().unwrap_or_default(),
        status: JobStatus::Queued,
        array_id: Some(array_id),
        job_ids: Some(ids),
    })
}
