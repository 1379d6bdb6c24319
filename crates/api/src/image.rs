//! Image references, checked for syntax as the container runtime's normalized form would
//! accept them (`[registry[:port]/]repository[:tag][@algorithm:digest]`). Nothing is pulled.

/// A parsed reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageReference {
    /// The registry host (and port); `docker.io` when the reference names none.
    pub registry: String,
    /// The repository path (`library/` added for a single Docker Hub name).
    pub repository: String,
    pub tag: Option<String>,
    /// `algorithm:hex`.
    pub digest: Option<String>,
}

/// Parses `reference`; the error says which part is wrong.
pub fn parse(reference: &str) -> Result<ImageReference, String> {
    if reference.is_empty() {
        return Err("the image reference is empty".into());
    }
    if reference.len() > 512 {
        return Err("the image reference is longer than 512 characters".into());
    }
    let (rest, digest) = match reference.split_once('@') {
        Some((rest, digest)) => (rest, Some(check_digest(digest)?)),
        None => (reference, None),
    };
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (
            &rest[..last_slash + i],
            Some(check_tag(&rest[last_slash + i + 1..])?),
        ),
        None => (rest, None),
    };
    let (registry, path) = match name.split_once('/') {
        Some((first, path))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            check_registry(first)?;
            (first.to_owned(), path.to_owned())
        }
        _ => (
            "docker.io".to_owned(),
            if name.contains('/') {
                name.to_owned()
            } else {
                format!("library/{name}")
            },
        ),
    };
    for component in path.split('/') {
        check_component(component)?;
    }
    Ok(ImageReference {
        registry,
        repository: path,
        tag,
        digest,
    })
}

/// The reference that runs exactly what a pod ran, from the image its container named and the
/// `imageID` the kubelet reported: the named image when it is already `repo@sha256:<hex>`, else
/// [`pullable`] of the `imageID`.
pub fn pin(named: &str, image_id: &str) -> Option<String> {
    by_digest(named)
        .then(|| named.to_owned())
        .or_else(|| pullable(image_id))
}

/// An `imageID` (or a recorded pin) as a reference a pod can pull: `repo@sha256:<hex>`, with the
/// `docker-pullable://` scheme of older runtimes removed. A bare `sha256:<hex>` may name the
/// image's configuration rather than a manifest a registry serves, so it is none; neither is
/// anything that does not parse.
pub fn pullable(image_id: &str) -> Option<String> {
    let id = image_id.trim();
    let id = id.strip_prefix("docker-pullable://").unwrap_or(id);
    (id.contains('@') && by_digest(id)).then(|| id.to_owned())
}

fn by_digest(reference: &str) -> bool {
    parse(reference).ok().is_some_and(|r| {
        r.tag.is_none()
            && r.digest
                .as_deref()
                .is_some_and(|d| d.starts_with("sha256:"))
    })
}

fn check_component(c: &str) -> Result<(), String> {
    let bytes = c.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let ok = !bytes.is_empty()
        && alnum(bytes[0])
        && alnum(bytes[bytes.len() - 1])
        && bytes
            .iter()
            .all(|b| alnum(*b) || matches!(b, b'.' | b'_' | b'-'))
        && !c.contains("..")
        && !c.contains("___");
    if ok {
        Ok(())
    } else {
        Err(format!(
            "repository path component {c:?} is invalid: use lowercase letters, digits and single separators (. _ -), starting and ending with a letter or digit"
        ))
    }
}

fn check_registry(r: &str) -> Result<(), String> {
    let (host, port) = match r.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (r, None),
    };
    let host_ok = !host.is_empty()
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        });
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    if host_ok && port_ok {
        Ok(())
    } else {
        Err(format!("registry {r:?} is not a valid host[:port]"))
    }
}

fn check_tag(t: &str) -> Result<String, String> {
    let b = t.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'));
    if ok {
        Ok(t.to_owned())
    } else {
        Err(format!(
            "tag {t:?} is invalid: 1-128 of letters, digits, _ . -, not starting with . or -"
        ))
    }
}

fn check_digest(d: &str) -> Result<String, String> {
    let Some((algorithm, hex)) = d.split_once(':') else {
        return Err(format!(
            "digest {d:?} must be <algorithm>:<hex>, e.g. sha256:<64 hex digits>"
        ));
    };
    let hex_ok = hex.len() >= 32
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let algo_ok = !algorithm.is_empty()
        && algorithm.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'+' | b'.' | b'_' | b'-')
        });
    let sha256_ok = algorithm != "sha256" || hex.len() == 64;
    if hex_ok && algo_ok && sha256_ok {
        Ok(d.to_owned())
    } else {
        Err(format!(
            "digest {d:?} is invalid: sha256 digests have 64 lowercase hex digits"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::{parse, pin};

    #[test]
    fn a_pin_is_a_pullable_digest_reference() {
        let sha = "b".repeat(64);
        let by_digest = format!("r.io/m@sha256:{sha}");
        let other = format!("r.io/m@sha256:{}", "c".repeat(64));
        let cases: [(&str, String, Option<&str>); 7] = [
            // containerd and CRI-O: the repository digest the pull resolved.
            ("r.io/m:v1", by_digest.clone(), Some(&by_digest)),
            (
                "r.io/m:v1",
                format!("docker-pullable://{by_digest}"),
                Some(&by_digest),
            ),
            // A Job that already ran a digest: that digest, whatever the runtime says.
            (&by_digest, other.clone(), Some(&by_digest)),
            ("r.io/m:v1", format!("sha256:{sha}"), None),
            ("r.io/m:v1", String::new(), None),
            ("r.io/m:v1", format!("r.io/m:v1@sha256:{sha}"), None),
            ("r.io/m:v1", "r.io/m@sha256:short".to_owned(), None),
        ];
        for (named, id, want) in cases {
            assert_eq!(pin(named, &id).as_deref(), want, "{named} / {id}");
        }
    }

    #[test]
    fn valid_references() {
        let sha = "a".repeat(64);
        let cases = [
            (
                "captf.local/modules/noop-cluster:v1",
                ("captf.local", "modules/noop-cluster", Some("v1")),
            ),
            (
                "ghcr.io/captf-io/aws-cluster:1.2.3",
                ("ghcr.io", "captf-io/aws-cluster", Some("1.2.3")),
            ),
            ("localhost:5000/m", ("localhost:5000", "m", None)),
            ("alpine", ("docker.io", "library/alpine", None)),
            (
                "team/tool:latest",
                ("docker.io", "team/tool", Some("latest")),
            ),
        ];
        for (reference, (registry, repository, tag)) in cases {
            let r = parse(reference).expect(reference);
            assert_eq!(
                (r.registry.as_str(), r.repository.as_str(), r.tag.as_deref()),
                (registry, repository, tag)
            );
        }
        let pinned = parse(&format!("r.io/x@sha256:{sha}")).expect("digest");
        assert_eq!(pinned.digest, Some(format!("sha256:{sha}")));
        assert!(parse(&format!("r.io/x:v1@sha256:{sha}")).is_ok());
    }

    #[test]
    fn invalid_references_say_why() {
        let cases = [
            ("", "empty"),
            ("-bad.io/x", "registry"),
            ("r.io/UPPER", "path component"),
            ("r.io/x:", "tag"),
            ("r.io/x:-bad", "tag"),
            ("r.io/x@sha256:short", "digest"),
            ("r.io/x@nocolon", "digest"),
            ("r.io//x", "path component"),
            ("r.io/a..b", "path component"),
            ("has space", "path component"),
        ];
        for (reference, part) in cases {
            let err = parse(reference).expect_err(reference);
            assert!(err.contains(part), "{reference}: {err}");
        }
    }
}
