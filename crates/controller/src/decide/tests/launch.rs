//! Whether a decided Job starts now, and its steps.

use super::*;
use crate::decide::launch::{Gates, Held, JOB_SLOT_REQUEUE, Step, launch};
use crate::slots::Full;

fn open() -> Gates {
    Gates {
        credentials: true,
        service_account: Ok(()),
        slot: Ok(()),
        policy: Ok(()),
        cluster_gate: true,
    }
}

fn full() -> Full {
    Full {
        scope: "cluster",
        running: 20,
        limit: 20,
        effective: 20,
    }
}

fn gates(edit: impl FnOnce(&mut Gates)) -> Gates {
    let mut g = open();
    edit(&mut g);
    g
}

const WRITE: [Step; 5] = [
    Step::RunLease,
    Step::ClusterGate,
    Step::Inputs,
    Step::Job,
    Step::HandOver,
];
const READ: [Step; 4] = [Step::RunLease, Step::Inputs, Step::Job, Step::HandOver];

/// What a row expects.
type Want = Result<Vec<Step>, Held>;

#[test]
fn table() {
    use Operation::*;
    let refusal = || "ServiceAccount t/deployer has not opted in".to_owned();
    let rows: Vec<(&str, Operation, Gates, Want)> = vec![
        (
            "an apply with every gate open writes, gated",
            Apply,
            open(),
            Ok(WRITE.to_vec()),
        ),
        (
            "a destroy is gated as a write",
            Destroy,
            open(),
            Ok(WRITE.to_vec()),
        ),
        (
            "a restore is gated as a write",
            Restore,
            open(),
            Ok(WRITE.to_vec()),
        ),
        (
            "a refresh reads: no cluster gate",
            Refresh,
            open(),
            Ok(READ.to_vec()),
        ),
        ("a drift check reads", Drift, open(), Ok(READ.to_vec())),
        ("a plan reads", Plan, open(), Ok(READ.to_vec())),
        (
            "without the gate flag, or a Cluster, nothing waits for the cluster",
            Apply,
            gates(|g| g.cluster_gate = false),
            Ok(READ.to_vec()),
        ),
        (
            "no credentials: nothing starts, a destroy neither",
            Destroy,
            gates(|g| g.credentials = false),
            Err(Held::Credentials),
        ),
        (
            "credentials are named before the ServiceAccount",
            Apply,
            gates(|g| {
                g.credentials = false;
                g.service_account = Err(refusal())
            }),
            Err(Held::Credentials),
        ),
        (
            "consent is asked of a destroy too",
            Destroy,
            gates(|g| g.service_account = Err(refusal())),
            Err(Held::ServiceAccount(refusal())),
        ),
        (
            "consent is named before a full cap",
            Drift,
            gates(|g| {
                g.service_account = Err(refusal());
                g.slot = Err(full())
            }),
            Err(Held::ServiceAccount(refusal())),
        ),
        (
            "a full cap holds a destroy",
            Destroy,
            gates(|g| g.slot = Err(full())),
            Err(Held::Slot(full())),
        ),
        (
            "a full cap is named before an invalid policy",
            Apply,
            gates(|g| {
                g.slot = Err(full());
                g.policy = Err("bad".into())
            }),
            Err(Held::Slot(full())),
        ),
        (
            "an invalid policy holds an apply",
            Apply,
            gates(|g| g.policy = Err("bad".into())),
            Err(Held::Policy("bad".into())),
        ),
        (
            "an invalid policy holds a drift check",
            Drift,
            gates(|g| g.policy = Err("bad".into())),
            Err(Held::Policy("bad".into())),
        ),
        (
            "a destroy runs whatever the policy became",
            Destroy,
            gates(|g| g.policy = Err("bad".into())),
            Ok(WRITE.to_vec()),
        ),
        (
            "a restore runs whatever the policy became",
            Restore,
            gates(|g| g.policy = Err("bad".into())),
            Ok(WRITE.to_vec()),
        ),
    ];
    for (name, op, gates, want) in rows {
        let start = Start::op(op);
        assert_eq!(launch(&start, &gates), want, "{name}");
    }
}

#[test]
fn a_full_cap_comes_back_with_the_object_s_jitter() {
    let held = Held::Slot(full());
    assert_eq!(held.requeue(UID), j(JOB_SLOT_REQUEUE));
    assert_eq!(Held::Credentials.requeue(UID), Duration::from_secs(30));
}

#[test]
fn a_held_job_says_why_where_its_operation_reports() {
    use captf_api::conditions::{Status, reasons, types};
    let said = |held: Held, op| {
        let s = held.said(op);
        (s.conditions, s.status, s.reason, s.wait_metric)
    };
    let rows = [
        (
            "no credentials: the apply's condition, refused",
            Held::Credentials,
            Operation::Drift,
            (
                vec![types::APPLY_JOB_SUCCEEDED],
                Status::False,
                reasons::IDENTITY_NOT_ALLOWED,
                None,
            ),
        ),
        (
            "no consent: the runner RBAC's condition too",
            Held::ServiceAccount("not opted in".into()),
            Operation::Destroy,
            (
                vec![types::RUNNER_RBAC_READY, types::APPLY_JOB_SUCCEEDED],
                Status::False,
                reasons::SERVICE_ACCOUNT_NOT_OPTED_IN,
                None,
            ),
        ),
        (
            "a full cap: a wait on the drift check's own condition, counted",
            Held::Slot(full()),
            Operation::Drift,
            (
                vec![types::DRIFT_JOB_SUCCEEDED],
                Status::Unknown,
                reasons::WAITING_FOR_JOB_SLOT,
                Some("job_slot"),
            ),
        ),
        (
            "a full cap holds a restore where restores report",
            Held::Slot(full()),
            Operation::Restore,
            (
                vec![types::RESTORE_JOB_SUCCEEDED],
                Status::Unknown,
                reasons::WAITING_FOR_JOB_SLOT,
                Some("job_slot"),
            ),
        ),
        (
            "an invalid policy: refused",
            Held::Policy("bad".into()),
            Operation::Apply,
            (
                vec![types::APPLY_JOB_SUCCEEDED],
                Status::False,
                reasons::JOB_POLICY_INVALID,
                None,
            ),
        ),
    ];
    for (name, held, op, want) in rows {
        assert_eq!(said(held, op), want, "{name}");
    }
    let message = Held::Slot(full()).said(Operation::Apply).message;
    assert!(
        message.starts_with("apply waits for a Job slot: "),
        "{message}"
    );
}
