//! Starting the Job a pass decided on: Job slot, policy check, what the Job runs (inputs, the
//! last apply's inputs for a destroy, a backup for a restore), run lease, block-move, durable
//! inputs, the Job and its per-run Secret.

use std::time::Duration;

use captf_api::conditions::{Status, reasons, types};
use captf_api::names::WorkloadKind;
use captf_api::{ActiveJob, Operation, annotations};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};

use crate::conditions::Conditions;
use crate::decide::{self, launch, launch::Gates, launch::Held, launch::Step};
use crate::error::{Error, KubeContext, Result};
use crate::job::{EffectivePolicy, JobSpec, build_job, job_owner, per_run_secret};
use crate::reconcile::act::credentials;
use crate::reconcile::act::object::set_block_move;
use crate::reconcile::observe::jobs::{self, ObservedJob};
use crate::reconcile::pass::Pass;
use crate::reconcile::pass::Workload;
use crate::reconcile::{Context, act::secrets, finished::bookkeeping, leases};

pub use crate::decide::launch::GATE_REQUEUE;

/// What a kind contributes to starting one of its Jobs.
pub struct Launch<'a> {
    /// The CAPI Cluster the object belongs to (Job labels, per-cluster Job caps).
    pub cluster_name: String,
    /// `spec.maxActiveJobs` of the cluster, if set.
    pub max_active_jobs: Option<i32>,
    /// The merged Job policy.
    pub policy: EffectivePolicy,
    pub image: &'a str,
    pub pull_policy: Option<captf_api::ImagePullPolicy>,
    pub owner_ref: &'a OwnerReference,
    /// `status.activeJob` as the pass found it: the attempt of a Job that disappeared.
    pub last_active: Option<&'a ActiveJob>,
    pub provisioned: bool,
    /// Pools: the approval hash when the apply renders a change of the cluster's exports (the
    /// apply is then guarded).
    pub approval_hash: Option<String>,
    /// Pools: the exports the apply renders (their hash is recorded once it succeeds), and
    /// whether they are the held exports of the last successful apply.
    pub exports: Option<RenderedExports>,
    /// The state the pass read, which the Job must find when it runs (`--expect-state`);
    /// see [`crate::reconcile::observe::lineage::expected`].
    pub expect_state: Option<captf_runner::expect::ExpectedState>,
}

/// The cluster exports a pool's apply renders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenderedExports {
    pub hash: String,
    /// Held: a blocked exports change is pending and these are the exports of the last
    /// successful apply; the value is the pending change's approval hash
    /// (`captf.io/held-cluster-outputs`).
    pub held: Option<String>,
}

/// What a Job runs: its root module, its variables and their hash.
struct JobInputs {
    main_tf: Vec<u8>,
    tfvars: Vec<u8>,
    hash: String,
}

/// What a pass brings to the start of the Job it decided.
pub struct Starting<'a> {
    pub launch: Launch<'a>,
    pub jobs: &'a [ObservedJob],
    pub start: &'a decide::Start,
    /// The inputs rendered now, if the object renders.
    pub rendered: Option<&'a captf_contract::Rendered>,
    /// How far the credentials got this pass (none ensured: not ready).
    pub creds: Option<&'a credentials::Outcome>,
    /// An apply that disappeared while it ran, recorded on the durable inputs.
    pub interrupted: Option<&'a str>,
    /// The backup a restore restores.
    pub restore: Option<&'a crate::reconcile::backups::BackupSet>,
    /// A dead runner's lock, `(lock id, pod)`, for the Job to release.
    pub force_unlock: Option<&'a (String, String)>,
}

/// What [`Pass::job_spec`] builds the Job from.
struct JobFacts<'a> {
    starting: &'a Starting<'a>,
    identity: &'a str,
    inputs_hash: &'a str,
}

/// What [`Pass::start_job`] did.
pub enum Started {
    Job(ActiveJob),
    /// It had to wait (a condition says why); look again after this long.
    Waiting(Duration),
}

impl<K> Pass<'_, K>
where
    K: Workload + Resource<Scope = kube::core::NamespaceResourceScope>,
{
    /// Whether the decided Job may start now ([`launch::launch`] over the [`Gates`] read
    /// here), and then its steps in that order: what it runs, run lease, cluster gate, its
    /// inputs written, the Job, and what its start says.
    pub async fn start_job(
        &self,
        starting: &Starting<'_>,
        conds: &mut Conditions,
    ) -> Result<Started> {
        let Starting {
            launch,
            start,
            rendered,
            creds,
            restore,
            force_unlock,
            ..
        } = starting;
        let (launch, start, creds) = (launch, *start, *creds);
        let (ctx, key, op) = (self.ctx, self.key, start.op);
        let gates = self.gates(launch, creds, op).await?;
        let steps = match launch::launch(start, &gates) {
            Ok(steps) => steps,
            Err(held) => {
                self.held(op, &held, conds).await;
                let uid = self.object.uid().unwrap_or_default();
                return Ok(Started::Waiting(held.requeue(&uid)));
            }
        };
        let identity = creds.and_then(|c| c.ready.as_deref()).unwrap_or_default();
        let Some(inputs) = self.job_inputs(op, *rendered, *restore, conds).await? else {
            return Ok(Started::Waiting(GATE_REQUEUE));
        };
        let spec = self.job_spec(&JobFacts {
            starting,
            identity,
            inputs_hash: &inputs.hash,
        });
        let job_name = spec.job_name();
        let client = &ctx.client;
        let mut created = None;
        for step in steps {
            match step {
                Step::RunLease => {
                    let holder = leases::For {
                        job: &job_name,
                        op,
                        deadline_seconds: launch.policy.active_deadline_seconds,
                    };
                    let taken =
                        leases::take_run_lease(client, key, &launch.cluster_name, holder).await?;
                    self.lease_look_alike(&key.run_lease(), &taken).await;
                    if taken.held() {
                        crate::failpoint::reached("after-run-lease");
                    } else {
                        let message = "another Job of this object holds its run lease";
                        let reason = reasons::WAITING_FOR_RUN_LEASE;
                        self.waits(op, reason, message, "run_lease", conds).await;
                        return Ok(Started::Waiting(GATE_REQUEUE));
                    }
                }
                Step::ClusterGate => {
                    let cluster = &launch.cluster_name;
                    let holder = leases::For {
                        job: &job_name,
                        op,
                        deadline_seconds: launch.policy.active_deadline_seconds,
                    };
                    if let Some(wait) = self.cluster_gate(cluster, holder, conds).await? {
                        return Ok(Started::Waiting(wait));
                    }
                }
                Step::Inputs => {
                    self.write_job_inputs(launch, &spec, &inputs, identity)
                        .await?;
                    crate::failpoint::reached("before-job");
                }
                Step::Job => match self.create_job(&spec).await? {
                    Ok(job) => {
                        crate::failpoint::reached("after-job");
                        created = Some(job);
                    }
                    Err(refusal) => {
                        self.refused(&job_name, op, &refusal, conds).await;
                        return Ok(Started::Waiting(GATE_REQUEUE));
                    }
                },
                Step::HandOver => {
                    if let Some(job) = &created {
                        self.hand_over(job, op).await;
                    }
                }
            }
        }
        self.announce(&job_name, launch, start, *force_unlock, conds)
            .await;
        Ok(Started::Job(ActiveJob {
            name: job_name,
            operation: op,
            attempt: i32::try_from(spec.attempt).unwrap_or(1),
            start_time: None,
        }))
    }

    /// What [`launch::launch`] weighs, read only now that a Job is due: the credentials the
    /// pass found, the ServiceAccount's consent, the Job caps (from the Job cache), the policy.
    async fn gates(
        &self,
        launch: &Launch<'_>,
        creds: Option<&credentials::Outcome>,
        op: Operation,
    ) -> Result<Gates> {
        let (ctx, ns) = (self.ctx, self.key.namespace());
        let account = &launch.policy.service_account_name;
        Ok(Gates {
            // No outcome: nothing ensured them this pass.
            credentials: creds.is_some_and(|c| c.ready.is_some()),
            service_account: credentials::check_service_account(&ctx.client, ns, account).await?,
            slot: job_slot(ctx, ns, &launch.cluster_name, launch.max_active_jobs, op),
            policy: launch.policy.validate().map_err(|e| e.to_string()),
            cluster_gate: ctx.settings.cluster_operation_gate && !launch.cluster_name.is_empty(),
        })
    }

    /// What the object says while [`launch::launch`] holds its Job.
    async fn held(&self, op: Operation, held: &Held, conds: &mut Conditions) {
        let said = held.said(op);
        if let Some(metric) = said.wait_metric {
            self.waits(op, said.reason, &said.message, metric, conds)
                .await;
            return;
        }
        for type_ in said.conditions {
            let (g, now) = (self.generation, self.now);
            conds.set(type_, said.status, said.reason, &said.message, g, now);
        }
    }

    /// Says that `op` waits (`reason` on its condition, once as an event) and counts the wait
    /// in `captf_lease_waits_total{reason=metric}`.
    async fn waits(
        &self,
        op: Operation,
        reason: &'static str,
        message: &str,
        metric: &'static str,
        conds: &mut Conditions,
    ) {
        let type_ = condition_of(op);
        let already = conds.get(type_).is_some_and(|c| c.reason == reason);
        conds.set(
            type_,
            Status::Unknown,
            reason,
            message,
            self.generation,
            self.now,
        );
        if !already {
            // The event reasons are the condition reasons.
            self.publish(EventType::Normal, reason, message).await;
        }
        let wait = crate::metrics::KindReason {
            kind: self.kind,
            reason: metric,
        };
        self.ctx
            .metrics
            .lease_waits_total
            .get_or_create(&wait)
            .inc();
    }

    /// What the Job runs: the inputs rendered now, or what the last apply rendered (for a
    /// destroy, and for the refreshes and drift checks of an object that renders no more, a
    /// provisioned machine), or a restore's backend-only root. `None` (a condition says why
    /// where it is news) when there is nothing to run yet.
    async fn job_inputs(
        &self,
        op: Operation,
        rendered: Option<&captf_contract::Rendered>,
        restore: Option<&crate::reconcile::backups::BackupSet>,
        conds: &mut Conditions,
    ) -> Result<Option<JobInputs>> {
        let (g, now) = (self.generation, self.now);
        let inputs = match (op, rendered) {
            (Operation::Destroy, _) | (Operation::Refresh | Operation::Drift, None) => {
                let secrets: Api<Secret> =
                    Api::namespaced(self.ctx.client.clone(), self.key.namespace());
                let durable = secrets
                    .get_opt(&self.key.durable_inputs_secret())
                    .await
                    .during(|| "reading the durable inputs".to_owned())?;
                let applied_hash = durable
                    .as_ref()
                    .and_then(|s| s.metadata.annotations.as_ref())
                    .and_then(|a| a.get(captf_api::annotations::INPUTS_HASH))
                    .filter(|_| op != Operation::Destroy)
                    .cloned()
                    .unwrap_or_default();
                let data = durable.and_then(|s| s.data).unwrap_or_default();
                match (
                    data.get(captf_contract::render::MAIN_TF_FILE),
                    data.get(captf_contract::render::TFVARS_FILE),
                ) {
                    (Some(m), Some(t)) => JobInputs {
                        main_tf: m.0.clone(),
                        tfvars: t.0.clone(),
                        hash: applied_hash,
                    },
                    _ if op == Operation::Destroy => {
                        conds.set(types::APPLY_JOB_SUCCEEDED, Status::False, reasons::DESTROY_FAILED, "The durable inputs Secret is missing: a destroy cannot be rendered (docs/runbooks/stuck-destroy.md)", g, now);
                        return Ok(None);
                    }
                    // Nothing was applied yet: nothing to refresh.
                    _ => return Ok(None),
                }
            }
            (Operation::Restore, _) => match restore {
                Some(set) => JobInputs {
                    main_tf: captf_contract::render_restore_root(),
                    tfvars: b"{}".to_vec(),
                    hash: set.inputs_hash.clone().unwrap_or_default(),
                },
                None => return Ok(None),
            },
            (_, Some(r)) => JobInputs {
                main_tf: r.main_tf_json.clone(),
                tfvars: r.tfvars_json.clone(),
                hash: r.inputs_hash.clone(),
            },
            (_, None) => return Ok(None),
        };
        let size = inputs.main_tf.len() + inputs.tfvars.len();
        if size > captf_contract::render::MAX_RENDERED_BYTES {
            conds.set(types::APPLY_JOB_SUCCEEDED, Status::False, reasons::INPUTS_TOO_LARGE, &format!("the rendered root module and tfvars are {size} bytes, over the 1,000,000 a Secret can carry: shrink spec.variables or the cluster's exports"), g, now);
            return Ok(None);
        }
        Ok(Some(inputs))
    }

    /// The Job to start, from what the pass decided and found.
    fn job_spec(&self, f: &JobFacts<'_>) -> JobSpec {
        let (ctx, launch, start) = (self.ctx, &f.starting.launch, f.starting.start);
        let mut spec = JobSpec::new(
            self.key.clone(),
            self.object.uid().unwrap_or_default(),
            launch.cluster_name.clone(),
            start.op,
            match &start.image {
                decide::ModuleImage::Pinned(pin) => pin.clone(),
                decide::ModuleImage::Spec | decide::ModuleImage::Unpinned => {
                    launch.image.to_owned()
                }
            },
            ctx.settings.runner_image.clone(),
            f.identity,
        );
        // A Job that disappeared is not listed any more; never reuse its name (its per-run
        // Secret may still exist, about to be collected with it).
        let lost_attempt = launch
            .last_active
            .filter(|a| {
                a.operation == start.op && !f.starting.jobs.iter().any(|j| j.name == a.name)
            })
            .map_or(0, |a| u32::try_from(a.attempt).unwrap_or(0));
        spec.attempt =
            jobs::next_attempt(f.starting.jobs, start.op).max(lost_attempt.saturating_add(1));
        spec.force_unlock = f.starting.force_unlock.map(|(id, _)| id.clone());
        spec.expect_state = launch.expect_state.clone();
        if let Some(set) = f
            .starting
            .restore
            .filter(|_| start.op == Operation::Restore)
        {
            spec.restore = set.restore_source();
            spec.tick = format!("restore/{}", set.base);
        }
        spec.inputs_hash = f.inputs_hash.to_owned();
        spec.policy = launch.policy.clone();
        spec.pull_policy = launch
            .pull_policy
            .unwrap_or(captf_api::ImagePullPolicy::IfNotPresent);
        match &start.allow_destructive {
            Some(decide::DestructiveApproval::Plan(plan)) => {
                spec.allow_deletes_plan = Some(plan.clone());
            }
            Some(decide::DestructiveApproval::Inputs(hash)) => {
                spec.allow_deletes_hash = Some(hash.clone());
            }
            None => {}
        }
        if start.op == Operation::Apply {
            spec.approval_hash = launch.approval_hash.clone();
            if let Some(exports) = &launch.exports {
                spec.annotations.insert(
                    annotations::CLUSTER_OUTPUTS_HASH.into(),
                    exports.hash.clone(),
                );
                if let Some(pending) = &exports.held {
                    spec.annotations
                        .insert(annotations::HELD_CLUSTER_OUTPUTS.into(), pending.clone());
                }
            }
        }
        spec.expect_plan = start.expect_plan.clone();
        spec.drift_remediation = start.remediation;
        spec.runner_events = ctx.settings.runner_events;
        if !f.inputs_hash.is_empty() {
            spec.annotations
                .insert(annotations::INPUTS_HASH.into(), f.inputs_hash.to_owned());
        }
        let answers = [
            (annotations::RETRY_TOKEN, &start.answers.retry),
            (annotations::REPLAN_TOKEN, &start.answers.replan),
        ];
        for (key, token) in answers {
            if let Some(token) = token {
                spec.annotations.insert(key.into(), token.clone());
            }
        }
        if let Some(lost) = f
            .starting
            .interrupted
            .filter(|_| start.op == Operation::Apply)
        {
            spec.annotations
                .insert(annotations::AFTER_INTERRUPTED_APPLY.into(), lost.to_owned());
        }
        spec
    }

    /// What must exist before the Job does, written at once: none of the four depends on
    /// another, and each is a round trip that the Job's creation would otherwise wait on. The
    /// per-run Secret is among them, so a crash before the Job leaves no pod waiting for its
    /// inputs: the Job's name carries the inputs hash, so a Secret of that name already there
    /// holds these very inputs.
    async fn write_job_inputs(
        &self,
        launch: &Launch<'_>,
        spec: &JobSpec,
        inputs: &JobInputs,
        identity: &str,
    ) -> Result<()> {
        let (client, key, ns) = (&self.ctx.client, self.key, self.key.namespace());
        let job_name = spec.job_name();
        let api: Api<K> = Api::namespaced(client.clone(), ns);
        let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
        let (main_tf, tfvars) = (&inputs.main_tf, &inputs.tfvars);
        let per_run = per_run_secret(ns, &job_name, launch.owner_ref, main_tf, tfvars);
        futures::try_join!(
            async {
                set_block_move(&api, self.object, true).await?;
                // The other inputs are being written meanwhile: some may be, some not.
                crate::failpoint::reached("after-block-move");
                Ok(())
            },
            async {
                if spec.op == Operation::Apply {
                    secrets::write_durable_inputs(
                        client,
                        key,
                        launch.owner_ref,
                        launch.image,
                        main_tf,
                        tfvars,
                        identity,
                    )
                    .await?;
                }
                Ok(())
            },
            async {
                if spec.needs_plan_key() {
                    secrets::ensure_plan_key(client, key, launch.owner_ref).await?;
                }
                Ok(())
            },
            async {
                match secrets.create(&PostParams::default(), &per_run).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
                    Err(source) => Err(Error::Kube {
                        action: format!("creating the per-run Secret of {job_name}"),
                        source,
                    }),
                }
            },
        )?;
        Ok(())
    }

    /// Creates the Job (one of that name already there is the one a crashed pass created);
    /// a refusal gives the run lease back. `Ok(Err(message))`: a ResourceQuota refused it,
    /// which the object says rather than failing the pass.
    async fn create_job(&self, spec: &JobSpec) -> Result<std::result::Result<Job, String>> {
        let (client, ns) = (&self.ctx.client, self.key.namespace());
        let job_name = spec.job_name();
        let job_api: Api<Job> = Api::namespaced(client.clone(), ns);
        match job_api
            .create(&PostParams::default(), &build_job(spec))
            .await
        {
            Ok(j) => Ok(Ok(j)),
            Err(kube::Error::Api(e)) if e.code == 409 => job_api
                .get(&job_name)
                .await
                .during(|| format!("reading Job {ns}/{job_name}"))
                .map(Ok),
            Err(e) => {
                bookkeeping::release_run_lease(client, self.key, &job_name).await;
                match e {
                    kube::Error::Api(e)
                        if e.code == 403 && e.message.contains("exceeded quota") =>
                    {
                        Ok(Err(e.message))
                    }
                    source => Err(Error::Kube {
                        action: format!("creating Job {ns}/{job_name}"),
                        source,
                    }),
                }
            }
        }
    }

    /// `JobNotStarted` for a Job a ResourceQuota refused to create, announced once.
    async fn refused(&self, job_name: &str, op: Operation, refusal: &str, conds: &mut Conditions) {
        use crate::reconcile::observe::unstarted::{self, Cause};

        let why = format!("creating it was refused: {refusal}");
        let text = unstarted::message(job_name, Cause::Quota, &why);
        self.not_started(op, Cause::Quota, &text, conds).await;
    }

    /// Hands the per-run Secret to the Job, so it goes with it; until then (a crash before) it
    /// is the object's, deleted at bookkeeping all the same. Says that an apply started.
    async fn hand_over(&self, job: &Job, op: Operation) {
        let ns = self.key.namespace();
        let job_name = job.metadata.name.clone().unwrap_or_default();
        let uid = job.metadata.uid.clone().unwrap_or_default();
        let secrets: Api<Secret> = Api::namespaced(self.ctx.client.clone(), ns);
        let handed =
            serde_json::json!({"metadata": {"ownerReferences": [job_owner(&job_name, &uid)]}});
        let run_secret = captf_api::names::per_run_secret(&job_name);
        let (params, patch) = (PatchParams::default(), Patch::Merge(&handed));
        let (handed, ()) = futures::join!(secrets.patch(&run_secret, &params, &patch), async {
            if op == Operation::Apply {
                let note = format!("started {job_name}");
                let reason = captf_api::events::INPUTS_CHANGED;
                self.publish_about(EventType::Normal, reason, &note, &job_name)
                    .await;
            }
        });
        if let Err(error) = handed {
            tracing::warn!(namespace = ns, secret = %run_secret, %error, "the per-run Secret stays the object's until bookkeeping deletes it");
        }
    }

    /// What the start of `job_name` says beyond itself: a lock it releases, an image it runs
    /// unpinned, the approved plan it applies, and a first apply's `Provisioning`.
    async fn announce(
        &self,
        job_name: &str,
        launch: &Launch<'_>,
        start: &decide::Start,
        force_unlock: Option<&(String, String)>,
        conds: &mut Conditions,
    ) {
        if let Some((id, pod)) = force_unlock {
            let unlocks = &self.ctx.metrics.lock_force_unlocks_total;
            unlocks
                .get_or_create(&crate::metrics::Kind { kind: self.kind })
                .inc();
            let note = format!(
                "{job_name} force-unlocks the state lock {id} left by pod {pod}, which is gone"
            );
            self.publish(EventType::Warning, captf_api::events::FORCE_UNLOCKED, &note)
                .await;
        }
        if start.image == decide::ModuleImage::Unpinned {
            let note = format!(
                "{job_name} runs spec.source.image {} as written: no digest of an earlier apply is known (captf.io/image-digest on Secret {}), so a tag moved since would run another module",
                launch.image,
                self.key.durable_inputs_secret()
            );
            self.publish(EventType::Warning, captf_api::events::DIGEST_UNKNOWN, &note)
                .await;
        }
        if let Some(plan) = start
            .expect_plan
            .as_deref()
            .filter(|p| !crate::decide::approvals::is_empty(p))
        {
            let note = format!("{job_name} applies the approved plan {plan}");
            self.publish(EventType::Normal, captf_api::events::PLAN_APPROVED, &note)
                .await;
        }
        if start.op == Operation::Apply && !launch.provisioned {
            let message = format!("apply running in Job {job_name}");
            let (g, now) = (self.generation, self.now);
            conds.set(
                types::INFRASTRUCTURE_HEALTHY,
                Status::False,
                reasons::PROVISIONING,
                &message,
                g,
                now,
            );
        }
    }
}

impl<K> Pass<'_, K>
where
    K: Workload + Resource<Scope = kube::core::NamespaceResourceScope>,
{
    /// Names the look-alike a lease was taken from, in a `ForeignLeaseIgnored` event.
    async fn lease_look_alike(&self, lease: &str, taken: &leases::Taken) {
        if let leases::Taken::FromLookAlike(job) = taken {
            let ns = self.key.namespace();
            tracing::warn!(namespace = ns, name = self.key.name(), lease, job = %job, "a lease named a Job no Terraform* object controls: taken over");
            let note = format!(
                "Lease {lease} named Job {job}, which no Terraform* object controls: it held nothing, and the lease was taken for this object's Job. Delete Job {job} if it is not yours"
            );
            let reason = captf_api::events::FOREIGN_LEASE_IGNORED;
            self.publish(EventType::Warning, reason, &note).await;
        }
    }

    /// The cluster operation gate, with the run lease already held: a cluster's writing Job
    /// takes the cluster write lease and waits (holding both) for its machines' and pools'
    /// writing Jobs; theirs give their run lease back and wait while the cluster writes. Both
    /// sides write before they read, so they cannot both go on. `Some` is when to look again.
    async fn cluster_gate(
        &self,
        cluster: &str,
        holder: leases::For<'_>,
        conds: &mut Conditions,
    ) -> Result<Option<Duration>> {
        let (job, op) = (holder.job, holder.op);
        let (client, key) = (&self.ctx.client, self.key);
        let ns = key.namespace();
        let (reason, message, metric) = if key.kind() == WorkloadKind::Cluster {
            let taken = leases::take_cluster_lease(client, ns, cluster, holder).await?;
            let lease = captf_api::names::cluster_lease(ns, cluster);
            self.lease_look_alike(&lease, &taken).await;
            if !taken.held() {
                (
                    reasons::WAITING_FOR_RUN_LEASE,
                    format!("another operation of cluster {cluster} holds its write lease"),
                    "cluster_lease",
                )
            } else {
                let writers = leases::member_writers(client, ns, cluster).await?;
                if writers.is_empty() {
                    return Ok(None);
                }
                let named: Vec<&str> = writers.iter().take(5).map(String::as_str).collect();
                let more = writers.len().saturating_sub(named.len());
                (
                    reasons::WAITING_FOR_MACHINE_OPERATIONS,
                    format!(
                        "{} waits for {} machine and pool Job(s) of cluster {cluster} to finish: {}{}",
                        op.as_str(),
                        writers.len(),
                        named.join(", "),
                        if more > 0 {
                            format!(" and {more} more")
                        } else {
                            String::new()
                        }
                    ),
                    "machine_operations",
                )
            }
        } else {
            let Some(writer) = leases::cluster_writer(client, ns, cluster).await? else {
                return Ok(None);
            };
            leases::release(client, ns, &key.run_lease(), job).await;
            (
                reasons::WAITING_FOR_CLUSTER_OPERATION,
                format!(
                    "{} waits for the cluster's Job {writer} (cluster {cluster} is being written)",
                    op.as_str()
                ),
                "cluster_operation",
            )
        };
        self.waits(op, reason, &message, metric, conds).await;
        Ok(Some(GATE_REQUEUE))
    }
}

pub use crate::decide::launch::condition_of;

/// Whether the caps leave room for one more `op` Job, counted from the Job cache.
pub fn job_slot(
    ctx: &Context,
    namespace: &str,
    cluster_name: &str,
    spec_cap: Option<i32>,
    op: Operation,
) -> std::result::Result<(), crate::slots::Full> {
    let caps = crate::slots::Caps::new(
        ctx.settings.max_active_jobs,
        ctx.settings.cluster_max_active_jobs,
        spec_cap,
    );
    if caps == crate::slots::Caps::default() {
        return Ok(());
    }
    let (global, cluster) = crate::cache::running_jobs(
        &ctx.caches.jobs.state(),
        namespace,
        &captf_api::names::label_value(cluster_name),
    );
    crate::slots::check(op, crate::slots::Running { global, cluster }, caps)
}
