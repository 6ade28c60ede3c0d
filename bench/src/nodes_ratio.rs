//! What one more node adds: each row of the nodes scenario against the first node count's
//! row of the same load, as the ratio of the figures shown (the rounds' medians) and, with
//! several rounds, as each round's own ratio. A round runs its node counts one after another,
//! so a machine that slows between rounds moves both sides of a round's ratio alike, where
//! the medians of each count may come from rounds far apart.

use std::collections::HashMap;

use crate::report::Row;

/// Each round's ratio of a (scenario, system) row to its load's first count in that round.
pub type Ratios = HashMap<(String, String), Vec<f64>>;

/// A paced load's rate is set, not measured: no ratio.
fn compared(row: &Row) -> bool {
    row.scenario.starts_with("nodes: ") && !row.scenario.contains(" paced ")
}

/// The first row of each compared scenario in `rows`: its scenario, system and rate.
fn firsts(rows: &[Row]) -> Vec<(String, String, f64)> {
    rows.iter()
        .filter(|row| compared(row))
        .fold(Vec::new(), |mut firsts, row| {
            if !firsts
                .iter()
                .any(|(scenario, _, _)| *scenario == row.scenario)
            {
                firsts.push((row.scenario.clone(), row.system.clone(), row.rate()));
            }
            firsts
        })
}

pub(crate) fn failed(row: &Row) -> bool {
    row.note.starts_with("failed")
}

/// The ratios of every round in `rounds`.
pub fn by_round(rounds: &[Vec<Row>]) -> Ratios {
    let mut ratios = Ratios::new();
    for round in rounds {
        for (scenario, _, one) in firsts(round) {
            for row in round.iter().filter(|row| row.scenario == scenario) {
                if one > 0.0 && !failed(row) {
                    let key = (row.scenario.clone(), row.system.clone());
                    ratios.entry(key).or_default().push(row.rate() / one);
                }
            }
        }
    }
    ratios
}

/// Notes each row of the scenario with its throughput against the first node count's of the
/// same load (after the rounds' medians are taken, so the ratio is of the figures shown), and
/// the median and spread of the rounds' own ratios when there were several.
pub fn compare(rows: &mut [Row], ratios: &Ratios) {
    for (scenario, first, one) in firsts(rows) {
        for row in rows.iter_mut().filter(|row| row.scenario == scenario) {
            if one <= 0.0 || failed(row) {
                continue;
            }
            let mut said = format!("{:.2}× the first count", row.rate() / one);
            let key = (row.scenario.clone(), row.system.clone());
            let others = ratios.get(&key).filter(|_| row.system != first);
            if let Some(rounds) = others.filter(|rounds| rounds.len() > 1) {
                let mut rounds = rounds.clone();
                rounds.sort_by(f64::total_cmp);
                let n = rounds.len();
                let median = match n % 2 {
                    1 => rounds[n / 2],
                    _ => (rounds[n / 2 - 1] + rounds[n / 2]) / 2.0,
                };
                // Rounds whose first count failed have no ratio: the count says how many did.
                said += &format!(
                    " (each of {n} rounds' own: median {median:.2}×, {:.2}–{:.2}×)",
                    rounds[0],
                    rounds[n - 1]
                );
            }
            row.note = match row.note.is_empty() {
                true => said,
                false => format!("{said}; {}", row.note),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::median_of_rounds;

    fn row(count: usize, messages: u64) -> Row {
        Row {
            scenario: "nodes: batched send to 32 FIFO queues".into(),
            system: format!("orderly ×{count}"),
            messages,
            seconds: 1.0,
            ..Default::default()
        }
    }

    #[test]
    fn each_rounds_ratio_is_of_counts_run_in_that_round() {
        // The machine runs at half speed in the second round and a third in the third: the
        // medians of each count come from different rounds, each round's own ratio does not.
        let rounds = vec![
            vec![row(1, 100), row(3, 240)],
            vec![row(1, 50), row(3, 125)],
            vec![row(1, 30), row(3, 66)],
        ];
        let ratios = by_round(&rounds);
        let mut rows = median_of_rounds(rounds);
        compare(&mut rows, &ratios);
        assert!(rows[0]
            .note
            .starts_with("1.00× the first count; median of 3"));
        assert!(
            rows[1].note.starts_with(
                "2.50× the first count (each of 3 rounds' own: median 2.40×, 2.20–2.50×); \
                 median of 3"
            ),
            "{}",
            rows[1].note
        );
    }

    #[test]
    fn one_round_says_the_ratio_alone_and_a_failed_row_none() {
        let mut failed = row(3, 0);
        failed.note = "failed: no node".into();
        let rounds = vec![vec![row(1, 100), row(2, 170), failed]];
        let ratios = by_round(&rounds);
        let mut rows = median_of_rounds(rounds);
        compare(&mut rows, &ratios);
        assert_eq!(rows[1].note, "1.70× the first count");
        assert_eq!(rows[2].note, "failed: no node");
    }

    #[test]
    fn a_round_whose_first_count_failed_gives_no_ratio() {
        let mut failed = row(1, 0);
        failed.note = "failed: no node".into();
        let rounds = vec![
            vec![row(1, 100), row(3, 240)],
            vec![failed, row(3, 10)],
            vec![row(1, 50), row(3, 110)],
        ];
        let ratios = by_round(&rounds);
        let mut rows = median_of_rounds(rounds);
        compare(&mut rows, &ratios);
        // Two rounds had a ratio (2.4 and 2.2): their median is the mean of the two.
        assert!(
            rows[1]
                .note
                .contains("(each of 2 rounds' own: median 2.30×, 2.20–2.40×)"),
            "{}",
            rows[1].note
        );
    }
}
