//! The state codec of `captf-state`: chunk ordering, bounded gzip, the document reader, and
//! state backup sets (`decode`, `verify_backup_set`, `backup_annotations`).
//!
//! The first byte says what the rest is:
//! - `J<n>`: a state document; the target gzips it and cuts it into `<n>` chunk Secrets;
//! - `G<n>`: the gzip stream itself, cut into `<n>` chunk Secrets;
//! - `S`: Secrets in the format of `crates/state/tests/fixtures` (`base`, `secrets` with
//!   `name`, `annotations` and `data_b64`; or `data`, raw text, or `json`, gzipped);
//! - `B`: the same format, read as a backup set;
//! - anything else: the whole input is the data of one base Secret.
//!
//! `<n>` is a digit (1-9) or any other byte (1-36 pieces, past the cap of 32).

#![no_main]

use std::collections::BTreeMap;

use base64::Engine;
use captf_api::names::chunk_name;
use captf_fuzz::{MARKER, assert_no_marker, cut, depth, gzip, string_leaves};
use captf_state::{
    BackupInfo, Chunk, DecodedState, Limits, OutputLimits, backup_annotations, chunk_index, decode,
    verify_backup_set,
};
use libfuzzer_sys::fuzz_target;
use serde::Deserialize;
use serde_json::Value;

const BASE: &str = "tfstate-default-0123456789abcdef-c";

/// Tight limits, so that each cap is reached by small inputs too.
const SMALL: Limits = Limits {
    max_chunks: 4,
    max_decompressed_bytes: 4096,
    outputs: OutputLimits {
        max_outputs: 4,
        max_value_bytes: 256,
        max_total_bytes: 512,
        max_depth: 3,
    },
};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode {
        b'J' | b'G' => {
            let Some((&n, body)) = rest.split_first() else {
                return;
            };
            let pieces = if n.is_ascii_digit() {
                usize::from(n - b'0').max(1)
            } else {
                usize::from(n) % 36 + 1
            };
            let payload = if mode == b'J' {
                gzip(body)
            } else {
                body.to_vec()
            };
            let chunks: Vec<Chunk> = cut(&payload, pieces)
                .into_iter()
                .enumerate()
                .map(|(i, p)| Chunk::new(chunk_name(BASE, i), p))
                .collect();
            let secret = (mode == b'J').then(|| secret_places(body)).flatten();
            read(BASE, &chunks, secret.unwrap_or(false));
        }
        b'S' | b'B' => {
            let Some((base, chunks)) = secrets(rest) else {
                return;
            };
            if mode == b'S' {
                read(&base, &chunks, false);
            } else {
                backup_set(&chunks);
            }
        }
        _ => read(BASE, &[Chunk::new(BASE, data)], false),
    }
});

/// Decodes under both the shipped and the tight limits and checks what comes out.
/// `marker_secret`: the marker stands only in output values and resources of the document.
fn read(base: &str, chunks: &[Chunk], marker_secret: bool) {
    for limits in [Limits::DEFAULT, SMALL] {
        match decode(base, chunks, limits) {
            Ok(state) => {
                within(&state, chunks, &limits);
                if marker_secret {
                    assert_no_marker("DecodedState's Debug", &format!("{state:?}"));
                }
                backup_round_trip(base, &state, chunks, limits);
            }
            Err(e) => {
                let _ = (e.reason(), e.category(), e.metric_reason());
                if marker_secret {
                    assert_no_marker("a state error", &e.to_string());
                }
            }
        }
    }
}

/// What a decoded state promises about its size.
fn within(state: &DecodedState, chunks: &[Chunk], limits: &Limits) {
    assert!(state.decompressed_bytes <= limits.max_decompressed_bytes as u64);
    assert!(state.outputs.len() <= limits.outputs.max_outputs);
    assert!(state.chunks == chunks.len() && state.chunks <= limits.max_chunks);
    let compressed: usize = chunks
        .iter()
        .map(|c| c.data.as_ref().map_or(0, Vec::len))
        .sum();
    assert_eq!(state.compressed_bytes, compressed as u64);
    for (name, value) in &state.outputs {
        assert!(
            depth(value) <= limits.outputs.max_depth,
            "output {name} nests deeper than the limit"
        );
    }
    assert!(
        state
            .sensitive_outputs
            .iter()
            .all(|s| state.outputs.contains_key(s))
    );
}

/// A backup of a readable state is a complete set, in any order, and reads as the same state.
fn backup_round_trip(base: &str, state: &DecodedState, chunks: &[Chunk], limits: Limits) {
    if state.serial == 0 || chunks.len() > captf_state::DEFAULT_MAX_CHUNKS {
        return;
    }
    let mut ordered: Vec<&Chunk> = chunks.iter().collect();
    ordered.sort_by_key(|c| chunk_index(base, &c.name));
    let payloads: Vec<&[u8]> = ordered
        .iter()
        .map(|c| c.data.as_deref().unwrap_or_default())
        .collect();
    let set = format!("captf-state-backup-c-{}", state.serial);
    let info = BackupInfo {
        set: &set,
        taken_at: "2026-12-04T00:00:00Z",
        source_job: Some("captf-c-demo-apply-a1-000000"),
    };
    let mut backup: Vec<Chunk> = backup_annotations(state, &payloads, &info)
        .into_iter()
        .zip(&payloads)
        .enumerate()
        .map(|(i, (annotations, payload))| Chunk {
            name: chunk_name(&set, i),
            data: Some(payload.to_vec()),
            annotations,
        })
        .collect();
    assert_eq!(verify_backup_set(&backup), Ok(state.serial));
    backup.reverse();
    assert_eq!(verify_backup_set(&backup), Ok(state.serial));
    let restored = decode(&set, &backup, limits).expect("a backup reads as its state");
    assert_eq!(
        (
            restored.serial,
            &restored.lineage,
            &restored.outputs,
            &restored.inputs_hash
        ),
        (
            state.serial,
            &state.lineage,
            &state.outputs,
            &state.inputs_hash
        )
    );
}

/// A set read back: complete or not, never a panic; a complete set has a serial.
fn backup_set(chunks: &[Chunk]) {
    if let Ok(serial) = verify_backup_set(chunks) {
        assert!(serial >= 1);
        let set = chunks
            .first()
            .and_then(|c| c.annotations.get(captf_api::annotations::STATE_BACKUP_SET))
            .cloned()
            .unwrap_or_default();
        let _ = decode(&set, chunks, Limits::DEFAULT);
    }
}

/// Whether the marker stands in the document's output values or resources only.
fn secret_places(json: &[u8]) -> Option<bool> {
    let mut doc: Value = serde_json::from_slice(json).ok()?;
    let mut secret = Vec::new();
    if let Some(outputs) = doc.get_mut("outputs").and_then(Value::as_object_mut) {
        for output in outputs.values_mut() {
            if let Some(value) = output.get_mut("value") {
                string_leaves(value, &mut secret);
                *value = Value::Null;
            }
        }
    }
    if let Some(resources) = doc.get_mut("resources") {
        string_leaves(resources, &mut secret);
        *resources = Value::Null;
    }
    let public = doc.to_string();
    Some(secret.iter().any(|s| s.contains(MARKER)) && !public.contains(MARKER))
}

#[derive(Deserialize)]
struct Fixture {
    #[serde(default)]
    base: Option<String>,
    secrets: Vec<Secret>,
}

#[derive(Deserialize)]
struct Secret {
    name: String,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
    #[serde(default)]
    data_b64: Option<String>,
    #[serde(default)]
    data: Option<String>,
    #[serde(default)]
    json: Option<Value>,
}

/// The base name and the chunks of a fixture-format input.
fn secrets(input: &[u8]) -> Option<(String, Vec<Chunk>)> {
    let fixture: Fixture = serde_json::from_slice(input).ok()?;
    let chunks: Vec<Chunk> = fixture
        .secrets
        .into_iter()
        .map(|s| Chunk {
            data: match (s.data_b64, s.data, s.json) {
                (Some(b64), _, _) => base64::engine::general_purpose::STANDARD
                    .decode(b64.trim())
                    .ok(),
                (None, Some(text), _) => Some(text.into_bytes()),
                (None, None, Some(json)) => Some(gzip(json.to_string().as_bytes())),
                (None, None, None) => None,
            },
            name: s.name,
            annotations: s.annotations,
        })
        .collect();
    let base = fixture.base.unwrap_or_else(|| {
        chunks
            .iter()
            .find(|c| !c.name.contains("-part-"))
            .map_or_else(|| BASE.to_owned(), |c| c.name.clone())
    });
    Some((base, chunks))
}
