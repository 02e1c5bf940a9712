//! Names of partitions and replicas.

use std::fmt;
use std::sync::Arc;

/// A replica (broker) id. The local broker, leader of every partition it
/// hosts, is [`LEADER_ID`]; followers have other ids.
pub type ReplicaId = u32;

/// The local broker's replica id.
pub const LEADER_ID: ReplicaId = 0;

/// A topic partition, e.g. `orders-3`. Cheap to clone.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    topic: Arc<str>,
    partition: u32,
}

impl TopicPartition {
    /// Partition `partition` of `topic`.
    pub fn new(topic: impl Into<Arc<str>>, partition: u32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The partition number.
    pub fn partition(&self) -> u32 {
        self.partition
    }
}

impl fmt::Display for TopicPartition {
    /// Kafka's label, `<topic>-<partition>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

impl fmt::Debug for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TopicPartition({self})")
    }
}
