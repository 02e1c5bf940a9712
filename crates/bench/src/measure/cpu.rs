//! CPU time: the calling thread's (`CLOCK_THREAD_CPUTIME_ID`) and the whole
//! process's (`getrusage(RUSAGE_SELF)`, user + system). Each reading is
//! `None` where the platform does not offer it; nothing panics.

use std::time::Duration;

/// The calling thread's CPU time.
#[cfg(unix)]
pub fn thread_cpu() -> Option<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` through the valid
    // pointer it is given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    (rc == 0).then(|| {
        Duration::new(
            ts.tv_sec.max(0) as u64,
            ts.tv_nsec.clamp(0, 999_999_999) as u32,
        )
    })
}

/// The calling thread's CPU time (not measured here).
#[cfg(not(unix))]
pub fn thread_cpu() -> Option<Duration> {
    None
}

/// `b − a` when both readings exist.
pub fn cpu_since(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    Some(b?.saturating_sub(a?))
}

/// User + system CPU time of the whole process so far.
#[cfg(unix)]
pub fn process_cpu() -> Option<Duration> {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `getrusage` fills the `rusage` it is given a valid pointer to;
    // the struct is zero-initialised, so it is initialised either way.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: zero-initialised above (all-zero is a valid `rusage`) and
    // filled by a successful `getrusage`.
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Some(tv(ru.ru_utime) + tv(ru.ru_stime))
}

/// User + system CPU time of the whole process so far (not measured here).
#[cfg(not(unix))]
pub fn process_cpu() -> Option<Duration> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_move_forward() {
        let (t0, p0) = (thread_cpu(), process_cpu());
        let mut x = 0u64;
        for i in 0..200_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        if cfg!(unix) {
            assert!(cpu_since(t0, thread_cpu()).is_some());
            assert!(cpu_since(p0, process_cpu()).is_some());
        }
        assert_eq!(cpu_since(None, Some(Duration::ZERO)), None);
        assert_eq!(
            cpu_since(Some(Duration::from_secs(2)), Some(Duration::from_secs(1))),
            Some(Duration::ZERO)
        );
    }
}
