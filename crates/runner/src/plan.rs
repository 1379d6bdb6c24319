//! The `show -json` plan document (api.md §4.7, concepts §12.2): its summary, the keyed `p2:`
//! fingerprint, the destructive changes a guarded apply stops before, and the sensitive values
//! the redactor must learn.
//!
//! # The `p2:` fingerprint
//!
//! One line per change, `<name>|<actions>|<mac>`:
//! - `<name>` is the resource address, or `output.<name>` for a root output;
//! - `<actions>` are the plan actions comma-joined in plan order (`delete,create` differs from
//!   `create,delete`);
//! - `<mac>` is the lowercase hex HMAC-SHA256, under the object's plan key, of the canonical JSON
//!   ([`captf_contract::canonical_json`]: keys sorted, compact) of the change's *effect*.
//!
//! A resource gets a line when its action is not `no-op`, or it is imported, or it was moved; an
//! output when its action is not `no-op`. The lines are sorted and joined with `\n`; the hash is
//! `p2:` + hex SHA-256 of that text, so the empty plan hashes to [`EMPTY_PLAN_HASH`].
//!
//! The effect is a JSON object whose empty members are left out:
//! - update, replace (and any other mix of actions): `changes`, one entry per touched leaf path,
//!   in path order: `path` (steps `{"k": key}` for a map key, `{"i": index}` for a list index),
//!   `before` / `after` (a member is absent when the attribute is absent, `null` when it is
//!   null), `unknown: true` when the value is unknown after apply, and the sensitivity markers
//!   `before_sensitive` / `after_sensitive`. A leaf is touched when its value changes, becomes
//!   unknown, or its sensitivity changes; untouched attributes do not bind the hash;
//! - create and read: `planned` = `{after, after_unknown, after_sensitive}`;
//! - delete and forget: nothing;
//! - always: `import` (the `importing` object: ID or identity) and `moved_from` (the previous
//!   address) when present.
//!
//! Numbers are written as serde_json reads them: integers exactly, other numbers as the shortest
//! decimal that round-trips an f64 (an integer beyond 64 bits or a float with more than 17
//! significant digits therefore binds only its f64 value).

use std::collections::BTreeMap;
use std::fmt;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// Hash of a plan without changes: `p2:` + SHA-256 of the empty string.
pub const EMPTY_PLAN_HASH: &str =
    "p2:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
/// Prefix of the current fingerprint scheme; anything else never matches.
pub const HASH_PREFIX: &str = "p2:";
/// Shortest accepted plan key.
pub const MIN_PLAN_KEY_BYTES: usize = 32;
/// Most resources listed in a plan summary.
pub const MAX_PLAN_RESOURCES: usize = 50;
/// Cap on the blocked summary.
pub const MAX_SUMMARY_BYTES: usize = 512;

/// What a resource or output change does, from its actions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionKind {
    /// `no-op` (or no action).
    NoOp,
    /// `create`.
    Create,
    /// `read` (data sources).
    Read,
    /// Contains `update`.
    Update,
    /// `delete` and `create`, in either order.
    Replace,
    /// `delete`.
    Delete,
    /// `forget` (a `removed` block).
    Forget,
    /// Any other combination.
    Other,
}

impl ActionKind {
    /// Classifies a list of plan actions.
    pub fn of(actions: &[String]) -> Self {
        let has = |a: &str| actions.iter().any(|x| x == a);
        match actions {
            _ if has("create") && has("delete") => ActionKind::Replace,
            [] => ActionKind::NoOp,
            [one] => match one.as_str() {
                "no-op" => ActionKind::NoOp,
                "create" => ActionKind::Create,
                "read" => ActionKind::Read,
                "update" => ActionKind::Update,
                "delete" => ActionKind::Delete,
                "forget" => ActionKind::Forget,
                _ => ActionKind::Other,
            },
            _ if has("update") => ActionKind::Update,
            _ => ActionKind::Other,
        }
    }

    /// Whether the guard holds a change of this kind: it removes the object (delete or
    /// replace), or its actions are not known to the runner.
    pub fn is_destructive(self) -> bool {
        matches!(
            self,
            ActionKind::Delete | ActionKind::Replace | ActionKind::Other
        )
    }
}

/// One `change` object of the plan document.
#[derive(Clone, Deserialize, Default)]
pub struct Change {
    /// Plan actions in plan order.
    #[serde(default)]
    pub actions: Vec<String>,
    /// Value before.
    #[serde(default)]
    pub before: Value,
    /// Value after (unknown parts are `null` or absent).
    #[serde(default)]
    pub after: Value,
    /// `true` (or a tree of `true`s) where the value is unknown after apply.
    #[serde(default)]
    pub after_unknown: Value,
    /// Sensitivity marker tree of `before`.
    #[serde(default)]
    pub before_sensitive: Value,
    /// Sensitivity marker tree of `after`.
    #[serde(default)]
    pub after_sensitive: Value,
    /// Set when the resource is imported: `{id}` or `{identity}`.
    #[serde(default)]
    pub importing: Option<Value>,
}

/// One entry of `resource_changes`.
#[derive(Clone, Deserialize)]
pub struct ResourceChange {
    /// Resource address.
    pub address: String,
    /// Address before a `moved` block.
    #[serde(default)]
    pub previous_address: Option<String>,
    /// `managed` or `data`.
    #[serde(default)]
    pub mode: Option<String>,
    /// The change.
    pub change: Change,
}

impl ResourceChange {
    fn kind(&self) -> ActionKind {
        ActionKind::of(&self.change.actions)
    }

    fn moved_from(&self) -> Option<&str> {
        self.previous_address
            .as_deref()
            .filter(|p| !p.is_empty() && *p != self.address)
    }

    /// Whether the change belongs to the fingerprint and the resource list.
    fn listed(&self) -> bool {
        self.kind() != ActionKind::NoOp
            || self.change.importing.is_some()
            || self.moved_from().is_some()
    }

    /// `<address> (<labels>)` for the plan summary.
    fn label(&self) -> String {
        let mut labels = Vec::new();
        match self.kind() {
            ActionKind::NoOp => {}
            ActionKind::Replace => labels.push("replace".to_owned()),
            _ => labels.push(self.change.actions.join(",")),
        }
        if self.change.importing.is_some() {
            labels.push("import".to_owned());
        }
        if self.moved_from().is_some() {
            labels.push("move".to_owned());
        }
        format!("{} ({})", self.address, labels.join(", "))
    }
}

/// A parsed `show -json` plan. `Debug` shows counts only: the document holds every input value.
#[derive(Clone, Deserialize, Default)]
pub struct Plan {
    /// `resource_changes`.
    #[serde(default)]
    pub resource_changes: Vec<ResourceChange>,
    /// `output_changes` (root outputs).
    #[serde(default)]
    pub output_changes: BTreeMap<String, Change>,
    /// `prior_state` (for sensitive values only).
    #[serde(default)]
    pub prior_state: Option<Value>,
    /// `variables` (root variable values).
    #[serde(default)]
    pub variables: Option<Value>,
    /// `configuration` (for which root variables are sensitive).
    #[serde(default)]
    pub configuration: Option<Value>,
}

impl fmt::Debug for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Plan")
            .field("resource_changes", &self.resource_changes.len())
            .field("output_changes", &self.output_changes.len())
            .finish_non_exhaustive()
    }
}

/// The plan part of the result document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanSummary {
    /// `p2:<hex>` fingerprint.
    pub hash: String,
    /// Resources to create.
    pub create: u32,
    /// Resources to update in place.
    pub update: u32,
    /// Resources to replace.
    pub replace: u32,
    /// Resources to delete (replacements excluded).
    pub delete: u32,
    /// Resources to forget (`removed` blocks).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub forget: u32,
    /// Root outputs that change.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub outputs: u32,
    /// Resources imported.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub import: u32,
    /// Resources moved.
    #[serde(default, rename = "move", skip_serializing_if = "is_zero")]
    pub moves: u32,
    /// `<address> (<labels>)`, sorted by address, at most [`MAX_PLAN_RESOURCES`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// More resources changed than listed.
    #[serde(default, skip_serializing_if = "is_false")]
    pub truncated: bool,
}

pub(crate) fn is_zero(n: &u32) -> bool {
    *n == 0
}

pub(crate) fn is_false(b: &bool) -> bool {
    !*b
}

impl PlanSummary {
    /// The summary of a plan without changes.
    pub fn empty() -> Self {
        PlanSummary {
            hash: EMPTY_PLAN_HASH.to_owned(),
            create: 0,
            update: 0,
            replace: 0,
            delete: 0,
            forget: 0,
            outputs: 0,
            import: 0,
            moves: 0,
            resources: Vec::new(),
            truncated: false,
        }
    }

    /// `create/update/replace/delete` counts for messages.
    pub fn counts(&self) -> String {
        format!(
            "{} to create, {} to update, {} to replace, {} to delete",
            self.create, self.update, self.replace, self.delete
        )
    }
}

impl Plan {
    /// Parses `show -json` output. The error names the position, never the content.
    pub fn from_json(bytes: &[u8]) -> Result<Self> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            Error::PlanJson(format!(
                "invalid JSON at line {} column {}",
                e.line(),
                e.column()
            ))
        })?;
        if !value.is_object() {
            return Err(Error::PlanJson("not a JSON object".into()));
        }
        serde_json::from_value(value).map_err(|e| {
            // serde's message can quote a value; keep only its category.
            Error::PlanJson(format!("unexpected document shape ({:?})", e.classify()))
        })
    }

    /// The keyed `p2:` fingerprint (see the module docs).
    pub fn fingerprint(&self, key: &[u8]) -> String {
        let mut lines = self.fingerprint_lines(key);
        lines.sort();
        let digest = Sha256::digest(lines.join("\n").as_bytes());
        format!("{HASH_PREFIX}{}", hex::encode(digest))
    }

    /// The unsorted fingerprint lines (`<name>|<actions>|<mac>`).
    pub fn fingerprint_lines(&self, key: &[u8]) -> Vec<String> {
        let mut lines = Vec::new();
        for rc in self.resource_changes.iter().filter(|rc| rc.listed()) {
            let effect = effect(&rc.change, rc.kind(), rc.moved_from());
            lines.push(line(&rc.address, &rc.change.actions, key, &effect));
        }
        for (name, change) in &self.output_changes {
            let kind = ActionKind::of(&change.actions);
            if kind == ActionKind::NoOp {
                continue;
            }
            let effect = effect(change, kind, None);
            lines.push(line(
                &format!("output.{name}"),
                &change.actions,
                key,
                &effect,
            ));
        }
        lines
    }

    /// The plan part of the result document.
    pub fn summary(&self, key: &[u8]) -> PlanSummary {
        let mut s = PlanSummary {
            hash: self.fingerprint(key),
            ..PlanSummary::empty()
        };
        let mut listed: Vec<&ResourceChange> = Vec::new();
        for rc in &self.resource_changes {
            match rc.kind() {
                ActionKind::Create => s.create += 1,
                ActionKind::Update => s.update += 1,
                ActionKind::Replace => s.replace += 1,
                ActionKind::Delete => s.delete += 1,
                ActionKind::Forget => s.forget += 1,
                ActionKind::NoOp | ActionKind::Read | ActionKind::Other => {}
            }
            if rc.change.importing.is_some() {
                s.import += 1;
            }
            if rc.moved_from().is_some() {
                s.moves += 1;
            }
            if rc.listed() {
                listed.push(rc);
            }
        }
        s.outputs = self
            .output_changes
            .values()
            .filter(|c| ActionKind::of(&c.actions) != ActionKind::NoOp)
            .count() as u32;
        listed.sort_by(|a, b| a.address.cmp(&b.address));
        s.truncated = listed.len() > MAX_PLAN_RESOURCES;
        s.resources = listed
            .iter()
            .take(MAX_PLAN_RESOURCES)
            .map(|rc| rc.label())
            .collect();
        s
    }

    /// `<address> (<what>)` for every change that may remove an object, sorted by address:
    /// `replace` (delete and create), `delete` for any other action list containing a delete,
    /// and the actions themselves for a list the runner does not know, which is guarded rather
    /// than waved through. `forget`, import and move are not destructive.
    pub fn destructive(&self) -> Vec<String> {
        let mut out: Vec<(&str, String)> = self
            .resource_changes
            .iter()
            .filter_map(|rc| {
                let deletes = rc.change.actions.iter().any(|a| a == "delete");
                let what = match rc.kind() {
                    ActionKind::Replace => "replace".to_owned(),
                    _ if deletes => "delete".to_owned(),
                    ActionKind::Other => rc.change.actions.join(","),
                    _ => return None,
                };
                Some((rc.address.as_str(), what))
            })
            .collect();
        out.sort();
        out.into_iter()
            .map(|(a, what)| format!("{a} ({what})"))
            .collect()
    }

    /// Every value the plan marks sensitive: resource values under `before_sensitive` /
    /// `after_sensitive`, sensitive outputs, sensitive values of the prior state, and the values
    /// of root variables the configuration declares sensitive.
    pub fn sensitive_values(&self) -> Vec<Value> {
        let mut out = Vec::new();
        let changes = self
            .resource_changes
            .iter()
            .map(|rc| &rc.change)
            .chain(self.output_changes.values());
        for c in changes {
            collect_marked(&c.before, &c.before_sensitive, &mut out);
            collect_marked(&c.after, &c.after_sensitive, &mut out);
        }
        if let Some(values) = self.prior_state.as_ref().and_then(|p| p.get("values")) {
            if let Some(Value::Object(outputs)) = values.get("outputs") {
                for o in outputs.values() {
                    if o.get("sensitive") == Some(&Value::Bool(true))
                        && let Some(v) = o.get("value")
                    {
                        out.push(v.clone());
                    }
                }
            }
            if let Some(root) = values.get("root_module") {
                collect_module(root, &mut out);
            }
        }
        let declared = self
            .configuration
            .as_ref()
            .and_then(|c| c.pointer("/root_module/variables"))
            .and_then(Value::as_object);
        if let (Some(declared), Some(Value::Object(values))) = (declared, &self.variables) {
            for (name, decl) in declared {
                if decl.get("sensitive") == Some(&Value::Bool(true))
                    && let Some(v) = values.get(name).and_then(|v| v.get("value"))
                {
                    out.push(v.clone());
                }
            }
        }
        out
    }
}

/// `the plan deletes or replaces <N> resource(s): a (delete), b (replace), …`, at most
/// [`MAX_SUMMARY_BYTES`], ending ` and N more` when entries were left out.
pub fn blocked_summary(destructive: &[String]) -> String {
    let mut text = format!(
        "the plan deletes or replaces {} resource(s): ",
        destructive.len()
    );
    for (i, entry) in destructive.iter().enumerate() {
        let piece = if i == 0 {
            entry.clone()
        } else {
            format!(", {entry}")
        };
        let after = destructive.len() - i - 1;
        let reserve = if after > 0 {
            format!(" and {after} more").len()
        } else {
            0
        };
        if text.len() + piece.len() + reserve > MAX_SUMMARY_BYTES {
            let more = format!(" and {} more", destructive.len() - i);
            let mut cut = truncate_str(&text, MAX_SUMMARY_BYTES.saturating_sub(more.len()));
            cut.push_str(&more);
            return cut;
        }
        text.push_str(&piece);
    }
    text
}

/// `s` cut to at most `max` bytes on a character boundary.
pub fn truncate_str(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

fn line(name: &str, actions: &[String], key: &[u8], effect: &Value) -> String {
    format!("{name}|{}|{}", actions.join(","), mac(key, effect))
}

fn mac(key: &[u8], effect: &Value) -> String {
    // HMAC accepts keys of any length; the key length policy is enforced where the key is read.
    let Ok(mut m) = <Hmac<Sha256> as Mac>::new_from_slice(key) else {
        // Only fixed-key-size MACs reject a key; HMAC takes any length.
        unreachable!("HMAC-SHA256 accepts keys of any length")
    };
    m.update(&captf_contract::canonical_json(effect));
    hex::encode(m.finalize().into_bytes())
}

fn effect(change: &Change, kind: ActionKind, moved_from: Option<&str>) -> Value {
    let mut m = Map::new();
    match kind {
        ActionKind::Create | ActionKind::Read => {
            let mut planned = Map::new();
            planned.insert("after".into(), change.after.clone());
            for (k, v) in [
                ("after_unknown", &change.after_unknown),
                ("after_sensitive", &change.after_sensitive),
            ] {
                if !empty_marker(v) {
                    planned.insert(k.into(), v.clone());
                }
            }
            m.insert("planned".into(), Value::Object(planned));
        }
        ActionKind::Delete | ActionKind::Forget | ActionKind::NoOp => {}
        ActionKind::Update | ActionKind::Replace | ActionKind::Other => {
            let mut out = Vec::new();
            diff(
                &mut Vec::new(),
                Some(&change.before),
                Some(&change.after),
                &change.after_unknown,
                &change.before_sensitive,
                &change.after_sensitive,
                &mut out,
            );
            if !out.is_empty() {
                m.insert("changes".into(), Value::Array(out));
            }
        }
    }
    if let Some(importing) = &change.importing {
        m.insert("import".into(), importing.clone());
    }
    if let Some(prev) = moved_from {
        m.insert("moved_from".into(), Value::String(prev.to_owned()));
    }
    Value::Object(m)
}

/// A marker that marks nothing: absent, `null`, `false`, `{}` or `[]`.
fn empty_marker(v: &Value) -> bool {
    match v {
        Value::Null | Value::Bool(false) => true,
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

/// The marker of member `step` of a marker tree (`true` covers the whole subtree).
fn child_marker<'a>(marker: &'a Value, step: &Value) -> &'a Value {
    static NONE: Value = Value::Null;
    match (marker, step) {
        (Value::Bool(true), _) => marker,
        (Value::Object(m), Value::String(k)) => m.get(k).unwrap_or(&NONE),
        (Value::Array(a), Value::Number(n)) => {
            n.as_u64().and_then(|i| a.get(i as usize)).unwrap_or(&NONE)
        }
        _ => &NONE,
    }
}

fn child<'a>(value: Option<&'a Value>, step: &Value) -> Option<&'a Value> {
    match (value?, step) {
        (Value::Object(m), Value::String(k)) => m.get(k),
        (Value::Array(a), Value::Number(n)) => n.as_u64().and_then(|i| a.get(i as usize)),
        _ => None,
    }
}

fn diff(
    path: &mut Vec<Value>,
    before: Option<&Value>,
    after: Option<&Value>,
    unknown: &Value,
    bsens: &Value,
    asens: &Value,
    out: &mut Vec<Value>,
) {
    let entry = |path: &[Value], unknown: bool| {
        let mut e = Map::new();
        e.insert("path".into(), Value::Array(path.to_vec()));
        if let Some(b) = before {
            e.insert("before".into(), b.clone());
        }
        if unknown {
            e.insert("unknown".into(), Value::Bool(true));
        } else if let Some(a) = after {
            e.insert("after".into(), a.clone());
        }
        if !empty_marker(bsens) {
            e.insert("before_sensitive".into(), bsens.clone());
        }
        if !empty_marker(asens) {
            e.insert("after_sensitive".into(), asens.clone());
        }
        Value::Object(e)
    };
    if *unknown == Value::Bool(true) {
        out.push(entry(path, true));
        return;
    }
    let steps: Option<Vec<Value>> = match (before, after) {
        (Some(Value::Object(b)), Some(Value::Object(a))) => {
            let mut keys: Vec<&String> = b.keys().chain(a.keys()).collect();
            if let Value::Object(u) = unknown {
                keys.extend(u.keys());
            }
            keys.sort();
            keys.dedup();
            Some(keys.into_iter().map(|k| Value::String(k.clone())).collect())
        }
        (Some(Value::Array(b)), Some(Value::Array(a))) => {
            let ulen = unknown.as_array().map_or(0, Vec::len);
            let len = b.len().max(a.len()).max(ulen);
            Some((0..len).map(|i| json!(i)).collect())
        }
        _ => None,
    };
    match steps {
        Some(steps) => {
            for step in steps {
                let key = match &step {
                    Value::String(k) => json!({ "k": k }),
                    other => json!({ "i": other }),
                };
                path.push(key);
                diff(
                    path,
                    child(before, &step),
                    child(after, &step),
                    child_marker(unknown, &step),
                    child_marker(bsens, &step),
                    child_marker(asens, &step),
                    out,
                );
                path.pop();
            }
        }
        None => {
            let sens = |m: &Value| (!empty_marker(m)).then(|| m.clone());
            if before != after || sens(bsens) != sens(asens) {
                out.push(entry(path, false));
            }
        }
    }
}

fn collect_marked(value: &Value, marker: &Value, out: &mut Vec<Value>) {
    match (marker, value) {
        (Value::Bool(true), v) if !v.is_null() => out.push(v.clone()),
        (Value::Object(m), Value::Object(v)) => {
            for (k, mk) in m {
                if let Some(child) = v.get(k) {
                    collect_marked(child, mk, out);
                }
            }
        }
        (Value::Array(m), Value::Array(v)) => {
            for (mk, child) in m.iter().zip(v) {
                collect_marked(child, mk, out);
            }
        }
        _ => {}
    }
}

fn collect_module(module: &Value, out: &mut Vec<Value>) {
    if let Some(Value::Array(resources)) = module.get("resources") {
        for r in resources {
            if let (Some(values), Some(marker)) = (r.get("values"), r.get("sensitive_values")) {
                collect_marked(values, marker, out);
            }
        }
    }
    if let Some(Value::Array(children)) = module.get("child_modules") {
        for c in children {
            collect_module(c, out);
        }
    }
}

#[cfg(test)]
mod tests;
