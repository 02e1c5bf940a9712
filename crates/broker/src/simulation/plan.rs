//! The seeded plan of a run: which consumers crash or stall, and when.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;

use super::config::{SimConfig, DETECTION_MARGIN_MS};

/// What the seeded plan has in store for one consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fate {
    Healthy,
    /// Stops for good at `at`.
    Crash {
        at: u64,
    },
    /// Sends nothing in `[at, until)`, then resumes.
    Stall {
        at: u64,
        until: u64,
    },
}

impl Fate {
    /// Whether the consumer is down (crashed, or inside its stall) at `t`.
    pub(super) fn is_down_at(self, t: u64) -> bool {
        match self {
            Fate::Healthy => false,
            Fate::Crash { at } => t >= at,
            Fate::Stall { at, until } => (at..until).contains(&t),
        }
    }
}

/// Which consumers have a failure planned, one bit each: the engine looks
/// at every heartbeat whether the consumer's fate matters, and a million
/// bits stay in a core's cache where a million [`Fate`]s do not.
#[derive(Debug, Default)]
pub(super) struct Failing {
    words: Vec<u64>,
}

impl Failing {
    /// The consumers whose fate is not [`Fate::Healthy`].
    pub(super) fn of<'a>(fates: impl ExactSizeIterator<Item = &'a Fate>) -> Self {
        let mut words = vec![0u64; fates.len().div_ceil(64)];
        for (index, fate) in fates.enumerate() {
            if *fate != Fate::Healthy {
                words[index / 64] |= 1 << (index % 64);
            }
        }
        Failing { words }
    }

    /// Whether consumer `index` has a failure planned.
    pub(super) fn contains(&self, index: usize) -> bool {
        self.words
            .get(index / 64)
            .is_some_and(|word| word & (1 << (index % 64)) != 0)
    }
}

/// Picks exactly `planned_crashes` crashing and `planned_stalls` stalling
/// consumers, and when each failure starts (within the injection window) and,
/// for a stall, when it ends: a quarter to half a heartbeat interval (but at
/// least [`DETECTION_MARGIN_MS`]) after a session timeout has passed, so every
/// stall is long enough to be detected, and the member rejoins afterwards.
pub(super) fn plan_fates(config: &SimConfig, rng: &mut StdRng) -> Vec<Fate> {
    let mut order: Vec<usize> = (0..config.consumers).collect();
    order.shuffle(rng);
    let crashes = config.planned_crashes();
    let stalls = config.planned_stalls();
    let (first, last) = config.injection_window_ms();
    let interval = config.heartbeat_interval_ms;
    let mut fates = vec![Fate::Healthy; config.consumers];
    for (rank, &index) in order.iter().take(crashes + stalls).enumerate() {
        let at = rng.random_range(first..=last);
        fates[index] = if rank < crashes {
            Fate::Crash { at }
        } else {
            let extra = rng
                .random_range(interval / 4..=interval / 2)
                .max(DETECTION_MARGIN_MS);
            Fate::Stall {
                at,
                until: at + config.session_timeout_ms + extra,
            }
        };
    }
    fates
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    #[test]
    fn fates_follow_the_plan() {
        let config = SimConfig::small_for_tests(1);
        let fates = plan_fates(&config, &mut StdRng::seed_from_u64(1));
        let (first, last) = config.injection_window_ms();
        let mut crashes = 0;
        let mut stalls = 0;
        for fate in fates {
            match fate {
                Fate::Healthy => {}
                Fate::Crash { at } => {
                    crashes += 1;
                    assert!((first..=last).contains(&at));
                }
                Fate::Stall { at, until } => {
                    stalls += 1;
                    assert!((first..=last).contains(&at));
                    assert!(until > at + config.session_timeout_ms);
                }
            }
        }
        assert_eq!((crashes, stalls), (10, 10));
    }

    #[test]
    fn failing_holds_exactly_the_planned_failures() {
        let config = SimConfig::small_for_tests(11);
        let mut rng = StdRng::seed_from_u64(11);
        let fates = plan_fates(&config, &mut rng);
        let failing = Failing::of(fates.iter());
        for (index, fate) in fates.iter().enumerate() {
            assert_eq!(failing.contains(index), *fate != Fate::Healthy, "{index}");
        }
        assert!(!failing.contains(fates.len() + 64), "beyond the consumers");
        let edges = [
            Fate::Crash { at: 1 },
            Fate::Healthy,
            Fate::Stall { at: 1, until: 2 },
        ];
        let fates: Vec<Fate> = (0..130).map(|i| edges[i % 3]).collect();
        let failing = Failing::of(fates.iter());
        assert!(failing.contains(0) && !failing.contains(64) && failing.contains(65));
        assert!(failing.contains(129) && !failing.contains(130));
    }
}
