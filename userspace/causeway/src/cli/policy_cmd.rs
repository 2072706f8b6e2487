//! `policy check | apply | show | example`.

use std::path::Path;

use anyhow::{Context as _, Result};

use causeway::{
    datapath::{FaultPlan, PolicyInput},
    policy::Policy,
};

use super::{args::PolicyCommand, Context};

/// A validated policy with the text it came from.
pub struct LoadedPolicy {
    pub input: PolicyInput,
    pub policy: Policy,
}

/// Reads and validates a policy file.
pub fn load(file: &Path) -> Result<LoadedPolicy> {
    let source = file.display().to_string();
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read policy file {source}"))?;
    let input = PolicyInput { source, text };
    let policy = input.parse()?;
    Ok(LoadedPolicy { input, policy })
}

pub fn run(ctx: &Context, command: PolicyCommand) -> Result<()> {
    match command {
        PolicyCommand::Check { file } => {
            let loaded = load(&file)?;
            println!(
                "{}: valid, {} classes, {} rules",
                loaded.input.source,
                loaded.policy.classes.len(),
                loaded.policy.rules.len()
            );
            print!("{}", loaded.policy.describe());
            Ok(())
        }
        PolicyCommand::Apply { iface, file } => apply(ctx, iface.as_deref(), &file),
        PolicyCommand::Show { iface, json } => super::policy_show::run(ctx, iface.as_deref(), json),
        PolicyCommand::SetRate(args) => super::shaper::set_rate(ctx, &args),
        PolicyCommand::Example(a) => {
            let ports = causeway_core::traffic::ListenPorts::new(a.port_base, a.port_count)
                .with_context(|| {
                    format!(
                        "{} ports from {} do not fit below 65536",
                        a.port_count, a.port_base
                    )
                })?;
            let setup = causeway::library_policy::LibrarySetup {
                ports,
                master_port: a.master_port,
            };
            print!("{}", causeway::library_policy::render(&setup));
            Ok(())
        }
    }
}

/// Validates the file and every target, then applies it to all of them
/// as one transaction: a failure anywhere restores every interface.
fn apply(ctx: &Context, iface: Option<&str>, file: &Path) -> Result<()> {
    let loaded = load(file)?;
    let datapath = ctx.datapath();
    let locked = datapath.lock()?;
    let targets = ctx.targets(iface)?;
    let applied = locked.apply(&targets, &loaded.input, &FaultPlan::NONE)?;
    for a in &applied {
        super::shaper::print_applied(a);
        println!(
            "applied {} to {} in the {}: {} rules, generation {}",
            loaded.input.source, a.iface, ctx.scope, a.rules, a.generation
        );
    }
    Ok(())
}
