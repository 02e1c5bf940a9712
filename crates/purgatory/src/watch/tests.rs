//! The watch lists' internals: slots, detached lists, chunked scans.

use super::slab::HEAD;
use super::unwatch::{FEW_SHARDS, UNWATCH_CHUNK};
use super::*;
use crate::members::Members;
use crate::operation::Operation;
use crate::retire::{Retired, Unwatch};
use std::collections::hash_map::RandomState;
use std::time::Duration;

struct Nop;
impl DelayedOperation for Nop {
    fn timeout(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn try_complete(&self) -> bool {
        false
    }
    fn on_complete(&self) {}
}

fn op() -> Arc<Shared<Nop>> {
    Operation::new(Nop).0
}

fn watch<K: WatchKey>(
    index: &WatchIndex<K, Nop, RandomState>,
    key: K,
    op: &Arc<Shared<Nop>>,
) -> Membership {
    index.watch(key, op, || false).expect("open")
}

fn unwatch<K: WatchKey>(
    index: &WatchIndex<K, Nop, RandomState>,
    m: Membership,
    op: &Arc<Shared<Nop>>,
) {
    let mut members = Members::new();
    members.push(m);
    index.unwatch_batch(&[Retired {
        op: Arc::downgrade(op),
        members,
        timer: None,
    }]);
}

#[test]
fn slots_are_reused_and_an_emptied_key_is_removed() {
    // One shard, so that the second key lands where the first was.
    let index = WatchIndex::<&str, Nop, _>::new(1, RandomState::new());
    let (a, b, c) = (op(), op(), op());
    let ma = watch(&index, "k", &a);
    let mb = watch(&index, "k", &b);
    assert_eq!((ma.slot, mb.slot), (0, 1));
    assert_eq!((index.len_of(&"k"), index.keys()), (2, 1));
    unwatch(&index, ma, &a);
    let mc = watch(&index, "k", &c);
    assert_eq!(mc.slot, 0, "the freed slot is reused");
    unwatch(&index, mb, &b);
    unwatch(&index, mc, &c);
    assert_eq!((index.len_of(&"k"), index.keys()), (0, 0));
    // The list id is recycled with a new generation.
    let md = watch(&index, "other", &a);
    assert_eq!(md.list, ma.list);
    let shard = index.shards[md.shard as usize].lock();
    assert_eq!(shard.lists[md.list as usize].generation, 2);
}

/// A shard whose lists are all freed gives their room back once it had
/// more than `KEEP_LISTS`, and a scan begun before does not take a new
/// list at a reused id for its own.
#[test]
fn an_emptied_shard_gives_its_room_back() {
    let index = WatchIndex::<u32, Nop, _>::new(1, RandomState::new());
    let ops: Vec<_> = (0..=KEEP_LISTS as u32).map(|_| op()).collect();
    let members: Vec<_> = (0..)
        .zip(&ops)
        .map(|(k, o)| (watch(&index, k, o), o))
        .collect();
    let mut out = StackBuf::<_, 16>::new();
    let cursor = index.scan(&0, None, 0, &mut out).expect("more to scan");
    for (m, o) in &members[1..] {
        unwatch(&index, *m, o);
    }
    assert_eq!(
        index.shards[0].lock().lists.len(),
        KEEP_LISTS + 1,
        "one left"
    );
    unwatch(&index, members[0].0, members[0].1);
    {
        let shard = index.shards[0].lock();
        assert_eq!((shard.lists.capacity(), shard.free_ids.capacity()), (0, 0));
    }
    assert_eq!(index.keys(), 0);
    let again = watch(&index, 0, &ops[0]);
    assert_eq!(again.list, 0, "the id is reused");
    assert!(
        index.scan(&0, Some(cursor), 10, &mut out).is_none(),
        "not its list"
    );
    assert_eq!(index.len_of(&0), 1);

    // Below the bound, the room is kept.
    unwatch(&index, again, &ops[0]);
    let m = watch(&index, 1, &ops[1]);
    unwatch(&index, m, &ops[1]);
    assert_eq!(index.shards[0].lock().lists.len(), 1, "kept");
}

#[test]
fn a_detached_list_lives_until_its_last_operation_leaves() {
    let index = WatchIndex::<&str, Nop, _>::new(2, RandomState::new());
    let (a, b) = (op(), op());
    let ma = watch(&index, "k", &a);
    let mb = watch(&index, "k", &b);
    let mut out = Vec::new();
    assert!(index.remove(&"k", &mut out));
    assert_eq!(out.len(), 2);
    assert_eq!(index.keys(), 0);
    // The key can get a new list while the old one is still occupied.
    let c = op();
    let mc = watch(&index, "k", &c);
    assert_ne!(mc.list, ma.list);
    unwatch(&index, ma, &a);
    unwatch(&index, mb, &b);
    let shard = index.shards[ma.shard as usize].lock();
    assert!(shard.lists[ma.list as usize].key.is_none(), "freed");
    assert!(shard.free_ids.contains(&ma.list));
    drop(shard);
    assert_eq!(index.len_of(&"k"), 1);
}

#[test]
fn a_chunked_scan_stops_when_its_list_is_recycled() {
    let index = WatchIndex::<&str, Nop, _>::new(2, RandomState::new());
    let ops: Vec<_> = (0..5).map(|_| op()).collect();
    let members: Vec<_> = ops.iter().map(|o| watch(&index, "k", o)).collect();
    // These operations are not claimed by a purgatory, so a scan copies
    // none of them; the test is about the cursor alone.
    let mut out = StackBuf::<_, 16>::new();
    let cursor = index.scan(&"k", None, 0, &mut out).expect("more to scan");
    for (m, o) in members.iter().zip(&ops) {
        unwatch(&index, *m, o);
    }
    let other = op();
    watch(&index, "k2", &other);
    assert!(index.scan(&"k", Some(cursor), 10, &mut out).is_none());
    assert!(out.is_empty());
}

/// A batch touching a few shards (scanned once per shard) and one
/// touching more than `FEW_SHARDS` (taken in its order, a shard met again
/// locked again) both free every slot and remove every emptied key.
#[test]
fn batches_over_few_and_many_shards_free_every_slot() {
    const KEYS: [&str; 40] = [
        "k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9", "k10", "k11", "k12", "k13",
        "k14", "k15", "k16", "k17", "k18", "k19", "k20", "k21", "k22", "k23", "k24", "k25", "k26",
        "k27", "k28", "k29", "k30", "k31", "k32", "k33", "k34", "k35", "k36", "k37", "k38", "k39",
    ];
    for keys_used in [2, KEYS.len()] {
        let index = WatchIndex::<&str, Nop, _>::new(64, RandomState::new());
        let ops: Vec<_> = (0..64).map(|_| op()).collect();
        let batch: Vec<Retired<Nop>> = (0..64)
            .map(|i| {
                let o = &ops[i];
                let mut members = Members::new();
                for j in 0..3 {
                    members.push(watch(&index, KEYS[(i + j) % keys_used], o));
                }
                Retired {
                    op: Arc::downgrade(o),
                    members,
                    timer: None,
                }
            })
            .collect();
        let shards: std::collections::HashSet<u32> = batch
            .iter()
            .flat_map(|r| r.members.iter().map(|m| m.shard))
            .collect();
        assert_eq!(shards.len() > FEW_SHARDS, keys_used > 2, "{shards:?}");
        assert_eq!(index.keys(), keys_used);
        index.unwatch_batch(&batch);
        assert_eq!(index.keys(), 0);
        assert!(KEYS.iter().all(|k| index.len_of(k) == 0));
        // Only the batch's weak references remain.
        assert!(batch.iter().all(|r| r.op.weak_count() == 1));
    }
}

/// A hasher whose output fits in 32 bits (here the key's number) still
/// spreads keys over the shards.
#[test]
fn narrow_hashes_spread_over_shards() {
    #[derive(Default)]
    struct Narrow(u64);
    impl std::hash::Hasher for Narrow {
        fn write(&mut self, bytes: &[u8]) {
            for &b in bytes {
                if b.is_ascii_digit() {
                    self.0 = self.0 * 10 + u64::from(b - b'0');
                }
            }
        }
        fn finish(&self) -> u64 {
            self.0
        }
    }
    let index =
        WatchIndex::<String, Nop, _>::new(64, std::hash::BuildHasherDefault::<Narrow>::default());
    let shards: std::collections::HashSet<usize> = (0..256)
        .map(|i| index.locate(&format!("k{i}")).shard)
        .collect();
    assert!(shards.len() > 32, "{} shards used", shards.len());
}

#[test]
fn members_spill_past_the_inline_capacity() {
    let mut members = Members::new();
    for i in 0..10u32 {
        members.push(Membership {
            shard: i,
            list: i,
            slot: i,
        });
    }
    assert_eq!(members.len(), 10);
    let shards: Vec<u32> = members.iter().map(|m| m.shard).collect();
    assert_eq!(shards, (0..10).collect::<Vec<_>>());
}

/// A watch-list slot is one pointer: what each pending operation pays per
/// key in its list (beyond the vector's spare room).
#[test]
fn a_slot_is_eight_bytes() {
    assert_eq!(std::mem::size_of::<slab::Slot<Nop>>(), 8);
}

/// A list with its first two slots in place: 88 bytes beside its key (a
/// heartbeat's `MemberKey`, two ids of a shared text and a hash each, is 48
/// bytes), and nothing else while it holds at most two operations.
#[test]
fn a_list_is_its_key_and_88_bytes() {
    #[derive(Clone, PartialEq, Eq, Hash, Debug)]
    struct MemberKey(Arc<str>, u64, Arc<str>, u64);
    assert_eq!(std::mem::size_of::<MemberKey>(), 48);
    assert_eq!(std::mem::size_of::<ListSlot<MemberKey, Nop>>(), 48 + 88);
    assert_eq!(std::mem::size_of::<ListSlot<u64, Nop>>(), 16 + 88);
}

/// The head's slots are filled first and reused first; a tail slot in the
/// middle goes on the free stack (the one freed last is reused first); the
/// tail's last slot is popped, never stacked; every vacant one is found
/// again.
#[test]
fn head_slots_first_then_the_slot_freed_last_and_the_last_slot_is_popped() {
    let mut slab = Slab::<Nop>::new();
    let ops: Vec<_> = (0..6).map(|_| op()).collect();
    let slots: Vec<u32> = ops.iter().map(|o| slab.insert(Arc::downgrade(o))).collect();
    assert_eq!(slots, [0, 1, 2, 3, 4, 5]);
    assert!(
        slab.remove(1, Arc::as_ptr(&ops[2])).is_none(),
        "not its slot"
    );
    assert!(slab.remove(1, Arc::as_ptr(&ops[1])).is_some());
    assert!(slab.remove(1, Arc::as_ptr(&ops[1])).is_none(), "freed once");
    assert!(slab.remove(2, Arc::as_ptr(&ops[2])).is_some());
    assert!(slab.remove(3, Arc::as_ptr(&ops[3])).is_some());
    assert!(slab.remove(5, Arc::as_ptr(&ops[5])).is_some());
    assert_eq!((slab.len(), slab.live()), (5, 2), "the last popped");
    assert!(slab.remove(5, Arc::as_ptr(&ops[5])).is_none(), "freed once");
    assert!(slab.remove(9, Arc::as_ptr(&ops[5])).is_none(), "never used");
    assert_eq!(slab.insert(Arc::downgrade(&ops[5])), 1, "the head first");
    assert_eq!(slab.insert(Arc::downgrade(&ops[3])), 3, "freed last");
    assert_eq!(slab.insert(Arc::downgrade(&ops[2])), 2);
    assert_eq!(
        slab.insert(Arc::downgrade(&ops[1])),
        5,
        "none vacant: grows"
    );
    assert_eq!(slab.live(), 6);
    // Emptied from the end, the stack stays untouched; a slot vacant
    // below the end stays on it, below the length.
    assert!(slab.remove(2, Arc::as_ptr(&ops[2])).is_some());
    let occupants = [&ops[0], &ops[5], &ops[2], &ops[3], &ops[4], &ops[1]];
    for slot in (3..6).rev() {
        assert!(slab
            .remove(slot as u32, Arc::as_ptr(occupants[slot]))
            .is_some());
    }
    assert_eq!((slab.len(), slab.live()), (3, 2));
    assert_eq!(slab.insert(Arc::downgrade(&ops[2])), 2, "found again");
    let mut out = Vec::new();
    slab.copy_all(&mut out);
    assert_eq!(out.len(), 3);
    // A run of slots ends with the head or with the tail.
    assert_eq!((slab.run_from(0).len(), slab.run_from(1).len()), (2, 1));
    assert_eq!(slab.run_from(2).len(), 1);
}

/// A list of one or two operations (a member's heartbeat expectation and
/// the one replacing it) lives in its head: it allocates nothing, however
/// its two slots are taken and freed in turn.
#[test]
fn a_short_list_never_allocates() {
    let mut slab = Slab::<Nop>::new();
    let ops: Vec<_> = (0..8).map(|_| op()).collect();
    let mut pending = (slab.insert(Arc::downgrade(&ops[0])), &ops[0]);
    for next in &ops[1..] {
        let slot = slab.insert(Arc::downgrade(next));
        assert!(slab.remove(pending.0, Arc::as_ptr(pending.1)).is_some());
        pending = (slot, next);
        assert_eq!((slab.len(), slab.live()), (HEAD, 1));
    }
    assert!(slab.remove(pending.0, Arc::as_ptr(pending.1)).is_some());
    assert!(slab.recycle().is_none(), "no tail: nothing to keep");
}

/// A list whose tail was used and emptied lends its slab to the next list
/// created, vacant: its first slot is 0 again and nothing of the old list
/// shows. One with much room is not kept.
#[test]
fn an_emptied_small_list_lends_its_slab_to_the_next() {
    let index = WatchIndex::<&str, Nop, _>::new(1, RandomState::new());
    let ops: Vec<_> = (0..=HEAD).map(|_| op()).collect();
    let members: Vec<_> = ops.iter().map(|o| watch(&index, "k", o)).collect();
    for (m, o) in members.iter().zip(&ops) {
        unwatch(&index, *m, o);
    }
    assert_eq!(index.shards[0].lock().spare.len(), 1, "kept");
    let mb = watch(&index, "j", &ops[0]);
    assert!(index.shards[0].lock().spare.is_empty(), "reused");
    assert_eq!((mb.slot, index.len_of(&"j"), index.keys()), (0, 1, 1));
    unwatch(&index, mb, &ops[0]);

    let many: Vec<_> = (0..=HEAD + slab::RECYCLE_MAX).map(|_| op()).collect();
    let members: Vec<_> = many.iter().map(|o| watch(&index, "big", o)).collect();
    index.shards[0].lock().spare.clear();
    for (m, o) in members.iter().zip(&many) {
        unwatch(&index, *m, o);
    }
    assert!(index.shards[0].lock().spare.is_empty(), "too large to keep");
    assert_eq!(index.keys(), 0);
}

/// Watches a new operation under each key, `HEAD + 1` times (so that each
/// list has a tail), then lets each leave, in order: every list is
/// created, then emptied. Returns the operations.
fn watch_and_leave(
    index: &WatchIndex<&'static str, Nop, RandomState>,
    keys: &[&'static str],
) -> Vec<Arc<Shared<Nop>>> {
    let ops: Vec<_> = keys.iter().map(|_| op()).collect();
    let members: Vec<_> = keys
        .iter()
        .zip(&ops)
        .flat_map(|(k, o)| (0..=HEAD).map(move |_| (watch(index, k, o), o)))
        .collect();
    for (m, o) in members {
        unwatch(index, m, o);
    }
    ops
}

/// Lists emptied in turn leave up to `SPARE_SLABS` slabs in their shard,
/// and the next lists created take them before allocating.
#[test]
fn a_shard_keeps_a_few_emptied_slabs() {
    let index = WatchIndex::<&str, Nop, _>::new(1, RandomState::new());
    const KEYS: [&str; 6] = ["a", "b", "c", "d", "e", "f"];
    let ops = watch_and_leave(&index, &KEYS);
    assert_eq!(index.shards[0].lock().spare.len(), SPARE_SLABS, "bounded");
    for (i, (k, o)) in KEYS.iter().zip(&ops).enumerate() {
        watch(&index, k, o);
        let left = SPARE_SLABS.saturating_sub(i + 1);
        assert_eq!(index.shards[0].lock().spare.len(), left, "reused first");
    }
    assert_eq!(index.keys(), KEYS.len());
}

/// In a batch over many shards, a run of one shard longer than a chunk is
/// freed chunk by chunk, and a shard met again later is freed then.
#[test]
fn a_long_run_in_a_batch_over_many_shards_is_freed_in_chunks() {
    let index = WatchIndex::<u32, Nop, _>::new(64, RandomState::new());
    let ops: Vec<_> = (0..20).map(|_| op()).collect();
    let retired = |o: &Arc<Shared<Nop>>, keys: &[u32]| {
        let mut members = Members::new();
        for &k in keys {
            members.push(index.watch(k, o, || false).expect("open"));
        }
        Retired {
            op: Arc::downgrade(o),
            members,
            timer: None,
        }
    };
    let mut batch = vec![retired(&ops[0], &[7; UNWATCH_CHUNK + 5])];
    batch.extend((1..19).map(|i| retired(&ops[i], &[100 + i as u32])));
    batch.push(retired(&ops[19], &[7, 7]));
    let shards: std::collections::HashSet<u32> = batch
        .iter()
        .flat_map(|r| r.members.iter().map(|m| m.shard))
        .collect();
    assert!(shards.len() > FEW_SHARDS);
    assert_eq!((index.len_of(&7), index.keys()), (UNWATCH_CHUNK + 7, 19));
    index.unwatch_batch(&batch);
    assert_eq!((index.len_of(&7), index.keys()), (0, 0));
    assert!(batch.iter().all(|r| r.op.weak_count() == 1));
}

/// `drop_spares` (what `purge` calls) leaves no emptied slab behind.
#[test]
fn dropping_spares_empties_every_shard() {
    let index = WatchIndex::<&str, Nop, _>::new(4, RandomState::new());
    watch_and_leave(&index, &["a", "b", "c", "d", "e", "f", "g", "h"]);
    assert!(index.shards.iter().any(|s| !s.lock().spare.is_empty()));
    index.drop_spares();
    assert!(index.shards.iter().all(|s| s.lock().spare.is_empty()));
}

/// A watch names the other operation of a list that is only its head (the
/// one a heartbeat's check completes next), and none once the list has a
/// tail.
#[test]
fn the_head_neighbour_is_the_other_operation_of_a_short_list() {
    let mut slab = Slab::<Nop>::new();
    let ops: Vec<_> = (0..3).map(|_| op()).collect();
    let neighbour = |slab: &Slab<Nop>, slot| slab.head_neighbour(slot).map(|w| w.as_ptr());
    assert_eq!(slab.insert(Arc::downgrade(&ops[0])), 0);
    assert_eq!(neighbour(&slab, 0), None, "alone");
    assert_eq!(slab.insert(Arc::downgrade(&ops[1])), 1);
    assert_eq!(neighbour(&slab, 1), Some(Arc::as_ptr(&ops[0])));
    assert_eq!(neighbour(&slab, 0), Some(Arc::as_ptr(&ops[1])));
    assert_eq!(slab.insert(Arc::downgrade(&ops[2])), 2);
    assert_eq!(neighbour(&slab, 1), None, "a tail: not a short list");
    assert_eq!(neighbour(&slab, 2), None);
}

/// The lock-free hint names where each shard's key table is, through its
/// growth and after the shard gives its room back; a prefetch reads only
/// the hint.
#[test]
fn the_table_hint_follows_the_table() {
    let index = WatchIndex::<u32, Nop, _>::new(1, RandomState::new());
    let hint = |index: &WatchIndex<u32, Nop, RandomState>| {
        let h = &index.hints[0];
        (
            h.base.load(Ordering::Relaxed),
            h.mask.load(Ordering::Relaxed),
        )
    };
    index.prefetch(&1);
    assert_eq!(hint(&index), (0, 0), "no room yet");
    let ops: Vec<_> = (0..=KEEP_LISTS as u32).map(|_| op()).collect();
    let members: Vec<_> = (0..)
        .zip(&ops)
        .map(|(k, o)| (watch(&index, k, o), o))
        .collect();
    let location = index.shards[0].lock().table.location();
    assert_eq!(hint(&index), location);
    assert!(location.1 >= KEEP_LISTS, "grown");
    index.prefetch(&3);
    for (m, o) in members {
        unwatch(&index, m, o);
    }
    assert_eq!(hint(&index), (0, 0), "room given back");
    index.prefetch(&3);
}
