//! `captf` as a kubectl plugin (`kubectl captf ...`): status, plans and approvals, state,
//! backups and restore, retry and replan, abandon. Reads and writes only what a user could with
//! kubectl; the decisions stay the manager's. docs/reference/cli.md documents every command and
//! exit code.

mod advice;
mod cluster;
mod plan;
mod requests;
mod state;
mod status;
mod workload;

use std::io::{BufRead, Write};

use captf_api::annotations::ABANDON_INFRASTRUCTURE;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

use cluster::{Ctx, connect};
use plan::shown_plan;
use state::{StateShown, write_private};

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
    /// Start the next attempt of a failed Job now, without waiting out its backoff
    /// (`captf.io/retry`); used up by the next Job the manager starts.
    Retry {
        object: String,
        #[command(flatten)]
        connection: Connection,
    },
    /// Plan again now (`captf.io/replan`): a plan that waits for approval is made again (a
    /// blocked destructive one too), else drift is checked now.
    Replan {
        object: String,
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
            | PluginCommand::Retry { connection, .. }
            | PluginCommand::Replan { connection, .. }
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
            ctx.restore(&w, serial, out).await
        }
        PluginCommand::Retry { object, .. } => ctx.retry(&object, out).await,
        PluginCommand::Replan { object, .. } => ctx.replan(&object, out).await,
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
            ctx.annotate(&w, ABANDON_INFRASTRUCTURE, Some(&w.uid.clone()), None)
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
