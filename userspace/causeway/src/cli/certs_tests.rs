use std::os::unix::fs::PermissionsExt as _;

use super::*;

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("cw-certs-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn issue_args(ca_dir: &Path, out: &Path, host: &str, domain: Option<&str>) -> IssueArgs {
    IssueArgs {
        ca_dir: ca_dir.into(),
        host: host.into(),
        domain: domain.map(str::to_string),
        out: out.into(),
        days: 30,
    }
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).expect("stat").permissions().mode() & 0o777
}

#[test]
fn a_ca_issues_a_host_certificate_that_show_reads_back() {
    let d = tmp("issue");
    let (ca_pem, ca_key) = init_ca("dc1", &d.join("ca"), 10).expect("init-ca");
    assert_eq!(mode(&ca_key), 0o600);
    let (pem, key) =
        issue(&issue_args(&d.join("ca"), &d.join("out"), "node1", None)).expect("issue");
    assert_eq!(mode(&key), 0o600);
    assert_eq!(pem, d.join("out/node1.pem"));
    let text = show(&pem, Some(&ca_pem)).expect("show");
    for want in [
        "node1.dc1.causeway",
        "domain          dc1",
        "host            node1",
        "valid now       true",
        "ca fingerprint",
    ] {
        assert!(text.contains(want), "{want:?} missing in:\n{text}");
    }
    let ca_text = show(&ca_pem, None).expect("show ca");
    assert!(ca_text.contains("ca              true"), "{ca_text}");
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn mistakes_name_the_file() {
    let d = tmp("errors");
    init_ca("dc1", &d.join("ca1"), 10).expect("init-ca");
    let (other_ca, _) = init_ca("dc2", &d.join("ca2"), 10).expect("init-ca");
    // Nothing is overwritten.
    let e = init_ca("dc1", &d.join("ca1"), 10).expect_err("exists");
    assert!(
        matches!(&e, CertsError::Exists { path } if path.ends_with("ca.key")),
        "{e}"
    );
    // A host of another domain than the CA's.
    let e = issue(&issue_args(&d.join("ca1"), &d.join("o"), "n", Some("dc2"))).expect_err("dom");
    assert!(e.to_string().contains("ca1/ca.pem"), "{e}");
    // A label that cannot be a DNS name.
    let e = issue(&issue_args(&d.join("ca1"), &d.join("o"), "Bad_Host", None)).expect_err("lbl");
    assert!(matches!(e, CertsError::Label(_)), "{e}");
    // A CA that did not sign the certificate.
    let (pem, _) = issue(&issue_args(&d.join("ca1"), &d.join("o"), "n1", None)).expect("issue");
    let e = show(&pem, Some(&other_ca)).expect_err("wrong ca");
    assert!(e.to_string().contains("ca2/ca.pem"), "{e}");
    // A file that is no certificate.
    let e = show(&d.join("o/n1.key"), None).expect_err("key is no cert");
    assert!(
        matches!(&e, CertsError::BadCert { path, .. } if path.ends_with("n1.key")),
        "{e}"
    );
    let e = show(&d.join("missing.pem"), None).expect_err("missing");
    assert!(e.to_string().contains("missing.pem"), "{e}");
    let _ = std::fs::remove_dir_all(&d);
}
