//! Micro-benchmarks of the manager's hot paths: the decision function, rendering and hashing
//! the inputs, and decoding a state (1 MiB and 63 MiB decompressed, just under the 64 MiB cap).
//! `cargo bench -p captf-bench` prints a table and writes `target/bench/hot_paths.json`.

use std::io::Write;
use std::time::Duration;

use captf_api::names::WorkloadKind;
use captf_api::{ApplyPolicy, DriftAction};
use captf_bench::{Measurement, machine, measure, report};
use captf_contract::{
    ClusterInputs, CommonInputs, Endpoint, Role, RoleInputs, Variable, Variables,
};
use captf_controller::decide::{self, Policy, Snapshot, StateView};
use captf_state::{Chunk, Limits};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

/// Decoding at least this fast keeps a pass over a big state cheap (issue #9).
const DECODE_GOAL_MB_S: f64 = 200.0;

fn main() {
    // The child that measures one decode's peak memory (see `decode_peak_kib`).
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--decode-peak") {
        let path = args.get(i + 1).expect("--decode-peak FILE");
        println!("{}", decode_peak_child(std::path::Path::new(path)));
        return;
    }
    let budget = Duration::from_secs(2);
    let mut results = vec![decide_at_rest(budget), decide_apply_due(budget)];
    results.push(render_and_hash(budget));
    results.push(decode(1 << 20, budget));
    results.push(decode(63 << 20, budget * 3));
    let table = report("hot_paths", &machine(), &results).expect("write the report");
    println!("{table}");
}

fn snapshot(state_hash: &str, inputs_hash: &str) -> Snapshot {
    let now = Timestamp::from_second(1_800_000_000).expect("time");
    Snapshot {
        kind: WorkloadKind::Cluster,
        uid: "3f0c6b8e-1d2a-4c5b-9e7f-0a1b2c3d4e5f".into(),
        created_at: now,
        lifecycle: decide::Lifecycle::Live,
        state: StateView::Found {
            inputs_hash: Some(state_hash.into()),
        },
        inputs_hash: Some(inputs_hash.into()),
        interrupted_apply: false,
        restore_requested: false,
        history: Default::default(),
        policy: Policy {
            apply_policy: ApplyPolicy::Automatic,
            drift_interval: Some(Duration::from_secs(1800)),
            drift_action: DriftAction::Report,
            failed_history_limit: 3,
            refresh_after_apply: false,
            membership_interval: None,
            health_check_interval: None,
        },
        approvals: Default::default(),
        plan: None,
        observed: Default::default(),
        pinned_image: None,
        exports_guard: None,
        requests: Default::default(),
    }
}

fn decide_at_rest(budget: Duration) -> Measurement {
    let s = snapshot("h2:aaaa", "h2:aaaa");
    let now = Timestamp::from_second(1_800_000_100).expect("time");
    measure("decide: up to date", budget, || decide::decide(&s, now))
}

fn decide_apply_due(budget: Duration) -> Measurement {
    let s = snapshot("h2:aaaa", "h2:bbbb");
    let now = Timestamp::from_second(1_800_000_100).expect("time");
    measure("decide: inputs changed", budget, || decide::decide(&s, now))
}

fn render_and_hash(budget: Duration) -> Measurement {
    let inputs = RoleInputs::Cluster(ClusterInputs {
        common: CommonInputs::new(
            "prod",
            "team-a",
            Role::Cluster,
            "prod",
            "team-a",
            "prod-tpl",
        ),
        control_plane_endpoint: Some(Endpoint {
            host: "api.prod.example".into(),
            port: 6443,
        }),
        kubernetes_version: Some("v1.34.2".into()),
        control_plane_initialized: true,
        cluster_network: None,
    });
    // A realistic spec: a few dozen variables, one larger map.
    let mut variables = Variables::new();
    for i in 0..40 {
        variables.insert(
            format!("var_{i}"),
            Variable {
                value: json!(format!("value-{i}")),
                sensitive: i % 10 == 0,
            },
        );
    }
    variables.insert(
        "subnets".into(),
        Variable {
            value: json!(
                (0..64)
                    .map(|i| (format!("az-{i}"), format!("10.{i}.0.0/20")))
                    .collect::<std::collections::BTreeMap<_, _>>()
            ),
            sensitive: false,
        },
    );
    let size = captf_contract::render(
        Role::Cluster,
        "registry.example/modules/aws:1.2.3",
        &inputs,
        &variables,
    )
    .map(|r| (r.main_tf_json.len() + r.tfvars_json.len()) as u64)
    .expect("renders");
    measure("render + inputs hash (cluster)", budget, || {
        captf_contract::render(
            Role::Cluster,
            "registry.example/modules/aws:1.2.3",
            &inputs,
            &variables,
        )
    })
    .with_bytes(size)
}

/// A v4 state of about `target` bytes: resources with instances whose attributes hold
/// hex strings (compressible about as much as real provider attributes).
fn state_json(target: usize) -> Vec<u8> {
    let mut resources = Vec::new();
    let mut size = 0;
    let mut i = 0u64;
    while size < target.saturating_sub(4096) {
        let digest = {
            use sha2::Digest;
            hex::encode(sha2::Sha256::digest(i.to_le_bytes()))
        };
        let attrs = json!({"id": format!("i-{i:016x}"), "arn": format!("arn:aws:ec2:eu-west-1:123456789012:instance/{digest}"),
            "tags": {"Name": format!("node-{i}"), "cluster": "prod"}, "user_data": digest.repeat(12)});
        let r = json!({"mode": "managed", "type": "aws_instance", "name": format!("n{i}"),
            "provider": "provider[\"registry.terraform.io/hashicorp/aws\"]",
            "instances": [{"schema_version": 1, "attributes": attrs}]});
        size += r.to_string().len() + 1;
        resources.push(r);
        i += 1;
    }
    serde_json::to_vec(&json!({
        "version": 4, "terraform_version": "1.12.6", "serial": 7,
        "lineage": "6f1c1d2e-1111-2222-3333-444455556666",
        "outputs": {"exports": {"value": {"backend_id": "x"}, "type": "string"}},
        "resources": resources, "check_results": null
    }))
    .expect("json")
}

fn decode(target: usize, budget: Duration) -> Measurement {
    let json = state_json(target);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&json).expect("gzip");
    let payload = gz.finish().expect("gzip");
    // The backend splits the gzip payload over Secrets of at most 1 MiB.
    let base = BASE;
    let chunks: Vec<Chunk> = payload
        .chunks(1 << 20)
        .enumerate()
        .map(|(i, p)| Chunk::new(captf_api::names::chunk_name(base, i), p))
        .collect();
    let name = format!(
        "decode state: {:.0} MiB ({} chunk(s), {:.1} MiB gzip)",
        json.len() as f64 / (1 << 20) as f64,
        chunks.len(),
        payload.len() as f64 / (1 << 20) as f64
    );
    let bytes = json.len() as u64;
    drop(json);
    let cap = Limits::DEFAULT;
    let peak = decode_peak_kib(&payload);
    let mut m = measure(&name, budget, || {
        captf_state::decode(base, &chunks, cap).expect("decodes")
    })
    .with_bytes(bytes)
    .with_goal(
        &format!(
            "≥ {DECODE_GOAL_MB_S:.0} MB/s, peak memory ≤ the {} MiB cap",
            cap.max_decompressed_bytes >> 20
        ),
        |m| {
            m.throughput_mb_s.is_some_and(|t| t >= DECODE_GOAL_MB_S)
                && peak.is_some_and(|k| k * 1024 <= cap.max_decompressed_bytes as u64)
        },
    );
    m.peak_rss_growth_kib = peak;
    m
}

const BASE: &str = "tfstate-default-0123456789abcdef-c";

/// One decode's own peak memory, measured in a fresh process of this binary: the parent's
/// high-water mark already holds the generated state, so it cannot tell.
fn decode_peak_kib(payload: &[u8]) -> Option<u64> {
    let path = std::env::temp_dir().join(format!("captf-bench-state-{}.gz", std::process::id()));
    std::fs::write(&path, payload).ok()?;
    let out = std::process::Command::new(std::env::current_exe().ok()?)
        .arg("--decode-peak")
        .arg(&path)
        .output()
        .ok()?;
    let _ = std::fs::remove_file(&path);
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// In the child: read the payload, note the high-water mark, decode once, report the growth.
fn decode_peak_child(path: &std::path::Path) -> u64 {
    let payload = std::fs::read(path).expect("payload");
    let chunks: Vec<Chunk> = payload
        .chunks(1 << 20)
        .enumerate()
        .map(|(i, p)| Chunk::new(captf_api::names::chunk_name(BASE, i), p))
        .collect();
    drop(payload);
    let before = captf_bench::peak_rss_kib().expect("VmHWM");
    let state = captf_state::decode(BASE, &chunks, Limits::DEFAULT).expect("decodes");
    std::hint::black_box(&state);
    captf_bench::peak_rss_kib().expect("VmHWM") - before
}
