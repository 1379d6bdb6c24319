//! Output decoding with its limits: a state's root outputs, read by `captf_state::decode` under
//! the shipped and tight [`OutputLimits`], then decoded for each role by the manager
//! (`reconcile::observe::outputs::decode`, which sets `OutputsValid`, over
//! `captf_contract::decode_outputs`) and turned into `InfrastructureHealthy`.
//!
//! The input is the `outputs` object of a state (`{"name": {"value": ..., "sensitive": ...}}`);
//! the target wraps it in a version 4 document and gzips it.

#![no_main]

use captf_api::conditions::types;
use captf_contract::{Decoded, Role, RoleOutputs, canonicalize_exports, decode_outputs};
use captf_controller::conditions::Conditions;
use captf_controller::reconcile::observe::outputs;
use captf_fuzz::{assert_no_marker, gzip, marker_only_in_secret, object_keys, string_leaves};
use captf_state::{Chunk, Limits, OutputLimits, decode};
use k8s_openapi::jiff::Timestamp;
use libfuzzer_sys::fuzz_target;

const BASE: &str = "tfstate-default-0123456789abcdef-c";

const SMALL: OutputLimits = OutputLimits {
    max_outputs: 6,
    max_value_bytes: 512,
    max_total_bytes: 1024,
    max_depth: 4,
};

fuzz_target!(|data: &[u8]| {
    let mut doc =
        br#"{"version":4,"serial":1,"lineage":"l","terraform_version":"1.9.8","outputs":"#.to_vec();
    doc.extend_from_slice(data);
    doc.push(b'}');
    let chunks = [Chunk::new(BASE, gzip(&doc))];
    for outputs in [OutputLimits::DEFAULT, SMALL] {
        let limits = Limits {
            outputs,
            ..Limits::DEFAULT
        };
        if let Ok(state) = decode(BASE, &chunks, limits) {
            roles(&state);
        }
    }
});

fn roles(state: &captf_state::DecodedState) {
    // Values are secret places; names and keys inside values are public (violations name
    // the path to what is wrong).
    let mut secret = Vec::new();
    let mut public: Vec<String> = state.outputs.keys().cloned().collect();
    for value in state.outputs.values() {
        string_leaves(value, &mut secret);
        object_keys(value, &mut public);
    }
    let marker = marker_only_in_secret(&secret, &public);
    for role in [Role::Cluster, Role::Machine, Role::MachinePool] {
        let mut conds = Conditions::default();
        let decoded = outputs::decode(role, state, &mut conds, Some(1), Timestamp::UNIX_EPOCH);
        let message = conds
            .get(types::OUTPUTS_VALID)
            .map(|c| c.message.clone())
            .expect("OutputsValid is always set");
        if marker {
            assert_no_marker("OutputsValid", &message);
        }
        if let Some(valid) = &decoded {
            valid_shapes(valid);
            outputs::health(
                &Some(valid.health().clone()),
                &mut conds,
                Some(1),
                Timestamp::UNIX_EPOCH,
            );
        }
        // The contract's own answer, on the outputs exactly as the state has them.
        if let Decoded::Invalid(violations) = decode_outputs(role, &state.outputs) {
            assert!(!violations.is_empty());
            for v in &violations {
                if marker {
                    assert_no_marker("a violation", &v.to_string());
                }
            }
        }
    }
}

/// What valid outputs promise, as status is written from them.
fn valid_shapes(outputs: &RoleOutputs) {
    match outputs {
        RoleOutputs::Cluster(c) => {
            assert!(canonicalize_exports(&c.exports).is_ok());
            assert!(!c.exports.is_null(), "null exports read as {{}}");
            let mut names: Vec<&str> = c.failure_domains.iter().map(|f| f.name.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(
                names.len(),
                c.failure_domains.len(),
                "failure domains unique"
            );
            if let Some(e) = &c.control_plane_endpoint {
                assert!((1..=65535).contains(&e.port) && !e.host.is_empty());
            }
        }
        RoleOutputs::Machine(m) => {
            assert!(!m.provider_id.is_empty());
            assert!(m.addresses.is_sorted(), "addresses in canonical order");
        }
        RoleOutputs::MachinePool(p) => {
            assert!(
                p.provider_id_list.windows(2).all(|w| w[0] < w[1]),
                "provider IDs sorted and distinct"
            );
            assert!(p.instances.len() <= captf_contract::outputs::MAX_POOL_INSTANCES);
            assert!(p.replicas.is_none_or(|r| r >= 0));
            assert!(p.instances.iter().all(|i| i.addresses.is_sorted()));
        }
    }
    serde_json::to_value(outputs).expect("status serializes");
}
