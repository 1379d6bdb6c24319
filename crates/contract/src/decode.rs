//! Decoding root outputs read from state into typed contract outputs (api.md §2.4.2).
//!
//! Input: root output name → value, where the caller has already unwrapped
//! Terraform state's `{"value": ..., "type": ...}` to the value. An output
//! absent from the map is undeclared; one mapped to `null` is declared but
//! not yet known. The pool's `replicas` is optional: absent reads as null.
//! Decoding follows the contract shape, not the state type: extra object
//! attributes are ignored and missing required ones are errors.
//!
//! Precedence: any missing output ⇒ `Missing`; else any violation ⇒
//! `Invalid` (all violations collected); else any pending output ⇒
//! `Pending`; else `Valid`.
//!
//! Null handling per output (`pending` = keep waiting, else the normalized value):
//!
//! | role        | output                   | null ⇒                   |
//! |-------------|--------------------------|--------------------------|
//! | all         | `health`                 | pending                  |
//! | cluster     | `control_plane_endpoint` | `None` (allowed forever) |
//! | cluster     | `failure_domains`        | `[]`                     |
//! | cluster     | `exports`                | `{}`                     |
//! | machine     | `provider_id` (or `""`)  | pending                  |
//! | machine     | `addresses`              | pending (`[]` is valid)  |
//! | machine     | `failure_domain`         | `None`                   |
//! | machine     | `interruptible`          | `false`                  |
//! | machinepool | `provider_id` (or `""`)  | `None` (allowed forever) |
//! | machinepool | `provider_id_list`       | pending (`[]` is valid)  |
//! | machinepool | `replicas` (or absent)   | `None` (not reported)    |
//! | machinepool | `instances`              | pending (`[]` is valid)  |

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::canonical::canonicalize_exports;
use crate::error::Error;
use crate::health::{Health, HealthState};
use crate::inputs::Endpoint;
use crate::outputs::{
    Address, AddressType, ClusterOutputs, Decoded, FailureDomain, MAX_POOL_INSTANCES,
    MachineOutputs, MachinePoolOutputs, PoolInstance, RoleOutputs, Violation, required_outputs,
};
use crate::role::Role;

const MAX_FAILURE_DOMAINS: usize = 100;
const MAX_ADDRESSES: usize = 256;
const MAX_PROVIDER_IDS: usize = 10_000;
const PROVIDER_ID_LEN: usize = 512;
const NAME_LEN: usize = 256;
const HOST_LEN: usize = 512;

/// Outputs whose value is optional, so an absent one is not `Missing`. A pool whose scaling
/// group is gone reports no `replicas`, and its other outputs (health above all) must still
/// reach the conditions, as the original contract has it.
const OPTIONAL: [&str; 1] = ["replicas"];

/// Decodes and validates the role's required outputs (see the module docs).
pub fn decode_outputs(role: Role, outputs: &BTreeMap<String, Value>) -> Decoded {
    let missing: Vec<&'static str> = required_outputs(role)
        .iter()
        .copied()
        .filter(|name| !outputs.contains_key(*name) && !OPTIONAL.contains(name))
        .collect();
    if !missing.is_empty() {
        return Decoded::Missing(missing);
    }
    let mut d = Decoder {
        outputs,
        violations: Vec::new(),
        pending: Vec::new(),
    };
    let decoded = match role {
        Role::Cluster => d.cluster().map(RoleOutputs::Cluster),
        Role::Machine => d.machine().map(RoleOutputs::Machine),
        Role::MachinePool => d.pool().map(RoleOutputs::MachinePool),
    };
    if !d.violations.is_empty() {
        return Decoded::Invalid(d.violations);
    }
    match decoded {
        Some(v) if d.pending.is_empty() => Decoded::Valid(v),
        _ => Decoded::Pending(d.pending),
    }
}

struct Decoder<'a> {
    outputs: &'a BTreeMap<String, Value>,
    violations: Vec<Violation>,
    pending: Vec<&'static str>,
}

/// Where a value sits: output name plus the path inside it.
#[derive(Clone)]
struct At {
    output: &'static str,
    field: String,
}

impl At {
    fn key(&self, key: &str) -> At {
        let field = if self.field.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.field)
        };
        At {
            output: self.output,
            field,
        }
    }

    fn index(&self, i: usize) -> At {
        At {
            output: self.output,
            field: format!("{}[{i}]", self.field),
        }
    }
}

static NULL: Value = Value::Null;

impl<'a> Decoder<'a> {
    fn get(&self, name: &'static str) -> &'a Value {
        self.outputs.get(name).unwrap_or(&NULL)
    }

    fn at(name: &'static str) -> At {
        At {
            output: name,
            field: String::new(),
        }
    }

    fn bad<T>(&mut self, at: &At, problem: impl Into<String>) -> Option<T> {
        self.violations.push(Violation {
            output: at.output,
            field: at.field.clone(),
            problem: problem.into(),
        });
        None
    }

    /// `None` and records the output as pending when null.
    fn non_null(&mut self, name: &'static str) -> Option<&'a Value> {
        let v = self.outputs.get(name).filter(|v| !v.is_null());
        if v.is_none() {
            self.pending.push(name);
        }
        v
    }

    fn cluster(&mut self) -> Option<ClusterOutputs> {
        let endpoint = match self.get("control_plane_endpoint") {
            Value::Null => Some(None),
            v => self
                .endpoint(v, &Self::at("control_plane_endpoint"))
                .map(Some),
        };
        let failure_domains = match self.get("failure_domains") {
            Value::Null => Some(Vec::new()),
            v => self.failure_domains(v, &Self::at("failure_domains")),
        };
        let exports = match self.get("exports") {
            Value::Null => Some(Value::Object(Map::new())),
            v => match canonicalize_exports(v) {
                Ok(_) => Some(v.clone()),
                Err(Error::ExportsNotCanonical { path }) => self.bad(
                    &Self::at("exports"),
                    format!(
                        "number at {path:?} is fractional, exponent-form or out of range; exports must be canonicalizable"
                    ),
                ),
                Err(_) => self.bad(&Self::at("exports"), "cannot be canonicalized"),
            },
        };
        let health = self.health();
        Some(ClusterOutputs {
            control_plane_endpoint: endpoint?,
            failure_domains: failure_domains?,
            exports: exports?,
            health: health?,
        })
    }

    fn machine(&mut self) -> Option<MachineOutputs> {
        let provider_id = match self.get("provider_id") {
            Value::Null => self.pend("provider_id"),
            Value::String(s) if s.is_empty() => self.pend("provider_id"),
            v => self.string(v, &Self::at("provider_id"), PROVIDER_ID_LEN),
        };
        let addresses = self
            .non_null("addresses")
            .and_then(|v| self.addresses(v, &Self::at("addresses")));
        let failure_domain = match self.get("failure_domain") {
            Value::Null => Some(None),
            v => self
                .string(v, &Self::at("failure_domain"), NAME_LEN)
                .map(Some),
        };
        let interruptible = match self.get("interruptible") {
            Value::Null => Some(false),
            Value::Bool(b) => Some(*b),
            _ => self.bad(&Self::at("interruptible"), "must be a bool or null"),
        };
        let health = self.health();
        Some(MachineOutputs {
            provider_id: provider_id?,
            addresses: addresses?,
            failure_domain: failure_domain?,
            interruptible: interruptible?,
            health: health?,
        })
    }

    fn pool(&mut self) -> Option<MachinePoolOutputs> {
        let provider_id = match self.get("provider_id") {
            Value::Null => Some(None),
            Value::String(s) if s.is_empty() => Some(None),
            v => self
                .string(v, &Self::at("provider_id"), PROVIDER_ID_LEN)
                .map(Some),
        };
        let provider_id_list = self
            .non_null("provider_id_list")
            .and_then(|v| self.provider_id_list(v));
        let replicas = match self.get("replicas") {
            Value::Null => Some(None),
            v => match v.as_i64().and_then(|n| i32::try_from(n).ok()) {
                Some(n) if n >= 0 => Some(Some(n)),
                _ => self.bad(
                    &Self::at("replicas"),
                    "must be an integer between 0 and 2147483647 or null",
                ),
            },
        };
        let instances = self.non_null("instances").and_then(|v| self.instances(v));
        let health = self.health();
        let (instances, instances_truncated) = instances?;
        Some(MachinePoolOutputs {
            provider_id: provider_id?,
            provider_id_list: provider_id_list?,
            replicas: replicas?,
            instances,
            instances_truncated,
            health: health?,
        })
    }

    fn pend<T>(&mut self, name: &'static str) -> Option<T> {
        self.pending.push(name);
        None
    }

    fn health(&mut self) -> Option<Health> {
        let v = self.non_null("health")?;
        let at = Self::at("health");
        let obj = self.object(v, &at)?;
        let state = match obj.get("state") {
            None | Some(Value::Null) => self.bad(&at.key("state"), "is required"),
            Some(Value::String(s)) => match s.parse::<HealthState>() {
                Ok(state) => Some(state),
                Err(_) => self.bad(
                    &at.key("state"),
                    "must be one of pending, running, degraded, stopped, terminated, unknown",
                ),
            },
            Some(_) => self.bad(&at.key("state"), "must be a string"),
        };
        let healthy = match obj.get("healthy") {
            None | Some(Value::Null) => self.bad(&at.key("healthy"), "is required"),
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => self.bad(&at.key("healthy"), "must be a bool"),
        };
        let message = match obj.get("message") {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(s)) => Some(Some(s.clone())),
            Some(_) => self.bad(&at.key("message"), "must be a string or null"),
        };
        let reasons = match obj.get("reasons") {
            None | Some(Value::Null) => Some(Vec::new()),
            Some(Value::Array(items)) => {
                let mut out = Vec::with_capacity(items.len());
                let mut ok = true;
                for (i, item) in items.iter().enumerate() {
                    match item {
                        Value::String(s) => out.push(s.clone()),
                        _ => {
                            ok = false;
                            self.bad::<()>(&at.key("reasons").index(i), "must be a string");
                        }
                    }
                }
                ok.then_some(out)
            }
            Some(_) => self.bad(&at.key("reasons"), "must be a list of strings or null"),
        };
        Some(Health {
            state: state?,
            healthy: healthy?,
            message: message?,
            reasons: reasons?,
        })
    }

    fn object<'v>(&mut self, v: &'v Value, at: &At) -> Option<&'v Map<String, Value>> {
        match v {
            Value::Object(m) => Some(m),
            _ => self.bad(at, "must be an object"),
        }
    }

    fn array<'v>(&mut self, v: &'v Value, at: &At, max: Option<usize>) -> Option<&'v [Value]> {
        match v {
            Value::Array(items) => match max {
                Some(max) if items.len() > max => self.bad(
                    at,
                    format!("has {} items, at most {max} allowed", items.len()),
                ),
                _ => Some(items),
            },
            _ => self.bad(at, "must be a list"),
        }
    }

    /// A string of 1..=max characters.
    fn string(&mut self, v: &Value, at: &At, max: usize) -> Option<String> {
        match v {
            Value::String(s) => {
                let len = s.chars().count();
                if len == 0 || len > max {
                    self.bad(at, format!("length {len} is outside 1..={max}"))
                } else {
                    Some(s.clone())
                }
            }
            _ => self.bad(at, "must be a string"),
        }
    }

    /// An optional attribute: absent or null ⇒ `None`.
    fn opt_string(
        &mut self,
        obj: &Map<String, Value>,
        key: &str,
        at: &At,
        max: usize,
    ) -> Option<Option<String>> {
        match obj.get(key) {
            None | Some(Value::Null) => Some(None),
            Some(v) => self.string(v, &at.key(key), max).map(Some),
        }
    }

    fn req_string(
        &mut self,
        obj: &Map<String, Value>,
        key: &str,
        at: &At,
        max: usize,
    ) -> Option<String> {
        match obj.get(key) {
            None | Some(Value::Null) => self.bad(&at.key(key), "is required"),
            Some(v) => self.string(v, &at.key(key), max),
        }
    }

    fn endpoint(&mut self, v: &Value, at: &At) -> Option<Endpoint> {
        let obj = self.object(v, at)?;
        let host = self.req_string(obj, "host", at, HOST_LEN);
        let port = match obj.get("port") {
            None | Some(Value::Null) => self.bad(&at.key("port"), "is required"),
            Some(p) => match p.as_i64().and_then(|n| i32::try_from(n).ok()) {
                Some(n) if (1..=65535).contains(&n) => Some(n),
                _ => self.bad(&at.key("port"), "must be an integer between 1 and 65535"),
            },
        };
        Some(Endpoint {
            host: host?,
            port: port?,
        })
    }

    fn failure_domains(&mut self, v: &Value, at: &At) -> Option<Vec<FailureDomain>> {
        let items = self.array(v, at, Some(MAX_FAILURE_DOMAINS))?;
        let mut out = Vec::with_capacity(items.len());
        let mut seen = BTreeSet::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match self.failure_domain(item, &at.index(i)) {
                Some(fd) => {
                    if !seen.insert(fd.name.clone()) {
                        ok = false;
                        self.bad::<()>(
                            &at.index(i).key("name"),
                            "duplicates an earlier failure domain name",
                        );
                    }
                    out.push(fd);
                }
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    fn failure_domain(&mut self, v: &Value, at: &At) -> Option<FailureDomain> {
        let obj = self.object(v, at)?;
        let name = self.req_string(obj, "name", at, NAME_LEN);
        let control_plane = match obj.get("control_plane") {
            None | Some(Value::Null) => Some(true),
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => self.bad(&at.key("control_plane"), "must be a bool or null"),
        };
        let attributes = match obj.get("attributes") {
            None | Some(Value::Null) => Some(BTreeMap::new()),
            Some(Value::Object(m)) => {
                let mut out = BTreeMap::new();
                let mut ok = true;
                for (k, v) in m {
                    match v {
                        Value::String(s) => {
                            out.insert(k.clone(), s.clone());
                        }
                        _ => {
                            ok = false;
                            self.bad::<()>(&at.key("attributes").key(k), "must be a string");
                        }
                    }
                }
                ok.then_some(out)
            }
            Some(_) => self.bad(&at.key("attributes"), "must be a map of strings or null"),
        };
        Some(FailureDomain {
            name: name?,
            control_plane: control_plane?,
            attributes: attributes?,
        })
    }

    fn addresses(&mut self, v: &Value, at: &At) -> Option<Vec<Address>> {
        let items = self.array(v, at, Some(MAX_ADDRESSES))?;
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match self.address(item, &at.index(i)) {
                Some(a) => out.push(a),
                None => ok = false,
            }
        }
        out.sort();
        ok.then_some(out)
    }

    fn address(&mut self, v: &Value, at: &At) -> Option<Address> {
        let obj = self.object(v, at)?;
        let address_type = match obj.get("type") {
            None | Some(Value::Null) => self.bad(&at.key("type"), "is required"),
            Some(Value::String(s)) => match AddressType::parse(s) {
                Some(t) => Some(t),
                None => self.bad(
                    &at.key("type"),
                    "must be one of Hostname, ExternalIP, InternalIP, ExternalDNS, InternalDNS",
                ),
            },
            Some(_) => self.bad(&at.key("type"), "must be a string"),
        };
        let address = self.req_string(obj, "address", at, NAME_LEN);
        Some(Address {
            address_type: address_type?,
            address: address?,
        })
    }

    fn provider_id_list(&mut self, v: &Value) -> Option<Vec<String>> {
        let at = Self::at("provider_id_list");
        let items = self.array(v, &at, None)?;
        let mut set = BTreeSet::new();
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match self.string(item, &at.index(i), PROVIDER_ID_LEN) {
                Some(s) => {
                    set.insert(s);
                }
                None => ok = false,
            }
        }
        // The cap applies to what is written to spec.providerIDList: after de-duplication.
        if set.len() > MAX_PROVIDER_IDS {
            return self.bad(
                &at,
                format!(
                    "has {} distinct items, at most {MAX_PROVIDER_IDS} allowed",
                    set.len()
                ),
            );
        }
        ok.then(|| set.into_iter().collect())
    }

    fn instances(&mut self, v: &Value) -> Option<(Vec<PoolInstance>, bool)> {
        let at = Self::at("instances");
        let items = self.array(v, &at, None)?;
        let mut out = Vec::with_capacity(items.len().min(MAX_POOL_INSTANCES));
        let mut ok = true;
        for (i, item) in items.iter().enumerate() {
            match self.instance(item, &at.index(i)) {
                Some(inst) if out.len() < MAX_POOL_INSTANCES => out.push(inst),
                Some(_) => {}
                None => ok = false,
            }
        }
        ok.then_some((out, items.len() > MAX_POOL_INSTANCES))
    }

    fn instance(&mut self, v: &Value, at: &At) -> Option<PoolInstance> {
        let obj = self.object(v, at)?;
        let provider_id = self.req_string(obj, "provider_id", at, PROVIDER_ID_LEN);
        let instance_id = self.opt_string(obj, "instance_id", at, NAME_LEN);
        let addresses = match obj.get("addresses") {
            None | Some(Value::Null) => Some(Vec::new()),
            Some(a) => self.addresses(a, &at.key("addresses")),
        };
        let failure_domain = self.opt_string(obj, "failure_domain", at, NAME_LEN);
        let state = match obj.get("state") {
            None | Some(Value::Null) => Some(None),
            Some(Value::String(s)) => match s.parse::<HealthState>() {
                Ok(state) => Some(Some(state)),
                Err(_) => self.bad(
                    &at.key("state"),
                    "must be one of pending, running, degraded, stopped, terminated, unknown",
                ),
            },
            Some(_) => self.bad(&at.key("state"), "must be a string"),
        };
        Some(PoolInstance {
            provider_id: provider_id?,
            instance_id: instance_id?,
            addresses: addresses?,
            failure_domain: failure_domain?,
            state: state?,
        })
    }
}
