//! Drift checks on their schedule: a clean check reports NoDrift, `Report` shows the drift with
//! a summary, `Remediate` re-applies the same inputs (marked as a remediation), and an
//! output-only change is not drift, whether or not the check's plan saw it.

use captf_api::TerraformCluster;
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ListParams};

const IMAGE: &str = "captf.local/modules/noop-cluster:e2e";

#[tokio::test]
async fn drift_checks_report_and_remediate_on_their_schedule() {
    let Scene {
        client,
        ns,
        manager,
        ..
    } = scene("drift", &[]).await;
    // `drift: true` makes every plan update a resource in place: persistent drift.
    let objects = [
        ("clean", "  drift: {intervalSeconds: 20, action: Report}"),
        (
            "reported",
            "  drift: {intervalSeconds: 20, action: Report}\n  variables: {drift: true}",
        ),
        (
            "remediated",
            "  drift: {intervalSeconds: 20, action: Remediate}\n  variables: {drift: true}",
        ),
        // Every plan changes an output and nothing else.
        (
            "outputs",
            "  drift: {intervalSeconds: 20, action: Remediate}\n  variables: {output_drift: true}",
        ),
    ];
    for (name, spec) in objects {
        create_cluster(&client, &ns, name, IMAGE, spec).await;
    }
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), &ns);

    let clean = wait_until(&api, "clean", "a clean drift check", &manager, |t| {
        has(t, "DriftDetected", "False", "NoDrift")
    })
    .await;
    assert!(has(&clean, "DriftJobSucceeded", "True", "DriftChecked"));
    assert!(
        clean
            .status
            .as_ref()
            .and_then(|s| s.workspace.last_drift_check.as_ref())
            .is_some(),
        "lastDriftCheck recorded"
    );

    // An output-only change is not drift. `output_drift` puts the plan's timestamp in an
    // output, which the refresh-only apply of each drift check writes; the check's plan then
    // shows it changed (exit code 2) only when it starts in a later second than that apply,
    // so whether a given check sees it is down to timing. Two checks, each NoDrift, and never
    // remediated below, whichever way their plans went.
    let outputs_checks = std::cell::RefCell::new(std::collections::BTreeMap::new());
    wait_for("two drift checks of \"outputs\"", TIMEOUT, || async {
        let t = api.get("outputs").await?;
        let run = t
            .status
            .as_ref()
            .and_then(|s| s.workspace.last_run.as_ref());
        if let Some(run) = run.filter(|r| r.operation == captf_api::Operation::Drift) {
            assert!(
                has(&t, "DriftDetected", "False", "NoDrift"),
                "an output-only change is not drift: {:?}",
                condition(&t, "DriftDetected")
            );
            let plan_exit = run
                .steps
                .iter()
                .flatten()
                .find(|s| s.name == "plan")
                .map(|s| s.exit_code);
            outputs_checks
                .borrow_mut()
                .insert(run.job.clone(), plan_exit);
        }
        Ok((outputs_checks.borrow().len() >= 2).then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    eprintln!(
        "drift checks of \"outputs\" and their plans' exit codes: {:?}",
        outputs_checks.borrow()
    );

    let reported = wait_until(&api, "reported", "drift reported", &manager, |t| {
        has(t, "DriftDetected", "True", "DriftReported")
    })
    .await;
    let (_, _, summary) = condition(&reported, "DriftDetected").expect("condition");
    assert!(summary.contains("1 to update"), "{summary}");
    // Report only: no second apply.
    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let applies_of = |list: &[Job], name: &str| {
        list.iter()
            .filter(|j| {
                j.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with(&format!("captf-c-{name}-apply-")))
            })
            .cloned()
            .collect::<Vec<Job>>()
    };
    let list = jobs.list(&ListParams::default()).await.expect("Jobs").items;
    assert_eq!(
        applies_of(&list, "reported").len(),
        1,
        "Report never applies"
    );
    assert_eq!(
        applies_of(&list, "outputs").len(),
        1,
        "an output-only change is never remediated"
    );

    // Remediate: an apply of the same inputs, marked as a remediation.
    let remediation = wait_for("a remediation apply", TIMEOUT, || async {
        let list = jobs.list(&ListParams::default()).await?.items;
        Ok(applies_of(&list, "remediated").into_iter().find(|j| {
            j.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key("captf.io/drift-remediation"))
        }))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    let first_apply_hash = |list: &[Job]| {
        applies_of(list, "remediated")
            .first()
            .and_then(|j| j.metadata.annotations.clone())
            .and_then(|a| a.get("captf.io/inputs-hash").cloned())
    };
    let list = jobs.list(&ListParams::default()).await.expect("Jobs").items;
    assert_eq!(
        remediation
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .get("captf.io/inputs-hash")
            .cloned(),
        first_apply_hash(&list),
        "a remediation re-applies the same inputs"
    );
}
