//! Whose state the reader found (the lineage recorded where it outlives a lost state), what a
//! Job must find when it runs, and StateReadable from both.

use captf_api::conditions::{reasons, types};
use captf_api::{WorkspaceStatus, annotations, events};
use kube::{Resource, ResourceExt};

use crate::conditions::Conditions;
use crate::decide::status::{self, Readable};
use crate::decide::{Counter, Effect, Finished, Gauge, Note, StateView};
use crate::error::Result;
use crate::reconcile::observe::state::state_serial;
use crate::reconcile::observe::state::{DurableInputs, StateRead};
use crate::reconcile::pass::Pass;

/// Whose state the reader found: what [`classify`] makes of a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// No state Secret.
    Missing,
    /// State Secrets that cannot be read.
    Unreadable,
    /// The object's own state.
    Own {
        /// Its lineage, to record when it is not recorded yet (or was just adopted).
        record: Option<String>,
        /// `captf.io/adopt-state` made it the object's in this pass.
        adopted: bool,
        /// It has no inputs hash although the object applied before, and nobody adopted it.
        unadopted: bool,
        /// `captf.io/adopt-state` names it and it has an inputs hash: nothing is left to adopt.
        adoption_done: bool,
    },
    /// A readable state of another lineage than the object's.
    Foreign {
        /// The lineage found.
        found: String,
        /// The object's lineage.
        expected: String,
    },
}

/// What is known of the object's own lineage, in the order it is trusted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Recorded<'a> {
    /// A restore that succeeded in this pass: the backup's lineage.
    pub restored: Option<&'a str>,
    /// `captf.io/state-lineage` on the durable inputs.
    pub durable: Option<&'a str>,
    /// `status.stateLineage`.
    pub status: Option<&'a str>,
    /// The newest complete backup's lineage (looked up only when none of the above is known).
    pub backup: Option<&'a str>,
}

impl<'a> Recorded<'a> {
    /// The object's lineage, if anything recorded it.
    pub fn lineage(&self) -> Option<&'a str> {
        self.restored
            .or(self.durable)
            .or(self.status)
            .or(self.backup)
            .filter(|l| !l.is_empty())
    }
}

/// Decides whose state `read` is. A state whose lineage nothing recorded is the object's (its
/// first apply wrote it); one of another lineage is foreign unless `adopt` (the value of
/// `captf.io/adopt-state`) names it. An object that `ever_applied` must have an inputs hash on
/// its state, or an adoption, before anything runs against it.
pub fn classify(
    read: &StateRead,
    recorded: Recorded<'_>,
    adopt: Option<&str>,
    ever_applied: bool,
) -> Identity {
    let s = match read {
        StateRead::Missing => return Identity::Missing,
        StateRead::Unreadable(_) | StateRead::Foreign(_) => return Identity::Unreadable,
        StateRead::Found(s, _) => s,
    };
    let lineage = s.lineage.as_str();
    let named = adopt == Some(lineage);
    let own = recorded.lineage();
    if let Some(own) = own.filter(|own| *own != lineage && !named) {
        return Identity::Foreign {
            found: lineage.to_owned(),
            expected: own.to_owned(),
        };
    }
    Identity::Own {
        // Known only from status or a backup, or not at all: written where it survives.
        record: (recorded.restored != Some(lineage) && recorded.durable != Some(lineage))
            .then(|| lineage.to_owned()),
        adopted: own.is_some_and(|own| own != lineage),
        unadopted: ever_applied && s.inputs_hash.is_none() && !named,
        adoption_done: named && s.inputs_hash.is_some(),
    }
}

/// What the Job must find when it runs (`--expect-state`): no state, or the lineage and serial
/// read now. `None` for an unreadable state, on which only a restore runs (it expects its backup).
pub fn expected(read: &StateRead) -> Option<captf_runner::expect::ExpectedState> {
    use captf_runner::expect::ExpectedState;
    match read {
        StateRead::Missing => Some(ExpectedState::None),
        StateRead::Found(s, _) => Some(ExpectedState::Lineage {
            lineage: s.lineage.clone(),
            serial: s.serial,
        }),
        StateRead::Unreadable(_) | StateRead::Foreign(_) => None,
    }
}

/// The transition counter of a lost state ([`crate::metrics::Counted`]).
const COUNTED_LOST: &str = "state_lost";

/// What [`classify`] found of the object's own state, and the lineage it replaces.
struct Own<'a> {
    record: Option<String>,
    adopted: bool,
    unadopted: bool,
    adoption_done: bool,
    was: Option<&'a str>,
}

impl<K> Pass<'_, K>
where
    K: crate::reconcile::pass::Workload + Resource<Scope = kube::core::NamespaceResourceScope>,
{
    /// StateReadable, from the state [`observe`](Self::observe) read live (only while no Job
    /// runs), and whose it is. A missing state of an object that ever applied (the marker or
    /// digest on the durable inputs, `provisioned`, or any backup) is lost, not "not yet". A
    /// readable state of another lineage than the one recorded (durable inputs, status, backups)
    /// is not the object's: `state` becomes [`StateRead::Foreign`]. What must be written (the
    /// lineage recorded where it survives a lost state, `captf.io/adopt-state` used up, and the
    /// events) is pushed to `writes`, not written: observe only reads.
    pub async fn state_view(
        &self,
        state: &mut StateRead,
        durable: &DurableInputs,
        provisioned: bool,
        finished: &[Finished],
        workspace: &mut WorkspaceStatus,
        (conds, writes): (&Conditions, &mut Vec<Effect>),
    ) -> Result<(StateView, Readable)> {
        let missing = matches!(state, StateRead::Missing);
        let restored = finished
            .iter()
            .rev()
            .find(|f| f.op == captf_api::Operation::Restore && f.succeeded)
            .and_then(|f| f.annotations.get(annotations::STATE_LINEAGE))
            .map(String::as_str);
        let durable_lineage = durable
            .annotations
            .get(annotations::STATE_LINEAGE)
            .map(String::as_str);
        let status_lineage = workspace.state_lineage.clone();
        let mut recorded = Recorded {
            restored,
            durable: durable_lineage,
            status: status_lineage.as_deref(),
            backup: None,
        };
        // Ever applied: the marker and digest survive a lost status and clusterctl move; a backup
        // survives even a lost durable inputs Secret.
        let marked = durable.applied() || provisioned;
        // Backups are listed only when they can tell something: whether an object whose state
        // is missing applied before, or the lineage of a state nothing else recorded (an object
        // from before lineages were recorded).
        let backups = if (missing && !marked) || recorded.lineage().is_none() {
            self.backups(recorded.lineage(), writes).await?
        } else {
            Vec::new()
        };
        let newest_backup = backups
            .iter()
            .filter(|b| b.complete() && !b.lineage.is_empty())
            .min_by(|a, b| crate::reconcile::backups::newest_first(a, b));
        recorded.backup = newest_backup.map(|b| b.lineage.as_str());
        let ever_applied = marked || (missing && !backups.is_empty());
        let adopt = self
            .object
            .annotations()
            .get(annotations::ADOPT_STATE)
            .map(String::as_str);
        let identity = classify(state, recorded, adopt, ever_applied);
        if !matches!(identity, Identity::Missing) || !ever_applied {
            self.first_count(COUNTED_LOST, None);
        }
        // `conds` are those the pass started from: StateReadable is said by the status patch.
        let was = |reason: &str| {
            conds
                .get(types::STATE_READABLE)
                .is_some_and(|c| c.reason == reason)
        };
        let seen = match identity {
            Identity::Missing if ever_applied => {
                // Counted once, when the state is first found gone: not again by a pass that
                // starts from a cached object older than the status that said so.
                let new = !was(reasons::STATE_LOST);
                if self.first_count(COUNTED_LOST, Some("lost")) && new {
                    writes.push(Effect::Count(Counter::StateReadError("lost")));
                }
                (StateView::Lost, Readable::Lost)
            }
            Identity::Missing => (StateView::NotFound, Readable::NotFound),
            Identity::Unreadable => {
                let StateRead::Unreadable(e) = &*state else {
                    return Err(crate::Error::Panicked(
                        "the state was classified unreadable without a read error".to_owned(),
                    ));
                };
                let reason = e.metric_reason();
                writes.push(Effect::Count(Counter::StateReadError(reason)));
                let readable = Readable::Unreadable {
                    reason: e.reason(),
                    message: e.to_string(),
                };
                (StateView::Unreadable, readable)
            }
            Identity::Foreign { found, expected } => {
                let readable = Readable::Foreign {
                    found,
                    expected: expected.clone(),
                    serial: state_serial(state),
                };
                workspace.state_lineage = Some(expected);
                if let StateRead::Found(s, _) = std::mem::replace(state, StateRead::Missing) {
                    *state = StateRead::Foreign(s);
                }
                // Said once, when first found.
                if !was(reasons::STATE_LINEAGE_MISMATCH) {
                    let said = status::state_readable(&readable, None, self.key);
                    writes.push(Effect::Count(Counter::StateReadError("lineage_mismatch")));
                    writes.push(Effect::Event(Note::warning(said.reason, said.message)));
                }
                (StateView::Foreign, readable)
            }
            Identity::Own {
                record,
                adopted,
                unadopted,
                adoption_done,
            } => {
                let own = Own {
                    record,
                    adopted,
                    unadopted,
                    adoption_done,
                    was: status_lineage.as_deref().or(durable_lineage),
                };
                if let Some(lineage) = own.record.clone().filter(|_| durable.exists) {
                    writes.push(Effect::RecordLineage(lineage));
                }
                let StateRead::Found(s, _) = &*state else {
                    return Err(crate::Error::Panicked(
                        "the state was classified the object's own without being read".to_owned(),
                    ));
                };
                self.ours(s, own, writes, workspace)
            }
        };
        Ok(seen)
    }

    /// The object's own state: its lineage noted, an adoption to announce and use up, and
    /// `StateRead` unless it carries no inputs hash.
    fn ours(
        &self,
        s: &captf_state::DecodedState,
        own: Own<'_>,
        writes: &mut Vec<Effect>,
        workspace: &mut WorkspaceStatus,
    ) -> (StateView, Readable) {
        if own.adopted {
            let note = format!(
                "{}={} made lineage {} (serial {}) this object's state, in place of lineage {}",
                annotations::ADOPT_STATE,
                s.lineage,
                s.lineage,
                s.serial,
                own.was.unwrap_or("?")
            );
            writes.push(Effect::Event(Note::normal(events::STATE_ADOPTED, note)));
        }
        if own.adoption_done {
            writes.push(Effect::Consume {
                annotation: annotations::ADOPT_STATE,
                value: s.lineage.clone(),
                announce: None,
            });
        }
        workspace.state_lineage = Some(s.lineage.clone());
        if own.unadopted {
            let readable = Readable::Unadopted {
                lineage: s.lineage.clone(),
                serial: s.serial,
            };
            return (StateView::Unadopted, readable);
        }
        let resources = i64::try_from(s.managed_resources).unwrap_or(i64::MAX);
        let bytes = i64::try_from(s.compressed_bytes).unwrap_or(i64::MAX);
        writes.push(Effect::Gauge(Gauge::StateResources(resources)));
        writes.push(Effect::Gauge(Gauge::StateBytes(bytes)));
        let view = StateView::Found {
            inputs_hash: s.inputs_hash.clone(),
        };
        (view, Readable::Read)
    }

    /// [`crate::metrics::Counted::first`] for this object.
    fn first_count(&self, counter: &'static str, value: Option<&str>) -> bool {
        let uid = self.object.meta().uid.as_deref().unwrap_or_default();
        self.ctx.metrics.counted.first(uid, counter, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use captf_state::DecodedState;
    use std::collections::BTreeMap;

    fn found(lineage: &str, hash: Option<&str>) -> StateRead {
        StateRead::Found(
            Box::new(DecodedState {
                serial: 3,
                lineage: lineage.into(),
                terraform_version: "1.12.6".into(),
                outputs: BTreeMap::new(),
                sensitive_outputs: Default::default(),
                managed_resources: 1,
                compressed_bytes: 10,
                decompressed_bytes: 20,
                chunks: 1,
                inputs_hash: hash.map(str::to_owned),
            }),
            Vec::new(),
        )
    }

    fn own(record: Option<&str>, adopted: bool, unadopted: bool, done: bool) -> Identity {
        Identity::Own {
            record: record.map(str::to_owned),
            adopted,
            unadopted,
            adoption_done: done,
        }
    }

    fn foreign(found: &str, expected: &str) -> Identity {
        Identity::Foreign {
            found: found.into(),
            expected: expected.into(),
        }
    }

    #[test]
    fn whose_state_it_is() {
        let durable = |l| Recorded {
            durable: Some(l),
            ..Recorded::default()
        };
        let h = Some("h2:a");
        // (what, the read, what is recorded, captf.io/adopt-state, ever applied, whose it is)
        type Row<'a> = (
            &'a str,
            StateRead,
            Recorded<'a>,
            Option<&'a str>,
            bool,
            Identity,
        );
        let rows: Vec<Row<'_>> = vec![
            (
                "no state",
                StateRead::Missing,
                durable("l1"),
                None,
                true,
                Identity::Missing,
            ),
            (
                "the first state read: the object's, recorded",
                found("l1", None),
                Recorded::default(),
                None,
                false,
                own(Some("l1"), false, false, false),
            ),
            (
                "the recorded lineage: nothing to record",
                found("l1", h),
                durable("l1"),
                None,
                true,
                own(None, false, false, false),
            ),
            (
                "another lineage than the durable inputs record",
                found("l2", h),
                durable("l1"),
                None,
                true,
                foreign("l2", "l1"),
            ),
            (
                "known from a backup only (an object from before lineages were recorded)",
                found("l2", None),
                Recorded {
                    backup: Some("l1"),
                    ..Recorded::default()
                },
                None,
                true,
                foreign("l2", "l1"),
            ),
            (
                "known from status only: recorded on the durable inputs",
                found("l1", h),
                Recorded {
                    status: Some("l1"),
                    ..Recorded::default()
                },
                None,
                true,
                own(Some("l1"), false, false, false),
            ),
            (
                "a restore of this pass wins over what the durable inputs said before it",
                found("l0", h),
                Recorded {
                    restored: Some("l0"),
                    durable: Some("l1"),
                    ..Recorded::default()
                },
                None,
                true,
                own(None, false, false, false),
            ),
            (
                "adopting the lineage found",
                found("l2", None),
                durable("l1"),
                Some("l2"),
                true,
                own(Some("l2"), true, false, false),
            ),
            (
                "an adoption naming another lineage changes nothing",
                found("l2", h),
                durable("l1"),
                Some("l3"),
                true,
                foreign("l2", "l1"),
            ),
            (
                "applied before and no inputs hash: unadopted",
                found("l1", None),
                durable("l1"),
                None,
                true,
                own(None, false, true, false),
            ),
            (
                "never applied and no inputs hash: a failed first apply, retried",
                found("l1", None),
                durable("l1"),
                None,
                false,
                own(None, false, false, false),
            ),
            (
                "adopted and applied: the adoption is used up",
                found("l2", h),
                durable("l2"),
                Some("l2"),
                true,
                own(None, false, false, true),
            ),
        ];
        for (name, read, recorded, adopt, ever_applied, want) in rows {
            assert_eq!(
                classify(&read, recorded, adopt, ever_applied),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn a_job_expects_the_state_read() {
        use captf_runner::expect::ExpectedState;
        assert_eq!(expected(&StateRead::Missing), Some(ExpectedState::None));
        assert_eq!(
            expected(&found("l1", None)),
            Some(ExpectedState::Lineage {
                lineage: "l1".into(),
                serial: 3
            })
        );
    }
}
