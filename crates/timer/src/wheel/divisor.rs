//! Division by a divisor fixed when a level is created (its tick, the wheel
//! size), as a multiplication and a shift: placing and cancelling an entry
//! divide its deadline, and a hardware division of 64-bit integers costs
//! tens of cycles where a multiplication costs a few.
//!
//! Numerators are below 2^[`BITS`]: every deadline is at most
//! `MAX_DEADLINE_MS`, below 2^62. For such numerators, with `l =
//! ceil(log2 d)` and `m = ceil(2^(BITS + l) / d)`, `floor(n / d) =
//! floor(n * m / 2^(BITS + l))` exactly (Granlund and Montgomery, "Division
//! by invariant integers using multiplication", 1994, theorem 4.2: `m * d`
//! lies in `[2^(BITS + l), 2^(BITS + l) + 2^l]`), and `m <= 2^(BITS + 1)`
//! fits a `u64`.

/// Bits of the numerators a [`Divisor`] divides.
pub(super) const BITS: u32 = 62;

/// A divisor prepared for [`div`](Divisor::div) and [`rem`](Divisor::rem).
#[derive(Debug, Clone, Copy)]
pub(super) struct Divisor {
    divisor: u64,
    magic: u64,
    shift: u32,
}

impl Divisor {
    /// Prepares division by `divisor`, which must not be zero.
    pub(super) fn new(divisor: u64) -> Self {
        assert!(divisor > 0, "division by zero");
        let log = match divisor {
            1 => 0,
            _ => 64 - (divisor - 1).leading_zeros(),
        };
        let shift = BITS + log;
        let magic = (1u128 << shift).div_ceil(u128::from(divisor));
        Divisor {
            divisor,
            magic: u64::try_from(magic).expect("the multiplier fits 64 bits"),
            shift,
        }
    }

    /// `n / divisor`, for `n` below 2^[`BITS`].
    #[inline(always)]
    pub(super) fn div(self, n: u64) -> u64 {
        debug_assert!(n < 1 << BITS, "numerator {n} out of range");
        ((u128::from(n) * u128::from(self.magic)) >> self.shift) as u64
    }

    /// `n % divisor`, for `n` below 2^[`BITS`].
    #[inline(always)]
    pub(super) fn rem(self, n: u64) -> u64 {
        n - self.div(n) * self.divisor
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn check(d: u64, n: u64) {
        let divisor = Divisor::new(d);
        assert_eq!(divisor.div(n), n / d, "{n} / {d}");
        assert_eq!(divisor.rem(n), n % d, "{n} % {d}");
    }

    /// Divisors around powers of two and the wheel's usual ticks, against
    /// numerators at the edges of their range and of the divisor's
    /// multiples.
    #[test]
    fn edges_divide_exactly() {
        let max = (1u64 << BITS) - 1;
        let mut divisors = vec![1, 2, 3, 7, 10, 20, 400, 8_000, 160_000, u64::MAX];
        for k in 1..64 {
            divisors.extend([(1u64 << k) - 1, 1 << k, (1u64 << k) + 1]);
        }
        for d in divisors {
            for n in [0, 1, d - 1, d, d.saturating_add(1), max, max - 1, max / 2] {
                if n <= max {
                    check(d, n);
                }
            }
            let multiple = max - max % d;
            for n in [multiple, multiple.saturating_sub(1)] {
                check(d, n);
            }
        }
    }

    proptest! {
        #[test]
        fn divides_like_the_hardware(
            d in prop_oneof![1u64..100, 1u64..100_000_000, any::<u64>().prop_map(|d| d.max(1))],
            n in prop_oneof![0u64..1_000_000, 0u64..(1 << BITS)],
        ) {
            check(d, n);
        }
    }
}
