//! Manifests and image configs as registries serve them (pure): which manifest of an index
//! describes the image a machine runs, where its config is, and the config's labels.

use std::collections::BTreeMap;

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// What the manifest request asks for: image manifests and indexes, OCI and Docker.
pub const ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.v2+json";

/// A parsed manifest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Manifest {
    /// One image: the digest of its config blob.
    Image { config: String },
    /// Several platforms: the digest of the manifest chosen for the machine.
    Index { chosen: String },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Raw {
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    config: Option<Descriptor>,
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
}

#[derive(Deserialize)]
struct Descriptor {
    digest: String,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Deserialize)]
struct Platform {
    #[serde(default)]
    os: String,
    #[serde(default)]
    architecture: String,
}

/// Parses a manifest body (`content_type` from the response, else the body's `mediaType`).
/// From an index, the linux/amd64 manifest is chosen (the architecture the module's
/// tooling is built for when it says nothing else), else the first linux one, skipping the
/// `unknown/unknown` attestation manifests.
pub fn parse(content_type: Option<&str>, body: &[u8]) -> Result<Manifest, String> {
    let raw: Raw =
        serde_json::from_slice(body).map_err(|e| format!("the manifest {}", json_problem(&e)))?;
    let media_type = content_type
        .map(|c| c.split(';').next().unwrap_or_default().trim().to_owned())
        .filter(|c| c.starts_with("application/vnd."))
        .or(raw.media_type)
        .unwrap_or_default();
    let index = media_type.ends_with("image.index.v1+json")
        || media_type.ends_with("manifest.list.v2+json")
        || (raw.config.is_none() && raw.manifests.is_some());
    if index {
        let manifests = raw.manifests.unwrap_or_default();
        let platform = |d: &&Descriptor, os: &str, arch: Option<&str>| {
            d.platform
                .as_ref()
                .is_some_and(|p| p.os == os && arch.is_none_or(|a| p.architecture == a))
        };
        let chosen = manifests
            .iter()
            .find(|d| platform(d, "linux", Some("amd64")))
            .or_else(|| manifests.iter().find(|d| platform(d, "linux", None)))
            .or_else(|| manifests.iter().find(|d| !platform(d, "unknown", None)))
            .ok_or("the image index lists no manifest for an image")?;
        return Ok(Manifest::Index {
            chosen: checked_digest(&chosen.digest)?,
        });
    }
    let config = raw
        .config
        .ok_or("the manifest names no config: not an OCI or Docker v2 image manifest")?;
    Ok(Manifest::Image {
        config: checked_digest(&config.digest)?,
    })
}

/// A `sha256:<64 hex>` digest; others are refused (nothing else can be verified).
fn checked_digest(digest: &str) -> Result<String, String> {
    match digest.strip_prefix("sha256:") {
        Some(hex)
            if hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) =>
        {
            Ok(digest.to_owned())
        }
        // The digest itself is not repeated: it is the registry's bytes.
        _ => Err("a digest that is not sha256:<64 hex digits>: unsupported".to_owned()),
    }
}

/// Whether `body` is the content `digest` names.
pub fn verify(digest: &str, body: &[u8]) -> Result<(), String> {
    let got = format!("sha256:{}", hex::encode(Sha256::digest(body)));
    if got == digest {
        Ok(())
    } else {
        Err(format!(
            "the registry served content with digest {got} for {digest}"
        ))
    }
}

#[derive(Deserialize)]
struct Config {
    #[serde(default)]
    config: Option<ConfigInner>,
}

#[derive(Deserialize)]
struct ConfigInner {
    #[serde(default, rename = "Labels")]
    labels: Option<BTreeMap<String, String>>,
}

/// The labels of an image config (`config.Labels`; none is an empty map).
pub fn labels(config: &[u8]) -> Result<BTreeMap<String, String>, String> {
    let config: Config = serde_json::from_slice(config)
        .map_err(|e| format!("the image config {}", json_problem(&e)))?;
    Ok(config.config.and_then(|c| c.labels).unwrap_or_default())
}

/// What is wrong with a JSON body, without a byte of it: serde's messages quote the values
/// they trip over, and a body may come from whatever server a registry points at, so only the
/// kind of problem and its position reach a condition, an event or a log.
pub fn json_problem(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let what = match e.classify() {
        Category::Io => "could not be read",
        Category::Syntax => "is not valid JSON",
        Category::Data => "is JSON of the wrong shape",
        Category::Eof => "is not valid JSON: it ends early",
    };
    format!("{what} (line {}, column {})", e.line(), e.column())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    const C: &str = "sha256:cccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccccc";

    fn index(entries: &[(&str, &str, &str)]) -> String {
        let manifests: Vec<serde_json::Value> = entries
            .iter()
            .map(|(digest, os, arch)| {
                serde_json::json!({"digest": digest, "platform": {"os": os, "architecture": arch}})
            })
            .collect();
        serde_json::json!({"schemaVersion": 2, "manifests": manifests}).to_string()
    }

    #[test]
    fn parse_table() {
        let oci_index = Some("application/vnd.oci.image.index.v1+json");
        let image = serde_json::json!({"schemaVersion": 2, "config": {"digest": A}}).to_string();
        let cases: [(Option<&str>, String, Result<Manifest, &str>); 9] = [
            (
                Some("application/vnd.oci.image.manifest.v1+json"),
                image.clone(),
                Ok(Manifest::Image { config: A.into() }),
            ),
            // Docker v2 with a charset parameter; the body alone also tells an image.
            (
                Some("application/vnd.docker.distribution.manifest.v2+json; charset=utf-8"),
                image.clone(),
                Ok(Manifest::Image { config: A.into() }),
            ),
            (
                Some("application/octet-stream"),
                image,
                Ok(Manifest::Image { config: A.into() }),
            ),
            (
                oci_index,
                index(&[(A, "linux", "arm64"), (B, "linux", "amd64")]),
                Ok(Manifest::Index { chosen: B.into() }),
            ),
            (
                Some("application/vnd.docker.distribution.manifest.list.v2+json"),
                index(&[(C, "unknown", "unknown"), (A, "linux", "arm64")]),
                Ok(Manifest::Index { chosen: A.into() }),
            ),
            (
                oci_index,
                index(&[(C, "unknown", "unknown")]),
                Err("no manifest for an image"),
            ),
            (
                None,
                serde_json::json!({"config": {"digest": "md5:00"}}).to_string(),
                Err("not sha256"),
            ),
            (None, "<html>".into(), Err("not valid JSON")),
            // A value of the wrong type: serde would quote it.
            (
                None,
                r#"{"config": {"digest": 7}, "manifests": "MARKER"}"#.into(),
                Err("wrong shape"),
            ),
        ];
        for (content_type, body, want) in cases {
            let got = parse(content_type, body.as_bytes());
            match (&got, &want) {
                (Ok(g), Ok(w)) => assert_eq!(g, w, "{body}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{body}: {e}"),
                _ => panic!("{body}: got {got:?}, want {want:?}"),
            }
            // No byte of the body is repeated in an error.
            if let Err(e) = &got {
                assert!(!e.contains("MARKER") && !e.contains("md5"), "{e}");
            }
        }
    }

    #[test]
    fn verify_table() {
        let body = b"{}";
        let digest = format!("sha256:{}", hex::encode(Sha256::digest(body)));
        assert_eq!(verify(&digest, body), Ok(()));
        assert!(
            verify(A, body)
                .expect_err("another digest")
                .contains(&digest)
        );
    }

    #[test]
    fn labels_table() {
        let cases = [
            (
                r#"{"config":{"Labels":{"io.captf.role":"machine"}}}"#,
                Ok(vec![("io.captf.role", "machine")]),
            ),
            (r#"{"config":{"Labels":null}}"#, Ok(vec![])),
            (r#"{"architecture":"amd64"}"#, Ok(vec![])),
            ("nope", Err("not valid JSON")),
            (
                r#"{"config":{"Labels":{"a":"MARKER","b":424242}}}"#,
                Err("wrong shape"),
            ),
        ];
        for (config, want) in cases {
            match (labels(config.as_bytes()), want) {
                (Ok(got), Ok(want)) => {
                    let want: BTreeMap<String, String> = want
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), v.to_owned()))
                        .collect();
                    assert_eq!(got, want, "{config}");
                }
                (Err(e), Err(want)) => {
                    assert!(e.contains(want), "{config}: {e}");
                    assert!(
                        !e.contains("MARKER") && !e.contains("424242"),
                        "{config}: {e}"
                    );
                }
                (got, want) => panic!("{config}: got {got:?}, want {want:?}"),
            }
        }
    }
}
