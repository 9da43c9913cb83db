//! A runner and scheduler in this process, and waiting for jobs to reach a status.

use super::{pass_config, TestApp};
use serde_json::Value;

/// A node in this test process (so tests can choose the launch mode): the app's notifier, the
/// runner and a scheduler, as `gpuq serve` runs them.
pub struct Node {
    inner: gpuq::server::node::NodeTasks,
    /// The card tasks, once started ([`Node::watch_cards`]): their stop, and the tasks.
    cards: Option<(
        tokio::sync::watch::Sender<bool>,
        Vec<tokio::task::JoinHandle<()>>,
    )>,
}

impl Node {
    /// Starts a node: re-adoption first, then the runner and a scheduler.
    pub async fn start(app: &TestApp, node: &str, mode: gpuq::server::runtime::LaunchMode) -> Node {
        Self::start_with(app, node, mode, Default::default(), Vec::new()).await
    }

    /// A node whose runner has this uid range and, beside the app's logs folder, these
    /// never-mount paths.
    pub async fn start_with(
        app: &TestApp,
        node: &str,
        mode: gpuq::server::runtime::LaunchMode,
        job_uids: gpuq::server::db::job_uids::JobUidRange,
        never: Vec<std::path::PathBuf>,
    ) -> Node {
        let docker = gpuq::server::runtime::Docker::connect()
            .await
            .expect("dockerd must be running");
        Self::start_full(app, node, mode, job_uids, never, docker).await
    }

    /// A fenced node whose jobs run on `docker` (a throw-away dockerd).
    pub async fn start_on(
        app: &TestApp,
        node: &str,
        docker: gpuq::server::runtime::Docker,
    ) -> Node {
        let mode = gpuq::server::runtime::LaunchMode::Fenced;
        Self::start_full(app, node, mode, Default::default(), Vec::new(), docker).await
    }

    async fn start_full(
        app: &TestApp,
        node: &str,
        mode: gpuq::server::runtime::LaunchMode,
        job_uids: gpuq::server::db::job_uids::JobUidRange,
        never: Vec<std::path::PathBuf>,
        docker: gpuq::server::runtime::Docker,
    ) -> Node {
        use gpuq::server::node;
        use gpuq::server::runner::RunnerConfig;
        let mut never_mount = vec![app.logs_dir.clone()];
        never_mount.extend(never);
        let cfg = RunnerConfig {
            node: node.to_owned(),
            logs_dir: app.logs_dir.clone(),
            log_max_bytes: 1 << 20,
            stop_grace: std::time::Duration::from_secs(1),
            mode,
            job_uids,
            never_mount,
            secrets: app.secrets.clone(),
        };
        let pass = gpuq::server::admission::PassConfig {
            cpu_node: node.to_owned(),
            ..pass_config()
        };
        let inner = node::start_runner(app.pool.clone(), app.notifier.clone(), pass, docker, cfg)
            .await
            .expect("the node starts");
        Node { inner, cards: None }
    }

    /// Starts this node's card tasks as `gpuq serve` does (`node::start_cards`): the card
    /// observer, the inventory sync, the usage sampler and, with `tasks.vram`, VRAM policing.
    pub async fn watch_cards(
        &mut self,
        app: &TestApp,
        tasks: gpuq::server::node::CardTasks,
    ) -> gpuq::server::gpu::observer::Cards {
        assert!(self.cards.is_none(), "the card tasks run already");
        let (stop, rx) = tokio::sync::watch::channel(false);
        let (cards, run) = gpuq::server::node::start_cards(&app.pool, tasks, &rx)
            .await
            .expect("the card tasks start");
        self.cards = Some((stop, run.into_iter().map(tokio::spawn).collect()));
        cards
    }

    /// Stops the card tasks, if they run, and waits until they have.
    pub async fn stop_cards(&mut self) {
        if let Some((stop, tasks)) = self.cards.take() {
            let _ = stop.send(true);
            for t in tasks {
                t.await.expect("a card task");
            }
        }
    }

    /// Stops the card tasks, runner, scheduler and notifier (containers already running are left
    /// alone).
    pub async fn stop(mut self) {
        self.stop_cards().await;
        self.inner.stop().await;
    }
}

/// Polls a job until its status is one of `statuses` (or panics after `secs`).
pub async fn wait_status(
    app: &TestApp,
    bearer: &str,
    id: uuid::Uuid,
    statuses: &[&str],
    secs: u64,
) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    loop {
        let v = app.job(bearer, id).await;
        if statuses.iter().any(|s| v["status"] == *s) {
            return v;
        }
        if std::time::Instant::now() >= deadline {
            // Its trail (the API's, as its page shows it) says where it stood still: a deferred
            // launch names why.
            let path = format!("/api/v1/jobs/{id}/events");
            let trail = app.api("GET", &path, Some(bearer), None).await;
            panic!(
                "job {id} never reached {statuses:?}: {v}\nits events: {}",
                trail.text
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// Waits (up to 60 s) for a job to end, asserts that it failed and returns why.
pub async fn failure_reason(app: &TestApp, bearer: &str, id: uuid::Uuid) -> String {
    let v = wait_status(app, bearer, id, &["succeeded", "failed"], 60).await;
    assert_eq!(v["status"], "failed", "{v}");
    v["status_reason"].as_str().unwrap().to_owned()
}

/// Cancels a job as `bearer` (the API must accept) and waits (up to 30 s each) until it is
/// cancelled and its runner has removed its container.
pub async fn cancel_and_wait(app: &TestApp, bearer: &str, id: uuid::Uuid) -> Value {
    let c = app.post(&format!("/api/v1/jobs/{id}/cancel"), bearer).await;
    assert_eq!(c.status, 200, "{}", c.text);
    let v = wait_status(app, bearer, id, &["cancelled"], 30).await;
    // The runner removes the container after recording the end: a test that ends (and stops its
    // server) at `cancelled` could leave the container behind on the host.
    super::isolation::wait_container_removed(app, id).await;
    v
}

/// One simulated card (`spec`, as `--sim-gpus` takes it) on a fenced node of this process, an
/// admin and the member `alice`: what the tests of jobs on a card (VRAM, idle) start from.
pub struct FencedCard {
    /// The app.
    pub app: TestApp,
    /// An admin's bearer token.
    pub admin: String,
    /// `alice`'s bearer token.
    pub member: String,
    /// The card.
    pub card: uuid::Uuid,
    /// The node.
    pub node: Node,
}

impl FencedCard {
    /// Starts it, the node named `node`.
    pub async fn start(pool: sqlx::PgPool, spec: &str, node: &str) -> Self {
        let app = TestApp::with_sim_devices(pool, 1).await;
        let card = app.sim_cards(spec, node).await[0];
        let (admin, member) = app.admin_and_member("alice").await;
        let node = Node::start(&app, node, gpuq::server::runtime::LaunchMode::Fenced).await;
        FencedCard {
            app,
            admin,
            member,
            card,
            node,
        }
    }

    /// Cancels the member's jobs in `running` (each must be running, and be cancelled).
    pub async fn cancel(&self, running: &[uuid::Uuid]) {
        for &id in running {
            cancel_and_wait(&self.app, &self.member, id).await;
        }
    }

    /// [`FencedCard::cancel`]s `running` and stops the node.
    pub async fn end(self, running: &[uuid::Uuid]) {
        self.cancel(running).await;
        self.node.stop().await;
    }
}
