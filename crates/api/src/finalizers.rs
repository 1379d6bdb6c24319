//! Finalizers, one per workload kind. Templates and identities carry none.

/// Held by a TerraformCluster until its infrastructure is destroyed or released.
pub const TERRAFORM_CLUSTER: &str = "terraformcluster.infrastructure.cluster.x-k8s.io";
/// Held by a TerraformMachine until its infrastructure is destroyed or released.
pub const TERRAFORM_MACHINE: &str = "terraformmachine.infrastructure.cluster.x-k8s.io";
/// Held by a TerraformMachinePool until its infrastructure is destroyed or released.
pub const TERRAFORM_MACHINE_POOL: &str = "terraformmachinepool.infrastructure.cluster.x-k8s.io";

/// Held by the Secrets that are the last record of what a module created (the state's base
/// chunk, every state backup, the durable inputs) until the manager releases them after a
/// destroy, an abandon or a pruning: a finalizer removed by hand from the object, a namespace
/// deleted while a destroy runs, or a Secret deleted by hand leaves them Terminating and
/// readable instead of gone.
pub const STATE_PROTECTION: &str = "captf.io/state-protection";
