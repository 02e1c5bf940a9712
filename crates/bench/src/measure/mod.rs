//! Measuring helpers every workload shares: CPU time ([`cpu`]), the lateness
//! of fired tasks ([`lateness`]), resident memory ([`rss`]), the cost of a wake-up ([`wakeup_cost`]) and running one
//! implementation in a child process of the runner ([`child`]).

pub mod child;
pub mod cpu;
pub mod lateness;
pub mod rss;
pub mod wakeup_cost;

pub use cpu::{cpu_since, process_cpu, thread_cpu};
pub use wakeup_cost::WakeupCost;
