//! A TCP forwarder that holds every byte for a while in each direction (`--delay`), so that a
//! server on this machine answers as one a network round trip away would: where the kernel
//! cannot delay a link (no `netem`), a database "on another machine" is this in front of it.
//! Blocking threads, two a connection, rather than the runtime's timers, which tick in
//! milliseconds.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Serves `listen` until the process ends, passing each connection to `upstream` and every
/// byte either way `delay` after it came.
pub fn run(listen: &str, upstream: &str, delay: Duration) -> std::io::Result<()> {
    serve(TcpListener::bind(listen)?, upstream, delay)
}

fn serve(listener: TcpListener, upstream: &str, delay: Duration) -> std::io::Result<()> {
    for client in listener.incoming() {
        let client = client?;
        let Ok(server) = TcpStream::connect(upstream) else {
            continue;
        };
        for (from, to) in [(&client, &server), (&server, &client)] {
            let _ = from.set_nodelay(true);
            let (from, to) = (from.try_clone()?, to.try_clone()?);
            std::thread::spawn(move || carry(from, to, delay));
        }
    }
    Ok(())
}

/// Reads `from` and writes each chunk to `to` once `delay` has passed since it was read, in
/// order; a chunk read while others wait does not wait behind their delays as well.
fn carry(mut from: TcpStream, mut to: TcpStream, delay: Duration) {
    let (send, due) = mpsc::channel::<(Instant, Vec<u8>)>();
    let writer = std::thread::spawn(move || {
        for (at, chunk) in due {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
            if to.write_all(&chunk).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    });
    let mut buffer = vec![0; 64 * 1024];
    while let Ok(read) = from.read(&mut buffer) {
        if read == 0
            || send
                .send((Instant::now() + delay, buffer[..read].to_vec()))
                .is_err()
        {
            break;
        }
    }
    drop(send);
    let _ = writer.join();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_come_back_whole_and_in_order_no_sooner_than_the_delay_each_way() {
        let echo = TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream = echo.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            let (mut stream, _) = echo.accept().unwrap();
            let mut copy = stream.try_clone().unwrap();
            let _ = std::io::copy(&mut stream, &mut copy);
        });
        let forwarder = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = forwarder.local_addr().unwrap();
        let delay = Duration::from_millis(30);
        std::thread::spawn(move || serve(forwarder, &upstream, delay));
        let sent: Vec<u8> = (0..200_000u32).map(|n| (n % 251) as u8).collect();
        let mut client = TcpStream::connect(address).unwrap();
        let started = Instant::now();
        let mut writer = client.try_clone().unwrap();
        let outgoing = sent.clone();
        std::thread::spawn(move || writer.write_all(&outgoing));
        let mut came = vec![0; sent.len()];
        client.read_exact(&mut came).unwrap();
        assert!(started.elapsed() >= 2 * delay, "{:?}", started.elapsed());
        assert!(came == sent, "the bytes came back changed or out of order");
    }
}
