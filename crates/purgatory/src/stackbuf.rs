//! A short buffer kept on the caller's stack, spilling to the heap only past
//! `N` items: what one call collects for a chunk of work (a scan's copies
//! of a list, the tokens it lets go of at the end) without a heap
//! allocation and a free per call in the common case.
//!
//! Safe code only: the inline part is an array of `Option`s. Its drop glue
//! would look at every one of the `N`; the buffer drops only the first
//! `len` (the others are `None`), which for a buffer of 64 holding one
//! value is most of its cost.

use std::mem::ManuallyDrop;

/// Up to `N` values in place, the rest in a vector.
pub(crate) struct StackBuf<T, const N: usize> {
    /// Every `Some` is among the first `len` (a taken one is `None`).
    inline: ManuallyDrop<[Option<T>; N]>,
    len: usize,
    more: Vec<T>,
}

impl<T, const N: usize> Drop for StackBuf<T, N> {
    fn drop(&mut self) {
        if self.len > 0 || !self.more.is_empty() {
            self.clear();
        }
    }
}

impl<T, const N: usize> StackBuf<T, N> {
    #[inline(always)]
    pub(crate) fn new() -> Self {
        StackBuf {
            inline: ManuallyDrop::new(std::array::from_fn(|_| None)),
            len: 0,
            more: Vec::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len + self.more.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn push(&mut self, value: T) {
        match self.inline.get_mut(self.len) {
            Some(slot) => {
                *slot = Some(value);
                self.len += 1;
            }
            None => self.more.push(value),
        }
    }

    /// What the buffer holds, oldest first (for its tests).
    #[cfg(test)]
    fn iter(&self) -> impl Iterator<Item = &T> {
        self.inline[..self.len].iter().flatten().chain(&self.more)
    }

    /// Hands every value to `f`, oldest first, leaving the buffer empty
    /// (its spill vector keeps its room). If `f` panics, the values not
    /// handed over stay in the buffer.
    pub(crate) fn drain_each(&mut self, mut f: impl FnMut(T)) {
        for slot in &mut self.inline[..self.len] {
            if let Some(value) = slot.take() {
                f(value);
            }
        }
        self.len = 0;
        if !self.more.is_empty() {
            self.more.drain(..).for_each(f);
        }
    }

    /// Drops every value. If a `Drop` panics, the values after it stay in
    /// the buffer, so that calling `clear` again (or dropping the buffer)
    /// drops them.
    pub(crate) fn clear(&mut self) {
        self.drain_each(drop);
    }
}

impl<T, const N: usize> Extend<T> for StackBuf<T, N> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, values: I) {
        values.into_iter().for_each(|v| self.push(v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    #[test]
    fn keeps_order_across_the_spill() {
        let mut buf = StackBuf::<u32, 2>::new();
        buf.extend(0..5);
        assert_eq!(buf.len(), 5);
        assert_eq!(buf.iter().copied().collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
        let mut out = Vec::new();
        buf.drain_each(|v| out.push(v));
        assert_eq!(out, [0, 1, 2, 3, 4]);
        assert!(buf.is_empty());
        buf.push(7);
        assert_eq!(buf.iter().copied().collect::<Vec<_>>(), [7]);
    }

    struct Bomb<'a>(&'a std::cell::Cell<u32>, bool);

    impl Drop for Bomb<'_> {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
            if self.1 {
                panic!("boom");
            }
        }
    }

    #[test]
    fn a_panicking_drop_leaves_the_rest_for_the_next_clear() {
        let dropped = std::cell::Cell::new(0);
        let mut buf = StackBuf::<Bomb<'_>, 4>::new();
        buf.push(Bomb(&dropped, false));
        buf.push(Bomb(&dropped, true));
        buf.push(Bomb(&dropped, false));
        assert!(catch_unwind(AssertUnwindSafe(|| buf.clear())).is_err());
        assert_eq!(dropped.get(), 2);
        buf.clear();
        assert_eq!(dropped.get(), 3);
        assert!(buf.is_empty());
        buf.push(Bomb(&dropped, false));
        drop(buf);
        assert_eq!(dropped.get(), 4, "dropping the buffer drops its values");
    }
}
