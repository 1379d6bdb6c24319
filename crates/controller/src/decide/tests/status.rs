//! What the frame of a pass says in status ([`crate::decide::status`]): one row per fact.

use captf_api::conditions::{Status, reasons, types};
use captf_api::names::ObjectKey;

use super::*;
use crate::decide::status::{
    Dependencies, Dependents, Frame, HeldDeletion, Locked, Readable, RestoreRefused, Set,
    first_visit, frame,
};

fn key() -> ObjectKey {
    ObjectKey::new("team-a", WorkloadKind::Cluster, "demo").expect("a valid key")
}

fn held(state: StateView) -> HeldDeletion {
    HeldDeletion {
        uid: UID.into(),
        namespace_terminating: false,
        state,
        other_abandon: None,
    }
}

/// The condition of `type_` the frame says, as `status reason`, and its message.
fn said<'a>(said: &'a [Set], type_: &str) -> Option<(String, &'a str)> {
    said.iter().rev().find(|s| s.type_ == type_).map(|s| {
        (
            format!("{} {}", s.status.as_str(), s.reason),
            s.message.as_str(),
        )
    })
}

#[test]
fn the_frame_says_what_it_found() {
    let live = Frame {
        paused: Some(false),
        dependencies: Some(Dependencies::Ready),
        ..Default::default()
    };
    let deleting = Frame {
        deleting: true,
        ..live.clone()
    };
    #[rustfmt::skip]
    let rows: Vec<(&str, Frame, &str, Option<&str>, &str)> = vec![
        // (row, frame, condition, status and reason (None: not said), in the message)
        ("a live object is not deleting", live.clone(), types::DELETING, Some("False NotDeleting"), ""),
        ("nor paused", live.clone(), types::PAUSED, Some("False NotPaused"), ""),
        ("its dependencies are ready", live.clone(), types::DEPENDENCIES_READY, Some("True DependenciesReady"), ""),
        ("a paused object says so", Frame { paused: Some(true), ..live.clone() }, types::PAUSED, Some("True Paused"), "cluster.x-k8s.io/paused"),
        ("a missing dependency says what is missing",
            Frame { dependencies: Some(Dependencies::Missing(Status::Unknown, reasons::WAITING_FOR_OWNER, "no Cluster owns it yet".into())), ..live.clone() },
            types::DEPENDENCIES_READY, Some("Unknown WaitingForOwner"), "no Cluster owns it yet"),
        ("a pause not looked at keeps its condition",
            Frame { paused: None, ..live.clone() }, types::PAUSED, None, ""),
        ("dependencies not looked at keep their condition",
            Frame { dependencies: None, ..live.clone() }, types::DEPENDENCIES_READY, None, ""),
        ("a deletion destroys first", deleting.clone(), types::DELETING, Some("True Deleting"), "the infrastructure is destroyed first"),
        ("a paused deletion waits to be unpaused",
            Frame { paused: Some(true), ..deleting.clone() }, types::DELETING, Some("True Deleting"), "waits until the object is unpaused"),
        ("a pause wins over a held deletion",
            Frame { paused: Some(true), held: Some(held(StateView::Lost)), ..deleting.clone() }, types::DELETING, Some("True Deleting"), "unpaused"),
        ("a deletion held on a lost state says both ways out",
            Frame { held: Some(held(StateView::Lost)), ..deleting.clone() }, types::DELETING, Some("True Deleting"),
            "the state is lost (StateReadable), so a destroy cannot know what to remove. Restore a backup with captf.io/restore-state=<serial>"),
        ("a held deletion names the abandon annotation with the object's UID",
            Frame { held: Some(held(StateView::Foreign)), ..deleting.clone() }, types::DELETING, Some("True Deleting"),
            "kubectl annotate terraformcluster demo -n team-a captf.io/abandon-infrastructure=3f7c1c3e-0000-4000-8000-000000000001"),
        ("an abandon naming another UID is said to be ignored",
            Frame { held: Some(HeldDeletion { other_abandon: Some("elsewhere".into()), ..held(StateView::Unreadable) }), ..deleting.clone() },
            types::DELETING, Some("True Deleting"), "captf.io/abandon-infrastructure names elsewhere, not this object's UID: ignored"),
        ("a deletion held in a namespace being deleted says no Job can start there",
            Frame { held: Some(HeldDeletion { namespace_terminating: true, ..held(StateView::Unreadable) }), ..deleting.clone() },
            types::DELETING, Some("True Deleting"), "namespace team-a is being deleted, so no destroy Job can start in it"),
        ("a held deletion wins over the dependents",
            Frame { held: Some(held(StateView::Lost)), dependents: Some(Dependents::Left("1 TerraformMachine(s) left: m".into())), ..deleting.clone() },
            types::DELETING, Some("True Deleting"), "deletion is held"),
        ("a cluster waits for its machines and pools",
            Frame { dependents: Some(Dependents::Left("1 TerraformMachine(s) left: m".into())), ..deleting.clone() },
            types::DELETING, Some("True Deleting"), "waiting for the cluster's machines and pools"),
        ("and says what blocks its deletion",
            Frame { dependents: Some(Dependents::Left("1 TerraformMachine(s) left: m".into())), ..deleting.clone() },
            types::DELETION_BLOCKED, Some("True DependentsExist"), "1 TerraformMachine(s) left: m"),
        ("a cluster with none left is not blocked",
            Frame { dependents: Some(Dependents::None), ..deleting.clone() }, types::DELETION_BLOCKED, Some("False NotBlocked"), ""),
        ("dependents not listed keep DeletionBlocked", deleting.clone(), types::DELETION_BLOCKED, None, ""),
        // StateReadable.
        ("a state not read keeps its condition", live.clone(), types::STATE_READABLE, None, ""),
        ("the object's own state is read", Frame { state: Some(Readable::Read), ..live.clone() }, types::STATE_READABLE, Some("True StateRead"), ""),
        ("no state yet", Frame { state: Some(Readable::NotFound), ..live.clone() }, types::STATE_READABLE, Some("Unknown StateNotFound"), "the first apply creates it"),
        ("a lost state says how to restore it", Frame { state: Some(Readable::Lost), ..live.clone() }, types::STATE_READABLE, Some("False StateLost"), "docs/runbooks/total-state-loss.md"),
        ("an unreadable state says what the reader said",
            Frame { state: Some(Readable::Unreadable { reason: reasons::STATE_CORRUPT, message: "chunk 1 is not gzip".into() }), ..live.clone() },
            types::STATE_READABLE, Some("False StateCorrupt"), "chunk 1 is not gzip"),
        ("another lineage names both and the adoption that takes it",
            Frame { state: Some(Readable::Foreign { found: "L2".into(), expected: "L1".into(), serial: 7 }), ..live.clone() },
            types::STATE_READABLE, Some("False StateLineageMismatch"),
            "lineage L2 (serial 7), but this object's state is lineage L1: it is not this object's state, so nothing runs against it. Restore the object's own state with captf.io/restore-state=<serial> (status.stateBackups), or, if lineage L2 is this object's state now, adopt it: kubectl annotate terraformcluster demo -n team-a captf.io/adopt-state=L2"),
        ("a state without an inputs hash says how to let CAPTF apply over it",
            Frame { state: Some(Readable::Unadopted { lineage: "L1".into(), serial: 3 }), ..live.clone() },
            types::STATE_READABLE, Some("False StateWithoutInputsHash"), "kubectl annotate terraformcluster demo -n team-a captf.io/adopt-state=L1"),
        ("someone else's lock wins, and is never forced",
            Frame { state: Some(Readable::Read), locked: Some(Locked { holder: "held by ci@laptop".into(), id: "abc".into() }), ..live.clone() },
            types::STATE_READABLE, Some("False StateLocked"), "the state lock is held by ci@laptop: not taken by this object's Jobs, so CAPTF never forces it. Release it where it was taken (`tofu force-unlock abc`"),
        // A restore that cannot run.
        ("no restore refused, nothing said", live.clone(), types::RESTORE_JOB_SUCCEEDED, None, ""),
        ("a value that is no serial says what to use",
            Frame { restore: Some(RestoreRefused::NotASerial("latest".into())), ..live.clone() },
            types::RESTORE_JOB_SUCCEEDED, Some("False RestoreBackupNotFound"), "captf.io/restore-state=\"latest\" is not a state serial: use one of status.stateBackups[].serial"),
        ("a serial without a complete backup names those kept",
            Frame { restore: Some(RestoreRefused::NoBackup { serial: "9".into(), kept: vec!["4".into(), "3".into()] }), ..live.clone() },
            types::RESTORE_JOB_SUCCEEDED, Some("False RestoreBackupNotFound"), "no complete backup of serial 9; the backups kept hold serials [4, 3]"),
        // A member waiting for its cluster's Job.
        ("a member never provisioned says whose Job it waits for",
            Frame { cluster_busy: Some(("net".into(), "net-apply-1".into())), ..live.clone() },
            types::APPLY_JOB_SUCCEEDED, Some("Unknown WaitingForClusterOperation"), "TerraformCluster net: its Job net-apply-1 may be writing its state"),
        // A stuck Job deleted by this pass.
        ("a stuck apply says it was deleted and starts again",
            Frame { stuck: Some(("demo-apply-1".into(), Operation::Apply)), ..live.clone() },
            types::APPLY_JOB_SUCCEEDED, Some("False JobNotStarted"), "Job demo-apply-1 never started: its per-run Secret"),
        ("a stuck restore says so on its own condition",
            Frame { stuck: Some(("demo-restore-1".into(), Operation::Restore)), ..live.clone() },
            types::RESTORE_JOB_SUCCEEDED, Some("False JobNotStarted"), "the restore starts again"),
    ];
    for (row, f, type_, want, message) in rows {
        let got = frame(&f, &key());
        let condition = said(&got, type_);
        assert_eq!(condition.as_ref().map(|(s, _)| s.as_str()), want, "{row}");
        if let Some((_, m)) = condition {
            assert!(m.contains(message), "{row}: {m:?} lacks {message:?}");
        }
    }
}

#[test]
fn a_fresh_object_gets_the_defaults_it_lacks() {
    let all = first_visit(|_| false);
    let types: Vec<&str> = all.iter().map(|s| s.type_).collect();
    assert_eq!(
        types,
        [
            types::DRIFT_DETECTED,
            types::DRIFT_JOB_SUCCEEDED,
            types::DELETION_BLOCKED,
            types::APPLY_JOB_SUCCEEDED,
            types::OUTPUTS_VALID,
            types::INFRASTRUCTURE_HEALTHY
        ]
    );
    let kept = first_visit(|t| t == types::APPLY_JOB_SUCCEEDED);
    assert!(kept.iter().all(|s| s.type_ != types::APPLY_JOB_SUCCEEDED));
    assert_eq!(kept.len(), 5);
    assert!(first_visit(|_| true).is_empty());
}
