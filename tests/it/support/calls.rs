//! Shorthands for the authenticated JSON API calls tests make most: one line a call, so a test
//! reads as the requests it makes. Each is [`TestApp::api`] with that method.

use super::{Reply, TestApp};
use serde_json::Value;
use uuid::Uuid;

impl TestApp {
    /// `GET path` as `auth` (a bearer header or a session cookie).
    pub async fn get(&self, path: &str, auth: &str) -> Reply {
        self.api("GET", path, Some(auth), None).await
    }

    /// `POST path` with no body, as `auth`.
    pub async fn post(&self, path: &str, auth: &str) -> Reply {
        self.api("POST", path, Some(auth), None).await
    }

    /// `POST path` with a JSON body, as `auth`.
    pub async fn post_json(&self, path: &str, auth: &str, body: Value) -> Reply {
        self.api("POST", path, Some(auth), Some(body)).await
    }

    /// `PUT path` with a JSON body, as `auth`.
    pub async fn put(&self, path: &str, auth: &str, body: Value) -> Reply {
        self.api("PUT", path, Some(auth), Some(body)).await
    }

    /// `PATCH path` with a JSON body, as `auth`.
    pub async fn patch(&self, path: &str, auth: &str, body: Value) -> Reply {
        self.api("PATCH", path, Some(auth), Some(body)).await
    }

    /// `DELETE path` as `auth`.
    pub async fn delete(&self, path: &str, auth: &str) -> Reply {
        self.api("DELETE", path, Some(auth), None).await
    }
}

impl TestApp {
    /// An admin (`root`) and then a member `name`: their bearer headers, in that order.
    pub async fn admin_and_member(&self, name: &str) -> (String, String) {
        let admin = self.bearer("root", gpuq::model::Role::Admin).await;
        (admin, self.bearer(name, gpuq::model::Role::Member).await)
    }

    /// A member `name`, a manager (`mia`) and an admin (`root`): their bearer headers, in that
    /// order.
    pub async fn member_manager_admin(&self, name: &str) -> (String, String, String) {
        use gpuq::model::Role;
        let member = self.bearer(name, Role::Member).await;
        let manager = self.bearer("mia", Role::Manager).await;
        (member, manager, self.bearer("root", Role::Admin).await)
    }
}

impl TestApp {
    /// An app with simulated cards `spec` on `node` (see [`TestApp::sim_cards`]) and their ids.
    pub async fn with_cards(pool: sqlx::PgPool, spec: &str, node: &str) -> (TestApp, Vec<Uuid>) {
        let app = TestApp::new(pool).await;
        let cards = app.sim_cards(spec, node).await;
        (app, cards)
    }

    /// An app on a host with the device nodes of `n` simulated cards (a fenced runner maps them
    /// into jobs).
    pub async fn with_sim_devices(pool: sqlx::PgPool, n: usize) -> TestApp {
        let app = TestApp::new(pool).await;
        gpuq::server::runtime::ensure_sim_devices(n).unwrap();
        app
    }

    /// An app with one simulated 24 GiB RTX 3090 on `node`.
    pub async fn with_one_card(pool: sqlx::PgPool, node: &str) -> TestApp {
        let app = TestApp::new(pool).await;
        app.sim_cards("1x24576:NVIDIA GeForce RTX 3090", node).await;
        app
    }
}

impl TestApp {
    /// `POST /api/v1/users` as `admin`: a user `name` of `role` with `password`.
    pub async fn create_user(&self, admin: &str, name: &str, role: &str, password: &str) -> Reply {
        let body = serde_json::json!({ "username": name, "role": role, "password": password });
        self.post_json("/api/v1/users", admin, body).await
    }

    /// `PATCH /api/v1/users/{id}` as `admin` with `body`.
    pub async fn update_user(&self, admin: &str, id: impl std::fmt::Display, body: Value) -> Reply {
        self.patch(&format!("/api/v1/users/{id}"), admin, body)
            .await
    }
}

impl TestApp {
    /// A new app (see [`TestApp::new`]) with an admin and a member, as
    /// [`TestApp::admin_and_member`] makes them.
    pub async fn with_admin_and_member(
        pool: sqlx::PgPool,
        name: &str,
    ) -> (TestApp, String, String) {
        let app = TestApp::new(pool).await;
        let (admin, member) = app.admin_and_member(name).await;
        (app, admin, member)
    }
}
