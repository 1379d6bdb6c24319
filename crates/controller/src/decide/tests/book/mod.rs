//! Recording a finished Job ([`book::book`]): one row per outcome of every operation, what it
//! sets, records, writes and announces.

use captf_api::annotations;
use captf_api::names::ObjectKey;
use captf_runner::drift::Drift;
use captf_runner::plan::PlanSummary;
use captf_runner::result::{ErrorKind, ResultDocument, RunError};

use super::*;
use crate::decide::book::{self, Booked, Recorded};
use crate::decide::{Counter, Effect};

const PIN: &str = "registry.example/module@sha256:1111111111111111111111111111111111111111111111111111111111111111";

fn finished(op: Operation, succeeded: bool, deadline: bool) -> Finished {
    Finished::for_test(op, succeeded, deadline)
}

fn with_result(mut f: Finished) -> Finished {
    f.result = Some(ResultDocument::new(f.op.as_str(), "img", &[]));
    f
}

fn with_error(f: Finished, kind: ErrorKind) -> Finished {
    let mut f = with_result(f);
    if let Some(doc) = f.result.as_mut() {
        doc.error = Some(RunError::new(kind, None, ""));
    }
    f
}

fn marked(mut f: Finished, marker: &str, value: &str) -> Finished {
    f.markers.insert(marker.into(), value.into());
    f
}

fn annotated(mut f: Finished, annotation: &str, value: &str) -> Finished {
    f.annotations.insert(annotation.into(), value.into());
    f
}

fn pinned(mut f: Finished, pin: &str) -> Finished {
    f.pin = Some(pin.into());
    f.image_id = Some(pin.into());
    f
}

fn pull_failed(mut f: Finished) -> Finished {
    f.pull_failure = Some("container source cannot pull x".into());
    f
}

fn drifted(f: Finished, detected: bool) -> Finished {
    let mut f = with_result(f);
    if let Some(doc) = f.result.as_mut() {
        doc.drift = Some(Drift {
            detected,
            create: 0,
            update: 2,
            replace: 0,
            delete: 1,
            resources: Vec::new(),
        });
    }
    f
}

/// A blocked apply whose plan replaces one resource and updates another.
fn blocked(f: Finished) -> Finished {
    let mut f = with_error(f, ErrorKind::Blocked);
    if let Some(doc) = f.result.as_mut() {
        doc.plan = Some(PlanSummary {
            hash: "p2:plan".into(),
            create: 0,
            update: 1,
            replace: 1,
            delete: 0,
            forget: 0,
            outputs: 0,
            import: 0,
            moves: 0,
            resources: vec!["a.b (update)".into(), "a.c (delete, create)".into()],
            truncated: false,
        });
    }
    let f = marked(f, annotations::PLAN_HASH, "p2:plan");
    marked(f, annotations::DESTRUCTIVE_PLAN_BLOCKED, "inputs-hash")
}

/// What one row is: the object as it stood and the finished Job.
struct Row {
    what: &'static str,
    kind: WorkloadKind,
    pinned: Option<&'static str>,
    approve_destructive: Option<&'static str>,
    pull_seen: Option<&'static str>,
    f: Finished,
}

fn row(what: &'static str, f: Finished) -> Row {
    Row {
        what,
        kind: WorkloadKind::Cluster,
        pinned: Some(PIN),
        approve_destructive: None,
        pull_seen: None,
        f,
    }
}

fn booked(row: &Row) -> anyhow::Result<Booked> {
    let key = ObjectKey::new("ns", row.kind, "demo")?;
    let before = book::Before {
        key: &key,
        spec_image: "registry.example/module:v1",
        pinned: row.pinned,
        approve_destructive: row.approve_destructive,
        pull_seen: row.pull_seen,
    };
    Ok(book::book(&row.f, &before))
}

/// A booked Job as short lines: each condition, record, write and event in order.
fn lines(b: &Booked) -> Vec<String> {
    let conditions = b
        .conditions
        .iter()
        .map(|c| format!("{}={} {}", c.type_, c.status.as_str(), c.reason));
    let recorded = b.recorded.iter().map(|r| match r {
        Recorded::Source(_) => "source".to_owned(),
        Recorded::Refreshed { drift } => format!("refreshed drift={drift}"),
        Recorded::RestoredSerial(s) => format!("restored serial {s:?}"),
    });
    let effects = b.effects.iter().map(|e| match e {
        Effect::AdoptState(a) => {
            let digest = match &a.digest {
                book::Digest::Keep => "",
                book::Digest::Pin(_) => ", pin",
                book::Digest::Unpin => ", unpin",
            };
            let lineage = a.lineage.as_deref().map(|l| format!(", lineage {l}"));
            format!("adopt{digest}{}", lineage.unwrap_or_default())
        }
        Effect::MarkInputs {
            annotation: annotations::APPLIED_CLUSTER_OUTPUTS_HASH,
            value: Some(h),
        } => format!("exports {h}"),
        Effect::MarkInputs {
            annotation: annotations::INTERRUPTED_APPLY,
            value: Some(job),
        } => format!("record {job}"),
        Effect::MarkInputs {
            annotation: annotations::INTERRUPTED_APPLY,
            value: None,
        } => "clear".to_owned(),
        Effect::Consume {
            annotation,
            value,
            announce,
        } => format!(
            "consume {annotation}={value}{}",
            announce
                .as_ref()
                .map(|n| format!(" then {}", n.reason))
                .unwrap_or_default()
        ),
        Effect::Event(n) => {
            format!("{} {}", if n.warning { "warn" } else { "event" }, n.reason)
        }
        Effect::Count(Counter::Restore(r)) => format!("restores {r}"),
        Effect::Count(Counter::Approval(r)) => format!("approvals {r}"),
        Effect::ReleaseLeases(job) => format!("release {job}"),
        other => panic!("recording a finished Job never has {other:?}"),
    });
    conditions.chain(recorded).chain(effects).collect()
}

#[test]
fn every_outcome_is_recorded_as_its_row_says() -> anyhow::Result<()> {
    use Operation::*;
    let consume_approval = format!(
        "consume {}=inputs-hash then DestructivePlanApprovalConsumed",
        annotations::APPROVE_DESTRUCTIVE_PLAN
    );
    let consume_restore = format!("consume {}=5", annotations::RESTORE_STATE);
    let rows: Vec<(Row, Vec<&str>)> = vec![
        (
            row("an apply succeeded with the digest pinned before", {
                pinned(finished(Apply, true, false), PIN)
            }),
            vec![
                "ApplyJobSucceeded=True ApplySucceeded",
                "source",
                "adopt, pin",
                "event JobSucceeded",
            ],
        ),
        (
            row("an apply ran another digest: it is pinned", {
                pinned(
                    finished(Apply, true, false),
                    "registry.example/module@sha256:2222222222222222222222222222222222222222222222222222222222222222",
                )
            }),
            vec![
                "ApplyJobSucceeded=True ApplySucceeded",
                "source",
                "adopt, pin",
                "event DigestPinned",
                "event JobSucceeded",
            ],
        ),
        (
            row("an apply whose digest the runtime did not report", {
                finished(Apply, true, false)
            }),
            vec![
                "ApplyJobSucceeded=True ApplySucceeded",
                "source",
                "adopt, unpin",
                "warn DigestUnknown",
                "event JobSucceeded",
            ],
        ),
        (
            row("a pool's apply records the exports it rendered", {
                let f = pinned(finished(Apply, true, false), PIN);
                annotated(f, annotations::CLUSTER_OUTPUTS_HASH, "x1")
            }),
            vec![
                "ApplyJobSucceeded=True ApplySucceeded",
                "source",
                "adopt, pin",
                "exports x1",
                "event JobSucceeded",
            ],
        ),
        (
            Row {
                approve_destructive: Some("inputs-hash"),
                ..row("the apply an approval let through uses it up", {
                    let f = pinned(finished(Apply, true, false), PIN);
                    annotated(f, annotations::INPUTS_HASH, "inputs-hash")
                })
            },
            vec![
                "ApplyJobSucceeded=True ApplySucceeded",
                "source",
                "adopt, pin",
                &consume_approval,
                "event JobSucceeded",
            ],
        ),
        (
            Row {
                approve_destructive: Some("another"),
                ..row("an approval of something else stays", {
                    let f = pinned(finished(Apply, true, false), PIN);
                    annotated(f, annotations::INPUTS_HASH, "inputs-hash")
                })
            },
            vec![
                "ApplyJobSucceeded=True ApplySucceeded",
                "source",
                "adopt, pin",
                "event JobSucceeded",
            ],
        ),
        (
            row(
                "an apply failed",
                with_error(finished(Apply, false, false), ErrorKind::Step),
            ),
            vec!["ApplyJobSucceeded=False ApplyFailed", "warn JobFailed"],
        ),
        (
            row(
                "an apply failed at its deadline",
                finished(Apply, false, true),
            ),
            vec![
                "ApplyJobSucceeded=False JobDeadlineExceeded",
                "warn JobDeadlineExceeded",
            ],
        ),
        (
            row("a plan failed", finished(Plan, false, false)),
            vec!["ApplyJobSucceeded=False ApplyFailed", "warn JobFailed"],
        ),
        (
            row(
                "a plan succeeded: the cluster's own",
                finished(Plan, true, false),
            ),
            vec![],
        ),
        (
            row("a destroy succeeded", finished(Destroy, true, false)),
            vec![
                "ApplyJobSucceeded=True DestroySucceeded",
                "event JobSucceeded",
            ],
        ),
        (
            row("a destroy failed", finished(Destroy, false, false)),
            vec!["ApplyJobSucceeded=False DestroyFailed", "warn JobFailed"],
        ),
        (
            row(
                "a destroy reached its deadline",
                finished(Destroy, false, true),
            ),
            vec![
                "ApplyJobSucceeded=False JobDeadlineExceeded",
                "warn JobDeadlineExceeded",
            ],
        ),
        (
            row(
                "a drift check found drift",
                drifted(finished(Drift, true, false), true),
            ),
            vec![
                "DriftJobSucceeded=True DriftChecked",
                "DriftDetected=True DriftReported",
                "refreshed drift=true",
                "event JobSucceeded",
            ],
        ),
        (
            row(
                "a drift check found none",
                drifted(finished(Drift, true, false), false),
            ),
            vec![
                "DriftJobSucceeded=True DriftChecked",
                "DriftDetected=False NoDrift",
                "refreshed drift=true",
                "event JobSucceeded",
            ],
        ),
        (
            row("a refresh succeeded", finished(Refresh, true, false)),
            vec![
                "DriftJobSucceeded=True DriftChecked",
                "refreshed drift=false",
                "event JobSucceeded",
            ],
        ),
        (
            row("a refresh failed", finished(Refresh, false, false)),
            vec!["DriftJobSucceeded=False DriftJobFailed", "warn JobFailed"],
        ),
        (
            row(
                "a drift check reached its deadline",
                finished(Drift, false, true),
            ),
            vec![
                "DriftJobSucceeded=False DriftJobDeadlineExceeded",
                "warn JobDeadlineExceeded",
            ],
        ),
        (
            row(
                "a restore succeeded: the backup's lineage is the object's again",
                {
                    let f = finished(Restore, true, false);
                    let f = annotated(f, annotations::STATE_LINEAGE, "L1");
                    annotated(f, annotations::RESTORE_SERIAL, "5")
                },
            ),
            vec![
                "RestoreJobSucceeded=True StateRestored",
                "restored serial Some(5)",
                "restores succeeded",
                "adopt, lineage L1",
                &consume_restore,
                "event StateRestored",
            ],
        ),
        (
            row("a restore failed: its serial is recorded, never retried", {
                annotated(
                    finished(Restore, false, false),
                    annotations::RESTORE_SERIAL,
                    "5",
                )
            }),
            vec![
                "RestoreJobSucceeded=False RestoreFailed",
                "restored serial Some(5)",
                "restores failed",
                "warn JobFailed",
            ],
        ),
        (
            row(
                "a restore reached its deadline",
                finished(Restore, false, true),
            ),
            vec![
                "RestoreJobSucceeded=False RestoreFailed",
                "restored serial None",
                "restores failed",
                "warn JobDeadlineExceeded",
            ],
        ),
        (
            row("a failed apply that answered a retry uses it up", {
                annotated(
                    finished(Apply, false, false),
                    annotations::RETRY_TOKEN,
                    "t1",
                )
            }),
            vec![
                "ApplyJobSucceeded=False ApplyFailed",
                "consume captf.io/retry=t1",
                "warn JobFailed",
            ],
        ),
        (
            row("a drift check that answered a replan uses it up", {
                annotated(
                    finished(Drift, true, false),
                    annotations::REPLAN_TOKEN,
                    "t2",
                )
            }),
            vec![
                "DriftJobSucceeded=True DriftChecked",
                "DriftDetected=False NoDrift",
                "refreshed drift=true",
                "consume captf.io/replan=t2",
                "event JobSucceeded",
            ],
        ),
        (
            row(
                "blocked by the destructive guard",
                blocked(finished(Apply, false, false)),
            ),
            vec![
                "ApplyJobSucceeded=False DestructivePlanBlocked",
                "warn DestructivePlanBlocked",
            ],
        ),
        (
            row(
                "an approved plan that changed: PlanChanged is the cluster's",
                {
                    let f = with_error(finished(Apply, false, false), ErrorKind::PlanChanged);
                    marked(f, annotations::PLAN_CHANGED, "true")
                },
            ),
            vec![],
        ),
        (
            row("an apply stopped on a state it was not started for", {
                let f = with_error(finished(Apply, false, false), ErrorKind::StateMismatch);
                marked(f, annotations::STATE_MISMATCH, "true")
            }),
            vec!["ApplyJobSucceeded=False StateMismatch", "warn JobFailed"],
        ),
        (
            row("a drift check stopped on a state it was not started for", {
                let f = with_error(finished(Drift, false, false), ErrorKind::StateMismatch);
                marked(f, annotations::STATE_MISMATCH, "true")
            }),
            vec!["DriftJobSucceeded=False StateMismatch", "warn JobFailed"],
        ),
        (
            row("stopped from outside", {
                with_error(finished(Apply, false, false), ErrorKind::Interrupted)
            }),
            vec!["ApplyJobSucceeded=False ApplyFailed", "warn JobInterrupted"],
        ),
        (
            row(
                "its image could not be pulled",
                pull_failed(finished(Apply, false, false)),
            ),
            vec!["ApplyJobSucceeded=False ImagePullFailed", "warn JobFailed"],
        ),
        (
            row("an image that never came, until the deadline", {
                pull_failed(finished(Destroy, false, true))
            }),
            vec![
                "ApplyJobSucceeded=False ImagePullFailed",
                "warn JobDeadlineExceeded",
            ],
        ),
        (
            Row {
                pull_seen: Some("container source cannot pull x"),
                ..row(
                    "a pull failure an earlier pass saw",
                    finished(Apply, false, false),
                )
            },
            vec!["ApplyJobSucceeded=False ImagePullFailed", "warn JobFailed"],
        ),
        (
            row("a Job with a result pulled its image", {
                pull_failed(with_error(finished(Apply, false, false), ErrorKind::Step))
            }),
            vec!["ApplyJobSucceeded=False ApplyFailed", "warn JobFailed"],
        ),
        (
            row("an image with no module in it", {
                with_error(finished(Plan, false, false), ErrorKind::ImageLayout)
            }),
            vec!["ApplyJobSucceeded=False ImageInvalid", "warn JobFailed"],
        ),
        (
            row("an image with no module, at the deadline", {
                with_error(finished(Apply, false, true), ErrorKind::ImageLayout)
            }),
            vec![
                "ApplyJobSucceeded=False JobDeadlineExceeded",
                "warn JobDeadlineExceeded",
            ],
        ),
    ];
    for (row, want) in rows {
        let got = lines(&booked(&row)?);
        assert_eq!(got, want, "{}", row.what);
    }
    Ok(())
}

#[test]
fn a_blocked_plan_names_what_to_approve() -> anyhow::Result<()> {
    let cluster = row("cluster", blocked(finished(Operation::Apply, false, false)));
    let b = booked(&cluster)?;
    let message = &b.conditions[0].message;
    assert!(
        message.contains("a.c (delete, create)") && !message.contains("a.b (update)"),
        "{message}"
    );
    assert!(
        message.ends_with(&format!(
            "kubectl annotate terraformcluster demo -n ns {}=p2:plan --overwrite",
            annotations::APPROVE_DESTRUCTIVE_PLAN
        )),
        "a cluster's approval names the plan: {message}"
    );
    let Effect::Event(event) = &b.effects[0] else {
        panic!("{:?}", b.effects);
    };
    assert_eq!(
        &event.message, message,
        "the event says what the condition says"
    );

    let pool = Row {
        kind: WorkloadKind::MachinePool,
        ..row("pool", blocked(finished(Operation::Apply, false, false)))
    };
    let message = &booked(&pool)?.conditions[0].message;
    assert!(
        message.ends_with("=inputs-hash --overwrite"),
        "a pool's approval names its approval hash: {message}"
    );

    let differs = row("differs", {
        let f = blocked(finished(Operation::Apply, false, false));
        annotated(f, annotations::APPROVED_DESTRUCTIVE_PLAN, "p2:older")
    });
    let message = &booked(&differs)?.conditions[0].message;
    assert!(
        message.contains("not the approved plan p2:older"),
        "{message}"
    );
    Ok(())
}

#[test]
fn a_pull_failure_at_the_deadline_says_both() -> anyhow::Result<()> {
    let r = row(
        "deadline",
        pull_failed(finished(Operation::Apply, false, true)),
    );
    let message = &booked(&r)?.conditions[0].message;
    assert_eq!(
        message,
        "Job captf-c-demo-apply-a1-000000: container source cannot pull x; it reached its deadline without it"
    );
    Ok(())
}

mod history;
