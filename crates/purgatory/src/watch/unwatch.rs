//! Freeing a retired batch's watch-list slots ([`Unwatch`] for the
//! index): each shard locked once per run of its slots, chunk by chunk,
//! the slots' references dropped after each lock hold.

use std::sync::Weak;

use super::{drop_key, KeyHasher, WatchIndex, WatchKey};
use crate::members::Membership;
use crate::operation::{DelayedOperation, Shared};
use crate::retire::{Retired, Unwatch};
use crate::stackbuf::StackBuf;
use crate::sync::{lock_spinning, Ordering};

impl<K: WatchKey, Op: DelayedOperation, S: KeyHasher> Unwatch<Op> for WatchIndex<K, Op, S> {
    fn unwatch_batch(&self, batch: &[Retired<Op>]) {
        // Every slot to free with its occupant, read from the batch itself
        // each time it is needed rather than copied into a vector.
        let slots = || {
            batch
                .iter()
                .flat_map(|r| r.members.iter().map(move |m| (m, r.op.as_ptr())))
        };
        let mut removed = LetGo::new();
        // Each shard is locked once for all its slots. Operations mostly
        // watch the same few keys, so a batch usually touches a few shards:
        // find them with a linear scan and go over the batch once per shard,
        // in the order the shards were met. (Sorting a batch of 64
        // operations with 3 keys each by shard cost more instructions than
        // all its removals.) A batch touching more shards is taken in its
        // own order.
        let mut distinct = [0u32; FEW_SHARDS];
        let mut n = 0;
        let few = slots().all(|(m, _)| {
            if distinct[..n].contains(&m.shard) {
                true
            } else if n < FEW_SHARDS {
                distinct[n] = m.shard;
                n += 1;
                true
            } else {
                false
            }
        });
        if few {
            let mut chunk = [(Membership::default(), std::ptr::null()); UNWATCH_CHUNK];
            for &shard in &distinct[..n] {
                let run = slots().filter(|(m, _)| m.shard == shard);
                self.unwatch_run(shard, run, &mut chunk, &mut removed);
            }
        } else {
            // Keys spread over many shards (each operation its own, or a
            // few in each of thousands of keys) leave a slot or two per
            // shard, each shard's lock last touched by another thread:
            // start fetching every shard's lock before taking the first, so
            // that those misses overlap rather than come one per shard.
            // Then take the slots in the batch's order, a lock hold per run
            // of one shard: sorting by shard would cost more than the few
            // shards met twice (64 slots over 512 shards: about four).
            for (m, _) in slots() {
                timer::internal::prefetch(&self.shards[m.shard as usize]);
            }
            let mut chunk = [(Membership::default(), std::ptr::null()); UNWATCH_CHUNK];
            let mut len = 0;
            for slot in slots() {
                if len == UNWATCH_CHUNK || (len > 0 && chunk[0].0.shard != slot.0.shard) {
                    self.unwatch_chunk(chunk[0].0.shard, &chunk[..len], &mut removed);
                    len = 0;
                }
                chunk[len] = slot;
                len += 1;
            }
            if len > 0 {
                self.unwatch_chunk(chunk[0].0.shard, &chunk[..len], &mut removed);
            }
        }
    }
}

/// How many distinct shards a retired batch may touch before
/// [`Unwatch::unwatch_batch`] takes it in its own order instead of
/// scanning it once per shard.
pub(super) const FEW_SHARDS: usize = 8;

/// What one lock hold of [`WatchIndex::unwatch_chunk`] lets go of, dropped
/// once the lock is released: the slots' references (never the last ones:
/// the retired batch holds one per operation) and the keys of the lists it
/// emptied. Made once per batch, before any lock is taken, so that a hold
/// does not spend its time making it, and a panic under the lock unwinds
/// past the guard before dropping what it holds.
struct LetGo<K, Op: DelayedOperation> {
    refs: StackBuf<Weak<Shared<Op>>, UNWATCH_CHUNK>,
    keys: StackBuf<K, UNWATCH_CHUNK>,
}

impl<K, Op: DelayedOperation> LetGo<K, Op> {
    fn new() -> Self {
        LetGo {
            refs: StackBuf::new(),
            keys: StackBuf::new(),
        }
    }

    fn is_empty(&self) -> bool {
        self.refs.is_empty() && self.keys.is_empty()
    }
}

/// A slot to free and the operation occupying it.
type SlotOf<Op> = (Membership, *const Shared<Op>);

impl<K: WatchKey, Op: DelayedOperation, S: KeyHasher> WatchIndex<K, Op, S> {
    /// Frees the slots of `run`, all in shard `shard_ix`, taking its lock
    /// once per [`UNWATCH_CHUNK`] slots (each chunk copied into `chunk`
    /// first).
    fn unwatch_run(
        &self,
        shard_ix: u32,
        mut run: impl Iterator<Item = SlotOf<Op>>,
        chunk: &mut [SlotOf<Op>; UNWATCH_CHUNK],
        removed: &mut LetGo<K, Op>,
    ) {
        loop {
            let mut len = 0;
            for (to, slot) in chunk.iter_mut().zip(run.by_ref()) {
                *to = slot;
                len += 1;
            }
            if len == 0 {
                return;
            }
            self.unwatch_chunk(shard_ix, &chunk[..len], removed);
            if len < UNWATCH_CHUNK {
                return;
            }
        }
    }

    /// Frees the slots of `chunk` (at most [`UNWATCH_CHUNK`]), all in shard
    /// `shard_ix`, in one hold of its lock; their references go through
    /// `removed` (empty), with the keys of the lists emptied, and are dropped
    /// once the lock is released.
    fn unwatch_chunk(&self, shard_ix: u32, chunk: &[SlotOf<Op>], removed: &mut LetGo<K, Op>) {
        debug_assert!(chunk.len() <= UNWATCH_CHUNK && removed.is_empty());
        let mut shard = lock_spinning(&self.shards[shard_ix as usize]);
        // Start fetching every slot of the chunk before changing any, so
        // that their cache misses overlap (the slots were last written
        // long ago, often by another core) and the removals below find
        // their lines in cache, holding the lock for less time.
        for &(m, _) in chunk {
            if let Some(slot) = shard.list(m.list).slab.get(m.slot) {
                timer::internal::prefetch(slot);
            }
        }
        for &(m, op) in chunk {
            let list = shard.list_mut(m.list);
            let entry = list.slab.remove(m.slot, op);
            debug_assert!(entry.is_some(), "an operation left a slot it did not hold");
            removed.refs.extend(entry);
            if list.slab.live() == 0 {
                let (was_in, key) = shard.free_list(m.list);
                if was_in {
                    self.keys.fetch_sub(1, Ordering::Relaxed);
                }
                removed.keys.extend(key);
                self.hints[shard_ix as usize].update(&shard.table);
            }
        }
        drop(shard);
        removed.refs.clear();
        removed.keys.drain_each(drop_key);
    }
}

/// How many slots [`Unwatch::unwatch_batch`] frees per hold of a shard
/// lock. The watching threads take the same few hot shards' locks for every
/// operation they watch, and wait for them by spinning a few microseconds
/// ([`lock_spinning`]) before blocking; shorter holds keep the wait within
/// the spin.
pub(super) const UNWATCH_CHUNK: usize = 16;
