//! A TerraformCluster being deleted waits for its TerraformMachines and TerraformMachinePools:
//! their modules read the cluster's outputs, and destroying the network under live machines
//! strands them. Deleting a CAPI Cluster removes its machines first anyway; this holds a
//! direct `kubectl delete` of the TerraformCluster to the same order.

use captf_api::{TerraformMachine, TerraformMachinePool, labels};
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use crate::error::{KubeContext, Result};

/// Names listed in the condition message, per kind.
const NAMED: usize = 3;

/// The machines and pools labelled with the cluster's name, each list sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Dependents {
    pub machines: Vec<String>,
    pub pools: Vec<String>,
}

impl Dependents {
    /// Lists them from the API server, not the cache: a `--watch-filter` that hides a machine
    /// from this manager must not let its cluster be destroyed under it. `cluster` empty (no
    /// label, no owner) means nothing can be told to belong to it.
    pub async fn of(client: &kube::Client, namespace: &str, cluster: &str) -> Result<Dependents> {
        if cluster.is_empty() {
            return Ok(Dependents::default());
        }
        let params = ListParams::default().labels(&format!("{}={cluster}", labels::CLUSTER_NAME));
        let machines: Api<TerraformMachine> = Api::namespaced(client.clone(), namespace);
        let pools: Api<TerraformMachinePool> = Api::namespaced(client.clone(), namespace);
        let (machines, pools) = tokio::try_join!(
            async {
                machines.list_metadata(&params).await.during(|| {
                    format!("listing the TerraformMachines of cluster {namespace}/{cluster}")
                })
            },
            async {
                pools.list_metadata(&params).await.during(|| {
                    format!("listing the TerraformMachinePools of cluster {namespace}/{cluster}")
                })
            },
        )?;
        Ok(Dependents {
            machines: sorted(machines.items.iter().map(|o| o.name_any())),
            pools: sorted(pools.items.iter().map(|o| o.name_any())),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.machines.is_empty() && self.pools.is_empty()
    }

    /// `2 TerraformMachine(s) left: a, b; 1 TerraformMachinePool(s) left: p; the destroy waits
    /// until they are deleted`, at most `NAMED` names per kind; `None` when nothing is left.
    pub fn message(&self) -> Option<String> {
        let part = |kind: &str, names: &[String]| {
            (!names.is_empty()).then(|| {
                let mut listed = names[..names.len().min(NAMED)].join(", ");
                if names.len() > NAMED {
                    listed.push_str(&format!(" and {} more", names.len() - NAMED));
                }
                format!("{} {kind}(s) left: {listed}", names.len())
            })
        };
        let parts: Vec<String> = [
            part("TerraformMachine", &self.machines),
            part("TerraformMachinePool", &self.pools),
        ]
        .into_iter()
        .flatten()
        .collect();
        (!parts.is_empty()).then(|| {
            format!(
                "{}; the destroy waits until they are deleted (delete the Machines and MachinePools, not only their infrastructure)",
                parts.join("; ")
            )
        })
    }
}

fn sorted(names: impl Iterator<Item = String>) -> Vec<String> {
    let mut names: Vec<String> = names.collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize, prefix: &str) -> Vec<String> {
        (1..=n).map(|i| format!("{prefix}{i}")).collect()
    }

    #[test]
    fn message_names_at_most_three_of_each_kind() {
        let tail = "; the destroy waits until they are deleted (delete the Machines and MachinePools, not only their infrastructure)";
        let rows: [(usize, usize, Option<String>); 5] = [
            (0, 0, None),
            (1, 0, Some(format!("1 TerraformMachine(s) left: m1{tail}"))),
            (
                0,
                2,
                Some(format!("2 TerraformMachinePool(s) left: p1, p2{tail}")),
            ),
            (
                3,
                1,
                Some(format!(
                    "3 TerraformMachine(s) left: m1, m2, m3; 1 TerraformMachinePool(s) left: p1{tail}"
                )),
            ),
            (
                5,
                4,
                Some(format!(
                    "5 TerraformMachine(s) left: m1, m2, m3 and 2 more; 4 TerraformMachinePool(s) left: p1, p2, p3 and 1 more{tail}"
                )),
            ),
        ];
        for (machines, pools, want) in rows {
            let d = Dependents {
                machines: names(machines, "m"),
                pools: names(pools, "p"),
            };
            assert_eq!(d.message(), want, "{machines} machines, {pools} pools");
            assert_eq!(d.is_empty(), want.is_none());
        }
    }
}
