//! What a W2 run drives: the purgatory, or a peer in its place. The load
//! generator, the completion queue and the completion thread are the same
//! for every engine.

use super::hasher::RunHasher;
use super::op::{Ctx, W2Op};
use purgatory::{Operation, Purgatory};

/// What became of a request handed to an engine.
#[derive(Debug)]
pub(crate) enum Watched<H> {
    /// It waits; the handle, if one was asked for, lets the completion
    /// thread complete it.
    Pending(Option<H>),
    /// It completed at once.
    Completed,
    /// The engine refused it.
    Rejected,
}

/// A purgatory, or what stands in for one.
pub(crate) trait Engine: Sync {
    /// What the completion thread holds of a pending request.
    type Handle: Send;
    /// Whether [`force`](Engine::force) and [`check`](Engine::check) return
    /// the completions they make. When they do not (the completion happens
    /// later, elsewhere), completions are counted from the callbacks.
    const COUNTS_COMPLETIONS: bool;

    /// Watches a new request due at `due_ms` under the run's keys; `keep`
    /// asks for a handle.
    fn watch(&self, due_ms: u64, keep: bool) -> Watched<Self::Handle>;
    /// Completes a request by force; whether this call completed it.
    fn force(&self, handle: &Self::Handle) -> bool;
    /// Whether a request is complete, or bound to complete without another
    /// check (the completion thread stops checking its keys then).
    fn is_completed(&self, handle: &Self::Handle) -> bool;
    /// The number of keys every request watches.
    fn keys(&self) -> usize;
    /// Checks every request watched under key number `key`; returns how
    /// many this call completed.
    fn check(&self, key: usize) -> usize;
    /// Watch-list entries and armed timeouts left.
    fn leftovers(&self) -> (usize, usize);
}

/// The project's purgatory, as Kafka's tool drives it.
pub(crate) struct PurgatoryEngine {
    pub(crate) purgatory: Purgatory<&'static str, W2Op, RunHasher>,
    pub(crate) ctx: &'static Ctx,
    pub(crate) keys: Vec<&'static str>,
}

impl Engine for PurgatoryEngine {
    type Handle = Operation<W2Op>;
    const COUNTS_COMPLETIONS: bool = true;

    fn watch(&self, due_ms: u64, keep: bool) -> Watched<Operation<W2Op>> {
        let op = Operation::new(W2Op::new(self.ctx, due_ms));
        let handle = keep.then(|| op.clone());
        match self
            .purgatory
            .try_complete_else_watch(op, self.keys.iter().copied())
        {
            Ok(false) => Watched::Pending(handle),
            Ok(true) => Watched::Completed,
            Err(_) => Watched::Rejected,
        }
    }

    fn force(&self, handle: &Operation<W2Op>) -> bool {
        handle.force_complete()
    }

    fn is_completed(&self, handle: &Operation<W2Op>) -> bool {
        handle.is_completed()
    }

    fn keys(&self) -> usize {
        self.keys.len()
    }

    fn check(&self, key: usize) -> usize {
        self.purgatory.check_and_complete(&self.keys[key])
    }

    fn leftovers(&self) -> (usize, usize) {
        (self.purgatory.watched(), self.purgatory.delayed())
    }
}
