//! The provider arguments that hold credentials, in either syntax.

/// Credential argument names checked by `module/provider-config` (lower case).
pub const CREDENTIAL_NAMES: [&str; 21] = [
    "access_key",
    "secret_key",
    "secret_access_key",
    "session_token",
    "token",
    "access_token",
    "auth_token",
    "bearer_token",
    "api_token",
    "api_key",
    "apikey",
    "password",
    "passphrase",
    "client_secret",
    "client_certificate",
    "client_certificate_password",
    "client_key",
    "private_key",
    "private_key_password",
    "ssh_private_key",
    "secret",
];

pub(super) fn is_credential(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    CREDENTIAL_NAMES.contains(&lower.as_str())
}
