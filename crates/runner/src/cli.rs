//! The command line of `captf runner` (api.md §4.1–4.2).
//!
//! The `captf` binary hands everything after `runner` to [`main`] unparsed ([`Invocation`]), so
//! the runner owns its usage errors: a bad `run` flag still writes a minimal result document
//! (`error.step = "flags"`) and exits [`EXIT_USAGE`](crate::EXIT_USAGE).

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use captf_api::Operation;
use clap::{ArgAction, Parser, Subcommand, ValueEnum};

use crate::redact::Redactor;
use crate::result::ResultDocument;
use crate::{EXIT_FAILURE, EXIT_OK, EXIT_USAGE, VERSION};

/// Default `--result`: the container's termination-message path.
pub const DEFAULT_RESULT: &str = "/dev/termination-log";
/// Default `--stop-timeout` (the Job passes 570s: its 600s grace minus a 30s margin).
pub const DEFAULT_STOP_TIMEOUT: &str = "570s";
/// Default `--plan-key-file`.
pub const DEFAULT_PLAN_KEY_FILE: &str = "/captf/plan-key/key";
/// Default `--credentials`: the mirror Secret's volume.
pub const DEFAULT_CREDENTIALS: &str = "/var/run/captf/credentials";

/// The raw arguments after `captf runner`, parsed by [`main`].
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Invocation {
    /// `copy DST`, `run [flags]` or `version` (see `captf runner --help`).
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<OsString>,
}

/// `captf runner`.
#[derive(Parser, Debug)]
#[command(
    name = "captf runner",
    version = VERSION,
    about = "The in-Job runner: copies itself into a Job and runs one Terraform/OpenTofu operation"
)]
pub struct RunnerCli {
    /// Log format of the runner's own lines (engine output is passed through as it is).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub logging_format: LogFormat,
    /// The command.
    #[command(subcommand)]
    pub command: Option<RunnerCommand>,
}

/// Log formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// The runner's commands.
#[derive(Subcommand, Debug)]
pub enum RunnerCommand {
    /// Copy this executable to DST with mode 0755 (the init container's job).
    Copy {
        /// Destination path.
        dst: PathBuf,
    },
    /// Run one operation and write the result document.
    Run(Box<RunArgs>),
    /// Print the version.
    Version,
}

/// Flags of `captf runner run`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// apply, destroy, refresh, drift, restore or plan.
    #[arg(long, value_parser = parse_op)]
    pub op: Operation,
    /// Runtime command, one element per flag (default /captf/runtime).
    #[arg(long = "bin", value_name = "ARG")]
    pub bin: Vec<String>,
    /// Source image reference, echoed in the result.
    #[arg(long, default_value = "")]
    pub image: String,
    /// Module directory (checked before any step).
    #[arg(long, default_value = "/captf/module")]
    pub module: PathBuf,
    /// Provider mirror directory; used only when it exists.
    #[arg(long, default_value = "/captf/providers")]
    pub providers: PathBuf,
    /// Writable work directory (root module copy, HOME, TF_DATA_DIR).
    #[arg(long, default_value = "/captf/work")]
    pub workdir: PathBuf,
    /// Per-run config (rendered root and tfvars; restore chunks under restore/<i>).
    #[arg(long, default_value = "/captf/config")]
    pub config: PathBuf,
    /// Passed to init as -backend-config=<value>; repeatable.
    #[arg(long = "backend-config", value_name = "KEY=VALUE")]
    pub backend_config: Vec<String>,
    /// State lock timeout (e.g. 300s, 5m).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub lock_timeout: Duration,
    /// Grace for an interrupted step between SIGTERM and SIGKILL.
    #[arg(long, default_value = DEFAULT_STOP_TIMEOUT, value_parser = parse_duration)]
    pub stop_timeout: Duration,
    /// The state the Job was started for: `none` (a first apply) or `<lineage>:<serial>`. The
    /// runner checks it before `init` and right after it, and stops before the engine touches a
    /// state that differs (error kind `state-mismatch`); a restore checks its result against it.
    #[arg(long, value_parser = parse_expected_state)]
    pub expect_state: Option<crate::expect::ExpectedState>,
    /// Stale state lock ID to release right after init.
    #[arg(long, default_value = "")]
    pub force_unlock: String,
    /// Apply: stop before a plan that deletes or replaces anything unless approved.
    #[arg(long, action = ArgAction::Set, num_args = 0..=1, default_missing_value = "true", default_value = "false")]
    pub guard_deletes: bool,
    /// The inputs hash an approval must name.
    #[arg(long, default_value = "")]
    pub inputs_hash: String,
    /// The inputs hash approved for a destructive plan (a pool's exports guard).
    #[arg(long, default_value = "")]
    pub allow_deletes_hash: String,
    /// The plan hash approved as destructive: the guard lets through exactly this plan, so a
    /// plan that deletes anything else is blocked again.
    #[arg(long, default_value = "")]
    pub allow_deletes_plan: String,
    /// Apply: the approved plan hash; stop with plan-changed unless the new plan matches.
    #[arg(long, default_value = "")]
    pub expect_plan: String,
    /// Key of the plan fingerprint: plan runs and applies of an approved plan (`--expect-plan`).
    /// A guarded apply keys it with `--inputs-hash`.
    #[arg(long, default_value = DEFAULT_PLAN_KEY_FILE)]
    pub plan_key_file: PathBuf,
    /// Restore: number of backup chunks under <config>/restore.
    #[arg(long, default_value_t = 0)]
    pub restore_chunks: usize,
    /// Restore: the backup's managed resource count.
    #[arg(long, default_value_t = 0)]
    pub restore_resources: u64,
    /// <apiVersion>/<kind>/<namespace>/<name>/<uid>: post progress Events about this object.
    #[arg(long, default_value = "")]
    pub event_object: String,
    /// The Job's name (related object of Events).
    #[arg(long, default_value = "")]
    pub job_name: String,
    /// Where to write the result document.
    #[arg(long, default_value = DEFAULT_RESULT)]
    pub result: PathBuf,
    /// Credentials mirror folder; every file's content is redacted from all output.
    #[arg(long, default_value = DEFAULT_CREDENTIALS)]
    pub credentials: PathBuf,
}

#[derive(Parser, Debug)]
#[command(name = "captf runner run", no_binary_name = true)]
struct RunOnly {
    #[command(flatten)]
    args: RunArgs,
}

impl RunArgs {
    /// Parses `run` flags (without the `run` word), e.g. for tests and tools.
    pub fn try_parse_from<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString> + Clone,
    {
        RunOnly::try_parse_from(args).map(|r| r.args)
    }
}

fn parse_expected_state(s: &str) -> Result<crate::expect::ExpectedState, String> {
    s.parse()
}

fn parse_op(s: &str) -> Result<Operation, String> {
    s.parse::<Operation>().map_err(|e| e.to_string())
}

/// Parses a Go-style duration: `300s`, `5m`, `1h30m`, `1500ms`, or bare seconds (`300`, `0`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let bad = || format!("invalid duration {s:?}: use e.g. 300s, 5m or 1h30m");
    let mut total = Duration::ZERO;
    let mut rest = s;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .ok_or_else(bad)?;
        let (num, tail) = rest.split_at(digits);
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let n: f64 = num.parse().map_err(|_| bad())?;
        let scale = match unit {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return Err(bad()),
        };
        total += Duration::try_from_secs_f64(n * scale).map_err(|_| bad())?;
        rest = next;
    }
    Ok(total)
}

/// Runs `captf runner …` and returns the process exit code.
pub fn main(invocation: Invocation) -> i32 {
    let raw = invocation.args;
    let argv = std::iter::once(OsString::from("captf runner")).chain(raw.iter().cloned());
    let cli = match RunnerCli::try_parse_from(argv) {
        Ok(cli) => cli,
        Err(e) => return usage_error(&e, &raw),
    };
    init_logging(cli.logging_format);
    match cli.command {
        None => {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "{}",
                <RunnerCli as clap::CommandFactory>::command().render_help()
            );
            i32::from(EXIT_USAGE)
        }
        Some(RunnerCommand::Version) => {
            println!("captf runner {VERSION}");
            i32::from(EXIT_OK)
        }
        Some(RunnerCommand::Copy { dst }) => match crate::copy::copy_self(&dst) {
            Ok(()) => {
                tracing::info!(dst = %dst.display(), "copied the runner");
                i32::from(EXIT_OK)
            }
            Err(e) => {
                eprintln!("captf runner copy: {e}");
                i32::from(EXIT_FAILURE)
            }
        },
        Some(RunnerCommand::Run(args)) => i32::from(run_blocking(&args)),
    }
}

/// Runs `runner run` on a fresh Tokio runtime with SIGTERM/SIGINT wired to the shutdown signal.
pub fn run_blocking(args: &RunArgs) -> u8 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let mut doc = ResultDocument::new(args.op.as_str(), &args.image, &args.bin);
            doc.error = Some(crate::result::RunError::new(
                crate::result::ErrorKind::Step,
                Some(crate::steps::PREPARE_STEP),
                &format!("cannot start the async runtime: {e}"),
            ));
            let _ = crate::prepare::write_result(&args.result, &doc.encode());
            return EXIT_FAILURE;
        }
    };
    runtime.block_on(async {
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(forward_signals(tx));
        crate::run::run(args, crate::run::process_env(), rx)
            .await
            .exit
    })
}

async fn forward_signals(tx: tokio::sync::watch::Sender<bool>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::warn!("cannot install signal handlers; SIGTERM will not be forwarded");
        return;
    };
    loop {
        let name = tokio::select! {
            _ = term.recv() => "SIGTERM",
            _ = int.recv() => "SIGINT",
        };
        tracing::warn!(
            signal = name,
            "stop requested: stopping the engine so it can save state and release the lock"
        );
        let _ = tx.send(true);
    }
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("CAPTF_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// Prints a parse error; for `run`, also writes the minimal result document. Help and version
/// requests exit 0.
fn usage_error(e: &clap::Error, raw: &[OsString]) -> i32 {
    use clap::error::ErrorKind;
    let _ = e.print();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => return i32::from(EXIT_OK),
        _ => {}
    }
    let raw: Vec<String> = raw
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if subcommand(&raw) == Some("run") {
        let mut redactor = Redactor::new();
        let env = crate::run::process_env();
        redactor.add_env(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let first = e
            .render()
            .to_string()
            .lines()
            .next()
            .unwrap_or("invalid arguments")
            .trim_start_matches("error: ")
            .to_owned();
        let doc = ResultDocument::usage_error(&redactor.redact(&first));
        let path = result_path(&raw);
        if let Err(err) = crate::prepare::write_result(&path, &doc.encode()) {
            eprintln!("captf runner: cannot write the result document: {err}");
        }
    }
    i32::from(EXIT_USAGE)
}

/// The first positional argument (skipping the global `--logging-format` and its value).
fn subcommand(raw: &[String]) -> Option<&str> {
    let mut skip = false;
    for a in raw {
        if skip {
            skip = false;
            continue;
        }
        if a == "--logging-format" {
            skip = true;
            continue;
        }
        if !a.starts_with('-') {
            return Some(a);
        }
    }
    None
}

/// `--result` from raw arguments, else [`DEFAULT_RESULT`].
fn result_path(raw: &[String]) -> PathBuf {
    let mut it = raw.iter();
    while let Some(a) = it.next() {
        if let Some(v) = a.strip_prefix("--result=") {
            return PathBuf::from(v);
        }
        if a == "--result"
            && let Some(v) = it.next()
        {
            return PathBuf::from(v);
        }
    }
    PathBuf::from(DEFAULT_RESULT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let cases: &[(&str, Option<u64>)] = &[
            ("300s", Some(300_000)),
            ("5m", Some(300_000)),
            ("1h30m", Some(5_400_000)),
            ("1m30s", Some(90_000)),
            ("1500ms", Some(1_500)),
            ("1.5s", Some(1_500)),
            ("570", Some(570_000)),
            ("0", Some(0)),
            ("", None),
            ("5", Some(5_000)),
            ("5x", None),
            ("m", None),
            ("-1s", None),
        ];
        for (input, want) in cases {
            let got = parse_duration(input).ok().map(|d| d.as_millis() as u64);
            assert_eq!(got, *want, "{input:?}");
        }
    }

    #[test]
    fn run_flags_parse_like_the_job_passes_them() {
        let args = RunArgs::try_parse_from([
            "--op=apply",
            "--bin=/captf/runtime",
            "--image=img:v1",
            "--lock-timeout=300s",
            "--stop-timeout=570s",
            "--backend-config=secret_suffix=abc",
            "--backend-config=labels={a=\"b,c\"}",
            "--guard-deletes",
            "--inputs-hash=h2:1",
            "--plan-key-file=/captf/plan-key/key",
        ])
        .expect("parses");
        assert_eq!(args.op, Operation::Apply);
        assert_eq!(args.bin, ["/captf/runtime"]);
        assert_eq!(
            args.backend_config,
            ["secret_suffix=abc", "labels={a=\"b,c\"}"]
        );
        assert_eq!(args.lock_timeout, Duration::from_secs(300));
        assert!(args.guard_deletes);
        assert_eq!(args.result, PathBuf::from(DEFAULT_RESULT));
        let explicit =
            RunArgs::try_parse_from(["--op=plan", "--guard-deletes=false"]).expect("parses");
        assert!(!explicit.guard_deletes);
        assert_eq!(explicit.stop_timeout, Duration::from_secs(570));
        assert_eq!(explicit.lock_timeout, Duration::from_secs(300));
        for bad in [
            &["--op=bogus"][..],
            &[][..],
            &["--op=apply", "extra"][..],
            &["--op=apply", "--lock-timeout=soon"][..],
        ] {
            assert!(
                RunArgs::try_parse_from(bad.iter().copied()).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn usage_errors_of_run_write_a_minimal_result() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let result = tmp.path().join("result.json");
        let raw: Vec<OsString> = [
            "run",
            "--op=bogus",
            "--result",
            result.to_str().expect("utf-8"),
        ]
        .iter()
        .map(OsString::from)
        .collect();
        let code = main(Invocation { args: raw });
        assert_eq!(code, i32::from(EXIT_USAGE));
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&result).expect("written")).expect("json");
        assert_eq!(doc["version"], 1);
        assert_eq!(doc["steps"], serde_json::json!([]));
        assert_eq!(doc["error"]["kind"], "step");
        assert_eq!(doc["error"]["step"], "flags");
        assert!(
            doc["error"]["tail"]
                .as_str()
                .expect("tail")
                .contains("bogus"),
            "{doc}"
        );
    }

    #[test]
    fn exit_codes_of_other_commands() {
        let call = |args: &[&str]| {
            main(Invocation {
                args: args.iter().map(OsString::from).collect(),
            })
        };
        assert_eq!(call(&[]), i32::from(EXIT_USAGE));
        assert_eq!(call(&["frobnicate"]), i32::from(EXIT_USAGE));
        assert_eq!(call(&["copy"]), i32::from(EXIT_USAGE));
        assert_eq!(call(&["copy", "a", "b"]), i32::from(EXIT_USAGE));
        assert_eq!(call(&["version"]), i32::from(EXIT_OK));
        assert_eq!(call(&["--version"]), i32::from(EXIT_OK));
        assert_eq!(
            call(&["copy", "/nonexistent/dir/runner"]),
            i32::from(EXIT_FAILURE)
        );
    }

    #[test]
    fn raw_argument_helpers() {
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        assert_eq!(
            subcommand(&s(&["--logging-format", "json", "run", "--op=x"])),
            Some("run")
        );
        assert_eq!(
            subcommand(&s(&["--logging-format=json", "copy"])),
            Some("copy")
        );
        assert_eq!(
            result_path(&s(&["run", "--result=/a"])),
            PathBuf::from("/a")
        );
        assert_eq!(
            result_path(&s(&["run", "--result", "/b"])),
            PathBuf::from("/b")
        );
        assert_eq!(result_path(&s(&["run"])), PathBuf::from(DEFAULT_RESULT));
    }
}
