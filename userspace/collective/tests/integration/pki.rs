//! Certificates for the TLS tests, made with rcgen as `causeway certs` makes
//! them: a name-constrained CA per domain, host certificates naming
//! `<host>.<domain>.causeway`. Shared by the unit tests of
//! `transport::tls` (included by path) and the integration tests.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, GeneralSubtree, IsCa,
    KeyPair, KeyUsagePurpose, NameConstraints,
};
use time::{Duration, OffsetDateTime};

/// A domain's CA.
pub struct Ca {
    pub domain: String,
    pub cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    pub fn new(domain: &str) -> Ca {
        let mut p = CertificateParams::default();
        p.distinguished_name
            .push(DnType::CommonName, format!("Causeway CA {domain}"));
        p.distinguished_name
            .push(DnType::OrganizationName, domain.to_string());
        p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        p.name_constraints = Some(NameConstraints {
            permitted_subtrees: vec![GeneralSubtree::DnsName(format!("{domain}.causeway"))],
            excluded_subtrees: Vec::new(),
        });
        let now = OffsetDateTime::now_utc();
        (p.not_before, p.not_after) = (now - Duration::days(1), now + Duration::days(30));
        let key = KeyPair::generate().expect("key");
        let cert = p.self_signed(&key).expect("ca");
        Ca {
            domain: domain.into(),
            cert,
            key,
        }
    }

    /// A host certificate and key (PEM) naming `name` (normally
    /// `<host>.<domain>.causeway`), valid until `not_after`.
    pub fn issue_name(&self, name: &str, not_after: OffsetDateTime) -> (String, String) {
        let mut p = CertificateParams::new(vec![name.to_string()]).expect("params");
        p.distinguished_name.push(DnType::CommonName, name);
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![
            ExtendedKeyUsagePurpose::ServerAuth,
            ExtendedKeyUsagePurpose::ClientAuth,
        ];
        p.use_authority_key_identifier_extension = true;
        p.not_before = OffsetDateTime::now_utc() - Duration::days(2);
        p.not_after = not_after;
        let key = KeyPair::generate().expect("key");
        let cert = p.signed_by(&key, &self.cert, &self.key).expect("sign");
        (cert.pem(), key.serialize_pem())
    }

    pub fn issue(&self, host: &str) -> (String, String) {
        let name = format!("{host}.{}.causeway", self.domain);
        self.issue_name(&name, OffsetDateTime::now_utc() + Duration::days(10))
    }
}

/// A fresh directory for one test's files.
pub fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cw-tls-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("mkdir");
    d
}

/// Writes a certificate, its key and the trusted CAs as the files of
/// `CAUSEWAY_TLS_CERT`, `CAUSEWAY_TLS_KEY`, `CAUSEWAY_TLS_CA` (in that order).
pub fn files(
    dir: &Path,
    tag: &str,
    (cert, key): &(String, String),
    trusted: &[&Ca],
) -> [PathBuf; 3] {
    let f = [
        dir.join(format!("{tag}.pem")),
        dir.join(format!("{tag}.key")),
        dir.join(format!("{tag}-ca.pem")),
    ];
    let bundle: String = trusted.iter().map(|c| c.cert.pem()).collect();
    for (p, v) in f.iter().zip([cert, key, &bundle]) {
        std::fs::write(p, v).expect("write");
    }
    f
}
