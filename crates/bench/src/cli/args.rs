//! The command line's arguments, per subcommand.

use crate::limits;
use clap::Args;

/// Options every workload has.
#[derive(Debug, Clone, Args)]
pub(crate) struct Common {
    /// Print one JSON object per line and implementation instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// PRNG seed.
    #[arg(long, default_value_t = 42, value_parser = limits::seed, allow_negative_numbers = true)]
    pub(crate) seed: u64,
    /// Rounds to run (implementations interleaved); medians are reported.
    /// Default: 5 for W1, 1 for W2, 3 for W3, 1 for W4 and the burst.
    #[arg(long, value_parser = limits::rounds, allow_negative_numbers = true)]
    pub(crate) rounds: Option<usize>,
    /// Run only these implementations (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub(crate) only: Vec<String>,
    /// Run every implementation in this process instead of a child process each.
    #[arg(long)]
    pub(crate) in_process: bool,
    /// Run exactly this implementation once, here, and print its JSON line
    /// (what the parent asks its child processes to do).
    #[arg(long = "impl", hide = true)]
    pub(crate) child_impl: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct W1Args {
    #[command(flatten)]
    pub(crate) common: Common,
    /// Number of tasks.
    #[arg(long, default_value_t = 1_000_000, value_parser = limits::count, allow_negative_numbers = true)]
    pub(crate) n: usize,
    /// Largest delay in ms (delays are uniform in [1, max]).
    #[arg(long, default_value_t = 60_000, value_parser = limits::delay_ms, allow_negative_numbers = true)]
    pub(crate) max_delay_ms: u64,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct W2Args {
    #[command(flatten)]
    pub(crate) common: Common,
    /// Number of requests (default 1,000,000). Without --num and --rate,
    /// both standard runs are measured.
    #[arg(long, value_parser = limits::count, allow_negative_numbers = true)]
    pub(crate) num: Option<usize>,
    /// Target rate, requests per second (default 3,000,000: saturation).
    #[arg(long, value_parser = limits::rate, allow_negative_numbers = true)]
    pub(crate) rate: Option<f64>,
    /// Request timeout, ms.
    #[arg(long, default_value_t = 1000, value_parser = limits::delay_ms, allow_negative_numbers = true)]
    pub(crate) timeout: u64,
    /// Median latency, ms (log-normal).
    #[arg(long, default_value_t = 50.0, value_parser = limits::latency_ms, allow_negative_numbers = true)]
    pub(crate) pct50: f64,
    /// 75th-percentile latency, ms (log-normal).
    #[arg(long, default_value_t = 75.0, value_parser = limits::latency_ms, allow_negative_numbers = true)]
    pub(crate) pct75: f64,
    /// Keys per request (drawn once; every request watches the same keys).
    #[arg(long, default_value_t = 3, value_parser = limits::keys_per_request, allow_negative_numbers = true)]
    pub(crate) keys: usize,
    /// Size of the key space the keys are drawn from.
    #[arg(long, default_value_t = 100, value_parser = limits::key_space, allow_negative_numbers = true)]
    pub(crate) key_space_size: u64,
    /// Smallest interval between two timed sleeps of the run's clock
    /// thread, ms: 1 is Kafka's millisecond clock; more lets requests be
    /// issued and completed up to that many ms late, for fewer wake-ups.
    #[arg(long, default_value_t = 1, value_parser = limits::pace_ms, allow_negative_numbers = true)]
    pub(crate) pace_ms: u64,
    /// The purgatory's key hasher: std (its default, seeded SipHash) or fx
    /// (rustc's FxHasher: fast, not collision resistant).
    #[arg(long, default_value = "std", value_parser = crate::w2::W2Hasher::parse)]
    pub(crate) hasher: crate::w2::W2Hasher,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct W3Args {
    #[command(flatten)]
    pub(crate) common: Common,
    /// Tasks added by each producer.
    #[arg(long, default_value_t = 1_000_000, value_parser = limits::count, allow_negative_numbers = true)]
    pub(crate) n: usize,
    /// Producer threads.
    #[arg(long, default_value_t = 2, value_parser = limits::producers, allow_negative_numbers = true)]
    pub(crate) producers: usize,
    /// Largest delay in ms (delays are uniform in [1, max]).
    #[arg(long, default_value_t = 10_000, value_parser = limits::delay_ms, allow_negative_numbers = true)]
    pub(crate) max_delay_ms: u64,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct WakeupsArgs {
    /// Print one JSON object per line instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Wake-ups per batch (5 batches per primitive; the median is kept).
    #[arg(long, default_value_t = 100, value_parser = limits::per_batch, allow_negative_numbers = true)]
    pub(crate) per_batch: u32,
    /// The rate, requests per second, to give the floor for (requests
    /// issued at whole milliseconds, as in W2).
    #[arg(long, default_value_t = 10_000.0, value_parser = limits::rate, allow_negative_numbers = true)]
    pub(crate) rate: f64,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct BurstArgs {
    #[command(flatten)]
    pub(crate) common: Common,
    /// Tasks sharing the deadline (and churned before it).
    #[arg(long, default_value_t = 1_000_000, value_parser = limits::count, allow_negative_numbers = true)]
    pub(crate) n: usize,
}

#[derive(Debug, Clone, Args)]
pub(crate) struct W4Args {
    #[command(flatten)]
    pub(crate) common: Common,
    /// Operations per phase.
    #[arg(long, default_value_t = 1_000_000, value_parser = limits::pending, allow_negative_numbers = true)]
    pub(crate) pending: usize,
    /// Keys the operations are spread over (each operation watches one);
    /// 0 gives every operation its own key.
    #[arg(long, default_value_t = 100_000, value_parser = limits::w4_keys, allow_negative_numbers = true)]
    pub(crate) keys: usize,
    /// Keys each operation watches (drawn independently; above 1, only the
    /// `purgatory` implementation runs: add `--only purgatory`).
    #[arg(long, default_value_t = 1, value_parser = limits::w4_keys_per_op, allow_negative_numbers = true)]
    pub(crate) keys_per_op: usize,
    /// Timeout of phase C's operations, ms (phases A and E use 300 s, so
    /// that nothing expires before it is checked or shut down).
    #[arg(long, default_value_t = 100, value_parser = limits::delay_ms, allow_negative_numbers = true)]
    pub(crate) timeout_ms: u64,
}
