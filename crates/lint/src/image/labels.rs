//! The image config labels: role, contract, capacity and node info, and the
//! variables schema the image publishes.

use captf_contract::Role;
use captf_contract::varschema::{self, Schema};

use crate::report::{Finding, Severity};
use crate::rules::{
    IMAGE_LABEL_CAPACITY, IMAGE_LABEL_CONTRACT, IMAGE_LABEL_ROLE, IMAGE_LABEL_VARIABLES_SCHEMA,
};
use crate::{Options, schema};

use super::{ImageConfig, image_finding};

/// Labels: the findings of each label; returns the variables schema label,
/// parsed.
pub(super) fn check_labels(
    config: &ImageConfig,
    role: Role,
    mopts: &Options,
    out: &mut Vec<Finding>,
) -> Option<Schema> {
    let label = |k: &str| config.labels.get(k).map(String::as_str);
    match label("io.captf.role") {
        None => out.push(image_finding(
            IMAGE_LABEL_ROLE,
            Severity::Info,
            "",
            format!("label io.captf.role is not set; add io.captf.role={role}"),
        )),
        Some(r) if r != role.as_str() => out.push(image_finding(
            IMAGE_LABEL_ROLE,
            Severity::Error,
            "",
            format!("label io.captf.role is {r:?} but the image is linted as {role}; use the image for its role or fix the label"),
        )),
        Some(_) => {}
    }
    match label("io.captf.contract") {
        None => out.push(image_finding(
            IMAGE_LABEL_CONTRACT,
            Severity::Info,
            "",
            format!(
                "label io.captf.contract is not set; add io.captf.contract={}",
                mopts.contract
            ),
        )),
        Some(c) if c != mopts.contract => out.push(image_finding(
            IMAGE_LABEL_CONTRACT,
            Severity::Warning,
            "",
            format!(
                "label io.captf.contract is {c:?} but linting against {}",
                mopts.contract
            ),
        )),
        Some(_) => {}
    }
    for (key, check) in [
        (
            "io.captf.capacity",
            check_capacity as fn(&str) -> Result<(), String>,
        ),
        ("io.captf.node-info", check_node_info),
    ] {
        match (role, label(key)) {
            (Role::Machine, None) => out.push(image_finding(
                IMAGE_LABEL_CAPACITY,
                Severity::Info,
                "",
                format!("label {key} is not set; machine templates get no status for it"),
            )),
            (Role::Machine, Some(v)) => {
                if let Err(e) = check(v) {
                    out.push(image_finding(
                        IMAGE_LABEL_CAPACITY,
                        Severity::Error,
                        "",
                        format!("label {key} does not parse ({e}); see the image contract for its format"),
                    ));
                }
            }
            (_, Some(_)) => out.push(image_finding(
                IMAGE_LABEL_CAPACITY,
                Severity::Info,
                "",
                format!("label {key} is only read for the machine role"),
            )),
            (_, None) => {}
        }
    }

    // Parsed now, compared once the module is loaded.
    match label(varschema::LABEL).map(varschema::parse) {
        Some(Ok(schema)) => Some(schema),
        Some(Err(e)) => {
            out.push(image_finding(
                IMAGE_LABEL_VARIABLES_SCHEMA,
                Severity::Error,
                "",
                // The parse error names the label.
                format!("{e}; regenerate it with `captf lint schema`"),
            ));
            None
        }
        None => None,
    }
}

/// The warning for a variables schema label that no longer describes the module.
pub(super) fn stale_schema(published: &Schema, derived: &Schema) -> Finding {
    let names = schema::differing_variables(published, derived);
    let which = match names.as_slice() {
        [] => String::new(),
        names => format!(
            " (variables {}{})",
            names.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
            if names.len() > 5 { ", ..." } else { "" }
        ),
    };
    image_finding(
        IMAGE_LABEL_VARIABLES_SCHEMA,
        Severity::Warning,
        "",
        format!(
            "label {} does not match the variables of /captf/module{which}; regenerate it with `captf lint schema`",
            varschema::LABEL
        ),
    )
}

fn valid_quantity(s: &str) -> bool {
    let num_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, suffix) = s.split_at(num_end);
    !num.is_empty()
        && num.parse::<f64>().is_ok()
        && [
            "", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
        ]
        .contains(&suffix)
}

fn check_capacity(value: &str) -> Result<(), String> {
    let v: serde_json::Value = serde_json::from_str(value).map_err(|e| format!("not JSON: {e}"))?;
    let obj = v.as_object().ok_or("not a JSON object")?;
    for (k, q) in obj {
        let q = q
            .as_str()
            .ok_or_else(|| format!("{k}: quantity must be a string"))?;
        if k.is_empty() || !valid_quantity(q) {
            return Err(format!("{k}: {q:?} is not a resource quantity"));
        }
    }
    Ok(())
}

fn check_node_info(value: &str) -> Result<(), String> {
    let v: serde_json::Value = serde_json::from_str(value).map_err(|e| format!("not JSON: {e}"))?;
    let obj = v.as_object().ok_or("not a JSON object")?;
    if obj.is_empty() {
        return Err("needs at least one of architecture, operatingSystem".to_owned());
    }
    for (k, v) in obj {
        let s = v.as_str().ok_or_else(|| format!("{k} must be a string"))?;
        match k.as_str() {
            "architecture" if ["amd64", "arm64", "s390x", "ppc64le"].contains(&s) => {}
            "operatingSystem" if s == "linux" => {}
            "architecture" | "operatingSystem" => return Err(format!("{k}: {s:?} not allowed")),
            other => return Err(format!("unknown key {other}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_and_node_info() {
        assert!(check_capacity(r#"{"cpu":"4","memory":"16Gi","x":"500m"}"#).is_ok());
        assert!(check_capacity(r#"{"cpu":4}"#).is_err());
        assert!(check_capacity(r#"{"cpu":"four"}"#).is_err());
        assert!(check_node_info(r#"{"architecture":"arm64","operatingSystem":"linux"}"#).is_ok());
        assert!(check_node_info(r#"{}"#).is_err());
        assert!(check_node_info(r#"{"architecture":"x86"}"#).is_err());
    }
}
