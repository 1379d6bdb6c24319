//! What the fuzz targets share: how an input is cut into parts, and the marker a target plants
//! in secret places to check that no message repeats what stands there (docs/fuzzing.md).

use std::io::Write;

use serde_json::Value;

/// Treated as a secret wherever an input puts it in a secret place (an output value, a
/// variable's value, a password): a message, a condition or a `Debug` form may repeat it only
/// when the same input also puts it somewhere public (a name, a key, an image reference).
pub const MARKER: &str = "s3cr3t";

/// gzip, as the engines' `kubernetes` backend writes a state.
pub fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).expect("writing to memory");
    e.finish().expect("writing to memory")
}

/// The first line of `input` (without its newline) and the rest; without a newline, the whole
/// input and nothing.
pub fn first_line(input: &[u8]) -> (&[u8], &[u8]) {
    match input.iter().position(|&b| b == b'\n') {
        Some(i) => (&input[..i], &input[i + 1..]),
        None => (input, &[]),
    }
}

/// `data` cut into `n` (at least 1) pieces of near-equal size; some are empty when `n` is
/// larger than the data.
pub fn cut(data: &[u8], n: usize) -> Vec<&[u8]> {
    let n = n.max(1);
    (0..n)
        .map(|i| &data[i * data.len() / n..(i + 1) * data.len() / n])
        .collect()
}

/// Every string leaf of `value`, object keys excluded.
pub fn string_leaves(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| string_leaves(v, out)),
        Value::Object(map) => map.values().for_each(|v| string_leaves(v, out)),
        _ => {}
    }
}

/// Every object key of `value`, at any depth.
pub fn object_keys(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Array(items) => items.iter().for_each(|v| object_keys(v, out)),
        Value::Object(map) => {
            for (k, v) in map {
                out.push(k.clone());
                object_keys(v, out);
            }
        }
        _ => {}
    }
}

/// Whether [`MARKER`] stands in a secret place of the input (`secret` holds what is there) and
/// nowhere public (`public`), so that a text that repeats it leaks it.
pub fn marker_only_in_secret(secret: &[String], public: &[String]) -> bool {
    secret.iter().any(|s| s.contains(MARKER)) && !public.iter().any(|s| s.contains(MARKER))
}

/// Fails when `text` (a message, a condition, a `Debug` form) repeats the marker that the input
/// put in secret places only.
pub fn assert_no_marker(what: &str, text: &str) {
    assert!(
        !text.contains(MARKER),
        "{what} repeats a value from a secret place: {text}"
    );
}

/// The nesting depth of a JSON value (a scalar is 0).
pub fn depth(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}
