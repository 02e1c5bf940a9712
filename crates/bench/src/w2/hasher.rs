//! The key hasher of a W2 run's purgatory, chosen on the command line.

use std::collections::hash_map::{DefaultHasher, RandomState};
use std::hash::{BuildHasher, Hasher};

/// The key hasher of a W2 run's purgatory (`--hasher`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum W2Hasher {
    /// std's `RandomState` (seeded SipHash-1-3): the purgatory's default.
    #[default]
    Std,
    /// A multiply-rotate hash over 8-byte words, as rustc's `FxHasher`:
    /// fast, not collision resistant.
    Fx,
}

impl W2Hasher {
    /// The name `--hasher` takes and the records carry.
    pub fn name(self) -> &'static str {
        match self {
            W2Hasher::Std => "std",
            W2Hasher::Fx => "fx",
        }
    }

    /// Parses a `--hasher` value.
    ///
    /// # Errors
    /// A message listing the accepted names.
    pub fn parse(s: &str) -> Result<Self, String> {
        match s {
            "std" => Ok(W2Hasher::Std),
            "fx" => Ok(W2Hasher::Fx),
            _ => Err(format!("--hasher must be std or fx, got {s:?}")),
        }
    }

    pub(crate) fn build(self) -> RunHasher {
        match self {
            W2Hasher::Std => RunHasher::Std(RandomState::new()),
            W2Hasher::Fx => RunHasher::Fx,
        }
    }
}

/// The purgatory's `BuildHasher` in a W2 run, chosen at run time.
#[derive(Debug, Clone)]
pub(crate) enum RunHasher {
    Std(RandomState),
    Fx,
}

/// The state of one hash of a [`RunHasher`].
pub(crate) enum RunHasherState {
    Std(DefaultHasher),
    Fx(u64),
}

impl BuildHasher for RunHasher {
    type Hasher = RunHasherState;
    fn build_hasher(&self) -> RunHasherState {
        match self {
            RunHasher::Std(s) => RunHasherState::Std(s.build_hasher()),
            RunHasher::Fx => RunHasherState::Fx(0),
        }
    }
}

/// rustc's `FxHasher` multiplier.
const FX_SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl Hasher for RunHasherState {
    fn write(&mut self, bytes: &[u8]) {
        match self {
            RunHasherState::Std(h) => h.write(bytes),
            RunHasherState::Fx(h) => {
                for chunk in bytes.chunks(8) {
                    let mut word = [0u8; 8];
                    word[..chunk.len()].copy_from_slice(chunk);
                    *h = (h.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(FX_SEED);
                }
            }
        }
    }

    fn finish(&self) -> u64 {
        match self {
            RunHasherState::Std(h) => h.finish(),
            // The multiply leaves the low bits weak; fold the high ones in
            // (the purgatory takes its bucket from the low bits).
            RunHasherState::Fx(h) => h ^ (h >> 32),
        }
    }
}
