//! Every file in `config/samples/` deserializes into its Rust type without losing a field and
//! validates against the schema of the generated CRD.

use std::path::PathBuf;

use captf_api::crds;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn samples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/samples")
}

fn schema_of(kind: &str) -> Value {
    let crd = crds::all()
        .into_iter()
        .find(|c| c.spec.names.kind == kind)
        .expect("kind has a CRD");
    let schema = crd.spec.versions[0]
        .schema
        .clone()
        .expect("schema")
        .open_api_v3_schema
        .expect("v3 schema");
    serde_json::to_value(schema).expect("schema serializes")
}

/// Validates `object` against the CRD's structural schema. JSON Schema ignores the
/// `x-kubernetes-*` and `nullable` extensions; the real apiserver checks those in the e2e tier.
fn schema_errors(kind: &str, object: &Value) -> Vec<String> {
    let schema = schema_of(kind);
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    validator
        .iter_errors(object)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

/// Deserializes into `T` and back; any field the type does not know would be dropped and show
/// up as a difference.
fn round_trip<T: DeserializeOwned + serde::Serialize>(object: &Value) -> Value {
    let typed: T =
        serde_json::from_value(object.clone()).expect("sample deserializes into its type");
    serde_json::to_value(typed).expect("type serializes")
}

fn check(object: &Value) -> Result<(), String> {
    let kind = object["kind"].as_str().ok_or("sample has no kind")?;
    let back = match kind {
        "TerraformCluster" => round_trip::<captf_api::TerraformCluster>(object),
        "TerraformClusterTemplate" => round_trip::<captf_api::TerraformClusterTemplate>(object),
        "TerraformMachine" => round_trip::<captf_api::TerraformMachine>(object),
        "TerraformMachineTemplate" => round_trip::<captf_api::TerraformMachineTemplate>(object),
        "TerraformMachinePool" => round_trip::<captf_api::TerraformMachinePool>(object),
        "TerraformMachinePoolTemplate" => {
            round_trip::<captf_api::TerraformMachinePoolTemplate>(object)
        }
        "TerraformClusterIdentity" => round_trip::<captf_api::TerraformClusterIdentity>(object),
        other => return Err(format!("unknown kind {other}")),
    };
    if &back != object {
        return Err(format!(
            "{kind} lost or changed fields in a round trip:\n{object:#}\n!=\n{back:#}"
        ));
    }
    let errors = schema_errors(kind, object);
    if errors.is_empty() {
        Ok(())
    } else {
        Err(format!("{kind}: {}", errors.join("; ")))
    }
}

/// A named way to break a valid sample.
type Breakage = (&'static str, fn(&mut Value));

fn load(path: &std::path::Path) -> Value {
    let text = std::fs::read_to_string(path).expect("sample readable");
    serde_yaml::from_str(&text).expect("sample is YAML")
}

#[test]
fn every_kind_has_a_valid_sample() {
    let mut kinds = Vec::new();
    for entry in std::fs::read_dir(samples_dir()).expect("config/samples exists") {
        let path = entry.expect("dir entry").path();
        if path.file_name().is_some_and(|n| n == "kustomization.yaml") {
            continue;
        }
        let object = load(&path);
        check(&object).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        kinds.push(object["kind"].as_str().expect("kind").to_owned());
    }
    kinds.sort();
    let mut all: Vec<String> = crds::all().into_iter().map(|c| c.spec.names.kind).collect();
    all.sort();
    assert_eq!(kinds, all, "one sample per kind");
}

#[test]
fn the_schema_rejects_broken_samples() {
    let cluster = load(&samples_dir().join("infrastructure_v1alpha1_terraformcluster.yaml"));
    let breakages: [Breakage; 6] = [
        ("empty image", |o| o["spec"]["source"]["image"] = "".into()),
        ("bad pull policy", |o| {
            o["spec"]["source"]["imagePullPolicy"] = "Sometimes".into()
        }),
        ("bad apply policy", |o| {
            o["spec"]["applyPolicy"] = "Whenever".into()
        }),
        ("negative drift interval", |o| {
            o["spec"]["drift"]["intervalSeconds"] = (-1).into()
        }),
        ("deadline over a day", |o| {
            o["spec"]["defaults"]["jobs"]["activeDeadlineSeconds"] = 86401.into()
        }),
        ("zero maxActiveJobs", |o| {
            o["spec"]["maxActiveJobs"] = 0.into()
        }),
    ];
    for (what, breakage) in breakages {
        let mut broken = cluster.clone();
        breakage(&mut broken);
        assert!(
            !schema_errors("TerraformCluster", &broken).is_empty(),
            "{what} was accepted"
        );
    }
    let identity =
        load(&samples_dir().join("infrastructure_v1alpha1_terraformclusteridentity.yaml"));
    let mut bad_namespace = identity.clone();
    bad_namespace["spec"]["secretRef"]["namespace"] = "Not_A_Label".into();
    assert!(!schema_errors("TerraformClusterIdentity", &bad_namespace).is_empty());
}
