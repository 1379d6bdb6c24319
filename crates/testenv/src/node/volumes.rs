//! Pod volumes materialised as folders under the pod's directory, as a kubelet would: emptyDir,
//! secret, configMap, downwardAPI and projected (serviceAccountToken through the TokenRequest
//! API, configMap, secret, downwardAPI), with `items`, `defaultMode`/`mode` and fsGroup. Files are
//! written once at pod start and not refreshed afterwards.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, Pod, Secret, ServiceAccount, Volume,
};
use kube::api::{Api, PostParams};

/// The folder each volume of the pod was written to, by volume name.
pub type Materialized = BTreeMap<String, PathBuf>;

/// Writes every volume of `pod` under `dir`; an error names the volume and what is missing.
pub async fn materialize(
    client: &kube::Client,
    pod: &Pod,
    dir: &Path,
    fs_group: Option<i64>,
) -> anyhow::Result<Materialized> {
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .context("pod without namespace")?;
    let mut out = Materialized::new();
    for volume in pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default()
    {
        let target = dir.join(&volume.name);
        std::fs::create_dir_all(&target)?;
        write_volume(client, pod, &namespace, &volume, &target)
            .await
            .with_context(|| format!("volume {:?}", volume.name))?;
        if let Some(group) = fs_group {
            chown_group(&target, group)?;
        }
        out.insert(volume.name.clone(), target);
    }
    Ok(out)
}

async fn write_volume(
    client: &kube::Client,
    pod: &Pod,
    namespace: &str,
    volume: &Volume,
    target: &Path,
) -> anyhow::Result<()> {
    if volume.empty_dir.is_some() {
        std::fs::set_permissions(target, std::fs::Permissions::from_mode(0o777))?;
        return Ok(());
    }
    if let Some(secret) = &volume.secret {
        let name = secret
            .secret_name
            .clone()
            .context("secret volume without secretName")?;
        let data = secret_data(client, namespace, &name, secret.optional.unwrap_or(false)).await?;
        return write_items(
            target,
            &data,
            secret.items.as_deref(),
            secret.default_mode.unwrap_or(0o644),
        );
    }
    if let Some(cm) = &volume.config_map {
        let data =
            config_map_data(client, namespace, &cm.name, cm.optional.unwrap_or(false)).await?;
        return write_items(
            target,
            &data,
            cm.items.as_deref(),
            cm.default_mode.unwrap_or(0o644),
        );
    }
    if let Some(downward) = &volume.downward_api {
        let mode = downward.default_mode.unwrap_or(0o644);
        for item in downward.items.as_deref().unwrap_or_default() {
            write_downward(target, pod, item, mode)?;
        }
        return Ok(());
    }
    if let Some(projected) = &volume.projected {
        let mode = projected.default_mode.unwrap_or(0o644);
        for source in projected.sources.as_deref().unwrap_or_default() {
            if let Some(token) = &source.service_account_token {
                let value = request_token(
                    client,
                    pod,
                    namespace,
                    token.audience.clone(),
                    token.expiration_seconds,
                )
                .await?;
                write_file(&target.join(&token.path), value.as_bytes(), mode)?;
            }
            if let Some(cm) = &source.config_map {
                let data =
                    config_map_data(client, namespace, &cm.name, cm.optional.unwrap_or(false))
                        .await?;
                write_items(target, &data, cm.items.as_deref(), mode)?;
            }
            if let Some(secret) = &source.secret {
                let data = secret_data(
                    client,
                    namespace,
                    &secret.name,
                    secret.optional.unwrap_or(false),
                )
                .await?;
                write_items(target, &data, secret.items.as_deref(), mode)?;
            }
            if let Some(downward) = &source.downward_api {
                for item in downward.items.as_deref().unwrap_or_default() {
                    write_downward(target, pod, item, mode)?;
                }
            }
        }
        return Ok(());
    }
    bail!(
        "unsupported volume type (the process node supports emptyDir, secret, configMap, downwardAPI and projected)"
    )
}

async fn secret_data(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    optional: bool,
) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(name).await? {
        Some(secret) => {
            let mut data: BTreeMap<String, Vec<u8>> = secret
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect();
            for (k, v) in secret.string_data.unwrap_or_default() {
                data.insert(k, v.into_bytes());
            }
            Ok(data)
        }
        None if optional => Ok(BTreeMap::new()),
        None => bail!("secret {namespace}/{name} not found"),
    }
}

async fn config_map_data(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    optional: bool,
) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    match api.get_opt(name).await? {
        Some(cm) => {
            let mut data: BTreeMap<String, Vec<u8>> = cm
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.into_bytes()))
                .collect();
            for (k, v) in cm.binary_data.unwrap_or_default() {
                data.insert(k, v.0);
            }
            Ok(data)
        }
        None if optional => Ok(BTreeMap::new()),
        None => bail!("configmap {namespace}/{name} not found"),
    }
}

/// A bound service-account token for the pod, from the TokenRequest API.
async fn request_token(
    client: &kube::Client,
    pod: &Pod,
    namespace: &str,
    audience: Option<String>,
    expiration: Option<i64>,
) -> anyhow::Result<String> {
    let sa = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: audience.into_iter().collect(),
            expiration_seconds: Some(expiration.unwrap_or(3607).max(600)),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
        },
        ..Default::default()
    };
    let response: TokenRequest = api
        .create_subresource("token", &sa, &PostParams::default(), &request)
        .await
        .with_context(|| format!("token for serviceaccount {namespace}/{sa}"))?;
    response
        .status
        .map(|s| s.token)
        .context("TokenRequest returned no token")
}

fn write_items(
    target: &Path,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: i32,
) -> anyhow::Result<()> {
    match items {
        None => {
            for (key, value) in data {
                write_file(&target.join(key), value, default_mode)?;
            }
        }
        Some(items) => {
            for item in items {
                let value = data
                    .get(&item.key)
                    .with_context(|| format!("key {:?} not found", item.key))?;
                write_file(
                    &target.join(&item.path),
                    value,
                    item.mode.unwrap_or(default_mode),
                )?;
            }
        }
    }
    Ok(())
}

fn write_downward(
    target: &Path,
    pod: &Pod,
    item: &DownwardAPIVolumeFile,
    mode: i32,
) -> anyhow::Result<()> {
    let value = match &item.field_ref {
        Some(field) => super::env::field_value(pod, &field.field_path)?,
        None => bail!(
            "downwardAPI item {:?}: only fieldRef is supported",
            item.path
        ),
    };
    write_file(
        &target.join(&item.path),
        value.as_bytes(),
        item.mode.unwrap_or(mode),
    )
}

fn write_file(path: &Path, content: &[u8], mode: i32) -> anyhow::Result<()> {
    anyhow::ensure!(
        !path
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir)),
        "path {} escapes the volume",
        path.display()
    );
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::write(path, content)?;
    let mode = u32::try_from(mode).context("negative file mode")?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// Gives every file and folder below `dir` to `group`, as fsGroup does.
fn chown_group(dir: &Path, group: i64) -> anyhow::Result<()> {
    let gid = nix::unistd::Gid::from_raw(u32::try_from(group).context("fsGroup out of range")?);
    nix::unistd::chown(dir, None, Some(gid))?;
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            chown_group(&path, group)?;
        } else {
            nix::unistd::chown(&path, None, Some(gid))?;
        }
    }
    Ok(())
}
