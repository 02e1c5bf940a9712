//! A small in-memory Kafka-like broker model built on the `purgatory` crate.
//!
//! It implements the three delayed operations Kafka builds on its purgatory,
//! with Kafka's semantics, on just enough broker state to drive them:
//!
//! - [`DelayedHeartbeat`] (module [`coordinator::heartbeat`]): a group
//!   member's session timer, keyed by [`MemberKey`]. The [`GroupCoordinator`]
//!   completes it on each heartbeat and watches the next one; when it expires
//!   the member is removed and its group rebalances.
//! - [`DelayedProduce`] (module [`produce`]): an `acks=-1` produce, keyed by
//!   every partition written, waiting for the followers to raise each
//!   partition's high watermark to the required offset.
//! - [`DelayedFetch`] (module [`fetch`]): a long-poll fetch, keyed by every
//!   partition read, waiting for `min_bytes`.
//!
//! The [`ReplicaManager`] hosts the partitions ([`Partition`]: a [`Log`], the
//! followers, the high watermark) and the produce and fetch purgatories. The
//! [`simulation`] module runs the consumer-heartbeat simulation that the
//! `consumer_heartbeat` example and the integration tests share.
//!
//! # Layout
//!
//! Modules depend downwards only (no two import each other):
//!
//! - [`records`], [`error`], [`response`]: the log model, Kafka's error codes
//!   and the response callbacks every operation answers through;
//! - [`id`]: group and member ids (hashed once, when made) and the hasher
//!   of the maps keyed by them;
//! - [`group`]: groups, members and their locks;
//! - [`coordinator`]: the [`GroupCoordinator`] and, as its child module
//!   [`coordinator::heartbeat`], the heartbeat operation it arms;
//! - [`partition`]: a hosted [`Partition`] (`partition/mod.rs`), partition
//!   names (`topic_partition.rs`) and the [`PartitionRegistry`]
//!   (`registry.rs`);
//! - [`produce`], [`fetch`]: the two data-path operations, on the registry;
//! - [`replica_manager`]: the partitions and the produce and fetch
//!   purgatories together;
//! - [`simulation`]: the consumer-heartbeat simulation (configuration,
//!   engine, summary).
//!
//! The maps that threads share (the coordinator's groups, the partition
//! registry) are `DashMap`s: lookups of different keys do not contend on one
//! lock.
//!
//! Every component takes its clock from its purgatory: give it a
//! `timer::ManualClock` (and no reaper) to run in virtual time, as the unit
//! tests do, or the system clock to run in real time.
//!
//! Threading: completions by a trigger run on the caller's thread;
//! expirations run on the purgatory's executor thread. Model state is behind
//! `parking_lot` locks that are never held across a purgatory call, but for
//! a group's reentrant lock, which is held across them on purpose: it is
//! also the lock of the group's heartbeat expectations, as in Kafka.
#![warn(missing_docs, missing_debug_implementations)]
// `unsafe` is allowed only where it is, with its SAFETY note: the cache
// prefetch hint of the simulation's request handlers (simulation/prefetch.rs).
#![deny(unsafe_code)]

pub mod coordinator;
mod counter;
pub mod error;
pub mod fetch;
pub mod group;
pub mod id;
pub mod partition;
pub mod produce;
pub mod records;
pub mod replica_manager;
pub mod response;
pub mod simulation;

pub use coordinator::{
    DelayedHeartbeat, Eviction, GroupCoordinator, HeartbeatPurgatory, JoinResult,
};
pub use error::ErrorCode;
pub use fetch::{DelayedFetch, FetchParams, FetchResponse, PartitionFetch};
pub use group::{Group, Member};
pub use id::{GroupId, IdHasher, MemberId, MemberKey};
pub use partition::{
    FetchIsolation, Partition, PartitionRead, PartitionRegistry, PartitionRole, ReplicaId,
    TopicPartition, LEADER_ID,
};
pub use produce::{
    Acks, DelayedProduce, PartitionResponse, ProducePartitionStatus, ProduceResponse,
};
pub use records::{FetchedRecords, Log, Records};
pub use replica_manager::ReplicaManager;
pub use response::{Callback, ResponseSlot};
