//! The command line: every command says what is required, what is optional,
//! and shows an example.

use std::{path::PathBuf, time::Duration};

use causeway_core::units;
use clap::{Args, Parser, Subcommand};

use causeway::datapath::{layout, AttachMode};

use super::exit;

/// Causeway: classify, count and police AI-training traffic with XDP.
#[derive(Debug, Parser)]
#[command(name = "causeway", version, propagate_version = true)]
#[command(after_help = "Examples:
  causeway --netns dc1 attach --iface veth0 --policy policy.toml
  causeway policy check policy.toml
  causeway --netns dc1 stats --watch
  causeway status")]
#[command(after_long_help = exit::TOP)]
pub struct Cli {
    /// Work inside network namespace NAME (/run/netns/NAME, as made by
    /// `ip netns add`). Only the network namespace is entered, so the pins
    /// on the host's bpffs stay visible. Optional; default: the current one.
    #[arg(long, global = true, value_name = "NAME")]
    pub netns: Option<String>,

    /// bpffs directory for Causeway's pins; mounted when missing. Optional.
    #[arg(long, global = true, value_name = "DIR",
          default_value = layout::DEFAULT_PIN_ROOT)]
    pub pin_root: PathBuf,

    /// Directory for records kept beside the pins (applied policy, attach
    /// mode). Optional.
    #[arg(long, global = true, value_name = "DIR",
          default_value = layout::DEFAULT_STATE_ROOT)]
    pub state_dir: PathBuf,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Load the XDP classifier, attach it to an interface and pin it.
    ///
    /// Attaching an interface that is already attached keeps the live
    /// attachment (and applies --policy to it): it never attaches twice.
    /// Pins of an attachment whose interface is gone are replaced.
    #[command(
        after_help = "Example:\n  causeway --netns dc1 attach --iface veth0 --mode driver --policy policy.toml",
        after_long_help = exit::ATTACH
    )]
    Attach(AttachArgs),

    /// Detach the classifier from an interface and remove every pin and
    /// record of it. Works when the interface no longer exists.
    #[command(
        after_help = "Example:\n  causeway --netns dc1 detach --iface veth0",
        after_long_help = exit::DETACH
    )]
    Detach(IfaceArg),

    /// Show the attached interfaces (all namespaces, or only --netns):
    /// health, XDP mode, program and link ids, policy generation, rules.
    #[command(
        after_help = "Examples:\n  causeway status\n  causeway --netns dc1 status --json",
        after_long_help = exit::STATUS
    )]
    Status(JsonArg),

    /// Check, apply and show policy files.
    #[command(subcommand)]
    Policy(PolicyCommand),

    /// Per-class ingress counters (packets, bytes, drops; summed over CPUs)
    /// and frames left unclassified, named after the applied policy.
    #[command(
        after_help = "Examples:\n  causeway --netns dc1 stats --iface veth0\n  causeway stats --json\n  causeway stats --watch --interval 2",
        after_long_help = exit::STATS
    )]
    Stats(StatsArgs),

    /// Run the per-host agent: own the XDP/TC programs of the configured
    /// interfaces (adopting pinned ones), sync clocks with the configured
    /// peers, publish the estimates, serve the control socket. Stops on
    /// SIGTERM/SIGINT, leaving the programs attached.
    #[command(
        after_help = "Example:\n  causeway --netns dc1 agent --config /etc/causeway/agent.toml",
        after_long_help = exit::AGENT
    )]
    Agent(super::agent_cmd::AgentArgs),

    /// Clock synchronisation status, from the local agent.
    #[command(subcommand)]
    Clock(super::clock_cmd::ClockCommand),

    /// The eBPF programs' log records (aya-log): unparseable frames per
    /// reason and hook, shaper drops; at most 4 records per event, CPU and
    /// second. Off after attach: `--on`/`--off` switch it per interface at
    /// run time. The agent prints the same records in its tracing output
    /// (target `causeway::ebpf`); while it runs, it and this command share
    /// the records between them.
    #[command(
        after_help = "Examples:\n  causeway --netns dc1 log --on --iface veth0\n  causeway --netns dc1 log --iface veth0 --follow\n  causeway log --off",
        after_long_help = exit::LOG
    )]
    Log(super::log_cmd::LogArgs),

    /// WAN path steering on a gateway: per-flow `skb->mark` at the
    /// LAN-facing interface's ingress, chosen from maps; re-routing a flow
    /// or taking a path down is one map update.
    #[command(subcommand)]
    Paths(super::paths_cmd::PathsCommand),

    /// A live view of the attached interfaces: per-class ingress counters
    /// and rates, egress shaping (rate, ceiling, sent, over-limit), and the
    /// agent's clock peers (offset, bound, source), redrawn in place.
    /// q, Esc or Ctrl-C quits.
    #[command(
        after_help = "Examples:\n  causeway top\n  causeway --netns dc1 top --iface veth0 --interval 500ms"
    )]
    Top(super::top::TopArgs),

    /// Identities for the collective library's mutual TLS: a CA per domain,
    /// a certificate per host naming `<host>.<domain>.causeway`.
    #[command(subcommand)]
    Certs(super::certs::CertsCommand),
}

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Interface to attach to (required).
    #[arg(long, value_name = "IF")]
    pub iface: String,
    /// XDP mode: auto (the kernel picks native when the driver has it),
    /// skb (generic) or driver (native). Optional.
    #[arg(long, value_name = "MODE", default_value = "auto")]
    pub mode: AttachMode,
    /// Policy file to apply before the first frame is classified. Optional;
    /// without it every frame counts as class `default`.
    #[arg(long, value_name = "FILE")]
    pub policy: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct IfaceArg {
    /// Interface (required).
    #[arg(long, value_name = "IF")]
    pub iface: String,
}

#[derive(Debug, Args)]
pub struct JsonArg {
    /// Print JSON instead of a table. Optional.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Validate a policy file without touching the kernel; prints the
    /// classes and the rules in priority order.
    #[command(
        after_help = "Example:\n  causeway policy check policy.toml",
        after_long_help = exit::POLICY_CHECK
    )]
    Check {
        /// Policy file (required).
        file: PathBuf,
    },
    /// Validate a policy file, then replace the rules of one attached
    /// interface, or of every attached interface in the namespace when
    /// --iface is omitted. An invalid file changes nothing.
    #[command(
        after_help = "Examples:\n  causeway --netns dc1 policy apply --iface veth0 policy.toml\n  causeway policy apply policy.toml",
        after_long_help = exit::POLICY_APPLY
    )]
    Apply {
        /// Interface. Optional; default: every attached interface.
        #[arg(long, value_name = "IF")]
        iface: Option<String>,
        /// Policy file (required).
        file: PathBuf,
    },
    /// Show the policy applied to one interface, or to every attached
    /// interface in the namespace, with its live shaping (rates measured
    /// over one second).
    #[command(
        after_help = "Examples:\n  causeway --netns dc1 policy show --iface veth0\n  causeway policy show --json",
        after_long_help = exit::POLICY_SHOW
    )]
    Show {
        /// Interface. Optional; default: every attached interface.
        #[arg(long, value_name = "IF")]
        iface: Option<String>,
        /// Print one JSON document (schema: `PolicyShow` in
        /// src/cli/policy_show.rs, README "JSON output"). Optional.
        #[arg(long)]
        json: bool,
    },
    /// Change one class's egress rate live on one attached interface (or
    /// every one): HTB class change and one map write, no reload, no flow
    /// dropped. Refused as a whole (nothing changed) for an unknown class,
    /// a class without shaping, a zero or absurd rate, a rate above the
    /// link rate, or a burst smaller than one frame.
    #[command(
        after_help = "Examples:\n  causeway --netns dc1 policy set-rate bulk 50mbit --iface veth0\n  causeway policy set-rate gradient 2gbit --burst 256kb",
        after_long_help = exit::POLICY_SET_RATE
    )]
    SetRate(super::shaper::SetRateArgs),
    /// Print a complete, commented policy that classifies the collective
    /// library's traffic as it tags it (DSCP per connection kind, peers on
    /// the CAUSEWAY_PORT_BASE range, the store on MASTER_PORT) and the
    /// agent's clock probes.
    #[command(
        after_help = "Examples:\n  causeway policy example > policy.toml\n  causeway policy example --port-base 40000 --port-count 64 --master-port 29501",
        after_long_help = exit::POLICY_EXAMPLE
    )]
    Example(ExampleArgs),
}

#[derive(Debug, Args)]
pub struct ExampleArgs {
    /// The ranks' CAUSEWAY_PORT_BASE (0: the kernel picks, rules match any
    /// port). Optional.
    #[arg(long, value_name = "PORT", default_value_t = causeway_core::traffic::DEFAULT_PORT_BASE)]
    pub port_base: u16,
    /// The ranks' CAUSEWAY_PORT_COUNT. Optional.
    #[arg(long, value_name = "N", default_value_t = causeway_core::traffic::DEFAULT_PORT_COUNT)]
    pub port_count: u16,
    /// torchrun's MASTER_PORT (the bootstrap store). Optional.
    #[arg(long, value_name = "PORT", default_value_t = causeway_core::traffic::DEFAULT_MASTER_PORT)]
    pub master_port: u16,
}

#[derive(Debug, Args)]
pub struct StatsArgs {
    /// Interface. Optional; default: every attached interface in the namespace.
    #[arg(long, value_name = "IF")]
    pub iface: Option<String>,
    /// Print again every --interval seconds, with rates, until interrupted.
    #[arg(long)]
    pub watch: bool,
    /// Time between samples with --watch, e.g. "500ms" or "2s" (a bare
    /// number is seconds). Optional; default 1s.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = interval_arg)]
    pub interval: Duration,
    /// Print JSON (one document per sample with --watch). Optional.
    #[arg(long)]
    pub json: bool,
}

/// A rate flag (`50mbit`, `1gbit`), in bit/s: the one units parser.
pub fn rate_arg(s: &str) -> Result<u64, units::UnitError> {
    units::parse_rate_bps(s)
}

/// A size flag (`512kb`, `1500`), in bytes: the one units parser.
pub fn size_arg(s: &str) -> Result<u64, units::UnitError> {
    units::parse_bytes(s)
}

/// A duration flag (`500ms`, `2s`); a bare number is seconds, as the
/// flags taking one always were.
pub fn interval_arg(s: &str) -> Result<Duration, units::UnitError> {
    let bare = !s.trim().is_empty() && s.trim().chars().all(|c| c.is_ascii_digit() || c == '.');
    if bare {
        units::parse_duration(&format!("{}s", s.trim()))
    } else {
        units::parse_duration(s)
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn unit_flags_go_through_the_units_parser() {
        let cli = Cli::parse_from([
            "causeway", "policy", "set-rate", "bulk", "150mbit", "--burst", "512kb",
        ]);
        match cli.command {
            Command::Policy(PolicyCommand::SetRate(a)) => {
                assert_eq!((a.rate, a.burst), (150_000_000, Some(512 * 1024)))
            }
            other => panic!("{other:?}"),
        }
        assert!(Cli::try_parse_from(["causeway", "policy", "set-rate", "bulk", "0"]).is_err());
        assert!(Cli::try_parse_from(["causeway", "policy", "set-rate", "bulk", "fast"]).is_err());
        assert_eq!(interval_arg("2").unwrap(), Duration::from_secs(2));
        assert_eq!(interval_arg("250ms").unwrap(), Duration::from_millis(250));
        assert!(interval_arg("soon").is_err());
    }

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_global_netns_after_the_command() {
        let cli = Cli::parse_from([
            "causeway", "attach", "--iface", "v0", "--netns", "A", "--mode", "skb",
        ]);
        assert_eq!(cli.netns.as_deref(), Some("A"));
        match cli.command {
            Command::Attach(a) => assert_eq!((a.iface.as_str(), a.mode), ("v0", AttachMode::Skb)),
            other => panic!("{other:?}"),
        }
        assert!(Cli::try_parse_from(["causeway", "attach"]).is_err());
        assert!(
            Cli::try_parse_from(["causeway", "attach", "--iface", "v0", "--mode", "hw"]).is_err()
        );
    }
}
