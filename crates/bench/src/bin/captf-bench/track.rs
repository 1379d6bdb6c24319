//! Watching the fleet: which of its objects (TerraformClusters and TerraformMachines) are
//! Ready, any change of them after the initial list, and the Jobs in its namespaces.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use captf_api::labels;
use captf_e2e::fixture::Conditioned;
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use kube::Resource;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use serde::de::DeserializeOwned;

use crate::seed;

/// The kinds the fleet holds, as the Jobs' `captf.io/owner-kind` label names them.
pub const KINDS: [&str; 2] = ["TerraformCluster", "TerraformMachine"];

/// What the fleet's watches saw, by kind.
#[derive(Default)]
pub struct Tracker {
    listed: HashSet<&'static str>,
    seen: HashSet<(&'static str, String)>,
    ready: HashSet<(&'static str, String)>,
    /// Changes of fleet objects seen after the initial list.
    pub changes: u64,
}

impl Tracker {
    /// The watch of `kind` listed every object.
    pub fn listed(&self, kind: &str) -> bool {
        self.listed.contains(kind)
    }

    /// Objects of `kind` seen.
    pub fn seen(&self, kind: &str) -> usize {
        self.seen.iter().filter(|(k, _)| *k == kind).count()
    }

    /// Objects of `kind` Ready now.
    pub fn ready(&self, kind: &str) -> usize {
        self.ready.iter().filter(|(k, _)| *k == kind).count()
    }
}

/// Watches the fleet's objects of kind `K` into `tracker`.
pub async fn track<K>(api: Api<K>, tracker: Arc<Mutex<Tracker>>)
where
    K: Resource<DynamicType = ()> + Conditioned + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let kind: &'static str = match K::kind(&()).as_ref() {
        "TerraformCluster" => KINDS[0],
        _ => KINDS[1],
    };
    let config = watcher::Config::default().labels(&seed::fleet_selector());
    let mut stream = watcher::watcher(api, config).boxed();
    while let Some(event) = stream.next().await {
        let Ok(event) = event else { continue };
        let Ok(mut t) = tracker.lock() else { return };
        match event {
            watcher::Event::Init => {}
            watcher::Event::InitApply(o) | watcher::Event::Apply(o) => {
                let meta = o.meta();
                let key = (
                    kind,
                    format!(
                        "{}/{}",
                        meta.namespace.as_deref().unwrap_or_default(),
                        meta.name.as_deref().unwrap_or_default()
                    ),
                );
                if t.listed(kind) {
                    t.changes += 1;
                }
                t.seen.insert(key.clone());
                if captf_e2e::fixture::ready(&o) {
                    t.ready.insert(key);
                } else {
                    t.ready.remove(&key);
                }
            }
            watcher::Event::InitDone => {
                t.listed.insert(kind);
            }
            watcher::Event::Delete(_) => {}
        }
    }
}

/// Jobs of the fleet's TerraformClusters and TerraformMachines in its namespaces, by kind; the
/// seeded history (`seed_jobs`) left out.
pub async fn fleet_jobs(client: &kube::Client) -> anyhow::Result<BTreeMap<String, usize>> {
    let jobs: Api<Job> = Api::all(client.clone());
    let list = jobs
        .list(&ListParams::default().labels(&format!(
            "{} in ({})",
            labels::OWNER_KIND,
            KINDS.join(",")
        )))
        .await?;
    let mut by_kind: BTreeMap<String, usize> = KINDS.iter().map(|k| ((*k).to_owned(), 0)).collect();
    for job in &list.items {
        let in_fleet = job
            .metadata
            .namespace
            .as_deref()
            .is_some_and(|n| n.starts_with("fleet-"));
        let seeded = job.spec.as_ref().and_then(|s| s.managed_by.as_deref())
            == Some(crate::seed_jobs::MANAGED_BY);
        if let Some(kind) = job
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::OWNER_KIND))
            && in_fleet
            && !seeded
        {
            *by_kind.entry(kind.clone()).or_default() += 1;
        }
    }
    Ok(by_kind)
}
