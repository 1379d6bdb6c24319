//! The variables schema an image publishes (`captf_contract::varschema`: `parse`, `to_label`,
//! `Schema::check`) and user variables (`captf_contract::variables`: `parse_variables`,
//! `validate_variable_name`).
//!
//! The input's first line is the label's value; the rest is a variables object, checked
//! against it as the webhook (some variables seen) and the pass (all seen) check them, from an
//! inline value and from a string-format source.

#![no_main]

use captf_contract::varschema::{self, Given, Seen};
use captf_contract::{Role, parse_variables, validate_variable_name};
use captf_fuzz::{assert_no_marker, first_line, marker_only_in_secret, object_keys, string_leaves};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (label, variables) = first_line(data);
    let vars = parse_variables(variables).ok();
    for name in vars.iter().flat_map(|v| v.keys()) {
        for role in [Role::Cluster, Role::Machine, Role::MachinePool] {
            let _ = validate_variable_name(role, name);
        }
    }
    let Ok(label) = std::str::from_utf8(label) else {
        return;
    };
    let Ok(schema) = varschema::parse(label) else {
        return;
    };
    assert_eq!(schema.kind, Some(varschema::Type::Object));
    // A schema survives its label (`captf lint schema` writes it, the webhooks read it).
    if let Ok(written) = varschema::to_label(&schema) {
        assert_eq!(
            varschema::parse(&written).as_ref(),
            Ok(&schema),
            "{written}"
        );
    }
    let Some(vars) = vars else {
        return;
    };
    // Values are secret places; the label and every key (paths name them) are public.
    let mut secret = Vec::new();
    let mut public = vec![label.to_owned()];
    for (name, variable) in &vars {
        public.push(name.clone());
        string_leaves(&variable.value, &mut secret);
        object_keys(&variable.value, &mut public);
    }
    let marker = marker_only_in_secret(&secret, &public);
    for from_string_source in [false, true] {
        for seen in [Seen::All, Seen::Some] {
            let given = vars.iter().map(|(name, v)| {
                (
                    name.as_str(),
                    Given {
                        value: &v.value,
                        from_string_source,
                    },
                )
            });
            let problems = schema.check(given, seen);
            if marker {
                for problem in &problems {
                    assert_no_marker("a variables schema problem", problem);
                }
            }
            // Nothing given and no required variable asked for: nothing is wrong.
            if vars.is_empty() && seen == Seen::Some {
                assert!(problems.is_empty());
            }
        }
    }
});
