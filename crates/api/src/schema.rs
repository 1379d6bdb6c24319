//! Schema helpers for shapes that derive macros cannot express on their own: Kubernetes list
//! semantics, free-form JSON objects, and metav1.Condition lists keyed by `type`.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

/// `[]metav1.Condition` as CAPI v1beta2 declares it: a map list keyed by `type`, at most 32.
pub fn conditions(generator: &mut SchemaGenerator) -> Schema {
    let item =
        generator.subschema_for::<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>();
    json_schema!({
        "type": "array",
        "maxItems": 32,
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}

/// `spec.variables`: a JSON object of 1..=256 module variables whose values are any JSON.
pub fn variables(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "minProperties": 1,
        "maxProperties": 256,
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// `status.exports`: schemaless JSON copied from the cluster module's `exports` output.
pub fn free_form(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A string list with set semantics.
pub fn string_set<const MIN: usize, const MAX: usize, const ITEM_MAX: usize>(
    _: &mut SchemaGenerator,
) -> Schema {
    json_schema!({
        "type": "array",
        "minItems": MIN,
        "maxItems": MAX,
        "items": {
            "type": "string",
            "minLength": 1,
            "maxLength": ITEM_MAX,
            "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        },
        "x-kubernetes-list-type": "set",
    })
}

/// A list of `T` replaced as a whole on apply (`listType=atomic`).
pub fn atomic_list<T: JsonSchema, const MIN: usize, const MAX: usize>(
    generator: &mut SchemaGenerator,
) -> Schema {
    let item = generator.subschema_for::<T>();
    let mut schema = json_schema!({
        "type": "array",
        "maxItems": MAX,
        "items": item,
        "x-kubernetes-list-type": "atomic",
    });
    if MIN > 0 {
        schema.insert("minItems".into(), MIN.into());
    }
    schema
}

/// A list of `T` merged by its `name` key (`listType=map`).
pub fn map_list_by_name<T: JsonSchema, const MIN: usize, const MAX: usize>(
    generator: &mut SchemaGenerator,
) -> Schema {
    let item = generator.subschema_for::<T>();
    json_schema!({
        "type": "array",
        "minItems": MIN,
        "maxItems": MAX,
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["name"],
    })
}

/// A string list (atomic) whose items are 1..=ITEM_MAX long.
pub fn atomic_strings<const MIN: usize, const MAX: usize, const ITEM_MAX: usize>(
    _: &mut SchemaGenerator,
) -> Schema {
    let mut schema = json_schema!({
        "type": "array",
        "maxItems": MAX,
        "items": {"type": "string", "minLength": 1, "maxLength": ITEM_MAX},
        "x-kubernetes-list-type": "atomic",
    });
    if MIN > 0 {
        schema.insert("minItems".into(), MIN.into());
    }
    schema
}
