//! The policing decisions, as pure functions of one round of readings, so that they are the same
//! for real and simulated cards and can be tested exhaustively.

use crate::model::VramEnforcement;
use uuid::Uuid;

/// What the sampler saw of one card: its size and what is in use on it by anyone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CardReading {
    /// Card.
    pub gpu: Uuid,
    /// Installed MiB.
    pub total_mib: i64,
    /// In use now by anyone (gpuq's jobs and foreign processes); `None` when not observed, and then
    /// the card is never found short.
    pub used_mib: Option<i64>,
}

impl CardReading {
    /// Observed free memory: total − used.
    pub fn free_mib(&self) -> Option<i64> {
        self.used_mib.map(|u| self.total_mib - u)
    }
}

/// What one job holds on one card, against its commitment there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobReading {
    /// Job.
    pub job: Uuid,
    /// Card.
    pub gpu: Uuid,
    /// Its reservation on the card, MiB.
    pub committed_mib: i64,
    /// What its processes hold there now, MiB.
    pub used_mib: i64,
    /// A stop was already asked for (by a person or by gpuq): not chosen again.
    pub stopping: bool,
}

impl JobReading {
    /// MiB above the commitment (0 when within it).
    pub fn over_mib(&self) -> i64 {
        (self.used_mib - self.committed_mib).max(0)
    }
}

/// The flags and policy that decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    /// The admin's policy.
    pub enforcement: VramEnforcement,
    /// Consecutive readings above the commitment before a job is warned (`--vram-overuse-samples`).
    pub overuse_samples: i32,
    /// Free memory below which a card is short (`--vram-reserve-mib`).
    pub reserve_mib: i64,
}

/// Whether a (job, card) whose consecutive over-commitment count is now `over_samples` gets its
/// warning now: once per spell above the commitment, when the count reaches the threshold.
pub fn warn_now(rules: &Rules, over_samples: i32) -> bool {
    rules.enforcement != VramEnforcement::Off && over_samples == rules.overuse_samples.max(1)
}

/// Whether a (job, card) above its commitment for `over_samples` readings still waits for its
/// warning (the sampler then reads again sooner).
pub fn confirming(rules: &Rules, over_samples: i32) -> bool {
    rules.enforcement != VramEnforcement::Off
        && over_samples > 0
        && over_samples < rules.overuse_samples.max(1)
}

/// A job chosen to be stopped, with the figures its reason quotes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    /// Job.
    pub job: Uuid,
    /// The card that ran short.
    pub gpu: Uuid,
    /// Its commitment there.
    pub committed_mib: i64,
    /// What it used there.
    pub used_mib: i64,
    /// The card's free memory.
    pub free_mib: i64,
}

impl Stop {
    /// The reason the job ends with.
    pub fn reason(&self, reserve_mib: i64) -> String {
        format!(
            "vram_overuse: declared {} MiB on {} but used {} MiB while the card had {} MiB free \
             (under the {} MiB reserve); stopped so that the jobs sharing the card survive",
            self.committed_mib,
            crate::model::gpu_id(&self.gpu),
            self.used_mib,
            self.free_mib,
            reserve_mib
        )
    }
}

/// The jobs to stop now, under policy `stop`: on each card whose free memory is below the reserve,
/// the job most over its commitment there (ties: the one using more, then the lower id). A job
/// within its commitment is never chosen, nor is foreign memory ever acted on; a card short only
/// because of foreign processes or jobs within their commitments stops nothing. One job per card
/// per round: the next round sees what its stop freed.
pub fn stops(rules: &Rules, cards: &[CardReading], jobs: &[JobReading]) -> Vec<Stop> {
    if rules.enforcement != VramEnforcement::Stop {
        return Vec::new();
    }
    let mut out: Vec<Stop> = Vec::new();
    for card in cards {
        let Some(free) = card.free_mib() else {
            continue;
        };
        if free >= rules.reserve_mib {
            continue;
        }
        let worst = jobs
            .iter()
            .filter(|j| j.gpu == card.gpu && j.over_mib() > 0 && !j.stopping)
            .filter(|j| !out.iter().any(|s| s.job == j.job))
            .max_by(|a, b| {
                (a.over_mib(), a.used_mib, std::cmp::Reverse(a.job)).cmp(&(
                    b.over_mib(),
                    b.used_mib,
                    std::cmp::Reverse(b.job),
                ))
            });
        if let Some(j) = worst {
            out.push(Stop {
                job: j.job,
                gpu: card.gpu,
                committed_mib: j.committed_mib,
                used_mib: j.used_mib,
                free_mib: free,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn rules(enforcement: VramEnforcement) -> Rules {
        Rules {
            enforcement,
            overuse_samples: 3,
            reserve_mib: 512,
        }
    }

    fn card(n: u128, total: i64, used: Option<i64>) -> CardReading {
        CardReading {
            gpu: id(n),
            total_mib: total,
            used_mib: used,
        }
    }

    fn job(n: u128, gpu: u128, committed: i64, used: i64) -> JobReading {
        JobReading {
            job: id(n),
            gpu: id(gpu),
            committed_mib: committed,
            used_mib: used,
            stopping: false,
        }
    }

    #[test]
    fn the_most_over_job_on_a_short_card_is_stopped_and_only_it() {
        let cards = [card(100, 81920, Some(81600))];
        let jobs = [
            job(1, 100, 10240, 30000), // 19760 over
            job(2, 100, 10240, 40000), // 29760 over: the one
            job(3, 100, 20480, 11000), // within
        ];
        let s = stops(&rules(VramEnforcement::Stop), &cards, &jobs);
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].job, id(2));
        assert_eq!(s[0].free_mib, 320);
        let reason = s[0].reason(512);
        assert!(
            reason.starts_with("vram_overuse: declared 10240 MiB"),
            "{reason}"
        );
        assert!(reason.contains("used 40000 MiB"), "{reason}");
    }

    #[test]
    fn jobs_within_their_commitment_and_foreign_memory_are_never_stopped() {
        // Short because of foreign memory; every job within its commitment.
        let cards = [card(100, 81920, Some(81900))];
        let jobs = [job(1, 100, 10240, 10240), job(2, 100, 20480, 100)];
        assert!(stops(&rules(VramEnforcement::Stop), &cards, &jobs).is_empty());
    }

    #[test]
    fn over_but_not_short_is_only_warned() {
        let cards = [card(100, 81920, Some(50000))];
        let jobs = [job(1, 100, 10240, 40000)];
        assert!(stops(&rules(VramEnforcement::Stop), &cards, &jobs).is_empty());
        // Exactly at the reserve is not short.
        let cards = [card(100, 81920, Some(81920 - 512))];
        assert!(stops(&rules(VramEnforcement::Stop), &cards, &jobs).is_empty());
    }

    #[test]
    fn warn_and_off_never_stop() {
        let cards = [card(100, 81920, Some(81900))];
        let jobs = [job(1, 100, 10240, 70000)];
        assert!(stops(&rules(VramEnforcement::Warn), &cards, &jobs).is_empty());
        assert!(stops(&rules(VramEnforcement::Off), &cards, &jobs).is_empty());
        assert_eq!(stops(&rules(VramEnforcement::Stop), &cards, &jobs).len(), 1);
    }

    #[test]
    fn unobserved_cards_and_jobs_already_stopping_are_left() {
        let jobs = [job(1, 100, 10240, 70000)];
        assert!(stops(
            &rules(VramEnforcement::Stop),
            &[card(100, 81920, None)],
            &jobs
        )
        .is_empty());
        let stopping = [JobReading {
            stopping: true,
            ..job(1, 100, 10240, 70000)
        }];
        let short = [card(100, 81920, Some(81900))];
        assert!(stops(&rules(VramEnforcement::Stop), &short, &stopping).is_empty());
    }

    #[test]
    fn one_job_per_card_and_a_job_short_on_two_cards_is_stopped_once() {
        let cards = [card(100, 1000, Some(990)), card(200, 1000, Some(990))];
        let jobs = [
            job(1, 100, 100, 900),
            job(1, 200, 100, 900),
            job(2, 200, 100, 800),
        ];
        let s = stops(&rules(VramEnforcement::Stop), &cards, &jobs);
        let chosen: Vec<_> = s.iter().map(|s| (s.job, s.gpu)).collect();
        assert_eq!(chosen, vec![(id(1), id(100)), (id(2), id(200))]);
    }

    #[test]
    fn warnings_come_once_per_spell_and_not_when_off() {
        let r = rules(VramEnforcement::Warn);
        assert!(!warn_now(&r, 2));
        assert!(warn_now(&r, 3));
        assert!(!warn_now(&r, 4));
        assert!(!warn_now(&rules(VramEnforcement::Off), 3));
        // Readings above the commitment before the warning are being confirmed; not after it.
        assert!(!confirming(&r, 0));
        assert!(confirming(&r, 1) && confirming(&r, 2));
        assert!(!confirming(&r, 3) && !confirming(&r, 4));
        assert!(!confirming(&rules(VramEnforcement::Off), 1));
        let one = Rules {
            overuse_samples: 0,
            ..r
        };
        assert!(warn_now(&one, 1));
    }
}
