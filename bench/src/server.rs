//! Starting a server process on a free port and reading its CPU time from /proc.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

pub struct ServerProcess {
    pub child: Child,
    pub endpoint: String,
    /// A data directory to delete once the server is gone.
    pub data_dir: Option<std::path::PathBuf>,
    /// The postmaster of the PostgreSQL server this server keeps its state in
    /// (`--database-pid`), whose CPU is counted apart.
    pub database: Option<u32>,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(dir) = &self.data_dir {
            let _ = self.child.start_kill();
            // The process must be gone before its files are removed.
            if let Some(pid) = self.child.id() {
                while std::path::Path::new(&format!("/proc/{pid}")).exists() {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    if matches!(self.child.try_wait(), Ok(Some(_))) {
                        break;
                    }
                }
            }
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Clock ticks per second for /proc/<pid>/stat CPU fields (100 on Linux).
const TICKS_PER_SECOND: u64 = 100;

impl ServerProcess {
    /// Starts `program args... --bind 127.0.0.1:0` and waits for its "listening on" line.
    pub async fn start(program: &str, args: &[&str]) -> ServerProcess {
        let mut child = Command::new(program)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {program}: {e}"));
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let endpoint = loop {
            let line = lines
                .next_line()
                .await
                .expect("read")
                .expect("server exited before listening");
            if let Some(url) = line.split_whitespace().find(|w| w.starts_with("http://")) {
                break url.to_string();
            }
        };
        ServerProcess {
            child,
            endpoint,
            data_dir: None,
            database: None,
        }
    }

    /// Starts another emulator: `sh -c "exec COMMAND"` with `{port}` replaced by a free port.
    /// Its output is discarded; the caller waits until it serves.
    pub async fn start_peer(command: &str) -> Result<ServerProcess, String> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("no free port: {e}"))?
            .port();
        let command = command.replace("{port}", &port.to_string());
        let child = Command::new("sh")
            .arg("-c")
            .arg(format!("exec {command}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {command}: {e}"))?;
        Ok(ServerProcess {
            child,
            endpoint: format!("http://127.0.0.1:{port}"),
            data_dir: None,
            database: None,
        })
    }

    /// User plus system CPU time of the server and every process it started, in microseconds.
    pub fn cpu_micros(&self) -> u64 {
        let Some(pid) = self.child.id() else { return 0 };
        let mut ticks = 0;
        let mut family = vec![pid];
        // Descendants: a process whose parent is already in the family (pids listed in order
        // of creation mostly; a second pass catches the rest).
        let stats: Vec<(u32, u32, u64)> = std::fs::read_dir("/proc")
            .map(|entries| {
                entries
                    .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                    .filter_map(|p| proc_stat(p).map(|(ppid, t)| (p, ppid, t)))
                    .collect()
            })
            .unwrap_or_default();
        for _ in 0..2 {
            for (p, ppid, _) in &stats {
                if family.contains(ppid) && !family.contains(p) {
                    family.push(*p);
                }
            }
        }
        for (p, _, t) in &stats {
            if family.contains(p) {
                ticks += t;
            }
        }
        ticks * 1_000_000 / TICKS_PER_SECOND
    }

    /// CPU time of the database this server keeps its state in, in microseconds: the
    /// postmaster, its processes and those of them that ended (`None` without one).
    pub fn database_cpu_micros(&self) -> Option<u64> {
        postmaster_cpu_micros(self.database?)
    }

    /// Resident memory in KiB.
    pub fn rss_kib(&self) -> u64 {
        let Some(pid) = self.child.id() else { return 0 };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmRSS:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }
}

/// CPU time of the PostgreSQL server whose postmaster is `postmaster`, in microseconds: it,
/// its processes and those of them that ended (`None` once it is gone).
pub fn postmaster_cpu_micros(postmaster: u32) -> Option<u64> {
    let own = proc_stat_with_children_ended(postmaster)?;
    let processes: u64 = (children_of(postmaster).into_iter())
        .filter_map(proc_stat)
        .map(|(_, ticks)| ticks)
        .sum();
    Some((own + processes) * 1_000_000 / TICKS_PER_SECOND)
}

/// The processes whose parent is `pid`.
pub fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .filter(|&child| proc_stat(child).is_some_and(|(ppid, _)| ppid == pid))
                .collect()
        })
        .unwrap_or_default()
}

/// CPU time this load generator has used, in microseconds: what the load itself takes of the
/// cores it shares with the server.
pub fn own_cpu_micros() -> u64 {
    proc_stat(std::process::id()).map_or(0, |(_, ticks)| ticks * 1_000_000 / TICKS_PER_SECOND)
}

/// A process's CPU ticks with those of its children that ended and were waited for (utime,
/// stime, cutime and cstime: the 12th to 15th fields after the command name): a PostgreSQL
/// backend's CPU reaches its postmaster so when its connection closes.
fn proc_stat_with_children_ended(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit(')').next()?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    (11..15).map(|i| fields.get(i)?.parse::<u64>().ok()).sum()
}

/// A process's parent pid and its user plus system CPU ticks.
fn proc_stat(pid: u32) -> Option<(u32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the parenthesised command name: ppid is the 2nd, utime and stime the 12th
    // and 13th.
    let after = stat.rsplit(')').next()?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ppid = fields.get(1)?.parse().ok()?;
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some((ppid, ticks))
}
