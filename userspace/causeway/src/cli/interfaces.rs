//! `attach`, `detach` and `status`.

use anyhow::{Context as _, Result};

use causeway::datapath::{self, state, status::InterfaceStatus};

use super::{args::AttachArgs, policy_cmd, table, Context};

pub fn attach(ctx: &Context, args: &AttachArgs) -> Result<()> {
    // Validate the policy before touching anything.
    let policy = args.policy.as_deref().map(policy_cmd::load).transpose()?;
    let _lock = state::StateLock::acquire(&ctx.layout.lock_file())?;
    let attached = datapath::attach(
        &ctx.layout,
        &ctx.scope,
        &args.iface,
        args.mode,
        policy.as_ref().map(|p| &p.policy.rules),
    )
    .with_context(|| format!("cannot attach to {} in the {}", args.iface, ctx.scope))?;
    if let (Some(loaded), Some(generation)) = (&policy, attached.generation) {
        policy_cmd::record(ctx, &args.iface, loaded, generation)?;
        super::shaper::apply(
            &args.iface,
            &ctx.layout.iface(&ctx.scope, &args.iface)?,
            &loaded.policy,
        )?;
    }
    if let Some(warning) = &attached.warning {
        eprintln!("warning: {warning}");
    }
    if let Some(why) = &attached.replaced_stale {
        println!("removed stale pins of {} ({why})", attached.iface);
    }
    println!(
        "{} {} (ifindex {}) in the {}: mode {}, program {}, link {}{}",
        if attached.adopted {
            "already attached:"
        } else {
            "attached"
        },
        attached.iface,
        attached.ifindex,
        ctx.scope,
        attached.mode,
        attached.prog_id,
        attached.link_id,
        attached
            .generation
            .map_or_else(String::new, |g| format!(", policy generation {g}")),
    );
    Ok(())
}

pub fn detach(ctx: &Context, iface: &str) -> Result<()> {
    let _lock = state::StateLock::acquire(&ctx.layout.lock_file())?;
    if !ctx.netns_gone {
        super::shaper::detach(iface)?;
    }
    let detached = datapath::detach(&ctx.layout, &ctx.scope, iface)
        .with_context(|| format!("cannot detach {iface}"))?;
    match detached.link {
        Some(link) => println!(
            "detached {iface} in the {}: link {} (program {}) removed with its pins",
            ctx.scope, link.link_id, link.prog_id
        ),
        None => println!(
            "removed the pins of {iface} in the {} (its link was already gone)",
            ctx.scope
        ),
    }
    Ok(())
}

pub fn status(ctx: &Context, json: bool, only_this_netns: bool) -> Result<()> {
    let scope = only_this_netns.then_some(&ctx.scope);
    let list = datapath::status(&ctx.layout, scope).context("cannot read the attachments")?;
    if json {
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    if list.is_empty() {
        println!(
            "nothing attached (no pins under {})",
            ctx.layout.pin_root.display()
        );
        return Ok(());
    }
    let rows: Vec<Vec<String>> = list.iter().map(row).collect();
    print!(
        "{}",
        table::render(
            &[
                "SCOPE", "IFACE", "HEALTH", "MODE", "IFINDEX", "PROG", "LINK", "GEN", "RULES",
                "POLICY"
            ],
            &rows
        )
    );
    Ok(())
}

fn row(s: &InterfaceStatus) -> Vec<String> {
    vec![
        s.scope.clone(),
        s.iface.clone(),
        s.health.clone(),
        table::opt(s.mode),
        table::opt(s.ifindex),
        table::opt(s.prog_id),
        table::opt(s.link_id),
        table::opt(s.generation),
        table::opt(s.rule_count),
        table::opt(s.policy_source.clone()),
    ]
}
