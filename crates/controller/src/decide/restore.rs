//! `captf.io/restore-state`: what a request asks for, given the restore recorded last.
//!
//! `status.lastRestoredSerial` keeps a failed restore from running again for the same serial
//! (the annotation stays after a failure). A successful restore removes the annotation itself,
//! so the same serial set again afterwards is a new request: the newest backup is very often
//! the one restored last, since a restore writes no new serial. A failed serial is released
//! once the annotation is gone, which is the documented retry: remove the annotation, wait for
//! `status.lastRestoredSerial` to clear, set it again.

/// The restore recorded in status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LastRestore {
    /// `status.lastRestoredSerial`.
    pub serial: Option<i64>,
    /// `RestoreJobSucceeded` says that restore failed (`RestoreFailed`).
    pub failed: bool,
}

/// What the annotation asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreAsk {
    /// Nothing, and nothing to record.
    Nothing,
    /// Nothing; the failed serial recorded is released: `status.lastRestoredSerial` clears.
    Release,
    /// The value is not a state serial.
    NotASerial(String),
    /// The serial whose restore failed, still asked for: not run again until the annotation
    /// is removed (the `RestoreFailed` condition says so).
    FailedBefore(u64),
    /// The backup of this serial, if a complete one exists.
    Serial(u64),
}

/// What `annotation` asks for after `last`.
pub fn ask(annotation: Option<&str>, last: LastRestore) -> RestoreAsk {
    let Some(value) = annotation else {
        return if last.serial.is_some() && last.failed {
            RestoreAsk::Release
        } else {
            RestoreAsk::Nothing
        };
    };
    let Some(serial) = value.trim().parse::<u64>().ok().filter(|s| *s >= 1) else {
        return RestoreAsk::NotASerial(value.to_owned());
    };
    if last.failed && i64::try_from(serial).ok() == last.serial {
        return RestoreAsk::FailedBefore(serial);
    }
    RestoreAsk::Serial(serial)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_restore_request_asks() {
        let none = LastRestore::default();
        let restored = |serial| LastRestore {
            serial: Some(serial),
            failed: false,
        };
        let failed = |serial| LastRestore {
            serial: Some(serial),
            failed: true,
        };
        let rows: [(&str, Option<&str>, LastRestore, RestoreAsk); 11] = [
            ("no request", None, none, RestoreAsk::Nothing),
            ("a first request", Some("2"), none, RestoreAsk::Serial(2)),
            (
                "spaces around the serial",
                Some(" 2 "),
                none,
                RestoreAsk::Serial(2),
            ),
            (
                "not a number",
                Some("two"),
                none,
                RestoreAsk::NotASerial("two".into()),
            ),
            (
                "serial 0 is no serial",
                Some("0"),
                none,
                RestoreAsk::NotASerial("0".into()),
            ),
            (
                "the serial restored last, asked again after the success: restored again",
                Some("2"),
                restored(2),
                RestoreAsk::Serial(2),
            ),
            (
                "a success is kept on record once the request is used up",
                None,
                restored(2),
                RestoreAsk::Nothing,
            ),
            (
                "a failed serial still asked for: not run again",
                Some("2"),
                failed(2),
                RestoreAsk::FailedBefore(2),
            ),
            (
                "a failed serial whose request was removed: released",
                None,
                failed(2),
                RestoreAsk::Release,
            ),
            (
                "another serial after a failure",
                Some("3"),
                failed(2),
                RestoreAsk::Serial(3),
            ),
            (
                "the failed serial asked again once released",
                Some("2"),
                LastRestore {
                    serial: None,
                    failed: true,
                },
                RestoreAsk::Serial(2),
            ),
        ];
        for (row, annotation, last, want) in rows {
            assert_eq!(ask(annotation, last), want, "{row}");
        }
    }
}
