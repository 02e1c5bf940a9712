//! Group and member ids, the heartbeat key made of them, and the hasher of
//! the maps keyed by them.
//!
//! An id hashes its text once, when it is made, with a keyed SipHash (the
//! key is drawn once per process, so ids chosen by clients cannot be made to
//! collide), and keeps the result. Hashing an id then writes that one `u64`
//! and reads no text; comparing two clones of one id compares pointers
//! first. The coordinator's hot path (a heartbeat: find the group, the member
//! and the member's watch list) therefore touches no id text at all.
//! [`IdHasher`] is the matching map hasher: it only mixes the `u64`s it is
//! given, which is sound because they are keyed hashes already.
//!
//! Invariant: two ids with equal text have equal hashes (within a process).

use std::collections::hash_map::RandomState;
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::{Arc, OnceLock};

/// The keyed hash of an id's text.
fn text_hash(text: &str) -> u64 {
    static KEY: OnceLock<RandomState> = OnceLock::new();
    KEY.get_or_init(RandomState::new).hash_one(text)
}

macro_rules! string_id {
    ($(#[$doc:meta])* $t:ident) => {
        $(#[$doc])*
        #[derive(Clone)]
        pub struct $t {
            text: Arc<str>,
            hash: u64,
        }

        impl $t {
            /// An id from any string.
            pub fn new(id: impl Into<Arc<str>>) -> Self {
                let text = id.into();
                let hash = text_hash(&text);
                $t { text, hash }
            }

            /// The id as a string.
            pub fn as_str(&self) -> &str {
                &self.text
            }
        }

        impl PartialEq for $t {
            fn eq(&self, other: &Self) -> bool {
                self.hash == other.hash
                    && (Arc::ptr_eq(&self.text, &other.text) || self.text == other.text)
            }
        }

        impl Eq for $t {}

        impl Hash for $t {
            fn hash<H: Hasher>(&self, state: &mut H) {
                state.write_u64(self.hash);
            }
        }

        impl PartialOrd for $t {
            fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
                Some(self.cmp(other))
            }
        }

        impl Ord for $t {
            /// By text.
            fn cmp(&self, other: &Self) -> std::cmp::Ordering {
                self.text.cmp(&other.text)
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.text)
            }
        }

        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.text, f)
            }
        }

        impl From<&str> for $t {
            fn from(s: &str) -> Self {
                Self::new(s)
            }
        }
    };
}

string_id!(
    /// A consumer group id, e.g. `group-7`. Cheap to clone.
    GroupId
);
string_id!(
    /// A member id within a group, e.g. `consumer-42-1`. Cheap to clone.
    MemberId
);

/// The purgatory key of a member's heartbeat expectation: Kafka's `MemberKey`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberKey {
    /// The member's group.
    pub group: GroupId,
    /// The member.
    pub member: MemberId,
}

impl MemberKey {
    /// The key of `member` in `group`.
    pub fn new(group: GroupId, member: MemberId) -> Self {
        MemberKey { group, member }
    }
}

impl fmt::Display for MemberKey {
    /// Kafka's key label, `<groupId>-<memberId>`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.group, self.member)
    }
}

impl fmt::Debug for MemberKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MemberKey({self})")
    }
}

/// The hasher of maps keyed by ids ([`GroupId`], [`MemberId`], [`MemberKey`]):
/// it mixes the keyed hashes the ids carry, and reads no text.
///
/// Only for keys whose `Hash` writes such hashes: on other keys (text a
/// client chooses, hashed byte by byte) it would be an unkeyed hash that
/// crafted input can flood.
#[derive(Debug, Clone, Copy, Default)]
pub struct IdHasher;

impl BuildHasher for IdHasher {
    type Hasher = IdHash;

    fn build_hasher(&self) -> IdHash {
        IdHash(0)
    }
}

/// The state of an [`IdHasher`].
#[derive(Debug, Clone, Copy)]
pub struct IdHash(u64);

/// An odd constant with well-spread bits (2^64 / golden ratio).
const MIX: u64 = 0x9e37_79b9_7f4a_7c15;

impl Hasher for IdHash {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = (self.0.rotate_left(23) ^ value).wrapping_mul(MIX);
    }

    fn finish(&self) -> u64 {
        // Fold the high bits (where the multiply puts its entropy) into the
        // low ones that table indices use.
        self.0 ^ (self.0 >> 29)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_keys_print_like_kafka() {
        let key = MemberKey::new("group-1".into(), "consumer-3-0".into());
        assert_eq!(key.to_string(), "group-1-consumer-3-0");
        assert_eq!(format!("{:?}", key.group), "\"group-1\"");
    }

    #[test]
    fn equal_text_means_equal_id_and_hash() {
        let a = MemberId::new("consumer-1-0");
        let b = MemberId::new(String::from("consumer-1-0"));
        let c = MemberId::new("consumer-1-1");
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(IdHasher.hash_one(&a), IdHasher.hash_one(&b));
        assert_eq!(IdHasher.hash_one(&a), IdHasher.hash_one(a.clone()));
        assert!(a < c, "ordered by text");
        let k1 = MemberKey::new("g".into(), a.clone());
        let k2 = MemberKey::new("g".into(), b);
        assert_eq!(IdHasher.hash_one(&k1), IdHasher.hash_one(&k2));
    }

    #[test]
    fn id_hashes_spread_over_table_slots() {
        // 10,000 ids over 1,024 slots (the low bits a table uses): no slot
        // far above the mean of about 10.
        let mut slots = vec![0u32; 1024];
        for i in 0..10_000 {
            let key = MemberKey::new(
                GroupId::new(format!("group-{}", i % 100)),
                MemberId::new(format!("consumer-{i}-0")),
            );
            slots[(IdHasher.hash_one(&key) & 1023) as usize] += 1;
        }
        assert!(slots.iter().all(|&n| n < 40), "{:?}", slots.iter().max());
    }
}
