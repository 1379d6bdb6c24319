//! The three workload kinds as one view, and the `KIND/NAME` a user types.

use captf_api::names::WorkloadKind;
use captf_api::{
    Condition, PlanStatus, TerraformCluster, TerraformMachine, TerraformMachinePool,
    WorkspaceStatus,
};

/// What the plugin reads of a TerraformCluster, TerraformMachine or TerraformMachinePool.
#[derive(Debug, Clone, Default)]
pub struct Workload {
    pub kind: Option<WorkloadKind>,
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub resource_version: String,
    pub deleting: bool,
    pub conditions: Vec<Condition>,
    pub workspace: WorkspaceStatus,
    /// TerraformCluster only: the plan waiting for approval (`applyPolicy: Manual`).
    pub plan: Option<PlanStatus>,
    /// `captf.io/retry` and `captf.io/replan` with their tokens, while set (the manager removes
    /// each once the Job that answered it is booked).
    pub requests: Vec<(&'static str, String)>,
    /// `captf.io/restore-state`, while set (the manager removes it after a successful restore).
    pub restore_request: Option<String>,
}

impl Workload {
    pub fn kind(&self) -> WorkloadKind {
        self.kind.unwrap_or(WorkloadKind::Cluster)
    }

    pub fn condition(&self, type_: &str) -> Option<&Condition> {
        self.conditions.iter().find(|c| c.type_ == type_)
    }

    /// `TerraformCluster/name`, as messages name it.
    pub fn reference(&self) -> String {
        format!("{}/{}", self.kind().kind(), self.name)
    }

    /// `tfc/name`: the argument a command takes, as messages suggest it.
    pub fn arg(&self) -> String {
        let short = match self.kind() {
            WorkloadKind::Cluster => "tfc",
            WorkloadKind::Machine => "tfm",
            WorkloadKind::MachinePool => "tfmp",
        };
        format!("{short}/{}", self.name)
    }
}

/// The metadata every kind shares.
struct Meta {
    name: String,
    namespace: String,
    uid: String,
    resource_version: String,
    deleting: bool,
    requests: Vec<(&'static str, String)>,
    restore_request: Option<String>,
}

fn meta(object: kube::api::ObjectMeta) -> Meta {
    let annotations = object.annotations.unwrap_or_default();
    let requests = [
        captf_api::annotations::RETRY,
        captf_api::annotations::REPLAN,
    ]
    .into_iter()
    .filter_map(|key| Some((key, annotations.get(key)?.clone())))
    .collect();
    Meta {
        restore_request: annotations
            .get(captf_api::annotations::RESTORE_STATE)
            .cloned(),
        requests,
        name: object.name.unwrap_or_default(),
        namespace: object.namespace.unwrap_or_default(),
        uid: object.uid.unwrap_or_default(),
        resource_version: object.resource_version.unwrap_or_default(),
        deleting: object.deletion_timestamp.is_some(),
    }
}

/// `From<kind>`: the three kinds share their status layout; only a cluster has a plan.
macro_rules! workload_from {
    ($($kind:ty => $workload_kind:expr, $plan:expr;)*) => {$(
        impl From<$kind> for Workload {
            fn from(o: $kind) -> Self {
                let m = meta(o.metadata);
                let status = o.status.unwrap_or_default();
                let plan = $plan(&status);
                Workload {
                    kind: Some($workload_kind),
                    name: m.name,
                    namespace: m.namespace,
                    uid: m.uid,
                    resource_version: m.resource_version,
                    deleting: m.deleting,
                    requests: m.requests,
                    restore_request: m.restore_request,
                    conditions: status.conditions.unwrap_or_default(),
                    workspace: status.workspace,
                    plan,
                }
            }
        }
    )*};
}

workload_from! {
    TerraformCluster => WorkloadKind::Cluster, |s: &captf_api::TerraformClusterStatus| s.plan.clone();
    TerraformMachine => WorkloadKind::Machine, |_: &captf_api::TerraformMachineStatus| None;
    TerraformMachinePool => WorkloadKind::MachinePool, |_: &captf_api::TerraformMachinePoolStatus| None;
}

/// A `KIND/NAME` argument: the kind by short name (`tfc`, `tfm`, `tfmp`), singular, plural or
/// Kind, any case, with or without `.infrastructure.cluster.x-k8s.io`.
pub fn parse_reference(arg: &str) -> Result<(WorkloadKind, String), String> {
    let (kind, name) = arg.split_once('/').ok_or_else(|| {
        format!(
            "{arg:?} is not KIND/NAME: name the object as tfc/<name>, tfm/<name> or tfmp/<name>"
        )
    })?;
    let kind_lower = kind.to_ascii_lowercase();
    let kind_lower = kind_lower
        .strip_suffix(".infrastructure.cluster.x-k8s.io")
        .unwrap_or(&kind_lower);
    let kind = match kind_lower {
        "tfc" | "terraformcluster" | "terraformclusters" => WorkloadKind::Cluster,
        "tfm" | "terraformmachine" | "terraformmachines" => WorkloadKind::Machine,
        "tfmp" | "terraformmachinepool" | "terraformmachinepools" => WorkloadKind::MachinePool,
        _ => {
            return Err(format!(
                "{kind:?} is not a kind with a state: use tfc (TerraformCluster), tfm (TerraformMachine) or tfmp (TerraformMachinePool)"
            ));
        }
    };
    if !captf_api::names::is_dns_subdomain(name) {
        return Err(format!("{name:?} is not an object name"));
    }
    Ok((kind, name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_take_every_spelling_of_a_kind() {
        for (arg, kind) in [
            ("tfc/a", WorkloadKind::Cluster),
            ("TerraformCluster/a", WorkloadKind::Cluster),
            (
                "terraformclusters.infrastructure.cluster.x-k8s.io/a",
                WorkloadKind::Cluster,
            ),
            ("tfm/a", WorkloadKind::Machine),
            ("terraformmachine/a", WorkloadKind::Machine),
            ("TFMP/a", WorkloadKind::MachinePool),
            ("terraformmachinepools/a", WorkloadKind::MachinePool),
        ] {
            assert_eq!(parse_reference(arg), Ok((kind, "a".to_owned())), "{arg}");
        }
        for (arg, says) in [
            ("a", "is not KIND/NAME"),
            ("tfct/a", "is not a kind with a state"),
            ("cluster/a", "is not a kind with a state"),
            ("tfc/A_b", "is not an object name"),
            ("tfc/", "is not an object name"),
        ] {
            let e = parse_reference(arg).expect_err(arg);
            assert!(e.contains(says), "{arg}: {e}");
        }
    }
}
