//! Seeding each clone's Job history: the finished, bookkept Jobs the manager left for the
//! template object, renamed, re-labelled and re-owned for the clone, with its inputs hash.
//!
//! A real fleet keeps each object's finished Jobs up to the history limits, and the manager
//! holds them in its Job cache and lists them live in every pass; without them the fleet would
//! look lighter than one the manager made. The clones run nothing: each is created with
//! `spec.managedBy` naming this benchmark, so the Job controller leaves it alone
//! (`JobManagedBy`), and then given the template Job's status (its `Complete` condition, start
//! and completion times). The manager does not read `spec.managedBy`.

use anyhow::Context as _;
use captf_api::annotations;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};

use crate::seed::Cloning;

/// The `spec.managedBy` of every seeded Job: anything but the Job controller's own name keeps
/// that controller from running it.
pub const MANAGED_BY: &str = "bench.captf.io/seeded";

/// Labels the API server sets on a Job's pod template for its selector; a clone gets its own.
const SELECTOR_LABELS: [&str; 4] = [
    "controller-uid",
    "batch.kubernetes.io/controller-uid",
    "job-name",
    "batch.kubernetes.io/job-name",
];

/// The finished, bookkept Jobs in `ns` owned by `uid`, oldest first: the template object's
/// history. An unfinished or unrecorded Job would make the clones' first pass do work.
pub async fn history_of(client: &kube::Client, ns: &str, uid: &str) -> anyhow::Result<Vec<Job>> {
    let api: Api<Job> = Api::namespaced(client.clone(), ns);
    let mut jobs: Vec<Job> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|j| j.owner_references().iter().any(|o| o.uid == uid))
        .collect();
    for job in &jobs {
        anyhow::ensure!(
            finished(job) && job.annotations().contains_key(annotations::BOOKKEPT),
            "the template's Job {ns}/{} is not finished and bookkept",
            job.name_any()
        );
    }
    jobs.sort_by_key(|j| j.creation_timestamp().map(|t| t.0));
    Ok(jobs)
}

fn finished(job: &Job) -> bool {
    job.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
        })
}

/// The template's Job `job` (one of `to.from`'s) for the clone `to`: the same operation,
/// attempt and hash under the clone's name, run by nobody. Without its status: the API server
/// ignores a status on create.
pub fn clone_job(job: &Job, to: &Cloning) -> anyhow::Result<Job> {
    // `captf-<kind>-<name>-<op>-a<attempt>-<hash6>` (`ObjectKey::job_name`).
    let short = to.key.kind().short();
    let old_name = job.name_any();
    let from_prefix = format!("captf-{short}-{}-", to.from.key.name());
    let rest = old_name.strip_prefix(&from_prefix).with_context(|| {
        format!("the template's Job {old_name} is not named after {from_prefix}…")
    })?;
    let name = format!("captf-{short}-{}-{rest}", to.key.name());
    let mut spec = job.spec.clone().context("a Job without spec")?;
    spec.selector = None;
    spec.managed_by = Some(MANAGED_BY.into());
    if let Some(pod_labels) = spec
        .template
        .metadata
        .as_mut()
        .and_then(|m| m.labels.as_mut())
    {
        pod_labels.retain(|k, _| !SELECTOR_LABELS.contains(&k.as_str()));
        for v in pod_labels.values_mut() {
            *v = to.value(v);
        }
    }
    Ok(Job {
        metadata: to.meta(&job.metadata, name),
        spec: Some(spec),
        status: None,
    })
}

/// Creates `clone` and gives it the status of the template's Job `job`: finished, as the Job
/// controller left the template's.
pub async fn create_finished(client: &kube::Client, clone: &Job, job: &Job) -> anyhow::Result<()> {
    let ns = clone.namespace().unwrap_or_default();
    let api: Api<Job> = Api::namespaced(client.clone(), &ns);
    api.create(&PostParams::default(), clone).await?;
    api.patch_status(
        &clone.name_any(),
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({ "status": job.status })),
    )
    .await
    .with_context(|| format!("finishing the seeded Job {ns}/{}", clone.name_any()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seed::Owned;
    use captf_api::labels;
    use captf_api::names::{ObjectKey, WorkloadKind};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    /// Whether `job` carries the label of object `key` that the manager lists its Jobs by.
    fn listed_for(job: &Job, key: &ObjectKey) -> bool {
        job.labels()
            .get(labels::OWNER_NAME)
            .is_some_and(|v| *v == key.owner_name_label())
    }

    fn template_job() -> anyhow::Result<Job> {
        Ok(serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "captf-c-tpl-apply-a1-0a1b2c",
                "namespace": "bench-tpl",
                "uid": "job-uid",
                "resourceVersion": "7",
                "labels": {
                    labels::OWNER_NAME: "tpl",
                    labels::OWNER_KIND: "TerraformCluster",
                    labels::CLUSTER_NAME: "tpl",
                    labels::OP: "apply",
                },
                "annotations": {annotations::INPUTS_HASH: "h2:template", annotations::BOOKKEPT: "true"},
                "ownerReferences": [{"apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1", "kind": "TerraformCluster", "name": "tpl", "uid": "tpl-uid", "controller": true}],
            },
            "spec": {
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "job-uid"}},
                "template": {
                    "metadata": {"labels": {
                        "batch.kubernetes.io/controller-uid": "job-uid",
                        "controller-uid": "job-uid",
                        "job-name": "captf-c-tpl-apply-a1-0a1b2c",
                        "batch.kubernetes.io/job-name": "captf-c-tpl-apply-a1-0a1b2c",
                        labels::OWNER_NAME: "tpl",
                    }},
                    "spec": {"containers": [{"name": "source", "image": "x"}], "restartPolicy": "Never"},
                },
            },
            "status": {"conditions": [{"type": "Complete", "status": "True"}]},
        }))?)
    }

    /// The template cluster `name`, with no Secrets or Jobs of its own.
    fn template_object(name: &str) -> anyhow::Result<Owned> {
        Ok(Owned {
            key: ObjectKey::new("bench-tpl", WorkloadKind::Cluster, name)?,
            uid: "tpl-uid".into(),
            inputs_hash: "h2:template".into(),
            secrets: vec![],
            jobs: vec![],
        })
    }

    #[test]
    fn a_clone_is_the_template_job_of_the_clone() -> anyhow::Result<()> {
        let from = template_object("tpl")?;
        let key = ObjectKey::new("fleet-0001", WorkloadKind::Cluster, "c00101")?;
        let owner = OwnerReference {
            api_version: "infrastructure.cluster.x-k8s.io/v1alpha1".into(),
            kind: "TerraformCluster".into(),
            name: "c00101".into(),
            uid: "clone-uid".into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        };
        let to = Cloning {
            from: &from,
            key: &key,
            owner: &owner,
            inputs_hash: "h2:clone",
            renames: &[],
        };
        let clone = clone_job(&template_job()?, &to)?;

        assert_eq!(clone.name_any(), "captf-c-c00101-apply-a1-0a1b2c");
        assert_eq!(clone.namespace().as_deref(), Some("fleet-0001"));
        assert!(listed_for(&clone, &key));
        assert_eq!(clone.labels()[labels::CLUSTER_NAME], "c00101");
        assert_eq!(clone.labels()[labels::OP], "apply");
        assert_eq!(clone.annotations()[annotations::INPUTS_HASH], "h2:clone");
        assert_eq!(clone.annotations()[annotations::BOOKKEPT], "true");
        assert_eq!(clone.owner_references()[0].uid, "clone-uid");
        assert_eq!(clone.owner_references()[0].controller, Some(true));
        assert!(clone.metadata.uid.is_none() && clone.metadata.resource_version.is_none());
        assert!(clone.status.is_none());
        let spec = clone.spec.context("spec")?;
        assert_eq!(spec.managed_by.as_deref(), Some(MANAGED_BY));
        assert!(spec.selector.is_none());
        let pod_labels = spec.template.metadata.and_then(|m| m.labels);
        assert_eq!(
            pod_labels,
            Some([(labels::OWNER_NAME.to_owned(), "c00101".to_owned())].into())
        );
        Ok(())
    }

    #[test]
    fn a_job_not_named_after_its_object_is_refused() -> anyhow::Result<()> {
        let from = template_object("other")?;
        let key = ObjectKey::new("fleet-0001", WorkloadKind::Cluster, "c00101")?;
        let to = Cloning {
            from: &from,
            key: &key,
            owner: &OwnerReference::default(),
            inputs_hash: "h2:clone",
            renames: &[],
        };
        let refused = clone_job(&template_job()?, &to);
        let Err(err) = refused else {
            anyhow::bail!("a Job of another object was cloned");
        };
        assert!(err.to_string().contains("captf-c-other-"), "{err}");
        Ok(())
    }
}
