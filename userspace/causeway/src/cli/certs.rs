//! `causeway certs init-ca | issue | show`: a certificate authority per
//! domain and a certificate per host, for the collective library's mutual
//! TLS (`CAUSEWAY_TLS_CERT`, `CAUSEWAY_TLS_KEY`, `CAUSEWAY_TLS_CA`).
//!
//! A host certificate names `<host>.<domain>.causeway` (its only DNS subject
//! alternative name, see [`causeway_core::identity`]); a domain's CA is
//! name-constrained to `.<domain>.causeway`, so it cannot vouch for a host of
//! another domain. Keys are ECDSA P-256, written 0600 at creation (never
//! widened, never chmod-ed afterwards); nothing is overwritten.

use std::fs::OpenOptions;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::{Args, Subcommand};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose,
    GeneralSubtree, IsCa, KeyPair, KeyUsagePurpose, NameConstraints,
};
use time::{Duration, OffsetDateTime};
use x509_parser::certificate::X509Certificate;

use causeway_core::identity;

#[derive(Debug, Subcommand)]
pub enum CertsCommand {
    /// Create a domain's CA: <dir>/ca.pem (certificate) and <dir>/ca.key (0600).
    #[command(
        after_help = "Example:\n  causeway certs init-ca --domain dc1 --dir /etc/causeway/pki/dc1"
    )]
    InitCa(InitCaArgs),
    /// Issue a host's certificate signed by its domain's CA:
    /// <out>/<host>.pem and <out>/<host>.key (0600).
    #[command(
        after_help = "Example:\n  causeway certs issue --ca-dir /etc/causeway/pki/dc1 --host node1 --out /etc/causeway/tls"
    )]
    Issue(IssueArgs),
    /// Print a certificate: subject, domain, host, validity, fingerprints.
    #[command(
        after_help = "Example:\n  causeway certs show /etc/causeway/tls/node1.pem --ca /etc/causeway/pki/dc1/ca.pem"
    )]
    Show(ShowArgs),
}

#[derive(Debug, Args)]
pub struct InitCaArgs {
    /// The domain (a DNS label: a-z, 0-9, '-'). Required.
    #[arg(long)]
    pub domain: String,
    /// Directory for ca.pem and ca.key (created if missing). Required.
    #[arg(long, value_name = "DIR")]
    pub dir: PathBuf,
    /// Validity in days. Optional.
    #[arg(long, default_value_t = 3650)]
    pub days: i64,
}

#[derive(Debug, Args)]
pub struct IssueArgs {
    /// The CA's directory (ca.pem, ca.key). Required.
    #[arg(long, value_name = "DIR")]
    pub ca_dir: PathBuf,
    /// The host label (CAUSEWAY_HOST_ID of the ranks on it). Required.
    #[arg(long)]
    pub host: String,
    /// The domain; must be the CA's. Optional (default: the CA's).
    #[arg(long)]
    pub domain: Option<String>,
    /// Output directory (created if missing). Required.
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// Validity in days. Optional.
    #[arg(long, default_value_t = 365)]
    pub days: i64,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// A certificate (PEM). Required.
    pub cert: PathBuf,
    /// The CA certificate it should chain to; its fingerprint is printed
    /// and the issuer checked. Optional.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
}

/// What can go wrong with the files; every variant names its file.
#[derive(Debug, thiserror::Error)]
pub enum CertsError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: already exists; remove it first (nothing is overwritten)")]
    Exists { path: PathBuf },
    #[error("{path}: not a PEM certificate: {reason}")]
    BadCert { path: PathBuf, reason: String },
    #[error("{path}: not a PEM private key: {reason}")]
    BadKey { path: PathBuf, reason: String },
    #[error("{path}: {reason}")]
    Mismatch { path: PathBuf, reason: String },
    #[error(transparent)]
    Label(#[from] identity::LabelError),
    #[error("generating the certificate: {0}")]
    Generate(#[from] rcgen::Error),
}

pub fn run(cmd: &CertsCommand) -> Result<()> {
    match cmd {
        CertsCommand::InitCa(a) => {
            let (cert, key) = init_ca(&a.domain, &a.dir, a.days)?;
            println!(
                "CA of domain {}: {} (key {})",
                a.domain,
                cert.display(),
                key.display()
            );
        }
        CertsCommand::Issue(a) => {
            let (cert, key) = issue(a)?;
            println!("certificate: {} (key {})", cert.display(), key.display());
        }
        CertsCommand::Show(a) => print!("{}", show(&a.cert, a.ca.as_deref())?),
    }
    Ok(())
}

fn validity(p: &mut CertificateParams, days: i64) {
    let now = OffsetDateTime::now_utc();
    // An hour of slack for hosts whose clocks lag the issuer's.
    p.not_before = now - Duration::hours(1);
    p.not_after = now + Duration::days(days.max(1));
}

/// Creates `<dir>/ca.pem` and `<dir>/ca.key`.
pub fn init_ca(domain: &str, dir: &Path, days: i64) -> Result<(PathBuf, PathBuf), CertsError> {
    let subtree = identity::domain_name(domain)?;
    let mut p = CertificateParams::default();
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name
        .push(DnType::CommonName, format!("Causeway CA {domain}"));
    p.distinguished_name
        .push(DnType::OrganizationName, domain.to_string());
    p.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    p.name_constraints = Some(NameConstraints {
        permitted_subtrees: vec![GeneralSubtree::DnsName(subtree)],
        excluded_subtrees: Vec::new(),
    });
    validity(&mut p, days);
    let key = KeyPair::generate()?;
    let cert = p.self_signed(&key)?;
    create_dir(dir)?;
    let (cert_path, key_path) = (dir.join("ca.pem"), dir.join("ca.key"));
    write_new(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_new(&cert_path, cert.pem().as_bytes(), 0o644)?;
    Ok((cert_path, key_path))
}

/// Creates `<out>/<host>.pem` and `<out>/<host>.key`, signed by the CA in `ca_dir`.
pub fn issue(a: &IssueArgs) -> Result<(PathBuf, PathBuf), CertsError> {
    let (ca_pem_path, ca_key_path) = (a.ca_dir.join("ca.pem"), a.ca_dir.join("ca.key"));
    let ca_pem = read(&ca_pem_path)?;
    let ca_domain = org_of(&ca_pem_path, &ca_pem)?;
    let domain = a.domain.clone().unwrap_or_else(|| ca_domain.clone());
    if domain != ca_domain {
        return Err(CertsError::Mismatch {
            path: ca_pem_path,
            reason: format!("this is the CA of domain {ca_domain:?}, not of {domain:?}"),
        });
    }
    let name = identity::host_name(&domain, &a.host)?;
    let ca_key_text = String::from_utf8_lossy(&read(&ca_key_path)?).into_owned();
    let ca_key = KeyPair::from_pem(&ca_key_text).map_err(|e| CertsError::BadKey {
        path: ca_key_path.clone(),
        reason: e.to_string(),
    })?;
    let ca_params = CertificateParams::from_ca_cert_pem(&String::from_utf8_lossy(&ca_pem))
        .map_err(|e| CertsError::BadCert {
            path: ca_pem_path.clone(),
            reason: e.to_string(),
        })?;
    // The issuer as rcgen needs it: the CA's own name and key.
    let ca = ca_params.self_signed(&ca_key)?;
    let mut p = CertificateParams::new(vec![name.clone()])?;
    p.distinguished_name = DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, name);
    p.distinguished_name
        .push(DnType::OrganizationName, domain.clone());
    p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    p.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    p.use_authority_key_identifier_extension = true;
    validity(&mut p, a.days);
    let key = KeyPair::generate()?;
    let cert = p.signed_by(&key, &ca, &ca_key)?;
    create_dir(&a.out)?;
    let cert_path = a.out.join(format!("{}.pem", a.host));
    let key_path = a.out.join(format!("{}.key", a.host));
    write_new(&key_path, key.serialize_pem().as_bytes(), 0o600)?;
    write_new(&cert_path, cert.pem().as_bytes(), 0o644)?;
    Ok((cert_path, key_path))
}

/// The report `causeway certs show` prints.
pub fn show(path: &Path, ca: Option<&Path>) -> Result<String, CertsError> {
    let der = pem_der(path, &read(path)?)?;
    let cert = parse(path, &der)?;
    let mut out = String::new();
    let line = |out: &mut String, k: &str, v: &dyn std::fmt::Display| {
        out.push_str(&format!("{k:<16}{v}\n"));
    };
    line(&mut out, "subject", &cert.subject());
    line(&mut out, "issuer", &cert.issuer());
    let names = dns_names(&cert);
    match names.iter().find_map(|n| identity::parse_host_name(n)) {
        Some((d, h)) => {
            line(&mut out, "domain", &d);
            line(&mut out, "host", &h);
        }
        None if cert.is_ca() => line(&mut out, "domain", &org(&cert).unwrap_or_default()),
        None => line(
            &mut out,
            "domain",
            &"(none: not a Causeway host certificate)",
        ),
    }
    line(&mut out, "names", &names.join(", "));
    line(&mut out, "ca", &cert.is_ca());
    let v = cert.validity();
    line(&mut out, "not before", &v.not_before);
    line(&mut out, "not after", &v.not_after);
    line(&mut out, "valid now", &v.is_valid());
    line(&mut out, "fingerprint", &fingerprint(&der));
    if let Some(ca_path) = ca {
        let ca_der = pem_der(ca_path, &read(ca_path)?)?;
        let ca_cert = parse(ca_path, &ca_der)?;
        if ca_cert.subject() != cert.issuer() {
            return Err(CertsError::Mismatch {
                path: ca_path.into(),
                reason: format!(
                    "its subject {} is not the issuer of {} ({})",
                    ca_cert.subject(),
                    path.display(),
                    cert.issuer()
                ),
            });
        }
        let key = ca_cert.public_key();
        cert.verify_signature(Some(key))
            .map_err(|e| CertsError::Mismatch {
                path: ca_path.into(),
                reason: format!("it did not sign {}: {e}", path.display()),
            })?;
        line(&mut out, "ca fingerprint", &fingerprint(&ca_der));
    }
    Ok(out)
}

/// The DER of the first PEM block of `pem`, which must be a certificate.
fn pem_der(path: &Path, pem: &[u8]) -> Result<Vec<u8>, CertsError> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem).map_err(|e| bad_cert(path, e))?;
    if p.label != "CERTIFICATE" {
        return Err(bad_cert(path, format!("a PEM {:?} block", p.label)));
    }
    Ok(p.contents)
}

fn parse<'a>(path: &Path, der: &'a [u8]) -> Result<X509Certificate<'a>, CertsError> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, c)| c)
        .map_err(|e| bad_cert(path, e))
}

fn bad_cert(path: &Path, reason: impl std::fmt::Display) -> CertsError {
    CertsError::BadCert {
        path: path.into(),
        reason: reason.to_string(),
    }
}

fn dns_names(c: &X509Certificate<'_>) -> Vec<String> {
    use x509_parser::extensions::GeneralName;
    let Ok(Some(san)) = c.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|g| match g {
            GeneralName::DNSName(n) => Some(n.to_string()),
            _ => None,
        })
        .collect()
}

fn org(c: &X509Certificate<'_>) -> Option<String> {
    c.subject()
        .iter_organization()
        .next()
        .and_then(|o| o.as_str().ok())
        .map(str::to_string)
}

fn org_of(path: &Path, pem: &[u8]) -> Result<String, CertsError> {
    let der = pem_der(path, pem)?;
    let c = parse(path, &der)?;
    if !c.is_ca() {
        return Err(CertsError::Mismatch {
            path: path.into(),
            reason: "not a CA certificate".into(),
        });
    }
    org(&c).ok_or_else(|| CertsError::Mismatch {
        path: path.into(),
        reason: "names no domain (no O= in its subject): not made by causeway certs init-ca".into(),
    })
}

/// SHA-256 of the DER, as colon-separated hex.
pub fn fingerprint(der: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, der);
    d.as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn read(path: &Path) -> Result<Vec<u8>, CertsError> {
    std::fs::read(path).map_err(|source| CertsError::Io {
        path: path.into(),
        source,
    })
}

fn create_dir(dir: &Path) -> Result<(), CertsError> {
    std::fs::create_dir_all(dir).map_err(|source| CertsError::Io {
        path: dir.into(),
        source,
    })
}

/// Writes a new file created with `mode` (the process umask can only narrow it).
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), CertsError> {
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::AlreadyExists => CertsError::Exists { path: path.into() },
            _ => CertsError::Io {
                path: path.into(),
                source,
            },
        })?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|source| CertsError::Io {
            path: path.into(),
            source,
        })
}

#[cfg(test)]
#[path = "certs_tests.rs"]
mod tests;
