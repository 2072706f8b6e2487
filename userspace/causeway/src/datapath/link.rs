//! What the kernel says about a pinned XDP link: its id, its program and the
//! interface it is attached to (0 once the interface is gone).
//!
//! aya's `LinkInfo` has no interface index, so it is read from the link's
//! `/proc/self/fdinfo` entry, which the kernel writes in
//! `bpf_link_show_fdinfo` + `bpf_xdp_link_show_fdinfo` (net/core/dev.c).

use std::{collections::HashMap, path::Path};

use aya::programs::links::{FdLink, PinnedLink};
use serde::Serialize;

use super::DatapathError;

/// The kernel's view of one XDP link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct LinkState {
    pub link_id: u32,
    pub prog_id: u32,
    /// The interface the link is attached to; 0 when it was detached by the
    /// kernel (the interface was deleted).
    pub ifindex: u32,
}

/// Opens the link pinned at `path` and reads its state.
pub fn read_pinned(path: &Path) -> Result<LinkState, DatapathError> {
    let link = PinnedLink::from_pin(path).map_err(|source| DatapathError::Link {
        what: format!("opening the pinned link {}", path.display()),
        source: Box::new(source),
    })?;
    read(&FdLink::from(link), path)
}

/// The state of an open link.
pub fn read(link: &FdLink, path: &Path) -> Result<LinkState, DatapathError> {
    let info = link.info().map_err(|source| DatapathError::Link {
        what: format!("reading the link info of {}", path.display()),
        source: Box::new(source),
    })?;
    let link_id = info.id();
    let ifindex = fdinfo_ifindex(link_id)?.ok_or_else(|| DatapathError::LinkFdinfo {
        link_id,
        reason: "no file descriptor of this process shows it with an ifindex".into(),
    })?;
    Ok(LinkState {
        link_id,
        prog_id: info.program_id(),
        ifindex,
    })
}

/// Finds the fdinfo entry of link `link_id` among this process's open files
/// and returns its `ifindex`.
fn fdinfo_ifindex(link_id: u32) -> Result<Option<u32>, DatapathError> {
    let dir = Path::new("/proc/self/fdinfo");
    let entries =
        std::fs::read_dir(dir).map_err(|source| DatapathError::io("list", dir, source))?;
    for entry in entries.flatten() {
        // Entries may vanish while we read (fds of other threads); skip them.
        let Ok(text) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        let fields = parse_fdinfo(&text);
        if fields.get("link_id").and_then(|v| v.parse::<u32>().ok()) == Some(link_id) {
            return Ok(fields.get("ifindex").and_then(|v| v.parse().ok()));
        }
    }
    Ok(None)
}

/// `key:\tvalue` lines of an fdinfo file.
pub fn parse_fdinfo(text: &str) -> HashMap<&str, &str> {
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim(), v.trim()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_an_xdp_link_fdinfo() {
        let text = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1057\n\
                    link_type:\txdp\nlink_id:\t42\nprog_tag:\t2a2b3c4d5e6f7a8b\n\
                    prog_id:\t108\nifindex:\t3\n";
        let fields = parse_fdinfo(text);
        assert_eq!(fields["link_type"], "xdp");
        assert_eq!(fields["link_id"], "42");
        assert_eq!(fields["ifindex"], "3");
    }

    #[test]
    fn unknown_links_have_no_fdinfo() {
        assert_eq!(fdinfo_ifindex(u32::MAX).unwrap(), None);
    }
}
