//! What `causeway top` draws: three tables (ingress classes, egress shaping,
//! clock peers) from two [`Observation`]s a known time apart (rates are
//! their difference). Pure: drawn into any ratatui backend, tested on
//! ratatui's `TestBackend`.

use ratatui::{
    layout::{Constraint, Layout},
    style::{Modifier, Style},
    text::Line,
    widgets::{Block, Borders, Cell, Row, Table},
    Frame,
};

use causeway::agent::observe::Observation;

/// One screen's worth.
pub struct View<'a> {
    pub title: String,
    pub now: &'a Observation,
    /// The previous reading and the seconds since, for rates.
    pub before: Option<(&'a Observation, f64)>,
    /// Why there are no clock peers, when the agent did not answer.
    pub agent_note: Option<String>,
}

fn mbit(bytes_per_s: f64) -> String {
    format!("{:.2}", bytes_per_s * 8.0 / 1e6)
}

fn header(cells: &[&'static str]) -> Row<'static> {
    Row::new(cells.iter().map(|c| Cell::from(*c)))
        .style(Style::default().add_modifier(Modifier::BOLD))
}

/// The bytes/s of `pick` between the two readings, per (iface, name).
fn rate(
    view: &View,
    iface: &str,
    name: &str,
    pick: impl Fn(&Observation, &str, &str) -> Option<u64>,
) -> String {
    let Some((before, secs)) = view.before else {
        return "-".into();
    };
    match (pick(view.now, iface, name), pick(before, iface, name)) {
        (Some(a), Some(b)) if secs > 0.0 => mbit(a.saturating_sub(b) as f64 / secs),
        _ => "-".into(),
    }
}

fn class_bytes(o: &Observation, iface: &str, class: &str) -> Option<u64> {
    let i = o.interfaces.iter().find(|i| i.stats.iface == iface)?;
    i.stats.class(class).map(|c| c.bytes)
}

fn shaped_bytes(o: &Observation, iface: &str, class: &str) -> Option<u64> {
    let i = o.interfaces.iter().find(|i| i.stats.iface == iface)?;
    i.shaping
        .iter()
        .find(|s| s.class == class)
        .map(|s| s.sent_bytes)
}

pub fn draw(frame: &mut Frame, view: &View) {
    let mut parts = vec![
        Constraint::Length(1),
        Constraint::Fill(2),
        Constraint::Fill(1),
        Constraint::Fill(1),
    ];
    if !view.now.steering.is_empty() {
        parts.push(Constraint::Fill(1));
    }
    let areas = Layout::vertical(parts).split(frame.area());
    frame.render_widget(Line::from(view.title.as_str()), areas[0]);

    let mut classes = Vec::new();
    for i in &view.now.interfaces {
        let iface = i.stats.iface.as_str();
        for c in &i.stats.classes {
            classes.push(Row::new([
                iface.to_string(),
                c.name.clone(),
                c.packets.to_string(),
                c.bytes.to_string(),
                rate(view, iface, &c.name, class_bytes),
                c.drops.to_string(),
            ]));
        }
        classes.push(Row::new([
            iface.to_string(),
            "(unclassified)".into(),
            i.stats.unclassified.packets.to_string(),
            i.stats.unclassified.bytes.to_string(),
            "-".into(),
            i.stats.unclassified.drops.to_string(),
        ]));
    }
    let widths = [
        Constraint::Length(16),
        Constraint::Length(16),
        Constraint::Length(12),
        Constraint::Length(14),
        Constraint::Length(10),
        Constraint::Length(8),
    ];
    frame.render_widget(
        Table::new(classes, widths)
            .header(header(&[
                "IFACE", "CLASS", "PACKETS", "BYTES", "MBIT/S", "DROPS",
            ]))
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(" classes (XDP ingress) "),
            ),
        areas[1],
    );

    let mut shaping = Vec::new();
    for i in &view.now.interfaces {
        let iface = i.stats.iface.as_str();
        for s in &i.shaping {
            shaping.push(Row::new([
                iface.to_string(),
                s.class.clone(),
                mbit(s.rate_bits as f64 / 8.0),
                mbit(s.ceil_bits as f64 / 8.0),
                rate(view, iface, &s.class, shaped_bytes),
                s.over_limit.clone(),
                format!("{}/{}/{}", s.dropped, s.marked, s.demoted),
            ]));
        }
    }
    let widths = [
        Constraint::Length(16),
        Constraint::Length(16),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(8),
        Constraint::Length(20),
    ];
    frame.render_widget(
        Table::new(shaping, widths)
            .header(header(&[
                "IFACE",
                "CLASS",
                "RATE",
                "CEIL",
                "SENT",
                "OVER",
                "DROP/MARK/DEMOTE",
            ]))
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(" shaping (TC egress, Mbit/s) "),
            ),
        areas[2],
    );

    let mut peers: Vec<Row> = view
        .now
        .peers
        .iter()
        .map(|p| {
            let us = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1}", v / 1e3));
            Row::new([
                p.name.clone(),
                p.addr.clone(),
                p.source.clone().unwrap_or_else(|| "-".into()),
                us(p.offset_ns),
                us(p.error_bound_ns),
                p.drift_ppm.map_or("-".into(), |d| format!("{d:.3}")),
                p.samples.to_string(),
            ])
        })
        .collect();
    if let Some(note) = &view.agent_note {
        peers.push(Row::new([note.clone()]));
    }
    let widths = [
        Constraint::Length(16),
        Constraint::Length(22),
        Constraint::Length(16),
        Constraint::Length(14),
        Constraint::Length(12),
        Constraint::Length(10),
        Constraint::Length(8),
    ];
    frame.render_widget(
        Table::new(peers, widths)
            .header(header(&[
                "PEER",
                "ADDR",
                "SOURCE",
                "OFFSET µs",
                "BOUND µs",
                "DRIFT ppm",
                "SAMPLES",
            ]))
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(" clock peers (agent) "),
            ),
        areas[3],
    );
    if let Some(area) = areas.get(4) {
        draw_paths(frame, view, *area);
    }
}

/// Bytes per second steered onto `path` of `iface` since the last reading.
fn path_rate(view: &View, iface: &str, path: u32, bytes: u64) -> String {
    let Some((before, secs)) = view.before else {
        return "-".into();
    };
    let old = before
        .steering
        .iter()
        .find(|s| s.iface == iface)
        .and_then(|s| s.paths.iter().find(|p| p.path == path))
        .map(|p| p.bytes);
    match old {
        Some(old) if secs > 0.0 && bytes >= old => mbit((bytes - old) as f64 / secs),
        _ => "-".into(),
    }
}

fn draw_paths(frame: &mut Frame, view: &View, area: ratatui::layout::Rect) {
    let mut rows = Vec::new();
    for s in &view.now.steering {
        for p in &s.paths {
            let h = s.monitor.iter().flatten().find(|h| h.path == p.path);
            rows.push(Row::new([
                s.iface.clone(),
                p.path.to_string(),
                format!("{:#x}", p.mark),
                if p.up { "up" } else { "down" }.to_string(),
                p.flows.to_string(),
                path_rate(view, &s.iface, p.path, p.bytes),
                h.map_or("-".into(), |h| format!("{:.1}", h.srtt_ms)),
                h.map_or("-".into(), |h| format!("{:.1}", h.loss * 100.0)),
            ]));
        }
    }
    let widths = [
        Constraint::Length(16),
        Constraint::Length(6),
        Constraint::Length(8),
        Constraint::Length(6),
        Constraint::Length(7),
        Constraint::Length(10),
        Constraint::Length(9),
        Constraint::Length(8),
    ];
    frame.render_widget(
        Table::new(rows, widths)
            .header(header(&[
                "IFACE", "PATH", "MARK", "STATE", "FLOWS", "MBIT/S", "SRTT ms", "LOSS %",
            ]))
            .block(
                Block::default()
                    .borders(Borders::ALL)
                    .title(" WAN paths (steering) "),
            ),
        area,
    );
}

#[cfg(test)]
mod tests {
    use ratatui::{backend::TestBackend, Terminal};

    use causeway::agent::observe::{IfaceObservation, PeerObservation, ShapedClass};
    use causeway::stats::{ClassStats, InterfaceStats, Totals};

    use super::*;

    fn obs(bytes: u64) -> Observation {
        Observation {
            interfaces: vec![IfaceObservation {
                stats: InterfaceStats {
                    scope: "host".into(),
                    iface: "wan0".into(),
                    policy_generation: Some(1),
                    classes: vec![ClassStats {
                        id: 1,
                        name: "gradient".into(),
                        packets: bytes / 1000,
                        bytes,
                        drops: 0,
                    }],
                    unclassified: Totals::default(),
                    reasons: Vec::new(),
                },
                shaping: vec![ShapedClass {
                    class: "gradient".into(),
                    rate_bits: 150_000_000,
                    ceil_bits: 196_000_000,
                    over_limit: "ecn".into(),
                    sent_bytes: bytes,
                    ..ShapedClass::default()
                }],
            }],
            peers: vec![PeerObservation {
                name: "dc2".into(),
                addr: "10.1.0.2:7339".into(),
                source: Some("kernel".into()),
                offset_ns: Some(-2_500_000.0),
                error_bound_ns: Some(12_000.0),
                drift_ppm: Some(1.5),
                samples: 40,
                ..PeerObservation::default()
            }],
            steering: Vec::new(),
        }
    }

    #[test]
    fn the_screen_shows_classes_rates_shaping_and_peers() {
        let (before, now) = (obs(1_000_000), obs(3_500_000));
        let view = View {
            title: "causeway top".into(),
            now: &now,
            before: Some((&before, 2.0)),
            agent_note: None,
        };
        let mut t = Terminal::new(TestBackend::new(120, 30)).expect("terminal");
        t.draw(|f| draw(f, &view)).expect("draw");
        let screen: String = t
            .backend()
            .buffer()
            .content()
            .iter()
            .map(|c| c.symbol())
            .collect();
        // 2.5 MB in 2 s is 10 Mbit/s, in the classes and the shaping table.
        for want in [
            "gradient", "3500000", "10.00", "150.00", "196.00", "ecn", "dc2", "kernel", "-2500.0",
            "12.0",
        ] {
            assert!(screen.contains(want), "no {want:?} on screen:\n{screen}");
        }
        assert_eq!(screen.matches("10.00").count(), 2, "{screen}");
    }
}

#[cfg(test)]
mod path_tests {
    use ratatui::{backend::TestBackend, Terminal};

    use causeway::agent::observe::SteeringObservation;
    use causeway::paths::{monitor::PathHealth, PathRow};

    use super::*;

    fn obs(bytes: u64, up: bool) -> Observation {
        Observation {
            steering: vec![SteeringObservation {
                iface: "br0".into(),
                paths: vec![PathRow {
                    path: 1,
                    mark: 0x1001,
                    up,
                    flows: 3,
                    packets: bytes / 1500,
                    bytes,
                }],
                unsteered_bytes: 0,
                monitor: Some(vec![PathHealth {
                    path: 1,
                    probe: "10.200.1.2:7360".parse().expect("addr"),
                    state: if up { "up" } else { "down" }.into(),
                    srtt_ms: 60.25,
                    rttvar_ms: 1.0,
                    min_rtt_ms: 60.0,
                    loss: 0.125,
                    sent: 80,
                    replies: 70,
                }]),
            }],
            ..Observation::default()
        }
    }

    #[test]
    fn steered_paths_get_a_table_of_their_own() {
        let (before, now) = (obs(1_000_000, true), obs(26_000_000, false));
        let view = View {
            title: "causeway top".into(),
            now: &now,
            before: Some((&before, 1.0)),
            agent_note: None,
        };
        let mut t = Terminal::new(TestBackend::new(120, 36)).expect("terminal");
        t.draw(|f| draw(f, &view)).expect("draw");
        let screen: String = t
            .backend()
            .buffer()
            .content()
            .iter()
            .map(|c| c.symbol())
            .collect();
        // 25 MB in 1 s is 200 Mbit/s.
        for want in [
            "WAN paths",
            "br0",
            "0x1001",
            "down",
            "200.00",
            "60.2",
            "12.5",
        ] {
            assert!(screen.contains(want), "no {want:?} on screen:\n{screen}");
        }
        let without = Observation::default();
        let view = View {
            now: &without,
            before: None,
            ..view
        };
        t.draw(|f| draw(f, &view)).expect("draw");
        let screen: String = t
            .backend()
            .buffer()
            .content()
            .iter()
            .map(|c| c.symbol())
            .collect();
        assert!(!screen.contains("WAN paths"), "no steering, no table");
    }
}
