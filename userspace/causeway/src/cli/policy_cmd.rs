//! `policy check | apply | show | example`.

use std::path::Path;

use anyhow::{bail, Context as _, Result};

use causeway::{
    datapath::{self, rules, state, state::PolicyRecord, PinState},
    policy::{self, Policy},
};

use super::{args::PolicyCommand, Context};

/// A validated policy with the text it came from.
pub struct LoadedPolicy {
    pub source: String,
    pub text: String,
    pub policy: Policy,
}

/// Reads and validates a policy file.
pub fn load(file: &Path) -> Result<LoadedPolicy> {
    let source = file.display().to_string();
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read policy file {source}"))?;
    let policy = Policy::parse(&text, &source)?;
    Ok(LoadedPolicy {
        source,
        text,
        policy,
    })
}

/// Records `loaded` as the policy of `iface` at `generation`.
pub fn record(ctx: &Context, iface: &str, loaded: &LoadedPolicy, generation: u64) -> Result<()> {
    let paths = ctx.layout.iface(&ctx.scope, iface)?;
    state::write_json(
        &paths.policy_record(),
        &PolicyRecord {
            source: loaded.source.clone(),
            text: loaded.text.clone(),
            generation,
            applied_at_unix: state::now_unix(),
        },
    )?;
    Ok(())
}

pub fn run(ctx: &Context, command: PolicyCommand) -> Result<()> {
    match command {
        PolicyCommand::Check { file } => {
            let loaded = load(&file)?;
            println!(
                "{}: valid, {} classes, {} rules",
                loaded.source,
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

/// Validates the file, checks that every target is live, then applies.
fn apply(ctx: &Context, iface: Option<&str>, file: &Path) -> Result<()> {
    let loaded = load(file)?;
    let _lock = state::StateLock::acquire(&ctx.layout.lock_file())?;
    let targets = ctx.targets(iface)?;
    let mut live = Vec::new();
    for iface in &targets {
        let paths = ctx.layout.iface(&ctx.scope, iface)?;
        let ifindex = nix::net::if_::if_nametoindex(iface.as_str()).ok();
        match datapath::attach::inspect(&paths, ifindex) {
            PinState::Live(_) => {
                super::shaper::precheck(iface, &loaded.policy)?;
                live.push((iface, paths))
            }
            PinState::Absent => bail!(
                "{iface} is not attached in the {}; nothing was changed (attach it first)",
                ctx.scope
            ),
            PinState::Stale(why) => bail!(
                "{iface} in the {} has stale pins ({why}); nothing was changed (run attach or detach)",
                ctx.scope
            ),
        }
    }
    for (iface, paths) in live {
        let generation = rules::apply(&paths.maps_dir, &loaded.policy.rules)
            .with_context(|| format!("cannot apply {} to {iface}", loaded.source))?;
        record(ctx, iface, &loaded, generation)?;
        super::shaper::apply(iface, &paths, &loaded.policy)?;
        println!(
            "applied {} to {iface} in the {}: {} rules, generation {generation}",
            loaded.source,
            ctx.scope,
            loaded.policy.rules.len()
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
