//! The result table.

use crate::Args;

#[derive(Debug, Clone, Default)]
pub struct Row {
    pub scenario: String,
    pub system: String,
    pub messages: u64,
    pub seconds: f64,
    /// Request latency (send scenarios) or send-to-receive latency (pipeline), in microseconds.
    pub p50_us: u64,
    pub p99_us: u64,
    pub errors: u64,
    pub order_violations: u64,
    pub lost: u64,
    pub server_cpu_us: u64,
    /// CPU time of the database the server keeps its state in (`--database-pid`), if known.
    pub database_cpu_us: Option<u64>,
    /// The load generator's own CPU time (0: not measured for this scenario).
    pub client_cpu_us: u64,
    /// Producer connections (as many consumers), where a scenario runs at several counts;
    /// 0 where it runs at `--producers`/`--consumers` only.
    pub connections: usize,
    pub note: String,
}

impl Row {
    pub fn rate(&self) -> f64 {
        if self.seconds > 0.0 {
            self.messages as f64 / self.seconds
        } else {
            0.0
        }
    }
}

pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub fn print(args: &Args, rows: &[Row]) {
    println!();
    println!(
        "{} producers, {} consumers, {} groups, {}-byte bodies, {} s per phase, {} cores",
        args.producers,
        args.consumers,
        args.groups,
        args.body_size,
        args.duration,
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0)
    );
    println!(
        "| scenario | system | msg/s | p50 ms | p99 ms | errors | order violations | lost | server CPU µs/msg | load generator CPU µs/msg | note |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let scenario = if r.connections > 0 {
            format!("{} at {n}+{n} connections", r.scenario, n = r.connections)
        } else {
            r.scenario.clone()
        };
        let cpu = if r.messages > 0 {
            r.server_cpu_us as f64 / r.messages as f64
        } else {
            0.0
        };
        let client = if r.client_cpu_us > 0 && r.messages > 0 {
            format!("{:.1}", r.client_cpu_us as f64 / r.messages as f64)
        } else {
            "—".to_string()
        };
        println!(
            "| {} | {} | {:.0} | {:.2} | {:.2} | {} | {} | {} | {:.1} | {} | {} |",
            scenario,
            r.system,
            r.rate(),
            r.p50_us as f64 / 1000.0,
            r.p99_us as f64 / 1000.0,
            r.errors,
            r.order_violations,
            r.lost,
            cpu,
            client,
            match r.database_cpu_us {
                Some(us) if r.messages > 0 => format!(
                    "{}; database CPU {:.1} µs/msg",
                    r.note,
                    us as f64 / r.messages as f64
                ),
                _ => r.note.clone(),
            }
        );
    }
}

/// One row per (scenario, system) from several rounds of the same scenarios: the round with
/// the median throughput, or the median p99 where the load is paced (its throughput is set).
/// With more than one round the note says the spread, so a reader sees how steady it was.
pub fn median_of_rounds(rounds: Vec<Vec<Row>>) -> Vec<Row> {
    let count = rounds.len();
    let mut keyed: Vec<((String, String, usize), Vec<Row>)> = Vec::new();
    for row in rounds.into_iter().flatten() {
        let key = (row.scenario.clone(), row.system.clone(), row.connections);
        match keyed.iter_mut().find(|(k, _)| *k == key) {
            Some((_, rows)) => rows.push(row),
            None => keyed.push((key, vec![row])),
        }
    }
    keyed
        .into_iter()
        .map(|((scenario, _, _), mut rows)| {
            if rows.len() == 1 {
                return rows.pop().expect("one row");
            }
            // A paced scenario's rate is fixed: its rounds are told apart by latency.
            let paced = scenario.contains(" paced ");
            if paced {
                rows.sort_by_key(|r| r.p99_us);
            } else {
                rows.sort_by(|a, b| a.rate().total_cmp(&b.rate()));
            }
            let spread = if paced {
                format!(
                    "p99 {:.2}–{:.2} ms",
                    rows[0].p99_us as f64 / 1000.0,
                    rows[rows.len() - 1].p99_us as f64 / 1000.0
                )
            } else {
                format!(
                    "{:.0}–{:.0} msg/s",
                    rows[0].rate(),
                    rows[rows.len() - 1].rate()
                )
            };
            let n = rows.len();
            let mut median = rows.swap_remove(n / 2);
            let of = format!("median of {n} rounds (of {count}; {spread})");
            median.note = if median.note.is_empty() {
                of
            } else {
                format!("{}; {of}", median.note)
            };
            median
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(scenario: &str, system: &str, messages: u64, p99_us: u64) -> Row {
        Row {
            scenario: scenario.into(),
            system: system.into(),
            messages,
            seconds: 1.0,
            p99_us,
            ..Default::default()
        }
    }

    #[test]
    fn each_row_is_its_median_round_in_first_seen_order() {
        let rounds = vec![
            vec![
                row("send", "null", 300, 0),
                row("send", "orderly", 90, 0),
                row("pipeline paced at 1000 msg/s", "orderly", 1000, 1_900),
            ],
            vec![
                row("send", "null", 100, 0),
                row("send", "orderly", 250, 0),
                row("pipeline paced at 1000 msg/s", "orderly", 1000, 1_200),
            ],
            vec![
                row("send", "null", 200, 0),
                row("send", "orderly", 150, 0),
                row("pipeline paced at 1000 msg/s", "orderly", 1000, 5_000),
            ],
        ];
        let rows = median_of_rounds(rounds);
        let summary: Vec<(&str, &str, u64, u64)> = rows
            .iter()
            .map(|r| (r.scenario.as_str(), r.system.as_str(), r.messages, r.p99_us))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("send", "null", 200, 0),
                ("send", "orderly", 150, 0),
                ("pipeline paced at 1000 msg/s", "orderly", 1000, 1_900),
            ]
        );
        assert_eq!(rows[0].note, "median of 3 rounds (of 3; 100–300 msg/s)");
        assert_eq!(rows[2].note, "median of 3 rounds (of 3; p99 1.20–5.00 ms)");
    }

    #[test]
    fn a_single_round_passes_through_unchanged() {
        let rows = median_of_rounds(vec![vec![row("send", "null", 7, 3)]]);
        assert_eq!(rows.len(), 1);
        assert_eq!((rows[0].messages, rows[0].note.as_str()), (7, ""));
    }
}
