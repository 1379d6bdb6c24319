//! `lint image oci:<dir>`: images written as OCI image layouts, with real tar layers, unpacked
//! and linted.

#![cfg(unix)]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use captf_lint::image::{ImageOptions, lint_image};
use captf_lint::unpack::{UnpackError, oci_layout};
use captf_lint::{EXIT_FINDINGS, EXIT_OK, EXIT_UNPARSABLE, Options, Role};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// One tar entry of a layer.
enum Entry<'a> {
    Dir(&'a str),
    File(&'a str, &'a str, u32),
    Link(&'a str, &'a str),
}

/// An OCI image layout being written.
struct Layout {
    dir: tempfile::TempDir,
}

impl Layout {
    fn new() -> Layout {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir_all(dir.path().join("blobs/sha256")).expect("blobs");
        fs::write(
            dir.path().join("oci-layout"),
            r#"{"imageLayoutVersion":"1.0.0"}"#,
        )
        .expect("oci-layout");
        Layout { dir }
    }

    fn reference(&self) -> String {
        format!("oci:{}", self.dir.path().display())
    }

    fn blob(&self, media_type: &str, body: &[u8]) -> Value {
        let hex = hex::encode(Sha256::digest(body));
        fs::write(self.dir.path().join("blobs/sha256").join(&hex), body).expect("blob");
        json!({"mediaType": media_type, "digest": format!("sha256:{hex}"), "size": body.len()})
    }

    fn blob_path(&self, descriptor: &Value) -> PathBuf {
        let digest = descriptor["digest"].as_str().expect("digest");
        self.dir
            .path()
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:"))
    }

    /// A gzip layer of `entries`, in order.
    fn layer(&self, entries: &[Entry<'_>]) -> Value {
        let mut tar = tar::Builder::new(Vec::new());
        for entry in entries {
            let mut header = tar::Header::new_gnu();
            header.set_uid(65532);
            header.set_gid(65532);
            match entry {
                Entry::Dir(path) => {
                    header.set_entry_type(tar::EntryType::Directory);
                    header.set_mode(0o755);
                    header.set_size(0);
                    tar.append_data(&mut header, path, std::io::empty())
                        .expect("dir");
                }
                Entry::File(path, text, mode) => {
                    header.set_entry_type(tar::EntryType::Regular);
                    header.set_mode(*mode);
                    header.set_size(text.len() as u64);
                    tar.append_data(&mut header, path, text.as_bytes())
                        .expect("file");
                }
                Entry::Link(path, target) => {
                    header.set_entry_type(tar::EntryType::Symlink);
                    header.set_mode(0o777);
                    header.set_size(0);
                    tar.append_link(&mut header, path, target).expect("link");
                }
            }
        }
        let tar = tar.into_inner().expect("tar");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar).expect("gzip");
        self.blob(
            "application/vnd.oci.image.layer.v1.tar+gzip",
            &gz.finish().expect("gzip"),
        )
    }

    /// An image manifest of `layers` with `config` (its `config` section) for `platform`.
    fn image(&self, platform: (&str, &str), config: Value, layers: &[Value]) -> Value {
        let config = self.blob(
            "application/vnd.oci.image.config.v1+json",
            json!({"os": platform.0, "architecture": platform.1, "config": config})
                .to_string()
                .as_bytes(),
        );
        let manifest = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config,
            "layers": layers,
        });
        let mut descriptor = self.blob(
            "application/vnd.oci.image.manifest.v1+json",
            manifest.to_string().as_bytes(),
        );
        descriptor["platform"] = json!({"os": platform.0, "architecture": platform.1});
        descriptor
    }

    fn index(&self, manifests: &[Value]) {
        let index = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests});
        fs::write(self.dir.path().join("index.json"), index.to_string()).expect("index.json");
    }
}

fn opts(role: Role, platform: &str) -> ImageOptions {
    ImageOptions {
        module: Options {
            role: Some(role),
            ..Options::default()
        },
        platform: platform.to_owned(),
    }
}

/// The no-op machine module's files, as layer entries.
fn module_files() -> Vec<(String, String)> {
    let dir = Path::new("../../modules/noop/machine");
    let mut files: Vec<(String, String)> = fs::read_dir(dir)
        .expect("module")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "tf"))
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (
                format!("captf/module/{name}"),
                fs::read_to_string(&p).expect("read"),
            )
        })
        .collect();
    files.sort();
    files
}

fn machine_config() -> Value {
    json!({
        "User": "65532",
        "Labels": {
            "io.captf.role": "machine",
            "io.captf.contract": "v1alpha1",
            "io.captf.runtime": "tofu",
            "io.captf.capacity": r#"{"cpu":"2","memory":"4Gi"}"#,
            "io.captf.node-info": r#"{"architecture":"amd64","operatingSystem":"linux"}"#,
        },
    })
}

/// The base of a module image: a user database, the runtime, the module folder.
fn base(layout: &Layout) -> Value {
    layout.layer(&[
        Entry::Dir("etc"),
        Entry::File(
            "etc/passwd",
            "root:x:0:0:root:/root:/bin/sh\ncaptf:x:65532:65532::/home/captf:/bin/sh\n",
            0o644,
        ),
        Entry::Dir("usr/local/bin"),
        Entry::File("usr/local/bin/tofu", "#!/bin/true\n", 0o755),
        Entry::Dir("captf"),
        Entry::Link("captf/runtime", "/usr/local/bin/tofu"),
        Entry::Dir("captf/module"),
    ])
}

fn module_layer(layout: &Layout) -> Value {
    let files = module_files();
    let entries: Vec<Entry<'_>> = files
        .iter()
        .map(|(path, text)| Entry::File(path, text, 0o644))
        .collect();
    layout.layer(&entries)
}

#[test]
fn the_noop_machine_image_from_a_layout_is_clean() {
    let layout = Layout::new();
    let layers = [base(&layout), module_layer(&layout)];
    let manifest = layout.image(("linux", "amd64"), machine_config(), &layers);
    layout.index(std::slice::from_ref(&manifest));
    assert!(
        captf_lint::unpack::platforms(layout.dir.path())
            .expect("platforms")
            .is_empty(),
        "a single image is no index"
    );
    let o = opts(Role::Machine, "linux/amd64");
    let report = lint_image(&layout.reference(), &o, false);
    assert_eq!(report.exit_code(&o.module), EXIT_OK, "{}", report.to_text());
    assert_eq!(
        report.module,
        format!(
            "{}@{}",
            layout.reference(),
            manifest["digest"].as_str().expect("digest")
        )
    );
}

#[test]
fn layers_apply_in_order_with_their_whiteouts() {
    let layout = Layout::new();
    let lower = layout.layer(&[
        Entry::Dir("captf/work"),
        Entry::File("captf/work/left-over", "x", 0o644),
        Entry::Dir("captf/module"),
        Entry::File("captf/module/old.tf", "variable \"old\" {}\n", 0o644),
        Entry::File("etc/motd", "a large file the checks never read", 0o644),
    ]);
    let upper = layout.layer(&[
        Entry::File("captf/work/.wh.left-over", "", 0o644),
        Entry::Dir("captf/module"),
        Entry::File("captf/module/.wh..wh..opq", "", 0o644),
        Entry::File("captf/module/new.tf", "variable \"new\" {}\n", 0o644),
    ]);
    let manifest = layout.image(("linux", "amd64"), json!({}), &[lower, upper]);
    layout.index(&[manifest]);
    let unpacked = oci_layout(layout.dir.path(), "linux/amd64", false).expect("unpacked");
    let root = unpacked.root();
    assert!(!root.join("captf/work/left-over").exists(), "whited out");
    assert!(root.join("captf/work").is_dir(), "the folder stays");
    assert!(!root.join("captf/module/old.tf").exists(), "opaque folder");
    assert_eq!(
        fs::read_to_string(root.join("captf/module/new.tf")).expect("new.tf"),
        "variable \"new\" {}\n"
    );
    assert_eq!(
        fs::metadata(root.join("etc/motd")).expect("motd").len(),
        0,
        "only what the checks read keeps its content"
    );
    assert_eq!(
        unpacked.owners().get(&root.join("captf/module/new.tf")),
        Some(&(65532, 65532)),
        "the image's owner is recorded, whoever unpacks it"
    );
    assert!(
        unpacked.config.os.is_none(),
        "one image's platform is not checked unless asked"
    );
}

#[test]
fn an_index_gives_the_image_of_the_platform() {
    let layout = Layout::new();
    let layers = [base(&layout), module_layer(&layout)];
    let amd64 = layout.image(("linux", "amd64"), machine_config(), &layers);
    let arm64 = layout.image(("linux", "arm64"), machine_config(), &layers);
    layout.index(&[amd64, arm64.clone()]);

    assert_eq!(
        captf_lint::unpack::platforms(layout.dir.path()).expect("platforms"),
        ["linux/amd64", "linux/arm64"]
    );
    let unpacked = oci_layout(layout.dir.path(), "linux/arm64", false).expect("arm64");
    assert_eq!(unpacked.config.architecture.as_deref(), Some("arm64"));
    assert_eq!(unpacked.digest, arm64["digest"].as_str().expect("digest"));

    let missing = oci_layout(layout.dir.path(), "linux/s390x", true).err();
    assert_eq!(
        missing,
        Some(UnpackError::NoPlatform {
            wanted: "linux/s390x".into(),
            offered: vec!["linux/amd64".into(), "linux/arm64".into()],
        })
    );
    let o = opts(Role::Machine, "linux/s390x");
    let report = lint_image(&layout.reference(), &o, true);
    assert_eq!(report.exit_code(&o.module), EXIT_FINDINGS);
    assert!(
        report.ids().contains("image/platform"),
        "{}",
        report.to_text()
    );
}

#[test]
fn a_single_image_for_another_platform_fails_only_when_the_platform_is_asked_for() {
    let layout = Layout::new();
    let layers = [base(&layout), module_layer(&layout)];
    let manifest = layout.image(("linux", "arm64"), machine_config(), &layers);
    layout.index(&[manifest]);
    let o = opts(Role::Machine, "linux/amd64");
    let unasked = lint_image(&layout.reference(), &o, false);
    assert!(!unasked.ids().contains("image/platform"));
    let asked = lint_image(&layout.reference(), &o, true);
    assert!(
        asked.ids().contains("image/platform"),
        "{}",
        asked.to_text()
    );
}

#[test]
fn what_cannot_be_trusted_is_not_unpacked() {
    // A layer whose bytes do not match its digest.
    let layout = Layout::new();
    let layer = base(&layout);
    let manifest = layout.image(("linux", "amd64"), json!({}), std::slice::from_ref(&layer));
    layout.index(&[manifest]);
    let path = layout.blob_path(&layer);
    let mut bytes = fs::read(&path).expect("layer");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    fs::write(&path, bytes).expect("corrupt");
    let o = opts(Role::Machine, "linux/amd64");
    let report = lint_image(&layout.reference(), &o, false);
    assert_eq!(report.exit_code(&o.module), EXIT_UNPARSABLE);
    assert!(report.to_text().contains("layer 1"), "{}", report.to_text());

    // A path that climbs out of the root.
    let layout = Layout::new();
    let mut tar = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_size(1);
    header.set_mode(0o644);
    // `append_data` refuses `..`; write the name into the header as a hostile tool would.
    header.as_mut_bytes()[..12].copy_from_slice(b"../escape.tf");
    header.set_cksum();
    tar.append(&header, &b"x"[..]).expect("entry");
    let layer = layout.blob(
        "application/vnd.oci.image.layer.v1.tar",
        &tar.into_inner().expect("tar"),
    );
    let manifest = layout.image(("linux", "amd64"), json!({}), &[layer]);
    layout.index(&[manifest]);
    let refused = oci_layout(layout.dir.path(), "linux/amd64", false).err();
    assert!(
        matches!(&refused, Some(UnpackError::Unextractable(why)) if why.contains("leaves the root")),
        "{refused:?}"
    );

    // Not a layout, and a registry reference.
    let report = lint_image("oci:/nonexistent-layout", &o, false);
    assert_eq!(report.exit_code(&o.module), EXIT_UNPARSABLE);
    let report = lint_image("ghcr.io/example/module:v1", &o, false);
    assert_eq!(report.exit_code(&o.module), EXIT_UNPARSABLE);
    assert!(report.to_text().contains("oci:DIR"), "{}", report.to_text());
}

#[test]
fn links_never_carry_files_out_of_the_root() {
    let outside = tempfile::tempdir().expect("outside");
    let target = outside.path().to_str().expect("UTF-8").to_owned();
    let layout = Layout::new();
    let first = layout.layer(&[
        Entry::Link("absolute", &target),
        Entry::Link("relative", "../../../../../../../../.."),
        Entry::Dir("captf/module"),
        Entry::Link("opt/module", "/captf/module"),
    ]);
    let second = layout.layer(&[
        Entry::File("absolute/planted", "x", 0o644),
        Entry::File("relative/tmp/planted", "x", 0o644),
        Entry::File("opt/module/main.tf", "variable \"x\" {}\n", 0o644),
    ]);
    let manifest = layout.image(("linux", "amd64"), json!({}), &[first, second]);
    layout.index(&[manifest]);
    let unpacked = oci_layout(layout.dir.path(), "linux/amd64", false).expect("unpacked");
    assert!(
        !outside.path().join("planted").exists(),
        "written through an absolute link"
    );
    assert!(
        !Path::new("/tmp/planted").exists(),
        "written through a relative link"
    );
    let root = unpacked.root();
    assert!(
        root.join(target.trim_start_matches('/'))
            .join("planted")
            .is_file()
    );
    assert!(root.join("tmp/planted").is_file());
    assert_eq!(
        fs::read_to_string(root.join("captf/module/main.tf")).expect("main.tf"),
        "variable \"x\" {}\n",
        "a module file written through a link keeps its content"
    );
}

#[test]
fn a_folder_entry_over_a_link_never_changes_what_the_link_points_at() {
    use std::os::unix::fs::PermissionsExt;
    let outside = tempfile::tempdir().expect("outside");
    let (first, second) = (outside.path().join("first"), outside.path().join("second"));
    for dir in [&first, &second] {
        fs::create_dir(dir).expect("dir");
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).expect("mode");
    }
    let layout = Layout::new();
    let (first_link, second_link) = (
        first.to_str().expect("path").to_owned(),
        second.to_str().expect("path").to_owned(),
    );
    // A link, then a folder entry of the same path; and a folder that a later layer makes a link.
    let lower = layout.layer(&[
        Entry::Link("x", &first_link),
        Entry::Dir("x"),
        Entry::Dir("y"),
    ]);
    let upper = layout.layer(&[Entry::Link("y", &second_link)]);
    let manifest = layout.image(("linux", "amd64"), json!({}), &[lower, upper]);
    layout.index(&[manifest]);
    let unpacked = oci_layout(layout.dir.path(), "linux/amd64", false).expect("unpacked");
    for dir in [&first, &second] {
        let mode = fs::metadata(dir).expect("outside").permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700, "{} keeps its mode", dir.display());
    }
    let x = fs::symlink_metadata(unpacked.root().join("x")).expect("x");
    assert!(x.is_dir(), "the folder entry replaced the link");
}

#[test]
fn a_folder_below_a_later_link_never_changes_what_the_link_points_at() {
    // Found by the `tar_unpack` fuzz target (docs/fuzzing.md): folder modes are set after the
    // last layer, when a folder above the one a mode was recorded for may have become a link.
    use std::os::unix::fs::PermissionsExt;
    let outside = tempfile::tempdir().expect("outside");
    let inner = outside.path().join("d");
    fs::create_dir(&inner).expect("dir");
    fs::set_permissions(&inner, fs::Permissions::from_mode(0o700)).expect("mode");
    let target = outside.path().to_str().expect("UTF-8").to_owned();
    let layout = Layout::new();
    let lower = layout.layer(&[Entry::Dir("y"), Entry::Dir("y/d")]);
    let upper = layout.layer(&[Entry::Link("y", &target)]);
    let manifest = layout.image(("linux", "amd64"), json!({}), &[lower, upper]);
    layout.index(&[manifest]);
    let unpacked = oci_layout(layout.dir.path(), "linux/amd64", false).expect("unpacked");
    let mode = fs::metadata(&inner).expect("outside").permissions().mode() & 0o7777;
    assert_eq!(mode, 0o700, "{} keeps its mode", inner.display());
    let y = fs::symlink_metadata(unpacked.root().join("y")).expect("y");
    assert!(
        y.file_type().is_symlink(),
        "the upper layer's link replaced the folder"
    );
}
