//! The runner against the real OpenTofu and Terraform engines (built by `hack/build-tools.sh`),
//! with the local backend: fingerprints, the destructive guard, approved plans, drift, failures
//! that must end in a result document, and redaction.

mod common;

use captf_runner::drift::Drift;
use captf_runner::plan::{EMPTY_PLAN_HASH, Plan};
use captf_runner::result::ErrorKind;
use common::{Engine, Fixture, PASSWORD, Vars, step_names};

async fn applied(engine: Engine, vars: &Vars) -> Fixture {
    let f = Fixture::new(engine);
    f.configure(vars);
    let out = f.run("apply", &[]).await;
    assert_eq!(
        out.exit, 0,
        "{engine:?} first apply: {:?}",
        out.result.error
    );
    assert_eq!(step_names(&out), ["init", "validate", "apply"]);
    let changes = out.result.changes.expect("apply counts");
    assert_eq!(
        (changes.add, changes.change, changes.destroy),
        (2, 0, 0),
        "{engine:?}"
    );
    let version = out
        .result
        .runtime
        .as_ref()
        .map(|r| r.version.clone())
        .unwrap_or_default();
    assert!(!version.is_empty(), "{engine:?}: runtime version read");
    f
}

async fn fingerprints(engine: Engine) {
    let f = applied(engine, &Vars::default()).await;
    // No change: the empty plan, show-json skipped.
    let out = f.run("plan", &[]).await;
    assert_eq!(out.exit, 0, "{:?}", out.result.error);
    assert_eq!(step_names(&out), ["init", "validate", "plan"]);
    assert_eq!(
        out.result.plan.as_ref().map(|p| p.hash.as_str()),
        Some(EMPTY_PLAN_HASH)
    );

    f.configure(&Vars {
        size: 2,
        ..Vars::default()
    });
    let a = f.run("plan", &[]).await;
    assert_eq!(step_names(&a), ["init", "validate", "plan", "show-json"]);
    let b = f.run("plan", &[]).await;
    let (pa, pb) = (
        a.result.plan.clone().expect("plan"),
        b.result.plan.clone().expect("plan"),
    );
    assert_eq!(
        pa.hash, pb.hash,
        "{engine:?}: the same change hashes the same"
    );
    assert_eq!(
        (pa.create, pa.update, pa.replace, pa.delete),
        (0, 1, 0, 0),
        "{engine:?} {pa:?}"
    );
    assert_eq!(pa.outputs, 1, "{engine:?}: exports changes with node");
    assert_eq!(pa.resources, ["module.role.terraform_data.node (update)"]);

    // The real show -json of the saved plan parses to the same summary.
    let json = f.show_json("plan.tfplan");
    let plan = Plan::from_json(&json).expect("real plan parses");
    assert_eq!(plan.summary(&[42u8; 32]), pa, "{engine:?}");
    assert!(plan.destructive().is_empty());
    let other_key = plan.fingerprint(&[7u8; 32]);
    assert_ne!(other_key, pa.hash, "{engine:?}: keyed");
    // Sensitive values of the real plan are found (the password variable).
    let secrets = plan.sensitive_values();
    assert!(
        secrets.contains(&serde_json::json!(PASSWORD)),
        "{engine:?}: {} sensitive values",
        secrets.len()
    );

    f.configure(&Vars {
        size: 3,
        ..Vars::default()
    });
    let c = f.run("plan", &[]).await;
    assert_ne!(
        c.result.plan.expect("plan").hash,
        pa.hash,
        "{engine:?}: a different change"
    );

    // An output-only change is a non-empty plan (it needs approval) but creates nothing.
    f.configure(&Vars {
        note: "second",
        ..Vars::default()
    });
    let o = f.run("plan", &[]).await.result.plan.expect("plan");
    assert_ne!(o.hash, EMPTY_PLAN_HASH, "{engine:?}");
    assert_eq!(
        (o.create, o.update, o.replace, o.delete, o.outputs),
        (0, 0, 0, 0, 1),
        "{engine:?}"
    );
    // The same real plan read as a drift plan: output-only changes are not drift.
    let real = Plan::from_json(&f.show_json("plan.tfplan")).expect("real plan parses");
    assert!(!Drift::of(&real).detected, "{engine:?}");
    assert_eq!(real.summary(&[42u8; 32]), o);
}

#[tokio::test]
async fn tofu_fingerprints_bind_the_change() {
    fingerprints(Engine::Tofu).await;
}

#[tokio::test]
async fn terraform_fingerprints_bind_the_change() {
    fingerprints(Engine::Terraform).await;
}

async fn guard(engine: Engine) {
    let f = applied(engine, &Vars::default()).await;
    let serial = f.state()["serial"].clone();
    let node_id = |f: &Fixture| -> String {
        let state = f.state();
        let r = state["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .find(|r| r["name"] == "node")
            .cloned()
            .expect("node");
        r["instances"][0]["attributes"]["id"]
            .as_str()
            .expect("id")
            .to_owned()
    };
    let id = node_id(&f);

    // No changes: a guarded apply ends after the plan, successfully, without applying.
    let out = f
        .run("apply", &["--guard-deletes", "--inputs-hash=h2:x"])
        .await;
    assert_eq!(out.exit, 0, "{:?}", out.result.error);
    assert_eq!(step_names(&out), ["init", "validate", "plan"]);

    // A replace is blocked: nothing applied, state untouched.
    let hash = f.configure(&Vars {
        generation: "g2",
        ..Vars::default()
    });
    let out = f
        .run(
            "apply",
            &["--guard-deletes", &format!("--inputs-hash={hash}")],
        )
        .await;
    assert_eq!(out.exit, 1);
    let err = out.result.error.clone().expect("blocked");
    assert_eq!(err.kind, ErrorKind::Blocked);
    assert_eq!(err.step, None);
    assert_eq!(
        err.tail,
        "the plan deletes or replaces 1 resource(s): module.role.terraform_data.node (replace)"
    );
    let plan = out
        .result
        .plan
        .clone()
        .expect("blocked result carries the plan");
    assert_eq!((plan.replace, plan.delete), (1, 0));
    assert_eq!(step_names(&out), ["init", "validate", "plan", "show-json"]);
    assert_eq!(f.state()["serial"], serial, "{engine:?}: state untouched");

    // An approval for other inputs does not count.
    let out = f
        .run(
            "apply",
            &[
                "--guard-deletes",
                &format!("--inputs-hash={hash}"),
                "--allow-deletes-hash=h2:other",
            ],
        )
        .await;
    assert_eq!(out.result.error.map(|e| e.kind), Some(ErrorKind::Blocked));

    // The matching approval applies the saved plan.
    let out = f
        .run(
            "apply",
            &[
                "--guard-deletes",
                &format!("--inputs-hash={hash}"),
                &format!("--allow-deletes-hash={hash}"),
            ],
        )
        .await;
    assert_eq!(out.exit, 0, "{engine:?}: {:?}", out.result.error);
    assert_eq!(
        step_names(&out),
        ["init", "validate", "plan", "show-json", "apply"]
    );
    let c = out.result.changes.expect("counts");
    assert_eq!((c.add, c.destroy), (1, 1), "{engine:?}");
    assert_ne!(node_id(&f), id, "{engine:?}: replaced");
    assert!(out.result.plan.is_none());

    // An update is not destructive: applied without approval.
    f.configure(&Vars {
        generation: "g2",
        size: 5,
        ..Vars::default()
    });
    let out = f
        .run("apply", &["--guard-deletes", "--inputs-hash=h2:y"])
        .await;
    assert_eq!(out.exit, 0, "{engine:?}: {:?}", out.result.error);
    assert_eq!(out.result.changes.map(|c| c.change), Some(1));
}

#[tokio::test]
async fn tofu_guard_blocks_a_replace_until_approved() {
    guard(Engine::Tofu).await;
}

#[tokio::test]
async fn terraform_guard_blocks_a_replace_until_approved() {
    guard(Engine::Terraform).await;
}

#[tokio::test]
async fn a_destructive_approval_lets_through_only_the_plan_it_names() {
    let f = applied(Engine::Tofu, &Vars::default()).await;
    let serial = f.state()["serial"].clone();
    let guarded = |inputs: &str, plan: &str| {
        vec![
            "--guard-deletes".to_owned(),
            format!("--inputs-hash={inputs}"),
            format!("--allow-deletes-plan={plan}"),
        ]
    };
    let f = &f;
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        f.run("apply", &args).await
    };
    let inputs = f.configure(&Vars {
        generation: "g2",
        ..Vars::default()
    });
    let blocked = run(guarded(&inputs, "")).await;
    let approved = blocked.result.plan.expect("the blocked plan").hash;

    // A guarded apply keys its fingerprint with its inputs hash: it needs no plan key, and
    // hashes the same plan the same way without one.
    let mut args = f.args("apply", &guarded(&inputs, ""));
    args.plan_key_file = f.path("no-plan-key");
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let keyless = captf_runner::run(&args, common::env(), rx).await;
    assert_eq!(
        keyless.result.error.map(|e| e.kind),
        Some(ErrorKind::Blocked)
    );
    assert_eq!(keyless.result.plan.map(|p| p.hash), Some(approved.clone()));

    // The plan changed since it was approved (here: other inputs under the same approval):
    // blocked again, naming the approval, nothing applied.
    let other = f.configure(&Vars {
        generation: "g3",
        ..Vars::default()
    });
    let out = run(guarded(&other, &approved)).await;
    let err = out.result.error.expect("blocked again");
    assert_eq!(err.kind, ErrorKind::Blocked);
    assert_eq!(
        err.tail,
        format!(
            "not the approved plan {approved}: the plan deletes or replaces 1 resource(s): module.role.terraform_data.node (replace)"
        )
    );
    assert_ne!(out.result.plan.expect("the new plan").hash, approved);
    assert_eq!(f.state()["serial"], serial, "state untouched");

    // The plan it names applies, deletes included.
    f.configure(&Vars {
        generation: "g2",
        ..Vars::default()
    });
    let out = run(guarded(&inputs, &approved)).await;
    assert_eq!(out.exit, 0, "{:?}", out.result.error);
    assert_eq!(out.result.changes.map(|c| (c.add, c.destroy)), Some((1, 1)));
}

#[tokio::test]
async fn an_approved_plan_applies_only_when_it_plans_the_same() {
    let f = applied(Engine::Tofu, &Vars::default()).await;
    f.configure(&Vars {
        generation: "g2",
        ..Vars::default()
    });
    let planned = f.run("plan", &[]).await.result.plan.expect("plan");
    assert_eq!(planned.replace, 1);

    // Another key hashes the same plan differently: plan-changed, nothing applied.
    let mut args = f.args("apply", &[format!("--expect-plan={}", planned.hash)]);
    args.plan_key_file = f.path("other-key");
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let out = captf_runner::run(&args, common::env(), rx).await;
    let err = out.result.error.expect("plan-changed");
    assert_eq!(err.kind, ErrorKind::PlanChanged);
    assert!(
        err.tail
            .starts_with("the plan changed since it was approved: approved p2:"),
        "{}",
        err.tail
    );
    assert!(err.tail.ends_with("nothing was applied"), "{}", err.tail);
    assert!(out.result.plan.is_some());

    // The approved hash applies, deletes included (no --guard-deletes approval needed).
    let out = f
        .run(
            "apply",
            &[
                &format!("--expect-plan={}", planned.hash),
                "--guard-deletes",
            ],
        )
        .await;
    assert_eq!(out.exit, 0, "{:?}", out.result.error);
    assert_eq!(out.result.changes.map(|c| (c.add, c.destroy)), Some((1, 1)));

    // Approving a change when nothing is left to do: plan-changed against the empty plan.
    let out = f
        .run("apply", &[&format!("--expect-plan={}", planned.hash)])
        .await;
    assert_eq!(
        out.result.error.map(|e| e.kind),
        Some(ErrorKind::PlanChanged)
    );
    assert_eq!(
        out.result.plan.map(|p| p.hash),
        Some(EMPTY_PLAN_HASH.to_owned())
    );
    let out = f
        .run("apply", &[&format!("--expect-plan={EMPTY_PLAN_HASH}")])
        .await;
    assert_eq!(out.exit, 0, "{:?}", out.result.error);
}

async fn drift(engine: Engine) {
    let f = applied(engine, &Vars::default()).await;
    let out = f.run("drift", &[]).await;
    assert_eq!(out.exit, 0, "{:?}", out.result.error);
    assert_eq!(step_names(&out), ["init", "apply-refresh-only", "plan"]);
    assert!(!out.result.drift.expect("drift").detected);

    // Output-only change: not drift. Both engines already write the new output values during
    // `apply -refresh-only`, so the plan after it has no changes at all.
    f.configure(&Vars {
        note: "changed",
        ..Vars::default()
    });
    let out = f.run("drift", &[]).await;
    assert_eq!(out.exit, 0, "{:?}", out.result.error);
    assert_eq!(
        step_names(&out),
        ["init", "apply-refresh-only", "plan"],
        "{engine:?}"
    );
    let d = out.result.drift.expect("drift");
    assert!(!d.detected, "{engine:?}: {d:?}");
    assert!(out.result.plan.is_none());

    // A changed resource is drift, with counts.
    f.configure(&Vars {
        size: 9,
        generation: "g9",
        note: "first",
        ..Vars::default()
    });
    let out = f.run("drift", &[]).await;
    let d = out.result.drift.expect("drift");
    assert!(d.detected, "{engine:?}");
    assert_eq!(
        (d.create, d.update, d.replace, d.delete),
        (0, 0, 1, 0),
        "{engine:?}"
    );
    assert_eq!(d.resources, ["module.role.terraform_data.node"]);

    // Refresh: one step after init, state serial unchanged for terraform_data.
    let out = f.run("refresh", &[]).await;
    assert_eq!(out.exit, 0, "{:?}", out.result.error);
    assert_eq!(step_names(&out), ["init", "apply-refresh-only"]);
}

#[tokio::test]
async fn tofu_drift_counts_resources_not_outputs() {
    drift(Engine::Tofu).await;
}

#[tokio::test]
async fn terraform_drift_counts_resources_not_outputs() {
    drift(Engine::Terraform).await;
}

#[tokio::test]
async fn destroy_empties_the_state() {
    for engine in Engine::ALL {
        let f = applied(engine, &Vars::default()).await;
        let out = f.run("destroy", &[]).await;
        assert_eq!(out.exit, 0, "{engine:?}: {:?}", out.result.error);
        assert_eq!(step_names(&out), ["init", "destroy"]);
        assert_eq!(out.result.changes.map(|c| c.destroy), Some(2), "{engine:?}");
        assert_eq!(f.state()["resources"], serde_json::json!([]), "{engine:?}");
    }
}

#[tokio::test]
async fn bad_input_ends_in_a_result_naming_step_and_cause() {
    let f = Fixture::new(Engine::Tofu);
    // No config at all.
    let out = f.run("apply", &[]).await;
    assert_eq!(out.exit, 1);
    let e = out.result.error.expect("error");
    assert_eq!(
        (e.kind, e.step.as_deref()),
        (ErrorKind::Step, Some("prepare"))
    );
    assert!(e.tail.contains("missing main.tf.json"), "{}", e.tail);
    assert!(out.result.steps.is_empty());

    // Unreadable / short plan key: fingerprinting runs fail closed before any step.
    f.configure(&Vars::default());
    std::fs::write(f.path("short-key"), b"too short").expect("key");
    for key in ["short-key", "missing-key"] {
        let mut args = f.args("plan", &[]);
        args.plan_key_file = f.path(key);
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let out = captf_runner::run(&args, common::env(), rx).await;
        let e = out.result.error.expect("error");
        assert_eq!(e.step.as_deref(), Some("prepare"), "{key}");
        assert!(e.tail.contains("plan key"), "{key}: {}", e.tail);
        assert!(out.result.steps.is_empty());
    }

    // A module that breaks the contract (no `health` output): validate names it.
    let broken = common::MODULE.replace("output \"health\"", "output \"not_health\"");
    std::fs::write(f.path("module/main.tf"), broken).expect("module");
    let out = f.run("apply", &[]).await;
    let e = out.result.error.clone().expect("error");
    assert_eq!(
        (e.kind, e.step.as_deref()),
        (ErrorKind::Step, Some("validate"))
    );
    assert!(e.tail.contains("health"), "{}", e.tail);
    assert_eq!(step_names(&out), ["init", "validate"]);

    // An image without a module or runtime: image-layout, no step.
    std::fs::remove_file(f.path("module/main.tf")).expect("rm");
    let out = f.run("apply", &[]).await;
    let e = out.result.error.expect("error");
    assert_eq!((e.kind, e.step), (ErrorKind::ImageLayout, None));
    assert!(e.tail.contains("has no .tf"), "{}", e.tail);

    // A restore without chunks.
    std::fs::write(f.path("module/main.tf"), common::MODULE).expect("module");
    let out = f.run("restore", &["--restore-chunks=2"]).await;
    let e = out.result.error.expect("error");
    assert_eq!(e.step.as_deref(), Some("prepare"));
    assert!(e.tail.contains("reading backup chunk"), "{}", e.tail);
}

/// Both engines print the diagnostics `error.resources` is read from the same way (see
/// docs/reference/runner.md, "Why apply and destroy print text").
#[tokio::test]
async fn a_failed_apply_reports_resources_and_redacts_secrets() {
    for engine in Engine::ALL {
        failed_apply(engine).await;
    }
}

async fn failed_apply(engine: Engine) {
    let f = applied(engine, &Vars::default()).await;
    f.configure(&Vars {
        fail: true,
        ..Vars::default()
    });
    let out = f.run("apply", &[]).await;
    assert_eq!(out.exit, 1, "{engine:?}");
    let e = out.result.error.clone().expect("error");
    assert_eq!(
        (e.kind, e.step.as_deref()),
        (ErrorKind::Step, Some("apply")),
        "{engine:?}"
    );
    assert!(
        e.tail.contains("local-exec provisioner error"),
        "{engine:?}: {}",
        e.tail
    );
    assert_eq!(
        e.resources,
        ["module.role.terraform_data.fails[0]: local-exec provisioner error"],
        "{engine:?}"
    );
    let doc = String::from_utf8(out.result.encode()).expect("utf-8");
    assert!(
        !doc.contains(common::API_TOKEN) && !doc.contains(PASSWORD),
        "{engine:?}: {doc}"
    );
}
