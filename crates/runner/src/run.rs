//! `captf runner run`: one operation, start to end (api.md §4.4). Always produces a result
//! document; [`run`] writes it to `--result` and returns the exit code with it.

use std::time::Instant;

use captf_api::Operation;
use captf_contract::render::{MAIN_TF_FILE, TFVARS_FILE};
use tokio::sync::watch;

use crate::backend::{self, BackendSettings};
use crate::cli::RunArgs;
use crate::diagnostics::{error_resources, failure_summary, managed_addresses};
use crate::drift::Drift;
use crate::events::{self, Progress, Severity};
use crate::exec::{Engine, StepRun, Stop, run_step, runtime_version};
use crate::expect::{ExpectedState, Match, verify};
use crate::plan::{EMPTY_PLAN_HASH, Plan, PlanSummary, blocked_summary};
use crate::prepare;
use crate::redact::Redactor;
use crate::result::{Changes, ErrorKind, ResultDocument, RunError, StepRecord};
use crate::steps::{
    ERRORED_STATE_FILE, PREPARE_STEP, STATE_CHECK_STEP, STATE_REPLACE_STEP, Step, StepName,
    StepOptions, errored_state_push, steps,
};
use crate::{EXIT_FAILURE, EXIT_OK};

/// The runtime command when `--bin` is not given.
pub const DEFAULT_BIN: &str = "/captf/runtime";

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Process exit code ([`EXIT_OK`] or [`EXIT_FAILURE`]).
    pub exit: u8,
    /// The document written to `--result`.
    pub result: ResultDocument,
}

/// Runs the operation of `args` with the runner's environment `env`, stopping the current step
/// when `shutdown` turns true, and writes the result document to `--result` (mode 0600). A write
/// failure turns success into [`EXIT_FAILURE`].
pub async fn run(
    args: &RunArgs,
    env: Vec<(String, String)>,
    shutdown: watch::Receiver<bool>,
) -> Outcome {
    let started = Instant::now();
    let pod = env
        .iter()
        .find(|(k, _)| k == "HOSTNAME")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    let progress = Progress::in_cluster(&args.event_object, &args.job_name, &pod);
    let mut outcome = Runner::new(args, env, shutdown, &progress).execute().await;
    let bytes = outcome.result.encode();
    if let Err(e) = prepare::write_result(&args.result, &bytes) {
        tracing::error!(error = %e, "cannot write the result document");
        outcome.exit = EXIT_FAILURE;
    }
    let (severity, note) = finished(
        args.op.as_str(),
        outcome.result.error.as_ref(),
        outcome.exit,
        started.elapsed(),
    );
    progress.emit(severity, events::RUN_FINISHED, args.op.as_str(), note);
    // After the result is written: a slow API server delays the exit, never the result.
    progress.finish().await;
    let op = args.op.as_str();
    match &outcome.result.error {
        None => tracing::info!(op, seconds = started.elapsed().as_secs(), "run succeeded"),
        Some(e) => tracing::warn!(
            op,
            kind = e.kind.as_str(),
            step = e.step.as_deref().unwrap_or(""),
            summary = %e.tail,
            seconds = started.elapsed().as_secs(),
            "run failed"
        ),
    }
    outcome
}

/// The `RunFinished` Event of a run that ended with `error` and `exit` after `took`.
fn finished(
    op: &str,
    error: Option<&RunError>,
    exit: u8,
    took: std::time::Duration,
) -> (Severity, String) {
    let took = took.as_secs_f64();
    let Some(error) = error.filter(|_| exit != EXIT_OK) else {
        if exit == EXIT_OK {
            return (Severity::Normal, format!("{op} succeeded in {took:.1}s"));
        }
        // The run itself succeeded, but its result could not be written.
        return (
            Severity::Warning,
            format!("{op} failed after {took:.1}s (exit {exit}): the result could not be written"),
        );
    };
    let mut outcome = match error.kind {
        ErrorKind::Step => "failed".to_owned(),
        ErrorKind::Interrupted => "was interrupted".to_owned(),
        ErrorKind::Blocked => {
            "was blocked before a plan that deletes or replaces resources".to_owned()
        }
        ErrorKind::PlanChanged => "stopped: the plan differs from the approved one".to_owned(),
        ErrorKind::StateMismatch => {
            "stopped: the backend holds another state than the one it was started for".to_owned()
        }
        ErrorKind::ImageLayout => "failed: the image does not follow the image contract".to_owned(),
    };
    if let Some(step) = error
        .step
        .as_deref()
        .filter(|_| error.kind != ErrorKind::ImageLayout)
    {
        outcome = format!("{outcome} in step {step}");
    }
    (
        Severity::Warning,
        format!("{op} {outcome} after {took:.1}s (exit {exit})"),
    )
}

struct Runner<'a> {
    args: &'a RunArgs,
    progress: &'a Progress,
    env: Vec<(String, String)>,
    shutdown: watch::Receiver<bool>,
    doc: ResultDocument,
    redactor: Redactor,
    bin: Vec<String>,
}

/// Where and what the state checks compare.
struct StateGuard {
    client: kube::Client,
    backend: BackendSettings,
    expected: ExpectedState,
}

/// Ends the run: `Err` carries the exit code, the document is already filled.
type Flow = std::result::Result<(), u8>;

impl<'a> Runner<'a> {
    fn new(
        args: &'a RunArgs,
        env: Vec<(String, String)>,
        shutdown: watch::Receiver<bool>,
        progress: &'a Progress,
    ) -> Self {
        let bin = if args.bin.is_empty() {
            vec![DEFAULT_BIN.to_owned()]
        } else {
            args.bin.clone()
        };
        Runner {
            doc: ResultDocument::new(args.op.as_str(), &args.image, &bin),
            args,
            progress,
            env,
            shutdown,
            redactor: Redactor::new(),
            bin,
        }
    }

    async fn execute(mut self) -> Outcome {
        let exit = match self.steps().await {
            Ok(()) => EXIT_OK,
            Err(code) => code,
        };
        Outcome {
            exit,
            result: self.doc,
        }
    }

    /// Queues a progress Event, redacted like every text the run reports.
    fn event(&self, severity: Severity, reason: &'static str, action: &str, note: String) {
        self.progress
            .emit(severity, reason, action, self.redactor.redact(&note));
    }

    /// `StepFailed`, with the run's failure summary.
    fn step_failed(&self, step: &Step, r: &StepRun) {
        let summary = self.doc.error.as_ref().map_or("", |e| e.tail.as_str());
        self.event(
            Severity::Warning,
            events::STEP_FAILED,
            step.name.as_str(),
            format!(
                "step {} failed (exit {}) after {:.1}s: {summary}",
                step.name,
                r.exit,
                r.elapsed.as_secs_f64()
            ),
        );
    }

    fn fail(&mut self, kind: ErrorKind, step: Option<&str>, summary: &str) -> Flow {
        let text = self.redactor.redact(summary);
        self.doc.error = Some(RunError::new(kind, step, &text));
        Err(EXIT_FAILURE)
    }

    fn fingerprints(&self) -> bool {
        let a = self.args;
        a.op == Operation::Plan
            || (a.op == Operation::Apply && (a.guard_deletes || !a.expect_plan.is_empty()))
    }

    /// The key of the plan fingerprint. A plan and the apply of an approved plan use the
    /// object's plan key (`--plan-key-file`): only those Jobs have it. A guarded apply keys its
    /// fingerprint with its own `--inputs-hash` instead, so the hash of a blocked plan, which a
    /// destructive approval names, is bound to the object and its inputs, and the approved
    /// apply of those inputs computes it again without the plan key.
    fn fingerprint_key(&self) -> std::result::Result<Vec<u8>, String> {
        let a = self.args;
        if !self.fingerprints() {
            return Ok(Vec::new());
        }
        if a.op == Operation::Apply && a.expect_plan.is_empty() {
            if a.inputs_hash.is_empty() {
                return Err(
                    "--guard-deletes needs --inputs-hash, the key of the plan's fingerprint".into(),
                );
            }
            return Ok(a.inputs_hash.as_bytes().to_vec());
        }
        prepare::read_plan_key(&a.plan_key_file).map_err(|e| e.to_string())
    }

    async fn steps(&mut self) -> Flow {
        let a = self.args;
        // Secrets of the environment and the credentials mirror first, so every text is redacted.
        self.redactor
            .add_env(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        prepare::add_credential_files(&a.credentials, &mut self.redactor);

        let list = steps(
            a.op,
            &StepOptions {
                lock_timeout_secs: a.lock_timeout.as_secs(),
                backend_config: a.backend_config.clone(),
                force_unlock: Some(a.force_unlock.clone()).filter(|s| !s.is_empty()),
                saved_plan_apply: a.guard_deletes || !a.expect_plan.is_empty(),
                workdir: a.workdir.clone(),
            },
        );

        let path = self
            .env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.clone());
        if let Err(e) = prepare::preflight(&a.module, &self.bin, path.as_deref()) {
            return self.fail(ErrorKind::ImageLayout, None, &e.to_string());
        }

        let required: &[&'static str] = if a.op == Operation::Restore {
            &[MAIN_TF_FILE]
        } else {
            &[MAIN_TF_FILE, TFVARS_FILE]
        };
        let prepared = match prepare::prepare(
            &a.config,
            &a.workdir,
            &a.providers,
            self.env.clone(),
            required,
        ) {
            Ok(p) => p,
            Err(e) => return self.fail(ErrorKind::Step, Some(PREPARE_STEP), &e.to_string()),
        };
        if !prepared.env.dropped.is_empty() {
            tracing::info!(dropped = ?prepared.env.dropped, "variables not passed to the engine");
        }
        if let Some(image) = self.doc.image.as_mut() {
            image.providers_mirror = prepared.providers_mirror;
        }
        match prepare::sensitive_root_values(&prepared.root) {
            Ok(values) => values.iter().for_each(|v| self.redactor.add_json(v)),
            Err(e) => return self.fail(ErrorKind::Step, Some(PREPARE_STEP), &e.to_string()),
        }

        let backup = if a.op == Operation::Restore {
            match prepare::assemble_restore(&a.config, a.restore_chunks) {
                Ok(b) => Some(b),
                Err(e) => return self.fail(ErrorKind::Step, Some(PREPARE_STEP), &e.to_string()),
            }
        } else {
            None
        };
        // What the backend must hold: what the manager saw, or for a restore the backup itself.
        let expected = match (&backup, &a.expect_state) {
            (Some(b), expected) => {
                let restored = ExpectedState::Lineage {
                    lineage: b.lineage.clone(),
                    serial: b.serial,
                };
                if expected.as_ref().is_some_and(|e| *e != restored) {
                    let summary = format!(
                        "the backup holds lineage {} at serial {}, not the {} the Job was started for",
                        b.lineage,
                        b.serial,
                        expected
                            .as_ref()
                            .map(ToString::to_string)
                            .unwrap_or_default()
                    );
                    return self.fail(ErrorKind::Step, Some(PREPARE_STEP), &summary);
                }
                Some(restored)
            }
            (None, expected) => expected.clone(),
        };
        let guard = match &expected {
            Some(expected) => Some(self.state_guard(expected.clone())?),
            None => None,
        };
        match (&guard, &backup) {
            (Some(guard), Some(backup)) => {
                if let Err(e) =
                    backend::replace(&guard.client, &guard.backend, &backup.chunks).await
                {
                    return self.fail(ErrorKind::Step, Some(STATE_REPLACE_STEP), &e);
                }
                tracing::info!(
                    lineage = %backup.lineage,
                    serial = backup.serial,
                    chunks = backup.chunks.len(),
                    "the backup replaced the state Secrets"
                );
            }
            (Some(guard), None) => self.check_state(guard, Match::BeforeInit).await?,
            (None, _) => {}
        }

        let key = match self.fingerprint_key() {
            Ok(k) => k,
            Err(e) => return self.fail(ErrorKind::Step, Some(PREPARE_STEP), &e),
        };

        let engine = Engine {
            command: self.bin.clone(),
            cwd: prepared.root.clone(),
            env: prepared.env.vars.clone(),
            stop_timeout: a.stop_timeout,
        };
        let version = runtime_version(&engine).await.unwrap_or_default();
        if let Some(rt) = self.doc.runtime.as_mut() {
            rt.version = version.clone();
        }
        if a.op != Operation::Restore
            && prepare::has_issensitive(&version)
            && let Err(e) = prepare::add_exports_flag(&prepared.root)
        {
            return self.fail(ErrorKind::Step, Some(PREPARE_STEP), &e.to_string());
        }
        self.event(
            Severity::Normal,
            events::RUN_STARTED,
            a.op.as_str(),
            format!(
                "{} started: image {}, runtime {}",
                a.op.as_str(),
                a.image,
                if version.is_empty() {
                    "version unknown"
                } else {
                    &version
                }
            ),
        );
        tracing::info!(
            op = a.op.as_str(),
            image = %a.image,
            runtime = %version,
            steps = list.len(),
            "run started"
        );

        let mut previous_exit: Option<i32> = None;
        let mut checked_after_init = false;
        for step in &list {
            if step.name == StepName::ShowJson && previous_exit != Some(2) {
                continue;
            }
            // Again once init is done: a state deleted or replaced while the pod started and
            // init ran is caught before the first step that reads or writes it.
            if !matches!(step.name, StepName::Init | StepName::ForceUnlock)
                && !checked_after_init
                && backup.is_none()
                && let Some(guard) = &guard
            {
                self.check_state(guard, Match::AfterInit).await?;
                checked_after_init = true;
            }
            if *self.shutdown.borrow() {
                return self.fail(
                    ErrorKind::Interrupted,
                    Some(step.name.as_str()),
                    &format!("interrupted (SIGTERM) before step {}", step.name),
                );
            }
            let r = self.exec(&engine, step).await?;
            self.check_step(&engine, step, &r).await?;
            let plan = self.read_output(step, &r)?;
            self.succeeded(step, &r);
            previous_exit = Some(r.exit);
            if self.after_step(step, &r, plan.as_ref(), &key)? {
                break;
            }
        }
        // A restore ends with what the engine read back being the backup itself.
        if backup.is_some()
            && let Some(guard) = &guard
        {
            self.check_state(guard, Match::Exactly).await?;
        }
        Ok(())
    }

    /// The client and backend settings the state checks use. A backend config that does not
    /// say where the state is, or no in-cluster configuration, fails the run in `state-check`.
    fn state_guard(&mut self, expected: ExpectedState) -> Result<StateGuard, u8> {
        let pod_namespace = self
            .env
            .iter()
            .find(|(k, _)| k == "KUBE_NAMESPACE")
            .map(|(_, v)| v.clone());
        let backend = match BackendSettings::from_config(&self.args.backend_config, pod_namespace) {
            Ok(b) => b,
            Err(e) => {
                self.fail(ErrorKind::Step, Some(STATE_CHECK_STEP), &e)?;
                return Err(EXIT_FAILURE);
            }
        };
        let client = kube::Config::incluster()
            .map_err(|e| e.to_string())
            .and_then(|c| kube::Client::try_from(c).map_err(|e| e.to_string()));
        match client {
            Ok(client) => Ok(StateGuard {
                client,
                backend,
                expected,
            }),
            Err(e) => {
                let summary = format!("cannot reach the API server to check the state: {e}");
                self.fail(ErrorKind::Step, Some(STATE_CHECK_STEP), &summary)?;
                Err(EXIT_FAILURE)
            }
        }
    }

    /// Reads the backend's state and compares it with what the Job was started for. A
    /// difference ends the run as `state-mismatch`; a failed read as a failed `state-check`.
    async fn check_state(&mut self, guard: &StateGuard, how: Match) -> Flow {
        let found = match backend::read(&guard.client, &guard.backend).await {
            Ok(found) => found,
            Err(e) => return self.fail(ErrorKind::Step, Some(STATE_CHECK_STEP), &e),
        };
        match verify(&guard.expected, &found, how) {
            Ok(()) => {
                tracing::info!(expected = %guard.expected, found = %found, "state checked");
                Ok(())
            }
            Err(summary) => {
                tracing::error!(expected = %guard.expected, found = %found, "state mismatch");
                self.event(
                    Severity::Warning,
                    events::STEP_FAILED,
                    STATE_CHECK_STEP,
                    summary.clone(),
                );
                self.fail(ErrorKind::StateMismatch, Some(STATE_CHECK_STEP), &summary)
            }
        }
    }

    async fn exec(&mut self, engine: &Engine, step: &Step) -> Result<StepRun, u8> {
        tracing::info!(step = step.name.as_str(), "step started");
        self.event(
            Severity::Normal,
            events::STEP_STARTED,
            step.name.as_str(),
            format!("step {} started", step.name),
        );
        let mut shutdown = self.shutdown.clone();
        let r = match run_step(
            engine,
            step,
            &self.redactor,
            Stop::OnShutdown(&mut shutdown),
        )
        .await
        {
            Ok(r) => r,
            Err(e) => {
                let msg = e.to_string();
                self.fail(ErrorKind::Step, Some(step.name.as_str()), &msg)?;
                return Err(EXIT_FAILURE);
            }
        };
        tracing::info!(
            step = step.name.as_str(),
            exit = r.exit,
            seconds = r.elapsed.as_secs_f64(),
            "step finished"
        );
        self.doc
            .steps
            .push(StepRecord::new(step.name.as_str(), r.exit, r.elapsed));
        if matches!(step.name, StepName::Apply | StepName::Destroy)
            && let Some(c) = r.complete
        {
            self.doc.changes = Some(c);
        }
        Ok(r)
    }

    /// `Ok` when the step succeeded; otherwise records the failure (pushing an errored state
    /// first) and ends the run.
    async fn check_step(&mut self, engine: &Engine, step: &Step, r: &StepRun) -> Flow {
        let stderr_and_stdout = format!("{}{}", r.stderr_tail, r.stdout_tail);
        if !r.interrupted && step.succeeded(r.exit, &stderr_and_stdout) {
            return Ok(());
        }
        let validate_out = (step.name == StepName::Validate).then_some(r.stdout.as_slice());
        let mut summary = failure_summary(step.name.as_str(), r.exit, validate_out, &r.stderr_tail);
        let interrupted = r.interrupted || *self.shutdown.borrow();
        if interrupted {
            summary = format!("interrupted (SIGTERM): {summary}");
        }
        let resources: Vec<String> = if matches!(step.name, StepName::Apply | StepName::Destroy) {
            error_resources(&r.stderr_tail)
                .iter()
                .map(|s| self.redactor.redact(s))
                .collect()
        } else {
            Vec::new()
        };
        let kind = if interrupted {
            ErrorKind::Interrupted
        } else {
            ErrorKind::Step
        };
        let _ = self.fail(kind, Some(step.name.as_str()), &summary);
        if let Some(e) = self.doc.error.as_mut() {
            e.resources = resources;
        }
        self.step_failed(step, r);
        if matches!(step.name, StepName::Apply | StepName::Destroy)
            && engine.cwd.join(ERRORED_STATE_FILE).exists()
        {
            self.push_errored_state(engine).await;
        }
        Err(EXIT_FAILURE)
    }

    /// Pushes `errored.tfstate` into the backend, bounded by the stop timeout even when
    /// interrupted; recorded as a `state-push` step.
    async fn push_errored_state(&mut self, engine: &Engine) {
        let step = errored_state_push(self.args.lock_timeout.as_secs());
        tracing::warn!("the engine left {ERRORED_STATE_FILE}; pushing it into the backend");
        match run_step(
            engine,
            &step,
            &self.redactor,
            Stop::After(self.args.stop_timeout),
        )
        .await
        {
            Ok(r) => {
                self.doc
                    .steps
                    .push(StepRecord::new(step.name.as_str(), r.exit, r.elapsed));
                if r.exit != 0 {
                    let headers = failure_summary(step.name.as_str(), r.exit, None, &r.stderr_tail);
                    tracing::error!(exit = r.exit, summary = %self.redactor.redact(&headers), "pushing the errored state failed");
                    self.event(
                        Severity::Warning,
                        events::STEP_FAILED,
                        step.name.as_str(),
                        format!(
                            "step {} failed (exit {}) after {:.1}s: {headers}; the engine's {ERRORED_STATE_FILE} did not reach the backend",
                            step.name,
                            r.exit,
                            r.elapsed.as_secs_f64()
                        ),
                    );
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "pushing the errored state failed");
                self.event(
                    Severity::Warning,
                    events::STEP_FAILED,
                    step.name.as_str(),
                    format!("step {} could not run: {e}; the engine's {ERRORED_STATE_FILE} did not reach the backend", step.name),
                );
            }
        }
    }

    /// What a step that exited well must still hold to succeed: `show -json` a plan that
    /// parses (returned), `state list` of a restore some managed resource. Records the failure
    /// otherwise.
    fn read_output(&mut self, step: &Step, r: &StepRun) -> Result<Option<Plan>, u8> {
        let failure = match step.name {
            StepName::ShowJson => match Plan::from_json(&r.stdout) {
                Ok(plan) => {
                    for v in plan.sensitive_values() {
                        self.redactor.add_json(&v);
                    }
                    return Ok(Some(plan));
                }
                Err(e) => e.to_string(),
            },
            StepName::StateList => {
                let n = managed_addresses(&String::from_utf8_lossy(&r.stdout));
                tracing::info!(managed = n, "restored state");
                if n > 0 || self.args.restore_resources == 0 {
                    return Ok(None);
                }
                format!(
                    "restored state lists no managed resources, but the backup recorded {}",
                    self.args.restore_resources
                )
            }
            _ => return Ok(None),
        };
        let _ = self.fail(ErrorKind::Step, Some(step.name.as_str()), &failure);
        self.step_failed(step, r);
        Err(EXIT_FAILURE)
    }

    /// `StepSucceeded`, and what an apply or destroy changed.
    fn succeeded(&self, step: &Step, r: &StepRun) {
        let name = step.name.as_str();
        self.event(
            Severity::Normal,
            events::STEP_SUCCEEDED,
            name,
            format!(
                "step {name} succeeded (exit {}) in {:.1}s",
                r.exit,
                r.elapsed.as_secs_f64()
            ),
        );
        if matches!(step.name, StepName::Apply | StepName::Destroy)
            && let Some(c) = &r.complete
        {
            self.event(
                Severity::Normal,
                events::RESOURCES_CHANGED,
                name,
                format!(
                    "{name} changed resources: {} added, {} changed, {} destroyed, {} imported",
                    c.add, c.change, c.destroy, c.import
                ),
            );
        }
    }

    /// `PlanSummary`: counts only.
    fn plan_summary(&self, step: &Step, counts: &str) {
        self.event(
            Severity::Normal,
            events::PLAN_SUMMARY,
            step.name.as_str(),
            format!("plan: {counts}"),
        );
    }

    /// Decisions after a successful step (`plan`: the parsed `show -json`). `Ok(true)` ends the
    /// run successfully.
    fn after_step(
        &mut self,
        step: &Step,
        r: &StepRun,
        plan: Option<&Plan>,
        key: &[u8],
    ) -> Result<bool, u8> {
        let a = self.args;
        match (step.name, plan) {
            (StepName::Plan, _) if r.exit == 0 => {
                tracing::info!("plan: no changes");
                self.plan_summary(step, "no changes");
                match a.op {
                    Operation::Drift => self.doc.drift = Some(Drift::none()),
                    Operation::Plan => self.doc.plan = Some(PlanSummary::empty()),
                    Operation::Apply => {
                        if !a.expect_plan.is_empty() && a.expect_plan != EMPTY_PLAN_HASH {
                            self.doc.plan = Some(PlanSummary::empty());
                            let msg = format!(
                                "the plan changed since it was approved: approved {}, now {EMPTY_PLAN_HASH} (no changes); nothing was applied",
                                a.expect_plan
                            );
                            self.fail(ErrorKind::PlanChanged, None, &msg)?;
                        }
                        // Nothing to apply: success without the apply step.
                        self.doc.changes = Some(Changes::default());
                        return Ok(true);
                    }
                    _ => {}
                }
            }
            (StepName::ShowJson, Some(plan)) => match a.op {
                Operation::Plan => {
                    let s = plan.summary(key);
                    tracing::info!(hash = %s.hash, counts = %s.counts(), outputs = s.outputs, import = s.import, moves = s.moves, "plan summary");
                    self.plan_summary(
                        step,
                        &format!(
                            "{}, {} to import, {} to move, {} outputs changed",
                            s.counts(),
                            s.import,
                            s.moves,
                            s.outputs
                        ),
                    );
                    self.doc.plan = Some(s);
                }
                Operation::Drift => {
                    let d = Drift::of(plan);
                    tracing::info!(
                        detected = d.detected,
                        create = d.create,
                        update = d.update,
                        replace = d.replace,
                        delete = d.delete,
                        "drift"
                    );
                    self.plan_summary(
                        step,
                        &format!(
                            "{} to create, {} to update, {} to replace, {} to delete",
                            d.create, d.update, d.replace, d.delete
                        ),
                    );
                    self.doc.drift = Some(d);
                }
                Operation::Apply => self.check_apply_plan(step, plan, key)?,
                _ => {}
            },
            _ => {}
        }
        Ok(false)
    }

    /// The gate of a guarded or approved apply, between `show -json` and `apply`.
    fn check_apply_plan(&mut self, step: &Step, plan: &Plan, key: &[u8]) -> Flow {
        let a = self.args;
        let summary = plan.summary(key);
        tracing::info!(hash = %summary.hash, counts = %summary.counts(), "plan summary");
        self.plan_summary(step, &summary.counts());
        if !a.expect_plan.is_empty() {
            if summary.hash != a.expect_plan {
                let msg = format!(
                    "the plan changed since it was approved: approved {}, now {} ({}); nothing was applied",
                    a.expect_plan,
                    summary.hash,
                    summary.counts()
                );
                self.doc.plan = Some(summary);
                return self.fail(ErrorKind::PlanChanged, None, &msg);
            }
            // The approval of this exact plan covers its deletes.
            return Ok(());
        }
        if a.guard_deletes {
            let destructive = plan.destructive();
            let inputs_approved =
                !a.allow_deletes_hash.is_empty() && a.allow_deletes_hash == a.inputs_hash;
            let plan_approved =
                !a.allow_deletes_plan.is_empty() && a.allow_deletes_plan == summary.hash;
            if !destructive.is_empty() && !inputs_approved && !plan_approved {
                let mut msg = blocked_summary(&destructive);
                if !a.allow_deletes_plan.is_empty() {
                    msg = format!("not the approved plan {}: {msg}", a.allow_deletes_plan);
                }
                self.doc.plan = Some(summary);
                return self.fail(ErrorKind::Blocked, None, &msg);
            }
        }
        Ok(())
    }
}

/// The process environment as UTF-8 pairs (lossy).
pub fn process_env() -> Vec<(String, String)> {
    std::env::vars_os()
        .map(|(k, v)| {
            (
                k.to_string_lossy().into_owned(),
                v.to_string_lossy().into_owned(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn run_finished_says_how_the_run_ended() {
        let error = |kind, step: Option<&str>| RunError::new(kind, step, "summary");
        let took = Duration::from_millis(12_340);
        let cases = [
            (None, EXIT_OK, Severity::Normal, "apply succeeded in 12.3s"),
            (
                None,
                EXIT_FAILURE,
                Severity::Warning,
                "apply failed after 12.3s (exit 1): the result could not be written",
            ),
            (
                Some(error(ErrorKind::Step, Some("init"))),
                EXIT_FAILURE,
                Severity::Warning,
                "apply failed in step init after 12.3s (exit 1)",
            ),
            (
                Some(error(ErrorKind::Interrupted, Some("apply"))),
                EXIT_FAILURE,
                Severity::Warning,
                "apply was interrupted in step apply after 12.3s (exit 1)",
            ),
            (
                Some(error(ErrorKind::Blocked, None)),
                EXIT_FAILURE,
                Severity::Warning,
                "apply was blocked before a plan that deletes or replaces resources after 12.3s (exit 1)",
            ),
            (
                Some(error(ErrorKind::PlanChanged, None)),
                EXIT_FAILURE,
                Severity::Warning,
                "apply stopped: the plan differs from the approved one after 12.3s (exit 1)",
            ),
            (
                Some(error(ErrorKind::ImageLayout, Some("preflight"))),
                EXIT_FAILURE,
                Severity::Warning,
                "apply failed: the image does not follow the image contract after 12.3s (exit 1)",
            ),
        ];
        for (error, exit, severity, note) in cases {
            assert_eq!(
                finished("apply", error.as_ref(), exit, took),
                (severity, note.to_owned())
            );
        }
    }
}
