use super::*;
use std::collections::BTreeMap;
use std::future::ready;
use std::time::Duration;

use captf_api::annotations;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use watcher::Event::{Apply, Delete, Init, InitApply, InitDone};

/// Far longer than any of these runs takes. Time is paused in these tests and only moves on
/// when no task can make progress, so running out of it means the index stalled, never that
/// the machine was slow.
const STALLED: Duration = Duration::from_secs(600);

const OWNER: &str = "6f1c2b7e-0d4a-4c52-9a53-1b2c3d4e5f60";
const OTHER_OWNER: &str = "6f1c2b7e-0d4a-4c52-9a53-1b2c3d4e5f61";

/// Secret `name` of namespace `ns`, owned by `owners`.
fn secret(ns: &str, name: &str, owners: &[&str]) -> SecretMeta {
    let mut s = SecretMeta {
        types: None,
        metadata: Default::default(),
        _phantom: Default::default(),
    };
    s.metadata.name = Some(name.into());
    s.metadata.namespace = Some(ns.into());
    s.metadata.owner_references = Some(
        owners
            .iter()
            .map(|uid| OwnerReference {
                uid: (*uid).into(),
                ..Default::default()
            })
            .collect(),
    );
    s
}

/// The credential mirror of identity `id` in `ns`.
fn mirror(ns: &str, id: &str) -> SecretMeta {
    let mut s = secret(ns, &format!("mirror-{id}"), &[]);
    s.metadata.labels = Some(BTreeMap::from([(
        labels::MIRRORED.to_owned(),
        labels::TRUE.to_owned(),
    )]));
    s.metadata.annotations = Some(BTreeMap::from([(
        annotations::IDENTITY.to_owned(),
        id.to_owned(),
    )]));
    s
}

/// `s` as the watch reports it deleted: marked with a deletion timestamp, which nothing the
/// index hands on otherwise is, to tell the deletion from a write.
fn deleted(mut s: SecretMeta) -> SecretMeta {
    s.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
    s
}

fn name(s: &SecretMeta) -> String {
    s.metadata.name.clone().unwrap_or_default()
}

#[test]
fn trimmed_keeps_owners_and_only_the_mirrors_labels() {
    let owner = OwnerReference {
        uid: "u".into(),
        ..Default::default()
    };
    let secret = |mirrored: Option<&str>| {
        let mut s = SecretMeta {
            types: Some(kube::core::TypeMeta {
                api_version: "meta.k8s.io/v1".into(),
                kind: "PartialObjectMetadata".into(),
            }),
            metadata: Default::default(),
            _phantom: Default::default(),
        };
        let mut l = BTreeMap::from([(labels::MANAGED.to_owned(), labels::TRUE.to_owned())]);
        if let Some(v) = mirrored {
            l.insert(labels::MIRRORED.to_owned(), v.to_owned());
        }
        s.metadata.labels = Some(l);
        s.metadata.annotations = Some(BTreeMap::from([(
            annotations::IDENTITY.to_owned(),
            "id".to_owned(),
        )]));
        s.metadata.owner_references = Some(vec![owner.clone()]);
        s.metadata.managed_fields = Some(vec![Default::default()]);
        s.metadata.uid = Some("secret-uid".into());
        s.metadata.resource_version = Some("7".into());
        s
    };
    // (what, label captf.io/mirrored, labels, annotations, UID and version kept)
    let rows = [
        ("a state chunk, backup or durable inputs", None, false),
        ("a credential mirror", Some(labels::TRUE), true),
        ("mirrored set to something else", Some("false"), false),
    ];
    for (what, mirrored, kept) in rows {
        let s = trimmed(secret(mirrored));
        let m = &s.metadata;
        assert_eq!(m.labels.is_some(), kept, "{what}: labels");
        assert_eq!(m.annotations.is_some(), kept, "{what}: annotations");
        assert_eq!(m.uid.is_some(), kept, "{what}: uid");
        assert_eq!(
            m.resource_version.is_some(),
            kept,
            "{what}: resourceVersion"
        );
        assert_eq!(
            m.owner_references.as_deref(),
            Some(&[owner.clone()][..]),
            "{what}"
        );
        assert!(m.managed_fields.is_none(), "{what}: managedFields");
        assert!(s.types.is_none(), "{what}: type");
    }
}

#[test]
fn owned_by_table() {
    let none = {
        let mut s = secret("ns", "s", &[]);
        s.metadata.owner_references = None;
        s
    };
    // (what, the Secret, owned by OWNER)
    let rows = [
        ("no references", none, false),
        ("an empty list", secret("ns", "s", &[]), false),
        (
            "an earlier object's UID",
            secret("ns", "s", &[OTHER_OWNER]),
            false,
        ),
        ("owned", secret("ns", "s", &[OWNER]), true),
        (
            "owned among others",
            secret("ns", "s", &[OTHER_OWNER, OWNER]),
            true,
        ),
        (
            "owned by a UID that is no UUID",
            secret("ns", "s", &["u"]),
            false,
        ),
    ];
    for (what, s, owned) in rows {
        let mut index = Index::default();
        index.insert(&Arc::new(s));
        assert_eq!(index.owned_by("ns", "s", OWNER), Some(owned), "{what}");
        assert_eq!(
            index.owned_by("ns", "t", OWNER),
            None,
            "{what}: another name"
        );
        assert_eq!(
            index.owned_by("other", "s", OWNER),
            None,
            "{what}: elsewhere"
        );
    }
    let mut index = Index::default();
    index.insert(&Arc::new(secret("ns", "s", &["u"])));
    assert_eq!(index.owned_by("ns", "s", "u"), Some(true), "any UID string");
}

#[test]
fn the_index_knows_which_secrets_hold_the_state_protection() {
    let held = |mut s: SecretMeta| {
        s.metadata.finalizers = Some(vec![
            "example.com/other".to_owned(),
            finalizers::STATE_PROTECTION.to_owned(),
        ]);
        s
    };
    let mut index = Index::default();
    for s in [
        held(secret("ns", "backup-1", &[OWNER])),
        secret("ns", "backup-2", &[OWNER]),
        secret("ns", "backup-3", &[OTHER_OWNER]),
        secret("ns", "other-4", &[OWNER]),
        secret("elsewhere", "backup-5", &[OWNER]),
        {
            let mut s = secret("ns", "backup-6", &[OWNER]);
            s.metadata.finalizers = Some(vec!["example.com/other".to_owned()]);
            s
        },
    ] {
        index.insert(&Arc::new(s));
    }
    assert_eq!(index.protected("ns", "backup-1"), Some(true));
    assert_eq!(index.protected("ns", "backup-2"), Some(false));
    assert_eq!(
        index.protected("ns", "backup-6"),
        Some(false),
        "someone else's only"
    );
    assert_eq!(index.protected("ns", "missing"), None);
    assert_eq!(
        index.unprotected_owned("ns", OWNER, "backup-"),
        ["backup-2", "backup-6"],
        "owned, named so, in this namespace, and not held yet"
    );
    index.insert(&Arc::new(held(secret("ns", "backup-2", &[OWNER]))));
    assert_eq!(
        index.unprotected_owned("ns", OWNER, "backup-"),
        ["backup-6"]
    );
}

#[test]
fn two_uids_are_the_same_exactly_when_their_strings_are() {
    let upper = OWNER.to_uppercase();
    let braced = format!("{{{OWNER}}}");
    let misplaced = format!("{}-{}", &OWNER[..7], &OWNER[8..]);
    let not_hex = OWNER.replace('f', "g");
    // (what, UID, its bytes kept rather than the string)
    let rows: [(&str, &str, bool); 7] = [
        ("a UUID as the API server writes it", OWNER, true),
        ("another", OTHER_OWNER, true),
        ("in upper case", &upper, false),
        ("in braces", &braced, false),
        ("a hyphen out of place", &misplaced, false),
        ("not hexadecimal", &not_hex, false),
        ("not a UUID at all", "u", false),
    ];
    for (what, uid, as_bytes) in rows {
        assert_eq!(
            matches!(Uid::from(uid), Uid::Uuid(_)),
            as_bytes,
            "{what}: {uid}"
        );
    }
    for (a, x, _) in rows {
        for (b, y, _) in rows {
            assert_eq!(Uid::from(x) == Uid::from(y), x == y, "{a} against {b}");
        }
    }
    assert_eq!(
        uuid_bytes("00112233-4455-6677-8899-aabbccddeeff"),
        Some([
            0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd,
            0xee, 0xff
        ])
    );
}

#[tokio::test(start_paused = true)]
async fn the_index_follows_the_watch_and_wakes_for_changes_after_its_first_list()
-> anyhow::Result<()> {
    let (events, watch) = futures::channel::mpsc::unbounded();
    let (secrets, changes, run) = index(watch.map(Ok));
    let run = tokio::spawn(run.count());
    let mut woken = changes.into_subscription().boxed();
    let mut next_woken = async || {
        let secret = tokio::time::timeout(STALLED, woken.next()).await?;
        anyhow::Ok(secret.map(|s| (name(&s), s.metadata.deletion_timestamp.is_some())))
    };
    let owned = |name: &str, uid: &str| secrets.owned_by("ns", name, uid);
    let mirrors = || {
        let mut names: Vec<_> = secrets.mirrors().iter().map(|m| name(m)).collect();
        names.sort();
        names
    };

    for event in [
        Init,
        InitApply(secret("ns", "state", &[OWNER])),
        InitApply(secret("ns", "backup", &[OWNER])),
        InitApply(mirror("ns", "a")),
        InitDone,
    ] {
        events.unbounded_send(event)?;
    }
    tokio::time::timeout(STALLED, secrets.wait_until_ready()).await?;
    assert_eq!(secrets.len(), 3);
    assert_eq!(owned("state", OWNER), Some(true));
    assert_eq!(owned("state", OTHER_OWNER), Some(false));
    assert_eq!(owned("missing", OWNER), None, "a Secret not held");
    assert_eq!(secrets.owned_by("elsewhere", "state", OWNER), None);
    assert_eq!(mirrors(), ["mirror-a"]);
    let kept = secrets.mirror("ns", "mirror-a");
    assert_eq!(
        kept.and_then(|m| m.metadata.annotations.clone())
            .and_then(|a| a.get(annotations::IDENTITY).cloned())
            .as_deref(),
        Some("a"),
        "a mirror is kept whole"
    );

    // The first list woke nobody: the next change is the first thing handed on.
    events.unbounded_send(Apply(secret("ns", "inputs", &[OWNER])))?;
    assert_eq!(next_woken().await?, Some(("inputs".into(), false)));
    assert_eq!(owned("inputs", OWNER), Some(true));

    // Restored from a backup, owned by an object of a new UID.
    events.unbounded_send(Apply(secret("ns", "state", &[OTHER_OWNER])))?;
    assert_eq!(next_woken().await?, Some(("state".into(), false)));
    assert_eq!(owned("state", OWNER), Some(false));
    assert_eq!(owned("state", OTHER_OWNER), Some(true));

    events.unbounded_send(Delete(deleted(secret("ns", "backup", &[OWNER]))))?;
    assert_eq!(next_woken().await?, Some(("backup".into(), true)));
    assert_eq!(owned("backup", OWNER), None);

    // A mirror whose label was taken off is no longer a mirror.
    let mut relabelled = mirror("ns", "a");
    relabelled.metadata.labels = None;
    events.unbounded_send(Apply(relabelled))?;
    assert_eq!(next_woken().await?, Some(("mirror-a".into(), false)));
    assert_eq!(mirrors(), Vec::<String>::new());
    assert_eq!(
        owned("mirror-a", OWNER),
        Some(false),
        "still a managed Secret"
    );

    // The watch fell behind and lists again: "inputs" went meanwhile, a mirror came. Every
    // Secret listed is handed on; the one gone leaves the index.
    for event in [
        Init,
        InitApply(secret("ns", "state", &[OTHER_OWNER])),
        InitApply(mirror("other", "b")),
        InitDone,
    ] {
        events.unbounded_send(event)?;
    }
    assert_eq!(next_woken().await?, Some(("state".into(), false)));
    assert_eq!(next_woken().await?, Some(("mirror-b".into(), false)));
    drop(events);
    tokio::time::timeout(STALLED, run).await??;
    assert_eq!(
        next_woken().await?,
        None,
        "the subscription ends with the watch"
    );
    assert_eq!(secrets.len(), 2);
    assert_eq!(owned("inputs", OWNER), None);
    assert_eq!(mirrors(), ["mirror-b"]);
    assert!(secrets.mirror("other", "mirror-b").is_some());
    Ok(())
}

/// Three buffers' worth of Secrets.
const N: usize = 3 * SUBSCRIBE_BUFFER;

/// A watch that lists `listed` Secrets, then writes the rest of `N` one by one and deletes
/// secret-0.
fn busy_watch(
    listed: usize,
) -> impl Stream<Item = Result<watcher::Event<SecretMeta>, watcher::Error>> + Send + 'static {
    let s = |i: usize| secret("ns", &format!("secret-{i}"), &[OWNER]);
    let mut events = vec![Init];
    events.extend((0..listed).map(|i| InitApply(s(i))));
    events.push(InitDone);
    events.extend((listed..N).map(|i| Apply(s(i))));
    events.push(Delete(deleted(s(0))));
    futures::stream::iter(events.into_iter().map(Ok))
}

#[tokio::test(start_paused = true)]
async fn every_subscription_takes_every_change_of_a_busy_index() -> anyhow::Result<()> {
    // (what, Secrets in the first list, subscriptions before the last)
    let rows = [
        ("written one by one after an empty list", 0, 1),
        (
            "a list then writes, to as many consumers as the manager has",
            SUBSCRIBE_BUFFER,
            3,
        ),
        ("the last subscription alone", SUBSCRIBE_BUFFER, 0),
    ];
    for (what, listed, subscribed) in rows {
        let (secrets, changes, run) = index(busy_watch(listed));
        let mut consumers: Vec<_> = (0..subscribed)
            .map(|_| changes.subscribe().boxed())
            .collect();
        consumers.push(changes.into_subscription().boxed());
        let Some(taken) = crate::cache::tests::drained(consumers, run).await else {
            anyhow::bail!(
                "{what}: stalled, the watch or a consumer never ended (the index holds {} of \
                 {N})",
                secrets.len()
            );
        };
        assert_eq!(secrets.len(), N - 1, "{what}: all but the deleted one");
        let mut written: Vec<_> = (listed..N).map(|i| format!("secret-{i}")).collect();
        written.sort();
        for (i, objects) in taken.iter().enumerate() {
            let (gone, mut changed): (Vec<_>, Vec<_>) = objects
                .iter()
                .map(|o| (name(o), o.metadata.deletion_timestamp.is_some()))
                .partition(|(_, gone)| *gone);
            changed.sort();
            let changed: Vec<_> = changed.into_iter().map(|(n, _)| n).collect();
            assert_eq!(changed, written, "{what}: consumer {i}, each write once");
            assert_eq!(
                gone,
                [("secret-0".to_owned(), true)],
                "{what}: consumer {i}, the deletion"
            );
        }
    }
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn only_a_subscription_left_unread_holds_the_watch_back() {
    // (what, subscriptions read, subscriptions left unread, the watch runs to its end)
    let rows = [
        ("nobody subscribed", 0, 0, true),
        ("one subscription, read", 1, 0, true),
        ("one read, one left unread", 1, 1, false),
    ];
    for (what, read, unread, ends) in rows {
        let (secrets, changes, run) = index(busy_watch(0));
        for _ in 0..read {
            tokio::spawn(changes.subscribe().for_each(|_| ready(())));
        }
        let kept: Vec<_> = (0..unread).map(|_| changes.subscribe()).collect();
        let ended = tokio::time::timeout(STALLED, run.count()).await.is_ok();
        assert_eq!(ended, ends, "{what}: the watch ran to its end");
        // Each Secret is indexed before it is handed on; the first one the buffer has no room
        // for waits there.
        let indexed = if ends { N - 1 } else { SUBSCRIBE_BUFFER + 1 };
        assert_eq!(secrets.len(), indexed, "{what}: Secrets indexed");
        drop((kept, changes));
    }
}
