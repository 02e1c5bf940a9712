//! The operation's layout: what each pending operation pays, in bytes, and
//! the purgatory's strong reference kept as a count.

use super::*;
use std::mem::size_of;

/// The W4 benchmark's operation: 24 bytes.
struct Op24(#[allow(dead_code)] [u64; 3]);

impl DelayedOperation for Op24 {
    fn timeout(&self) -> Duration {
        Duration::ZERO
    }
    fn try_complete(&self) -> bool {
        false
    }
    fn on_complete(&self) {}
}

/// What every pending operation pays, beyond its value and the
/// allocation's two reference counts: one word for the state byte, the
/// links' lock byte, the lock's kind and the claim epoch (8); its lock, own
/// or shared (8); the links (64): a thin owner (8), the timer handle (16),
/// three memberships in place (32), and a pointer to what few operations
/// need (8: more memberships, waiters). With the two reference counts, 120
/// bytes: a 128-byte block from glibc's malloc. A change here changes the
/// bytes per pending operation; keep it deliberate.
#[test]
fn an_operation_of_24_bytes_takes_104() {
    assert_eq!(size_of::<Op24>(), 24);
    assert_eq!(size_of::<LockWord>(), 8);
    assert_eq!(size_of::<Option<OwnerRef<Op24>>>(), 8);
    assert_eq!(size_of::<Option<TimerHandle>>(), 16);
    assert_eq!(size_of::<crate::members::Placed>(), 32);
    assert_eq!(size_of::<Option<Box<links::Side>>>(), 8);
    assert_eq!(size_of::<Links<Op24>>(), 64);
    assert_eq!(size_of::<LinksCell<Op24>>(), 64);
    assert_eq!(
        std::mem::offset_of!(Shared<Op24>, epoch),
        4,
        "in the first word"
    );
    assert_eq!(std::mem::offset_of!(Shared<Op24>, lock), 8);
    assert_eq!(size_of::<Shared<Op24>>(), 104);
}

/// The purgatory's reference is a count while the owner is set, and
/// comes back as an `Arc` exactly once per claim.
#[test]
fn the_owner_holds_one_strong_reference_per_claim() {
    let op = Operation::new(Op24([0; 3]));
    let weak = Arc::downgrade(&op.0);
    let owner: OwnerRef<Op24> = Arc::new(Arc::new(NoOwner::new()));
    for _ in 0..2 {
        assert!(op.0.claim());
        op.0.attach(owner.clone(), Members::new());
        assert_eq!(Arc::strong_count(&op.0), 2);
        let _waiting = op.completion();
        let (attached, rest) = op.0.detach();
        let (back, kept) = attached.expect("attached");
        assert!(Arc::ptr_eq(&back, &owner) && Arc::ptr_eq(&kept, &op.0));
        assert!(rest.owner.is_none(), "links emptied");
        assert!(rest.into_parts().2.is_some(), "the waiters with them");
        assert!(op.0.links().side.is_none(), "in one hold");
        assert!(op.0.detach().0.is_none(), "once");
        drop(kept);
        assert_eq!(Arc::strong_count(&op.0), 1);
        op.0.state.unclaim(false);
    }
    drop(op);
    assert!(weak.upgrade().is_none(), "nothing leaked");
}
