//! The run's clock thread: its one timed sleeper (see
//! [`CompletionQueue`]).

use super::completion_queue::CompletionQueue;
use super::op::Ctx;
use std::thread;
use std::time::Instant;

/// The run's clock thread (see [`CompletionQueue`]): sleeps until the next
/// millisecond in which something is due, never sooner than `pace_ms` after
/// its previous wake-up, and wakes the completion thread when its head is
/// due.
pub(crate) struct ClockThread<'a> {
    pub(crate) ctx: &'a Ctx,
    pub(crate) queue: &'a CompletionQueue,
    pub(crate) pace_ms: u64,
    pub(crate) last_wake_ms: u64,
    /// Timed sleeps taken.
    pub(crate) sleeps: u64,
}

impl ClockThread<'_> {
    /// Sleeps until `until_ms` or the queue's head, whichever is first, but
    /// at least until the next millisecond and `pace_ms` after the last
    /// wake-up; then wakes the completion thread if its head is due.
    /// Returns the clock reading after the sleep.
    pub(crate) fn sleep(&mut self, until_ms: u64, now_ms: u64) -> u64 {
        let target = until_ms
            .min(self.queue.head_ms())
            .max(now_ms + 1)
            .max(self.last_wake_ms + self.pace_ms);
        let wake = self.ctx.instant_at(target);
        let now = Instant::now();
        if wake > now {
            thread::sleep(wake - now);
            self.sleeps += 1;
        }
        self.last_wake_ms = target;
        let now_ms = self.ctx.read_clock_ms();
        self.queue.wake_if_due(now_ms);
        now_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::w2::completion_queue::Due;
    use crate::w2::op::W2Op;
    use purgatory::Operation;
    use std::time::Duration;

    #[test]
    fn completion_queue_hands_out_in_due_order_when_the_clock_wakes_it() {
        let ctx: &'static Ctx = Box::leak(Box::new(Ctx::new(Duration::from_secs(1))));
        let q = CompletionQueue::new(1_000);
        let now = ctx.read_clock_ms();
        let mut batch: Vec<Due> = [now + 3, now, now + 1]
            .into_iter()
            .map(|due_ms| Due {
                due_ms,
                op: Operation::new(W2Op::new(ctx, due_ms)),
            })
            .collect();
        q.push_all(&mut batch);
        assert!(batch.is_empty());
        assert_eq!(q.head_ms(), now);
        thread::scope(|s| {
            let consumer = s.spawn(|| {
                let (mut seen, mut out, mut parks) = (Vec::new(), Vec::new(), 0);
                while let Some(t) = q.pop_due(ctx, &mut out, &mut parks) {
                    for d in out.drain(..) {
                        assert!(d.due_ms <= t, "handed out early");
                        seen.push(d.due_ms);
                    }
                }
                seen
            });
            let mut clock = ClockThread {
                ctx,
                queue: &q,
                pace_ms: 1,
                last_wake_ms: 0,
                sleeps: 0,
            };
            let mut t = ctx.read_clock_ms();
            while q.head_ms() != u64::MAX {
                q.wake_if_due(t);
                t = clock.sleep(q.head_ms(), t);
            }
            q.close();
            assert_eq!(consumer.join().unwrap(), [now, now + 1, now + 3]);
            // At most one timed sleep per millisecond.
            assert!(
                clock.sleeps <= ctx.read_clock_ms() - now + 1,
                "{}",
                clock.sleeps
            );
        });
        assert!(ctx.read_clock_ms() >= now + 3);
    }
}
