//! `purgatory-bench`: runs the standard workloads of `BENCHMARKS.md` against
//! this project's timer and its peers, and prints a table (or JSON lines).
//! The command line is the library's [`purgatory_bench::cli`].

use std::process::ExitCode;

#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    purgatory_bench::cli::main()
}
