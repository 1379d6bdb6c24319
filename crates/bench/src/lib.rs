//! A small, dependency-free benchmark harness: repeated timed samples of a closure, the median
//! and spread, optional throughput and peak memory, and a report as JSON plus a table.
//!
//! Absolute times vary from run to run on a shared machine; the report leads with what
//! compares (throughput against a goal, peak memory against a cap).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

/// One measured case.
#[derive(Clone, Debug, Serialize)]
pub struct Measurement {
    pub name: String,
    /// Calls per sample.
    pub iterations: u64,
    pub samples: usize,
    /// Median time of one call.
    pub median_ns: f64,
    /// Fastest and slowest sample, per call.
    pub min_ns: f64,
    pub max_ns: f64,
    /// Bytes processed per call, when the case has a size.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// `bytes` over the median, in MB/s (10^6).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub throughput_mb_s: Option<f64>,
    /// How far the process's peak resident set grew while this case ran (KiB).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_rss_growth_kib: Option<u64>,
    /// A goal the case is held to, in words, and whether this run met it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal: Option<Goal>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Goal {
    pub what: String,
    pub met: bool,
}

/// Runs `f` in samples of enough iterations to last about `sample` each, for about `budget`
/// in all (at least 5 samples), after one warm-up call.
pub fn measure<T>(name: &str, budget: Duration, mut f: impl FnMut() -> T) -> Measurement {
    let sample = budget / 10;
    let hwm_before = peak_rss_kib();
    let warm = Instant::now();
    std::hint::black_box(f());
    let one = warm.elapsed().max(Duration::from_nanos(1));
    let iterations = (sample.as_nanos() / one.as_nanos()).clamp(1, 1_000_000) as u64;
    let mut per_call: Vec<f64> = Vec::new();
    let started = Instant::now();
    while per_call.len() < 5 || started.elapsed() < budget {
        let t = Instant::now();
        for _ in 0..iterations {
            std::hint::black_box(f());
        }
        per_call.push(t.elapsed().as_nanos() as f64 / iterations as f64);
    }
    per_call.sort_by(f64::total_cmp);
    let growth = match (hwm_before, peak_rss_kib()) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    Measurement {
        name: name.to_owned(),
        iterations,
        samples: per_call.len(),
        median_ns: per_call[per_call.len() / 2],
        min_ns: per_call[0],
        max_ns: per_call[per_call.len() - 1],
        bytes: None,
        throughput_mb_s: None,
        peak_rss_growth_kib: growth,
        goal: None,
    }
}

impl Measurement {
    /// Records that one call processes `bytes`.
    pub fn with_bytes(mut self, bytes: u64) -> Self {
        self.bytes = Some(bytes);
        self.throughput_mb_s = Some(bytes as f64 / self.median_ns * 1e3);
        self
    }

    pub fn with_goal(mut self, what: &str, met: impl FnOnce(&Measurement) -> bool) -> Self {
        let met = met(&self);
        self.goal = Some(Goal {
            what: what.to_owned(),
            met,
        });
        self
    }
}

/// The process's peak resident set so far (`VmHWM`), where /proc has it.
pub fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Where reports go: `$CAPTF_BENCH_OUT`, else `target/bench` of the workspace.
pub fn report_dir() -> PathBuf {
    std::env::var_os("CAPTF_BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../target/bench")
                .to_path_buf()
        })
}

/// Writes `<dir>/<name>.json` and returns the table that goes with it.
pub fn report(name: &str, machine: &str, results: &[Measurement]) -> std::io::Result<String> {
    let dir = report_dir();
    std::fs::create_dir_all(&dir)?;
    let json = serde_json::json!({"benchmark": name, "machine": machine, "results": results});
    let path = dir.join(format!("{name}.json"));
    std::fs::write(&path, serde_json::to_vec_pretty(&json)?)?;
    Ok(format!(
        "{}\nreport: {}\n",
        table(results),
        path.canonicalize().unwrap_or(path).display()
    ))
}

/// A Markdown table of the results.
pub fn table(results: &[Measurement]) -> String {
    let mut out = String::from(
        "| case | median | min .. max | throughput | peak RSS growth | goal |\n| --- | --- | --- | --- | --- | --- |\n",
    );
    for m in results {
        out.push_str(&format!(
            "| {} | {} | {} .. {} | {} | {} | {} |\n",
            m.name,
            human(m.median_ns),
            human(m.min_ns),
            human(m.max_ns),
            m.throughput_mb_s
                .map_or("".into(), |t| format!("{t:.0} MB/s")),
            m.peak_rss_growth_kib
                .map_or("".into(), |k| format!("{:.1} MiB", k as f64 / 1024.0)),
            m.goal.as_ref().map_or("".into(), |g| format!(
                "{} {}",
                if g.met { "met:" } else { "MISSED:" },
                g.what
            )),
        ));
    }
    out
}

fn human(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// One line about the machine the run was on: CPU model and count, memory.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or("?".into(), |k| {
            format!("{:.0} GiB", k as f64 / 1024.0 / 1024.0)
        });
    format!("{cpu}, {cores} cores, {mem}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_measurement_counts_samples_and_throughput() {
        let m = measure("sum", Duration::from_millis(50), || {
            (0..1000u64).sum::<u64>()
        })
        .with_bytes(8000);
        assert!(m.samples >= 5);
        assert!(m.min_ns <= m.median_ns && m.median_ns <= m.max_ns);
        let t = m.throughput_mb_s.expect("throughput");
        assert!((t - 8000.0 / m.median_ns * 1e3).abs() < 1e-6);
        assert!(table(&[m]).contains("| sum |"));
    }
}
