//! Identity resolution, the credential mirror `captf-creds-<identity>`, and the namespace's
//! runner ServiceAccount and RoleBinding.

use std::collections::BTreeMap;

use captf_api::conditions::{Status, reasons, types};
use captf_api::{TerraformClusterIdentity, annotations, labels, names};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use sha2::{Digest, Sha256};

use crate::cache::Caches;
use crate::error::{KubeContext, Result};

/// Name of the runner ServiceAccount, RoleBinding and ClusterRole.
pub const RUNNER: &str = "captf-runner";

/// How far credentials got, as condition values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub identity_allowed: (Status, &'static str, String),
    pub mirrored: (Status, &'static str, String),
    /// The identity name when everything is in place.
    pub ready: Option<String>,
    /// The mirror this pass deleted because the identity no longer allows the namespace.
    pub mirror_removed: Option<String>,
    /// The mirror this pass created (it did not exist).
    pub mirror_created: Option<String>,
}

impl Outcome {
    fn blocked(status: Status, reason: &'static str, message: String) -> Self {
        Outcome {
            identity_allowed: (status, reason, message),
            mirrored: (
                Status::Unknown,
                reasons::MIRROR_PENDING,
                "waiting for the identity check".into(),
            ),
            ready: None,
            mirror_removed: None,
            mirror_created: None,
        }
    }
}

/// Resolves `identity` for an object in `namespace` and keeps its mirror current; `owner` is
/// added to the mirror's owner references so the mirror goes away with its last user.
pub async fn ensure(
    client: &kube::Client,
    caches: &Caches,
    namespace: &str,
    identity: Option<&str>,
    owner: &OwnerReference,
) -> Result<Outcome> {
    let Some(identity) = identity else {
        return Ok(Outcome::blocked(
            Status::False,
            reasons::IDENTITY_NOT_FOUND,
            "no identity: set spec.identityRef.name to a TerraformClusterIdentity".into(),
        ));
    };
    let id = match allowed_identity(client, caches, namespace, identity).await? {
        Ok(id) => id,
        Err(blocked) => return Ok(blocked),
    };
    let source_ref = &id.spec.secret_ref;
    let sources: Api<Secret> = Api::namespaced(client.clone(), &source_ref.namespace);
    let Some(source) = sources.get_opt(&source_ref.name).await.during(|| {
        format!(
            "reading Secret {}/{}",
            source_ref.namespace, source_ref.name
        )
    })?
    else {
        return Ok(Outcome::blocked(
            Status::False,
            reasons::SECRET_NOT_FOUND,
            format!(
                "the credentials Secret {}/{} of TerraformClusterIdentity {identity} does not exist",
                source_ref.namespace, source_ref.name
            ),
        ));
    };
    mirror(client, caches, namespace, identity, source, owner).await
}

/// TerraformClusterIdentity `identity`, when it exists and allows `namespace`; else why not
/// (and a mirror of an identity that stopped allowing the namespace deleted).
async fn allowed_identity(
    client: &kube::Client,
    caches: &Caches,
    namespace: &str,
    identity: &str,
) -> Result<std::result::Result<TerraformClusterIdentity, Outcome>> {
    // The cache, or a live read for an identity it has not seen yet.
    let id = match caches.identities.get(&ObjectRef::new(identity)) {
        Some(id) => Some(TerraformClusterIdentity::clone(&id)),
        None => Api::<TerraformClusterIdentity>::all(client.clone())
            .get_opt(identity)
            .await
            .during(|| format!("reading TerraformClusterIdentity {identity}"))?,
    };
    let Some(id) = id else {
        return Ok(Err(Outcome::blocked(
            Status::False,
            reasons::IDENTITY_NOT_FOUND,
            format!(
                "TerraformClusterIdentity {identity} does not exist: create it or fix spec.identityRef.name"
            ),
        )));
    };
    let ns_labels = match caches.namespaces.get(&ObjectRef::new(namespace)) {
        Some(ns) => ns.metadata.labels.clone(),
        None => Api::<Namespace>::all(client.clone())
            .get_opt(namespace)
            .await
            .during(|| format!("reading Namespace {namespace}"))?
            .and_then(|n| n.metadata.labels),
    }
    .unwrap_or_default();
    if !crate::identity::allows(&id, namespace, &ns_labels) {
        let mut blocked = Outcome::blocked(
            Status::False,
            reasons::NAMESPACE_NOT_ALLOWED,
            format!(
                "TerraformClusterIdentity {identity} does not allow namespace {namespace}: add it to spec.allowedNamespaces (list or selector)"
            ),
        );
        blocked.mirror_removed = revoke_mirror(client, caches, namespace, identity).await?;
        return Ok(Err(blocked));
    }
    Ok(Ok(id))
}

/// The namespace's mirror `captf-creds-<identity>` of the identity's Secret `source`, written
/// when its content or `owner`'s entry is not current. A Secret of that name that is not a
/// mirror is never overwritten.
async fn mirror(
    client: &kube::Client,
    caches: &Caches,
    namespace: &str,
    identity: &str,
    source: Secret,
    owner: &OwnerReference,
) -> Result<Outcome> {
    let allowed = (Status::True, reasons::IDENTITY_ALLOWED, String::new());
    let data: BTreeMap<String, k8s_openapi::ByteString> = source.data.unwrap_or_default();
    let hash = source_hash(&data);
    let mirrors: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let name = names::credential_mirror(identity);
    // The mirror's metadata from the cache when it shows the mirror current; read live before
    // any write, so a lagging cache never drops an owner another pass just added.
    let cached = caches
        .secrets
        .mirror(namespace, &name)
        .filter(|m| mirror_current(&m.metadata, &hash, owner));
    let existing = match cached {
        Some(m) => Some(m.metadata.clone()),
        None => mirrors
            .get_opt(&name)
            .await
            .during(|| format!("reading Secret {namespace}/{name}"))?
            .map(|s| s.metadata),
    };
    if let Some(existing) = &existing {
        let is_mirror = existing
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::MIRRORED))
            .is_some_and(|v| v == labels::TRUE);
        if !is_mirror {
            return Ok(Outcome {
                identity_allowed: allowed,
                mirrored: (
                    Status::False,
                    reasons::MIRROR_FAILED,
                    format!(
                        "Secret {namespace}/{name} exists and is not a CAPTF credential mirror: rename or delete it so CAPTF can mirror identity {identity}"
                    ),
                ),
                ready: None,
                mirror_removed: None,
                mirror_created: None,
            });
        }
    }
    let created = existing.is_none().then(|| name.clone());
    if !existing
        .as_ref()
        .is_some_and(|e| mirror_current(e, &hash, owner))
    {
        let owners = with_owner(
            existing
                .as_ref()
                .and_then(|e| e.owner_references.clone())
                .unwrap_or_default(),
            owner,
        );
        let mirror = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(namespace.to_owned()),
                labels: Some(BTreeMap::from([
                    (labels::MIRRORED.to_owned(), labels::TRUE.to_owned()),
                    (labels::MANAGED.to_owned(), labels::TRUE.to_owned()),
                ])),
                annotations: Some(BTreeMap::from([
                    (annotations::SOURCE_HASH.to_owned(), hash),
                    (annotations::IDENTITY.to_owned(), identity.to_owned()),
                ])),
                owner_references: Some(owners),
                ..Default::default()
            },
            data: Some(data),
            type_: Some("Opaque".into()),
            ..Default::default()
        };
        mirrors
            .patch(
                &name,
                &PatchParams::apply(captf_api::FIELD_MANAGER).force(),
                &Patch::Apply(&mirror),
            )
            .await
            .during(|| format!("writing credential mirror {namespace}/{name}"))?;
    }
    Ok(Outcome {
        identity_allowed: allowed,
        mirrored: (Status::True, reasons::MIRRORED, String::new()),
        ready: Some(identity.to_owned()),
        mirror_removed: None,
        mirror_created: created,
    })
}

/// Deletes the namespace's mirror of `identity`, which no longer allows the namespace: the
/// credentials must not stay where they may not be used. Returns the mirror's name when it was
/// deleted. The mirror is found in the cache; one the cache has not seen yet goes at a later
/// pass (a blocked object passes again within 30 seconds). The UID precondition keeps a
/// Secret made under the same name since from being deleted in its place.
async fn revoke_mirror(
    client: &kube::Client,
    caches: &Caches,
    namespace: &str,
    identity: &str,
) -> Result<Option<String>> {
    let name = names::credential_mirror(identity);
    let Some(uid) = caches
        .secrets
        .mirror(namespace, &name)
        .and_then(|m| mirror_uid(&m.metadata, identity))
    else {
        return Ok(None);
    };
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let mirrors: Api<Secret> = Api::namespaced(client.clone(), namespace);
    match mirrors.delete(&name, &params).await {
        Ok(_) => Ok(Some(name)),
        // Gone already, or no longer the Secret the cache saw.
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(None),
        Err(source) => Err(crate::Error::Kube {
            action: format!("deleting credential mirror {namespace}/{name}"),
            source,
        }),
    }
}

/// The UID of `mirror` when it is CAPTF's mirror of `identity` (pure): labelled
/// `captf.io/mirrored=true` and annotated with the identity's name.
fn mirror_uid(
    mirror: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    identity: &str,
) -> Option<String> {
    let labelled = mirror
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::MIRRORED))
        .is_some_and(|v| v == labels::TRUE);
    let of_identity = mirror
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::IDENTITY))
        .is_some_and(|i| i == identity);
    mirror.uid.clone().filter(|_| labelled && of_identity)
}

/// The mirror holds the source's data (by its hash) and lists `owner` as it should.
fn mirror_current(
    mirror: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    hash: &str,
    owner: &OwnerReference,
) -> bool {
    let owners = mirror.owner_references.clone().unwrap_or_default();
    mirror
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::SOURCE_HASH))
        .is_some_and(|h| h == hash)
        && with_owner(owners.clone(), owner) == owners
}

/// The mirror's owner references once `owner` is among them (pure): one reference per user,
/// a plain (non-controller) one; a reference to an earlier UID of the same object is replaced
/// where it stands. Users sharing the mirror (a cluster and its machines) must not reorder
/// the list, or each would rewrite it after the other, forever.
pub fn with_owner(mut owners: Vec<OwnerReference>, owner: &OwnerReference) -> Vec<OwnerReference> {
    let reference = OwnerReference {
        controller: None,
        block_owner_deletion: None,
        ..owner.clone()
    };
    match owners
        .iter()
        .position(|o| o.kind == owner.kind && o.name == owner.name)
    {
        Some(i) => owners[i] = reference,
        None => owners.push(reference),
    }
    owners
}

/// SHA-256 over the source data, keys in order.
fn source_hash(data: &BTreeMap<String, k8s_openapi::ByteString>) -> String {
    let mut h = Sha256::new();
    for (k, v) in data {
        h.update(k.as_bytes());
        h.update([0]);
        h.update(&v.0);
        h.update([0]);
    }
    hex::encode(h.finalize())
}

/// The caches show the namespace's runner ServiceAccount, and its RoleBinding binding what
/// [`bound_accounts`] says: nothing to read live or write. Anything else is checked live.
fn runner_rbac_cached(caches: &Caches, namespace: &str, account: &str) -> Result<bool> {
    if caches
        .managed_accounts
        .get(&ObjectRef::new(RUNNER).within(namespace))
        .is_none()
    {
        return Ok(false);
    }
    let Some(existing) = caches
        .role_bindings
        .get(&ObjectRef::new(RUNNER).within(namespace))
    else {
        return Ok(false);
    };
    let opted_in: Vec<String> = caches
        .runner_accounts
        .state()
        .iter()
        .filter(|sa| sa.metadata.namespace.as_deref() == Some(namespace))
        .filter_map(|sa| sa.metadata.name.clone())
        .collect();
    let bound = bound_accounts(Some(&existing), &opted_in, account);
    let desired = runner_binding(namespace, &bound)?;
    Ok(binding_action(Some(&existing), &desired) == BindingAction::Keep)
}

/// The accounts the runner RoleBinding lends Secret access to besides `captf-runner`: the
/// account this object's Jobs run as (`spec.jobs.serviceAccountName`) once it opted in, and
/// those the binding already names that are still opted in. The label is consent, not a grant:
/// an opted-in account no object runs its Jobs as is never bound, so labelling an account does
/// not by itself give it the namespace's Secrets.
pub fn bound_accounts(
    existing: Option<&RoleBinding>,
    opted_in: &[String],
    account: &str,
) -> Vec<String> {
    let consented = |name: &str| opted_in.iter().any(|o| o == name);
    let mut bound: Vec<String> = existing
        .and_then(|b| b.subjects.as_ref())
        .into_iter()
        .flatten()
        .filter(|s| s.kind == "ServiceAccount" && s.name != RUNNER && consented(&s.name))
        .map(|s| s.name.clone())
        .collect();
    if account != RUNNER && consented(account) {
        bound.push(account.to_owned());
    }
    bound.sort_unstable();
    bound.dedup();
    bound
}

/// What to do about the namespace's `captf-runner` RoleBinding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingAction {
    Create,
    /// Only the subjects changed.
    Update,
    /// The role changed, which a RoleBinding cannot: delete it and create it again.
    Recreate,
    Keep,
    /// Someone else's RoleBinding of that name (no `captf.io/managed=true`): never touched.
    Foreign,
}

/// Compares the RoleBinding there with the one wanted.
pub fn binding_action(existing: Option<&RoleBinding>, desired: &RoleBinding) -> BindingAction {
    let Some(existing) = existing else {
        return BindingAction::Create;
    };
    let managed = existing
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(labels::MANAGED))
        .is_some_and(|v| v == labels::TRUE);
    if !managed {
        BindingAction::Foreign
    } else if existing.role_ref != desired.role_ref {
        BindingAction::Recreate
    } else if existing.subjects != desired.subjects {
        BindingAction::Update
    } else {
        BindingAction::Keep
    }
}

/// The runner RoleBinding of `namespace`: `captf-runner` and the accounts `bound`
/// ([`bound_accounts`]), sorted.
pub fn runner_binding(namespace: &str, bound: &[String]) -> Result<RoleBinding> {
    let mut names: Vec<&str> = bound.iter().map(String::as_str).collect();
    names.push(RUNNER);
    names.sort_unstable();
    names.dedup();
    let subjects: Vec<serde_json::Value> = names
        .into_iter()
        .map(|name| serde_json::json!({"kind": "ServiceAccount", "name": name, "namespace": namespace}))
        .collect();
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": RUNNER,
            "namespace": namespace,
            "labels": {labels::MANAGED: labels::TRUE},
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": RUNNER},
        "subjects": subjects,
    }))?)
}

/// Whether Jobs may run as the ServiceAccount `name` (`sa` as read): `captf-runner` always;
/// another only when it exists and carries `captf.io/runner=true`. The label is its owner's
/// consent to lend it to CAPTF Jobs, so a tenant cannot run a module as any account of the
/// namespace merely by naming it.
pub fn may_run_as(
    namespace: &str,
    name: &str,
    sa: Option<&ServiceAccount>,
) -> std::result::Result<(), String> {
    if name == RUNNER {
        return Ok(());
    }
    let opted_in = sa
        .and_then(|sa| sa.metadata.labels.as_ref())
        .and_then(|l| l.get(labels::RUNNER))
        .is_some_and(|v| v == labels::TRUE);
    match (sa, opted_in) {
        (_, true) => Ok(()),
        (None, _) => Err(format!(
            "the Jobs would run as ServiceAccount {namespace}/{name} (spec.jobs.serviceAccountName), which does not exist: create it with the label {}=true, or remove serviceAccountName to use {RUNNER}",
            labels::RUNNER
        )),
        (Some(_), false) => Err(format!(
            "the Jobs would run as ServiceAccount {namespace}/{name} (spec.jobs.serviceAccountName), which has not opted in: kubectl label serviceaccount {name} -n {namespace} {}=true, or remove serviceAccountName to use {RUNNER}",
            labels::RUNNER
        )),
    }
}

/// Reads the ServiceAccount a Job would run as and checks [`may_run_as`].
pub async fn check_service_account(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> Result<std::result::Result<(), String>> {
    if name == RUNNER {
        return Ok(Ok(()));
    }
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let sa = sas
        .get_opt(name)
        .await
        .during(|| format!("reading ServiceAccount {namespace}/{name}"))?;
    Ok(may_run_as(namespace, name, sa.as_ref()))
}

/// Ensures the namespace's `captf-runner` ServiceAccount and its RoleBinding to the
/// `captf-runner` ClusterRole, whose subjects are `captf-runner` and the accounts
/// [`bound_accounts`] gives for `account`, the one this object's Jobs run as (removing the
/// label removes an account at the next pass).
pub async fn ensure_runner_rbac(
    client: &kube::Client,
    caches: &Caches,
    namespace: &str,
    account: &str,
) -> Result<()> {
    if runner_rbac_cached(caches, namespace, account)? {
        return Ok(());
    }
    let managed = BTreeMap::from([(labels::MANAGED.to_owned(), labels::TRUE.to_owned())]);
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    if sas
        .get_opt(RUNNER)
        .await
        .during(|| format!("reading ServiceAccount {namespace}/{RUNNER}"))?
        .is_none()
    {
        let sa = ServiceAccount {
            metadata: kube::api::ObjectMeta {
                name: Some(RUNNER.into()),
                labels: Some(managed.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        match sas.create(&PostParams::default(), &sa).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => {
                return Err(crate::Error::Kube {
                    action: format!("creating ServiceAccount {namespace}/{RUNNER}"),
                    source: e,
                });
            }
        }
    }
    let opted_in: Vec<String> = sas
        .list_metadata(&ListParams::default().labels(&format!(
            "{}={}",
            labels::RUNNER,
            labels::TRUE
        )))
        .await
        .during(|| format!("listing opted-in ServiceAccounts of {namespace}"))?
        .items
        .into_iter()
        .filter_map(|sa| sa.metadata.name)
        .collect();
    // get/create/update rather than server-side apply: the manager's role has no patch on
    // RoleBindings.
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), namespace);
    let existing = bindings
        .get_opt(RUNNER)
        .await
        .during(|| format!("reading RoleBinding {namespace}/{RUNNER}"))?;
    let bound = bound_accounts(existing.as_ref(), &opted_in, account);
    let binding = runner_binding(namespace, &bound)?;
    let create = |bindings: Api<RoleBinding>, binding: RoleBinding| async move {
        match bindings.create(&PostParams::default(), &binding).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
            Err(e) => Err(crate::Error::Kube {
                action: format!("creating RoleBinding {namespace}/{RUNNER}"),
                source: e,
            }),
        }
    };
    match binding_action(existing.as_ref(), &binding) {
        BindingAction::Keep => {}
        BindingAction::Create => create(bindings, binding).await?,
        BindingAction::Recreate => {
            bindings
                .delete(RUNNER, &Default::default())
                .await
                .during(|| {
                    format!("deleting RoleBinding {namespace}/{RUNNER} to change its role")
                })?;
            create(bindings, binding).await?;
        }
        BindingAction::Update => {
            let mut updated = binding;
            updated.metadata.resource_version = existing.and_then(|e| e.metadata.resource_version);
            bindings
                .replace(RUNNER, &PostParams::default(), &updated)
                .await
                .during(|| format!("updating RoleBinding {namespace}/{RUNNER}"))?;
        }
        BindingAction::Foreign => {
            return Err(crate::Error::InvalidObject(format!(
                "RoleBinding {namespace}/{RUNNER} exists and is not CAPTF's (it lacks {}={}), so it is left alone and Jobs may lack their permissions: delete or rename it, or label it {}={} to hand it to CAPTF",
                labels::MANAGED,
                labels::TRUE,
                labels::MANAGED,
                labels::TRUE
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;

impl<K> crate::reconcile::pass::Pass<'_, K>
where
    K: crate::reconcile::pass::Workload
        + kube::Resource<Scope = kube::core::NamespaceResourceScope>,
{
    /// The object's credentials mirrored and its namespace's runner RBAC kept current, at
    /// once (each is a round trip or two), and what they say in IdentityAllowed,
    /// CredentialsMirrored and RunnerRBACReady.
    /// `account` is the ServiceAccount the object's Jobs run as.
    pub async fn ensure_credentials(
        &self,
        identity: Option<&str>,
        account: &str,
        owner_ref: &OwnerReference,
        conds: &mut crate::conditions::Conditions,
    ) -> Result<Outcome> {
        let (client, caches, ns) = (&self.ctx.client, &self.ctx.caches, self.key.namespace());
        let (creds, runner_rbac) = futures::try_join!(
            ensure(client, caches, ns, identity, owner_ref),
            // Not the pass's error: RunnerRBACReady says what failed.
            async { Ok(ensure_runner_rbac(client, caches, ns, account).await) },
        )?;
        if let Some(mirror) = &creds.mirror_removed {
            self.publish(
                EventType::Normal,
                captf_api::events::MIRROR_REMOVED,
                &format!(
                    "deleted the credential mirror {ns}/{mirror}: TerraformClusterIdentity {} no longer allows the namespace",
                    identity.unwrap_or_default()
                ),
            )
            .await;
        }
        if let Some(mirror) = &creds.mirror_created {
            self.publish(
                EventType::Normal,
                captf_api::events::MIRROR_CREATED,
                &format!(
                    "created the credential mirror {ns}/{mirror} of TerraformClusterIdentity {}",
                    identity.unwrap_or_default()
                ),
            )
            .await;
        }
        Ok(self.note_credentials(creds, runner_rbac, conds))
    }

    /// IdentityAllowed, CredentialsMirrored and RunnerRBACReady, from what
    /// [`ensure_credentials`](Self::ensure_credentials) found.
    fn note_credentials(
        &self,
        creds: Outcome,
        runner_rbac: Result<()>,
        conds: &mut crate::conditions::Conditions,
    ) -> Outcome {
        let (status, reason, _) = &creds.identity_allowed;
        let denied = match *reason {
            reasons::IDENTITY_NOT_FOUND => Some("notfound"),
            reasons::NAMESPACE_NOT_ALLOWED => Some("namespace"),
            _ => None,
        }
        .filter(|_| *status == Status::False);
        // Once per refusal, not once per pass: the condition held its reason already (its
        // status says so after a restart), or this manager counted it (a pass may start from a
        // cached object that lags its last status patch).
        let held = conds
            .get(types::IDENTITY_ALLOWED)
            .is_some_and(|c| c.reason == *reason);
        let uid = self.object.meta().uid.clone().unwrap_or_default();
        let first = self
            .ctx
            .metrics
            .counted
            .first(&uid, "identity_denied", denied);
        if let Some(denied) = denied.filter(|_| !held && first) {
            self.ctx
                .metrics
                .identity_denied_total
                .get_or_create(&crate::metrics::Reason { reason: denied })
                .inc();
        }
        conds.set(
            types::IDENTITY_ALLOWED,
            creds.identity_allowed.0,
            creds.identity_allowed.1,
            &creds.identity_allowed.2,
            self.generation,
            self.now,
        );
        conds.set(
            types::CREDENTIALS_MIRRORED,
            creds.mirrored.0,
            creds.mirrored.1,
            &creds.mirrored.2,
            self.generation,
            self.now,
        );
        match runner_rbac {
            Ok(()) => conds.set(
                types::RUNNER_RBAC_READY,
                Status::True,
                reasons::RBAC_READY,
                "",
                self.generation,
                self.now,
            ),
            Err(e) => conds.set(
                types::RUNNER_RBAC_READY,
                Status::False,
                reasons::RBAC_FAILED,
                &e.to_string(),
                self.generation,
                self.now,
            ),
        }
        creds
    }
}
