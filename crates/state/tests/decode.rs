//! `decode`: ordering, every Inconsistent case, caps, gzip edge cases, the document checks and
//! what is extracted.

mod common;

use captf_api::annotations;
use captf_state::{Chunk, DecodedState, Limits, StateError, decode};
use common::{BASE, gz_json, gzip, sample_state, split_into};
use serde_json::{Value, json};

fn read(chunks: &[Chunk]) -> Result<DecodedState, StateError> {
    decode(BASE, chunks, Limits::default())
}

fn part(i: usize) -> String {
    format!("{BASE}-part-{i}")
}

/// A state JSON padded so it compresses to more than 12 pieces of `piece` bytes.
fn padded_payload() -> Vec<u8> {
    let mut v = sample_state();
    // Incompressible-ish padding inside an ignored field, so the state needs many pieces.
    let noise: String = (0..4000u32)
        .map(|i| char::from(b'a' + (i.wrapping_mul(2_654_435_761) >> 27) as u8 % 26))
        .collect();
    v["check_results"] = json!(noise);
    gz_json(&v)
}

fn inconsistent(err: StateError) -> (String, String) {
    match err {
        StateError::Inconsistent { secret, problem } => (secret, problem),
        other => panic!("expected Inconsistent, got {other:?}"),
    }
}

// ---- ordering --------------------------------------------------------------------------------

#[test]
fn orders_part_10_after_part_2() {
    let payload = padded_payload();
    let mut chunks = split_into(BASE, &payload, 12);
    assert_eq!(chunks.len(), 12, "test needs -part-10 and -part-11");
    // Lexicographic order would put -part-10 and -part-11 before -part-2.
    chunks.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(chunks[2].name, part(10));
    let state = read(&chunks).expect("decodes");
    assert_eq!(state.serial, 42);
    assert_eq!(state.chunks, 12);
    assert_eq!(state.compressed_bytes, payload.len() as u64);
}

#[test]
fn any_input_order_decodes() {
    let payload = padded_payload();
    let mut chunks = split_into(BASE, &payload, 5);
    chunks.reverse();
    assert_eq!(read(&chunks).expect("decodes").serial, 42);
}

// ---- Inconsistent ----------------------------------------------------------------------------

#[test]
fn a_gap_names_the_missing_secret() {
    let payload = padded_payload();
    let mut chunks = split_into(BASE, &payload, 4);
    chunks.remove(2);
    let (secret, problem) = inconsistent(read(&chunks).expect_err("gap"));
    assert_eq!(secret, part(2));
    assert!(problem.contains("gap"), "{problem}");
}

#[test]
fn a_duplicate_index_is_inconsistent() {
    let payload = padded_payload();
    let mut chunks = split_into(BASE, &payload, 3);
    chunks.push(chunks[1].clone());
    let (secret, problem) = inconsistent(read(&chunks).expect_err("duplicate"));
    assert_eq!(secret, part(1));
    assert!(problem.contains("twice"), "{problem}");
}

#[test]
fn unexpected_names_are_inconsistent() {
    let payload = gz_json(&sample_state());
    for bad in [
        format!("{BASE}-part-0"),
        format!("{BASE}-part-01"),
        format!("{BASE}-part-"),
        format!("{BASE}-part-one"),
        format!("{BASE}-copy"),
        "tfstate-default-fedcba9876543210-c".to_owned(),
    ] {
        let chunks = vec![
            Chunk::new(BASE, payload.clone()),
            Chunk::new(&bad, b"x".to_vec()),
        ];
        let (secret, problem) = inconsistent(read(&chunks).expect_err(&bad));
        assert_eq!(secret, bad);
        assert!(problem.contains("neither"), "{problem}");
    }
}

#[test]
fn a_missing_base_is_inconsistent() {
    let payload = padded_payload();
    let mut chunks = split_into(BASE, &payload, 3);
    chunks.remove(0);
    let (secret, problem) = inconsistent(read(&chunks).expect_err("no base"));
    assert_eq!(secret, BASE);
    assert!(problem.contains("missing"), "{problem}");
    // No Secret at all is the caller's StateNotFound/StateLost; decode itself says Inconsistent.
    let (secret, _) = inconsistent(read(&[]).expect_err("nothing"));
    assert_eq!(secret, BASE);
}

#[test]
fn a_chunk_without_tfstate_is_inconsistent() {
    let payload = padded_payload();
    for i in [0, 1] {
        let mut chunks = split_into(BASE, &payload, 2);
        chunks[i].data = None;
        let (secret, problem) = inconsistent(read(&chunks).expect_err("no tfstate"));
        assert_eq!(secret, chunks[i].name);
        assert!(problem.contains("`tfstate`"), "{problem}");
    }
}

#[test]
fn inconsistent_messages_point_at_the_runbook() {
    let err = read(&[]).expect_err("nothing");
    assert_eq!(err.reason(), "StateInconsistent");
    assert!(err.to_string().contains("docs/runbooks/"), "{err}");
}

// ---- caps ------------------------------------------------------------------------------------

#[test]
fn more_chunks_than_the_cap_is_corrupt() {
    let payload = padded_payload();
    let chunks = split_into(BASE, &payload, 33);
    assert_eq!(chunks.len(), 33);
    let err = read(&chunks).expect_err("33 chunks");
    assert!(matches!(err, StateError::Corrupt { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("33 chunk Secrets exceed the cap of 32"),
        "{err}"
    );
    // Exactly at the cap is fine.
    let chunks = split_into(BASE, &payload, 32);
    assert_eq!(chunks.len(), 32);
    assert_eq!(read(&chunks).expect("32 chunks").chunks, 32);
}

#[test]
fn a_state_over_the_decompressed_cap_is_corrupt() {
    let json = serde_json::to_vec(&sample_state()).expect("json");
    let chunks = vec![Chunk::new(BASE, gzip(&json))];
    let limits = |max| Limits {
        max_chunks: 32,
        max_decompressed_bytes: max,
        ..Limits::DEFAULT
    };
    let err = decode(BASE, &chunks, limits(json.len() - 1)).expect_err("over");
    assert_eq!(err.reason(), "StateCorrupt");
    assert!(err.to_string().contains("byte cap"), "{err}");
    let ok = decode(BASE, &chunks, limits(json.len())).expect("exactly at the cap");
    assert_eq!(ok.decompressed_bytes, json.len() as u64);
}

// ---- gzip ------------------------------------------------------------------------------------

#[test]
fn truncated_gzip_is_corrupt() {
    let payload = padded_payload();
    for cut in [payload.len() - 1, payload.len() - 8, payload.len() / 2, 5] {
        let chunks = vec![Chunk::new(BASE, payload[..cut].to_vec())];
        let err = read(&chunks).expect_err("truncated");
        assert!(err.to_string().contains("truncated"), "cut {cut}: {err}");
        assert_eq!(err.reason(), "StateCorrupt");
    }
}

#[test]
fn a_chunked_state_read_from_its_base_alone_is_truncated() {
    // What OpenTofu sees after Terraform chunked the state (concepts §16.2).
    let payload = padded_payload();
    let chunks = split_into(BASE, &payload, 3);
    let err = read(&chunks[..1]).expect_err("base only");
    assert!(err.to_string().contains("truncated"), "{err}");
}

#[test]
fn data_that_is_not_gzip_is_corrupt() {
    let plain = serde_json::to_vec(&sample_state()).expect("json");
    for data in [plain, b"".to_vec(), vec![0x1f, 0x8b, 0xff, 0xff, 0xff]] {
        let err = read(&[Chunk::new(BASE, data.clone())]).expect_err("not gzip");
        assert!(
            matches!(err, StateError::Corrupt { .. }),
            "{data:?}: {err:?}"
        );
    }
}

#[test]
fn an_encoding_other_than_gzip_is_corrupt() {
    let chunk =
        Chunk::new(BASE, gz_json(&sample_state())).with_annotation(annotations::ENCODING, "zstd");
    let err = read(&[chunk]).expect_err("zstd");
    assert!(err.to_string().contains("\"zstd\""), "{err}");
    let chunk =
        Chunk::new(BASE, gz_json(&sample_state())).with_annotation(annotations::ENCODING, "gzip");
    assert!(read(&[chunk]).is_ok());
}

#[test]
fn a_surplus_trailing_chunk_after_a_shrink_is_ignored() {
    // Before: a bigger state in 3 pieces. After: a smaller one in 2 pieces; deleting the old
    // -part-2 failed, so it still holds the tail of the old stream.
    let old = padded_payload();
    let mut small = sample_state();
    small["serial"] = json!(43);
    small["check_results"] = json!("x".repeat(200));
    let new = gz_json(&small);
    let mut chunks = split_into(BASE, &new, 2);
    assert_eq!(chunks.len(), 2);
    let stale_tail = old[old.len() / 2..].to_vec();
    chunks.push(Chunk::new(part(2), stale_tail));
    let state = read(&chunks).expect("surplus tolerated");
    assert_eq!(state.serial, 43);
    assert_eq!(state.chunks, 3);

    // A surplus piece that is itself a whole gzip member (e.g. an old single-piece state) is not
    // read either: only the first member counts.
    let mut chunks = split_into(BASE, &new, 2);
    let mut other = sample_state();
    other["serial"] = json!(1);
    chunks.push(Chunk::new(part(2), gz_json(&other)));
    assert_eq!(read(&chunks).expect("second member ignored").serial, 43);
}

// ---- document --------------------------------------------------------------------------------

#[test]
fn encryption_is_checked_before_the_version() {
    // OpenTofu's envelope (internal/encryption: statedata + basedata): no `version` field.
    let envelope = json!({
        "serial": 3,
        "lineage": "6f1c1d2e-1111-2222-3333-444455556666",
        "meta": {"key_provider.pbkdf2.main": "eyJzYWx0IjoiQUFBQSJ9"},
        "encrypted_data": "c2VjcmV0IHN0YXRl",
        "encryption_version": "v0"
    });
    let err = read(&[Chunk::new(BASE, gz_json(&envelope))]).expect_err("encrypted");
    assert!(matches!(err, StateError::Encrypted { .. }), "{err:?}");
    assert_eq!(err.reason(), "StateEncrypted");
    assert!(err.to_string().contains("state push"), "{err}");

    // Even with a version present, the envelope wins.
    let mut with_version = envelope.clone();
    with_version["version"] = json!(3);
    let err = read(&[Chunk::new(BASE, gz_json(&with_version))]).expect_err("encrypted");
    assert!(matches!(err, StateError::Encrypted { .. }), "{err:?}");
}

#[test]
fn version_3_and_missing_versions_are_rejected() {
    let mut v3 = sample_state();
    v3["version"] = json!(3);
    let err = read(&[Chunk::new(BASE, gz_json(&v3))]).expect_err("v3");
    assert_eq!(
        err,
        StateError::UnsupportedVersion {
            version: Some("3".into()),
            base: BASE.into()
        }
    );
    assert_eq!(err.reason(), "StateCorrupt");
    assert!(
        err.to_string().contains("state version 3 is not supported"),
        "{err}"
    );

    let mut none = sample_state();
    none.as_object_mut().expect("object").remove("version");
    let err = read(&[Chunk::new(BASE, gz_json(&none))]).expect_err("no version");
    assert!(
        matches!(err, StateError::UnsupportedVersion { version: None, .. }),
        "{err:?}"
    );
}

#[test]
fn invalid_json_is_corrupt() {
    for bad in [
        &b"{\"version\":4,"[..],
        b"[1,2]",
        b"null",
        b"{\"version\":4} trailing",
    ] {
        let err = read(&[Chunk::new(BASE, gzip(bad))]).expect_err("bad json");
        assert_eq!(err.reason(), "StateCorrupt", "{err}");
    }
}

#[test]
fn missing_serial_is_corrupt() {
    let mut v = sample_state();
    v.as_object_mut().expect("object").remove("serial");
    let err = read(&[Chunk::new(BASE, gz_json(&v))]).expect_err("no serial");
    assert!(
        err.to_string().contains("`serial` field is missing"),
        "{err}"
    );
}

// ---- extraction ------------------------------------------------------------------------------

#[test]
fn extracts_what_captf_needs() {
    let payload = gz_json(&sample_state());
    let chunk = Chunk::new(BASE, payload.clone())
        .with_annotation(annotations::INPUTS_HASH, "h2:abc")
        .with_annotation(annotations::ENCODING, "gzip");
    let s = read(&[chunk]).expect("decodes");
    assert_eq!(s.serial, 42);
    assert_eq!(s.lineage, "6f1c1d2e-1111-2222-3333-444455556666");
    assert_eq!(s.terraform_version, "1.9.8");
    // null_resource with count (3 instances) once, module random_id with for_each once; the data
    // source not at all (nor the nested "mode" keys inside attributes).
    assert_eq!(s.managed_resources, 2);
    assert_eq!(
        s.outputs.keys().collect::<Vec<_>>(),
        ["endpoint", "kubeconfig"]
    );
    assert_eq!(
        s.outputs["endpoint"],
        json!({"host": "10.0.0.1", "port": 6443})
    );
    assert_eq!(s.outputs["kubeconfig"], json!("apiVersion: v1"));
    assert_eq!(
        s.sensitive_outputs.iter().collect::<Vec<_>>(),
        ["kubeconfig"]
    );
    assert_eq!(s.compressed_bytes, payload.len() as u64);
    assert_eq!(s.chunks, 1);
    assert_eq!(s.inputs_hash.as_deref(), Some("h2:abc"));
}

#[test]
fn the_inputs_hash_comes_from_the_base_only() {
    let payload = padded_payload();
    let mut chunks = split_into(BASE, &payload, 2);
    chunks[1]
        .annotations
        .insert(annotations::INPUTS_HASH.into(), "h2:part".into());
    assert_eq!(read(&chunks).expect("decodes").inputs_hash, None);
    chunks[0]
        .annotations
        .insert(annotations::INPUTS_HASH.into(), String::new());
    assert_eq!(
        read(&chunks).expect("decodes").inputs_hash,
        None,
        "empty is none"
    );
    chunks[0]
        .annotations
        .insert(annotations::INPUTS_HASH.into(), "h2:base".into());
    assert_eq!(
        read(&chunks).expect("decodes").inputs_hash.as_deref(),
        Some("h2:base")
    );
}

#[test]
fn a_state_without_outputs_or_resources_is_empty_not_corrupt() {
    let v = json!({"version": 4, "terraform_version": "1.10.0", "serial": 1, "lineage": "l", "outputs": {}, "resources": []});
    let s = read(&[Chunk::new(BASE, gz_json(&v))]).expect("decodes");
    assert_eq!((s.managed_resources, s.outputs.len()), (0, 0));
}

#[test]
fn debug_never_prints_output_values() {
    let s = read(&[Chunk::new(BASE, gz_json(&sample_state()))]).expect("decodes");
    let dbg = format!("{s:?}");
    assert!(dbg.contains("kubeconfig"), "{dbg}");
    assert!(!dbg.contains("apiVersion"), "{dbg}");
    assert!(!dbg.contains("10.0.0.1"), "{dbg}");
}

/// A sample state whose outputs are `outputs`.
fn with_outputs(outputs: Value) -> Vec<Chunk> {
    let mut state = sample_state();
    state["outputs"] = outputs;
    vec![Chunk::new(BASE, gz_json(&state))]
}

#[test]
fn outputs_past_a_limit_are_corrupt_and_the_message_names_the_limit() {
    let many: serde_json::Map<String, Value> = (0..300)
        .map(|i| (format!("o{i}"), json!({"value": i, "type": "number"})))
        .collect();
    let nested = (0..40).fold(json!(1), |v, _| json!([v]));
    let big = "x".repeat(1024 * 1024);
    let quarter = "x".repeat(900 * 1024);
    let rows = [
        (
            "too many",
            json!(many),
            "300 root outputs; the limit is 256",
        ),
        (
            "one too large",
            json!({"blob": {"value": big, "type": "string"}}),
            "output \"blob\" is 1048578 bytes of JSON; the limit is 1048576 bytes per output",
        ),
        (
            "too large together",
            json!({
                "a": {"value": quarter, "type": "string"},
                "b": {"value": quarter, "type": "string"},
                "c": {"value": quarter, "type": "string"},
                "d": {"value": quarter, "type": "string"},
                "e": {"value": quarter, "type": "string"},
            }),
            "more than 4194304 bytes of JSON together",
        ),
        (
            "too deep",
            json!({"deep": {"value": nested, "type": "dynamic"}}),
            "output \"deep\" nests arrays and objects more than 32 deep",
        ),
    ];
    for (what, outputs, want) in rows {
        let err = decode(BASE, &with_outputs(outputs), Limits::DEFAULT).expect_err(what);
        assert_eq!(err.reason(), "StateCorrupt", "{what}");
        assert!(err.to_string().contains(want), "{what}: {err}");
    }
}

#[test]
fn outputs_within_the_limits_read_whole() {
    let nested = (0..31).fold(json!("leaf [{\"\\"), |v, _| json!([v]));
    let outputs = json!({
        "deep": {"value": nested.clone(), "type": "dynamic"},
        "ids": {"value": vec!["aws:///us-east-1a/i-0123456789abcdef0"; 5000], "type": "list"},
    });
    let state = decode(BASE, &with_outputs(outputs), Limits::DEFAULT).expect("within");
    assert_eq!(
        state.outputs["deep"], nested,
        "a string's brackets are no nesting"
    );
    assert_eq!(state.outputs["ids"].as_array().map(Vec::len), Some(5000));
}

#[test]
fn millions_of_resources_are_counted_not_kept() {
    let mut state = sample_state();
    let resources: Vec<Value> = (0..200_000)
        .map(|i| json!({"mode": if i % 2 == 0 { "managed" } else { "data" }}))
        .collect();
    state["resources"] = json!(resources);
    let chunks = vec![Chunk::new(BASE, gz_json(&state))];
    let decoded = decode(BASE, &chunks, Limits::DEFAULT).expect("counted");
    assert_eq!(decoded.managed_resources, 100_000);
}
