//! The order of the reconcile's modules, lowest first: a module may use its own layer and
//! those below it, never one above. The pass context is at the bottom; the stores of the
//! Secrets and Leases CAPTF keeps come next (both observe and act use them); then the phases
//! in the order a pass runs them, the adapter contract, the kinds, the interpreter and the
//! flow. A test checks every `crate::reconcile::…` path in the folder against it.

/// Each layer and the top-level modules of `reconcile/` in it.
pub const LAYERS: &[&[&str]] = &[
    &["pass"],
    &["pods", "protection", "leases", "backups"],
    &["observe"],
    &["finished"],
    &["act"],
    &["adapter"],
    &["kinds"],
    &["interpret"],
    &["flow"],
];

/// The layer of a top-level module of `reconcile/`, if it has one (`mod.rs` wires them all).
pub fn layer(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;

    fn sources(dir: &Path, found: &mut Vec<PathBuf>) -> std::io::Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() {
                sources(&path, found)?;
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
        Ok(())
    }

    /// The module of `reconcile/` that `path` (relative to it) belongs to.
    fn module_of(path: &Path) -> String {
        let first = path
            .components()
            .next()
            .map(|c| c.as_os_str().to_string_lossy());
        first.unwrap_or_default().trim_end_matches(".rs").to_owned()
    }

    /// The top-level modules of `reconcile/` a line names, grouped imports included.
    fn uses(line: &str) -> Vec<String> {
        let word = |s: &str| -> String {
            s.trim_start()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect()
        };
        let mut found = Vec::new();
        for (at, _) in line.match_indices("crate::reconcile::") {
            let rest = &line[at + "crate::reconcile::".len()..];
            match rest.strip_prefix('{') {
                Some(group) => {
                    let group = group.split('}').next().unwrap_or_default();
                    found.extend(group.split(',').map(word));
                }
                None => found.push(word(rest)),
            }
        }
        found.retain(|w| !w.is_empty());
        found
    }

    #[test]
    fn a_line_names_the_modules_it_uses() {
        assert_eq!(uses("use crate::reconcile::act::secrets;"), ["act"]);
        assert_eq!(
            uses("use crate::reconcile::{Context, act::secrets, leases};"),
            ["Context", "act", "leases"]
        );
        assert_eq!(
            uses("    K: crate::reconcile::pass::Workload + crate::reconcile::observe::X"),
            ["pass", "observe"]
        );
        assert!(uses("use crate::decide;").is_empty());
    }

    #[test]
    fn no_module_uses_one_above_it() -> anyhow::Result<()> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/reconcile");
        let mut files = Vec::new();
        sources(&root, &mut files)?;
        anyhow::ensure!(
            files.len() > 30,
            "the reconcile sources were not found in {root:?}"
        );
        let mut wrong = Vec::new();
        for file in &files {
            let relative = file.strip_prefix(&root)?;
            let module = module_of(relative);
            let Some(own) = layer(&module) else {
                anyhow::ensure!(
                    matches!(module.as_str(), "mod" | "layers"),
                    "{relative:?}: module {module} has no layer in LAYERS"
                );
                continue;
            };
            let text = std::fs::read_to_string(file)?;
            for (n, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                for used in uses(line) {
                    if layer(&used).is_some_and(|theirs| theirs > own) {
                        wrong.push(format!(
                            "{}:{}: {module} uses {used}",
                            relative.display(),
                            n + 1
                        ));
                    }
                }
            }
        }
        anyhow::ensure!(
            wrong.is_empty(),
            "uses of a higher layer:\n{}",
            wrong.join("\n")
        );
        Ok(())
    }

    #[test]
    fn every_module_has_one_layer() {
        let all: Vec<&str> = LAYERS.iter().flat_map(|l| l.iter().copied()).collect();
        let mut unique = all.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), all.len(), "a module in two layers: {all:?}");
    }
}
