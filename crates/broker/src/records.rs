//! A partition's log, reduced to what the purgatory cares about: offsets and
//! byte positions.
//!
//! Records carry no payload, only a size. The log keeps the byte position at
//! which every offset starts, so "how many bytes lie between two offsets" (what
//! `DelayedFetch` adds up against `min_bytes`) and "read up to `max_bytes` from
//! an offset" are exact and cheap.
//!
//! Invariants: offsets are dense from 0; `positions` has one more entry than
//! there are records (`positions[leo]` is the log's total size) and never
//! decreases; the log end offset (LEO) is the offset the next record gets.

/// A batch of records to append: one size (in bytes) per record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Records {
    sizes: Vec<u32>,
}

impl Records {
    /// `count` records of `record_bytes` bytes each.
    pub fn uniform(count: usize, record_bytes: u32) -> Self {
        Records {
            sizes: vec![record_bytes; count],
        }
    }

    /// Records of the given sizes.
    pub fn from_sizes(sizes: Vec<u32>) -> Self {
        Records { sizes }
    }

    /// Number of records.
    pub fn count(&self) -> usize {
        self.sizes.len()
    }

    /// Total size in bytes.
    pub fn bytes(&self) -> u64 {
        self.sizes.iter().map(|&s| u64::from(s)).sum()
    }

    /// Whether there are no records.
    pub fn is_empty(&self) -> bool {
        self.sizes.is_empty()
    }
}

/// The records a read returned: offsets `first_offset..next_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FetchedRecords {
    /// The first offset returned (the fetch offset).
    pub first_offset: u64,
    /// One past the last offset returned: the next fetch offset.
    pub next_offset: u64,
    /// Total size of the records returned.
    pub bytes: u64,
}

impl FetchedRecords {
    /// An empty read at `offset`.
    pub fn empty(offset: u64) -> Self {
        FetchedRecords {
            first_offset: offset,
            next_offset: offset,
            bytes: 0,
        }
    }

    /// How many records were returned.
    pub fn count(&self) -> u64 {
        self.next_offset - self.first_offset
    }
}

/// The offsets and byte positions of one replica's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log {
    positions: Vec<u64>,
}

impl Default for Log {
    fn default() -> Self {
        Self::new()
    }
}

impl Log {
    /// An empty log (LEO 0).
    pub fn new() -> Self {
        Log { positions: vec![0] }
    }

    /// The log end offset: the offset the next appended record gets.
    pub fn log_end_offset(&self) -> u64 {
        (self.positions.len() - 1) as u64
    }

    /// Total bytes in the log.
    pub fn size_bytes(&self) -> u64 {
        *self.positions.last().expect("positions is never empty")
    }

    /// Appends `records`; returns `(base_offset, last_offset)`, or `None` for
    /// an empty batch.
    pub fn append(&mut self, records: &Records) -> Option<(u64, u64)> {
        if records.is_empty() {
            return None;
        }
        let base = self.log_end_offset();
        let mut end = self.size_bytes();
        for &size in &records.sizes {
            end += u64::from(size);
            self.positions.push(end);
        }
        Some((base, self.log_end_offset() - 1))
    }

    /// The byte position at which `offset` starts (`offset <= LEO`).
    pub fn position(&self, offset: u64) -> Option<u64> {
        usize::try_from(offset)
            .ok()
            .and_then(|o| self.positions.get(o).copied())
    }

    /// Bytes between offsets `from` and `to` (0 unless `from < to <= LEO`).
    pub fn bytes_between(&self, from: u64, to: u64) -> u64 {
        match (self.position(from), self.position(to)) {
            (Some(a), Some(b)) if a < b => b - a,
            _ => 0,
        }
    }

    /// Reads from `from` up to (not including) `end`, at most `max_bytes`,
    /// but at least one record if there is one (Kafka's `minOneMessage`).
    pub fn read(&self, from: u64, end: u64, max_bytes: u64) -> FetchedRecords {
        let end = end.min(self.log_end_offset());
        if from >= end {
            return FetchedRecords::empty(from);
        }
        let start = self.position(from).expect("from < end <= LEO");
        let mut next = from + 1;
        while next < end && self.bytes_between(from, next + 1) <= max_bytes {
            next += 1;
        }
        FetchedRecords {
            first_offset: from,
            next_offset: next,
            bytes: self.position(next).expect("next <= LEO") - start,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_tracks_offsets_and_positions() {
        let mut log = Log::new();
        assert_eq!(log.log_end_offset(), 0);
        assert_eq!(log.append(&Records::uniform(3, 100)), Some((0, 2)));
        assert_eq!(log.append(&Records::from_sizes(vec![50, 7])), Some((3, 4)));
        assert_eq!(log.append(&Records::default()), None);
        assert_eq!(log.log_end_offset(), 5);
        assert_eq!(log.size_bytes(), 357);
        assert_eq!(log.bytes_between(1, 4), 250);
        assert_eq!(log.bytes_between(4, 1), 0);
        assert_eq!(log.bytes_between(0, 99), 0);
    }

    #[test]
    fn read_respects_max_bytes_but_returns_one_record() {
        let mut log = Log::new();
        log.append(&Records::uniform(10, 100));
        let r = log.read(2, 10, 350);
        assert_eq!((r.first_offset, r.next_offset, r.bytes), (2, 5, 300));
        let r = log.read(2, 10, 10);
        assert_eq!((r.count(), r.bytes), (1, 100), "at least one record");
        let r = log.read(2, 4, 1000);
        assert_eq!(
            (r.next_offset, r.bytes),
            (4, 200),
            "stops at the end offset"
        );
        assert_eq!(log.read(10, 10, 1000), FetchedRecords::empty(10));
    }
}
