//! Registry responses: the `WWW-Authenticate` challenge (`registry::auth::parse_challenge`),
//! manifests and indexes (`registry::manifest::parse`, `verify`), image configs and their
//! variables schema label (`registry::manifest::labels`), pull Secrets (`Keyring::parse`,
//! `for_registry`), and the linter's choice of an index entry (`captf_lint::unpack::choose`,
//! `every_platform`).
//!
//! The input's first line says what the rest is: `challenge`, `manifest [<content type>]`,
//! `config`, `keyring [<registry>]` or `index [<platform>]`; any other line reads the whole
//! input as each of them.

#![no_main]

use captf_contract::varschema;
use captf_controller::registry::auth::{Challenge, parse_challenge};
use captf_controller::registry::{Keyring, endpoint, manifest};
use captf_fuzz::{MARKER, assert_no_marker, first_line};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let (line, body) = first_line(data);
    let line = String::from_utf8_lossy(line);
    let (what, arg) = line.split_once(' ').unwrap_or((&line, ""));
    match what {
        "challenge" => challenge(body),
        "manifest" => manifest_body((!arg.is_empty()).then_some(arg), body),
        "config" => config(body),
        "keyring" => keyring(body, arg),
        "index" => index(body, arg),
        _ => {
            challenge(data);
            manifest_body(None, data);
            config(data);
            keyring(data, "registry.example.com");
            index(data, "linux/amd64");
        }
    }
});

fn challenge(body: &[u8]) {
    let Ok(header) = std::str::from_utf8(body) else {
        return;
    };
    if let Some(Challenge::Bearer { realm, .. }) = parse_challenge(header) {
        assert!(
            header.contains(realm.as_str()),
            "the realm comes from the header"
        );
    }
}

fn manifest_body(content_type: Option<&str>, body: &[u8]) {
    if let Ok(parsed) = manifest::parse(content_type, body) {
        let digest = match &parsed {
            manifest::Manifest::Image { config } => config,
            manifest::Manifest::Index { chosen } => chosen,
        };
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        assert!(
            hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "only a digest that can be verified is followed: {digest}"
        );
        let _ = manifest::verify(digest, body);
    }
}

fn config(body: &[u8]) {
    if let Ok(labels) = manifest::labels(body)
        && let Some(label) = labels.get(varschema::LABEL)
    {
        let _ = varschema::parse(label);
    }
}

fn keyring(body: &[u8], registry: &str) {
    let parsed = Keyring::parse(body);
    let secret = password_marker(body);
    match &parsed {
        Ok(ring) => {
            let _ = endpoint(registry);
            let _ = ring.for_registry(registry);
            if secret {
                assert_no_marker("a keyring's Debug", &format!("{ring:?}"));
            }
        }
        Err(e) => {
            if secret {
                assert_no_marker("a pull Secret error", e);
            }
        }
    }
}

/// Whether the marker stands in passwords, auths or tokens of a pull Secret only (the user
/// name an `auth` decodes to is public: `Debug` shows it).
fn password_marker(body: &[u8]) -> bool {
    let Ok(mut value) = serde_json::from_slice::<Value>(body) else {
        return false;
    };
    let (mut secret, mut public) = (false, false);
    let auths = if value.get("auths").is_some() {
        value.get_mut("auths")
    } else {
        Some(&mut value)
    };
    for entry in auths
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|m| m.values_mut())
    {
        for field in ["password", "auth", "identitytoken"] {
            if let Some(v) = entry.get_mut(field) {
                let (user, password) = decoded_auth(v);
                secret |= v.to_string().contains(MARKER) || password.contains(MARKER);
                public |= user.contains(MARKER);
                *v = Value::Null;
            }
        }
    }
    secret && !public && !value.to_string().contains(MARKER)
}

/// The user name and password a base64 `auth` decodes to.
fn decoded_auth(v: &Value) -> (String, String) {
    use base64::Engine;
    let decoded = v
        .as_str()
        .and_then(|s| {
            base64::engine::general_purpose::STANDARD
                .decode(s.trim())
                .ok()
        })
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    match decoded.split_once(':') {
        Some((user, password)) => (user.to_owned(), password.to_owned()),
        None => (decoded, String::new()),
    }
}

fn index(body: &[u8], platform: &str) {
    let Ok(index) = serde_json::from_slice::<Value>(body) else {
        return;
    };
    let Some(entries) = index.get("manifests").and_then(Value::as_array) else {
        return;
    };
    let every = captf_lint::unpack::every_platform(entries);
    assert!(every.len() <= entries.len());
    let platform = if platform.is_empty() {
        "linux/amd64"
    } else {
        platform
    };
    if let Ok(chosen) = captf_lint::unpack::choose(entries, platform) {
        assert!(
            entries.contains(&chosen),
            "the choice is an entry of the index"
        );
    }
}
