//! The runner Job, its per-run Secret and the state backend's labels (operations.md §9,
//! concepts.md §13, §16.1, §21, api.md §4.3).

use std::collections::BTreeMap;

use captf_api::names::{self, ObjectKey, WorkloadKind};
use captf_api::{ImagePullPolicy, Operation, annotations, labels};
use captf_contract::render::{MAIN_TF_FILE, TFVARS_FILE};
use captf_runner::expect::ExpectedState;
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::{Job, JobSpec as K8sJobSpec};
use k8s_openapi::api::core::v1::{
    Container, EmptyDirVolumeSource, EnvFromSource, EnvVar, KeyToPath, PodSpec, PodTemplateSpec,
    ProjectedVolumeSource, Secret, SecretEnvSource, SecretProjection, SecretVolumeSource, Volume,
    VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::policy::{EffectivePolicy, is_reserved_env};
use super::security;

/// Name of the init container that copies the runner.
pub const RUNNER_CONTAINER: &str = "runner";
/// Name of the main container (the module image).
pub const SOURCE_CONTAINER: &str = "source";
/// Where the init container copies the runner (`runner` emptyDir).
pub const RUNNER_BIN_DIR: &str = "/captf/bin";
/// The runner binary inside the main container.
pub const RUNNER_BIN: &str = "/captf/bin/runner";
/// Engine binary in the module image.
pub const RUNTIME_PATH: &str = "/captf/runtime";
/// Role module in the module image.
pub const MODULE_DIR: &str = "/captf/module";
/// Optional provider mirror in the module image.
pub const PROVIDERS_DIR: &str = "/captf/providers";
/// Writable work directory (`work` emptyDir): root module copy, `HOME`, `TF_DATA_DIR`.
pub const WORK_DIR: &str = "/captf/work";
/// Scratch directory (`tmp` emptyDir), the Job's `TMPDIR`.
pub const TMP_DIR: &str = "/tmp";
/// Mount of the per-run Secret (restore: a projection with the backup chunks).
pub const CONFIG_DIR: &str = "/captf/config";
/// Mount of the credential mirror.
pub const CREDENTIALS_DIR: &str = "/var/run/captf/credentials";
/// Mount of the plan key Secret.
pub const PLAN_KEY_DIR: &str = "/captf/plan-key";
/// The plan key's data key and file name.
pub const PLAN_KEY_FILE: &str = "key";
/// Restore Jobs: backup chunk `<i>` is projected at `<config>/restore/<i>`.
pub const RESTORE_CHUNK_DIR: &str = "restore";
/// The data key of a state (and backup) chunk.
pub const STATE_DATA_KEY: &str = "tfstate";
/// Every Secret volume's file mode (0440).
pub const SECRET_FILE_MODE: i32 = 0o440;
/// The pod's termination grace period.
pub const TERMINATION_GRACE_PERIOD_SECONDS: i64 = 600;
/// Margin the runner keeps after its stop timeout to write the result.
pub const STOP_MARGIN_SECONDS: i64 = 30;
/// Kubernetes wire value of Go's `TerminationMessageReadFile`: the result is read from the
/// runner's `/dev/termination-log`.
pub const TERMINATION_MESSAGE_POLICY: &str = "File";

const VOL_RUNNER: &str = "runner";
const VOL_WORK: &str = "work";
const VOL_TMP: &str = "tmp";
const VOL_CONFIG: &str = "config";
const VOL_CREDS: &str = "creds";
const VOL_PLAN_KEY: &str = "plan-key";

/// The backup a restore Job pushes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RestoreSource {
    /// The backup's state serial (`captf.io/restore-serial`).
    pub serial: i64,
    /// The backup's chunk Secrets in chunk order; chunk `i`'s `tfstate` key is projected at
    /// `/captf/config/restore/<i>`.
    pub chunk_secrets: Vec<String>,
    /// The backup's managed resource count (`--restore-resources`).
    pub managed_resources: u64,
    /// The backup's lineage: the restore's result must be this lineage at `serial`
    /// (`--expect-state`, `captf.io/state-lineage` on the Job).
    pub lineage: String,
}

/// Everything [`build_job`] needs for one Job.
#[derive(Clone, Debug, PartialEq)]
pub struct JobSpec {
    /// The owning object.
    pub key: ObjectKey,
    /// The owning object's `metadata.uid` (ownerReference, `--event-object`).
    pub owner_uid: String,
    /// The CAPI Cluster name (`cluster.x-k8s.io/cluster-name`, hashed when over 63 characters).
    pub cluster_name: String,
    /// The operation.
    pub op: Operation,
    /// The attempt counter (`a<N>` in the name).
    pub attempt: u32,
    /// apply/plan: the current rendered inputs hash; refresh/drift/destroy: the hash recorded in
    /// state; restore: the backup's. Part of the name; annotated on apply/plan/restore Jobs.
    pub inputs_hash: String,
    /// The name tick: empty for apply/plan/destroy, `remediate/<last drift check>` for a
    /// remediation apply, the last successful refresh/drift time, `restore/<backup name>`.
    pub tick: String,
    /// The module image to run: `spec.source.image` (apply, plan) or the pinned
    /// `repo@sha256:` digest.
    pub image: String,
    /// `spec.source.imagePullPolicy` (`IfNotPresent` when unset).
    pub pull_policy: ImagePullPolicy,
    /// The manager's `--runner-image` (init container).
    pub runner_image: String,
    /// The merged Job policy.
    pub policy: EffectivePolicy,
    /// The TerraformClusterIdentity whose mirror `captf-creds-<identity>` the Job mounts.
    pub identity: String,
    /// The state backend's `labels` map; [`backend_labels`] of the key and cluster name. It must
    /// never change for an existing object.
    pub backend_labels: BTreeMap<String, String>,
    /// A pool apply that renders a change of the cluster's exports: the approval hash (the pool
    /// inputs hash without `bootstrap_data`). It guards the apply and is what the guard compares
    /// an approval with. Ignored for other kinds and ops (every TerraformCluster apply is guarded
    /// against its inputs hash; machine applies never are).
    pub approval_hash: Option<String>,
    /// The hash a `captf.io/approve-destructive-plan` approval named: the guarded apply lets one
    /// destructive plan through when it equals the guard hash.
    pub allow_deletes_hash: Option<String>,
    /// The plan hash a `captf.io/approve-destructive-plan` approval named (clusters): the
    /// guarded apply lets exactly that plan through.
    pub allow_deletes_plan: Option<String>,
    /// Apply under `applyPolicy: Manual`: the approved plan hash (or the empty-plan hash) the
    /// apply must reproduce.
    pub expect_plan: Option<String>,
    /// The apply remediates drift (`captf.io/drift-remediation`).
    pub drift_remediation: bool,
    /// A stale lock ID the runner force-unlocks right after `init`.
    pub force_unlock: Option<String>,
    /// The state the pass read (`--expect-state`): the runner stops if the backend holds
    /// another when the Job runs. A restore expects its backup instead.
    pub expect_state: Option<ExpectedState>,
    /// Restore Jobs: the backup.
    pub restore: Option<RestoreSource>,
    /// The manager's `--runner-events`: pass `--event-object` and `--job-name`.
    pub runner_events: bool,
    /// Further creation-time Job annotations (`captf.io/after-failed-apply`,
    /// `captf.io/after-interrupted-apply`, `captf.io/cluster-outputs-hash`,
    /// `captf.io/held-cluster-outputs`); the builder's own keys win.
    pub annotations: BTreeMap<String, String>,
}

impl JobSpec {
    /// A spec with the required fields; attempt 1, no inputs hash or tick, `IfNotPresent`, the
    /// built-in policy, the key's backend labels, no guard options, runner events on.
    pub fn new(
        key: ObjectKey,
        owner_uid: impl Into<String>,
        cluster_name: impl Into<String>,
        op: Operation,
        image: impl Into<String>,
        runner_image: impl Into<String>,
        identity: impl Into<String>,
    ) -> Self {
        let cluster_name = cluster_name.into();
        JobSpec {
            backend_labels: backend_labels(&key, &cluster_name),
            key,
            owner_uid: owner_uid.into(),
            cluster_name,
            op,
            attempt: 1,
            inputs_hash: String::new(),
            tick: String::new(),
            image: image.into(),
            pull_policy: ImagePullPolicy::IfNotPresent,
            runner_image: runner_image.into(),
            policy: EffectivePolicy::default(),
            identity: identity.into(),
            approval_hash: None,
            allow_deletes_hash: None,
            allow_deletes_plan: None,
            expect_plan: None,
            drift_remediation: false,
            force_unlock: None,
            expect_state: None,
            restore: None,
            runner_events: true,
            annotations: BTreeMap::new(),
        }
    }

    /// The Job's name, `captf-<c|m|mp>-<name>-<op>-a<attempt>-<hash6>`.
    pub fn job_name(&self) -> String {
        self.key
            .job_name(self.op, self.attempt, &self.inputs_hash, &self.tick)
    }

    /// Whether the apply stops before a plan that deletes or replaces anything
    /// (`--guard-deletes`): every TerraformCluster apply, and a TerraformMachinePool apply that
    /// renders a change of the cluster's exports (`approval_hash` set).
    pub fn guards_deletes(&self) -> bool {
        self.op == Operation::Apply
            && match self.key.kind() {
                WorkloadKind::Cluster => true,
                WorkloadKind::MachinePool => self.approval_hash.is_some(),
                WorkloadKind::Machine => false,
            }
    }

    /// The hash the guard compares an approval with (`--inputs-hash`): the pool's approval hash
    /// when set, else the inputs hash.
    pub fn guard_hash(&self) -> &str {
        match (self.key.kind(), &self.approval_hash) {
            (WorkloadKind::MachinePool, Some(h)) => h,
            _ => &self.inputs_hash,
        }
    }

    fn expect_plan(&self) -> Option<&str> {
        self.expect_plan
            .as_deref()
            .filter(|_| self.op == Operation::Apply)
    }

    /// Whether the runner needs the plan key mounted: plan Jobs and applies of an approved
    /// plan (`--expect-plan`), and no other (seed 004: a module can read it). A guarded apply
    /// keys its fingerprint with its inputs hash. The caller ensures the plan key Secret exists
    /// before creating such a Job.
    pub fn needs_plan_key(&self) -> bool {
        self.op == Operation::Plan || self.expect_plan().is_some()
    }

    /// The runner's `--event-object` value: `<apiVersion>/<kind>/<namespace>/<name>/<uid>`.
    pub fn event_object(&self) -> String {
        format!(
            "{}/{}/{}/{}/{}",
            captf_api::API_VERSION,
            self.key.kind().kind(),
            self.key.namespace(),
            self.key.name(),
            self.owner_uid
        )
    }

    /// What the runner must find: the backup's lineage and serial for a restore, else what the
    /// pass read.
    pub fn expected_state(&self) -> Option<ExpectedState> {
        match self.restore() {
            Some(r) => Some(ExpectedState::Lineage {
                lineage: r.lineage.clone(),
                serial: u64::try_from(r.serial).unwrap_or(0),
            }),
            None => self.expect_state.clone(),
        }
    }

    fn restore(&self) -> Option<&RestoreSource> {
        self.restore
            .as_ref()
            .filter(|_| self.op == Operation::Restore)
    }
}

/// The labels of a Job and its pod: `captf.io/managed=true`, op, attempt, owner kind and name,
/// cluster name (names over 63 characters hashed).
pub fn job_labels(spec: &JobSpec) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::MANAGED.to_owned(), labels::TRUE.to_owned()),
        (labels::OP.to_owned(), spec.op.as_str().to_owned()),
        (labels::ATTEMPT.to_owned(), spec.attempt.to_string()),
        (
            labels::OWNER_KIND.to_owned(),
            spec.key.kind().kind().to_owned(),
        ),
        (labels::OWNER_NAME.to_owned(), spec.key.owner_name_label()),
        (
            labels::CLUSTER_NAME.to_owned(),
            names::label_value(&spec.cluster_name),
        ),
    ])
}

/// The labels the state backend stamps on every chunk and its lock Lease (concepts.md §16.1),
/// also carried by backups: owner kind and name, cluster name (hashed when over 63
/// characters), `captf.io/managed=true` and `clusterctl.cluster.x-k8s.io/move=""`. The backend
/// selects chunks by the whole map, so it must stay the same for the object's life.
pub fn backend_labels(key: &ObjectKey, cluster_name: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::OWNER_KIND.to_owned(), key.kind().kind().to_owned()),
        (labels::OWNER_NAME.to_owned(), key.owner_name_label()),
        (
            labels::CLUSTER_NAME.to_owned(),
            names::label_value(cluster_name),
        ),
        (labels::MANAGED.to_owned(), labels::TRUE.to_owned()),
        (labels::CLUSTERCTL_MOVE.to_owned(), String::new()),
    ])
}

/// `m` as an HCL object constructor with sorted, quoted keys, e.g. `{"a"="b","c"=""}`: the
/// value of the runner's `--backend-config=labels=<this>`, which the runner passes on verbatim
/// as `init -backend-config=labels=<this>` and the engine parses as an HCL expression.
pub fn hcl_map(m: &BTreeMap<String, String>) -> String {
    let parts: Vec<String> = m
        .iter()
        .map(|(k, v)| format!("{}={}", hcl_string(k), hcl_string(v)))
        .collect();
    format!("{{{}}}", parts.join(","))
}

/// A quoted HCL string literal: `\`, `"` and control characters escaped, template sequences
/// (`${`, `%{`) doubled so they stay literal.
fn hcl_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '$' | '%' if chars.peek() == Some(&'{') => {
                out.push(c);
                out.push(c);
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The runner's arguments after `run`, in the documented order (operations.md §9.6).
pub fn runner_args(spec: &JobSpec) -> Vec<String> {
    let mut a = vec![
        format!("--op={}", spec.op),
        format!("--bin={RUNTIME_PATH}"),
        format!("--image={}", spec.image),
        format!("--module={MODULE_DIR}"),
        format!("--providers={PROVIDERS_DIR}"),
        format!("--workdir={WORK_DIR}"),
        format!("--config={CONFIG_DIR}"),
        format!("--lock-timeout={}s", spec.policy.lock_timeout_seconds),
        format!(
            "--stop-timeout={}s",
            TERMINATION_GRACE_PERIOD_SECONDS - STOP_MARGIN_SECONDS
        ),
        format!("--backend-config=secret_suffix={}", spec.key.state_suffix()),
        format!("--backend-config=namespace={}", spec.key.namespace()),
        "--backend-config=in_cluster_config=true".to_owned(),
        format!("--backend-config=labels={}", hcl_map(&spec.backend_labels)),
    ];
    if let Some(id) = spec.force_unlock.as_deref().filter(|s| !s.is_empty()) {
        a.push(format!("--force-unlock={id}"));
    }
    if let Some(expected) = spec.expected_state() {
        a.push(format!("--expect-state={expected}"));
    }
    if spec.guards_deletes() {
        a.push("--guard-deletes".to_owned());
        a.push(format!("--inputs-hash={}", spec.guard_hash()));
        if let Some(h) = spec.allow_deletes_hash.as_deref().filter(|s| !s.is_empty()) {
            a.push(format!("--allow-deletes-hash={h}"));
        }
        if let Some(p) = spec.allow_deletes_plan.as_deref().filter(|s| !s.is_empty()) {
            a.push(format!("--allow-deletes-plan={p}"));
        }
    }
    if let Some(h) = spec.expect_plan() {
        a.push(format!("--expect-plan={h}"));
    }
    if let Some(r) = spec.restore() {
        a.push(format!("--restore-chunks={}", r.chunk_secrets.len()));
        a.push(format!("--restore-resources={}", r.managed_resources));
    }
    if spec.needs_plan_key() {
        a.push(format!("--plan-key-file={PLAN_KEY_DIR}/{PLAN_KEY_FILE}"));
    }
    if spec.runner_events && !spec.owner_uid.is_empty() {
        a.push(format!("--event-object={}", spec.event_object()));
        a.push(format!("--job-name={}", spec.job_name()));
    }
    a
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}

/// The main container's environment: the Job's own variables in the documented order, then the
/// policy's `env` without reserved names.
pub fn main_env(spec: &JobSpec) -> Vec<EnvVar> {
    let mut e = vec![
        env("TF_IN_AUTOMATION", "1"),
        env("TF_INPUT", "0"),
        env("HOME", WORK_DIR),
        env("TMPDIR", TMP_DIR),
        env("KUBE_NAMESPACE", spec.key.namespace()),
        env("CHECKPOINT_DISABLE", "1"),
    ];
    e.extend(
        spec.policy
            .env
            .iter()
            .filter(|v| !is_reserved_env(&v.name))
            .cloned(),
    );
    e
}

fn job_annotations(spec: &JobSpec) -> BTreeMap<String, String> {
    let mut a = spec.annotations.clone();
    if matches!(
        spec.op,
        Operation::Apply | Operation::Plan | Operation::Restore
    ) && !spec.inputs_hash.is_empty()
    {
        a.insert(
            annotations::INPUTS_HASH.to_owned(),
            spec.inputs_hash.clone(),
        );
    }
    if let Some(r) = spec.restore() {
        a.insert(annotations::RESTORE_SERIAL.to_owned(), r.serial.to_string());
        a.insert(annotations::STATE_LINEAGE.to_owned(), r.lineage.clone());
    }
    if spec.op == Operation::Apply {
        if spec.drift_remediation {
            a.insert(
                annotations::DRIFT_REMEDIATION.to_owned(),
                labels::TRUE.to_owned(),
            );
        }
        if let Some(h) = spec.expect_plan() {
            a.insert(annotations::APPROVED_PLAN.to_owned(), h.to_owned());
        }
        if let Some(p) = spec
            .allow_deletes_plan
            .as_deref()
            .filter(|p| spec.guards_deletes() && !p.is_empty())
        {
            a.insert(
                annotations::APPROVED_DESTRUCTIVE_PLAN.to_owned(),
                p.to_owned(),
            );
        }
        if spec.guards_deletes() && spec.key.kind() == WorkloadKind::MachinePool {
            a.insert(
                annotations::APPROVAL_HASH.to_owned(),
                spec.guard_hash().to_owned(),
            );
        }
    }
    a
}

fn secret_volume(name: &str, secret: String, items: Option<Vec<KeyToPath>>) -> Volume {
    Volume {
        name: name.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret),
            default_mode: Some(SECRET_FILE_MODE),
            items,
            optional: None,
        }),
        ..Volume::default()
    }
}

/// What each scratch volume may hold. The node's disk is every tenant's: a module that writes
/// without end is evicted by the kubelet at its limit instead of filling it. The work folder
/// holds the providers `init` installs (the largest are a few hundred MiB each) and the plan
/// files; the runner folder one static binary.
const VOLUME_LIMITS: [(&str, &str); 3] =
    [(VOL_RUNNER, "256Mi"), (VOL_WORK, "8Gi"), (VOL_TMP, "1Gi")];

fn empty_dir(name: &str) -> Volume {
    let limit = VOLUME_LIMITS
        .iter()
        .find(|(volume, _)| *volume == name)
        .map(|(_, limit)| Quantity((*limit).to_owned()));
    Volume {
        name: name.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: limit,
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    }
}

fn key_to_path(key: &str, path: String) -> KeyToPath {
    KeyToPath {
        key: key.to_owned(),
        path,
        mode: None,
    }
}

fn volumes(spec: &JobSpec, job_name: &str) -> Vec<Volume> {
    let run_secret = names::per_run_secret(job_name);
    let config =
        match spec.restore() {
            Some(r) => {
                let mut sources = vec![VolumeProjection {
                    secret: Some(SecretProjection {
                        name: run_secret,
                        ..SecretProjection::default()
                    }),
                    ..VolumeProjection::default()
                }];
                sources.extend(r.chunk_secrets.iter().enumerate().map(|(i, chunk)| {
                    VolumeProjection {
                        secret: Some(SecretProjection {
                            name: chunk.clone(),
                            items: Some(vec![key_to_path(
                                STATE_DATA_KEY,
                                format!("{RESTORE_CHUNK_DIR}/{i}"),
                            )]),
                            optional: None,
                        }),
                        ..VolumeProjection::default()
                    }
                }));
                Volume {
                    name: VOL_CONFIG.to_owned(),
                    projected: Some(ProjectedVolumeSource {
                        default_mode: Some(SECRET_FILE_MODE),
                        sources: Some(sources),
                    }),
                    ..Volume::default()
                }
            }
            None => secret_volume(VOL_CONFIG, run_secret, None),
        };
    let mut v = vec![
        empty_dir(VOL_RUNNER),
        empty_dir(VOL_WORK),
        empty_dir(VOL_TMP),
        config,
        secret_volume(VOL_CREDS, names::credential_mirror(&spec.identity), None),
    ];
    if spec.needs_plan_key() {
        v.push(secret_volume(
            VOL_PLAN_KEY,
            spec.key.plan_key_secret(),
            Some(vec![key_to_path(PLAN_KEY_FILE, PLAN_KEY_FILE.to_owned())]),
        ));
    }
    v
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..VolumeMount::default()
    }
}

fn main_mounts(spec: &JobSpec) -> Vec<VolumeMount> {
    let mut m = vec![
        mount(VOL_RUNNER, RUNNER_BIN_DIR, true),
        mount(VOL_WORK, WORK_DIR, false),
        mount(VOL_TMP, TMP_DIR, false),
        mount(VOL_CONFIG, CONFIG_DIR, true),
        mount(VOL_CREDS, CREDENTIALS_DIR, true),
    ];
    if spec.needs_plan_key() {
        m.push(mount(VOL_PLAN_KEY, PLAN_KEY_DIR, true));
    }
    m
}

fn pull_policy(p: ImagePullPolicy) -> &'static str {
    match p {
        ImagePullPolicy::IfNotPresent => "IfNotPresent",
        ImagePullPolicy::Always => "Always",
        ImagePullPolicy::Never => "Never",
    }
}

/// Whether a `Terraform*` object controls the object of `meta` (the reference
/// [`owner_reference`] sets on every Job the manager creates). Anyone who may create Jobs in a
/// namespace can copy CAPTF's labels; a Job without this reference is a look-alike.
pub fn captf_controlled(meta: &ObjectMeta) -> bool {
    meta.owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && r.api_version == captf_api::API_VERSION)
}

/// The controller reference from a Job to its Terraform* object.
pub fn owner_reference(spec: &JobSpec) -> OwnerReference {
    OwnerReference {
        api_version: captf_api::API_VERSION.to_owned(),
        kind: spec.key.kind().kind().to_owned(),
        name: spec.key.name().to_owned(),
        uid: spec.owner_uid.clone(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// The runner Job for `spec` (operations.md §9): an init container copying the runner from the
/// runner image into the `runner` emptyDir, and the `source` main container running it from
/// there with the module image. Pure: the caller creates it, then the per-run Secret.
pub fn build_job(spec: &JobSpec) -> Job {
    let name = spec.job_name();
    let labels = job_labels(spec);
    let annotations = job_annotations(spec);
    let policy = &spec.policy;
    let pull_secrets =
        super::policy::union_pull_secrets(policy.image_pull_secrets.iter(), [].iter());

    let init = Container {
        name: RUNNER_CONTAINER.to_owned(),
        image: Some(spec.runner_image.clone()),
        command: Some(vec![
            "/runner".to_owned(),
            "copy".to_owned(),
            RUNNER_BIN.to_owned(),
        ]),
        resources: Some(security::init_resources()),
        security_context: Some(security::init_security_context()),
        volume_mounts: Some(vec![mount(VOL_RUNNER, RUNNER_BIN_DIR, false)]),
        ..Container::default()
    };
    let main = Container {
        name: SOURCE_CONTAINER.to_owned(),
        image: Some(spec.image.clone()),
        image_pull_policy: Some(pull_policy(spec.pull_policy).to_owned()),
        command: Some(vec![RUNNER_BIN.to_owned(), "run".to_owned()]),
        args: Some(runner_args(spec)),
        env: Some(main_env(spec)),
        env_from: Some(vec![EnvFromSource {
            secret_ref: Some(SecretEnvSource {
                name: names::credential_mirror(&spec.identity),
                optional: None,
            }),
            ..EnvFromSource::default()
        }]),
        resources: Some(policy.resources.clone()),
        security_context: Some(security::harden_container(policy.security_context.clone())),
        termination_message_policy: Some(TERMINATION_MESSAGE_POLICY.to_owned()),
        volume_mounts: Some(main_mounts(spec)),
        ..Container::default()
    };

    Job {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(spec.key.namespace().to_owned()),
            labels: Some(labels.clone()),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: Some(vec![owner_reference(spec)]),
            ..ObjectMeta::default()
        },
        spec: Some(K8sJobSpec {
            backoff_limit: Some(0),
            active_deadline_seconds: Some(policy.active_deadline_seconds),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    service_account_name: Some(policy.service_account_name.clone()),
                    restart_policy: Some("Never".to_owned()),
                    termination_grace_period_seconds: Some(TERMINATION_GRACE_PERIOD_SECONDS),
                    image_pull_secrets: (!pull_secrets.is_empty()).then_some(pull_secrets),
                    security_context: Some(security::harden_pod(
                        policy.pod_security_context.clone(),
                    )),
                    volumes: Some(volumes(spec, &name)),
                    init_containers: Some(vec![init]),
                    containers: vec![main],
                    ..PodSpec::default()
                }),
            },
            ..K8sJobSpec::default()
        }),
        status: None,
    }
}

/// The per-run Secret `captf-run-<job>` (concepts.md §13.5): exactly `main.tf.json` and
/// `terraform.tfvars.json` (restore: the backend-only root and an empty tfvars), only the label
/// `captf.io/managed=true`, and a controller reference to `owner`. It is written before its
/// Job, owned by the workload object, so a pod never waits for it; once the Job exists it is
/// handed to the Job ([`job_owner`]), so it goes with the Job. Never rewritten otherwise;
/// deleted at bookkeeping.
pub fn per_run_secret(
    namespace: &str,
    job_name: &str,
    owner: &OwnerReference,
    main_tf_json: &[u8],
    tfvars_json: &[u8],
) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(names::per_run_secret(job_name)),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(
                labels::MANAGED.to_owned(),
                labels::TRUE.to_owned(),
            )])),
            owner_references: Some(vec![owner.clone()]),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([
            (MAIN_TF_FILE.to_owned(), ByteString(main_tf_json.to_vec())),
            (TFVARS_FILE.to_owned(), ByteString(tfvars_json.to_vec())),
        ])),
        ..Secret::default()
    }
}

/// The controller reference to Job `job_name` (with `uid`) that its per-run Secret takes once
/// the Job exists.
pub fn job_owner(job_name: &str, uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "batch/v1".to_owned(),
        kind: "Job".to_owned(),
        name: job_name.to_owned(),
        uid: uid.to_owned(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}
