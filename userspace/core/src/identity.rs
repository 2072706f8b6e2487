//! How a Causeway certificate names a rank's domain and host: one DNS
//! subject alternative name, `<host>.<domain>.causeway`, so a standard X.509
//! name check (webpki) proves both labels at once, and a per-domain CA can be
//! name-constrained to `.<domain>.causeway` (its certificates cannot claim
//! another domain). Shared by `causeway certs` (which issues them) and the
//! collective library (which checks them).

/// The DNS suffix every identity name ends with.
pub const SUFFIX: &str = "causeway";

/// Why a label cannot be part of an identity name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} label {label:?} cannot name a certificate: {reason} (use 1-63 of a-z, 0-9 and '-', not starting or ending with '-')")]
pub struct LabelError {
    pub what: &'static str,
    pub label: String,
    pub reason: &'static str,
}

/// Checks one DNS label (lower case letters, digits, inner hyphens, ≤ 63 bytes).
pub fn check_label(what: &'static str, label: &str) -> Result<(), LabelError> {
    let err = |reason| {
        Err(LabelError {
            what,
            label: label.into(),
            reason,
        })
    };
    if label.is_empty() || label.len() > 63 {
        return err("it must have 1 to 63 characters");
    }
    if !label
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return err("it has a character other than a-z, 0-9 or '-'");
    }
    if label.starts_with('-') || label.ends_with('-') {
        return err("it starts or ends with '-'");
    }
    Ok(())
}

/// `<domain>.causeway`: the subtree a domain's CA may issue names in.
pub fn domain_name(domain: &str) -> Result<String, LabelError> {
    check_label("domain", domain)?;
    Ok(format!("{domain}.{SUFFIX}"))
}

/// `<host>.<domain>.causeway`: the name a host's certificate carries.
pub fn host_name(domain: &str, host: &str) -> Result<String, LabelError> {
    check_label("host", host)?;
    Ok(format!("{host}.{}", domain_name(domain)?))
}

/// The (domain, host) an identity name stands for, if it is one.
pub fn parse_host_name(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_suffix(SUFFIX)?.strip_suffix('.')?;
    let (host, domain) = rest.split_once('.')?;
    (check_label("host", host).is_ok() && check_label("domain", domain).is_ok())
        .then_some((domain, host))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_labels_are_refused() {
        let n = host_name("dc1", "node-7").expect("valid");
        assert_eq!(n, "node-7.dc1.causeway");
        assert_eq!(parse_host_name(&n), Some(("dc1", "node-7")));
        assert_eq!(parse_host_name("a.b.c.causeway"), None);
        assert_eq!(parse_host_name("a.dc1.example"), None);
        for bad in [
            "",
            "Upper",
            "a.b",
            "-x",
            "x-",
            "under_score",
            &"a".repeat(64),
        ] {
            let e = host_name("dc1", bad).expect_err(bad);
            assert_eq!(e.what, "host");
            assert!(domain_name(bad).is_err(), "{bad}");
        }
    }
}
