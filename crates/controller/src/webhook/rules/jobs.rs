//! The Job policy rules (operations.md §6.2, "Jobs policy"): the runner pod holds cloud
//! credentials, so a policy may not weaken its security context, may not take the runner's
//! environment names, and may not set a lock timeout that would use up the whole run.

use captf_api::common::JobPolicy;
use k8s_openapi::api::core::v1::{
    AppArmorProfile, PodSecurityContext, SELinuxOptions, SeccompProfile, SecurityContext,
    WindowsSecurityContextOptions,
};

use crate::job::policy::is_reserved_env;
// One list each, shared with the Job builder, which drops what these rules refuse.
use crate::job::security::{SAFE_SELINUX_TYPES, SAFE_SYSCTLS};
use crate::webhook::violations::Violations;

/// The default lock timeout (seconds) a deadline alone must exceed.
const DEFAULT_LOCK_TIMEOUT_SECONDS: i64 = 300;
/// The default deadline (seconds) a lock timeout alone must stay below.
const DEFAULT_ACTIVE_DEADLINE_SECONDS: i64 = 3600;
/// The API schema's cap on `env`.
const MAX_ENV: usize = 64;
const WHY: &str = "the Job container holds cloud credentials and";

/// Checks one policy (`path` is where it sits, e.g. `spec.jobs`).
pub fn job_policy(v: &mut Violations, path: &str, policy: &JobPolicy) {
    if let Some(sc) = &policy.security_context {
        container_context(v, &format!("{path}.securityContext"), sc);
    }
    if let Some(psc) = &policy.pod_security_context {
        pod_context(v, &format!("{path}.podSecurityContext"), psc);
    }
    let env = policy.env.as_deref().unwrap_or_default();
    if env.len() > MAX_ENV {
        v.push(
            format!("{path}.env"),
            crate::webhook::violations::Problem::TooMany,
            format!(
                "{} entries, at most {MAX_ENV}; move settings into module variables",
                env.len()
            ),
        );
    }
    for (i, entry) in env.iter().enumerate() {
        if is_reserved_env(&entry.name) {
            v.invalid(
                format!("{path}.env[{i}].name"),
                format!(
                    "{:?}: the name is reserved: the runner owns TF_*, KUBE_*, KUBERNETES_*, HOME, TMPDIR and CHECKPOINT_DISABLE; pass settings to the module as variables instead",
                    entry.name
                ),
            );
        }
    }
    lock_and_deadline(v, path, policy);
}

fn lock_and_deadline(v: &mut Violations, path: &str, policy: &JobPolicy) {
    let lock = policy.lock_timeout_seconds.map(i64::from);
    match (lock, policy.active_deadline_seconds) {
        (Some(lock), Some(deadline)) if lock >= deadline => v.invalid(
            format!("{path}.lockTimeoutSeconds"),
            format!(
                "{lock} must be below activeDeadlineSeconds {deadline}, or a held lock uses up the whole run; lower lockTimeoutSeconds or raise activeDeadlineSeconds"
            ),
        ),
        (None, Some(deadline)) if deadline <= DEFAULT_LOCK_TIMEOUT_SECONDS => v.invalid(
            format!("{path}.activeDeadlineSeconds"),
            format!(
                "{deadline} must be above the default lock timeout of {DEFAULT_LOCK_TIMEOUT_SECONDS} seconds; raise it, or set lockTimeoutSeconds below it"
            ),
        ),
        (Some(lock), None) if lock >= DEFAULT_ACTIVE_DEADLINE_SECONDS => v.invalid(
            format!("{path}.lockTimeoutSeconds"),
            format!(
                "{lock} must be below the default activeDeadlineSeconds of {DEFAULT_ACTIVE_DEADLINE_SECONDS}; lower it, or set activeDeadlineSeconds above it"
            ),
        ),
        _ => {}
    }
}

fn container_context(v: &mut Violations, path: &str, sc: &SecurityContext) {
    if sc.privileged == Some(true) {
        v.forbidden(
            format!("{path}.privileged"),
            format!("{WHY} may not run privileged; remove the field or set it to false"),
        );
    }
    if sc.allow_privilege_escalation == Some(true) {
        v.forbidden(
            format!("{path}.allowPrivilegeEscalation"),
            format!("{WHY} may not gain privileges; remove the field or set it to false"),
        );
    }
    if let Some(caps) = sc.capabilities.as_ref().and_then(|c| c.add.as_ref())
        && !caps.is_empty()
    {
        v.forbidden(
            format!("{path}.capabilities.add"),
            format!(
                "{WHY} may not add capabilities ({}); remove capabilities.add",
                caps.join(", ")
            ),
        );
    }
    if sc.read_only_root_filesystem == Some(false) {
        v.forbidden(
            format!("{path}.readOnlyRootFilesystem"),
            format!(
                "{WHY} keeps a read-only root filesystem (the module writes to /tmp and its work dir); remove the field or set it to true"
            ),
        );
    }
    if sc.proc_mount.as_deref() == Some("Unmasked") {
        v.forbidden(
            format!("{path}.procMount"),
            format!("{WHY} may not see an unmasked /proc; remove the field or set it to Default"),
        );
    }
    identity(
        v,
        path,
        Identity {
            run_as_non_root: sc.run_as_non_root,
            run_as_user: sc.run_as_user,
            seccomp: sc.seccomp_profile.as_ref(),
            app_armor: sc.app_armor_profile.as_ref(),
            se_linux: sc.se_linux_options.as_ref(),
            windows: sc.windows_options.as_ref(),
        },
    );
}

fn pod_context(v: &mut Violations, path: &str, psc: &PodSecurityContext) {
    identity(
        v,
        path,
        Identity {
            run_as_non_root: psc.run_as_non_root,
            run_as_user: psc.run_as_user,
            seccomp: psc.seccomp_profile.as_ref(),
            app_armor: psc.app_armor_profile.as_ref(),
            se_linux: psc.se_linux_options.as_ref(),
            windows: psc.windows_options.as_ref(),
        },
    );
    for (i, sysctl) in psc.sysctls.iter().flatten().enumerate() {
        if !SAFE_SYSCTLS.contains(&sysctl.name.as_str()) {
            v.forbidden(
                format!("{path}.sysctls[{i}].name"),
                format!(
                    "{WHY} may only set the baseline's safe sysctls ({}); {:?} is not one of them",
                    SAFE_SYSCTLS.join(", "),
                    sysctl.name
                ),
            );
        }
    }
}

/// The fields a container and a pod security context share.
struct Identity<'a> {
    run_as_non_root: Option<bool>,
    run_as_user: Option<i64>,
    seccomp: Option<&'a SeccompProfile>,
    app_armor: Option<&'a AppArmorProfile>,
    se_linux: Option<&'a SELinuxOptions>,
    windows: Option<&'a WindowsSecurityContextOptions>,
}

fn identity(v: &mut Violations, path: &str, id: Identity<'_>) {
    if id.run_as_non_root == Some(false) {
        v.forbidden(
            format!("{path}.runAsNonRoot"),
            format!("{WHY} may not run as root; remove the field or set it to true"),
        );
    }
    if id.run_as_user == Some(0) {
        v.forbidden(
            format!("{path}.runAsUser"),
            format!("{WHY} may not run as root (uid 0); use a non-zero uid such as 65532"),
        );
    }
    if id.seccomp.is_some_and(|p| p.type_ == "Unconfined") {
        v.forbidden(
            format!("{path}.seccompProfile.type"),
            format!("{WHY} may not run without seccomp; use RuntimeDefault or Localhost"),
        );
    }
    if id.app_armor.is_some_and(|p| p.type_ == "Unconfined") {
        v.forbidden(
            format!("{path}.appArmorProfile.type"),
            format!("{WHY} may not run without AppArmor; use RuntimeDefault or Localhost"),
        );
    }
    if let Some(se) = id.se_linux {
        let type_ = se.type_.as_deref().unwrap_or_default();
        if !SAFE_SELINUX_TYPES.contains(&type_) {
            v.forbidden(
                format!("{path}.seLinuxOptions.type"),
                format!(
                    "{WHY} may only use the container SELinux types (container_t, container_init_t, container_kvm_t, container_engine_t); {type_:?} is not one of them"
                ),
            );
        }
        for (field, value) in [("user", &se.user), ("role", &se.role)] {
            if value.as_deref().is_some_and(|s| !s.is_empty()) {
                v.forbidden(
                    format!("{path}.seLinuxOptions.{field}"),
                    format!("{WHY} may not choose its SELinux {field}; remove the field"),
                );
            }
        }
    }
    if id.windows.and_then(|w| w.host_process) == Some(true) {
        v.forbidden(
            format!("{path}.windowsOptions.hostProcess"),
            format!("{WHY} may not run as a host process; remove the field"),
        );
    }
}
