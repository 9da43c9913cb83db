//! Repository for workload types and their per-model VRAM needs.

use sqlx::{PgExecutor, Postgres, Transaction};
use std::collections::BTreeMap;

/// The manifest: workload → (model → MiB), and descriptions.
#[derive(Debug, Clone, Default)]
pub struct Manifest {
    /// Per-model needs by workload.
    pub needs: BTreeMap<String, BTreeMap<String, i64>>,
    /// Descriptions by workload.
    pub descriptions: BTreeMap<String, String>,
}

/// Reads the whole manifest.
pub async fn load(db: &mut sqlx::PgConnection) -> sqlx::Result<Manifest> {
    let types: Vec<(String, String)> =
        sqlx::query_as("SELECT name, description FROM workload_types ORDER BY name")
            .fetch_all(&mut *db)
            .await?;
    let entries: Vec<(String, String, i64)> =
        sqlx::query_as("SELECT workload_type, gpu_model, vram_mib FROM manifest_entries")
            .fetch_all(&mut *db)
            .await?;
    let mut m = Manifest::default();
    for (name, description) in types {
        m.needs.entry(name.clone()).or_default();
        m.descriptions.insert(name, description);
    }
    for (w, model, mib) in entries {
        m.needs.entry(w).or_default().insert(model, mib);
    }
    Ok(m)
}

/// The per-model needs of one workload type, or `None` if it does not exist.
pub async fn needs_of(
    db: &mut sqlx::PgConnection,
    workload: &str,
) -> sqlx::Result<Option<BTreeMap<String, i64>>> {
    let exists: Option<String> =
        sqlx::query_scalar("SELECT name FROM workload_types WHERE name = $1")
            .bind(workload)
            .fetch_optional(&mut *db)
            .await?;
    if exists.is_none() {
        return Ok(None);
    }
    let rows: Vec<(String, i64)> =
        sqlx::query_as("SELECT gpu_model, vram_mib FROM manifest_entries WHERE workload_type = $1")
            .bind(workload)
            .fetch_all(&mut *db)
            .await?;
    Ok(Some(rows.into_iter().collect()))
}

/// Creates or replaces a workload type with exactly these entries.
pub async fn put(
    tx: &mut Transaction<'_, Postgres>,
    name: &str,
    description: &str,
    vram_mib: &BTreeMap<String, i64>,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO workload_types (name, description) VALUES ($1, $2) \
         ON CONFLICT (name) DO UPDATE SET description = EXCLUDED.description, updated_at = now()",
    )
    .bind(name)
    .bind(description)
    .execute(&mut **tx)
    .await?;
    sqlx::query("DELETE FROM manifest_entries WHERE workload_type = $1")
        .bind(name)
        .execute(&mut **tx)
        .await?;
    let models: Vec<&str> = vram_mib.keys().map(String::as_str).collect();
    let mibs: Vec<i64> = vram_mib.values().copied().collect();
    sqlx::query(
        "INSERT INTO manifest_entries (workload_type, gpu_model, vram_mib) \
         SELECT $1, m, v FROM unnest($2::text[], $3::bigint[]) AS t(m, v)",
    )
    .bind(name)
    .bind(&models)
    .bind(&mibs)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Deletes a workload type. Returns whether it existed.
pub async fn delete(db: impl PgExecutor<'_>, name: &str) -> sqlx::Result<bool> {
    let res = sqlx::query("DELETE FROM workload_types WHERE name = $1")
        .bind(name)
        .execute(db)
        .await?;
    Ok(res.rows_affected() == 1)
}
