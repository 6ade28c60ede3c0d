//! The `orderly` binary as a child process, for tests that kill it, restart it or change its
//! limits from outside.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};

pub struct Process {
    pub child: Child,
    pub addr: SocketAddr,
}

impl Drop for Process {
    /// A failing test must not leave a server behind.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the binary on a free port with `dir` as its data directory and `args` besides,
/// logging at `log` (RUST_LOG) to the test's stderr; returns once it listens.
pub fn start(dir: &std::path::Path, args: &[&str], log: &str) -> Process {
    start_with_env(dir, args, log, &[])
}

/// As `start`, with these variables added to the server's environment.
pub fn start_with_env(
    dir: &std::path::Path,
    args: &[&str],
    log: &str,
    env: &[(&str, &str)],
) -> Process {
    // Temporary directories are made 0755; Orderly would warn about each at every restart.
    if dir.exists() {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
    let mut command = Command::new(env!("CARGO_BIN_EXE_orderly"));
    command
        .args(["--bind", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .args(args)
        .env("RUST_LOG", log)
        .envs(env.iter().copied());
    start_command(command)
}

/// Starts the binary in network namespace `namespace` (`ip netns exec`, which runs it in
/// place: its process is the server's), listening on `bind`.
pub fn start_in_namespace(namespace: &str, bind: &str, args: &[&str], log: &str) -> Process {
    let mut command = Command::new("ip");
    command
        .args(["netns", "exec", namespace, env!("CARGO_BIN_EXE_orderly")])
        .args(["--bind", bind])
        .args(args)
        .env("RUST_LOG", log);
    start_command(command)
}

/// Runs `command` (the binary, with its arguments) and returns once it listens.
fn start_command(mut command: Command) -> Process {
    let mut child = command
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start orderly");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let line = lines.next().expect("a line").expect("readable stdout");
    // The first stdout line, even after a restart that logged a warning (logs go to stderr).
    let Some(addr) = line
        .strip_prefix("orderly listening on http://")
        .and_then(|a| a.parse().ok())
    else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("not the listening line: {line:?}");
    };
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Process { child, addr }
}

/// Runs the binary on `dir` with `args`, expecting it to refuse to start; returns what it said
/// on stderr. Fails the test if it starts listening instead.
pub fn refused(dir: &std::path::Path, args: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_orderly"))
        .args(["--bind", "127.0.0.1:0", "--data-dir"])
        .arg(dir)
        .args(args)
        .env("RUST_LOG", "off")
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start orderly");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(!status.success(), "it stopped, but said it succeeded");
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("it started instead of refusing");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut said = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut said)
        .expect("stderr readable");
    said
}
