//! The durable-share scenario: durable against in-memory throughput for batched sends, single
//! sends and the pipeline, at several connection counts; and each peer against the durable log
//! the same way (Orderly on PostgreSQL against Orderly on its own files, say).
//!
//! Throughput is what a server sustains once it has enough work. With few connections a
//! client waits for each answer before it sends again, so a durable answer, which waits for a
//! sync, caps the rate long before the server is busy (a measure of latency, not capacity).
//! Every system is therefore measured at every count in `--share-connections` and compared at
//! their peaks; the share at each count is printed as well.

use crate::load::{run_pipeline, run_send, System};
use crate::report::Row;
use crate::Args;

#[derive(Clone, Copy)]
enum Kind {
    Batched,
    Single,
    Pipeline,
}

/// Runs every kind at every count, in memory, durable and every peer one right after the
/// other, so that the rows of a comparison come from the same minute.
pub async fn run(args: &Args) -> Vec<Row> {
    let peers = (0..args.peers.len()).map(System::Peer);
    let systems: Vec<System> = [System::Orderly, System::Durable]
        .into_iter()
        .chain(peers)
        .collect();
    let mut rows = Vec::new();
    for kind in [Kind::Batched, Kind::Single, Kind::Pipeline] {
        for &n in &args.share_connections {
            let at_n = Args {
                producers: n,
                consumers: n,
                ..args.clone()
            };
            for &system in &systems {
                let mut row = match kind {
                    Kind::Batched => run_send(&at_n, system, true).await,
                    Kind::Single => run_send(&at_n, system, false).await,
                    Kind::Pipeline => run_pipeline(&at_n, system, None).await,
                };
                row.connections = n;
                rows.push(row);
            }
        }
    }
    rows
}

/// One scenario's comparison of a measured system with the one it is measured against.
#[derive(Debug, PartialEq)]
pub struct Share {
    pub scenario: String,
    /// (msg/s, connections) of the best count: of the base, and of the measured system.
    pub base_peak: (f64, usize),
    pub measured_peak: (f64, usize),
    /// Measured ÷ base at each count both ran at, in count order.
    pub at: Vec<(usize, f64)>,
}

impl Share {
    pub fn at_peak(&self) -> f64 {
        self.measured_peak.0 / self.base_peak.0
    }
}

/// Compares `measured` with `base` in the rows `run` produced (after `median_of_rounds`);
/// other rows, and counts at which a system did not run, are ignored.
pub fn compare(rows: &[Row], base: &str, measured: &str) -> Vec<Share> {
    let mut scenarios: Vec<&str> = Vec::new();
    for row in rows.iter().filter(|r| r.connections > 0) {
        if !scenarios.contains(&row.scenario.as_str()) {
            scenarios.push(&row.scenario);
        }
    }
    scenarios
        .into_iter()
        .filter_map(|scenario| {
            let of = |system: &str| -> Vec<(usize, f64)> {
                let mut points: Vec<(usize, f64)> = rows
                    .iter()
                    .filter(|r| r.connections > 0 && r.scenario == scenario && r.system == system)
                    .filter(|r| r.messages > 0 || r.errors == 0)
                    .map(|r| (r.connections, r.rate()))
                    .collect();
                points.sort_by_key(|p| p.0);
                points
            };
            let (base, measured) = (of(base), of(measured));
            let peak = |points: &[(usize, f64)]| {
                points
                    .iter()
                    .max_by(|a, b| a.1.total_cmp(&b.1))
                    .map(|&(n, rate)| (rate, n))
            };
            let at = base
                .iter()
                .filter_map(|&(n, b)| {
                    let m = measured.iter().find(|p| p.0 == n)?.1;
                    (b > 0.0).then_some((n, m / b))
                })
                .collect();
            Some(Share {
                scenario: scenario.to_string(),
                base_peak: peak(&base).filter(|p| p.0 > 0.0)?,
                measured_peak: peak(&measured).filter(|p| p.0 > 0.0)?,
                at,
            })
        })
        .collect()
}

pub fn print(args: &Args, rows: &[Row]) {
    let (memory, durable) = (System::Orderly.label(), System::Durable.label());
    print_table(args, rows, (memory, "in memory"), (durable, "durable"));
    for i in 0..args.peers.len() {
        let name = System::Peer(i).name(args);
        print_table(args, rows, (durable, "durable"), (&name, &name));
    }
}

/// One table: `measured` against `base`, each given as (system name in rows, column title).
fn print_table(args: &Args, rows: &[Row], base: (&str, &str), measured: (&str, &str)) {
    let shares = compare(rows, base.0, measured.0);
    if shares.is_empty() {
        return;
    }
    let (base, measured) = (base.1, measured.1);
    let counts: Vec<String> = args
        .share_connections
        .iter()
        .map(|n| n.to_string())
        .collect();
    println!();
    println!(
        "Throughput, {measured} against {base}, each at its peak over {} producer connections (as many consumers):",
        counts.join(", ")
    );
    let at_heads: Vec<String> = counts.iter().map(|n| format!("at {n}")).collect();
    println!(
        "| scenario | {base} peak msg/s (connections) | {measured} peak msg/s (connections) | {measured} / {base}, peaks | {} |",
        at_heads.join(" | ")
    );
    println!("|---|---|---|---|{}", "---|".repeat(counts.len()));
    for share in shares {
        let at: Vec<String> = args
            .share_connections
            .iter()
            .map(|n| match share.at.iter().find(|p| p.0 == *n) {
                Some((_, s)) => format!("{:.0} %", s * 100.0),
                None => "—".into(),
            })
            .collect();
        println!(
            "| {} | {:.0} ({}) | {:.0} ({}) | {:.0} % | {} |",
            share.scenario,
            share.base_peak.0,
            share.base_peak.1,
            share.measured_peak.0,
            share.measured_peak.1,
            share.at_peak() * 100.0,
            at.join(" | ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(scenario: &str, system: System, connections: usize, messages: u64) -> Row {
        Row {
            scenario: scenario.into(),
            system: system.label().into(),
            messages,
            seconds: 2.0,
            connections,
            ..Default::default()
        }
    }

    #[test]
    fn each_system_is_taken_at_its_own_peak_and_shares_are_listed_per_count() {
        let rows = vec![
            row("send (single)", System::Orderly, 8, 200),
            row("send (single)", System::Durable, 8, 80),
            row("send (single)", System::Orderly, 32, 180),
            row("send (single)", System::Durable, 32, 120),
            row("pipeline", System::Orderly, 8, 100),
            row("pipeline", System::Durable, 8, 30),
            // Rows of other scenarios (no connection count) are not compared.
            row("send (single)", System::Durable, 0, 1_000),
        ];
        let shares = compare(&rows, System::Orderly.label(), System::Durable.label());
        assert_eq!(
            shares,
            vec![
                Share {
                    scenario: "send (single)".into(),
                    base_peak: (100.0, 8),
                    measured_peak: (60.0, 32),
                    at: vec![(8, 0.4), (32, 120.0 / 180.0)],
                },
                Share {
                    scenario: "pipeline".into(),
                    base_peak: (50.0, 8),
                    measured_peak: (15.0, 8),
                    at: vec![(8, 0.3)],
                },
            ]
        );
        assert!((shares[0].at_peak() - 0.6).abs() < 1e-9);
    }

    #[test]
    fn a_peer_is_compared_with_the_durable_log_each_at_its_own_peak() {
        let scenario = "send (batches of 10)";
        let mut rows = vec![row(scenario, System::Orderly, 32, 400)];
        for (connections, messages) in [(8, 180), (16, 150), (32, 200), (64, 190)] {
            rows.push(row(scenario, System::Durable, connections, messages));
        }
        let peer = |name: &str, connections, messages| Row {
            system: name.into(),
            ..row(scenario, System::Durable, connections, messages)
        };
        for (connections, messages) in [(8, 90), (32, 160), (64, 170)] {
            rows.push(peer("orderly-pg", connections, messages));
        }
        // A count at which a peer did not run is no measurement of it.
        let did_not_run = |name: &str, connections| Row {
            errors: 1,
            ..peer(name, connections, 0)
        };
        rows.push(did_not_run("orderly-pg", 16));
        rows.push(did_not_run("broken", 8));
        let shares = compare(&rows, System::Durable.label(), "orderly-pg");
        assert_eq!(
            shares,
            vec![Share {
                scenario: scenario.into(),
                base_peak: (100.0, 32),
                measured_peak: (85.0, 64),
                at: vec![(8, 0.5), (32, 0.8), (64, 170.0 / 190.0)],
            }]
        );
        assert!((shares[0].at_peak() - 0.85).abs() < 1e-9);
        assert_eq!(compare(&rows, System::Durable.label(), "broken"), vec![]);
    }

    #[test]
    fn a_scenario_missing_one_system_or_with_nothing_in_memory_is_left_out() {
        let rows = vec![
            row("send (single)", System::Durable, 8, 80),
            row("pipeline", System::Orderly, 8, 0),
            row("pipeline", System::Durable, 8, 30),
        ];
        assert_eq!(
            compare(&rows, System::Orderly.label(), System::Durable.label()),
            vec![]
        );
    }
}
