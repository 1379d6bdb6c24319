//! Decodes every fixture file in `tests/fixtures/` and checks its `expect` object, so adding a
//! fixture (e.g. one written by a real engine through the real backend) needs no code.

mod common;

use std::collections::BTreeSet;

use captf_state::{Limits, decode};
use common::{Expect, load_fixtures};

#[test]
fn every_fixture_decodes_as_expected() {
    let fixtures = load_fixtures();
    // An empty folder must not pass silently.
    assert!(
        !fixtures.is_empty(),
        "no *.json fixture in {}",
        common::fixtures_dir().display()
    );
    let mut failures = Vec::new();
    for (path, f) in &fixtures {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let got = decode(&f.base_name(), &f.chunks(), Limits::default());
        let problem = match (&f.expect, got) {
            (Expect::Ok(want), Ok(s)) => {
                let mut p = Vec::new();
                if s.serial != want.serial {
                    p.push(format!("serial {} != {}", s.serial, want.serial));
                }
                if s.managed_resources != want.resources {
                    p.push(format!(
                        "resources {} != {}",
                        s.managed_resources, want.resources
                    ));
                }
                let outputs: BTreeSet<&String> = s.outputs.keys().collect();
                if outputs != want.outputs.iter().collect() {
                    p.push(format!("outputs {outputs:?} != {:?}", want.outputs));
                }
                if let Some(w) = &want.sensitive_outputs
                    && s.sensitive_outputs.iter().collect::<BTreeSet<_>>() != w.iter().collect()
                {
                    p.push(format!("sensitive {:?} != {w:?}", s.sensitive_outputs));
                }
                if let Some(w) = &want.lineage
                    && &s.lineage != w
                {
                    p.push(format!("lineage {} != {w}", s.lineage));
                }
                if let Some(w) = &want.terraform_version
                    && &s.terraform_version != w
                {
                    p.push(format!("terraform_version {} != {w}", s.terraform_version));
                }
                if let Some(w) = &want.inputs_hash
                    && &s.inputs_hash != w
                {
                    p.push(format!("inputs_hash {:?} != {w:?}", s.inputs_hash));
                }
                if let Some(w) = want.chunks
                    && s.chunks != w
                {
                    p.push(format!("chunks {} != {w}", s.chunks));
                }
                p.join("; ")
            }
            (Expect::Ok(_), Err(e)) => format!("expected ok, got {}: {e}", e.reason()),
            (Expect::Error(want), Ok(s)) => format!("expected {want}, decoded serial {}", s.serial),
            (Expect::Error(want), Err(e)) if e.reason() == want => String::new(),
            (Expect::Error(want), Err(e)) => format!("expected {want}, got {}: {e}", e.reason()),
        };
        if !problem.is_empty() {
            failures.push(format!("{name}: {problem}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_hand_made_fixtures_are_there() {
    // Keeps the two synthetic fixtures the runner relies on until real engine fixtures exist.
    let names: Vec<String> = load_fixtures()
        .iter()
        .filter_map(|(p, _)| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .collect();
    for want in ["synthetic-single.json", "synthetic-encrypted.json"] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} missing from {names:?}"
        );
    }
}
