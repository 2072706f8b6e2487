//! `causeway-netsim bench` (being written).
use anyhow::Result;
use clap::Args;

#[derive(Debug, Args)]
pub struct BenchArgs {}

pub fn run(_a: BenchArgs) -> Result<()> {
    Ok(())
}
