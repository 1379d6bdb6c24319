//! Names of everything CAPTF creates for a workload object: the state suffix, Secrets, Leases and
//! Jobs. Every name is derived from the object's namespace, kind and name only (never its UID),
//! so clusterctl move and a re-created object with the same triple find the same state.
//!
//! Build an [`ObjectKey`] (which validates the namespace and name once) and ask it for names;
//! every name it returns is a valid Kubernetes object name.

use sha2::{Digest, Sha256};

use crate::Error;
use crate::common::Operation;

/// Longest Kubernetes object name (DNS-1123 subdomain).
pub const MAX_NAME: usize = 253;
/// Longest DNS-1123 label, label value and hostname.
pub const MAX_LABEL: usize = 63;
/// Longest Job name: 63 (hostname) - 1 (`-`) - 5 (random pod suffix). At this length the pod
/// name equals the hostname the engine records as lock holder, which makes stale-lock
/// detection possible.
pub const MAX_JOB_NAME: usize = 57;

/// The three kinds that run Jobs and own state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadKind {
    Cluster,
    Machine,
    MachinePool,
}

impl WorkloadKind {
    /// Every workload kind.
    pub const ALL: [WorkloadKind; 3] = [
        WorkloadKind::Cluster,
        WorkloadKind::Machine,
        WorkloadKind::MachinePool,
    ];

    /// The Kubernetes kind, exactly as hashed into the state suffix.
    pub const fn kind(self) -> &'static str {
        match self {
            WorkloadKind::Cluster => "TerraformCluster",
            WorkloadKind::Machine => "TerraformMachine",
            WorkloadKind::MachinePool => "TerraformMachinePool",
        }
    }

    /// `c`, `m` or `mp`: the short form used in names.
    pub const fn short(self) -> &'static str {
        match self {
            WorkloadKind::Cluster => "c",
            WorkloadKind::Machine => "m",
            WorkloadKind::MachinePool => "mp",
        }
    }

    /// The finalizer this kind holds.
    pub const fn finalizer(self) -> &'static str {
        match self {
            WorkloadKind::Cluster => crate::finalizers::TERRAFORM_CLUSTER,
            WorkloadKind::Machine => crate::finalizers::TERRAFORM_MACHINE,
            WorkloadKind::MachinePool => crate::finalizers::TERRAFORM_MACHINE_POOL,
        }
    }
}

impl std::str::FromStr for WorkloadKind {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        WorkloadKind::ALL
            .into_iter()
            .find(|k| k.kind() == s)
            .ok_or_else(|| Error::UnknownKind(s.to_owned()))
    }
}

/// A validated (namespace, kind, name) triple: the identity every derived name hangs off.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    namespace: String,
    kind: WorkloadKind,
    name: String,
}

impl ObjectKey {
    /// Validates `namespace` (a DNS-1123 label) and `name` (a DNS-1123 subdomain).
    pub fn new(
        namespace: impl Into<String>,
        kind: WorkloadKind,
        name: impl Into<String>,
    ) -> Result<Self, Error> {
        let (namespace, name) = (namespace.into(), name.into());
        check_dns_label("metadata.namespace", &namespace)?;
        check_dns_subdomain("metadata.name", &name)?;
        Ok(ObjectKey {
            namespace,
            kind,
            name,
        })
    }

    /// The object's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The object's kind.
    pub fn kind(&self) -> WorkloadKind {
        self.kind
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kubernetes backend `secret_suffix`: the first 16 hex characters of
    /// sha256(`<namespace>/<Kind>/<name>`), then `-c`, `-m` or `-mp`. The letter tail keeps the
    /// backend from reading the suffix as a chunk index.
    pub fn state_suffix(&self) -> String {
        let digest = hex16(&format!(
            "{}/{}/{}",
            self.namespace,
            self.kind.kind(),
            self.name
        ));
        format!("{digest}-{}", self.kind.short())
    }

    /// The base state Secret the backend writes.
    pub fn state_secret(&self) -> String {
        state_secret(&self.state_suffix())
    }

    /// The backend's state lock Lease.
    pub fn lock_lease(&self) -> String {
        format!("lock-tfstate-default-{}", self.state_suffix())
    }

    /// The run lease held while a Job of this object runs.
    pub fn run_lease(&self) -> String {
        format!("captf-run-{}", self.state_suffix())
    }

    /// The durable inputs Secret (`captf-inputs-<c|m|mp>-<name>`).
    pub fn durable_inputs_secret(&self) -> String {
        bounded_name(
            &format!("captf-inputs-{}-", self.kind.short()),
            &self.name,
            MAX_NAME,
        )
    }

    /// The plan key Secret (`captf-plankey-<c|m|mp>-<name>`).
    pub fn plan_key_secret(&self) -> String {
        bounded_name(
            &format!("captf-plankey-{}-", self.kind.short()),
            &self.name,
            MAX_NAME,
        )
    }

    /// The backup Secret of one state serial (chunk 0; further chunks add `-part-N`).
    pub fn backup_secret(&self, serial: u64) -> String {
        format!("captf-state-backup-{}-{serial}", self.state_suffix())
    }

    /// The backup Secret of a serial whose set already exists with other content (after a
    /// restore): the name gains the first 8 characters of the payload digest.
    pub fn backup_secret_with_digest(&self, serial: u64, digest_hex: &str) -> String {
        let short: String = digest_hex.chars().take(8).collect();
        format!("{}-{short}", self.backup_secret(serial))
    }

    /// The value of `captf.infrastructure.cluster.x-k8s.io/owner-name` for this object.
    pub fn owner_name_label(&self) -> String {
        label_value(&self.name)
    }

    /// The deterministic Job name `captf-<c|m|mp>-<name>-<op>-a<attempt>-<hash6>`.
    ///
    /// `hash6` is the first 6 hex characters of sha256(`<inputs hash>\n<op>\n<attempt>\n<tick>`),
    /// so a retry of the same work reuses its name and different work never does. The object
    /// name is replaced by the first 16 hex characters of its sha256 when the Job name would
    /// exceed [`MAX_JOB_NAME`] or when the name is not a DNS label (a dot would cut the pod's
    /// hostname short).
    pub fn job_name(&self, op: Operation, attempt: u32, inputs_hash: &str, tick: &str) -> String {
        let hash6 = &hex_digest(&format!("{inputs_hash}\n{op}\n{attempt}\n{tick}"))[..6];
        let build =
            |name: &str| format!("captf-{}-{name}-{op}-a{attempt}-{hash6}", self.kind.short());
        let full = build(&self.name);
        if full.len() <= MAX_JOB_NAME && is_dns_label(&self.name) {
            full
        } else {
            build(&hex16(&self.name))
        }
    }
}

impl ObjectKey {
    /// Whether `pod` is a pod of one of this object's Jobs (any operation, any attempt):
    /// `<job name>-<5 characters>` with the job name as [`ObjectKey::job_name`] builds it.
    /// Used to tell a lock left by a dead runner of this object from anyone else's.
    pub fn owns_pod_name(&self, pod: &str) -> bool {
        let Some((job, random)) = pod.rsplit_once('-') else {
            return false;
        };
        if random.len() != 5 || !random.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return false;
        }
        [self.name.clone(), hex16(&self.name)].iter().any(|name| {
            let Some(rest) = job.strip_prefix(&format!("captf-{}-{name}-", self.kind.short()))
            else {
                return false;
            };
            let mut parts = rest.rsplitn(3, '-');
            let (Some(hash6), Some(attempt), Some(op)) = (parts.next(), parts.next(), parts.next())
            else {
                return false;
            };
            hash6.len() == 6
                && hash6.bytes().all(|b| b.is_ascii_hexdigit())
                && attempt
                    .strip_prefix('a')
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                && Operation::ALL.iter().any(|o| o.as_str() == op)
        })
    }
}

/// The base state Secret for a suffix: `tfstate-default-<suffix>`.
pub fn state_secret(suffix: &str) -> String {
    format!("tfstate-default-{suffix}")
}

/// Chunk `index` of a state or backup set: `index` 0 is the base name itself, later chunks are
/// `<base>-part-<index>`.
pub fn chunk_name(base: &str, index: usize) -> String {
    if index == 0 {
        base.to_owned()
    } else {
        format!("{base}-part-{index}")
    }
}

/// The per-run inputs Secret of a Job: `captf-run-<job name>`.
pub fn per_run_secret(job_name: &str) -> String {
    format!("captf-run-{job_name}")
}

/// The credential mirror of an identity: `captf-creds-<identity>`, or `captf-creds-` and 16 hex
/// characters of its hash when that would exceed 253 characters.
pub fn credential_mirror(identity: &str) -> String {
    let name = format!("captf-creds-{identity}");
    if name.len() <= MAX_NAME {
        name
    } else {
        format!("captf-creds-{}", hex16(identity))
    }
}

/// The write lease of one CAPI Cluster: `captf-cluster-<16 hex of sha256(<ns>/<cluster>)>`.
pub fn cluster_lease(namespace: &str, cluster: &str) -> String {
    format!("captf-cluster-{}", hex16(&format!("{namespace}/{cluster}")))
}

/// A label value for a name: the name itself, or the first 16 hex characters of its sha256 when
/// it is longer than 63 characters.
pub fn label_value(name: &str) -> String {
    if name.len() <= MAX_LABEL {
        name.to_owned()
    } else {
        hex16(name)
    }
}

/// `prefix` + `name`, or, when that exceeds `max`, `prefix` + as much of `name` as fits +
/// `-` + 16 hex characters of the name's hash (so two long names never collide).
fn bounded_name(prefix: &str, name: &str, max: usize) -> String {
    let full = format!("{prefix}{name}");
    if full.len() <= max {
        return full;
    }
    let hash = hex16(name);
    let room = max - prefix.len() - 1 - hash.len();
    let kept = name[..room].trim_end_matches(['-', '.']);
    format!("{prefix}{kept}-{hash}")
}

fn hex_digest(input: &str) -> String {
    hex::encode(Sha256::digest(input.as_bytes()))
}

fn hex16(input: &str) -> String {
    hex_digest(input)[..16].to_owned()
}

/// Whether `s` is a DNS-1123 label: 1-63 of `[a-z0-9-]`, starting and ending alphanumeric.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_LABEL
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Whether `s` is a DNS-1123 subdomain: at most 253 characters of dot-separated labels.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= MAX_NAME && s.split('.').all(is_dns_label_unbounded)
}

fn is_dns_label_unbounded(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Whether `s` is a valid label value: empty, or at most 63 of `[A-Za-z0-9._-]` starting and
/// ending alphanumeric.
pub fn is_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    b.is_empty()
        || (b.len() <= MAX_LABEL
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric())
}

fn check_dns_label(field: &'static str, value: &str) -> Result<(), Error> {
    if is_dns_label(value) {
        Ok(())
    } else {
        Err(Error::InvalidName {
            field,
            value: value.to_owned(),
            rule: "a DNS-1123 label: 1-63 lowercase letters, digits or '-', starting and ending with a letter or digit",
        })
    }
}

fn check_dns_subdomain(field: &'static str, value: &str) -> Result<(), Error> {
    if is_dns_subdomain(value) {
        Ok(())
    } else {
        Err(Error::InvalidName {
            field,
            value: value.to_owned(),
            rule: "a DNS-1123 subdomain: at most 253 characters of dot-separated lowercase labels of letters, digits or '-'",
        })
    }
}
