use std::collections::{BTreeMap, BTreeSet};

use captf_api::names::{ObjectKey, WorkloadKind, chunk_name};
use captf_state::{Chunk, DIGEST_MISMATCH, DecodedState};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::job::RestoreSource;

const SUFFIX: &str = "f66792f9106e7299-c";
const BASE7: &str = "captf-state-backup-f66792f9106e7299-c-7";

const UID: &str = "uid-1";
const OBJECT: Object<'static> = Object {
    uid: UID,
    kind: "TerraformCluster",
    name: "prod",
};

fn key() -> ObjectKey {
    ObjectKey::new("team-a", WorkloadKind::Cluster, "prod").expect("valid key")
}

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).expect("valid time")
}

fn owner() -> OwnerReference {
    OwnerReference {
        api_version: "infrastructure.cluster.x-k8s.io/v1alpha1".into(),
        kind: "TerraformCluster".into(),
        name: "prod".into(),
        uid: UID.into(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

fn decoded(serial: u64, chunks: usize, inputs_hash: Option<&str>) -> DecodedState {
    DecodedState {
        serial,
        lineage: "lin-1".into(),
        terraform_version: "1.9.0".into(),
        outputs: BTreeMap::new(),
        sensitive_outputs: Default::default(),
        managed_resources: 3,
        compressed_bytes: 0,
        decompressed_bytes: 0,
        chunks,
        inputs_hash: inputs_hash.map(str::to_owned),
    }
}

/// The state's chunks, chunk `i` holding `payloads[i]`.
fn state_chunks(payloads: &[&str]) -> Vec<Chunk> {
    let base = key().state_secret();
    payloads
        .iter()
        .enumerate()
        .map(|(i, p)| Chunk::new(chunk_name(&base, i), p.as_bytes()))
        .collect()
}

fn request<'a>(
    key: &'a ObjectKey,
    owner: &'a OwnerReference,
    chunks: &'a [Chunk],
    state: Option<&'a DecodedState>,
    source_job: Option<&'a str>,
) -> Request<'a> {
    Request {
        key,
        owner,
        cluster_name: "prod-cluster",
        chunks,
        state,
        source_job,
        keep: 5,
        pending_restore: None,
        deleting: false,
        now: t(0),
    }
}

/// The Secrets of a set `base` for `serial` holding `payloads`, taken at `t(taken)`.
fn built(base: &str, serial: u64, payloads: &[&str], taken: i64) -> Vec<Secret> {
    let (k, o) = (key(), owner());
    let chunks = state_chunks(payloads);
    let state = decoded(serial, payloads.len(), Some("h2:abc"));
    let mut req = request(
        &k,
        &o,
        &chunks,
        Some(&state),
        Some("captf-c-prod-apply-a1-abcdef"),
    );
    req.now = t(taken);
    let ordered = ordered_chunks(&k.state_secret(), &chunks).expect("whole state");
    backup_secrets(&req, &state, base, &ordered)
}

fn annotate(secret: &mut Secret, key: &str, value: &str) {
    secret
        .metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.to_owned(), value.to_owned());
}

/// A listed set for retention tests: two Secrets, `<base>` and `<base>-part-1`.
fn set(base: &str, serial: u64, taken: i64, complete: bool) -> BackupSet {
    BackupSet {
        base: base.into(),
        serial,
        lineage: "lin-1".into(),
        digest: format!("digest-{base}"),
        taken_at: Some(t(taken)),
        source_job: None,
        resources: 3,
        inputs_hash: None,
        bytes: 10,
        chunks: 2,
        secrets: vec![base.into(), format!("{base}-part-1")],
        problem: (!complete).then(|| "chunk Secret(s) missing".to_owned()),
        verified: true,
        ownership: Ownership::Owned,
    }
}

fn secrets_of(bases: &[&str]) -> Vec<String> {
    bases
        .iter()
        .flat_map(|b| [b.to_string(), format!("{b}-part-1")])
        .collect()
}

#[test]
fn names_derive_from_the_key() {
    assert_eq!(key().state_suffix(), SUFFIX);
    assert_eq!(key().backup_secret(7), BASE7);
}

#[test]
fn digest_is_stable_and_independent_of_input_order() {
    let base = key().state_secret();
    let in_order = state_chunks(&["a", "b", "c"]);
    let shuffled = vec![
        in_order[2].clone(),
        in_order[0].clone(),
        in_order[1].clone(),
    ];
    let a = ordered_chunks(&base, &in_order).expect("whole");
    let b = ordered_chunks(&base, &shuffled).expect("whole");
    let names: Vec<&str> = b.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            base.clone(),
            format!("{base}-part-1"),
            format!("{base}-part-2")
        ]
    );
    // sha256("abc"): the payloads concatenated in chunk order.
    let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    assert_eq!(digest(&a), abc);
    assert_eq!(digest(&b), abc);
    assert_eq!(digest(&a), digest(&b));
    // The same bytes in other chunks give another digest.
    let swapped = state_chunks(&["b", "a", "c"]);
    let swapped = ordered_chunks(&base, &swapped).expect("whole");
    assert_ne!(digest(&swapped), abc);
}

#[test]
fn ordered_chunks_rejects_what_is_not_a_whole_state() {
    let base = key().state_secret();
    let many: Vec<&str> = vec!["x"; 33];
    let mut no_data = state_chunks(&["a", "b"]);
    no_data[1].data = None;
    let cases: Vec<(&str, Vec<Chunk>, String)> = vec![
        ("empty", vec![], "no state chunk".into()),
        (
            "foreign name",
            vec![Chunk::new(&base, "a"), Chunk::new("other", "b")],
            format!("other is neither {base} nor {base}-part-N"),
        ),
        (
            "twice",
            vec![Chunk::new(&base, "a"), Chunk::new(&base, "b")],
            "chunk index 0 appears twice".into(),
        ),
        (
            "gap",
            vec![
                Chunk::new(&base, "a"),
                Chunk::new(format!("{base}-part-2"), "c"),
            ],
            format!("{base}-part-1 is missing"),
        ),
        (
            "no base",
            vec![Chunk::new(format!("{base}-part-1"), "b")],
            format!("{base} is missing"),
        ),
        (
            "no data",
            no_data,
            format!("{base}-part-1 has no `tfstate` data"),
        ),
        (
            "too many",
            state_chunks(&many),
            "33 chunks exceed the 32 a backup set may hold".into(),
        ),
    ];
    for (name, chunks, want) in cases {
        assert_eq!(ordered_chunks(&base, &chunks).err(), Some(want), "{name}");
    }
}

#[test]
fn plan_names_the_set() {
    let k = key();
    let d = "0123456789abcdef".repeat(4);
    let other = "fedcba9876543210".repeat(4);
    let complete_7 = BackupSet {
        digest: d.clone(),
        ..set(BASE7, 7, 0, true)
    };
    let incomplete_7 = BackupSet {
        digest: d.clone(),
        ..set(BASE7, 7, 0, false)
    };
    let other_7 = BackupSet {
        digest: other.clone(),
        ..set(BASE7, 7, 0, true)
    };
    let suffixed = format!("{BASE7}-01234567");
    let suffixed_7 = BackupSet {
        digest: d.clone(),
        ..set(&suffixed, 7, 10, true)
    };
    let held =
        |bases: &[&str]| -> BTreeSet<String> { bases.iter().map(|b| b.to_string()).collect() };
    type Row = (&'static str, Vec<BackupSet>, BTreeSet<String>, u64, Plan);
    let cases: Vec<Row> = vec![
        (
            "first backup",
            vec![],
            BTreeSet::new(),
            7,
            Plan::Take {
                name: BASE7.into(),
                replace: vec![],
            },
        ),
        (
            "new serial",
            vec![complete_7.clone()],
            BTreeSet::new(),
            8,
            Plan::Take {
                name: "captf-state-backup-f66792f9106e7299-c-8".into(),
                replace: vec![],
            },
        ),
        (
            "same serial, same digest",
            vec![complete_7.clone()],
            BTreeSet::new(),
            7,
            Plan::AlreadyBackedUp { name: BASE7.into() },
        ),
        (
            "same serial, other digest",
            vec![other_7.clone()],
            BTreeSet::new(),
            7,
            Plan::Take {
                name: suffixed.clone(),
                replace: vec![],
            },
        ),
        (
            "the suffixed set already holds it",
            vec![other_7.clone(), suffixed_7.clone()],
            BTreeSet::new(),
            7,
            Plan::AlreadyBackedUp {
                name: suffixed.clone(),
            },
        ),
        (
            "an interrupted copy is written again",
            vec![incomplete_7.clone()],
            BTreeSet::new(),
            7,
            Plan::Take {
                name: BASE7.into(),
                replace: secrets_of(&[BASE7]),
            },
        ),
        (
            "an incomplete suffixed set is replaced",
            vec![
                other_7.clone(),
                BackupSet {
                    problem: Some("missing".into()),
                    ..suffixed_7.clone()
                },
            ],
            BTreeSet::new(),
            7,
            Plan::Take {
                name: suffixed.clone(),
                replace: secrets_of(&[&suffixed]),
            },
        ),
        (
            "a look-alike holds the name: the digest's",
            vec![],
            held(&[BASE7]),
            7,
            Plan::Take {
                name: suffixed.clone(),
                replace: vec![],
            },
        ),
        (
            "a look-alike holds a chunk name of it",
            vec![],
            held(&[&format!("{BASE7}-part-3")]),
            7,
            Plan::Take {
                name: suffixed.clone(),
                replace: vec![],
            },
        ),
        (
            "look-alikes hold both names",
            vec![],
            held(&[BASE7, &suffixed]),
            7,
            Plan::Occupied {
                names: [BASE7.into(), suffixed.clone()],
            },
        ),
    ];
    for (name, existing, occupied, serial, want) in cases {
        assert_eq!(plan(&existing, &occupied, &k, serial, &d), want, "{name}");
    }
}

#[test]
fn backup_secrets_shape() {
    let (k, o) = (key(), owner());
    let chunks = state_chunks(&["gz-a", "gz-b"]);
    let state = decoded(7, 2, Some("h2:abc"));
    let mut req = request(
        &k,
        &o,
        &chunks,
        Some(&state),
        Some("captf-c-prod-apply-a1-abcdef"),
    );
    req.now = Timestamp::from_second(1_800_000_000)
        .and_then(|t| t.checked_add(k8s_openapi::jiff::SignedDuration::from_millis(1500)))
        .expect("time");
    let ordered = ordered_chunks(&k.state_secret(), &chunks).expect("whole");
    let secrets = backup_secrets(&req, &state, BASE7, &ordered);
    assert_eq!(secrets.len(), 2);
    let want_labels = BTreeMap::from([
        (
            "captf.infrastructure.cluster.x-k8s.io/owner-kind".to_owned(),
            "TerraformCluster".to_owned(),
        ),
        (
            "captf.infrastructure.cluster.x-k8s.io/owner-name".to_owned(),
            "prod".to_owned(),
        ),
        (
            "cluster.x-k8s.io/cluster-name".to_owned(),
            "prod-cluster".to_owned(),
        ),
        ("captf.io/managed".to_owned(), "true".to_owned()),
        ("clusterctl.cluster.x-k8s.io/move".to_owned(), String::new()),
        ("captf.io/state-backup".to_owned(), "true".to_owned()),
        ("captf.io/state-backup-suffix".to_owned(), SUFFIX.to_owned()),
    ]);
    let d = digest(&ordered);
    for (i, s) in secrets.iter().enumerate() {
        let name = if i == 0 {
            BASE7.to_owned()
        } else {
            format!("{BASE7}-part-{i}")
        };
        assert_eq!(s.metadata.name.as_deref(), Some(name.as_str()));
        assert_eq!(s.metadata.namespace.as_deref(), Some("team-a"));
        assert_eq!(s.type_.as_deref(), Some("Opaque"));
        let labels = s.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels, &want_labels);
        assert!(!labels.keys().any(|l| l.starts_with("tfstate")));
        let data = s.data.as_ref().expect("data");
        assert_eq!(data.len(), 1);
        assert_eq!(data["tfstate"].0, chunks[i].data.clone().expect("data"));
        let refs = s.metadata.owner_references.as_ref().expect("owner");
        assert_eq!(
            refs,
            &vec![OwnerReference {
                controller: None,
                block_owner_deletion: None,
                ..owner()
            }]
        );
        let a = s.metadata.annotations.as_ref().expect("annotations");
        let mut want = BTreeMap::from([
            ("captf.io/state-backup-serial", "7".to_owned()),
            ("captf.io/state-backup-lineage", "lin-1".to_owned()),
            (
                "captf.io/state-backup-taken-at",
                "2027-01-15T08:00:01Z".to_owned(),
            ),
            (
                "captf.io/state-backup-source-job",
                "captf-c-prod-apply-a1-abcdef".to_owned(),
            ),
            ("captf.io/state-backup-digest", d.clone()),
            ("captf.io/state-backup-resources", "3".to_owned()),
            ("captf.io/state-backup-set", BASE7.to_owned()),
            ("captf.io/state-backup-chunk", i.to_string()),
            ("captf.io/state-backup-chunks", "2".to_owned()),
        ]);
        if i == 0 {
            want.insert("captf.io/inputs-hash", "h2:abc".to_owned());
        }
        let want: BTreeMap<String, String> =
            want.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        assert_eq!(a, &want, "chunk {i}");
    }

    // Without a source Job or inputs hash those annotations are absent.
    let bare = decoded(7, 2, None);
    let mut req = request(&k, &o, &chunks, Some(&bare), None);
    req.now = t(0);
    let secrets = backup_secrets(&req, &bare, BASE7, &ordered);
    for s in &secrets {
        let a = s.metadata.annotations.as_ref().expect("annotations");
        assert!(!a.contains_key("captf.io/state-backup-source-job"));
        assert!(!a.contains_key("captf.io/inputs-hash"));
        assert_eq!(a["captf.io/state-backup-taken-at"], "2027-01-15T08:00:00Z");
    }
}

#[test]
fn retention() {
    let complete = |serials: &[u64]| -> Vec<BackupSet> {
        serials
            .iter()
            .map(|n| set(&format!("s{n}"), *n, *n as i64, true))
            .collect()
    };
    let with = |mut sets: Vec<BackupSet>, extra: BackupSet| {
        sets.push(extra);
        sets
    };
    struct Case {
        name: &'static str,
        sets: Vec<BackupSet>,
        keep: usize,
        pending: Option<u64>,
        current: Option<&'static str>,
        deleted: Vec<&'static str>,
    }
    let cases = vec![
        Case {
            name: "keep 0 keeps everything",
            sets: with(complete(&[1, 2, 3]), set("s4", 4, 4, false)),
            keep: 0,
            pending: None,
            current: None,
            deleted: vec![],
        },
        Case {
            name: "keep 1",
            sets: complete(&[3, 5, 4]),
            keep: 1,
            pending: None,
            current: Some("s5"),
            deleted: vec!["s4", "s3"],
        },
        Case {
            name: "keep 5 under the limit",
            sets: complete(&[1, 2, 3]),
            keep: 5,
            pending: None,
            current: Some("s3"),
            deleted: vec![],
        },
        Case {
            name: "keep 5 over the limit",
            sets: complete(&[1, 2, 3, 4, 5, 6, 7]),
            keep: 5,
            pending: None,
            current: Some("s7"),
            deleted: vec!["s2", "s1"],
        },
        Case {
            name: "the newest set stays while incomplete and does not count",
            sets: with(complete(&[4, 5]), set("s6", 6, 6, false)),
            keep: 1,
            pending: None,
            current: Some("s5"),
            deleted: vec!["s4"],
        },
        Case {
            name: "older incomplete sets go",
            sets: with(
                with(complete(&[4, 5]), set("s2", 2, 2, false)),
                set("s4b", 4, 9, false),
            ),
            keep: 5,
            pending: None,
            current: Some("s5"),
            deleted: vec!["s4b", "s2"],
        },
        Case {
            name: "a pending restore's set is neither deleted nor counted",
            sets: complete(&[3, 4, 5]),
            keep: 1,
            pending: Some(3),
            current: Some("s5"),
            deleted: vec!["s4"],
        },
        Case {
            name: "a pending restore of the newest serial",
            sets: complete(&[3, 4, 5]),
            keep: 1,
            pending: Some(5),
            current: Some("s5"),
            deleted: vec!["s3"],
        },
        Case {
            name: "a pending restore protects an incomplete set too",
            sets: with(complete(&[5]), set("s2", 2, 2, false)),
            keep: 1,
            pending: Some(2),
            current: Some("s5"),
            deleted: vec![],
        },
        Case {
            name: "same serial: the later taken-at is newer",
            sets: vec![set("s5", 5, 20, true), set("s5-x", 5, 10, true)],
            keep: 1,
            pending: None,
            current: Some("s5"),
            deleted: vec!["s5-x"],
        },
        Case {
            name: "the current set stays when older than the newest keep",
            sets: complete(&[5, 7, 6]),
            keep: 1,
            pending: None,
            current: Some("s5"),
            deleted: vec!["s6"],
        },
        Case {
            name: "the current set counts when among the newest keep",
            sets: complete(&[5, 6, 7]),
            keep: 2,
            pending: None,
            current: Some("s7"),
            deleted: vec!["s5"],
        },
    ];
    for c in cases {
        assert_eq!(
            prune(&c.sets, c.keep, c.pending, c.current),
            secrets_of(&c.deleted),
            "{}",
            c.name
        );
    }
}

#[test]
fn status_lists_complete_sets_newest_first_capped() {
    let mut sets: Vec<BackupSet> = (1..=20)
        .map(|n| BackupSet {
            bytes: 100 + n,
            ..set(&format!("s{n}"), n, n as i64, true)
        })
        .collect();
    sets.push(set("s21", 21, 21, false));
    sets.reverse();
    sets.swap(3, 11);
    let entries = status_entries(&sets);
    assert_eq!(entries.len(), 16);
    let serials: Vec<i64> = entries.iter().map(|e| e.serial).collect();
    assert_eq!(serials, (5..=20).rev().collect::<Vec<i64>>());
    assert_eq!(
        entries[0],
        StateBackup {
            serial: 20,
            taken_at: Time(t(20)),
            bytes: 120,
        }
    );
    assert_eq!(status_entries(&[set("s1", 1, 1, false)]), vec![]);
}

#[test]
fn restorable_picks_the_newest_complete_set_of_a_serial() {
    let sets = vec![
        set("s5", 5, 10, true),
        set("s5-b", 5, 30, false),
        set("s5-a", 5, 20, true),
        set("s6", 6, 40, true),
    ];
    assert_eq!(restorable(&sets, 5).map(|s| s.base.as_str()), Some("s5-a"));
    assert_eq!(restorable(&sets, 4), None);
    assert_eq!(set("x", 5, 0, false).restore_source(), None);
}

#[test]
fn skip_reasons_and_metric_results() {
    let ok = decoded(3, 1, None);
    let zero = decoded(0, 1, None);
    let cases = [
        (0, false, Some(&ok), Some(SkipReason::Disabled)),
        (0, true, None, Some(SkipReason::Disabled)),
        (5, true, Some(&ok), Some(SkipReason::Deleting)),
        (5, false, None, Some(SkipReason::StateUnreadable)),
        (5, false, Some(&zero), Some(SkipReason::NoSerial)),
        (5, false, Some(&ok), None),
        (16, false, Some(&ok), None),
    ];
    for (keep, deleting, state, want) in cases {
        assert_eq!(
            skip_reason(keep, deleting, state),
            want,
            "{keep} {deleting}"
        );
    }
    let taken = Outcome::Taken {
        name: BASE7.into(),
        pruned: vec![],
    };
    let already = Outcome::AlreadyBackedUp {
        name: BASE7.into(),
        pruned: vec![],
    };
    assert_eq!(taken.result(), Some("taken"));
    assert_eq!(already.result(), None);
    assert_eq!(
        Outcome::Skipped(SkipReason::Disabled).result(),
        Some("skipped")
    );
    assert_eq!(RESULT_FAILED, "failed");
    assert_eq!(SkipReason::StateUnreadable.as_str(), "state_unreadable");
}

mod sets;
