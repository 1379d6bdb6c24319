//! The provider mirror at `/captf/providers` (as `tofu providers mirror`
//! writes it) and the providers the module needs from it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use crate::load;
use crate::report::{Finding, Severity};
use crate::rules::{IMAGE_PROVIDERS_ABSENT, IMAGE_PROVIDERS_COMPLETE, IMAGE_PROVIDERS_LAYOUT};

use super::paths::{Resolved, host, resolve, walk};
use super::{PROVIDERS, image_finding};

fn is_version(s: &str) -> bool {
    let core = s.split(['-', '+']).next().unwrap_or("");
    let parts: Vec<&str> = core.split('.').collect();
    parts.len() == 3
        && parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

fn is_target(s: &str) -> bool {
    s.split_once('_')
        .is_some_and(|(os, arch)| !os.is_empty() && !arch.is_empty() && !arch.contains('_'))
}

/// Checks the mirror layout; returns the packages found as
/// `(namespace/type lowercased, target)`.
fn mirror(root: &Path, out: &mut Vec<Finding>) -> BTreeSet<(String, String)> {
    let mut packages = BTreeSet::new();
    let layout = |out: &mut Vec<Finding>, path: &str, what: &str| {
        out.push(image_finding(
            IMAGE_PROVIDERS_LAYOUT,
            Severity::Error,
            path,
            format!(
                "{what}; a mirror holds HOST/NAMESPACE/TYPE/ with terraform-provider-TYPE_VERSION_OS_ARCH.zip + index.json + VERSION.json (packed) or VERSION/OS_ARCH/ (unpacked), as written by `tofu providers mirror`"
            ),
        ));
    };
    let mut entries = Vec::new();
    walk(root, PROVIDERS, &mut entries);
    for path in entries {
        let rel: Vec<&str> = path[PROVIDERS.len() + 1..].split('/').collect();
        let Ok(md) = fs::symlink_metadata(host(root, &path)) else {
            continue;
        };
        if md.file_type().is_symlink() && !matches!(resolve(root, &path), Resolved::Found(..)) {
            out.push(image_finding(
                    IMAGE_PROVIDERS_COMPLETE,
                    Severity::Error,
                    &path,
                    "broken link in the provider mirror; make it point at a file in the image or copy the file".to_owned(),
                ));
            continue;
        }
        let is_dir = matches!(resolve(root, &path), Resolved::Found(ref p, _) if p.is_dir());
        match rel.as_slice() {
            [_] | [_, _] | [_, _, _] if !is_dir => {
                layout(out, &path, "unexpected file in the provider mirror")
            }
            [_] | [_, _] | [_, _, _] => {}
            [_, ns, ty, name] if !is_dir => {
                let prefix = format!("terraform-provider-{ty}_");
                let ok = *name == "index.json"
                    || name.strip_suffix(".json").is_some_and(is_version)
                    || name
                        .strip_prefix(&prefix)
                        .and_then(|r| r.strip_suffix(".zip"))
                        .and_then(|r| r.split_once('_'))
                        .is_some_and(|(v, target)| {
                            let ok = is_version(v) && is_target(target);
                            if ok {
                                packages.insert((
                                    format!("{ns}/{ty}").to_ascii_lowercase(),
                                    target.to_owned(),
                                ));
                            }
                            ok
                        });
                if !ok {
                    layout(
                        out,
                        &path,
                        "unexpected file in a provider directory of the mirror",
                    );
                }
            }
            [_, _, _, version] if !is_version(version) => {
                layout(out, &path, "provider mirror directory is not a version");
            }
            [_, _, _, _] => {}
            [_, ns, ty, _, target] => {
                if is_dir && is_target(target) {
                    packages.insert((
                        format!("{ns}/{ty}").to_ascii_lowercase(),
                        (*target).to_owned(),
                    ));
                } else {
                    layout(
                        out,
                        &path,
                        "expected an OS_ARCH directory under the version directory",
                    );
                }
            }
            _ => {}
        }
    }
    packages
}

/// `NS/TYPE` (lowercase) of a provider source address, `None` for built-ins.
fn provider_key(source: &str) -> Option<String> {
    let parts: Vec<&str> = source.split('/').collect();
    let (host, ns, ty) = match parts.as_slice() {
        [ns, ty] => ("", *ns, *ty),
        [host, ns, ty] => (*host, *ns, *ty),
        _ => return None,
    };
    if host == "terraform.io" && ns == "builtin" {
        return None;
    }
    Some(format!("{ns}/{ty}").to_ascii_lowercase())
}

/// Providers the module tree needs: `required_providers` plus providers
/// implied by resource type prefixes (default namespace `hashicorp`).
pub(super) fn required_providers(loaded: &load::Loaded) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for m in &loaded.modules {
        for source in m.required_providers.values() {
            if let Some(key) = provider_key(source) {
                out.insert(key, source.clone());
            }
        }
        for r in &m.resources {
            let ty = r.address.trim_start_matches("data.");
            let local = ty.split(['_', '.']).next().unwrap_or("");
            if local.is_empty() || local == "terraform" || m.required_providers.contains_key(local)
            {
                continue;
            }
            out.insert(format!("hashicorp/{local}"), format!("hashicorp/{local}"));
        }
    }
    out
}

/// The mirror, when there is one: its layout, and a package for the platform
/// (`want_os`/`want_arch`, default `linux/amd64`) of every provider in
/// `required`.
pub(super) fn check_providers(
    root: &Path,
    required: BTreeMap<String, String>,
    want_os: Option<&str>,
    want_arch: Option<&str>,
    out: &mut Vec<Finding>,
) {
    match resolve(root, PROVIDERS) {
        Resolved::Found(p, _) if p.is_dir() => {
            let packages = mirror(root, out);
            let (os, arch) = (want_os.unwrap_or("linux"), want_arch.unwrap_or("amd64"));
            let target = format!("{os}_{arch}");
            for (key, source) in required {
                if !packages.contains(&(key.clone(), target.clone())) {
                    out.push(image_finding(
                        IMAGE_PROVIDERS_COMPLETE,
                        Severity::Error,
                        PROVIDERS,
                        format!(
                            "no {target} package of provider {source} in the mirror; run `tofu providers mirror -platform={target} /captf/providers` in the image build"
                        ),
                    ));
                }
            }
        }
        _ => out.push(image_finding(
            IMAGE_PROVIDERS_ABSENT,
            Severity::Info,
            "",
            "no provider mirror at /captf/providers: init will download providers from the registry (needs egress)".to_owned(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_keys() {
        assert_eq!(
            provider_key("hashicorp/aws").as_deref(),
            Some("hashicorp/aws")
        );
        assert_eq!(
            provider_key("registry.opentofu.org/Hashicorp/AWS").as_deref(),
            Some("hashicorp/aws")
        );
        assert_eq!(provider_key("terraform.io/builtin/terraform"), None);
        assert!(is_version("5.1.0") && is_version("1.0.0-beta1") && !is_version("v5"));
    }
}
