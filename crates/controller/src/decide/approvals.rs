//! What an approval names and says: the plan shown in `status.plan` under
//! `applyPolicy: Manual` and the commands that approve a plan or a destructive change.

use captf_api::PlanStatus;
use captf_runner::plan::PlanSummary;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// `status.plan` from a plan Job's result (pure). A replacement counts as one add and one
/// destroy.
pub fn plan_status(job: &str, inputs_hash: &str, plan: &PlanSummary, now: Timestamp) -> PlanStatus {
    let count = |n: u32| i32::try_from(n).unwrap_or(i32::MAX);
    PlanStatus {
        inputs_hash: inputs_hash.to_owned(),
        job: job.to_owned(),
        plan_hash: plan.hash.clone(),
        add: count(plan.create.saturating_add(plan.replace)),
        change: count(plan.update),
        destroy: count(plan.delete.saturating_add(plan.replace)),
        output_changes: (plan.outputs > 0).then(|| count(plan.outputs)),
        resources: (!plan.resources.is_empty()).then(|| plan.resources.clone()),
        truncated: plan.truncated.then_some(true),
        created_at: Some(Time(now)),
    }
}

/// Whether a plan changes nothing (it applies without approval).
pub fn is_empty(plan_hash: &str) -> bool {
    plan_hash == captf_runner::plan::EMPTY_PLAN_HASH
}

/// The command that sets `annotation=value` on a TerraformCluster.
pub fn approve_command(namespace: &str, name: &str, annotation: &str, value: &str) -> String {
    format!(
        "kubectl annotate terraformcluster {name} -n {namespace} {annotation}={value} --overwrite"
    )
}

/// The `PlanAwaitingApproval` message (pure): the counts, the changed resources, the command,
/// and why an approval already present does not count.
pub fn awaiting_message(
    namespace: &str,
    name: &str,
    plan: &PlanStatus,
    approval: Option<&str>,
) -> String {
    let mut text = format!(
        "plan {} of Job {}: {} to add, {} to change, {} to destroy",
        plan.plan_hash, plan.job, plan.add, plan.change, plan.destroy
    );
    if let Some(resources) = plan.resources.as_ref().filter(|r| !r.is_empty()) {
        text.push_str(&format!(" ({}", resources.join(", ")));
        if plan.truncated == Some(true) {
            text.push_str(", …");
        }
        text.push(')');
    }
    if let Some(other) = approval.filter(|a| *a != plan.plan_hash) {
        text.push_str(&format!(
            "; captf.io/approve-plan names {other}, which is not this plan: nothing was applied"
        ));
    }
    text.push_str(&format!(
        ". To apply it: {}",
        approve_command(
            namespace,
            name,
            captf_api::annotations::APPROVE_PLAN,
            &plan.plan_hash
        )
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(create: u32, update: u32, replace: u32, delete: u32) -> PlanSummary {
        PlanSummary {
            hash: "p2:abc".into(),
            create,
            update,
            replace,
            delete,
            ..PlanSummary::empty()
        }
    }

    #[test]
    fn plan_status_counts_a_replacement_as_add_and_destroy() {
        let rows = [
            ((1, 0, 0, 0), (1, 0, 0)),
            ((0, 2, 0, 0), (0, 2, 0)),
            ((0, 0, 1, 0), (1, 0, 1)),
            ((2, 1, 1, 3), (3, 1, 4)),
        ];
        for ((c, u, r, d), want) in rows {
            let p = plan_status("job", "h2:x", &summary(c, u, r, d), Timestamp::UNIX_EPOCH);
            assert_eq!((p.add, p.change, p.destroy), want, "{c}/{u}/{r}/{d}");
            assert_eq!(p.plan_hash, "p2:abc");
            assert_eq!(p.inputs_hash, "h2:x");
        }
    }

    #[test]
    fn awaiting_message_gives_the_command_and_names_a_wrong_approval() {
        let mut plan = plan_status(
            "captf-c-a-plan-a1-x",
            "h2:x",
            &summary(1, 0, 0, 0),
            Timestamp::UNIX_EPOCH,
        );
        plan.resources = Some(vec!["terraform_data.a (create)".into()]);
        let text = awaiting_message("ns", "a", &plan, None);
        assert!(
            text.contains("1 to add, 0 to change, 0 to destroy"),
            "{text}"
        );
        assert!(text.contains("terraform_data.a (create)"), "{text}");
        assert!(
            text.ends_with(
                "kubectl annotate terraformcluster a -n ns captf.io/approve-plan=p2:abc --overwrite"
            ),
            "{text}"
        );
        assert!(!text.contains("which is not this plan"), "{text}");
        let text = awaiting_message("ns", "a", &plan, Some("p2:other"));
        assert!(
            text.contains("names p2:other, which is not this plan"),
            "{text}"
        );
        let text = awaiting_message("ns", "a", &plan, Some("p2:abc"));
        assert!(!text.contains("which is not this plan"), "{text}");
    }

    #[test]
    fn the_empty_plan_needs_no_approval() {
        assert!(is_empty(captf_runner::plan::EMPTY_PLAN_HASH));
        assert!(!is_empty("p2:abc"));
    }
}
