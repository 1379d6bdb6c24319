//! `captf`: one binary for the manager, the runner and the tools. This file parses arguments
//! and wires subcommands; the work lives in the library crates.
#![forbid(unsafe_code)]

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

mod lint_image;
mod plugin;

/// CAPTF, a Cluster API infrastructure provider that runs Terraform or OpenTofu modules in
/// Kubernetes Jobs.
#[derive(Parser, Debug)]
#[command(name = "captf", version = version_string(), disable_version_flag = false)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the version of this binary, the commit it was built from and that commit's date,
    /// its API version and its module contract version.
    Version {
        /// Print them as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Print the CustomResourceDefinitions of every CAPTF kind as YAML.
    Crds {
        /// Write one file per CRD into this folder (as `config/crd/bases/` holds them) instead
        /// of printing a multi-document stream.
        #[arg(long, value_name = "DIR")]
        out_dir: Option<std::path::PathBuf>,
    },
    /// Run the manager: controllers, metrics, probes and leader election.
    Manager(Box<captf_controller::settings::ManagerArgs>),
    /// Check a module against the v1alpha1 module contract, or print its variables schema.
    Lint {
        #[command(subcommand)]
        what: LintCommand,
    },
    /// Disaster recovery: export a namespace's state, backups, durable inputs and objects;
    /// import them paused into a rebuilt cluster; unpause them (docs/runbooks/disaster-recovery.md).
    Dr {
        #[command(subcommand)]
        what: DrCommand,
        /// The kubeconfig to use; defaults to $KUBECONFIG, ~/.kube/config or the in-cluster config.
        #[arg(long, global = true, value_name = "FILE")]
        kubeconfig: Option<std::path::PathBuf>,
    },
    /// The in-Job runner: `copy DST`, `run --op=…`, `version` (see `captf runner --help`).
    #[command(disable_help_flag = true)]
    Runner(captf_runner::Invocation),
    /// The kubectl plugin's commands (`kubectl captf status`, `approve`, ...).
    #[command(flatten)]
    Plugin(plugin::PluginCommand),
}

/// How `captf lint module` and `captf lint image` check and report.
#[derive(clap::Args, Debug)]
struct ReportFlags {
    /// The contract version to check against.
    #[arg(long, default_value = "v1alpha1")]
    contract: String,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Warnings fail the run too.
    #[arg(long)]
    strict: bool,
    /// Rule ids whose warnings are accepted (repeatable, or comma-separated).
    #[arg(long = "allow-warning", value_name = "RULE")]
    allow_warning: Vec<String>,
}

impl ReportFlags {
    /// The module options for `role`.
    fn options(&self, role: Option<captf_lint::Role>) -> captf_lint::Options {
        let mut options = captf_lint::Options {
            role,
            contract: self.contract.clone(),
            strict: self.strict,
            ..Default::default()
        };
        for ids in &self.allow_warning {
            options = options.allow_warning(ids);
        }
        options
    }
}

#[derive(Subcommand, Debug)]
enum LintCommand {
    /// Print the version, the commit and the contract versions the linter checks.
    Version {
        /// Print them as one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Lint a module folder (`*.tf`, `*.tf.json`): every rule of docs/reference/lint.md.
    Module {
        /// The module folder.
        dir: std::path::PathBuf,
        /// The module's role (`cluster`, `machine`, `machinepool`); inferred when omitted.
        #[arg(long)]
        role: Option<String>,
        #[command(flatten)]
        report: ReportFlags,
    },
    /// Lint a module image: the image rules and, on /captf/module, every module rule. The
    /// image is read from its registry or an OCI image layout; nothing of it is run.
    Image {
        /// A registry reference (`ghcr.io/org/module:v1`, `…@sha256:…`), read with the
        /// credentials of the Docker and containers auth files; or `oci:<dir>`, an OCI image
        /// layout.
        image: String,
        /// The module's role (`cluster`, `machine`, `machinepool`).
        #[arg(long)]
        role: String,
        #[command(flatten)]
        report: ReportFlags,
        /// The platform to check, `os/arch[/variant]`: chosen from an index, and checked
        /// against a single image only when given.
        #[arg(long)]
        platform: Option<String>,
        /// Speak plain HTTP to the registry (loopback registries always are).
        #[arg(long)]
        insecure: bool,
        /// Lint every platform of an index, each in its own report.
        #[arg(long, conflicts_with = "platform")]
        all_platforms: bool,
    },
    /// Print the module's variables schema, the value of the image label
    /// io.captf.variables-schema, on one line.
    Schema {
        /// The module folder.
        dir: std::path::PathBuf,
        /// The module's role (`cluster`, `machine`, `machinepool`); inferred when omitted.
        #[arg(long)]
        role: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
enum DrCommand {
    /// Write one namespace's recovery copy: its Terraform* and Cluster API objects, the
    /// identities and variablesFrom sources they name, and the state, backup and durable inputs
    /// Secrets without owner references. The file holds Secrets: protect it like the state.
    Export {
        /// The namespace to copy.
        #[arg(long, short = 'n')]
        namespace: String,
        /// The file to write (mode 0600); standard output when omitted.
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<std::path::PathBuf>,
    },
    /// Restore a copy into the same namespace, paused: Clusters get spec.paused and Terraform*
    /// objects the cluster.x-k8s.io/paused annotation. Refuses when any restored object or
    /// state Secret already exists.
    Import {
        /// The file `captf dr export` wrote.
        #[arg(long, short = 'f', value_name = "FILE")]
        file: std::path::PathBuf,
    },
    /// Unpause what `captf dr import` paused (objects paused in the copy stay paused).
    Unpause {
        /// The file the import read.
        #[arg(long, short = 'f', value_name = "FILE")]
        file: std::path::PathBuf,
        /// Only this object (`Kind/name`, repeatable), with its Cluster.
        #[arg(long = "object", value_name = "KIND/NAME")]
        objects: Vec<String>,
    },
}

/// The arguments, with `runner` inserted when the binary runs under the name `runner`: Jobs
/// copy it to `/captf/bin/runner` (and images ship it as `/runner`) and call it by that name.
fn argv() -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let invoked_as = args.first().and_then(|a| {
        std::path::Path::new(a)
            .file_name()
            .map(|n| n.to_os_string())
    });
    if invoked_as.as_deref() == Some(std::ffi::OsStr::new("runner")) {
        args.insert(1, "runner".into());
    }
    args
}

const fn version_string() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// What `captf version` and `captf lint version` print: text lines, or one JSON object whose
/// `contract` lists the contract versions the linter checks (as `tfcapi-lint version --json`).
fn version(json: bool) -> String {
    let contracts = captf_contract::versions();
    if json {
        let value = serde_json::json!({
            "version": version_string(),
            "commit": captf_controller::COMMIT,
            "date": captf_controller::COMMIT_DATE,
            "api": captf_api::API_VERSION,
            "contract": contracts,
        });
        return format!("{value}\n");
    }
    format!(
        "captf {}\ncommit {}\ndate {}\napi {}\ncontract {}\n",
        version_string(),
        captf_controller::COMMIT,
        captf_controller::COMMIT_DATE,
        captf_api::API_VERSION,
        contracts.join(", ")
    )
}

/// `captf lint` reports usage errors with exit code 3 (2 means an unparsable module).
const LINT_EXIT_USAGE: i32 = 3;

fn main() -> ExitCode {
    let args = argv();
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) if args.get(1).is_some_and(|a| a == "lint") && e.use_stderr() => {
            let _ = e.print();
            std::process::exit(LINT_EXIT_USAGE);
        }
        Err(e) => e.exit(),
    };
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("captf: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    match cli.command {
        Command::Version { json } => stdout.write_all(version(json).as_bytes())?,
        Command::Lint {
            what: LintCommand::Version { json },
        } => stdout.write_all(version(json).as_bytes())?,
        Command::Crds { out_dir: None } => {
            stdout.write_all(captf_api::crds::all_yaml()?.as_bytes())?;
        }
        Command::Crds { out_dir: Some(dir) } => {
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            for crd in captf_api::crds::all() {
                let path = dir.join(captf_api::crds::file_name(&crd));
                std::fs::write(&path, captf_api::crds::to_yaml(&crd)?)
                    .with_context(|| format!("cannot write {}", path.display()))?;
                writeln!(stdout, "wrote {}", path.display())?;
            }
        }
        Command::Manager(args) => {
            drop(stdout);
            init_logging(&args.logging_format, &args.log_filter());
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(captf_controller::manager::run(*args))?;
        }
        Command::Lint {
            what: LintCommand::Module { dir, role, report },
        } => {
            let role = match role.map(|r| r.parse()).transpose() {
                Ok(role) => role,
                Err(e) => {
                    eprintln!("captf lint: --role: {e}");
                    std::process::exit(LINT_EXIT_USAGE);
                }
            };
            let (options, json) = (report.options(role), report.json);
            let report = captf_lint::lint_module(&dir, &options);
            stdout.write_all(
                if json {
                    report.to_json()
                } else {
                    report.to_text()
                }
                .as_bytes(),
            )?;
            stdout.flush()?;
            std::process::exit(report.exit_code(&options));
        }
        Command::Lint {
            what:
                LintCommand::Image {
                    image,
                    role,
                    report,
                    platform,
                    insecure,
                    all_platforms,
                },
        } => {
            let role = match role.parse() {
                Ok(role) => role,
                Err(e) => {
                    eprintln!("captf lint: --role: {e}");
                    std::process::exit(LINT_EXIT_USAGE);
                }
            };
            let (module, json) = (report.options(Some(role)), report.json);
            let explicit = platform.is_some();
            let options = captf_lint::image::ImageOptions {
                module,
                platform: platform.unwrap_or_else(|| "linux/amd64".to_owned()),
            };
            let reference = match image.starts_with("oci:") {
                true => None,
                false => match captf_api::image::parse(&image) {
                    Ok(reference) => Some(reference),
                    Err(e) => {
                        eprintln!("captf lint: {image}: {e}");
                        std::process::exit(LINT_EXIT_USAGE);
                    }
                },
            };
            let request = lint_image::Request {
                image,
                reference,
                options,
                explicit,
                all_platforms,
                insecure,
            };
            let reports = lint_image::run(&request);
            stdout.write_all(lint_image::render(&reports, json, all_platforms).as_bytes())?;
            stdout.flush()?;
            let module = &request.options.module;
            std::process::exit(
                reports
                    .iter()
                    .map(|r| r.exit_code(module))
                    .max()
                    .unwrap_or(0),
            );
        }
        Command::Lint {
            what: LintCommand::Schema { dir, role },
        } => {
            let role = match role.map(|r| r.parse()).transpose() {
                Ok(role) => role,
                Err(e) => {
                    eprintln!("captf lint: --role: {e}");
                    std::process::exit(LINT_EXIT_USAGE);
                }
            };
            match captf_lint::schema::module_label(&dir, role) {
                Ok(label) => writeln!(stdout, "{label}")?,
                Err(e) => {
                    eprintln!("captf lint: {e}");
                    std::process::exit(e.exit_code());
                }
            }
        }
        Command::Plugin(command) => {
            drop(stdout);
            let runtime = tokio::runtime::Runtime::new()?;
            let mut out = std::io::stdout().lock();
            let mut input = std::io::stdin().lock();
            if let Err(failure) = runtime.block_on(plugin::run(command, &mut out, &mut input)) {
                let _ = out.flush();
                eprintln!("captf: {}", failure.message);
                std::process::exit(i32::from(failure.code));
            }
        }
        Command::Dr { what, kubeconfig } => {
            drop(stdout);
            let runtime = tokio::runtime::Runtime::new()?;
            runtime.block_on(dr(what, kubeconfig))?;
        }
        Command::Runner(invocation) => {
            // The runner owns its exit codes (0 ok, 1 failure, 2 usage) and writes to stdout
            // from its own threads.
            drop(stdout);
            std::process::exit(captf_runner::main(invocation));
        }
    }
    Ok(())
}

async fn dr(what: DrCommand, kubeconfig: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    use captf_controller::dr;
    let client = captf_controller::manager::connect(kubeconfig.as_deref()).await?;
    let read = |file: &std::path::Path| -> anyhow::Result<dr::Export> {
        let bytes =
            std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
        dr::Export::from_json(&bytes)
            .with_context(|| format!("{} is not a `captf dr export` document", file.display()))
    };
    // Lines are printed even when the command fails midway: they say what was done.
    let mut lines = Vec::new();
    let outcome = match what {
        DrCommand::Export { namespace, output } => {
            dr::export(&client, &namespace, &dr::now())
                .await
                .map_err(anyhow::Error::from)
                .and_then(|(export, notes)| {
                    let json = export.to_json()?;
                    match &output {
                        Some(path) => write_private(path, &json)?,
                        None => std::io::stdout().lock().write_all(&json)?,
                    }
                    lines = notes.0;
                    lines.push(format!(
                        "exported namespace {namespace}: {} objects, {} Cluster API objects, {} Secrets, {} identities{}",
                        export.objects.len(),
                        export.cluster_api.len(),
                        export.secrets.len(),
                        export.identities.len(),
                        output
                            .map(|p| format!(" to {}", p.display()))
                            .unwrap_or_default()
                    ));
                    Ok(())
                })
        }
        DrCommand::Import { file } => {
            let export = read(&file)?;
            let done = dr::import(&client, &export, &mut lines).await;
            if done.is_ok() {
                lines.push(format!(
                    "restored namespace {} paused; check the Secrets and status.stateSecretSuffix, then run `captf dr unpause -f {}` (or --object Kind/name for one object first)",
                    export.namespace,
                    file.display()
                ));
            } else if !lines.is_empty() {
                lines.push("the import stopped midway: delete what it created (above) before running it again".into());
            }
            done.map_err(anyhow::Error::from)
        }
        DrCommand::Unpause { file, objects } => {
            let export = read(&file)?;
            dr::unpause(&client, &export, &objects, &mut lines)
                .await
                .map_err(anyhow::Error::from)
        }
    };
    let mut err = std::io::stderr().lock();
    for line in lines {
        writeln!(err, "{line}")?;
    }
    outcome
}

/// Writes a file only its owner can read: the copy holds state and credentials.
fn write_private(path: &std::path::Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    // `mode` applies only to a new file: an existing one is narrowed before the copy goes in.
    use std::os::unix::fs::PermissionsExt;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(bytes)?;
    Ok(())
}

/// Structured logs for the manager: JSON by default, text on request.
fn init_logging(format: &str, filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    if format == "text" {
        tracing_subscriber::fmt().with_env_filter(filter).init();
    } else {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    }
}
