//! Kafka-style hierarchical timing wheel (crate docs are written with the implementation).
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(unsafe_op_in_unsafe_fn)]

mod clock;
mod error;
mod timer;
mod wheel;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{ConfigError, ShutdownError};
pub use timer::{Reaper, Timer, TimerBuilder, TimerHandle, TimerTask};
pub use wheel::{Insertion, TimingWheel};
