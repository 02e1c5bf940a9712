//! W1 peer: a binary min-heap of `(deadline, id)` with lazy cancellation.
//!
//! Adding pushes onto `std::collections::BinaryHeap` (O(log n)); cancelling
//! only flips the task's state byte (O(1)), so a cancelled entry keeps its
//! heap slot until its deadline comes up and it is popped and discarded.
//! Expiring pops every entry whose deadline has passed. Memory: 16 bytes of
//! heap entry plus 1 byte of state per task, and cancelled tasks' memory is
//! given back only at their deadline.
//!
//! Ids are dense (`0, 1, 2, …` in order of addition), which is what lets the
//! state live in a plain `Vec<u8>`.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The task waits in the heap.
const PENDING: u8 = 0;
/// The task was cancelled; its entry is discarded when popped.
const CANCELLED: u8 = 1;
/// The task fired.
const FIRED: u8 = 2;

/// A min-heap of deadlines with lazy cancellation.
#[derive(Debug, Default)]
pub struct LazyCancelHeap {
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    state: Vec<u8>,
    live: usize,
}

impl LazyCancelHeap {
    /// An empty heap.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty heap with room for `n` tasks.
    pub fn with_capacity(n: usize) -> Self {
        LazyCancelHeap {
            heap: BinaryHeap::with_capacity(n),
            state: Vec::with_capacity(n),
            live: 0,
        }
    }

    /// Adds a task due at `deadline` and returns its id (the count of
    /// tasks added before it).
    pub fn add(&mut self, deadline: u64) -> u64 {
        let id = self.state.len() as u64;
        self.state.push(PENDING);
        self.heap.push(Reverse((deadline, id)));
        self.live += 1;
        id
    }

    /// Cancels task `id`; `true` if it was still pending. Unknown ids,
    /// fired and already-cancelled tasks give `false`.
    pub fn cancel(&mut self, id: u64) -> bool {
        match self.state.get_mut(id as usize) {
            Some(s) if *s == PENDING => {
                *s = CANCELLED;
                self.live -= 1;
                true
            }
            _ => false,
        }
    }

    /// The deadline at the top of the heap (possibly a cancelled entry's).
    pub fn next_deadline(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((d, _))| *d)
    }

    /// Pops every entry due at `now` (deadline ≤ now), calls `fire` with the
    /// id of each pending one, and returns how many fired.
    pub fn expire(&mut self, now: u64, mut fire: impl FnMut(u64)) -> usize {
        let mut fired = 0;
        while let Some(&Reverse((deadline, id))) = self.heap.peek() {
            if deadline > now {
                break;
            }
            self.heap.pop();
            let s = &mut self.state[id as usize];
            if *s == PENDING {
                *s = FIRED;
                self.live -= 1;
                fired += 1;
                fire(id);
            }
        }
        fired
    }

    /// Tasks still pending (cancelled entries not counted).
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether no task is pending.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Heap entries, including cancelled ones not yet popped.
    pub fn entries(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fires_in_order_and_skips_cancelled() {
        let mut h = LazyCancelHeap::new();
        let a = h.add(5);
        let b = h.add(3);
        let c = h.add(5);
        assert!(h.cancel(c));
        assert!(!h.cancel(c));
        assert_eq!(h.len(), 2);
        assert_eq!(h.entries(), 3);
        let mut fired = vec![];
        assert_eq!(h.expire(2, |id| fired.push(id)), 0);
        assert_eq!(h.expire(5, |id| fired.push(id)), 2);
        assert_eq!(fired, vec![b, a]);
        assert!(h.is_empty());
        assert_eq!(h.entries(), 0);
        assert!(!h.cancel(a), "fired tasks cannot be cancelled");
        assert!(!h.cancel(99));
    }
}
