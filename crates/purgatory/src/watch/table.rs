//! A shard's key table: list ids found by their key's hash.
//!
//! One array of 8-byte entries, each the low 32 bits of a key's hash (its
//! *tag*) beside its list's id, probed linearly from the slot the tag
//! names. A lookup therefore reads one line of the table (eight entries)
//! in the common case, and compares tags there before it looks at any
//! list: only a candidate whose 32 bits match costs a visit to its list to
//! compare keys. (A table of ids with a separate array of control bytes
//! reads two lines, and visits the list of every 7-bit match.) The table
//! is at most three-quarters full, so a probe is short and always ends at
//! an empty entry; a removal shifts the entries after it back (no
//! tombstones), so a table whose keys come and go does not fill up.

/// An empty entry: no list has id `u32::MAX` (ids are checked on creation).
const EMPTY: u64 = u64::MAX;

/// The fewest entries a table that holds anything has: one cache line.
const MIN_ENTRIES: usize = 8;

fn entry(tag: u32, id: u32) -> u64 {
    (u64::from(tag) << 32) | u64::from(id)
}

fn tag_of(entry: u64) -> u32 {
    (entry >> 32) as u32
}

fn id_of(entry: u64) -> u32 {
    entry as u32
}

/// List ids by tag.
///
/// Invariants: `entries.len()` is 0 or a power of two at least
/// [`MIN_ENTRIES`]; `len` entries are not [`EMPTY`], and at most three
/// quarters of them; each entry lies on the probe path from the slot its
/// tag names, with no empty entry in between.
pub(super) struct KeyTable {
    entries: Vec<u64>,
    len: usize,
}

impl KeyTable {
    pub(super) fn new() -> Self {
        KeyTable {
            entries: Vec::new(),
            len: 0,
        }
    }

    /// The slot where the probe for `tag` starts.
    fn home(&self, tag: u32) -> usize {
        tag as usize & (self.entries.len() - 1)
    }

    fn next(&self, i: usize) -> usize {
        (i + 1) & (self.entries.len() - 1)
    }

    /// Where the entry a lookup of `tag` reads first is: the entries'
    /// address and the mask of a slot index (`(0, 0)` while the table has
    /// no room). For prefetching only: see [`super::TableHint`].
    pub(super) fn location(&self) -> (usize, usize) {
        match self.entries.len() {
            0 => (0, 0),
            n => (self.entries.as_ptr() as usize, n - 1),
        }
    }

    /// The first id with `tag` for which `is` holds.
    #[inline]
    pub(super) fn find(&self, tag: u32, mut is: impl FnMut(u32) -> bool) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let mut i = self.home(tag);
        loop {
            let e = self.entries[i];
            if e == EMPTY {
                return None;
            }
            if tag_of(e) == tag && is(id_of(e)) {
                return Some(id_of(e));
            }
            i = self.next(i);
        }
    }

    /// Adds `id` under `tag` (an id not in the table).
    pub(super) fn insert(&mut self, tag: u32, id: u32) {
        assert_ne!(id, u32::MAX, "list id u32::MAX marks an empty entry");
        if (self.len + 1) * 4 > self.entries.len() * 3 {
            self.grow();
        }
        self.place(entry(tag, id));
        self.len += 1;
    }

    /// Puts `e` at the first empty entry of its probe path (there is one).
    fn place(&mut self, e: u64) {
        let mut i = self.home(tag_of(e));
        while self.entries[i] != EMPTY {
            i = self.next(i);
        }
        self.entries[i] = e;
    }

    /// Doubles the room, placing every entry again.
    fn grow(&mut self) {
        let room = (self.entries.len() * 2).max(MIN_ENTRIES);
        let old = std::mem::replace(&mut self.entries, vec![EMPTY; room]);
        for e in old.into_iter().filter(|&e| e != EMPTY) {
            self.place(e);
        }
    }

    /// Takes `id`, added under `tag`, out of the table. Returns whether it
    /// was there.
    pub(super) fn remove(&mut self, tag: u32, id: u32) -> bool {
        if self.len == 0 {
            return false;
        }
        let wanted = entry(tag, id);
        let mut hole = self.home(tag);
        loop {
            match self.entries[hole] {
                EMPTY => return false,
                e if e == wanted => break,
                _ => hole = self.next(hole),
            }
        }
        // Shift back each later entry of the run that may move into the
        // hole: one whose probe path from its home passes the hole.
        let mask = self.entries.len() - 1;
        let mut j = hole;
        loop {
            j = self.next(j);
            let e = self.entries[j];
            if e == EMPTY {
                break;
            }
            let from_home = j.wrapping_sub(self.home(tag_of(e))) & mask;
            let from_hole = j.wrapping_sub(hole) & mask;
            if from_home >= from_hole {
                self.entries[hole] = e;
                hole = j;
            }
        }
        self.entries[hole] = EMPTY;
        self.len -= 1;
        true
    }

    /// Empties the table, returning its ids (in no particular order). It
    /// keeps its room.
    pub(super) fn drain(&mut self) -> Vec<u32> {
        let ids = self.entries.iter().filter(|&&e| e != EMPTY);
        let ids = ids.map(|&e| id_of(e)).collect();
        self.entries.fill(EMPTY);
        self.len = 0;
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// Checks the invariants of the type's documentation.
    fn check(table: &KeyTable) {
        let n = table.entries.len();
        assert!(n == 0 || (n.is_power_of_two() && n >= MIN_ENTRIES));
        let full: Vec<usize> = (0..n).filter(|&i| table.entries[i] != EMPTY).collect();
        assert_eq!(full.len(), table.len);
        assert!(table.len * 4 <= n * 3);
        for i in full {
            let mut at = table.home(tag_of(table.entries[i]));
            while at != i {
                assert_ne!(table.entries[at], EMPTY, "a gap on the probe path");
                at = table.next(at);
            }
        }
    }

    /// Random inserts and removals with tags crowded into a few homes (so
    /// that runs wrap around the end and shift back across it), against a
    /// map.
    #[test]
    fn agrees_with_a_map_through_inserts_and_removals() {
        const BASES: [u32; 5] = [0, 5, 63, 254, 255];
        let mut table = KeyTable::new();
        let mut model: HashMap<u32, u32> = HashMap::new();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..20_000u32 {
            let r = next();
            let id = (r % 200) as u32;
            // Few distinct homes, many tags: the low byte is one of BASES,
            // so while the table has 256 entries every key's home is one
            // of them, and the runs from the last two wrap around the end.
            let tag = BASES[(r >> 32) as usize % BASES.len()] | ((id + 1) << 8);
            if let Some(&t) = model.get(&id) {
                if round % 3 != 0 {
                    assert!(table.remove(t, id));
                    assert!(!table.remove(t, id), "removed once");
                    model.remove(&id);
                }
            } else {
                table.insert(tag, id);
                model.insert(id, tag);
            }
            if round % 97 == 0 {
                check(&table);
            }
            for (&id, &tag) in model.iter().take(3) {
                assert_eq!(table.find(tag, |x| x == id), Some(id));
            }
        }
        check(&table);
        for id in 0..200 {
            match model.get(&id) {
                Some(&tag) => assert_eq!(table.find(tag, |x| x == id), Some(id)),
                None => {
                    for base in BASES {
                        let tag = base | ((id + 1) << 8);
                        assert_eq!(table.find(tag, |x| x == id), None);
                    }
                }
            }
        }
        let mut ids = table.drain();
        ids.sort_unstable();
        let mut expected: Vec<u32> = model.keys().copied().collect();
        expected.sort_unstable();
        assert_eq!(ids, expected);
        assert_eq!(table.find(0, |_| true), None);
        check(&table);
    }

    /// Equal tags are told apart by the caller's test; a tag not in the
    /// table is not found, whatever the test says.
    #[test]
    fn equal_tags_are_told_apart_by_the_test() {
        let mut table = KeyTable::new();
        assert_eq!(table.find(1, |_| true), None, "empty");
        assert!(!table.remove(1, 1));
        for id in 0..5 {
            table.insert(42, id);
        }
        assert_eq!(table.find(42, |id| id == 3), Some(3));
        assert_eq!(table.find(43, |_| true), None);
        assert!(table.remove(42, 0));
        assert_eq!(table.find(42, |id| id == 4), Some(4));
        assert_eq!(table.find(42, |id| id == 0), None);
        check(&table);
    }
}
