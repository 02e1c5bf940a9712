//! The coordinator's request-handler pool, as the simulation drives it.
//!
//! A broker answers requests on a pool of handler threads (Kafka's
//! `num.io.threads`). The engine decides which consumers heartbeat now (or,
//! at the start, join) and queues their requests here; [`Handlers::run`]
//! handles them on every handler at once and returns when all are done.
//! Requests are spread by group, so one group's requests go to one handler
//! in the engine's order and handlers rarely meet on a lock. The engine's
//! own thread is handler 0; the others are threads of the pool.
//!
//! Which consumers heartbeat, and when, is decided by the engine alone (its
//! seeded draws never depend on a handler's answer), and the answers only
//! say which consumers must rejoin, which the engine applies after the run
//! in consumer order; so the summary is the same for any number of handlers.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::RwLock;

use super::config::MAX_HANDLER_THREADS;
use crate::coordinator::GroupCoordinator;
use crate::error::ErrorCode;
use crate::id::{GroupId, MemberId};

/// The ids a consumer heartbeats with.
#[derive(Debug, Clone)]
pub(super) struct ConsumerIds {
    pub(super) group: GroupId,
    pub(super) member: MemberId,
}

/// What the engine and the handlers share: the coordinator, every
/// consumer's current ids (written by the engine only between runs), and
/// the session timeout members join with.
#[derive(Debug)]
pub(super) struct Shared {
    pub(super) coordinator: GroupCoordinator,
    pub(super) ids: RwLock<Vec<ConsumerIds>>,
    pub(super) session_timeout: Duration,
}

/// What the queued requests of a run are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Request {
    /// Each consumer heartbeats.
    Heartbeat,
    /// Each consumer joins its group (the groups forming at the start).
    Join,
}

/// Below this many queued requests, [`Handlers::run`] handles them all on
/// the calling thread.
const MIN_REQUESTS_TO_SHARE: usize = 64;

struct Worker {
    requests: SyncSender<(Request, Vec<u32>)>,
    answers: Receiver<(Vec<u32>, Vec<u32>)>,
    thread: Option<JoinHandle<()>>,
}

/// The pool (see the module docs).
pub(super) struct Handlers {
    shared: Arc<Shared>,
    workers: Vec<Worker>,
    /// Queued requests (consumer indices), one list per handler.
    queues: Vec<Vec<u32>>,
    rejoins: Vec<u32>,
}

impl Handlers {
    /// A pool of `threads` handlers (the calling thread is one of them).
    pub(super) fn new(shared: Arc<Shared>, threads: usize) -> Self {
        let threads = threads.clamp(1, MAX_HANDLER_THREADS);
        let workers = (1..threads)
            .map(|n| {
                let (requests, inbox) = mpsc::sync_channel::<(Request, Vec<u32>)>(1);
                let (outbox, answers) = mpsc::sync_channel(1);
                let shared = Arc::clone(&shared);
                let thread = std::thread::Builder::new()
                    .name(format!("request-handler-{n}"))
                    .spawn(move || {
                        for (request, mut queue) in inbox {
                            let mut rejoins = Vec::new();
                            handle(&shared, request, &queue, &mut rejoins);
                            queue.clear();
                            if outbox.send((queue, rejoins)).is_err() {
                                break;
                            }
                        }
                    })
                    .expect("a request-handler thread starts");
                Worker {
                    requests,
                    answers,
                    thread: Some(thread),
                }
            })
            .collect();
        Handlers {
            shared,
            workers,
            queues: vec![Vec::new(); threads],
            rejoins: Vec::new(),
        }
    }

    /// Queues a heartbeat of consumer `index`, a member of group number `group`.
    pub(super) fn queue(&mut self, group: usize, index: u32) {
        let n = self.queues.len();
        self.queues[group % n].push(index);
    }

    /// Handles every queued request as a `request`; returns the consumers
    /// whose heartbeat was refused with `UNKNOWN_MEMBER_ID` (they must
    /// rejoin), in order.
    pub(super) fn run(&mut self, request: Request) -> &[u32] {
        self.rejoins.clear();
        let queued: usize = self.queues.iter().map(Vec::len).sum();
        if queued < MIN_REQUESTS_TO_SHARE {
            // Waking a handler costs more than these requests: handle them
            // here (which thread handles a request changes no outcome).
            for queue in &mut self.queues {
                handle(&self.shared, request, queue, &mut self.rejoins);
                queue.clear();
            }
            self.rejoins.sort_unstable();
            return &self.rejoins;
        }
        let (own, others) = self
            .queues
            .split_first_mut()
            .expect("a pool has at least one handler");
        let mut waiting = [false; MAX_HANDLER_THREADS];
        for (n, (worker, queue)) in self.workers.iter().zip(others.iter_mut()).enumerate() {
            if !queue.is_empty() {
                worker
                    .requests
                    .send((request, std::mem::take(queue)))
                    .expect("request handlers outlive the run");
                waiting[n] = true;
            }
        }
        handle(&self.shared, request, own, &mut self.rejoins);
        own.clear();
        for (n, (worker, queue)) in self.workers.iter().zip(others.iter_mut()).enumerate() {
            if waiting[n] {
                let (emptied, rejoins) = worker
                    .answers
                    .recv()
                    .expect("request handlers outlive the run");
                *queue = emptied;
                self.rejoins.extend(rejoins);
            }
        }
        self.rejoins.sort_unstable();
        &self.rejoins
    }
}

impl Drop for Handlers {
    fn drop(&mut self) {
        for worker in &mut self.workers {
            // Closing the request channel ends the thread's loop.
            let (closed, _) = mpsc::sync_channel(0);
            drop(std::mem::replace(&mut worker.requests, closed));
            if let Some(thread) = worker.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

/// Handles the requests of the consumers in `queue`.
fn handle(shared: &Shared, request: Request, queue: &[u32], rejoins: &mut Vec<u32>) {
    if queue.is_empty() {
        return;
    }
    let ids = shared.ids.read();
    if request == Request::Join {
        for &index in queue {
            let consumer = &ids[index as usize];
            shared
                .coordinator
                .join_group(&consumer.group, &consumer.member, shared.session_timeout)
                .expect("a positive session timeout is always accepted");
        }
        return;
    }
    for &index in queue {
        let consumer = &ids[index as usize];
        match shared
            .coordinator
            .heartbeat(&consumer.group, &consumer.member)
        {
            Ok(()) => {}
            Err(ErrorCode::UnknownMemberId) => rejoins.push(index),
            Err(other) => log::warn!("heartbeat of {} refused: {other}", consumer.member),
        }
    }
}
