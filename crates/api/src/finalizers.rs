//! Finalizers, one per workload kind. Templates and identities carry none.

/// Held by a TerraformCluster until its infrastructure is destroyed or released.
pub const TERRAFORM_CLUSTER: &str = "terraformcluster.infrastructure.cluster.x-k8s.io";
/// Held by a TerraformMachine until its infrastructure is destroyed or released.
pub const TERRAFORM_MACHINE: &str = "terraformmachine.infrastructure.cluster.x-k8s.io";
/// Held by a TerraformMachinePool until its infrastructure is destroyed or released.
pub const TERRAFORM_MACHINE_POOL: &str = "terraformmachinepool.infrastructure.cluster.x-k8s.io";
