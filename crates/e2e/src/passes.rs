//! Counting a manager's passes by what they decided (`captf_reconcile_op_decisions_total`),
//! and making them come one after another: a test waits for passes, never for time.

use captf_api::TerraformCluster;
use captf_testenv::wait_for;
use kube::api::Api;

use crate::Manager;
use crate::fixture::{TIMEOUT, annotate, sample};

/// The passes of `kind` objects that decided `op` (`none`: started nothing, or a Job's
/// operation) for `reason`, held ones included (`captf_reconcile_op_decisions_total`), so far:
/// a scene's manager sees its own namespace only.
pub fn passes(manager: &Manager, kind: &str, op: &str, reason: &str) -> f64 {
    let metrics = Manager::get(&manager.metrics).expect("metrics");
    sample(
        &metrics,
        &format!(
            "captf_reconcile_op_decisions_total{{kind=\"{kind}\",op=\"{op}\",reason=\"{reason}\"}}"
        ),
    )
    .unwrap_or(0.0)
}

/// Makes `count` passes of the TerraformCluster `name` come, one after another (an annotation
/// changes, which wakes it), each waited for until it decided `op` for `reason` (a decision
/// to start a Job may still start none: the Job's own steps can refuse). The scene's only
/// object must be this one, or the count means little.
pub async fn passes_of(
    api: &Api<TerraformCluster>,
    name: &str,
    manager: &Manager,
    (op, reason): (&str, &str),
    count: usize,
) {
    for n in 0..count {
        let before = passes(manager, "TerraformCluster", op, reason);
        let poke = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
            .to_string();
        annotate(api, name, "example.com/poke", Some(&poke)).await;
        wait_for(
            &format!("pass {n} deciding {op} for {reason}"),
            TIMEOUT,
            || async {
                Ok((passes(manager, "TerraformCluster", op, reason) > before).then_some(()))
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}\nmanager log:\n{}", manager.log()));
    }
}

/// [`passes_of`] that started nothing (op `none`) and ended for `reason`.
pub async fn idle_passes_of(
    api: &Api<TerraformCluster>,
    name: &str,
    manager: &Manager,
    reason: &str,
    count: usize,
) {
    passes_of(api, name, manager, ("none", reason), count).await;
}
