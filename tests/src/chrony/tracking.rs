//! Reading chrony's reports: `chronyc -c tracking` and the client's
//! measurements.log.

use std::collections::BTreeMap;

use super::ChronyError;

/// One `chronyc -c tracking` report.
#[derive(Debug, Clone, PartialEq)]
pub struct Tracking {
    pub stratum: u32,
    /// "System time": cooked − raw clock now, in seconds. With `-x` this is
    /// the whole correction chrony keeps in software.
    pub correction_s: f64,
    pub last_offset_s: f64,
    pub freq_ppm: f64,
    pub root_delay_s: f64,
    pub root_dispersion_s: f64,
    pub leap: String,
}

impl Tracking {
    pub fn synchronised(&self) -> bool {
        self.stratum > 0 && self.leap != "Not synchronised"
    }

    /// chrony's own maximum error of its clock.
    pub fn max_error_s(&self) -> f64 {
        self.root_delay_s / 2.0 + self.root_dispersion_s
    }
}

/// Parses the CSV form (`chronyc -c tracking`, chrony 4.x): reference id,
/// name, stratum, reference time, system time, last offset, RMS offset,
/// frequency, residual frequency, skew, root delay, root dispersion,
/// update interval, leap status.
pub fn parse_tracking_csv(line: &str) -> Result<Tracking, ChronyError> {
    let bad = |why: String| ChronyError::Parse {
        line: line.to_string(),
        why,
    };
    let f: Vec<&str> = line.trim().split(',').collect();
    if f.len() != 14 {
        return Err(bad(format!("{} fields, expected 14", f.len())));
    }
    let num = |i: usize, name: &str| {
        f[i].parse::<f64>()
            .map_err(|_| bad(format!("{name} {:?} is not a number", f[i])))
    };
    Ok(Tracking {
        stratum: f[2]
            .parse()
            .map_err(|_| bad(format!("stratum {:?} is not a number", f[2])))?,
        correction_s: num(4, "system time")?,
        last_offset_s: num(5, "last offset")?,
        freq_ppm: num(7, "frequency")?,
        root_delay_s: num(10, "root delay")?,
        root_dispersion_s: num(11, "root dispersion")?,
        leap: f[13].to_string(),
    })
}

/// What the client's measurements.log says about its samples.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LogSummary {
    pub samples: usize,
    /// Samples per local poll interval (log2 s).
    pub polls: BTreeMap<i32, usize>,
    pub interleaved: usize,
    /// Samples per (local transmit, local receive) timestamp source:
    /// D daemon, K kernel, H hardware.
    pub stamps: BTreeMap<String, usize>,
    pub median_delay_s: Option<f64>,
    /// The jitter asymmetry chrony estimated last (statistics.log "Asym":
    /// ±0.5 = all jitter in one direction; it then corrects offsets to the
    /// minimum delay).
    pub asymmetry: Option<f64>,
}

impl LogSummary {
    /// Reads the data lines of measurements.log (banner lines skipped):
    /// date, time, address, leap, stratum, three test columns, local poll,
    /// remote poll, score, offset, delay, dispersion, root delay, root
    /// dispersion, reference id, mode + interleaving, tx source, rx source.
    pub fn from_measurements_log(text: &str) -> LogSummary {
        let mut s = LogSummary::default();
        let mut delays = Vec::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() != 20 || line.starts_with(' ') || line.starts_with('=') {
                continue;
            }
            let (Ok(poll), Ok(delay)) = (f[8].parse::<i32>(), f[12].parse::<f64>()) else {
                continue;
            };
            s.samples += 1;
            *s.polls.entry(poll).or_default() += 1;
            s.interleaved += usize::from(f[17].ends_with('I'));
            *s.stamps.entry(format!("{}/{}", f[18], f[19])).or_default() += 1;
            delays.push(delay);
        }
        delays.sort_by(f64::total_cmp);
        s.median_delay_s = delays.get(delays.len() / 2).copied();
        s
    }

    /// Adds the last asymmetry of statistics.log (data lines: date, time,
    /// address, std dev, est offset, offset sd, diff freq, est skew,
    /// stress, Ns, Bs, Nr, Asym).
    pub fn with_statistics_log(mut self, text: &str) -> LogSummary {
        self.asymmetry = text
            .lines()
            .filter(|l| !l.starts_with(' ') && !l.starts_with('='))
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 13).then(|| f[12].parse().ok()).flatten()
            })
            .next_back();
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Lines written by chrony 4.3 on this machine (two namespaces, a veth pair).
    const CLIENT: &str = "0A01000A,10.1.0.10,2,1795990490.696984725,0.000000540,-0.000000031,\
                          0.000000057,0.038,0.011,0.133,0.000000945,0.000000766,0.1,Normal";
    const SERVER: &str = "7F7F0101,,1,1795990484.323273466,0.000000000,0.000000000,0.000000000,\
                          0.000,0.000,0.000,0.000000000,0.000000000,0.0,Normal";
    // A client 1 s after start, its virtual clock seeded 100 ppm off.
    const UNSYNCED: &str = "00000000,,0,0.000000000,-0.000099699,0.000000000,0.000000000,\
                            100.000,0.000,0.000,1.000000000,1.000000000,0.0,Not synchronised";

    #[test]
    fn reads_tracking_csv() {
        let c = parse_tracking_csv(CLIENT).expect("client line");
        assert_eq!(c.stratum, 2);
        assert_eq!(c.correction_s, 540e-9);
        assert_eq!(c.last_offset_s, -31e-9);
        assert_eq!(c.freq_ppm, 0.038);
        assert!((c.max_error_s() - (945e-9 / 2.0 + 766e-9)).abs() < 1e-15);
        assert!(c.synchronised());
        assert!(parse_tracking_csv(SERVER).expect("server").synchronised());
        assert!(!parse_tracking_csv(UNSYNCED)
            .expect("unsynced")
            .synchronised());
    }

    #[test]
    fn rejects_malformed_tracking() {
        assert!(parse_tracking_csv("").is_err());
        assert!(parse_tracking_csv("506 Cannot talk to daemon").is_err());
        let bad = CLIENT.replace("0.000000540", "x");
        let err = parse_tracking_csv(&bad).expect_err("bad number");
        assert!(err.to_string().contains("system time \"x\""), "{err}");
    }

    #[test]
    fn summarises_measurements_log() {
        let log = "\
====================================================================
   Date (UTC) Time     IP Address   L St 123 567 ABCD  LP RP Score    Offset  Peer del. Peer disp.  Root del. Root disp. Refid     MTxRx
====================================================================
2026-11-29 22:14:45 10.1.0.10       N  1 111 111 1111  -4  0 1.00  7.315e-06  2.728e-05  3.846e-07  0.000e+00  0.000e+00 7F7F0101 4B K K
2026-11-29 22:14:53 10.1.0.10       N  1 111 111 1111   0 -4 1.00 -1.680e-07  4.000e-02  5.881e-08  0.000e+00  0.000e+00 7F7F0101 4I K K
2026-11-29 22:14:54 10.1.0.10       N  1 111 111 1111   0 -4 1.00 -2.380e-07  4.100e-02  5.881e-08  0.000e+00  0.000e+00 7F7F0101 4I D K
";
        let s = LogSummary::from_measurements_log(log);
        assert_eq!(s.samples, 3);
        assert_eq!(s.polls, BTreeMap::from([(-4, 1), (0, 2)]));
        assert_eq!(s.interleaved, 2);
        assert_eq!(s.stamps.get("K/K"), Some(&2));
        assert_eq!(s.stamps.get("D/K"), Some(&1));
        assert_eq!(s.median_delay_s, Some(4.0e-2));
        let stats = "\
====================================================================
   Date (UTC) Time     IP Address    Std dev'n Est offset  Offset sd  Diff freq   Est skew  Stress  Ns  Bs  Nr  Asym
====================================================================
2026-11-29 22:23:29 10.1.0.10        4.814e-04  2.237e-04  1.223e-04 -7.918e-08  1.126e-05 2.3e-02  11   0   9 -0.50
2026-11-29 22:25:24 10.1.0.10        4.629e-04  3.571e-05  1.179e-04  1.375e-07  1.074e-05 2.1e-02  64   0  36 -0.49
";
        assert_eq!(s.with_statistics_log(stats).asymmetry, Some(-0.49));
    }
}
