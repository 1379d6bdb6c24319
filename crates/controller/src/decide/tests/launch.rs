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
