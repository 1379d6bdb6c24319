//! One admission review: decode the request, run the kind's rules (and, where a rule needs
//! the API server, ask it), and answer as the API server expects: 422 Invalid with one cause per
//! violation, 403 for a refused delete, 500 when a check could not be made.

use std::time::Duration;

use captf_api::common::{SecretReference, WorkspaceSpec};
use captf_api::labels;
use captf_api::{
    TerraformCluster, TerraformClusterIdentity, TerraformClusterTemplate, TerraformMachine,
    TerraformMachinePool, TerraformMachinePoolTemplate, TerraformMachineTemplate,
};
use captf_contract::varschema::Schema;
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::Status;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::response::{StatusCause, StatusDetails, StatusSummary};
use serde::de::DeserializeOwned;

use super::Endpoint;
use super::bounded::{self, Refused};
use super::guards;
use super::rules::{self, Change, ManagerUser};
use super::violations::Violations;
use crate::job::PolicyLayers;
use crate::reconcile::observe::member;
use crate::registry::Registry;
use crate::schemas::{Known, Schemas};

/// Longest wait for the API server while deciding (its own timeout for us is 10 s).
const CHECK_TIMEOUT: Duration = Duration::from_secs(8);

/// Longest wait for a member's Cluster and TerraformCluster, which the variables schema read
/// (itself within 2 s) follows.
const CLUSTER_TIMEOUT: Duration = Duration::from_secs(2);

/// What the webhooks need besides the request.
pub struct Webhook {
    /// The manager's client; its reads bypass every cache.
    pub client: kube::Client,
    pub manager: ManagerUser,
    /// Reads module images' variables schemas; `None` without root certificates.
    pub registry: Option<Registry>,
    pub schemas: Schemas,
}

/// How a request is answered.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Allowed,
    /// 422: the object breaks these rules.
    Invalid(Violations),
    /// 403: the operation is refused as a whole (a delete guard).
    Forbidden(String),
    /// 400: the request itself cannot be read.
    BadRequest(String),
    /// 500: a check could not be made; the API server refuses the write (fail closed).
    Internal(String),
}

impl Outcome {
    /// Allowed when no rule is broken.
    fn of(violations: Violations) -> Outcome {
        if violations.is_empty() {
            Outcome::Allowed
        } else {
            Outcome::Invalid(violations)
        }
    }
}

/// Answers one AdmissionReview body.
pub async fn review(
    webhook: &Webhook,
    endpoint: Endpoint,
    body: &[u8],
) -> AdmissionReview<DynamicObject> {
    let (request, limits) = match read(endpoint, body) {
        Ok(read) => read,
        Err(answer) => return *answer,
    };
    let outcome = decide(webhook, endpoint, &request, limits).await;
    tracing::debug!(
        kind = endpoint.kind(),
        namespace = request.namespace.as_deref().unwrap_or_default(),
        name = %request.name,
        operation = ?request.operation,
        user = request.user_info.username.as_deref().unwrap_or_default(),
        ?outcome,
        "admission"
    );
    respond(&request, endpoint, outcome).into_review()
}

/// The request of an AdmissionReview body, parsed only once it is within the limits
/// ([`bounded`]), and the limits its object breaks; or the answer to a body that is refused
/// unparsed.
fn read(
    endpoint: Endpoint,
    body: &[u8],
) -> Result<(AdmissionRequest<DynamicObject>, Violations), Box<AdmissionReview<DynamicObject>>> {
    let prepared = bounded::prepare(endpoint, body).map_err(|Refused { uid, message }| {
        let mut response = AdmissionResponse::invalid(message);
        response.uid = uid;
        response.result.code = 400;
        Box::new(response.into_review())
    })?;
    let unreadable = |why: String| Box::new(AdmissionResponse::invalid(why).into_review());
    let review: AdmissionReview<DynamicObject> = serde_json::from_slice(&prepared.body)
        .map_err(|e| unreadable(format!("the body is not an AdmissionReview: {e}")))?;
    let request = review
        .try_into()
        .map_err(|_| unreadable("the AdmissionReview carries no request".to_owned()))?;
    Ok((request, prepared.violations))
}

async fn decide(
    webhook: &Webhook,
    endpoint: Endpoint,
    request: &AdmissionRequest<DynamicObject>,
    limits: Violations,
) -> Outcome {
    match request.operation {
        Operation::Create | Operation::Update => write(webhook, endpoint, request, limits).await,
        Operation::Delete => delete(webhook, endpoint, request).await,
        Operation::Connect => Outcome::Allowed,
    }
}

/// A create or update: `limits` are what the object breaks of the size limits, found before
/// it was parsed.
async fn write(
    webhook: &Webhook,
    endpoint: Endpoint,
    request: &AdmissionRequest<DynamicObject>,
    limits: Violations,
) -> Outcome {
    match judge(&webhook.manager, endpoint, request) {
        Err(outcome) => outcome,
        Ok(Judged::Workload(violations, subject)) => match (limits.then(violations), subject) {
            // The schema is read only once every other rule holds: a malformed image
            // reference or variable name is reported by those first.
            (violations, Some(subject)) if violations.is_empty() => {
                Outcome::of(variables_schema(webhook, endpoint, request, subject).await)
            }
            (violations, _) => Outcome::of(violations),
        },
        Ok(Judged::Identity(verdict)) => identity_write(webhook, request, verdict).await,
    }
}

/// What the rules decide about a create or an update by themselves, before the API server or
/// a registry is asked anything.
enum Judged {
    /// A workload or template: its violations, and the workspace whose inline variables its
    /// image's variables schema must still check.
    Workload(Violations, Option<Subject>),
    /// An identity: its violations, and the Secret its author must be allowed to read.
    Identity(rules::IdentityVerdict),
}

/// Decodes the request's objects as the endpoint's kind, once, and runs its rules.
fn judge(
    manager: &ManagerUser,
    endpoint: Endpoint,
    request: &AdmissionRequest<DynamicObject>,
) -> Result<Judged, Outcome> {
    const SPEC: &str = "spec";
    const TEMPLATE: &str = "spec.template.spec";
    // Each kind's object is decoded once; its rules and the workspace whose variables need
    // the image's schema both come from that one decoding.
    match endpoint {
        Endpoint::Cluster => admit(request, |c| {
            let at = subject(&c, SPEC, |o: &TerraformCluster| &o.spec.workspace);
            Judged::Workload(rules::cluster(&c), at)
        }),
        Endpoint::ClusterTemplate => admit(request, |c| {
            let at = subject(&c, TEMPLATE, |o: &TerraformClusterTemplate| {
                &o.spec.template.spec.workspace
            });
            Judged::Workload(rules::cluster_template(&c), at)
        }),
        Endpoint::Machine => admit(request, |c| {
            let at = subject(&c, SPEC, |o: &TerraformMachine| &o.spec.workspace);
            Judged::Workload(rules::machine(&c, manager), at)
        }),
        Endpoint::MachineTemplate => admit(request, |c| {
            let at = subject(&c, TEMPLATE, |o: &TerraformMachineTemplate| {
                &o.spec.template.spec.workspace
            });
            Judged::Workload(rules::machine_template(&c), at)
        }),
        Endpoint::MachinePool => admit(request, |c| {
            let at = subject(&c, SPEC, |o: &TerraformMachinePool| &o.spec.workspace);
            Judged::Workload(rules::machine_pool(&c), at)
        }),
        Endpoint::MachinePoolTemplate => admit(request, |c| {
            let at = subject(&c, TEMPLATE, |o: &TerraformMachinePoolTemplate| {
                &o.spec.template.spec.workspace
            });
            Judged::Workload(rules::machine_pool_template(&c), at)
        }),
        Endpoint::Identity => admit(request, |c: Change<'_, TerraformClusterIdentity>| {
            Judged::Identity(rules::identity(&c))
        }),
    }
}

async fn identity_write(
    webhook: &Webhook,
    request: &AdmissionRequest<DynamicObject>,
    verdict: rules::IdentityVerdict,
) -> Outcome {
    let mut violations = verdict.violations;
    if let Some(secret) = &verdict.check_read {
        match may_read(&webhook.client, &request.user_info, secret).await {
            Ok(true) => {}
            Ok(false) => violations.forbidden(
                "spec.secretRef",
                format!(
                    "user {:?} may not get Secret {}/{}; an identity may only reference a Secret its author can read",
                    request.user_info.username.as_deref().unwrap_or_default(),
                    secret.namespace,
                    secret.name
                ),
            ),
            Err(e) => {
                return Outcome::Internal(format!(
                    "cannot check that the author may read the Secret: {e}"
                ));
            }
        }
    }
    Outcome::of(violations)
}

/// A workspace whose inline variables are to be checked against its image's schema.
struct Subject {
    /// Where the workspace sits in the object, for the violations' fields.
    path: &'static str,
    workspace: WorkspaceSpec,
}

/// The workspace at `path` of the changed object when its variables need checking.
fn subject<K: kube::Resource>(
    change: &Change<'_, K>,
    path: &'static str,
    workspace: fn(&K) -> &WorkspaceSpec,
) -> Option<Subject> {
    let new = workspace(change.new);
    rules::variables_schema::needs_check(new, change.old.map(workspace), change.deleting()).then(
        || Subject {
            path,
            workspace: new.clone(),
        },
    )
}

/// The inline variables against the module image's variables schema. A schema that cannot be
/// had refuses nothing.
async fn variables_schema(
    webhook: &Webhook,
    endpoint: Endpoint,
    request: &AdmissionRequest<DynamicObject>,
    Subject { path, workspace }: Subject,
) -> Violations {
    let mut v = Violations::default();
    let namespace = request.namespace.as_deref().unwrap_or_default();
    let cluster = match endpoint {
        Endpoint::Machine | Endpoint::MachinePool => member_cluster(webhook, request).await,
        _ => None,
    };
    // The Secrets the object's Jobs pull with: a member's include those its cluster passes
    // down, so an image only the cluster's Secret opens is checked here and not only later,
    // by the pass.
    let layers = PolicyLayers::for_member(workspace.jobs.as_deref(), cluster.as_ref());
    let pull_secrets = layers.pull_secret_names();
    let pull_secrets: Vec<&str> = pull_secrets.iter().map(String::as_str).collect();
    let field = match cluster {
        Some(_) => layers.pull_secrets_field().to_owned(),
        None => format!("{path}.jobs.imagePullSecrets"),
    };
    let known = webhook
        .schemas
        .lookup(
            webhook.registry.as_ref(),
            &webhook.client,
            namespace,
            &workspace.source.image,
            &pull_secrets,
            &field,
        )
        .await;
    if let Known::Schema(schema) = known {
        rules::variables_schema::variables_fit(&mut v, path, &workspace, &schema);
    }
    v
}

/// The TerraformCluster a machine or pool belongs to, found through its
/// `cluster.x-k8s.io/cluster-name` label and the CAPI Cluster's `spec.infrastructureRef`.
/// `None` when there is none yet, or it cannot be read within [`CLUSTER_TIMEOUT`]: the
/// object's own pull Secrets are then all there is, as for a template.
async fn member_cluster(
    webhook: &Webhook,
    request: &AdmissionRequest<DynamicObject>,
) -> Option<TerraformCluster> {
    let namespace = request.namespace.as_deref().unwrap_or_default();
    let name = request
        .object
        .as_ref()?
        .metadata
        .labels
        .as_ref()?
        .get(labels::CLUSTER_NAME)?;
    let read = member::cluster_of(&webhook.client, namespace, name);
    let why = match tokio::time::timeout(CLUSTER_TIMEOUT, read).await {
        Ok(Ok(Ok(of))) => return Some(of.infra),
        Ok(Ok(Err((_, _, waiting)))) => waiting,
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!(
            "the API server did not answer within {}s",
            CLUSTER_TIMEOUT.as_secs()
        ),
    };
    tracing::debug!(
        namespace,
        cluster = %name,
        object = %request.name,
        %why,
        "variables schema read with the object's own pull Secrets only"
    );
    None
}

/// Decodes the request's objects as `K` and runs `rules` over them.
fn admit<K: DeserializeOwned + kube::Resource, T>(
    request: &AdmissionRequest<DynamicObject>,
    rules: impl FnOnce(Change<'_, K>) -> T,
) -> Result<T, Outcome> {
    let new: K = decode(request.object.as_ref())?
        .ok_or_else(|| Outcome::BadRequest("the request carries no object".into()))?;
    let old: Option<K> = match request.operation {
        Operation::Update => decode(request.old_object.as_ref())?,
        _ => None,
    };
    Ok(rules(Change {
        new: &new,
        old: old.as_ref(),
        user: request.user_info.username.as_deref().unwrap_or_default(),
        dry_run: request.dry_run,
    }))
}

fn decode<K: DeserializeOwned>(object: Option<&DynamicObject>) -> Result<Option<K>, Outcome> {
    object
        .map(|o| {
            serde_json::to_value(o)
                .and_then(serde_json::from_value)
                .map_err(|e| Outcome::BadRequest(format!("the object does not decode: {e}")))
        })
        .transpose()
}

async fn delete(
    webhook: &Webhook,
    endpoint: Endpoint,
    request: &AdmissionRequest<DynamicObject>,
) -> Outcome {
    let checked = match endpoint {
        Endpoint::Machine => {
            let machine: TerraformMachine = match decode(request.old_object.as_ref()) {
                Ok(Some(machine)) => machine,
                // Nothing to judge by: the entry fails open anyway.
                _ => return Outcome::Allowed,
            };
            timed(guards::machine_delete_facts(&webhook.client, &machine))
                .await
                .map(|(moving, owners)| guards::machine_delete(&machine, moving, &owners))
        }
        Endpoint::Identity => {
            let identity: TerraformClusterIdentity = match decode(request.old_object.as_ref()) {
                Ok(Some(identity)) => identity,
                _ => return Outcome::Allowed,
            };
            timed(guards::identity_users_now(&webhook.client, &request.name))
                .await
                .map(|users| guards::identity_delete(&identity, &users))
        }
        _ => Ok(Ok(())),
    };
    match checked {
        Ok(Ok(())) => Outcome::Allowed,
        Ok(Err(refusal)) => Outcome::Forbidden(refusal),
        Err(e) => Outcome::Internal(format!("cannot check what still uses the object: {e}")),
    }
}

async fn timed<T>(call: impl Future<Output = Result<T, kube::Error>>) -> Result<T, String> {
    match tokio::time::timeout(CHECK_TIMEOUT, call).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err(format!(
            "the API server did not answer within {}s",
            CHECK_TIMEOUT.as_secs()
        )),
    }
}

/// A SubjectAccessReview: may the requesting user `get` the Secret?
async fn may_read(
    client: &kube::Client,
    user: &UserInfo,
    secret: &SecretReference,
) -> Result<bool, String> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            uid: user.uid.clone(),
            groups: user.groups.clone(),
            extra: user.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(secret.namespace.clone()),
                verb: Some("get".into()),
                group: Some(String::new()),
                version: Some("v1".into()),
                resource: Some("secrets".into()),
                name: Some(secret.name.clone()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let answer = timed(api.create(&PostParams::default(), &review)).await?;
    Ok(answer
        .status
        .is_some_and(|s| s.allowed && s.denied != Some(true)))
}

fn respond(
    request: &AdmissionRequest<DynamicObject>,
    endpoint: Endpoint,
    outcome: Outcome,
) -> AdmissionResponse {
    let mut response = AdmissionResponse::from(request);
    let (code, reason, message, causes) = match outcome {
        Outcome::Allowed => return response,
        Outcome::Invalid(v) => {
            let message = v.message(endpoint.kind(), &request.name);
            let causes = v
                .into_vec()
                .into_iter()
                .map(|v| StatusCause {
                    reason: v.problem.cause().into(),
                    message: v.detail,
                    field: v.field,
                })
                .collect();
            (422, "Invalid", message, causes)
        }
        Outcome::Forbidden(message) => (403, "Forbidden", message, Vec::new()),
        Outcome::BadRequest(message) => (400, "BadRequest", message, Vec::new()),
        Outcome::Internal(message) => (500, "InternalError", message, Vec::new()),
    };
    response.allowed = false;
    let mut status = Status::failure(&message, reason);
    status.status = Some(StatusSummary::Failure);
    status.code = code;
    status.details = Some(StatusDetails {
        name: request.name.clone(),
        group: captf_api::GROUP.into(),
        kind: endpoint.plural().into(),
        uid: String::new(),
        causes,
        retry_after_seconds: 0,
    });
    response.result = status;
    response
}

/// Answers one AdmissionReview body as [`review`] does, without the API server or a registry:
/// the same decoding, rules and answer, with what only they could say taken as given. The
/// author may read the identity's Secret, no Machine owns a deleted TerraformMachine, no object
/// uses a deleted identity, and the module image's variables schema is `schema` (none refuses
/// nothing). The `admission` fuzz target uses it (`fuzz/`, docs/fuzzing.md).
pub fn review_offline(
    manager: &ManagerUser,
    schema: Option<&Schema>,
    endpoint: Endpoint,
    body: &[u8],
) -> AdmissionReview<DynamicObject> {
    let (request, limits) = match read(endpoint, body) {
        Ok(read) => read,
        Err(answer) => return *answer,
    };
    let outcome = match request.operation {
        Operation::Create | Operation::Update => match judge(manager, endpoint, &request) {
            Err(outcome) => outcome,
            Ok(Judged::Workload(violations, subject)) => {
                let mut violations = limits.then(violations);
                if let (Some(subject), Some(schema)) = (subject, schema)
                    && violations.is_empty()
                {
                    rules::variables_schema::variables_fit(
                        &mut violations,
                        subject.path,
                        &subject.workspace,
                        schema,
                    );
                }
                Outcome::of(violations)
            }
            Ok(Judged::Identity(verdict)) => Outcome::of(verdict.violations),
        },
        Operation::Delete => {
            let checked = match endpoint {
                Endpoint::Machine => {
                    match decode::<TerraformMachine>(request.old_object.as_ref()) {
                        Ok(Some(machine)) => guards::machine_delete(&machine, false, &[]),
                        _ => Ok(()),
                    }
                }
                Endpoint::Identity => {
                    match decode::<TerraformClusterIdentity>(request.old_object.as_ref()) {
                        Ok(Some(identity)) => guards::identity_delete(&identity, &[]),
                        _ => Ok(()),
                    }
                }
                _ => Ok(()),
            };
            match checked {
                Ok(()) => Outcome::Allowed,
                Err(refusal) => Outcome::Forbidden(refusal),
            }
        }
        Operation::Connect => Outcome::Allowed,
    };
    respond(&request, endpoint, outcome).into_review()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A webhook whose client reaches nothing: the rules under test never call the API server.
    fn offline() -> Webhook {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("uri"));
        Webhook {
            client: kube::Client::try_from(config).expect("client"),
            manager: ManagerUser::new(Some("captf-system"), Some("captf-controller-manager")),
            registry: None,
            schemas: Schemas::default(),
        }
    }

    fn body(operation: &str, object: serde_json::Value, old: serde_json::Value) -> Vec<u8> {
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "infrastructure.cluster.x-k8s.io", "version": "v1alpha1", "kind": "TerraformMachine"},
                "resource": {"group": "infrastructure.cluster.x-k8s.io", "version": "v1alpha1", "resource": "terraformmachines"},
                "name": "m",
                "namespace": "default",
                "operation": operation,
                "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
                "object": object,
                "oldObject": old,
                "dryRun": false
            }
        })
        .to_string()
        .into_bytes()
    }

    fn machine(image: &str, provider_id: Option<&str>) -> serde_json::Value {
        let mut m = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "TerraformMachine",
            "metadata": {"name": "m", "namespace": "default"},
            "spec": {"source": {"image": image}}
        });
        if let Some(id) = provider_id {
            m["spec"]["providerID"] = json!(id);
        }
        m
    }

    fn machine_with_variables(variables: serde_json::Value) -> serde_json::Value {
        let mut m = machine("ghcr.io/x/m:v1", None);
        m["spec"]["variables"] = variables;
        m
    }

    #[tokio::test]
    async fn variables_over_their_limits_are_refused_with_the_other_causes() {
        let webhook = offline();
        let mut over = machine_with_variables(json!({"zones": vec!["a"; 9_999], "captf_x": 1}));
        over["spec"]["source"]["image"] = json!("UPPER/Case");
        let answer = review(
            &webhook,
            Endpoint::Machine,
            &body("CREATE", over, serde_json::Value::Null),
        )
        .await;
        let response = answer.response.expect("response");
        assert_eq!((response.allowed, response.result.code), (false, 422));
        assert!(
            response.result.message.starts_with(
                "TerraformMachine.infrastructure.cluster.x-k8s.io \"m\" is invalid: [spec.variables: Too many: 10001 values, at most 10000; move large values to a ConfigMap or Secret named in spec.variablesFrom, spec.source.image: Invalid value: "
            ),
            "{}",
            response.result.message
        );
        let causes = response.result.details.expect("details").causes;
        assert_eq!(
            causes
                .iter()
                .map(|c| (c.field.as_str(), c.reason.as_str()))
                .collect::<Vec<_>>(),
            [
                ("spec.variables", "FieldValueTooMany"),
                ("spec.source.image", "FieldValueInvalid")
            ]
        );
        // Within the limits, the same variables are held to the rules as before.
        let answer = review(
            &webhook,
            Endpoint::Machine,
            &body(
                "CREATE",
                machine_with_variables(json!({"zones": vec!["a"; 9_998], "captf_x": 1})),
                serde_json::Value::Null,
            ),
        )
        .await;
        let response = answer.response.expect("response");
        assert_eq!((response.allowed, response.result.code), (false, 422));
        assert!(
            response
                .result
                .message
                .contains("spec.variables[\"captf_x\"]"),
            "{}",
            response.result.message
        );
    }

    #[tokio::test]
    async fn answers_carry_the_uid_and_every_cause() {
        let webhook = offline();
        let allowed = review(
            &webhook,
            Endpoint::Machine,
            &body(
                "CREATE",
                machine("ghcr.io/x/m:v1", None),
                serde_json::Value::Null,
            ),
        )
        .await;
        let response = allowed.response.expect("response");
        assert!(response.allowed);
        assert_eq!(response.uid, "705ab4f5-6393-11e8-b7cc-42010a800002");

        let denied = review(
            &webhook,
            Endpoint::Machine,
            &body(
                "UPDATE",
                machine("ghcr.io/x/m:v2", Some("noop://m")),
                machine("ghcr.io/x/m:v1", None),
            ),
        )
        .await;
        let response = denied.response.expect("response");
        assert!(!response.allowed);
        assert_eq!(
            (response.result.code, response.result.reason.as_str()),
            (422, "Invalid")
        );
        let details = response.result.details.expect("details");
        assert_eq!(details.kind, "terraformmachines");
        assert_eq!(
            details
                .causes
                .iter()
                .map(|c| (c.field.as_str(), c.reason.as_str()))
                .collect::<Vec<_>>(),
            [
                ("spec.source", "FieldValueInvalid"),
                ("spec.providerID", "FieldValueForbidden")
            ]
        );
        assert!(
            response.result.message.starts_with(
                "TerraformMachine.infrastructure.cluster.x-k8s.io \"m\" is invalid: [spec.source: Invalid value: the field is immutable"
            ),
            "{}",
            response.result.message
        );
    }

    #[tokio::test]
    async fn unreadable_requests_are_refused() {
        let webhook = offline();
        let garbage = review(&webhook, Endpoint::Machine, b"{not json").await;
        assert!(!garbage.response.expect("response").allowed);
        let wrong = review(
            &webhook,
            Endpoint::Machine,
            &body(
                "CREATE",
                json!({"spec": {"source": "not an object"}}),
                serde_json::Value::Null,
            ),
        )
        .await;
        let response = wrong.response.expect("response");
        assert_eq!((response.allowed, response.result.code), (false, 400));
    }

    #[tokio::test]
    async fn the_offline_review_answers_as_the_review_does() {
        // Every request here is decided by the rules alone; the fuzz target's function must
        // answer each exactly as the webhook does.
        let webhook = offline();
        let bodies = [
            body(
                "CREATE",
                machine("ghcr.io/x/m:v1", None),
                serde_json::Value::Null,
            ),
            body(
                "UPDATE",
                machine("ghcr.io/x/m:v2", Some("noop://m")),
                machine("ghcr.io/x/m:v1", None),
            ),
            body(
                "CREATE",
                json!({"spec": {"source": "not an object"}}),
                serde_json::Value::Null,
            ),
            body(
                "CREATE",
                machine("UPPER/Case", None),
                serde_json::Value::Null,
            ),
            body(
                "CREATE",
                machine_with_variables(json!({"zones": vec!["a"; 10_000]})),
                serde_json::Value::Null,
            ),
            b"{not json".to_vec(),
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#.to_vec(),
        ];
        for body in bodies {
            let online = review(&webhook, Endpoint::Machine, &body).await;
            let offline = review_offline(&webhook.manager, None, Endpoint::Machine, &body);
            assert_eq!(
                serde_json::to_value(&offline).expect("offline"),
                serde_json::to_value(&online).expect("online"),
                "{}",
                String::from_utf8_lossy(&body)
            );
        }
    }

    #[tokio::test]
    async fn a_failed_check_fails_closed() {
        // An identity's Secret read check needs the API server; unreachable, the write is
        // refused with an internal error rather than let through.
        let identity = json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "TerraformClusterIdentity",
            "metadata": {"name": "aws"},
            "spec": {"secretRef": {"name": "creds", "namespace": "captf-system"}}
        });
        let answer = review(
            &offline(),
            Endpoint::Identity,
            &body("CREATE", identity, serde_json::Value::Null),
        )
        .await;
        let response = answer.response.expect("response");
        assert_eq!((response.allowed, response.result.code), (false, 500));
        assert!(
            response.result.message.contains("cannot check"),
            "{}",
            response.result.message
        );
    }
}
