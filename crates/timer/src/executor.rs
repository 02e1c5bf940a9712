//! The executor: the one thread per timer that runs expired tasks.
//!
//! Expired tasks never run on the thread that adds them, nor on the thread
//! that advances the clock: they are sent here, so a slow task delays only the
//! tasks behind it, never the clock or the adders.
//!
//! Invariants:
//! - Tasks run in the order they were submitted, each exactly once.
//! - A task that panics is caught and logged; the thread goes on.
//! - Once [`Executor::close`] has returned, every task accepted by
//!   [`Executor::submit`] has run, and `submit` refuses new ones (giving the
//!   task back), so no task is ever silently lost.

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::thread::{self, JoinHandle, ThreadId};

use parking_lot::Mutex;

use crate::TimerTask;

enum Job<T> {
    Run(T),
    Batch(Vec<T>),
    /// Answered once every job sent before it has run.
    Barrier(mpsc::SyncSender<()>),
}

pub(crate) struct Executor<T> {
    /// `None` once closed. Submitting takes this lock only for the send,
    /// which makes "refused" and "will run" exclusive (see `close`).
    sender: Mutex<Option<mpsc::Sender<Job<T>>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    thread_id: ThreadId,
}

impl<T: TimerTask> Executor<T> {
    /// Starts the executor thread, named `executor-<timer name>` as in Kafka.
    pub(crate) fn start(timer_name: &str) -> std::io::Result<Self> {
        let (sender, receiver) = mpsc::channel::<Job<T>>();
        let name = timer_name.to_owned();
        let thread = thread::Builder::new()
            .name(format!("executor-{timer_name}"))
            .spawn(move || {
                for job in receiver {
                    match job {
                        Job::Run(task) => run_task(&name, task),
                        Job::Batch(tasks) => tasks.into_iter().for_each(|t| run_task(&name, t)),
                        Job::Barrier(done) => {
                            let _ = done.send(());
                        }
                    }
                }
                log::debug!("timer {name}: executor stopped");
            })?;
        Ok(Executor {
            sender: Mutex::new(Some(sender)),
            thread_id: thread.thread().id(),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Queues one task; gives it back if the executor is closed.
    pub(crate) fn submit(&self, task: T) -> Result<(), T> {
        match &*self.sender.lock() {
            Some(sender) => sender.send(Job::Run(task)).map_err(|e| match e.0 {
                Job::Run(task) => task,
                _ => unreachable!("sent a Run job"),
            }),
            None => Err(task),
        }
    }

    /// Queues tasks to run in order; gives them back if the executor is closed.
    pub(crate) fn submit_batch(&self, tasks: Vec<T>) -> Result<(), Vec<T>> {
        match &*self.sender.lock() {
            Some(sender) => sender.send(Job::Batch(tasks)).map_err(|e| match e.0 {
                Job::Batch(tasks) => tasks,
                _ => unreachable!("sent a Batch job"),
            }),
            None => Err(tasks),
        }
    }

    /// Blocks until every task submitted before the call has run. Returns at
    /// once when called from the executor thread itself (waiting there would
    /// wait for itself) or when the executor is closed (then nothing is left).
    pub(crate) fn wait_idle(&self) {
        if thread::current().id() == self.thread_id {
            return;
        }
        let (done, wait) = mpsc::sync_channel(1);
        let sent = match &*self.sender.lock() {
            Some(sender) => sender.send(Job::Barrier(done)).is_ok(),
            None => false,
        };
        if sent {
            // An error means the thread is gone, so nothing is left to wait for.
            let _ = wait.recv();
        }
    }

    /// Stops accepting tasks, lets the thread run those already accepted,
    /// and joins it (unless called from the executor thread itself, which
    /// then finishes on its own after the current task).
    pub(crate) fn close(&self) {
        drop(self.sender.lock().take());
        if thread::current().id() == self.thread_id {
            return;
        }
        if let Some(thread) = self.thread.lock().take() {
            // The thread catches task panics, so join fails only if the
            // runtime itself panicked there; nothing more can be done.
            if thread.join().is_err() {
                log::error!("timer executor thread ended with a panic");
            }
        }
    }
}

fn run_task<T: TimerTask>(timer_name: &str, task: T) {
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| task.run())) {
        log::error!(
            "timer {timer_name}: an expired task panicked: {}",
            panic_message(&*panic)
        );
    }
}

/// The message of a panic payload, for logging.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> &str {
    if let Some(s) = panic.downcast_ref::<&str>() {
        s
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s
    } else {
        "<non-string panic payload>"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    type Task = Box<dyn FnOnce() + Send>;

    #[test]
    fn runs_in_order_survives_panics_and_refuses_after_close() {
        let executor: Executor<Task> = Executor::start("test").unwrap();
        let log = Arc::new(parking_lot::Mutex::new(Vec::new()));
        for i in 0..3 {
            let log = log.clone();
            executor
                .submit(Box::new(move || log.lock().push(i)))
                .ok()
                .unwrap();
        }
        executor.submit(Box::new(|| panic!("boom"))).ok().unwrap();
        let batch: Vec<Task> = (3..6)
            .map(|i| {
                let log = log.clone();
                Box::new(move || log.lock().push(i)) as Task
            })
            .collect();
        executor.submit_batch(batch).ok().unwrap();
        executor.wait_idle();
        assert_eq!(*log.lock(), vec![0, 1, 2, 3, 4, 5]);
        executor.close();
        let ran = Arc::new(AtomicUsize::new(0));
        let r = ran.clone();
        let refused = executor.submit(Box::new(move || {
            r.fetch_add(1, Ordering::SeqCst);
        }));
        assert!(refused.is_err(), "closed executor gives the task back");
        executor.wait_idle();
        assert_eq!(ran.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn close_runs_everything_already_accepted() {
        let executor: Executor<Task> = Executor::start("drain").unwrap();
        let ran = Arc::new(AtomicUsize::new(0));
        for _ in 0..100 {
            let ran = ran.clone();
            executor
                .submit(Box::new(move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                }))
                .ok()
                .unwrap();
        }
        executor.close();
        assert_eq!(ran.load(Ordering::SeqCst), 100);
    }
}
