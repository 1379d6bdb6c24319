//! Whiteouts that name no file, unpacked with the temporary folder (where `oci_layout` makes
//! its root) pointed at a sandbox, so that an unpacker that followed them would empty the
//! sandbox and not the machine's `/tmp`. Found by the `tar_unpack` fuzz target
//! (docs/fuzzing.md). A binary of its own: the temporary folder is the process's.

#![cfg(unix)]

use std::fs;
use std::io::Write;
use std::path::Path;

use captf_lint::unpack::{UnpackError, oci_layout};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn blob(layout: &Path, media_type: &str, body: &[u8]) -> Value {
    let hex = hex::encode(Sha256::digest(body));
    fs::write(layout.join("blobs/sha256").join(&hex), body).expect("blob");
    json!({"mediaType": media_type, "digest": format!("sha256:{hex}"), "size": body.len()})
}

/// A layout of one image whose one layer holds a folder with a file, then an empty file
/// named `whiteout`.
fn layout_with(dir: &Path, whiteout: &str) {
    fs::create_dir_all(dir.join("blobs/sha256")).expect("blobs");
    fs::write(dir.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#).expect("oci-layout");
    let mut tar = tar::Builder::new(Vec::new());
    for (path, kind) in [
        ("captf", tar::EntryType::Directory),
        ("captf/kept", tar::EntryType::Regular),
        (whiteout, tar::EntryType::Regular),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(kind);
        header.set_mode(0o755);
        header.set_size(0);
        tar.append_data(&mut header, path, std::io::empty())
            .expect("entry");
    }
    let tar = tar.into_inner().expect("tar");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).expect("gzip");
    let layer = blob(
        dir,
        "application/vnd.oci.image.layer.v1.tar+gzip",
        &gz.finish().expect("gzip"),
    );
    let config = blob(
        dir,
        "application/vnd.oci.image.config.v1+json",
        br#"{"os":"linux","architecture":"amd64","config":{}}"#,
    );
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config,
        "layers": [layer],
    });
    let manifest = blob(
        dir,
        "application/vnd.oci.image.manifest.v1+json",
        manifest.to_string().as_bytes(),
    );
    fs::write(
        dir.join("index.json"),
        json!({"schemaVersion": 2, "manifests": [manifest]}).to_string(),
    )
    .expect("index.json");
}

#[test]
fn a_whiteout_of_the_folder_itself_or_its_parent_is_refused() {
    let sandbox = tempfile::tempdir().expect("sandbox");
    let temp = sandbox.path().join("temp");
    fs::create_dir(&temp).expect("temp");
    let bystander = temp.join("bystander");
    fs::write(&bystander, "another program's file").expect("bystander");
    tempfile::env::override_temp_dir(&temp).expect("the temporary folder");

    for whiteout in [".wh...", ".wh..", ".wh.", "captf/.wh...", "captf/.wh.."] {
        let layout = sandbox
            .path()
            .join(format!("layout-{}", whiteout.replace('/', "-")));
        layout_with(&layout, whiteout);
        let got = oci_layout(&layout, "linux/amd64", false);
        assert!(
            bystander.exists(),
            "{whiteout}: a file beside the unpack root was removed"
        );
        match got {
            Err(UnpackError::Unextractable(why)) => {
                assert!(why.contains("a whiteout that names no file"), "{why}")
            }
            Err(e) => panic!("{whiteout}: {e}"),
            Ok(_) => panic!("{whiteout}: unpacked"),
        }
    }
}
