//! The main job (filled in as the parts land).

use anyhow::Result;
use clap::Args;

#[derive(Args)]
pub struct DemoArgs {}

pub fn run(_args: &DemoArgs) -> Result<()> {
    anyhow::bail!("the demo is being assembled")
}
