//! The delete guards (operations.md §6.3): best-effort guardrails (their webhook entries fail
//! open), decided over what the API server says right now, read without the cache.

use captf_api::{
    TerraformCluster, TerraformClusterIdentity, TerraformMachine, TerraformMachinePool,
};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use crate::capi;

/// Objects named at most in one refusal.
const NAMED: usize = 5;

/// A TerraformMachine may be deleted only through its Machine (CAPI drains the node and runs
/// the lifecycle hooks first), unless `clusterctl move` deletes it from a paused cluster.
pub fn machine_delete(
    machine: &TerraformMachine,
    moving_from_paused_cluster: bool,
    owners: &[capi::Machine],
) -> Result<(), String> {
    if moving_from_paused_cluster {
        return Ok(());
    }
    let name = machine.name_any();
    let owner = owners.iter().find(|m| {
        m.metadata.deletion_timestamp.is_none()
            && m.spec.infrastructure_ref.as_ref().is_some_and(|r| {
                r.api_group == captf_api::GROUP && r.kind == "TerraformMachine" && r.name == name
            })
    });
    match owner {
        None => Ok(()),
        Some(m) => {
            let owner = m.metadata.name.as_deref().unwrap_or_default();
            Err(format!(
                "TerraformMachine {name:?} is the infrastructure of Machine {owner:?}: delete the Machine {owner} instead; deleting the TerraformMachine directly skips drain and the lifecycle hooks"
            ))
        }
    }
}

/// Who uses an identity: objects that name it directly, and clusters whose
/// `spec.defaults.identityRef` hands it to their machines and pools.
pub fn identity_users(
    identity: &str,
    clusters: &[TerraformCluster],
    machines: &[TerraformMachine],
    pools: &[TerraformMachinePool],
) -> Vec<String> {
    let named =
        |r: Option<&captf_api::common::IdentityReference>| r.is_some_and(|r| r.name == identity);
    let mut users = Vec::new();
    let mut add = |kind: &str, meta: &kube::api::ObjectMeta| {
        users.push(format!(
            "{kind} {}/{}",
            meta.namespace.as_deref().unwrap_or_default(),
            meta.name.as_deref().unwrap_or_default()
        ));
    };
    for c in clusters {
        let defaults = c
            .spec
            .defaults
            .as_ref()
            .and_then(|d| d.identity_ref.as_ref());
        if named(c.spec.workspace.identity_ref.as_ref()) || named(defaults) {
            add("TerraformCluster", &c.metadata);
        }
    }
    for m in machines {
        if named(m.spec.workspace.identity_ref.as_ref()) {
            add("TerraformMachine", &m.metadata);
        }
    }
    for p in pools {
        if named(p.spec.workspace.identity_ref.as_ref()) {
            add("TerraformMachinePool", &p.metadata);
        }
    }
    users
}

/// An identity may be deleted once nothing uses it and no credential mirror is left: a
/// cluster still being destroyed needs the credentials.
pub fn identity_delete(
    identity: &TerraformClusterIdentity,
    users: &[String],
) -> Result<(), String> {
    let name = identity.name_any();
    if !users.is_empty() {
        let mut listed = users
            .iter()
            .take(NAMED)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ");
        if users.len() > NAMED {
            listed.push_str(&format!(" and {} more", users.len() - NAMED));
        }
        return Err(format!(
            "TerraformClusterIdentity {name:?} is in use by {listed}: delete those objects first (their destroy Jobs need these credentials) or point them at another identity"
        ));
    }
    let mirrors = identity
        .status
        .as_ref()
        .and_then(|s| s.namespaces.clone())
        .unwrap_or_default();
    if !mirrors.is_empty() {
        return Err(format!(
            "TerraformClusterIdentity {name:?} is still mirrored into namespaces {}: the mirrors go away with the last object that uses the identity; wait for that, then delete it",
            mirrors.join(", ")
        ));
    }
    Ok(())
}

/// Whether `machine` is being moved by `clusterctl move` out of a paused cluster, and the
/// Machines of its namespace.
pub async fn machine_delete_facts(
    client: &Client,
    machine: &TerraformMachine,
) -> Result<(bool, Vec<capi::Machine>), kube::Error> {
    let namespace = machine.namespace().unwrap_or_default();
    let moving = machine
        .annotations()
        .contains_key(captf_api::annotations::DELETE_FOR_MOVE);
    let cluster_name = machine
        .labels()
        .get(captf_api::labels::CLUSTER_NAME)
        .cloned();
    let paused = match (moving, cluster_name) {
        (true, Some(cluster)) => {
            let api: Api<kube::api::DynamicObject> =
                Api::namespaced_with(client.clone(), &namespace, &capi::cluster_resource());
            match absent_is_none(api.get_opt(&cluster).await)? {
                Some(object) => serde_json::from_value::<capi::Cluster>(
                    serde_json::to_value(object).unwrap_or_default(),
                )
                .is_ok_and(|c| c.paused()),
                None => false,
            }
        }
        _ => false,
    };
    if paused {
        return Ok((true, Vec::new()));
    }
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), &namespace, &capi::machine_resource());
    let machines = absent_is_none(api.list(&ListParams::default()).await.map(Some))?
        .map(|list| list.items)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| serde_json::from_value(serde_json::to_value(m).ok()?).ok())
        .collect();
    Ok((false, machines))
}

/// Everything that may use an identity, in every namespace.
pub async fn identity_users_now(
    client: &Client,
    identity: &str,
) -> Result<Vec<String>, kube::Error> {
    let params = ListParams::default();
    let clusters = Api::<TerraformCluster>::all(client.clone())
        .list(&params)
        .await?;
    let machines = Api::<TerraformMachine>::all(client.clone())
        .list(&params)
        .await?;
    let pools = Api::<TerraformMachinePool>::all(client.clone())
        .list(&params)
        .await?;
    Ok(identity_users(
        identity,
        &clusters.items,
        &machines.items,
        &pools.items,
    ))
}

/// A 404 (the object, or CAPI's CRDs, do not exist) as `None`.
fn absent_is_none<T>(result: Result<Option<T>, kube::Error>) -> Result<Option<T>, kube::Error> {
    match result {
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use captf_api::common::IdentityReference;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn owner(name: &str, points_at: (&str, &str, &str), deleting: bool) -> capi::Machine {
        let (group, kind, target) = points_at;
        let mut m = capi::Machine::default();
        m.metadata.name = Some(name.into());
        m.metadata.deletion_timestamp = deleting.then(|| Time(Default::default()));
        m.spec.infrastructure_ref = Some(capi::ContractReference {
            api_group: group.into(),
            kind: kind.into(),
            name: target.into(),
        });
        m
    }

    #[test]
    fn a_machine_is_deleted_through_its_machine() {
        let tm = TerraformMachine::new("tm-1", Default::default());
        let ours = (captf_api::GROUP, "TerraformMachine", "tm-1");
        let cases = [
            ("no Machines", vec![], false, None),
            (
                "its Machine",
                vec![owner("m-1", ours, false)],
                false,
                Some("m-1"),
            ),
            (
                "its Machine is deleting",
                vec![owner("m-1", ours, true)],
                false,
                None,
            ),
            (
                "another machine's Machine",
                vec![owner(
                    "m-2",
                    (captf_api::GROUP, "TerraformMachine", "tm-2"),
                    false,
                )],
                false,
                None,
            ),
            (
                "another provider's kind",
                vec![owner(
                    "m-3",
                    ("infrastructure.example.com", "TerraformMachine", "tm-1"),
                    false,
                )],
                false,
                None,
            ),
            (
                "clusterctl move from a paused cluster",
                vec![owner("m-1", ours, false)],
                true,
                None,
            ),
        ];
        for (name, owners, moving, refused_for) in cases {
            let result = machine_delete(&tm, moving, &owners);
            match refused_for {
                None => assert_eq!(result, Ok(()), "{name}"),
                Some(machine) => {
                    let err = result.expect_err(name);
                    assert!(
                        err.contains(&format!("delete the Machine {machine} instead"))
                            && err.contains("skips drain"),
                        "{name}: {err}"
                    );
                }
            }
        }
    }

    #[test]
    fn an_identity_is_deleted_once_nothing_uses_it() {
        let named = |name: &str| Some(IdentityReference { name: name.into() });
        let mut direct = TerraformCluster::new("direct", Default::default());
        direct.metadata.namespace = Some("a".into());
        direct.spec.workspace.identity_ref = named("aws");
        let mut defaults = TerraformCluster::new("defaults", Default::default());
        defaults.metadata.namespace = Some("b".into());
        defaults.spec.workspace.identity_ref = named("other");
        defaults.spec.defaults = Some(captf_api::cluster::TerraformClusterDefaults {
            identity_ref: named("aws"),
            ..Default::default()
        });
        let mut unrelated = TerraformCluster::new("unrelated", Default::default());
        unrelated.spec.workspace.identity_ref = named("other");
        let mut machine = TerraformMachine::new("m", Default::default());
        machine.metadata.namespace = Some("c".into());
        machine.spec.workspace.identity_ref = named("aws");
        let mut pool = TerraformMachinePool::new("p", Default::default());
        pool.metadata.namespace = Some("d".into());
        pool.spec.workspace.identity_ref = named("aws");
        let users = identity_users("aws", &[direct, defaults, unrelated], &[machine], &[pool]);
        assert_eq!(
            users,
            [
                "TerraformCluster a/direct",
                "TerraformCluster b/defaults",
                "TerraformMachine c/m",
                "TerraformMachinePool d/p"
            ]
        );

        let mut identity = TerraformClusterIdentity::new("aws", Default::default());
        let err = identity_delete(&identity, &users).expect_err("in use");
        assert!(err.contains("in use by TerraformCluster a/direct"), "{err}");
        let many: Vec<String> = (0..7)
            .map(|i| format!("TerraformMachine ns/m{i}"))
            .collect();
        let err = identity_delete(&identity, &many).expect_err("in use");
        assert!(
            err.contains("m4 and 2 more") && !err.contains("m5"),
            "{err}"
        );
        identity.status = Some(captf_api::identity::TerraformClusterIdentityStatus {
            namespaces: Some(vec!["a".into()]),
            ..Default::default()
        });
        let err = identity_delete(&identity, &[]).expect_err("mirrored");
        assert!(err.contains("still mirrored into namespaces a"), "{err}");
        identity.status = None;
        assert_eq!(identity_delete(&identity, &[]), Ok(()));
    }
}
