//! What a condition reason means and what to do about it, read from the table of
//! docs/reference/conditions.md, the same words the docs give: the table is compiled in, so the
//! plugin and the page cannot disagree.

use std::collections::BTreeMap;

const TABLE: &str = include_str!("../../../../docs/reference/conditions.md");

/// One row of the table, for one reason.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Advice {
    /// What the reason means.
    pub meaning: String,
    /// What to do about it (`—` when nothing).
    pub what_to_do: String,
}

/// Every (condition type, reason) of the table's first section (the workload kinds).
pub fn table() -> &'static BTreeMap<(String, String), Advice> {
    static TABLE_ROWS: std::sync::OnceLock<BTreeMap<(String, String), Advice>> =
        std::sync::OnceLock::new();
    TABLE_ROWS.get_or_init(|| parse(TABLE))
}

/// The advice for a reason of a condition type, if the table has it.
pub fn lookup(condition: &str, reason: &str) -> Option<&'static Advice> {
    table().get(&(condition.to_owned(), reason.to_owned()))
}

/// Reads the rows `| Condition | Status / reason | Meaning | What to do |` up to the first
/// `## ` heading; an empty Condition cell continues the one above.
fn parse(markdown: &str) -> BTreeMap<(String, String), Advice> {
    let mut rows = BTreeMap::new();
    let mut condition = String::new();
    for line in markdown.lines() {
        if line.starts_with("## ") {
            break;
        }
        let Some(inner) = line.strip_prefix('|').and_then(|l| l.strip_suffix('|')) else {
            continue;
        };
        let cells: Vec<&str> = inner.split(" | ").map(str::trim).collect();
        let [first, reasons, meaning, what_to_do] = cells[..] else {
            continue;
        };
        if first == "Condition" || first.starts_with("---") {
            continue;
        }
        if !first.is_empty() {
            condition = first.to_owned();
        }
        for reason in backticked(reasons) {
            rows.entry((condition.clone(), reason.to_owned()))
                .or_insert_with(|| Advice {
                    meaning: meaning.to_owned(),
                    what_to_do: what_to_do.to_owned(),
                });
        }
    }
    rows
}

/// The `backticked` words of a cell, in order.
fn backticked(cell: &str) -> impl Iterator<Item = &str> {
    cell.split('`').skip(1).step_by(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_continue_the_condition_above_and_split_reasons() {
        let md = "\
| Condition | Status / reason | Meaning | What to do |
| --- | --- | --- | --- |
| Ready | True / `Ready` | Fine. | — |
| | False / `NotReady` | Held. | Follow it. |
| StateReadable | False / `StateCorrupt`, `StateInconsistent` | Broken. | Restore. |
| X | True / `A`; False / `B` | Either. | Look. |

## TerraformMachineTemplate

| Condition | Status / reason | Meaning | What to do |
| Later | True / `Later` | Not read. | — |
";
        let rows = parse(md);
        let get = |c: &str, r: &str| rows.get(&(c.to_owned(), r.to_owned())).cloned();
        assert_eq!(
            get("Ready", "NotReady").expect("row").what_to_do,
            "Follow it."
        );
        assert_eq!(
            get("StateReadable", "StateInconsistent")
                .expect("row")
                .meaning,
            "Broken."
        );
        assert!(get("X", "A").is_some() && get("X", "B").is_some());
        assert!(get("Later", "Later").is_none(), "only the first section");
        assert_eq!(rows.len(), 6);
    }

    #[test]
    fn the_docs_table_has_the_reasons_an_operator_meets_most() {
        for (condition, reason) in [
            ("Ready", "NotReady"),
            ("StateReadable", "StateCorrupt"),
            ("StateReadable", "StateLineageMismatch"),
            ("ApplyJobSucceeded", "PlanAwaitingApproval"),
            ("ApplyJobSucceeded", "DestructivePlanBlocked"),
            ("IdentityAllowed", "NamespaceNotAllowed"),
            ("DependenciesReady", "VariablesInvalid"),
        ] {
            let advice =
                lookup(condition, reason).unwrap_or_else(|| panic!("{condition}/{reason}"));
            assert!(!advice.what_to_do.is_empty(), "{condition}/{reason}");
        }
    }
}
