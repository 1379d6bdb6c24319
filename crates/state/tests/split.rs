//! Property: however a state's compressed bytes are cut into chunks, and in whatever order the
//! chunks are listed, the decoded state is the same.

mod common;

use captf_state::{Chunk, Limits, decode};
use common::{BASE, gz_json};
use proptest::prelude::*;
use serde_json::{Value, json};

fn arb_state() -> impl Strategy<Value = Value> {
    (
        1u64..1_000_000,
        "[a-f0-9]{8}",
        prop::collection::btree_map("[a-z_]{1,12}", (any::<bool>(), "[ -~]{0,40}"), 0..6),
        prop::collection::vec((prop_oneof!["managed", "data"], 1usize..4, "[ -~]{0,200}"), 0..40),
    )
        .prop_map(|(serial, lineage, outputs, resources)| {
            let outputs: serde_json::Map<String, Value> = outputs
                .into_iter()
                .map(|(k, (sensitive, v))| (k, json!({"value": v, "type": "string", "sensitive": sensitive})))
                .collect();
            let resources: Vec<Value> = resources
                .into_iter()
                .enumerate()
                .map(|(i, (mode, n, attr))| {
                    let instances: Vec<Value> = (0..n)
                        .map(|k| json!({"index_key": k, "attributes": {"blob": attr}}))
                        .collect();
                    json!({"mode": mode, "type": "t", "name": format!("r{i}"), "instances": instances})
                })
                .collect();
            json!({
                "version": 4, "terraform_version": "1.9.8", "serial": serial, "lineage": lineage,
                "outputs": outputs, "resources": resources
            })
        })
}

/// A state, its gzip, cut points (piece count within the chunk cap) and an order.
fn arb_case() -> impl Strategy<Value = (Value, Vec<u8>, Vec<usize>)> {
    arb_state().prop_flat_map(|state| {
        let gz = gz_json(&state);
        let len = gz.len();
        let max_pieces = len.min(32);
        (1..=max_pieces)
            .prop_flat_map(move |pieces| {
                // `pieces - 1` distinct cut points strictly inside the payload.
                prop::sample::subsequence((1..len).collect::<Vec<_>>(), pieces - 1)
            })
            .prop_map(move |cuts| (state.clone(), gz.clone(), cuts))
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn any_split_in_any_order_decodes_identically(
        (state, gz, cuts) in arb_case(),
        seed in any::<u64>(),
    ) {
        let whole = decode(BASE, &[Chunk::new(BASE, gz.clone())], Limits::default())
            .expect("the unsplit state decodes");
        let mut bounds = vec![0];
        bounds.extend(&cuts);
        bounds.push(gz.len());
        let mut chunks: Vec<Chunk> = bounds
            .windows(2)
            .enumerate()
            .map(|(i, w)| Chunk::new(captf_api::names::chunk_name(BASE, i), &gz[w[0]..w[1]]))
            .collect();
        let n = chunks.len();
        // Deterministic shuffle from the seed (Fisher-Yates with an LCG).
        let mut x = seed;
        for i in (1..n).rev() {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            chunks.swap(i, (x >> 33) as usize % (i + 1));
        }
        let mut split = decode(BASE, &chunks, Limits::default()).expect("the split state decodes");
        prop_assert_eq!(split.chunks, n);
        split.chunks = whole.chunks;
        prop_assert_eq!(&split, &whole);
        prop_assert_eq!(whole.serial, state["serial"].as_u64().expect("serial"));
        let managed = state["resources"].as_array().expect("array").iter()
            .filter(|r| r["mode"] == "managed").count() as u64;
        prop_assert_eq!(whole.managed_resources, managed);
    }
}
