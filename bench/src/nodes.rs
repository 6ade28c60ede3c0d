//! The nodes scenario: 1, 2, 3… Orderly nodes on one PostgreSQL database, each held to the same
//! share of a core by a CPU cgroup (as separate machines of that size would be), behind the
//! round-robin balancer, taking each load of `--node-loads` over 32 FIFO queues
//! (`nodes_load`). It measures what one more machine adds: the goal is about N times one node
//! for N nodes.
//!
//! Needs root (cgroups: v1's `cpu` controller or v2's `cpu.max`, whichever the machine has) and
//! `--postgres URL`, a server on which each run gets a database of its own (and with
//! `--postgres-second URL`, one there for the upper half of the shards).

use std::time::Duration;

use clap::ValueEnum;
use tokio::process::Command;

use crate::load::http_client;
use crate::nodes_layout::Route;
use crate::nodes_load::{self, NodeLoad};
use crate::nodes_ratio::failed;
use crate::report::{percentile, Row};
use crate::server::{children_of, postmaster_cpu_micros, ServerProcess};
use crate::Args;

/// Per load of `--node-loads`, one row per node count in `--node-counts`, each with its
/// throughput against the first count's.
pub async fn run(args: &Args) -> Vec<Row> {
    let Some(base) = args.postgres.clone() else {
        eprintln!("nodes: skipped, --postgres URL is not set");
        return Vec::new();
    };
    if args.postgres_second.is_some() && args.node_shards < 2 {
        eprintln!("nodes: skipped, --postgres-second needs --node-shards 2 or more");
        return Vec::new();
    }
    if args.postgres_second.is_some()
        && args.database_pid.is_some()
        && args.second_database_pid.is_none()
    {
        // Its CPU would be left out of the database's, and --database-cpu would not hold it.
        eprintln!(
            "nodes: skipped, --postgres-second with --database-pid needs --second-database-pid"
        );
        return Vec::new();
    }
    let mut rows: Vec<Row> = Vec::new();
    for name in args.node_loads.split(',').map(str::trim) {
        let Some(load) = NodeLoad::named(name, args.rate) else {
            eprintln!("nodes: unknown load {name}");
            continue;
        };
        for &count in &args.node_counts {
            let mut tried = Vec::new();
            for producers in producer_counts(args, load) {
                let mut phase = args.clone();
                phase.node_producers = vec![producers];
                let row = match measure(&phase, &base, count, load).await {
                    Ok(row) => row,
                    Err(why) => Row {
                        scenario: load.scenario(),
                        system: system(args, count),
                        note: format!("failed: {why}"),
                        ..Default::default()
                    },
                };
                tried.push((producers, row));
            }
            rows.extend(best_of(tried));
        }
    }
    rows
}

/// The producer counts a node count runs at: each of `--node-producers`, but only the first
/// for a paced load, whose rate is set rather than measured.
fn producer_counts(args: &Args, load: NodeLoad) -> Vec<usize> {
    let mut counts = match args.node_producers.is_empty() {
        true => vec![nodes_load::producers(args)],
        false => args.node_producers.clone(),
    };
    if load.paced() {
        counts.truncate(1);
    }
    counts
}

/// A node count's row of those run at several producer counts: the fastest that did not
/// fail (else the last), noting every count's rate, so that each node count is compared at
/// what it can take rather than at one offered concurrency that leaves some of them waiting.
fn best_of(tried: Vec<(usize, Row)>) -> Option<Row> {
    let rates: Vec<String> = tried
        .iter()
        .map(|(producers, row)| match failed(row) {
            true => format!("{producers}: failed"),
            false => format!("{producers}: {:.0}", row.rate()),
        })
        .collect();
    let several = tried.len() > 1;
    // Every run's losses, order violations and errors count, not only the kept one's: a
    // server wrong at one producer count is not reported clean for being faster at another.
    let (lost, violations, errors) = tried.iter().fold((0, 0, 0), |(l, v, e), (_, row)| {
        (l + row.lost, v + row.order_violations, e + row.errors)
    });
    let mut best = tried.into_iter().map(|(_, row)| row).reduce(|best, row| {
        match failed(&best) || (!failed(&row) && row.rate() > best.rate()) {
            true => row,
            false => best,
        }
    })?;
    if several {
        (best.lost, best.order_violations, best.errors) = (lost, violations, errors);
        best.note += &format!(
            "; the best of these producer counts (msg/s): {}",
            rates.join(", ")
        );
    }
    Some(best)
}

fn system(args: &Args, count: usize) -> String {
    let databases = if args.postgres_second.is_some() { 2 } else { 1 };
    let held = match args.database_cpu {
        Some(percent) => format!(" ({percent} % of a core each)"),
        None => String::new(),
    };
    format!(
        "orderly ×{count} ({} % of a core each), {databases} database server{}{held}",
        args.node_cpu,
        if databases == 1 { "" } else { "s" }
    )
}

/// The databases of one node count's run: `--postgres`'s, and `--postgres-second`'s that
/// keeps the upper half of the shards, each on its server as (server URL, database URL).
struct Databases {
    home: (String, String),
    second: Option<(String, String)>,
}

impl Databases {
    /// The servers' URLs, for what is counted on each.
    fn servers(&self) -> impl Iterator<Item = &str> {
        std::iter::once(&self.home)
            .chain(&self.second)
            .map(|(server, _)| server.as_str())
    }
}

/// One node count's row, on databases made for it and dropped after.
async fn measure(args: &Args, base: &str, count: usize, load: NodeLoad) -> Result<Row, String> {
    let (url, name) = fresh_database(base)?;
    let mut made = vec![(base.to_string(), name)];
    let second = match &args.postgres_second {
        Some(server) => match fresh_database(server) {
            Ok((url, name)) => {
                made.push((server.clone(), name));
                Some((server.clone(), url))
            }
            Err(why) => {
                drop_databases(&made);
                return Err(why);
            }
        },
        None => None,
    };
    let databases = Databases {
        home: (base.to_string(), url),
        second,
    };
    let row = measure_on(args, &databases, count, load).await;
    drop_databases(&made);
    row
}

/// The shards `--postgres-second` keeps, as `--shard-database` names them: the upper half
/// (shard 0 stays at home).
fn upper_half(shards: u32) -> String {
    format!("{}-{}", shards.div_ceil(2).max(1), shards.saturating_sub(1))
}

/// Drops each (server, database) of a run. Its nodes are gone by now; FORCE ends any
/// connection of theirs still closing.
fn drop_databases(made: &[(String, String)]) {
    for (server, name) in made {
        let _ = std::process::Command::new("psql")
            .args([
                server.as_str(),
                "-qc",
                &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
            ])
            .status();
    }
}

async fn measure_on(
    args: &Args,
    databases: &Databases,
    count: usize,
    load: NodeLoad,
) -> Result<Row, String> {
    // Declared first, so dropped last: a cgroup goes once its node is gone.
    let mut groups = Vec::new();
    let _held = hold_databases(args)?;
    let mut nodes = Vec::new();
    for index in 0..count {
        let group = Cgroup::limited(&format!("orderly-bench-node-{index}"), args.node_cpu)?;
        let node = start_node(args, databases, &group).await?;
        // The first leads; the others find the lease held and pass requests on to it (or,
        // each leading its share, take theirs: waited for below).
        if !args.spread_shards {
            let role = if index == 0 { "leader" } else { "standby" };
            wait_for_role(&node.endpoint, role).await?;
        }
        nodes.push(node);
        groups.push(group);
    }
    if args.spread_shards {
        wait_for_spread(&nodes, args.node_shards).await?;
    }
    let upstreams: Vec<&str> = nodes
        .iter()
        .map(|n| n.endpoint.trim_start_matches("http://"))
        .collect();
    let balancer = start_balancer(&upstreams.join(",")).await?;
    let client = http_client();
    let leaders = leads(&nodes).await?;
    let setup = nodes_load::prepare(load, args, &client, &balancer.endpoint, &leaders).await?;
    let cpu = |nodes: &[ServerProcess]| nodes.iter().map(ServerProcess::cpu_micros).sum::<u64>();
    let cpu_before = cpu(&nodes);
    let database_cpu = || -> Option<u64> {
        let second = match args.second_database_pid {
            Some(pid) => Some(postmaster_cpu_micros(pid)?),
            None => Some(0),
        };
        Some(nodes[0].database_cpu_micros()? + second?)
    };
    let transactions = || -> Option<u64> { databases.servers().map(transactions).sum() };
    let database_before = database_cpu();
    let commits_before = transactions();
    let machine_before = machine_ticks();
    let outcome = nodes_load::run(load, args, &client, &setup).await?;
    let seconds = outcome.seconds;
    let busy = machine_busy(machine_before, machine_ticks());
    let committed = match (transactions(), commits_before) {
        (Some(after), Some(before)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    let database_cpu_us = match (database_cpu(), database_before) {
        (Some(after), Some(before)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    Ok(Row {
        scenario: load.scenario(),
        system: system(args, count),
        messages: outcome.messages,
        seconds,
        p50_us: percentile(&outcome.latencies, 0.5),
        p99_us: percentile(&outcome.latencies, 0.99),
        errors: outcome.errors,
        order_violations: outcome.order_violations,
        lost: outcome.lost,
        server_cpu_us: cpu(&nodes) - cpu_before,
        database_cpu_us,
        note: [
            Some(outcome.note),
            committed.map(|n| {
                format!(
                    "{:.0} database commits/s (writing transactions), {:.1} messages a commit",
                    n as f64 / seconds,
                    outcome.messages as f64 / n.max(1) as f64
                )
            }),
            busy.map(|(busy, cores)| {
                format!("the machine {busy:.0} % busy over its {cores} cores")
            }),
            Some(format!("{} producers", nodes_load::producers(args))),
            Some(layout_note(args, count, &setup)),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("; "),
        ..Default::default()
    })
}

/// The server's next transaction id: the writing transactions begun so far, counted at once
/// (`pg_stat_database`'s commit count reaches the view up to ten seconds late). Over a phase
/// nearly all are the nodes' log writes; a node's lease renewal and announcement add a few a
/// second, and this reading one.
fn transactions(base: &str) -> Option<u64> {
    let asked = std::process::Command::new("psql")
        .args([base, "-Atc", "SELECT pg_current_xact_id()::text"])
        .output()
        .ok()?;
    String::from_utf8(asked.stdout).ok()?.trim().parse().ok()
}

/// A database of this run's own on the server `base` names: its URL and name (named as
/// `bench/orderly-standby-on-postgres.sh` names its own, which drops those left by a killed run).
fn fresh_database(base: &str) -> Result<(String, String), String> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_nanos();
    let name = format!("bench_{nanos}");
    // Before it is made: a URL naming no database leaves nothing behind.
    let url = named(base, &name)?;
    let made = std::process::Command::new("psql")
        .args([base, "-qc", &format!("CREATE DATABASE {name}")])
        .status()
        .map_err(|e| format!("psql: {e}"))?;
    if !made.success() {
        return Err(format!("could not create database {name} on {base}"));
    }
    Ok((url, name))
}

/// `base` with its database replaced by `name`, its query (`?sslmode=…`, say) kept: the path
/// begins at the first `/` after the hosts (none for a local socket, `postgres:///db`).
fn named(base: &str, name: &str) -> Result<String, String> {
    let (path, query) = match base.split_once('?') {
        Some((path, query)) => (path, format!("?{query}")),
        None => (base, String::new()),
    };
    let hosts = path.find("://").map(|at| at + 3);
    let slash = hosts.and_then(|hosts| path[hosts..].find('/').map(|at| hosts + at));
    let stem = slash
        .map(|slash| &path[..slash])
        .ok_or_else(|| format!("{base} names no database"))?;
    Ok(format!("{stem}/{name}{query}"))
}

/// A node started inside `group`, so that it sizes itself (its runtime's threads) as a
/// machine of that share of a core would, not as one with all of this machine's cores.
async fn start_node(
    args: &Args,
    databases: &Databases,
    group: &Cgroup,
) -> Result<ServerProcess, String> {
    let url = &databases.home.1;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let bind = format!("127.0.0.1:{port}");
    let shards = args.node_shards.to_string();
    // The shell joins the group, then becomes the node (same process).
    let mut command = Command::new("sh");
    command
        .args(["-c", r#"echo $$ > "$0" && exec "$@""#])
        .arg(group.dir.join("cgroup.procs"))
        .arg(&args.orderly);
    if args.spread_shards {
        command.arg("--spread-shards");
    }
    if let Some((_, second)) = &databases.second {
        let range = upper_half(args.node_shards);
        command.args(["--shard-database", &format!("{range}={second}")]);
    }
    let child = command
        .args(["--storage", url, "--bind", &bind, "--shards", &shards])
        .args(["--advertise-url", &format!("http://{bind}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", args.orderly))?;
    Ok(ServerProcess {
        child,
        endpoint: format!("http://{bind}"),
        data_dir: None,
        database: args.database_pid,
    })
}

/// The benchmark's own balancer (`--balance`) in front of `upstreams`, in a process of its own.
async fn start_balancer(upstreams: &str) -> Result<ServerProcess, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("no free port: {e}"))?
        .port();
    let child = Command::new(exe)
        .arg("--balance")
        .arg(format!("127.0.0.1:{port}={upstreams}"))
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start the balancer: {e}"))?;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(ServerProcess {
                child,
                endpoint: format!("http://127.0.0.1:{port}"),
                data_dir: None,
                database: None,
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err("the balancer did not listen".into())
}

/// The machine's busy and total CPU time so far, in ticks (the first line of `/proc/stat`),
/// with its number of cores.
fn machine_ticks() -> Option<(u64, u64, usize)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let mut lines = stat.lines();
    let fields: Vec<u64> = (lines.next()?.split_whitespace().skip(1))
        .filter_map(|f| f.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal: idle and iowait are not busy.
    let total: u64 = fields.iter().take(8).sum();
    let idle = fields.get(3)? + fields.get(4).copied().unwrap_or(0);
    let cores = lines.filter(|l| l.starts_with("cpu")).count();
    Some((total - idle, total, cores))
}

/// How busy the whole machine was between two readings, in percent of all its cores: nodes,
/// database and load generator share them, so a figure near 100 says the machine, not the
/// nodes, set the throughput.
fn machine_busy(
    before: Option<(u64, u64, usize)>,
    after: Option<(u64, u64, usize)>,
) -> Option<(f64, usize)> {
    let ((busy_0, total_0, _), (busy_1, total_1, cores)) = (before?, after?);
    let total = total_1.checked_sub(total_0).filter(|t| *t > 0)?;
    Some((
        100.0 * busy_1.saturating_sub(busy_0) as f64 / total as f64,
        cores,
    ))
}

/// Waits (up to 30 s) until the node at `endpoint` says it has `role`.
async fn wait_for_role(endpoint: &str, role: &str) -> Result<(), String> {
    let client = http_client();
    let said = format!(r#""role":"{role}""#);
    for _ in 0..300 {
        let answer = client
            .get(format!("{endpoint}/_orderly/cluster"))
            .send()
            .await;
        if let Ok(answer) = answer {
            if answer.text().await.is_ok_and(|text| text.contains(&said)) {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("{endpoint} did not become {role}"))
}

/// Each node that leads shards, with the shards it leads.
async fn leads(nodes: &[ServerProcess]) -> Result<Vec<nodes_load::Leader>, String> {
    let client = http_client();
    let mut leads = Vec::new();
    for node in nodes {
        let text = client
            .get(format!("{}/_orderly/cluster", node.endpoint))
            .send()
            .await
            .map_err(|e| format!("{}: {e}", node.endpoint))?
            .text()
            .await
            .map_err(|e| format!("{}: {e}", node.endpoint))?;
        let state: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| format!("{}: {e}", node.endpoint))?;
        let led: Vec<u32> = (state["led"].as_array().map_or(&[][..], Vec::as_slice))
            .iter()
            .filter_map(|shard| shard.as_u64().map(|s| s as u32))
            .collect();
        if !led.is_empty() {
            leads.push(nodes_load::Leader {
                endpoint: node.endpoint.clone(),
                led,
            });
        }
    }
    Ok(leads)
}

/// The layout's line of a row's note: how much of the load the busiest node leads.
fn layout_note(args: &Args, count: usize, setup: &nodes_load::Setup) -> String {
    let (queues, topics) = setup.busiest;
    let layout = (args.node_layout.to_possible_value())
        .map(|value| value.get_name().to_string())
        .unwrap_or_default();
    let topics = if setup.topics_made() == 0 {
        String::new()
    } else {
        format!(" and {topics} of {} topics", setup.topics_made())
    };
    let busiest = if count > 1 {
        "the busiest node"
    } else {
        "the node"
    };
    let route = match args.node_route {
        Route::Balancer => "",
        Route::Leader => "; each request straight to its leader",
    };
    format!(
        "{layout} layout: {busiest} leads {queues} of {} queues{topics}{route}",
        setup.queues.len()
    )
}

/// Waits until `nodes` lead all `shards` between them, each its share (within one of even).
async fn wait_for_spread(nodes: &[ServerProcess], shards: u32) -> Result<(), String> {
    let client = http_client();
    let even = shards as usize / nodes.len();
    for _ in 0..600 {
        let mut led = Vec::new();
        for node in nodes {
            let state = (client
                .get(format!("{}/_orderly/cluster", node.endpoint))
                .send())
            .await;
            let text = match state {
                Ok(answer) => answer.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            let state: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            let of_node = (state["led"].as_array().cloned()).unwrap_or_default();
            led.push(of_node.len());
        }
        let spread = led.iter().all(|&n| n == even || n == even + 1);
        if spread && led.iter().sum::<usize>() == shards as usize {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!(
        "{} nodes never led their shares of {shards}",
        nodes.len()
    ))
}

/// A CPU cgroup holding its processes to `percent` of one core; removed when dropped (once
/// its processes are gone).
struct Cgroup {
    dir: std::path::PathBuf,
}

impl Cgroup {
    fn limited(name: &str, percent: u32) -> Result<Cgroup, String> {
        let period = 100_000u64;
        let quota = period * u64::from(percent) / 100;
        let (root, v1) = hierarchy();
        let dir = root.join(name);
        if !v1 {
            // The cpu controller, for the groups below the root (already so on most machines).
            let _ = std::fs::write("/sys/fs/cgroup/cgroup.subtree_control", "+cpu");
        }
        let group = Cgroup { dir };
        // Left by a run that was killed: its limit is set again below.
        if !group.dir.exists() {
            std::fs::create_dir(&group.dir)
                .map_err(|e| format!("cannot make cgroup {} (root?): {e}", group.dir.display()))?;
        }
        if v1 {
            group.write("cpu.cfs_period_us", &period.to_string())?;
            group.write("cpu.cfs_quota_us", &quota.to_string())?;
        } else {
            group.write("cpu.max", &format!("{quota} {period}"))?;
        }
        Ok(group)
    }

    fn add(&self, pid: u32) -> Result<(), String> {
        self.write("cgroup.procs", &pid.to_string())
    }

    fn write(&self, file: &str, value: &str) -> Result<(), String> {
        let path = self.dir.join(file);
        std::fs::write(&path, value).map_err(|e| format!("{}: {e}", path.display()))
    }
}

/// The PostgreSQL servers of `--database-pid` and `--second-database-pid` in CPU cgroups of
/// `--database-cpu` each while they are held; when dropped, their processes go back to the
/// group each postmaster was in.
struct HeldDatabases(Vec<(Cgroup, std::path::PathBuf)>);

/// The names of the groups databases are held in, by their index.
fn database_group(index: usize) -> String {
    format!("orderly-bench-database-{index}")
}

fn hold_databases(args: &Args) -> Result<HeldDatabases, String> {
    // Left by a run that was killed (it never let go): their processes go to the root group,
    // whatever their first group was, so a run without --database-cpu is not held.
    for index in 0..2 {
        let left = hierarchy().0.join(database_group(index));
        if left.exists() {
            eprintln!(
                "nodes: {} was left by an earlier run; its processes go to the root group",
                left.display()
            );
            let left = Cgroup { dir: left };
            left.release(&hierarchy().0.join("cgroup.procs"));
        }
    }
    let mut held = HeldDatabases(Vec::new());
    let Some(percent) = args.database_cpu else {
        return Ok(held);
    };
    let postmasters = args
        .database_pid
        .into_iter()
        .chain(args.second_database_pid);
    for (index, postmaster) in postmasters.enumerate() {
        let home = group_of(postmaster)
            .ok_or_else(|| format!("no cgroup found for the postmaster {postmaster}"))?;
        let group = Cgroup::limited(&database_group(index), percent)?;
        // Kept before anything is moved into it, so it is let go of whatever happens next.
        held.0.push((group, home.join("cgroup.procs")));
        let (group, _) = held.0.last().expect("just kept");
        // The postmaster first: a process it starts from now on (a connection's) is in its
        // group from the start.
        group.add(postmaster)?;
        for child in children_of(postmaster) {
            // One that ended meanwhile is gone from every group.
            let _ = group.add(child);
        }
    }
    Ok(held)
}

impl Drop for HeldDatabases {
    fn drop(&mut self) {
        for (group, home) in &self.0 {
            group.release(home);
        }
    }
}

/// Where the CPU controller's groups are, and whether it is v1's.
fn hierarchy() -> (std::path::PathBuf, bool) {
    let v1 = std::path::Path::new("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists();
    let root = if v1 {
        "/sys/fs/cgroup/cpu"
    } else {
        "/sys/fs/cgroup"
    };
    (root.into(), v1)
}

/// The directory of the CPU controller's group process `pid` is in.
fn group_of(pid: u32) -> Option<std::path::PathBuf> {
    let (root, v1) = hierarchy();
    let listed = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = listed.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        let cpu = if v1 {
            controllers.split(',').any(|c| c == "cpu")
        } else {
            controllers.is_empty()
        };
        cpu.then_some(path)
    })?;
    Some(root.join(path.trim_start_matches('/')))
}

impl Cgroup {
    /// Moves every process of the group to the group whose `cgroup.procs` is `to`, so the
    /// group can go; says so if some stay.
    fn release(&self, to: &std::path::Path) {
        for _ in 0..10 {
            let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
            if procs.trim().is_empty() {
                return;
            }
            for pid in procs.lines() {
                let _ = std::fs::write(to, pid.trim());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!(
            "nodes: {} still holds processes; move them out by hand ({})",
            self.dir.display(),
            to.display()
        );
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Its nodes were killed just before (dropped first); a cgroup goes once it is empty.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("nodes: cgroup {} could not be removed", self.dir.display());
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::{best_of, named, producer_counts, system, upper_half};
    use crate::nodes_load::NodeLoad;
    use crate::report::Row;
    use crate::Args;

    fn row(messages: u64, note: &str) -> Row {
        Row {
            messages,
            seconds: 1.0,
            note: note.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_node_count_run_at_several_producer_counts_keeps_its_fastest_that_did_not_fail() {
        let best = best_of(vec![
            (128, row(900, "128 producers")),
            (256, row(1200, "256 producers")),
            (512, row(1500, "failed: no node")),
        ])
        .expect("a row");
        assert_eq!(best.messages, 1200);
        let mut wrong = row(100, "32 producers");
        (wrong.lost, wrong.order_violations) = (3, 2);
        let summed = best_of(vec![(32, wrong), (128, row(900, "128 producers"))]);
        let summed = summed.expect("a row");
        assert_eq!(
            (summed.messages, summed.lost, summed.order_violations),
            (900, 3, 2)
        );
        assert_eq!(
            best.note,
            "256 producers; the best of these producer counts (msg/s): 128: 900, 256: 1200, \
             512: failed"
        );
        let alone = best_of(vec![(128, row(900, "128 producers"))]).expect("a row");
        assert_eq!(alone.note, "128 producers");
        let none = best_of(vec![(8, row(0, "failed: a")), (16, row(0, "failed: b"))]);
        assert!(none.expect("a row").note.starts_with("failed: b"));
    }

    #[test]
    fn a_paced_load_runs_at_the_first_producer_count_only() {
        let parse = |argv: &[&str]| {
            Args::try_parse_from([&["orderly-bench"], argv].concat()).expect("parsed")
        };
        let args = parse(&["--node-producers", "128,256"]);
        assert_eq!(producer_counts(&args, NodeLoad::Send), vec![128, 256]);
        assert_eq!(
            producer_counts(&args, NodeLoad::FanoutPaced(1000)),
            vec![128]
        );
        let default = parse(&["--producers", "8"]);
        assert_eq!(producer_counts(&default, NodeLoad::Send), vec![8]);
    }

    #[test]
    fn a_second_server_keeps_the_upper_half_of_the_shards_never_shard_0() {
        assert_eq!(upper_half(32), "16-31");
        assert_eq!(upper_half(3), "2-2");
        assert_eq!(upper_half(2), "1-1");
    }

    #[test]
    fn a_fresh_database_keeps_the_servers_query() {
        let kept = [
            (
                "postgres://u@h:5/orderly?sslmode=disable&x=1",
                "postgres://u@h:5/bench_1?sslmode=disable&x=1",
            ),
            ("postgres://u@h:5/orderly", "postgres://u@h:5/bench_1"),
            (
                "postgres:///orderly?host=/var/run/postgresql",
                "postgres:///bench_1?host=/var/run/postgresql",
            ),
            (
                "postgres://u@h1:5,h2:5/orderly?sslrootcert=/a/b",
                "postgres://u@h1:5,h2:5/bench_1?sslrootcert=/a/b",
            ),
        ];
        for (base, fresh) in kept {
            assert_eq!(named(base, "bench_1"), Ok(fresh.to_string()), "{base}");
        }
        assert!(named("postgres://u@h:5", "bench_1").is_err());
        assert!(named("postgres://u@h:5?sslmode=disable", "bench_1").is_err());
    }

    #[test]
    fn database_servers_are_held_only_when_named() {
        let parse = |argv: &[&str]| Args::try_parse_from([&["orderly-bench"], argv].concat());
        assert!(parse(&["--database-cpu", "20"]).is_err());
        assert!(parse(&["--second-database-pid", "7", "--postgres", "p"]).is_err());
        let args = parse(&[
            "--postgres=p",
            "--database-pid=1",
            "--postgres-second=q",
            "--second-database-pid=2",
            "--database-cpu=20",
        ])
        .expect("parsed");
        assert_eq!(
            system(&args, 3),
            "orderly ×3 (40 % of a core each), 2 database servers (20 % of a core each)"
        );
    }
}
