//! Helpers shared by the integration tests: synthetic states, chunking, a hand-built gzip bomb,
//! and the loader of the JSON fixtures in `tests/fixtures/` (format in its README).
#![allow(dead_code)] // each test binary uses a different subset

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use base64::Engine;
use captf_state::Chunk;
use serde::Deserialize;
use serde_json::{Value, json};

/// A base state Secret name of the shape the backend writes.
pub const BASE: &str = "tfstate-default-0123456789abcdef-c";

/// gzip as the backend writes it.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).expect("gzip write");
    e.finish().expect("gzip finish")
}

/// A v4 state with: a managed resource with `count` (3 instances, counts once), a data source
/// (does not count), a managed resource in a child module with `for_each` (counts once), a plain
/// and a sensitive output.
pub fn sample_state() -> Value {
    json!({
        "version": 4,
        "terraform_version": "1.9.8",
        "serial": 42,
        "lineage": "6f1c1d2e-1111-2222-3333-444455556666",
        "outputs": {
            "endpoint": {"value": {"host": "10.0.0.1", "port": 6443}, "type": ["object", {"host": "string", "port": "number"}]},
            "kubeconfig": {"value": "apiVersion: v1", "type": "string", "sensitive": true}
        },
        "resources": [
            {"mode": "managed", "type": "null_resource", "name": "node", "provider": "provider[\"registry.terraform.io/hashicorp/null\"]",
             "instances": [
                {"index_key": 0, "schema_version": 0, "attributes": {"id": "1", "triggers": {"mode": "data"}}},
                {"index_key": 1, "schema_version": 0, "attributes": {"id": "2"}},
                {"index_key": 2, "schema_version": 0, "attributes": {"id": "3"}}
             ]},
            {"mode": "data", "type": "external", "name": "info", "provider": "provider[\"registry.terraform.io/hashicorp/external\"]",
             "instances": [{"schema_version": 0, "attributes": {"result": {"mode": "managed"}}}]},
            {"module": "module.net", "mode": "managed", "type": "random_id", "name": "x", "each": "map",
             "provider": "provider[\"registry.terraform.io/hashicorp/random\"]",
             "instances": [{"index_key": "a", "attributes": {}}, {"index_key": "b", "attributes": {}}]}
        ],
        "check_results": null
    })
}

/// The gzip of a JSON value.
pub fn gz_json(v: &Value) -> Vec<u8> {
    gzip(&serde_json::to_vec(v).expect("serialize"))
}

/// Splits `payload` into pieces of `piece` bytes named like the backend names them.
pub fn split(base: &str, payload: &[u8], piece: usize) -> Vec<Chunk> {
    payload
        .chunks(piece.max(1))
        .enumerate()
        .map(|(i, p)| Chunk::new(captf_api::names::chunk_name(base, i), p))
        .collect()
}

/// Splits `payload` into exactly `n` pieces of near-equal size (`n` <= its length).
pub fn split_into(base: &str, payload: &[u8], n: usize) -> Vec<Chunk> {
    assert!(
        n >= 1 && n <= payload.len(),
        "cannot cut {} bytes into {n}",
        payload.len()
    );
    (0..n)
        .map(|i| {
            let piece = &payload[i * payload.len() / n..(i + 1) * payload.len() / n];
            Chunk::new(captf_api::names::chunk_name(base, i), piece)
        })
        .collect()
}

/// A gzip member that inflates to `1 + 258 * repeats` zero bytes, built by hand so a 200 MiB bomb
/// costs nothing to make: one fixed-Huffman block holding a literal 0 and then `repeats` matches
/// of length 258 at distance 1 (13 bits each, deflate's best ratio). The CRC and size in the
/// trailer are right only when `with_trailer` is set (it hashes the whole output, slow for big
/// sizes); a reader under a cap must give up long before it gets there.
pub fn zeros_bomb(repeats: usize, with_trailer: bool) -> Vec<u8> {
    let mut w = BitWriter::default();
    w.bits(1, 1); // BFINAL
    w.bits(1, 2); // BTYPE = 01, fixed Huffman
    w.huffman(0x30, 8); // literal 0
    for _ in 0..repeats {
        w.huffman(0xC5, 8); // length code 285 = 258, no extra bits
        w.huffman(0, 5); // distance code 0 = 1
    }
    w.huffman(0, 7); // end of block (256)
    let deflate = w.finish();
    let size = 1 + 258 * repeats;
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    out.extend_from_slice(&deflate);
    let (crc, isize) = if with_trailer {
        let mut crc = flate2::Crc::new();
        let block = vec![0u8; 1 << 20];
        let mut left = size;
        while left > 0 {
            let n = left.min(block.len());
            crc.update(&block[..n]);
            left -= n;
        }
        (crc.sum(), size as u32)
    } else {
        (0, 0)
    };
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&isize.to_le_bytes());
    out
}

#[derive(Default)]
struct BitWriter {
    out: Vec<u8>,
    acc: u64,
    n: u32,
}

impl BitWriter {
    /// Writes `len` bits of `v`, least significant first (deflate's bit order for data).
    fn bits(&mut self, v: u32, len: u32) {
        self.acc |= u64::from(v) << self.n;
        self.n += len;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    /// Writes a Huffman code, most significant bit first (deflate's bit order for codes).
    fn huffman(&mut self, code: u32, len: u32) {
        for i in (0..len).rev() {
            self.bits((code >> i) & 1, 1);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        if self.n > 0 {
            self.out.push(self.acc as u8);
        }
        self.out
    }
}

// ---- Fixture files ---------------------------------------------------------------------------

/// The fixture folder.
pub fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// One fixture file: the state Secrets as an engine wrote them, and what reading them must give.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixture {
    /// Free text: engine, version, how it was produced.
    #[serde(default)]
    pub description: Option<String>,
    /// The base Secret name; inferred when exactly one Secret is not named `*-part-<digits>`.
    #[serde(default)]
    pub base: Option<String>,
    /// The Secrets the backend selector returned.
    pub secrets: Vec<FixtureSecret>,
    /// The expected outcome.
    pub expect: Expect,
    /// For a state captured while an apply held the lock: the lock Lease's holder and
    /// annotations (the reader ignores the lock; the manager's lock handling uses these).
    #[serde(default)]
    pub lease: Option<serde_json::Value>,
}

/// One Secret of a fixture.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixtureSecret {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.annotations`.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// `data.tfstate` exactly as `kubectl get secret -o json` shows it (base64 of the gzip
    /// bytes); absent when the Secret has no `tfstate` key.
    #[serde(default)]
    pub data_b64: Option<String>,
}

/// `{"ok": {...}}` or `{"error": "<StateReadable reason>"}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "lowercase")]
pub enum Expect {
    /// Reading succeeds with these facts.
    Ok(ExpectOk),
    /// Reading fails with this reason (`StateCorrupt`, `StateInconsistent`, `StateEncrypted`).
    Error(String),
}

/// The facts a successful read must give; the optional ones are checked when present.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpectOk {
    /// The state serial.
    pub serial: u64,
    /// The managed resource count.
    pub resources: u64,
    /// The root output names (any order).
    pub outputs: Vec<String>,
    /// The sensitive output names (any order).
    #[serde(default)]
    pub sensitive_outputs: Option<Vec<String>>,
    /// The lineage.
    #[serde(default)]
    pub lineage: Option<String>,
    /// The engine version recorded in the state.
    #[serde(default)]
    pub terraform_version: Option<String>,
    /// The inputs hash read from the base annotation (`null`: none).
    #[serde(default)]
    pub inputs_hash: Option<Option<String>>,
    /// The number of chunks read.
    #[serde(default)]
    pub chunks: Option<usize>,
}

impl Fixture {
    /// The base Secret name.
    pub fn base_name(&self) -> String {
        if let Some(b) = &self.base {
            return b.clone();
        }
        let bases: Vec<&str> = self
            .secrets
            .iter()
            .map(|s| s.name.as_str())
            .filter(|n| !is_part_name(n))
            .collect();
        match bases.as_slice() {
            [one] => (*one).to_owned(),
            _ => panic!("cannot infer the base Secret from {bases:?}; set \"base\" in the fixture"),
        }
    }

    /// The Secrets as decoder input.
    pub fn chunks(&self) -> Vec<Chunk> {
        self.secrets
            .iter()
            .map(|s| Chunk {
                name: s.name.clone(),
                data: s.data_b64.as_ref().map(|b| {
                    base64::engine::general_purpose::STANDARD
                        .decode(b)
                        .unwrap_or_else(|e| panic!("{}: data_b64 is not base64: {e}", s.name))
                }),
                annotations: s.annotations.clone(),
            })
            .collect()
    }
}

fn is_part_name(name: &str) -> bool {
    name.rsplit_once("-part-")
        .is_some_and(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Every `*.json` file in the fixture folder, parsed, sorted by path.
pub fn load_fixtures() -> Vec<(PathBuf, Fixture)> {
    let dir = fixtures_dir();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let text = std::fs::read_to_string(&p)
                .unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
            let f: Fixture = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not a fixture: {e}", p.display()));
            (p, f)
        })
        .collect()
}
