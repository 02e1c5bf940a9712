//! Progress lines on standard error while a workload runs.
//!
//! Standard output carries the table or the JSON lines and nothing else, so
//! a run reports where it is on standard error: one line when a phase
//! starts, and at most three more while it runs (at a quarter, half and
//! three quarters of its work, each only when at least
//! [`MIN_INTERVAL`] has passed since the phase's previous line), so a phase
//! prints at most four lines however long it runs, and a quick one prints
//! one.

use std::time::{Duration, Instant};

/// Least time between two lines of one phase.
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// Quarter marks a phase reports at, besides its start.
const MARKS: u64 = 4;

/// The progress of one implementation's run, printed on standard error.
#[derive(Debug)]
pub struct Progress {
    label: String,
    phase: &'static str,
    total: u64,
    /// The next quarter mark to report (1 to 3); [`MARKS`] when none is left.
    next_mark: u64,
    last_line: Instant,
    phase_start: Instant,
    quiet: bool,
}

impl Progress {
    /// Progress of the run labelled `label` (the implementation's name).
    pub fn new(label: impl Into<String>) -> Self {
        let now = Instant::now();
        Progress {
            label: label.into(),
            phase: "",
            total: 0,
            next_mark: MARKS,
            last_line: now,
            phase_start: now,
            quiet: false,
        }
    }

    /// Progress that prints nothing (unit tests, in-process helpers).
    pub fn quiet() -> Self {
        Progress {
            quiet: true,
            ..Progress::new("")
        }
    }

    /// Starts phase `name`, `total` units of work long (0 when unknown),
    /// and prints its first line.
    pub fn phase(&mut self, name: &'static str, total: u64) {
        let now = Instant::now();
        self.phase = name;
        self.total = total;
        self.next_mark = if total > 0 { 1 } else { MARKS };
        self.last_line = now;
        self.phase_start = now;
        if total > 0 {
            self.print(&format!("{name} ({total})"));
        } else {
            self.print(name);
        }
    }

    /// Reports `done` units of the phase's work; prints a line when a
    /// quarter mark is passed and [`MIN_INTERVAL`] has gone by since the
    /// phase's previous line.
    pub fn update(&mut self, done: u64) {
        if let Some(mark) = self.due(done, Instant::now()) {
            self.next_mark = mark + 1;
            self.last_line = Instant::now();
            let secs = self.phase_start.elapsed().as_secs_f64();
            let line = format!(
                "{} {done}/{} ({}%, {secs:.1} s)",
                self.phase,
                self.total,
                done.saturating_mul(100) / self.total.max(1)
            );
            self.print(&line);
        }
    }

    /// The quarter mark `done` reaches, if a line is due at `now`.
    fn due(&self, done: u64, now: Instant) -> Option<u64> {
        if self.next_mark >= MARKS || now.duration_since(self.last_line) < MIN_INTERVAL {
            return None;
        }
        let reached = (u128::from(done) * u128::from(MARKS) / u128::from(self.total.max(1)))
            .min(u128::from(MARKS - 1)) as u64;
        (reached >= self.next_mark).then_some(reached)
    }

    fn print(&self, what: &str) {
        if !self.quiet {
            write_stderr(format_args!("  {}: {what}\n", self.label));
        }
    }
}

/// Waits until `done()` reaches `goal` or `give_up` passes, polling every
/// 2 ms and reporting to `progress`; returns whether the goal was reached.
pub fn wait_for(
    goal: usize,
    give_up: Instant,
    progress: &mut Progress,
    done: impl Fn() -> usize,
) -> bool {
    loop {
        let d = done();
        progress.update(d as u64);
        if d >= goal {
            return true;
        }
        if Instant::now() >= give_up {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Writes `args` to stderr: progress, and the runner's errors. One that
/// cannot be written (stderr closed, full, or a pipe whose reader has gone)
/// is dropped: a diagnostic never ends a run or changes its exit code.
pub(crate) fn write_stderr(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = std::io::stderr().lock().write_fmt(args);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_three_lines_after_the_start_and_none_too_soon() {
        let mut p = Progress::quiet();
        p.phase("add", 1000);
        let t0 = p.last_line;
        // Too soon: nothing, whatever the count.
        assert_eq!(p.due(999, t0 + Duration::from_millis(10)), None);
        // Later: the highest quarter reached, then only higher ones.
        let later = t0 + MIN_INTERVAL;
        assert_eq!(p.due(100, later), None);
        assert_eq!(p.due(600, later), Some(2));
        p.next_mark = 3;
        assert_eq!(p.due(700, later), None);
        assert_eq!(p.due(1000, later), Some(3));
        p.next_mark = 4;
        assert_eq!(p.due(1000, later + MIN_INTERVAL * 10), None);
    }

    #[test]
    fn phases_without_a_total_print_only_their_start() {
        let mut p = Progress::quiet();
        p.phase("wait", 0);
        assert_eq!(p.due(5, p.last_line + MIN_INTERVAL * 2), None);
        p.update(5);
    }
}
