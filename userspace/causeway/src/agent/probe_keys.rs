//! Probe key files (`clock.peers.key_file` in the agent's configuration):
//! 64 hex digits (32 bytes, `causeway_core::clock::auth`), not readable by
//! group or others. Errors name the peer and the file, never the key.
//! Both agents of a pair hold the same key; make one with
//! `umask 077; od -An -tx1 -N32 /dev/urandom | tr -d ' \n' > pair.key`.

use std::path::Path;

use super::config::ConfigError;
use crate::clock::auth::ProbeKey;

/// Reads a probe key file: 64 hex digits, not readable by group or others.
pub(super) fn read_key(peer: &str, path: &Path) -> Result<ProbeKey, ConfigError> {
    use std::os::unix::fs::PermissionsExt;
    let err = |reason: String| ConfigError::Key {
        peer: peer.to_string(),
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|e| err(format!("cannot read it: {e}")))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(err(format!(
            "mode {mode:04o} lets group or others read it (chmod 600)"
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| err(format!("cannot read it: {e}")))?;
    ProbeKey::parse_hex(&text).map_err(|e| err(e.to_string()))
}

#[cfg(test)]
mod key_tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::agent::config::AgentConfig;

    const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    fn config_with_key(dir: &Path, name: &str) -> String {
        format!(
            "host_id = 1\n[clock]\n[[clock.peers]]\nname = \"b\"\naddr = \"10.1.0.2:7339\"\nkey_file = \"{}\"\n",
            dir.join(name).display()
        )
    }

    fn write(dir: &Path, name: &str, text: &str, mode: u32) {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write key");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).expect("chmod");
    }

    #[test]
    fn key_files_are_read_and_bad_ones_named() {
        let dir = std::env::temp_dir().join(format!("cw-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        write(&dir, "good.key", &format!("{KEY}\n"), 0o600);
        write(&dir, "open.key", KEY, 0o644);
        write(&dir, "short.key", "abcd", 0o600);
        let c = AgentConfig::parse(&config_with_key(&dir, "good.key")).expect("valid");
        assert!(c.peers[0].key.is_some());
        // Relative to the configuration file when loaded from one.
        std::fs::write(
            dir.join("agent.toml"),
            config_with_key(Path::new(""), "good.key"),
        )
        .expect("write config");
        let c = AgentConfig::load(&dir.join("agent.toml")).expect("valid");
        assert_eq!(
            c.peers[0].key_file.as_deref(),
            Some(dir.join("good.key").as_path())
        );
        for (name, needle) in [
            ("open.key", "mode 0644"),
            ("short.key", "64 hex digits"),
            ("missing.key", "cannot read it"),
        ] {
            let e = AgentConfig::parse(&config_with_key(&dir, name))
                .expect_err(name)
                .to_string();
            assert!(e.contains(name) && e.contains(needle), "{e}");
            assert!(!e.contains(KEY) && !e.contains("abcd"), "a key leaked: {e}");
        }
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
}
