//! What the benchmark reads from outside the manager: `/proc/<pid>` (resident set, peak, CPU
//! time) and the kube-apiserver's own `/metrics` (`apiserver_request_total`).

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// One look at a process.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcSample {
    /// `VmRSS` (KiB).
    pub rss_kib: u64,
    /// `VmHWM`: the peak resident set so far (KiB).
    pub hwm_kib: u64,
    /// `RssFile`: the part of `VmRSS` mapped from files, mostly the binary's own code (KiB).
    /// Shared with the page cache, and the same whatever the fleet.
    pub file_kib: u64,
    /// `utime + stime` in clock ticks.
    pub cpu_ticks: u64,
}

/// Clock ticks per second of `/proc/<pid>/stat` (`USER_HZ`, 100 on Linux for every
/// architecture the project builds on).
pub const TICKS_PER_SECOND: f64 = 100.0;

fn status_kib(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// `VmRSS`, `VmHWM`, `RssFile` and `utime + stime` of `pid`, `None` once it is gone.
pub fn sample(pid: u32) -> Option<ProcSample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command (which may hold spaces) start at field 3, `state`.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(ProcSample {
        rss_kib: status_kib(&status, "VmRSS:")?,
        hwm_kib: status_kib(&status, "VmHWM:")?,
        // Since Linux 4.5; without it the whole resident set counts as heap.
        file_kib: status_kib(&status, "RssFile:").unwrap_or(0),
        cpu_ticks: utime + stime,
    })
}

/// Requests the API server counted, by `(verb, resource[/subresource])`.
pub type Requests = BTreeMap<(String, String), f64>;

/// The API server's counters, read with the admin client.
#[derive(Clone, Debug, Default)]
pub struct Counters {
    /// `apiserver_request_total`, every client.
    pub requests: Requests,
    /// `apiserver_flowcontrol_dispatched_requests_total` by flow schema.
    pub flows: BTreeMap<String, f64>,
}

impl Counters {
    /// `self - before`.
    pub fn since(&self, before: &Counters) -> Counters {
        Counters {
            requests: delta(&before.requests, &self.requests),
            flows: self
                .flows
                .iter()
                .map(|(k, v)| (k.clone(), v - before.flows.get(k).copied().unwrap_or(0.0)))
                .collect(),
        }
    }

    /// Requests of one flow schema.
    pub fn flow(&self, schema: &str) -> f64 {
        self.flows.get(schema).copied().unwrap_or(0.0)
    }
}

/// Reads `/metrics` of the API server.
pub async fn apiserver(client: &kube::Client) -> anyhow::Result<Counters> {
    let request = http::Request::get("/metrics").body(Vec::new())?;
    let text = client.request_text(request).await?;
    Ok(Counters {
        requests: parse_requests(&text),
        flows: parse_flows(&text),
    })
}

/// Parses `apiserver_flowcontrol_dispatched_requests_total` by flow schema.
pub fn parse_flows(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_flowcontrol_dispatched_requests_total{")
        else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let schema = labels
            .split(',')
            .find_map(|kv| kv.strip_prefix("flow_schema=\""))
            .map(|v| v.trim_end_matches('"').to_owned())
            .unwrap_or_default();
        *out.entry(schema).or_default() += value;
    }
    out
}

/// Parses the `apiserver_request_total` samples of a Prometheus text page.
pub fn parse_requests(text: &str) -> Requests {
    let mut out = Requests::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let label = |name: &str| -> String {
            let key = format!("{name}=\"");
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&key))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        let mut resource = label("resource");
        let sub = label("subresource");
        if !sub.is_empty() {
            resource = format!("{resource}/{sub}");
        }
        *out.entry((label("verb"), resource)).or_default() += value;
    }
    out
}

/// `after - before`, without the entries that did not grow.
pub fn delta(before: &Requests, after: &Requests) -> Requests {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0.0);
            (d > 0.0).then(|| (k.clone(), d))
        })
        .collect()
}

/// Whether a verb writes.
pub fn is_write(verb: &str) -> bool {
    matches!(
        verb,
        "POST" | "PUT" | "PATCH" | "DELETE" | "DELETECOLLECTION" | "APPLY" | "CREATE" | "UPDATE"
    )
}

/// Sums by verb.
pub fn by_verb(requests: &Requests) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for ((verb, _), v) in requests {
        *out.entry(verb.clone()).or_default() += v;
    }
    out
}

/// The peak resident sets of processes matching a predicate, sampled every few milliseconds
/// on a thread of its own until stopped.
pub struct PeakSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<HashMap<u32, u64>>>,
}

/// What the sampler found: the largest single peak and the sum of the peaks (KiB).
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Peaks {
    pub processes: usize,
    pub max_kib: u64,
    pub sum_kib: u64,
}

impl PeakSampler {
    /// Starts sampling every process whose `argv[0]` satisfies `matches` and that did not
    /// exist yet.
    pub fn start(matches: fn(&str) -> bool) -> PeakSampler {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let before: std::collections::HashSet<u32> = pids().into_iter().collect();
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peaks: HashMap<u32, u64> = HashMap::new();
            let mut ignored: std::collections::HashSet<u32> = before;
            let mut next = Instant::now();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                for pid in pids() {
                    if ignored.contains(&pid) {
                        continue;
                    }
                    let argv0 = std::fs::read(format!("/proc/{pid}/cmdline"))
                        .ok()
                        .and_then(|c| {
                            c.split(|b| *b == 0)
                                .next()
                                .map(|a| String::from_utf8_lossy(a).into_owned())
                        })
                        .unwrap_or_default();
                    if argv0.is_empty() {
                        continue;
                    }
                    if !matches(&argv0) {
                        ignored.insert(pid);
                        continue;
                    }
                    if let Some(hwm) = std::fs::read_to_string(format!("/proc/{pid}/status"))
                        .ok()
                        .and_then(|s| status_kib(&s, "VmHWM:"))
                    {
                        let e = peaks.entry(pid).or_default();
                        *e = (*e).max(hwm);
                    }
                }
                next += Duration::from_millis(10);
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                } else {
                    next = now;
                }
            }
            peaks
        });
        PeakSampler {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops sampling and returns the peaks.
    pub fn finish(mut self) -> Peaks {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let peaks = self
            .thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default();
        Peaks {
            processes: peaks.len(),
            max_kib: peaks.values().copied().max().unwrap_or(0),
            sum_kib: peaks.values().sum(),
        }
    }
}

fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// p-th percentile (nearest rank) of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_sum_by_verb_and_resource() {
        let text = "# HELP x\napiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"secrets\",scope=\"namespace\",subresource=\"\",verb=\"GET\",version=\"v1\"} 3\napiserver_request_total{code=\"404\",component=\"apiserver\",dry_run=\"\",group=\"\",resource=\"secrets\",scope=\"namespace\",subresource=\"\",verb=\"GET\",version=\"v1\"} 2\napiserver_request_total{code=\"200\",component=\"apiserver\",dry_run=\"\",group=\"x\",resource=\"terraformclusters\",scope=\"namespace\",subresource=\"status\",verb=\"PATCH\",version=\"v1\"} 1\n";
        let r = parse_requests(text);
        assert_eq!(r[&("GET".into(), "secrets".into())], 5.0);
        assert_eq!(r[&("PATCH".into(), "terraformclusters/status".into())], 1.0);
        assert_eq!(by_verb(&r)["GET"], 5.0);
    }

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
    }

    #[test]
    fn this_process_can_be_sampled() {
        let s = sample(std::process::id()).expect("own /proc");
        assert!(s.rss_kib > 0 && s.hwm_kib >= s.rss_kib);
    }
}
