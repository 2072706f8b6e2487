//! `CAUSEWAY_METRICS_ADDR` on a running world: four ranks in two domains
//! (threads of this process, so one listener serves all four) run ring
//! allreduces; the scraped text has every rank's operation count and the
//! bytes a ring moves per link class, sent and received alike.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use causeway_collective::{Algorithm, Options, ReduceOp};

use crate::world::{run_world, test_options, AllArrive};

const OPS: usize = 5;
const ELEMS: usize = 1 << 18; // 1 MiB of f32

pub(crate) fn scrape(addr: SocketAddr) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics listener");
    write!(s, "GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").expect("request");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("response");
    assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
    out
}

/// `name{labels} value` samples of the text, summed over `rank` by the
/// label `by`.
pub(crate) fn sum_by(text: &str, name: &str, by: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with(&format!("{name}{{"))) {
        let (labels, value) = line.rsplit_once(' ').expect("sample");
        let key = labels
            .split([',', '{', '}'])
            .find_map(|kv| kv.strip_prefix(&format!("{by}=\"")))
            .map(|v| v.trim_end_matches('"').to_string())
            .unwrap_or_default();
        *out.entry(key).or_insert(0.0) += value.parse::<f64>().expect("number");
    }
    out
}

#[test]
fn a_worlds_metrics_count_its_operations_and_ring_bytes_per_link() {
    let layout: Vec<(String, String)> = (0..4)
        .map(|r| (format!("d{}", r / 2), format!("h{r}")))
        .collect();
    let opts = Options {
        algorithm: Some(Algorithm::Ring),
        chunk_bytes: 64 << 10,
        metrics_addr: Some("127.0.0.1:0".parse().expect("addr")),
        ..test_options()
    };
    let arrive = AllArrive::new(4);
    let texts = run_world(&layout, &opts, |c| {
        let mut v = vec![1.0f32; ELEMS];
        for _ in 0..OPS {
            c.allreduce(&mut v, ReduceOp::Sum).expect("allreduce");
        }
        assert_eq!(v[0], 4f32.powi(OPS as i32));
        arrive.wait();
        let text = (c.rank() == 0).then(|| scrape(c.metrics_addr().expect("served")));
        arrive.wait();
        text
    });
    let text = texts[0].as_deref().expect("rank 0 scraped");
    let counts = sum_by(text, "causeway_op_duration_seconds_count", "rank");
    let want: BTreeMap<String, f64> = (0..4).map(|r| (r.to_string(), OPS as f64)).collect();
    assert_eq!(counts, want, "{text}");
    assert!(
        text.contains("op=\"allreduce\",size_bucket=\"64KiB-1MiB\""),
        "{text}"
    );
    // A ring over 0→1→2→3→0: each rank sends 2·(n−1)/n of the buffer per
    // allreduce to its successor; 0→1 and 2→3 stay in a domain, 1→2 and 3→0 cross.
    let per_link = 2.0 * 1.5 * (ELEMS * 4) as f64 * OPS as f64;
    let sent = sum_by(text, "causeway_link_sent_bytes_total", "link");
    let received = sum_by(text, "causeway_link_received_bytes_total", "link");
    let want: BTreeMap<String, f64> = [("domain", per_link), ("host", 0.0), ("wan", per_link)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    assert_eq!(sent, want, "{text}");
    assert_eq!(received, want, "{text}");
    assert!(!text.contains("causeway_op_errors_total{"), "{text}");
}
