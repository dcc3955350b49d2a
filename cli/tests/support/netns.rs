//! A network of the test's own for the partition harness (`partition.rs`): a network
//! namespace joined to the host by veth pairs with private addresses (10.77.x.y/30), and
//! a private Postgres cluster (initdb + pg_ctl as the `postgres` OS user, in a folder of
//! its own) listening on the host side of those links and on 127.0.0.1. A link is cut
//! with `ip link set <host side> down` and healed with `up`: packets on it are dropped,
//! nothing is closed — a partition, not a refused connection.
//!
//! Everything made here is undone on drop, a panic included: the processes left in the
//! namespace are killed, the namespace (and with it its links) deleted, the cluster
//! stopped (`-m immediate`) and its folder removed. What a killed test run left behind
//! (its pid, in the names, is gone) is swept by the next one.
//!
//! Needs root, iproute2 and PostgreSQL's server binaries (`/usr/lib/postgresql/*/bin`);
//! without them [`Namespace::create`] and [`Cluster::start`] answer why, and the harness
//! falls back to the fault proxy. Loss and delay (`tc netem`) are not used: this
//! machine's kernel has no netem qdisc.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

/// The prefix of the namespaces and cluster folders made here (then the pid, a number).
const PREFIX: &str = "fronta-part-";
/// The private range the links take their /30s from.
const RANGE: [u8; 2] = [10, 77];

static SEQUENCE: AtomicU32 = AtomicU32::new(0);
/// Serializes the choice of addresses and the making of links within this process.
static MAKING: Mutex<()> = Mutex::new(());

/// `program args…`; its stderr (or why it could not start) when it fails.
fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|err| format!("{program} {}: {err}", args.join(" ")))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Whether process `pid` lives (a zombie, killed and not yet reaped, does not).
fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// The pid in a name made here (`fronta-part-<pid>-<n>`).
pub fn pid_of(name: &str) -> Option<u32> {
    name.strip_prefix(PREFIX)?.split('-').next()?.parse().ok()
}

/// Kill every process inside namespace `name`.
fn kill_inside(name: &str) {
    if let Ok(pids) = run("ip", &["netns", "pids", name]) {
        for pid in pids.split_whitespace() {
            let _ = run("kill", &["-KILL", pid]);
        }
    }
}

/// Namespaces and clusters left by test runs whose process is gone.
fn sweep() {
    if let Ok(list) = run("ip", &["netns", "list"]) {
        for name in list
            .lines()
            .filter_map(|line| line.split_whitespace().next())
        {
            if pid_of(name).is_some_and(|pid| !pid_alive(pid)) {
                kill_inside(name);
                let _ = run("ip", &["netns", "del", name]);
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if pid_of(&name).is_some_and(|pid| !pid_alive(pid)) {
                if let Ok(port) = std::fs::read_to_string(entry.path().join("port")) {
                    kill_clients(port.trim());
                }
                if let Ok(bin) = postgres_bin() {
                    stop_cluster(&bin, &entry.path());
                }
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
    }
}

/// Kill the processes left on the host whose command line names a database on `port`
/// (a worker of a killed test run, retrying forever against its gone cluster).
fn kill_clients(port: &str) {
    let needle = format!(":{port}/postgres");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.parse::<u32>().is_err() {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(super::FRONTA) && cmdline.contains(&needle) {
            let _ = run("kill", &["-KILL", &name]);
        }
    }
}

/// One veth pair: `host` is the host side's name (the one cut), with `host_addr`;
/// `inside_addr` is the namespace side's address.
#[derive(Debug, Clone)]
pub struct Link {
    pub host: String,
    pub host_addr: Ipv4Addr,
    pub inside_addr: Ipv4Addr,
}

/// A network namespace and its links to the host.
pub struct Namespace {
    pub name: String,
    pub links: Vec<Link>,
}

impl Namespace {
    /// A namespace with `links` veth pairs to the host (each its own /30), loopback up.
    pub fn create(links: usize) -> Result<Namespace, String> {
        let _making = MAKING
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        sweep();
        let pid = std::process::id();
        let seq = SEQUENCE.fetch_add(1, Ordering::SeqCst);
        let name = format!("{PREFIX}{pid}-{seq}");
        run("ip", &["netns", "add", &name])?;
        // From here on, dropping it deletes what was made.
        let mut namespace = Namespace {
            name,
            links: Vec::new(),
        };
        namespace.inside(&["ip", "link", "set", "lo", "up"])?;
        let used = run("ip", &["-o", "-4", "addr", "show"])?;
        let mut subnets = free_subnets(&used, pid);
        for index in 0..links {
            let base = subnets
                .next()
                .ok_or_else(|| format!("no free /30 left in {}.{}.0.0/16", RANGE[0], RANGE[1]))?;
            let host = format!("fp{pid:x}-{seq}-{index}h");
            let inside = format!("fp{pid:x}-{seq}-{index}n");
            let [a, b, c, d] = base.octets();
            let link = Link {
                host: host.clone(),
                host_addr: Ipv4Addr::new(a, b, c, d + 1),
                inside_addr: Ipv4Addr::new(a, b, c, d + 2),
            };
            run(
                "ip",
                &[
                    "link", "add", &host, "type", "veth", "peer", "name", &inside,
                ],
            )?;
            run("ip", &["link", "set", &inside, "netns", &namespace.name])?;
            namespace.links.push(link.clone());
            run(
                "ip",
                &[
                    "addr",
                    "add",
                    &format!("{}/30", link.host_addr),
                    "dev",
                    &host,
                ],
            )?;
            run("ip", &["link", "set", &host, "up"])?;
            namespace.inside(&[
                "ip",
                "addr",
                "add",
                &format!("{}/30", link.inside_addr),
                "dev",
                &inside,
            ])?;
            namespace.inside(&["ip", "link", "set", &inside, "up"])?;
        }
        Ok(namespace)
    }

    /// `args` run inside the namespace.
    fn inside(&self, args: &[&str]) -> Result<String, String> {
        let mut all = vec!["netns", "exec", self.name.as_str()];
        all.extend_from_slice(args);
        run("ip", &all)
    }

    /// The words that start a program inside the namespace.
    pub fn wrapper(&self) -> Vec<String> {
        ["ip", "netns", "exec", &self.name]
            .map(str::to_owned)
            .to_vec()
    }

    /// Cut (`up` false) or heal link `index` (its host side).
    pub fn set_link(&self, index: usize, up: bool) -> Result<(), String> {
        let state = if up { "up" } else { "down" };
        run("ip", &["link", "set", &self.links[index].host, state]).map(drop)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        kill_inside(&self.name);
        for link in &self.links {
            let _ = run("ip", &["link", "del", &link.host]);
        }
        if let Err(err) = run("ip", &["netns", "del", &self.name]) {
            eprintln!("partition: could not delete namespace {}: {err}", self.name);
        }
    }
}

/// The /30s of the range not in `used` (`ip -o -4 addr show`), starting at a third
/// octet taken from `pid` so parallel test processes seldom try the same one.
pub fn free_subnets(used: &str, pid: u32) -> impl Iterator<Item = Ipv4Addr> + use<> {
    let prefix = format!("{}.{}.", RANGE[0], RANGE[1]);
    let taken: Vec<(u8, u8)> = used
        .split_whitespace()
        .filter_map(|word| word.strip_prefix(&prefix))
        .filter_map(|rest| {
            let address = rest.split('/').next()?;
            let (c, d) = address.split_once('.')?;
            Some((c.parse().ok()?, d.parse::<u8>().ok()? & !3))
        })
        .collect();
    let start = pid % 256;
    (0..256u32)
        .flat_map(move |step| {
            (0..64u8).map(move |quarter| (((start + step) % 256) as u8, quarter * 4))
        })
        .filter(move |subnet| !taken.contains(subnet))
        .map(|(c, d)| Ipv4Addr::new(RANGE[0], RANGE[1], c, d))
}

/// The newest PostgreSQL server binaries: `/usr/lib/postgresql/<version>/bin`.
fn postgres_bin() -> Result<PathBuf, String> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .map_err(|err| format!("no /usr/lib/postgresql: {err}"))?
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_string_lossy().parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| "no initdb under /usr/lib/postgresql/*/bin".to_owned())
}

/// `program args…` from `bin`, as the `postgres` OS user.
fn as_postgres(bin: &Path, program: &str, args: &[&str]) -> Result<String, String> {
    let program = bin.join(program);
    let mut all = vec!["-u", "postgres", "--", program.to_str().unwrap_or_default()];
    all.extend_from_slice(args);
    run("runuser", &all)
}

fn stop_cluster(bin: &Path, dir: &Path) {
    let data = dir.join("data");
    if data.join("postmaster.pid").exists() {
        let _ = as_postgres(
            bin,
            "pg_ctl",
            &["-D", &data.to_string_lossy(), "-m", "immediate", "stop"],
        );
    }
}

/// A private Postgres cluster (trust authentication, `fsync` off: a throwaway).
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    pub port: u16,
}

impl Cluster {
    /// initdb and start a cluster listening on 127.0.0.1 and on `addresses`.
    pub fn start(addresses: &[Ipv4Addr]) -> Result<Cluster, String> {
        let bin = postgres_bin()?;
        let ids = run("id", &["-u", "postgres"])?;
        let uid: u32 = ids.trim().parse().map_err(|err| format!("uid: {err}"))?;
        let gid: u32 = run("id", &["-g", "postgres"])?
            .trim()
            .parse()
            .map_err(|err| format!("gid: {err}"))?;
        let seq = SEQUENCE.fetch_add(1, Ordering::SeqCst);
        let dir = std::env::temp_dir().join(format!("{PREFIX}{}-{seq}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|err| format!("{}: {err}", dir.display()))?;
        std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
            .map_err(|err| format!("chown {}: {err}", dir.display()))?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(|err| format!("a free port: {err}"))?
            .port();
        let cluster = Cluster { bin, dir, port };
        std::fs::write(cluster.dir.join("port"), port.to_string())
            .map_err(|err| format!("the port file: {err}"))?;
        let data = cluster.dir.join("data");
        let data = data.to_string_lossy();
        as_postgres(
            &cluster.bin,
            "initdb",
            &[
                "-D",
                &data,
                "-A",
                "trust",
                "-U",
                "postgres",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        )?;
        let mut hba = std::fs::OpenOptions::new()
            .append(true)
            .open(cluster.dir.join("data/pg_hba.conf"))
            .map_err(|err| format!("pg_hba.conf: {err}"))?;
        std::io::Write::write_all(
            &mut hba,
            format!("host all all {}.{}.0.0/16 trust\n", RANGE[0], RANGE[1]).as_bytes(),
        )
        .map_err(|err| format!("pg_hba.conf: {err}"))?;
        let listen: Vec<String> = std::iter::once("127.0.0.1".to_owned())
            .chain(addresses.iter().map(Ipv4Addr::to_string))
            .collect();
        let options = format!(
            "-c listen_addresses={} -p {port} -k {} -c fsync=off -c max_connections=200",
            listen.join(","),
            cluster.dir.display()
        );
        as_postgres(
            &cluster.bin,
            "pg_ctl",
            &[
                "-D",
                &data,
                "-l",
                &cluster.dir.join("server.log").to_string_lossy(),
                "-w",
                "-t",
                "60",
                "-o",
                &options,
                "start",
            ],
        )?;
        Ok(cluster)
    }

    /// The URL of the cluster's `postgres` database at `host`.
    pub fn url(&self, host: Ipv4Addr) -> String {
        format!("postgres://postgres@{host}:{}/postgres", self.port)
    }

    /// The server's log.
    pub fn log(&self) -> PathBuf {
        self.dir.join("server.log")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        stop_cluster(&self.bin, &self.dir);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
