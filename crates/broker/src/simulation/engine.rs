//! The simulation's event loop, in virtual or real time.
//!
//! Consumers are events in a [`Calendar`] ordered by `(time, consumer)`:
//! each consumer has exactly one pending event, its next heartbeat. Handling
//! it either drops the consumer (it crashed), postpones it to the end of a
//! stall, or queues the heartbeat for the coordinator's request handlers
//! ([`Handlers`]), which send every queued heartbeat at once; a heartbeat
//! refused with `UNKNOWN_MEMBER_ID` (the member was evicted) makes the
//! consumer rejoin under a new member id, as a dynamic Kafka member does.
//!
//! The engine never tells the coordinator that a consumer failed: failures are
//! detected only when the heartbeat purgatory expires an expectation.
//!
//! - Virtual time: a [`ManualClock`] and no reaper. For each millisecond `t`
//!   the engine sets the clock to `t`, lets the purgatory expire what is due
//!   (`advance_clock` returns after the expiration callbacks ran), then
//!   handles the heartbeats due at `t`. Every draw is seeded and made on the
//!   engine's thread in a fixed order, and the handlers' answers commute (see
//!   [`Handlers`]), so a seed always gives the same summary.
//! - Real time: the system clock and the purgatory's reaper; the engine
//!   sleeps until the next heartbeat is due, and evictions happen on the
//!   purgatory's executor thread as they would in a broker.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use timer::ManualClock;

use super::calendar::Calendar;
use super::config::{SimConfig, SimError};
use super::handlers::{ConsumerIds, Handlers, Shared};
use super::plan::{plan_fates, Fate};
use super::recording::Recording;
use super::summary::{percentile, Progress, Summary};
use parking_lot::RwLock;

use crate::coordinator::{Eviction, GroupCoordinator};
use crate::id::{GroupId, MemberId};

#[derive(Debug)]
struct Consumer {
    index: usize,
    incarnation: u32,
    fate: Fate,
    detected: bool,
}

impl Consumer {
    fn member_id(index: usize, incarnation: u32) -> MemberId {
        MemberId::new(format!("consumer-{index}-{incarnation}"))
    }

    /// The consumer a member id of [`Consumer::member_id`]'s making belongs
    /// to (any incarnation), if it is one of the `consumers`.
    fn index_of(member: &MemberId, consumers: usize) -> Option<usize> {
        let rest = member.as_str().strip_prefix("consumer-")?;
        let (index, incarnation) = rest.split_once('-')?;
        incarnation.parse::<u32>().ok()?;
        index.parse().ok().filter(|&i| i < consumers)
    }
}

/// The time source of a run: virtual (manual clock) or real.
enum Time {
    Virtual(ManualClock),
    Real { start_ms: u64 },
}

struct Engine<'a> {
    config: &'a SimConfig,
    shared: Arc<Shared>,
    handlers: Handlers,
    time: Time,
    rng: StdRng,
    consumers: Vec<Consumer>,
    events: Calendar,
    generations_at_start: u64,
    rejoins: u64,
    delays: Vec<u64>,
    false_evictions: usize,
    evictions: u64,
    last_progress: (u64, u64),
    started: Instant,
    recording: Recording,
}

/// Runs the simulation `config` describes, calling `on_progress` every
/// [`SimConfig::progress_interval_ms`] of simulated time and at the end, and
/// returns its summary.
pub fn run(config: &SimConfig, on_progress: impl FnMut(&Progress)) -> Result<Summary, SimError> {
    run_recorded(config, on_progress).map(|(summary, _)| summary)
}

/// Like [`run`], and also returns the run's [`Recording`]: its time series
/// and every detection delay.
pub fn run_recorded(
    config: &SimConfig,
    on_progress: impl FnMut(&Progress),
) -> Result<(Summary, Recording), SimError> {
    config.validate()?;
    let purgatory_error = |err: purgatory::PurgatoryError| SimError::Purgatory(err.to_string());
    let (coordinator, time) = if config.virtual_time {
        let clock = ManualClock::new();
        let coordinator = GroupCoordinator::with_manual_clock(&clock).map_err(purgatory_error)?;
        (coordinator, Time::Virtual(clock))
    } else {
        let coordinator = GroupCoordinator::with_system_clock().map_err(purgatory_error)?;
        let start_ms = coordinator.now_ms();
        (coordinator, Time::Real { start_ms })
    };
    let mut engine = Engine::new(config, coordinator, time);
    engine.start();
    if let Time::Real { start_ms } = &mut engine.time {
        // Simulated time starts when the groups have formed: a million
        // joins take seconds, which would otherwise leave the first
        // heartbeats late before the run begins.
        *start_ms = engine.shared.coordinator.now_ms();
    }
    engine.run_loop(on_progress);
    let summary = engine.summary();
    drop(engine.handlers);
    engine.shared.coordinator.shutdown();
    Ok((summary, engine.recording))
}

impl<'a> Engine<'a> {
    fn new(config: &'a SimConfig, coordinator: GroupCoordinator, time: Time) -> Self {
        let mut rng = StdRng::seed_from_u64(config.seed);
        let fates = plan_fates(config, &mut rng);
        // One id per group, shared by its consumers, so that looking a group
        // up compares pointers, not text.
        let groups: Vec<GroupId> = (0..config.groups)
            .map(|g| GroupId::new(format!("group-{g}")))
            .collect();
        let ids = (0..config.consumers)
            .map(|index| ConsumerIds {
                group: groups[index % config.groups].clone(),
                member: Consumer::member_id(index, 0),
            })
            .collect();
        let consumers = fates
            .into_iter()
            .enumerate()
            .map(|(index, fate)| Consumer {
                index,
                incarnation: 0,
                fate,
                detected: false,
            })
            .collect();
        let shared = Arc::new(Shared {
            coordinator,
            ids: RwLock::new(ids),
        });
        Engine {
            config,
            handlers: Handlers::new(Arc::clone(&shared), config.handler_threads),
            shared,
            time,
            rng,
            consumers,
            events: Calendar::default(),
            generations_at_start: 0,
            rejoins: 0,
            delays: Vec::new(),
            false_evictions: 0,
            evictions: 0,
            last_progress: (0, 0),
            started: Instant::now(),
            recording: Recording::for_duration(config.duration_ms),
        }
    }

    /// Simulated ms since the start.
    fn now(&self) -> u64 {
        match &self.time {
            Time::Virtual(clock) => timer::Clock::now_ms(clock),
            Time::Real { start_ms } => self.shared.coordinator.now_ms().saturating_sub(*start_ms),
        }
    }

    /// Every consumer joins at time 0 and heartbeats first at a random phase.
    fn start(&mut self) {
        let session = Duration::from_millis(self.config.session_timeout_ms);
        let ids = self.shared.ids.read();
        for (index, consumer) in ids.iter().enumerate() {
            self.shared
                .coordinator
                .join_group(&consumer.group, &consumer.member, session)
                .expect("a positive session timeout is always accepted");
            let first = self.rng.gen_range(1..=self.config.heartbeat_interval_ms);
            self.events.push(first, index as u32);
        }
        drop(ids);
        self.generations_at_start = self.shared.coordinator.total_generations();
        self.sample(0);
    }

    /// Adds a sample to the recording if one is due at `t`.
    fn maybe_sample(&mut self, t: u64) {
        if self.recording.due(t, self.config.duration_ms) {
            self.sample(t);
        }
    }

    fn sample(&mut self, t: u64) {
        self.collect_evictions();
        let alive = self.shared.coordinator.alive_members();
        let heartbeats = self.shared.coordinator.heartbeats_handled();
        self.recording.record(t, alive, heartbeats, self.evictions);
    }

    fn run_loop(&mut self, mut on_progress: impl FnMut(&Progress)) {
        let end = self.config.duration_ms;
        let interval = self.config.progress_interval_ms();
        let mut next_progress = interval;
        match &self.time {
            Time::Virtual(clock) => {
                let clock = clock.clone();
                for t in 1..=end {
                    clock.set_ms(t);
                    while self.shared.coordinator.advance_clock(Duration::ZERO) {}
                    self.handle_due(t);
                    self.maybe_sample(t);
                    if t == next_progress || t == end {
                        on_progress(&self.progress(t));
                        next_progress += interval;
                    }
                }
            }
            Time::Real { .. } => loop {
                let now = self.now();
                self.handle_due(now.min(end));
                self.maybe_sample(now.min(end));
                if now >= next_progress || now >= end {
                    on_progress(&self.progress(now.min(end)));
                    next_progress = (now / interval + 1) * interval;
                }
                if now >= end {
                    break;
                }
                let next_event = self.events.next_due().unwrap_or(end);
                let next_sample = self.recording.next_sample_ms();
                let wake = next_event.min(next_progress).min(next_sample).min(end);
                if wake > now {
                    std::thread::sleep(Duration::from_millis(wake - now));
                }
            },
        }
    }

    /// Handles every heartbeat due at or before `t`: decides which consumers
    /// heartbeat (and when they will next), has the request handlers send
    /// those heartbeats, then lets the refused consumers rejoin.
    ///
    /// One millisecond's events at a time: a consumer has one event per
    /// millisecond at most, so a round never holds two heartbeats of one
    /// consumer, and a refused consumer has rejoined before its next event
    /// (which matters in real time, when the engine runs behind).
    fn handle_due(&mut self, t: u64) {
        while let Some((due, bucket)) = self.events.pop_due(t) {
            for &index in &bucket {
                self.schedule(due, index as usize);
            }
            self.events.recycle(bucket);
            let refused = self.handlers.run().to_vec();
            for index in refused {
                self.rejoin(index as usize);
            }
        }
    }

    /// Consumer `index`'s event due at `due`: nothing if it crashed, a later
    /// event if it stalls, else a heartbeat queued for the handlers and the
    /// next event one jittered interval later.
    fn schedule(&mut self, due: u64, index: usize) {
        match self.consumers[index].fate {
            Fate::Crash { at } if due >= at => return,
            Fate::Stall { at, until } if (at..until).contains(&due) => {
                self.events.push(until, index as u32);
                return;
            }
            _ => {}
        }
        self.handlers
            .queue(index % self.config.groups, index as u32);
        let interval = self.config.heartbeat_interval_ms;
        let jitter = self.config.jitter_ms();
        let gap = self
            .rng
            .gen_range(interval - jitter..=interval + jitter)
            .max(1);
        self.events.push(due + gap, index as u32);
    }

    /// An evicted consumer rejoins under a new member id.
    fn rejoin(&mut self, index: usize) {
        let consumer = &mut self.consumers[index];
        consumer.incarnation += 1;
        let member = Consumer::member_id(consumer.index, consumer.incarnation);
        let group = {
            let mut ids = self.shared.ids.write();
            ids[index].member = member.clone();
            ids[index].group.clone()
        };
        let session = Duration::from_millis(self.config.session_timeout_ms);
        self.shared
            .coordinator
            .join_group(&group, &member, session)
            .expect("a positive session timeout is always accepted");
        self.rejoins += 1;
    }

    /// Classifies the evictions recorded since the last call.
    fn collect_evictions(&mut self) {
        let start_ms = match self.time {
            Time::Virtual(_) => 0,
            Time::Real { start_ms } => start_ms,
        };
        for eviction in self.shared.coordinator.take_evictions() {
            self.evictions += 1;
            self.classify(&eviction, start_ms);
        }
    }

    fn classify(&mut self, eviction: &Eviction, start_ms: u64) {
        let Some(index) = Consumer::index_of(&eviction.member, self.consumers.len()) else {
            self.false_evictions += 1;
            return;
        };
        let consumer = &mut self.consumers[index];
        let evicted_at = eviction.evicted_at_ms.saturating_sub(start_ms);
        if consumer.fate.is_down_at(evicted_at) && !consumer.detected {
            consumer.detected = true;
            self.delays.push(eviction.detection_delay_ms());
        } else {
            self.false_evictions += 1;
        }
    }

    fn rebalances(&self) -> u64 {
        self.shared.coordinator.total_generations() - self.generations_at_start
    }

    fn progress(&mut self, t: u64) -> Progress {
        self.collect_evictions();
        let heartbeats = self.shared.coordinator.heartbeats_handled();
        let (last_t, last_heartbeats) = self.last_progress;
        self.last_progress = (t, heartbeats);
        let span_s = (t.saturating_sub(last_t)).max(1) as f64 / 1000.0;
        let purgatory = self.shared.coordinator.purgatory();
        let wall_ms = self.started.elapsed().as_millis() as u64;
        let eta_ms = match self.time {
            Time::Virtual(_) if t > 0 => {
                let left = self.config.duration_ms.saturating_sub(t);
                Some((wall_ms as u128 * left as u128 / t as u128) as u64)
            }
            _ => None,
        };
        Progress {
            elapsed_ms: t,
            wall_ms,
            eta_ms,
            alive: self.shared.coordinator.alive_members(),
            heartbeats_per_s: (heartbeats - last_heartbeats) as f64 / span_s,
            watched: purgatory.watched(),
            delayed: purgatory.delayed(),
            evictions: self.evictions,
            rebalances: self.rebalances(),
        }
    }

    fn summary(&mut self) -> Summary {
        self.collect_evictions();
        let crashes = self
            .consumers
            .iter()
            .filter(|c| matches!(c.fate, Fate::Crash { .. }))
            .count();
        let stalls = self
            .consumers
            .iter()
            .filter(|c| matches!(c.fate, Fate::Stall { .. }))
            .count();
        let detected = self.consumers.iter().filter(|c| c.detected).count();
        let mut delays = std::mem::take(&mut self.delays);
        delays.sort_unstable();
        self.recording.detection_delays_ms.clone_from(&delays);
        let heartbeats = self.shared.coordinator.heartbeats_handled();
        let purgatory = self.shared.coordinator.purgatory();
        Summary {
            config: self.config.clone(),
            injected_crashes: crashes,
            injected_stalls: stalls,
            detected_failures: detected,
            undetected_failures: crashes + stalls - detected,
            false_evictions: self.false_evictions,
            detection_delay_p50_ms: percentile(&delays, 50.0),
            detection_delay_p99_ms: percentile(&delays, 99.0),
            detection_delay_max_ms: delays.last().copied(),
            rebalances: self.rebalances(),
            rejoins: self.rejoins,
            heartbeats,
            heartbeats_per_s: heartbeats as f64 * 1000.0 / self.config.duration_ms as f64,
            alive_at_end: self.shared.coordinator.alive_members(),
            watched_at_end: purgatory.watched(),
            delayed_at_end: purgatory.delayed(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(seed: u64) -> SimConfig {
        SimConfig::small_for_tests(seed)
    }

    #[test]
    fn a_small_virtual_run_detects_everything() {
        let mut lines = 0;
        let summary = run(&small(7), |_| lines += 1).unwrap();
        assert_eq!(lines, 2, "one progress line per simulated second");
        assert_eq!(summary.detected_failures, 20);
        assert_eq!(summary.false_evictions, 0);
        assert_eq!(summary.alive_at_end, summary.watched_at_end);
        assert_eq!(summary.alive_at_end, summary.delayed_at_end);
    }

    #[test]
    fn an_engine_far_behind_rejoins_each_consumer_once() {
        // Every member expires, then the engine handles 2 s of heartbeats at
        // once (as a real-time engine that fell behind does): each consumer
        // is refused once, rejoins once, and is then a member exactly once.
        let config = SimConfig {
            crash_rate: 0.0,
            stall_rate: 0.0,
            ..small(3)
        };
        let clock = ManualClock::new();
        let coordinator = GroupCoordinator::with_manual_clock(&clock).unwrap();
        let mut engine = Engine::new(&config, coordinator, Time::Virtual(clock.clone()));
        engine.start();
        clock.set_ms(2_000);
        while engine.shared.coordinator.advance_clock(Duration::ZERO) {}
        assert_eq!(engine.shared.coordinator.alive_members(), 0);
        engine.handle_due(2_000);
        assert_eq!(engine.rejoins, config.consumers as u64);
        assert_eq!(engine.shared.coordinator.alive_members(), config.consumers);
    }

    #[test]
    fn member_ids_lead_back_to_their_consumer() {
        for (index, incarnation) in [(0, 0), (17, 3), (199, 1)] {
            let id = Consumer::member_id(index, incarnation);
            assert_eq!(Consumer::index_of(&id, 200), Some(index));
        }
        for other in [
            "consumer-200-0",
            "consumer-1",
            "consumer-x-0",
            "member-1-0",
            "consumer-1-x",
        ] {
            assert_eq!(
                Consumer::index_of(&MemberId::new(other), 200),
                None,
                "{other}"
            );
        }
    }

    #[test]
    fn invalid_configs_are_errors() {
        let config = SimConfig {
            consumers: 0,
            ..small(1)
        };
        assert!(matches!(run(&config, |_| {}), Err(SimError::Config(_))));
    }
}
