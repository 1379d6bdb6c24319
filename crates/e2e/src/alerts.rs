//! The shipped alert rules (config/prometheus/rules.yaml) evaluated by promtool over samples a
//! test scraped from a real manager: an alert that fires on what the manager really exports.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, bail};

/// promtool, as `hack/build-tools.sh` installs it.
fn promtool() -> anyhow::Result<PathBuf> {
    let bin = std::env::var_os("CAPTF_BIN").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/captf/bin"),
        PathBuf::from,
    );
    let path = bin.join("promtool");
    if !path.is_file() {
        bail!(
            "{} is missing: run `hack/build-tools.sh promtool`",
            path.display()
        );
    }
    Ok(path)
}

/// One series as scraped: `name{labels}` exactly as exported, and its values one scrape apart.
pub struct Scraped {
    pub series: String,
    pub values: Vec<f64>,
}

/// Whether `alert` fires with `labels` (among its others) `at_minutes` after the first sample,
/// when the shipped rules see `series` sampled once a minute. An error says what promtool
/// reported.
pub fn fires(
    series: &[Scraped],
    alert: &str,
    labels: &[(&str, &str)],
    at_minutes: u32,
) -> anyhow::Result<()> {
    let rules: serde_json::Value = serde_yaml::from_str(
        &std::fs::read_to_string(crate::workspace().join("config/prometheus/rules.yaml"))
            .context("config/prometheus/rules.yaml")?,
    )?;
    let mut rule = rules["spec"]["groups"][0]["rules"]
        .as_array()
        .and_then(|r| r.iter().find(|r| r["alert"] == alert))
        .with_context(|| format!("no alert {alert} in config/prometheus/rules.yaml"))?
        .clone();
    // What fires is the expression and its labels; the annotations are held to their text by
    // config/prometheus/tests/rules_test.yaml, so this rule file goes without them.
    if let Some(rule) = rule.as_object_mut() {
        rule.remove("annotations");
    }
    let mut exp_labels: serde_json::Map<String, serde_json::Value> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).into()))
        .collect();
    if let Some(severity) = rule["labels"]["severity"].as_str() {
        exp_labels.insert("severity".into(), severity.into());
    }
    let input_series: Vec<serde_json::Value> = series
        .iter()
        .map(|s| {
            let values: Vec<String> = s.values.iter().map(f64::to_string).collect();
            serde_json::json!({"series": s.series, "values": values.join(" ")})
        })
        .collect();
    let test = serde_json::json!({
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": input_series,
            "alert_rule_test": [{
                "eval_time": format!("{at_minutes}m"),
                "alertname": alert,
                "exp_alerts": [{"exp_labels": exp_labels}],
            }],
        }],
    });
    let dir = tempfile::tempdir()?;
    let file = serde_json::json!({"groups": [{"name": "captf", "rules": [rule]}]});
    std::fs::write(dir.path().join("rules.yaml"), serde_json::to_string(&file)?)?;
    std::fs::write(dir.path().join("test.yaml"), serde_json::to_string(&test)?)?;
    let out = Command::new(promtool()?)
        .args(["test", "rules", "test.yaml"])
        .current_dir(dir.path())
        .output()
        .context("running promtool")?;
    if !out.status.success() {
        bail!(
            "{alert} does not fire as expected:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
