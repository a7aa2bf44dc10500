//! Steady state allocates nothing: once a keep-alive connection is warmed up, an echo exchange
//! and an HTTP request/response cost no heap allocation on any model.
//!
//! This binary has its own counting global allocator, so it counts every allocation of the
//! process (alloc, alloc_zeroed and realloc; frees are not counted), on every thread: the
//! server's workers, acceptors, supervisors and runtime threads as much as the client. Each
//! model is started in-process with one thread, one keep-alive connection is opened with a
//! plain std `TcpStream` and buffers allocated before the window, warmed up, and then 1,000
//! exchanges are counted. The assertion is exact: zero.
//!
//! What is excluded, and why:
//! - HTTP renders its responses once per second, for the `Date` header (and the first clone of a
//!   freshly rendered response promotes it to a shared `Bytes`, one allocation). So an HTTP
//!   window starts just after a wall-clock second turns, after a few exchanges that let the
//!   server notice the new second, and must end within that same second; a window that crosses
//!   a second boundary is thrown away and measured again (never counted as a pass). Echo has no
//!   such render, so its window is not aligned to anything.
//! - Nothing else: background threads of the models (supervisors, acceptors, tokio's workers)
//!   run during the window and are counted.
//!
//! Only one test in this binary: libtest's own threads print (and allocate) when a test ends,
//! so the models are measured one after another inside it. `STEADY_ALLOC_MODELS=uring,epoll`
//! restricts the run to some models; `STEADY_ALLOC_TRACE=1` prints a backtrace of (up to 8 of)
//! the allocations a failing window saw.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sockscale_proto::http::HttpConfig;
use sockscale_server::{Config, Model, Server, Service};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static COUNT: AtomicU64 = AtomicU64::new(0);
static TRACE: AtomicBool = AtomicBool::new(false);
static TRACES: Mutex<Vec<String>> = Mutex::new(Vec::new());
const TRACES_KEPT: usize = 8;

thread_local! {
    /// Set while this thread records a backtrace, whose own allocations are not counted.
    static TRACING: Cell<bool> = const { Cell::new(false) };
}

fn note_allocation() {
    if !COUNTING.load(Ordering::Relaxed) {
        return;
    }
    let tracing = TRACING.try_with(Cell::get).unwrap_or(true);
    if tracing {
        return;
    }
    COUNT.fetch_add(1, Ordering::Relaxed);
    if TRACE.load(Ordering::Relaxed) {
        let _ = TRACING.try_with(|t| t.set(true));
        let mut traces = TRACES.lock().unwrap_or_else(|e| e.into_inner());
        if traces.len() < TRACES_KEPT {
            let thread = std::thread::current().name().unwrap_or("?").to_string();
            traces.push(format!("thread {thread}:\n{}", std::backtrace::Backtrace::force_capture()));
        }
        drop(traces);
        let _ = TRACING.try_with(|t| t.set(false));
    }
}

// SAFETY: every call is forwarded to the system allocator unchanged; counting touches only
// atomics and a const-initialised thread local, and allocates nothing itself (a backtrace,
// when asked for, is taken with counting suspended on this thread).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: the caller's contract is passed on as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_allocation();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_allocation();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const WARM_UP: usize = 300;
const WINDOW: usize = 1000;
/// Exchanges after a second turned before an HTTP window opens: the server's first event of
/// the new second re-renders its responses.
const SETTLE: usize = 20;
/// How long after the second turned the settling exchanges start: the server reads the wall
/// clock on its own monotonic schedule, which this margin covers.
const PAST_THE_SECOND: Duration = Duration::from_millis(10);
const ATTEMPTS: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Echo,
    Http,
}

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: steady\r\n\r\n";

/// A keep-alive client whose exchanges allocate nothing: the request and the response buffer
/// exist before the window opens.
struct Client {
    stream: TcpStream,
    kind: Kind,
    request: Vec<u8>,
    response: Vec<u8>,
    /// Bytes of one whole answer.
    answer_len: usize,
}

impl Client {
    fn connect(server: &Server, kind: Kind) -> Result<Client, String> {
        let stream =
            TcpStream::connect(server.local_addr().inet().ok_or("not TCP")?).map_err(|e| format!("connect: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
        let request = match kind {
            Kind::Echo => (0..64u8).map(|i| b'a' + i % 26).collect(),
            Kind::Http => REQUEST.to_vec(),
        };
        let mut client = Client { stream, kind, request, response: vec![0; 64 << 10], answer_len: 0 };
        client.answer_len = match kind {
            Kind::Echo => client.request.len(),
            Kind::Http => client.first_http_response()?,
        };
        Ok(client)
    }

    /// Read the first response with no length known, and return its length.
    fn first_http_response(&mut self) -> Result<usize, String> {
        self.stream.write_all(&self.request).map_err(|e| format!("write: {e}"))?;
        let mut have = 0;
        loop {
            let n = self.stream.read(&mut self.response[have..]).map_err(|e| format!("read: {e}"))?;
            if n == 0 {
                return Err("the server closed the connection".into());
            }
            have += n;
            let text = String::from_utf8_lossy(&self.response[..have]).into_owned();
            let Some(head_end) = text.find("\r\n\r\n") else { continue };
            let length = text[..head_end]
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or("no Content-Length")?;
            let total = head_end + 4 + length;
            if !text.starts_with("HTTP/1.1 200 ") {
                return Err(format!("unexpected response: {}", &text[..head_end]));
            }
            if have >= total {
                return Ok(total);
            }
        }
    }

    /// One request and its whole answer. Allocates nothing unless it fails.
    fn exchange(&mut self) -> Result<(), &'static str> {
        self.stream.write_all(&self.request).map_err(|_| "write failed")?;
        let answer = &mut self.response[..self.answer_len];
        self.stream.read_exact(answer).map_err(|_| "read failed (closed or timed out)")?;
        let ok = match self.kind {
            Kind::Echo => *answer == *self.request,
            Kind::Http => answer.starts_with(b"HTTP/1.1 200 "),
        };
        if ok {
            Ok(())
        } else {
            Err("wrong answer")
        }
    }

    fn exchanges(&mut self, n: usize) -> Result<(), String> {
        for i in 0..n {
            self.exchange().map_err(|e| format!("exchange {i}: {e}"))?;
        }
        Ok(())
    }
}

fn unix_now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default()
}

/// Sleep until just after the next wall-clock second.
fn wait_for_next_second() {
    let into = unix_now().subsec_nanos();
    std::thread::sleep(Duration::from_nanos(u64::from(1_000_000_000 - into)) + PAST_THE_SECOND);
}

/// What one model did in its window.
struct Outcome {
    allocations: u64,
    traces: Vec<String>,
}

/// Count the allocations of `WINDOW` exchanges on a warmed-up connection to `model`.
fn measure(model: Model, kind: Kind) -> Result<Outcome, String> {
    let service = match kind {
        Kind::Echo => Service::Echo,
        Kind::Http => Service::Http(Arc::new(HttpConfig::default())),
    };
    let cfg =
        Config { model, threads: 1, listen: "127.0.0.1:0".parse().map_err(|_| "addr")?, service, ..Config::default() };
    let server = Server::start(cfg).map_err(|e| format!("start: {e}"))?;
    let result = (|| {
        let mut client = Client::connect(&server, kind)?;
        client.exchanges(WARM_UP)?;
        for _ in 0..ATTEMPTS {
            if kind == Kind::Http {
                wait_for_next_second();
                client.exchanges(SETTLE)?;
            }
            let second = unix_now().as_secs();
            COUNT.store(0, Ordering::SeqCst);
            COUNTING.store(true, Ordering::SeqCst);
            let window = client.exchanges(WINDOW);
            COUNTING.store(false, Ordering::SeqCst);
            let allocations = COUNT.load(Ordering::SeqCst);
            window?;
            if kind == Kind::Http && unix_now().as_secs() != second {
                // The window saw a re-render: measure again, in the next second.
                TRACES.lock().unwrap_or_else(|e| e.into_inner()).clear();
                continue;
            }
            let traces = std::mem::take(&mut *TRACES.lock().unwrap_or_else(|e| e.into_inner()));
            return Ok(Outcome { allocations, traces });
        }
        Err(format!("no window of {WINDOW} exchanges fitted within one second in {ATTEMPTS} attempts"))
    })();
    server.shutdown_handle().shutdown();
    server.wait().map_err(|e| format!("stop: {e}"))?;
    result
}

#[test]
fn steady_state_allocates_nothing() {
    TRACE.store(std::env::var_os("STEADY_ALLOC_TRACE").is_some_and(|v| v != "0"), Ordering::SeqCst);
    let only: Option<Vec<String>> =
        std::env::var("STEADY_ALLOC_MODELS").ok().map(|v| v.split(',').map(|s| s.trim().to_string()).collect());
    let mut failures = Vec::new();
    for model in Model::ALL {
        if only.as_ref().is_some_and(|only| !only.iter().any(|m| m == model.name())) {
            continue;
        }
        if let Some(reason) = model.unavailable() {
            eprintln!("{model}: skipped, unavailable here: {reason}");
            continue;
        }
        for kind in [Kind::Echo, Kind::Http] {
            let started = Instant::now();
            match measure(model, kind) {
                Ok(outcome) => {
                    eprintln!(
                        "{model} {kind:?}: {} allocations in {WINDOW} exchanges ({:?} in all)",
                        outcome.allocations,
                        started.elapsed()
                    );
                    for trace in &outcome.traces {
                        eprintln!("--- {model} {kind:?} allocation ---\n{trace}");
                    }
                    if outcome.allocations != 0 {
                        failures.push(format!("{model} {kind:?}: {} allocations", outcome.allocations));
                    }
                }
                Err(e) => failures.push(format!("{model} {kind:?}: {e}")),
            }
        }
    }
    assert!(failures.is_empty(), "steady state allocated:\n{}", failures.join("\n"));
}
