//! Resident-memory readings from Linux's `/proc/self`.
//!
//! W1's memory figure is the growth of peak resident memory during the add
//! phase: [`MemWindow::open`] reads `VmRSS` and resets the high-water mark
//! `VmHWM` (writing `5` to `/proc/self/clear_refs`); [`MemWindow::bytes_per`]
//! reads `VmHWM` again and divides the growth by the task count. W3 reports
//! the process's `VmHWM` as its peak.
//!
//! Everything here degrades gracefully: on a system without these files (or
//! where a read fails) the readings are `None`, reported as `null`; nothing
//! panics.

use std::fs;

/// Reads one `Vm*` field of `/proc/self/status`, in kilobytes.
pub fn status_kb(field: &str) -> Option<u64> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    parse_status_kb(&status, field)
}

/// Finds `field` (e.g. `VmHWM`) in the text of a `/proc/<pid>/status` file
/// and returns its value in kilobytes.
pub fn parse_status_kb(status: &str, field: &str) -> Option<u64> {
    status.lines().find_map(|line| {
        let rest = line.strip_prefix(field)?.strip_prefix(':')?;
        let mut parts = rest.split_whitespace();
        let value: u64 = parts.next()?.parse().ok()?;
        match parts.next() {
            Some("kB") | None => Some(value),
            Some(_) => None,
        }
    })
}

/// Current resident set size (`VmRSS`), in kilobytes.
pub fn rss_kb() -> Option<u64> {
    status_kb("VmRSS")
}

/// Peak resident set size since start or the last reset (`VmHWM`), in kilobytes.
pub fn peak_rss_kb() -> Option<u64> {
    status_kb("VmHWM")
}

/// Resets the peak-RSS mark to the current RSS; `false` if the kernel
/// refused (or there is no `/proc`).
pub fn reset_peak() -> bool {
    fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// A window over which peak-RSS growth is measured.
#[derive(Debug, Clone, Copy)]
pub struct MemWindow {
    rss_before_kb: Option<u64>,
}

impl MemWindow {
    /// Resets the high-water mark and reads the baseline RSS.
    pub fn open() -> Self {
        reset_peak();
        MemWindow {
            rss_before_kb: rss_kb(),
        }
    }

    /// Peak-RSS growth since [`MemWindow::open`], in bytes.
    pub fn growth_bytes(&self) -> Option<u64> {
        let before = self.rss_before_kb?;
        let peak = peak_rss_kb()?;
        Some(peak.saturating_sub(before) * 1024)
    }

    /// Peak-RSS growth divided by `n`, in bytes per task.
    pub fn bytes_per(&self, n: usize) -> Option<f64> {
        if n == 0 {
            return None;
        }
        Some(self.growth_bytes()? as f64 / n as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_status_fields() {
        let text = "Name:\tx\nVmPeak:\t  100 kB\nVmHWM:\t    2048 kB\nVmRSS:\t 1024 kB\n";
        assert_eq!(parse_status_kb(text, "VmHWM"), Some(2048));
        assert_eq!(parse_status_kb(text, "VmRSS"), Some(1024));
        assert_eq!(parse_status_kb(text, "VmSwap"), None);
        assert_eq!(parse_status_kb("VmRSS: lots kB", "VmRSS"), None);
    }

    #[test]
    fn readings_never_panic() {
        // On Linux these are Some; elsewhere None. Either way, no panic.
        let _ = MemWindow::open().bytes_per(10);
        let _ = peak_rss_kb();
        assert_eq!(MemWindow::open().bytes_per(0), None);
    }
}
