//! The machine-pool exports guard, decided (pure): what a pool renders and whether its apply is
//! guarded, from the exports its last successful apply rendered, the exports rendered now, the
//! pending (blocked) change and the approval. The pool pass reads the facts and carries out
//! what comes back.
//!
//! A pool whose exports change is blocked keeps applying everything else with the exports of
//! its last successful apply ("held"), so bootstrap rotations and replica changes are not
//! stuck behind an approval; that needs the applied exports' values, kept on the durable
//! inputs beside the hash.

pub use crate::decide::BlockedApply;
use captf_api::annotations;
use serde::{Deserialize, Serialize};

/// The durable inputs Secret's budget: the rendered root, the tfvars and the applied-exports
/// record together (a Secret holds at most 1 MiB; this leaves room for its metadata).
pub const DURABLE_BUDGET: usize = 1_000_000;

/// A blocked exports change (`captf.io/pending-cluster-outputs`, JSON on the durable inputs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    /// The apply Job the guard stopped.
    pub job: String,
    /// The approval hash it was blocked for: what `captf.io/approve-destructive-plan` must name.
    pub approval_hash: String,
    /// Hash of the exports it would have applied.
    pub exports_hash: String,
    /// What its plan would have deleted or replaced, `<address> (<actions>)`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
}

impl Pending {
    /// Reads the annotation; an unreadable value counts as none (the guard arms again).
    pub fn parse(value: Option<&String>) -> Option<Pending> {
        value.and_then(|v| serde_json::from_str(v).ok())
    }

    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// What a finished apply leaves on the durable inputs for the guard, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// A success ends a partly applied change (`captf.io/partial-cluster-outputs` goes).
    ClearPartial,
    /// A success records the exports values it rendered, of this hash (dropped when they
    /// cannot be found or do not fit: stale values never stay).
    Applied(String),
    /// The guard stopped an exports change: it is the pending change.
    Pending(Pending),
    /// A guarded apply that got past the guard and failed may have applied part of it.
    Partial(Partial),
}

/// After a finished Job, what the guard records. `partial_marked` is whether a partly applied
/// change is recorded; `recorded_hash` the hash of the exports values on record.
pub fn after_apply(
    f: &crate::decide::Finished,
    partial_marked: bool,
    recorded_hash: Option<&str>,
) -> Vec<Recorded> {
    if f.op != captf_api::Operation::Apply {
        return Vec::new();
    }
    let exports = f.annotations.get(annotations::CLUSTER_OUTPUTS_HASH);
    if f.succeeded {
        let mut recorded = Vec::new();
        if partial_marked {
            recorded.push(Recorded::ClearPartial);
        }
        if let Some(hash) = exports.filter(|h| Some(h.as_str()) != recorded_hash) {
            recorded.push(Recorded::Applied(hash.clone()));
        }
        return recorded;
    }
    // Only an apply guarded for an exports change carries an approval hash.
    let Some(approval) = f.annotations.get(annotations::APPROVAL_HASH) else {
        return Vec::new();
    };
    let exports_hash = exports.cloned().unwrap_or_default();
    if f.markers
        .contains_key(annotations::DESTRUCTIVE_PLAN_BLOCKED)
    {
        return vec![Recorded::Pending(Pending {
            job: f.name.clone(),
            approval_hash: approval.clone(),
            exports_hash,
            resources: crate::decide::book::destructive_resources(f),
        })];
    }
    if f.markers.contains_key(annotations::PLAN_CHANGED) {
        return Vec::new();
    }
    vec![Recorded::Partial(Partial {
        job: f.name.clone(),
        exports_hash,
    })]
}

/// An exports change whose guarded apply failed or vanished after it started
/// (`captf.io/partial-cluster-outputs`): it may have applied part of the change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Partial {
    pub job: String,
    pub exports_hash: String,
}

impl Partial {
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// What one pass observed for the guard.
#[derive(Clone, Debug, Default)]
pub struct Facts<'a> {
    /// `captf.io/applied-cluster-outputs-hash`: the exports of the last successful apply.
    pub applied_hash: Option<&'a str>,
    /// The applied exports' values are recorded (and hash to `applied_hash`).
    pub recorded: bool,
    /// The pool applied before (durable inputs say so): without `applied_hash` its last exports
    /// are unknown.
    pub applied_before: bool,
    /// Hash of the exports rendered now.
    pub current_hash: &'a str,
    /// The approval hash of the inputs rendered now (inputs hash without `bootstrap_data`).
    pub approval_hash: &'a str,
    /// `captf.io/approve-destructive-plan` on the pool.
    pub approval: Option<&'a str>,
    pub pending: Option<&'a Pending>,
    /// An exports change may be partly applied (recorded, or a lost Job that rendered one).
    pub partial: bool,
}

/// How the apply renders and whether it is guarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Render {
    /// The exports rendered now are those of the last apply (or the first apply): not guarded.
    Current,
    /// The exports rendered now, guarded by the approval hash; `approved` when the approval
    /// annotation names it (the runner then lets its deletes through).
    Guarded { approved: bool },
    /// The exports of the last successful apply, while the change stays blocked: not guarded.
    Held,
}

/// Why a guarded apply is guarded (for the condition when it waits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    ExportsChanged,
    /// A guarded apply failed or vanished: every apply is guarded until one succeeds.
    PartlyApplied,
    /// The pool applied before the record existed and nothing proves its last exports.
    Unknown,
    /// A change is blocked but the applied exports are not recorded: it cannot be held.
    Unrecorded,
}

/// What happens to the pending change this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PendingFate {
    /// Nothing pending, or it stays pending.
    Keep,
    /// The change was applied (the last successful apply rendered it): forget it.
    Applied(Pending),
    /// The exports returned to those applied: forget it, remove its approval, report the real
    /// outcome of the last apply.
    Withdrawn(Pending),
    /// The exports moved to another change or an edit changed the approval hash: forget it,
    /// remove its approval; the next apply is guarded afresh.
    Superseded(Pending),
}

/// The guard's verdict for one pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub render: Render,
    pub why: Option<Why>,
    pub pending: PendingFate,
}

/// Decides the exports guard for `f` (pure).
pub fn decide(f: &Facts<'_>) -> Verdict {
    let changed = f.applied_hash.is_some_and(|a| a != f.current_hash);
    let unknown = f.applied_hash.is_none() && f.applied_before;
    let pending = match f.pending {
        None => PendingFate::Keep,
        Some(p) if Some(p.exports_hash.as_str()) == f.applied_hash => {
            PendingFate::Applied(p.clone())
        }
        Some(p) if !changed => PendingFate::Withdrawn(p.clone()),
        Some(p) if p.approval_hash != f.approval_hash => PendingFate::Superseded(p.clone()),
        Some(_) => PendingFate::Keep,
    };
    let still_pending = f.pending.is_some() && pending == PendingFate::Keep;
    let approved = f.approval == Some(f.approval_hash);
    let guarded = |why| Verdict {
        render: Render::Guarded { approved },
        why: Some(why),
        pending: pending.clone(),
    };
    // A change that may be half applied, or exports nobody can vouch for: nothing is held, and
    // every apply (rotations included) is guarded by its own approval hash.
    if f.partial {
        return guarded(Why::PartlyApplied);
    }
    if unknown {
        return guarded(Why::Unknown);
    }
    if !changed {
        return Verdict {
            render: Render::Current,
            why: None,
            pending,
        };
    }
    if approved || !still_pending {
        return guarded(Why::ExportsChanged);
    }
    if !f.recorded {
        return guarded(Why::Unrecorded);
    }
    Verdict {
        render: Render::Held,
        why: None,
        pending,
    }
}

/// See [`BlockedApply`]: what the newest blocked apply means now (pure). `guard_hash` is the hash the newest finished apply was blocked
/// for, if it was; `pending_kept` whether a pending change stays pending this pass.
pub fn blocked_apply(
    v: &Verdict,
    guard_hash: Option<&str>,
    approval_hash: &str,
    pending_kept: bool,
) -> BlockedApply {
    let Some(guard) = guard_hash else {
        return BlockedApply::Leave;
    };
    match v.render {
        Render::Current | Render::Held => BlockedApply::Hide,
        Render::Guarded { approved: true } => BlockedApply::Leave,
        Render::Guarded { approved: false } if guard != approval_hash => BlockedApply::Leave,
        Render::Guarded { approved: false }
            if v.why == Some(Why::ExportsChanged) && !pending_kept =>
        {
            BlockedApply::Hide
        }
        Render::Guarded { approved: false } => BlockedApply::Wait,
    }
}

/// Whether the applied-exports record fits beside inputs of `rendered` bytes.
pub fn fits(rendered: usize, record: usize) -> bool {
    rendered.saturating_add(record) <= DURABLE_BUDGET
}

/// The `DestructivePlanBlocked` message while `p` is held (pure): what would be deleted or
/// replaced, that the pool applies everything else with its last exports, and the command.
pub fn held_message(namespace: &str, name: &str, p: &Pending, held_apply: Option<&str>) -> String {
    let resources = if p.resources.is_empty() {
        "some resources".to_owned()
    } else {
        p.resources.join(", ")
    };
    let mut text = format!(
        "Job {}: the plan for the cluster exports change would delete or replace {resources}; the change is held, not applied",
        p.job
    );
    match held_apply {
        Some(job) => text.push_str(&format!(
            "; Job {job} applied the pool's other changes with the exports of its last successful apply"
        )),
        None => text.push_str(
            "; the pool applies its other changes with the exports of its last successful apply",
        ),
    }
    text.push_str(&format!(
        ". To apply the change: kubectl annotate terraformmachinepool {name} -n {namespace} {}={} --overwrite",
        annotations::APPROVE_DESTRUCTIVE_PLAN,
        p.approval_hash
    ));
    text
}

/// The withdrawn part of an `ApplyJobSucceeded` message (pure).
pub fn withdrawn_note(p: &Pending) -> String {
    format!(
        "the cluster exports change blocked in Job {} was withdrawn (the exports are back to those applied)",
        p.job
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const APPLIED: &str = "sha256:old";
    const NEW: &str = "sha256:new";
    const OTHER: &str = "sha256:other";
    const A: &str = "h2:approval";
    const B: &str = "h2:edited";

    fn pending(exports: &str, approval: &str) -> Pending {
        Pending {
            job: "captf-mp-w-apply-a2-x".into(),
            approval_hash: approval.into(),
            exports_hash: exports.into(),
            resources: vec!["terraform_data.exports[0] (replace)".into()],
        }
    }

    fn facts<'a>(current: &'a str, p: Option<&'a Pending>) -> Facts<'a> {
        Facts {
            applied_hash: Some(APPLIED),
            recorded: true,
            applied_before: true,
            current_hash: current,
            approval_hash: A,
            approval: None,
            pending: p,
            partial: false,
        }
    }

    #[test]
    fn the_guard_table() {
        let held = pending(NEW, A);
        let applied = pending(APPLIED, A);
        let edited = pending(NEW, B);
        let guarded = |approved, why| (Render::Guarded { approved }, Some(why));
        struct Row<'a> {
            name: &'a str,
            facts: Facts<'a>,
            want: (Render, Option<Why>),
            fate: PendingFate,
        }
        let rows = [
            Row {
                name: "first apply: nothing applied, nothing guarded",
                facts: Facts {
                    applied_hash: None,
                    applied_before: false,
                    recorded: false,
                    ..facts(NEW, None)
                },
                want: (Render::Current, None),
                fate: PendingFate::Keep,
            },
            Row {
                name: "same exports (rotation, replicas, version): not guarded",
                facts: facts(APPLIED, None),
                want: (Render::Current, None),
                fate: PendingFate::Keep,
            },
            Row {
                name: "changed exports, nothing blocked yet: guarded",
                facts: facts(NEW, None),
                want: guarded(false, Why::ExportsChanged),
                fate: PendingFate::Keep,
            },
            Row {
                name: "changed exports, blocked, approval hash current: held",
                facts: facts(NEW, Some(&held)),
                want: (Render::Held, None),
                fate: PendingFate::Keep,
            },
            Row {
                name: "held, then approved: the change applies, guarded and allowed",
                facts: Facts {
                    approval: Some(A),
                    ..facts(NEW, Some(&held))
                },
                want: guarded(true, Why::ExportsChanged),
                fate: PendingFate::Keep,
            },
            Row {
                name: "an approval of another hash does not approve",
                facts: Facts {
                    approval: Some(B),
                    ..facts(NEW, Some(&held))
                },
                want: (Render::Held, None),
                fate: PendingFate::Keep,
            },
            Row {
                name: "withdrawn: the exports are back to those applied",
                facts: facts(APPLIED, Some(&held)),
                want: (Render::Current, None),
                fate: PendingFate::Withdrawn(held.clone()),
            },
            Row {
                name: "superseded by another exports change: guarded afresh",
                facts: Facts {
                    approval_hash: B,
                    ..facts(OTHER, Some(&held))
                },
                want: guarded(false, Why::ExportsChanged),
                fate: PendingFate::Superseded(held.clone()),
            },
            Row {
                name: "superseded by a spec edit (approval hash moved): guarded afresh",
                facts: facts(NEW, Some(&edited)),
                want: guarded(false, Why::ExportsChanged),
                fate: PendingFate::Superseded(edited.clone()),
            },
            Row {
                name: "the pending change was applied: forgotten",
                facts: facts(APPLIED, Some(&applied)),
                want: (Render::Current, None),
                fate: PendingFate::Applied(applied.clone()),
            },
            Row {
                name: "unrecorded: a blocked change cannot be held, it waits",
                facts: Facts {
                    recorded: false,
                    ..facts(NEW, Some(&held))
                },
                want: guarded(false, Why::Unrecorded),
                fate: PendingFate::Keep,
            },
            Row {
                name: "partly applied: a rotation is guarded too",
                facts: Facts {
                    partial: true,
                    ..facts(APPLIED, None)
                },
                want: guarded(false, Why::PartlyApplied),
                fate: PendingFate::Keep,
            },
            Row {
                name: "partly applied: nothing is held",
                facts: Facts {
                    partial: true,
                    ..facts(NEW, Some(&held))
                },
                want: guarded(false, Why::PartlyApplied),
                fate: PendingFate::Keep,
            },
            Row {
                name: "partly applied and approved",
                facts: Facts {
                    partial: true,
                    approval: Some(A),
                    ..facts(NEW, None)
                },
                want: guarded(true, Why::PartlyApplied),
                fate: PendingFate::Keep,
            },
            Row {
                name: "applied before the record, exports unknown: every apply guarded",
                facts: Facts {
                    applied_hash: None,
                    recorded: false,
                    ..facts(NEW, None)
                },
                want: guarded(false, Why::Unknown),
                fate: PendingFate::Keep,
            },
        ];
        for row in rows {
            let v = decide(&row.facts);
            assert_eq!((v.render, v.why), row.want, "{}", row.name);
            assert_eq!(v.pending, row.fate, "{}", row.name);
        }
    }

    #[test]
    fn a_blocked_apply_is_hidden_while_held_and_waited_on_when_it_cannot_be() {
        let v = |render, why| Verdict {
            render,
            why,
            pending: PendingFate::Keep,
        };
        let waiting = v(Render::Guarded { approved: false }, Some(Why::Unrecorded));
        let fresh = v(
            Render::Guarded { approved: false },
            Some(Why::ExportsChanged),
        );
        let rows = [
            (
                "not blocked",
                v(Render::Held, None),
                None,
                true,
                BlockedApply::Leave,
            ),
            (
                "held",
                v(Render::Held, None),
                Some(A),
                true,
                BlockedApply::Hide,
            ),
            (
                "withdrawn",
                v(Render::Current, None),
                Some(A),
                false,
                BlockedApply::Hide,
            ),
            (
                "approved",
                v(
                    Render::Guarded { approved: true },
                    Some(Why::ExportsChanged),
                ),
                Some(A),
                true,
                BlockedApply::Leave,
            ),
            (
                "unrecorded, same change",
                waiting.clone(),
                Some(A),
                true,
                BlockedApply::Wait,
            ),
            (
                "unrecorded, an edit since",
                waiting,
                Some(B),
                true,
                BlockedApply::Leave,
            ),
            (
                "a withdrawn change returned",
                fresh,
                Some(A),
                false,
                BlockedApply::Hide,
            ),
        ];
        for (name, verdict, guard, kept, want) in rows {
            assert_eq!(blocked_apply(&verdict, guard, A, kept), want, "{name}");
        }
    }

    #[test]
    fn the_record_shares_the_budget() {
        assert!(fits(900_000, 100_000));
        assert!(!fits(900_000, 100_001));
        assert!(!fits(usize::MAX, 1));
    }

    #[test]
    fn pending_round_trips_and_garbage_reads_as_none() {
        let p = pending(NEW, A);
        assert_eq!(Pending::parse(Some(&p.to_annotation())), Some(p));
        assert_eq!(Pending::parse(Some(&"{not json".to_owned())), None);
        assert_eq!(Pending::parse(None), None);
    }

    #[test]
    fn the_held_message_names_the_change_and_the_command() {
        let p = pending(NEW, A);
        let text = held_message("ns", "w", &p, Some("captf-mp-w-apply-a3-y"));
        assert!(
            text.contains("terraform_data.exports[0] (replace)"),
            "{text}"
        );
        assert!(text.contains("Job captf-mp-w-apply-a2-x"), "{text}");
        assert!(text.contains("Job captf-mp-w-apply-a3-y applied"), "{text}");
        assert!(
            text.ends_with("kubectl annotate terraformmachinepool w -n ns captf.io/approve-destructive-plan=h2:approval --overwrite"),
            "{text}"
        );
    }

    #[test]
    fn a_finished_apply_leaves_the_guard_its_records() {
        use crate::decide::Finished;
        use captf_api::Operation;
        let apply = |succeeded: bool, exports: Option<&str>, approval: Option<&str>| {
            let mut f = Finished::for_test(Operation::Apply, succeeded, false);
            if let Some(h) = exports {
                f.annotations
                    .insert(annotations::CLUSTER_OUTPUTS_HASH.into(), h.into());
            }
            if let Some(a) = approval {
                f.annotations
                    .insert(annotations::APPROVAL_HASH.into(), a.into());
            }
            f
        };
        let marked = |mut f: Finished, marker: &str| {
            f.markers.insert(marker.into(), A.into());
            f
        };
        let job = "captf-c-demo-apply-a1-000000";
        let partial = Recorded::Partial(Partial {
            job: job.into(),
            exports_hash: NEW.into(),
        });
        let blocked = Recorded::Pending(Pending {
            job: job.into(),
            approval_hash: A.into(),
            exports_hash: NEW.into(),
            resources: Vec::new(),
        });
        /// What, the Job, a partial change marked, the hash on record, what is recorded.
        type Row<'a> = (&'a str, Finished, bool, Option<&'a str>, Vec<Recorded>);
        let rows: Vec<Row> = vec![
            (
                "a success records what it rendered",
                apply(true, Some(NEW), None),
                false,
                Some(APPLIED),
                vec![Recorded::Applied(NEW.into())],
            ),
            (
                "the same exports on record: nothing to write",
                apply(true, Some(NEW), None),
                false,
                Some(NEW),
                vec![],
            ),
            (
                "a success ends a partly applied change",
                apply(true, Some(NEW), Some(A)),
                true,
                Some(NEW),
                vec![Recorded::ClearPartial],
            ),
            (
                "a success that rendered no exports",
                apply(true, None, None),
                true,
                None,
                vec![Recorded::ClearPartial],
            ),
            (
                "an unguarded apply failed: nothing for the guard",
                apply(false, Some(NEW), None),
                false,
                Some(APPLIED),
                vec![],
            ),
            (
                "the guard stopped it: the pending change",
                marked(
                    apply(false, Some(NEW), Some(A)),
                    annotations::DESTRUCTIVE_PLAN_BLOCKED,
                ),
                false,
                Some(APPLIED),
                vec![blocked],
            ),
            (
                "an approved plan that changed applied nothing",
                marked(apply(false, Some(NEW), Some(A)), annotations::PLAN_CHANGED),
                false,
                Some(APPLIED),
                vec![],
            ),
            (
                "past the guard and failed: maybe partly applied",
                apply(false, Some(NEW), Some(A)),
                false,
                Some(APPLIED),
                vec![partial],
            ),
            (
                "a destroy is none of the guard's",
                Finished::for_test(Operation::Destroy, true, false),
                true,
                Some(APPLIED),
                vec![],
            ),
        ];
        for (what, f, partial_marked, recorded_hash, want) in rows {
            assert_eq!(
                after_apply(&f, partial_marked, recorded_hash),
                want,
                "{what}"
            );
        }
    }
}
