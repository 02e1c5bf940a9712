//! The set of partitions the broker hosts.
//!
//! Request handlers and delayed operations on any thread look partitions up
//! by name; the map is a `DashMap`, so lookups of different partitions do not
//! contend on one lock.

use std::sync::Arc;

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use super::{Partition, PartitionRole, TopicPartition};
use crate::error::ErrorCode;

/// The partitions this broker hosts, shared by the replica manager and the
/// delayed operations that look partitions up.
#[derive(Debug, Default)]
pub struct PartitionRegistry {
    partitions: DashMap<TopicPartition, Arc<Partition>>,
}

impl PartitionRegistry {
    /// No partitions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Hosts `partition`; `TOPIC_ALREADY_EXISTS` if one of that name is
    /// hosted (operations waiting on it would otherwise go on waiting for
    /// offsets of a log that is gone). Through
    /// [`ReplicaManager::add_partition`](crate::ReplicaManager::add_partition).
    pub(crate) fn insert(&self, partition: Partition) -> Result<Arc<Partition>, ErrorCode> {
        match self.partitions.entry(partition.topic_partition().clone()) {
            Entry::Occupied(_) => Err(ErrorCode::TopicAlreadyExists),
            Entry::Vacant(vacant) => Ok(Arc::clone(vacant.insert(Arc::new(partition)).value())),
        }
    }

    /// The partition `tp` whatever its role, if hosted.
    pub fn get(&self, tp: &TopicPartition) -> Option<Arc<Partition>> {
        self.partitions.get(tp).map(|p| Arc::clone(p.value()))
    }

    /// Stops hosting `tp`. Through
    /// [`ReplicaManager::remove_partition`](crate::ReplicaManager::remove_partition),
    /// which answers the operations waiting on it.
    pub(crate) fn remove(&self, tp: &TopicPartition) -> Option<Arc<Partition>> {
        self.partitions.remove(tp).map(|(_, p)| p)
    }

    /// Kafka's `getPartitionOrError`: the partition, `UNKNOWN_TOPIC_OR_PARTITION`
    /// if it is not hosted, `KAFKA_STORAGE_ERROR` if it is offline.
    pub fn get_partition_or_error(&self, tp: &TopicPartition) -> Result<Arc<Partition>, ErrorCode> {
        let partition = self.get(tp).ok_or(ErrorCode::UnknownTopicOrPartition)?;
        if partition.role() == PartitionRole::Offline {
            return Err(ErrorCode::KafkaStorageError);
        }
        Ok(partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn partition() -> Partition {
        Partition::new(TopicPartition::new("t", 0), &[1, 2], 2).unwrap()
    }

    #[test]
    fn registry_maps_missing_and_offline_partitions_to_errors() {
        let registry = PartitionRegistry::new();
        let tp = TopicPartition::new("t", 0);
        assert_eq!(
            registry.get_partition_or_error(&tp).unwrap_err(),
            ErrorCode::UnknownTopicOrPartition
        );
        let p = registry.insert(partition()).unwrap();
        assert!(registry.get_partition_or_error(&tp).is_ok());
        assert_eq!(
            registry.insert(partition()).map(|_| ()),
            Err(ErrorCode::TopicAlreadyExists)
        );
        p.set_role(PartitionRole::Offline);
        assert_eq!(
            registry.get_partition_or_error(&tp).unwrap_err(),
            ErrorCode::KafkaStorageError
        );
    }
}
