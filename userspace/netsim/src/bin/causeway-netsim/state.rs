//! The state file of a testbed brought up by `causeway-netsim up`:
//! `/run/causeway-netsim/<tag>/state.json`, next to the emulators' control
//! sockets and logs, so `down` and `status` find everything `up` made.

use std::path::PathBuf;

use anyhow::{Context, Result};
use causeway_netsim::Plan;
use serde::{Deserialize, Serialize};

pub const STATE_ROOT: &str = "/run/causeway-netsim";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct EmulatorProc {
    pub path: usize,
    pub pid: i32,
    pub control: PathBuf,
    pub log: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct State {
    pub plan: Plan,
    pub profile: String,
    pub emulators: Vec<EmulatorProc>,
}

pub fn dir(tag: &str) -> PathBuf {
    PathBuf::from(STATE_ROOT).join(tag)
}

fn file(tag: &str) -> PathBuf {
    dir(tag).join("state.json")
}

impl State {
    pub fn save(&self) -> Result<()> {
        let d = dir(&self.plan.tag);
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
        let tmp = d.join("state.json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, file(&self.plan.tag)).context("replacing the state file")?;
        Ok(())
    }

    /// The state of testbed `tag`, if it is up (or half up).
    pub fn load(tag: &str) -> Result<Option<State>> {
        let f = file(tag);
        match std::fs::read(&f) {
            Ok(bytes) => Ok(Some(
                serde_json::from_slice(&bytes)
                    .with_context(|| format!("parsing {}", f.display()))?,
            )),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).with_context(|| format!("reading {}", f.display())),
        }
    }
}

/// Tags that have a state directory.
pub fn tags() -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(STATE_ROOT) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    v.sort();
    v
}
