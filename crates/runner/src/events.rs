//! Progress Events (api.md §4.8): with `--event-object`, the runner posts `events.k8s.io/v1`
//! Events about the object that owns its Job (`RunStarted`, `StepStarted`, `StepSucceeded`,
//! `StepFailed`, `PlanSummary`, `ResourcesChanged`, `RunFinished`), related to the Job, so that
//! `kubectl events --for` on the object shows what the run is doing while it runs.
//!
//! Best effort, and never in the run's way: the run hands each Event to a background task and
//! goes on; every request gets [`POST_WITHIN`], and after [`MAX_FAILURES`] failures in a row
//! the task stops posting for the rest of the run. Notes are built from counts, step names and
//! the redacted failure summary only, and are redacted again by the caller.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::plan::truncate_str;

/// The `reportingController` of every runner Event (`kubectl events -o wide`, SOURCE).
pub const REPORTING_CONTROLLER: &str = "captf.io/runner";

/// The after-prepare Event: operation, image, engine version.
pub const RUN_STARTED: &str = "RunStarted";
/// Before each step.
pub const STEP_STARTED: &str = "StepStarted";
/// After a step that succeeded: exit code and seconds.
pub const STEP_SUCCEEDED: &str = "StepSucceeded";
/// A failed step, with the curated failure summary (never raw engine output).
pub const STEP_FAILED: &str = "StepFailed";
/// A plan the run read: counts only.
pub const PLAN_SUMMARY: &str = "PlanSummary";
/// What an apply or destroy step changed: counts only.
pub const RESOURCES_CHANGED: &str = "ResourcesChanged";
/// The end of every run that got its Events started: result and duration.
pub const RUN_FINISHED: &str = "RunFinished";

/// Bound of one request.
pub const POST_WITHIN: Duration = Duration::from_secs(2);
/// Failures in a row after which the run posts no more Events.
pub const MAX_FAILURES: u32 = 3;
/// How long the end of the run waits for Events still queued (`RunFinished` among them).
const FLUSH_WITHIN: Duration = Duration::from_secs(3);

/// API limits (`events.k8s.io/v1` validation): the note, and the action and instance.
const MAX_NOTE: usize = 1024;
const MAX_FIELD: usize = 128;
/// Keeps `<name>.<hex>` within a DNS subdomain name.
const MAX_NAME_PREFIX: usize = 200;

/// The object Events are about: `--event-object`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventObject {
    /// `group/version` (it holds a slash itself).
    pub api_version: String,
    /// The kind, e.g. `TerraformCluster`.
    pub kind: String,
    /// Its namespace: where the Events are created.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its UID: Events name this very object, not a later one of the same name.
    pub uid: String,
}

impl EventObject {
    /// Parses `<apiVersion>/<kind>/<namespace>/<name>/<uid>`; the apiVersion may hold a slash,
    /// so the last four fields are read from the right.
    pub fn parse(flag: &str) -> Result<Self, String> {
        let mut fields = flag.rsplitn(5, '/');
        let (uid, name, namespace, kind, api_version) = (
            fields.next().unwrap_or_default(),
            fields.next().unwrap_or_default(),
            fields.next().unwrap_or_default(),
            fields.next().unwrap_or_default(),
            fields.next().unwrap_or_default(),
        );
        if [api_version, kind, namespace, name, uid]
            .iter()
            .any(|f| f.is_empty())
        {
            return Err(format!(
                "--event-object {flag:?}: want <apiVersion>/<kind>/<namespace>/<name>/<uid>, every field set"
            ));
        }
        Ok(EventObject {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
        })
    }

    fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some(self.api_version.clone()),
            kind: Some(self.kind.clone()),
            namespace: Some(self.namespace.clone()),
            name: Some(self.name.clone()),
            uid: Some(self.uid.clone()),
            ..ObjectReference::default()
        }
    }
}

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Progress.
    Normal,
    /// A failure.
    Warning,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Normal => "Normal",
            Severity::Warning => "Warning",
        }
    }
}

/// One Event the run reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// Normal or Warning.
    pub severity: Severity,
    /// One of the reasons above.
    pub reason: &'static str,
    /// The operation or step it is about.
    pub action: String,
    /// The text (already redacted).
    pub text: String,
}

/// Where the Events go, and from whom.
#[derive(Debug, Clone)]
pub struct Source {
    /// The object they are about.
    pub about: EventObject,
    /// The Job (the related object), when `--job-name` is set.
    pub job: Option<String>,
    /// The reporting instance: the pod's name.
    pub instance: String,
}

/// The Event for `note`, the `seq`-th of the run (strictly increasing: it names the Event),
/// at `at`.
pub fn event(source: &Source, seq: u64, at: Timestamp, note: &Note) -> Event {
    let about = &source.about;
    let mut prefix = truncate_str(&about.name, MAX_NAME_PREFIX);
    // A cut name may end in a separator, which may not come before the dot.
    prefix.truncate(prefix.trim_end_matches(['-', '.']).len());
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{prefix}.{seq:x}")),
            namespace: Some(about.namespace.clone()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(at)),
        reporting_controller: Some(REPORTING_CONTROLLER.to_owned()),
        reporting_instance: Some(truncate_str(&source.instance, MAX_FIELD)),
        action: Some(truncate_str(&note.action, MAX_FIELD)),
        reason: Some(note.reason.to_owned()),
        regarding: Some(about.reference()),
        related: source.job.as_ref().map(|job| ObjectReference {
            api_version: Some("batch/v1".to_owned()),
            kind: Some("Job".to_owned()),
            namespace: Some(about.namespace.clone()),
            name: Some(job.clone()),
            ..ObjectReference::default()
        }),
        note: Some(truncate_str(&note.text, MAX_NOTE)),
        type_: Some(note.severity.as_str().to_owned()),
        ..Event::default()
    }
}

/// The run's Event channel. Without `--event-object`, or outside a cluster, it drops what it
/// is given.
pub struct Progress {
    queue: Option<mpsc::UnboundedSender<Note>>,
    poster: Option<JoinHandle<()>>,
}

impl Progress {
    /// Drops every Event.
    pub fn off() -> Self {
        Progress {
            queue: None,
            poster: None,
        }
    }

    /// Events about `--event-object`, posted with the pod's in-cluster credentials (the
    /// ServiceAccount the state backend uses too). Off, with the reason logged, when the flag
    /// is empty or unusable or the pod has no in-cluster configuration.
    pub fn in_cluster(event_object: &str, job: &str, instance: &str) -> Self {
        if event_object.is_empty() {
            return Progress::off();
        }
        let about = match EventObject::parse(event_object) {
            Ok(about) => about,
            Err(error) => {
                tracing::warn!(%error, "progress Events are off");
                return Progress::off();
            }
        };
        let client = kube::Config::incluster()
            .map_err(|e| e.to_string())
            .and_then(|config| kube::Client::try_from(config).map_err(|e| e.to_string()));
        match client {
            Ok(client) => Progress::to(
                client,
                Source {
                    about,
                    job: Some(job.to_owned()).filter(|j| !j.is_empty()),
                    instance: instance.to_owned(),
                },
            ),
            Err(error) => {
                tracing::warn!(%error, "progress Events are off: no in-cluster configuration");
                Progress::off()
            }
        }
    }

    /// Events from `source`, posted through `client`.
    pub fn to(client: kube::Client, source: Source) -> Self {
        let (queue, notes) = mpsc::unbounded_channel();
        let poster = tokio::spawn(post(client, source, notes));
        Progress {
            queue: Some(queue),
            poster: Some(poster),
        }
    }

    /// Queues one Event; never waits.
    pub fn emit(&self, severity: Severity, reason: &'static str, action: &str, text: String) {
        if let Some(queue) = &self.queue {
            let _ = queue.send(Note {
                severity,
                reason,
                action: action.to_owned(),
                text,
            });
        }
    }

    /// Waits, up to a few seconds, for the queued Events to be posted.
    pub async fn finish(mut self) {
        self.queue = None;
        if let Some(poster) = self.poster.take()
            && tokio::time::timeout(FLUSH_WITHIN, poster).await.is_err()
        {
            tracing::warn!("progress Events still queued at the end of the run were dropped");
        }
    }
}

/// Posts the queued notes in order until the queue closes, or stops after [`MAX_FAILURES`]
/// failures in a row.
async fn post(client: kube::Client, source: Source, mut notes: mpsc::UnboundedReceiver<Note>) {
    let events: Api<Event> = Api::namespaced(client, &source.about.namespace);
    let mut failures = 0;
    let mut last = 0u64;
    while let Some(note) = notes.recv().await {
        let at = Timestamp::now();
        // Unique names without a read: nanoseconds, made strictly increasing.
        let seq = u64::try_from(at.as_nanosecond())
            .unwrap_or_default()
            .max(last + 1);
        last = seq;
        let posted = tokio::time::timeout(
            POST_WITHIN,
            events.create(&PostParams::default(), &event(&source, seq, at, &note)),
        )
        .await;
        let error = match posted {
            Ok(Ok(_)) => {
                failures = 0;
                continue;
            }
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {POST_WITHIN:?}"),
        };
        failures += 1;
        if failures == 1 {
            tracing::warn!(reason = note.reason, %error, "posting a progress Event failed; the run goes on");
        }
        if failures >= MAX_FAILURES {
            tracing::warn!(
                failures,
                "progress Events failed repeatedly; none are posted for the rest of the run"
            );
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UID: &str = "0b5a5b52-52f1-4d27-b7b4-45c7d1ea3a5e";

    #[test]
    fn the_event_object_is_read_from_the_right() {
        let flag =
            format!("infrastructure.cluster.x-k8s.io/v1alpha1/TerraformCluster/team-a/c1/{UID}");
        assert_eq!(
            EventObject::parse(&flag),
            Ok(EventObject {
                api_version: "infrastructure.cluster.x-k8s.io/v1alpha1".into(),
                kind: "TerraformCluster".into(),
                namespace: "team-a".into(),
                name: "c1".into(),
                uid: UID.into(),
            })
        );
        for bad in [
            "",
            "TerraformCluster/team-a/c1/uid",
            "v1/TerraformCluster/team-a//uid",
            "infrastructure.cluster.x-k8s.io/v1alpha1/TerraformCluster/team-a/c1/",
        ] {
            let err = EventObject::parse(bad).expect_err(bad);
            assert!(
                err.contains("--event-object") && err.contains("<uid>"),
                "{err}"
            );
        }
    }

    fn source(name: &str, job: Option<&str>) -> Source {
        Source {
            about: EventObject {
                api_version: "infrastructure.cluster.x-k8s.io/v1alpha1".into(),
                kind: "TerraformMachine".into(),
                namespace: "team-a".into(),
                name: name.into(),
                uid: UID.into(),
            },
            job: job.map(str::to_owned),
            instance: "c1-apply-7f3a-x2k9q".into(),
        }
    }

    fn note(text: &str) -> Note {
        Note {
            severity: Severity::Warning,
            reason: STEP_FAILED,
            action: "apply".into(),
            text: text.into(),
        }
    }

    #[test]
    fn an_event_names_the_object_its_job_and_the_runner() -> anyhow::Result<()> {
        let at = Timestamp::from_second(1_800_000_000)?;
        let e = event(
            &source("m1", Some("m1-apply-7f3a")),
            0x1f,
            at,
            &note("step apply failed"),
        );
        assert_eq!(e.metadata.name.as_deref(), Some("m1.1f"));
        assert_eq!(e.metadata.namespace.as_deref(), Some("team-a"));
        assert_eq!(e.reporting_controller.as_deref(), Some("captf.io/runner"));
        assert_eq!(e.reporting_instance.as_deref(), Some("c1-apply-7f3a-x2k9q"));
        assert_eq!(
            (e.type_.as_deref(), e.reason.as_deref()),
            (Some("Warning"), Some("StepFailed"))
        );
        assert_eq!(e.action.as_deref(), Some("apply"));
        assert_eq!(e.note.as_deref(), Some("step apply failed"));
        assert_eq!(e.event_time, Some(MicroTime(at)));
        let regarding = e.regarding.unwrap_or_default();
        assert_eq!(
            (
                regarding.kind.as_deref(),
                regarding.name.as_deref(),
                regarding.uid.as_deref()
            ),
            (Some("TerraformMachine"), Some("m1"), Some(UID))
        );
        let related = e.related.unwrap_or_default();
        assert_eq!(
            (
                related.api_version.as_deref(),
                related.kind.as_deref(),
                related.name.as_deref()
            ),
            (Some("batch/v1"), Some("Job"), Some("m1-apply-7f3a"))
        );
        let unrelated = event(&source("m1", None), 1, at, &note("x"));
        assert_eq!(unrelated.related, None);
        Ok(())
    }

    #[test]
    fn long_fields_are_cut_to_what_the_api_accepts() -> anyhow::Result<()> {
        let at = Timestamp::from_second(1_800_000_000)?;
        // A 253-character name whose cut at 200 ends in a separator.
        let name = format!("{}-{}", "a".repeat(199), "b".repeat(53));
        let mut long = note(&"é".repeat(600));
        long.action = "x".repeat(300);
        let e = event(&source(&name, None), 0xabc, at, &long);
        assert_eq!(e.metadata.name, Some(format!("{}.abc", "a".repeat(199))));
        let text = e.note.unwrap_or_default();
        assert!(
            text.len() <= 1024 && text.chars().all(|c| c == 'é'),
            "{}",
            text.len()
        );
        assert_eq!(e.action.map(|a| a.len()), Some(128));
        Ok(())
    }
}
