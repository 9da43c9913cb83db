//! Reading the test database directly, for what the API does not show (or to check that it
//! shows the truth).

use super::TestApp;
use gpuq::server::db::embedded::EmbeddedPg;
use sqlx::{Decode, Encode, Postgres, Type};

/// A value read from one column.
pub trait Column: Send + Unpin + Type<Postgres> + for<'r> Decode<'r, Postgres> {}
impl<T: Send + Unpin + Type<Postgres> + for<'r> Decode<'r, Postgres>> Column for T {}

/// A value bound to a query's `$1`.
pub trait Arg<'q>: 'q + Encode<'q, Postgres> + Type<Postgres> {}
impl<'q, A: 'q + Encode<'q, Postgres> + Type<Postgres>> Arg<'q> for A {}

impl TestApp {
    /// The one value `sql` selects.
    pub async fn scalar<T: Column>(&self, sql: &str) -> T {
        sqlx::query_scalar(sql).fetch_one(&self.pool).await.unwrap()
    }

    /// The one value `sql` selects with `arg` as `$1`.
    pub async fn scalar_of<'q, T: Column, A: Arg<'q>>(&self, sql: &'q str, arg: A) -> T {
        let query = sqlx::query_scalar(sql).bind(arg);
        query.fetch_one(&self.pool).await.unwrap()
    }

    /// Every value `sql` selects with `arg` as `$1`, in the order it selects them.
    pub async fn column_of<'q, T: Column, A: Arg<'q>>(&self, sql: &'q str, arg: A) -> Vec<T> {
        let query = sqlx::query_scalar(sql).bind(arg);
        query.fetch_all(&self.pool).await.unwrap()
    }

    /// Runs `sql` (a test's direct write: aging a row, ending a job by hand); fails the test if
    /// the database refuses it.
    pub async fn exec(&self, sql: &str) {
        sqlx::query(sql).execute(&self.pool).await.unwrap();
    }

    /// Runs `sql` with `arg` as `$1`; fails the test if the database refuses it.
    pub async fn exec_with<'q, A: Arg<'q>>(&self, sql: &'q str, arg: A) {
        sqlx::query(sql)
            .bind(arg)
            .execute(&self.pool)
            .await
            .unwrap();
    }
}

/// A fresh folder under /tmp for an embedded cluster. Postgres refuses root, so as root the
/// cluster belongs to `postgres`, which must reach the folder.
pub fn cluster_folder(prefix: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in("/tmp")
        .unwrap();
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    dir
}

/// Starts the embedded cluster in `data` (or attaches to the one already running there).
pub async fn start_cluster(data: &std::path::Path) -> EmbeddedPg {
    let data = data.to_owned();
    tokio::task::spawn_blocking(move || EmbeddedPg::start(&data, "postgres"))
        .await
        .unwrap()
        .expect("starting the embedded Postgres")
}
