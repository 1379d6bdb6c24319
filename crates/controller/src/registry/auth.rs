//! Registry credentials from image pull Secrets, and the registry's authentication challenge
//! (pure).

use base64::Engine;

/// A user name and password (or identity token) for one registry.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credential {
    // Never the password, not even in a debug log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("username", &self.username)
            .finish_non_exhaustive()
    }
}

/// The registries a pull Secret holds credentials for, in the Secret's order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Keyring(Vec<(String, Credential)>);

#[derive(serde::Deserialize)]
struct Entry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    #[serde(default, rename = "identitytoken")]
    identity_token: Option<String>,
}

impl Keyring {
    /// Parses the data of a `kubernetes.io/dockerconfigjson` (`{"auths": {...}}`) or legacy
    /// `kubernetes.io/dockercfg` (the `auths` map alone) Secret. The error never quotes the
    /// content.
    pub fn parse(data: &[u8]) -> Result<Keyring, String> {
        let value: serde_json::Value =
            serde_json::from_slice(data).map_err(|e| format!("not JSON ({e})"))?;
        let auths = value.get("auths").unwrap_or(&value);
        let map = auths
            .as_object()
            .ok_or("expected a JSON object of registries")?;
        let mut out = Vec::with_capacity(map.len());
        for (registry, entry) in map {
            let entry: Entry = serde_json::from_value(entry.clone())
                .map_err(|_| format!("the entry for {registry:?} is not an auth object"))?;
            let credential = match (entry.auth, entry.username, entry.password) {
                (_, Some(username), Some(password)) => Credential { username, password },
                (Some(auth), _, _) => {
                    let decoded = base64::engine::general_purpose::STANDARD
                        .decode(auth.trim())
                        .map_err(|_| format!("the auth of {registry:?} is not base64"))?;
                    let decoded = String::from_utf8(decoded)
                        .map_err(|_| format!("the auth of {registry:?} is not UTF-8"))?;
                    let (username, password) = decoded.split_once(':').ok_or_else(|| {
                        format!("the auth of {registry:?} is not base64 of user:password")
                    })?;
                    Credential {
                        username: username.to_owned(),
                        password: password.to_owned(),
                    }
                }
                (None, _, _) => match entry.identity_token {
                    // Registries take an identity token as the password of `<token>`.
                    Some(token) => Credential {
                        username: "<token>".to_owned(),
                        password: token,
                    },
                    None => continue,
                },
            };
            out.push((registry.clone(), credential));
        }
        Ok(Keyring(out))
    }

    /// A keyring of one credential, for `registry`.
    pub fn one(registry: &str, credential: Credential) -> Keyring {
        Keyring(vec![(registry.to_owned(), credential)])
    }

    /// Appends another Secret's entries (earlier Secrets win, as for the kubelet).
    pub fn extend(&mut self, other: Keyring) {
        self.0.extend(other.0);
    }

    /// The credential for `registry` (`host[:port]` as in the image reference): the first
    /// entry whose key names that host (with or without a scheme and path, Docker Hub under
    /// any of its names), else the first whose `*.` wildcard matches its first label.
    pub fn for_registry(&self, registry: &str) -> Option<&Credential> {
        let wanted = canonical_host(registry);
        let hosts: Vec<(String, &Credential)> = self
            .0
            .iter()
            .map(|(key, c)| (canonical_host(key), c))
            .collect();
        hosts
            .iter()
            .find(|(host, _)| *host == wanted)
            .or_else(|| {
                hosts
                    .iter()
                    .find(|(host, _)| wildcard_matches(host, &wanted))
            })
            .map(|(_, c)| *c)
    }
}

/// `host[:port]` of a pull Secret key or reference, Docker Hub's aliases folded into one.
pub(super) fn canonical_host(key: &str) -> String {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key
        .split('/')
        .next()
        .unwrap_or_default()
        .to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" | "registry.hub.docker.com" => {
            "docker.io".to_owned()
        }
        _ => host,
    }
}

fn wildcard_matches(pattern: &str, host: &str) -> bool {
    pattern.strip_prefix("*.").is_some_and(|suffix| {
        host.split_once('.')
            .is_some_and(|(label, rest)| !label.is_empty() && rest == suffix)
    })
}

/// A `WWW-Authenticate` challenge of a registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Challenge {
    /// Send the credential with every request.
    Basic,
    /// Trade the credential (or nothing, for anonymous access) for a token at `realm`.
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
}

/// Parses a `WWW-Authenticate` header value; `None` for a scheme registries do not use.
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, params) = header.split_once(' ').unwrap_or((header, ""));
    let params = parse_params(params);
    let get = |name: &str| {
        params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    if scheme.eq_ignore_ascii_case("basic") {
        Some(Challenge::Basic)
    } else if scheme.eq_ignore_ascii_case("bearer") {
        Some(Challenge::Bearer {
            realm: get("realm")?,
            service: get("service"),
            scope: get("scope"),
        })
    } else {
        None
    }
}

/// `key="value", key=value` pairs; commas inside quotes (a scope naming two actions) kept.
fn parse_params(s: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = s.trim();
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once('=') else {
            break;
        };
        let key = key.trim().trim_start_matches(',').trim().to_owned();
        let after = after.trim_start();
        let (value, remainder) = if let Some(quoted) = after.strip_prefix('"') {
            match quoted.find('"') {
                Some(end) => (quoted[..end].to_owned(), &quoted[end + 1..]),
                None => (quoted.to_owned(), ""),
            }
        } else {
            match after.find(',') {
                Some(end) => (after[..end].trim().to_owned(), &after[end..]),
                None => (after.trim().to_owned(), ""),
            }
        };
        out.push((key, value));
        rest = remainder.trim_start().trim_start_matches(',').trim_start();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyring(json: &str) -> Keyring {
        Keyring::parse(json.as_bytes()).expect("keyring")
    }

    #[test]
    fn parse_table() {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        type Entries = Vec<(&'static str, &'static str, &'static str)>;
        let cases: [(String, Result<Entries, &str>); 7] = [
            (
                format!(
                    r#"{{"auths":{{"r.example.com":{{"auth":"{}"}}}}}}"#,
                    b64("u:p:w")
                ),
                Ok(vec![("r.example.com", "u", "p:w")]),
            ),
            (
                r#"{"auths":{"r.example.com":{"username":"u","password":"p","auth":"!!"}}}"#.into(),
                Ok(vec![("r.example.com", "u", "p")]),
            ),
            // The legacy dockercfg layout: the registries at the top.
            (
                format!(
                    r#"{{"https://index.docker.io/v1/":{{"auth":"{}"}}}}"#,
                    b64("a:b")
                ),
                Ok(vec![("https://index.docker.io/v1/", "a", "b")]),
            ),
            (
                r#"{"auths":{"r.example.com":{"identitytoken":"tok"}}}"#.into(),
                Ok(vec![("r.example.com", "<token>", "tok")]),
            ),
            (
                r#"{"auths":{"r.example.com":{"email":"x@example.com"}}}"#.into(),
                Ok(vec![]),
            ),
            (
                r#"{"auths":{"r.example.com":{"auth":"not base64!"}}}"#.into(),
                Err("not base64"),
            ),
            ("[1]".into(), Err("JSON object")),
        ];
        for (json, want) in cases {
            let got = Keyring::parse(json.as_bytes());
            match (got, want) {
                (Ok(got), Ok(want)) => {
                    let want: Vec<(String, Credential)> = want
                        .into_iter()
                        .map(|(r, u, p)| {
                            (
                                r.to_owned(),
                                Credential {
                                    username: u.to_owned(),
                                    password: p.to_owned(),
                                },
                            )
                        })
                        .collect();
                    assert_eq!(got.0, want, "{json}");
                }
                (Err(e), Err(want)) => {
                    assert!(e.contains(want), "{json}: {e}");
                    assert!(
                        !e.contains("not base64!"),
                        "the content is never quoted: {e}"
                    );
                }
                (got, want) => panic!("{json}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn for_registry_table() {
        let ring = keyring(
            r#"{"auths":{
                "https://index.docker.io/v1/":{"username":"hub","password":"1"},
                "localhost:5000":{"username":"local","password":"2"},
                "*.example.com":{"username":"wild","password":"3"},
                "https://registry.example.com/v2/":{"username":"exact","password":"4"},
                "http://plain.example.org":{"username":"plain","password":"5"}
            }}"#,
        );
        let cases = [
            ("docker.io", Some("hub")),
            ("registry-1.docker.io", Some("hub")),
            ("localhost:5000", Some("local")),
            ("localhost:5001", None),
            // An exact entry wins over a wildcard, whatever their order.
            ("registry.example.com", Some("exact")),
            ("a.example.com", Some("wild")),
            ("a.b.example.com", None),
            ("example.com", None),
            ("PLAIN.example.org", Some("plain")),
            ("ghcr.io", None),
        ];
        for (registry, want) in cases {
            assert_eq!(
                ring.for_registry(registry).map(|c| c.username.as_str()),
                want,
                "{registry}"
            );
        }
    }

    #[test]
    fn challenge_table() {
        let bearer = |realm: &str, service: Option<&str>, scope: Option<&str>| {
            Some(Challenge::Bearer {
                realm: realm.into(),
                service: service.map(Into::into),
                scope: scope.map(Into::into),
            })
        };
        let cases = [
            (r#"Basic realm="Registry Realm""#, Some(Challenge::Basic)),
            (
                r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/alpine:pull""#,
                bearer(
                    "https://auth.docker.io/token",
                    Some("registry.docker.io"),
                    Some("repository:library/alpine:pull"),
                ),
            ),
            (
                r#"bearer realm=https://ghcr.io/token, scope="repository:a/b:pull,push""#,
                bearer(
                    "https://ghcr.io/token",
                    None,
                    Some("repository:a/b:pull,push"),
                ),
            ),
            (r#"Bearer service="x""#, None),
            ("Negotiate abc", None),
        ];
        for (header, want) in cases {
            assert_eq!(parse_challenge(header), want, "{header}");
        }
    }

    #[test]
    fn debug_never_shows_the_password() {
        let c = Credential {
            username: "u".into(),
            password: "hunter2".into(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
