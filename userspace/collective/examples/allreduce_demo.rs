//! The README demo: join the world from torchrun's variables, start an allreduce
//! in the background, show its progress, check the result.
//!
//! `RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 CAUSEWAY_DOMAIN=east \
//!  cargo run --release -p causeway-collective --example allreduce_demo -- 16777216`

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use causeway_collective::{Communicator, ReduceOp};

fn main() -> std::process::ExitCode {
    causeway_core::cli_main::run(|| {
        // The engine's writev to a peer that has gone must fail, not raise SIGPIPE.
        causeway_core::cli_main::ignore_sigpipe();
        run()
    })
}

fn run() -> Result<()> {
    let elems: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse())
        .transpose()
        .context("element count")?
        .unwrap_or(1 << 24);
    let comm = Communicator::from_env().context("joining the communicator")?;
    let (rank, world) = (comm.rank(), comm.world_size());
    eprintln!(
        "rank {rank}/{world} in domain {}, allreduce of {} MiB with {:?}",
        comm.domain_of(rank).unwrap_or("?"),
        (elems * 4) >> 20,
        comm.allreduce_algorithm::<f32>(elems)
    );
    let grads = vec![rank as f32 + 1.0; elems];
    let t = Instant::now();
    let handle = comm.allreduce_async(grads, ReduceOp::Avg);
    while !handle.is_finished() {
        let (done, total) = handle.progress();
        if total > 0 {
            eprint!(
                "\r  {:5.1} %  ({} of {} KiB received)",
                100.0 * done as f64 / total as f64,
                done >> 10,
                total >> 10
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let avg = handle.wait().context("allreduce")?;
    let want = (1..=world).sum::<usize>() as f32 / world as f32;
    ensure!(
        avg.iter().all(|x| *x == want),
        "wrong result: {} instead of {want}",
        avg[0]
    );
    eprintln!(
        "\r  done in {:.3} s: every element is {want}",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
