//! The report of a fleet run: every figure as JSON, and the Markdown table of the measures
//! against the goals of issue #9.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;

use crate::op::OpReport;
use crate::probe::{self, Counters, ProcSample, Requests};
use crate::{Args, MANAGER_READS, MANAGER_WRITES, REACTION_TAIL, ReactionReport, mib};

/// The goals of issue #9.
const RSS_GOAL_1K_MIB: f64 = 48.0;
const RSS_GOAL_10K_MIB: f64 = 128.0;
const CPU_GOAL_CORE_PERCENT: f64 = 1.0;
const REACTION_P99_GOAL_MS: f64 = 250.0;

pub struct Report<'a> {
    pub args: &'a Args,
    pub first_apply: Duration,
    pub op: Option<OpReport>,
    /// TerraformMachines seeded (`--objects` times `--machines-per-cluster`).
    pub machines: usize,
    pub seed_secs: f64,
    pub ready_after: Duration,
    pub startup_sample: ProcSample,
    pub startup_requests: Counters,
    pub jobs_at_start: BTreeMap<String, usize>,
    pub baseline: Counters,
    pub baseline_minutes: f64,
    pub at_rest: Counters,
    pub rest_minutes: f64,
    pub steady_rss_kib: u64,
    pub peak_rss_kib: u64,
    pub rest_hwm_kib: u64,
    /// `RssFile` at the end of the rest: the binary's code mapped in.
    pub rest_file_kib: u64,
    pub cpu_secs: f64,
    pub cpu_core_percent: f64,
    pub events_at_rest: u64,
    pub jobs_at_rest: BTreeMap<String, usize>,
    pub reaction: Option<ReactionReport>,
    pub rss_samples: Vec<(f64, u64)>,
    pub total_secs: f64,
}

fn per_minute(r: &Requests, minutes: f64) -> BTreeMap<String, f64> {
    probe::by_verb(r)
        .into_iter()
        .map(|(k, v)| (k, v / minutes))
        .collect()
}

fn writes(r: &Requests) -> BTreeMap<String, f64> {
    r.iter()
        .filter(|((verb, _), _)| probe::is_write(verb))
        .map(|((verb, resource), v)| (format!("{verb} {resource}"), *v))
        .collect()
}

pub fn goal(met: bool) -> &'static str {
    if met { "met" } else { "not met" }
}

impl Report<'_> {
    pub fn render(&self) -> (serde_json::Value, String) {
        let a = self.args;
        // Every object of the fleet: its clusters and their machines.
        let objects = a.objects + self.machines;
        let jobs_total = |jobs: &BTreeMap<String, usize>| jobs.values().sum::<usize>();
        let rss_goal = if a.objects <= 1000 {
            RSS_GOAL_1K_MIB
        } else {
            RSS_GOAL_10K_MIB
        };
        let rest_total: f64 = self.at_rest.requests.values().sum::<f64>() / self.rest_minutes;
        let baseline_total: f64 =
            self.baseline.requests.values().sum::<f64>() / self.baseline_minutes;
        // The manager's own, counted by the API server under its flow schemas.
        let manager_reads = self.at_rest.flow(MANAGER_READS) / self.rest_minutes;
        let manager_writes = self.at_rest.flow(MANAGER_WRITES);
        let startup_reads = self.startup_requests.flow(MANAGER_READS);
        let startup_writes = self.startup_requests.flow(MANAGER_WRITES);
        let all_writes: f64 = writes(&self.at_rest.requests).values().sum::<f64>();
        let steady = mib(self.steady_rss_kib);
        let rss_met = steady <= rss_goal;
        let cpu_met = self.cpu_core_percent < CPU_GOAL_CORE_PERCENT;
        let writes_met = manager_writes == 0.0
            && self.events_at_rest == 0
            && jobs_total(&self.jobs_at_rest) == 0;
        let mut md = String::new();
        md.push_str(&format!(
            "### Fleet of {} TerraformClusters and {} TerraformMachines ({} clusters per namespace)\n\nOn {}; the whole run took {:.0} s.\n\n",
            a.objects,
            self.machines,
            a.per_namespace,
            captf_bench::machine(),
            self.total_secs
        ));
        md.push_str("| Measure | Value | Goal |\n| --- | --- | --- |\n");
        md.push_str(&format!(
            "| seeding (up to date, {} clusters and {} machines) | {:.0} s ({:.0} objects/s) | |\n",
            a.objects,
            self.machines,
            self.seed_secs,
            objects as f64 / self.seed_secs
        ));
        md.push_str(&format!(
            "| manager start → every object Ready ({} clusters, {} machines) | {:.1} s ({:.0} objects/s) | |\n",
            a.objects,
            self.machines,
            self.ready_after.as_secs_f64(),
            objects as f64 / self.ready_after.as_secs_f64().max(1e-3)
        ));
        md.push_str(&format!(
            "| the manager's API requests during start-up | {startup_reads:.0} reads ({:.1} per object), {startup_writes:.0} writes ({}) | writes: status only |\n",
            startup_reads / objects as f64,
            fmt_map(&writes(&self.startup_requests.requests))
        ));
        md.push_str(&format!(
            "| Jobs created by the first pass | {} | 0: {} |\n",
            fmt_counts(&self.jobs_at_start),
            goal(jobs_total(&self.jobs_at_start) == 0)
        ));
        md.push_str(&format!(
            "| peak RSS (VmHWM) | {:.1} MiB | |\n",
            mib(self.rest_hwm_kib)
        ));
        md.push_str(&format!(
            "| steady RSS at rest (median over {:.1} min) | {:.1} MiB, of which {:.1} MiB mapped from files (the binary's code) | ≤ {rss_goal:.0} MiB: {} |\n",
            self.rest_minutes,
            steady,
            mib(self.rest_file_kib),
            goal(rss_met)
        ));
        md.push_str(&format!(
            "| CPU at rest | {:.2} s per minute ({:.2} % of a core) | < {CPU_GOAL_CORE_PERCENT:.0} %: {} |\n",
            self.cpu_secs / self.rest_minutes,
            self.cpu_core_percent,
            goal(cpu_met)
        ));
        md.push_str(&format!(
            "| the manager's API requests at rest | {manager_reads:.1} reads/min, {manager_writes:.0} writes in {:.1} min | |\n",
            self.rest_minutes
        ));
        md.push_str(&format!(
            "| API requests at rest, every client | {rest_total:.0}/min ({}); before the manager started, right after seeding, {baseline_total:.0}/min | |\n",
            fmt_map(&per_minute(&self.at_rest.requests, self.rest_minutes))
        ));
        md.push_str(&format!(
            "| writes at rest | the manager's {manager_writes:.0}; {} object change(s) seen, {} Job(s); every client's {all_writes:.0} ({}) | none: {} |\n",
            self.events_at_rest,
            jobs_total(&self.jobs_at_rest),
            fmt_map(&writes(&self.at_rest.requests)),
            goal(writes_met)
        ));
        let reaction = self.reaction.as_ref().map(|r| {
            let p50 = probe::percentile(&r.latencies_ms, 50.0);
            let p99 = probe::percentile(&r.latencies_ms, 99.0);
            let max = r.latencies_ms.last().copied();
            md.push_str(&format!(
                "| reaction: spec change → Job ({} of {} changes, one every {:?}) | p50 {} ms, p99 {} ms, max {} ms | p99 ≤ {REACTION_P99_GOAL_MS:.0} ms: {} |\n",
                r.latencies_ms.len(),
                r.changes,
                r.interval,
                fmt_opt(p50),
                fmt_opt(p99),
                fmt_opt(max),
                goal(p99.is_some_and(|p| p <= REACTION_P99_GOAL_MS) && r.latencies_ms.len() == r.changes)
            ));
            let d50 = probe::percentile(&r.decided_ms, 50.0);
            let d99 = probe::percentile(&r.decided_ms, 99.0);
            md.push_str(&format!(
                "| of which write → the manager's decision (its log) | p50 {} ms, p99 {} ms | |\n",
                fmt_opt(d50),
                fmt_opt(d99)
            ));
            let per_change = |schema| r.requests.flow(schema) / r.changes.max(1) as f64;
            md.push_str(&format!(
                "| the manager's API requests per change (until {}s after the last Job) | {:.1} reads, {:.1} writes | |\n",
                REACTION_TAIL.as_secs(),
                per_change(MANAGER_READS),
                per_change(MANAGER_WRITES)
            ));
            json!({"changes": r.changes, "interval_ms": r.interval.as_millis(), "jobs_seen": r.latencies_ms.len(),
                   "manager_reads_per_change": per_change(MANAGER_READS), "manager_writes_per_change": per_change(MANAGER_WRITES),
                   "requests": flat(&r.requests.requests),
                   "decided_p50_ms": d50, "decided_p99_ms": d99, "decided_ms": r.decided_ms,
                   "p50_ms": p50, "p99_ms": p99, "max_ms": max, "latencies_ms": r.latencies_ms,
                   "goal": {"what": format!("p99 <= {REACTION_P99_GOAL_MS} ms"), "met": p99.is_some_and(|p| p <= REACTION_P99_GOAL_MS)}})
        });
        let op = self.op.as_ref().map(|o| {
            let (json, table) = o.render();
            md.push_str(&format!("\n#### One operation\n\n{table}"));
            json
        });
        let json = json!({
            "benchmark": "fleet",
            "machine": captf_bench::machine(),
            "objects": a.objects,
            "machines_per_cluster": a.machines_per_cluster,
            "machines": self.machines,
            "per_namespace": a.per_namespace,
            "total_seconds": self.total_secs,
            "template_first_apply_ms": self.first_apply.as_secs_f64() * 1e3,
            "seeding_seconds": self.seed_secs,
            "startup": {
                "ready_seconds": self.ready_after.as_secs_f64(),
                "rss_mib": mib(self.startup_sample.rss_kib),
                "peak_rss_mib": mib(self.startup_sample.hwm_kib),
                "requests": flat(&self.startup_requests.requests),
                "manager_reads": startup_reads,
                "manager_writes": startup_writes,
                "jobs_created": self.jobs_at_start,
            },
            "baseline": {"minutes": self.baseline_minutes, "requests_per_minute_by_verb": per_minute(&self.baseline.requests, self.baseline_minutes), "requests": flat(&self.baseline.requests)},
            "at_rest": {
                "minutes": self.rest_minutes,
                "steady_rss_mib": steady,
                "peak_rss_mib": mib(self.rest_hwm_kib),
                "file_rss_mib": mib(self.rest_file_kib),
                "peak_rss_mib_end_of_run": mib(self.peak_rss_kib),
                "cpu_seconds_per_minute": self.cpu_secs / self.rest_minutes,
                "cpu_core_percent": self.cpu_core_percent,
                "requests_per_minute_by_verb": per_minute(&self.at_rest.requests, self.rest_minutes),
                "requests_per_minute_total": rest_total,
                "requests_per_minute_without_manager": baseline_total,
                "manager_reads_per_minute": manager_reads,
                "manager_writes": manager_writes,
                "requests": flat(&self.at_rest.requests),
                "writes": writes(&self.at_rest.requests),
                "object_changes_seen": self.events_at_rest,
                "jobs": self.jobs_at_rest,
                "goals": {
                    "steady_rss": {"what": format!("<= {rss_goal} MiB"), "met": rss_met},
                    "cpu": {"what": format!("< {CPU_GOAL_CORE_PERCENT} % of a core"), "met": cpu_met},
                    "writes": {"what": "no writes at rest", "met": writes_met},
                },
            },
            "reaction": reaction,
            "one_operation": op,
            "rss_samples": self.rss_samples.iter().map(|(t, k)| json!([t, mib(*k)])).collect::<Vec<_>>(),
        });
        (json, md)
    }
}

fn flat(r: &Requests) -> BTreeMap<String, f64> {
    r.iter()
        .map(|((verb, resource), v)| (format!("{verb} {resource}"), *v))
        .collect()
}

fn fmt_map(m: &BTreeMap<String, f64>) -> String {
    m.iter()
        .map(|(k, v)| format!("{k} {v:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `3 TerraformCluster, 0 TerraformMachine`.
fn fmt_counts(m: &BTreeMap<String, usize>) -> String {
    m.iter()
        .map(|(k, v)| format!("{v} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.0}"))
}
