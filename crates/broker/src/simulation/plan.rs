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
        let at = rng.gen_range(first..=last);
        fates[index] = if rank < crashes {
            Fate::Crash { at }
        } else {
            let extra = rng
                .gen_range(interval / 4..=interval / 2)
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
}
