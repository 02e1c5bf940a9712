//! A short buffer kept on the caller's stack, spilling to the heap only past
//! `N` items: what one call collects for a chunk of work (a scan's copies
//! of a list, the tokens it lets go of at the end) without a heap
//! allocation and a free per call in the common case.
//!
//! Safe code only: the inline part is an array of `Option`s, so a value
//! left in it by an interrupted drain is still dropped, by the next
//! [`clear`](StackBuf::clear) or with the buffer.

/// Up to `N` values in place, the rest in a vector.
pub(crate) struct StackBuf<T, const N: usize> {
    /// The first `min(len, N)` are `Some`.
    inline: [Option<T>; N],
    len: usize,
    more: Vec<T>,
}

impl<T, const N: usize> StackBuf<T, N> {
    pub(crate) fn new() -> Self {
        StackBuf {
            inline: std::array::from_fn(|_| None),
            len: 0,
            more: Vec::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len + self.more.len()
    }

    #[cfg(test)]
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

    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.inline[..self.len].iter().flatten().chain(&self.more)
    }

    /// Takes every value out, oldest first, leaving the buffer empty (its
    /// spill vector keeps its room).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = T> + '_ {
        let len = std::mem::take(&mut self.len);
        self.inline[..len]
            .iter_mut()
            .filter_map(Option::take)
            .chain(self.more.drain(..))
    }

    /// Drops every value. If a `Drop` panics, the values after it stay in
    /// the buffer (counted), so that calling `clear` again drops them.
    pub(crate) fn clear(&mut self) {
        for slot in &mut self.inline[..self.len] {
            drop(slot.take());
        }
        self.len = 0;
        self.more.clear();
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
        assert_eq!(buf.drain().collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
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
    }
}
