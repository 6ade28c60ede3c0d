//! The scenarios the benchmark runs, each on Orderly and on the peers, round after round.

use crate::load::{self, System};
use crate::report::{self, Row};
use crate::{burst_memory, dedup_memory, nodes, nodes_ratio, share, Args};

pub async fn run_all(args: &Args) -> Vec<Row> {
    let mut rounds = Vec::new();
    for round in 1..=args.rounds {
        if args.rounds > 1 {
            eprintln!("round {round} of {}", args.rounds);
        }
        rounds.push(run_round(args).await);
    }
    let ratios = nodes_ratio::by_round(&rounds);
    let mut rows = report::median_of_rounds(rounds);
    nodes_ratio::compare(&mut rows, &ratios);
    rows
}

async fn run_round(args: &Args) -> Vec<Row> {
    let mut rows = Vec::new();
    let peers = || (0..args.peers.len()).map(System::Peer);
    for scenario in args.scenarios.split(',').map(str::trim) {
        eprintln!("running {scenario} ...");
        match scenario {
            "send" => {
                rows.push(load::run_send(args, System::Null, true).await);
                rows.push(load::run_send(args, System::Orderly, true).await);
                for peer in peers() {
                    rows.push(load::run_send(args, peer, true).await);
                }
            }
            "single" => {
                rows.push(load::run_send(args, System::Null, false).await);
                rows.push(load::run_send(args, System::Orderly, false).await);
                for peer in peers() {
                    rows.push(load::run_send(args, peer, false).await);
                }
            }
            "pipeline" => {
                rows.push(load::run_pipeline(args, System::Orderly, None).await);
                for peer in peers() {
                    rows.push(load::run_pipeline(args, peer, None).await);
                }
            }
            "durable" => {
                rows.push(load::run_send(args, System::Durable, true).await);
                rows.push(load::run_send(args, System::Durable, false).await);
                rows.push(load::run_pipeline(args, System::Durable, None).await);
            }
            "durable-share" => rows.extend(share::run(args).await),
            "restart" => rows.push(load::run_restart(args).await),
            "fanout" => {
                rows.push(load::run_fanout(args, System::Orderly, 10, None).await);
                for peer in peers() {
                    rows.push(load::run_fanout(args, peer, 10, None).await);
                }
            }
            "fanout-paced" => {
                let rate = Some(args.rate);
                rows.push(load::run_fanout(args, System::Orderly, 10, rate).await);
                for peer in peers() {
                    rows.push(load::run_fanout(args, peer, 10, rate).await);
                }
            }
            "paced" => {
                rows.push(load::run_pipeline(args, System::Orderly, Some(args.rate)).await);
                for peer in peers() {
                    rows.push(load::run_pipeline(args, peer, Some(args.rate)).await);
                }
            }
            "backlog" => {
                let measure = 100_000u64;
                let small_groups =
                    (measure as usize * args.backlog_groups / args.backlog_messages.max(1)).max(1);
                for system in std::iter::once(System::Orderly).chain(peers()) {
                    rows.extend(
                        load::run_backlog(args, system, (measure as usize, small_groups), measure)
                            .await,
                    );
                }
            }
            "dedup-memory" => {
                for system in [System::Orderly, System::Durable]
                    .into_iter()
                    .chain(peers())
                {
                    rows.push(dedup_memory::run(args, system).await);
                }
            }
            "burst-memory" => rows.push(burst_memory::run(args).await),
            "nodes" => rows.extend(nodes::run(args).await),
            "memory" => {
                for system in [System::Orderly, System::Durable]
                    .into_iter()
                    .chain(peers())
                {
                    rows.push(load::run_memory(args, system).await);
                }
            }
            other => eprintln!("unknown scenario {other}"),
        }
    }
    rows
}
