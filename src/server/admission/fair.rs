//! Why a job is behind others in fair share: how many jobs of its priority (and soft budget)
//! submitted after it go before it because their owners used the cards less recently (for their
//! share). The read side
//! words it ("behind 3 jobs of users with less recent use"); counted for the whole queue in
//! O(n log n), so a 10k queue costs a few milliseconds.

use super::planner::QueuedJob;
use std::collections::HashMap;
use uuid::Uuid;

/// For each job of `queue` (any order) that fair share put behind later-submitted jobs of the same
/// priority, how many. Jobs with none are absent.
pub fn passed_by(queue: &[QueuedJob]) -> HashMap<Uuid, usize> {
    let mut order: Vec<&QueuedJob> = queue.iter().collect();
    order.sort_unstable_by_key(|j| j.queue_key());
    let mut seqs: Vec<i64> = queue.iter().map(|j| j.seq).collect();
    seqs.sort_unstable();
    seqs.dedup();
    let rank = |seq: i64| seqs.partition_point(|&s| s < seq);
    let mut tree = Fenwick::new(seqs.len());
    let mut inserted: Vec<usize> = Vec::new();
    let mut out = HashMap::new();
    // The queue key's parts before the standing (priority, soft budget) make a level, within
    // which fair share passes jobs; with the standing they make a run, within which none passes
    // another (submission decides). Jobs of owners past a soft budget go after the others of
    // their priority for that, not for fair share.
    let level = |j: &QueuedJob| {
        let k = j.queue_key();
        (k.0, k.1)
    };
    let run = |j: &QueuedJob| {
        let k = j.queue_key();
        (k.0, k.1, k.2)
    };
    let mut i = 0;
    while i < order.len() {
        if i > 0 && level(order[i - 1]) != level(order[i]) {
            for r in inserted.drain(..) {
                tree.add(r, -1);
            }
        }
        let this = run(order[i]);
        let end = i + order[i..].iter().take_while(|j| run(j) == this).count();
        for j in &order[i..end] {
            let later = inserted.len() as i64 - tree.prefix(rank(j.seq) + 1);
            if later > 0 {
                out.insert(j.id, later as usize);
            }
        }
        for j in &order[i..end] {
            let r = rank(j.seq);
            tree.add(r, 1);
            inserted.push(r);
        }
        i = end;
    }
    out
}

/// The words for `n` jobs passing one.
pub fn passed_by_words(n: usize) -> String {
    let jobs = if n == 1 { "job" } else { "jobs" };
    format!("behind {n} {jobs} of users with less recent use")
}

/// Counts per rank, summed over prefixes in O(log n).
struct Fenwick(Vec<i64>);

impl Fenwick {
    fn new(n: usize) -> Self {
        Fenwick(vec![0; n + 1])
    }

    fn add(&mut self, rank: usize, v: i64) {
        let mut i = rank + 1;
        while i < self.0.len() {
            self.0[i] += v;
            i += i & i.wrapping_neg();
        }
    }

    /// Σ of the counts of ranks below `n`.
    fn prefix(&self, n: usize) -> i64 {
        let (mut i, mut sum) = (n.min(self.0.len() - 1), 0);
        while i > 0 {
            sum += self.0[i];
            i -= i & i.wrapping_neg();
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Standing;
    use crate::server::admission::planner::Need;

    fn job(n: u128, priority: i32, standing: f64) -> QueuedJob {
        QueuedJob {
            id: Uuid::from_u128(n),
            seq: n as i64,
            priority,
            past_soft_budget: false,
            standing: Standing::new(standing),
            gpu_count: 1,
            need: Need::Fixed(1),
            exclusive: false,
            queued_at_ms: 0,
            nodes: None,
        }
    }

    /// The same count, the slow way: later jobs of its priority ahead of it in the order.
    fn naive(queue: &[QueuedJob]) -> HashMap<Uuid, usize> {
        let mut out = HashMap::new();
        for j in queue {
            let n = queue
                .iter()
                .filter(|o| {
                    o.priority == j.priority
                        && o.past_soft_budget == j.past_soft_budget
                        && o.seq > j.seq
                        && o.queue_key() < j.queue_key()
                })
                .count();
            if n > 0 {
                out.insert(j.id, n);
            }
        }
        out
    }

    #[test]
    fn counts_later_jobs_of_lighter_users_at_the_same_priority_only() {
        // Heavy user (standing 9) submits 1, 2, 3; a light user (1) submits 4, 5 later; a job of
        // priority 5 (6) and a heavier one at priority 0 submitted last (7) pass nobody's count.
        let q = vec![
            job(1, 0, 9.0),
            job(2, 0, 9.0),
            job(3, 0, 9.0),
            job(4, 0, 1.0),
            job(5, 0, 1.0),
            job(6, 5, 50.0),
            job(7, 0, 20.0),
        ];
        let got = passed_by(&q);
        assert_eq!(got.get(&Uuid::from_u128(1)), Some(&2));
        assert_eq!(got.get(&Uuid::from_u128(3)), Some(&2));
        assert_eq!(got.get(&Uuid::from_u128(4)), None);
        assert_eq!(got.get(&Uuid::from_u128(7)), None);
        assert_eq!(got, naive(&q));
        assert_eq!(
            passed_by_words(2),
            "behind 2 jobs of users with less recent use"
        );
        assert_eq!(
            passed_by_words(1),
            "behind 1 job of users with less recent use"
        );
    }

    #[test]
    fn agrees_with_the_slow_count_on_mixed_queues() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for round in 0..50 {
            let q: Vec<QueuedJob> = (0..(20 + round))
                .map(|n| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    job(n as u128, (x % 3) as i32, ((x >> 8) % 4) as f64)
                })
                .collect();
            assert_eq!(passed_by(&q), naive(&q), "round {round}");
        }
    }
}
