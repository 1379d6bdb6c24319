//! Reading a module image's labels from its registry (the OCI distribution API), for the
//! machine template's capacity and the variables schema the webhooks and passes check: no
//! layer is ever downloaded, only the manifest and the config. Credentials come from the
//! object's image pull Secrets. `captf lint image` also copies a whole image into an OCI
//! layout ([`layout`]), with the user's own registry credentials.

pub mod auth;
mod client;
pub mod layout;
pub mod manifest;
mod pull_secrets;
pub mod user_auth;

pub use auth::Keyring;
pub use client::{InspectError, Registry, TIMEOUT, endpoint};
pub use pull_secrets::{KeyringError, keyring};
