//! `captf manager` flags (spec/operations.md §4) and their start-up validation.

use std::time::Duration;

use clap::Args;

/// Every flag of `captf manager`. Durations take `humantime` syntax (`10m`, `15s`, `1h30m`).
#[derive(Args, Clone, Debug)]
pub struct ManagerArgs {
    /// Restrict the manager to one namespace (empty: all namespaces).
    #[arg(long, default_value = "", help_heading = "Controllers")]
    pub namespace: String,
    /// Reconcile only objects labelled `cluster.x-k8s.io/watch-filter=<value>`.
    #[arg(long, default_value = "", help_heading = "Controllers")]
    pub watch_filter: String,
    /// Upper bound between two passes over an object, even when nothing changed.
    #[arg(long, default_value = "10m", value_parser = humantime::parse_duration, help_heading = "Controllers")]
    pub sync_period: Duration,
    /// Concurrent reconciles of TerraformClusters.
    #[arg(long, default_value_t = 10, help_heading = "Controllers")]
    pub terraformcluster_concurrency: u16,
    /// Concurrent reconciles of TerraformMachines.
    #[arg(long, default_value_t = 10, help_heading = "Controllers")]
    pub terraformmachine_concurrency: u16,
    /// Concurrent reconciles of TerraformMachineTemplates.
    #[arg(long, default_value_t = 10, help_heading = "Controllers")]
    pub terraformmachinetemplate_concurrency: u16,
    /// Concurrent reconciles of TerraformMachinePools.
    #[arg(long, default_value_t = 10, help_heading = "Controllers")]
    pub terraformmachinepool_concurrency: u16,
    /// Bind address of `/healthz` and `/readyz`.
    #[arg(long, default_value = ":9440", help_heading = "Controllers")]
    pub health_addr: String,
    /// Kubeconfig for out-of-cluster runs (else `$KUBECONFIG`, else in-cluster).
    #[arg(long, help_heading = "Controllers")]
    pub kubeconfig: Option<std::path::PathBuf>,

    /// Elect one active replica through a Lease.
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, help_heading = "Leader election")]
    pub leader_elect: bool,
    /// Name of the leader-election Lease (per-namespace managers need distinct names).
    #[arg(
        long,
        default_value = "controller-leader-election-captf",
        help_heading = "Leader election"
    )]
    pub leader_elect_lease_name: String,
    /// How long a non-leader waits before taking an unrenewed Lease.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration, help_heading = "Leader election")]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leadership.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, help_heading = "Leader election")]
    pub leader_elect_renew_deadline: Duration,
    /// Interval between a candidate's attempts.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration, help_heading = "Leader election")]
    pub leader_elect_retry_period: Duration,

    /// Image whose `/runner` the Jobs' init container copies (default `$CAPTF_MANAGER_IMAGE`).
    #[arg(
        long,
        env = "CAPTF_MANAGER_IMAGE",
        default_value = "",
        help_heading = "Runner"
    )]
    pub runner_image: String,
    /// Jobs post runner events on their object.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, help_heading = "Runner")]
    pub runner_events: bool,
    /// Drift interval when neither the object nor its cluster's defaults set one.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration, help_heading = "Runner")]
    pub drift_default_interval: Duration,
    /// A cluster's apply/destroy/restore and its machines' and pools' never overlap.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, help_heading = "Runner")]
    pub cluster_operation_gate: bool,
    /// State backups kept per object (0: take no new backups).
    #[arg(long, default_value_t = 5, help_heading = "Runner")]
    pub state_backups: i64,
    /// Cap on unfinished Jobs across the manager (0: no cap).
    #[arg(long, default_value_t = 200, help_heading = "Runner")]
    pub max_active_jobs: i64,
    /// Cap on unfinished Jobs of one TerraformCluster with its machines and pools (0: no cap).
    #[arg(long, default_value_t = 20, help_heading = "Runner")]
    pub cluster_max_active_jobs: i64,

    /// Bind address of `/metrics`: HTTPS, each scrape authenticated by a TokenReview and
    /// authorized by a SubjectAccessReview (`get` on the non-resource URL `/metrics`).
    #[arg(long, default_value = ":8443", help_heading = "Diagnostics")]
    pub diagnostics_address: String,
    /// Serve `/metrics` over plain HTTP without authentication (development only).
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set, help_heading = "Diagnostics")]
    pub insecure_diagnostics: bool,
    /// Lowest TLS version of the metrics and webhook servers: `VersionTLS12` or `VersionTLS13`.
    #[arg(long, default_value = "VersionTLS12", help_heading = "Diagnostics")]
    pub tls_min_version: String,

    /// Port of the admission webhooks (HTTPS), served by every replica; 0 serves none (a
    /// manager run outside the cluster, with no ValidatingWebhookConfiguration pointing at it).
    #[arg(long, default_value_t = 9443, help_heading = "Webhook server")]
    pub webhook_port: u16,
    /// Directory of the webhook's serving certificate (the cert-manager Secret's mount); the
    /// files are read again when they change.
    #[arg(
        long,
        default_value = "/tmp/k8s-webhook-server/serving-certs/",
        help_heading = "Webhook server"
    )]
    pub webhook_cert_dir: std::path::PathBuf,
    /// Certificate file in `--webhook-cert-dir`.
    #[arg(long, default_value = "tls.crt", help_heading = "Webhook server")]
    pub webhook_cert_name: String,
    /// Private key file in `--webhook-cert-dir`.
    #[arg(long, default_value = "tls.key", help_heading = "Webhook server")]
    pub webhook_key_name: String,

    /// `text` or `json`.
    #[arg(long, default_value = "json", help_heading = "Logging")]
    pub logging_format: String,
    /// Log filter (`RUST_LOG` syntax), e.g. `info` or `captf_controller=debug,info`; wins over
    /// `--v`. Default: from `--v`, else `info`.
    #[arg(long, help_heading = "Logging")]
    pub log_level: Option<String>,
    /// Verbosity as Kubernetes components take it (the Cluster API operator and clusterctl
    /// pass it to every provider): 0 to 2 log at `info`, 3 and 4 at `debug`, 5 and more at
    /// `trace`.
    #[arg(
        short = 'v',
        long = "v",
        value_name = "LEVEL",
        help_heading = "Logging"
    )]
    pub verbosity: Option<u8>,
    /// `Name=true|false,...` as Kubernetes components take it. CAPTF has no feature gates: well-formed
    /// gates are accepted and logged as ignored, so a provider-wide setting does not stop it.
    #[arg(long, value_name = "GATES", help_heading = "Logging")]
    pub feature_gates: Option<String>,
    /// Accepted for the flags every Cluster API provider takes; CAPTF serves no Go profiler, so
    /// a non-empty address is logged as ignored (`host:port` or `:port`).
    #[arg(
        long,
        default_value = "",
        value_name = "ADDRESS",
        help_heading = "Diagnostics"
    )]
    pub profiler_address: String,
}

impl ManagerArgs {
    /// Every start-up problem at once, as the spec's joined error.
    pub fn validate(&self) -> Result<(), String> {
        let mut problems = Vec::new();
        if self.runner_image.is_empty() {
            problems.push("--runner-image is empty and $CAPTF_MANAGER_IMAGE is not set: Jobs need the runner image".to_owned());
        } else if let Err(e) = captf_api::image::parse(&self.runner_image) {
            problems.push(format!("--runner-image {:?}: {e}", self.runner_image));
        }
        for (flag, value) in [
            (
                "--terraformcluster-concurrency",
                self.terraformcluster_concurrency,
            ),
            (
                "--terraformmachine-concurrency",
                self.terraformmachine_concurrency,
            ),
            (
                "--terraformmachinetemplate-concurrency",
                self.terraformmachinetemplate_concurrency,
            ),
            (
                "--terraformmachinepool-concurrency",
                self.terraformmachinepool_concurrency,
            ),
        ] {
            if value < 1 {
                problems.push(format!("{flag} must be at least 1"));
            }
        }
        if self.state_backups < 0 {
            problems.push("--state-backups must be 0 or more".into());
        }
        if self.state_backups > captf_api::MAX_STATE_BACKUPS as i64 {
            problems.push(format!(
                "--state-backups must be at most {}",
                captf_api::MAX_STATE_BACKUPS
            ));
        }
        if self.sync_period.is_zero() {
            problems.push("--sync-period must be more than 0".into());
        }
        if self.drift_default_interval.is_zero() {
            problems.push("--drift-default-interval must be more than 0".into());
        }
        if self.max_active_jobs < 0 {
            problems.push("--max-active-jobs must be 0 (no cap) or more".into());
        }
        if self.cluster_max_active_jobs < 0 {
            problems.push("--cluster-max-active-jobs must be 0 (no cap) or more".into());
        }
        if !matches!(self.logging_format.as_str(), "text" | "json") {
            problems.push(format!(
                "--logging-format {:?}: use text or json",
                self.logging_format
            ));
        }
        if let Some(gates) = &self.feature_gates
            && let Err(e) = feature_gates(gates)
        {
            problems.push(format!("--feature-gates {gates:?}: {e}"));
        }
        if !self.profiler_address.is_empty()
            && self
                .profiler_address
                .rsplit_once(':')
                .is_none_or(|(_, port)| port.parse::<u16>().is_err())
        {
            problems.push(format!(
                "--profiler-address {:?}: use host:port or :port",
                self.profiler_address
            ));
        }
        if let Err(e) = crate::tls::protocol_versions(&self.tls_min_version) {
            problems.push(e);
        }
        if self.leader_elect && self.leader_elect_renew_deadline >= self.leader_elect_lease_duration
        {
            problems.push(
                "--leader-elect-renew-deadline must be shorter than --leader-elect-lease-duration"
                    .into(),
            );
        }
        // A candidate looks at the Lease every retry period: never would not be a candidate,
        // and one that looks less often than the leader renews has no use for the interval.
        if self.leader_elect
            && (self.leader_elect_retry_period.is_zero()
                || self.leader_elect_retry_period >= self.leader_elect_renew_deadline)
        {
            problems.push(
                "--leader-elect-retry-period must be more than 0 and shorter than --leader-elect-renew-deadline"
                    .into(),
            );
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(format!("manager: invalid flags: {}", problems.join("; ")))
        }
    }
}

/// What a reconcile pass takes from the flags, and nothing more of them: a pass cannot
/// depend on how the manager listens, elects or logs.
#[derive(Clone, Debug)]
pub struct PassSettings {
    /// `--sync-period`: the longest a pass waits before it looks again.
    pub sync_period: Duration,
    /// `--drift-default-interval`.
    pub drift_default_interval: Duration,
    /// `--state-backups`: backups kept per object (0: none taken).
    pub state_backups: usize,
    /// `--runner-image`.
    pub runner_image: String,
    /// `--runner-events`.
    pub runner_events: bool,
    /// `--max-active-jobs` and `--cluster-max-active-jobs` (0: no cap).
    pub max_active_jobs: i64,
    pub cluster_max_active_jobs: i64,
    /// `--cluster-operation-gate`.
    pub cluster_operation_gate: bool,
}

/// What the webhook server takes from the flags.
#[derive(Clone, Debug)]
pub struct WebhookServer {
    /// `--webhook-port` (0: serve none).
    pub port: u16,
    pub cert_dir: std::path::PathBuf,
    pub cert_name: String,
    pub key_name: String,
    /// `--tls-min-version`.
    pub tls_min_version: String,
}

impl ManagerArgs {
    /// The log filter: `--log-level`, else the level `--v` stands for, else `info`.
    pub fn log_filter(&self) -> String {
        match (&self.log_level, self.verbosity) {
            (Some(filter), _) => filter.clone(),
            (None, Some(0..=2) | None) => "info".to_owned(),
            (None, Some(3..=4)) => "debug".to_owned(),
            (None, Some(_)) => "trace".to_owned(),
        }
    }

    /// What start-up should say it ignores: the feature gates given beyond the logging gates
    /// of Kubernetes components, and the profiler address.
    pub fn ignored(&self) -> Vec<String> {
        let mut ignored = Vec::new();
        let unknown: Vec<String> = self
            .feature_gates
            .as_deref()
            .map(feature_gates)
            .and_then(Result::ok)
            .unwrap_or_default()
            .into_iter()
            .filter(|(name, _)| !LOGGING_GATES.contains(&name.as_str()))
            .map(|(name, on)| format!("{name}={on}"))
            .collect();
        if !unknown.is_empty() {
            ignored.push(format!(
                "--feature-gates {}: CAPTF has no feature gates",
                unknown.join(",")
            ));
        }
        if !self.profiler_address.is_empty() {
            ignored.push(format!(
                "--profiler-address {}: CAPTF serves no Go profiler (its metrics are on --diagnostics-address)",
                self.profiler_address
            ));
        }
        ignored
    }

    /// The flags a reconcile pass reads.
    pub fn pass(&self) -> PassSettings {
        PassSettings {
            sync_period: self.sync_period,
            drift_default_interval: self.drift_default_interval,
            state_backups: usize::try_from(self.state_backups).unwrap_or(0),
            runner_image: self.runner_image.clone(),
            runner_events: self.runner_events,
            max_active_jobs: self.max_active_jobs,
            cluster_max_active_jobs: self.cluster_max_active_jobs,
            cluster_operation_gate: self.cluster_operation_gate,
        }
    }

    /// The flags the webhook server reads.
    pub fn webhook_server(&self) -> WebhookServer {
        WebhookServer {
            port: self.webhook_port,
            cert_dir: self.webhook_cert_dir.clone(),
            cert_name: self.webhook_cert_name.clone(),
            key_name: self.webhook_key_name.clone(),
            tls_min_version: self.tls_min_version.clone(),
        }
    }
}

/// The feature gates of Kubernetes' logging library (spec/operations.md §4.6): what a
/// component-base manager registers, accepted without a warning.
pub const LOGGING_GATES: &[&str] = &[
    "AllAlpha",
    "AllBeta",
    "ContextualLogging",
    "LoggingAlphaOptions",
    "LoggingBetaOptions",
];

/// The gates of a `--feature-gates` value (`Name=true,Other=false`; empty entries skipped),
/// or what is wrong with it.
pub fn feature_gates(value: &str) -> Result<Vec<(String, bool)>, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|entry| !entry.is_empty())
        .map(|entry| {
            let (name, on) = entry
                .split_once('=')
                .ok_or_else(|| format!("{entry:?} is not Name=true or Name=false"))?;
            let name = name.trim();
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
                return Err(format!(
                    "{name:?} is not a feature gate name (letters and digits)"
                ));
            }
            let on = on
                .trim()
                .parse::<bool>()
                .map_err(|_| format!("{entry:?}: the value must be true or false"))?;
            Ok((name.to_owned(), on))
        })
        .collect()
}

/// The bind address of a Go-style `:port` or `host:port` flag.
pub fn bind_address(flag: &str) -> Result<std::net::SocketAddr, String> {
    let full = if flag.starts_with(':') {
        format!("0.0.0.0{flag}")
    } else {
        flag.to_owned()
    };
    full.parse().map_err(|e| format!("address {flag:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ManagerArgs,
    }

    fn parse(extra: &[&str]) -> ManagerArgs {
        let mut argv = vec!["manager", "--runner-image=ghcr.io/captf-io/captf:v0.1.0"];
        argv.extend_from_slice(extra);
        Cli::try_parse_from(argv).expect("parses").args
    }

    #[test]
    fn defaults_follow_the_spec() {
        let a = parse(&[]);
        assert_eq!(a.sync_period, Duration::from_secs(600));
        assert_eq!(a.drift_default_interval, Duration::from_secs(1800));
        assert_eq!(
            a.leader_elect_lease_name,
            "controller-leader-election-captf"
        );
        assert_eq!(a.leader_elect_lease_duration, Duration::from_secs(15));
        assert_eq!(a.leader_elect_renew_deadline, Duration::from_secs(10));
        assert_eq!(a.leader_elect_retry_period, Duration::from_secs(2));
        assert_eq!(
            (
                a.max_active_jobs,
                a.cluster_max_active_jobs,
                a.state_backups
            ),
            (200, 20, 5)
        );
        assert_eq!(a.health_addr, ":9440");
        assert_eq!(
            (
                a.diagnostics_address.as_str(),
                a.insecure_diagnostics,
                a.tls_min_version.as_str()
            ),
            (":8443", false, "VersionTLS12")
        );
        assert!(a.runner_events && a.cluster_operation_gate && !a.leader_elect);
        assert_eq!(a.validate(), Ok(()));
    }

    #[test]
    fn the_shipped_deployment_args_parse() {
        let a = parse(&[
            "--leader-elect",
            "--diagnostics-address=:8443",
            "--insecure-diagnostics=false",
            "--webhook-port=9443",
        ]);
        assert!(a.leader_elect && !a.insecure_diagnostics);
        assert!(parse(&["--insecure-diagnostics"]).insecure_diagnostics);
        assert!(!parse(&["--leader-elect=false"]).leader_elect);
        let d = parse(&[]);
        assert_eq!(
            (
                d.webhook_port,
                d.webhook_cert_dir.to_str(),
                d.webhook_cert_name.as_str(),
                d.webhook_key_name.as_str()
            ),
            (
                9443,
                Some("/tmp/k8s-webhook-server/serving-certs/"),
                "tls.crt",
                "tls.key"
            )
        );
    }

    #[test]
    fn the_flags_every_provider_gets_are_accepted() {
        let a = parse(&[
            "--v=4",
            "--feature-gates=MachinePool=true,ClusterTopology=false",
            "--profiler-address=localhost:6060",
        ]);
        assert_eq!(a.validate(), Ok(()));
        assert_eq!(a.log_filter(), "debug");
        let ignored = a.ignored();
        assert_eq!(ignored.len(), 2, "{ignored:?}");
        assert!(ignored[0].contains("MachinePool=true,ClusterTopology=false"));
        assert!(ignored[1].contains("localhost:6060"));
        assert!(parse(&[]).ignored().is_empty());
        assert!(
            parse(&["--feature-gates=AllAlpha=false,ContextualLogging=true"])
                .ignored()
                .is_empty(),
            "the logging gates are known"
        );
    }

    #[test]
    fn verbosity_maps_to_a_level_and_log_level_wins() {
        for (flags, filter) in [
            (&[][..], "info"),
            (&["-v", "0"], "info"),
            (&["--v=2"], "info"),
            (&["--v=3"], "debug"),
            (&["-v", "5"], "trace"),
            (&["--v=9", "--log-level=warn"], "warn"),
            (
                &["--log-level=captf_controller=debug,info"],
                "captf_controller=debug,info",
            ),
        ] {
            assert_eq!(parse(flags).log_filter(), filter, "{flags:?}");
        }
    }

    #[test]
    fn feature_gates_are_read_strictly() {
        assert_eq!(feature_gates(""), Ok(vec![]));
        assert_eq!(
            feature_gates("A=true, B=false,"),
            Ok(vec![("A".to_owned(), true), ("B".to_owned(), false)])
        );
        for (bad, says) in [
            ("MachinePool", "is not Name=true"),
            ("MachinePool=yes", "must be true or false"),
            ("=true", "is not a feature gate name"),
            ("Machine-Pool=true", "is not a feature gate name"),
        ] {
            let e = feature_gates(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
        }
        let e = parse(&["--feature-gates=X", "--profiler-address=nowhere"])
            .validate()
            .expect_err("invalid");
        assert!(
            e.contains("--feature-gates \"X\"") && e.contains("--profiler-address"),
            "{e}"
        );
    }

    #[test]
    fn validation_names_every_problem() {
        let mut a = parse(&[
            "--state-backups=-1",
            "--max-active-jobs=-2",
            "--terraformcluster-concurrency=0",
        ]);
        a.runner_image = String::new();
        let err = a.validate().expect_err("invalid");
        for part in [
            "--runner-image is empty",
            "--state-backups",
            "--max-active-jobs",
            "--terraformcluster-concurrency",
        ] {
            assert!(err.contains(part), "{err}");
        }
        assert!(err.starts_with("manager: invalid flags: "));
        let mut bad = parse(&[]);
        bad.runner_image = "Not A Reference".into();
        assert!(
            bad.validate()
                .expect_err("bad image")
                .contains("--runner-image")
        );
    }

    #[test]
    fn election_timings_are_checked_only_with_leader_election() {
        for (flags, problem) in [
            (&["--leader-elect"][..], None),
            (
                &["--leader-elect", "--leader-elect-renew-deadline=15s"],
                Some("--leader-elect-renew-deadline must be shorter"),
            ),
            (
                &["--leader-elect", "--leader-elect-retry-period=0s"],
                Some("--leader-elect-retry-period must be more than 0"),
            ),
            (
                &["--leader-elect", "--leader-elect-retry-period=10s"],
                Some("shorter than --leader-elect-renew-deadline"),
            ),
            (&["--leader-elect-retry-period=0s"], None),
        ] {
            match (parse(flags).validate(), problem) {
                (Ok(()), None) => {}
                (Err(err), Some(says)) => assert!(err.contains(says), "{flags:?}: {err}"),
                (got, want) => panic!("{flags:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn tls_min_versions() {
        for ok in ["VersionTLS12", "VersionTLS13"] {
            assert_eq!(
                parse(&[&format!("--tls-min-version={ok}")]).validate(),
                Ok(())
            );
        }
        for (flag, says) in [
            ("VersionTLS10", "TLS 1.0 and 1.1 are not supported"),
            ("VersionTLS11", "TLS 1.0 and 1.1 are not supported"),
            ("TLS12", "use VersionTLS12 or VersionTLS13"),
            ("", "use VersionTLS12 or VersionTLS13"),
        ] {
            let err = parse(&[&format!("--tls-min-version={flag}")])
                .validate()
                .expect_err(flag);
            assert!(
                err.contains(&format!("--tls-min-version {flag:?}")) && err.contains(says),
                "{err}"
            );
        }
    }

    #[test]
    fn bind_addresses() {
        assert_eq!(bind_address(":9440").expect("ok").port(), 9440);
        assert_eq!(
            bind_address("127.0.0.1:8080").expect("ok").to_string(),
            "127.0.0.1:8080"
        );
        assert!(bind_address("nope").is_err());
    }
}
