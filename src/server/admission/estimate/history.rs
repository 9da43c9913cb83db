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

    /// How much longer a job that has run `elapsed_ms` is expected to run: the median of the run
    /// times longer than `elapsed_ms`, less `elapsed_ms` (a job past most of its type's run times
    /// is likely a long one). With none longer, the p50 again: it has outrun every run seen.
    pub fn remaining(&self, elapsed_ms: i64) -> Option<i64> {
        let longer = &self.0[self.0.partition_point(|&d| d <= elapsed_ms)..];
        match median(longer) {
            Some(m) => Some(m - elapsed_ms),
            None => self.p50(),
        }
    }
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
        // Nothing run yet: the median of all.
        assert_eq!(d.remaining(0), Some(25));
        // Past 20: the runs that lasted longer are 30 and 100, median 65, so 40 more.
        assert_eq!(d.remaining(25), Some(40));
        // Past every run seen: the p50 again.
        assert_eq!(d.remaining(500), Some(25));
        assert_eq!(Durations::default().p50(), None);
        assert_eq!(Durations::default().remaining(3), None);
    }
}
