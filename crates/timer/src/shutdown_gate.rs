//! A shutdown that happens once, and that every caller sees finished.
//!
//! The first call does the work; a call made while it is under way waits
//! for it to finish, so that whoever called `shutdown` returns to a timer
//! (or purgatory) that is shut down: nothing pending, no task still to
//! run. A thread the first call may itself be waiting for (its own thread,
//! re-entering from code the shutdown runs, or a thread the caller names,
//! such as a timer's executor) must not wait: it returns at once.

use std::thread::{self, ThreadId};

use parking_lot::{Condvar, Mutex};

/// See the module docs.
#[derive(Debug, Default)]
pub struct ShutdownGate {
    state: Mutex<GateState>,
    finished: Condvar,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum GateState {
    #[default]
    Open,
    /// The first call is under way on this thread.
    Running(ThreadId),
    Finished,
}

/// Held by the call that shuts down; marks the shutdown finished when
/// dropped, also if that call unwinds, so that no waiter is left behind.
#[derive(Debug)]
#[must_use = "the shutdown is finished when this is dropped"]
pub struct Finishing<'a>(&'a ShutdownGate);

impl ShutdownGate {
    /// A gate no call has gone through.
    pub fn new() -> Self {
        Self::default()
    }

    /// `Some` for the first call, which then shuts down and drops the token
    /// when done; `None` for every later call.
    pub fn enter(&self) -> Option<Finishing<'_>> {
        let mut state = self.state.lock();
        if *state != GateState::Open {
            return None;
        }
        *state = GateState::Running(thread::current().id());
        Some(Finishing(self))
    }

    /// Waits until the first call has finished; at once if it has, or if it
    /// runs on this thread (re-entered from code it runs).
    pub fn wait_finished(&self) {
        let me = thread::current().id();
        let mut state = self.state.lock();
        while let GateState::Running(first) = *state {
            if first == me {
                return;
            }
            self.finished.wait(&mut state);
        }
    }
}

impl Drop for Finishing<'_> {
    fn drop(&mut self) {
        *self.0.state.lock() = GateState::Finished;
        self.0.finished.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn later_calls_wait_for_the_first_to_finish() {
        let gate = Arc::new(ShutdownGate::new());
        let first = gate.enter().expect("the first call enters");
        assert!(gate.enter().is_none());
        // Re-entered on the first call's own thread: no wait.
        gate.wait_finished();
        let (tx, rx) = mpsc::channel();
        let waiter = {
            let gate = gate.clone();
            thread::spawn(move || {
                gate.wait_finished();
                tx.send(()).unwrap();
            })
        };
        assert!(rx.recv_timeout(Duration::from_millis(20)).is_err());
        drop(first);
        assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(()));
        waiter.join().unwrap();
        assert_eq!(*gate.state.lock(), GateState::Finished);
        assert!(gate.enter().is_none());
        gate.wait_finished();
    }

    #[test]
    fn a_first_call_that_unwinds_still_finishes() {
        let gate = ShutdownGate::new();
        let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _finishing = gate.enter().unwrap();
            panic!("shutdown failed");
        }));
        assert!(unwound.is_err());
        assert_eq!(*gate.state.lock(), GateState::Finished);
    }
}
