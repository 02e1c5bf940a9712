//! Loom models over the real watch index (`watch_at`, `scan`, `remove`,
//! `unwatch_batch`), the real ways of leaving (`check`, `cancel`,
//! `cancel_unattached`, `ExpiryTask::run`, `force_complete`) and the real
//! `Operation::completion`: `cancel_for_key` racing an expiry or a check
//! of another key, a waiter racing a force or a cancel, and a chunked scan
//! whose shard gives its room back between chunks. The bodies of
//! `check_and_complete` and `cancel_for_key` are restated here, as a
//! `Purgatory` needs a timer whose executor thread loom cannot run. Run
//! with `RUSTFLAGS="--cfg loom" cargo test -p purgatory --release --lib
//! loom_models`.
//!
//! Callbacks here touch std atomics only: loom runs its threads on one OS
//! thread, so the purgatory's std thread-locals (the callback depth, the
//! held-back list) are shared by the model's threads, and a loom yield
//! inside a callback would let another model thread see the first one's
//! depth.

use std::collections::hash_map::DefaultHasher;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicUsize as StdUsize, Ordering as Std};
use std::sync::Arc;
use std::time::Duration;

use timer::{TimerHandle, TimerTask};

use super::{KeysHeld, WatchIndex};
use crate::members::Members;
use crate::operation::{DelayedOperation, Operation, Owner, OwnerRef, Shared};
use crate::outcome::loom_models::block_on;
use crate::outcome::Outcome;
use crate::release::{let_go, ExpiryTask};
use crate::retire::{Retired, Unwatch};
use crate::stackbuf::StackBuf;
use crate::stats::Site;

type Hasher = BuildHasherDefault<DefaultHasher>;
type Index = WatchIndex<u32, Probe, Hasher>;

/// Counts its callbacks; completes when tried if `ready`.
#[derive(Default)]
struct Probe {
    ready: bool,
    completes: StdUsize,
    expirations: StdUsize,
}

impl DelayedOperation for Probe {
    fn timeout(&self) -> Duration {
        Duration::MAX
    }
    fn try_complete(&self) -> bool {
        self.ready
    }
    fn on_complete(&self) {
        self.completes.fetch_add(1, Std::SeqCst);
    }
    fn on_expiration(&self) {
        self.expirations.fetch_add(1, Std::SeqCst);
    }
}

/// An owner that frees an operation's slots as it leaves (the purgatory
/// batches completions, and a batch may be freed by the very push that
/// fills it: freeing at once is one of its schedules), and counts how
/// often it was told.
struct FreeingOwner {
    site: Site,
    index: Arc<Index>,
    left: StdUsize,
}

impl Owner<Probe> for FreeingOwner {
    fn site(&self) -> &Site {
        &self.site
    }
    fn left(
        &self,
        op: &Arc<Shared<Probe>>,
        members: Members,
        _: Option<TimerHandle>,
        _: bool,
        _: Outcome,
    ) {
        self.left.fetch_add(1, Std::SeqCst);
        let retired = Retired {
            op: Arc::downgrade(op),
            members,
            timer: None,
        };
        self.index.unwatch_batch(std::slice::from_ref(&retired));
    }
}

fn index() -> Arc<Index> {
    WatchIndex::new(2, Hasher::default())
}

fn owner(index: &Arc<Index>) -> (Arc<FreeingOwner>, OwnerRef<Probe>) {
    let owner = Arc::new(FreeingOwner {
        site: Site::new("loom".into()),
        index: index.clone(),
        left: StdUsize::new(0),
    });
    let dyn_owner: Arc<dyn Owner<Probe>> = owner.clone();
    (owner, Arc::new(dyn_owner))
}

/// A watch in `try_complete_else_watch`'s order, without tries: claim,
/// join every key through the real index, attach. Its epoch.
fn watch(index: &Index, op: &Operation<Probe>, owner: &OwnerRef<Probe>, keys: &[u32]) -> u32 {
    let _guard = op.lock();
    assert!(op.0.claim());
    let mut members = Members::new();
    for &key in keys {
        let at = index.locate(&key);
        let m = index
            .watch_at(KeysHeld::new(key), at, &op.0, || false)
            .expect("not closed");
        members.push(m);
    }
    op.0.attach(owner.clone(), members)
}

/// `Purgatory::check_and_complete`'s loop over the real index: how many it
/// completed.
fn check_and_complete(index: &Index, key: u32) -> usize {
    let mut batch = StackBuf::<_, 64>::new();
    let mut cursor = None;
    let mut completed = 0;
    loop {
        cursor = index.scan(&key, cursor, 64, &mut batch);
        batch.drain_each(|(op, stay): (Arc<Shared<Probe>>, u32)| {
            let (done, token) = op.check(None, stay);
            completed += usize::from(done);
            if let Some(token) = token {
                let_go(token);
            }
            let_go(op);
        });
        if cursor.is_none() {
            return completed;
        }
    }
}

/// `Purgatory::cancel_for_key`'s body over the real index: the operations
/// it cancelled.
fn cancel_for_key(index: &Index, owner: &OwnerRef<Probe>, key: u32) -> Vec<Arc<Shared<Probe>>> {
    let addr = Arc::as_ptr(&**owner).cast::<()>();
    let mut ops = Vec::new();
    if !index.remove(&key, &mut ops) {
        return Vec::new();
    }
    let mut cancelled = Vec::new();
    let mut released = Vec::new();
    for (op, stay) in ops {
        match op.cancel_found(stay, addr, || {}) {
            Some(token) => {
                released.push(token);
                cancelled.push(op);
            }
            None => let_go(op),
        }
    }
    for token in released {
        let_go(token);
    }
    cancelled
}

/// `cancel_for_key` of one key races the expiry, or a check of the
/// other key, on the real index, with a waiter registered for the stay.
/// Exactly one of them ends the stay; the callbacks run once, and only
/// for a completion or an expiry; the owner is told once; the waiter gets
/// that outcome; and every list is left (no key, no slot). (With both
/// racers at once, three threads over the spinning own lock, loom runs
/// past 100,000 branches and 10 minutes: two models of two threads.)
fn cancel_for_key_races(racer: Racer) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut builder = loom::model::Builder::new();
    builder.max_branches = 100_000;
    let record = seen.clone();
    builder.check(move || {
        let index = index();
        let (counts, owner) = owner(&index);
        let op = Operation::new(Probe {
            ready: true,
            ..Probe::default()
        });
        let epoch = watch(&index, &op, &owner, &[1, 2]);
        let waiter = op.completion();
        let racing = match racer {
            Racer::Expiry => {
                let task = ExpiryTask::new(&op.0, epoch);
                loom::thread::spawn(move || {
                    TimerTask::run(task);
                    0
                })
            }
            Racer::Check => {
                let index = index.clone();
                loom::thread::spawn(move || check_and_complete(&index, 1))
            }
        };
        let cancelled = cancel_for_key(&index, &owner, 2).len();
        let checked = racing.join().unwrap();
        let got = block_on(waiter);
        let (completes, expirations) = (
            op.completes.load(Std::SeqCst),
            op.expirations.load(Std::SeqCst),
        );
        let expired = usize::from(expirations == 1);
        assert_eq!(checked + expired + cancelled, 1, "ended once");
        assert_eq!(op.outcome(), Some(got));
        match got {
            Outcome::Completed => assert_eq!((checked, completes, expirations), (1, 1, 0)),
            Outcome::Expired => assert_eq!((completes, expirations), (1, 1)),
            _ => assert_eq!((cancelled, completes, expirations), (1, 0, 0)),
        }
        assert_eq!(counts.left.load(Std::SeqCst), 1, "told once");
        assert!(!op.is_watched());
        assert_eq!(index.keys(), 0, "a key left behind");
        assert_eq!(index.len_of(&1) + index.len_of(&2), 0, "a slot left behind");
        let mut seen = record.lock().unwrap();
        if !seen.contains(&got) {
            seen.push(got);
        }
    });
    // Both winners came up: the model explores the race, not one order.
    assert_eq!(seen.lock().unwrap().len(), 2, "outcomes seen: {seen:?}");
}

#[derive(Clone, Copy)]
enum Racer {
    Expiry,
    Check,
}

#[test]
fn loom_models_cancel_for_key_races_an_expiry_on_the_real_index() {
    cancel_for_key_races(Racer::Expiry);
}

#[test]
fn loom_models_cancel_for_key_races_a_check_of_another_key_on_the_real_index() {
    cancel_for_key_races(Racer::Check);
}

/// A waiter asking through the real `Operation::completion` while
/// another thread runs the real `force_complete` (or `Purgatory::cancel`'s
/// `Shared::cancel`) of a watched operation: it is woken, with that
/// outcome, and for a completion only once `on_complete` has run.
fn waiter_races(cancel: bool) {
    loom::model(move || {
        let index = index();
        let (_counts, owner) = owner(&index);
        let op = Operation::new(Probe::default());
        watch(&index, &op, &owner, &[1]);
        let ender = {
            let (op, owner) = (op.clone(), owner.clone());
            loom::thread::spawn(move || {
                if cancel {
                    let released = {
                        let _guard = op.lock();
                        op.0.cancel(Arc::as_ptr(&*owner).cast())
                    };
                    assert!(released.is_some());
                    let_go(released);
                } else {
                    assert!(op.force_complete());
                }
            })
        };
        let got = block_on(op.completion());
        if cancel {
            assert_eq!(got, Outcome::Cancelled);
        } else {
            assert_eq!(got, Outcome::Completed);
            assert_eq!(
                op.completes.load(Std::SeqCst),
                1,
                "woken before on_complete ran"
            );
        }
        ender.join().unwrap();
        assert_eq!(op.outcome(), Some(got));
        assert_eq!(index.keys(), 0);
    });
}

#[test]
fn loom_models_a_real_waiter_races_force_complete() {
    waiter_races(false);
}

#[test]
fn loom_models_a_real_waiter_races_a_cancel() {
    waiter_races(true);
}

/// A check copies a long list in chunks (64 per shard-lock hold);
/// between two chunks every operation of the shard leaves. A shard that
/// held more than 64 lists gives their room back once all are freed
/// (`Shard::free_list`), and the resumed scan must see its list gone.
#[test]
fn loom_models_a_chunked_scan_survives_its_shard_giving_its_room_back() {
    let mut builder = loom::model::Builder::new();
    // The set-up (130 lists) alone takes thousands of branches.
    builder.max_branches = 100_000;
    builder.check(move || {
        let index = index();
        let key = 0u32;
        let shard = index.locate(&key).shard;
        let mut ops: Vec<Arc<Shared<Probe>>> = Vec::new();
        let mut retired = Vec::new();
        let mut join = |k: u32| {
            let op = Operation::new(Probe::default()).0;
            let at = index.locate(&k);
            let m = index.watch_at(KeysHeld::new(k), at, &op, || false).unwrap();
            let mut members = Members::new();
            members.push(m);
            retired.push(Retired {
                op: Arc::downgrade(&op),
                members,
                timer: None,
            });
            ops.push(op);
        };
        // Key 0 needs two chunks; its shard holds more than 64 lists.
        for _ in 0..65 {
            join(key);
        }
        let mut lists = 1;
        let mut k = 1;
        while lists <= 64 {
            if index.locate(&k).shard == shard {
                join(k);
                lists += 1;
            }
            k += 1;
        }
        let retired = Arc::new(retired);
        let freer = {
            let (index, retired) = (index.clone(), retired.clone());
            loom::thread::spawn(move || index.unwatch_batch(&retired))
        };
        let mut out = StackBuf::<_, 64>::new();
        let mut cursor = None;
        let mut chunks = 0;
        loop {
            cursor = index.scan(&key, cursor, 64, &mut out);
            out.clear();
            chunks += 1;
            if cursor.is_none() {
                break;
            }
        }
        freer.join().unwrap();
        assert!(chunks <= 2);
        assert_eq!(index.keys(), 0);
        drop(ops);
    });
}
