//! A real SMTP server for tests: `server.py` beside this file, on Debian's
//! `python3-aiosmtpd`, started by the test itself as a child process on 127.0.0.1 and a
//! port it picks (it prints `READY <port>` once it listens; the test reads that line, no
//! sleeping). Each accepted message is a JSON file in a temp dir, written before the
//! final 250 is answered; rules make chosen recipients answer a 4xx or 5xx (for a number
//! of times, or always) or hang. TLS (STARTTLS or implicit) uses `server.pem` for
//! `mail.test` (`server.key`), signed by `ca.pem`: test-only keys, valid until 2126, made
//! with `openssl req -x509` for the CA and `openssl x509 -req` for the server certificate
//! (`subjectAltName=DNS:mail.test`, `CA:FALSE`). Dropping the handle closes the child's
//! stdin, which ends it, and kills it.
//!
//! Without a Python that can `import aiosmtpd` the test fails naming the package, unless
//! `FRONTA_SKIP_SMTP=1` asks to skip it (said loudly on stderr). `FRONTA_PYTHON` names the
//! interpreter; otherwise `/usr/bin/python3` (Debian's, where apt installs the package)
//! and then `python3` on the path are tried.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// The Debian package that provides the server library.
pub const APT_PACKAGE: &str = "python3-aiosmtpd";
/// The name the test certificate is for.
pub const TLS_NAME: &str = "mail.test";
/// How long the server may take to start listening (patience, not a measure).
const PATIENCE: Duration = Duration::from_secs(30);

/// This directory.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("connectors")
        .join("tests")
        .join("smtp_server")
}

/// The CA that signed the test server's certificate.
pub fn ca_pem() -> Vec<u8> {
    std::fs::read(dir().join("ca.pem")).expect("the test CA")
}

/// How the server is started.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `none` (default), `starttls` or `tls`.
    pub security: &'static str,
    /// A login the server requires (`user`, `password`).
    pub login: Option<(&'static str, &'static str)>,
    /// Rules by recipient (see `server.py`): `{"x@y.example": {"reply": "550 …"}}`.
    pub rules: Value,
}

pub struct SmtpServer {
    pub port: u16,
    pub dir: tempfile::TempDir,
    child: Child,
}

fn python() -> Option<PathBuf> {
    let can_import = |python: &Path| {
        Command::new(python)
            .args(["-c", "import aiosmtpd"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    };
    if let Some(given) = std::env::var_os("FRONTA_PYTHON") {
        return Some(PathBuf::from(given)).filter(|python| can_import(python));
    }
    ["/usr/bin/python3", "python3"]
        .into_iter()
        .map(PathBuf::from)
        .find(|python| can_import(python))
}

impl SmtpServer {
    /// Starts the server, or answers `None` when it cannot run and `FRONTA_SKIP_SMTP=1`
    /// says to skip; without it a missing package fails the test.
    pub fn start(options: Options) -> Option<SmtpServer> {
        let Some(python) = python() else {
            if std::env::var("FRONTA_SKIP_SMTP").is_ok_and(|value| value == "1") {
                let _ = writeln!(
                    std::io::stderr(),
                    "\n!!!!!!!! SKIPPED: the SMTP test did not run (FRONTA_SKIP_SMTP=1). !!!!!!!!\n\
                     !!!!!!!! Install `{APT_PACKAGE}` with apt-get to run it.       !!!!!!!!\n"
                );
                return None;
            }
            panic!(
                "the SMTP tests need a real SMTP server: install Debian's `{APT_PACKAGE}` \
                 (apt-get install -y {APT_PACKAGE}; .ci/run does), point FRONTA_PYTHON at a \
                 Python that can import aiosmtpd, or set FRONTA_SKIP_SMTP=1 to skip them \
                 explicitly"
            );
        };
        let dir = tempfile::tempdir().expect("a temp dir");
        let here = self::dir();
        let mut command = Command::new(python);
        command
            .arg(here.join("server.py"))
            .arg("--dir")
            .arg(dir.path())
            .arg("--security")
            .arg(if options.security.is_empty() {
                "none"
            } else {
                options.security
            })
            .arg("--cert")
            .arg(here.join("server.pem"))
            .arg("--key")
            .arg(here.join("server.key"))
            .arg("--rules")
            .arg(if options.rules.is_null() {
                "{}".to_owned()
            } else {
                options.rules.to_string()
            });
        if let Some((user, password)) = options.login {
            command.args(["--user", user, "--password", password]);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the SMTP server starts");
        let stdout = child.stdout.take().expect("its stdout");
        let (sender, ready) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = sender.send(line);
        });
        let line = ready.recv_timeout(PATIENCE).unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("the SMTP server did not say READY within {PATIENCE:?}")
        });
        let port = line
            .trim()
            .strip_prefix("READY ")
            .and_then(|port| port.parse().ok())
            .unwrap_or_else(|| panic!("the SMTP server said {line:?} instead of READY <port>"));
        Some(SmtpServer { port, dir, child })
    }

    /// Every message accepted so far, in the order it came.
    pub fn messages(&self) -> Vec<Value> {
        let mut found: Vec<(u64, Value)> = std::fs::read_dir(self.dir.path())
            .expect("the message dir")
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let number: u64 = name.strip_suffix(".json")?.parse().ok()?;
                let text = std::fs::read_to_string(entry.path()).ok()?;
                Some((
                    number,
                    serde_json::from_str(&text).expect("a stored message"),
                ))
            })
            .collect();
        found.sort_by_key(|(number, _)| *number);
        found.into_iter().map(|(_, message)| message).collect()
    }
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A header of a stored message's data as written (first occurrence, unfolded; encoded
/// words are left as they are).
pub fn header(message: &Value, name: &str) -> Option<String> {
    let data = message["data"].as_str()?;
    let head = data.split("\r\n\r\n").next()?;
    let unfolded = head.replace("\r\n ", " ").replace("\r\n\t", " ");
    unfolded.split("\r\n").find_map(|line| {
        let (key, value) = line.split_once(':')?;
        key.eq_ignore_ascii_case(name)
            .then(|| value.trim().to_owned())
    })
}
