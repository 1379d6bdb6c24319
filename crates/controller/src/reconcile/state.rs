//! Reading the state (live, only while no Job runs) and the durable inputs Secret.

use std::collections::BTreeMap;

use captf_api::names::ObjectKey;
use captf_api::{annotations, labels};
use captf_state::{Chunk, DecodedState, Limits, StateError};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};

use crate::error::{KubeContext, Result};

/// What the reader found.
#[derive(Debug)]
pub enum StateRead {
    /// No state Secret.
    Missing,
    /// State Secrets that cannot be read.
    Unreadable(StateError),
    /// Readable state, and the chunks it was decoded from (for backups).
    Found(Box<DecodedState>, Vec<Chunk>),
    /// A readable state of another lineage than the object's (see [`classify`]): not its
    /// state, so nothing reads its outputs, backs it up or runs against it; only a restore
    /// replaces it.
    Foreign(Box<DecodedState>),
}

/// Lists the object's state Secrets live (the backend's own selector) and decodes them.
pub async fn read(client: &kube::Client, key: &ObjectKey) -> Result<StateRead> {
    let api: Api<Secret> = Api::namespaced(client.clone(), key.namespace());
    let selector = format!(
        "{}=true,{}={},{}=default",
        labels::TFSTATE,
        labels::TFSTATE_SECRET_SUFFIX,
        key.state_suffix(),
        labels::TFSTATE_WORKSPACE
    );
    let list = api
        .list(&ListParams::default().labels(&selector))
        .await
        .during(|| {
            format!(
                "listing state Secrets of {}/{}",
                key.namespace(),
                key.name()
            )
        })?;
    if list.items.is_empty() {
        return Ok(StateRead::Missing);
    }
    let chunks: Vec<Chunk> = list
        .items
        .into_iter()
        .map(|s| Chunk {
            name: s.metadata.name.unwrap_or_default(),
            data: s.data.and_then(|mut d| d.remove("tfstate")).map(|b| b.0),
            annotations: s.metadata.annotations.unwrap_or_default(),
        })
        .collect();
    Ok(
        match captf_state::decode(&key.state_secret(), &chunks, Limits::default()) {
            Ok(state) => StateRead::Found(Box::new(state), chunks),
            Err(e) => StateRead::Unreadable(e),
        },
    )
}

/// The durable inputs Secret's metadata and files, if it exists.
#[derive(Debug, Default)]
pub struct DurableInputs {
    pub exists: bool,
    pub annotations: BTreeMap<String, String>,
    pub tfvars: Option<serde_json::Value>,
    /// Bytes of `main.tf.json` and `terraform.tfvars.json` together.
    pub rendered_size: usize,
    /// Pools: the canonical JSON of the exports the last successful apply rendered (its own data
    /// key, see [`super::pool_exports::APPLIED_EXPORTS_KEY`]).
    pub applied_exports: Option<Vec<u8>>,
}

impl DurableInputs {
    /// The object applied at least once (survives a lost status and clusterctl move).
    pub fn applied(&self) -> bool {
        self.annotations
            .get(annotations::APPLIED)
            .is_some_and(|v| v == "true")
            || self.annotations.contains_key(annotations::IMAGE_DIGEST)
    }

    /// The apply Job recorded as lost while it ran (`captf.io/interrupted-apply`).
    pub fn interrupted_apply(&self) -> Option<&str> {
        self.annotations
            .get(annotations::INTERRUPTED_APPLY)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// The last rendered value of a boolean tfvars key.
    pub fn rendered_bool(&self, key: &str) -> bool {
        self.tfvars
            .as_ref()
            .and_then(|v| v.get(key))
            .and_then(|v| v.as_bool())
            .unwrap_or(false)
    }
}

/// Reads the durable inputs Secret live.
pub async fn durable_inputs(client: &kube::Client, key: &ObjectKey) -> Result<DurableInputs> {
    let api: Api<Secret> = Api::namespaced(client.clone(), key.namespace());
    let name = key.durable_inputs_secret();
    let Some(secret) = api
        .get_opt(&name)
        .await
        .during(|| format!("reading Secret {}/{name}", key.namespace()))?
    else {
        return Ok(DurableInputs::default());
    };
    let tfvars = secret
        .data
        .as_ref()
        .and_then(|d| d.get(captf_contract::render::TFVARS_FILE))
        .and_then(|b| serde_json::from_slice(&b.0).ok());
    let data = secret.data.unwrap_or_default();
    let size = |k: &str| data.get(k).map_or(0, |b| b.0.len());
    Ok(DurableInputs {
        exists: true,
        annotations: secret.metadata.annotations.unwrap_or_default(),
        tfvars,
        rendered_size: size(captf_contract::render::MAIN_TF_FILE)
            + size(captf_contract::render::TFVARS_FILE),
        applied_exports: data
            .get(super::pool_exports::APPLIED_EXPORTS_KEY)
            .map(|b| b.0.clone()),
    })
}

/// Whose state the reader found: what [`classify`] makes of a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// No state Secret.
    Missing,
    /// State Secrets that cannot be read.
    Unreadable,
    /// The object's own state.
    Own {
        /// Its lineage, to record when it is not recorded yet (or was just adopted).
        record: Option<String>,
        /// `captf.io/adopt-state` made it the object's in this pass.
        adopted: bool,
        /// It has no inputs hash although the object applied before, and nobody adopted it.
        unadopted: bool,
        /// `captf.io/adopt-state` names it and it has an inputs hash: nothing is left to adopt.
        adoption_done: bool,
    },
    /// A readable state of another lineage than the object's.
    Foreign {
        /// The lineage found.
        found: String,
        /// The object's lineage.
        expected: String,
    },
}

/// What is known of the object's own lineage, in the order it is trusted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Recorded<'a> {
    /// A restore that succeeded in this pass: the backup's lineage.
    pub restored: Option<&'a str>,
    /// `captf.io/state-lineage` on the durable inputs.
    pub durable: Option<&'a str>,
    /// `status.stateLineage`.
    pub status: Option<&'a str>,
    /// The newest complete backup's lineage (looked up only when none of the above is known).
    pub backup: Option<&'a str>,
}

impl<'a> Recorded<'a> {
    /// The object's lineage, if anything recorded it.
    pub fn lineage(&self) -> Option<&'a str> {
        self.restored
            .or(self.durable)
            .or(self.status)
            .or(self.backup)
            .filter(|l| !l.is_empty())
    }
}

/// Decides whose state `read` is. A state whose lineage nothing recorded is the object's (its
/// first apply wrote it); one of another lineage is foreign unless `adopt` (the value of
/// `captf.io/adopt-state`) names it. An object that `ever_applied` must have an inputs hash on
/// its state, or an adoption, before anything runs against it.
pub fn classify(
    read: &StateRead,
    recorded: Recorded<'_>,
    adopt: Option<&str>,
    ever_applied: bool,
) -> Identity {
    let s = match read {
        StateRead::Missing => return Identity::Missing,
        StateRead::Unreadable(_) | StateRead::Foreign(_) => return Identity::Unreadable,
        StateRead::Found(s, _) => s,
    };
    let lineage = s.lineage.as_str();
    let named = adopt == Some(lineage);
    let own = recorded.lineage();
    if let Some(own) = own.filter(|own| *own != lineage && !named) {
        return Identity::Foreign {
            found: lineage.to_owned(),
            expected: own.to_owned(),
        };
    }
    Identity::Own {
        // Known only from status or a backup, or not at all: written where it survives.
        record: (recorded.restored != Some(lineage) && recorded.durable != Some(lineage))
            .then(|| lineage.to_owned()),
        adopted: own.is_some_and(|own| own != lineage),
        unadopted: ever_applied && s.inputs_hash.is_none() && !named,
        adoption_done: named && s.inputs_hash.is_some(),
    }
}

/// What the Job must find when it runs (`--expect-state`): no state, or the lineage and serial
/// read now. `None` for an unreadable state, on which only a restore runs (it expects its backup).
pub fn expected(read: &StateRead) -> Option<captf_runner::expect::ExpectedState> {
    use captf_runner::expect::ExpectedState;
    match read {
        StateRead::Missing => Some(ExpectedState::None),
        StateRead::Found(s, _) => Some(ExpectedState::Lineage {
            lineage: s.lineage.clone(),
            serial: s.serial,
        }),
        StateRead::Unreadable(_) | StateRead::Foreign(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(lineage: &str, hash: Option<&str>) -> StateRead {
        StateRead::Found(
            Box::new(DecodedState {
                serial: 3,
                lineage: lineage.into(),
                terraform_version: "1.12.6".into(),
                outputs: BTreeMap::new(),
                sensitive_outputs: Default::default(),
                managed_resources: 1,
                compressed_bytes: 10,
                decompressed_bytes: 20,
                chunks: 1,
                inputs_hash: hash.map(str::to_owned),
            }),
            Vec::new(),
        )
    }

    fn own(record: Option<&str>, adopted: bool, unadopted: bool, done: bool) -> Identity {
        Identity::Own {
            record: record.map(str::to_owned),
            adopted,
            unadopted,
            adoption_done: done,
        }
    }

    fn foreign(found: &str, expected: &str) -> Identity {
        Identity::Foreign {
            found: found.into(),
            expected: expected.into(),
        }
    }

    #[test]
    fn whose_state_it_is() {
        let durable = |l| Recorded {
            durable: Some(l),
            ..Recorded::default()
        };
        let h = Some("h2:a");
        // (what, the read, what is recorded, captf.io/adopt-state, ever applied, whose it is)
        type Row<'a> = (
            &'a str,
            StateRead,
            Recorded<'a>,
            Option<&'a str>,
            bool,
            Identity,
        );
        let rows: Vec<Row<'_>> = vec![
            (
                "no state",
                StateRead::Missing,
                durable("l1"),
                None,
                true,
                Identity::Missing,
            ),
            (
                "the first state read: the object's, recorded",
                found("l1", None),
                Recorded::default(),
                None,
                false,
                own(Some("l1"), false, false, false),
            ),
            (
                "the recorded lineage: nothing to record",
                found("l1", h),
                durable("l1"),
                None,
                true,
                own(None, false, false, false),
            ),
            (
                "another lineage than the durable inputs record",
                found("l2", h),
                durable("l1"),
                None,
                true,
                foreign("l2", "l1"),
            ),
            (
                "known from a backup only (an object from before lineages were recorded)",
                found("l2", None),
                Recorded {
                    backup: Some("l1"),
                    ..Recorded::default()
                },
                None,
                true,
                foreign("l2", "l1"),
            ),
            (
                "known from status only: recorded on the durable inputs",
                found("l1", h),
                Recorded {
                    status: Some("l1"),
                    ..Recorded::default()
                },
                None,
                true,
                own(Some("l1"), false, false, false),
            ),
            (
                "a restore of this pass wins over what the durable inputs said before it",
                found("l0", h),
                Recorded {
                    restored: Some("l0"),
                    durable: Some("l1"),
                    ..Recorded::default()
                },
                None,
                true,
                own(None, false, false, false),
            ),
            (
                "adopting the lineage found",
                found("l2", None),
                durable("l1"),
                Some("l2"),
                true,
                own(Some("l2"), true, false, false),
            ),
            (
                "an adoption naming another lineage changes nothing",
                found("l2", h),
                durable("l1"),
                Some("l3"),
                true,
                foreign("l2", "l1"),
            ),
            (
                "applied before and no inputs hash: unadopted",
                found("l1", None),
                durable("l1"),
                None,
                true,
                own(None, false, true, false),
            ),
            (
                "never applied and no inputs hash: a failed first apply, retried",
                found("l1", None),
                durable("l1"),
                None,
                false,
                own(None, false, false, false),
            ),
            (
                "adopted and applied: the adoption is used up",
                found("l2", h),
                durable("l2"),
                Some("l2"),
                true,
                own(None, false, false, true),
            ),
        ];
        for (name, read, recorded, adopt, ever_applied, want) in rows {
            assert_eq!(
                classify(&read, recorded, adopt, ever_applied),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn a_job_expects_the_state_read() {
        use captf_runner::expect::ExpectedState;
        assert_eq!(expected(&StateRead::Missing), Some(ExpectedState::None));
        assert_eq!(
            expected(&found("l1", None)),
            Some(ExpectedState::Lineage {
                lineage: "l1".into(),
                serial: 3
            })
        );
    }
}
