//! A TerraformMachineTemplate's capacity for autoscaler scale-from-zero (pure): when the
//! module image must be read, and the status its labels (or `spec.capacity`) make.

use std::collections::BTreeMap;

use captf_api::conditions::{Status, reasons, types};
use captf_api::templates::{
    CapacitySource, CapacitySourceKind, NodeInfo, TerraformMachineTemplateStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// Image label: node capacity, a JSON object of resource name to quantity string.
pub const CAPACITY_LABEL: &str = "io.captf.capacity";
/// Image label: node facts, `{"architecture": ..., "operatingSystem": ...}`.
pub const NODE_INFO_LABEL: &str = "io.captf.node-info";

pub type ResourceList = BTreeMap<String, Quantity>;

/// What this pass knows of the image.
#[derive(Clone, Debug, PartialEq)]
pub enum Read {
    /// Its labels, just read.
    Labels(BTreeMap<String, String>),
    /// The read failed; the message says why.
    Failed(String),
    /// Not read: the status already holds what this image says.
    Cached,
}

/// The status and the `CapacityResolved` condition a pass writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    pub capacity: Option<ResourceList>,
    pub node_info: Option<NodeInfo>,
    pub source: Option<CapacitySource>,
    pub status: Status,
    pub reason: &'static str,
    pub message: String,
}

/// Whether `image` must be read: never read (or read for another image), a read that failed,
/// or a `spec.capacity` removed while the status holds it instead of the image's.
pub fn needs_read(
    image: &str,
    spec_capacity: Option<&ResourceList>,
    status: Option<&TerraformMachineTemplateStatus>,
) -> bool {
    let Some(status) = status else {
        return true;
    };
    let source = status.capacity_source.as_ref();
    let read_image = source.and_then(|s| s.image.as_deref());
    let failed = condition_reason(status) == Some(reasons::IMAGE_INSPECT_FAILED);
    let holds_spec = source.and_then(|s| s.source) == Some(CapacitySourceKind::Spec);
    read_image != Some(image) || failed || (spec_capacity.is_none() && holds_spec)
}

fn condition_reason(status: &TerraformMachineTemplateStatus) -> Option<&str> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == types::CAPACITY_RESOLVED)
        .map(|c| c.reason.as_str())
}

/// The status for `image` from what was read (`spec.capacity`, when set, replaces the
/// image's capacity as a whole; node facts always come from the image).
pub fn resolve(
    image: &str,
    spec_capacity: Option<&ResourceList>,
    previous: Option<&TerraformMachineTemplateStatus>,
    read: &Read,
) -> Resolved {
    let from_spec = |image: Option<&str>| CapacitySource {
        source: Some(CapacitySourceKind::Spec),
        image: image.map(str::to_owned),
    };
    match read {
        Read::Failed(message) => Resolved {
            capacity: spec_capacity.cloned(),
            node_info: None,
            source: spec_capacity.map(|_| from_spec(None)),
            status: Status::False,
            reason: reasons::IMAGE_INSPECT_FAILED,
            message: format!("reading the labels of {image}: {message}"),
        },
        Read::Labels(labels) => {
            let capacity = labels.get(CAPACITY_LABEL).map(|v| parse_capacity(v));
            let node_info = labels.get(NODE_INFO_LABEL).map(|v| parse_node_info(v));
            let invalid: Vec<String> = [
                capacity
                    .as_ref()
                    .and_then(|r| r.as_ref().err())
                    .map(|e| format!("label {CAPACITY_LABEL}: {e}")),
                node_info
                    .as_ref()
                    .and_then(|r| r.as_ref().err())
                    .map(|e| format!("label {NODE_INFO_LABEL}: {e}")),
            ]
            .into_iter()
            .flatten()
            .collect();
            let capacity = capacity.and_then(Result::ok);
            let node_info = node_info.and_then(Result::ok);
            let (status, reason, message) = if !invalid.is_empty() {
                (
                    Status::False,
                    reasons::CAPACITY_LABEL_INVALID,
                    format!(
                        "{image}: {}; fix the label in the module image (or set spec.capacity, which replaces the image's capacity)",
                        invalid.join("; ")
                    ),
                )
            } else {
                summary(image, spec_capacity, capacity.as_ref(), node_info.as_ref())
            };
            assemble(
                image,
                spec_capacity,
                capacity,
                node_info,
                (status, reason, message),
            )
        }
        Read::Cached => {
            let previous = previous.cloned().unwrap_or_default();
            let image_capacity = previous.capacity.clone().filter(|_| {
                previous.capacity_source.as_ref().and_then(|s| s.source)
                    == Some(CapacitySourceKind::Image)
            });
            let label_invalid =
                condition_reason(&previous) == Some(reasons::CAPACITY_LABEL_INVALID);
            let verdict = if label_invalid {
                let message = previous
                    .conditions
                    .iter()
                    .flatten()
                    .find(|c| c.type_ == types::CAPACITY_RESOLVED)
                    .map(|c| c.message.to_string())
                    .unwrap_or_default();
                (Status::False, reasons::CAPACITY_LABEL_INVALID, message)
            } else {
                summary(
                    image,
                    spec_capacity,
                    image_capacity.as_ref(),
                    previous.node_info.as_ref(),
                )
            };
            assemble(
                image,
                spec_capacity,
                image_capacity,
                previous.node_info,
                verdict,
            )
        }
    }
}

fn assemble(
    image: &str,
    spec_capacity: Option<&ResourceList>,
    image_capacity: Option<ResourceList>,
    node_info: Option<NodeInfo>,
    (status, reason, message): (Status, &'static str, String),
) -> Resolved {
    let (capacity, kind) = match (spec_capacity, image_capacity) {
        (Some(spec), _) => (Some(spec.clone()), Some(CapacitySourceKind::Spec)),
        (None, Some(image)) => (Some(image), Some(CapacitySourceKind::Image)),
        (None, None) => (None, None),
    };
    Resolved {
        capacity,
        node_info,
        source: Some(CapacitySource {
            source: kind,
            image: Some(image.to_owned()),
        }),
        status,
        reason,
        message,
    }
}

fn summary(
    image: &str,
    spec_capacity: Option<&ResourceList>,
    image_capacity: Option<&ResourceList>,
    node_info: Option<&NodeInfo>,
) -> (Status, &'static str, String) {
    let capacity = match (spec_capacity, image_capacity) {
        (Some(c), _) => Some(format!("capacity {} from spec.capacity", list(c))),
        (None, Some(c)) => Some(format!("capacity {} from {image}", list(c))),
        (None, None) => None,
    };
    let node = node_info.map(|n| {
        let mut parts = Vec::new();
        if let Some(a) = n.architecture {
            parts.push(serde_json::to_value(a).map_or_else(
                |_| String::new(),
                |v| v.as_str().unwrap_or_default().to_owned(),
            ));
        }
        if let Some(os) = &n.operating_system {
            parts.push(os.clone());
        }
        format!("node {} from {image}", parts.join("/"))
    });
    match (capacity, node) {
        (None, None) => (
            Status::True,
            reasons::CAPACITY_NOT_DECLARED,
            format!(
                "{image} has neither {CAPACITY_LABEL} nor {NODE_INFO_LABEL}; set spec.capacity for scale-from-zero"
            ),
        ),
        (capacity, node) => (
            Status::True,
            reasons::CAPACITY_RESOLVED,
            [capacity, node]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join("; "),
        ),
    }
}

fn list(resources: &ResourceList) -> String {
    resources
        .iter()
        .map(|(k, v)| format!("{k}={}", v.0))
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses `io.captf.capacity`.
pub fn parse_capacity(value: &str) -> Result<ResourceList, String> {
    let map: BTreeMap<String, serde_json::Value> = serde_json::from_str(value).map_err(|_| {
        "not a JSON object of resource name to quantity, like {\"cpu\":\"4\",\"memory\":\"16Gi\"}"
            .to_owned()
    })?;
    if map.is_empty() {
        return Err("the object is empty".into());
    }
    let mut out = ResourceList::new();
    for (name, quantity) in map {
        if !valid_resource_name(&name) {
            return Err(format!("{name:?} is not a resource name"));
        }
        let quantity = match quantity {
            serde_json::Value::String(s) if valid_quantity(&s) => s,
            other => {
                return Err(format!(
                    "{name}: {other} is not a quantity string such as \"4\", \"500m\" or \"16Gi\""
                ));
            }
        };
        out.insert(name, Quantity(quantity));
    }
    Ok(out)
}

/// Parses `io.captf.node-info`.
pub fn parse_node_info(value: &str) -> Result<NodeInfo, String> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields, rename_all = "camelCase")]
    struct Raw {
        architecture: Option<captf_api::templates::Architecture>,
        operating_system: Option<String>,
    }
    let raw: Raw = serde_json::from_str(value).map_err(|e| {
        format!(
            "not {{\"architecture\": \"amd64|arm64|s390x|ppc64le\", \"operatingSystem\": \"linux\"}} ({e})"
        )
    })?;
    if let Some(os) = &raw.operating_system
        && (os.is_empty() || os.len() > 64)
    {
        return Err("operatingSystem must be 1 to 64 characters".into());
    }
    if raw.architecture.is_none() && raw.operating_system.is_none() {
        return Err("name architecture, operatingSystem or both".into());
    }
    Ok(NodeInfo {
        architecture: raw.architecture,
        operating_system: raw.operating_system,
    })
}

/// `[prefix/]name` as Kubernetes resource names are: `cpu`, `nvidia.com/gpu`.
fn valid_resource_name(name: &str) -> bool {
    let (prefix, local) = name.rsplit_once('/').unwrap_or(("", name));
    let part = |s: &str, max: usize| {
        !s.is_empty()
            && s.len() <= max
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
    };
    part(local, 63) && (prefix.is_empty() || part(prefix, 253))
}

/// The Kubernetes quantity syntax: a decimal number and a binary, decimal or exponent suffix.
fn valid_quantity(s: &str) -> bool {
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let number_end = unsigned
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(unsigned.len());
    let (number, suffix) = unsigned.split_at(number_end);
    let digits = number.replace('.', "");
    let number_ok = !digits.is_empty() && number.matches('.').count() <= 1;
    let suffix_ok = matches!(
        suffix,
        "" | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
            | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
    ) || suffix
        .strip_prefix(['e', 'E'])
        .map(|e| e.strip_prefix(['+', '-']).unwrap_or(e))
        .is_some_and(|e| !e.is_empty() && e.bytes().all(|b| b.is_ascii_digit()));
    number_ok && suffix_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use captf_api::Condition;
    use captf_api::templates::Architecture;

    const IMG: &str = "localhost:5000/modules/machine:v1";

    fn resources(pairs: &[(&str, &str)]) -> ResourceList {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect()
    }

    fn status(
        source: Option<CapacitySourceKind>,
        image: Option<&str>,
        reason: &str,
        capacity: Option<ResourceList>,
    ) -> TerraformMachineTemplateStatus {
        TerraformMachineTemplateStatus {
            conditions: Some(vec![Condition {
                type_: types::CAPACITY_RESOLVED.into(),
                reason: reason.into(),
                message: "earlier".into(),
                status: "True".into(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ),
                observed_generation: None,
            }]),
            capacity,
            node_info: None,
            capacity_source: Some(CapacitySource {
                source,
                image: image.map(Into::into),
            }),
        }
    }

    #[test]
    fn needs_read_table() {
        let spec = resources(&[("cpu", "2")]);
        let image = Some(CapacitySourceKind::Image);
        let from_spec = Some(CapacitySourceKind::Spec);
        let ok = reasons::CAPACITY_RESOLVED;
        let cases = [
            ("never read", None, None, true),
            (
                "same image, resolved",
                None,
                Some(status(image, Some(IMG), ok, None)),
                false,
            ),
            (
                "another image",
                None,
                Some(status(image, Some("other:v1"), ok, None)),
                true,
            ),
            (
                "the last read failed",
                None,
                Some(status(None, Some(IMG), reasons::IMAGE_INSPECT_FAILED, None)),
                true,
            ),
            (
                "an invalid label is not read again",
                None,
                Some(status(
                    None,
                    Some(IMG),
                    reasons::CAPACITY_LABEL_INVALID,
                    None,
                )),
                false,
            ),
            (
                "spec.capacity still set",
                Some(&spec),
                Some(status(from_spec, Some(IMG), ok, None)),
                false,
            ),
            (
                "spec.capacity removed: the image's is needed",
                None,
                Some(status(from_spec, Some(IMG), ok, None)),
                true,
            ),
            (
                "spec.capacity set, the image never read",
                Some(&spec),
                Some(status(from_spec, None, reasons::IMAGE_INSPECT_FAILED, None)),
                true,
            ),
        ];
        for (name, spec_capacity, previous, want) in cases {
            assert_eq!(
                needs_read(IMG, spec_capacity, previous.as_ref()),
                want,
                "{name}"
            );
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> Read {
        Read::Labels(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn resolve_table() {
        let cap = r#"{"cpu":"4","memory":"16Gi"}"#;
        let node = r#"{"architecture":"arm64","operatingSystem":"linux"}"#;
        let image_cap = resources(&[("cpu", "4"), ("memory", "16Gi")]);
        let spec_cap = resources(&[("cpu", "8")]);
        let arm = NodeInfo {
            architecture: Some(Architecture::Arm64),
            operating_system: Some("linux".into()),
        };
        type Want = (
            Option<ResourceList>,
            Option<NodeInfo>,
            Option<CapacitySourceKind>,
            Option<&'static str>,
            Status,
            &'static str,
            &'static str,
        );
        type Case = (
            &'static str,
            Option<ResourceList>,
            Option<TerraformMachineTemplateStatus>,
            Read,
            Want,
        );
        let cases: Vec<Case> = vec![
            (
                "both labels",
                None,
                None,
                labels(&[(CAPACITY_LABEL, cap), (NODE_INFO_LABEL, node)]),
                (
                    Some(image_cap.clone()),
                    Some(arm.clone()),
                    Some(CapacitySourceKind::Image),
                    Some(IMG),
                    Status::True,
                    reasons::CAPACITY_RESOLVED,
                    "capacity cpu=4,memory=16Gi from",
                ),
            ),
            (
                "spec.capacity replaces the label as a whole; node facts stay the image's",
                Some(spec_cap.clone()),
                None,
                labels(&[(CAPACITY_LABEL, cap), (NODE_INFO_LABEL, node)]),
                (
                    Some(spec_cap.clone()),
                    Some(arm.clone()),
                    Some(CapacitySourceKind::Spec),
                    Some(IMG),
                    Status::True,
                    reasons::CAPACITY_RESOLVED,
                    "capacity cpu=8 from spec.capacity; node arm64/linux",
                ),
            ),
            (
                "no labels",
                None,
                None,
                labels(&[("io.captf.role", "machine")]),
                (
                    None,
                    None,
                    None,
                    Some(IMG),
                    Status::True,
                    reasons::CAPACITY_NOT_DECLARED,
                    "set spec.capacity",
                ),
            ),
            (
                "an invalid capacity label",
                None,
                None,
                labels(&[(CAPACITY_LABEL, r#"{"cpu":4}"#), (NODE_INFO_LABEL, node)]),
                (
                    None,
                    Some(arm.clone()),
                    None,
                    Some(IMG),
                    Status::False,
                    reasons::CAPACITY_LABEL_INVALID,
                    "label io.captf.capacity: cpu: 4 is not a quantity string",
                ),
            ),
            (
                "a failed read keeps spec.capacity, with no image",
                Some(spec_cap.clone()),
                None,
                Read::Failed("HTTP 404".into()),
                (
                    Some(spec_cap.clone()),
                    None,
                    Some(CapacitySourceKind::Spec),
                    None,
                    Status::False,
                    reasons::IMAGE_INSPECT_FAILED,
                    "HTTP 404",
                ),
            ),
            (
                "a failed read without spec.capacity",
                None,
                Some(status(
                    Some(CapacitySourceKind::Image),
                    Some("old:v1"),
                    reasons::CAPACITY_RESOLVED,
                    Some(image_cap.clone()),
                )),
                Read::Failed("unreachable".into()),
                (
                    None,
                    None,
                    None,
                    None,
                    Status::False,
                    reasons::IMAGE_INSPECT_FAILED,
                    "unreachable",
                ),
            ),
            (
                "cached: spec.capacity set later",
                Some(spec_cap.clone()),
                Some(status(
                    Some(CapacitySourceKind::Image),
                    Some(IMG),
                    reasons::CAPACITY_RESOLVED,
                    Some(image_cap.clone()),
                )),
                Read::Cached,
                (
                    Some(spec_cap.clone()),
                    None,
                    Some(CapacitySourceKind::Spec),
                    Some(IMG),
                    Status::True,
                    reasons::CAPACITY_RESOLVED,
                    "from spec.capacity",
                ),
            ),
            (
                "cached: unchanged",
                None,
                Some(status(
                    Some(CapacitySourceKind::Image),
                    Some(IMG),
                    reasons::CAPACITY_RESOLVED,
                    Some(image_cap.clone()),
                )),
                Read::Cached,
                (
                    Some(image_cap.clone()),
                    None,
                    Some(CapacitySourceKind::Image),
                    Some(IMG),
                    Status::True,
                    reasons::CAPACITY_RESOLVED,
                    "from localhost:5000",
                ),
            ),
            (
                "cached: an invalid label stays reported",
                None,
                Some(status(
                    None,
                    Some(IMG),
                    reasons::CAPACITY_LABEL_INVALID,
                    None,
                )),
                Read::Cached,
                (
                    None,
                    None,
                    None,
                    Some(IMG),
                    Status::False,
                    reasons::CAPACITY_LABEL_INVALID,
                    "earlier",
                ),
            ),
        ];
        for (name, spec, previous, read, want) in cases {
            let got = resolve(IMG, spec.as_ref(), previous.as_ref(), &read);
            let (capacity, node_info, kind, image, status, reason, message) = want;
            assert_eq!(got.capacity, capacity, "{name}");
            assert_eq!(got.node_info, node_info, "{name}");
            assert_eq!(got.source.as_ref().and_then(|s| s.source), kind, "{name}");
            assert_eq!(
                got.source.as_ref().and_then(|s| s.image.as_deref()),
                image,
                "{name}"
            );
            assert_eq!((got.status, got.reason), (status, reason), "{name}");
            assert!(got.message.contains(message), "{name}: {}", got.message);
        }
    }

    #[test]
    fn parse_capacity_table() {
        let cases = [
            (
                r#"{"cpu":"500m","memory":"1.5Gi","nvidia.com/gpu":"1"}"#,
                Ok(3),
            ),
            (r#"{"ephemeral-storage":"1e3"}"#, Ok(1)),
            (r#"{"cpu":"four"}"#, Err("not a quantity string")),
            (r#"{"cpu":"1.2.3"}"#, Err("not a quantity string")),
            (r#"{"bad name!":"1"}"#, Err("not a resource name")),
            ("{}", Err("empty")),
            ("cpu=4", Err("not a JSON object")),
        ];
        for (value, want) in cases {
            match (parse_capacity(value), want) {
                (Ok(got), Ok(n)) => assert_eq!(got.len(), n, "{value}"),
                (Err(e), Err(w)) => assert!(e.contains(w), "{value}: {e}"),
                (got, want) => panic!("{value}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn parse_node_info_table() {
        let cases = [
            (
                r#"{"architecture":"amd64"}"#,
                Ok((Some(Architecture::Amd64), None)),
            ),
            (r#"{"operatingSystem":"linux"}"#, Ok((None, Some("linux")))),
            (r#"{"architecture":"x86"}"#, Err("not {")),
            (r#"{"arch":"amd64"}"#, Err("unknown field")),
            ("{}", Err("name architecture")),
            (r#"{"operatingSystem":""}"#, Err("1 to 64")),
        ];
        for (value, want) in cases {
            match (parse_node_info(value), want) {
                (Ok(got), Ok((arch, os))) => {
                    assert_eq!(got.architecture, arch, "{value}");
                    assert_eq!(got.operating_system.as_deref(), os, "{value}");
                }
                (Err(e), Err(w)) => assert!(e.contains(w), "{value}: {e}"),
                (got, want) => panic!("{value}: got {got:?}, want {want:?}"),
            }
        }
    }
}
