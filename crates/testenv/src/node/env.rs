//! Container environment resolved as a kubelet does: `envFrom` first (with prefixes), then
//! `env` in order, each value with `$(VAR)` references expanded against what came before.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret};
use kube::api::Api;

/// Resolves the container's environment; `base` (service discovery variables) comes first and is
/// overridden by the container's own entries.
pub async fn resolve(
    client: &kube::Client,
    pod: &Pod,
    container: &Container,
    base: &[(String, String)],
) -> anyhow::Result<Vec<(String, String)>> {
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .context("pod without namespace")?;
    let mut env: Vec<(String, String)> = base.to_vec();
    let set = |env: &mut Vec<(String, String)>, k: String, v: String| {
        env.retain(|(name, _)| *name != k);
        env.push((k, v));
    };
    for from in container.env_from.as_deref().unwrap_or_default() {
        let prefix = from.prefix.clone().unwrap_or_default();
        if let Some(r) = &from.config_map_ref {
            let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
            match api.get_opt(&r.name).await? {
                Some(cm) => {
                    for (k, v) in cm.data.unwrap_or_default() {
                        set(&mut env, format!("{prefix}{k}"), v);
                    }
                }
                None if r.optional.unwrap_or(false) => {}
                None => bail!("envFrom: configmap {namespace}/{} not found", r.name),
            }
        }
        if let Some(r) = &from.secret_ref {
            let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
            match api.get_opt(&r.name).await? {
                Some(secret) => {
                    for (k, v) in secret.data.unwrap_or_default() {
                        set(
                            &mut env,
                            format!("{prefix}{k}"),
                            String::from_utf8_lossy(&v.0).into_owned(),
                        );
                    }
                }
                None if r.optional.unwrap_or(false) => {}
                None => bail!("envFrom: secret {namespace}/{} not found", r.name),
            }
        }
    }
    for var in container.env.as_deref().unwrap_or_default() {
        let value = if let Some(value) = &var.value {
            Some(expand(value, &env))
        } else if let Some(from) = &var.value_from {
            if let Some(r) = &from.secret_key_ref {
                let api: Api<Secret> = Api::namespaced(client.clone(), &namespace);
                let value = api
                    .get_opt(&r.name)
                    .await?
                    .and_then(|s| s.data)
                    .and_then(|d| {
                        d.get(&r.key)
                            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
                    });
                match value {
                    Some(v) => Some(v),
                    None if r.optional.unwrap_or(false) => None,
                    None => bail!(
                        "env {}: secret {namespace}/{} key {:?} not found",
                        var.name,
                        r.name,
                        r.key
                    ),
                }
            } else if let Some(r) = &from.config_map_key_ref {
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
                let value = api
                    .get_opt(&r.name)
                    .await?
                    .and_then(|c| c.data)
                    .and_then(|d| d.get(&r.key).cloned());
                match value {
                    Some(v) => Some(v),
                    None if r.optional.unwrap_or(false) => None,
                    None => bail!(
                        "env {}: configmap {namespace}/{} key {:?} not found",
                        var.name,
                        r.name,
                        r.key
                    ),
                }
            } else if let Some(field) = &from.field_ref {
                Some(field_value(pod, &field.field_path)?)
            } else {
                from.resource_field_ref
                    .as_ref()
                    .map(|r| resource_value(container, &r.resource))
            }
        } else {
            Some(String::new())
        };
        if let Some(value) = value {
            set(&mut env, var.name.clone(), value);
        }
    }
    Ok(env)
}

/// The value of a downward-API field path.
pub fn field_value(pod: &Pod, path: &str) -> anyhow::Result<String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.hostIP" => "127.0.0.1".into(),
        other => {
            if let Some(key) = other
                .strip_prefix("metadata.labels['")
                .and_then(|k| k.strip_suffix("']"))
            {
                meta.labels
                    .as_ref()
                    .and_then(|l| l.get(key).cloned())
                    .unwrap_or_default()
            } else if let Some(key) = other
                .strip_prefix("metadata.annotations['")
                .and_then(|k| k.strip_suffix("']"))
            {
                meta.annotations
                    .as_ref()
                    .and_then(|a| a.get(key).cloned())
                    .unwrap_or_default()
            } else {
                bail!("unsupported fieldRef {other:?}")
            }
        }
    })
}

fn resource_value(container: &Container, resource: &str) -> String {
    let (section, name) = resource.split_once('.').unwrap_or(("limits", resource));
    let resources = container.resources.as_ref();
    let map = match section {
        "requests" => resources.and_then(|r| r.requests.as_ref()),
        _ => resources.and_then(|r| r.limits.as_ref()),
    };
    map.and_then(|m| m.get(name))
        .map(|q| q.0.clone())
        .unwrap_or_default()
}

/// Expands `$(VAR)` from `env`; `$$(VAR)` escapes to a literal `$(VAR)`; unknown references are
/// kept verbatim (kubelet semantics).
pub fn expand(input: &str, env: &[(String, String)]) -> String {
    let lookup: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut out = String::with_capacity(input.len());
    let mut rest = input;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(stripped) = after.strip_prefix('$') {
            out.push('$');
            rest = stripped;
        } else if let Some(body) = after.strip_prefix('(') {
            match body.find(')') {
                Some(end) => {
                    let name = &body[..end];
                    match lookup.get(name) {
                        Some(v) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &body[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = body;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::expand;

    #[test]
    fn expansion_follows_kubelet_rules() {
        let env = vec![
            ("A".to_owned(), "1".to_owned()),
            ("B".to_owned(), "two".to_owned()),
        ];
        let cases = [
            ("$(A)", "1"),
            ("x$(A)y$(B)z", "x1ytwoz"),
            ("$(MISSING)", "$(MISSING)"),
            ("$$(A)", "$(A)"),
            ("$A", "$A"),
            ("$(A", "$(A"),
            ("cost $5", "cost $5"),
        ];
        for (input, want) in cases {
            assert_eq!(expand(input, &env), want, "{input}");
        }
    }
}
