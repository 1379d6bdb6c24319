//! The state a Job was started for (`--expect-state`), and whether the state the runner finds
//! is that one. Pure: [`crate::backend`] reads the Secrets.
//!
//! The manager reads the state live just before it creates a Job, but the Job's pod starts
//! seconds later: by then the state can be gone, or replaced by one of another lineage. An
//! engine that finds no state writes a fresh one (a new lineage) and applies into it, which
//! with a real provider creates a second set of resources. So the runner compares before the
//! engine touches the backend, and again right after `init`, and stops on any difference.

use std::fmt;
use std::str::FromStr;

/// What the manager saw when it started the Job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpectedState {
    /// No state: the first apply of an object that never applied (`none`).
    None,
    /// The object's state: this lineage, at this serial or later (`<lineage>:<serial>`).
    /// Refreshes and applies only ever raise the serial; a lower one is an older state put back.
    Lineage {
        /// The state's lineage.
        lineage: String,
        /// The serial the manager read.
        serial: u64,
    },
}

impl fmt::Display for ExpectedState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExpectedState::None => f.write_str("none"),
            ExpectedState::Lineage { lineage, serial } => write!(f, "{lineage}:{serial}"),
        }
    }
}

impl FromStr for ExpectedState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "none" {
            return Ok(ExpectedState::None);
        }
        let bad = || format!("invalid --expect-state {s:?}: use none or <lineage>:<serial>");
        let (lineage, serial) = s.rsplit_once(':').ok_or_else(bad)?;
        let valid = |c: char| c.is_ascii_alphanumeric() || c == '-';
        if lineage.is_empty() || lineage.len() > 128 || !lineage.chars().all(valid) {
            return Err(bad());
        }
        Ok(ExpectedState::Lineage {
            lineage: lineage.to_owned(),
            serial: serial.parse().map_err(|_| bad())?,
        })
    }
}

/// What the runner found in the backend's Secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FoundState {
    /// No state Secret.
    Missing,
    /// State Secrets that do not decode; the reader's message.
    Unreadable(String),
    /// A readable state.
    Found {
        /// Its lineage.
        lineage: String,
        /// Its serial.
        serial: u64,
        /// Its managed resources.
        resources: u64,
    },
}

impl fmt::Display for FoundState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FoundState::Missing => f.write_str("no state"),
            FoundState::Unreadable(why) => write!(f, "an unreadable state ({why})"),
            FoundState::Found {
                lineage, serial, ..
            } => write!(f, "lineage {lineage} at serial {serial}"),
        }
    }
}

/// How closely the state must match, and when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// Before `init`: the lineage at the expected serial or later, or no state at all.
    BeforeInit,
    /// After `init`, which writes an empty state when it finds none: as before init, except
    /// that a first apply may find that empty state.
    AfterInit,
    /// The lineage and the serial exactly (a restore's result is the backup itself).
    Exactly,
}

/// `Ok` when `found` is the state `expected` names; otherwise the sentence that says what
/// differs, for the result document.
pub fn verify(expected: &ExpectedState, found: &FoundState, how: Match) -> Result<(), String> {
    let ok = match (expected, found) {
        (ExpectedState::None, FoundState::Missing) => true,
        (ExpectedState::None, FoundState::Found { resources: 0, .. }) => how == Match::AfterInit,
        (
            ExpectedState::Lineage { lineage, serial },
            FoundState::Found {
                lineage: l,
                serial: s,
                ..
            },
        ) => {
            l == lineage
                && match how {
                    Match::BeforeInit | Match::AfterInit => s >= serial,
                    Match::Exactly => s == serial,
                }
        }
        _ => false,
    };
    if ok {
        return Ok(());
    }
    let wanted = match (expected, how) {
        (ExpectedState::None, _) => "no state".to_owned(),
        (ExpectedState::Lineage { lineage, serial }, Match::BeforeInit | Match::AfterInit) => {
            format!("lineage {lineage} at serial {serial} or later")
        }
        (ExpectedState::Lineage { lineage, serial }, Match::Exactly) => {
            format!("lineage {lineage} at serial {serial}")
        }
    };
    Err(format!(
        "the Job was started for {wanted} but the backend holds {found}; the engine did not run against it"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(lineage: &str, serial: u64) -> ExpectedState {
        ExpectedState::Lineage {
            lineage: lineage.into(),
            serial,
        }
    }

    fn found(lineage: &str, serial: u64) -> FoundState {
        FoundState::Found {
            lineage: lineage.into(),
            serial,
            resources: 2,
        }
    }

    fn empty(lineage: &str) -> FoundState {
        FoundState::Found {
            lineage: lineage.into(),
            serial: 1,
            resources: 0,
        }
    }

    #[test]
    fn the_flag_round_trips_and_refuses_anything_else() {
        for value in [
            "none",
            "3c1f-aa:0",
            "0d6b9b1e-5c1f-4b1a-9f3e-2b6c8a9d0e11:17",
        ] {
            let parsed: ExpectedState = value.parse().expect(value);
            assert_eq!(parsed.to_string(), value);
        }
        for value in ["", "None", ":3", "abc", "abc:", "abc:-1", "a b:1", "a:b:c"] {
            assert!(value.parse::<ExpectedState>().is_err(), "{value:?}");
        }
    }

    #[test]
    fn only_the_state_the_job_was_started_for_passes() {
        use Match::*;
        let unreadable = FoundState::Unreadable("state x is corrupt".into());
        let rows: [(ExpectedState, FoundState, Match, bool); 17] = [
            (ExpectedState::None, FoundState::Missing, BeforeInit, true),
            (ExpectedState::None, FoundState::Missing, AfterInit, true),
            // A state appeared after the manager looked: it is not the object's.
            (ExpectedState::None, found("l1", 1), BeforeInit, false),
            (ExpectedState::None, empty("l1"), BeforeInit, false),
            // The empty state a first apply's init wrote.
            (ExpectedState::None, empty("l1"), AfterInit, true),
            (ExpectedState::None, found("l1", 1), AfterInit, false),
            (ExpectedState::None, unreadable.clone(), BeforeInit, false),
            (at("l1", 4), found("l1", 4), BeforeInit, true),
            // Written by an earlier step of this same Job (or a refresh the manager saw end).
            (at("l1", 4), found("l1", 5), AfterInit, true),
            // Deleted after the manager looked: the engine would start a new lineage.
            (at("l1", 4), FoundState::Missing, BeforeInit, false),
            // ... and init started one: empty, but not the object's.
            (at("l1", 4), empty("l9"), AfterInit, false),
            // Replaced by another lineage.
            (at("l1", 4), found("l2", 9), BeforeInit, false),
            // An older state of the same lineage put back.
            (at("l1", 4), found("l1", 3), AfterInit, false),
            (at("l1", 4), unreadable, AfterInit, false),
            (at("l1", 4), found("l1", 4), Exactly, true),
            (at("l1", 4), found("l1", 5), Exactly, false),
            (at("l1", 4), found("l2", 4), Exactly, false),
        ];
        for (expected, state, how, ok) in rows {
            let got = verify(&expected, &state, how);
            assert_eq!(got.is_ok(), ok, "{expected} vs {state} ({how:?}): {got:?}");
            if let Err(message) = got {
                assert!(message.contains(&state.to_string()), "{message}");
            }
        }
    }
}
