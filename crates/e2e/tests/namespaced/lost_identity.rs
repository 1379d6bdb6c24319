//! A lost identity runs nothing (seed 004; spec operations §15.2 (d)): once the
//! TerraformClusterIdentity is deleted, or no longer allows the namespace, no Job starts for
//! the object, not even the destroy when it is deleted; `ApplyJobSucceeded` reads
//! `False/IdentityNotAllowed` (docs/runbooks/stuck-destroy.md), and `kubectl captf abandon`
//! releases the deletion without a destroy.

use captf_api::{TerraformCluster, TerraformClusterIdentity};
use captf_e2e::fixture::*;
use captf_testenv::wait_for;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams};

/// How a case loses the identity.
#[derive(Clone, Copy, Debug)]
enum Loss {
    /// The TerraformClusterIdentity is deleted.
    Deleted,
    /// It allows another namespace only.
    NotAllowed,
}

impl Loss {
    /// The `IdentityAllowed` reason each reads.
    fn reason(self) -> &'static str {
        match self {
            Loss::Deleted => "IdentityNotFound",
            Loss::NotAllowed => "NamespaceNotAllowed",
        }
    }
}

fn held(t: &TerraformCluster, loss: Loss) -> bool {
    has(t, "IdentityAllowed", "False", loss.reason())
        && has(t, "ApplyJobSucceeded", "False", "IdentityNotAllowed")
}

async fn lost_identity(prefix: &str, engine: Engine, loss: Loss) {
    let scene = scene(prefix, &[]).await;
    let (client, ns, manager) = (&scene.client, scene.ns.as_str(), &scene.manager);
    let name = "orphaned";
    create_cluster(client, ns, name, &engine.image("cluster"), "").await;
    let api: Api<TerraformCluster> = Api::namespaced(client.clone(), ns);
    wait_until(&api, name, "Ready", manager, ready).await;
    let jobs_before = job_names(client, ns).await;

    let identities: Api<TerraformClusterIdentity> = Api::all(client.clone());
    let identity = format!("noop-{ns}");
    match loss {
        Loss::Deleted => {
            identities
                .delete(&identity, &DeleteParams::default())
                .await
                .expect("delete the identity");
        }
        Loss::NotAllowed => {
            let patch = serde_json::json!({"spec": {"allowedNamespaces": {"list": ["elsewhere"]}}});
            merge_patch(&identities, &identity, patch).await;
        }
    }
    // New inputs: an apply is due, and must not start.
    let change = serde_json::json!({"spec": {"variables": {"extra_exports": {"token": "two"}}}});
    merge_patch(&api, name, change).await;
    let refused = wait_until(&api, name, "IdentityNotAllowed", manager, |t| held(t, loss)).await;
    let (_, _, message) = condition(&refused, "IdentityAllowed").expect("IdentityAllowed");
    if let Loss::NotAllowed = loss {
        assert!(
            message.contains(&format!("does not allow namespace {ns}")),
            "{message}"
        );
    }
    let warned = event(client, ns, "IdentityNotAllowed").await;
    assert_eq!(warned.type_.as_deref(), Some("Warning"));
    assert_eq!(
        job_names(client, ns).await,
        jobs_before,
        "{loss:?}: a Job ran"
    );

    // Deleted: no destroy either, and the object says so as the runbook's row reads.
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    let deleting = wait_until(&api, name, "the deletion held", manager, |t| {
        t.metadata.deletion_timestamp.is_some()
            && held(t, loss)
            && condition(t, "ApplyJobSucceeded").is_some_and(|c| c.2.contains("IdentityAllowed"))
    })
    .await;
    let finalizer = captf_api::finalizers::TERRAFORM_CLUSTER;
    assert!(deleting.finalizers().iter().any(|f| f == finalizer));
    // Pass after pass decides the destroy, and the Job's first step refuses it.
    passes_of(&api, name, manager, ("destroy", "Deleting"), 3).await;
    assert_eq!(
        job_names(client, ns).await,
        jobs_before,
        "{loss:?}: a destroy ran without the identity"
    );

    // The runbook's way out: abandon, which releases it without a destroy.
    let ran = captf(&scene, &["abandon", &format!("tfc/{name}"), "--yes"], "");
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stdout.contains("abandon requested") && ran.stdout.contains("managed resource block"),
        "{}",
        ran.stdout
    );
    wait_for("the object released", TIMEOUT, || async {
        Ok(api.get_opt(name).await?.is_none().then_some(()))
    })
    .await
    .unwrap_or_else(|e| panic!("{loss:?}: {e}\nmanager log:\n{}", manager.log()));
    let abandoned = event(client, ns, "InfrastructureAbandoned").await;
    let note = abandoned.note.unwrap_or_default();
    assert!(
        note.contains("without a destroy") && note.contains("IdentityNotAllowed"),
        "{note}"
    );
    let jobs = job_names(client, ns).await;
    assert!(
        !jobs.iter().any(|j| j.contains("-destroy-")),
        "{loss:?}: {jobs:?}"
    );
}

#[tokio::test]
async fn a_deleted_identity_runs_no_job_not_even_a_destroy_until_abandoned() {
    lost_identity("identity-gone", OPENTOFU, Loss::Deleted).await;
}

#[tokio::test]
async fn an_identity_that_no_longer_allows_the_namespace_runs_no_job_until_abandoned() {
    lost_identity("identity-denied", TERRAFORM, Loss::NotAllowed).await;
}
