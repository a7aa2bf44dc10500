//! `sockscale bench`: every model through the seed's rows, the HTTP, HTTPS and HTTP/2 sweeps
//! (with nginx when installed), the HTTP/3 sweep (every model that serves it, with Caddy when
//! found), the WebSocket echo sweep and idle WebSockets, and UDP, each measured in rounds,
//! written out as it goes.
//!
//! The run is a list of steps (a row, a sweep point, UDP). Each step is measured `rounds` times,
//! every round going through every model in turn (ABC ABC ABC, not AAA BBB CCC), so that drift
//! in the machine (another job starting, the CPU's clock) hits every model alike. Each
//! measurement is watched for what the rest of the machine did on the bench's cores; one
//! disturbed past the threshold is measured again at the end of the run, while the run's
//! re-runs last, and kept marked otherwise. Each row and point keeps its median repetition
//! whole, every repetition's figures, and the spread of each figure.

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use sockscale_server::Model;

use crate::harness::{Children, Harness, Measured, Scheme};
use crate::profile::Profile;
use crate::results::{
    median_index, spreads_of, Figures, HttpPoint, HttpWorkload, Interference, Interval, ModelResult, Repeat, Reruns,
    Results, Row, RowKind, ServerQuic, Spreads, UdpPoint, WsIdle, WsPoint, SCHEMA,
};
use crate::tables::thousands;
use crate::{caddy, nginx};

pub struct BenchConfig {
    /// The sockscale binary to run as server and load.
    pub exe: PathBuf,
    pub profile: Profile,
    pub models: Vec<Model>,
    pub out_dir: PathBuf,
    /// Pin servers to these cores and the load to the others (all cores when there is one).
    pub server_cpus: Vec<usize>,
    pub client_cpus: Vec<usize>,
    pub progress: bool,
    /// Rounds of every step (the profile's unless given).
    pub rounds: u32,
    /// Other processes' CPU on the bench's cores, in cores, past which a measurement is
    /// disturbed.
    pub disturbed_above_cores: f64,
}

impl BenchConfig {
    /// Server on core 0, load on the rest, as the benchmark scripts do.
    pub fn split_cores() -> (Vec<usize>, Vec<usize>) {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cores < 2 {
            (vec![0], vec![0])
        } else {
            (vec![0], (1..cores).collect())
        }
    }
}

/// One thing measured for every model (and nginx or Caddy, for sweep points) in each round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Row(RowKind),
    Point {
        workload: HttpWorkload,
        concurrency: u64,
    },
    /// WebSocket echo messages at this many connections.
    WsEcho {
        concurrency: u64,
    },
    /// Idle WebSockets held, pinged, their memory read.
    WsIdle,
    Udp,
}

impl Step {
    fn label(self, p: &Profile) -> String {
        match self {
            Step::Row(RowKind::Flood) => format!("flood, {} connections", thousands(p.flood_conns)),
            Step::Row(RowKind::RateLimited) => format!("rate-limited, {} connections", thousands(p.rate_conns)),
            Step::Row(RowKind::Maximum) => format!("maximum, up to {} connections", thousands(p.max_conns)),
            Step::Point { workload, concurrency } => {
                let what = match workload {
                    HttpWorkload::KeepAlive => "HTTP keep-alive",
                    HttpWorkload::NewConnection => "HTTP new connection per request",
                    HttpWorkload::TlsKeepAlive => "HTTPS keep-alive",
                    HttpWorkload::TlsFullHandshake => "HTTPS full handshake per request",
                    HttpWorkload::TlsResumed => "HTTPS resumed handshake per request",
                    HttpWorkload::H2c => "HTTP/2 h2c",
                    HttpWorkload::H2Tls => "HTTP/2 over TLS",
                    HttpWorkload::H3 => "HTTP/3 over QUIC",
                };
                format!("{what}, {} connections", thousands(concurrency))
            }
            Step::WsEcho { concurrency } => format!("WebSocket echo, {} connections", thousands(concurrency)),
            Step::WsIdle => format!("idle WebSockets, {} connections", thousands(p.ws_idle_conns)),
            Step::Udp => "UDP echo".to_owned(),
        }
    }

    /// What the step is called in a model's error.
    fn name(self) -> String {
        match self {
            Step::Row(kind) => format!("{} row", kind.label()),
            Step::Point { workload, concurrency } => {
                format!("{} sweep ({}, {concurrency} connections)", workload.sweep(), workload.connection())
            }
            Step::WsEcho { concurrency } => format!("WebSocket echo ({concurrency} connections)"),
            Step::WsIdle => "idle WebSockets".to_owned(),
            Step::Udp => "UDP".to_owned(),
        }
    }
}

/// The run's steps in order: the three rows, the HTTP, HTTPS, HTTP/2 and HTTP/3 sweeps, the
/// WebSocket echo sweep and idle WebSockets, UDP.
pub fn steps(p: &Profile) -> Vec<Step> {
    let mut steps: Vec<Step> =
        [RowKind::Flood, RowKind::RateLimited, RowKind::Maximum].into_iter().map(Step::Row).collect();
    let point = |workload, concurrency| Step::Point { workload, concurrency };
    for &c in &p.http_concurrency {
        steps.extend([point(HttpWorkload::KeepAlive, c), point(HttpWorkload::NewConnection, c)]);
    }
    for &c in &p.https_concurrency {
        steps.extend([point(HttpWorkload::TlsKeepAlive, c), point(HttpWorkload::TlsFullHandshake, c)]);
    }
    for &c in &p.h2_concurrency {
        steps.extend([point(HttpWorkload::H2c, c), point(HttpWorkload::H2Tls, c)]);
    }
    steps.extend(p.h3_concurrency.iter().map(|&c| point(HttpWorkload::H3, c)));
    steps.extend(p.ws_concurrency.iter().map(|&concurrency| Step::WsEcho { concurrency }));
    if p.ws_idle_conns > 0 {
        steps.push(Step::WsIdle);
    }
    steps.push(Step::Udp);
    steps
}

/// A server the run measures: a model, nginx for the HTTP, HTTPS and HTTP/2 sweeps, or Caddy
/// for the HTTP/3 sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Model(Model),
    Nginx,
    Caddy,
}

impl Who {
    fn name(self) -> &'static str {
        match self {
            Who::Model(m) => m.name(),
            Who::Nginx => "nginx",
            Who::Caddy => "caddy",
        }
    }

    /// Whether it takes part in `step`; false for nginx outside the TCP sweeps (the Debian
    /// nginx this bench runs has no HTTP/3), for Caddy outside the HTTP/3 sweep, and for a
    /// model without UDP or HTTP/3.
    fn measures(self, step: Step) -> bool {
        match (self, step) {
            (Who::Nginx, Step::Point { workload, .. }) => !workload.http3(),
            (Who::Caddy, Step::Point { workload, .. }) => workload.http3(),
            (Who::Nginx | Who::Caddy, _) => false,
            (Who::Model(m), Step::Udp) => m.serves_udp(),
            (Who::Model(m), Step::Point { workload: HttpWorkload::H3, .. }) => m.serves_http3(),
            (Who::Model(_), _) => true,
        }
    }
}

/// A row or point as the rounds keep it.
trait Measurable: Clone {
    fn figures(&self) -> Figures;
    fn headline(&self) -> &'static str;
    fn client_bound(&self) -> bool;
    /// Server CPU, % of one core.
    fn server_cpu(&self) -> Option<f64>;
    fn errors(&self) -> u64;
    fn intervals(&self) -> Option<Vec<Interval>> {
        None
    }
    fn keep(&mut self, repeats: Vec<Repeat>, spread: Spreads, interference: Option<Interference>);
}

impl Measurable for Row {
    fn figures(&self) -> Figures {
        Row::figures(self)
    }
    fn headline(&self) -> &'static str {
        Row::headline(self)
    }
    fn client_bound(&self) -> bool {
        self.client_bound
    }
    fn server_cpu(&self) -> Option<f64> {
        self.mean_cpu_pct()
    }
    fn errors(&self) -> u64 {
        self.errors.values().sum()
    }
    fn intervals(&self) -> Option<Vec<Interval>> {
        self.intervals.clone()
    }
    fn keep(&mut self, repeats: Vec<Repeat>, spread: Spreads, interference: Option<Interference>) {
        (self.repeats, self.spread, self.interference) = (repeats, spread, interference);
    }
}

/// A sweep point (HTTP or WebSocket echo): its own figures, CPU and errors, the same six calls.
macro_rules! measurable_point {
    ($($point:ty),*) => {$(
        impl Measurable for $point {
            fn figures(&self) -> Figures {
                <$point>::figures(self)
            }
            fn headline(&self) -> &'static str {
                <$point>::headline(self)
            }
            fn client_bound(&self) -> bool {
                self.client_bound
            }
            fn server_cpu(&self) -> Option<f64> {
                self.server_cpu_pct
            }
            fn errors(&self) -> u64 {
                self.errors
            }
            fn keep(&mut self, repeats: Vec<Repeat>, spread: Spreads, interference: Option<Interference>) {
                (self.repeats, self.spread, self.interference) = (repeats, spread, interference);
            }
        }
    )*};
}

measurable_point!(HttpPoint, WsPoint);

impl Measurable for WsIdle {
    fn figures(&self) -> Figures {
        WsIdle::figures(self)
    }
    fn headline(&self) -> &'static str {
        WsIdle::headline(self)
    }
    fn client_bound(&self) -> bool {
        self.client_bound
    }
    fn server_cpu(&self) -> Option<f64> {
        None
    }
    fn errors(&self) -> u64 {
        self.errors
    }
    fn keep(&mut self, repeats: Vec<Repeat>, spread: Spreads, interference: Option<Interference>) {
        (self.repeats, self.spread, self.interference) = (repeats, spread, interference);
    }
}

impl Measurable for UdpPoint {
    fn figures(&self) -> Figures {
        UdpPoint::figures(self)
    }
    fn headline(&self) -> &'static str {
        crate::results::figure::UDP_RECEIVED_PER_S
    }
    fn client_bound(&self) -> bool {
        false
    }
    fn server_cpu(&self) -> Option<f64> {
        None
    }
    fn errors(&self) -> u64 {
        self.lost
    }
    fn keep(&mut self, repeats: Vec<Repeat>, spread: Spreads, interference: Option<Interference>) {
        (self.repeats, self.spread, self.interference) = (repeats, spread, interference);
    }
}

/// The repetitions of one row or point of one server: each measured value with its repetition.
struct Rounds<T> {
    taken: Vec<(T, Repeat)>,
}

impl<T: Measurable> Rounds<T> {
    fn new() -> Rounds<T> {
        Rounds { taken: Vec::new() }
    }

    fn push(&mut self, round: u32, m: Measured<T>, server_cores: usize) {
        let repeat = Repeat {
            round,
            figures: m.value.figures(),
            client_bound: m.value.client_bound(),
            server_bound: m.value.server_cpu().is_some_and(|c| c >= 90.0 * server_cores as f64),
            errors: m.value.errors(),
            interference: m.interference,
            replaced: false,
            intervals: m.value.intervals(),
        };
        self.taken.push((m.value, repeat));
    }

    /// Kept repetitions disturbed past the threshold, by index.
    fn disturbed(&self) -> Vec<usize> {
        (0..self.taken.len())
            .filter(|&i| {
                let r = &self.taken[i].1;
                !r.replaced && r.interference.is_some_and(|x| x.disturbed)
            })
            .collect()
    }

    /// Take a re-run of the repetition at `i`: the less disturbed of the two is kept, the other
    /// marked replaced (and shown).
    fn rerun(&mut self, i: usize, m: Measured<T>, server_cores: usize) {
        let round = self.taken[i].1.round;
        self.push(round, m, server_cores);
        let busy = |r: &Repeat| r.interference.map_or(f64::INFINITY, |x| x.server_cores.max(x.client_cores));
        let new = self.taken.len() - 1;
        if busy(&self.taken[new].1) < busy(&self.taken[i].1) {
            self.taken[i].1.replaced = true;
        } else {
            self.taken[new].1.replaced = true;
        }
    }

    /// The median kept repetition, whole, with every repetition's figures, the spread and the
    /// worst interference; `None` when none was measured.
    fn finish(&self) -> Option<T> {
        let kept: Vec<&(T, Repeat)> = self.taken.iter().filter(|(_, r)| !r.replaced).collect();
        let headline = kept.first()?.0.headline();
        let values: Vec<f64> = kept.iter().map(|(_, r)| r.figures.get(headline).copied().unwrap_or(f64::NAN)).collect();
        let mut chosen = kept[median_index(&values)].0.clone();
        let interference = Interference::worst(kept.iter().filter_map(|(_, r)| r.interference.as_ref()));
        let mut repeats: Vec<Repeat> = self.taken.iter().map(|(_, r)| r.clone()).collect();
        repeats.sort_by_key(|r| r.round);
        let spread = spreads_of(&repeats);
        chosen.keep(repeats, spread, interference);
        Some(chosen)
    }
}

/// A step's repetitions of one server, of the kind the step measures.
enum Taken {
    Row(Rounds<Row>),
    Point(Rounds<HttpPoint>),
    WsEcho(Rounds<WsPoint>),
    WsIdle(Rounds<WsIdle>),
    Udp(Rounds<UdpPoint>),
}

impl Taken {
    fn new(step: Step) -> Taken {
        match step {
            Step::Row(_) => Taken::Row(Rounds::new()),
            Step::Point { .. } => Taken::Point(Rounds::new()),
            Step::WsEcho { .. } => Taken::WsEcho(Rounds::new()),
            Step::WsIdle => Taken::WsIdle(Rounds::new()),
            Step::Udp => Taken::Udp(Rounds::new()),
        }
    }

    fn disturbed(&self) -> Vec<usize> {
        match self {
            Taken::Row(r) => r.disturbed(),
            Taken::Point(r) => r.disturbed(),
            Taken::WsEcho(r) => r.disturbed(),
            Taken::WsIdle(r) => r.disturbed(),
            Taken::Udp(r) => r.disturbed(),
        }
    }

    fn round_of(&self, i: usize) -> u32 {
        match self {
            Taken::Row(r) => r.taken[i].1.round,
            Taken::Point(r) => r.taken[i].1.round,
            Taken::WsEcho(r) => r.taken[i].1.round,
            Taken::WsIdle(r) => r.taken[i].1.round,
            Taken::Udp(r) => r.taken[i].1.round,
        }
    }

    fn interference_of(&self, i: usize) -> Option<Interference> {
        match self {
            Taken::Row(r) => r.taken[i].1.interference,
            Taken::Point(r) => r.taken[i].1.interference,
            Taken::WsEcho(r) => r.taken[i].1.interference,
            Taken::WsIdle(r) => r.taken[i].1.interference,
            Taken::Udp(r) => r.taken[i].1.interference,
        }
    }

    /// Add one measurement (`rerun_of`: a re-run of the repetition at that index).
    fn take(&mut self, round: u32, m: Measurement, rerun_of: Option<usize>, server_cores: usize) {
        match (self, m) {
            (Taken::Row(r), Measurement::Row(m)) => match rerun_of {
                Some(i) => r.rerun(i, *m, server_cores),
                None => r.push(round, *m, server_cores),
            },
            (Taken::Point(r), Measurement::Point(m)) => match rerun_of {
                Some(i) => r.rerun(i, *m, server_cores),
                None => r.push(round, *m, server_cores),
            },
            (Taken::WsEcho(r), Measurement::WsEcho(m)) => match rerun_of {
                Some(i) => r.rerun(i, *m, server_cores),
                None => r.push(round, *m, server_cores),
            },
            (Taken::WsIdle(r), Measurement::WsIdle(m)) => match rerun_of {
                Some(i) => r.rerun(i, *m, server_cores),
                None => r.push(round, *m, server_cores),
            },
            (Taken::Udp(r), Measurement::Udp(m)) => match rerun_of {
                Some(i) => r.rerun(i, *m, server_cores),
                None => r.push(round, *m, server_cores),
            },
            // A step measures one kind; `measure` returns that kind.
            _ => {}
        }
    }

    /// Into the server's results.
    fn finish(&self, into: &mut ModelResult) {
        match self {
            Taken::Row(r) => into.rows.extend(r.finish()),
            Taken::Point(r) => into.http.extend(r.finish()),
            Taken::WsEcho(r) => into.ws.extend(r.finish()),
            Taken::WsIdle(r) => into.ws_idle = r.finish(),
            Taken::Udp(r) => into.udp = r.finish(),
        }
    }
}

/// One measurement of any step.
enum Measurement {
    Row(Box<Measured<Row>>),
    Point(Box<Measured<HttpPoint>>),
    WsEcho(Box<Measured<WsPoint>>),
    WsIdle(Box<Measured<WsIdle>>),
    Udp(Box<Measured<UdpPoint>>),
}

/// Measure `step` once for `who`: a fresh server (or nginx) for it, stopped after.
fn measure(h: &Harness<'_>, who: Who, step: Step) -> Result<Measurement, String> {
    match (who, step) {
        (Who::Model(m), Step::Row(kind)) => h.row(m.name(), kind).map(|m| Measurement::Row(Box::new(m))),
        (Who::Model(m), Step::Udp) => h.udp(m.name()).map(|m| Measurement::Udp(Box::new(m))),
        (Who::Model(m), Step::WsEcho { concurrency }) => {
            h.ws_point(m.name(), concurrency).map(|m| Measurement::WsEcho(Box::new(m)))
        }
        (Who::Model(m), Step::WsIdle) => h.ws_idle(m.name()).map(|m| Measurement::WsIdle(Box::new(m))),
        (Who::Model(m), Step::Point { workload, concurrency }) => {
            let scheme = scheme_of(h, workload)?;
            let tls: Vec<String> = match (&h.certificate, workload.tls()) {
                (Ok(files), true) => vec![
                    "--tls-cert".into(),
                    files.cert.display().to_string(),
                    "--tls-key".into(),
                    files.key.display().to_string(),
                ],
                _ => Vec::new(),
            };
            let mut extra: Vec<&str> = tls.iter().map(String::as_str).collect();
            if workload.http3() {
                // HTTP/3 over QUIC on UDP at the TCP port's number.
                extra.push("--http3");
            }
            let server = h.start_server(m.name(), "http", &extra)?;
            let point = h.http_point(server.port, Some(server.pid()), scheme, workload, concurrency);
            let counters = h.stop_server(server);
            point.map(|mut m| {
                if workload.http3() {
                    let count = |name| counters.final_counter(name);
                    m.value.server_quic = count("h3_requests").map(|h3_requests| ServerQuic {
                        h3_requests,
                        quic_handshakes: count("quic_handshakes").unwrap_or(0),
                        quic_packets_lost: count("quic_packets_lost").unwrap_or(0),
                    });
                }
                Measurement::Point(Box::new(m))
            })
        }
        (Who::Nginx, Step::Point { workload, concurrency }) => {
            let scheme = scheme_of(h, workload)?;
            let server = nginx::start(h, scheme, workload.http2())?;
            let point = h.http_point(server.port, Some(server.pid()), scheme, workload, concurrency);
            nginx::stop(h, server);
            point.map(|m| Measurement::Point(Box::new(m)))
        }
        (Who::Caddy, Step::Point { workload, concurrency }) => {
            let scheme = scheme_of(h, workload)?;
            let server = caddy::start(h)?;
            let point = h.http_point(server.port, Some(server.pid()), scheme, workload, concurrency);
            caddy::stop(h, server);
            point.map(|m| Measurement::Point(Box::new(m)))
        }
        (Who::Nginx, _) => Err("nginx serves the HTTP sweeps only".into()),
        (Who::Caddy, _) => Err("caddy serves the HTTP/3 sweep only".into()),
    }
}

/// The scheme of a workload, or why HTTPS cannot be measured.
fn scheme_of<'a>(h: &'a Harness<'_>, workload: HttpWorkload) -> Result<Scheme<'a>, String> {
    if !workload.tls() {
        return Ok(Scheme::Http);
    }
    match &h.certificate {
        Ok(files) => Ok(Scheme::Https { ca: &files.ca }),
        Err(e) => Err(format!("no certificate: {e}")),
    }
}

/// Re-runs the run may make: a tenth of its measurements, and at least three.
fn rerun_budget(measurements: usize) -> u32 {
    (measurements.div_ceil(10)).max(3) as u32
}

/// Run the bench; results are written to `out_dir` after every step, marked in progress
/// until the run ends.
pub fn run(cfg: &BenchConfig, interrupted: &AtomicBool, children: Children) -> std::io::Result<Results> {
    std::fs::create_dir_all(&cfg.out_dir)?;
    let scratch = cfg.out_dir.join(".scratch");
    std::fs::create_dir_all(&scratch)?;
    // Before the pinning below, which would make this process see one core.
    let machine = crate::machine::describe();
    // The bench's own threads (samplers, output readers) run beside the load, not on the
    // server's cores: they would disturb the server, and what the server's cores did apart
    // from the server is what the interference measures. Threads started from here inherit it.
    let _ = sockscale_sys::pin_to_cpus(&cfg.client_cpus);
    // The HTTPS points' certificate, made for this run and removed with the scratch directory.
    let certificate = make_certificate(&scratch.join("tls"));
    let harness = Harness {
        certificate,
        exe: cfg.exe.clone(),
        profile: &cfg.profile,
        server_cpus: cfg.server_cpus.clone(),
        client_cpus: cfg.client_cpus.clone(),
        interrupted,
        children,
        scratch: scratch.clone(),
        disturbed_above_cores: cfg.disturbed_above_cores,
    };
    let rounds = cfg.rounds.max(1);
    let mut results = Results {
        schema: SCHEMA,
        profile: cfg.profile.name.into(),
        started: utc_now(),
        machine,
        parameters: serde_json::to_value(&cfg.profile).unwrap_or_default(),
        planned_models: cfg.models.iter().map(|m| m.name().to_owned()).collect(),
        in_progress: true,
        rounds,
        disturbed_above_cores: Some(cfg.disturbed_above_cores),
        server_cpus: cfg.server_cpus.clone(),
        client_cpus: cfg.client_cpus.clone(),
        ..Results::default()
    };
    let mut who: Vec<Who> = Vec::new();
    for &model in &cfg.models {
        let mut result = ModelResult { model: model.name().into(), ..ModelResult::default() };
        match model.unavailable() {
            Some(reason) => result.error = Some(format!("unavailable here: {reason}")),
            None => who.push(Who::Model(model)),
        }
        results.models.push(result);
    }
    let mut peers = Peers {
        nginx: ModelResult { model: "nginx".into(), ..ModelResult::default() },
        caddy: ModelResult { model: "caddy".into(), ..ModelResult::default() },
    };
    if nginx::installed() {
        who.push(Who::Nginx);
    } else {
        peers.nginx.error = Some(nginx::NOT_INSTALLED.into());
    }
    let steps = steps(&cfg.profile);
    let h3_swept = steps.iter().any(|s| matches!(s, Step::Point { workload: HttpWorkload::H3, .. }));
    if !h3_swept {
        // No HTTP/3 sweep in this run: Caddy has nothing to serve, and no row.
    } else if caddy::find().is_some() {
        who.push(Who::Caddy);
    } else {
        peers.caddy.error = Some(caddy::NOT_FOUND.into());
    }
    let planned: usize =
        steps.iter().map(|&s| who.iter().filter(|w| w.measures(s)).count()).sum::<usize>() * rounds as usize;
    let budget = rerun_budget(planned);
    let mut reruns = Reruns { made: 0, budget };
    let shown = match (cfg.progress, std::io::stderr().is_terminal()) {
        (false, _) => Shown::Off,
        (true, true) => Shown::Bar,
        (true, false) => Shown::Lines,
    };
    let mut progress = Progress::new(shown, planned);
    for model in results.models.iter().filter(|m| m.error.is_some()) {
        progress.say(&format!("{}: skipped, {}", model.model, model.error.as_deref().unwrap_or("")));
    }
    if let Some(e) = &peers.nginx.error {
        progress.say(&format!("nginx: {e}"));
    }
    if let Some(e) = &peers.caddy.error {
        progress.say(&format!("caddy: {e}"));
    }
    if h3_swept {
        for m in who.iter().filter_map(|w| match w {
            Who::Model(m) => Some(*m),
            _ => None,
        }) {
            if let Some(why) = m.limitation(sockscale_server::Policy::Http3) {
                progress.say(&format!("{}: no HTTP/3 sweep, it cannot: {why}", m.name()));
            }
        }
    }
    // Every step's repetitions, kept to the end of the run: the re-runs come last.
    let mut measured: Vec<StepTaken> = Vec::new();
    for &step in &steps {
        let label = step.label(&cfg.profile);
        let mut taken: Vec<(Who, Taken)> =
            who.iter().filter(|w| w.measures(step)).map(|&w| (w, Taken::new(step))).collect();
        let mut failed: Vec<Who> = Vec::new();
        for round in 1..=rounds {
            for (w, t) in &mut taken {
                if failed.contains(w) {
                    progress.skip();
                    continue;
                }
                if harness.interrupted() {
                    break;
                }
                progress.begin(format!("round {round}/{rounds} · {label} · {}", w.name()));
                match measure(&harness, *w, step) {
                    Ok(m) => {
                        t.take(round, m, None, cfg.server_cpus.len());
                        progress.end(Outcome::Done);
                    }
                    Err(e) if !harness.interrupted() => {
                        progress.end(Outcome::Failed(&e));
                        failed.push(*w);
                        add_error(result_of(&mut results, &mut peers, *w), format!("{}: {e}", step.name()));
                    }
                    Err(_) => progress.end(Outcome::Interrupted),
                }
            }
        }
        measured.push(StepTaken { step, taken, failed });
        if harness.interrupted() {
            let what = format!("interrupted during the {}", step.name());
            for w in &who {
                interrupted_first(&mut result_of(&mut results, &mut peers, *w).error, what.clone());
            }
            break;
        }
        let (so_far, peers_so_far) = assemble(&results, &peers, &measured);
        save(&cfg.out_dir, &as_written(&so_far, &peers_so_far))?;
    }
    // Disturbed repetitions, measured again while the run's re-runs last, at the end of the run:
    // a passing disturbance (another job's build, a cron job) has had the rest of the run to pass,
    // where a re-run at once would most often meet it again.
    'reruns: for st in &mut measured {
        let label = st.step.label(&cfg.profile);
        for (w, t) in &mut st.taken {
            for i in t.disturbed() {
                if harness.interrupted() || reruns.made >= reruns.budget {
                    break 'reruns;
                }
                if st.failed.contains(w) {
                    break;
                }
                reruns.made += 1;
                progress.grow();
                let busy = t.interference_of(i).map_or(String::new(), |x| {
                    format!(
                        " (others used {:.2} of the server's cores, {:.2} of the load's)",
                        x.server_cores, x.client_cores
                    )
                });
                progress.begin(format!(
                    "re-run {} of at most {budget} · round {} · {label} · {}{busy}",
                    reruns.made,
                    t.round_of(i),
                    w.name()
                ));
                match measure(&harness, *w, st.step) {
                    Ok(m) => {
                        let round = t.round_of(i);
                        t.take(round, m, Some(i), cfg.server_cpus.len());
                        progress.end(Outcome::Done);
                    }
                    Err(e) if !harness.interrupted() => progress.end(Outcome::Failed(&e)),
                    Err(_) => progress.end(Outcome::Interrupted),
                }
            }
        }
    }
    if harness.interrupted()
        && results
            .models
            .iter()
            .chain([&peers.nginx, &peers.caddy])
            .all(|m| m.error.as_deref().is_none_or(|e| !e.starts_with("interrupted")))
    {
        for w in &who {
            interrupted_first(
                &mut result_of(&mut results, &mut peers, *w).error,
                "interrupted during the re-runs".into(),
            );
        }
    }
    let (mut results, peers) = assemble(&results, &peers, &measured);
    results.reruns = Some(reruns);
    results.interrupted = harness.interrupted();
    results.in_progress = false;
    results.finished = utc_now();
    let results = as_written(&results, &peers);
    save(&cfg.out_dir, &results)?;
    progress.finish(results.interrupted);
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(results)
}

/// The results as written: a server that has measured nothing yet (or never will, the run
/// having been interrupted) is left out, so the tables name it "not measured"; one that was
/// skipped or failed stays, with why.
fn as_written(results: &Results, peers: &Peers) -> Results {
    let measured = |m: &ModelResult| {
        !m.rows.is_empty()
            || !m.http.is_empty()
            || m.udp.is_some()
            || !m.ws.is_empty()
            || m.ws_idle.is_some()
            || m.error.as_deref().is_some_and(|e| !e.starts_with("interrupted"))
    };
    let mut out = results.clone();
    out.models.retain(measured);
    out.nginx = measured(&peers.nginx).then(|| peers.nginx.clone());
    out.caddy = measured(&peers.caddy).then(|| peers.caddy.clone());
    out
}

/// The peer servers' results: nginx in the TCP sweeps, Caddy in the HTTP/3 sweep.
#[derive(Clone)]
struct Peers {
    nginx: ModelResult,
    caddy: ModelResult,
}

/// One step's repetitions of every server, and the servers that failed it.
struct StepTaken {
    step: Step,
    taken: Vec<(Who, Taken)>,
    failed: Vec<Who>,
}

/// The results so far: each server's errors (in `results` and `nginx`) with the median
/// repetition of every step measured, in step order.
fn assemble(results: &Results, peers: &Peers, measured: &[StepTaken]) -> (Results, Peers) {
    let (mut results, mut peers) = (results.clone(), peers.clone());
    for st in measured {
        for (w, t) in &st.taken {
            t.finish(result_of(&mut results, &mut peers, *w));
        }
    }
    (results, peers)
}

/// The results a server's measurements go into.
fn result_of<'a>(results: &'a mut Results, peers: &'a mut Peers, who: Who) -> &'a mut ModelResult {
    match who {
        Who::Nginx => &mut peers.nginx,
        Who::Caddy => &mut peers.caddy,
        Who::Model(m) => match results.models.iter().position(|r| r.model == m.name()) {
            Some(i) => &mut results.models[i],
            // Every measured model was given a result when the run began.
            None => &mut peers.nginx,
        },
    }
}

/// A private CA and a leaf it signed for 127.0.0.1 and localhost (ECDSA P-256), written into
/// `dir` as ca.pem, cert.pem and key.pem; or why not, which the HTTPS points then report.
fn make_certificate(dir: &Path) -> Result<sockscale_tls::CertificateFiles, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let certificate = sockscale_tls::TestCertificate::generate(&["localhost".into(), "127.0.0.1".into()])
        .map_err(|e| e.to_string())?;
    certificate.write(dir).map_err(|e| e.to_string())
}

/// Say first that a result was interrupted, before whatever else went wrong.
fn interrupted_first(to: &mut Option<String>, what: String) {
    *to = Some(match to.take() {
        Some(e) => format!("{what}; {e}"),
        None => what,
    });
}

/// Add `error` to what a result already says went wrong.
fn add_error(to: &mut ModelResult, error: String) {
    match &mut to.error {
        Some(e) => {
            e.push_str("; ");
            e.push_str(&error);
        }
        None => to.error = Some(error),
    }
}

/// Write the raw JSON, the CSVs and the markdown tables, each replacing the last whole (a
/// temporary file renamed over it), so a reader or a killed run never leaves half a file.
pub fn save(dir: &Path, results: &Results) -> std::io::Result<()> {
    let json = serde_json::to_string_pretty(results).map_err(std::io::Error::other)?;
    write_atomically(&dir.join("results.json"), (json + "\n").as_bytes())?;
    write_atomically(&dir.join("rows.csv"), results.rows_csv().as_bytes())?;
    write_atomically(&dir.join("http.csv"), results.http_csv().as_bytes())?;
    write_atomically(&dir.join("ws.csv"), results.ws_csv().as_bytes())?;
    write_atomically(&dir.join("table.md"), crate::verdict::table_md(results).as_bytes())?;
    Ok(())
}

/// Write `path` whole or not at all: a temporary file in the same directory, renamed over it.
///
/// The file is readable as any file the user creates (0666 less the umask: 0644 with the
/// usual 022), like the page and charts beside it; a temporary file's own 0600 would make the
/// results the one file of a run another user cannot read.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut file = tempfile::Builder::new().permissions(std::fs::Permissions::from_mode(0o666)).tempfile_in(dir)?;
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Why the output directory cannot take a run's files.
#[derive(Debug, thiserror::Error)]
pub enum OutDirError {
    #[error("--out {0}: already holds a bench's results.json (a new run would mix its files with the old run's): choose another directory or remove it")]
    Taken(String),
    #[error("--out {path}: cannot create the directory")]
    Create { path: String, source: std::io::Error },
    #[error("--out {path}: cannot write files there")]
    Write { path: String, source: std::io::Error },
}

/// Make sure `dir` can take a run's files, before the run: a directory that cannot be written
/// must fail in a second, not after minutes of measuring.
pub fn prepare_out_dir(dir: &Path) -> Result<(), OutDirError> {
    let path = dir.display().to_string();
    if dir.join("results.json").exists() {
        return Err(OutDirError::Taken(path));
    }
    std::fs::create_dir_all(dir).map_err(|source| OutDirError::Create { path: path.clone(), source })?;
    // A probe file: permissions and read-only filesystems show up here.
    let probe = dir.join(format!(".sockscale-probe-{}", std::process::id()));
    std::fs::File::create_new(&probe).map_err(|source| OutDirError::Write { path, source })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Draw the charts and the page (see [`crate::report::render`]) into a staging directory,
/// then move each file into `dir`: every file there is whole, and an interrupted or failed
/// drawing leaves the previous files, not half-written ones.
pub fn render_report(results: &Results, dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    // "results.json" has the parent "": the current directory.
    let at = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    std::fs::create_dir_all(at)?;
    let staging = tempfile::Builder::new().prefix(".report-").tempdir_in(at)?;
    let drawn = crate::report::render(results, staging.path()).map_err(std::io::Error::other)?;
    let mut written = Vec::with_capacity(drawn.len());
    for file in drawn {
        let Some(name) = file.file_name() else { continue };
        let to = dir.join(name);
        std::fs::rename(&file, &to)?;
        written.push(to);
    }
    Ok(written)
}

/// How a step ended.
enum Outcome<'a> {
    Done,
    Failed(&'a str),
    Interrupted,
}

/// How progress is shown on stderr.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Shown {
    /// A live bar redrawn in place: stderr is a terminal.
    Bar,
    /// One plain line per step: CI logs, a pipe, a file.
    Lines,
    Off,
}

/// Progress through the run's steps: a live bar on a terminal; otherwise (CI logs, a pipe) one
/// plain line per step, begun when the step starts and ended with its outcome and time.
struct Progress {
    shown: Shown,
    done: usize,
    total: usize,
    current: Option<Instant>,
}

impl Progress {
    fn new(shown: Shown, total: usize) -> Progress {
        Progress { shown, done: 0, total, current: None }
    }

    /// "[ 3/57]", the counter padded to the width of the total.
    fn counter(&self, first: usize, last: usize) -> String {
        let width = self.total.to_string().len();
        if first == last {
            format!("[{first:>width$}/{}]", self.total)
        } else {
            format!("[{first:>width$}-{last}/{}]", self.total)
        }
    }

    fn begin(&mut self, what: String) {
        self.current = Some(Instant::now());
        let mut err = std::io::stderr().lock();
        if self.shown == Shown::Bar {
            let width = 30;
            let filled = (self.done * width / self.total.max(1)).min(width);
            let _ = write!(
                err,
                // Erase the line first: a shorter label must not leave the end of a longer one
                // (a stray ")" after "bench finished").
                "\r\x1b[2K[{}{}] {:>3}%  {what}",
                "#".repeat(filled),
                " ".repeat(width - filled),
                self.done * 100 / self.total.max(1)
            );
        } else if self.shown == Shown::Lines {
            let _ = write!(err, "{} {what} … ", self.counter(self.done + 1, self.done + 1));
        }
        let _ = err.flush();
    }

    fn end(&mut self, outcome: Outcome<'_>) {
        self.done += 1;
        let elapsed = self.current.take().map_or(Duration::ZERO, |t| t.elapsed());
        if self.shown != Shown::Lines {
            return;
        }
        let secs = elapsed.as_secs_f64();
        let line = match outcome {
            Outcome::Done => format!("done in {secs:.1} s"),
            Outcome::Failed(why) => format!("failed after {secs:.1} s: {why}"),
            Outcome::Interrupted => format!("interrupted after {secs:.1} s"),
        };
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{line}");
        let _ = err.flush();
    }

    /// Say something that is not a step (a model skipped, and why), once.
    fn say(&mut self, what: &str) {
        if self.shown == Shown::Lines {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "{what}");
            let _ = err.flush();
        }
    }

    /// Count a step that will not run: its server failed this step in an earlier round.
    fn skip(&mut self) {
        self.done += 1;
    }

    /// One more step than planned: a re-run.
    fn grow(&mut self) {
        self.total += 1;
    }

    fn finish(&self, interrupted: bool) {
        let what = if interrupted { "bench interrupted" } else { "bench finished" };
        let line = format!("{what}: {} of {} steps", self.done, self.total);
        let mut err = std::io::stderr().lock();
        if self.shown == Shown::Bar {
            let _ = writeln!(err, "\r\x1b[2K{line}");
        } else if self.shown == Shown::Lines {
            let _ = writeln!(err, "{line}");
        }
    }
}

/// The current UTC time as `YYYY-MM-DD HH:MM:SS UTC`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or(Duration::ZERO).as_secs();
    let (y, mo, d, h, mi, s) = civil(secs);
    format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02} UTC")
}

/// A timestamp for directory names: `YYYYMMDD-HHMMSS`.
pub fn stamp() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or(Duration::ZERO).as_secs();
    let (y, mo, d, h, mi, s) = civil(secs);
    format!("{y:04}{mo:02}{d:02}-{h:02}{mi:02}{s:02}")
}

/// Seconds since the epoch to a UTC calendar date and time (Howard Hinnant's algorithm).
fn civil(secs: u64) -> (i64, u64, u64, u64, u64, u64) {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097) as u64;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe as i64 + era * 400 + i64::from(m <= 2);
    (y, m, d, rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The HTTP/3 sweep: a point at each of the profile's concurrencies, measured on every
    /// model that serves HTTP/3 and by Caddy, not by nginx; the others keep theirs.
    #[test]
    fn the_http3_sweep_is_every_model_that_serves_it_and_caddy() {
        let p = Profile::named("default").expect("default");
        let h3: Vec<Step> =
            steps(&p).into_iter().filter(|s| matches!(s, Step::Point { workload, .. } if workload.http3())).collect();
        assert_eq!(h3.len(), p.h3_points());
        assert_eq!(h3[0], Step::Point { workload: HttpWorkload::H3, concurrency: 100 });
        assert_eq!(h3[0].label(&p), "HTTP/3 over QUIC, 100 connections");
        for m in Model::ALL {
            assert_eq!(Who::Model(m).measures(h3[0]), m.serves_http3(), "{m}");
        }
        assert!(Who::Caddy.measures(h3[0]) && !Who::Nginx.measures(h3[0]));
        let h2 = Step::Point { workload: HttpWorkload::H2Tls, concurrency: 100 };
        assert!(Who::Nginx.measures(h2) && !Who::Caddy.measures(h2) && !Who::Caddy.measures(Step::Udp));
    }

    #[test]
    fn civil_dates() {
        assert_eq!(civil(0), (1970, 1, 1, 0, 0, 0));
        assert_eq!(civil(1_700_000_000), (2023, 11, 14, 22, 13, 20));
        assert_eq!(civil(951_782_400), (2000, 2, 29, 0, 0, 0));
    }
}
