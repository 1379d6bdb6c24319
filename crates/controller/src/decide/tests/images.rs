//! The image a Job runs: the spec's for an apply or plan of changed inputs, the pinned digest
//! for everything else, and the spec's with a warning when no digest is known.

use super::*;

const PIN: &str = "r.io/m@sha256:1111111111111111111111111111111111111111111111111111111111111111";

fn pinned(s: &mut Snapshot) {
    s.pinned_image = Some(PIN.into());
}

fn remediate(s: &mut Snapshot) {
    s.observed.drift_found = true;
    s.policy.drift_action = DriftAction::Remediate;
}

fn manual(s: &mut Snapshot) {
    s.policy.apply_policy = ApplyPolicy::Manual;
}

#[test]
fn table() {
    use ModuleImage::*;
    use Operation::*;
    let pin = || Pinned(PIN.into());
    let rows: Vec<(&str, Snapshot, Operation, ModuleImage)> = vec![
        (
            "an apply of changed inputs runs the spec's image",
            cluster().with(|s| {
                pinned(s);
                s.inputs_hash = Some("h2:b".into())
            }),
            Apply,
            Spec,
        ),
        (
            "a first apply runs the spec's image",
            cluster().with(|s| s.state = StateView::NotFound),
            Apply,
            Spec,
        ),
        (
            "a retried apply of changed inputs runs the spec's image",
            cluster().with(|s| {
                pinned(s);
                failed_apply(s, "h2:b", 1, 0);
                s.inputs_hash = Some("h2:b".into())
            }),
            Apply,
            Spec,
        ),
        (
            "a remediation runs what the apply ran",
            cluster().with(|s| {
                pinned(s);
                remediate(s)
            }),
            Apply,
            pin(),
        ),
        (
            "a Manual remediation plans with what the apply ran",
            cluster().with(|s| {
                pinned(s);
                remediate(s);
                manual(s)
            }),
            Plan,
            pin(),
        ),
        (
            "a Manual plan of changed inputs runs the spec's image",
            cluster().with(|s| {
                pinned(s);
                manual(s);
                s.inputs_hash = Some("h2:b".into())
            }),
            Plan,
            Spec,
        ),
        (
            "a destroy runs what the apply ran, even for changed inputs",
            cluster().with(|s| {
                pinned(s);
                deleting(s);
                s.inputs_hash = Some("h2:b".into())
            }),
            Destroy,
            pin(),
        ),
        (
            "a destroy without a digest says so",
            cluster().with(|s| {
                deleting(s);
            }),
            Destroy,
            Unpinned,
        ),
        (
            "a drift check runs what the apply ran",
            cluster().with(|s| {
                pinned(s);
                s.observed.last_drift_check = Some(t(0))
            }),
            Drift,
            pin(),
        ),
        (
            "a refresh runs what the apply ran",
            machine().with(|s| {
                pinned(s);
                s.observed.apply_health_definite = false;
                s.observed.last_refresh = Some(t(NOW - 600))
            }),
            Refresh,
            pin(),
        ),
        (
            "a restore runs what the apply ran",
            cluster().with(|s| {
                pinned(s);
                s.state = StateView::Lost;
                s.restore_requested = true
            }),
            Restore,
            pin(),
        ),
    ];
    for (name, snapshot, op, want) in rows {
        let d = decide(&snapshot, t(NOW));
        let Action::Start(start) = d.action else {
            panic!("{name}: want {op} got {d:?}");
        };
        assert_eq!((start.op, start.image), (op, want), "{name}");
    }
}
