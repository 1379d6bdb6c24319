//! Certificates and keys of the local control plane: one CA that signs the apiserver's serving
//! certificate and every client certificate, and a key pair that signs service-account tokens.

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};

/// Paths of the files [`write`] creates.
#[derive(Clone, Debug)]
pub struct Pki {
    pub ca_cert: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub controller_manager_cert: PathBuf,
    pub controller_manager_key: PathBuf,
    pub scheduler_cert: PathBuf,
    pub scheduler_key: PathBuf,
    /// The kubelet's (`system:node:<name>` in `system:nodes`, for the Node authorizer).
    pub node_cert: PathBuf,
    pub node_key: PathBuf,
    pub proxy_cert: PathBuf,
    pub proxy_key: PathBuf,
    pub service_account_key: PathBuf,
    pub service_account_public_key: PathBuf,
}

/// A client identity: the certificate's CN is the user, each O a group.
struct Client<'a> {
    user: &'a str,
    groups: &'a [&'a str],
}

/// Generates the CA, the serving certificate (for 127.0.0.1, `address`, localhost, the
/// `kubernetes` Service's ClusterIP and the in-cluster `kubernetes.default` names), a client
/// certificate for the admin and each control-plane and node component, and the
/// service-account signing key, all under `dir`.
pub fn write(
    dir: &Path,
    address: Ipv4Addr,
    kubernetes_service_ip: Ipv4Addr,
    node_name: &str,
) -> anyhow::Result<Pki> {
    std::fs::create_dir_all(dir)?;
    let pki = Pki {
        ca_cert: dir.join("ca.crt"),
        serving_cert: dir.join("apiserver.crt"),
        serving_key: dir.join("apiserver.key"),
        admin_cert: dir.join("admin.crt"),
        admin_key: dir.join("admin.key"),
        controller_manager_cert: dir.join("controller-manager.crt"),
        controller_manager_key: dir.join("controller-manager.key"),
        scheduler_cert: dir.join("scheduler.crt"),
        scheduler_key: dir.join("scheduler.key"),
        node_cert: dir.join("node.crt"),
        node_key: dir.join("node.key"),
        proxy_cert: dir.join("kube-proxy.crt"),
        proxy_key: dir.join("kube-proxy.key"),
        service_account_key: dir.join("service-account.key"),
        service_account_public_key: dir.join("service-account.pub"),
    };

    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name = name("captf-testenv-ca", &[]);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca =
        CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?).context("CA certificate")?;
    std::fs::write(&pki.ca_cert, ca.pem())?;

    let mut serving = CertificateParams::new(vec![
        "localhost".to_owned(),
        "kubernetes".to_owned(),
        "kubernetes.default".to_owned(),
        "kubernetes.default.svc".to_owned(),
        "kubernetes.default.svc.cluster.local".to_owned(),
    ])?;
    serving
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    serving
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(address)));
    // The first address of --service-cluster-ip-range: the `kubernetes` Service's ClusterIP.
    serving
        .subject_alt_names
        .push(SanType::IpAddress(IpAddr::V4(kubernetes_service_ip)));
    serving.distinguished_name = name("kube-apiserver", &[]);
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate()?;
    let cert = serving
        .signed_by(&key, &ca)
        .context("serving certificate")?;
    std::fs::write(&pki.serving_cert, cert.pem())?;
    write_private(&pki.serving_key, &key.serialize_pem())?;

    let clients = [
        (
            Client {
                user: "captf-testenv-admin",
                groups: &["system:masters"],
            },
            &pki.admin_cert,
            &pki.admin_key,
        ),
        (
            Client {
                user: "system:kube-controller-manager",
                groups: &[],
            },
            &pki.controller_manager_cert,
            &pki.controller_manager_key,
        ),
        (
            Client {
                user: "system:kube-scheduler",
                groups: &[],
            },
            &pki.scheduler_cert,
            &pki.scheduler_key,
        ),
        (
            Client {
                user: &format!("system:node:{node_name}"),
                groups: &["system:nodes"],
            },
            &pki.node_cert,
            &pki.node_key,
        ),
        (
            Client {
                user: "system:kube-proxy",
                groups: &[],
            },
            &pki.proxy_cert,
            &pki.proxy_key,
        ),
    ];
    for (client, cert_path, key_path) in clients {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(client.user, client.groups);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate()?;
        let cert = params
            .signed_by(&key, &ca)
            .with_context(|| format!("client certificate {}", client.user))?;
        std::fs::write(cert_path, cert.pem())?;
        write_private(key_path, &key.serialize_pem())?;
    }

    let sa = KeyPair::generate()?;
    write_private(&pki.service_account_key, &sa.serialize_pem())?;
    std::fs::write(&pki.service_account_public_key, sa.public_key_pem())?;
    Ok(pki)
}

/// A kubeconfig with a client certificate (embedded, so the file is self-contained).
pub fn kubeconfig(server: &str, ca: &Path, cert: &Path, key: &Path) -> anyhow::Result<String> {
    use base64::Engine as _;
    let b64 = |p: &Path| -> anyhow::Result<String> {
        Ok(base64::engine::general_purpose::STANDARD
            .encode(std::fs::read(p).with_context(|| p.display().to_string())?))
    };
    Ok(format!(
        "apiVersion: v1
kind: Config
clusters:
- name: captf-testenv
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: captf-testenv
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: captf-testenv
  context:
    cluster: captf-testenv
    user: captf-testenv
current-context: captf-testenv
",
        ca = b64(ca)?,
        cert = b64(cert)?,
        key = b64(key)?,
    ))
}

fn name(common_name: &str, organizations: &[&str]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    for org in organizations {
        dn.push(DnType::OrganizationName, *org);
    }
    dn
}

fn write_private(path: &Path, pem: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(pem.as_bytes())?;
    Ok(())
}
