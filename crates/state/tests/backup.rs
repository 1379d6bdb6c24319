//! Backup set annotations, digest and the completeness check.

mod common;

use captf_api::annotations;
use captf_state::{
    BackupInfo, Chunk, Limits, StateError, backup_annotations, decode, set_digest,
    verify_backup_set,
};
use common::{BASE, gz_json, sample_state, split_into};

const SET: &str = "captf-state-backup-0123456789abcdef-c-42";

/// A 3-chunk state with an inputs hash, and its backup set.
fn backup_set() -> Vec<Chunk> {
    let payload = gz_json(&sample_state());
    let mut chunks = split_into(BASE, &payload, 3);
    chunks[0]
        .annotations
        .insert(annotations::INPUTS_HASH.into(), "h2:abc".into());
    let state = decode(BASE, &chunks, Limits::default()).expect("decodes");
    let payloads: Vec<Vec<u8>> = chunks
        .iter()
        .map(|c| c.data.clone().expect("data"))
        .collect();
    let info = BackupInfo {
        set: SET,
        taken_at: "2026-01-02T03:04:05Z",
        source_job: Some("captf-c-prod-apply-a1-abc123"),
    };
    backup_annotations(&state, &payloads, &info)
        .into_iter()
        .zip(payloads)
        .enumerate()
        .map(|(i, (annotations, data))| Chunk {
            name: captf_api::names::chunk_name(SET, i),
            data: Some(data),
            annotations,
        })
        .collect()
}

fn problem(err: StateError) -> String {
    assert_eq!(err.reason(), "RestoreBackupNotFound");
    match err {
        StateError::BackupIncomplete { problem, .. } => problem,
        other => panic!("expected BackupIncomplete, got {other:?}"),
    }
}

#[test]
fn annotations_follow_the_catalogue() {
    let set = backup_set();
    let payloads: Vec<&[u8]> = set
        .iter()
        .map(|c| c.data.as_deref().expect("data"))
        .collect();
    let digest = set_digest(&payloads);
    assert_eq!(digest.len(), 64);
    for (i, c) in set.iter().enumerate() {
        let a = &c.annotations;
        assert_eq!(a[annotations::STATE_BACKUP_SERIAL], "42");
        assert_eq!(
            a[annotations::STATE_BACKUP_LINEAGE],
            "6f1c1d2e-1111-2222-3333-444455556666"
        );
        assert_eq!(
            a[annotations::STATE_BACKUP_TAKEN_AT],
            "2026-01-02T03:04:05Z"
        );
        assert_eq!(
            a[annotations::STATE_BACKUP_SOURCE_JOB],
            "captf-c-prod-apply-a1-abc123"
        );
        assert_eq!(a[annotations::STATE_BACKUP_DIGEST], digest);
        assert_eq!(a[annotations::STATE_BACKUP_RESOURCES], "2");
        assert_eq!(a[annotations::STATE_BACKUP_SET], SET);
        assert_eq!(a[annotations::STATE_BACKUP_CHUNK], i.to_string());
        assert_eq!(a[annotations::STATE_BACKUP_CHUNKS], "3");
        assert_eq!(
            a.get(annotations::INPUTS_HASH).is_some(),
            i == 0,
            "inputs hash on chunk 0 only"
        );
    }
}

#[test]
fn the_digest_is_over_the_concatenation() {
    // Where the pieces are cut does not matter, their order does.
    assert_eq!(
        set_digest(&[b"ab".as_slice(), b"c"]),
        set_digest(&[b"a".as_slice(), b"bc"])
    );
    assert_ne!(
        set_digest(&[b"ab".as_slice(), b"c"]),
        set_digest(&[b"c".as_slice(), b"ab"])
    );
    // SHA-256("abc").
    assert_eq!(
        set_digest(&[b"abc"]),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    );
}

#[test]
fn a_complete_set_verifies_in_any_order() {
    let mut set = backup_set();
    assert_eq!(verify_backup_set(&set), Ok(42));
    set.reverse();
    assert_eq!(verify_backup_set(&set), Ok(42));
}

#[test]
fn a_missing_chunk_is_named() {
    let mut set = backup_set();
    set.remove(1);
    let p = problem(verify_backup_set(&set).expect_err("missing"));
    assert!(p.contains(&format!("{SET}-part-1")), "{p}");
    let mut set = backup_set();
    set.remove(0);
    let p = problem(verify_backup_set(&set).expect_err("missing base"));
    assert!(p.contains(&format!("missing: {SET}")), "{p}");
}

/// Breaks a backup set in one way.
type Damage = Box<dyn Fn(&mut Vec<Chunk>)>;

#[test]
fn damaged_sets_are_rejected() {
    let cases: Vec<(&str, Damage)> = vec![
        (
            "digest",
            Box::new(|s| s[2].data.as_mut().expect("data")[0] ^= 1),
        ),
        ("twice", Box::new(|s| s.push(s[1].clone()))),
        (
            "different",
            Box::new(|s| {
                s[1].annotations
                    .insert(annotations::STATE_BACKUP_SERIAL.into(), "41".into());
            }),
        ),
        (
            "non-numeric",
            Box::new(|s| {
                s[1].annotations
                    .insert(annotations::STATE_BACKUP_CHUNK.into(), "one".into());
            }),
        ),
        (
            "lacks",
            Box::new(|s| {
                s[2].annotations.remove(annotations::STATE_BACKUP_DIGEST);
            }),
        ),
        ("named", Box::new(|s| s[1].name = format!("{SET}-part-7"))),
        ("no `tfstate`", Box::new(|s| s[1].data = None)),
        (
            "serial is 0",
            Box::new(|s| {
                for c in s.iter_mut() {
                    c.annotations
                        .insert(annotations::STATE_BACKUP_SERIAL.into(), "0".into());
                }
            }),
        ),
        (
            "outside",
            Box::new(|s| {
                for c in s.iter_mut() {
                    c.annotations
                        .insert(annotations::STATE_BACKUP_CHUNKS.into(), "33".into());
                }
            }),
        ),
        ("no chunk", Box::new(|s| s.clear())),
    ];
    for (want, damage) in cases {
        let mut set = backup_set();
        damage(&mut set);
        let p = problem(verify_backup_set(&set).expect_err(want));
        assert!(p.contains(want), "{want}: {p}");
    }
}
