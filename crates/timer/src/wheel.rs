//! PLACEHOLDER API: signatures are final, bodies are being written.
#![allow(missing_docs, unused_variables, dead_code)]
use crate::{ConfigError, TimerHandle};

/// What `TimingWheel::insert` did with a task.
#[derive(Debug, PartialEq, Eq)]
pub enum Insertion<T> {
    /// The task waits in the wheel; the handle cancels it.
    Scheduled(TimerHandle),
    /// The deadline has already passed (it is before the end of the current tick): the task is handed back to run now.
    Expired(T),
}

#[derive(Debug)]
pub struct TimingWheel<T> { _t: Vec<T> }
impl<T> TimingWheel<T> {
    pub fn new(tick_ms: u64, wheel_size: usize, start_ms: u64) -> Result<Self, ConfigError> { todo!() }
    pub fn reserve(&mut self, additional: usize) { todo!() }
    pub fn insert(&mut self, deadline_ms: u64, task: T) -> Insertion<T> { todo!() }
    pub fn cancel(&mut self, handle: TimerHandle) -> Option<T> { todo!() }
    pub fn advance(&mut self, now_ms: u64, expired: impl FnMut(T)) -> usize { todo!() }
    pub fn next_expiration(&self) -> Option<u64> { todo!() }
    pub fn len(&self) -> usize { todo!() }
    pub fn is_empty(&self) -> bool { todo!() }
    pub fn current_time(&self) -> u64 { todo!() }
}
