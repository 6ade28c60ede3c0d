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
        "| scenario | system | msg/s | p50 ms | p99 ms | errors | order violations | lost | server CPU µs/msg | note |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for r in rows {
        let cpu = if r.messages > 0 {
            r.server_cpu_us as f64 / r.messages as f64
        } else {
            0.0
        };
        println!(
            "| {} | {} | {:.0} | {:.2} | {:.2} | {} | {} | {} | {:.1} | {} |",
            r.scenario,
            r.system,
            r.rate(),
            r.p50_us as f64 / 1000.0,
            r.p99_us as f64 / 1000.0,
            r.errors,
            r.order_violations,
            r.lost,
            cpu,
            r.note
        );
    }
}
