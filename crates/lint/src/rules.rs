//! Rule ids (api.md §3.2.2 module checks, §3.2.3 image checks).

use crate::Severity;

/// One lint rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// Stable id, e.g. `input/required`.
    pub id: &'static str,
    /// Severity of its findings (some rules also emit a second severity, see `summary`).
    pub severity: Severity,
    /// Whether it is a module check (else an image check).
    pub module: bool,
    /// One-line description.
    pub summary: &'static str,
}

macro_rules! ids {
    ($($name:ident = $id:literal;)*) => {
        $(#[doc = concat!("`", $id, "`")] pub const $name: &str = $id;)*
    };
}

ids! {
    INPUT_REQUIRED = "input/required";
    INPUT_TYPE = "input/type";
    INPUT_DEFAULT = "input/default";
    INPUT_SENSITIVE = "input/sensitive";
    INPUT_RESERVED = "input/reserved";
    INPUT_TAGS_DECLARED = "input/tags-declared";
    INPUT_TAGS_UNUSED = "input/tags-unused";
    INPUT_USER_VARIABLE_DEFAULT = "input/user-variable-default";
    OUTPUT_REQUIRED = "output/required";
    OUTPUT_HEALTH = "output/health";
    OUTPUT_RESERVED = "output/reserved";
    OUTPUT_ENDPOINT_NEVER_SET = "output/endpoint-never-set";
    OUTPUT_PROVIDER_ID_LIST_SHAPE = "output/provider-id-list-shape";
    POOL_AUTOSCALING_IGNORE_CHANGES = "pool/autoscaling-ignore-changes";
    MODULE_BACKEND = "module/backend";
    MODULE_CLOUD = "module/cloud";
    MODULE_PROVIDER_CONFIG = "module/provider-config";
    MODULE_SOURCE_ESCAPE = "module/source-escape";
    MODULE_TOFU_SHADOW = "module/tofu-shadow";
    MODULE_VERSION = "module/version";
    IMAGE_MODULE_PRESENT = "image/module-present";
    IMAGE_MODULE_LINK = "image/module-link";
    IMAGE_MODULE_READABLE = "image/module-readable";
    IMAGE_RUNTIME_PRESENT = "image/runtime-present";
    IMAGE_RUNTIME_VERSION = "image/runtime-version";
    IMAGE_RESERVED_PATHS = "image/reserved-paths";
    IMAGE_ENTRYPOINT = "image/entrypoint";
    IMAGE_PLATFORM = "image/platform";
    IMAGE_PROVIDERS_ABSENT = "image/providers-absent";
    IMAGE_PROVIDERS_LAYOUT = "image/providers-layout";
    IMAGE_PROVIDERS_COMPLETE = "image/providers-complete";
    IMAGE_LABEL_ROLE = "image/label-role";
    IMAGE_LABEL_CONTRACT = "image/label-contract";
    IMAGE_LABEL_CAPACITY = "image/label-capacity";
    IMAGE_LABEL_VARIABLES_SCHEMA = "image/label-variables-schema";
    IMAGE_USER_ROOT = "image/user-root";
    IMAGE_USER_UNRESOLVED = "image/user-unresolved";
}

const fn module(id: &'static str, severity: Severity, summary: &'static str) -> Rule {
    Rule {
        id,
        severity,
        module: true,
        summary,
    }
}

const fn image(id: &'static str, severity: Severity, summary: &'static str) -> Rule {
    Rule {
        id,
        severity,
        module: false,
        summary,
    }
}

use Severity::{Error, Info, Warning};

/// Every rule, module checks first, in documentation order.
pub const RULES: &[Rule] = &[
    module(
        INPUT_REQUIRED,
        Error,
        "a contract input of the role is not declared",
    ),
    module(
        INPUT_TYPE,
        Error,
        "declared type does not accept what the generated root passes (warning when the type is missing or unreadable)",
    ),
    module(
        INPUT_DEFAULT,
        Warning,
        "a never-null contract input has a default",
    ),
    module(
        INPUT_SENSITIVE,
        Warning,
        "bootstrap_data lacks sensitive = true",
    ),
    module(
        INPUT_RESERVED,
        Error,
        "a captf_ variable that is not a contract input",
    ),
    module(INPUT_TAGS_DECLARED, Error, "captf_tags is not declared"),
    module(
        INPUT_TAGS_UNUSED,
        Warning,
        "captf_tags is declared but never referenced",
    ),
    module(
        INPUT_USER_VARIABLE_DEFAULT,
        Warning,
        "a non-contract variable has no default",
    ),
    module(OUTPUT_REQUIRED, Error, "a contract output is missing"),
    module(OUTPUT_HEALTH, Error, "the health output is missing"),
    module(
        OUTPUT_RESERVED,
        Warning,
        "an output name starts with captf_",
    ),
    module(
        OUTPUT_ENDPOINT_NEVER_SET,
        Warning,
        "cluster: control_plane_endpoint is a literal null",
    ),
    module(
        OUTPUT_PROVIDER_ID_LIST_SHAPE,
        Error,
        "machinepool: provider_id_list missing (error), or filtered on running/healthy or not sorted (warning)",
    ),
    module(
        POOL_AUTOSCALING_IGNORE_CHANGES,
        Warning,
        "machinepool: var.autoscaling is read but no resource ignores changes to its desired capacity",
    ),
    module(MODULE_BACKEND, Error, "a terraform { backend } block"),
    module(MODULE_CLOUD, Error, "a terraform { cloud } block"),
    module(
        MODULE_PROVIDER_CONFIG,
        Warning,
        "a provider block sets a credential argument to a string literal",
    ),
    module(
        MODULE_SOURCE_ESCAPE,
        Error,
        "a local module call or module file resolves outside the root, or does not resolve",
    ),
    module(
        MODULE_TOFU_SHADOW,
        Warning,
        "a .tofu file shadows a .tf file with different declarations",
    ),
    module(MODULE_VERSION, Info, "no required_version"),
    image(
        IMAGE_MODULE_PRESENT,
        Error,
        "no module file at the top level of /captf/module",
    ),
    image(
        IMAGE_MODULE_LINK,
        Error,
        "a link under /captf/module does not end at a regular file inside it",
    ),
    image(
        IMAGE_MODULE_READABLE,
        Warning,
        "the numeric non-root image user cannot read/traverse some module/mirror paths",
    ),
    image(
        IMAGE_RUNTIME_PRESENT,
        Error,
        "/captf/runtime missing, not a regular file, or not executable by the image user",
    ),
    image(
        IMAGE_RUNTIME_VERSION,
        Warning,
        "the runtime file/link name suggests another runtime than io.captf.runtime",
    ),
    image(
        IMAGE_RESERVED_PATHS,
        Error,
        "files under /captf/work, /captf/bin, /captf/config or /var/run/captf/credentials",
    ),
    image(
        IMAGE_ENTRYPOINT,
        Info,
        "ENTRYPOINT or CMD set (the runner replaces both)",
    ),
    image(
        IMAGE_PLATFORM,
        Error,
        "image not for the requested platform",
    ),
    image(IMAGE_PROVIDERS_ABSENT, Info, "no provider mirror"),
    image(
        IMAGE_PROVIDERS_LAYOUT,
        Error,
        "a mirror entry is neither the packed nor the unpacked layout",
    ),
    image(
        IMAGE_PROVIDERS_COMPLETE,
        Error,
        "broken mirror link, or no package for the platform of a required provider",
    ),
    image(
        IMAGE_LABEL_ROLE,
        Error,
        "io.captf.role unset (info) or different from --role (error)",
    ),
    image(
        IMAGE_LABEL_CONTRACT,
        Warning,
        "io.captf.contract unset (info) or different from --contract (warning)",
    ),
    image(
        IMAGE_LABEL_CAPACITY,
        Error,
        "machine: io.captf.capacity / io.captf.node-info must parse (missing is info)",
    ),
    image(
        IMAGE_LABEL_VARIABLES_SCHEMA,
        Error,
        "io.captf.variables-schema must parse (error) and match the module's variables (warning); unset is fine",
    ),
    image(IMAGE_USER_ROOT, Warning, "the image runs as root"),
    image(
        IMAGE_USER_UNRESOLVED,
        Warning,
        "named user not resolvable; permission checks approximated",
    ),
];

/// The rule with `id`, if any.
pub fn rule(id: &str) -> Option<&'static Rule> {
    RULES.iter().find(|r| r.id == id)
}
