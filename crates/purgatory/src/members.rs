//! Where a watched operation sits: its slot in each watch list it joined
//! (shard, list id and slot: three integers), so that leaving a list is one
//! lock and no lookup. Plain data, shared by the operation (which keeps its
//! memberships), the watch index (which hands them out and frees them) and
//! the retire queue (which holds them until its batch is freed).

/// One operation's place in one watch list.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Membership {
    pub(crate) shard: u32,
    pub(crate) list: u32,
    pub(crate) slot: u32,
}

/// Memberships kept in place, in the operation's own allocation: enough
/// for the common shapes (a heartbeat or a one-partition fetch: one key; a
/// produce to a few partitions, Kafka's purgatory tool: three).
const INLINE: usize = 3;

/// The most room [`Members::with_capacity`] makes up front.
const MAX_ROOM: usize = 64;

/// One membership in 10 bytes instead of 12: a shard index fits in 16
/// bits (a purgatory has at most `PurgatoryBuilder::MAX_SHARDS`, 2^16), so
/// that three fit in place in 30 bytes.
#[derive(Debug, Clone, Copy, Default)]
struct Packed([u16; 5]);

impl Packed {
    fn pack(m: Membership) -> Self {
        let shard = u16::try_from(m.shard).expect("a shard index above 2^16");
        let [l0, l1] = [(m.list & 0xffff) as u16, (m.list >> 16) as u16];
        let [s0, s1] = [(m.slot & 0xffff) as u16, (m.slot >> 16) as u16];
        Packed([shard, l0, l1, s0, s1])
    }

    fn unpack(self) -> Membership {
        let [shard, l0, l1, s0, s1] = self.0;
        Membership {
            shard: u32::from(shard),
            list: u32::from(l0) | (u32::from(l1) << 16),
            slot: u32::from(s0) | (u32::from(s1) << 16),
        }
    }
}

/// The memberships an operation keeps in place: at most [`INLINE`], 32
/// bytes (`placed_memberships_are_32_bytes` checks it). More keys go to a
/// vector kept beside them only when there are more (see
/// [`Members::split`]).
#[derive(Debug, Default)]
pub(crate) struct Placed {
    inline: [Packed; INLINE],
    /// How many of `inline` are meaningful.
    len: u16,
}

impl Placed {
    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Room for memberships beyond the first [`INLINE`]: allocated for an
/// operation with more keys, and handed on, once it has left, to the next
/// such operation a watching thread makes (the retire queue does it).
/// Empty, its capacity the room.
pub(crate) type Spill = Vec<Membership>;

/// An operation's memberships while they move between the watch, the
/// operation and the retire queue: the first [`INLINE`] in place, the
/// others (an operation watched under more keys) in a vector.
///
/// Most operations have a few keys, so they allocate nothing for their
/// memberships. Those with more pay one allocation, sized up front by
/// [`with_capacity`](Self::with_capacity) from the number of keys expected
/// (exact for an array or a vector of keys) or reused from an operation
/// that left; a key beyond it grows the vector.
#[derive(Debug, Default)]
pub(crate) struct Members {
    placed: Placed,
    /// Memberships `INLINE..`; its spare capacity is room for more.
    more: Vec<Membership>,
}

impl Members {
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The spill room [`with_capacity`](Self::with_capacity) makes for
    /// `keys` keys: none for up to [`INLINE`].
    pub(crate) fn room_for(keys: usize) -> usize {
        keys.saturating_sub(INLINE).min(MAX_ROOM)
    }

    /// No memberships yet, with room for `keys` without reallocating:
    /// `spare` if it has exactly the room needed, else a new allocation.
    /// The count comes from the caller's iterator (its `size_hint`), so it
    /// is trusted only up to [`MAX_ROOM`]: a wrong hint costs
    /// reallocations, never a huge allocation.
    pub(crate) fn with_capacity(keys: usize, spare: Option<Spill>) -> Self {
        let room = Self::room_for(keys);
        let more = match spare {
            Some(mut spare) if spare.capacity() == room => {
                spare.clear();
                spare
            }
            _ => Vec::with_capacity(room),
        };
        Members {
            more,
            ..Self::default()
        }
    }

    /// How much spill room this holds.
    pub(crate) fn spill_room(&self) -> usize {
        self.more.capacity()
    }

    /// The spill room, emptied, for another operation to reuse; `None` if
    /// there is none.
    pub(crate) fn into_spill(mut self) -> Option<Spill> {
        self.more.clear();
        (self.more.capacity() > 0).then_some(self.more)
    }

    /// The memberships kept in place, and the rest (an empty vector, not
    /// allocated, for up to [`INLINE`] keys).
    pub(crate) fn split(self) -> (Placed, Vec<Membership>) {
        (self.placed, self.more)
    }

    /// The inverse of [`split`](Self::split).
    pub(crate) fn join(placed: Placed, more: Vec<Membership>) -> Self {
        debug_assert!(more.is_empty() || usize::from(placed.len) == INLINE);
        Members { placed, more }
    }

    pub(crate) fn push(&mut self, m: Membership) {
        let at = usize::from(self.placed.len);
        if at < INLINE {
            self.placed.inline[at] = Packed::pack(m);
            self.placed.len += 1;
        } else {
            self.more.push(m);
        }
    }

    pub(crate) fn len(&self) -> usize {
        usize::from(self.placed.len) + self.more.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Membership> + '_ {
        let inline = &self.placed.inline[..usize::from(self.placed.len)];
        inline
            .iter()
            .map(|p| p.unpack())
            .chain(self.more.iter().copied())
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
    fn placed_memberships_are_32_bytes() {
        assert_eq!(std::mem::size_of::<Membership>(), 12);
        assert_eq!(std::mem::size_of::<Packed>(), 10);
        assert_eq!(std::mem::size_of::<Placed>(), 32);
    }

    #[test]
    fn a_membership_packs_without_loss() {
        for m in [
            Membership::default(),
            m(7),
            Membership {
                shard: u32::from(u16::MAX),
                list: u32::MAX,
                slot: u32::MAX - 1,
            },
            Membership {
                shard: 1 << 15,
                list: 0x1234_5678,
                slot: 0x0001_0000,
            },
        ] {
            assert_eq!(Packed::pack(m).unpack(), m);
        }
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
        assert_eq!((members.len(), members.more.capacity()), (INLINE, 0));
        for i in n..n + 4 {
            members.push(m(i));
        }
        assert_eq!(members.len(), INLINE + 4);
        let want: Vec<Membership> = (0..n + 4).map(m).collect();
        assert_eq!(members.iter().collect::<Vec<_>>(), want);
        let (placed, more) = std::mem::take(&mut members).split();
        assert!(members.is_empty() && !placed.is_empty());
        let joined = Members::join(placed, more);
        assert_eq!(joined.iter().collect::<Vec<_>>(), want);
    }

    #[test]
    fn room_made_up_front_is_filled_in_place_and_only_what_was_pushed_counts() {
        let mut members = Members::with_capacity(INLINE + 2, None);
        assert_eq!((members.len(), members.more.capacity()), (0, 2));
        assert_eq!(members.iter().count(), 0);
        let n = INLINE as u32;
        for i in 0..=n {
            members.push(m(i));
        }
        let room = members.more.as_ptr();
        members.push(m(n + 1));
        assert_eq!(members.more.as_ptr(), room, "filled in place");
        members.push(m(n + 2));
        assert_eq!(members.len(), INLINE + 3);
        let shards: Vec<u32> = members.iter().map(|m| m.shard).collect();
        assert_eq!(shards, (0..n + 3).collect::<Vec<_>>());
        let few = Members::with_capacity(INLINE, None).more.capacity();
        assert_eq!(few, 0, "no more keys than in place: no allocation");
        assert_eq!(Members::with_capacity(0, None).more.capacity(), 0);
        assert_eq!(
            Members::with_capacity(usize::MAX, None).more.capacity(),
            MAX_ROOM
        );
    }

    #[test]
    fn a_spare_spill_of_the_right_size_is_reused_and_few_keys_have_none() {
        let mut used = Members::with_capacity(INLINE + 2, None);
        for i in 0..INLINE as u32 + 2 {
            used.push(m(i));
        }
        let spill = used.into_spill().expect("two keys spilled");
        let at = spill.as_ptr();
        let reused = Members::with_capacity(INLINE + 2, Some(spill));
        assert_eq!(reused.more.as_ptr(), at, "reused");
        assert!(reused.is_empty(), "reused room holds no memberships");
        let spill = reused.into_spill().unwrap();
        let other = Members::with_capacity(INLINE + 3, Some(spill));
        assert_eq!(other.more.capacity(), 3, "wrong size: a new one");
        assert!(Members::with_capacity(INLINE, None).into_spill().is_none());
    }
}
