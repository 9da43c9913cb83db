//! What holds a queued job back before its cards are even looked at: the jobs it depends on
//! (`after_ok`, `after_any`, `after_failed`) and its array's running limit (`%N`).
//!
//! [`Gates::read`] reads both in two queries, for the queued jobs only, and answers per job:
//! [`Gates::dependency`] (ready, waiting for a parent, or a dependency that can no longer hold)
//! and [`Gates::take_array_place`]. Anything else that simulates the pass (a start estimate)
//! reads the same struct: [`Gates::parents_of`] and [`Gates::array_limit_of`].
//!
//! A dependency that can no longer hold makes its dependent cancelled in the same pass, and its
//! own dependents with it: a parent that this pass cancels counts as `cancelled` for its children
//! (worked out here to a fixpoint, so a whole chain ends in one pass).

use super::planner::WaitReason;
use crate::model::JobStatus;
use anyhow::{Context, Result};
use sqlx::{Postgres, Transaction};
use std::collections::HashMap;
use uuid::Uuid;

/// How a child waits for its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepKind {
    /// `after_ok`: the parent succeeded.
    Ok,
    /// `after_any`: the parent ended, however.
    Any,
    /// `after_failed`: the parent failed or timed out.
    Failed,
}

impl DepKind {
    /// Its stored spelling (`job_deps.kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            DepKind::Ok => "ok",
            DepKind::Any => "any",
            DepKind::Failed => "failed",
        }
    }

    /// Its name in a submission.
    pub fn field(self) -> &'static str {
        match self {
            DepKind::Ok => "after_ok",
            DepKind::Any => "after_any",
            DepKind::Failed => "after_failed",
        }
    }

    fn parse(s: &str) -> Option<DepKind> {
        match s {
            "ok" => Some(DepKind::Ok),
            "any" => Some(DepKind::Any),
            "failed" => Some(DepKind::Failed),
            _ => None,
        }
    }

    /// Whether a parent in `status` satisfies this dependency (`Some(true)`), never can
    /// (`Some(false)`), or may still (`None`: it has not ended).
    pub fn holds(self, status: JobStatus) -> Option<bool> {
        if !status.is_terminal() {
            return None;
        }
        Some(match self {
            DepKind::Ok => status == JobStatus::Succeeded,
            DepKind::Any => true,
            DepKind::Failed => matches!(status, JobStatus::Failed | JobStatus::TimedOut),
        })
    }
}

/// One parent of a queued job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parent {
    /// The parent job.
    pub id: Uuid,
    /// What the child waits for.
    pub kind: DepKind,
    /// The parent's status as the pass read it.
    pub status: JobStatus,
}

/// Where a queued job stands with its dependencies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DepState {
    /// Every dependency holds (or it has none).
    Ready,
    /// It waits (the reason names the first parent that has not ended).
    Wait(WaitReason),
    /// A dependency can no longer hold: the reason it is cancelled with.
    Broken(String),
}

/// One array with a running limit, as this pass counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArrayLimit {
    /// The most elements admitted, starting or running at once.
    pub limit: u32,
    /// Those admitted, starting or running now, plus the places this pass gave.
    pub taken: u32,
}

/// The dependencies and array limits of the queue, read inside a pass's transaction.
#[derive(Debug, Clone, Default)]
pub struct Gates {
    parents: HashMap<Uuid, Vec<Parent>>,
    arrays: HashMap<Uuid, ArrayLimit>,
    /// Queued jobs whose dependency can no longer hold (a fixpoint: their dependents too).
    broken: HashMap<Uuid, String>,
}

impl Gates {
    /// Reads the parents of every queued job and the limits of arrays with queued elements.
    pub async fn read(tx: &mut Transaction<'_, Postgres>) -> Result<Gates> {
        let rows: Vec<(Uuid, Uuid, String, JobStatus)> = sqlx::query_as(
            "SELECT d.child, d.parent, d.kind, p.status FROM job_deps d \
             JOIN jobs c ON c.id = d.child AND c.status = 'queued' \
             JOIN jobs p ON p.id = d.parent ORDER BY d.child, p.seq",
        )
        .fetch_all(&mut **tx)
        .await
        .context("reading the queue's dependencies")?;
        let mut parents: HashMap<Uuid, Vec<Parent>> = HashMap::new();
        for (child, id, kind, status) in rows {
            let kind = DepKind::parse(&kind).context("an unknown dependency kind")?;
            parents
                .entry(child)
                .or_default()
                .push(Parent { id, kind, status });
        }
        let arrays: Vec<(Uuid, i32, i64)> = sqlx::query_as(
            "SELECT a.id, a.running_limit, count(j.id) FILTER \
               (WHERE j.status IN ('admitted', 'starting', 'running')) \
             FROM job_arrays a JOIN jobs j ON j.array_id = a.id \
             WHERE a.running_limit IS NOT NULL AND a.id IN \
               (SELECT array_id FROM jobs WHERE status = 'queued' AND array_id IS NOT NULL) \
             GROUP BY a.id, a.running_limit",
        )
        .fetch_all(&mut **tx)
        .await
        .context("reading the arrays' running limits")?;
        let arrays = arrays
            .into_iter()
            .map(|(id, limit, taken)| {
                let limit = u32::try_from(limit).unwrap_or(u32::MAX);
                let taken = u32::try_from(taken).unwrap_or(u32::MAX);
                (id, ArrayLimit { limit, taken })
            })
            .collect();
        Ok(Gates::new(parents, arrays))
    }

    /// Gates over `parents` (per queued job) and `arrays`, with the broken chains worked out.
    pub fn new(parents: HashMap<Uuid, Vec<Parent>>, arrays: HashMap<Uuid, ArrayLimit>) -> Gates {
        let mut broken: HashMap<Uuid, String> = HashMap::new();
        loop {
            let mut found = Vec::new();
            for (child, ps) in &parents {
                if broken.contains_key(child) {
                    continue;
                }
                for p in ps {
                    let status = if broken.contains_key(&p.id) {
                        JobStatus::Cancelled
                    } else {
                        p.status
                    };
                    if p.kind.holds(status) == Some(false) {
                        found.push((
                            *child,
                            format!(
                                "its dependency can no longer hold: job {} ended {status} \
                                 ({} asks for {})",
                                p.id,
                                p.kind.field(),
                                match p.kind {
                                    DepKind::Ok => "success",
                                    DepKind::Failed => "a failure or a timeout",
                                    DepKind::Any => "any end",
                                }
                            ),
                        ));
                        break;
                    }
                }
            }
            if found.is_empty() {
                break;
            }
            broken.extend(found);
        }
        Gates {
            parents,
            arrays,
            broken,
        }
    }

    /// Where job `id` stands with its dependencies.
    pub fn dependency(&self, id: Uuid) -> DepState {
        if let Some(why) = self.broken.get(&id) {
            return DepState::Broken(why.clone());
        }
        let waiting = self.parents.get(&id).and_then(|ps| {
            ps.iter().find(|p| {
                let status = if self.broken.contains_key(&p.id) {
                    JobStatus::Cancelled
                } else {
                    p.status
                };
                p.kind.holds(status).is_none()
            })
        });
        match waiting {
            Some(p) => DepState::Wait(WaitReason::Dependency {
                parent: p.id,
                status: p.status.to_string(),
            }),
            None => DepState::Ready,
        }
    }

    /// Takes a place under the running limit of array `array` for one of its elements, or names
    /// the limit that holds it back. Elements of arrays without a limit always get one.
    pub fn take_array_place(&mut self, array: Option<Uuid>) -> Option<WaitReason> {
        let a = self.arrays.get_mut(&array?)?;
        if a.taken >= a.limit {
            return Some(WaitReason::ArrayLimit { limit: a.limit });
        }
        a.taken += 1;
        None
    }

    /// The queued jobs whose dependency can no longer hold, with the reason each is cancelled
    /// with.
    pub fn broken(&self) -> impl Iterator<Item = (&Uuid, &String)> {
        self.broken.iter()
    }

    /// Job `id`'s parents (empty for a job without dependencies).
    pub fn parents_of(&self, id: Uuid) -> &[Parent] {
        self.parents.get(&id).map_or(&[], Vec::as_slice)
    }

    /// Array `array`'s running limit and its places taken, if it has a limit.
    pub fn array_limit_of(&self, array: Uuid) -> Option<ArrayLimit> {
        self.arrays.get(&array).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(id: Uuid, kind: DepKind, status: JobStatus) -> Parent {
        Parent { id, kind, status }
    }

    #[test]
    fn each_kind_holds_waits_or_breaks_as_documented() {
        use JobStatus::*;
        assert_eq!(DepKind::Ok.holds(Running), None);
        assert_eq!(DepKind::Ok.holds(Succeeded), Some(true));
        assert_eq!(DepKind::Ok.holds(Failed), Some(false));
        assert_eq!(DepKind::Ok.holds(Cancelled), Some(false));
        assert_eq!(DepKind::Any.holds(Cancelled), Some(true));
        assert_eq!(DepKind::Any.holds(Queued), None);
        assert_eq!(DepKind::Failed.holds(TimedOut), Some(true));
        assert_eq!(DepKind::Failed.holds(Succeeded), Some(false));
    }

    #[test]
    fn a_broken_chain_ends_whole_in_one_pass_and_after_any_goes_on() {
        let (root, a, b, c, d) = (
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
            Uuid::new_v4(),
        );
        let parents = HashMap::from([
            (a, vec![p(root, DepKind::Ok, JobStatus::Failed)]),
            (b, vec![p(a, DepKind::Ok, JobStatus::Queued)]),
            (c, vec![p(b, DepKind::Ok, JobStatus::Queued)]),
            (d, vec![p(b, DepKind::Any, JobStatus::Queued)]),
        ]);
        let g = Gates::new(parents, HashMap::new());
        assert!(matches!(g.dependency(a), DepState::Broken(r) if r.contains(&root.to_string())));
        assert!(matches!(g.dependency(b), DepState::Broken(_)));
        assert!(matches!(g.dependency(c), DepState::Broken(_)));
        assert_eq!(g.dependency(d), DepState::Ready);
        assert_eq!(g.dependency(Uuid::new_v4()), DepState::Ready);
    }

    #[test]
    fn a_waiting_child_names_its_parent_and_status() {
        let (parent, child) = (Uuid::new_v4(), Uuid::new_v4());
        let g = Gates::new(
            HashMap::from([(child, vec![p(parent, DepKind::Ok, JobStatus::Running)])]),
            HashMap::new(),
        );
        let DepState::Wait(reason) = g.dependency(child) else {
            panic!("waits");
        };
        assert_eq!(
            reason.message(),
            format!("waiting for job {parent} (running)")
        );
    }

    #[test]
    fn an_array_limit_is_never_exceeded() {
        let array = Uuid::new_v4();
        let mut g = Gates::new(
            HashMap::new(),
            HashMap::from([(array, ArrayLimit { limit: 3, taken: 1 })]),
        );
        assert_eq!(g.take_array_place(Some(array)), None);
        assert_eq!(g.take_array_place(Some(array)), None);
        assert_eq!(
            g.take_array_place(Some(array)),
            Some(WaitReason::ArrayLimit { limit: 3 })
        );
        assert_eq!(g.take_array_place(Some(Uuid::new_v4())), None);
        assert_eq!(g.take_array_place(None), None);
    }
}
