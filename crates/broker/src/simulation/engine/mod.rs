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
//!   in which something can happen the engine sets the clock to `t`, lets the
//!   purgatory expire what is due (`advance_clock` returns after the
//!   expiration callbacks ran), then handles the heartbeats due at `t`. It
//!   jumps over the other milliseconds: those with no event due, no sample
//!   or status line due, and no expectation that may expire ([`Expiries`]);
//!   stepping through them changes nothing but the time the run takes.
//!   Every draw is seeded and made on the engine's thread in a fixed order,
//!   and the handlers' answers commute (see [`Handlers`]), so a seed always
//!   gives the same summary.
//! - Real time: the system clock and the purgatory's reaper; the engine
//!   sleeps until the next heartbeat is due, and evictions happen on the
//!   purgatory's executor thread as they would in a broker.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use timer::ManualClock;

use super::calendar::Calendar;
use super::config::{SimConfig, SimError, DETECTION_MARGIN_MS};
use super::expiries::Expiries;
use super::handlers::{ConsumerIds, Handlers, Request, Shared};
use super::plan::{plan_fates, Failing, Fate};
use super::recording::Recording;
use super::summary::{Progress, Summary, LATE_HEARTBEAT_MS};
use parking_lot::RwLock;

use crate::coordinator::GroupCoordinator;
use crate::group::Group;
use crate::id::{GroupId, MemberId};

#[derive(Debug)]
pub(super) struct Consumer {
    pub(super) index: usize,
    pub(super) incarnation: u32,
    pub(super) fate: Fate,
    pub(super) detected: bool,
}

impl Consumer {
    /// `consumer-<index>-<incarnation>`, written digit by digit: a million
    /// of them are made before the run starts, and `format!` costs several
    /// times as much.
    fn member_id(index: usize, incarnation: u32) -> MemberId {
        fn push_decimal(out: &mut String, mut n: u64) {
            let mut digits = [0u8; 20];
            let mut at = digits.len();
            loop {
                at -= 1;
                digits[at] = b'0' + (n % 10) as u8;
                n /= 10;
                if n == 0 {
                    break;
                }
            }
            out.extend(digits[at..].iter().map(|&d| char::from(d)));
        }
        let mut id = String::with_capacity(32);
        id.push_str("consumer-");
        push_decimal(&mut id, index as u64);
        id.push('-');
        push_decimal(&mut id, u64::from(incarnation));
        MemberId::new(id)
    }

    /// The consumer a member id of [`Consumer::member_id`]'s making belongs
    /// to (any incarnation), if it is one of the `consumers`.
    pub(super) fn index_of(member: &MemberId, consumers: usize) -> Option<usize> {
        let rest = member.as_str().strip_prefix("consumer-")?;
        let (index, incarnation) = rest.split_once('-')?;
        incarnation.parse::<u32>().ok()?;
        index.parse().ok().filter(|&i| i < consumers)
    }
}

/// How long an idle request handler spins for the next run in virtual time:
/// longer than the engine's own work between two milliseconds' runs, so a
/// handler seldom parks while the engine runs flat out.
const VIRTUAL_TIME_SPIN: Duration = Duration::from_millis(1);

/// The same in real time, where runs are a millisecond or more apart and
/// spinning would take the CPU the engine and the reaper need.
const REAL_TIME_SPIN: Duration = Duration::from_micros(50);

/// The time source of a run: virtual (manual clock) or real.
pub(super) enum Time {
    Virtual(ManualClock),
    Real { start_ms: u64 },
}

pub(super) struct Engine<'a> {
    pub(super) config: &'a SimConfig,
    pub(super) shared: Arc<Shared>,
    pub(super) handlers: Handlers,
    pub(super) time: Time,
    pub(super) rng: StdRng,
    pub(super) consumers: Vec<Consumer>,
    pub(super) failing: Failing,
    pub(super) events: Calendar,
    pub(super) expiries: Expiries,
    /// Virtual time only: step through every millisecond instead of jumping
    /// over idle ones (the tests compare the two).
    pub(super) step_every_ms: bool,
    pub(super) generations_at_start: u64,
    pub(super) rejoins: u64,
    pub(super) delays: Vec<u64>,
    pub(super) false_evictions: usize,
    pub(super) evictions: u64,
    pub(super) late_heartbeats: u64,
    pub(super) heartbeat_lag_max_ms: u64,
    pub(super) last_progress: (u64, u64),
    pub(super) started: Instant,
    pub(super) recording: Recording,
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
    let Engine {
        handlers,
        shared,
        consumers,
        events,
        recording,
        ..
    } = engine;
    // Releasing a million members' state (their pending operations, timer
    // entries and tables) takes a second or more and decides nothing: the
    // caller gets the summary now, and the state is released on a thread
    // of its own. If no thread can be started, the closure and with it the
    // state is dropped right here instead.
    let _ = std::thread::Builder::new()
        .name("simulation-teardown".into())
        .spawn(move || {
            drop(handlers);
            shared.coordinator.shutdown();
            drop((shared, consumers, events));
        });
    Ok((summary, recording))
}

impl<'a> Engine<'a> {
    fn new(config: &'a SimConfig, coordinator: GroupCoordinator, time: Time) -> Self {
        let session_timeout = Duration::from_millis(config.session_timeout_ms);
        // The simulation's flags bound its session timeout (up to 7 days),
        // not Kafka's 30-minute default.
        coordinator
            .set_session_timeouts(
                GroupCoordinator::DEFAULT_MIN_SESSION_TIMEOUT,
                session_timeout.max(GroupCoordinator::DEFAULT_MAX_SESSION_TIMEOUT),
            )
            .expect("a validated configuration has a positive session timeout");
        let mut rng = StdRng::seed_from_u64(config.seed);
        let fates = plan_fates(config, &mut rng);
        let failing = Failing::of(fates.iter());
        // The groups exist (empty, with member tables sized once) before
        // anyone joins, and each consumer keeps its group.
        let per_group = config.consumers.div_ceil(config.groups);
        let groups: Vec<Arc<Group>> = (0..config.groups)
            .map(|g| {
                let group = coordinator.add_group(GroupId::new(format!("group-{g}")));
                group.with_state(|state| state.members.reserve(per_group));
                group
            })
            .collect();
        let ids = (0..config.consumers)
            .map(|index| ConsumerIds {
                group: Arc::clone(&groups[index % config.groups]),
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
            session_timeout,
        });
        Engine {
            config,
            handlers: Handlers::new(
                Arc::clone(&shared),
                config.handler_threads,
                if config.virtual_time {
                    VIRTUAL_TIME_SPIN
                } else {
                    REAL_TIME_SPIN
                },
            ),
            shared,
            time,
            rng,
            consumers,
            failing,
            // A heartbeat is filed at most an interval and its jitter ahead,
            // a stall's end at most a session timeout and half an interval
            // (or the detection margin) ahead.
            events: Calendar::new(
                config.session_timeout_ms + config.heartbeat_interval_ms + DETECTION_MARGIN_MS,
            ),
            expiries: Expiries::new(config.session_timeout_ms),
            step_every_ms: false,
            generations_at_start: 0,
            rejoins: 0,
            delays: Vec::new(),
            false_evictions: 0,
            evictions: 0,
            late_heartbeats: 0,
            heartbeat_lag_max_ms: 0,
            last_progress: (0, 0),
            started: Instant::now(),
            recording: Recording::for_duration(config.duration_ms),
        }
    }

    /// Simulated ms since the start.
    pub(super) fn now(&self) -> u64 {
        match &self.time {
            Time::Virtual(clock) => timer::Clock::now_ms(clock),
            Time::Real { start_ms } => self.shared.coordinator.now_ms().saturating_sub(*start_ms),
        }
    }

    /// Every consumer joins at time 0 and heartbeats first at a random phase.
    ///
    /// The joins run on the request handlers, each group's on its handler in
    /// consumer order (so each group's tokens and generations are the same
    /// for any number of handlers), into member tables sized for the group
    /// once; the first heartbeats are drawn here, in consumer order.
    ///
    /// In real time the joins take a while (seconds for a million), and
    /// each arms its member's session timer as it runs; simulated time
    /// starts once they are all done. So the sessions then restart, first
    /// heartbeat first (Kafka restarts them as a join completes,
    /// `onCompleteJoin`): a member restarted early in that stretch
    /// heartbeats early in the run, and a healthy member is not evicted
    /// unless the restarts take longer than a session.
    fn start(&mut self) {
        let groups = self.config.groups;
        let real_time = matches!(self.time, Time::Real { .. });
        let mut firsts = Vec::with_capacity(if real_time { self.config.consumers } else { 0 });
        for index in 0..self.config.consumers {
            self.handlers.queue(index % groups, index as u32);
            let first = self.rng.random_range(1..=self.config.heartbeat_interval_ms);
            self.events.push(first, index as u32);
            if real_time {
                firsts.push((first, index as u32));
            }
        }
        self.handlers.run(Request::Join);
        firsts.sort_unstable();
        let ids = self.shared.ids.read();
        for (_, index) in firsts {
            let ConsumerIds { group, member } = &ids[index as usize];
            // Refused only for a member whose session ran out while the
            // others joined (joins longer than a session): that eviction
            // counts as false, as it is.
            let _ = self.shared.coordinator.restart_session(group, member);
        }
        drop(ids);
        self.note_expectations();
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
                let mut t = 0;
                while t < end {
                    t = if self.step_every_ms {
                        t + 1
                    } else {
                        self.next_wake(t, next_progress)
                    };
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

    /// Virtual time: the first millisecond after `t` in which something can
    /// happen (an event, a sample or status line, an expiration), or the end.
    fn next_wake(&mut self, t: u64, next_progress: u64) -> u64 {
        let next_event = self.events.next_due().unwrap_or(u64::MAX);
        let next_expiry = self.expiries.next_after(t).unwrap_or(u64::MAX);
        let next_sample = self.recording.next_sample_ms();
        next_event
            .min(next_expiry)
            .min(next_sample)
            .min(next_progress)
            .min(self.config.duration_ms)
            .max(t + 1)
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
            let mut sent = 0;
            for &index in &bucket {
                sent += u64::from(self.schedule(due, index as usize));
            }
            self.events.recycle(bucket);
            if sent > 0 {
                self.note_lag(due, sent);
            }
            let refused = self.handlers.run(Request::Heartbeat).to_vec();
            for index in refused {
                self.rejoin(index as usize);
            }
            if sent > 0 {
                // Each heartbeat either renews its member's expectation or
                // is refused, and the consumer rejoins: either way one is
                // due a session timeout from now.
                self.note_expectations();
            }
        }
    }

    /// Virtual time: notes that expectations scheduled now are due a session
    /// timeout from now (real time does not jump, and needs no note).
    fn note_expectations(&mut self) {
        if let Time::Virtual(_) = self.time {
            let deadline = self.now() + self.config.session_timeout_ms;
            self.expiries.note(deadline);
        }
    }

    /// Records that `sent` heartbeats due at `due` are being sent now.
    fn note_lag(&mut self, due: u64, sent: u64) {
        let lag = self.now().saturating_sub(due);
        self.heartbeat_lag_max_ms = self.heartbeat_lag_max_ms.max(lag);
        if lag > LATE_HEARTBEAT_MS {
            self.late_heartbeats += sent;
        }
    }

    /// Consumer `index`'s event due at `due`: nothing if it crashed, a later
    /// event if it stalls, else a heartbeat queued for the handlers and the
    /// next event one jittered interval later. Whether it queued a heartbeat.
    fn schedule(&mut self, due: u64, index: usize) -> bool {
        if self.failing.contains(index) {
            match self.consumers[index].fate {
                Fate::Crash { at } if due >= at => return false,
                Fate::Stall { at, until } if (at..until).contains(&due) => {
                    self.events.push(until, index as u32);
                    return false;
                }
                _ => {}
            }
        }
        self.handlers
            .queue(index % self.config.groups, index as u32);
        let interval = self.config.heartbeat_interval_ms;
        let jitter = self.config.jitter_ms();
        let gap = self
            .rng
            .random_range(interval - jitter..=interval + jitter)
            .max(1);
        self.events.push(due + gap, index as u32);
        true
    }

    /// An evicted consumer rejoins under a new member id.
    fn rejoin(&mut self, index: usize) {
        let consumer = &mut self.consumers[index];
        consumer.incarnation += 1;
        let member = Consumer::member_id(consumer.index, consumer.incarnation);
        let group = {
            let mut ids = self.shared.ids.write();
            ids[index].member = member.clone();
            ids[index].group.id().clone()
        };
        self.shared
            .coordinator
            .join_group(&group, &member, self.shared.session_timeout)
            .expect("the coordinator admits the configured session timeout");
        self.rejoins += 1;
    }
}

#[cfg(test)]
mod tests;
