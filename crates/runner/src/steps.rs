//! The engine invocations of each operation (api.md §4.5): a pure function of the operation and
//! the run's flags.
//!
//! With `C = -input=false -no-color -lock-timeout=<N>s` and `V = -var-file=terraform.tfvars.json`:
//!
//! | Op | Steps |
//! | --- | --- |
//! | `apply` | `init C [-backend-config=…]*`, [`force-unlock -force <id>`], `validate -json -no-color`, `apply C -auto-approve V` |
//! | `apply` guarded (`--guard-deletes` or `--expect-plan`) | init, [force-unlock], validate, `plan C -detailed-exitcode V -out=<workdir>/apply.tfplan`, `show -json -no-color <workdir>/apply.tfplan`, `apply C <workdir>/apply.tfplan` |
//! | `destroy` | init, [force-unlock], `destroy C -auto-approve V` |
//! | `refresh` | init, [force-unlock], `apply C -refresh-only -auto-approve V` |
//! | `drift` | init, [force-unlock], `apply C -refresh-only -auto-approve V`, `plan C -detailed-exitcode -refresh=false V -out=<workdir>/plan.tfplan`, `show -json -no-color <workdir>/plan.tfplan` |
//! | `plan` | init, [force-unlock], validate, `plan C -detailed-exitcode V -out=<workdir>/plan.tfplan`, show-json |
//! | `restore` | (`state-replace`), init, [force-unlock], `state list` |
//!
//! Around the engine's steps the runner checks the state itself (`--expect-state`): before init
//! and right after it (`state-check`); a restore first writes the backup into the backend's
//! Secrets (`state-replace`) and checks the result after `state list`.
//!
//! `show-json` runs only when the step before it exited 2 (the plan has changes); that decision
//! belongs to [`crate::run`].

use std::path::{Path, PathBuf};

use captf_api::Operation;
use captf_contract::render::TFVARS_FILE;

/// Saved plan of a `plan` or `drift` run, under the workdir.
pub const PLAN_FILE: &str = "plan.tfplan";
/// Saved plan of a guarded or approved apply, under the workdir.
pub const APPLY_PLAN_FILE: &str = "apply.tfplan";
/// What an engine writes into the root dir when it cannot persist state after an apply/destroy.
pub const ERRORED_STATE_FILE: &str = "errored.tfstate";

/// `force-unlock` tolerates these stderr texts: the lock is already gone.
pub const FORCE_UNLOCK_OK_IF: &[&str] =
    &["state is already unlocked", "does not match existing lock"];

/// The name of a step, as it appears in the result document and the logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StepName {
    /// `init`.
    Init,
    /// `force-unlock -force <id>`.
    ForceUnlock,
    /// `validate -json`.
    Validate,
    /// `apply`.
    Apply,
    /// `destroy`.
    Destroy,
    /// `apply -refresh-only`.
    ApplyRefreshOnly,
    /// `plan -detailed-exitcode -out=…`.
    Plan,
    /// `show -json <plan>`.
    ShowJson,
    /// `state push`.
    StatePush,
    /// `state list`.
    StateList,
}

impl StepName {
    /// Every step name.
    pub const ALL: [StepName; 10] = [
        StepName::Init,
        StepName::ForceUnlock,
        StepName::Validate,
        StepName::Apply,
        StepName::Destroy,
        StepName::ApplyRefreshOnly,
        StepName::Plan,
        StepName::ShowJson,
        StepName::StatePush,
        StepName::StateList,
    ];

    /// The wire name.
    pub const fn as_str(self) -> &'static str {
        match self {
            StepName::Init => "init",
            StepName::ForceUnlock => "force-unlock",
            StepName::Validate => "validate",
            StepName::Apply => "apply",
            StepName::Destroy => "destroy",
            StepName::ApplyRefreshOnly => "apply-refresh-only",
            StepName::Plan => "plan",
            StepName::ShowJson => "show-json",
            StepName::StatePush => "state-push",
            StepName::StateList => "state-list",
        }
    }
}

impl std::fmt::Display for StepName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Pseudo-step of failures before any engine step (config copy, environment, plan key, restore).
pub const PREPARE_STEP: &str = "prepare";
/// Pseudo-step of command-line errors.
pub const FLAGS_STEP: &str = "flags";
/// Pseudo-step of the runner's own check of the state (`--expect-state`).
pub const STATE_CHECK_STEP: &str = "state-check";
/// Pseudo-step of a restore writing the backup into the backend's Secrets.
pub const STATE_REPLACE_STEP: &str = "state-replace";

/// A bounded label for a step name read from an untrusted result: a known step, `prepare`,
/// `flags`, else `other`.
pub fn step_label(name: &str) -> &'static str {
    StepName::ALL
        .iter()
        .map(|s| s.as_str())
        .chain([
            PREPARE_STEP,
            FLAGS_STEP,
            STATE_CHECK_STEP,
            STATE_REPLACE_STEP,
        ])
        .find(|s| *s == name)
        .unwrap_or("other")
}

/// What happens to a step's standard output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Streamed to the container log (through the redactor).
    Stream,
    /// Kept in memory only, never logged (`show -json` holds every input value).
    Capture,
    /// Kept in memory and also logged (through the redactor).
    CaptureAndLog,
}

/// One engine invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// Name in results and logs.
    pub name: StepName,
    /// Arguments after the runtime command.
    pub args: Vec<String>,
    /// Exit codes that count as success.
    pub ok_exits: &'static [i32],
    /// Texts that make a failing exit a success when stderr contains one of them.
    pub ok_if_stderr: &'static [&'static str],
    /// Where stdout goes.
    pub output: Output,
}

impl Step {
    fn new(name: StepName, args: Vec<String>) -> Self {
        Step {
            name,
            args,
            ok_exits: &[0],
            ok_if_stderr: &[],
            output: Output::Stream,
        }
    }

    /// Whether this step succeeded with `exit` and `stderr`.
    pub fn succeeded(&self, exit: i32, stderr: &str) -> bool {
        self.ok_exits.contains(&exit) || self.ok_if_stderr.iter().any(|s| stderr.contains(s))
    }
}

/// The flags that shape the step list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepOptions {
    /// `--lock-timeout` in whole seconds.
    pub lock_timeout_secs: u64,
    /// `--backend-config` values, in order.
    pub backend_config: Vec<String>,
    /// `--force-unlock` lock ID, when set.
    pub force_unlock: Option<String>,
    /// A guarded (`--guard-deletes`) or approved (`--expect-plan`) apply: plan, show, apply the
    /// saved plan.
    pub saved_plan_apply: bool,
    /// `--workdir`: where plan files and the restore state live.
    pub workdir: PathBuf,
}

/// The steps of `op`.
pub fn steps(op: Operation, o: &StepOptions) -> Vec<Step> {
    let common = |verb: &[&str]| -> Vec<String> {
        verb.iter()
            .map(|s| (*s).to_owned())
            .chain([
                "-input=false".to_owned(),
                "-no-color".to_owned(),
                format!("-lock-timeout={}s", o.lock_timeout_secs),
            ])
            .collect()
    };
    let var_file = format!("-var-file={TFVARS_FILE}");
    let path = |file: &str| path_arg(&o.workdir, file);

    let mut init = common(&["init"]);
    init.extend(
        o.backend_config
            .iter()
            .map(|c| format!("-backend-config={c}")),
    );
    let mut list = vec![Step::new(StepName::Init, init)];
    if let Some(id) = &o.force_unlock {
        list.push(Step {
            ok_if_stderr: FORCE_UNLOCK_OK_IF,
            ..Step::new(
                StepName::ForceUnlock,
                vec!["force-unlock".into(), "-force".into(), id.clone()],
            )
        });
    }
    let validate = Step {
        output: Output::CaptureAndLog,
        ..Step::new(
            StepName::Validate,
            vec!["validate".into(), "-json".into(), "-no-color".into()],
        )
    };
    let plan = |extra: &[&str], file: &str| {
        let mut args = common(&["plan"]);
        args.push("-detailed-exitcode".into());
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args.push(var_file.clone());
        args.push(format!("-out={}", path(file)));
        Step {
            ok_exits: &[0, 2],
            ..Step::new(StepName::Plan, args)
        }
    };
    let show = |file: &str| Step {
        output: Output::Capture,
        ..Step::new(
            StepName::ShowJson,
            vec![
                "show".into(),
                "-json".into(),
                "-no-color".into(),
                path(file),
            ],
        )
    };
    let with = |mut args: Vec<String>, extra: &[&str]| {
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args
    };
    let refresh_only = Step::new(
        StepName::ApplyRefreshOnly,
        with(
            common(&["apply"]),
            &["-refresh-only", "-auto-approve", &var_file],
        ),
    );

    match op {
        Operation::Apply if o.saved_plan_apply => {
            list.push(validate);
            list.push(plan(&[], APPLY_PLAN_FILE));
            list.push(show(APPLY_PLAN_FILE));
            list.push(Step::new(
                StepName::Apply,
                with(common(&["apply"]), &[&path(APPLY_PLAN_FILE)]),
            ));
        }
        Operation::Apply => {
            list.push(validate);
            list.push(Step::new(
                StepName::Apply,
                with(common(&["apply"]), &["-auto-approve", &var_file]),
            ));
        }
        Operation::Destroy => list.push(Step::new(
            StepName::Destroy,
            with(common(&["destroy"]), &["-auto-approve", &var_file]),
        )),
        Operation::Refresh => list.push(refresh_only),
        Operation::Drift => {
            list.push(refresh_only);
            list.push(plan(&["-refresh=false"], PLAN_FILE));
            list.push(show(PLAN_FILE));
        }
        Operation::Plan => {
            list.push(validate);
            list.push(plan(&[], PLAN_FILE));
            list.push(show(PLAN_FILE));
        }
        Operation::Restore => {
            // The runner wrote the backup into the backend's Secrets before init
            // (`state-replace`): the engine only has to read it back.
            list.push(Step {
                output: Output::CaptureAndLog,
                ..Step::new(StepName::StateList, vec!["state".into(), "list".into()])
            });
        }
    }
    list
}

/// The step that pushes `errored.tfstate` (left in the root dir by a failed apply/destroy that
/// could not write its state) back into the backend.
pub fn errored_state_push(lock_timeout_secs: u64) -> Step {
    Step::new(
        StepName::StatePush,
        vec![
            "state".into(),
            "push".into(),
            format!("-lock-timeout={lock_timeout_secs}s"),
            ERRORED_STATE_FILE.into(),
        ],
    )
}

fn path_arg(dir: &Path, file: &str) -> String {
    dir.join(file).display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(saved_plan_apply: bool, force_unlock: Option<&str>) -> StepOptions {
        StepOptions {
            lock_timeout_secs: 300,
            backend_config: vec!["secret_suffix=abc".into(), "namespace=ns".into()],
            force_unlock: force_unlock.map(str::to_owned),
            saved_plan_apply,
            workdir: PathBuf::from("/w"),
        }
    }

    fn render(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|s| format!("{}: {}", s.name, s.args.join(" ")))
            .collect()
    }

    const INIT: &str = "init: init -input=false -no-color -lock-timeout=300s -backend-config=secret_suffix=abc -backend-config=namespace=ns";
    const UNLOCK: &str = "force-unlock: force-unlock -force lock-1";
    const VALIDATE: &str = "validate: validate -json -no-color";
    const REFRESH: &str = "apply-refresh-only: apply -input=false -no-color -lock-timeout=300s -refresh-only -auto-approve -var-file=terraform.tfvars.json";

    #[test]
    fn step_table() {
        let cases: Vec<(Operation, StepOptions, Vec<&str>)> = vec![
            (
                Operation::Apply,
                opts(false, None),
                vec![
                    INIT,
                    VALIDATE,
                    "apply: apply -input=false -no-color -lock-timeout=300s -auto-approve -var-file=terraform.tfvars.json",
                ],
            ),
            (
                Operation::Apply,
                opts(true, Some("lock-1")),
                vec![
                    INIT,
                    UNLOCK,
                    VALIDATE,
                    "plan: plan -input=false -no-color -lock-timeout=300s -detailed-exitcode -var-file=terraform.tfvars.json -out=/w/apply.tfplan",
                    "show-json: show -json -no-color /w/apply.tfplan",
                    "apply: apply -input=false -no-color -lock-timeout=300s /w/apply.tfplan",
                ],
            ),
            (
                Operation::Destroy,
                opts(false, Some("lock-1")),
                vec![
                    INIT,
                    UNLOCK,
                    "destroy: destroy -input=false -no-color -lock-timeout=300s -auto-approve -var-file=terraform.tfvars.json",
                ],
            ),
            (Operation::Refresh, opts(false, None), vec![INIT, REFRESH]),
            (
                Operation::Drift,
                opts(false, None),
                vec![
                    INIT,
                    REFRESH,
                    "plan: plan -input=false -no-color -lock-timeout=300s -detailed-exitcode -refresh=false -var-file=terraform.tfvars.json -out=/w/plan.tfplan",
                    "show-json: show -json -no-color /w/plan.tfplan",
                ],
            ),
            (
                Operation::Plan,
                opts(false, None),
                vec![
                    INIT,
                    VALIDATE,
                    "plan: plan -input=false -no-color -lock-timeout=300s -detailed-exitcode -var-file=terraform.tfvars.json -out=/w/plan.tfplan",
                    "show-json: show -json -no-color /w/plan.tfplan",
                ],
            ),
            (
                Operation::Restore,
                opts(false, Some("lock-1")),
                vec![INIT, UNLOCK, "state-list: state list"],
            ),
        ];
        for (op, o, want) in cases {
            assert_eq!(render(&steps(op, &o)), want, "{op} {o:?}");
        }
    }

    #[test]
    fn ok_exits_outputs_and_tolerated_errors() {
        let all = steps(Operation::Plan, &opts(false, Some("x")));
        for s in &all {
            let (ok, output) = match s.name {
                StepName::Plan => (&[0, 2][..], Output::Stream),
                StepName::ShowJson => (&[0][..], Output::Capture),
                StepName::Validate => (&[0][..], Output::CaptureAndLog),
                _ => (&[0][..], Output::Stream),
            };
            assert_eq!(s.ok_exits, ok, "{}", s.name);
            assert_eq!(s.output, output, "{}", s.name);
        }
        let unlock = &all[1];
        assert!(unlock.succeeded(1, "Error: state is already unlocked\n"));
        assert!(unlock.succeeded(1, "Lock ID \"x\" does not match existing lock"));
        assert!(!unlock.succeeded(1, "Error: permission denied"));
        assert!(all[0].succeeded(0, ""));
        assert!(!all[0].succeeded(2, ""));
    }

    #[test]
    fn labels_are_bounded() {
        for s in StepName::ALL {
            assert_eq!(step_label(s.as_str()), s.as_str());
        }
        assert_eq!(step_label("prepare"), "prepare");
        assert_eq!(step_label("flags"), "flags");
        assert_eq!(step_label("state-check"), "state-check");
        assert_eq!(step_label("state-replace"), "state-replace");
        assert_eq!(step_label("rm -rf /"), "other");
    }

    #[test]
    fn errored_state_push_args() {
        assert_eq!(
            errored_state_push(60).args,
            ["state", "push", "-lock-timeout=60s", "errored.tfstate"]
        );
    }
}
