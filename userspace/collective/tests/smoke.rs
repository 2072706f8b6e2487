mod common;
use causeway_collective::ReduceOp;
use common::*;

#[test]
fn allreduce_smoke() {
    for layout in [separate_hosts(3), one_host(3)] {
        let out = run_world(&layout, &test_options(), |c| {
            let mut v: Vec<f32> = (0..100).map(|i| (i + c.rank()) as f32).collect();
            c.allreduce(&mut v, ReduceOp::Sum).expect("allreduce");
            c.barrier().expect("barrier");
            v
        });
        let want: Vec<f32> = (0..100).map(|i| (3 * i + 3) as f32).collect();
        for v in out {
            assert_eq!(v, want);
        }
    }
}
