//! `output/provider-id-list-shape` on whole modules: which filters and wrappers of
//! `provider_id_list` are flagged, with the filter in the output or in a local it reads.

use std::fs;
use std::path::Path;

use captf_lint::{Options, Role, lint_module};

const GOOD: &str = "tests/fixtures/good/machinepool";

/// The good machinepool fixture with `locals` and the `provider_id_list` value replaced.
fn pool(locals: &str, value: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for file in ["variables.tf", "versions.tf"] {
        fs::copy(Path::new(GOOD).join(file), dir.path().join(file)).expect("copy fixture");
    }
    let main = format!(
        r#"locals {{
  members = [for i in range(var.replicas) : {{ id = "noop:///${{var.machinepool_name}}/${{i}}", health = {{ state = "running", healthy = true }} }}]
  ids     = [for m in local.members : m.id]
  {locals}
}}

resource "terraform_data" "group" {{
  input = {{ replicas = var.replicas, tags = var.captf_tags }}
}}
"#
    );
    let outputs = format!(
        r#"output "provider_id" {{
  value = null
}}

output "provider_id_list" {{
  value = {value}
}}

output "replicas" {{
  value = var.replicas
}}

output "instances" {{
  value = []
}}

output "health" {{
  value = {{ state = "running", healthy = true, message = null, reasons = [] }}
}}
"#
    );
    fs::write(dir.path().join("main.tf"), main).expect("write main.tf");
    fs::write(dir.path().join("outputs.tf"), outputs).expect("write outputs.tf");
    dir
}

/// The two warnings of the rule; a clean case expects neither.
#[derive(Debug, PartialEq)]
enum Shape {
    Filtered,
    Unsorted,
}

#[test]
fn provider_id_list_filters_and_sorting() {
    use Shape::*;
    let live = r#"live = [for m in local.members : m.id if m.health.state != "terminated"]"#;
    let running = r#"running = [for m in local.members : m.id if m.health.state == "running"]"#;
    let cases: &[(&str, &str, &str, &[Shape])] = &[
        (
            "terminated filter in a local",
            live,
            "sort(local.live)",
            &[],
        ),
        (
            "terminated filter in the output",
            "",
            r#"sort([for m in local.members : m.id if m.health.state != "terminated"])"#,
            &[],
        ),
        // Locals are not read, as in the original lint.
        (
            "running filter in a local",
            running,
            "sort(local.running)",
            &[],
        ),
        (
            "running filter in the output",
            "",
            r#"sort([for m in local.members : m.id if m.health.state == "running"])"#,
            &[Filtered],
        ),
        (
            "healthy filter in the output",
            "",
            "sort([for m in local.members : m.id if m.health.healthy])",
            &[Filtered],
        ),
        (
            "healthy filter, unsorted",
            "",
            "[for m in local.members : m.id if m.health.healthy]",
            &[Filtered, Unsorted],
        ),
        ("tolist around sort", "", "tolist(sort(local.ids))", &[]),
        ("distinct around sort", "", "distinct(sort(local.ids))", &[]),
        ("parentheses", "", "(sort(local.ids))", &[]),
        (
            "concat of sorted lists",
            live,
            "concat(sort(local.live), sort(local.ids))",
            &[],
        ),
        (
            "conditional with sorted branches",
            live,
            "var.replicas > 0 ? sort(local.live) : sort([])",
            &[],
        ),
        ("bare list", "", "local.ids", &[Unsorted]),
        (
            "distinct without sort",
            "",
            "distinct(local.ids)",
            &[Unsorted],
        ),
        (
            "concat with an unsorted list",
            "",
            "concat(sort(local.ids), local.ids)",
            &[Unsorted],
        ),
        (
            "conditional with an unsorted branch",
            "",
            "var.replicas > 0 ? sort(local.ids) : local.ids",
            &[Unsorted],
        ),
    ];
    let opts = Options {
        role: Some(Role::MachinePool),
        ..Options::default()
    };
    for (name, locals, value, want) in cases {
        let dir = pool(locals, value);
        let report = lint_module(dir.path(), &opts);
        let got: Vec<Shape> = report
            .findings
            .iter()
            .filter(|f| f.id == "output/provider-id-list-shape")
            .map(|f| {
                if f.message.contains("running or healthy") {
                    Filtered
                } else if f.message.contains("not sorted") {
                    Unsorted
                } else {
                    panic!("{name}: unexpected finding {}", f.message)
                }
            })
            .collect();
        assert_eq!(got, *want, "{name}:\n{}", report.to_text());
        // Nothing else fires: the fixture is otherwise clean.
        assert_eq!(
            report.findings.len(),
            got.len(),
            "{name}:\n{}",
            report.to_text()
        );
    }
}
