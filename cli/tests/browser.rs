//! The dashboard in a real browser: headless Chromium (Debian's `chromium` and
//! `chromium-driver`, installed by `.ci/run`) driven over WebDriver against the real
//! `fronta serve` binary. A person signs in with a tenant token (a wrong one is refused
//! on the page), watches a run appear through the event stream and finish without a
//! reload, opens its step log with the compared values of a condition, finds the
//! ticket on the board with its assignee and tags, sees an incident and the tiles
//! change live, copies a webhook URL to the clipboard, pauses and resumes the
//! automation, sees a failed request said on the page, reads the page on a phone-sized
//! window without sideways scrolling, and signs in as the admin.
//!
//! A second scenario starts from a fresh tenant and builds the seed's firm with the
//! page's controls alone, no JSON typed: the groups and ticket types on their setup
//! pages, then three automations through the editor's form (webhook parameters, ops and
//! inputs, a condition with a then-block, steps moved), problems marked at their fields
//! as they are typed, each saved with Ctrl+S and read back through the API; an order
//! then reaches a warehouse person; the editor on a phone.
//!
//! Screenshots of each step go to `target/test-output/browser/` (the second scenario's
//! to `editor/` under it; one named `failure-….png` when a wait gives up).
//!
//! When chromedriver or chromium is missing the test fails, naming the apt packages;
//! `FRONTA_SKIP_BROWSER=1` skips it explicitly (and says so loudly).

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use thirtyfour::components::SelectElement;
use thirtyfour::prelude::*;

const FRONTA: &str = env!("CARGO_BIN_EXE_fronta");
const ADMIN: &str = "fa_browser_test_admin";
/// How long a wait for the page may take before the test gives up (patience, not a
/// measurement: the page usually needs well under a second).
const PATIENCE: Duration = Duration::from_secs(60);
const POLL: Duration = Duration::from_millis(100);
/// Chromium's switches: the brief's headless set, plus a fixed window size.
const CHROMIUM_ARGS: [&str; 5] = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--window-size=1280,900",
];
const APT_PACKAGES: &str = "chromium chromium-driver";

/// A child process killed when dropped (a failing test leaves nothing running).
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `name` on `PATH`, or `None`.
fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    })
}

/// The chromedriver and chromium binaries (`FRONTA_CHROMEDRIVER`, `FRONTA_CHROMIUM`, else
/// `PATH`); `None` when the test was told to skip.
fn browser_binaries() -> Option<(PathBuf, PathBuf)> {
    let skip = std::env::var("FRONTA_SKIP_BROWSER").is_ok_and(|value| value == "1");
    let given = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|path| path.is_file())
    };
    let driver = match std::env::var_os("FRONTA_CHROMEDRIVER") {
        Some(_) => given("FRONTA_CHROMEDRIVER"),
        None => on_path("chromedriver"),
    };
    let chromium = match std::env::var_os("FRONTA_CHROMIUM") {
        Some(_) => given("FRONTA_CHROMIUM"),
        None => on_path("chromium").or_else(|| on_path("chromium-browser")),
    };
    match (driver, chromium) {
        (Some(driver), Some(chromium)) => Some((driver, chromium)),
        _ if skip => {
            // Straight to the process's stderr: the test harness captures `eprintln!`
            // of passing tests, and a skip must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "\n!!!!!!!! SKIPPED: the browser test did not run (FRONTA_SKIP_BROWSER=1). !!!!!!!!\n\
                 !!!!!!!! Install `{APT_PACKAGES}` with apt-get to run it.             !!!!!!!!\n"
            );
            None
        }
        (driver, chromium) => panic!(
            "the browser test needs chromedriver and chromium (found chromedriver: {driver:?}, \
             chromium: {chromium:?}): `apt-get install -y {APT_PACKAGES}` (Debian), or set \
             FRONTA_CHROMEDRIVER / FRONTA_CHROMIUM, or FRONTA_SKIP_BROWSER=1 to skip explicitly"
        ),
    }
}

/// Where a test's screenshots go: `target/test-output/browser/` and `under` it (`""` for
/// the folder itself), its screenshots of an earlier run removed first (only files: the
/// tests run side by side, each with its own folder).
fn output_dir(under: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/test-output/browser")
        .join(under);
    std::fs::create_dir_all(&dir).expect("the screenshot folder");
    for entry in std::fs::read_dir(&dir).expect("the screenshot folder is read") {
        let path = entry.expect("a folder entry").path();
        if path.extension().is_some_and(|extension| extension == "png") {
            let _ = std::fs::remove_file(path);
        }
    }
    dir
}

/// `fronta serve` on a fresh SQLite file and the address it listens on.
fn serve(db: &Path) -> (Process, String) {
    let mut child = Command::new(FRONTA)
        .arg("--database")
        .arg(db)
        .args(["serve", "--listen", "127.0.0.1:0", "--poll", "20ms"])
        .env("RUST_LOG", "warn")
        .env("FRONTA_ADMIN_TOKEN", ADMIN)
        // The widget's outside service is a local server (`LocalServices`).
        .env("FRONTA_HTTP_ALLOW", "127.0.0.1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fronta serve starts");
    let address = support::listening_address(&mut child);
    (Process(child), address)
}

/// One call with a JSON body: the status and the JSON answer.
fn call(
    address: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    support::call(address, method, path, token, body.as_ref())
}

/// A tiny outside service for a connector widget: every request is counted and answered
/// `{"count": 40 + n}` (n: this request's number), so the data changes with each call.
struct LocalServices {
    address: String,
    seen: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl LocalServices {
    fn start() -> Self {
        use std::sync::atomic::Ordering;
        let listener = TcpListener::bind("127.0.0.1:0").expect("a local port");
        let address = listener.local_addr().expect("an address").to_string();
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = seen.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut request = Vec::new();
                let mut chunk = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => break,
                        Ok(read) => request.extend_from_slice(&chunk[..read]),
                    }
                }
                let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
                let body = json!({"count": 40 + n}).to_string();
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        Self { address, seen }
    }

    fn requests(&self) -> usize {
        self.seen.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// chromedriver on a free local port, answering `/status`.
fn start_chromedriver(binary: &Path) -> (Process, u16) {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(binary)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| panic!("{} starts: {err}", binary.display()));
    let process = Process(child);
    let started = Instant::now();
    loop {
        let status =
            support::try_call_text(&format!("127.0.0.1:{port}"), "GET", "/status", None, None);
        if status.is_ok_and(|(_, body)| body.contains("\"ready\":true")) {
            return (process, port);
        }
        assert!(
            started.elapsed() < PATIENCE,
            "chromedriver did not answer /status on port {port}"
        );
        std::thread::sleep(POLL);
    }
}

/// chromedriver and a headless Chromium session on it, its screenshots going to `shots`.
async fn open_browser(chromedriver: &Path, chromium: &Path, shots: PathBuf) -> (Process, Browser) {
    let (process, port) = start_chromedriver(chromedriver);
    let mut caps = DesiredCapabilities::chrome();
    for arg in CHROMIUM_ARGS {
        caps.add_arg(arg).expect("a Chromium switch");
    }
    caps.set_binary(&chromium.to_string_lossy())
        .expect("the Chromium binary");
    // In a workspace build thirtyfour's HTTP client shares reqwest with the connectors,
    // whose rustls needs a crypto provider chosen: ring, as everywhere in fronta.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let driver = WebDriver::new(format!("http://127.0.0.1:{port}"), caps)
        .await
        .expect("a Chromium session");
    (process, Browser { driver, shots })
}

/// The browser session and where its screenshots go.
struct Browser {
    driver: WebDriver,
    shots: PathBuf,
}

impl Browser {
    async fn shot(&self, name: &str) {
        let path = self.shots.join(format!("{name}.png"));
        self.driver
            .screenshot(&path)
            .await
            .unwrap_or_else(|err| panic!("screenshot {name}: {err}"));
    }

    /// Run `script` until it returns something other than `null`/`false`; that value.
    async fn until(&self, what: &str, script: &str) -> Value {
        let started = Instant::now();
        loop {
            let value = self
                .driver
                .execute(script, Vec::new())
                .await
                .unwrap_or_else(|err| panic!("{what}: the script failed: {err}"))
                .json()
                .clone();
            if !(value.is_null() || value == Value::Bool(false)) {
                return value;
            }
            if started.elapsed() > PATIENCE {
                let name = what.replace(|c: char| !c.is_ascii_alphanumeric(), "-");
                self.shot(&format!("failure-{name}")).await;
                let text = self
                    .driver
                    .execute("return document.body.innerText", Vec::new())
                    .await
                    .map(|ret| ret.json().clone())
                    .unwrap_or(Value::Null);
                panic!(
                    "gave up waiting for: {what}\nthe page said:\n{}",
                    text.as_str().unwrap_or("")
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The text of the first element matching `css`, once there is one.
    async fn text_of(&self, what: &str, css: &str) -> String {
        let script = format!(
            "const e = document.querySelector({}); return e ? e.innerText : null;",
            serde_json::to_string(css).expect("a string")
        );
        self.until(what, &script)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Click the first element matching `css`, once there is one. A page that redraws
    /// between the find and the click (a live update) is found again.
    async fn click(&self, css: &str) {
        let started = Instant::now();
        loop {
            let element = self
                .driver
                .query(By::Css(css))
                .wait(PATIENCE, POLL)
                .first()
                .await
                .unwrap_or_else(|err| panic!("{css} is on the page: {err}"));
            match element.click().await {
                Ok(()) => return,
                Err(err) if err.to_string().contains("stale") && started.elapsed() < PATIENCE => {
                    tokio::time::sleep(POLL).await;
                }
                Err(err) => panic!("{css} can be clicked: {err}"),
            }
        }
    }

    /// Type `text` into the first element matching `css`, once there is one.
    async fn type_into(&self, css: &str, text: impl Into<TypingData>) {
        self.driver
            .query(By::Css(css))
            .wait(PATIENCE, POLL)
            .first()
            .await
            .unwrap_or_else(|err| panic!("{css} is on the page: {err}"))
            .send_keys(text)
            .await
            .unwrap_or_else(|err| panic!("{css} takes keys: {err}"));
    }

    /// Replace the value of the first input matching `css` by `text`, as a person
    /// selecting what is there and typing over it.
    async fn set_value(&self, css: &str, text: &str) {
        let input = self
            .driver
            .query(By::Css(css))
            .wait(PATIENCE, POLL)
            .first()
            .await
            .unwrap_or_else(|err| panic!("{css} is on the page: {err}"));
        input
            .clear()
            .await
            .unwrap_or_else(|err| panic!("{css} can be cleared: {err}"));
        input
            .send_keys(text)
            .await
            .unwrap_or_else(|err| panic!("{css} takes keys: {err}"));
    }

    /// Choose the option of value `value` in the first `<select>` matching `css`, as a
    /// person picking it from the list.
    async fn choose(&self, css: &str, value: &str) {
        let element = self
            .driver
            .query(By::Css(css))
            .wait(PATIENCE, POLL)
            .first()
            .await
            .unwrap_or_else(|err| panic!("{css} is on the page: {err}"));
        SelectElement::new(&element)
            .await
            .unwrap_or_else(|err| panic!("{css} is a select: {err}"))
            .select_by_value(value)
            .await
            .unwrap_or_else(|err| panic!("{css} offers {value}: {err}"));
    }

    /// Scroll the first element matching `css` to the middle of the window (before a
    /// screenshot of it).
    async fn scroll_to(&self, css: &str) {
        let script = format!(
            "const e = document.querySelector({}); if (e) e.scrollIntoView({{block: 'center'}}); return e !== null;",
            serde_json::to_string(css).expect("a string")
        );
        self.until(&format!("{css} to scroll to"), &script).await;
    }

    /// Whether the page fits the window's width (no sideways scrolling).
    async fn fits_width(&self) -> bool {
        self.driver
            .execute(
                "return document.documentElement.scrollWidth <= window.innerWidth",
                Vec::new(),
            )
            .await
            .expect("the script runs")
            .json()
            == &Value::Bool(true)
    }
}

/// A firm with one webhook automation: a ticket per order, then a condition on the
/// order's kind that hands new orders to the least busy warehouse person and opens an
/// incident for any other kind.
fn setup() -> Value {
    json!({
        "groups": [{"name": "warehouse", "members": [
            {"name": "Eva", "capacity": 5}, {"name": "Petr", "capacity": 3}]}],
        "ticketTypes": [{"name": "order", "statuses": ["waiting-to-pack", "shipped"]}],
        "automations": [{
            "name": "Orders from the web shop",
            "trigger": {"type": "webhook", "params": [
                {"name": "kind", "path": "kind", "type": "string", "required": true},
                {"name": "orderId", "path": "data.order.id", "type": "string", "required": true}]},
            "steps": [
                {"name": "ticket", "op": "ticket/upsert",
                 "input": {"externalId": "order-{{orderId}}", "title": "Order {{orderId}}",
                           "type": "order", "status": "waiting-to-pack", "tags": ["waiting-to-pack"]}},
                {"name": "isNew", "type": "condition", "match": "all",
                 "rules": [{"field": "kind", "operator": "eq", "value": "order.created"}],
                 "then": [{"name": "assign", "op": "ticket/assign-least-busy",
                           "input": {"ticket": "{{ticket.id}}", "group": "warehouse"}}],
                 "else": [{"name": "alarm", "op": "incident/create",
                           "input": {"title": "An order of kind {{kind}} was not understood",
                                     "impact": "The order waits for a person; nothing was lost."}}]}
            ]
        }]
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_follows_a_webhook_from_the_dashboard() {
    let Some((chromedriver, chromium)) = browser_binaries() else {
        return;
    };
    let shots = output_dir("");
    let dir = tempfile::tempdir().expect("tempdir");
    let (_server, address) = serve(&dir.path().join("browser.db"));
    let base = format!("http://{address}");

    // The firm, through the API as an operator would set it up.
    let token = tenant_token(&address, "Acme");
    let (status, applied) = call(&address, "POST", "/api/apply", Some(&token), Some(setup()));
    assert_eq!(status, 200, "the setup applies: {applied}");
    let (status, automations) = call(&address, "GET", "/api/automations", Some(&token), None);
    assert_eq!(status, 200, "automations listed");
    // A connector widget over a local service, cached an hour (only the first read and
    // the Reload button may call it).
    let outside = LocalServices::start();
    let (status, widget) = call(
        &address,
        "POST",
        "/api/widgets",
        Some(&token),
        Some(
            json!({"name": "Open invoices", "op": "http/request", "service": "billing",
                    "input": {"url": format!("http://{}/count", outside.address)},
                    "path": "body.count", "ttlSec": 3600}),
        ),
    );
    assert_eq!(status, 201, "a widget: {widget}");
    let webhook_url = automations["items"][0]["webhookUrl"]
        .as_str()
        .expect("a webhook URL")
        .to_owned();
    assert!(
        webhook_url.starts_with(&format!("{base}/webhook/")),
        "the full URL with scheme and host: {webhook_url}"
    );

    let (_chromedriver, browser) = open_browser(&chromedriver, &chromium, shots).await;

    // 1. Sign-in: nothing of the tenant before it; a wrong token is refused on the page.
    browser.driver.goto(&base).await.expect("the page opens");
    browser.text_of("the sign-in form", "#signin h1").await;
    assert!(
        browser
            .driver
            .find_all(By::Css("#nav a"))
            .await
            .expect("a query")
            .is_empty(),
        "no sections before sign-in"
    );
    browser.shot("01-sign-in").await;
    let input = browser
        .driver
        .find(By::Id("token"))
        .await
        .expect("the token field");
    input
        .send_keys("ft_not_a_token" + Key::Enter)
        .await
        .expect("typed");
    let refusal = browser
        .until(
            "the refusal of a wrong token",
            "const s = document.querySelector('#signin-status'); return s && s.classList.contains('error') ? s.innerText : null;",
        )
        .await;
    assert!(
        refusal.as_str().unwrap_or_default().contains("401"),
        "the page says the token was refused: {refusal}"
    );
    browser.shot("02-sign-in-refused").await;
    let input = browser
        .driver
        .find(By::Id("token"))
        .await
        .expect("the token field");
    input.clear().await.expect("cleared");
    // The keyboard alone signs in: type, Enter.
    input
        .send_keys(token.clone() + Key::Enter)
        .await
        .expect("typed");
    browser
        .until(
            "the overview after sign-in",
            "return document.querySelector('#tiles .tile') !== null && document.querySelector('#live')?.innerText.includes('live') || null",
        )
        .await;
    let url = browser
        .driver
        .current_url()
        .await
        .expect("the URL")
        .to_string();
    assert!(!url.contains(&token), "the token is not in the URL: {url}");
    let kept = browser
        .driver
        .execute("return sessionStorage.getItem('fronta.token')", Vec::new())
        .await
        .expect("the script runs")
        .json()
        .clone();
    assert_eq!(kept, json!(token), "the token is kept in sessionStorage");
    browser.shot("03-overview").await;

    // 2. Runs, live: the webhook's run appears and finishes without a reload.
    browser.click("#nav a[href='#/runs']").await;
    browser
        .until(
            "the empty runs list",
            "return document.querySelector('#runs-list p.muted')?.innerText === 'No runs match.' || null",
        )
        .await;
    browser
        .driver
        .execute("window.__sameDocument = true", Vec::new())
        .await
        .expect("a marker");
    let webhook_path = &webhook_url[base.len()..];
    let (status, accepted) = call(
        &address,
        "POST",
        webhook_path,
        None,
        Some(json!({"kind": "order.created", "data": {"order": {"id": "5001"}}})),
    );
    assert_eq!(status, 202, "the webhook is accepted: {accepted}");
    let run_id = accepted["runId"].as_str().expect("a run id").to_owned();
    let row = format!("#runs-list tr[data-run='{run_id}']");
    browser
        .until(
            "the run in the list",
            &format!("return document.querySelector(\"{row}\") !== null || null"),
        )
        .await;
    browser
        .until(
            "the run completed in the list",
            &format!(
                "return document.querySelector(\"{row}\")?.dataset.status === 'completed' || null"
            ),
        )
        .await;
    let same = browser
        .driver
        .execute("return window.__sameDocument === true", Vec::new())
        .await
        .expect("the script runs")
        .json()
        .clone();
    assert_eq!(
        same,
        json!(true),
        "the run arrived through the stream, without a reload"
    );
    let tile_text = browser.text_of("the runs table", "#runs-list table").await;
    assert!(
        tile_text.contains("Orders from the web shop"),
        "the automation's name: {tile_text}"
    );
    browser.shot("04-runs-live").await;
    // Searched by the ticket it created, then by text no run has.
    browser.set_value("#filter-ticket", "TK-1").await;
    browser.type_into("#filter-ticket", Key::Enter).await;
    browser
        .until(
            "the search by ticket keeps the run",
            &format!(
                "return location.hash.includes('ticket=TK-1') && document.querySelector(\"{row}\") !== null || null"
            ),
        )
        .await;
    browser.shot("04b-runs-by-ticket").await;
    // Every run of that search, retried as one bulk action: counted, confirmed, followed.
    // None of them failed, so each is skipped, saying why, and nothing changes.
    browser.click("#bulk-retry").await;
    let question = browser
        .text_of("the bulk action's question", "#bulk-question")
        .await;
    assert!(
        question.starts_with("Retry ") && question.contains(" matching run"),
        "the question says the count: {question}"
    );
    browser.shot("04c-runs-bulk-confirm").await;
    browser.click("#bulk-go").await;
    let said = browser
        .until(
            "the bulk action ended",
            "return document.querySelector(\"#bulk-progress[data-status='completed']\") \
             ? document.querySelector('#bulk-progress').innerText : null",
        )
        .await;
    let said = said.as_str().unwrap_or_default().trim();
    assert!(
        said.starts_with("Done: ")
            && said.contains("— 0 retried, ")
            && said.contains("only failed and suppressed runs are retried"),
        "every run met, none retried, the reason shown: {said}"
    );
    browser.shot("04d-runs-bulk-done").await;
    browser.click("#bulk-close").await;
    browser.set_value("#filter-q", "no such words").await;
    browser.type_into("#filter-q", Key::Enter).await;
    browser
        .until(
            "the search by text finds nothing",
            "return document.querySelector('#runs-list p.muted')?.innerText === 'No runs match.' || null",
        )
        .await;
    // A search that matches nothing offers nothing to act on.
    browser.click("#bulk-retry").await;
    let question = browser
        .text_of("the bulk action's answer", "#bulk-question")
        .await;
    assert!(
        question.starts_with("No run matches this search: nothing to retry."),
        "{question}"
    );
    browser.click("#bulk-back").await;
    browser.click("#nav a[href='#/runs']").await;
    browser
        .until(
            "the unfiltered list again",
            &format!("return document.querySelector(\"{row}\") !== null || null"),
        )
        .await;

    // 3. The run's page: its step log, the condition with the compared values.
    browser.click(&format!("{row} a")).await;
    let steps = browser.text_of("the step log", "#step-log").await;
    for expected in [
        "ticket",
        "ticket/upsert",
        "isNew",
        "met",
        "assign",
        "ticket/assign-least-busy",
    ] {
        assert!(
            steps.contains(expected),
            "the step log names {expected}: {steps}"
        );
    }
    let compared = browser
        .text_of("the compared values", "#step-log .compared")
        .await;
    assert!(
        compared.contains("order.created"),
        "the condition line shows what was compared: {compared}"
    );
    let run_status = browser.text_of("the run's status", "#run-status").await;
    assert!(
        run_status.contains("completed"),
        "the run completed: {run_status}"
    );
    browser.shot("05-run-step-log").await;
    // Started again from its step "assign": a new run, the steps before it reused.
    browser
        .click("#step-log button[data-from-step='assign']")
        .await;
    let again = browser
        .until(
            "the new run, started from assign, completed",
            &format!(
                "return !location.hash.endsWith('{run_id}') \
                 && document.querySelector('#run-status')?.innerText.includes('completed') \
                 && document.querySelector('#step-log')?.innerText.includes('reused') \
                 ? document.querySelector('#step-log').innerText : null"
            ),
        )
        .await;
    let again = again.as_str().unwrap_or_default();
    assert!(
        again.contains("from step \"assign\"")
            && again.contains(&format!("reused from run {run_id}")),
        "the new run says from where, and reuses the steps before: {again}"
    );
    browser.shot("05b-run-retried-from-a-step").await;

    // 4. The ticket on the board, with its assignee and tags.
    browser.click("#nav a[href='#/tickets']").await;
    let card = browser
        .text_of(
            "the ticket on the board",
            "#board .column[data-status='waiting-to-pack'] a.card",
        )
        .await;
    assert!(
        card.contains("TK-1") && card.contains("Order 5001"),
        "the ticket: {card}"
    );
    assert!(card.contains("waiting-to-pack"), "its tag: {card}");
    assert!(
        card.contains("Eva") || card.contains("Petr"),
        "its assignee: {card}"
    );
    browser.shot("06-ticket-board").await;
    browser.click("#board a.card").await;
    let log = browser.text_of("the ticket's log", "#ticket table").await;
    assert!(log.contains("run"), "the log links the run: {log}");
    browser.shot("07-ticket-log").await;

    // 5. Groups: open tickets against capacity.
    browser.click("#nav a[href='#/groups']").await;
    let groups = browser.text_of("the groups", "#groups .group").await;
    assert!(
        groups.contains("1 / 5") || groups.contains("1 / 3"),
        "the assignee carries one open ticket: {groups}"
    );
    browser.shot("08-groups").await;

    // 5a. The setup from the page: a group, a member, a capacity, a rename, a refused
    // delete said as a sentence, and a ticket type.
    browser
        .type_into("#new-group input[name='name']", "returns")
        .await;
    browser.click("#new-group button[type='submit']").await;
    browser
        .until(
            "the new group",
            "return document.querySelector(\"#groups .group[data-group='returns']\") || null",
        )
        .await;
    browser
        .type_into("#add-member-returns input[name='name']", "Ida")
        .await;
    browser
        .click("#add-member-returns button[type='submit']")
        .await;
    browser
        .until(
            "Ida in returns",
            "return document.querySelector(\"#groups .group[data-group='returns'] td.load\")?.innerText === '0 / 5' || null",
        )
        .await;
    browser
        .set_value("#groups input[aria-label='Capacity of Ida']", "2")
        .await;
    browser
        .click("#groups button[data-save-capacity='Ida']")
        .await;
    browser
        .until(
            "Ida's new capacity",
            "return document.querySelector(\"#groups .group[data-group='returns'] td.load\")?.innerText === '0 / 2' || null",
        )
        .await;
    // Availability: Ida goes away (no new work, her tickets stay), then comes back.
    browser.click("#groups button[data-set-away='Ida']").await;
    browser
        .until(
            "Ida away",
            "return document.querySelector(\"#groups .group[data-group='returns'] td.availability\")?.innerText === 'Away' || null",
        )
        .await;
    browser.shot("08a-member-away").await;
    browser
        .click("#groups button[data-set-available='Ida']")
        .await;
    browser
        .until(
            "Ida available again",
            "return document.querySelector(\"#groups .group[data-group='returns'] td.availability\")?.innerText === 'Available' || null",
        )
        .await;
    browser
        .set_value("#groups input[aria-label='New name of returns']", "refunds")
        .await;
    browser.click("#groups button[data-rename='returns']").await;
    browser
        .until(
            "the renamed group",
            "return document.querySelector(\"#groups .group[data-group='refunds']\") || null",
        )
        .await;
    browser
        .click("#groups button[data-delete-group='warehouse']")
        .await;
    let refused = browser
        .until(
            "the refused delete",
            "const e = document.querySelector(\"#groups .group[data-group='warehouse'] .status.error\"); return e ? e.innerText : null;",
        )
        .await;
    let refused = refused.as_str().unwrap_or_default();
    assert!(
        refused.starts_with("Not done: ")
            && refused.contains("Orders from the web shop")
            && !refused.contains("409"),
        "a readable sentence naming what uses it: {refused}"
    );
    browser.shot("08b-groups-edited").await;
    browser.click("#nav a[href='#/ticket-types']").await;
    browser
        .type_into("#new-type input[name='name']", "return")
        .await;
    browser
        .type_into("#new-type input[name='statuses']", "new, refunded")
        .await;
    browser
        .type_into("#new-type input[name='fields']", "amount:number")
        .await;
    browser.click("#new-type button[type='submit']").await;
    let made = browser
        .text_of(
            "the new ticket type",
            "#ticket-types .ticket-type[data-type='return']",
        )
        .await;
    assert!(made.contains("return"), "{made}");
    let (status, types) = call(&address, "GET", "/api/ticket-types", Some(&token), None);
    assert_eq!(status, 200, "{types}");
    let made = types["items"]
        .as_array()
        .and_then(|items| items.iter().find(|item| item["name"] == "return"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(made["statuses"], json!(["new", "refunded"]), "{types}");
    assert_eq!(
        made["fields"],
        json!([{"name": "amount", "type": "number"}]),
        "{types}"
    );
    browser.shot("08c-ticket-types").await;

    // 5b. An automation written on the page: a problem shown at its path as it is typed,
    // saved with the keyboard, edited to version 2, its diff, a rollback to version 1.
    browser.click("#nav a[href='#/automations']").await;
    browser.click("#new-automation").await;
    let broken = json!({"name": "Returns", "trigger": {"type": "manual"},
        "steps": [{"name": "note", "op": "flow/teleport", "input": {"message": "one"}}]});
    browser.set_value("#definition", &broken.to_string()).await;
    browser
        .until(
            "the problem at its path",
            "return document.querySelector(\"#problems li[data-path^='steps[0]']\") || null",
        )
        .await;
    // The form followed the typed JSON, and marks the problem at the op's own control.
    let marked = browser
        .until(
            "the unknown op marked in the form",
            "const s = document.querySelector(\"#form select[data-path='steps[0].op']\"); \
             return s && s.value === 'flow/teleport' && s.classList.contains('invalid') \
             && s.getAttribute('aria-invalid') === 'true' \
             ? s.closest('.form-field').innerText : null;",
        )
        .await;
    assert!(
        marked
            .as_str()
            .is_some_and(|text| text.contains("unknown op")),
        "the message is under the control: {marked}"
    );
    assert_eq!(
        browser
            .driver
            .find(By::Css("#form input[data-path='name']"))
            .await
            .expect("the name field")
            .value()
            .await
            .expect("its value")
            .as_deref(),
        Some("Returns"),
        "the form shows the typed JSON's name"
    );
    browser.shot("08d-editor-problem").await;
    // JSON that does not parse leaves the form as it was, and says so.
    browser.type_into("#definition", "{").await;
    browser
        .until(
            "the form says the JSON does not parse",
            "return document.querySelector('#form-status')?.innerText.includes('does not parse') \
             && document.querySelector(\"#form input[data-path='name']\")?.value === 'Returns' || null",
        )
        .await;
    let fixed = json!({"name": "Returns", "trigger": {"type": "manual"},
        "steps": [{"name": "note", "op": "flow/log", "input": {"message": "one"}}]});
    browser.set_value("#definition", &fixed.to_string()).await;
    browser
        .until(
            "the definition checked valid",
            "return document.querySelector('#check-status')?.innerText === 'Valid.' || null",
        )
        .await;
    browser.type_into("#definition", Key::Control + "s").await;
    browser
        .until(
            "version 1 saved, on the automation's own page",
            "return (location.hash.startsWith('#/automations/') && !location.hash.endsWith('/new') \
             && document.querySelector(\"#versions tr[data-version='1']\")) || null",
        )
        .await;
    let edited = json!({"name": "Returns", "trigger": {"type": "manual"},
        "steps": [{"name": "note", "op": "flow/log", "input": {"message": "two"}}]});
    browser.set_value("#definition", &edited.to_string()).await;
    browser.click("#save").await;
    browser
        .until(
            "version 2 saved",
            "return document.querySelector('#save-status')?.innerText === 'Saved as version 2.' || null",
        )
        .await;
    browser.click("#versions button[data-diff='2']").await;
    let changes = browser.text_of("the diff", "#diff ul.changes").await;
    assert!(
        changes.contains("note.input.message")
            && changes.contains("\"one\"")
            && changes.contains("\"two\""),
        "the diff names the path, before and after: {changes}"
    );
    browser.click("#versions button[data-rollback='1']").await;
    browser
        .until(
            "the rollback to version 1 as version 3",
            "return document.querySelector(\"#versions tr[data-version='3']\")?.innerText.includes('current') || null",
        )
        .await;
    let definition = browser
        .until(
            "the editor shows version 1's definition",
            "const t = document.querySelector('#definition'); return t && t.value.includes('\"one\"') ? t.value : null;",
        )
        .await;
    assert!(
        definition
            .as_str()
            .is_some_and(|text| !text.contains("two")),
        "{definition}"
    );
    browser
        .until(
            "the form shows version 1's definition too",
            "return document.querySelector(\"#form [data-path='steps[0].input.message']\")?.value === 'one' || null",
        )
        .await;
    // Any two versions compared: 1 and 3 (its rollback) are the same, 2 and 3 are not.
    browser.click("#diff-from option[value='1']").await;
    browser.click("#diff-to option[value='3']").await;
    browser.click("#diff-show").await;
    browser
        .until(
            "versions 1 and 3 compared",
            "const d = document.querySelector('#diff'); \
             return d && d.innerText.includes('Version 1 → 3') && d.innerText.includes('No change.') || null",
        )
        .await;
    browser.click("#diff-from option[value='2']").await;
    browser.click("#diff-show").await;
    let changes = browser
        .until(
            "versions 2 and 3 compared",
            "const d = document.querySelector('#diff'); \
             return d && d.innerText.includes('Version 2 → 3') && d.querySelector('ul.changes') ? d.innerText : null",
        )
        .await;
    assert!(
        changes
            .as_str()
            .is_some_and(|text| text.contains("\"two\"") && text.contains("\"one\"")),
        "from version 2's message to version 3's: {changes}"
    );
    browser.shot("08e-editor-versions").await;

    // 5b. An incident opens while the incidents page is open (no reload).
    browser.click("#nav a[href='#/incidents']").await;
    browser
        .until(
            "the empty incidents list",
            "return document.querySelector('#incidents p.muted')?.innerText === 'No incidents.' || null",
        )
        .await;
    let (status, accepted) = call(
        &address,
        "POST",
        webhook_path,
        None,
        Some(json!({"kind": "order.garbled", "data": {"order": {"id": "5002"}}})),
    );
    assert_eq!(status, 202, "the second webhook is accepted: {accepted}");
    let incident = browser
        .text_of("the incident in the list", "#incidents tr[data-incident]")
        .await;
    assert!(
        incident.contains("order.garbled")
            && incident.contains("nothing was lost")
            && incident.contains("open"),
        "title, impact and status: {incident}"
    );
    browser.shot("09-incidents").await;

    // 5c. The tiles redraw on stream events: a third order while the overview is open.
    browser.click("#nav a[href='#/']").await;
    browser
        .until(
            "three completed runs on the tiles (one started again from a step)",
            "return document.querySelector(\"#tiles [data-key='completed'] .count\")?.innerText === '3' || null",
        )
        .await;
    let (status, accepted) = call(
        &address,
        "POST",
        webhook_path,
        None,
        Some(json!({"kind": "order.created", "data": {"order": {"id": "5003"}}})),
    );
    assert_eq!(status, 202, "the third webhook is accepted: {accepted}");
    browser
        .until(
            "four completed runs and three open tickets on the tiles",
            "return document.querySelector(\"#tiles [data-key='completed'] .count\")?.innerText === '4' \
             && document.querySelector(\"#tiles [data-key='open-tickets'] .count\")?.innerText === '3' || null",
        )
        .await;
    let same = browser
        .driver
        .execute("return window.__sameDocument === true", Vec::new())
        .await
        .expect("the script runs")
        .json()
        .clone();
    assert_eq!(same, json!(true), "the tiles were redrawn without a reload");
    browser.shot("09b-overview-live").await;

    // 5d. A connector widget: its data and age on a tile, from the server's cache; Reload
    // calls the outside service again and the age starts over.
    let tile = ".widget-list .widget";
    let shown = browser
        .text_of("the widget's data", &format!("{tile} .count"))
        .await;
    assert_eq!(shown, "41", "the first call's data");
    assert_eq!(
        outside.requests(),
        1,
        "opening the overview twice called the service once (the cache answered)"
    );
    let age_script = format!(
        "return document.querySelector(\"{tile} .age time\")?.getAttribute('datetime') ?? null"
    );
    let fetched = browser
        .until("the data's age on the tile", &age_script)
        .await;
    let age_text = browser.text_of("the age", &format!("{tile} .age")).await;
    assert!(
        age_text.starts_with("fetched "),
        "the age is said: {age_text}"
    );
    browser.shot("09c-widget").await;
    browser
        .click(&format!("{tile} button[aria-label='Reload Open invoices']"))
        .await;
    browser
        .until(
            "the reloaded data",
            &format!(
                "return document.querySelector(\"{tile} .count\")?.innerText === '42' || null"
            ),
        )
        .await;
    assert_eq!(outside.requests(), 2, "Reload called the service");
    let refetched = browser.until("the new age", &age_script).await;
    assert_ne!(refetched, fetched, "the data's time moved to the reload");
    browser.shot("09d-widget-reloaded").await;

    // 6. Automations: the full webhook URL, copied to the clipboard; the help of GET.
    browser
        .driver
        .cdp()
        .send_raw(
            "Browser.grantPermissions",
            json!({"origin": base, "permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]}),
        )
        .await
        .expect("clipboard permissions");
    browser.click("#nav a[href='#/automations']").await;
    browser
        .text_of("the webhook help", "#automations .help table")
        .await;
    let shown = browser
        .driver
        .find(By::Css("#automations input.url"))
        .await
        .expect("the URL field")
        .value()
        .await
        .expect("its value");
    assert_eq!(
        shown.as_deref(),
        Some(webhook_url.as_str()),
        "the full URL is shown"
    );
    browser.click("#automations button[data-copy]").await;
    let copied = browser
        .until(
            "the copy confirmation",
            // The button's status says "Copy URL…" while the copy runs; wait for its end.
            "const s = document.querySelector('#automations .copy .status'); return s && s.innerText && !s.innerText.endsWith('…') ? s.innerText : null;",
        )
        .await;
    assert_eq!(
        copied,
        json!("Copied the URL."),
        "the page confirms the copy"
    );
    let clipboard = browser
        .driver
        .execute_async(
            "const done = arguments[arguments.length - 1]; navigator.clipboard.readText().then(done, (e) => done('refused: ' + e));",
            Vec::new(),
        )
        .await
        .expect("the clipboard is read")
        .json()
        .clone();
    assert_eq!(
        clipboard,
        json!(webhook_url),
        "the clipboard holds the whole URL"
    );
    browser.shot("10-automations").await;
    // Pause: the card says so and the webhook answers 409; Resume undoes it.
    browser.click("#automations button[data-toggle]").await;
    browser
        .until(
            "the paused badge",
            "return document.querySelector('#automations article h2 .badge')?.innerText === 'paused' || null",
        )
        .await;
    let (status, refused) = call(
        &address,
        "POST",
        webhook_path,
        None,
        Some(json!({"kind": "order.created", "data": {"order": {"id": "5004"}}})),
    );
    assert_eq!(
        status, 409,
        "a paused automation refuses webhooks: {refused}"
    );
    browser.shot("10b-automation-paused").await;
    browser.click("#automations button[data-toggle]").await;
    browser
        .until(
            "the enabled badge",
            "return document.querySelector('#automations article h2 .badge')?.innerText === 'enabled' || null",
        )
        .await;

    // 7. A failed request is said on the page.
    browser
        .driver
        .goto(format!("{base}/#/runs/no-such-run"))
        .await
        .expect("navigated");
    let error = browser
        .text_of("the error of a missing run", "#run .error")
        .await;
    assert!(
        error.contains("404") && error.contains("not_found"),
        "the page says what failed: {error}"
    );
    browser.shot("11-error").await;

    // 8. A phone: the overview and the board fit the width.
    browser
        .driver
        .set_window_rect(0, 0, 390, 844)
        .await
        .expect("a phone-sized window");
    browser
        .driver
        .goto(format!("{base}/#/"))
        .await
        .expect("navigated");
    browser
        .text_of("the tiles on a phone", "#tiles .tile")
        .await;
    assert!(
        browser.fits_width().await,
        "the overview fits a phone's width"
    );
    browser.shot("12-phone-overview").await;
    browser
        .driver
        .goto(format!("{base}/#/tickets"))
        .await
        .expect("navigated");
    browser
        .text_of("the board on a phone", "#board a.card")
        .await;
    assert!(browser.fits_width().await, "the board fits a phone's width");
    browser.shot("13-phone-board").await;
    browser
        .driver
        .set_window_rect(0, 0, 1280, 900)
        .await
        .expect("a desktop window");

    // 9. The admin: tenants and incident detail, no tenant data.
    browser.click("#signout").await;
    browser
        .text_of("the sign-in form again", "#signin h1")
        .await;
    let input = browser
        .driver
        .find(By::Id("token"))
        .await
        .expect("the token field");
    input
        .send_keys(ADMIN.to_owned() + Key::Enter)
        .await
        .expect("typed");
    let tenants = browser.text_of("the tenants", "#tenants table").await;
    assert!(
        tenants.contains("Acme"),
        "the admin sees the tenants: {tenants}"
    );
    let sections = browser.text_of("the admin's sections", "#nav").await;
    assert!(
        !sections.contains("Runs"),
        "no tenant sections for the admin: {sections}"
    );
    browser.shot("14-admin").await;
    browser.click("#nav a[href='#/incidents']").await;
    browser
        .click("#incidents article.incident details summary")
        .await;
    let detail = browser
        .text_of(
            "the incident's detail",
            "#incidents article.incident details pre",
        )
        .await;
    assert!(
        detail.contains("\"alarm\"") && detail.contains("Orders from the web shop"),
        "the admin reads the detail: {detail}"
    );
    browser.shot("15-admin-incident-detail").await;

    browser.driver.quit().await.expect("the session ends");
}

/// The firm of the seed, for a person who builds it on the page: the groups with their
/// members, and the ticket types with their statuses.
const FIRM_GROUPS: [(&str, &[&str]); 3] = [
    ("warehouse", &["Eva", "Petr", "Jana"]),
    ("shipping", &["Ota", "Iva"]),
    ("IT", &["Karel", "Lenka", "Milan"]),
];
const FIRM_TYPES: [(&str, &str); 2] = [
    ("order", "waiting-to-pack, shipped"),
    ("error", "new, solved"),
];

/// The automations the form builds, as the API must then answer them.
fn built_automations() -> [Value; 3] {
    [
        json!({
            "name": "Orders from the web shop",
            "trigger": {"type": "webhook", "params": [
                {"name": "kind", "path": "kind", "type": "string", "required": true},
                {"name": "orderId", "path": "data.order.id", "type": "string", "required": true}]},
            "steps": [{"name": "ticket", "op": "ticket/upsert",
                "input": {"externalId": "order-{{orderId}}", "title": "Order {{orderId}}",
                          "type": "order", "status": "waiting-to-pack", "tags": ["waiting-to-pack"]}}]
        }),
        json!({
            "name": "New orders to the warehouse",
            "trigger": {"type": "event", "event": "ticket.created"},
            "steps": [{"name": "isOrder", "type": "condition", "match": "all",
                "rules": [{"field": "ticket.type", "operator": "eq", "value": "order"}],
                "then": [{"name": "assign", "op": "ticket/assign-least-busy",
                          "input": {"ticket": "{{ticket.id}}", "group": "warehouse"}}],
                "else": []}]
        }),
        json!({
            "name": "Errors from the document converter",
            "trigger": {"type": "webhook", "params": [
                {"name": "message", "path": "errors.0.message", "type": "string", "required": true}]},
            "steps": [
                {"name": "ticket", "op": "ticket/upsert",
                 "input": {"externalId": "error-{{message}}", "title": "{{message}}", "type": "error"}},
                {"name": "assign", "op": "ticket/assign-least-busy",
                 "input": {"ticket": "{{ticket.id}}", "group": "IT"}},
                {"name": "alarm", "op": "incident/create",
                 "input": {"title": "The document converter failed", "impact": "{{message}}"}}
            ]
        }),
    ]
}

impl Browser {
    /// Wait until the editor's check of the definition says `Valid.`.
    async fn until_valid(&self, what: &str) {
        self.until(
            what,
            "return document.querySelector('#check-status')?.innerText === 'Valid.' || null",
        )
        .await;
    }

    /// Type `text` into the form's control at validator path `path` (over what is there).
    async fn fill(&self, path: &str, text: &str) {
        self.set_value(&format!("#form [data-path='{path}']"), text)
            .await;
    }

    /// Press Ctrl+S in the form's control at `path` and wait for the editor of the saved
    /// automation (version `version` in its list); its id.
    async fn save_with_keyboard(&self, path: &str, version: u32) -> String {
        self.type_into(&format!("#form [data-path='{path}']"), Key::Control + "s")
            .await;
        let id = self
            .until(
                &format!("version {version} saved"),
                &format!(
                    "return (location.hash.startsWith('#/automations/') && !location.hash.endsWith('/new') \
                     && document.querySelector(\"#versions tr[data-version='{version}']\") \
                     && document.querySelector('#check-status')?.innerText === 'Valid.') \
                     ? decodeURIComponent(location.hash.split('/')[2]) : null"
                ),
            )
            .await;
        id.as_str().expect("an automation id").to_owned()
    }

    /// Add a step of `kind` to the block at `path` with the block's own controls.
    async fn add_step(&self, path: &str, kind: &str) {
        self.choose(&format!("#form select[data-key='{path}#kind']"), kind)
            .await;
        self.click(&format!("#form button[data-key='{path}#add']"))
            .await;
    }

    /// Add the optional input `key` to the action at `path` and type `text` into it.
    async fn add_input(&self, path: &str, key: &str, text: &str) {
        self.choose(&format!("#form select[data-key='{path}.input#which']"), key)
            .await;
        self.click(&format!("#form button[data-key='{path}.input#add']"))
            .await;
        self.fill(&format!("{path}.input.{key}"), text).await;
    }

    /// Wait until the control at `path` is marked with a problem; the message under it.
    async fn marked(&self, path: &str) -> String {
        let value = self
            .until(
                &format!("the problem marked at {path}"),
                &format!(
                    "const c = document.querySelector(\"#form [data-path='{path}']\"); \
                     if (!c || !c.classList.contains('invalid') || c.getAttribute('aria-invalid') !== 'true') return null; \
                     const m = document.getElementById((c.getAttribute('aria-describedby') || '').split(' ')[0]); \
                     return m ? m.innerText : null;"
                ),
            )
            .await;
        value.as_str().unwrap_or_default().to_owned()
    }

    /// Wait until the control at `path` is marked with a message containing `text`.
    async fn marked_with(&self, path: &str, text: &str) -> String {
        let value = self
            .until(
                &format!("the problem {text:?} marked at {path}"),
                &format!(
                    "const c = document.querySelector(\"#form [data-path='{path}']\"); \
                     if (!c || !c.classList.contains('invalid') || c.getAttribute('aria-invalid') !== 'true') return null; \
                     const m = document.getElementById((c.getAttribute('aria-describedby') || '').split(' ')[0]); \
                     return m && m.innerText.includes({text:?}) ? m.innerText : null;"
                ),
            )
            .await;
        value.as_str().unwrap_or_default().to_owned()
    }

    /// Wait until the control at `path` carries no mark.
    async fn unmarked(&self, path: &str) {
        self.until(
            &format!("no problem left at {path}"),
            &format!(
                "const c = document.querySelector(\"#form [data-path='{path}']\"); \
                 return (c && !c.classList.contains('invalid') && !c.hasAttribute('aria-invalid')) || null;"
            ),
        )
        .await;
    }
}

/// Ask `probe` (an API read) until it answers something; that answer.
async fn until_api<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(found) = probe() {
            return found;
        }
        assert!(started.elapsed() < PATIENCE, "gave up waiting for: {what}");
        tokio::time::sleep(POLL).await;
    }
}

/// A new tenant's token, made with the admin token.
fn tenant_token(address: &str, name: &str) -> String {
    let (status, tenant) = call(
        address,
        "POST",
        "/api/admin/tenants",
        Some(ADMIN),
        Some(json!({"name": name})),
    );
    assert_eq!(status, 201, "a tenant: {tenant}");
    tenant["token"].as_str().expect("a tenant token").to_owned()
}

/// The saved definition of automation `id` through the API: name, trigger, steps.
fn saved_definition(address: &str, token: &str, id: &str) -> Value {
    let (status, automation) = call(
        address,
        "GET",
        &format!("/api/automations/{id}"),
        Some(token),
        None,
    );
    assert_eq!(status, 200, "the automation is read: {automation}");
    json!({"name": automation["name"], "trigger": automation["trigger"], "steps": automation["steps"]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_builds_the_firm_on_the_page_without_typing_json() {
    let Some((chromedriver, chromium)) = browser_binaries() else {
        return;
    };
    let shots = output_dir("editor");
    let dir = tempfile::tempdir().expect("tempdir");
    let (_server, address) = serve(&dir.path().join("editor.db"));
    let base = format!("http://{address}");
    let token = tenant_token(&address, "Fresh firm");
    let (_chromedriver, browser) = open_browser(&chromedriver, &chromium, shots).await;
    browser.driver.goto(&base).await.expect("the page opens");
    browser
        .type_into("#token", token.clone() + Key::Enter)
        .await;
    browser
        .text_of("the overview after sign-in", "#tiles .tile")
        .await;

    // 1. The groups and their members, on the Groups page.
    browser.click("#nav a[href='#/groups']").await;
    for (group, members) in FIRM_GROUPS {
        browser
            .type_into("#new-group input[name='name']", group)
            .await;
        browser.click("#new-group button[type='submit']").await;
        for (count, member) in members.iter().enumerate() {
            browser
                .type_into(&format!("#add-member-{group} input[name='name']"), *member)
                .await;
            browser
                .click(&format!("#add-member-{group} button[type='submit']"))
                .await;
            let counted = format!(
                "({} {})",
                count + 1,
                if count == 0 { "member" } else { "members" }
            );
            browser
                .until(
                    &format!("{member} in {group}"),
                    &format!(
                        "return document.querySelector(\"#groups .group[data-group='{group}'] h2\")?.innerText.includes('{counted}') || null"
                    ),
                )
                .await;
        }
    }
    browser.shot("01-groups").await;

    // 2. The ticket types and their statuses, on the Ticket types page.
    browser.click("#nav a[href='#/ticket-types']").await;
    for (name, statuses) in FIRM_TYPES {
        browser
            .type_into("#new-type input[name='name']", name)
            .await;
        browser
            .type_into("#new-type input[name='statuses']", statuses)
            .await;
        browser.click("#new-type button[type='submit']").await;
        browser
            .text_of(
                &format!("the ticket type {name}"),
                &format!("#ticket-types .ticket-type[data-type='{name}']"),
            )
            .await;
    }
    browser.shot("02-ticket-types").await;
    let (status, groups) = call(&address, "GET", "/api/groups", Some(&token), None);
    assert_eq!(status, 200, "{groups}");
    let names: Vec<&str> = groups["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|group| group["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        names,
        ["warehouse", "shipping", "IT"],
        "the groups: {groups}"
    );

    let [orders, assign, errors] = built_automations();

    // 3a. "Orders from the web shop" through the form: the starter's parameter edited,
    // a second one added, the step switched to ticket/upsert (its required input marked
    // while it is empty), optional inputs added, a list typed badly then well.
    browser.click("#nav a[href='#/automations']").await;
    browser.click("#new-automation").await;
    browser
        .until(
            "the form of the starter definition",
            "return document.querySelector(\"#form [data-path='trigger.params[0].name']\") || null",
        )
        .await;
    browser.shot("03-new-automation").await;
    browser.fill("name", "Orders from the web shop").await;
    browser.fill("trigger.params[0].name", "kind").await;
    browser.fill("trigger.params[0].path", "kind").await;
    browser
        .click("#form button[data-key='trigger.params#add']")
        .await;
    browser.fill("trigger.params[1].name", "orderId").await;
    browser
        .fill("trigger.params[1].path", "data.order.id")
        .await;
    let example = browser
        .until(
            "the example body of both parameters",
            "const e = document.querySelector('#example-body'); return e && e.innerText.includes('\"order\"') ? e.innerText : null;",
        )
        .await;
    let example: Value =
        serde_json::from_str(example.as_str().unwrap_or_default()).expect("the example is JSON");
    assert_eq!(
        example,
        json!({"kind": "kind", "data": {"order": {"id": "orderId"}}}),
        "the example body nests by path"
    );
    browser.fill("steps[0].name", "ticket").await;
    browser
        .choose("#form select[data-path='steps[0].op']", "ticket/upsert")
        .await;
    let missing = browser.marked("steps[0].input.externalId").await;
    assert!(
        missing.contains("missing input \"externalId\""),
        "the empty required input is said at its field: {missing}"
    );
    browser.scroll_to("#form [data-path='steps[0]']").await;
    browser.shot("04-required-input-marked").await;
    browser
        .fill("steps[0].input.externalId", "order-{{orderId}}")
        .await;
    browser.unmarked("steps[0].input.externalId").await;
    browser
        .add_input("steps[0]", "title", "Order {{orderId}}")
        .await;
    browser.add_input("steps[0]", "type", "order").await;
    browser
        .add_input("steps[0]", "status", "waiting-to-pack")
        .await;
    browser
        .add_input("steps[0]", "tags", "[\"waiting-to-pack\"")
        .await;
    // The server's check of the input as it was a moment ago ("tags must be an array")
    // may show first: wait for the page's own word on what was typed.
    let unparsed = browser
        .marked_with("steps[0].input.tags", "not valid JSON")
        .await;
    assert!(
        unparsed.contains("not valid JSON"),
        "a list that does not parse is said at its field: {unparsed}"
    );
    browser.shot("05-list-does-not-parse").await;
    browser
        .type_into("#form [data-path='steps[0].input.tags']", "]")
        .await;
    browser.unmarked("steps[0].input.tags").await;
    browser
        .until_valid("the orders automation checked valid")
        .await;
    browser.shot("06-orders-built").await;
    // Tested before it is saved: the example body, edited to the shop's order, and the
    // dry run's step log saying what the run would do, nothing written.
    let prefilled = browser
        .until(
            "the test body prefilled with the webhook's example",
            "const b = document.querySelector('#test-body'); return b && b.value.includes('\"order\"') ? b.value : null;",
        )
        .await;
    assert!(
        prefilled
            .as_str()
            .is_some_and(|body| body.contains("\"kind\"")),
        "the example body has the parameters' paths: {prefilled}"
    );
    browser
        .set_value(
            "#test-body",
            r#"{"kind": "order.created", "data": {"order": {"id": "5001"}}}"#,
        )
        .await;
    browser.click("#test").await;
    let said = browser
        .until(
            "the dry run says what it would do",
            "const s = document.querySelector('#test-steps'); \
             return s && s.innerText.includes('would create ticket order-5001') ? s.innerText : null;",
        )
        .await;
    assert!(
        said.as_str().is_some_and(|log| log.contains("type order")),
        "the line names what the ticket would carry: {said}"
    );
    let status = browser.text_of("the test's status", "#test-status").await;
    assert!(status.contains("Nothing was written"), "{status}");
    browser.shot("06b-orders-tested").await;
    let (status, tickets) = call(&address, "GET", "/api/tickets", Some(&token), None);
    assert_eq!(status, 200, "{tickets}");
    assert_eq!(tickets["items"], json!([]), "the test created no ticket");
    let orders_id = browser.save_with_keyboard("steps[0].input.tags", 1).await;
    assert_eq!(
        saved_definition(&address, &token, &orders_id),
        orders,
        "the saved definition is what the form built"
    );
    browser.shot("07-orders-saved").await;

    // 3b. An event automation: a condition on the ticket's type whose then-block assigns
    // the least busy warehouse person.
    browser.click("#nav a[href='#/automations']").await;
    browser.click("#new-automation").await;
    browser.fill("name", "New orders to the warehouse").await;
    browser
        .choose("#form select[data-path='trigger.type']", "event")
        .await;
    browser
        .choose("#form select[data-path='trigger.event']", "ticket.created")
        .await;
    browser
        .click("#form button[data-key='steps[0]#remove']")
        .await;
    // The condition is added with the keyboard alone: a letter picks the kind, Enter
    // presses the button, and the focus lands in the new step's name.
    browser
        .type_into("#form select[data-key='steps#kind']", "c")
        .await;
    browser
        .type_into("#form button[data-key='steps#add']", Key::Enter)
        .await;
    browser
        .until(
            "the focus in the new condition's name",
            "return document.activeElement?.dataset.path === 'steps[0].name' \
             && document.querySelector(\"#form li[data-path='steps[0]']\")?.classList.contains('kind-condition') || null",
        )
        .await;
    browser
        .driver
        .active_element()
        .await
        .expect("the focused field")
        .send_keys(Key::Control + "a")
        .await
        .expect("the name is selected");
    browser
        .driver
        .active_element()
        .await
        .expect("the focused field")
        .send_keys("isOrder")
        .await
        .expect("typed over");
    browser.fill("steps[0].rules[0].field", "ticket.type").await;
    browser
        .choose("#form select[data-path='steps[0].rules[0].operator']", "eq")
        .await;
    browser.fill("steps[0].rules[0].value", "order").await;
    browser.add_step("steps[0].then", "action").await;
    browser.fill("steps[0].then[0].name", "assign").await;
    browser
        .choose(
            "#form select[data-path='steps[0].then[0].op']",
            "ticket/assign-least-busy",
        )
        .await;
    browser
        .fill("steps[0].then[0].input.ticket", "{{ticket.id}}")
        .await;
    let nested = browser.marked("steps[0].then[0].input.group").await;
    assert!(
        nested.contains("missing input \"group\""),
        "a problem inside a then-block is said at its field: {nested}"
    );
    browser
        .scroll_to("#form [data-path='steps[0].then[0]']")
        .await;
    browser.shot("08-nested-problem-marked").await;
    browser
        .fill("steps[0].then[0].input.group", "warehouse")
        .await;
    browser
        .until_valid("the event automation checked valid")
        .await;
    browser.scroll_to("#form [data-path='steps[0]']").await;
    browser.shot("09-condition-built").await;
    let assign_id = browser
        .save_with_keyboard("steps[0].then[0].input.group", 1)
        .await;
    assert_eq!(
        saved_definition(&address, &token, &assign_id),
        assign,
        "the saved condition is what the form built"
    );

    // 3c. "Errors from the document converter": a parameter inside an array, three
    // steps, one moved up into its place.
    browser.click("#nav a[href='#/automations']").await;
    browser.click("#new-automation").await;
    browser
        .fill("name", "Errors from the document converter")
        .await;
    browser.fill("trigger.params[0].name", "message").await;
    browser
        .fill("trigger.params[0].path", "errors.0.message")
        .await;
    browser
        .until(
            "the example body with an array",
            "return document.querySelector('#example-body')?.innerText.includes('\"errors\": [') || null",
        )
        .await;
    browser.fill("steps[0].name", "ticket").await;
    browser
        .choose("#form select[data-path='steps[0].op']", "ticket/upsert")
        .await;
    browser
        .fill("steps[0].input.externalId", "error-{{message}}")
        .await;
    browser.add_input("steps[0]", "title", "{{message}}").await;
    browser.add_input("steps[0]", "type", "eror").await;
    let unknown = browser.marked("steps[0].input.type").await;
    assert!(
        unknown.contains("unknown ticket type \"eror\""),
        "an unknown ticket type is said at its field: {unknown}"
    );
    browser.fill("steps[0].input.type", "error").await;
    browser.unmarked("steps[0].input.type").await;
    browser.add_step("steps", "action").await;
    browser.fill("steps[1].name", "alarm").await;
    browser
        .choose("#form select[data-path='steps[1].op']", "incident/create")
        .await;
    browser
        .fill("steps[1].input.title", "The document converter failed")
        .await;
    browser.fill("steps[1].input.impact", "{{message}}").await;
    browser.add_step("steps", "action").await;
    browser.fill("steps[2].name", "assign").await;
    browser
        .choose(
            "#form select[data-path='steps[2].op']",
            "ticket/assign-least-busy",
        )
        .await;
    browser.fill("steps[2].input.ticket", "{{ticket.id}}").await;
    browser.fill("steps[2].input.group", "IT").await;
    browser.click("#form button[data-key='steps[2]#up']").await;
    browser
        .until(
            "the assign step moved up",
            "return document.querySelector(\"#form [data-path='steps[1].name']\")?.value === 'assign' || null",
        )
        .await;
    let focused = browser
        .driver
        .execute(
            "return document.activeElement?.dataset.key ?? null",
            Vec::new(),
        )
        .await
        .expect("the script runs")
        .json()
        .clone();
    assert_eq!(
        focused,
        json!("steps[1]#up"),
        "the focus stays on the moved step's button"
    );
    browser
        .until_valid("the errors automation checked valid")
        .await;
    browser.scroll_to("#form [data-path='steps[1]']").await;
    browser.shot("10-errors-built").await;
    let errors_id = browser.save_with_keyboard("steps[2].input.impact", 1).await;
    assert_eq!(
        saved_definition(&address, &token, &errors_id),
        errors,
        "the saved definition is what the form built"
    );

    // 3d. The other triggers as forms (not saved): a schedule with its next fire times
    // beside the cron and a cron problem at its field; a poll's fields.
    browser.click("#nav a[href='#/automations']").await;
    browser.click("#new-automation").await;
    browser
        .click("#form button[data-key='steps[0]#remove']")
        .await;
    browser
        .choose("#form select[data-path='trigger.type']", "schedule")
        .await;
    browser
        .until(
            "five fire times beside the cron",
            "return document.querySelectorAll('#schedule-beside .next-fires li').length === 5 || null",
        )
        .await;
    browser.fill("trigger.cron", "0 7 * *").await;
    let cron = browser.marked("trigger.cron").await;
    assert!(
        cron.contains("4 fields"),
        "a cron problem is said at the cron: {cron}"
    );
    browser.fill("trigger.cron", "30 6 * * MON-FRI").await;
    browser.fill("trigger.timezone", "Europe/Prague").await;
    browser.unmarked("trigger.cron").await;
    let beside = browser
        .until(
            "the describe text of the new cron",
            "const e = document.querySelector('#schedule-beside'); \
             return e && e.querySelectorAll('.next-fires li').length === 5 && !e.closest('.form-section').querySelector('.invalid') ? e.innerText : null;",
        )
        .await;
    assert!(
        beside
            .as_str()
            .is_some_and(|text| text.contains("Schedule:")),
        "the schedule is described beside its fields: {beside}"
    );
    browser.scroll_to("#form [data-path='trigger']").await;
    browser.shot("10b-schedule-trigger").await;
    browser
        .choose("#form select[data-path='trigger.type']", "poll")
        .await;
    for path in [
        "trigger.source",
        "trigger.intervalSec",
        "trigger.request",
        "trigger.items",
        "trigger.cursor",
    ] {
        browser
            .until(
                &format!("the poll's field {path}"),
                &format!("return document.querySelector(\"#form [data-path='{path}']\") || null"),
            )
            .await;
    }
    let request = browser.marked("trigger.request").await;
    assert!(
        request.contains("url"),
        "an http poll without a request is said at the request: {request}"
    );
    browser.shot("10c-poll-trigger").await;
    // A forEach with a step in its body, and a condition whose operator takes no value.
    browser.add_step("steps", "forEach").await;
    browser.fill("steps[0].items", "[\"a\", \"b\"]").await;
    browser.fill("steps[0].as", "line").await;
    browser.add_step("steps[0].steps", "action").await;
    browser
        .fill("steps[0].steps[0].input.message", "line {{line}}")
        .await;
    browser.add_step("steps", "condition").await;
    browser.fill("steps[1].rules[0].field", "_poll.items").await;
    browser
        .choose(
            "#form select[data-path='steps[1].rules[0].operator']",
            "isEmpty",
        )
        .await;
    let definition = browser
        .until(
            "the value gone with an operator that takes none",
            "return document.querySelector(\"#form [data-path='steps[1].rules[0].value']\") === null \
             && document.querySelector('#definition').value.includes('isEmpty') \
             ? document.querySelector('#definition').value : null;",
        )
        .await;
    let definition: Value = serde_json::from_str(definition.as_str().unwrap_or_default())
        .expect("the JSON the form wrote parses");
    assert_eq!(
        definition["steps"][0],
        json!({"name": "each1", "type": "forEach", "items": ["a", "b"], "as": "line",
               "steps": [{"name": "step1", "op": "flow/log", "input": {"message": "line {{line}}"}}]}),
        "the forEach the form wrote"
    );
    assert_eq!(
        definition["steps"][1]["rules"],
        json!([{"field": "_poll.items", "operator": "isEmpty"}]),
        "a rule without a value"
    );
    browser.unmarked("steps[0].steps[0].input.message").await;
    browser.scroll_to("#form [data-path='steps[0]']").await;
    browser.shot("10d-for-each").await;

    // 4. The firm works: an order through the webhook becomes a ticket that the event
    // automation hands to a warehouse person.
    let (status, automation) = call(
        &address,
        "GET",
        &format!("/api/automations/{orders_id}"),
        Some(&token),
        None,
    );
    assert_eq!(status, 200, "{automation}");
    let url = automation["webhookUrl"].as_str().expect("a webhook URL");
    let (status, accepted) = call(
        &address,
        "POST",
        &url[base.len()..],
        None,
        Some(json!({"kind": "order.created", "data": {"order": {"id": "7001"}}})),
    );
    assert_eq!(status, 202, "the order is accepted: {accepted}");
    browser.click("#nav a[href='#/tickets']").await;
    let card = browser
        .until(
            "the order's ticket assigned on the board",
            "const c = document.querySelector(\"#board .column[data-status='waiting-to-pack'] a.card\"); \
             return c && c.querySelector('.assignee:not(.muted)') ? c.innerText : null;",
        )
        .await;
    let card = card.as_str().unwrap_or_default();
    assert!(
        ["Eva", "Petr", "Jana"]
            .iter()
            .any(|member| card.contains(member)),
        "a warehouse person has the order: {card}"
    );
    browser.shot("11-order-assigned").await;
    // The webhook's run on the runs page, completed.
    let order_run = accepted["runId"].as_str().expect("a run id").to_owned();
    browser.click("#nav a[href='#/runs']").await;
    browser
        .until(
            "the order's run completed on the runs page",
            &format!(
                "return document.querySelector(\"#runs-list tr[data-run='{order_run}'][data-status='completed']\") || null"
            ),
        )
        .await;
    browser.shot("11b-order-run").await;
    // Edited in the form: version 2, its diff, and a rollback to version 1 (as version 3).
    browser
        .driver
        .goto(format!("{base}/#/automations/{orders_id}"))
        .await
        .expect("the editor opens");
    browser.until_valid("the orders automation opened").await;
    browser
        .fill("steps[0].input.title", "Web order {{orderId}}")
        .await;
    browser.save_with_keyboard("steps[0].input.title", 2).await;
    browser.click("#versions button[data-diff='2']").await;
    let changes = browser
        .text_of("the diff of version 2", "#diff ul.changes")
        .await;
    assert!(
        changes.contains("ticket.input.title")
            && changes.contains("\"Order {{orderId}}\"")
            && changes.contains("\"Web order {{orderId}}\""),
        "the diff names the field, before and after: {changes}"
    );
    browser.click("#versions button[data-rollback='1']").await;
    browser
        .until(
            "the rollback to version 1 as version 3, shown in the form",
            "return (document.querySelector(\"#versions tr[data-version='3']\")?.innerText.includes('current') \
             && document.querySelector(\"#form [data-path='steps[0].input.title']\")?.value === 'Order {{orderId}}') || null",
        )
        .await;
    assert_eq!(
        saved_definition(&address, &token, &orders_id),
        orders,
        "version 3 is version 1's definition"
    );
    browser.shot("11c-orders-rolled-back").await;
    // And an error of the document converter opens a ticket for IT and an incident.
    let (status, automation) = call(
        &address,
        "GET",
        &format!("/api/automations/{errors_id}"),
        Some(&token),
        None,
    );
    assert_eq!(status, 200, "{automation}");
    let url = automation["webhookUrl"].as_str().expect("a webhook URL");
    let (status, accepted) = call(
        &address,
        "POST",
        &url[base.len()..],
        None,
        Some(json!({"errors": [{"message": "PDF too large"}]})),
    );
    assert_eq!(status, 202, "the error is accepted: {accepted}");
    let run = until_api("the error's run completed", || {
        let (_, run) = call(
            &address,
            "GET",
            &format!(
                "/api/runs/{}",
                accepted["runId"].as_str().unwrap_or_default()
            ),
            Some(&token),
            None,
        );
        matches!(run["status"].as_str(), Some("completed" | "failed")).then_some(run)
    })
    .await;
    assert_eq!(run["status"], "completed", "the run: {run}");
    let (status, tickets) = call(
        &address,
        "GET",
        "/api/tickets?type=error",
        Some(&token),
        None,
    );
    assert_eq!(status, 200, "{tickets}");
    let ticket = &tickets["items"][0];
    assert_eq!(ticket["title"], "PDF too large", "{tickets}");
    assert!(
        ["Karel", "Lenka", "Milan"]
            .iter()
            .any(|member| ticket["assignee"]["name"] == *member),
        "an IT person has the error: {ticket}"
    );
    let (status, incidents) = call(&address, "GET", "/api/incidents", Some(&token), None);
    assert_eq!(status, 200, "{incidents}");
    assert_eq!(
        incidents["items"][0]["title"], "The document converter failed",
        "{incidents}"
    );

    // 5. A phone: the editor fits the width; the outline and the parameters stack.
    browser
        .driver
        .set_window_rect(0, 0, 390, 844)
        .await
        .expect("a phone-sized window");
    browser
        .driver
        .goto(format!("{base}/#/automations/{errors_id}"))
        .await
        .expect("navigated");
    browser.until_valid("the editor on a phone").await;
    browser
        .click("#editor .layout-switch button[data-layout='form']")
        .await;
    assert!(
        browser.fits_width().await,
        "the editor fits a phone's width"
    );
    browser.shot("12-phone-editor").await;
    browser
        .scroll_to("#form [data-path='trigger.params']")
        .await;
    let stacked = browser
        .driver
        .execute(
            "return getComputedStyle(document.querySelector(\"#form tr[data-path='trigger.params[0]']\")).display",
            Vec::new(),
        )
        .await
        .expect("the script runs")
        .json()
        .clone();
    assert_eq!(
        stacked,
        json!("block"),
        "the parameters' table stacks on a phone"
    );
    browser.shot("12b-phone-parameters").await;
    browser.scroll_to("#form [data-path='steps[1]']").await;
    assert!(
        browser.fits_width().await,
        "the outline fits a phone's width"
    );
    browser.shot("13-phone-steps").await;
    browser
        .driver
        .goto(format!("{base}/#/automations/{assign_id}"))
        .await
        .expect("navigated");
    browser.until_valid("the condition on a phone").await;
    browser
        .scroll_to("#form [data-path='steps[0].then[0]']")
        .await;
    assert!(
        browser.fits_width().await,
        "a nested block fits a phone's width"
    );
    browser.shot("14-phone-condition").await;

    browser.driver.quit().await.expect("the session ends");
}

/// The write controls on the page now, as a list of what was found (empty: none). A
/// control that writes is a button named for a write, a form that is not a filter, an
/// input, select or text area outside a filter that can be typed in, or a link to the
/// editor.
const WRITE_CONTROLS: &str = r##"
const found = [];
const writes = /^(Pause|Resume|Retry|Cancel|Resolve|Save|Delete|Rename|Remove|Create|Add|Reload|Test|Roll back|Mark|Run again|Start it|Make|Revoke|Stop)/;
for (const b of document.querySelectorAll('main button')) {
  if (writes.test(b.innerText.trim())) found.push('button: ' + b.innerText.trim());
}
for (const f of document.querySelectorAll('main form:not([role=search])')) found.push('form#' + f.id);
for (const i of document.querySelectorAll('main input:not([readonly]), main textarea, main select')) {
  if (!i.closest('form[role=search]')) found.push('control: ' + i.outerHTML.slice(0, 80));
}
for (const a of document.querySelectorAll('main a[href="#/automations/new"], main a[data-edit], #bulk')) {
  found.push('link: ' + a.outerHTML.slice(0, 80));
}
return found;
"##;

/// Sign in on the page with `token` (from the sign-in form) and wait for the role in the header.
async fn sign_in(browser: &Browser, token: &str, role: &str) {
    browser.text_of("the sign-in form", "#signin h1").await;
    browser
        .type_into("#token", token.to_owned() + Key::Enter)
        .await;
    browser
        .until(
            &format!("the {role} role in the header"),
            &format!(
                "return document.querySelector('#who-role')?.innerText === {} || null",
                serde_json::to_string(role).expect("a string")
            ),
        )
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_what_the_role_may_do_and_the_admin_manages_tokens_and_reads_the_audit() {
    let Some((chromedriver, chromium)) = browser_binaries() else {
        return;
    };
    let shots = output_dir("roles");
    let dir = tempfile::tempdir().expect("tempdir");
    let (_server, address) = serve(&dir.path().join("roles.db"));
    let base = format!("http://{address}");

    // The firm and one run that opens an incident, through the API; a viewer token for
    // the wall display, made with the tenant's admin token.
    let admin = tenant_token(&address, "Acme");
    let (status, applied) = call(&address, "POST", "/api/apply", Some(&admin), Some(setup()));
    assert_eq!(status, 200, "the setup applies: {applied}");
    let (_, automations) = call(&address, "GET", "/api/automations", Some(&admin), None);
    let automation_id = automations["items"][0]["id"]
        .as_str()
        .expect("an automation")
        .to_owned();
    let webhook_url = automations["items"][0]["webhookUrl"]
        .as_str()
        .expect("a webhook URL")
        .to_owned();
    let (status, accepted) = call(
        &address,
        "POST",
        &webhook_url[base.len()..],
        None,
        Some(json!({"kind": "order.odd", "data": {"order": {"id": "7001"}}})),
    );
    assert_eq!(status, 202, "the webhook is accepted: {accepted}");
    let run_id = accepted["runId"].as_str().expect("a run id").to_owned();
    until_api("the run to finish", || {
        let (_, run) = call(
            &address,
            "GET",
            &format!("/api/runs/{run_id}"),
            Some(&admin),
            None,
        );
        (run["status"] == "completed").then_some(())
    })
    .await;
    let (status, viewer) = call(
        &address,
        "POST",
        "/api/tokens",
        Some(&admin),
        Some(json!({"name": "wall display", "role": "viewer"})),
    );
    assert_eq!(status, 201, "a viewer token: {viewer}");
    let viewer = viewer["token"].as_str().expect("its secret").to_owned();

    let (_chromedriver, browser) = open_browser(&chromedriver, &chromium, shots).await;
    browser.driver.goto(&base).await.expect("the page opens");

    // 1. The viewer: its name and role in the header, every page read, nothing that writes.
    sign_in(&browser, &viewer, "viewer").await;
    let header = browser.text_of("the header's token", "#who").await;
    assert!(
        header.contains("wall display") && header.contains("Acme"),
        "the header names the tenant and the token: {header}"
    );
    let sections = browser.text_of("the sections", "#nav").await;
    assert!(
        !sections.contains("Tokens") && !sections.contains("Audit"),
        "no admin sections for a viewer: {sections}"
    );
    let pages = [
        ("#/".to_owned(), "#tiles .tile".to_owned()),
        (
            "#/runs".to_owned(),
            format!("#runs-list tr[data-run='{run_id}']"),
        ),
        (format!("#/runs/{run_id}"), "#run-status".to_owned()),
        (
            "#/incidents".to_owned(),
            "#incidents tr[data-incident]".to_owned(),
        ),
        (
            "#/automations".to_owned(),
            "#automations article".to_owned(),
        ),
        (
            format!("#/automations/{automation_id}"),
            "#definition".to_owned(),
        ),
        ("#/groups".to_owned(), "#groups section.group".to_owned()),
        (
            "#/ticket-types".to_owned(),
            "#ticket-types section.ticket-type".to_owned(),
        ),
        ("#/tickets".to_owned(), "#board .card".to_owned()),
    ];
    for (hash, shown) in &pages {
        let hash = hash.as_str();
        browser
            .driver
            .execute(
                &format!(
                    "location.hash = {}",
                    serde_json::to_string(hash).expect("a string")
                ),
                Vec::new(),
            )
            .await
            .expect("the page is opened");
        browser
            .until(
                &format!("{hash} for a viewer"),
                &format!(
                    "return document.querySelector({}) !== null || null",
                    serde_json::to_string(shown).expect("a string")
                ),
            )
            .await;
        let found = browser
            .driver
            .execute(WRITE_CONTROLS, Vec::new())
            .await
            .expect("the script runs")
            .json()
            .clone();
        assert_eq!(
            found,
            json!([]),
            "a viewer sees nothing that writes on {hash}"
        );
        let name = match hash {
            "#/" => "overview".to_owned(),
            other if other.starts_with("#/runs/") => "run".to_owned(),
            other if other.starts_with("#/automations/") => "automation".to_owned(),
            other => other.trim_start_matches("#/").to_owned(),
        };
        if ["overview", "run", "automations", "automation", "groups"].contains(&name.as_str()) {
            browser.shot(&format!("01-viewer-{name}")).await;
        }
        if name == "automation" {
            let note = browser
                .text_of("the read-only note", "#read-only-note")
                .await;
            assert!(note.contains("viewer"), "the reader says why: {note}");
        }
    }
    // A page of an admin, reached by its address: what it needs, no call made.
    browser
        .driver
        .execute("location.hash = '#/tokens'", Vec::new())
        .await
        .expect("the page is opened");
    let needs = browser
        .text_of("what the tokens page needs", "#needs-role")
        .await;
    assert!(
        needs.contains("admin") && needs.contains("viewer"),
        "the page says the role it needs: {needs}"
    );
    browser.shot("02-viewer-needs-admin").await;
    // Should a write be tried all the same, its 403 reads as the role it needs.
    let refused = browser
        .driver
        .execute_async(
            "const done = arguments[arguments.length - 1]; import('/assets/api.js').then((m) => m.api('POST', '/api/groups', {name: 'x'})).then(() => done('written'), (e) => done(e.describe()));",
            Vec::new(),
        )
        .await
        .expect("the call is made")
        .json()
        .clone();
    let refused = refused.as_str().unwrap_or_default();
    assert!(
        refused.contains("needs an editor token") && refused.contains("viewer token"),
        "a 403 reads as the role it needs: {refused}"
    );

    // 2. The admin: Tokens and Audit in the navigation.
    browser.click("#signout").await;
    sign_in(&browser, &admin, "admin").await;
    let sections = browser.text_of("the sections", "#nav").await;
    assert!(
        sections.contains("Tokens") && sections.contains("Audit"),
        "the admin's sections: {sections}"
    );
    browser.click("#nav a[href='#/tokens']").await;
    browser
        .text_of(
            "the wall display's row",
            "#tokens tr[data-token='wall display']",
        )
        .await;
    browser.shot("03-admin-tokens").await;
    // Make an editor token: the secret once, copyable, kept nowhere by the page.
    browser.type_into("#token-name", "night shift").await;
    browser.choose("#token-role", "editor").await;
    browser.click("#token-make").await;
    let secret = browser
        .until(
            "the new token's secret",
            "const i = document.querySelector('#new-token-secret'); return i && i.value ? i.value : null;",
        )
        .await
        .as_str()
        .expect("the secret")
        .to_owned();
    let once = browser
        .text_of("the shown-once note", "#new-token .once")
        .await;
    assert!(
        once.contains("shown only once"),
        "the box says it is shown once: {once}"
    );
    let (status, me) = call(&address, "GET", "/api/me", Some(&secret), None);
    assert_eq!(status, 200, "the shown secret is the token: {me}");
    assert_eq!(me["token"]["role"], "editor", "made as an editor");
    let stored = browser
        .driver
        .execute(
            "return JSON.stringify(sessionStorage) + JSON.stringify(localStorage) + location.href",
            Vec::new(),
        )
        .await
        .expect("the script runs")
        .json()
        .clone();
    assert!(
        !stored.as_str().unwrap_or_default().contains(&secret),
        "the page stores the secret nowhere"
    );
    browser
        .text_of(
            "the night shift's row",
            "#tokens tr[data-token='night shift']",
        )
        .await;
    browser.scroll_to("#new-token").await;
    browser.shot("04-admin-token-made").await;
    browser.click("#new-token-copy").await;
    browser
        .until(
            "the copy confirmed",
            "return document.querySelector('#new-token-copied')?.innerText === 'Copied.' || null",
        )
        .await;
    browser.click("#new-token-hide").await;
    browser
        .until(
            "the secret gone from the page",
            "return document.querySelector('#new-token-secret') === null || null",
        )
        .await;
    // Bad input: the same name again is refused beside the form, the field marked.
    browser.type_into("#token-name", "night shift").await;
    browser.click("#token-make").await;
    let refusal = browser
        .until(
            "the refusal of a taken name",
            "const s = document.querySelector('#token-form-status'); return s && s.classList.contains('error') ? s.innerText : null;",
        )
        .await;
    let refusal = refusal.as_str().unwrap_or_default();
    assert!(
        refusal.contains("name:") && refusal.contains("night shift"),
        "the refusal names the field: {refusal}"
    );
    let marked = browser
        .driver
        .execute(
            "return document.querySelector('#token-name').getAttribute('aria-invalid')",
            Vec::new(),
        )
        .await
        .expect("the script runs")
        .json()
        .clone();
    assert_eq!(marked, json!("true"), "the name field is marked");
    assert!(
        browser
            .driver
            .find_all(By::Css("#new-token-secret"))
            .await
            .expect("a query")
            .is_empty(),
        "no secret for a refused token"
    );
    browser.shot("05-admin-token-refused").await;
    // Revoke it, after a confirmation: the API refuses it at once.
    browser.click("button[data-revoke='night shift']").await;
    browser
        .text_of("the confirmation", "#tokens .confirm")
        .await;
    browser.shot("06-admin-token-revoke-confirm").await;
    browser.click("button[data-revoke-go='night shift']").await;
    browser
        .until(
            "the revoked token's row gone",
            "return document.querySelector(\"#tokens tr[data-token='night shift']\") === null || null",
        )
        .await;
    let (status, _) = call(&address, "GET", "/api/me", Some(&secret), None);
    assert_eq!(status, 401, "a revoked token is refused");
    // The tenant's last admin token is kept: its 409 is said in its row.
    browser.click("button[data-revoke='admin']").await;
    browser.click("button[data-revoke-go='admin']").await;
    let kept = browser
        .until(
            "the last admin token kept",
            "const s = document.querySelector(\"#tokens tr[data-token='admin'] .status.error\"); return s ? s.innerText : null;",
        )
        .await;
    assert!(
        kept.as_str()
            .unwrap_or_default()
            .contains("last admin token"),
        "the 409 is said: {kept}"
    );
    browser.shot("07-admin-last-admin-kept").await;

    // 3. Audit: the entries of the changes above, filtered by object.
    browser.click("#nav a[href='#/audit']").await;
    browser
        .text_of("the audit entries", "#audit tbody tr")
        .await;
    let kinds = browser
        .driver
        .execute(
            "return [...document.querySelectorAll('#audit tbody tr')].map((row) => row.dataset.object)",
            Vec::new(),
        )
        .await
        .expect("the script runs")
        .json()
        .clone();
    let kinds: Vec<&str> = kinds
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        kinds.contains(&"token") && kinds.len() > 2,
        "the token changes and the setup are in the log: {kinds:?}"
    );
    let first = browser.text_of("the newest entry", "#audit tbody tr").await;
    assert!(
        first.contains("admin") && first.contains("DELETE"),
        "the newest entry says who and what (the refused revoke wrote nothing; the revoke did): {first}"
    );
    browser.shot("08-admin-audit").await;
    browser
        .type_into("#audit-object", "token".to_owned() + Key::Enter)
        .await;
    browser
        .until(
            "only token entries",
            "const rows = [...document.querySelectorAll('#audit tbody tr')]; return location.hash.includes('object=token') && rows.length > 0 && rows.every((row) => row.dataset.object === 'token') || null",
        )
        .await;
    let rows = browser.text_of("the token entries", "#audit tbody").await;
    assert!(
        rows.contains("night shift"),
        "the token made and revoked is in the filtered log: {rows}"
    );
    browser.shot("09-admin-audit-filtered").await;
    // An entry's object is a link: only the entries of that one token.
    browser
        .click("#audit tbody tr a[data-object^='token:']")
        .await;
    let one = browser
        .until(
            "the entries of one token",
            "const rows = [...document.querySelectorAll('#audit tbody tr')]; return location.hash.includes('object=token%3A') && rows.length === 2 ? document.querySelector('#audit tbody').innerText : null",
        )
        .await;
    let one = one.as_str().unwrap_or_default();
    assert!(
        one.contains("DELETE") && one.contains("night shift"),
        "its making and its revocation: {one}"
    );
    // A day filter keeps today's entries; one of tomorrow none.
    let tomorrow = browser
        .driver
        .execute(
            "const d = new Date(); d.setDate(d.getDate() + 1); return d.getFullYear() + '-' + String(d.getMonth() + 1).padStart(2, '0') + '-' + String(d.getDate()).padStart(2, '0');",
            Vec::new(),
        )
        .await
        .expect("the script runs")
        .json()
        .clone();
    browser
        .driver
        .execute(
            &format!(
                "location.hash = '#/audit?from={}'",
                tomorrow.as_str().expect("a date")
            ),
            Vec::new(),
        )
        .await
        .expect("the page is opened");
    browser
        .until(
            "no entry from tomorrow",
            "return document.querySelector('#audit p.muted')?.innerText === 'No entry matches these filters.' || null",
        )
        .await;

    // 4. On a phone the pages fit the width.
    browser
        .driver
        .set_window_rect(0, 0, 390, 844)
        .await
        .expect("a phone-sized window");
    browser.click("#audit-clear").await;
    browser
        .text_of("the audit entries", "#audit tbody tr")
        .await;
    assert!(browser.fits_width().await, "the audit page fits a phone");
    browser.shot("10-phone-audit").await;
    browser.click("#nav a[href='#/tokens']").await;
    browser
        .text_of("the tokens", "#tokens tr[data-token='wall display']")
        .await;
    assert!(browser.fits_width().await, "the tokens page fits a phone");
    browser.shot("11-phone-tokens").await;
    browser
        .driver
        .set_window_rect(0, 0, 1280, 900)
        .await
        .expect("a desktop window");

    // 5. An editor: every write control, but neither Tokens nor Audit.
    let (status, editor) = call(
        &address,
        "POST",
        "/api/tokens",
        Some(&admin),
        Some(json!({"name": "dispatcher", "role": "editor"})),
    );
    assert_eq!(status, 201, "an editor token: {editor}");
    let editor = editor["token"].as_str().expect("its secret").to_owned();
    browser.click("#signout").await;
    sign_in(&browser, &editor, "editor").await;
    let sections = browser.text_of("the sections", "#nav").await;
    assert!(
        !sections.contains("Tokens") && !sections.contains("Audit"),
        "no admin sections for an editor: {sections}"
    );
    browser.click("#nav a[href='#/automations']").await;
    browser
        .text_of(
            "the editor's pause button",
            "#automations button[data-toggle]",
        )
        .await;
    browser
        .text_of("the new automation link", "#new-automation")
        .await;
    browser.click("#nav a[href='#/groups']").await;
    browser.text_of("the new group form", "#new-group").await;
    browser.shot("12-editor-groups").await;

    browser.driver.quit().await.expect("the session ends");
}
