//! PLACEHOLDER API: signatures are final, bodies are being written.
#![allow(missing_docs, unused_variables, dead_code)]
use crate::{Clock, ConfigError, ShutdownError, SystemClock};
use std::sync::Arc;
use std::time::Duration;

/// A task the timer runs once when it expires, on the timer's executor thread.
pub trait TimerTask: Send + 'static {
    /// Runs the task.
    fn run(self);
}
impl<F: FnOnce() + Send + 'static> TimerTask for F {
    fn run(self) {
        self()
    }
}

/// Identifies one scheduled task; `Copy + Eq + Hash`, generation-checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TimerHandle {
    index: u32,
    generation: u32,
}

#[derive(Debug)]
pub struct TimerBuilder {
    tick: Duration,
    wheel_size: usize,
    clock: Option<Arc<dyn Clock>>,
    name: String,
}
impl TimerBuilder {
    pub fn tick(mut self, tick: Duration) -> Self { self.tick = tick; self }
    pub fn wheel_size(mut self, n: usize) -> Self { self.wheel_size = n; self }
    pub fn clock(mut self, clock: impl Clock) -> Self { self.clock = Some(Arc::new(clock)); self }
    pub fn shared_clock(mut self, clock: Arc<dyn Clock>) -> Self { self.clock = Some(clock); self }
    pub fn name(mut self, name: impl Into<String>) -> Self { self.name = name.into(); self }
    pub fn build<T: TimerTask>(self) -> Result<Timer<T>, ConfigError> { todo!() }
}

pub struct Timer<T: TimerTask = Box<dyn FnOnce() + Send>> { _t: std::marker::PhantomData<T>, clock: Arc<dyn Clock> }
impl<T: TimerTask> std::fmt::Debug for Timer<T> { fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str("Timer") } }
impl<T: TimerTask> Timer<T> {
    pub fn new() -> Self { todo!() }
    pub fn builder() -> TimerBuilder { TimerBuilder { tick: Duration::from_millis(1), wheel_size: 20, clock: None, name: "timer".into() } }
    pub fn add(&self, delay: Duration, task: T) -> Result<TimerHandle, ShutdownError<T>> { todo!() }
    pub fn cancel(&self, handle: &TimerHandle) -> bool { todo!() }
    pub fn advance_clock(&self, timeout: Duration) -> bool { todo!() }
    pub fn size(&self) -> usize { todo!() }
    pub fn shutdown(&self) -> Vec<T> { todo!() }
    pub fn is_shutdown(&self) -> bool { todo!() }
    pub fn wait_for_executor(&self) { todo!() }
    pub fn clock(&self) -> &Arc<dyn Clock> { &self.clock }
    pub fn name(&self) -> &str { todo!() }
}
impl<T: TimerTask> Default for Timer<T> { fn default() -> Self { Self::new() } }

#[derive(Debug)]
pub struct Reaper {}
impl Reaper {
    pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(200);
    pub fn start<T: TimerTask>(timer: Arc<Timer<T>>) -> Reaper { todo!() }
    pub fn with_poll_interval<T: TimerTask>(timer: Arc<Timer<T>>, poll: Duration) -> Reaper { todo!() }
    pub fn stop(self) {}
}
fn _unused() -> SystemClock { SystemClock::new() }
