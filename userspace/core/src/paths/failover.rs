//! Where a steered flow goes when paths die and come back: on its home path
//! (the one it was put on) while that path is up, else on the up path with
//! the lowest smoothed RTT, and home again once its path is back up (the
//! estimator's hysteresis keeps a flapping path from pulling flows back and
//! forth). Pure: the controller (`causeway paths monitor`) applies it to the
//! steering maps.

use super::estimator::{PathEstimate, PathState};

/// The path a flow whose home is `home` belongs on, given each path's
/// estimate (indexed by path id); `None` when no path is up (the flow then
/// stays where it is).
pub fn place(home: u32, paths: &[PathEstimate]) -> Option<u32> {
    let up = |p: &PathEstimate| p.state == PathState::Up;
    if paths.get(home as usize).is_some_and(up) {
        return Some(home);
    }
    paths
        .iter()
        .enumerate()
        .filter(|(_, p)| up(p))
        .min_by(|(i, a), (j, b)| a.srtt_ns.total_cmp(&b.srtt_ns).then(i.cmp(j)))
        .map(|(i, _)| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn est(state: PathState, srtt_ms: f64) -> PathEstimate {
        PathEstimate {
            state,
            srtt_ns: srtt_ms * 1e6,
            rttvar_ns: 0.0,
            min_rtt_ns: 0,
            loss: 0.0,
            bw_bytes_per_s: 0.0,
            bw_age_ns: 0,
        }
    }

    #[test]
    fn flows_stay_home_leave_a_dead_path_for_the_fastest_live_one_and_return() {
        let down = PathState::Down { replies: 1 };
        let mut paths = vec![
            est(PathState::Up, 70.0),
            est(PathState::Up, 60.0),
            est(PathState::Up, 50.0),
        ];
        assert_eq!(place(1, &paths), Some(1));
        paths[1].state = down;
        assert_eq!(place(1, &paths), Some(2), "the lowest RTT among the live");
        paths[2].state = PathState::Unknown;
        assert_eq!(place(1, &paths), Some(0));
        paths[1].state = PathState::Up;
        assert_eq!(place(1, &paths), Some(1), "home again");
        assert_eq!(place(7, &paths), Some(1), "an unknown home: the fastest");
        let dead = vec![est(down, 40.0), est(PathState::Unknown, 0.0)];
        assert_eq!(place(0, &dead), None);
    }
}
