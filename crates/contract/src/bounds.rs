//! How large module variables may be, and measuring them without building them.
//!
//! An array of small numbers takes about sixteen times more memory as a `serde_json::Value`
//! than as JSON text, and every replica keeps every object's `spec.variables` for as long as the
//! object exists. So variables are measured before they are parsed or copied: their size as
//! compact JSON, how deep arrays and objects nest, and how many values they hold. One walk does
//! it, driven either by JSON text (the admission webhook, on the request body as it arrived) or
//! by a parsed value (a pass, before it copies one), so both measure every input to the byte
//! alike.

use std::fmt;

use serde::de::{DeserializeSeed, Error as _, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use crate::render::MAX_RENDERED_BYTES;

/// Caps on a set of variables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes of the set as compact JSON (`{"name":value,...}`).
    pub bytes: usize,
    /// Deepest nesting of arrays and objects, the set's own object counting as 1.
    pub depth: usize,
    /// Most values at any depth: each variable's value, each array element, each member
    /// value of an object (keys are not values).
    pub values: usize,
}

/// What `spec.variables` (and `spec.template.spec.variables`) may hold: what the admission
/// webhook admits and a pass renders. Every replica keeps each object's variables for as long as
/// it exists; larger data belongs in a ConfigMap or Secret named in `spec.variablesFrom`, read
/// only while a pass renders.
pub const SPEC_VARIABLES: Limits = Limits {
    bytes: 256 * 1024,
    depth: 32,
    values: 10_000,
};

/// What the variables of one pass, `spec.variablesFrom` sources and `spec.variables` together,
/// may hold. Counted as each source value is read, before it is parsed. More bytes than the
/// rendered root may carry ([`MAX_RENDERED_BYTES`]) could never render.
pub const MERGED_VARIABLES: Limits = Limits {
    bytes: MAX_RENDERED_BYTES,
    depth: 32,
    values: 100_000,
};

/// The measure of JSON: compact bytes, nesting depth and values. The depth of a scalar is 0,
/// of `[1]` 1, of `{"a":[1]}` 2.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Size {
    /// Bytes as compact JSON, as `serde_json::to_vec` writes it.
    pub bytes: usize,
    /// Deepest nesting of arrays and objects; past the measuring limit the walk stops, at
    /// that limit plus one.
    pub depth: usize,
    /// Values, the measured value itself included.
    pub values: usize,
}

/// A limit a set of variables is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    /// Too many bytes as compact JSON: `(bytes, limit)`.
    Bytes(usize, usize),
    /// Nested deeper than the limit.
    Depth(usize),
    /// Too many values: `(values, limit)`.
    Values(usize, usize),
}

impl fmt::Display for Exceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exceeded::Bytes(bytes, limit) => {
                write!(f, "{bytes} bytes as compact JSON, at most {limit}")
            }
            Exceeded::Depth(limit) => {
                write!(f, "arrays and objects nested more than {limit} deep")
            }
            Exceeded::Values(values, limit) => write!(f, "{values} values, at most {limit}"),
        }
    }
}

impl Limits {
    /// The limits a set of variables of `size` (as [`measure_variables_json`] and
    /// [`measure_variables`] count it) is over; none when it fits. Past the depth limit the
    /// walk stopped, so its bytes and values are not known: the depth alone is reported.
    pub fn exceeded(&self, size: &Size) -> Vec<Exceeded> {
        if size.depth > self.depth {
            return vec![Exceeded::Depth(self.depth)];
        }
        let mut over = Vec::new();
        if size.bytes > self.bytes {
            over.push(Exceeded::Bytes(size.bytes, self.bytes));
        }
        if size.values > self.values {
            over.push(Exceeded::Values(size.values, self.values));
        }
        over
    }
}

/// The size of one JSON text, walking no deeper than `max_depth` (then the depth reads
/// `max_depth + 1`); `None` when it is not JSON.
pub fn measure_json(text: &str, max_depth: usize) -> Option<Size> {
    let mut walk = Walk::new(max_depth);
    let mut de = serde_json::Deserializer::from_str(text);
    match walk.seed(1).deserialize(&mut de).and_then(|()| de.end()) {
        Ok(()) => Some(walk.size),
        Err(_) if walk.too_deep => Some(walk.size),
        Err(_) => None,
    }
}

/// The size of a parsed value, as [`measure_json`] measures its text.
pub fn measure_value(value: &Value, max_depth: usize) -> Size {
    let mut walk = Walk::new(max_depth);
    // `&Value` as a deserializer fails only where the walk stops it.
    let _ = walk.seed(1).deserialize(value);
    walk.size
}

/// The size of a variables object given as JSON text (`spec.variables` in a request body):
/// its values exclude the object itself, and it nests 1 deep for its own braces. `None` when
/// the text is not JSON.
pub fn measure_variables_json(text: &str, limits: &Limits) -> Option<Size> {
    measure_json(text, limits.depth).map(without_container)
}

/// The size of a parsed variables object, as [`measure_variables_json`] counts its text.
pub fn measure_variables(map: &Map<String, Value>, limits: &Limits) -> Size {
    let mut size = Size {
        bytes: 2 + map.len().saturating_sub(1),
        depth: 1,
        values: 0,
    };
    for (name, value) in map {
        size.bytes += json_len(name) + 1;
        let inner = measure_value(value, limits.depth.saturating_sub(1));
        size.add(&inner, 1);
        if size.depth > limits.depth {
            break;
        }
    }
    size
}

impl Size {
    /// Adds a member value of `inner`'s size nested one level below a container at `depth`.
    pub fn add(&mut self, inner: &Size, depth: usize) {
        self.bytes += inner.bytes;
        self.values += inner.values;
        self.depth = self.depth.max(depth + inner.depth);
    }
}

/// A value measured as a container of variables: the container is no value of its own.
fn without_container(size: Size) -> Size {
    Size {
        values: size.values.saturating_sub(1),
        ..size
    }
}

/// The length of `value` as compact JSON, as serde_json writes it.
pub fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    let mut counter = Counter(0);
    // Writing to a counter cannot fail, and every type measured here serializes.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

struct Counter(usize);

impl std::io::Write for Counter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The running measure of one walk.
struct Walk {
    size: Size,
    max_depth: usize,
    too_deep: bool,
}

impl Walk {
    fn new(max_depth: usize) -> Walk {
        Walk {
            size: Size::default(),
            max_depth,
            too_deep: false,
        }
    }

    /// A value at nesting `depth` (its container's depth plus one; 1 for the top value).
    fn seed(&mut self, depth: usize) -> Seed<'_> {
        Seed { walk: self, depth }
    }

    fn scalar<T: serde::Serialize + ?Sized>(&mut self, value: &T) {
        self.size.bytes += json_len(value);
        self.size.values += 1;
    }

    /// Enters a container at `depth`; `false` (and the walk marked) past the limit.
    fn enter(&mut self, depth: usize) -> bool {
        self.size.values += 1;
        self.size.bytes += 2;
        self.size.depth = self.size.depth.max(depth);
        if depth > self.max_depth {
            self.too_deep = true;
            return false;
        }
        true
    }
}

struct Seed<'w> {
    walk: &'w mut Walk,
    depth: usize,
}

const TOO_DEEP: &str = "nested past the measuring limit";

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        self.walk.scalar(&v);
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.walk.scalar(&v);
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.walk.scalar(&v);
        Ok(())
    }

    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        self.walk.scalar(&v);
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.walk.scalar(v);
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        self.walk.scalar(&());
        Ok(())
    }

    fn visit_none<E>(self) -> Result<(), E> {
        self.walk.scalar(&());
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Seed { walk, depth } = self;
        if !walk.enter(depth) {
            return Err(A::Error::custom(TOO_DEEP));
        }
        let mut n = 0usize;
        while seq.next_element_seed(walk.seed(depth + 1))?.is_some() {
            n += 1;
        }
        walk.size.bytes += n.saturating_sub(1);
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Seed { walk, depth } = self;
        if !walk.enter(depth) {
            return Err(A::Error::custom(TOO_DEEP));
        }
        let mut n = 0usize;
        while map.next_key_seed(Key(&mut walk.size))?.is_some() {
            map.next_value_seed(walk.seed(depth + 1))?;
            n += 1;
        }
        // A colon per member, a comma between members.
        walk.size.bytes += n + n.saturating_sub(1);
        Ok(())
    }
}

/// An object's key: bytes, not a value.
struct Key<'s>(&'s mut Size);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.0.bytes += json_len(v);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn sizes_table() {
        // (JSON, bytes, depth, values)
        let cases: &[(&str, usize, usize, usize)] = &[
            ("1", 1, 0, 1),
            ("null", 4, 0, 1),
            ("\"a\\u003cb\"", 5, 0, 1),
            ("\"tab\\there\"", 11, 0, 1),
            ("1.50", 3, 0, 1),
            ("[]", 2, 1, 1),
            ("{}", 2, 1, 1),
            ("[1, 2, 3]", 7, 1, 4),
            ("{\"a\": [1, {\"b\": true}]}", 20, 3, 5),
            ("[[[[]]]]", 8, 4, 4),
        ];
        for (text, bytes, depth, values) in cases {
            let size = measure_json(text, 32).expect(text);
            assert_eq!(
                (size.bytes, size.depth, size.values),
                (*bytes, *depth, *values),
                "{text}"
            );
            let parsed: Value = serde_json::from_str(text).expect(text);
            assert_eq!(measure_value(&parsed, 32), size, "{text} parsed");
            assert_eq!(size.bytes, serde_json::to_vec(&parsed).expect("json").len());
        }
        assert_eq!(measure_json("{\"a\": }", 32), None);
        assert_eq!(measure_json("1 2", 32), None);
    }

    fn nested(depth: usize) -> String {
        format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn the_walk_stops_below_the_depth_limit() {
        // Far deeper than serde_json's own recursion limit: the walk stops first.
        let deep = nested(10_000);
        let size = measure_json(&deep, 32).expect("measured");
        assert_eq!(size.depth, 33);
        assert!(size.values <= 33, "{size:?}");
        let parsed: Value = serde_json::from_str(&nested(100)).expect("json");
        assert_eq!(measure_value(&parsed, 32).depth, 33);
        assert_eq!(measure_value(&parsed, 100).depth, 100);
    }

    #[test]
    fn variables_limits_table() {
        let limits = Limits {
            bytes: 40,
            depth: 3,
            values: 5,
        };
        let cases: Vec<(&str, Value, Vec<Exceeded>)> = vec![
            ("fits", json!({"a": 1, "b": [1, 2]}), vec![]),
            (
                "exactly at every limit",
                json!({"abcdefghijklmnopqrst": [[1, 2]], "b": "x"}),
                vec![],
            ),
            (
                "one value too many",
                json!({"a": [1, 2, 3, 4, 5]}),
                vec![Exceeded::Values(6, 5)],
            ),
            (
                "one byte too many",
                json!({"abcdefghijklmnopqrstu": [[1, 2]], "b": "x"}),
                vec![Exceeded::Bytes(41, 40)],
            ),
            (
                "one level too deep",
                json!({"a": [[[1]]]}),
                vec![Exceeded::Depth(3)],
            ),
            (
                "bytes and values",
                json!({"a": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]}),
                vec![Exceeded::Bytes(43, 40), Exceeded::Values(16, 5)],
            ),
        ];
        for (name, value, want) in cases {
            let text = serde_json::to_string_pretty(&value).expect("json");
            let from_text = measure_variables_json(&text, &limits).expect("json");
            let map = value.as_object().expect("object");
            let from_map = measure_variables(map, &limits);
            assert_eq!(limits.exceeded(&from_text), want, "{name}: {from_text:?}");
            assert_eq!(limits.exceeded(&from_map), want, "{name}: {from_map:?}");
            if want.is_empty() {
                assert_eq!(from_text, from_map, "{name}");
            }
        }
    }

    #[test]
    fn messages_name_the_figure_and_the_limit() {
        assert_eq!(
            Exceeded::Bytes(300_000, 262_144).to_string(),
            "300000 bytes as compact JSON, at most 262144"
        );
        assert_eq!(
            Exceeded::Depth(32).to_string(),
            "arrays and objects nested more than 32 deep"
        );
        assert_eq!(
            Exceeded::Values(10_001, 10_000).to_string(),
            "10001 values, at most 10000"
        );
    }

    fn any_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            ".*".prop_map(Value::String),
        ];
        leaf.prop_recursive(6, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(".*", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        // Text and value measure alike when the value is what the text parses to, as for a
        // webhook reading a request and a pass reading the object stored from it. (A float
        // written and parsed again may come back one digit longer.)
        #[test]
        fn text_and_value_measure_alike(value in any_value()) {
            let text = serde_json::to_string(&value).expect("json");
            let parsed: Value = serde_json::from_str(&text).expect("json");
            let of_value = measure_value(&parsed, 64);
            prop_assert_eq!(of_value.bytes, serde_json::to_vec(&parsed).expect("json").len());
            prop_assert_eq!(measure_json(&text, 64), Some(of_value));
            if let Value::Object(map) = &parsed {
                let limits = Limits { bytes: usize::MAX, depth: 64, values: usize::MAX };
                prop_assert_eq!(
                    Some(measure_variables(map, &limits)),
                    measure_variables_json(&text, &limits)
                );
            }
        }
    }
}
