//! The monitor state machine of one probe (after Azure Traffic Manager; `docs/probing.md`, "Status state machine").
//!
//! Pure: no clock, no I/O. A probe starts `checking` (which serves); one success makes it
//! `online`; more than `tolerated_failures` consecutive failures make it `degraded`; one
//! success brings it back. Failures below the threshold leave the status alone, so a
//! flapping backend does not flap the answers.

use crate::model::health::Status;
use crate::model::probe_params::MissingData;

/// What one result counts as for the machine: a success, a failure, or nothing (`None`:
/// no data with `missing: last_known`). `no_data` results follow the monitor's `missing`
/// policy; a monitor without one counts them as failures.
pub fn counted(ok: bool, no_data: bool, missing: Option<MissingData>) -> Option<bool> {
    match (no_data, missing) {
        (false, _) => Some(ok),
        (true, Some(MissingData::Healthy)) => Some(true),
        (true, Some(MissingData::LastKnown)) => None,
        (true, Some(MissingData::Unhealthy) | None) => Some(false),
    }
}

/// A status transition caused by one probe result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    pub from: Status,
    pub to: Status,
}

/// Status and consecutive-failure count of one probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Machine {
    status: Status,
    failures: u32,
}

impl Default for Machine {
    fn default() -> Self {
        Machine { status: Status::Checking, failures: 0 }
    }
}

impl Machine {
    pub fn status(&self) -> Status {
        self.status
    }

    /// Consecutive failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Applies one probe result; returns the transition when the status changed.
    pub fn apply(&mut self, ok: bool, tolerated_failures: u8) -> Option<Change> {
        let from = self.status;
        if ok {
            self.failures = 0;
            self.status = Status::Online;
        } else {
            self.failures = self.failures.saturating_add(1);
            if self.failures > u32::from(tolerated_failures) {
                self.status = Status::Degraded;
            }
        }
        (from != self.status).then_some(Change { from, to: self.status })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Status::*;

    /// Runs `results` (`+` success, `-` failure) and spells the status after each one
    /// (`C`hecking, `O`nline, `D`egraded), lower-case when the status did not change.
    fn run(tolerated: u8, results: &str) -> String {
        let mut m = Machine::default();
        results
            .chars()
            .map(|c| {
                let changed = m.apply(c == '+', tolerated).is_some();
                let letter = match m.status() {
                    Checking => 'C',
                    Online => 'O',
                    Degraded => 'D',
                    other => panic!("the machine never reaches {other}"),
                };
                if changed { letter } else { letter.to_ascii_lowercase() }
            })
            .collect()
    }

    #[test]
    fn transitions_table() {
        // (tolerated_failures, results, status after each result; upper case = changed)
        let cases: &[(u8, &str, &str)] = &[
            // One success leaves checking.
            (3, "+", "O"),
            // Failures while checking: still checking until the threshold is passed.
            (3, "----", "cccD"),
            (3, "---+", "cccO"),
            // tolerated 0: the first failure degrades.
            (0, "-", "D"),
            (0, "+-+", "ODO"),
            // Online tolerates failures; a success in between resets the count.
            (1, "+-+-", "Oooo"),
            (1, "+--", "OoD"),
            // Degraded stays degraded on more failures; one success brings it back.
            (1, "+---+", "OoDdO"),
            (3, "+----+----", "OoooDOoooD"),
            // The largest tolerance: nine failures are tolerated, the tenth degrades.
            (9, "+----------", "OoooooooooD"),
        ];
        for (tolerated, results, want) in cases {
            assert_eq!(run(*tolerated, results), *want, "tolerated {tolerated}, results {results}");
        }
    }

    #[test]
    fn missing_data_policies() {
        use MissingData::*;
        let cases = [
            (true, false, Some(LastKnown), Some(true)),
            (false, false, Some(Healthy), Some(false)),
            (false, true, Some(Healthy), Some(true)),
            (false, true, Some(Unhealthy), Some(false)),
            (false, true, Some(LastKnown), None),
            (false, true, None, Some(false)),
        ];
        for (ok, no_data, missing, want) in cases {
            assert_eq!(counted(ok, no_data, missing), want, "{ok} {no_data} {missing:?}");
        }
    }

    #[test]
    fn change_reports_both_ends_and_counts_failures() {
        let mut m = Machine::default();
        assert_eq!(m.apply(false, 0), Some(Change { from: Checking, to: Degraded }));
        assert_eq!((m.failures(), m.apply(false, 0)), (1, None));
        assert_eq!(m.failures(), 2);
        assert_eq!(m.apply(true, 0), Some(Change { from: Degraded, to: Online }));
        assert_eq!(m.failures(), 0);
    }
}
