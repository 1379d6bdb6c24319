//! Security contexts and resources of the Job pod (operations.md §9.1–9.2, concepts.md §22).
//!
//! The user's `securityContext` / `podSecurityContext` are overlaid field by field on the
//! defaults, then hardened: the builder never produces a context weaker than the defaults, even
//! for an object admitted before the webhook rules existed. `capabilities.drop` always holds
//! `ALL`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    AppArmorProfile, Capabilities, PodSecurityContext, ResourceRequirements, SeccompProfile,
    SecurityContext,
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
/// `RuntimeDefault`; `procMount: Unmasked` becomes `Default`; `hostProcess` is turned off.
/// Idempotent.
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
    sc
}

/// The pod security context: `seccompProfile: RuntimeDefault` and `fsGroup: 65532`, overlaid
/// field by field with `user`, then hardened (an `Unconfined` seccomp or AppArmor profile becomes
/// `RuntimeDefault`, `hostProcess` is turned off). `runAsNonRoot` is not defaulted.
pub fn pod_security_context(user: Option<&PodSecurityContext>) -> PodSecurityContext {
    harden_pod(user.cloned().unwrap_or_default())
}

/// Fills the pod defaults a context leaves unset and removes what would weaken them (see
/// [`pod_security_context`]). Idempotent.
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
    sc
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
