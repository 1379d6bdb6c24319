//! Security contexts and resources of the Job pod (operations.md §9.1–9.2, concepts.md §22).
//!
//! The user's `securityContext` / `podSecurityContext` are overlaid field by field on the
//! defaults, then hardened: the builder never produces a context the admission rules would
//! refuse, whatever the stored spec says (an object admitted before a rule existed, or one
//! whose policy was weakened while it was being deleted: its destroy Jobs are built from it
//! and, unlike other operations, skip the `JobPolicyInvalid` check). `capabilities.drop`
//! always holds `ALL`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    AppArmorProfile, Capabilities, PodSecurityContext, ResourceRequirements, SELinuxOptions,
    SeccompProfile, SecurityContext,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// UID of the runner init container, and the default pod `fsGroup` (the credential files are
/// 0440: a non-root module image reads them through this group).
pub const RUNNER_UID: i64 = 65532;

const ALL: &str = "ALL";
const RUNTIME_DEFAULT: &str = "RuntimeDefault";
const UNCONFINED: &str = "Unconfined";
const PROC_MOUNT_UNMASKED: &str = "Unmasked";
const PROC_MOUNT_DEFAULT: &str = "Default";

/// The sysctls of the Pod Security Standards' baseline: namespaced, and safe to set. The
/// admission rules refuse others and the builder drops them.
pub const SAFE_SYSCTLS: [&str; 12] = [
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

/// SELinux types the container runtimes give ordinary containers (empty: the runtime's
/// choice). The admission rules refuse others and the builder drops them.
pub const SAFE_SELINUX_TYPES: [&str; 5] = [
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
];

fn quantities(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

/// The main container's resources when no policy layer sets them: requests `cpu: 250m`,
/// `memory: 512Mi`; limits `memory: 2Gi`; no CPU limit (throttling a slow apply is worse than
/// a slow apply).
pub fn default_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(quantities(&[("cpu", "250m"), ("memory", "512Mi")])),
        limits: Some(quantities(&[("memory", "2Gi")])),
        ..ResourceRequirements::default()
    }
}

/// The runner init container's fixed resources: requests `cpu: 10m`, `memory: 32Mi`; limits
/// `cpu: 100m`, `memory: 64Mi`.
pub fn init_resources() -> ResourceRequirements {
    ResourceRequirements {
        requests: Some(quantities(&[("cpu", "10m"), ("memory", "32Mi")])),
        limits: Some(quantities(&[("cpu", "100m"), ("memory", "64Mi")])),
        ..ResourceRequirements::default()
    }
}

/// The runner init container's fixed, locked-down security context.
pub fn init_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec![ALL.to_owned()]),
            add: None,
        }),
        run_as_non_root: Some(true),
        run_as_user: Some(RUNNER_UID),
        read_only_root_filesystem: Some(true),
        ..SecurityContext::default()
    }
}

/// The main container's security context: `allowPrivilegeEscalation: false`,
/// `capabilities.drop: [ALL]`, `readOnlyRootFilesystem: true`, overlaid field by field with
/// `user`, then [hardened](harden_container). `runAsNonRoot`/`runAsUser` stay unset unless the
/// user sets them (images built FROM hashicorp/terraform run as root).
pub fn main_security_context(user: Option<&SecurityContext>) -> SecurityContext {
    let mut sc = SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec![ALL.to_owned()]),
            add: None,
        }),
        read_only_root_filesystem: Some(true),
        ..SecurityContext::default()
    };
    if let Some(u) = user.cloned() {
        overlay(
            &mut sc.allow_privilege_escalation,
            u.allow_privilege_escalation,
        );
        overlay(&mut sc.app_armor_profile, u.app_armor_profile);
        overlay(&mut sc.capabilities, u.capabilities);
        overlay(&mut sc.privileged, u.privileged);
        overlay(&mut sc.proc_mount, u.proc_mount);
        overlay(
            &mut sc.read_only_root_filesystem,
            u.read_only_root_filesystem,
        );
        overlay(&mut sc.run_as_group, u.run_as_group);
        overlay(&mut sc.run_as_non_root, u.run_as_non_root);
        overlay(&mut sc.run_as_user, u.run_as_user);
        overlay(&mut sc.se_linux_options, u.se_linux_options);
        overlay(&mut sc.seccomp_profile, u.seccomp_profile);
        overlay(&mut sc.windows_options, u.windows_options);
    }
    harden_container(sc)
}

/// Brings a container security context back to at least the defaults: `drop` holds `ALL`
/// (first) and `add` is removed; privileged mode, privilege escalation and a writable root
/// filesystem are turned off; an `Unconfined` seccomp or AppArmor profile becomes
/// `RuntimeDefault`; `procMount: Unmasked` becomes `Default`; `hostProcess` is turned off;
/// `runAsNonRoot: false`, `runAsUser: 0` and an SELinux user, role or non-container type are
/// removed ([`harden_identity`]). Idempotent.
pub fn harden_container(mut sc: SecurityContext) -> SecurityContext {
    let mut caps = sc.capabilities.take().unwrap_or_default();
    let mut drop = caps.drop.take().unwrap_or_default();
    if !drop.iter().any(|c| c == ALL) {
        drop.insert(0, ALL.to_owned());
    }
    sc.capabilities = Some(Capabilities {
        add: None,
        drop: Some(drop),
    });
    if sc.privileged == Some(true) {
        sc.privileged = Some(false);
    }
    sc.allow_privilege_escalation = Some(false);
    sc.read_only_root_filesystem = Some(true);
    if sc.proc_mount.as_deref() == Some(PROC_MOUNT_UNMASKED) {
        sc.proc_mount = Some(PROC_MOUNT_DEFAULT.to_owned());
    }
    harden_profiles(
        &mut sc.seccomp_profile,
        &mut sc.app_armor_profile,
        &mut sc.windows_options,
    );
    harden_identity(
        &mut sc.run_as_non_root,
        &mut sc.run_as_user,
        &mut sc.se_linux_options,
    );
    sc
}

/// The pod security context: `seccompProfile: RuntimeDefault` and `fsGroup: 65532`, overlaid
/// field by field with `user`, then hardened (an `Unconfined` seccomp or AppArmor profile becomes
/// `RuntimeDefault`, `hostProcess` is turned off). `runAsNonRoot` is not defaulted.
pub fn pod_security_context(user: Option<&PodSecurityContext>) -> PodSecurityContext {
    harden_pod(user.cloned().unwrap_or_default())
}

/// Fills the pod defaults a context leaves unset and removes what would weaken them (see
/// [`pod_security_context`]): the profiles and identity as for a container, and every sysctl
/// outside [`SAFE_SYSCTLS`]. Idempotent.
pub fn harden_pod(mut sc: PodSecurityContext) -> PodSecurityContext {
    if sc.seccomp_profile.is_none() {
        sc.seccomp_profile = Some(runtime_default_seccomp());
    }
    if sc.fs_group.is_none() {
        sc.fs_group = Some(RUNNER_UID);
    }
    harden_profiles(
        &mut sc.seccomp_profile,
        &mut sc.app_armor_profile,
        &mut sc.windows_options,
    );
    harden_identity(
        &mut sc.run_as_non_root,
        &mut sc.run_as_user,
        &mut sc.se_linux_options,
    );
    if let Some(sysctls) = sc.sysctls.as_mut() {
        sysctls.retain(|s| SAFE_SYSCTLS.contains(&s.name.as_str()));
    }
    if sc.sysctls.as_ref().is_some_and(Vec::is_empty) {
        sc.sysctls = None;
    }
    sc
}

/// Removes what would run the container as root on purpose or outside the container SELinux
/// domain. Removed, not replaced: `runAsNonRoot` and `runAsUser` are not defaulted (images
/// FROM hashicorp/terraform run as root), so without the weakening value the pod's value or
/// the image's user applies, as for a policy that never set it; a container-level
/// `runAsNonRoot: false` or `runAsUser: 0` would otherwise override a pod's non-root setting.
/// An SELinux `level` is kept (the baseline allows it).
fn harden_identity(
    run_as_non_root: &mut Option<bool>,
    run_as_user: &mut Option<i64>,
    se_linux: &mut Option<SELinuxOptions>,
) {
    if *run_as_non_root == Some(false) {
        *run_as_non_root = None;
    }
    if *run_as_user == Some(0) {
        *run_as_user = None;
    }
    if let Some(options) = se_linux.as_mut() {
        options.user = None;
        options.role = None;
        if options
            .type_
            .as_deref()
            .is_some_and(|t| !SAFE_SELINUX_TYPES.contains(&t))
        {
            options.type_ = None;
        }
        if options.level.is_none() && options.type_.is_none() {
            *se_linux = None;
        }
    }
}

fn harden_profiles(
    seccomp: &mut Option<SeccompProfile>,
    app_armor: &mut Option<AppArmorProfile>,
    windows: &mut Option<k8s_openapi::api::core::v1::WindowsSecurityContextOptions>,
) {
    if seccomp.as_ref().is_some_and(|p| p.type_ == UNCONFINED) {
        *seccomp = Some(runtime_default_seccomp());
    }
    if app_armor.as_ref().is_some_and(|p| p.type_ == UNCONFINED) {
        *app_armor = Some(AppArmorProfile {
            type_: RUNTIME_DEFAULT.to_owned(),
            localhost_profile: None,
        });
    }
    if let Some(w) = windows.as_mut()
        && w.host_process == Some(true)
    {
        w.host_process = Some(false);
    }
}

fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: RUNTIME_DEFAULT.to_owned(),
        localhost_profile: None,
    }
}

fn overlay<T>(field: &mut Option<T>, user: Option<T>) {
    if user.is_some() {
        *field = user;
    }
}
