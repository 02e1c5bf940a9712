//! The arena's tests: reuse, generations, handles of other arenas, and
//! giving memory back.

use super::*;
use std::rc::Rc;

#[test]
fn slot_is_24_bytes_for_word_sized_tasks() {
    assert_eq!(std::mem::size_of::<Slot<u64>>(), 24);
    assert_eq!(std::mem::size_of::<Slot<std::sync::Arc<()>>>(), 24);
}

#[test]
fn insert_remove_reuses_slots_and_bumps_generation() {
    let mut entries = Entries::new();
    let a = entries.insert(10, "a");
    let ha = entries.handle(a);
    entries.slot_mut(a).set_state(UNLINKED);
    assert_eq!(entries.remove(a), "a");
    assert_eq!(entries.resolve(ha), None, "handle is stale after free");
    let b = entries.insert(20, "b");
    assert_eq!(b, a, "freed slot is reused first");
    let hb = entries.handle(b);
    assert_ne!(ha, hb);
    assert_eq!(entries.resolve(hb), Some(b));
    assert_eq!(
        entries.resolve(ha),
        None,
        "old handle does not alias the new task"
    );
    assert_eq!(entries.len(), 1);
}

#[test]
fn handles_carry_their_shard_and_do_not_resolve_elsewhere() {
    let mut a = Entries::new();
    a.set_shard(5);
    let mut b = Entries::new();
    b.set_shard(6);
    let ia = a.insert(1, 'a');
    let ib = b.insert(1, 'b');
    let (ha, hb) = (a.handle(ia), b.handle(ib));
    assert_eq!((ha.shard(), hb.shard()), (5, 6));
    assert_eq!(a.resolve(ha), Some(ia));
    assert_eq!(a.resolve(hb), None, "same index, other shard");
    assert_eq!(b.resolve(ha), None);
}

#[test]
fn handles_from_another_arena_with_the_same_shard_do_not_resolve() {
    let (mut a, mut b) = (Entries::new(), Entries::new());
    let (ia, ib) = (a.insert(1, 'a'), b.insert(1, 'b'));
    let (ha, hb) = (a.handle(ia), b.handle(ib));
    assert_eq!((ha.index, ha.generation), (hb.index, hb.generation));
    assert_ne!(ha, hb);
    assert_eq!(b.resolve(ha), None, "same index, generation and shard");
    assert_eq!(a.resolve(hb), None);
    assert_eq!(b.resolve(hb), Some(ib));
}

#[test]
fn a_handle_is_three_words_of_32_bits() {
    assert_eq!(std::mem::size_of::<TimerHandle>(), 12);
}

/// A slot is not reused past its last generation, where the next would
/// wrap to 0: a handle from its first use would match again. It is retired
/// instead, left off the free list and passed over by the sweep.
#[test]
fn a_slot_is_retired_at_its_last_generation_rather_than_wrapping() {
    let mut entries = Entries::new();
    entries.set_shard(MAX_SHARDS - 1);
    let i = entries.insert(0, ());
    let first = entries.handle(i);
    // One generation short of the last: this free retires the slot.
    entries.slots[i as usize].meta = (GENERATION_MASK - 1) | (UNLINKED << GENERATION_BITS);
    let last = entries.handle(i);
    entries.remove(i);
    assert_eq!(entries.resolve(last), None);
    let j = entries.insert(0, ());
    assert_ne!(i, j, "retired, not handed out again");
    assert_eq!(entries.resolve(first), None);
    assert_eq!(
        entries.handle(j).shard(),
        MAX_SHARDS - 1,
        "shard bits untouched"
    );
    // The sweep passes over it too.
    entries.remove(j);
    entries.start_sweep();
    assert_eq!(entries.insert(0, ()), j);
    let k = entries.insert(0, ());
    assert!(k != i && k != j);
    assert_eq!(entries.resolve(first), None);
}

#[test]
fn unknown_handles_resolve_to_none() {
    let entries: Entries<u8> = Entries::new();
    assert_eq!(entries.resolve(TimerHandle::DETACHED), None);
    assert_eq!(
        entries.resolve(TimerHandle {
            index: 7,
            generation: 0,
            owner: entries.owner,
        }),
        None
    );
}

/// Fills an arena with `n` entries and frees them all, returning the
/// handle of the last entry freed.
fn fill_and_empty(entries: &mut Entries<u64>, n: u64) -> TimerHandle {
    let indices: Vec<u32> = (0..n).map(|i| entries.insert(i, i)).collect();
    let mut last = TimerHandle::DETACHED;
    for &i in &indices {
        last = entries.handle(i);
        entries.slot_mut(i).set_state(UNLINKED);
        entries.remove(i);
    }
    last
}

#[test]
fn a_large_arena_gives_its_memory_back_once_emptied() {
    let mut entries = Entries::new();
    let n = 3 * KEEP_SLOTS as u64;
    let first = entries.insert(0, 0);
    let first_handle = entries.handle(first);
    entries.slot_mut(first).set_state(UNLINKED);
    entries.remove(first);
    assert!(entries.capacity() > 0, "a small arena keeps its slots");
    let last = fill_and_empty(&mut entries, n);
    assert_eq!(entries.len(), 0);
    assert_eq!(entries.capacity(), 0, "emptied: every slot freed");
    // Indices start over at 0 with fresh generations: no handle issued
    // before the arena emptied may resolve against the new entries.
    let again: Vec<u32> = (0..n).map(|i| entries.insert(i, i)).collect();
    assert_eq!(again[0], 0);
    assert_eq!(entries.resolve(first_handle), None);
    assert_eq!(entries.resolve(last), None);
    assert_eq!(entries.resolve(entries.handle(again[0])), Some(0));
}

#[test]
fn a_deferring_arena_keeps_its_emptied_memory_for_the_owner() {
    let mut entries = Entries::new();
    assert!(entries.take_emptied().is_none());
    entries.defer_freeing();
    let n = 2 * KEEP_SLOTS as u64;
    let last = fill_and_empty(&mut entries, n);
    // Given up by the arena at once (indices start over, old handles are
    // stale), kept aside until taken, and taken once.
    assert_eq!(entries.capacity(), 0);
    assert_eq!(entries.resolve(last), None);
    let emptied = entries.take_emptied().expect("the emptied slots");
    assert!(emptied.capacity() >= n as usize, "{}", emptied.capacity());
    assert!(entries.take_emptied().is_none());
    // A small arena that empties keeps its slots: nothing to take.
    fill_and_empty(&mut entries, KEEP_SLOTS as u64 / 2);
    assert!(entries.capacity() > 0);
    assert!(entries.take_emptied().is_none());
    drop(emptied);
}

#[test]
fn an_arena_not_deferring_frees_its_memory_itself() {
    let mut entries = Entries::new();
    fill_and_empty(&mut entries, 2 * KEEP_SLOTS as u64);
    assert_eq!(entries.capacity(), 0);
    assert!(entries.take_emptied().is_none());
}

#[test]
fn a_small_arena_keeps_its_slots_when_emptied() {
    let mut entries = Entries::new();
    fill_and_empty(&mut entries, KEEP_SLOTS as u64 / 2);
    let capacity = entries.capacity();
    assert!(capacity > 0 && capacity <= KEEP_SLOTS, "{capacity}");
    let owner = entries.owner;
    let i = entries.insert(1, 1);
    assert_eq!(entries.owner, owner, "nothing released, nothing renamed");
    assert_eq!(entries.capacity(), capacity, "reused, not regrown");
    assert_eq!(entries.slot(i).deadline, 1);
}

#[test]
fn a_large_arena_not_yet_empty_keeps_its_slots() {
    let mut entries = Entries::new();
    let keep = entries.insert(0, 0);
    fill_and_empty(&mut entries, 2 * KEEP_SLOTS as u64);
    assert!(entries.capacity() > KEEP_SLOTS);
    let handle = entries.handle(keep);
    assert_eq!(entries.resolve(handle), Some(keep));
    entries.slot_mut(keep).set_state(UNLINKED);
    assert_eq!(entries.remove(keep), 0);
    assert_eq!(entries.capacity(), 0);
}

#[test]
fn draining_a_large_arena_gives_its_memory_back() {
    let mut entries = Entries::new();
    for i in 0..2 * KEEP_SLOTS as u64 {
        entries.insert(i, i);
    }
    let mut drained = 0;
    entries.drain(|_| drained += 1);
    assert_eq!(drained, 2 * KEEP_SLOTS);
    assert_eq!(entries.capacity(), 0);
}

#[test]
fn drop_and_drain_release_every_task_once() {
    let token = Rc::new(());
    let mut entries = Entries::new();
    for i in 0..10 {
        entries.insert(i, token.clone());
    }
    let third = 3;
    entries.slot_mut(third).set_state(UNLINKED);
    drop(entries.remove(third));
    assert_eq!(Rc::strong_count(&token), 10);
    let mut drained = 0;
    let mut half = Entries::new();
    for i in 0..4 {
        half.insert(i, token.clone());
    }
    half.drain(|_| drained += 1);
    assert_eq!(drained, 4);
    assert_eq!(half.len(), 0);
    drop(entries);
    assert_eq!(Rc::strong_count(&token), 1);
}

/// Frees the occupied slot `i` of `entries` (unlinking it first).
fn free(entries: &mut Entries<u64>, i: u32) -> u64 {
    entries.slot_mut(i).set_state(UNLINKED);
    entries.remove(i)
}

#[test]
fn a_drained_arena_hands_its_slots_out_in_address_order() {
    let mut entries = Entries::new();
    let n = 8 * KEEP_SLOTS as u32;
    for i in 0..n {
        assert_eq!(entries.insert(u64::from(i), u64::from(i)), i);
    }
    // One entry in 100 stays; the rest leave in scattered order (a
    // permutation: 7,919 is prime to n, a power of two).
    let standing = |i: u32| i % 100 == 0;
    let order = (0..n).map(|k| k.wrapping_mul(7919) % n);
    let mut listed = Vec::new();
    for i in order.filter(|&i| !standing(i)) {
        if entries.len() * SWEEP_BELOW <= n as usize {
            // Freed after the sweep began: on the free list, reused first.
            listed.push(i);
        }
        free(&mut entries, i);
    }
    let standing_handles: Vec<_> = (0..n)
        .filter(|&i| standing(i))
        .map(|i| entries.handle(i))
        .collect();
    let vacant = n as usize - standing_handles.len();
    let again: Vec<u32> = (0..vacant).map(|k| entries.insert(0, k as u64)).collect();
    // The last ones freed come back first (LIFO), then every other vacant
    // slot in address order, none twice and none occupied, and the arena
    // did not grow.
    listed.reverse();
    assert!(!listed.is_empty() && listed.len() < vacant / 10);
    assert_eq!(&again[..listed.len()], &listed[..]);
    let swept = &again[listed.len()..];
    assert!(
        swept.windows(2).all(|w| w[0] < w[1]),
        "not in address order"
    );
    assert!(swept.iter().all(|&i| !standing(i)));
    let mut all = again.clone();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), vacant);
    assert_eq!(entries.len(), n as usize);
    assert_eq!(
        entries.insert(0, 0),
        n,
        "full: the next one grows the arena"
    );
    for (k, h) in standing_handles.iter().enumerate() {
        assert_eq!(entries.resolve(*h), Some(k as u32 * 100));
    }
}

#[test]
fn waves_of_entries_never_share_a_slot() {
    // Against a model of the occupied slots: grow to a wave's peak, drain
    // to a few (sweeps start), refill, with scattered removals throughout.
    let mut entries = Entries::new();
    let mut occupied: Vec<(u32, TimerHandle, u64)> = Vec::new();
    let mut in_use = std::collections::HashSet::new();
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut id = 0u64;
    for peak in [10_000usize, 3_000, 12_000, 9_000, 500, 20_000] {
        while occupied.len() < peak {
            id += 1;
            let i = entries.insert(id, id);
            assert!(in_use.insert(i), "slot {i} handed out twice");
            occupied.push((i, entries.handle(i), id));
        }
        let floor = (next() % 100) as usize;
        while occupied.len() > floor {
            let k = (next() % occupied.len() as u64) as usize;
            let (i, h, task) = occupied.swap_remove(k);
            assert_eq!(entries.resolve(h), Some(i));
            assert_eq!(free(&mut entries, i), task);
            assert_eq!(entries.resolve(h), None);
            in_use.remove(&i);
        }
    }
    for (i, h, _) in &occupied {
        assert_eq!(entries.resolve(*h), Some(*i));
    }
    let mut drained = Vec::new();
    entries.drain(|task| drained.push(task));
    drained.sort_unstable();
    let mut want: Vec<u64> = occupied.iter().map(|o| o.2).collect();
    want.sort_unstable();
    assert_eq!(drained, want);
}
