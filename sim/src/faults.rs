//! [`FaultProxy`]: a small TCP proxy between a process and its database that can cut the
//! database off and give it back, for the outage harness (`cli/tests/outage.rs`,
//! `RELIABILITY.md`).
//!
//! It listens on `127.0.0.1:<any port>` and forwards every connection to one upstream
//! address, byte for byte, in both directions. Two ways to cut ([`Cut`]), because they
//! exercise different timeouts of the client:
//!
//! - [`Cut::Reset`] — the database is gone: every open connection is reset (`RST` to both
//!   sides, `SO_LINGER` 0) and the listening socket is closed, so new connections are
//!   refused (`ECONNREFUSED`) until [`FaultProxy::restore`] listens again on the same
//!   port. What a client meets when the database process restarts.
//! - [`Cut::Stall`] — a blackhole (a partition): nothing is forwarded any more; open
//!   connections stay open with their bytes held, new connections are accepted and held
//!   without reaching the upstream. Nothing fails, everything waits — only the client's
//!   own timeouts end a wait. [`FaultProxy::restore`] lets the held bytes flow again and
//!   connects the held connections, as a partition that heals within TCP's retransmission
//!   time does.
//!
//! # Contract
//!
//! - While open, bytes are forwarded unchanged and in order; an end of stream (FIN) on one
//!   side is passed on as a FIN to the other, and the connection ends when both
//!   directions have ended.
//! - `cut(Reset)` returns once the listener is closed: a connection attempted after it
//!   returns is refused. Every connection open at that moment is reset (both sides) soon
//!   after — it never forwards another byte.
//! - `cut(Stall)` returns once no byte read after it is forwarded: bytes in flight are
//!   held, not dropped, and no connection is closed by the proxy.
//! - `restore()` returns once new connections are accepted and forwarded again (after a
//!   reset cut: once the port listens again). Held bytes and held connections go on.
//! - A cut while cut replaces the mode (a reset after a stall resets the held ones).
//! - Dropping the proxy stops it: the listener closes and every connection is reset.
//!
//! Left out: latency injection, partial (one-way) cuts, packet loss short of a full
//! stall, and TLS (it forwards bytes, so TLS passes through untouched).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, watch};
use tokio::task::JoinHandle;

/// How a [`FaultProxy`] cuts the database off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Reset every connection and refuse new ones.
    Reset,
    /// Forward nothing; hold every connection and its bytes.
    Stall,
}

impl std::str::FromStr for Cut {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "reset" => Ok(Cut::Reset),
            "stall" | "blackhole" => Ok(Cut::Stall),
            other => Err(format!(
                "a cut is `reset` or `stall` (also `blackhole`), got {other:?}"
            )),
        }
    }
}

/// The proxy's state, watched by every connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    Cut(Cut),
    Stopped,
}

/// What the proxy has done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted from clients.
    pub accepted: u64,
    /// Connections reset by a reset cut (or by stopping the proxy).
    pub reset: u64,
    /// Connections accepted during a stall and held before reaching the upstream.
    pub held: u64,
    /// Connections that could not reach the upstream (closed at once).
    pub upstream_failed: u64,
    /// Bytes forwarded, both directions together.
    pub bytes: u64,
}

#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    reset: AtomicU64,
    held: AtomicU64,
    upstream_failed: AtomicU64,
    bytes: AtomicU64,
}

/// A TCP proxy to one upstream that can be cut and restored (see the module docs).
#[derive(Debug)]
pub struct FaultProxy {
    address: SocketAddr,
    upstream: SocketAddr,
    state: watch::Sender<State>,
    counters: Arc<Counters>,
    acceptor: Mutex<Option<JoinHandle<()>>>,
}

impl FaultProxy {
    /// Listen on `127.0.0.1` (a free port) and forward to `upstream`.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let address = listener.local_addr()?;
        let (state, _) = watch::channel(State::Open);
        let counters = Arc::new(Counters::default());
        let acceptor = tokio::spawn(accept(
            listener,
            upstream,
            state.subscribe(),
            counters.clone(),
        ));
        tracing::info!(%address, %upstream, "fault proxy: forwarding");
        Ok(Self {
            address,
            upstream,
            state,
            counters,
            acceptor: Mutex::new(Some(acceptor)),
        })
    }

    /// Where clients connect.
    pub fn local_addr(&self) -> SocketAddr {
        self.address
    }

    /// Where the bytes go.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Cut the database off (see [`Cut`]).
    pub async fn cut(&self, how: Cut) {
        tracing::warn!(address = %self.address, ?how, "fault proxy: cut");
        self.state.send_replace(State::Cut(how));
        if how == Cut::Reset {
            // Closing the listener is what refuses new connections.
            if let Some(acceptor) = self.acceptor.lock().await.take() {
                acceptor.abort();
                let _ = acceptor.await;
            }
        }
    }

    /// Give the database back: listen again after a reset cut, forward held bytes and
    /// held connections after a stall.
    pub async fn restore(&self) -> io::Result<()> {
        let mut acceptor = self.acceptor.lock().await;
        if acceptor.is_none() {
            let listener = bind_again(self.address).await?;
            *acceptor = Some(tokio::spawn(accept(
                listener,
                self.upstream,
                self.state.subscribe(),
                self.counters.clone(),
            )));
        }
        self.state.send_replace(State::Open);
        tracing::warn!(address = %self.address, "fault proxy: restored");
        Ok(())
    }

    /// Counters so far.
    pub fn stats(&self) -> ProxyStats {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        ProxyStats {
            accepted: load(&self.counters.accepted),
            reset: load(&self.counters.reset),
            held: load(&self.counters.held),
            upstream_failed: load(&self.counters.upstream_failed),
            bytes: load(&self.counters.bytes),
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.state.send_replace(State::Stopped);
        if let Ok(mut acceptor) = self.acceptor.try_lock()
            && let Some(acceptor) = acceptor.take()
        {
            acceptor.abort();
        }
    }
}

/// The port was ours a moment ago; another socket may linger on it briefly.
async fn bind_again(address: SocketAddr) -> io::Result<TcpListener> {
    let mut last = None;
    for _ in 0..50 {
        match TcpListener::bind(address).await {
            Ok(listener) => return Ok(listener),
            Err(err) => {
                last = Some(err);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("cannot listen again")))
}

async fn accept(
    listener: TcpListener,
    upstream: SocketAddr,
    state: watch::Receiver<State>,
    counters: Arc<Counters>,
) {
    loop {
        let (client, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(err) => {
                tracing::warn!(error = %err, "fault proxy: accept failed");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        counters.accepted.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(connection(
            client,
            upstream,
            state.clone(),
            counters.clone(),
        ));
    }
}

/// Why forwarding stopped early.
#[derive(Debug)]
enum Stop {
    /// A reset cut (or the proxy stopped): reset both sides.
    Reset,
}

/// Wait until the proxy forwards (open); `Err` when it resets instead. A stall waits.
async fn until_open(state: &mut watch::Receiver<State>) -> Result<(), Stop> {
    loop {
        match *state.borrow_and_update() {
            State::Open => return Ok(()),
            State::Cut(Cut::Reset) | State::Stopped => return Err(Stop::Reset),
            State::Cut(Cut::Stall) => {}
        }
        if state.changed().await.is_err() {
            return Err(Stop::Reset);
        }
    }
}

/// Resolves when the state leaves `Open` for a reset (or stop); a stall is not a reason
/// to interrupt a read — its bytes are held by [`until_open`] before they are written.
async fn reset_signal(state: &mut watch::Receiver<State>) {
    loop {
        if matches!(
            *state.borrow_and_update(),
            State::Cut(Cut::Reset) | State::Stopped
        ) {
            return;
        }
        if state.changed().await.is_err() {
            return;
        }
    }
}

async fn connection(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut state: watch::Receiver<State>,
    counters: Arc<Counters>,
) {
    let _ = client.set_nodelay(true);
    if *state.borrow() == State::Cut(Cut::Stall) {
        counters.held.fetch_add(1, Ordering::Relaxed);
    }
    if until_open(&mut state).await.is_err() {
        counters.reset.fetch_add(1, Ordering::Relaxed);
        reset(&client);
        return;
    }
    let mut server = match TcpStream::connect(upstream).await {
        Ok(server) => server,
        Err(err) => {
            tracing::warn!(%upstream, error = %err, "fault proxy: upstream unreachable");
            counters.upstream_failed.fetch_add(1, Ordering::Relaxed);
            reset(&client);
            return;
        }
    };
    let _ = server.set_nodelay(true);
    let outcome = {
        let (client_read, client_write) = client.split();
        let (server_read, server_write) = server.split();
        let up = pump(client_read, server_write, state.clone(), &counters);
        let down = pump(server_read, client_write, state.clone(), &counters);
        let reset_now = reset_signal(&mut state);
        tokio::select! {
            (up, down) = async { tokio::join!(up, down) } => up.and(down),
            () = reset_now => Err(Stop::Reset),
        }
    };
    if outcome.is_err() {
        counters.reset.fetch_add(1, Ordering::Relaxed);
        reset(&client);
        reset(&server);
    }
}

/// Close with `RST` instead of `FIN` (once the socket is dropped).
fn reset(stream: &TcpStream) {
    let _ = stream.set_zero_linger();
}

/// Copy one direction until end of stream (passed on as a FIN) or a reset cut. An I/O
/// error ends the direction like an end of stream would, after a FIN to the other side.
async fn pump(
    mut from: tokio::net::tcp::ReadHalf<'_>,
    mut to: tokio::net::tcp::WriteHalf<'_>,
    mut state: watch::Receiver<State>,
    counters: &Counters,
) -> Result<(), Stop> {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        until_open(&mut state).await?;
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return Ok(());
            }
            Ok(read) => read,
        };
        // Read before a stall began, or during it: held here until the proxy forwards.
        until_open(&mut state).await?;
        if to.write_all(&buffer[..read]).await.is_err() {
            return Ok(());
        }
        counters.bytes.fetch_add(read as u64, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream that answers every chunk with the same bytes, upper-cased.
    async fn echo_upper() -> SocketAddr {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("bind echo");
        let address = listener.local_addr().expect("echo address");
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0u8; 1024];
                    while let Ok(read) = stream.read(&mut buffer).await {
                        if read == 0 {
                            return;
                        }
                        let upper = buffer[..read].to_ascii_uppercase();
                        if stream.write_all(&upper).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        address
    }

    async fn round_trip(stream: &mut TcpStream, text: &str) -> io::Result<String> {
        stream.write_all(text.as_bytes()).await?;
        let mut buffer = vec![0u8; text.len()];
        stream.read_exact(&mut buffer).await?;
        Ok(String::from_utf8_lossy(&buffer).into_owned())
    }

    const WAIT: Duration = Duration::from_secs(5);

    #[tokio::test]
    async fn forwards_bytes_both_ways_while_open() {
        let proxy = FaultProxy::start(echo_upper().await).await.expect("proxy");
        let mut stream = TcpStream::connect(proxy.local_addr())
            .await
            .expect("connect");
        for text in ["hello", "second line", "x"] {
            let answer = tokio::time::timeout(WAIT, round_trip(&mut stream, text))
                .await
                .expect("in time")
                .expect("round trip");
            assert_eq!(answer, text.to_ascii_uppercase(), "forwarded unchanged");
        }
        let stats = proxy.stats();
        assert_eq!(stats.accepted, 1, "one connection: {stats:?}");
        assert_eq!(
            stats.bytes,
            2 * (5 + 11 + 1),
            "bytes both ways counted: {stats:?}"
        );
        assert_eq!(stats.reset, 0, "nothing reset: {stats:?}");
    }

    #[tokio::test]
    async fn a_reset_cut_resets_open_connections_and_refuses_new_ones_until_restored() {
        let proxy = FaultProxy::start(echo_upper().await).await.expect("proxy");
        let mut open = TcpStream::connect(proxy.local_addr())
            .await
            .expect("connect");
        assert_eq!(round_trip(&mut open, "a").await.expect("before"), "A");

        proxy.cut(Cut::Reset).await;
        // The open connection ends: a read answers an error (reset) or end of stream,
        // never more bytes.
        let mut buffer = [0u8; 8];
        let read = tokio::time::timeout(WAIT, async {
            let _ = open.write_all(b"b").await;
            open.read(&mut buffer).await
        })
        .await
        .expect("the open connection ends in time");
        assert!(
            matches!(read, Ok(0) | Err(_)),
            "no byte after a reset cut: {read:?}"
        );
        let refused = TcpStream::connect(proxy.local_addr()).await;
        assert!(
            refused.is_err(),
            "a new connection is refused while cut: {refused:?}"
        );
        assert!(proxy.stats().reset >= 1, "counted: {:?}", proxy.stats());

        proxy.restore().await.expect("restore");
        let mut again = TcpStream::connect(proxy.local_addr())
            .await
            .expect("connect after restore");
        let answer = tokio::time::timeout(WAIT, round_trip(&mut again, "back"))
            .await
            .expect("in time")
            .expect("round trip after restore");
        assert_eq!(answer, "BACK", "forwarding again on the same port");
    }

    #[tokio::test]
    async fn a_stall_holds_bytes_and_new_connections_and_restore_delivers_them() {
        let proxy = FaultProxy::start(echo_upper().await).await.expect("proxy");
        let mut open = TcpStream::connect(proxy.local_addr())
            .await
            .expect("connect");
        assert_eq!(round_trip(&mut open, "a").await.expect("before"), "A");

        proxy.cut(Cut::Stall).await;
        open.write_all(b"held").await.expect("a write is accepted");
        let mut buffer = [0u8; 4];
        let stalled =
            tokio::time::timeout(Duration::from_millis(300), open.read_exact(&mut buffer)).await;
        assert!(stalled.is_err(), "no answer during a stall: {stalled:?}");
        // A new connection is accepted (the port listens) but reaches nothing.
        let mut new = TcpStream::connect(proxy.local_addr())
            .await
            .expect("a stall accepts");
        new.write_all(b"late").await.expect("write");
        let mut late = [0u8; 4];
        let nothing =
            tokio::time::timeout(Duration::from_millis(300), new.read_exact(&mut late)).await;
        assert!(nothing.is_err(), "the new one is held too: {nothing:?}");
        assert_eq!(proxy.stats().held, 1, "held counted: {:?}", proxy.stats());

        proxy.restore().await.expect("restore");
        tokio::time::timeout(WAIT, open.read_exact(&mut buffer))
            .await
            .expect("the held bytes arrive")
            .expect("read");
        assert_eq!(
            &buffer, b"HELD",
            "held bytes delivered in order after restore"
        );
        tokio::time::timeout(WAIT, new.read_exact(&mut late))
            .await
            .expect("the held connection goes on")
            .expect("read");
        assert_eq!(&late, b"LATE", "the held connection reached the upstream");
        assert_eq!(proxy.stats().reset, 0, "a stall resets nothing");
    }

    #[tokio::test]
    async fn a_reset_after_a_stall_resets_the_held_connections() {
        let proxy = FaultProxy::start(echo_upper().await).await.expect("proxy");
        proxy.cut(Cut::Stall).await;
        let mut held = TcpStream::connect(proxy.local_addr())
            .await
            .expect("a stall accepts");
        held.write_all(b"x").await.expect("write");
        proxy.cut(Cut::Reset).await;
        let mut buffer = [0u8; 1];
        let read = tokio::time::timeout(WAIT, held.read(&mut buffer))
            .await
            .expect("ends in time");
        assert!(matches!(read, Ok(0) | Err(_)), "reset: {read:?}");
        proxy.restore().await.expect("restore");
        let mut again = TcpStream::connect(proxy.local_addr())
            .await
            .expect("connect");
        assert_eq!(
            tokio::time::timeout(WAIT, round_trip(&mut again, "ok"))
                .await
                .expect("in time")
                .expect("round trip"),
            "OK"
        );
    }

    #[tokio::test]
    async fn an_end_of_stream_is_passed_on() {
        let proxy = FaultProxy::start(echo_upper().await).await.expect("proxy");
        let mut stream = TcpStream::connect(proxy.local_addr())
            .await
            .expect("connect");
        stream.write_all(b"bye").await.expect("write");
        stream.shutdown().await.expect("half-close");
        let mut all = Vec::new();
        tokio::time::timeout(WAIT, stream.read_to_end(&mut all))
            .await
            .expect("the upstream's end reaches us in time")
            .expect("read");
        assert_eq!(all, b"BYE", "answered, then closed");
        assert_eq!(proxy.stats().reset, 0, "an ordinary close is not a reset");
    }

    #[test]
    fn cuts_parse_by_name() {
        assert_eq!("reset".parse::<Cut>(), Ok(Cut::Reset));
        assert_eq!("stall".parse::<Cut>(), Ok(Cut::Stall));
        assert_eq!("blackhole".parse::<Cut>(), Ok(Cut::Stall));
        let err = "drop".parse::<Cut>().expect_err("unknown");
        assert!(err.contains("drop"), "names the input: {err}");
    }
}
