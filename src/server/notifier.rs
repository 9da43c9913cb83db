//! The process's one LISTEN connection, fanned out in-process to typed subscribers: the scheduler
//! (wake), the runner (claim, cancel), live pages (events) and log followers (events, log growth).
//!
//! Postgres NOTIFY is a poke, not a queue: a notification sent while the connection is down is
//! gone. So after every reconnect, and to any subscriber that fell behind, the notifier says
//! [`Note::Missed`] and each subscriber refetches what it cares about. One slow backstop timer per
//! process ([`Note::Backstop`]) covers what no notification announces (deadlines, starvation,
//! retries); nothing polls per job.

use crate::model::{AuditKind, LiveEvent};
use crate::server::db::events::{EVENTS_CHANNEL, WAKE_CHANNEL};
use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::PgPool;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};
use uuid::Uuid;

/// What a subscriber hears.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// Someone asked for an admission pass (submit, finish, cancel, an admin's change).
    Wake,
    /// A job, the cards or the rules changed somewhere.
    Event(LiveEvent),
    /// Notifications may have been lost (the connection was re-made, or this subscriber fell
    /// behind): refetch.
    Missed,
    /// The process's slow backstop timer: look again even though nothing was heard.
    Backstop,
}

/// The notifier of one process: cheap to clone, every clone feeds the same subscribers.
#[derive(Debug, Clone)]
pub struct Notifier {
    notes: broadcast::Sender<Note>,
    logs: broadcast::Sender<Uuid>,
    backstop: Duration,
    policy: Arc<PolicyEpoch>,
}

/// Whether a launch policy read earlier may still be used: the epoch moves on before any note
/// that follows a policy change is published, so whoever acts on a later note sees it moved.
#[derive(Debug, Default)]
struct PolicyEpoch {
    epoch: AtomicU64,
    /// The LISTEN connection is up: only then is a change certain to be heard.
    listening: AtomicBool,
}

impl PolicyEpoch {
    fn advance(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
    }

    fn listening(&self, up: bool) {
        self.listening.store(up, Ordering::SeqCst);
        self.advance();
    }
}

/// Room for notes a slow subscriber has not read yet; past it the subscriber hears `Missed`.
const CAPACITY: usize = 4096;

impl Notifier {
    /// A notifier whose backstop timer fires every `backstop`. Nothing is heard until [`run`]
    /// is running.
    ///
    /// [`run`]: Notifier::run
    pub fn new(backstop: Duration) -> Self {
        Notifier {
            notes: broadcast::channel(CAPACITY).0,
            logs: broadcast::channel(CAPACITY).0,
            backstop: backstop.max(Duration::from_millis(10)),
            policy: Arc::default(),
        }
    }

    /// The launch policy's epoch: a policy read while it held this value may be used for as long
    /// as it still does. It moves on when a policy change is heard, when the LISTEN connection is
    /// made or lost, and on every backstop tick (so even a change whose notification never came
    /// is seen within one backstop interval). `None` while the notifier does not listen: then
    /// nothing read earlier may be used.
    pub fn policy_epoch(&self) -> Option<u64> {
        // The epoch first: a connection lost in between has moved it on by the time it is used.
        let epoch = self.policy.epoch.load(Ordering::SeqCst);
        self.policy
            .listening
            .load(Ordering::SeqCst)
            .then_some(epoch)
    }

    /// Starts hearing notes from now on.
    pub fn subscribe(&self) -> Subscription {
        Subscription {
            rx: self.notes.subscribe(),
        }
    }

    /// Starts hearing which jobs' logs grew in this process.
    pub fn subscribe_logs(&self) -> broadcast::Receiver<Uuid> {
        self.logs.subscribe()
    }

    /// Tells this process's log followers that `job`'s log grew (costs nothing when none listens).
    pub fn log_grew(&self, job: Uuid) {
        if self.logs.receiver_count() > 0 {
            let _ = self.logs.send(job);
        }
    }

    fn publish(&self, note: Note) {
        if stales_policy(&note) {
            self.policy.advance();
        }
        // No subscribers is fine: nobody is waiting right now.
        let _ = self.notes.send(note);
    }

    /// Holds the LISTEN connection and the backstop timer until `stop` turns true, reconnecting
    /// after a lost connection (and then telling every subscriber it may have missed something).
    pub async fn run(self, pool: PgPool, mut stop: watch::Receiver<bool>) {
        let mut timer = tokio::time::interval(self.backstop);
        timer.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        timer.tick().await;
        let mut connected_before = false;
        let mut retry = Duration::from_millis(200);
        loop {
            let mut listener = tokio::select! {
                _ = stop.changed() => return,
                _ = timer.tick() => { self.publish(Note::Backstop); continue; }
                l = listen(&pool) => match l {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!(error = %e, "notifier: cannot LISTEN; retrying (the backstop timer still runs)");
                        tokio::select! {
                            _ = stop.changed() => return,
                            _ = tokio::time::sleep(retry) => {}
                        }
                        retry = (retry * 2).min(Duration::from_secs(5));
                        continue;
                    }
                },
            };
            retry = Duration::from_millis(200);
            self.policy.listening(true);
            if connected_before {
                self.publish(Note::Missed);
            }
            connected_before = true;
            loop {
                tokio::select! {
                    _ = stop.changed() => break,
                    _ = timer.tick() => self.publish(Note::Backstop),
                    // `try_recv` answers `None` when the connection is lost, instead of quietly
                    // reconnecting as `recv` would: what was sent meanwhile must count as missed.
                    heard = listener.try_recv() => match heard {
                        Ok(Some(n)) => self.publish(note_of(n.channel(), n.payload())),
                        Ok(None) => {
                            tracing::warn!("notifier: LISTEN connection lost; reconnecting");
                            break;
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "notifier: LISTEN failed; reconnecting");
                            break;
                        }
                    },
                }
            }
            self.policy.listening(false);
            if *stop.borrow() {
                return;
            }
        }
    }
}

/// A LISTEN connection on its own one-connection pool: it holds its connection for as long as it
/// lives, and must not take one from the pool that requests and passes share.
async fn listen(pool: &PgPool) -> sqlx::Result<PgListener> {
    let own = PgPoolOptions::new()
        .max_connections(1)
        .connect_with((*pool.connect_options()).clone())
        .await?;
    let mut l = PgListener::connect_with(&own).await?;
    l.listen_all([WAKE_CHANNEL, EVENTS_CHANNEL]).await?;
    Ok(l)
}

/// Whether `note` may mean that a launch policy read before it is stale: a policy change, notes
/// possibly missed, the backstop tick.
fn stales_policy(note: &Note) -> bool {
    match note {
        Note::Event(LiveEvent::Changed { what, .. }) => *what == AuditKind::LaunchPolicy,
        Note::Missed | Note::Backstop => true,
        Note::Wake | Note::Event(_) => false,
    }
}

fn note_of(channel: &str, payload: &str) -> Note {
    if channel == WAKE_CHANNEL {
        return Note::Wake;
    }
    match serde_json::from_str::<LiveEvent>(payload) {
        Ok(event) => Note::Event(event),
        Err(e) => {
            // A newer gpuq may say things this one does not know: refetching is always safe.
            tracing::warn!(error = %e, payload, "notifier: unknown event; treating it as missed");
            Note::Missed
        }
    }
}

/// One subscriber's view of the notes.
#[derive(Debug)]
pub struct Subscription {
    rx: broadcast::Receiver<Note>,
}

impl Subscription {
    /// The next note; [`Note::Missed`] when this subscriber fell behind.
    pub async fn recv(&mut self) -> Note {
        match self.rx.recv().await {
            Ok(n) => n,
            Err(RecvError::Lagged(_)) => Note::Missed,
            // The notifier is gone (the process is stopping): nothing more will come.
            Err(RecvError::Closed) => std::future::pending().await,
        }
    }

    /// Drops the notes already queued: one pass or one claim that starts now serves every poke
    /// that came before it.
    pub fn skip_queued(&mut self) {
        loop {
            match self.rx.try_recv() {
                Ok(_) | Err(broadcast::error::TryRecvError::Lagged(_)) => continue,
                Err(_) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::JobStatus;

    #[test]
    fn channels_and_payloads_become_notes() {
        assert_eq!(note_of(WAKE_CHANNEL, "submit"), Note::Wake);
        let id = Uuid::new_v4();
        let payload = serde_json::to_string(&LiveEvent::job(id, JobStatus::Running)).unwrap();
        assert_eq!(
            note_of(EVENTS_CHANNEL, &payload),
            Note::Event(LiveEvent::job(id, JobStatus::Running))
        );
        assert_eq!(
            note_of(EVENTS_CHANNEL, r#"{"kind":"future"}"#),
            Note::Missed
        );
    }

    #[tokio::test]
    async fn a_subscriber_that_falls_behind_hears_missed() {
        let n = Notifier::new(Duration::from_secs(60));
        let mut sub = n.subscribe();
        for _ in 0..CAPACITY + 1 {
            n.publish(Note::Wake);
        }
        assert_eq!(sub.recv().await, Note::Missed);
        assert_eq!(sub.recv().await, Note::Wake);
        sub.skip_queued();
        n.publish(Note::Backstop);
        assert_eq!(sub.recv().await, Note::Backstop);
    }

    #[test]
    fn policy_changes_missed_notes_and_the_backstop_stale_the_policy() {
        let changed = |what| {
            Note::Event(LiveEvent::Changed {
                what,
                subject: "launch_policy".into(),
            })
        };
        assert!(stales_policy(&changed(AuditKind::LaunchPolicy)));
        assert!(stales_policy(&Note::Missed));
        assert!(stales_policy(&Note::Backstop));
        assert!(!stales_policy(&changed(AuditKind::ManifestPut)));
        assert!(!stales_policy(&Note::Wake));
        let job = LiveEvent::job(Uuid::nil(), JobStatus::Admitted);
        assert!(!stales_policy(&Note::Event(job)));
    }

    #[tokio::test]
    async fn the_policy_epoch_moves_before_the_note_that_stales_it() {
        let n = Notifier::new(Duration::from_secs(60));
        assert_eq!(n.policy_epoch(), None, "not listening: nothing may be kept");
        n.policy.listening(true);
        let before = n.policy_epoch().unwrap();
        let mut sub = n.subscribe();
        n.publish(Note::Wake);
        assert_eq!(sub.recv().await, Note::Wake);
        assert_eq!(n.policy_epoch(), Some(before), "a wake changes no policy");
        let change = Note::Event(LiveEvent::Changed {
            what: AuditKind::LaunchPolicy,
            subject: "launch_policy".into(),
        });
        n.publish(change.clone());
        assert_eq!(sub.recv().await, change);
        let after = n.policy_epoch().unwrap();
        assert_ne!(
            after, before,
            "whoever hears the change sees the epoch moved"
        );
        n.policy.listening(false);
        assert_eq!(n.policy_epoch(), None);
        n.policy.listening(true);
        assert_ne!(n.policy_epoch(), Some(after), "a reconnect moves it too");
    }

    #[tokio::test]
    async fn log_growth_reaches_followers_only_when_there_are_some() {
        let n = Notifier::new(Duration::from_secs(60));
        n.log_grew(Uuid::nil());
        let mut rx = n.subscribe_logs();
        let id = Uuid::new_v4();
        n.log_grew(id);
        assert_eq!(rx.recv().await.unwrap(), id);
        assert!(
            rx.try_recv().is_err(),
            "growth before subscribing is not queued"
        );
    }
}
