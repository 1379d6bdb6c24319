//! `captf` as a kubectl plugin (`kubectl captf ...`): status, plans and approvals, state,
//! backups and restore, abandon. Reads and writes only what a user could with kubectl; the
//! decisions stay the manager's. docs/reference/cli.md documents every command and exit code.

mod advice;
mod status;
mod workload;

use std::collections::BTreeMap;
use std::io::{BufRead, Write};

use captf_api::annotations::{
    ABANDON_INFRASTRUCTURE, APPROVE_DESTRUCTIVE_PLAN, APPROVE_PLAN, RESTORE_STATE,
};
use captf_api::names::{ObjectKey, WorkloadKind};
use captf_api::{TerraformCluster, TerraformMachine, TerraformMachinePool};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};

use status::LeaseView;
use workload::Workload;

/// Exit codes a script can branch on (0: done).
pub mod exit {
    /// The cluster could not be reached, or answered with an error.
    pub const ERROR: u8 = 1;
    /// The arguments are wrong (also clap's code).
    pub const USAGE: u8 = 2;
    /// The object, plan or backup named does not exist.
    pub const NOT_FOUND: u8 = 3;
    /// Refused: the plan changed since it was shown, the answer was no, or nothing waits.
    pub const REFUSED: u8 = 4;
}

/// How to reach the cluster, as kubectl takes it.
#[derive(clap::Args, Debug, Clone)]
pub struct Connection {
    /// The kubeconfig file; defaults to $KUBECONFIG or ~/.kube/config (or the in-cluster config).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The namespace; defaults to the context's.
    #[arg(long, short = 'n', global = true)]
    pub namespace: Option<String>,
}

/// `-o json|yaml` on every read.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Text,
    Json,
    Yaml,
}

#[derive(clap::Args, Debug, Clone)]
pub struct Output {
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    pub output: Format,
}

/// The plugin's commands.
#[derive(clap::Subcommand, Debug)]
pub enum PluginCommand {
    /// What holds an object back and what to do, its current and last Job, state serial,
    /// backups, leases and pending approvals. Without KIND/NAME: every object of the namespace
    /// that is not Ready or that something holds back (a plan to approve, drift), and why.
    Status {
        /// tfc/<name>, tfm/<name> or tfmp/<name>.
        object: Option<String>,
        #[command(flatten)]
        output: Output,
        #[command(flatten)]
        connection: Connection,
    },
    /// Plans: `plan show KIND/NAME`.
    Plan {
        #[command(subcommand)]
        what: PlanCommand,
        #[command(flatten)]
        connection: Connection,
    },
    /// Approve the plan that waits: shows it, asks, then sets the approval annotation to its
    /// hash; refuses when the plan changed in between.
    Approve {
        object: String,
        /// Approve a plan the destructive guard blocked (`captf.io/approve-destructive-plan`).
        #[arg(long)]
        destructive: bool,
        /// Do not ask (scripts).
        #[arg(long, short = 'y')]
        yes: bool,
        #[command(flatten)]
        connection: Connection,
    },
    /// The object's state: `state show` (decoded by the manager's own reader, sensitive outputs
    /// masked) or `state pull` (the raw state document, to a file).
    State {
        #[command(subcommand)]
        what: StateCommand,
        #[command(flatten)]
        connection: Connection,
    },
    /// Backups: `backups list KIND/NAME`.
    Backups {
        #[command(subcommand)]
        what: BackupsCommand,
        #[command(flatten)]
        connection: Connection,
    },
    /// Restore a backup serial over the object's state (`captf.io/restore-state`), after
    /// saying what it replaces.
    Restore {
        object: String,
        /// The backup's serial (`captf backups list`).
        #[arg(long)]
        serial: i64,
        /// Do not ask (scripts).
        #[arg(long, short = 'y')]
        yes: bool,
        #[command(flatten)]
        connection: Connection,
    },
    /// The logs of the object's Job pods (container `source`, where the runner and the engine
    /// run): the newest pod's, or every pod's, oldest first, with --all.
    Logs {
        object: String,
        /// Every Job pod of the object the cluster still keeps, not only the newest.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        connection: Connection,
    },
    /// Release a held deletion without a destroy (`captf.io/abandon-infrastructure`, set to
    /// the object's UID, read here): says what is left running first.
    Abandon {
        object: String,
        /// Do not ask (scripts).
        #[arg(long, short = 'y')]
        yes: bool,
        #[command(flatten)]
        connection: Connection,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum PlanCommand {
    /// The plan that waits for approval: resources to add, change and destroy.
    Show {
        object: String,
        #[command(flatten)]
        output: Output,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum StateCommand {
    /// Serial, lineage, engine version, resources and outputs. An output the state marks
    /// sensitive (the runner's root marks every contract output so) shows only its type and
    /// size, unless --show-sensitive.
    Show {
        object: String,
        /// Print the values of sensitive outputs too.
        #[arg(long)]
        show_sensitive: bool,
        #[command(flatten)]
        output: Output,
    },
    /// Write the raw state document to a file (mode 0600: it holds secrets).
    Pull {
        object: String,
        /// The file to write.
        #[arg(long, short = 'f', value_name = "FILE")]
        file: std::path::PathBuf,
    },
}

#[derive(clap::Subcommand, Debug)]
pub enum BackupsCommand {
    /// The backups kept for the object, newest first.
    List {
        object: String,
        #[command(flatten)]
        output: Output,
    },
}

/// A failure with the exit code it maps to; the message names the object and what to do.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<kube::Error> for Failure {
    fn from(e: kube::Error) -> Self {
        Failure::new(exit::ERROR, format!("the cluster answered: {e}"))
    }
}

type Result<T> = std::result::Result<T, Failure>;

impl PluginCommand {
    fn connection(&self) -> &Connection {
        match self {
            PluginCommand::Status { connection, .. }
            | PluginCommand::Plan { connection, .. }
            | PluginCommand::Approve { connection, .. }
            | PluginCommand::State { connection, .. }
            | PluginCommand::Backups { connection, .. }
            | PluginCommand::Restore { connection, .. }
            | PluginCommand::Abandon { connection, .. }
            | PluginCommand::Logs { connection, .. } => connection,
        }
    }
}

/// Runs one command; what it prints goes to `out`, questions are read from `input`.
pub async fn run(
    command: PluginCommand,
    out: &mut dyn Write,
    input: &mut dyn BufRead,
) -> Result<()> {
    let (client, namespace) = connect(command.connection()).await?;
    let ctx = Ctx { client, namespace };
    match command {
        PluginCommand::Status {
            object: None,
            output,
            ..
        } => {
            let objects = ctx.list().await?;
            let rows = status::not_ready(&objects);
            match output.output {
                Format::Text => write(out, &status::render_not_ready(&rows, &ctx.namespace)),
                format => print(out, format, &rows),
            }
        }
        PluginCommand::Status {
            object: Some(object),
            output,
            ..
        } => {
            let w = ctx.get(&object).await?;
            let leases = ctx.leases(&w).await?;
            let report = status::report(&w, leases);
            match output.output {
                Format::Text => write(out, &status::render(&report)),
                format => print(out, format, &report),
            }
        }
        PluginCommand::Plan {
            what: PlanCommand::Show { object, output },
            ..
        } => {
            let w = ctx.get(&object).await?;
            let shown = shown_plan(&w)?;
            match output.output {
                Format::Text => write(out, &shown.render()),
                format => print(out, format, &shown),
            }
        }
        PluginCommand::Approve {
            object,
            destructive,
            yes,
            ..
        } => ctx.approve(&object, destructive, yes, out, input).await,
        PluginCommand::Backups {
            what: BackupsCommand::List { object, output },
            ..
        } => {
            let w = ctx.get(&object).await?;
            let backups = w.workspace.state_backups.clone().unwrap_or_default();
            match output.output {
                Format::Text => {
                    let mut text = format!("{:>8}  {:>10}  TAKEN AT\n", "SERIAL", "BYTES");
                    for b in &backups {
                        text.push_str(&format!(
                            "{:>8}  {:>10}  {}\n",
                            b.serial, b.bytes, b.taken_at.0
                        ));
                    }
                    if backups.is_empty() {
                        text = format!("{} has no backups.\n", w.reference());
                    }
                    write(out, &text)
                }
                format => print(out, format, &backups),
            }
        }
        PluginCommand::Restore {
            object,
            serial,
            yes,
            ..
        } => {
            let w = ctx.get(&object).await?;
            let backups = w.workspace.state_backups.clone().unwrap_or_default();
            if !backups.iter().any(|b| b.serial == serial) {
                let kept: Vec<String> = backups.iter().map(|b| b.serial.to_string()).collect();
                return Err(Failure::new(
                    exit::NOT_FOUND,
                    format!(
                        "{} has no backup of serial {serial} (kept: {}); see `kubectl captf backups list {object}`",
                        w.reference(),
                        if kept.is_empty() {
                            "none".to_owned()
                        } else {
                            kept.join(", ")
                        }
                    ),
                ));
            }
            let current = w.workspace.observed_state_serial.map_or_else(
                || "no readable state".to_owned(),
                |s| format!("the state at serial {s}"),
            );
            let question = format!(
                "Replace {current} of {} with its backup of serial {serial}? Resources created since that serial stay in the cloud but leave the state.",
                w.reference()
            );
            confirm(&question, yes, out, input)?;
            ctx.annotate(&w, RESTORE_STATE, &serial.to_string(), None)
                .await?;
            write(
                out,
                &format!(
                    "Restore of serial {serial} requested; follow it with `kubectl captf status {object}`.\n"
                ),
            )
        }
        PluginCommand::Logs { object, all, .. } => {
            let w = ctx.get(&object).await?;
            let pods = ctx.job_pods(&w).await?;
            if pods.is_empty() {
                return Err(Failure::new(
                    exit::NOT_FOUND,
                    format!(
                        "{} has no Job pods left (the history keeps three Jobs of each result; a deleted Job takes its pod)",
                        w.reference()
                    ),
                ));
            }
            let shown = if all {
                &pods[..]
            } else {
                &pods[pods.len() - 1..]
            };
            let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.namespace);
            for pod in shown {
                let name = pod.metadata.name.clone().unwrap_or_default();
                let params = kube::api::LogParams {
                    container: Some("source".to_owned()),
                    ..Default::default()
                };
                let log = match api.logs(&name, &params).await {
                    Ok(log) => log,
                    Err(kube::Error::Api(e)) if e.code == 400 => {
                        format!("(no log yet: {})\n", e.message)
                    }
                    Err(e) => return Err(e.into()),
                };
                write(out, &format!("==> pod {name} <==\n{log}"))?;
                if !log.ends_with('\n') {
                    write(out, "\n")?;
                }
            }
            Ok(())
        }
        PluginCommand::Abandon { object, yes, .. } => {
            let w = ctx.get(&object).await?;
            if !w.deleting {
                return Err(Failure::new(
                    exit::REFUSED,
                    format!(
                        "{} is not being deleted: abandon only releases a held deletion (delete it first)",
                        w.reference()
                    ),
                ));
            }
            let left = ctx
                .state(&w)
                .await
                .map(|s| {
                    format!(
                        "{} managed resource block(s) of state serial {}",
                        s.managed_resources, s.serial
                    )
                })
                .unwrap_or_else(|e| {
                    format!("whatever the unreadable state tracks ({})", e.message)
                });
            let question = format!(
                "Release {} without destroying it? Left running, to clean up by hand: {left}.",
                w.reference()
            );
            confirm(&question, yes, out, input)?;
            ctx.annotate(&w, ABANDON_INFRASTRUCTURE, &w.uid.clone(), None)
                .await?;
            write(
                out,
                &format!(
                    "{} abandon requested (the manager releases it once no destroy can run); left running: {left}.\n",
                    w.reference()
                ),
            )
        }
        PluginCommand::State {
            what:
                StateCommand::Show {
                    object,
                    show_sensitive,
                    output,
                },
            ..
        } => {
            let w = ctx.get(&object).await?;
            let state = ctx.state(&w).await?;
            let shown = StateShown::new(&state, show_sensitive);
            match output.output {
                Format::Text => write(out, &shown.render()),
                format => print(out, format, &shown),
            }
        }
        PluginCommand::State {
            what: StateCommand::Pull { object, file },
            ..
        } => {
            let w = ctx.get(&object).await?;
            let (_, document) = ctx.state_document(&w).await?;
            write_private(&file, &document).map_err(|e| {
                Failure::new(exit::ERROR, format!("cannot write {}: {e}", file.display()))
            })?;
            write(
                out,
                &format!(
                    "wrote the state of {} to {}\n",
                    w.reference(),
                    file.display()
                ),
            )
        }
    }
}

/// Writes `bytes` to a file only the user can read: a file that was there is made so before
/// anything is written into it.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(bytes)
}

fn write(out: &mut dyn Write, text: &str) -> Result<()> {
    out.write_all(text.as_bytes())
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot write the output: {e}")))
}

fn print<T: serde::Serialize>(out: &mut dyn Write, format: Format, value: &T) -> Result<()> {
    let text = match format {
        Format::Yaml => {
            serde_yaml::to_string(value).map_err(|e| Failure::new(exit::ERROR, e.to_string()))?
        }
        _ => {
            serde_json::to_string_pretty(value)
                .map_err(|e| Failure::new(exit::ERROR, e.to_string()))?
                + "\n"
        }
    };
    write(out, &text)
}

/// Asks `question` unless `yes`; anything but y/yes refuses.
fn confirm(question: &str, yes: bool, out: &mut dyn Write, input: &mut dyn BufRead) -> Result<()> {
    if yes {
        return Ok(());
    }
    write(out, &format!("{question} [y/N] "))?;
    let _ = out.flush();
    let mut answer = String::new();
    input
        .read_line(&mut answer)
        .map_err(|e| Failure::new(exit::ERROR, format!("cannot read the answer: {e}")))?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(Failure::new(
            exit::REFUSED,
            "not confirmed: nothing was changed (--yes answers for scripts)",
        )),
    }
}

/// A pending plan as `plan show` and `approve` show it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShownPlan {
    pub object: String,
    pub annotation: &'static str,
    pub hash: String,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub add: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub change: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub destroy: Option<i32>,
    pub resources: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

impl ShownPlan {
    fn render(&self) -> String {
        let mut text = format!(
            "{}: plan {} waits for approval ({})\n",
            self.object, self.hash, self.reason
        );
        if let (Some(a), Some(c), Some(d)) = (self.add, self.change, self.destroy) {
            text.push_str(&format!("  {a} to add, {c} to change, {d} to destroy (a replacement counts as one add and one destroy)\n"));
        }
        for r in &self.resources {
            text.push_str(&format!("  {r}\n"));
        }
        if !self.message.is_empty() {
            text.push_str(&format!("  {}\n", self.message));
        }
        if let Some(job) = &self.job {
            text.push_str(&format!(
                "  the plan Job: {job} (its log has the full plan)\n"
            ));
        }
        text
    }
}

/// The plan that waits: `status.plan` (Manual) or the one the destructive guard blocked.
fn shown_plan(w: &Workload) -> Result<ShownPlan> {
    let pending = status::pending_approvals(w);
    let Some(p) = pending.first() else {
        return Err(Failure::new(
            exit::NOT_FOUND,
            format!(
                "no plan of {} waits for approval; `kubectl captf status {}` says what it waits for",
                w.reference(),
                reference_arg(w)
            ),
        ));
    };
    let apply = w.condition(captf_api::conditions::types::APPLY_JOB_SUCCEEDED);
    let mut shown = ShownPlan {
        object: w.reference(),
        annotation: p.annotation,
        hash: p.hash.clone(),
        reason: p.reason.clone(),
        add: None,
        change: None,
        destroy: None,
        resources: Vec::new(),
        message: String::new(),
        job: None,
    };
    match w.plan.as_ref().filter(|plan| plan.plan_hash == p.hash) {
        Some(plan) => {
            shown.add = Some(plan.add);
            shown.change = Some(plan.change);
            shown.destroy = Some(plan.destroy);
            shown.resources = plan.resources.clone().unwrap_or_default();
            shown.job = Some(plan.job.clone());
        }
        None => {
            shown.message = apply.map(|c| c.message.to_string()).unwrap_or_default();
            if let Some(run) = &w.workspace.last_run {
                shown.job = Some(run.job.clone());
                shown.resources = run
                    .error
                    .as_ref()
                    .and_then(|e| e.resources.clone())
                    .unwrap_or_default();
            }
        }
    }
    Ok(shown)
}

fn reference_arg(w: &Workload) -> String {
    let short = match w.kind() {
        WorkloadKind::Cluster => "tfc",
        WorkloadKind::Machine => "tfm",
        WorkloadKind::MachinePool => "tfmp",
    };
    format!("{short}/{}", w.name)
}

/// What `state show` prints: never an output's value when the state marks it sensitive.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StateShown {
    pub serial: u64,
    pub lineage: String,
    pub engine_version: String,
    pub managed_resources: u64,
    pub chunks: usize,
    pub compressed_bytes: u64,
    pub outputs: BTreeMap<String, serde_json::Value>,
}

impl StateShown {
    fn new(s: &captf_state::DecodedState, show_sensitive: bool) -> Self {
        StateShown {
            serial: s.serial,
            lineage: s.lineage.clone(),
            engine_version: s.terraform_version.clone(),
            managed_resources: s.managed_resources,
            chunks: s.chunks,
            compressed_bytes: s.compressed_bytes,
            outputs: s
                .outputs
                .iter()
                .map(|(k, v)| {
                    let shown = if s.sensitive_outputs.contains(k) && !show_sensitive {
                        serde_json::Value::String(masked(v))
                    } else {
                        v.clone()
                    };
                    (k.clone(), shown)
                })
                .collect(),
        }
    }
}

/// What a sensitive value shows instead of itself: its JSON type and size.
fn masked(value: &serde_json::Value) -> String {
    let kind = match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "bool",
        serde_json::Value::Number(_) => "number",
        serde_json::Value::String(_) => "string",
        serde_json::Value::Array(_) => "list",
        serde_json::Value::Object(_) => "object",
    };
    format!(
        "(sensitive {kind}, {} bytes of JSON)",
        value.to_string().len()
    )
}

impl StateShown {
    fn render(&self) -> String {
        let mut text = format!(
            "serial {}, lineage {}, written by {} ({} managed resource block(s); {} chunk(s), {} bytes compressed)\noutputs:\n",
            self.serial,
            self.lineage,
            self.engine_version,
            self.managed_resources,
            self.chunks,
            self.compressed_bytes
        );
        for (k, v) in &self.outputs {
            text.push_str(&format!("  {k} = {v}\n"));
        }
        text
    }
}

/// The client and namespace, resolved as kubectl resolves them.
async fn connect(c: &Connection) -> Result<(kube::Client, String)> {
    let options = kube::config::KubeConfigOptions {
        context: c.context.clone(),
        ..Default::default()
    };
    let unusable = |e: &dyn std::fmt::Display| {
        Failure::new(
            exit::USAGE,
            format!("no usable Kubernetes configuration: {e}"),
        )
    };
    let config = match &c.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                Failure::new(exit::USAGE, format!("--kubeconfig {}: {e}", path.display()))
            })?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .map_err(|e| unusable(&e))?
        }
        None if c.context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| unusable(&e))?,
        None => kube::Config::infer().await.map_err(|e| unusable(&e))?,
    };
    let namespace = c
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = kube::Client::try_from(config)
        .map_err(|e| Failure::new(exit::ERROR, format!("client: {e}")))?;
    Ok((client, namespace))
}

struct Ctx {
    client: kube::Client,
    namespace: String,
}

impl Ctx {
    async fn get(&self, arg: &str) -> Result<Workload> {
        let (kind, name) =
            workload::parse_reference(arg).map_err(|e| Failure::new(exit::USAGE, e))?;
        let found: Option<Workload> = match kind {
            WorkloadKind::Cluster => {
                Api::<TerraformCluster>::namespaced(self.client.clone(), &self.namespace)
                    .get_opt(&name)
                    .await?
                    .map(Into::into)
            }
            WorkloadKind::Machine => {
                Api::<TerraformMachine>::namespaced(self.client.clone(), &self.namespace)
                    .get_opt(&name)
                    .await?
                    .map(Into::into)
            }
            WorkloadKind::MachinePool => {
                Api::<TerraformMachinePool>::namespaced(self.client.clone(), &self.namespace)
                    .get_opt(&name)
                    .await?
                    .map(Into::into)
            }
        };
        found.ok_or_else(|| {
            Failure::new(
                exit::NOT_FOUND,
                format!(
                    "{}/{name} not found in namespace {} (another namespace? use -n)",
                    kind.kind(),
                    self.namespace
                ),
            )
        })
    }

    async fn list(&self) -> Result<Vec<Workload>> {
        let mut all = self.list_of::<TerraformCluster>().await?;
        all.extend(self.list_of::<TerraformMachine>().await?);
        all.extend(self.list_of::<TerraformMachinePool>().await?);
        Ok(all)
    }

    async fn list_of<K>(&self) -> Result<Vec<Workload>>
    where
        K: kube::Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Into<Workload>,
    {
        let api: Api<K> = Api::namespaced(self.client.clone(), &self.namespace);
        Ok(api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(Into::into)
            .collect())
    }

    fn key(&self, w: &Workload) -> Result<ObjectKey> {
        ObjectKey::new(&w.namespace, w.kind(), &w.name)
            .map_err(|e| Failure::new(exit::ERROR, e.to_string()))
    }

    /// The run lease, the engine's state lock and (for a cluster) its write gate.
    async fn leases(&self, w: &Workload) -> Result<Vec<LeaseView>> {
        let key = self.key(w)?;
        let mut names = vec![(key.run_lease(), "run"), (key.lock_lease(), "state lock")];
        if w.kind() == WorkloadKind::Cluster {
            names.push((
                captf_api::names::cluster_lease(&w.namespace, &w.name),
                "cluster",
            ));
        }
        let api: Api<Lease> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut views = Vec::new();
        for (name, purpose) in names {
            if let Some(lease) = api.get_opt(&name).await? {
                let annotations = lease.metadata.annotations.unwrap_or_default();
                let spec = lease.spec.unwrap_or_default();
                views.push(LeaseView {
                    name,
                    purpose,
                    holder: spec.holder_identity.filter(|h| !h.is_empty()),
                    operation: annotations.get(captf_api::annotations::LEASE_OP).cloned(),
                    acquired_at: spec.acquire_time.map(|t| t.0.to_string()),
                });
            }
        }
        Ok(views)
    }

    /// The pods of the object's Jobs, oldest first.
    async fn job_pods(&self, w: &Workload) -> Result<Vec<Pod>> {
        let selector = format!(
            "{}={},{}={}",
            captf_api::labels::OWNER_KIND,
            w.kind().kind(),
            captf_api::labels::OWNER_NAME,
            captf_api::names::label_value(&w.name)
        );
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut pods = api
            .list(&ListParams::default().labels(&selector))
            .await?
            .items;
        pods.sort_by(|a, b| {
            let key = |p: &Pod| {
                (
                    p.metadata.creation_timestamp.clone().map(|t| t.0),
                    p.metadata.name.clone(),
                )
            };
            key(a).cmp(&key(b))
        });
        Ok(pods)
    }

    /// The state's chunk Secrets, as the manager reads them (by name, chunk after chunk).
    async fn chunks(&self, w: &Workload) -> Result<(String, Vec<captf_state::Chunk>)> {
        let key = self.key(w)?;
        let base = key.state_secret();
        let api: Api<Secret> = Api::namespaced(self.client.clone(), &self.namespace);
        let mut chunks = Vec::new();
        for index in 0..captf_state::Limits::DEFAULT.max_chunks {
            let name = captf_api::names::chunk_name(&base, index);
            let Some(secret) = api.get_opt(&name).await? else {
                break;
            };
            chunks.push(captf_controller::reconcile::observe::state::chunk(
                name, secret,
            ));
        }
        if chunks.is_empty() {
            return Err(Failure::new(
                exit::NOT_FOUND,
                format!(
                    "{} has no state Secret {base}; see docs/runbooks/total-state-loss.md",
                    w.reference()
                ),
            ));
        }
        Ok((base, chunks))
    }

    async fn state(&self, w: &Workload) -> Result<captf_state::DecodedState> {
        let (base, chunks) = self.chunks(w).await?;
        captf_state::decode(&base, &chunks, captf_state::Limits::DEFAULT)
            .map_err(|e| Failure::new(exit::ERROR, format!("{}: {e}", w.reference())))
    }

    /// The decompressed state document, checked by the reader first.
    async fn state_document(&self, w: &Workload) -> Result<(captf_state::DecodedState, Vec<u8>)> {
        let (base, chunks) = self.chunks(w).await?;
        let decoded = captf_state::decode(&base, &chunks, captf_state::Limits::DEFAULT)
            .map_err(|e| Failure::new(exit::ERROR, format!("{}: {e}", w.reference())))?;
        let mut compressed = Vec::new();
        for c in &chunks {
            compressed.extend_from_slice(c.data.as_deref().unwrap_or_default());
        }
        let mut document = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(
                flate2::read::GzDecoder::new(compressed.as_slice()),
                captf_state::Limits::DEFAULT.max_decompressed_bytes as u64,
            ),
            &mut document,
        )
        .map_err(|e| Failure::new(exit::ERROR, format!("{}: {e}", w.reference())))?;
        Ok((decoded, document))
    }

    /// Sets one annotation, only on the version of the object that was read when
    /// `resource_version` is given (a changed object refuses).
    async fn annotate(
        &self,
        w: &Workload,
        key: &str,
        value: &str,
        resource_version: Option<&str>,
    ) -> Result<()> {
        let mut metadata = serde_json::json!({"annotations": {key: value}});
        if let Some(rv) = resource_version {
            metadata["resourceVersion"] = rv.into();
        }
        let patch = serde_json::json!({"metadata": metadata});
        let pp = PatchParams::default();
        let result = match w.kind() {
            WorkloadKind::Cluster => {
                Api::<TerraformCluster>::namespaced(self.client.clone(), &self.namespace)
                    .patch_metadata(&w.name, &pp, &Patch::Merge(&patch))
                    .await
                    .map(drop)
            }
            WorkloadKind::Machine => {
                Api::<TerraformMachine>::namespaced(self.client.clone(), &self.namespace)
                    .patch_metadata(&w.name, &pp, &Patch::Merge(&patch))
                    .await
                    .map(drop)
            }
            WorkloadKind::MachinePool => {
                Api::<TerraformMachinePool>::namespaced(self.client.clone(), &self.namespace)
                    .patch_metadata(&w.name, &pp, &Patch::Merge(&patch))
                    .await
                    .map(drop)
            }
        };
        match result {
            Err(kube::Error::Api(e)) if e.code == 409 => Err(Failure::new(
                exit::REFUSED,
                format!(
                    "{} changed while the plan was shown: nothing was approved; look again with `kubectl captf plan show {}`",
                    w.reference(),
                    reference_arg(w)
                ),
            )),
            other => other.map_err(Failure::from),
        }
    }

    async fn approve(
        &self,
        object: &str,
        destructive: bool,
        yes: bool,
        out: &mut dyn Write,
        input: &mut dyn BufRead,
    ) -> Result<()> {
        let w = self.get(object).await?;
        let shown = shown_plan(&w)?;
        let wanted = if destructive {
            APPROVE_DESTRUCTIVE_PLAN
        } else {
            APPROVE_PLAN
        };
        if shown.annotation != wanted {
            let flag = if shown.annotation == APPROVE_DESTRUCTIVE_PLAN {
                "with --destructive"
            } else {
                "without --destructive"
            };
            return Err(Failure::new(
                exit::REFUSED,
                format!(
                    "the plan of {} that waits is approved {flag} ({}); nothing was approved",
                    w.reference(),
                    shown.reason
                ),
            ));
        }
        write(out, &shown.render())?;
        confirm(
            &format!("Approve plan {} of {}?", shown.hash, w.reference()),
            yes,
            out,
            input,
        )?;
        // The plan must still be the one shown, on the object as it was read.
        let now = self.get(object).await?;
        let still = shown_plan(&now)
            .ok()
            .filter(|p| p.hash == shown.hash && p.annotation == shown.annotation);
        if still.is_none() {
            return Err(Failure::new(
                exit::REFUSED,
                format!(
                    "the plan of {} changed since it was shown: nothing was approved; look again with `kubectl captf plan show {object}`",
                    w.reference()
                ),
            ));
        }
        self.annotate(&now, wanted, &shown.hash, Some(&now.resource_version))
            .await?;
        write(
            out,
            &format!(
                "approved plan {} of {} ({wanted}); follow it with `kubectl captf status {object}`\n",
                shown.hash,
                w.reference()
            ),
        )
    }
}
