//! The pool pass's side of the exports guard (concepts §12.8): the record of the exports a
//! successful apply rendered, the facts [`exports::decide`] needs, and carrying out its
//! verdict (what the Jobs render, the pending change, the approval, the condition).

use captf_api::conditions::{Status, reasons, types};
use captf_api::names::ObjectKey;
use captf_api::{Operation, TerraformMachinePool, annotations};
use captf_contract::{Role, RoleInputs};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::Api;

use crate::conditions::Conditions;
use crate::decide::Effect;
use crate::decide::Finished;
use crate::decide::StateView;
use crate::error::{KubeContext, Result};
use crate::reconcile::act::launch::RenderedExports;
use crate::reconcile::adapter::Rendering;
use crate::reconcile::kinds::pool::Prepared;
use crate::reconcile::kinds::pool::exports::{self, Facts, Pending, PendingFate, Render, Verdict};
use crate::reconcile::observe::jobs::{ObservedJob, Phase};
use crate::reconcile::observe::member;
use crate::reconcile::observe::state::DurableInputs;
use crate::reconcile::pass::Pass;

/// The hash the newest finished apply was blocked for, if the guard stopped it. The markers of
/// a Job recorded this pass are not on the listed Job yet: `finished` has them.
pub(super) fn newest_blocked(jobs: &[ObservedJob], finished: &[Finished]) -> Option<String> {
    let newest = jobs
        .iter()
        .rev()
        .find(|j| j.op == Operation::Apply && j.phase != Phase::Active)?;
    let marker = newest
        .annotations
        .get(annotations::DESTRUCTIVE_PLAN_BLOCKED)
        .or_else(|| {
            finished
                .iter()
                .find(|f| f.name == newest.name)
                .and_then(|f| f.markers.get(annotations::DESTRUCTIVE_PLAN_BLOCKED))
        })?;
    Some(
        newest
            .annotations
            .get(annotations::APPROVAL_HASH)
            .unwrap_or(marker)
            .clone(),
    )
}

/// After a finished apply, the exports guard's records on the durable inputs
/// ([`exports::after_apply`]): the effects that keep them.
pub(super) async fn record_exports(
    client: &kube::Client,
    key: &ObjectKey,
    f: &Finished,
    durable: &DurableInputs,
) -> Result<Vec<Effect>> {
    let partial_marked = durable
        .annotations
        .contains_key(annotations::PARTIAL_CLUSTER_OUTPUTS);
    let recorded_hash = durable
        .applied_exports
        .as_deref()
        .and_then(|r| serde_json::from_slice::<serde_json::Value>(r).ok())
        .map(|v| member::exports_hash(&v));
    let mut effects = Vec::new();
    for record in exports::after_apply(f, partial_marked, recorded_hash.as_deref()) {
        let (annotation, value) = match record {
            exports::Recorded::ClearPartial => (annotations::PARTIAL_CLUSTER_OUTPUTS, None),
            exports::Recorded::Pending(p) => (
                annotations::PENDING_CLUSTER_OUTPUTS,
                Some(p.to_annotation()),
            ),
            exports::Recorded::Partial(p) => (
                annotations::PARTIAL_CLUSTER_OUTPUTS,
                Some(p.to_annotation()),
            ),
            exports::Recorded::Applied(hash) => {
                let record = applied_exports_of(client, key, f, &hash, durable)
                    .await?
                    .and_then(|v| captf_contract::canonicalize_exports(&v).ok())
                    .filter(|r| exports::fits(durable.rendered_size, r.len()));
                // Stale values never stay: without the new ones the record is dropped.
                if record.is_some() || durable.applied_exports.is_some() {
                    effects.push(Effect::AppliedExports(record));
                }
                continue;
            }
        };
        effects.push(Effect::MarkInputs { annotation, value });
    }
    Ok(effects)
}

/// The exports values a successful apply rendered, checked against the hash it recorded: from
/// its per-run Secret (immutable, lives as long as the Job), else from the durable inputs if
/// they still hold the same exports.
pub(super) async fn applied_exports_of(
    client: &kube::Client,
    key: &ObjectKey,
    f: &Finished,
    hash: &str,
    durable: &DurableInputs,
) -> Result<Option<serde_json::Value>> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), key.namespace());
    let name = captf_api::names::per_run_secret(&f.name);
    let per_run = secrets
        .get_opt(&name)
        .await
        .during(|| format!("reading the per-run Secret {name}"))?
        .and_then(|s| s.data)
        .and_then(|d| d.get(captf_contract::render::TFVARS_FILE).cloned())
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b.0).ok());
    Ok([per_run.as_ref(), durable.tfvars.as_ref()]
        .into_iter()
        .flatten()
        .filter_map(|t| t.get(CLUSTER_OUTPUTS_VAR))
        .find(|v| member::exports_hash(v) == hash)
        .cloned())
}

/// The tfvars key of the cluster's exports.
const CLUSTER_OUTPUTS_VAR: &str = "captf_cluster_outputs";

/// Decides the exports guard for this pass and carries out what it says about the pending
/// change: the record proven for a pool applied before it existed, the budget, a lost Job's
/// partial change, a withdrawn or superseded change and its approval. Returns what the Jobs
/// render.
pub(super) async fn exports_guard(
    pass: &Pass<'_, TerraformMachinePool>,
    prepared: &Prepared,
    durable: &DurableInputs,
    state_view: &StateView,
    jobs: &[ObservedJob],
    (conds, writes): (&mut Conditions, &mut Vec<Effect>),
) -> Result<(Rendering, Verdict)> {
    let Records {
        applied,
        record,
        partial,
    } = keep_records(prepared, durable, state_view, writes);
    let pending = Pending::parse(
        durable
            .annotations
            .get(annotations::PENDING_CLUSTER_OUTPUTS),
    );
    let approval = pass
        .object
        .annotations()
        .get(annotations::APPROVE_DESTRUCTIVE_PLAN)
        .map(String::as_str);
    let verdict = exports::decide(&Facts {
        applied_hash: applied.as_deref(),
        recorded: record.is_some(),
        applied_before: durable.applied(),
        current_hash: &prepared.exports_hash,
        approval_hash: &prepared.approval_hash,
        approval,
        pending: pending.as_ref(),
        partial,
    });
    settle_pending(pass, &verdict, jobs, conds, writes);
    let rendering = match (verdict.render, record, &pending) {
        (Render::Held, Some(held), Some(p)) => {
            let rendered = held_rendering(pass, prepared, held, p, jobs, conds)?;
            Rendering {
                rendered,
                exports: Some(RenderedExports {
                    hash: applied.clone().unwrap_or_default(),
                    held: Some(p.approval_hash.clone()),
                }),
                approval_hash: None,
            }
        }
        (render, _, _) => Rendering {
            rendered: prepared.current.clone(),
            exports: Some(RenderedExports {
                hash: prepared.exports_hash.clone(),
                held: None,
            }),
            // Held needs the record and the pending change; should either be missing, the
            // current exports render guarded, never unguarded.
            approval_hash: (render != Render::Current).then(|| prepared.approval_hash.clone()),
        },
    };
    Ok((rendering, verdict))
}

/// The guard's records as this pass leaves them on the durable inputs (the writes that keep
/// them true are queued in `writes`): the hash of the exports last applied, their values, and
/// whether a lost apply's partial change is marked.
struct Records {
    applied: Option<String>,
    record: Option<serde_json::Value>,
    partial: bool,
}

/// The guard's records on the durable inputs, kept true: the hash of the exports last applied
/// (proven for a pool applied before it was recorded), their values while they fit the
/// budget, and a lost apply's partial change. `durable` is what was read; what this pass
/// writes is returned, never edited into it.
fn keep_records(
    prepared: &Prepared,
    durable: &DurableInputs,
    state_view: &StateView,
    writes: &mut Vec<Effect>,
) -> Records {
    const APPLIED: &str = annotations::APPLIED_CLUSTER_OUTPUTS_HASH;
    let mut applied = durable.annotations.get(APPLIED).cloned();
    // A pool applied before the exports were recorded: the exports rendered now are proven
    // applied when the inputs rendered now are those the state was written from.
    if applied.is_none()
        && durable.applied()
        && matches!(state_view, StateView::Found { inputs_hash: Some(h) } if *h == prepared.current.inputs_hash)
    {
        writes.push(Effect::MarkInputs {
            annotation: APPLIED,
            value: Some(prepared.exports_hash.clone()),
        });
        applied = Some(prepared.exports_hash.clone());
    }
    let parse = |bytes: &[u8]| serde_json::from_slice::<serde_json::Value>(bytes).ok();
    let mut recorded_len = durable.applied_exports.as_ref().map(Vec::len);
    let mut record = durable
        .applied_exports
        .as_deref()
        .and_then(parse)
        .filter(|v| applied.as_deref() == Some(member::exports_hash(v).as_str()));
    let room = prepared.current.size().max(durable.rendered_size);
    if record.is_none()
        && let Some(applied) = &applied
    {
        // Values that hash to the applied hash are the applied values: the exports rendered
        // now, or those of the durable inputs' last render.
        let found = [
            Some(&prepared.inputs.captf_cluster_outputs),
            durable
                .tfvars
                .as_ref()
                .and_then(|t| t.get(CLUSTER_OUTPUTS_VAR)),
        ]
        .into_iter()
        .flatten()
        .find(|v| member::exports_hash(v) == *applied)
        .cloned();
        if let Some(bytes) = found
            .as_ref()
            .and_then(|v| captf_contract::canonicalize_exports(v).ok())
            .filter(|b| exports::fits(room, b.len()))
        {
            recorded_len = Some(bytes.len());
            writes.push(Effect::AppliedExports(Some(bytes)));
            record = found;
        }
    }
    // The record shares the durable inputs' budget with what the next apply writes.
    if let Some(len) = recorded_len
        && record.is_some()
        && !exports::fits(room, len)
    {
        writes.push(Effect::AppliedExports(None));
        record = None;
    }
    // A lost apply that rendered an exports change may have applied part of it.
    const PARTIAL: &str = annotations::PARTIAL_CLUSTER_OUTPUTS;
    let lost_exports = durable
        .tfvars
        .as_ref()
        .and_then(|t| t.get(CLUSTER_OUTPUTS_VAR))
        .map(member::exports_hash);
    let mut partial = durable.annotations.contains_key(PARTIAL);
    if let Some(lost) = durable.interrupted_apply().map(str::to_owned)
        && !partial
        && let (Some(applied), Some(lost_exports)) = (&applied, lost_exports)
        && *applied != lost_exports
    {
        let mark = exports::Partial {
            job: lost,
            exports_hash: lost_exports,
        }
        .to_annotation();
        writes.push(Effect::MarkInputs {
            annotation: PARTIAL,
            value: Some(mark),
        });
        partial = true;
    }
    Records {
        applied,
        record,
        partial,
    }
}

/// What the verdict says of the pending change: kept, or ended (applied, withdrawn or
/// superseded), with the approval of a change that did not land used up.
fn settle_pending(
    pass: &Pass<'_, TerraformMachinePool>,
    verdict: &Verdict,
    jobs: &[ObservedJob],
    conds: &mut Conditions,
    writes: &mut Vec<Effect>,
) {
    match &verdict.pending {
        PendingFate::Keep => return,
        PendingFate::Applied(_) => {}
        PendingFate::Withdrawn(p) | PendingFate::Superseded(p) => {
            // Its approval approved that change only; a change that returns is guarded anew.
            writes.push(Effect::Consume {
                annotation: annotations::APPROVE_DESTRUCTIVE_PLAN,
                value: p.approval_hash.clone(),
                announce: None,
            });
        }
    }
    const PENDING: &str = annotations::PENDING_CLUSTER_OUTPUTS;
    writes.push(Effect::MarkInputs {
        annotation: PENDING,
        value: None,
    });
    if let PendingFate::Withdrawn(p) = &verdict.pending {
        withdrawn(p, jobs, conds, pass.generation, pass.now);
    }
}

/// The pool rendered with the exports of its last successful apply (`held`) while change `p`
/// waits; the condition keeps saying it is blocked unless a held apply failed since.
fn held_rendering(
    pass: &Pass<'_, TerraformMachinePool>,
    prepared: &Prepared,
    held: serde_json::Value,
    p: &Pending,
    jobs: &[ObservedJob],
    conds: &mut Conditions,
) -> Result<captf_contract::Rendered> {
    let key = pass.key;
    let inputs = RoleInputs::MachinePool(captf_contract::MachinePoolInputs {
        captf_cluster_outputs: held,
        ..prepared.inputs.clone()
    });
    let image = &pass.object.spec.workspace.source.image;
    let rendered = captf_contract::render(Role::MachinePool, image, &inputs, &prepared.variables)?;
    let newest = jobs
        .iter()
        .rev()
        .find(|j| j.op == Operation::Apply && j.phase != Phase::Active);
    let held_apply = |phase: Phase| {
        newest.filter(|j| {
            j.phase == phase
                && j.annotations
                    .contains_key(annotations::HELD_CLUSTER_OUTPUTS)
        })
    };
    // A held apply that failed reports its failure; otherwise the change stays blocked.
    if held_apply(Phase::Failed).is_none() {
        let succeeded = held_apply(Phase::Succeeded).map(|j| j.name.as_str());
        let message = exports::held_message(key.namespace(), key.name(), p, succeeded);
        let (g, now) = (pass.generation, pass.now);
        let reason = reasons::DESTRUCTIVE_PLAN_BLOCKED;
        conds.set(
            types::APPLY_JOB_SUCCEEDED,
            Status::False,
            reason,
            &message,
            g,
            now,
        );
    }
    Ok(rendered)
}

/// The condition once a held change is withdrawn: the last apply's real outcome, naming the
/// withdrawn Job (only over the blocked report it replaces).
pub(super) fn withdrawn(
    p: &Pending,
    jobs: &[ObservedJob],
    conds: &mut Conditions,
    g: Option<i64>,
    now: Timestamp,
) {
    if conds
        .get(types::APPLY_JOB_SUCCEEDED)
        .is_some_and(|c| c.reason != reasons::DESTRUCTIVE_PLAN_BLOCKED)
    {
        return;
    }
    let note = exports::withdrawn_note(p);
    let last = jobs.iter().rev().find(|j| {
        j.op == Operation::Apply
            && j.phase != Phase::Active
            && !j
                .annotations
                .contains_key(annotations::DESTRUCTIVE_PLAN_BLOCKED)
            && j.name != p.job
    });
    let (status, reason, message) = match last {
        Some(j) if j.phase == Phase::Failed => (
            Status::False,
            reasons::APPLY_FAILED,
            format!("Job {} failed; {note}", j.name),
        ),
        Some(j) => (
            Status::True,
            reasons::APPLY_SUCCEEDED,
            format!("Job {} succeeded; {note}", j.name),
        ),
        None => (
            Status::True,
            reasons::APPLY_SUCCEEDED,
            format!("the last apply succeeded; {note}"),
        ),
    };
    conds.set(types::APPLY_JOB_SUCCEEDED, status, reason, &message, g, now);
}
