//! The consumer-heartbeat simulation: many consumers in many groups heartbeat
//! a [`GroupCoordinator`](crate::GroupCoordinator); a seeded few crash or
//! stall, and the coordinator detects them through the heartbeat purgatory.
//!
//! The engine is library code so that the `consumer_heartbeat` example and the
//! integration tests run exactly the same thing; it prints nothing itself.
//!
//! # The model
//!
//! - Consumer `i` is member `consumer-<i>-<incarnation>` of group
//!   `group-<i % groups>`. All join at time 0, then heartbeat every
//!   `heartbeat_interval_ms` ± [`JITTER_PERCENT`]% (uniformly drawn gap),
//!   starting at a random phase within the first interval.
//! - `round(consumers * crash_rate)` consumers **crash**: from a random moment
//!   on they send nothing, for good. `round(consumers * stall_rate)` others
//!   **stall**: from a random moment they send nothing for the session timeout
//!   plus ¼ to ½ heartbeat interval (at least [`DETECTION_MARGIN_MS`]), then
//!   resume; their next heartbeat is refused with `UNKNOWN_MEMBER_ID` and they
//!   rejoin under a new member id.
//!   Failures start within [`SimConfig::injection_window_ms`]: after the first
//!   interval and no later than one session timeout (plus
//!   [`DETECTION_MARGIN_MS`]) before the end, so each is detected in the run.
//! - The coordinator answers heartbeats on a pool of
//!   [`SimConfig::handler_threads`] request-handler threads, each group's on
//!   one of them.
//! - The coordinator is never told about a failure: it finds out only when the
//!   heartbeat purgatory expires a member's expectation.
//! - In real time the groups take a while to form (seconds for a million
//!   members). Simulated time starts once they have, and every member's
//!   session restarts then, in the order of the first heartbeats
//!   ([`GroupCoordinator::restart_session`](crate::GroupCoordinator::restart_session);
//!   Kafka restarts them as a join completes), so that no healthy member is
//!   evicted for the time the others took to join.
//!
//! # Definitions used in the summary
//!
//! - **Detected failure**: an injected failure (crash or stall) whose member
//!   the coordinator evicted while the consumer was down (after its crash, or
//!   inside its stall). Each failure counts once.
//! - **False eviction**: an eviction of a member whose consumer, at the moment
//!   of the eviction, was neither crashed nor inside a stall, i.e. it was
//!   still heartbeating on schedule and the coordinator evicted it anyway (for
//!   example because the session timeout is shorter than a heartbeat gap, or
//!   the heartbeat handling thread fell behind by more than the slack).
//! - **Detection delay** of a detected failure: the eviction time minus the
//!   time of the member's last heartbeat as processed by the coordinator, both
//!   on the coordinator's clock. It cannot be below the session timeout; in
//!   virtual time it is the session timeout plus at most one timer tick, in
//!   real time plus the reaper's scheduling lag.
//! - **Rebalance**: a generation bump after the groups formed at time 0; each
//!   eviction and each rejoin is one.
//! - **Late heartbeat**: one the engine sent more than
//!   [`LATE_HEARTBEAT_MS`] after it was due, because a real-time engine fell
//!   behind its schedule. The coordinator then hears from the consumer later
//!   than the consumer spoke, so a stall can end before the coordinator's
//!   session timer runs out: its eviction comes after the stall, counts as a
//!   false eviction, and the stall as undetected. The summary counts them and
//!   the largest lag, so such a run says why.
//! - **heartbeats_per_s**: heartbeat requests handled per *simulated* second
//!   (so that virtual-time summaries are reproducible).
//! - **alive / watched / delayed at end**: members in their groups, and the
//!   heartbeat purgatory's two gauges. Each alive member has exactly one
//!   pending expectation and a departed member none, so the three are equal.

mod calendar;
mod config;
mod engine;
mod expiries;
mod handlers;
mod plan;
mod prefetch;
mod recording;
mod report;
mod summary;

pub use config::{
    ConfigError, SimConfig, SimError, DEFAULT_HANDLER_THREADS, DETECTION_MARGIN_MS, JITTER_PERCENT,
    MAX_CONSUMERS, MAX_DURATION_MS, MAX_HANDLER_THREADS, MAX_PLANNED_HEARTBEATS,
    MAX_PROGRESS_LINES,
};
pub use engine::{run, run_recorded};
pub use recording::{Recording, Sample, MAX_SAMPLES};
pub use summary::{percentile, Progress, Summary, LATE_HEARTBEAT_MS};
