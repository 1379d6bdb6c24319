//! The committed CRDs in `config/crd/bases/` must be exactly what the Rust types generate, and
//! every CRD must carry the labels CAPI and clusterctl look for.

use std::path::PathBuf;

use captf_api::crds;

fn bases_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../config/crd/bases")
}

#[test]
fn committed_crds_match_the_types() {
    let generated = crds::all();
    for crd in &generated {
        let path = bases_dir().join(crds::file_name(crd));
        let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run `cargo run -p captf -- crds --out-dir config/crd/bases`",
                path.display()
            )
        });
        let want = crds::to_yaml(crd).expect("CRD serializes");
        assert!(
            committed == want,
            "{} drifted from the Rust types; run `cargo run -p captf -- crds --out-dir config/crd/bases`",
            path.display()
        );
    }
    let files = std::fs::read_dir(bases_dir())
        .expect("config/crd/bases exists")
        .count();
    assert_eq!(
        files,
        generated.len(),
        "config/crd/bases holds a file no type generates"
    );
}

#[test]
fn seven_kinds_with_scope_subresources_and_labels() {
    let expect = [
        ("TerraformCluster", "Namespaced", true),
        ("TerraformClusterTemplate", "Namespaced", false),
        ("TerraformMachine", "Namespaced", true),
        ("TerraformMachineTemplate", "Namespaced", true),
        ("TerraformMachinePool", "Namespaced", true),
        ("TerraformMachinePoolTemplate", "Namespaced", false),
        ("TerraformClusterIdentity", "Cluster", true),
    ];
    let all = crds::all();
    assert_eq!(all.len(), expect.len());
    for (crd, (kind, scope, status)) in all.iter().zip(expect) {
        assert_eq!(crd.spec.names.kind, kind);
        assert_eq!(crd.spec.scope, scope, "{kind}");
        assert_eq!(crd.spec.group, "infrastructure.cluster.x-k8s.io");
        assert_eq!(
            crd.spec.names.categories.as_deref(),
            Some(&["cluster-api".to_owned()][..])
        );
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(version.served && version.storage);
        let has_status = version
            .subresources
            .as_ref()
            .is_some_and(|s| s.status.is_some());
        assert_eq!(has_status, status, "{kind} status subresource");
        let labels = crd.metadata.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get("cluster.x-k8s.io/v1beta2").map(String::as_str),
            Some("v1alpha1"),
            "{kind}"
        );
        let move_hierarchy = labels.contains_key("clusterctl.cluster.x-k8s.io/move-hierarchy");
        assert_eq!(move_hierarchy, kind == "TerraformClusterIdentity", "{kind}");
    }
}

#[test]
fn printer_columns_follow_the_spec() {
    let columns = |kind: &str| -> Vec<(String, String, i32)> {
        let crd = crds::all()
            .into_iter()
            .find(|c| c.spec.names.kind == kind)
            .expect("kind exists");
        crd.spec.versions[0]
            .additional_printer_columns
            .clone()
            .unwrap_or_default()
            .into_iter()
            .map(|c| (c.name, c.json_path, c.priority.unwrap_or(0)))
            .collect()
    };
    let names = |kind: &str| columns(kind).into_iter().map(|c| c.0).collect::<Vec<_>>();
    assert_eq!(
        names("TerraformCluster"),
        [
            "Cluster",
            "Ready",
            "Provisioned",
            "Endpoint",
            "Image",
            "Age"
        ]
    );
    assert_eq!(
        names("TerraformMachine"),
        [
            "Cluster",
            "Machine",
            "Ready",
            "Provisioned",
            "ProviderID",
            "Image",
            "Age"
        ]
    );
    assert_eq!(
        names("TerraformMachinePool"),
        [
            "Cluster",
            "MachinePool",
            "Replicas",
            "Provisioned",
            "Ready",
            "Age"
        ]
    );
    assert_eq!(
        names("TerraformClusterIdentity"),
        ["Secret", "Namespace", "Ready", "Age"]
    );
    for template in [
        "TerraformClusterTemplate",
        "TerraformMachineTemplate",
        "TerraformMachinePoolTemplate",
    ] {
        assert_eq!(columns(template)[0].1, ".spec.template.spec.source.image");
        assert_eq!(names(template), ["Image", "Age"]);
    }
    let image = columns("TerraformCluster")
        .into_iter()
        .find(|c| c.0 == "Image")
        .expect("Image column");
    assert_eq!(image.2, 1, "Image is a wide column");
}

#[test]
fn every_kind_has_its_short_name() {
    let short: std::collections::BTreeMap<String, Vec<String>> = crds::all()
        .into_iter()
        .map(|c| {
            (
                c.spec.names.kind,
                c.spec.names.short_names.unwrap_or_default(),
            )
        })
        .collect();
    for (kind, name) in [
        ("TerraformCluster", "tfc"),
        ("TerraformClusterIdentity", "tfci"),
        ("TerraformClusterTemplate", "tfct"),
        ("TerraformMachine", "tfm"),
        ("TerraformMachineTemplate", "tfmt"),
        ("TerraformMachinePool", "tfmp"),
        ("TerraformMachinePoolTemplate", "tfmpt"),
    ] {
        assert_eq!(short[kind], [name], "{kind}");
    }
    assert_eq!(short.len(), 7, "every kind is listed: {short:?}");
}

#[test]
fn cel_rules_are_in_the_schema() {
    let yaml = crds::all_yaml().expect("CRDs serialize");
    for rule in [
        "has(self.host) == has(self.port)",
        "has(self.configMapRef) != has(self.secretRef)",
        "has(self.list) || has(self.selector)",
        "has(self.spec.identityRef)",
        "self.spec.controlPlaneEndpoint == oldSelf.spec.controlPlaneEndpoint",
        "!has(self.source) || self.source != ''Image'' || has(self.image)",
    ] {
        assert!(yaml.contains(rule), "missing CEL rule {rule}");
    }
    // The kind-level rules belong to TerraformCluster only, so a template may leave the
    // identity to a ClusterClass patch.
    let template = crds::all()
        .into_iter()
        .find(|c| c.spec.names.kind == "TerraformClusterTemplate")
        .expect("template");
    assert!(
        !crds::to_yaml(&template)
            .expect("yaml")
            .contains("has(self.spec.identityRef)")
    );
}
