//! Response callbacks, and a slot that captures a response for a caller to read.
//!
//! Delayed operations answer through a callback, as Kafka's do
//! (`responseCallback`). A callback may run on the request thread (completion
//! by a trigger) or on the purgatory's executor thread (expiration), so it must
//! be `Send`. [`Callback`] holds it until the one call it gets; the purgatory
//! guarantees `on_complete` runs once, and [`Callback::call`] makes a second
//! call a no-op anyway.
//!
//! [`ResponseSlot`] is a ready-made callback target for tests and examples: it
//! keeps the response and counts deliveries, so "answered exactly once" can be
//! asserted.

use std::fmt;
use std::sync::Arc;

use parking_lot::Mutex;

type BoxedCallback<T> = Box<dyn FnOnce(T) + Send>;

/// A response callback, called at most once.
pub struct Callback<T> {
    f: Mutex<Option<BoxedCallback<T>>>,
}

impl<T> Callback<T> {
    /// Wraps `f`.
    pub fn new(f: impl FnOnce(T) + Send + 'static) -> Self {
        Callback {
            f: Mutex::new(Some(Box::new(f))),
        }
    }

    /// Calls the callback with `response`; returns false (and drops
    /// `response`) if it was already called.
    pub fn call(&self, response: T) -> bool {
        // Take it out first: the callback runs without the mutex held.
        let f = self.f.lock().take();
        match f {
            Some(f) => {
                f(response);
                true
            }
            None => false,
        }
    }
}

impl<T> fmt::Debug for Callback<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pending = self.f.lock().is_some();
        f.debug_struct("Callback")
            .field("pending", &pending)
            .finish()
    }
}

/// Captures responses delivered through [`ResponseSlot::callback`].
#[derive(Debug)]
pub struct ResponseSlot<T> {
    inner: Arc<Mutex<SlotState<T>>>,
}

#[derive(Debug)]
struct SlotState<T> {
    response: Option<T>,
    deliveries: usize,
}

impl<T> Clone for ResponseSlot<T> {
    fn clone(&self) -> Self {
        ResponseSlot {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<T: Send + 'static> Default for ResponseSlot<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Send + 'static> ResponseSlot<T> {
    /// An empty slot.
    pub fn new() -> Self {
        ResponseSlot {
            inner: Arc::new(Mutex::new(SlotState {
                response: None,
                deliveries: 0,
            })),
        }
    }

    /// A callback that stores its response here.
    pub fn callback(&self) -> impl FnOnce(T) + Send + 'static {
        let inner = Arc::clone(&self.inner);
        move |response| {
            let mut state = inner.lock();
            state.response = Some(response);
            state.deliveries += 1;
        }
    }

    /// Takes the response, if one arrived.
    pub fn take(&self) -> Option<T> {
        self.inner.lock().response.take()
    }

    /// Whether a response arrived and was not taken yet.
    pub fn is_ready(&self) -> bool {
        self.inner.lock().response.is_some()
    }

    /// How many responses were delivered in all (1 for a correct operation).
    pub fn deliveries(&self) -> usize {
        self.inner.lock().deliveries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callback_runs_once() {
        let slot = ResponseSlot::new();
        let callback = Callback::new(slot.callback());
        assert!(callback.call(1));
        assert!(!callback.call(2));
        assert_eq!(slot.deliveries(), 1);
        assert_eq!(slot.take(), Some(1));
        assert!(!slot.is_ready());
    }
}
