//! A command-line user's registry credentials, found as `docker pull` and `podman pull` find
//! them: the auth files, and the credential helpers they name (`credHelpers`, `credsStore`).
//! Only `captf lint image` reads these; the manager reads image pull Secrets and never runs a
//! helper.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::AsyncWriteExt;

use super::auth::{Credential, Keyring, canonical_host};

/// The longest a credential helper may take: some ask a cloud's API for a token.
const HELPER_TIMEOUT: Duration = Duration::from_secs(30);

/// What every helper of the credential helper protocol prints when it holds nothing for the
/// server.
const NOT_FOUND: &str = "credentials not found in native keychain";

/// The server Docker names Docker Hub by, in its files and to its helpers.
const DOCKER_HUB_SERVER: &str = "https://index.docker.io/v1/";

/// Where the registry credentials of a command-line user are: the Docker config
/// (`$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`), `$REGISTRY_AUTH_FILE` and
/// `$XDG_RUNTIME_DIR/containers/auth.json`, earlier files first.
pub fn auth_files() -> Vec<PathBuf> {
    let env = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let docker = env("DOCKER_CONFIG")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".docker")))
        .map(|d| d.join("config.json"));
    let registry_auth = env("REGISTRY_AUTH_FILE").map(PathBuf::from);
    let containers = env("XDG_RUNTIME_DIR").map(|d| PathBuf::from(d).join("containers/auth.json"));
    [docker, registry_auth, containers]
        .into_iter()
        .flatten()
        .collect()
}

/// The credentials for `registry` (`host[:port]`, as in the image reference) that the files at
/// `paths` give, earlier files first. In each file, the credential helper it names for the
/// registry (`credHelpers`, else `credsStore`) is asked before its `auths`, as Docker does; a
/// helper that holds nothing for the registry leaves the `auths`. Helpers are looked up as
/// `docker-credential-<name>` on `search_path` (the user's `PATH`). A missing file holds none.
pub async fn keyring_for(
    paths: &[PathBuf],
    registry: &str,
    search_path: Option<&OsStr>,
) -> Result<Keyring, String> {
    let mut keyring = Keyring::default();
    for path in paths {
        let data = match std::fs::read(path) {
            Ok(data) => data,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let in_file = |e: String| format!("{}: {e}", path.display());
        let file: Value =
            serde_json::from_slice(&data).map_err(|e| in_file(format!("not JSON ({e})")))?;
        if let Some(helper) = helper_for(&file, registry) {
            let program = find(&helper.program(), search_path).ok_or_else(|| {
                in_file(format!(
                    "the credential helper {} ({}) is not on PATH: install it, or remove the \
                     entry from the file",
                    helper.program(),
                    helper.named_by
                ))
            })?;
            let server = server_url(registry);
            if let Some(credential) = ask(&program, &server).await.map_err(|e| {
                in_file(format!(
                    "the credential helper {} ({}) for {server}: {e}",
                    helper.program(),
                    helper.named_by
                ))
            })? {
                keyring.extend(Keyring::one(registry, credential));
            }
        }
        // A file may hold only helpers and other settings: its `auths`, when it has them.
        if let Some(auths) = file.get("auths") {
            keyring.extend(Keyring::parse(auths.to_string().as_bytes()).map_err(in_file)?);
        }
    }
    Ok(keyring)
}

/// A credential helper a file names for one registry.
#[derive(Debug, PartialEq)]
struct Helper {
    name: String,
    /// `credHelpers` or `credsStore`, for messages.
    named_by: &'static str,
}

impl Helper {
    fn program(&self) -> String {
        format!("docker-credential-{}", self.name)
    }
}

/// The helper `file` names for `registry`: its `credHelpers` entry for the host, else its
/// `credsStore` (pure).
fn helper_for(file: &Value, registry: &str) -> Option<Helper> {
    let wanted = canonical_host(registry);
    let named = |value: &Value| value.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    file.get("credHelpers")
        .and_then(Value::as_object)
        .and_then(|helpers| {
            helpers
                .iter()
                .find(|(host, _)| canonical_host(host) == wanted)
                .and_then(|(_, name)| named(name))
        })
        .map(|name| Helper {
            name,
            named_by: "credHelpers",
        })
        .or_else(|| {
            file.get("credsStore").and_then(named).map(|name| Helper {
                name,
                named_by: "credsStore",
            })
        })
}

/// The server a helper is asked for: Docker Hub by the name Docker stores it under, any other
/// registry by its host (pure).
fn server_url(registry: &str) -> String {
    if canonical_host(registry) == "docker.io" {
        DOCKER_HUB_SERVER.to_owned()
    } else {
        registry.to_owned()
    }
}

/// The first executable `program` in the folders of `search_path`.
fn find(program: &str, search_path: Option<&OsStr>) -> Option<PathBuf> {
    std::env::split_paths(search_path.unwrap_or_default())
        .map(|dir| dir.join(program))
        .find(|candidate| {
            std::fs::metadata(candidate)
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// `program get` with `server` on its standard input: the credential it holds, or `None`
/// when it holds none for the server.
async fn ask(program: &Path, server: &str) -> Result<Option<Credential>, String> {
    let mut child = tokio::process::Command::new(program)
        .arg("get")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start it: {e}"))?;
    let mut stdin = child.stdin.take().ok_or("no standard input")?;
    stdin
        .write_all(server.as_bytes())
        .await
        .map_err(|e| format!("cannot write to it: {e}"))?;
    drop(stdin);
    let out = tokio::time::timeout(HELPER_TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| format!("no answer within {}s", HELPER_TIMEOUT.as_secs()))?
        .map_err(|e| e.to_string())?;
    answer(out.status.success(), &out.stdout, &out.stderr)
}

/// What a helper's exit and output say (pure). Helpers print their errors on standard output;
/// only the first line of either stream is quoted, so no credential reaches a message.
fn answer(success: bool, stdout: &[u8], stderr: &[u8]) -> Result<Option<Credential>, String> {
    let first_line = |bytes: &[u8]| {
        String::from_utf8_lossy(bytes)
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or_default()
            .chars()
            .take(200)
            .collect::<String>()
    };
    if !success {
        let said = [first_line(stdout), first_line(stderr)]
            .into_iter()
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join("; ");
        if said.contains(NOT_FOUND) {
            return Ok(None);
        }
        return Err(if said.is_empty() {
            "it failed without a message".to_owned()
        } else {
            format!("it failed: {said}")
        });
    }
    #[derive(serde::Deserialize)]
    struct Answer {
        #[serde(rename = "Username", default)]
        username: String,
        #[serde(rename = "Secret", default)]
        secret: String,
    }
    let answer: Answer = serde_json::from_slice(stdout)
        .map_err(|_| "its answer is not the protocol's JSON (Username, Secret)".to_owned())?;
    if answer.secret.is_empty() {
        return Ok(None);
    }
    Ok(Some(Credential {
        username: answer.username,
        password: answer.secret,
    }))
}

/// `PATH` of this process, where a user's helpers are.
pub fn user_search_path() -> Option<OsString> {
    std::env::var_os("PATH")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helper_table() {
        let file = |json: &str| -> Value { serde_json::from_str(json).unwrap_or_default() };
        let helper = |name: &str, named_by| {
            Some(Helper {
                name: name.to_owned(),
                named_by,
            })
        };
        for (config, registry, want) in [
            (r#"{}"#, "ghcr.io", None),
            (r#"{"credsStore": ""}"#, "ghcr.io", None),
            (
                r#"{"credsStore": "desktop"}"#,
                "ghcr.io",
                helper("desktop", "credsStore"),
            ),
            (
                r#"{"credsStore": "desktop", "credHelpers": {"123.dkr.ecr.us-east-1.amazonaws.com": "ecr-login"}}"#,
                "123.dkr.ecr.us-east-1.amazonaws.com",
                helper("ecr-login", "credHelpers"),
            ),
            (
                r#"{"credsStore": "desktop", "credHelpers": {"gcr.io": "gcloud"}}"#,
                "ghcr.io",
                helper("desktop", "credsStore"),
            ),
            (
                r#"{"credHelpers": {"https://index.docker.io/v1/": "pass"}}"#,
                "docker.io",
                helper("pass", "credHelpers"),
            ),
            (
                r#"{"credHelpers": {"GCR.io": "gcloud"}}"#,
                "gcr.io",
                helper("gcloud", "credHelpers"),
            ),
            (r#"{"credHelpers": {"gcr.io": "gcloud"}}"#, "ghcr.io", None),
        ] {
            assert_eq!(
                helper_for(&file(config), registry),
                want,
                "{config} for {registry}"
            );
        }
    }

    #[test]
    fn server_table() {
        for (registry, want) in [
            ("docker.io", DOCKER_HUB_SERVER),
            ("index.docker.io", DOCKER_HUB_SERVER),
            ("ghcr.io", "ghcr.io"),
            ("127.0.0.1:5000", "127.0.0.1:5000"),
        ] {
            assert_eq!(server_url(registry), want, "{registry}");
        }
    }

    #[test]
    fn answer_table() {
        let user = |r: Result<Option<Credential>, String>| r.map(|c| c.map(|c| c.username));
        /// Exit status, standard output and error, and the user the answer gives.
        type Case = (
            bool,
            &'static str,
            &'static str,
            Result<Option<String>, &'static str>,
        );
        let cases: [Case; 7] = [
            (
                true,
                r#"{"ServerURL":"ghcr.io","Username":"me","Secret":"pw"}"#,
                "",
                Ok(Some("me".into())),
            ),
            (
                true,
                r#"{"ServerURL":"r","Username":"<token>","Secret":"t"}"#,
                "",
                Ok(Some("<token>".into())),
            ),
            (true, r#"{"Username":"me","Secret":""}"#, "", Ok(None)),
            (
                false,
                "credentials not found in native keychain\n",
                "",
                Ok(None),
            ),
            (
                false,
                "error getting credentials - err: exit status 1, out: `no usable keychain`",
                "",
                Err(
                    "it failed: error getting credentials - err: exit status 1, out: `no usable keychain`",
                ),
            ),
            (false, "", "", Err("it failed without a message")),
            (
                true,
                "Username=me Secret=pw",
                "",
                Err("its answer is not the protocol's JSON (Username, Secret)"),
            ),
        ];
        for (success, stdout, stderr, want) in cases {
            assert_eq!(
                user(answer(success, stdout.as_bytes(), stderr.as_bytes())),
                want.map_err(str::to_owned),
                "{stdout}"
            );
        }
    }

    #[test]
    fn a_failure_never_quotes_more_than_a_first_line() {
        let out = "bad\npassword: hunter2\n";
        let said = answer(false, out.as_bytes(), b"").err().unwrap_or_default();
        assert!(!said.contains("hunter2"), "{said}");
    }

    /// A helper on the search path is asked with the server on its standard input; its answer
    /// wins over the file's `auths`, and a file without helpers still gives its `auths`.
    #[tokio::test]
    async fn helpers_are_asked_before_the_files_auths() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin)?;
        let script = bin.join("docker-credential-test");
        std::fs::write(
            &script,
            "#!/bin/sh\n[ \"$1\" = get ] || exit 2\nread server\ncase \"$server\" in\n  r.example) echo '{\"Username\":\"from-helper\",\"Secret\":\"s\"}' ;;\n  *) echo 'credentials not found in native keychain'; exit 1 ;;\nesac\n",
        )?;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
        let config = dir.path().join("config.json");
        std::fs::write(
            &config,
            r#"{"auths": {"r.example": {"username": "from-file", "password": "1"}, "s.example": {"username": "file-only", "password": "2"}}, "credsStore": "test"}"#,
        )?;
        let only_helpers = dir.path().join("helpers.json");
        std::fs::write(
            &only_helpers,
            r#"{"credHelpers": {"r.example": "test"}, "psFormat": "table"}"#,
        )?;
        let search = Some(bin.as_os_str());
        let user = |k: &Keyring, r: &str| k.for_registry(r).map(|c| c.username.clone());
        let keyring = keyring_for(std::slice::from_ref(&config), "r.example", search)
            .await
            .map_err(anyhow::Error::msg)?;
        assert_eq!(user(&keyring, "r.example").as_deref(), Some("from-helper"));
        let keyring = keyring_for(std::slice::from_ref(&config), "s.example", search)
            .await
            .map_err(anyhow::Error::msg)?;
        assert_eq!(user(&keyring, "s.example").as_deref(), Some("file-only"));
        let keyring = keyring_for(&[only_helpers], "r.example", search)
            .await
            .map_err(anyhow::Error::msg)?;
        assert_eq!(user(&keyring, "r.example").as_deref(), Some("from-helper"));

        let missing = keyring_for(std::slice::from_ref(&config), "r.example", None)
            .await
            .err()
            .unwrap_or_default();
        assert!(
            missing.contains("docker-credential-test (credsStore) is not on PATH")
                && missing.contains("config.json"),
            "{missing}"
        );
        Ok(())
    }

    #[tokio::test]
    async fn auth_files_are_read_in_order_and_missing_ones_hold_nothing() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let first = dir.path().join("first.json");
        let second = dir.path().join("second.json");
        std::fs::write(
            &first,
            r#"{"auths": {"r.example": {"username": "a", "password": "1"}}}"#,
        )?;
        std::fs::write(
            &second,
            r#"{"auths": {"r.example": {"username": "b", "password": "2"}, "s.example": {"username": "c", "password": "3"}}}"#,
        )?;
        let paths = [dir.path().join("missing.json"), first, second.clone()];
        let user = |k: &Keyring, r: &str| k.for_registry(r).map(|c| c.username.clone());
        let keyring = keyring_for(&paths, "r.example", None)
            .await
            .map_err(anyhow::Error::msg)?;
        assert_eq!(user(&keyring, "r.example").as_deref(), Some("a"));
        assert_eq!(user(&keyring, "s.example").as_deref(), Some("c"));
        assert_eq!(user(&keyring, "t.example"), None);

        std::fs::write(&second, "not json")?;
        let broken = keyring_for(&[second], "r.example", None)
            .await
            .err()
            .unwrap_or_default();
        assert!(broken.contains("second.json"), "{broken}");
        Ok(())
    }
}
