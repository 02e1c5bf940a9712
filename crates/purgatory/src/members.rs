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

/// How many memberships an operation keeps without allocating.
const INLINE_MEMBERS: usize = 4;

/// An operation's memberships: inline for the first few keys (so the common
/// case costs no allocation beyond the operation itself), spilling to a
/// vector for more.
#[derive(Debug, Default)]
pub(crate) struct Members {
    inline: [Membership; INLINE_MEMBERS],
    len: usize,
    spill: Vec<Membership>,
}

impl Members {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    pub(crate) fn push(&mut self, m: Membership) {
        if self.len < INLINE_MEMBERS {
            self.inline[self.len] = m;
        } else {
            self.spill.push(m);
        }
        self.len += 1;
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = Membership> + '_ {
        self.inline[..self.len.min(INLINE_MEMBERS)]
            .iter()
            .chain(&self.spill)
            .copied()
    }
}
