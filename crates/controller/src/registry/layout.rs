//! Copying a module image from its registry into an OCI image layout, for `captf lint image`:
//! the manifest the reference names and, from an index, the manifest `select` picks, then the
//! config and layers of that one image. The layout is what `captf_lint::unpack` reads, so a
//! pulled image and one the user copied are unpacked and checked alike.

use std::path::Path;

use captf_api::image::ImageReference;
use serde_json::{Value, json};

use super::auth::Keyring;
use super::client::{CredentialSource, InspectError, Registry};
use super::manifest;

/// A layer larger than this is not downloaded (the linter's scan cap).
pub const MAX_BLOB: u64 = 16 << 30;
/// A config blob larger than this is refused (a few KiB in practice).
const MAX_CONFIG: u64 = 4 << 20;

impl Registry {
    /// Copies `image` into a new OCI image layout at `dest` (an empty or missing folder). From
    /// an index, `select` picks the entries to copy among its `manifests`; when it picks none
    /// the layout holds the index alone, for the reader to say which platforms it offers.
    pub async fn copy_to_layout(
        &self,
        image: &ImageReference,
        keyring: &Keyring,
        insecure: bool,
        dest: &Path,
        select: &(dyn Fn(&[Value]) -> Vec<Value> + Sync),
    ) -> Result<(), InspectError> {
        let io = |e: std::io::Error| InspectError::Unreachable(format!("{}: {e}", dest.display()));
        let blobs = dest.join("blobs/sha256");
        std::fs::create_dir_all(&blobs).map_err(io)?;
        std::fs::write(dest.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).map_err(io)?;
        let mut session = self.session(image, keyring, CredentialSource::AuthFiles, insecure);
        let repository = &image.repository;
        let invalid = |e: String| InspectError::Invalid(format!("{}: {e}", image.registry));
        let (content_type, body) = session.named_manifest(image).await?;
        let top = descriptor(content_type.as_deref(), &body).map_err(invalid)?;
        write_blob(&blobs, &top, &body).map_err(io)?;
        let index = json!({"schemaVersion": 2, "manifests": [top]});
        std::fs::write(dest.join("index.json"), index.to_string()).map_err(io)?;

        // Indexes are followed to the images `select` picks, a few dozen manifests at most.
        let top: Value = serde_json::from_slice(&body)
            .map_err(|e| invalid(format!("the manifest is not JSON ({e})")))?;
        let mut pending = vec![top];
        let mut images = Vec::new();
        let mut fetched = 0;
        while let Some(current) = pending.pop() {
            let Some(entries) = current["manifests"]
                .as_array()
                .filter(|_| current["config"].is_null())
            else {
                if current["config"].is_null() {
                    return Err(invalid(
                        "the manifest names neither a config nor other manifests: not an OCI or Docker v2 image".into(),
                    ));
                }
                images.push(current);
                continue;
            };
            for chosen in select(entries) {
                fetched += 1;
                if fetched > 64 {
                    return Err(invalid("more than 64 manifests below the index".into()));
                }
                let digest = chosen["digest"].as_str().unwrap_or_default().to_owned();
                sha256_hex(&digest).map_err(invalid)?;
                let (content_type, body) = session
                    .get(
                        &format!("/v2/{repository}/manifests/{digest}"),
                        Some(manifest::ACCEPT),
                    )
                    .await?;
                manifest::verify(&digest, &body).map_err(invalid)?;
                let found = descriptor(content_type.as_deref(), &body).map_err(invalid)?;
                write_blob(&blobs, &found, &body).map_err(io)?;
                pending.push(
                    serde_json::from_slice(&body)
                        .map_err(|e| invalid(format!("the manifest is not JSON ({e})")))?,
                );
            }
        }
        for image in &images {
            let config = std::iter::once((&image["config"], MAX_CONFIG));
            let layers = image["layers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|l| (l, MAX_BLOB));
            for (blob, max) in config.chain(layers) {
                let digest = blob["digest"].as_str().unwrap_or_default();
                let path = blobs.join(sha256_hex(digest).map_err(invalid)?);
                if !path.exists() {
                    session.blob_to_file(digest, &path, max).await?;
                }
            }
        }
        Ok(())
    }
}

/// The descriptor of a manifest as served: its media type (from the response, else the body),
/// digest and size.
fn descriptor(content_type: Option<&str>, body: &[u8]) -> Result<Value, String> {
    use sha2::{Digest, Sha256};
    let parsed: Value =
        serde_json::from_slice(body).map_err(|e| format!("the manifest is not JSON ({e})"))?;
    let media_type = content_type
        .map(|c| c.split(';').next().unwrap_or_default().trim().to_owned())
        .filter(|c| c.starts_with("application/vnd."))
        .or_else(|| parsed["mediaType"].as_str().map(str::to_owned))
        .unwrap_or_else(|| {
            if parsed["config"].is_null() {
                "application/vnd.oci.image.index.v1+json".to_owned()
            } else {
                "application/vnd.oci.image.manifest.v1+json".to_owned()
            }
        });
    Ok(json!({
        "mediaType": media_type,
        "digest": format!("sha256:{}", hex::encode(Sha256::digest(body))),
        "size": body.len(),
    }))
}

/// The hex of a `sha256:` digest: the only kind that is fetched, checked and stored.
fn sha256_hex(digest: &str) -> Result<&str, String> {
    digest
        .strip_prefix("sha256:")
        .filter(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
        .ok_or_else(|| format!("{digest:?} is not a sha256 digest"))
}

fn write_blob(blobs: &Path, descriptor: &Value, body: &[u8]) -> std::io::Result<()> {
    let digest = descriptor["digest"].as_str().unwrap_or_default();
    std::fs::write(blobs.join(digest.trim_start_matches("sha256:")), body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_served_manifest_is_described_by_its_bytes() -> anyhow::Result<()> {
        let body = br#"{"schemaVersion":2,"config":{"digest":"sha256:00"},"layers":[]}"#;
        let d = descriptor(None, body).map_err(anyhow::Error::msg)?;
        assert_eq!(d["mediaType"], "application/vnd.oci.image.manifest.v1+json");
        assert_eq!(d["size"], body.len());
        let d = descriptor(
            Some("application/vnd.docker.distribution.manifest.list.v2+json; charset=utf-8"),
            br#"{"manifests":[]}"#,
        )
        .map_err(anyhow::Error::msg)?;
        assert_eq!(
            d["mediaType"],
            "application/vnd.docker.distribution.manifest.list.v2+json"
        );
        Ok(())
    }
}
