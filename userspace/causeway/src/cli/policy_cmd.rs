//! `policy check | apply | show | example`.

use std::path::Path;

use anyhow::{bail, Context as _, Result};

use causeway::{
    datapath::{rules, state, state::PolicyRecord, FaultPlan, PolicyInput},
    policy::{self, Policy},
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
        PolicyCommand::Show { iface } => show(ctx, iface.as_deref()),
        PolicyCommand::SetRate(args) => super::shaper::set_rate(ctx, &args),
        PolicyCommand::Example => {
            print!("{}", policy::EXAMPLE);
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

fn show(ctx: &Context, iface: Option<&str>) -> Result<()> {
    for iface in ctx.targets(iface)? {
        let paths = ctx.layout.iface(&ctx.scope, &iface)?;
        if !paths.pin_dir.exists() {
            bail!("{iface} is not attached in the {}", ctx.scope);
        }
        let live = rules::config(&paths.maps_dir)
            .with_context(|| format!("cannot read the classifier config of {iface}"))?;
        let record: Option<PolicyRecord> = state::read_json(&paths.policy_record())?;
        println!(
            "{iface} ({}): generation {}, {} rules live in set {}",
            ctx.scope, live.generation, live.rule_count, live.active_set
        );
        match record {
            None => println!("  no policy applied: every frame is class 'default'"),
            Some(record) => {
                let policy = Policy::parse(&record.text, &record.source)
                    .with_context(|| format!("the recorded policy of {iface} no longer parses"))?;
                println!(
                    "  from {} (applied at generation {})",
                    record.source, record.generation
                );
                if record.generation != live.generation {
                    println!(
                        "  warning: the maps are at generation {}, changed by something else since",
                        live.generation
                    );
                }
                for line in policy.describe().lines() {
                    println!("  {line}");
                }
                super::shaper::show(ctx, &iface)?;
            }
        }
    }
    Ok(())
}
