//! `orderly`: parse settings, bind, serve until SIGINT/SIGTERM.

use anyhow::Context;
use orderly::app::{shutdown_signal, App};
use orderly::config::{Config, LogFormat};

/// jemalloc on Linux, with a background thread that gives freed memory back to the system once
/// it has stayed unused for its decay time (2 s; its settings are in .cargo/config.toml),
/// whether or not requests keep coming: after a burst, the process shrinks back toward its
/// idle size (`doc/performance.md`). Elsewhere the system's allocator (jemalloc's background
/// threads are Linux-only).
#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> anyhow::Result<()> {
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    #[cfg(target_os = "linux")]
    runtime.on_thread_park(flush_idle_cache);
    runtime.build()?.block_on(serve())
}

/// Hands what this thread's jemalloc cache holds back to the arenas, at most once a second: a
/// thread gone idle after a burst never allocates again to let its cache shrink, and the
/// objects cached pin their pages, so the background thread could not give those back. A
/// thread that goes idle within a second of its last flush keeps its cache until it next
/// wakes (a request, a timer). Not where the caches are off (`tcache:false`).
#[cfg(target_os = "linux")]
fn flush_idle_cache() {
    use tikv_jemalloc_ctl::{Access, AsName};
    thread_local! {
        static FLUSHED: std::cell::Cell<Option<std::time::Instant>> = const { std::cell::Cell::new(None) };
    }
    let now = std::time::Instant::now();
    let due = FLUSHED
        .get()
        .is_none_or(|at| now.duration_since(at) >= std::time::Duration::from_secs(1));
    if due {
        FLUSHED.set(Some(now));
        // Turning the cache off empties it; turned on again, it starts empty and fills as the
        // thread allocates. (`thread.tcache.flush` takes no value, which the safe interface
        // cannot pass.)
        let enabled = b"thread.tcache.enabled\0".name();
        let on: tikv_jemalloc_ctl::Result<bool> = enabled.read();
        if matches!(on, Ok(true)) {
            let _ = enabled.write(false);
            let _ = enabled.write(true);
        }
    }
}

async fn serve() -> anyhow::Result<()> {
    let config = Config::from_args();
    // Logs go to stderr: stdout carries only the "listening" line scripts read, and a warning
    // written before it at startup (a torn log tail, say) must not take its place.
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        );
    match config.log_format {
        LogFormat::Text => logs.init(),
        // One object a line, the event's fields at its top level.
        LogFormat::Json => logs.json().flatten_event(true).init(),
    }
    if let Some(dir) = &config.test_hooks {
        orderly::test_hooks::enable(dir.clone());
    }
    if let Some(moved) = orderly::app::transfer(&config).await {
        println!("{}", moved.context("the state was not moved")?);
        return Ok(());
    }
    if let Some(moved) = orderly::app::move_shards(&config).await {
        println!("{}", moved.context("the shards were not moved")?);
        return Ok(());
    }
    let app = App::bind(&config)
        .await
        .with_context(|| format!("cannot start (listening on {})", config.bind))?;
    let addr = app.local_addr()?;
    // Scripts and tests read this line to learn the port when binding port 0.
    println!("orderly listening on {}://{addr}", app.scheme());
    tracing::info!(%addr, region = %config.region, account = %config.account_id, "started");
    app.serve(shutdown_signal()).await?;
    tracing::info!("stopped");
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    /// The settings `.cargo/config.toml` compiles into jemalloc: a build that misses them (one
    /// run from outside the repository, or with `JEMALLOC_SYS_WITH_MALLOC_CONF` set otherwise)
    /// keeps a burst's slab records and pages for longer (`doc/performance.md`).
    #[test]
    fn jemalloc_is_built_with_the_repositorys_settings() {
        let conf = tikv_jemalloc_ctl::config::malloc_conf::read().expect("readable");
        // The safe interface hands the C string back with its terminator.
        let conf = conf.trim_end_matches('\0');
        for setting in [
            "background_thread:true",
            "slab_sizes:1-4096:16",
            "dirty_decay_ms:2000",
        ] {
            assert!(
                conf.split(',').any(|s| s == setting),
                "{setting} not in {conf:?}"
            );
        }
    }
}
