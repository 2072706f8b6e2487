use super::*;

const T: Duration = Duration::from_secs(3);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn judge(me: Rank) -> Judge {
    Judge::new(JudgeConfig::new(me, T))
}

fn link(peer: Rank, heard_ms: u64) -> Link {
    Link {
        peer,
        heard: ms(heard_ms),
    }
}

#[test]
fn timing_follows_the_timeout() {
    let c = JudgeConfig::new(0, T);
    assert_eq!(heartbeat_interval(T), ms(300));
    assert_eq!((c.quiet, c.grace), (ms(900), ms(750)));
    assert_eq!(heartbeat_interval(ms(50)), ms(10));
    assert_eq!(JudgeConfig::new(0, Duration::from_secs(60)).grace, ms(1000));
}

#[test]
fn a_link_silent_for_the_timeout_is_a_direct_verdict_at_once() {
    let mut j = judge(1);
    // Rank 1 waits on 0 (heard 100 ms ago) and on 2 (silent since t = 1 s).
    let links = [link(0, 3900), link(2, 1000)];
    j.check_links(&links, ms(3999));
    assert!(!j.is_failing(), "2 is silent for 2.999 s only");
    assert_eq!(j.poll_timeout(&links, ms(3999)), Some(ms(4000)));
    j.check_links(&links, ms(4000));
    let d = j.decision(&links, ms(4000)).expect("decided");
    assert_eq!(
        d,
        Decision {
            verdict: Verdict {
                culprit: 2,
                observer: 1,
                how: How::Silent(T)
            },
            from: None
        }
    );
}

#[test]
fn the_longest_silent_link_is_named_ties_to_the_lower_rank() {
    let mut j = judge(0);
    j.check_links(&[link(3, 500), link(1, 200), link(2, 200)], ms(5000));
    let d = j.decision(&[], ms(5000)).expect("decided");
    assert_eq!(d.verdict.culprit, 1);
}

#[test]
fn a_stall_on_a_live_peer_waits_for_a_direct_verdict() {
    // Rank 1 waits on rank 0, which is alive (heard just now) but blocked on
    // rank 2; rank 0's report that 2 is silent arrives within the grace.
    let mut j = judge(1);
    let links = [link(0, 5000)];
    j.stalled(&[0], T, ms(5000));
    assert!(j.is_failing());
    assert_eq!(j.decision(&links, ms(5000)), None, "held");
    assert_eq!(j.poll_timeout(&links, ms(5000)), Some(ms(5750)));
    let direct = Verdict {
        culprit: 2,
        observer: 0,
        how: How::Silent(T),
    };
    j.report(0, direct, ms(5400));
    let d = j
        .decision(&links, ms(5400))
        .expect("direct is final at once");
    assert_eq!(
        d,
        Decision {
            verdict: direct,
            from: Some(0)
        }
    );
}

#[test]
fn without_a_direct_verdict_the_own_stall_is_reported_after_the_grace() {
    let mut j = judge(0);
    let links = [link(1, 2990)];
    j.stalled(&[1, 3], T, ms(3000));
    j.report(
        3,
        Verdict {
            culprit: 2,
            observer: 3,
            how: How::NoProgress(T),
        },
        ms(3100),
    );
    assert_eq!(j.decision(&links, ms(3749)), None);
    let d = j.decision(&links, ms(3750)).expect("grace over");
    assert_eq!(d.from, None, "own view first");
    assert_eq!(d.verdict.culprit, 1);
    assert_eq!(j.stalled_on(), &[1, 3]);
}

#[test]
fn a_reported_stall_alone_is_reported_after_the_grace() {
    let mut j = judge(2);
    let v = Verdict {
        culprit: 1,
        observer: 0,
        how: How::NoProgress(T),
    };
    j.report(0, v, ms(100));
    assert_eq!(j.decision(&[], ms(849)), None);
    assert_eq!(
        j.decision(&[], ms(850)),
        Some(Decision {
            verdict: v,
            from: Some(0)
        })
    );
}

#[test]
fn a_quiet_link_holds_an_indirect_verdict_until_its_own_timeout() {
    // Rank 3 stalls waiting on 1 (alive) and 2, whose heartbeats stopped at
    // t = 2 s: it must not report "no progress from 1" before 2's link times out.
    let mut j = judge(3);
    let links = |now: u64| [link(1, now), link(2, 2000)];
    j.stalled(&[1, 2], T, ms(4000));
    assert_eq!(j.decision(&links(4800), ms(4800)), None, "2 is quiet");
    assert_eq!(j.poll_timeout(&links(4800), ms(4800)), Some(ms(5000)));
    j.check_links(&links(5000), ms(5000));
    let d = j.decision(&links(5000), ms(5000)).expect("decided");
    assert_eq!(d.verdict.culprit, 2);
    assert_eq!(d.verdict.how, How::Silent(T));
}

#[test]
fn the_first_direct_verdict_wins() {
    let mut j = judge(0);
    let silent = Verdict {
        culprit: 2,
        observer: 1,
        how: How::Silent(T),
    };
    j.report(1, silent, ms(10));
    j.observe(3, How::Silent(T), ms(11));
    j.report(
        3,
        Verdict {
            culprit: 1,
            observer: 3,
            how: How::Failed,
        },
        ms(12),
    );
    assert_eq!(j.decision(&[], ms(12)).map(|d| d.verdict), Some(silent));
}

#[test]
fn a_closed_connection_settles_briefly_and_yields_to_the_closers_report() {
    let mut j = judge(0);
    j.closed(1, ms(1000));
    assert_eq!(j.decision(&[], ms(1099)), None, "settling");
    assert_eq!(j.poll_timeout(&[], ms(1000)), Some(ms(1100)));
    // Rank 1's Abort arrives on another connection: it gave up because of 3.
    let v = Verdict {
        culprit: 3,
        observer: 1,
        how: How::Silent(T),
    };
    j.report(1, v, ms(1050));
    j.closed(1, ms(1060));
    assert_eq!(
        j.decision(&[], ms(1060)),
        Some(Decision {
            verdict: v,
            from: Some(1)
        })
    );
}

#[test]
fn a_closed_connection_without_a_report_names_the_closer() {
    let mut j = judge(0);
    j.closed(2, ms(0));
    j.closed(1, ms(5));
    let d = j.decision(&[], SETTLE).expect("settled");
    assert_eq!(
        d.verdict,
        Verdict {
            culprit: 2,
            observer: 0,
            how: How::ConnectionClosed
        }
    );
}

/// Every connection ended while a verdict was held: it is the answer at
/// once (no Abort can explain it any more), not "communicator is closed".
#[test]
fn a_held_verdict_is_final_once_nothing_more_can_arrive() {
    let mut j = judge(0);
    assert_eq!(j.final_decision(), None, "nothing known");
    j.closed(1, ms(1000));
    assert_eq!(j.decision(&[], ms(1001)), None, "settling");
    let closed = Verdict {
        culprit: 1,
        observer: 0,
        how: How::ConnectionClosed,
    };
    assert_eq!(j.final_decision().map(|d| d.verdict), Some(closed));

    let mut j = judge(0);
    j.stalled(&[2], T, ms(3000));
    assert_eq!(j.decision(&[], ms(3001)), None, "grace");
    assert_eq!(j.final_decision().map(|d| d.verdict.culprit), Some(2));
}

#[test]
fn connections_closed_after_an_abort_are_no_evidence() {
    let mut j = judge(0);
    let v = Verdict {
        culprit: 3,
        observer: 1,
        how: How::NoProgress(T),
    };
    j.report(1, v, ms(0));
    j.closed(1, ms(1));
    assert_eq!(j.decision(&[], ms(749)), None);
    assert_eq!(j.decision(&[], ms(750)).map(|d| d.verdict), Some(v));
}

#[test]
fn how_says_how_it_was_decided() {
    assert_eq!(How::ConnectionClosed.to_string(), "connection closed");
    assert!(How::Silent(T)
        .to_string()
        .starts_with("timeout on a direct link"));
    assert!(!How::NoProgress(T).is_direct() && How::Silent(T).is_direct());
}
