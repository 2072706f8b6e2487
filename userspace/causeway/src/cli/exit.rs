//! The exit statuses of every verb, as `--help` shows them (README's CLI
//! section has the same table). Every verb: 0 done; 1 failed, with one
//! `error: …` line on stderr; 2 bad command line (clap's usage message);
//! 141 its stdout was closed (`| head`), quietly, with nothing on stderr.

macro_rules! exit_help {
    ($example:literal, $one:literal) => {
        concat!(
            $example,
            "\n\nExit status:\n  0    done\n  1    ",
            $one,
            "\n  2    bad command line\n  141  stdout closed early (e.g. `| head`); nothing on stderr"
        )
    };
}

pub const TOP: &str = concat!(
    "Examples:\n  causeway --netns dc1 attach --iface veth0 --policy policy.toml\n",
    "  causeway policy check policy.toml\n  causeway --netns dc1 stats --watch\n",
    "  causeway status\n\n",
    "Exit status (every command; `causeway COMMAND --help` says what 1 means there):\n",
    "  0    done\n  1    failed; one `error: …` line on stderr\n",
    "  2    bad command line\n  141  stdout closed early (e.g. `| head`); nothing on stderr"
);

pub const ATTACH: &str = exit_help!(
    "Example:\n  causeway --netns dc1 attach --iface veth0 --mode driver --policy policy.toml",
    "not attached: invalid policy, no such interface, or the kernel refused the\n       program; nothing new is left behind"
);
pub const DETACH: &str = exit_help!(
    "Example:\n  causeway --netns dc1 detach --iface veth0",
    "the link or a pin could not be removed (the message names it)"
);
pub const STATUS: &str = exit_help!(
    "Examples:\n  causeway status\n  causeway --netns dc1 status --json",
    "the pins could not be read (an unhealthy attachment is status 0: see HEALTH)"
);
pub const STATS: &str = exit_help!(
    "Examples:\n  causeway --netns dc1 stats --iface veth0\n  causeway stats --json\n  causeway stats --watch --interval 2",
    "nothing attached, or its counters could not be read; --watch runs until\n       interrupted (130 on Ctrl-C)"
);
pub const AGENT: &str = exit_help!(
    "Example:\n  causeway --netns dc1 agent --config /etc/causeway/agent.toml",
    "bad configuration, an interface could not be owned, or a task failed;\n       SIGTERM/SIGINT stop it with status 0"
);
pub const POLICY_CHECK: &str = exit_help!(
    "Example:\n  causeway policy check policy.toml",
    "the file is unreadable or invalid (line and column on stderr)"
);
pub const POLICY_APPLY: &str = exit_help!(
    "Examples:\n  causeway --netns dc1 policy apply --iface veth0 policy.toml\n  causeway policy apply policy.toml",
    "invalid file, nothing attached, or a step failed; every interface keeps\n       (is restored to) the policy it had"
);
pub const POLICY_SHOW: &str = exit_help!(
    "Examples:\n  causeway --netns dc1 policy show --iface veth0\n  causeway policy show --json",
    "the interface is not attached, or its maps or records could not be read"
);
pub const POLICY_SET_RATE: &str = exit_help!(
    "Examples:\n  causeway --netns dc1 policy set-rate bulk 50mbit --iface veth0\n  causeway policy set-rate gradient 2gbit --burst 256kb",
    "refused (unknown class, no shaping, rate out of range) or failed; nothing\n       was changed"
);
pub const POLICY_EXAMPLE: &str = exit_help!(
    "Example:\n  causeway policy example > policy.toml",
    "never (stdout errors other than a closed pipe)"
);
pub const CLOCK_STATUS: &str = exit_help!(
    "Examples:\n  causeway clock status\n  causeway --netns dc1 clock status --json",
    "no agent answers on the control socket, or it sent no clock status"
);
pub const LOG: &str = exit_help!(
    "Examples:\n  causeway --netns dc1 log --on --iface veth0\n  causeway --netns dc1 log --iface veth0 --follow\n  causeway log --off",
    "nothing attached, or the log buffer or the switch could not be reached;\n       --follow runs until interrupted (130 on Ctrl-C)"
);
pub const PATHS_ATTACH: &str = exit_help!(
    "Example:\n  causeway --netns d0gw paths attach --iface br0 --path 0=0x1000 --path 1=0x1001",
    "not attached: a bad path list, no such interface, already attached, or the\n       kernel refused the program; nothing new is left behind"
);
pub const PATHS_DETACH: &str = exit_help!(
    "Example:\n  causeway --netns d0gw paths detach --iface br0",
    "not attached there, or the filter or a pin could not be removed"
);
pub const PATHS_ROUTE: &str = exit_help!(
    "Example:\n  causeway --netns d0gw paths route --iface br0 --path 1 --flow 'tcp 10.0.0.10:40000 10.1.0.10:5201'",
    "a bad flow (nothing written), steering not attached, a path with no mark,\n       or a map write failed"
);
pub const PATHS_SET: &str = exit_help!(
    "Example:\n  causeway --netns d0gw paths set --iface br0 --path 1 --down",
    "steering not attached, a path out of range, a new path without --mark, or\n       the map write failed"
);
pub const PATHS_SHOW: &str = exit_help!(
    "Examples:\n  causeway --netns d0gw paths show\n  causeway paths show --iface br0 --flows --json\n  causeway paths show --watch --interval 500ms",
    "no steering attached, or its maps could not be read; --watch runs until\n       interrupted (130 on Ctrl-C)"
);
pub const PATHS_MONITOR: &str = exit_help!(
    "Example:\n  causeway --netns d0gw paths monitor --iface br0 --probe 0=10.200.0.2:7360 --probe 1=10.200.1.2:7360",
    "steering not attached, a probed path without a mark, a socket could not be\n       bound, or a map write failed; it runs until interrupted (130 on Ctrl-C)"
);
