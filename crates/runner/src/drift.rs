//! Drift (concepts §17.1, api.md §4.7): after `apply -refresh-only`, a `plan -refresh=false`
//! that creates, updates, replaces or deletes any resource. Reads, imports, moves, forgets and
//! output-only changes are not drift.

use serde::{Deserialize, Serialize};

use crate::plan::{ActionKind, Plan};

/// Most drifted addresses listed.
pub const MAX_DRIFT_RESOURCES: usize = 20;

/// The drift part of the result document (maps to `status.lastRun.drift`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Drift {
    /// Any resource drifted.
    pub detected: bool,
    /// Resources the plan would create.
    pub create: u32,
    /// Resources the plan would update in place.
    pub update: u32,
    /// Resources the plan would replace.
    pub replace: u32,
    /// Resources the plan would delete.
    pub delete: u32,
    /// The first [`MAX_DRIFT_RESOURCES`] drifted addresses, in plan order.
    #[serde(default)]
    pub resources: Vec<String>,
}

impl Drift {
    /// No drift (a plan without changes).
    pub fn none() -> Self {
        Drift::default()
    }

    /// Counts the drift of a plan.
    pub fn of(plan: &Plan) -> Self {
        let mut d = Drift::none();
        for rc in &plan.resource_changes {
            let counter = match ActionKind::of(&rc.change.actions) {
                ActionKind::Create => &mut d.create,
                ActionKind::Update => &mut d.update,
                ActionKind::Replace => &mut d.replace,
                ActionKind::Delete => &mut d.delete,
                ActionKind::NoOp | ActionKind::Read | ActionKind::Forget | ActionKind::Other => {
                    continue;
                }
            };
            *counter += 1;
            if d.resources.len() < MAX_DRIFT_RESOURCES {
                d.resources.push(rc.address.clone());
            }
        }
        d.detected = d.create + d.update + d.replace + d.delete > 0;
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan(changes: &[(&str, &[&str])], outputs: &[(&str, &[&str])]) -> Plan {
        let rc: Vec<_> = changes
            .iter()
            .map(|(a, actions)| json!({"address": a, "change": {"actions": actions}}))
            .collect();
        let oc: serde_json::Map<String, serde_json::Value> = outputs
            .iter()
            .map(|(n, actions)| ((*n).to_owned(), json!({"actions": actions})))
            .collect();
        let doc = json!({"resource_changes": rc, "output_changes": oc});
        Plan::from_json(doc.to_string().as_bytes()).expect("plan")
    }

    #[test]
    fn drift_table() {
        type Row<'a> = (
            &'a [(&'a str, &'a [&'a str])],
            &'a [(&'a str, &'a [&'a str])],
            [u32; 4],
            &'a [&'a str],
        );
        let rows: &[Row] = &[
            (&[], &[], [0, 0, 0, 0], &[]),
            (
                &[("a.x", &["no-op"])],
                &[("o", &["update"])],
                [0, 0, 0, 0],
                &[],
            ),
            (&[("data.d.x", &["read"])], &[], [0, 0, 0, 0], &[]),
            (&[("a.x", &["forget"])], &[], [0, 0, 0, 0], &[]),
            (&[("a.x", &["create"])], &[], [1, 0, 0, 0], &["a.x"]),
            (&[("a.x", &["update"])], &[], [0, 1, 0, 0], &["a.x"]),
            (
                &[("a.x", &["delete", "create"])],
                &[],
                [0, 0, 1, 0],
                &["a.x"],
            ),
            (
                &[("a.x", &["create", "delete"])],
                &[],
                [0, 0, 1, 0],
                &["a.x"],
            ),
            (&[("a.x", &["delete"])], &[], [0, 0, 0, 1], &["a.x"]),
            (
                &[
                    ("a.x", &["update"]),
                    ("a.y", &["no-op"]),
                    ("a.z", &["delete"]),
                ],
                &[],
                [0, 1, 0, 1],
                &["a.x", "a.z"],
            ),
        ];
        for (changes, outputs, [c, u, r, d], resources) in rows {
            let got = Drift::of(&plan(changes, outputs));
            let want = Drift {
                detected: c + u + r + d > 0,
                create: *c,
                update: *u,
                replace: *r,
                delete: *d,
                resources: resources.iter().map(|s| (*s).to_owned()).collect(),
            };
            assert_eq!(got, want, "{changes:?} {outputs:?}");
        }
    }

    #[test]
    fn lists_at_most_twenty() {
        let names: Vec<String> = (0..25).map(|i| format!("a.r{i:02}")).collect();
        let changes: Vec<(&str, &[&str])> = names
            .iter()
            .map(|n| (n.as_str(), &["update"][..]))
            .collect();
        let d = Drift::of(&plan(&changes, &[]));
        assert_eq!(d.update, 25);
        assert_eq!(d.resources.len(), MAX_DRIFT_RESOURCES);
        assert_eq!(d.resources[0], "a.r00");
    }
}
