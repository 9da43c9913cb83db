//! How long jobs of each workload type ran: the observed run times the estimate expects a job to
//! take.

use std::collections::HashMap;

/// Observed run times of one workload type, in milliseconds, shortest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Durations(Vec<i64>);

impl Durations {
    /// From run times in any order (negative ones are dropped).
    pub fn new(mut ms: Vec<i64>) -> Self {
        ms.retain(|&d| d >= 0);
        ms.sort_unstable();
        Durations(ms)
    }

    /// How many run times it holds.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The median run time (`None` without history).
    pub fn p50(&self) -> Option<i64> {
        median(&self.0)
    }

    /// The mean run time (`None` without history).
    pub fn mean(&self) -> Option<i64> {
        mean(&self.0)
    }

    /// The typical run time by `t`.
    pub fn typical(&self, t: Typical) -> Option<i64> {
        match t {
            Typical::Median => self.p50(),
            Typical::Mean => self.mean(),
        }
    }

    /// How much longer a job that has run `elapsed_ms` is expected to run: the typical (`t`) of
    /// the run times longer than `elapsed_ms`, less `elapsed_ms` (a job past most of its type's
    /// run times is likely a long one). With none longer, the typical run again: it has outrun
    /// every run seen.
    pub fn remaining(&self, elapsed_ms: i64, t: Typical) -> Option<i64> {
        let longer = &self.0[self.0.partition_point(|&d| d <= elapsed_ms)..];
        let of_longer = match t {
            Typical::Median => median(longer),
            Typical::Mean => mean(longer),
        };
        match of_longer {
            Some(m) => Some(m - elapsed_ms),
            None => self.typical(t),
        }
    }
}

/// Which figure of a type's run times stands for "how long it runs".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Typical {
    /// The median (p50).
    Median,
    /// The mean: with heavy-tailed run times it is above the median, and a wait behind many jobs
    /// is their sum, which follows the mean.
    Mean,
}

fn mean(v: &[i64]) -> Option<i64> {
    (!v.is_empty())
        .then(|| (v.iter().map(|&d| i128::from(d)).sum::<i128>() / v.len() as i128) as i64)
}

fn median(sorted: &[i64]) -> Option<i64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2),
    }
}

/// Run times per workload type.
pub type History = HashMap<String, Durations>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_and_what_remains_of_a_run() {
        let d = Durations::new(vec![30, 10, 20, -5, 100]);
        assert_eq!(d.len(), 4);
        assert_eq!(d.p50(), Some(25));
        assert_eq!(d.mean(), Some(40));
        // Nothing run yet: the median of all.
        assert_eq!(d.remaining(0, Typical::Median), Some(25));
        // Past 20: the runs that lasted longer are 30 and 100, median 65, so 40 more.
        assert_eq!(d.remaining(25, Typical::Median), Some(40));
        assert_eq!(d.remaining(25, Typical::Mean), Some(40));
        assert_eq!(d.remaining(20, Typical::Mean), Some(45));
        // Past every run seen: the typical run again.
        assert_eq!(d.remaining(500, Typical::Median), Some(25));
        assert_eq!(d.remaining(500, Typical::Mean), Some(40));
        assert_eq!(Durations::default().p50(), None);
        assert_eq!(Durations::default().remaining(3, Typical::Mean), None);
    }
}
