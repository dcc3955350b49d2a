//! A real IMAP server for tests: Debian's `dovecot-imapd`, started by the test itself as
//! a foreground child (`dovecot -F`) with a generated configuration in a temp dir — one
//! user from a passwd-file, maildir storage, plain-text IMAP (`ssl = no`) on
//! 127.0.0.1 and a free port, its base and state dirs in the temp dir. Dropping the
//! handle kills the child.
//!
//! Without dovecot installed the test fails naming the package, unless
//! `FRONTA_SKIP_IMAP=1` asks to skip it (said loudly on stderr).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The Debian package that provides the server.
pub const APT_PACKAGE: &str = "dovecot-imapd";
/// The test user and password.
pub const USER: &str = "desk";
pub const PASSWORD: &str = "s3cret-imap";
/// How long the server may take to answer its first greeting (patience, not a measure).
const PATIENCE: Duration = Duration::from_secs(30);

pub struct Dovecot {
    pub dir: tempfile::TempDir,
    pub port: u16,
    child: Child,
}

fn binary() -> Option<PathBuf> {
    if let Some(given) = std::env::var_os("FRONTA_DOVECOT") {
        return Some(PathBuf::from(given)).filter(|path| path.is_file());
    }
    ["/usr/sbin/dovecot", "/usr/bin/dovecot"]
        .into_iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port on 127.0.0.1")
}

/// The uid and gid mail is stored as: `nobody` when the test runs as root (dovecot
/// refuses root for mail), else the test's own user.
fn mail_ids() -> (u32, u32) {
    let id = |flag: &str| -> u32 {
        Command::new("id")
            .arg(flag)
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .expect("`id` answers")
    };
    if id("-u") == 0 {
        (65534, 65534)
    } else {
        (id("-u"), id("-g"))
    }
}

fn config(dir: &Path, port: u16) -> String {
    let d = dir.display();
    format!(
        r#"protocols = imap
listen = 127.0.0.1
base_dir = {d}/run
state_dir = {d}/state
log_path = {d}/dovecot.log
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {d}/passwd
}}
userdb {{
  driver = passwd-file
  args = username_format=%u {d}/passwd
}}
mail_location = maildir:{d}/mail/%u
first_valid_uid = 1
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service anvil {{
  chroot =
}}
"#
    )
}

impl Dovecot {
    /// Starts the server, or answers `None` when it is not installed and
    /// `FRONTA_SKIP_IMAP=1` says to skip; without it a missing server fails the test.
    pub fn start() -> Option<Dovecot> {
        let Some(binary) = binary() else {
            if std::env::var("FRONTA_SKIP_IMAP").is_ok_and(|value| value == "1") {
                let _ = writeln!(
                    std::io::stderr(),
                    "\n!!!!!!!! SKIPPED: the IMAP test did not run (FRONTA_SKIP_IMAP=1). !!!!!!!!\n\
                     !!!!!!!! Install `{APT_PACKAGE}` with apt-get to run it.         !!!!!!!!\n"
                );
                return None;
            }
            panic!(
                "the IMAP tests need a real IMAP server: install Debian's `{APT_PACKAGE}` \
                 (apt-get install -y {APT_PACKAGE}; .ci/run does), point FRONTA_DOVECOT at the \
                 dovecot binary, or set FRONTA_SKIP_IMAP=1 to skip them explicitly"
            );
        };
        let dir = tempfile::tempdir().expect("a temp dir");
        let root = dir.path();
        // The mail processes run as another user: they must reach the temp dir.
        let open = |path: &Path| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        };
        open(root);
        for sub in ["run", "state", "mail", "home"] {
            std::fs::create_dir_all(root.join(sub)).expect("a dir");
        }
        let (uid, gid) = mail_ids();
        for sub in ["mail", "home"] {
            let status = Command::new("chown")
                .arg(format!("{uid}:{gid}"))
                .arg(root.join(sub))
                .status()
                .expect("chown runs");
            assert!(status.success(), "chown of {sub}");
        }
        std::fs::write(
            root.join("passwd"),
            format!(
                "{USER}:{{PLAIN}}{PASSWORD}:{uid}:{gid}::{}/home/{USER}::\n",
                root.display()
            ),
        )
        .expect("the passwd-file");
        let port = free_port();
        let conf = root.join("dovecot.conf");
        std::fs::write(&conf, config(root, port)).expect("the configuration");
        let child = Command::new(&binary)
            .arg("-F")
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("dovecot starts");
        let server = Dovecot { dir, port, child };
        server.wait_ready();
        Some(server)
    }

    /// Delivers a message by writing it into the user's maildir (`new/`), as a local
    /// delivery agent would; dovecot gives it the next UID when a session looks.
    pub fn deliver_maildir(&self, name: &str, raw: &str) {
        let maildir = self.dir.path().join("mail").join(USER);
        for sub in ["new", "cur", "tmp"] {
            std::fs::create_dir_all(maildir.join(sub)).expect("a maildir");
        }
        let file = maildir.join("new").join(format!("{name}.fronta-test"));
        std::fs::write(&file, raw).expect("the message file");
        let (uid, gid) = mail_ids();
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{uid}:{gid}"))
            .arg(&maildir)
            .status()
            .expect("chown runs");
        assert!(status.success(), "chown of the maildir");
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dovecot.log")).unwrap_or_default()
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) {
                let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
                let mut greeting = [0u8; 256];
                if let Ok(read) = stream.read(&mut greeting)
                    && greeting[..read].starts_with(b"* OK")
                {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "dovecot did not greet on 127.0.0.1:{} within {PATIENCE:?}; its log:\n{}",
                self.port,
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Dovecot {
    fn drop(&mut self) {
        // SIGTERM: the master stops its own children before it exits.
        let stopped = Command::new("kill")
            .arg(self.child.id().to_string())
            .status()
            .is_ok_and(|status| status.success());
        if !stopped {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}
