//! `captf lint image`: the image read from the user's OCI layout, or from its registry into a
//! temporary one, then linted for one platform or for each platform of an index.

use std::path::Path;

use captf_api::image::ImageReference;
use captf_controller::registry::{Registry, user_auth};
use captf_lint::Report;
use captf_lint::image::{ImageOptions, lint_image};
use captf_lint::unpack;

/// What to lint, as the command line says it.
pub struct Request {
    /// The argument: `oci:<dir>` or a registry reference.
    pub image: String,
    /// The reference parsed, for a registry image.
    pub reference: Option<ImageReference>,
    /// The module options and the platform (the default one unless `explicit`).
    pub options: ImageOptions,
    /// `--platform` was given.
    pub explicit: bool,
    /// `--all-platforms`: every platform of an index, each in its own report.
    pub all_platforms: bool,
    /// `--insecure`.
    pub insecure: bool,
}

/// One report per platform linted (a single image: one report).
pub fn run(request: &Request) -> Vec<Report> {
    let unparsable = |why: String| {
        vec![Report::unparsable(
            &request.image,
            &request.options.module,
            why,
        )]
    };
    // The layout: the user's, or the registry's image copied into a temporary one (removed
    // when `_pulled` goes).
    let (layout, _pulled) = match &request.reference {
        None => (request.image.clone(), None),
        Some(reference) => match pull(reference, request) {
            Ok(dir) => (format!("oci:{}", dir.path().display()), Some(dir)),
            Err(why) => return unparsable(format!("{}: {why}", request.image)),
        },
    };
    let folder = Path::new(layout.trim_start_matches("oci:"));
    let platforms = if request.all_platforms {
        match unpack::platforms(folder) {
            Ok(platforms) => platforms,
            Err(e) => return unparsable(format!("{}: {e}", request.image)),
        }
    } else {
        Vec::new()
    };
    let reports: Vec<Report> = if platforms.is_empty() {
        vec![lint_image(&layout, &request.options, request.explicit)]
    } else {
        platforms
            .into_iter()
            .map(|platform| {
                let options = ImageOptions {
                    platform,
                    ..request.options.clone()
                };
                lint_image(&layout, &options, true)
            })
            .collect()
    };
    reports
        .into_iter()
        .map(|mut report| {
            // A pulled image is named by its reference, not by the temporary layout.
            report.module = report.module.replacen(&layout, &request.image, 1);
            report
        })
        .collect()
}

/// Copies the registry's image into a temporary layout: from an index, the platform's image
/// (or each platform's), with the credentials of the user's auth files.
fn pull(reference: &ImageReference, request: &Request) -> Result<tempfile::TempDir, String> {
    let dir = tempfile::Builder::new()
        .prefix("captf-lint-pull-")
        .tempdir()
        .map_err(|e| format!("a temporary folder: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let registry = Registry::new().map_err(|e| format!("the system's root certificates: {e}"))?;
    let platform = request.options.platform.clone();
    let all = request.all_platforms;
    let select = move |entries: &[serde_json::Value]| {
        if all {
            unpack::every_platform(entries)
        } else {
            unpack::choose(entries, &platform).into_iter().collect()
        }
    };
    runtime.block_on(async {
        let search_path = user_auth::user_search_path();
        let keyring = user_auth::keyring_for(
            &user_auth::auth_files(),
            &reference.registry,
            search_path.as_deref(),
        )
        .await
        .map_err(|e| format!("reading the registry credentials: {e}"))?;
        registry
            .copy_to_layout(reference, &keyring, request.insecure, dir.path(), &select)
            .await
            .map_err(|e| e.to_string())
    })?;
    Ok(dir)
}

/// The reports as the command prints them: text one after the other; JSON one object, or an
/// array of them for `--all-platforms`.
pub fn render(reports: &[Report], json: bool, all_platforms: bool) -> String {
    match (json, all_platforms) {
        (false, _) => reports.iter().map(Report::to_text).collect(),
        (true, false) => reports.iter().map(Report::to_json).collect(),
        (true, true) => {
            let all: Vec<serde_json::Value> = reports.iter().map(Report::to_json_value).collect();
            format!(
                "{}\n",
                serde_json::to_string_pretty(&all).unwrap_or_default()
            )
        }
    }
}
