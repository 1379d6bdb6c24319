//! Which Secrets form the object's sets, and which count ([`super::super::sets`]).

use super::*;

#[test]
fn built_secrets_read_back_as_one_complete_set() {
    let secrets = built(BASE7, 7, &["gz-a", "gz-b", "gz-c"], 5);
    let sets = read_back(&secrets, OBJECT);
    assert_eq!(sets.len(), 1);
    let s = &sets[0];
    assert_eq!(s.problem, None);
    assert!(s.complete());
    assert_eq!(s.base, BASE7);
    assert_eq!(s.serial, 7);
    assert_eq!(s.lineage, "lin-1");
    assert_eq!(s.digest, set_digest(&["gz-a", "gz-b", "gz-c"]));
    assert_eq!(s.taken_at, Some(t(5)));
    assert_eq!(
        s.source_job.as_deref(),
        Some("captf-c-prod-apply-a1-abcdef")
    );
    assert_eq!(s.resources, 3);
    assert_eq!(s.inputs_hash.as_deref(), Some("h2:abc"));
    assert_eq!(s.bytes, 12);
    assert_eq!(s.chunks, 3);
    assert_eq!(
        s.secrets,
        [
            BASE7.to_owned(),
            format!("{BASE7}-part-1"),
            format!("{BASE7}-part-2")
        ]
    );
    assert_eq!(
        s.restore_source(),
        Some(RestoreSource {
            serial: 7,
            chunk_secrets: s.secrets.clone(),
            managed_resources: 3,
            lineage: "lin-1".to_owned(),
        })
    );
    // Listed in any order: the same set.
    let mut reversed = secrets.clone();
    reversed.reverse();
    assert_eq!(read_back(&reversed, OBJECT), sets);
}

#[test]
fn grouping_finds_incomplete_sets() {
    let base = |serial: u64| key().backup_secret(serial);
    // Complete sets of serials 3 and 5.
    let mut all = built(&base(3), 3, &["a", "b"], 0);
    all.extend(built(&base(5), 5, &["c"], 0));
    // Serial 4: part-1 of three is missing.
    let mut missing = built(&base(4), 4, &["d", "e", "f"], 0);
    missing.remove(1);
    all.extend(missing);
    // Serial 6: both chunks claim a set of three.
    let mut count = built(&base(6), 6, &["g", "h"], 0);
    for s in &mut count {
        annotate(s, "captf.io/state-backup-chunks", "3");
    }
    all.extend(count);
    // Serial 8: not a number; serial 9: zero.
    for (serial, value) in [(8, "eight"), (9, "0")] {
        let mut bad = built(&base(serial), serial, &["i"], 0);
        annotate(&mut bad[0], "captf.io/state-backup-serial", value);
        all.extend(bad);
    }
    // Serial 10: the data no longer matches the digest.
    let mut tampered = built(&base(10), 10, &["j"], 0);
    if let Some(data) = tampered[0].data.as_mut() {
        data.insert("tfstate".into(), k8s_openapi::ByteString(b"other".to_vec()));
    }
    all.extend(tampered);
    // Serial 11: taken-at unreadable.
    let mut when = built(&base(11), 11, &["k"], 0);
    annotate(&mut when[0], "captf.io/state-backup-taken-at", "yesterday");
    all.extend(when);
    // A Secret with the suffix label but no set annotation.
    let mut stray = built("stray", 12, &["l"], 0);
    stray[0].metadata.name = Some("stray-secret".into());
    if let Some(a) = stray[0].metadata.annotations.as_mut() {
        a.remove("captf.io/state-backup-set");
    }
    all.extend(stray);
    // Serial 13: being deleted, ignored.
    let mut going = built(&base(13), 13, &["m"], 0);
    going[0].metadata.deletion_timestamp = Some(Time(t(1)));
    going[0].metadata.finalizers = None;
    all.extend(going);
    // Serial 2: deleted by someone else and held by the state protection: still a backup.
    let mut held = built(&base(2), 2, &["n"], 0);
    held[0].metadata.deletion_timestamp = Some(Time(t(1)));
    all.extend(held);

    let got: Vec<(String, u64, bool, usize, Vec<String>)> = read_back(&all, OBJECT)
        .into_iter()
        .map(|s| (s.base.clone(), s.serial, s.complete(), s.chunks, s.secrets))
        .collect();
    let want = vec![
        (
            "stray-secret".to_owned(),
            12,
            false,
            1,
            vec!["stray-secret".to_owned()],
        ),
        (base(11), 11, false, 1, vec![base(11)]),
        (base(10), 10, false, 1, vec![base(10)]),
        (
            base(6),
            6,
            false,
            3,
            vec![base(6), format!("{}-part-1", base(6))],
        ),
        (base(5), 5, true, 1, vec![base(5)]),
        (
            base(4),
            4,
            false,
            3,
            vec![base(4), format!("{}-part-2", base(4))],
        ),
        (
            base(3),
            3,
            true,
            2,
            vec![base(3), format!("{}-part-1", base(3))],
        ),
        (base(2), 2, true, 1, vec![base(2)]),
        (base(9), 0, false, 1, vec![base(9)]),
        (base(8), 0, false, 1, vec![base(8)]),
    ];
    assert_eq!(got, want);

    let problems: BTreeMap<String, String> = read_back(&all, OBJECT)
        .into_iter()
        .filter_map(|s| Some((s.base, s.problem?)))
        .collect();
    assert_eq!(
        problems[&base(4)],
        format!("chunk Secret(s) missing: {}-part-1", base(4))
    );
    assert_eq!(
        problems[&base(6)],
        format!("chunk Secret(s) missing: {}-part-2", base(6))
    );
    assert_eq!(problems[&base(9)], "serial is 0");
    assert_eq!(
        problems[&base(10)],
        "the data does not match the recorded digest"
    );
    assert_eq!(
        problems[&base(11)],
        "captf.io/state-backup-taken-at is missing or not an RFC 3339 time"
    );
    assert!(problems.contains_key(&base(8)));
    assert!(problems.contains_key("stray-secret"));
}

#[test]
fn only_the_objects_own_sets_count() {
    let foreign = OwnerReference {
        uid: "uid-2".into(),
        name: "other".into(),
        ..owner()
    };
    // An earlier TerraformCluster named "prod", gone: its kept backups are as good as ownerless.
    let earlier = OwnerReference {
        uid: "uid-0".into(),
        ..owner()
    };
    // How each chunk of a two-chunk set is owned: `Some(refs)` or `None` for no references.
    type Refs = Option<Vec<OwnerReference>>;
    type Row = (
        &'static str,
        [Refs; 2],
        &'static str,
        Option<&'static str>,
        Ownership,
        bool,
    );
    let mine = || Some(vec![owner()]);
    let theirs = || Some(vec![foreign.clone()]);
    let before = || Some(vec![earlier.clone()]);
    let rows: Vec<Row> = vec![
        (
            "an earlier object of the same name, own lineage",
            [before(), before()],
            "lin-1",
            Some("lin-1"),
            Ownership::Ownerless,
            true,
        ),
        (
            "an earlier object of the same name, another lineage",
            [before(), before()],
            "lin-x",
            Some("lin-1"),
            Ownership::Ownerless,
            false,
        ),
        (
            "re-owned half-way from an earlier object, own lineage",
            [mine(), before()],
            "lin-1",
            Some("lin-1"),
            Ownership::Ownerless,
            true,
        ),
        (
            "an earlier object of the same name and another owner",
            [before(), theirs()],
            "lin-1",
            Some("lin-1"),
            Ownership::Foreign,
            false,
        ),
        (
            "owned",
            [mine(), mine()],
            "lin-1",
            None,
            Ownership::Owned,
            true,
        ),
        (
            "restored without owners, own lineage",
            [None, None],
            "lin-1",
            Some("lin-1"),
            Ownership::Ownerless,
            true,
        ),
        (
            "re-owned half-way, own lineage",
            [mine(), None],
            "lin-1",
            Some("lin-1"),
            Ownership::Ownerless,
            true,
        ),
        (
            "without owners, lineage unknown",
            [None, None],
            "lin-1",
            None,
            Ownership::Ownerless,
            false,
        ),
        (
            "without owners, another lineage",
            [None, None],
            "lin-x",
            Some("lin-1"),
            Ownership::Ownerless,
            false,
        ),
        (
            "another owner",
            [theirs(), theirs()],
            "lin-1",
            Some("lin-1"),
            Ownership::Foreign,
            false,
        ),
        (
            "one chunk of another owner",
            [mine(), theirs()],
            "lin-1",
            Some("lin-1"),
            Ownership::Foreign,
            false,
        ),
        (
            "the object and another owner",
            [mine(), Some(vec![owner(), foreign.clone()])],
            "lin-1",
            None,
            Ownership::Foreign,
            false,
        ),
    ];
    for (name, refs, lineage, own, ownership, counts) in rows {
        let mut secrets = built(BASE7, 7, &["gz-a", "gz-b"], 0);
        for (secret, refs) in secrets.iter_mut().zip(refs) {
            secret.metadata.owner_references = refs;
            annotate(secret, "captf.io/state-backup-lineage", lineage);
        }
        let listed = read_back(&secrets, OBJECT);
        assert_eq!(listed[0].ownership, ownership, "{name}");
        assert!(listed[0].complete(), "{name}");
        let (counted, ignored) = trusted(listed, own);
        assert_eq!(counted.len(), usize::from(counts), "{name}");
        assert_eq!(ignored.is_empty(), counts, "{name}");
    }
}

#[test]
fn a_set_is_complete_only_once_its_data_matched_the_digest() {
    let secrets = built(BASE7, 7, &["gz-a", "gz-b"], 0);
    let metas: Vec<ObjectMeta> = secrets.iter().map(|s| s.metadata.clone()).collect();
    let listed = sets(&metas, OBJECT);
    assert_eq!(listed[0].problem, None);
    assert!(!listed[0].complete(), "judged from metadata alone");
    let mut set = listed[0].clone();
    settle(&mut set, Ok((set_digest(&["gz-a", "gz-b"]), 8)));
    assert!(set.complete());
    assert_eq!(set.bytes, 8);
    let mut set = listed[0].clone();
    settle(&mut set, Ok((set_digest(&["gz-a", "other"]), 9)));
    assert_eq!(set.problem.as_deref(), Some(DIGEST_MISMATCH));
    let mut set = listed[0].clone();
    settle(&mut set, Err(format!("{BASE7}-part-1")));
    assert_eq!(
        set.problem,
        Some(format!("{BASE7}-part-1 has no `tfstate` data"))
    );
}
