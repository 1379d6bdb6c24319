//! The module checks (api.md §3.2.2).

use std::collections::{BTreeMap, BTreeSet};

use captf_contract::{RESERVED_PREFIX, Role, input_specs, required_outputs};
use hcl_edit::expr::Expression;
use hcl_edit::visit::{Visit, visit_expr};

use crate::load::{Expr, Loaded, Loc, Module};
use crate::report::{Finding, Severity};
use crate::rules::*;
use crate::types::{Ty, accepts, parse_type_str};

fn at(id: &'static str, severity: Severity, loc: &Loc, message: String) -> Finding {
    Finding {
        id,
        severity,
        file: loc.file.clone(),
        line: loc.line,
        message,
    }
}

/// Attribute names treated as a pool's desired capacity by
/// `pool/autoscaling-ignore-changes` (any of them inside an
/// `ignore_changes` entry, or `ignore_changes = all`, satisfies the rule).
pub const CAPACITY_ATTRIBUTES: [&str; 10] = [
    "desired_capacity",
    "desired_size",
    "desired_count",
    "target_size",
    "size",
    "capacity",
    "instances",
    "instance_count",
    "node_count",
    "replicas",
];

pub fn infer(root: &Module) -> Option<Role> {
    let vars: BTreeSet<&str> = root.variables.iter().map(|v| v.name.as_str()).collect();
    let outs: BTreeSet<&str> = root.outputs.iter().map(|o| o.name.as_str()).collect();
    if vars.contains("machinepool_name") || outs.contains("provider_id_list") {
        Some(Role::MachinePool)
    } else if vars.contains("machine_name") || outs.contains("interruptible") {
        Some(Role::Machine)
    } else if vars.contains("control_plane_initialized")
        || vars.contains("control_plane_endpoint")
        || outs.contains("exports")
    {
        Some(Role::Cluster)
    } else {
        None
    }
}

/// The value type the generated root really passes for a contract input.
fn passed_type(name: &str, type_expr: &str) -> Result<Ty, String> {
    match name {
        "captf_cluster" => parse_type_str("object({name=string, namespace=string})"),
        "captf_object" => parse_type_str("object({kind=string, name=string, namespace=string})"),
        _ => parse_type_str(type_expr),
    }
}

/// Whether `module` uses variable `var` directly, or passes it to a local
/// module that uses the receiving variable (remote modules count as users).
fn uses(loaded: &Loaded, module: usize, var: &str, seen: &mut BTreeSet<(usize, String)>) -> bool {
    if !seen.insert((module, var.to_owned())) {
        return false;
    }
    let m = &loaded.modules[module];
    if m.var_refs.contains(var) {
        return true;
    }
    m.calls.iter().any(|call| {
        call.args
            .iter()
            .filter(|(_, refs)| refs.contains(var))
            .any(|(arg, _)| match call.child {
                Some(child) => uses(loaded, child, arg, seen),
                // Remote (or unresolved) module: assume it uses what it is given.
                None => true,
            })
    })
}

pub fn run(loaded: &Loaded, role: Role) -> Vec<Finding> {
    let mut out = Vec::new();
    let root = &loaded.modules[0];
    inputs(loaded, root, role, &mut out);
    outputs(root, role, &mut out);
    if role == Role::MachinePool {
        autoscaling(loaded, root, &mut out);
    }
    module_checks(loaded, &mut out);
    out
}

fn inputs(loaded: &Loaded, root: &Module, role: Role, out: &mut Vec<Finding>) {
    let specs = input_specs(role);
    let declared: BTreeMap<&str, &crate::load::Variable> = root
        .variables
        .iter()
        .map(|v| (v.name.as_str(), v))
        .collect();

    for spec in specs {
        let Some(var) = declared.get(spec.name) else {
            if spec.name == "captf_tags" {
                out.push(Finding::module(
                    INPUT_TAGS_DECLARED,
                    Severity::Error,
                    "captf_tags is not declared; add `variable \"captf_tags\" { type = map(string) }` and put the tags on every taggable resource",
                ));
            } else {
                out.push(Finding::module(
                    INPUT_REQUIRED,
                    Severity::Error,
                    format!(
                        "contract input {} is not declared; add `variable \"{}\" {{ type = {}{} }}` (the generated root always passes it)",
                        spec.name,
                        spec.name,
                        spec.type_expr,
                        if spec.nullable { ", default = null" } else { "" }
                    ),
                ));
            }
            continue;
        };
        // input/type
        match &var.ty {
            None => out.push(at(
                INPUT_TYPE,
                Severity::Warning,
                &var.loc,
                format!(
                    "contract input {} has no type; declare `type = {}` (or a type that accepts it)",
                    spec.name, spec.type_expr
                ),
            )),
            Some(Err(e)) => out.push(at(
                INPUT_TYPE,
                Severity::Warning,
                &var.loc,
                format!(
                    "type of contract input {} is unreadable ({e}); declare `type = {}` (or a type that accepts it)",
                    spec.name, spec.type_expr
                ),
            )),
            Some(Ok(declared_ty)) => {
                if let Ok(passed) = passed_type(spec.name, spec.type_expr)
                    && let Err(why) = accepts(declared_ty, &passed)
                {
                    out.push(at(
                        INPUT_TYPE,
                        Severity::Error,
                        &var.loc,
                        format!(
                            "contract input {} is declared as {} but the generated root passes {} ({why}); declare `type = {}` or a type that accepts it",
                            spec.name,
                            var.type_text.as_deref().unwrap_or("?"),
                            spec.type_expr,
                            spec.type_expr
                        ),
                    ));
                }
            }
        }
        if spec.nullable && var.nullable == Some(false) {
            out.push(at(
                INPUT_TYPE,
                Severity::Error,
                &var.loc,
                format!(
                    "contract input {} may be null but is declared `nullable = false`; remove `nullable = false` and handle null",
                    spec.name
                ),
            ));
        }
        // input/default: never-null inputs must not have a default.
        // captf_cluster_outputs is exempt: a default (usually null) is
        // harmless there and lets the module run outside CAPTF.
        if !spec.nullable && var.has_default && spec.name != "captf_cluster_outputs" {
            out.push(at(
                INPUT_DEFAULT,
                Severity::Warning,
                &var.loc,
                format!(
                    "contract input {} is always set by the controller but has a default; remove the default",
                    spec.name
                ),
            ));
        }
        if spec.sensitive && !var.sensitive {
            out.push(at(
                INPUT_SENSITIVE,
                Severity::Warning,
                &var.loc,
                format!(
                    "{} lacks `sensitive = true`; add it so plans and logs do not show it",
                    spec.name
                ),
            ));
        }
    }

    let contract: BTreeSet<&str> = specs.iter().map(|s| s.name).collect();
    for var in &root.variables {
        if contract.contains(var.name.as_str()) {
            continue;
        }
        if var.name.starts_with(RESERVED_PREFIX) {
            if role == Role::Cluster && var.name == "captf_cluster_outputs" && var.has_default {
                continue;
            }
            out.push(at(
                INPUT_RESERVED,
                Severity::Error,
                &var.loc,
                format!(
                    "variable {} uses the reserved prefix {RESERVED_PREFIX} but is not a {role} contract input; rename it{}",
                    var.name,
                    if var.name == "captf_cluster_outputs" {
                        " or give it a default"
                    } else {
                        ""
                    }
                ),
            ));
        } else if !var.has_default {
            out.push(at(
                INPUT_USER_VARIABLE_DEFAULT,
                Severity::Warning,
                &var.loc,
                format!(
                    "user variable {} has no default, so every object must set it in spec.variables; add a default",
                    var.name
                ),
            ));
        }
    }

    if let Some(tags) = declared.get("captf_tags")
        && !uses(loaded, 0, "captf_tags", &mut BTreeSet::new())
    {
        out.push(at(
            INPUT_TAGS_UNUSED,
            Severity::Warning,
            &tags.loc,
            "captf_tags is never referenced; put var.captf_tags on every taggable resource (directly or through a local module)".to_owned(),
        ));
    }
}

fn strip_parens(expr: &Expression) -> &Expression {
    match expr {
        Expression::Parenthesis(p) => strip_parens(p.inner()),
        e => e,
    }
}

/// Whether `expr` yields its list in an order fixed by its contents, so identical refreshes give
/// identical lists: `sort(...)`; parentheses, `tolist(X)` or `distinct(X)` around such an X
/// (both keep the order they are given); a conditional whose both branches are such; or
/// `concat(A, B, ...)` of only such lists. A concat of sorted lists is not itself sorted, but
/// its order is still fixed by its arguments' contents, which is what the rule guards (the
/// controller sorts before writing). `distinct(x)` without a sort keeps `x`'s order and does
/// not count; nor does an expanded argument (`f(x...)`).
fn is_sorted(expr: &Expression) -> bool {
    match expr {
        Expression::Parenthesis(p) => is_sorted(p.inner()),
        Expression::Conditional(c) => is_sorted(&c.true_expr) && is_sorted(&c.false_expr),
        Expression::FuncCall(call) if !call.name.is_namespaced() && !call.args.expand_final() => {
            let args = &call.args;
            match call.name.name.as_str() {
                "sort" => true,
                "tolist" | "distinct" => args.len() == 1 && args.iter().all(is_sorted),
                "concat" => !args.is_empty() && args.iter().all(is_sorted),
                _ => false,
            }
        }
        _ => false,
    }
}

/// The member states a `provider_id_list` filter must not select on: listing only running or
/// healthy members drops live Nodes. Matched whole and case-insensitively, so
/// `m.state != "terminated"` (what the contract asks for) and `unhealthy_threshold` pass.
const STATUS_WORDS: [&str; 2] = ["running", "healthy"];

fn is_status_word(s: &str) -> bool {
    STATUS_WORDS
        .iter()
        .any(|w| s.trim().eq_ignore_ascii_case(w))
}

/// Whether `cond` tests a status word: a string literal that is one (`"running"`, also as an
/// index key) or an attribute named one (`m.healthy`).
fn tests_status(cond: &Expression) -> bool {
    struct V(bool);
    impl Visit for V {
        fn visit_expr(&mut self, expr: &Expression) {
            match expr {
                Expression::String(s) if is_status_word(s.as_str()) => self.0 = true,
                Expression::Traversal(t) => {
                    for op in &t.operators {
                        if let hcl_edit::expr::TraversalOperator::GetAttr(name) = op.value()
                            && is_status_word(name.as_str())
                        {
                            self.0 = true;
                        }
                    }
                }
                _ => {}
            }
            visit_expr(self, expr);
        }
    }
    let mut v = V(false);
    v.visit_expr(cond);
    v.0
}

/// Whether a `for` expression inside `expr` keeps members by a status word (`if ...`). Only
/// the output's own expression is read, not the locals it refers to, as the original lint
/// does, so modules written for it (which often filter in a local) lint the same here.
fn filters_on_status(expr: &Expression) -> bool {
    struct V(bool);
    impl Visit for V {
        fn visit_expr(&mut self, expr: &Expression) {
            if let Expression::ForExpr(f) = expr
                && let Some(cond) = &f.cond
                && tests_status(&cond.expr)
            {
                self.0 = true;
            }
            visit_expr(self, expr);
        }
    }
    let mut v = V(false);
    v.visit_expr(expr);
    v.0
}

fn outputs(root: &Module, role: Role, out: &mut Vec<Finding>) {
    let declared: BTreeMap<&str, &crate::load::Output> =
        root.outputs.iter().map(|o| (o.name.as_str(), o)).collect();
    for name in required_outputs(role) {
        if declared.contains_key(name) {
            continue;
        }
        let (id, hint) = match *name {
            "health" => (
                OUTPUT_HEALTH,
                "add `output \"health\" { value = { state = \"running\", healthy = true, message = null, reasons = [] } }` derived from the real resources",
            ),
            "provider_id_list" => (
                OUTPUT_PROVIDER_ID_LIST_SHAPE,
                "add `output \"provider_id_list\" { value = sort(<ids of every non-terminated member>) }`",
            ),
            _ => (
                OUTPUT_REQUIRED,
                "declare it (its value may be null while unknown)",
            ),
        };
        out.push(Finding::module(
            id,
            Severity::Error,
            format!("contract output {name} is not declared; {hint}"),
        ));
    }
    for o in &root.outputs {
        if o.name.starts_with(RESERVED_PREFIX) {
            out.push(at(
                OUTPUT_RESERVED,
                Severity::Warning,
                &o.loc,
                format!(
                    "output {} uses the reserved prefix {RESERVED_PREFIX}; rename it",
                    o.name
                ),
            ));
        }
    }
    if role == Role::Cluster
        && let Some(o) = declared.get("control_plane_endpoint")
    {
        let literal_null = match &o.value {
            Some(Expr::Hcl(e)) => matches!(strip_parens(e), Expression::Null(_)),
            Some(Expr::Json(v)) => v.is_null(),
            None => false,
        };
        if literal_null {
            out.push(at(
                OUTPUT_ENDPOINT_NEVER_SET,
                Severity::Warning,
                &o.loc,
                "control_plane_endpoint is always null, so the cluster only gets an endpoint if the user sets one; output the load balancer's host and port (null only while unknown), or `var.control_plane_endpoint` when set".to_owned(),
            ));
        }
    }
    if role == Role::MachinePool
        && let Some(o) = declared.get("provider_id_list")
        && let Some(Expr::Hcl(value)) = &o.value
    {
        if filters_on_status(value) {
            out.push(at(
                OUTPUT_PROVIDER_ID_LIST_SHAPE,
                Severity::Warning,
                &o.loc,
                "provider_id_list keeps only running or healthy members; list every non-terminated member regardless of health (filtering out terminated ones, e.g. `if m.state != \"terminated\"`, is fine; health goes in instances and health)".to_owned(),
            ));
        }
        if !is_sorted(value) {
            out.push(at(
                OUTPUT_PROVIDER_ID_LIST_SHAPE,
                Severity::Warning,
                &o.loc,
                "provider_id_list value is not sorted; write `value = sort(...)` (parentheses, tolist(), distinct(), concat() of sorted lists or a conditional with sorted branches may wrap it) so the list is stable".to_owned(),
            ));
        }
    }
}

fn autoscaling(loaded: &Loaded, root: &Module, out: &mut Vec<Finding>) {
    if !uses(loaded, 0, "autoscaling", &mut BTreeSet::new()) {
        return;
    }
    let ignored = loaded.modules.iter().flat_map(|m| &m.resources).any(|r| {
        r.ignore_changes.contains("all")
            || CAPACITY_ATTRIBUTES
                .iter()
                .any(|a| r.ignore_changes.contains(*a))
    });
    if ignored {
        return;
    }
    let loc = root
        .variables
        .iter()
        .find(|v| v.name == "autoscaling")
        .map(|v| v.loc.clone())
        .unwrap_or_default();
    out.push(at(
        POOL_AUTOSCALING_IGNORE_CHANGES,
        Severity::Warning,
        &loc,
        format!(
            "the module reads var.autoscaling but no resource lists its desired capacity in lifecycle {{ ignore_changes }}; add it (e.g. `ignore_changes = [desired_capacity]`) so applies do not undo the autoscaler (recognized attributes: {})",
            CAPACITY_ATTRIBUTES.join(", ")
        ),
    ));
}

fn module_checks(loaded: &Loaded, out: &mut Vec<Finding>) {
    for m in &loaded.modules {
        let whose = if m.rel_dir.is_empty() {
            "the module".to_owned()
        } else {
            format!("local module {}", m.rel_dir)
        };
        for loc in &m.backends {
            out.push(at(
                MODULE_BACKEND,
                Severity::Error,
                loc,
                format!(
                    "{whose} declares a terraform backend; remove it (the generated root configures the kubernetes backend)"
                ),
            ));
        }
        for loc in &m.clouds {
            out.push(at(
                MODULE_CLOUD,
                Severity::Error,
                loc,
                format!(
                    "{whose} declares a terraform cloud block; remove it (state lives in the kubernetes backend)"
                ),
            ));
        }
        for c in &m.credentials {
            out.push(at(
                MODULE_PROVIDER_CONFIG,
                Severity::Warning,
                &c.loc,
                format!(
                    "provider {} sets credential argument {} to a literal; remove it and let the provider read the identity's credential files/environment",
                    c.provider, c.argument
                ),
            ));
        }
        for s in &m.shadows {
            let mut diff = Vec::new();
            if !s.only_tofu.is_empty() {
                diff.push(format!(
                    "only in {}: {}",
                    s.tofu_file,
                    s.only_tofu.join(", ")
                ));
            }
            if !s.only_tf.is_empty() {
                diff.push(format!("only in {}: {}", s.tf_file, s.only_tf.join(", ")));
            }
            out.push(at(
                MODULE_TOFU_SHADOW,
                Severity::Warning,
                &Loc {
                    file: s.tofu_file.clone(),
                    line: 0,
                },
                format!(
                    "{} shadows {} under OpenTofu but declares different things ({}); Terraform and OpenTofu would run different modules: keep the declarations identical",
                    s.tofu_file,
                    s.tf_file,
                    diff.join("; ")
                ),
            ));
        }
    }
    for e in &loaded.escapes {
        out.push(at(
            MODULE_SOURCE_ESCAPE,
            Severity::Error,
            &e.loc,
            e.message.clone(),
        ));
    }
    if !loaded.modules[0].has_required_version {
        out.push(Finding::module(
            MODULE_VERSION,
            Severity::Info,
            "no required_version; add `terraform { required_version = \">= 1.5\" }` (or the floor you test)",
        ));
    }
}

#[cfg(test)]
mod tests {
    use hcl_edit::parser::parse_expr;

    use super::*;

    fn expr(src: &str) -> Expression {
        parse_expr(src).unwrap_or_else(|e| panic!("{src}: {e}"))
    }

    #[test]
    fn sorted_wrappers() {
        let cases = [
            // accepted
            ("sort(local.ids)", true),
            ("(sort(local.ids))", true),
            ("((sort(local.ids)))", true),
            ("tolist(sort(local.ids))", true),
            ("distinct(sort(local.ids))", true),
            ("sort(distinct(local.ids))", true),
            ("tolist(distinct((sort(local.ids))))", true),
            ("concat(sort(local.a), sort(local.b))", true),
            ("concat(sort(local.a))", true),
            (
                "concat(tolist(sort(local.a)), distinct(sort(local.b)))",
                true,
            ),
            ("var.on ? sort(local.a) : sort(local.b)", true),
            (
                "(var.on ? (sort(local.a)) : concat(sort(local.b), sort(local.c)))",
                true,
            ),
            (
                "var.on ? sort(local.a) : var.off ? sort(local.b) : tolist(sort(local.c))",
                true,
            ),
            // flagged
            ("local.ids", false),
            ("local.sorted_ids", false),
            ("[\"a\", \"b\"]", false),
            ("[for m in local.members : m.id]", false),
            ("(local.ids)", false),
            ("distinct(local.ids)", false),
            ("tolist(local.ids)", false),
            ("toset(sort(local.ids))", false),
            ("reverse(sort(local.ids))", false),
            ("distinct(sort(local.a), local.b)", false),
            ("concat()", false),
            ("concat(sort(local.a), local.b)", false),
            ("concat(local.a, sort(local.b))", false),
            ("concat(sort(local.lists)...)", false),
            ("var.on ? sort(local.a) : local.b", false),
            ("var.on ? local.a : sort(local.b)", false),
            ("provider::p::sort(local.ids)", false),
        ];
        for (src, want) in cases {
            assert_eq!(is_sorted(&expr(src)), want, "{src}");
        }
    }

    #[test]
    fn status_filters() {
        let cases = [
            // flagged: keeps only running or healthy members
            (
                "sort([for m in local.m : m.id if m.state == \"running\"])",
                true,
            ),
            (
                "sort([for m in local.m : m.id if m.state == \"RUNNING\"])",
                true,
            ),
            ("sort([for m in local.m : m.id if m.health.healthy])", true),
            ("sort([for m in local.m : m.id if m.Healthy == true])", true),
            ("sort([for m in local.m : m.id if m[\"healthy\"]])", true),
            (
                "sort([for m in local.m : m.id if contains([\"running\", \"pending\"], m.state)])",
                true,
            ),
            (
                "sort(flatten([for g in local.g : [for m in g : m.id if m.healthy]]))",
                true,
            ),
            ("[for m in local.m : m.id if m.state == \"running\"]", true),
            // accepted: the contract's terminated filter, other words, no filter
            (
                "sort([for m in local.m : m.id if m.health.state != \"terminated\"])",
                false,
            ),
            (
                "sort([for m in local.m : m.id if m.lifecycle_state != \"Terminated\"])",
                false,
            ),
            (
                "sort([for m in local.m : m.id if m.status != \"terminated\"])",
                false,
            ),
            (
                "sort([for m in local.m : m.id if m.unhealthy_threshold > 0])",
                false,
            ),
            (
                "sort([for m in local.m : m.id if m.group == \"healthy-group\"])",
                false,
            ),
            ("sort([for m in local.m : m.id])", false),
            ("sort([for m in local.m : m.healthy])", false),
            ("sort(local.running)", false),
        ];
        for (src, want) in cases {
            assert_eq!(filters_on_status(&expr(src)), want, "{src}");
        }
    }
}
