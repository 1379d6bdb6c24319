//! TerraformClusterIdentity (operations.md §6.3): where the credentials are and who may use
//! them. Whether the author may read the Secret is asked of the API server afterwards (a
//! SubjectAccessReview), only when the reference or the allowed namespaces change.

use captf_api::TerraformClusterIdentity;
use captf_api::common::SecretReference;
use captf_api::names::is_dns_label;

use super::Change;
use super::meta::label_selector;
use crate::webhook::violations::Violations;

/// The rules' findings, and the Secret whose read access must still be checked for the user.
#[derive(Debug, Default, PartialEq)]
pub struct IdentityVerdict {
    pub violations: Violations,
    pub check_read: Option<SecretReference>,
}

pub fn identity(c: &Change<'_, TerraformClusterIdentity>) -> IdentityVerdict {
    let mut v = Violations::default();
    let spec = &c.new.spec;
    if spec.secret_ref.name.is_empty() {
        v.required(
            "spec.secretRef.name",
            "name the Secret that holds the credentials",
        );
    }
    if spec.secret_ref.namespace.is_empty() {
        v.required(
            "spec.secretRef.namespace",
            "name the namespace of the credentials Secret (an identity is cluster-scoped)",
        );
    }
    if let Some(allowed) = &spec.allowed_namespaces {
        if allowed.list.is_none() && allowed.selector.is_none() {
            v.invalid(
                "spec.allowedNamespaces",
                "an empty allowedNamespaces is ambiguous: write selector: {} to allow every namespace, list the namespaces, or remove allowedNamespaces to allow none",
            );
        }
        for (i, namespace) in allowed.list.iter().flatten().enumerate() {
            if !is_dns_label(namespace) {
                v.invalid(
                    format!("spec.allowedNamespaces.list[{i}]"),
                    format!("{namespace:?} is not a namespace name (a DNS-1123 label)"),
                );
            }
        }
        if let Some(selector) = &allowed.selector {
            label_selector(&mut v, "spec.allowedNamespaces.selector", selector);
        }
    }
    let widened = c.old.is_none_or(|old| {
        old.spec.secret_ref != spec.secret_ref
            || old.spec.allowed_namespaces != spec.allowed_namespaces
    });
    let check_read = (widened && v.is_empty()).then(|| spec.secret_ref.clone());
    IdentityVerdict {
        violations: v,
        check_read,
    }
}
