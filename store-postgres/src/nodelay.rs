//! `TCP_NODELAY` on the pool's connections.
//!
//! sqlx 0.9.0 opens its TCP sockets with Nagle's algorithm on (a regression against
//! 0.8: sqlx issue #4335, fixed upstream after 0.9.0, which is the newest release this
//! build can use). A message longer than one segment — a batch of 1,000 enqueues or
//! finishes is ~70 KB, more than the loopback's 64 KB segment — then has its last,
//! short segment held back until the server acknowledges the first one, and the server
//! delays that acknowledgement by up to 40 ms on Linux. Measured on the bench's drain:
//! a batch of 1,000 finishes took 10 ms in Postgres and 55 ms at the client; the batched
//! enqueue ran at 70,700 runs/s with the delay and 160,500 without.
//!
//! sqlx has no hook on its socket, so after a connection is made ([`apply`]) the store
//! asks the server which client port the connection comes from (`inet_client_port()`)
//! and which server port it reached, finds this process's TCP socket with exactly that
//! local and peer port, and sets the option on it. The socket is reached through a
//! duplicate of its descriptor taken with `pidfd_getfd` on this very process: the
//! duplicate shares the socket, so the option lands on the connection's socket, and no
//! unsafe code is needed. Linux only; elsewhere, over a Unix socket, behind a proxy that
//! changes ports, or when the kernel refuses, the connection stays as sqlx made it and a
//! debug line says why. It is never a reason to fail a connection.

use sqlx::PgConnection;

/// What [`apply`] did to one connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The option is set on the connection's socket.
    Set,
    /// The connection was left as it was, for this reason.
    Skipped(String),
}

/// Set `TCP_NODELAY` on `conn`'s socket (see the module's docs). One round trip.
pub async fn apply(conn: &mut PgConnection) -> Outcome {
    match ports(conn).await {
        Ok(Some((client, server))) => match socket::set(client, server) {
            Ok(()) => Outcome::Set,
            Err(reason) => Outcome::Skipped(reason),
        },
        Ok(None) => Outcome::Skipped("not a TCP connection (no client port)".into()),
        Err(err) => Outcome::Skipped(format!("asking the server for the ports failed: {err}")),
    }
}

/// Whether `conn`'s socket has `TCP_NODELAY` set, for tests and diagnostics: `None` when
/// the socket cannot be found (see [`apply`]'s limits).
pub async fn is_set(conn: &mut PgConnection) -> Option<bool> {
    let (client, server) = ports(conn).await.ok().flatten()?;
    socket::get(client, server).ok()
}

/// The connection's `(client port, server port)` as the server sees them; `None` over a
/// Unix socket.
async fn ports(conn: &mut PgConnection) -> Result<Option<(u16, u16)>, sqlx::Error> {
    let (client, server): (Option<i32>, Option<i32>) =
        sqlx::query_as("SELECT inet_client_port(), inet_server_port()")
            .fetch_one(conn)
            .await?;
    Ok(match (client, server) {
        (Some(client), Some(server)) => u16::try_from(client).ok().zip(u16::try_from(server).ok()),
        _ => None,
    })
}

#[cfg(target_os = "linux")]
mod socket {
    use std::net::SocketAddr;
    use std::os::fd::OwnedFd;

    use rustix::net::{getpeername, getsockname, sockopt};
    use rustix::process::{PidfdFlags, PidfdGetfdFlags, getpid, pidfd_getfd, pidfd_open};

    pub(super) fn set(client: u16, server: u16) -> Result<(), String> {
        let fd = find(client, server)?;
        sockopt::set_tcp_nodelay(&fd, true).map_err(|err| format!("setsockopt: {err}"))
    }

    pub(super) fn get(client: u16, server: u16) -> Result<bool, String> {
        let fd = find(client, server)?;
        sockopt::tcp_nodelay(&fd).map_err(|err| format!("getsockopt: {err}"))
    }

    /// A duplicate of this process's TCP socket bound to local port `client` and
    /// connected to peer port `server`.
    fn find(client: u16, server: u16) -> Result<OwnedFd, String> {
        let me = pidfd_open(getpid(), PidfdFlags::empty())
            .map_err(|err| format!("pidfd_open: {err}"))?;
        let entries =
            std::fs::read_dir("/proc/self/fd").map_err(|err| format!("/proc/self/fd: {err}"))?;
        for entry in entries.flatten() {
            let Some(number) = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<i32>().ok())
            else {
                continue;
            };
            let is_socket = std::fs::read_link(entry.path())
                .map(|target| target.to_string_lossy().starts_with("socket:"))
                .unwrap_or(false);
            if !is_socket {
                continue;
            }
            // The descriptor may have closed since it was listed: then it is not ours.
            let Ok(fd) = pidfd_getfd(&me, number, PidfdGetfdFlags::empty()) else {
                continue;
            };
            let port = |addr: Option<SocketAddr>| addr.map(|addr| addr.port());
            let local = port(getsockname(&fd).ok().and_then(|a| a.try_into().ok()));
            let peer = port(
                getpeername(&fd)
                    .ok()
                    .flatten()
                    .and_then(|a| a.try_into().ok()),
            );
            if local == Some(client) && peer == Some(server) {
                return Ok(fd);
            }
        }
        Err(format!(
            "no socket of this process from port {client} to port {server} (a proxy between?)"
        ))
    }
}

#[cfg(not(target_os = "linux"))]
mod socket {
    pub(super) fn set(_client: u16, _server: u16) -> Result<(), String> {
        Err("setting TCP_NODELAY on sqlx's sockets is done on Linux only".into())
    }

    pub(super) fn get(_client: u16, _server: u16) -> Result<bool, String> {
        Err("reading TCP_NODELAY of sqlx's sockets is done on Linux only".into())
    }
}
