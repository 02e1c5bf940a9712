//! Where a watched operation sits: its slot in each watch list it joined
//! (shard, list id and slot: three integers), so that leaving a list is one
//! lock and no lookup. Plain data, shared by the operation (which keeps its
//! memberships), the watch index (which hands them out and frees them) and
//! the retire queue (which holds them until its batch is freed).

/// One operation's place in one watch list.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Membership {
    pub(crate) shard: u32,
    pub(crate) list: u32,
    pub(crate) slot: u32,
}

/// Memberships kept without allocating: see [`Members`].
const INLINE: usize = 1;

/// The most room [`Members::with_capacity`] makes up front.
const MAX_ROOM: usize = 64;

/// An operation's memberships: the first [`INLINE`] in place, the others
/// (an operation watched under more keys) in a boxed slice.
///
/// Every watched operation carries one, and most have one key (a
/// heartbeat, a fetch from one partition): one in place keeps them at 32
/// bytes (`members_are_32_bytes` checks it) instead of paying 24 more for
/// room that only operations with several keys use. Those pay one
/// allocation, sized up front by [`with_capacity`](Self::with_capacity)
/// from the number of keys expected (exact for an array or a vector of
/// keys); a key beyond it reallocates the slice. It goes back to the
/// allocator with the operation's memory, on a watching thread (see
/// [`crate::retire`]).
#[derive(Debug, Default)]
pub(crate) struct Members {
    /// The first `min(len, INLINE)` are meaningful.
    inline: [Membership; INLINE],
    len: u32,
    /// Memberships `INLINE..len` at its front; its tail is room for more.
    /// Empty (no allocation) for one key.
    rest: Box<[Membership]>,
}

impl Members {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// No memberships yet, with room for `keys` without reallocating. The
    /// count comes from the caller's iterator (its `size_hint`), so it is
    /// trusted only up to [`MAX_ROOM`]: a wrong hint costs reallocations,
    /// never a huge allocation.
    pub(crate) fn with_capacity(keys: usize) -> Self {
        let room = keys.saturating_sub(INLINE).min(MAX_ROOM);
        Members {
            rest: vec![Membership::default(); room].into_boxed_slice(),
            ..Self::default()
        }
    }

    pub(crate) fn push(&mut self, m: Membership) {
        let at = self.len as usize;
        if at < INLINE {
            self.inline[at] = m;
        } else if let Some(room) = self.rest.get_mut(at - INLINE) {
            *room = m;
        } else {
            let mut rest = std::mem::take(&mut self.rest).into_vec();
            rest.reserve_exact(1);
            rest.push(m);
            self.rest = rest.into_boxed_slice();
        }
        self.len += 1;
    }

    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Membership> + '_ {
        let inline = &self.inline[..self.len().min(INLINE)];
        let rest = &self.rest[..self.len().saturating_sub(INLINE)];
        inline.iter().chain(rest).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(i: u32) -> Membership {
        Membership {
            shard: i,
            list: i + 1,
            slot: i + 2,
        }
    }

    #[test]
    fn members_are_32_bytes() {
        assert_eq!(std::mem::size_of::<Membership>(), 12);
        assert_eq!(std::mem::size_of::<Members>(), 32);
    }

    #[test]
    fn the_first_keys_are_in_place_and_more_keys_keep_their_order() {
        let mut members = Members::new();
        assert!(members.is_empty());
        assert_eq!(members.iter().count(), 0);
        let n = INLINE as u32;
        for i in 0..n {
            members.push(m(i));
        }
        assert_eq!((members.len(), members.rest.len()), (INLINE, 0));
        for i in n..n + 4 {
            members.push(m(i));
        }
        assert_eq!(members.len(), INLINE + 4);
        let got: Vec<(u32, u32, u32)> = members.iter().map(|m| (m.shard, m.list, m.slot)).collect();
        let want: Vec<(u32, u32, u32)> = (0..n + 4).map(|i| (i, i + 1, i + 2)).collect();
        assert_eq!(got, want);
        let taken = std::mem::take(&mut members);
        assert!(members.is_empty());
        assert_eq!(taken.len(), INLINE + 4);
    }

    #[test]
    fn room_made_up_front_is_filled_in_place_and_only_what_was_pushed_counts() {
        let mut members = Members::with_capacity(INLINE + 2);
        assert_eq!((members.len(), members.rest.len()), (0, 2));
        assert_eq!(members.iter().count(), 0);
        let n = INLINE as u32;
        for i in 0..=n {
            members.push(m(i));
        }
        let room = members.rest.as_ptr();
        let shards = |members: &Members| members.iter().map(|m| m.shard).collect::<Vec<_>>();
        assert_eq!(shards(&members), (0..=n).collect::<Vec<_>>());
        members.push(m(n + 1));
        assert_eq!(members.rest.as_ptr(), room, "filled in place");
        members.push(m(n + 2));
        assert_eq!(members.len(), INLINE + 3);
        assert_eq!(shards(&members), (0..n + 3).collect::<Vec<_>>());
        let few = Members::with_capacity(INLINE).rest.len();
        assert_eq!(few, 0, "no more keys than in place: no allocation");
        assert_eq!(Members::with_capacity(0).rest.len(), 0);
        assert_eq!(Members::with_capacity(usize::MAX).rest.len(), MAX_ROOM);
    }
}
