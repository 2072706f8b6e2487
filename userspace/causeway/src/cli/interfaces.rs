//! `attach`, `detach` and `status`.

use anyhow::{Context as _, Result};

use causeway::datapath::{self, status::InterfaceStatus, FaultPlan};

use super::{args::AttachArgs, policy_cmd, table, Context};

pub fn attach(ctx: &Context, args: &AttachArgs) -> Result<()> {
    // Validate the policy before touching anything.
    let policy = args.policy.as_deref().map(policy_cmd::load).transpose()?;
    let datapath = ctx.datapath();
    let done = datapath
        .lock()?
        .attach(
            &args.iface,
            args.mode,
            policy.as_ref().map(|p| &p.input),
            &FaultPlan::NONE,
        )
        .with_context(|| format!("cannot attach to {} in the {}", args.iface, ctx.scope))?;
    let attached = &done.attached;
    if let Some(applied) = &done.applied {
        super::shaper::print_applied(applied);
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
    let datapath = ctx.datapath();
    let done = datapath
        .lock()?
        .detach(iface, !ctx.netns_gone)
        .with_context(|| format!("cannot detach {iface}"))?;
    if done.htb_removed {
        println!("removed Causeway's HTB qdisc from {iface}");
    }
    match done.detached.link {
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
                "SCOPE", "IFACE", "HEALTH", "MODE", "TC", "IFINDEX", "PROG", "LINK", "GEN",
                "RULES", "POLICY"
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
        table::opt(s.tc_mode),
        table::opt(s.ifindex),
        table::opt(s.prog_id),
        table::opt(s.link_id),
        table::opt(s.generation),
        table::opt(s.rule_count),
        table::opt(s.policy_source.clone()),
    ]
}
