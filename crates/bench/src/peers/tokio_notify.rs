//! The `tokio_notify` peer: what a Rust broker author on tokio writes
//! instead of a purgatory (`BENCHMARKS.md`, W4).
//!
//! One spawned task per operation. The task waits, in a `select!`, for a
//! notification on its key's `tokio::sync::Notify`, for its own force
//! `Notify`, and for `sleep_until(deadline)`, the deadline fixed when the
//! request arrives. Each `Notified` is registered with `enable()` before
//! the condition is checked again, so a notification between the check and
//! the wait is never lost. `check_and_complete(key)` is the key's
//! `notify_waiters()`: every task waiting on the key wakes and checks its
//! condition.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::Poll;
use tokio::sync::futures::Notified;
use tokio::sync::Notify;
use tokio::time::Instant;

/// How an operation's wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Its condition held after a notification (or at once).
    Completed,
    /// Its force `Notify` was notified.
    Forced,
    /// Its deadline passed first.
    Expired,
}

/// Waits for one operation watched under one key: until `ready()` holds
/// (checked at once, then after each notification on `key`), `force` is
/// notified, or `deadline` passes. `started` runs once the watch has taken
/// effect (both notifications registered).
pub async fn watch_one(
    key: &Notify,
    force: &Notify,
    deadline: Instant,
    ready: impl Fn() -> bool,
    started: impl FnOnce(),
) -> Outcome {
    let sleep = tokio::time::sleep_until(deadline);
    tokio::pin!(sleep);
    let forced = force.notified();
    tokio::pin!(forced);
    forced.as_mut().enable();
    let mut started = Some(started);
    loop {
        let notified = key.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if let Some(s) = started.take() {
            s();
        }
        if ready() {
            return Outcome::Completed;
        }
        tokio::select! {
            biased;
            _ = &mut forced => return Outcome::Forced,
            _ = &mut notified => {}
            _ = &mut sleep => return Outcome::Expired,
        }
    }
}

/// [`watch_one`] for an operation watched under several keys (duplicates
/// allowed): one registered `Notified` per key, the one that fired replaced
/// by a fresh one before the condition is checked again.
pub async fn watch_many(
    keys: &[&'static Notify],
    force: &Notify,
    deadline: Instant,
    ready: impl Fn() -> bool,
) -> Outcome {
    if let [key] = keys {
        return watch_one(key, force, deadline, ready, || {}).await;
    }
    let sleep = tokio::time::sleep_until(deadline);
    tokio::pin!(sleep);
    let forced = force.notified();
    tokio::pin!(forced);
    forced.as_mut().enable();
    let register = |key: &'static Notify| {
        let mut n: Pin<Box<Notified<'static>>> = Box::pin(key.notified());
        n.as_mut().enable();
        n
    };
    let mut watches: Vec<_> = keys.iter().map(|k| register(k)).collect();
    loop {
        if ready() {
            return Outcome::Completed;
        }
        let woke = poll_fn(|cx| {
            if forced.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            for (i, w) in watches.iter_mut().enumerate() {
                if w.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Some(Some(i)));
                }
            }
            if sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Some(None));
            }
            Poll::Pending
        })
        .await;
        match woke {
            None => return Outcome::Forced,
            Some(None) => return Outcome::Expired,
            Some(Some(i)) => watches[i] = register(keys[i]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn completes_on_a_notification_expires_or_is_forced() {
        static KEY: Notify = Notify::const_new();
        static OTHER: Notify = Notify::const_new();
        static READY: AtomicBool = AtomicBool::new(false);
        let force = Notify::new();
        let far = Instant::now() + Duration::from_secs(60);
        // Expires: nothing notifies it.
        let soon = Instant::now() + Duration::from_millis(5);
        let out = watch_one(&KEY, &force, soon, || false, || {}).await;
        assert_eq!(out, Outcome::Expired);
        assert!(Instant::now() >= soon);
        // Completes: the flag is set, then the key notified.
        let task = tokio::spawn(async move {
            let force = Notify::new();
            watch_many(&[&OTHER, &KEY], &force, far, || {
                READY.load(Ordering::SeqCst)
            })
            .await
        });
        tokio::task::yield_now().await;
        READY.store(true, Ordering::SeqCst);
        KEY.notify_waiters();
        assert_eq!(task.await.unwrap(), Outcome::Completed);
        // Forced.
        force.notify_one();
        let out = watch_one(&KEY, &force, far, || false, || {}).await;
        assert_eq!(out, Outcome::Forced);
    }
}
