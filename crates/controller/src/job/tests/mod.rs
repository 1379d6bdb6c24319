//! Job builder tests: golden YAML per operation (regenerate with `UPDATE_GOLDEN=1`) and table
//! tests of the env, pull secrets, resources, security contexts, names and labels, one file per
//! concern; this file holds the shared specs and accessors.

use std::collections::BTreeMap;
use std::path::PathBuf;

use captf_api::names::{self, ObjectKey, WorkloadKind};
use captf_api::{ImagePullPolicy, JobPolicy, Operation};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, EnvVar, LocalObjectReference, PodSecurityContext, PodSpec,
    ResourceRequirements, SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::*;

mod golden;
mod naming;
mod pod;
mod restore;
mod runner_args;

const UID: &str = "5f1d3c2a-0000-4000-8000-00000000000a";
const RUNNER_IMAGE: &str = "ghcr.io/captf-io/captf:v0.1.0";
const H: &str = "h2:1111111111111111111111111111111111111111111111111111111111111111";
const P: &str = "p2:2222222222222222222222222222222222222222222222222222222222222222";
const POOL_APPROVAL: &str = "h2:3333333333333333333333333333333333333333333333333333333333333333";

fn key(kind: WorkloadKind, name: &str) -> ObjectKey {
    ObjectKey::new("team-a", kind, name).expect("valid key")
}

fn policy(own: &JobPolicy) -> EffectivePolicy {
    EffectivePolicy::resolve(&PolicyLayers {
        own: Some(own),
        ..PolicyLayers::default()
    })
}

fn env(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}

fn pull(name: &str) -> LocalObjectReference {
    LocalObjectReference {
        name: name.to_owned(),
    }
}

fn base(kind: WorkloadKind, name: &str, op: Operation, image: &str) -> JobSpec {
    let mut s = JobSpec::new(key(kind, name), UID, "prod", op, image, RUNNER_IMAGE, "aws");
    s.inputs_hash = H.to_owned();
    s.policy = policy(&JobPolicy {
        image_pull_secrets: Some(vec![pull("registry")]),
        ..JobPolicy::default()
    });
    s
}

const CLUSTER_IMAGE: &str = "ghcr.io/example/cluster-module:v1.2.3";
const MACHINE_IMAGE: &str = "ghcr.io/example/machine-module:v1.2.3";
const MACHINE_PINNED: &str = "ghcr.io/example/machine-module@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const POOL_PINNED: &str = "ghcr.io/example/pool-module@sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
const CLUSTER_PINNED: &str = "ghcr.io/example/cluster-module@sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

fn pod(job: &Job) -> &PodSpec {
    job.spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .expect("pod spec")
}

fn main_container(job: &Job) -> &Container {
    &pod(job).containers[0]
}

fn args(job: &Job) -> Vec<String> {
    main_container(job).args.clone().unwrap_or_default()
}

fn flags(job: &Job) -> Vec<String> {
    args(job)
        .into_iter()
        .map(|a| a.split('=').next().unwrap_or_default().to_owned())
        .collect()
}
