//! The image recipes: the manager image against the Dockerfile's final stage, and every standard
//! image pushed into a real registry, read back, and run from its exported file system as the
//! image user (OpenTofu and Terraform `version`; `init`, `apply` and `output` of the module with
//! the real `hashicorp/time` provider from the image's mirror; the manager's `version` under both
//! names).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use captf_lint::image::{ImageConfig, ImageOptions};
use captf_lint::{Options, Severity};
use captf_testenv::images::{self, Engine, NONROOT};
use captf_testenv::oci::{Crane, Kind, LAYER_MEDIA_TYPE};
use captf_testenv::tools::Tools;

/// The instructions of the Dockerfile's last stage, continuation lines joined.
fn final_stage(dockerfile: &str) -> Vec<(String, String)> {
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in dockerfile.lines() {
        let line = line.trim();
        if current.is_empty() && (line.is_empty() || line.starts_with('#')) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                let (word, rest) = current.split_once(' ').unwrap_or((&current, ""));
                instructions.push((word.to_uppercase(), rest.trim().to_owned()));
                current.clear();
            }
        }
    }
    let last_from = instructions
        .iter()
        .rposition(|(word, _)| word == "FROM")
        .expect("the Dockerfile has a FROM");
    instructions.split_off(last_from)
}

fn json_list(text: &str) -> Vec<String> {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not a JSON list: {text}: {e}"))
}

#[test]
fn the_manager_image_is_the_dockerfiles_final_stage() {
    let dockerfile = std::fs::read_to_string(images::workspace().join("Dockerfile"))
        .expect("reading the Dockerfile");
    let stage = final_stage(&dockerfile);
    let dir = tempdir("manager-layout");
    let binary = dir.join("captf");
    std::fs::write(&binary, b"\x7fELF stand-in").expect("stand-in binary");
    let image = images::manager_image(&binary).expect("manager image");

    let mut copied = Vec::new();
    for (word, rest) in &stage {
        match word.as_str() {
            "FROM" => assert_eq!(rest, images::MANAGER_BASE, "base image"),
            "COPY" => {
                let args: Vec<&str> = rest
                    .split_whitespace()
                    .filter(|a| !a.starts_with("--"))
                    .collect();
                let (dest, sources) = args.split_last().expect("COPY sources and destination");
                assert_eq!(*dest, "/", "the recipe copies to the root");
                for source in sources {
                    let name = Path::new(source).file_name().expect("file name");
                    copied.push(format!("/{}", name.to_string_lossy()));
                }
            }
            "USER" => assert_eq!(image.config.user.as_deref(), Some(rest.as_str()), "USER"),
            "ENTRYPOINT" => assert_eq!(image.config.entrypoint, json_list(rest), "ENTRYPOINT"),
            "CMD" => assert_eq!(image.config.cmd, json_list(rest), "CMD"),
            other => panic!("the final stage has {other}, which the recipe does not know"),
        }
    }
    assert_eq!(copied, images::MANAGER_PATHS, "the COPY of the final stage");

    // One file under two names: a regular file and a hard link to it, both in the top layer.
    let top = image.layers.last().expect("layers");
    let names: Vec<&str> = top.entries().map(|e| e.path.as_str()).collect();
    assert_eq!(names, ["manager", "runner"]);
    let manager = image.entry("/manager").expect("/manager");
    assert!(matches!(manager.kind, Kind::File(_)));
    assert_eq!((manager.mode, manager.uid), (0o755, 0));
    assert_eq!(
        image.entry("/runner").map(|e| &e.kind),
        Some(&Kind::HardLink("manager".into()))
    );
    let tar = top.write_tar(Vec::new()).expect("tar");
    let mut archive = tar::Archive::new(tar.as_slice());
    let kinds: Vec<(String, tar::EntryType)> = archive
        .entries()
        .expect("entries")
        .map(|e| {
            let e = e.expect("entry");
            (
                e.path().expect("path").display().to_string(),
                e.header().entry_type(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("manager".to_owned(), tar::EntryType::Regular),
            ("runner".to_owned(), tar::EntryType::Link)
        ]
    );

    // What distroless/static:nonroot gives, and nothing to run besides the binary.
    let passwd = match image.entry("/etc/passwd").map(|e| &e.kind) {
        Some(Kind::File(captf_testenv::oci::Content::Bytes(b))) => {
            String::from_utf8_lossy(b).into_owned()
        }
        other => panic!("/etc/passwd: {other:?}"),
    };
    for user in [
        "root:x:0:0:",
        "nobody:x:65534:65534:",
        "nonroot:x:65532:65532:nonroot:/home/nonroot:",
    ] {
        assert!(passwd.contains(user), "{user} in {passwd}");
    }
    let home = image.entry("/home/nonroot").expect("/home/nonroot");
    assert_eq!((home.uid, home.gid), (NONROOT, NONROOT));
    assert_eq!(image.entry("/tmp").map(|e| e.mode), Some(0o1777));
    assert!(image.entry("/etc/ssl/certs/ca-certificates.crt").is_some());
    for absent in ["/bin/sh", "/usr", "/lib", "/lib64"] {
        assert!(
            image.entry(absent).is_none(),
            "{absent} in the manager image"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A registry on loopback with its storage in a temporary folder; stopped when dropped.
struct Registry {
    child: Child,
    dir: PathBuf,
    host: String,
}

impl Registry {
    fn start(tools: &Tools) -> anyhow::Result<Registry> {
        let dir = tempdir("registry");
        let port = captf_testenv::process::free_port()?;
        let host = format!("127.0.0.1:{port}");
        let config = format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {host}\n",
            dir.join("data").display()
        );
        std::fs::write(dir.join("config.yml"), config)?;
        let log = std::fs::File::create(dir.join("registry.log"))?;
        let child = Command::new(&tools.registry)
            .arg("serve")
            .arg(dir.join("config.yml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", tools.registry.display()))?;
        let registry = Registry { child, dir, host };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(&registry.host).is_err() {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the registry did not listen on {} in 30s:\n{}",
                registry.host,
                captf_testenv::control_plane::tail(&registry.dir.join("registry.log"), 20)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(registry)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn tempdir(what: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "captf-images-{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temporary folder");
    dir
}

/// The image's file system, as a container would see it (owners and modes kept: we are root).
fn export(crane: &Crane, reference: &str) -> anyhow::Result<PathBuf> {
    let dir = tempdir("rootfs");
    let tar_path = dir.join("image.tar");
    crane.export(reference, &tar_path)?;
    let root = dir.join("root");
    std::fs::create_dir_all(&root)?;
    let mut archive = tar::Archive::new(std::fs::File::open(&tar_path)?);
    archive.set_preserve_permissions(true);
    archive.set_preserve_ownerships(true);
    archive.set_unpack_xattrs(false);
    archive
        .unpack(&root)
        .with_context(|| format!("unpacking {reference}"))?;
    std::fs::remove_file(&tar_path)?;
    for dir in ["dev", "proc"] {
        std::fs::create_dir_all(root.join(dir))?;
    }
    Ok(root)
}

/// Runs `args` inside `root` as 65532:65532 (the image user), in private mount and pid
/// namespaces with the host's /dev and a fresh /proc, as a container runtime would give it, and
/// in a network namespace of its own with no interface up: whatever an engine installs must come
/// from the image.
fn run_as_image_user(root: &Path, env: &[(&str, &str)], args: &[&str]) -> anyhow::Result<String> {
    let script = r#"set -e
mount --rbind /dev "$1/dev"
mount -t proc proc "$1/proc"
root=$1
shift
exec chroot --userspec=65532:65532 "$root" "$@""#;
    let mut command = Command::new("unshare");
    command
        .args([
            "--mount",
            "--pid",
            "--net",
            "--fork",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
        ])
        .arg(root)
        .args(args)
        .env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .envs(env.iter().copied())
        .stdin(Stdio::null());
    let out = command
        .output()
        .context("running unshare/chroot (needs root)")?;
    anyhow::ensure!(
        out.status.success(),
        "{} in {} exited with {}:\n{}\n{}",
        args.join(" "),
        root.display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The root module the runner would render around the cluster module (`../../module` from
/// `/captf/work/root`), with every contract input set and a one-second `time_sleep`.
const ROOT_MODULE: &str = r#"
module "role" {
  source                    = "../../module"
  captf_contract            = "v1alpha1"
  captf_cluster             = { name = "demo", namespace = "default" }
  captf_object              = { kind = "TerraformCluster", name = "demo", namespace = "default" }
  captf_tags                = {}
  control_plane_initialized = false
  sleep_seconds             = 1
}
output "exports" {
  value = module.role.exports
}
"#;

/// What [`apply_time`] saw.
struct Applied {
    exports: serde_json::Value,
    /// `.terraform.lock.hcl` of the working directory.
    lock: String,
    /// `state list`.
    resources: Vec<String>,
}

/// `init`, `apply`, `output` and `state list` of the time module as the image user, with the CLI
/// config the runner writes (providers from /captf/providers only).
fn apply_time(root: &Path) -> anyhow::Result<Applied> {
    let work = root.join("captf/work");
    std::fs::create_dir_all(work.join("root"))?;
    std::fs::write(work.join("root/main.tf"), ROOT_MODULE)?;
    let cli = captf_runner::prepare::cli_config(Path::new("/captf/providers"));
    std::fs::write(work.join("cli.tfrc"), cli)?;
    // An emptyDir with fsGroup 65532, as the Job mounts it.
    for path in [
        work.clone(),
        work.join("root"),
        work.join("root/main.tf"),
        work.join("cli.tfrc"),
    ] {
        std::os::unix::fs::chown(&path, Some(NONROOT), Some(NONROOT))?;
    }
    let env = [
        ("HOME", "/captf/work"),
        ("TMPDIR", "/tmp"),
        ("TF_CLI_CONFIG_FILE", "/captf/work/cli.tfrc"),
        ("TF_IN_AUTOMATION", "1"),
        ("CHECKPOINT_DISABLE", "1"),
    ];
    let run = |args: &[&str]| {
        let mut all = vec!["/captf/runtime", "-chdir=/captf/work/root"];
        all.extend_from_slice(args);
        run_as_image_user(root, &env, &all)
    };
    run(&["init", "-input=false", "-no-color"])?;
    run(&["apply", "-input=false", "-no-color", "-auto-approve"])?;
    let out = run(&["output", "-json", "exports"])?;
    let exports =
        serde_json::from_str(&out).with_context(|| format!("output -json exports: {out}"))?;
    let resources = run(&["state", "list"])?
        .lines()
        .map(str::to_owned)
        .collect();
    let lock_path = work.join("root/.terraform.lock.hcl");
    let lock = std::fs::read_to_string(&lock_path)
        .with_context(|| format!("reading {}", lock_path.display()))?;
    Ok(Applied {
        exports,
        lock,
        resources,
    })
}

/// The `h1:` hash an engine locks for an unpacked provider directory: Go's dirhash Hash1 (the
/// SHA-256 of the sorted `<sha256 hex>  <relative name>` lines of its files), base64.
fn h1_hash(dir: &Path) -> anyhow::Result<String> {
    use base64::Engine as _;
    use sha2::{Digest, Sha256};
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<anyhow::Result<_>>()?;
    names.sort();
    let mut summary = Sha256::new();
    for name in names {
        let file = Sha256::digest(std::fs::read(dir.join(&name))?);
        summary.update(format!("{}  {name}\n", hex::encode(file)));
    }
    Ok(format!(
        "h1:{}",
        base64::engine::general_purpose::STANDARD.encode(summary.finalize())
    ))
}

/// Checks what [`apply_time`] saw in an image of `engine`: the exports, the one-second
/// `time_sleep`, and a lock file that pins `hashicorp/time` at the mirror's version with the
/// `h1:` hash of the mirror's package (under the engine's default registry host).
fn check_time_apply(root: &Path, engine: Engine, applied: &Applied) -> anyhow::Result<()> {
    let exports = &applied.exports;
    let backend = exports["backend_id"].as_str().unwrap_or_default();
    anyhow::ensure!(
        backend
            .strip_prefix("time-backend-")
            .is_some_and(|id| !id.is_empty()),
        "exports {exports}"
    );
    // time_static's RFC 3339 value, in UTC: 2006-01-02T15:04:05Z.
    let created = exports["created_at"].as_str().unwrap_or_default();
    let shape_ok = created.len() == 20
        && created.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            10 => b == b'T',
            13 | 16 => b == b':',
            19 => b == b'Z',
            _ => b.is_ascii_digit(),
        });
    anyhow::ensure!(
        shape_ok,
        "exports.created_at is not RFC 3339 (UTC): {exports}"
    );
    for resource in [
        "module.role.time_static.created",
        "module.role.time_sleep.wait[0]",
        "module.role.terraform_data.load_balancer",
    ] {
        anyhow::ensure!(
            applied.resources.iter().any(|r| r == resource),
            "{resource} not in the state: {:?}",
            applied.resources
        );
    }

    let host = match engine {
        Engine::Tofu => "registry.opentofu.org",
        Engine::Terraform => "registry.terraform.io",
    };
    let version = images::pin("PROVIDER_TIME_VERSION");
    let version = version.trim_start_matches('v');
    let package = root.join(format!(
        "captf/providers/{host}/hashicorp/time/{version}/linux_amd64"
    ));
    let hash = h1_hash(&package).with_context(|| format!("hashing {}", package.display()))?;
    let lock = &applied.lock;
    let header = format!("provider \"{host}/hashicorp/time\" {{");
    let block = lock
        .split_once(&header)
        .and_then(|(_, rest)| rest.split_once("\n}"))
        .map(|(block, _)| block)
        .with_context(|| format!("no {header} block in .terraform.lock.hcl:\n{lock}"))?;
    let field = |key: &str| {
        block.lines().find_map(|l| {
            let (k, v) = l.split_once('=')?;
            (k.trim() == key).then(|| v.trim().trim_matches('"').to_owned())
        })
    };
    anyhow::ensure!(
        field("version").as_deref() == Some(version),
        "the lock file pins another version than {version}:\n{lock}"
    );
    let hashes: Vec<&str> = block
        .lines()
        .map(|l| l.trim().trim_end_matches(',').trim_matches('"'))
        .filter(|l| l.starts_with("h1:") || l.starts_with("zh:"))
        .collect();
    anyhow::ensure!(
        hashes == [hash.as_str()],
        "the lock file should hold the mirror package's {hash} and nothing else:\n{lock}"
    );
    Ok(())
}

fn lint(root: &Path, config: &serde_json::Value, role: &str) -> captf_lint::Report {
    let inner = &config["config"];
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let image = ImageConfig {
        user: inner["User"].as_str().map(str::to_owned),
        labels: serde_json::from_value(inner["Labels"].clone()).unwrap_or_default(),
        entrypoint: strings(&inner["Entrypoint"]),
        cmd: strings(&inner["Cmd"]),
        os: config["os"].as_str().map(str::to_owned),
        architecture: config["architecture"].as_str().map(str::to_owned),
        variant: None,
    };
    let opts = ImageOptions {
        module: Options {
            role: Some(role.parse().expect("role")),
            strict: true,
            ..Options::default()
        },
        ..ImageOptions::default()
    };
    captf_lint::image::lint_image_dir(root, &image, &opts)
}

#[test]
fn standard_images_run_from_a_registry() {
    let tools = Tools::locate().unwrap_or_else(|e| panic!("{e:#}"));
    let captf_static = images::require_captf_static().unwrap_or_else(|e| panic!("{e:#}"));
    let registry = Registry::start(&tools).expect("registry");
    let crane = Crane::new(&tools.crane);

    let start = Instant::now();
    let pushed = images::push_standard(&tools, &registry.host, &captf_static, "test")
        .unwrap_or_else(|e| panic!("{e:#}"));
    let first = start.elapsed();
    let start = Instant::now();
    let again = images::push_standard(&tools, &registry.host, &captf_static, "test")
        .unwrap_or_else(|e| panic!("{e:#}"));
    let second = start.elapsed();
    assert_eq!(pushed, again, "the same inputs give the same digests");
    eprintln!("push_standard: {first:?}, then {second:?} into the same registry");
    for (name, image) in &pushed {
        eprintln!("  {name}: {} MB, {}", image.size / 1_000_000, image.digest);
    }

    let mut names: Vec<String> = vec!["captf:test".into()];
    for engine in [Engine::Tofu, Engine::Terraform] {
        for module in [
            "noop-cluster",
            "noop-machine",
            "noop-machinepool",
            "time-cluster",
            "example-cluster",
            "example-machine",
            "example-machinepool",
        ] {
            names.push(format!("modules/{module}:{}", engine.tag()));
        }
    }
    let mut listed: Vec<&String> = pushed.keys().collect();
    listed.sort();
    names.sort();
    assert_eq!(listed, names.iter().collect::<Vec<_>>());

    // Manifests and configs as the registry serves them.
    let mut engine_layers: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (name, image) in &pushed {
        let manifest = crane.manifest(&image.pinned()).expect("manifest");
        let layers = manifest["layers"].as_array().expect("layers");
        assert!(
            layers.iter().all(|l| l["mediaType"] == LAYER_MEDIA_TYPE),
            "{name}: uncompressed layers: {manifest}"
        );
        let config = crane.config(&image.reference).expect("config");
        assert_eq!(config["config"]["User"], "65532:65532", "{name}");
        let diff_ids: Vec<&serde_json::Value> = layers.iter().map(|l| &l["digest"]).collect();
        assert_eq!(
            config["rootfs"]["diff_ids"]
                .as_array()
                .expect("diff_ids")
                .iter()
                .collect::<Vec<_>>(),
            diff_ids,
            "{name}: uncompressed, so each diff_id is its layer's digest"
        );
        if let Some(module) = name.strip_prefix("modules/") {
            let labels = &config["config"]["Labels"];
            let runtime = labels["io.captf.runtime"]
                .as_str()
                .expect("runtime label")
                .to_owned();
            assert_eq!(labels["io.captf.contract"], "v1alpha1", "{name}");
            assert!(
                module.contains(labels["io.captf.role"].as_str().unwrap_or("?")),
                "{name}: role label"
            );
            for key in [
                "org.opencontainers.image.source",
                "org.opencontainers.image.revision",
                "org.opencontainers.image.version",
                "io.captf.runtime.version",
                "io.captf.role",
            ] {
                assert!(
                    labels[key].as_str().is_some_and(|v| !v.is_empty()),
                    "{name}: label {key}"
                );
            }
            assert!(
                config["config"]["Entrypoint"].is_null(),
                "{name}: no entrypoint"
            );
            engine_layers
                .entry(runtime)
                .or_default()
                .push(layers[1]["digest"].as_str().expect("digest").to_owned());
        }
    }
    for (runtime, digests) in &engine_layers {
        assert_eq!(digests.len(), 7, "{runtime}");
        assert!(
            digests.windows(2).all(|w| w[0] == w[1]),
            "{runtime} images share the engine layer: {digests:?}"
        );
    }

    // The manager: one static binary under two names, run as nonroot.
    let manager = &pushed["captf:test"];
    let root = export(&crane, &manager.reference).expect("export captf");
    let (m, r) = (
        std::fs::metadata(root.join("manager")).expect("/manager"),
        std::fs::metadata(root.join("runner")).expect("/runner"),
    );
    assert_eq!(m.ino(), r.ino(), "/manager and /runner are one file");
    for name in ["/manager", "/runner"] {
        let out =
            run_as_image_user(&root, &[], &[name, "version"]).unwrap_or_else(|e| panic!("{e:#}"));
        assert!(!out.trim().is_empty(), "{name} version printed nothing");
    }
    remove_export(&root);

    // Every module image: the linter's image checks, and the engine's version as the image user.
    for (name, image) in pushed.iter().filter(|(n, _)| n.starts_with("modules/")) {
        let config = crane.config(&image.reference).expect("config");
        let labels = &config["config"]["Labels"];
        let role = labels["io.captf.role"].as_str().expect("role");
        let root = export(&crane, &image.reference).expect("export");
        let report = lint(&root, &config, role);
        assert!(
            report.count(Severity::Error) == 0 && report.count(Severity::Warning) == 0,
            "{name}: {}",
            report.to_text()
        );
        for dir in images::MOUNT_POINTS {
            let path = root.join(dir.trim_start_matches('/'));
            assert!(
                std::fs::read_dir(&path).is_ok_and(|mut d| d.next().is_none()),
                "{name}: {dir} is an empty directory"
            );
        }
        let out = run_as_image_user(
            &root,
            &[("HOME", "/tmp")],
            &["/captf/runtime", "version", "-json"],
        )
        .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        let version: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("{name}: {out}: {e}"));
        assert_eq!(
            version["terraform_version"], labels["io.captf.runtime.version"],
            "{name}: {out}"
        );
        if name.starts_with("modules/time-cluster") {
            let engine = match labels["io.captf.runtime"].as_str() {
                Some("tofu") => Engine::Tofu,
                Some("terraform") => Engine::Terraform,
                other => panic!("{name}: io.captf.runtime {other:?}"),
            };
            let applied = apply_time(&root).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            check_time_apply(&root, engine, &applied).unwrap_or_else(|e| panic!("{name}: {e:#}"));
        }
        remove_export(&root);
    }
}

/// The module kit's Dockerfiles (modules/Dockerfile.<engine>) build what the project's recipe
/// builds: the engine, the mirror and the module at the contract's paths, its labels, its user,
/// and the engine version of hack/versions.env.
#[test]
fn the_module_kit_dockerfiles_build_what_the_recipe_builds() {
    let tools = Tools::locate().unwrap_or_else(|e| panic!("{e:#}"));
    for (file, engine) in [
        ("Dockerfile.opentofu", Engine::Tofu),
        ("Dockerfile.terraform", Engine::Terraform),
    ] {
        let path = images::workspace().join("modules").join(file);
        let dockerfile = std::fs::read_to_string(&path).expect("the kit's Dockerfile");
        // The engine version: the ARG default, the pin without its "v".
        let pin = engine.version();
        let arg = format!("ARG {}=", engine.version_pin());
        let default = dockerfile
            .lines()
            .find_map(|l| l.trim().strip_prefix(&arg))
            .unwrap_or_else(|| panic!("{file}: no {arg}"));
        assert_eq!(default, pin, "{file}: {arg}");

        let layer = match engine {
            Engine::Tofu => images::tofu_engine(&tools.tofu),
            Engine::Terraform => images::terraform_engine(&tools.terraform),
        }
        .expect("engine layer");
        let recipe = images::module_image(images::ModuleImage {
            role: "cluster",
            module: images::module_layer(
                "example/cluster",
                &images::workspace().join("modules/example/cluster"),
            )
            .expect("module layer"),
            engine: &layer,
            providers: None,
            version: "v1",
            revision: "r",
        })
        .expect("recipe");
        let mut copied = Vec::new();
        let mut labels = BTreeMap::new();
        for (word, rest) in final_stage(&dockerfile) {
            match word.as_str() {
                "FROM" => assert_eq!(rest, images::MANAGER_BASE, "{file}: base image"),
                "ARG" => {}
                "COPY" => copied.push(rest.rsplit(' ').next().expect("destination").to_owned()),
                "LABEL" => {
                    for pair in rest.split_whitespace() {
                        let (k, v) = pair.split_once('=').expect("key=value");
                        labels.insert(k.to_owned(), v.trim_matches('"').to_owned());
                    }
                }
                "USER" => assert_eq!(
                    recipe.config.user.as_deref(),
                    Some(rest.as_str()),
                    "{file}: USER"
                ),
                other => {
                    panic!("{file}: the final stage has {other}, which the recipe does not know")
                }
            }
        }
        assert_eq!(
            copied,
            ["/captf/runtime", "/captf/providers", "/captf/module"],
            "{file}"
        );
        assert_eq!(
            labels["io.captf.contract"],
            captf_contract::VERSION,
            "{file}"
        );
        assert_eq!(labels["io.captf.role"], "${ROLE}", "{file}");
        assert_eq!(labels["io.captf.runtime"], engine.name(), "{file}");
        assert_eq!(
            labels["io.captf.runtime.version"],
            format!("${{{}}}", engine.version_pin()),
            "{file}"
        );
        for key in labels.keys() {
            assert!(
                recipe.config.labels.contains_key(key),
                "{file}: {key} is not the recipe's"
            );
        }
    }
}

#[test]
fn the_time_module_pins_the_provider_build_tools_builds() {
    let version = images::pin("PROVIDER_TIME_VERSION");
    assert!(
        version.starts_with('v'),
        "PROVIDER_TIME_VERSION in hack/versions.env is a Go module version: {version:?}"
    );
    let versions_tf = images::workspace().join("modules/time/cluster/versions.tf");
    let text = std::fs::read_to_string(&versions_tf).expect("versions.tf");
    assert!(
        text.contains(&format!(
            "version = \"{}\"",
            version.trim_start_matches('v')
        )) && text.contains("source  = \"hashicorp/time\""),
        "{} pins hashicorp/time {version}:\n{text}",
        versions_tf.display()
    );
}

fn remove_export(root: &Path) {
    if let Some(dir) = root.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
}
