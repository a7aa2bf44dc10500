//! The answer a bench run exists to give: for each workload the seeds measure, which model(s)
//! to use on this machine, with the figure and spread behind it, ties named, and what the
//! machine limited; drawn from results.json alone (measure first, render later).
//!
//! The rules, in one place: only the run's models are candidates (nginx is shown beside, as a
//! reference). Models are ranked by the median of their repetitions; the leaders are the top
//! model and every model whose range (min–max) overlaps the top model's, so more than one
//! leader is a tie. "Ahead by" is said only when the leaders' ranges are clear of every other
//! model's. Results with one run per point have no spread: values within 1% are tied there,
//! and no lead is claimed.

use std::fmt::Write as _;

use crate::results::{figure, HttpPoint, HttpWorkload, ModelResult, Repeated, Results, Row, RowKind, Spread, WsPoint};
use crate::tables::{decimal, thousands};

/// The concurrency the sweep workloads are judged at, when measured: the seeds' own sweet spot
/// (seed 003's IOCP server peaked near 100 concurrent users).
pub const VERDICT_CONCURRENCY: u64 = 100;

/// A maximum row that held this share of the connections it attempted held them all (the
/// server's gauge is sampled ten times a second, as `Results::stopped_by` counts it).
const HELD_ALL: f64 = 0.99;

/// With one run per point there is no range: values this close (relative) are tied.
const SINGLE_RUN_TIE: f64 = 0.01;

/// The disturbed points the HTML callout names before it says "and N more".
const HTML_NAMED_POINTS: usize = 8;

/// Text lines wrap at this width.
const TEXT_WIDTH: usize = 100;

/// The workloads the verdict answers for, in the order it lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// The maximum row: connections held, then server memory per connection.
    IdleConnections,
    /// The flood row: bytes echoed per server CPU-second.
    EchoThroughput,
    /// HTTP keep-alive at the verdict concurrency: responses per server CPU-second.
    HttpKeepAlive,
    /// The rate-limited row: p99 echo latency.
    LatencyUnderLoad,
    /// HTTP, a new connection per request: responses per server CPU-second.
    ConnectionChurn,
    /// HTTPS, a new connection and a full handshake per request.
    TlsHandshakes,
    /// HTTP/2 without TLS (h2c), many streams per connection.
    Http2Streams,
    /// HTTP/2 over TLS (h2): listed only when measured.
    Http2TlsStreams,
    /// HTTP/3 over QUIC, many streams per connection: listed only when measured (results from
    /// before schema 4 have none). Caddy is its reference, as nginx is the others'.
    Http3Streams,
    /// WebSocket echo at the verdict concurrency: messages per server CPU-second. Listed only
    /// when measured (results from before schema 3 have none).
    WebSocketMessages,
    /// Idle WebSockets: server memory per idle WebSocket, of the models that held them all and
    /// whose every connection answered a ping. Listed only when measured.
    IdleWebSockets,
}

impl Workload {
    pub fn title(self) -> &'static str {
        match self {
            Workload::IdleConnections => "Many idle connections",
            Workload::EchoThroughput => "Throughput per core (echo)",
            Workload::HttpKeepAlive => "Throughput per core (HTTP keep-alive)",
            Workload::LatencyUnderLoad => "Latency under load",
            Workload::ConnectionChurn => "Connection churn",
            Workload::TlsHandshakes => "TLS handshakes",
            Workload::Http2Streams => "HTTP/2 streams",
            Workload::Http2TlsStreams => "HTTP/2 streams over TLS",
            Workload::Http3Streams => "HTTP/3 streams",
            Workload::WebSocketMessages => "WebSocket messages",
            Workload::IdleWebSockets => "Many idle WebSockets",
        }
    }

    /// The sweep workload it reads, for those from the HTTP sweeps.
    pub fn http_workload(self) -> Option<HttpWorkload> {
        match self {
            Workload::HttpKeepAlive => Some(HttpWorkload::KeepAlive),
            Workload::ConnectionChurn => Some(HttpWorkload::NewConnection),
            Workload::TlsHandshakes => Some(HttpWorkload::TlsFullHandshake),
            Workload::Http2Streams => Some(HttpWorkload::H2c),
            Workload::Http2TlsStreams => Some(HttpWorkload::H2Tls),
            Workload::Http3Streams => Some(HttpWorkload::H3),
            _ => None,
        }
    }
}

/// What a figure counts, and which way is better.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Unit {
    /// Connections the server held at its peak, of those attempted.
    ConnectionsHeld { attempted: u64 },
    /// Server resident memory per connection held, KiB.
    KibPerConnection,
    /// Bytes echoed per second of server CPU.
    BytesPerCpuSecond,
    /// HTTP responses per second of server CPU.
    ResponsesPerCpuSecond,
    /// 99th-percentile echo latency, µs.
    P99Us,
    /// WebSocket messages echoed per second of server CPU.
    MessagesPerCpuSecond,
    /// Server resident memory per idle WebSocket held, bytes.
    BytesPerIdleWebSocket,
}

impl Unit {
    pub fn higher_is_better(self) -> bool {
        !matches!(self, Unit::KibPerConnection | Unit::P99Us | Unit::BytesPerIdleWebSocket)
    }
}

/// One model's figure for a workload, with what its repetitions saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub model: String,
    pub spread: Spread,
    /// Kept repetitions the machine disturbed.
    pub disturbed: usize,
    /// Kept repetitions with the load at 90% or more of its cores.
    pub client_bound: usize,
    /// Kept repetitions with the server at 90% or more of its cores.
    pub server_bound: usize,
    /// Kept repetitions (1 for results from before repetitions).
    pub runs: usize,
    /// Whether the repetitions recorded `server_bound` (not in results from before them).
    pub server_known: bool,
}

/// How the leaders stand against the rest.
#[derive(Debug, Clone, PartialEq)]
pub enum Lead {
    /// The only candidate with this figure.
    Alone,
    /// One leader, its range clear of every other model's: `by` is its median over the next
    /// model's (the other way round when lower is better); `None` when that is not a number.
    Ahead { next: String, by: Option<f64> },
    /// Several leaders: their ranges overlap the top model's (or, on one run each, within
    /// 1%). `clear_of` when the group's ranges are clear of every other model's.
    Tie { clear_of: Option<(String, Option<f64>)> },
    /// One leader on one run each: first by its one value, but the spread was not measured.
    SpreadNotMeasured { next: String },
}

/// The candidates in order: the leaders first (by median), then the rest (by median).
#[derive(Debug, Clone, PartialEq)]
pub struct Ranking {
    pub unit: Unit,
    pub entries: Vec<Entry>,
    /// The first `leaders` entries are the leader group.
    pub leaders: usize,
    pub lead: Lead,
}

impl Ranking {
    pub fn leader_names(&self) -> Vec<&str> {
        self.entries[..self.leaders].iter().map(|e| e.model.as_str()).collect()
    }

    pub fn is_tie(&self) -> bool {
        self.leaders > 1
    }
}

/// Who ran out of cores in the leaders' runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bottleneck {
    /// How many leaders the runs are of.
    pub leaders: usize,
    pub client_bound: usize,
    pub server_bound: usize,
    pub runs: usize,
    /// The runs recorded whether the server was at its limit (not before repetitions).
    pub server_known: bool,
}

/// A workload as measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Measured {
    /// What was compared: the row or point and its load, in words.
    pub setting: String,
    /// Sweep workloads: the concurrency judged at (see [`verdict_concurrency`]).
    pub concurrency: Option<u64>,
    pub ranking: Ranking,
    /// nginx's figure, shown beside: a reference, never the model to use.
    pub reference: Option<Entry>,
    /// Candidates without this figure (failed, interrupted, or not sampled).
    pub unmeasured: Vec<String>,
    pub bottleneck: Bottleneck,
    /// The leaders' kept repetitions that the machine disturbed.
    pub disturbed: usize,
    /// What the machine limited in this workload (rows that fell short, and why).
    pub limits: Vec<String>,
    pub notes: Vec<String>,
}

/// What the seeds advise for a workload, mapped to sockscale models.
#[derive(Debug, Clone, PartialEq)]
pub struct SeedAdvice {
    /// Which seeds say it (their numbers in /work/shared/seeds).
    pub seeds: &'static str,
    /// One sentence.
    pub says: String,
    /// A short cell for the HTML table.
    pub short: String,
    /// The sockscale model standing for the seeds' pick (through Table 6-3's counterparts);
    /// `None` when the seeds name no model for this workload.
    pub pick: Option<&'static str>,
}

/// Whether this machine's leaders agree with the seeds' pick.
#[derive(Debug, Clone, PartialEq)]
pub enum Agreement {
    /// The seeds' pick is among the leaders (or tied with them).
    Agrees,
    /// Other models lead here; `detail` says more when the pick came close.
    Differs { leaders: Vec<String>, detail: Option<String> },
    /// The seeds name no model for this workload.
    NoPick,
    /// The seeds' pick was not measured for this workload in this run.
    PickNotMeasured(&'static str),
    /// The workload was not measured.
    NotMeasured,
}

/// One workload's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadVerdict {
    pub workload: Workload,
    /// `Err` says why it was not measured.
    pub measured: Result<Measured, String>,
    pub seeds: SeedAdvice,
    pub agreement: Agreement,
}

/// A row or point whose kept repetitions include a disturbed one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DisturbedPoint {
    /// "epoll flood", "tokio HTTP keep-alive at 100", ….
    pub name: String,
    /// Kept runs the machine disturbed (marked).
    pub disturbed: usize,
    pub runs: usize,
    /// Runs disturbed and measured again, the re-run kept in their place.
    pub measured_again: usize,
}

/// The whole verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// The models that were candidates (the run's models).
    pub models: Vec<String>,
    /// Rounds the run made of every row and point.
    pub rounds: u32,
    pub disturbed: Vec<DisturbedPoint>,
    /// Other processes' CPU past which a run counted as disturbed, in cores.
    pub disturbed_above_cores: Option<f64>,
    /// Re-runs of disturbed runs made, of the most allowed.
    pub reruns: Option<crate::results::Reruns>,
    pub workloads: Vec<WorkloadVerdict>,
    /// The machine's limits that bear on the verdict, in words.
    pub machine_limits: Vec<String>,
    /// Why the results are partial, when they are.
    pub partial: Option<String>,
}

/// The verdict as plain data for scripts (`sockscale report RESULTS --verdict-json`): per
/// workload the models to use, whether the numbers told them apart from the rest, and the
/// leader's figure; the disturbed points.
pub fn json(results: &Results) -> serde_json::Value {
    let v = verdict(results);
    let workloads: Vec<serde_json::Value> = v
        .workloads
        .iter()
        .map(|w| match &w.measured {
            Ok(m) => {
                let r = &m.ranking;
                let top = r.entries.first();
                serde_json::json!({
                    "workload": w.workload.title(),
                    "measured": true,
                    "use_models": r.leader_names(),
                    "tie": r.is_tie(),
                    // Told apart from every model outside the leaders by ranges that do not overlap.
                    "separated": matches!(r.lead, Lead::Ahead { .. } | Lead::Tie { clear_of: Some(_) }),
                    "figure": top.map(|e| figure_value(r.unit, &e.spread)),
                    "median": top.map(|e| e.spread.median),
                    "min": top.map(|e| e.spread.min),
                    "max": top.map(|e| e.spread.max),
                    "concurrency": m.concurrency,
                    "agreement_with_seeds": format!("{:?}", w.agreement),
                })
            }
            Err(why) => serde_json::json!({
                "workload": w.workload.title(),
                "measured": false,
                "use_models": [],
                "tie": false,
                "separated": false,
                "why_not": why,
            }),
        })
        .collect();
    serde_json::json!({
        "profile": results.profile,
        "started": results.started,
        "rounds": v.rounds,
        "disturbed_points": v.disturbed.iter().filter(|p| p.disturbed > 0).count(),
        "measured_again_points": v.disturbed.iter().filter(|p| p.disturbed == 0).count(),
        "disturbed": v.disturbed.iter().map(|p| serde_json::json!({
            "point": p.name, "disturbed_runs": p.disturbed, "runs": p.runs, "measured_again": p.measured_again,
        })).collect::<Vec<_>>(),
        "reruns": results.reruns,
        "workloads": workloads,
    })
}

/// The verdict, as data.
pub fn verdict(results: &Results) -> Verdict {
    let mut workloads = vec![
        judge(results, Workload::IdleConnections, idle_connections(results)),
        judge(results, Workload::EchoThroughput, echo_row(results, RowKind::Flood)),
        judge(results, Workload::HttpKeepAlive, http(results, HttpWorkload::KeepAlive)),
        judge(results, Workload::LatencyUnderLoad, echo_row(results, RowKind::RateLimited)),
        judge(results, Workload::ConnectionChurn, http(results, HttpWorkload::NewConnection)),
        judge(results, Workload::TlsHandshakes, http(results, HttpWorkload::TlsFullHandshake)),
        judge(results, Workload::Http2Streams, http(results, HttpWorkload::H2c)),
    ];
    // h2 over TLS is listed beside h2c only when the run measured it.
    let h2tls = http(results, HttpWorkload::H2Tls);
    if h2tls.is_ok() {
        workloads.push(judge(results, Workload::Http2TlsStreams, h2tls));
    }
    // HTTP/3 likewise: results from before schema 4 have none.
    let h3 = http(results, HttpWorkload::H3);
    if h3.is_ok() {
        workloads.push(judge(results, Workload::Http3Streams, h3));
    }
    // WebSocket is listed only when the run measured it: results from before it have none.
    let ws = ws_messages(results);
    if ws.is_ok() {
        workloads.push(judge(results, Workload::WebSocketMessages, ws));
    }
    let idle_ws = idle_websockets(results);
    if idle_ws.is_ok() {
        workloads.push(judge(results, Workload::IdleWebSockets, idle_ws));
    }
    Verdict {
        models: results.models.iter().map(|m| m.model.clone()).collect(),
        rounds: results.rounds,
        disturbed: disturbed_points(results),
        disturbed_above_cores: results.disturbed_above_cores,
        reruns: results.reruns,
        workloads,
        machine_limits: machine_limits(results),
        partial: crate::tables::partial_note(results),
    }
}

fn judge(results: &Results, workload: Workload, measured: Result<Measured, String>) -> WorkloadVerdict {
    let seeds = seed_advice(workload, &measured);
    let agreement = agreement(results, &seeds, &measured);
    WorkloadVerdict { workload, measured, seeds, agreement }
}

// ---------------------------------------------------------------------------------------------
// Ranking

/// The leader group and how it stands: see the module's rules.
pub fn rank(mut entries: Vec<Entry>, unit: Unit) -> Ranking {
    let higher = unit.higher_is_better();
    // Stable: equal medians keep the run's order of models.
    entries.sort_by(|a, b| {
        let order = a.spread.median.total_cmp(&b.spread.median);
        if higher {
            order.reverse()
        } else {
            order
        }
    });
    let Some(top) = entries.first().cloned() else {
        return Ranking { unit, entries, leaders: 0, lead: Lead::Alone };
    };
    let (mut group, rest): (Vec<Entry>, Vec<Entry>) =
        entries.into_iter().partition(|e| e.model == top.model || indistinct(&top.spread, &e.spread));
    let leaders = group.len();
    let spread_measured = group.iter().chain(&rest).all(|e| e.spread.n >= 2);
    let lead = match rest.first() {
        None if leaders == 1 => Lead::Alone,
        None => Lead::Tie { clear_of: None },
        Some(next) => {
            // The group's worst value against the best value outside it.
            let clear = if higher {
                let lowest = group.iter().map(|e| e.spread.min).fold(f64::INFINITY, f64::min);
                rest.iter().all(|e| lowest > e.spread.max)
            } else {
                let highest = group.iter().map(|e| e.spread.max).fold(f64::NEG_INFINITY, f64::max);
                rest.iter().all(|e| highest < e.spread.min)
            };
            let by = ratio(top.spread.median, next.spread.median, higher);
            // One leader is always clear of the rest (a range that does not overlap the top
            // one lies wholly on its far side); what can fail is the spread being measured.
            match (leaders, clear && spread_measured) {
                (1, true) => Lead::Ahead { next: next.model.clone(), by },
                (1, false) => Lead::SpreadNotMeasured { next: next.model.clone() },
                (_, true) => Lead::Tie { clear_of: Some((next.model.clone(), by)) },
                (_, false) => Lead::Tie { clear_of: None },
            }
        }
    };
    group.extend(rest);
    Ranking { unit, entries: group, leaders, lead }
}

/// The numbers cannot tell the two apart: their ranges overlap, or, where either is one run,
/// the values are within 1%.
fn indistinct(a: &Spread, b: &Spread) -> bool {
    if a.overlaps(b) {
        return true;
    }
    (a.n <= 1 || b.n <= 1) && (a.median - b.median).abs() <= SINGLE_RUN_TIE * a.median.abs().max(b.median.abs())
}

/// How many times better `top` is than `next`.
fn ratio(top: f64, next: f64, higher: bool) -> Option<f64> {
    let r = if higher { top / next } else { next / top };
    r.is_finite().then_some(r)
}

// ---------------------------------------------------------------------------------------------
// Gathering each workload's figures

/// One model's entry for a row or point, from its kept repetitions (or, for results from
/// before repetitions, the point itself as one run).
fn entry<R: Repeated>(model: &str, r: &R, spread: Spread, own_client_bound: bool) -> Entry {
    let kept = r.kept();
    if kept.is_empty() {
        return Entry {
            model: model.to_owned(),
            spread,
            disturbed: 0,
            client_bound: usize::from(own_client_bound),
            server_bound: 0,
            runs: 1,
            server_known: false,
        };
    }
    Entry {
        model: model.to_owned(),
        spread,
        disturbed: r.disturbed_repeats(),
        client_bound: r.client_bound_repeats(),
        server_bound: r.server_bound_repeats(),
        runs: kept.len(),
        server_known: true,
    }
}

fn row_of(m: &ModelResult, kind: RowKind) -> Option<&Row> {
    m.rows.iter().find(|r| r.kind == Some(kind))
}

/// Why a workload has no figure: `what` says what no model had.
fn missing_reason(results: &Results, what: &str) -> String {
    if results.models.is_empty() {
        return "no model was measured".into();
    }
    let mut why = what.to_owned();
    if results.interrupted || results.in_progress {
        why.push_str(" (the run was interrupted)");
    }
    why
}

/// Gather `figure_of` over the candidates, rank it, and fill in what is common to all
/// workloads: the bottleneck, the leaders' disturbed runs, nginx beside.
fn measure(
    results: &Results,
    unit: Unit,
    setting: String,
    figure_of: impl Fn(&ModelResult) -> Option<Entry>,
) -> Option<Measured> {
    let mut entries = Vec::new();
    let mut unmeasured = Vec::new();
    for m in &results.models {
        match figure_of(m) {
            Some(e) => entries.push(e),
            None => unmeasured.push(m.model.clone()),
        }
    }
    if entries.is_empty() {
        return None;
    }
    let ranking = rank(entries, unit);
    // nginx beside the TCP workloads, Caddy beside HTTP/3: each has points of its own only.
    let reference = results.peers().find_map(&figure_of);
    Some(finish(setting, ranking, reference, unmeasured))
}

fn finish(setting: String, ranking: Ranking, reference: Option<Entry>, unmeasured: Vec<String>) -> Measured {
    let leaders = &ranking.entries[..ranking.leaders];
    let bottleneck = Bottleneck {
        leaders: leaders.len(),
        client_bound: leaders.iter().map(|e| e.client_bound).sum(),
        server_bound: leaders.iter().map(|e| e.server_bound).sum(),
        runs: leaders.iter().map(|e| e.runs).sum(),
        server_known: leaders.iter().all(|e| e.server_known),
    };
    let disturbed = leaders.iter().map(|e| e.disturbed).sum();
    Measured {
        setting,
        concurrency: None,
        ranking,
        reference,
        unmeasured,
        bottleneck,
        disturbed,
        limits: Vec::new(),
        notes: Vec::new(),
    }
}

/// The flood row (bytes per server CPU-second) or the rate-limited row (p99 latency).
fn echo_row(results: &Results, kind: RowKind) -> Result<Measured, String> {
    let (name, unit, what) = match kind {
        RowKind::Flood => {
            (figure::BYTES_PER_CPU_SECOND, Unit::BytesPerCpuSecond, "no flood row with the server's CPU measured")
        }
        _ => (figure::P99_US, Unit::P99Us, "no rate-limited row with its latency timed"),
    };
    let figure_of = |m: &ModelResult| {
        let row = row_of(m, kind)?;
        let spread = row.spread_of(name)?;
        Some(entry(&m.model, row, spread, row.client_bound))
    };
    let attempted = results.models.iter().find_map(|m| row_of(m, kind)).map(|r| r.attempted);
    let setting = match kind {
        RowKind::Flood => format!(
            "the flood row ({} connections, each sending as fast as its echoes come back)",
            attempted.map_or_else(|| "?".into(), thousands)
        ),
        _ => offered_load(results, attempted),
    };
    measure(results, unit, setting, figure_of).ok_or_else(|| missing_reason(results, what))
}

/// The rate-limited row's offered load, from the run's parameters.
fn offered_load(results: &Results, attempted: Option<u64>) -> String {
    let p = &results.parameters;
    let n = |k: &str| p.get(k).and_then(serde_json::Value::as_u64);
    let conns = n("rate_conns").or(attempted);
    match (conns, n("block"), n("block_rate")) {
        (Some(c), Some(block), Some(rate)) if block > 0 => format!(
            "the rate-limited row ({} connections in blocks of {} at {} B/s each, {} B/s offered in all)",
            thousands(c),
            thousands(block),
            thousands(rate),
            thousands(c.div_ceil(block) * rate)
        ),
        (Some(c), _, _) => format!("the rate-limited row ({} connections, rate-limited in blocks)", thousands(c)),
        _ => "the rate-limited row".into(),
    }
}

/// The maximum row: connections held; those that held (nearly) all of them are ranked by
/// server memory per connection.
fn idle_connections(results: &Results) -> Result<Measured, String> {
    let mut held_entries = Vec::new();
    let mut unmeasured = Vec::new();
    let mut full: Vec<(&ModelResult, &Row)> = Vec::new();
    let mut limits = Vec::new();
    for m in &results.models {
        let Some((row, spread)) =
            row_of(m, RowKind::Maximum).and_then(|r| Some((r, r.spread_of(figure::CONNECTIONS_HELD)?)))
        else {
            unmeasured.push(m.model.clone());
            continue;
        };
        if spread.median >= HELD_ALL * row.attempted as f64 {
            full.push((m, row));
        } else {
            let why = results.stopped_by(&m.model, row).unwrap_or_else(|| unrecorded_limit(&m.model));
            limits.push(format!(
                "{} held {} of {}: stopped by {why}",
                m.model,
                thousands(spread.median.round() as u64),
                thousands(row.attempted)
            ));
        }
        held_entries.push(entry(&m.model, row, spread, row.client_bound));
    }
    if held_entries.is_empty() {
        return Err(missing_reason(results, "no maximum row with the server's count of its connections"));
    }
    let attempted = results.models.iter().find_map(|m| row_of(m, RowKind::Maximum)).map_or(0, |r| r.attempted);
    let setting = format!("the maximum row ({} connections attempted, rate-limited)", thousands(attempted));
    let held_unit = Unit::ConnectionsHeld { attempted };
    let nginx_held = || {
        let n = results.nginx.as_ref()?;
        let row = row_of(n, RowKind::Maximum)?;
        Some(entry(&n.model, row, row.spread_of(figure::CONNECTIONS_HELD)?, row.client_bound))
    };

    let memory: Vec<Entry> = full
        .iter()
        .filter_map(|(m, row)| Some(entry(&m.model, *row, memory_per_connection(row)?, row.client_bound)))
        .collect();
    let mut measured = if full.len() >= 2 && !memory.is_empty() {
        let without_memory: Vec<String> =
            full.iter().map(|(m, _)| m.model.clone()).filter(|name| !memory.iter().any(|e| &e.model == name)).collect();
        let names: Vec<&str> = full.iter().map(|(m, _)| m.model.as_str()).collect();
        let nginx = results.nginx.as_ref().and_then(|n| {
            let row = row_of(n, RowKind::Maximum)?;
            Some(entry(&n.model, row, memory_per_connection(row)?, row.client_bound))
        });
        let mut measured = finish(setting, rank(memory, Unit::KibPerConnection), nginx, unmeasured);
        measured.notes.push(format!(
            "{} held all {} (99% or more), so they are ranked by server memory per connection",
            join(&names, "and"),
            thousands(attempted)
        ));
        if !without_memory.is_empty() {
            measured.notes.push(format!(
                "server memory not measured for {}, which held all too",
                join(&without_memory.iter().map(String::as_str).collect::<Vec<_>>(), "and")
            ));
        }
        measured
    } else {
        let mut ranking = rank(held_entries, held_unit);
        if full.len() >= 2 {
            // All held every connection but none had its memory measured: equal on what was
            // measured.
            let names: Vec<&str> = full.iter().map(|(m, _)| m.model.as_str()).collect();
            let (mut group, rest): (Vec<Entry>, Vec<Entry>) =
                ranking.entries.into_iter().partition(|e| names.contains(&e.model.as_str()));
            ranking.leaders = group.len();
            group.extend(rest);
            ranking.entries = group;
            ranking.lead = Lead::Tie { clear_of: None };
        }
        let mut measured = finish(setting, ranking, nginx_held(), unmeasured);
        if let [(_, row)] = full[..] {
            if let Some(s) = memory_per_connection(row) {
                measured.notes.push(format!("its server memory: {}", figure_long(Unit::KibPerConnection, &s, 0)));
            }
        }
        measured
    };
    measured.limits = limits;
    Ok(measured)
}

/// What a row that fell short was stopped by, when the run did not record it (results from
/// before the server's limit counters): the model's own ceiling, where it has one, is named.
fn unrecorded_limit(model: &str) -> String {
    match model.parse::<sockscale_server::Model>().ok().and_then(|m| m.capabilities().ceiling) {
        Some(c) => {
            format!("a limit this run did not record ({model}'s ceiling is {} {})", c.set_by, thousands(c.descriptors))
        }
        None => "a limit this run did not record".into(),
    }
}

/// Server memory per connection held, KiB: over the kept repetitions, else the row's own.
fn memory_per_connection(row: &Row) -> Option<Spread> {
    let per_run = row.kept().into_iter().filter_map(|r| {
        let rss = r.figures.get(figure::SERVER_RSS_KIB)?;
        let held = r.figures.get(figure::CONNECTIONS_HELD).filter(|&&h| h > 0.0)?;
        Some(rss / held)
    });
    if let Some(s) = Spread::of(per_run) {
        return Some(s);
    }
    let held = row.connected_held().filter(|&h| h > 0)?;
    let rss = row.server_rss().filter(|&r| r > 0)?;
    Some(Spread::single(rss as f64 / held as f64))
}

/// The concurrency a sweep workload is judged at, of those `measured`, and how it was chosen.
pub fn verdict_concurrency(measured: &[u64]) -> Option<(u64, &'static str)> {
    if measured.contains(&VERDICT_CONCURRENCY) {
        return Some((VERDICT_CONCURRENCY, "the verdict's concurrency"));
    }
    if let Some(&below) = measured.iter().filter(|&&c| c < VERDICT_CONCURRENCY).max() {
        return Some((below, "100 was not measured; the largest below it"));
    }
    measured.iter().min().map(|&c| (c, "the smallest measured; none at or below 100"))
}

fn points(m: &ModelResult, w: HttpWorkload) -> impl Iterator<Item = &HttpPoint> {
    m.http.iter().filter(move |p| p.workload() == w)
}

/// A sweep workload at the verdict concurrency: responses per server CPU-second.
fn http(results: &Results, w: HttpWorkload) -> Result<Measured, String> {
    let mut concurrencies: Vec<u64> = results.models.iter().flat_map(|m| points(m, w)).map(|p| p.concurrency).collect();
    concurrencies.sort_unstable();
    concurrencies.dedup();
    let label = workload_label(w);
    let Some((c, chosen)) = verdict_concurrency(&concurrencies) else {
        return Err(missing_reason(results, &format!("no {label} point in this run")));
    };
    fn at(m: &ModelResult, w: HttpWorkload, c: u64) -> Option<&HttpPoint> {
        points(m, w).find(|p| p.concurrency == c)
    }
    let figure_of = |m: &ModelResult| {
        let p = at(m, w, c)?;
        Some(entry(&m.model, p, p.spread_of(figure::RESPONSES_PER_CPU_SECOND)?, p.client_bound))
    };
    let streams = results.models.iter().filter_map(|m| at(m, w, c)).find_map(|p| p.streams);
    let streams = streams.map_or_else(String::new, |s| format!(", {} streams each", thousands(s)));
    let setting = format!("the {label} points at {} connections{streams} ({chosen})", thousands(c));
    let measured = measure(results, Unit::ResponsesPerCpuSecond, setting, figure_of);
    measured.map(|m| cannot_http3(Measured { concurrency: Some(c), ..m }, w)).ok_or_else(|| {
        missing_reason(
            results,
            &format!("no {label} point at {} connections has the server's CPU measured", thousands(c)),
        )
    })
}

/// HTTP/3: a model that cannot serve it was not left unmeasured but has no part in it; it is
/// named with why instead (its capability row's reason).
fn cannot_http3(mut m: Measured, w: HttpWorkload) -> Measured {
    if !w.http3() {
        return m;
    }
    m.unmeasured.retain(|model| match Results::cannot_serve_http3(model) {
        Some(why) => {
            m.notes.push(format!("{model} cannot serve HTTP/3: {why}"));
            false
        }
        None => true,
    });
    m
}

/// The WebSocket echo points at the verdict concurrency: messages per server CPU-second.
fn ws_messages(results: &Results) -> Result<Measured, String> {
    let mut concurrencies: Vec<u64> = results.models.iter().flat_map(|m| m.ws.iter().map(|p| p.concurrency)).collect();
    concurrencies.sort_unstable();
    concurrencies.dedup();
    let Some((c, chosen)) = verdict_concurrency(&concurrencies) else {
        return Err(missing_reason(results, "no WebSocket echo point in this run"));
    };
    fn at(m: &ModelResult, c: u64) -> Option<&WsPoint> {
        m.ws.iter().find(|p| p.concurrency == c)
    }
    let figure_of = |m: &ModelResult| {
        let p = at(m, c)?;
        Some(entry(&m.model, p, p.spread_of(figure::MESSAGES_PER_CPU_SECOND)?, p.client_bound))
    };
    let msg_len = results.models.iter().find_map(|m| at(m, c)).map_or(0, |p| p.msg_len);
    let setting = format!(
        "the WebSocket echo points at {} connections, {} B messages one at a time ({chosen})",
        thousands(c),
        thousands(msg_len)
    );
    let measured = measure(results, Unit::MessagesPerCpuSecond, setting, figure_of);
    measured.map(|m| Measured { concurrency: Some(c), ..m }).ok_or_else(|| {
        missing_reason(
            results,
            &format!("no WebSocket echo point at {} connections has the server's CPU measured", thousands(c)),
        )
    })
}

/// Idle WebSockets: server bytes per idle WebSocket, ranked among the models that held (nearly)
/// all and whose every connection answered a ping; the others are named with what they fell
/// short of.
fn idle_websockets(results: &Results) -> Result<Measured, String> {
    let mut entries = Vec::new();
    let mut unmeasured = Vec::new();
    let mut limits = Vec::new();
    let mut attempted = 0;
    for m in &results.models {
        let Some(w) = m.ws_idle.as_ref() else {
            unmeasured.push(m.model.clone());
            continue;
        };
        attempted = attempted.max(w.attempted);
        let held = w.spread_of(figure::WS_IDLE_HELD).map(|s| s.median);
        match held {
            Some(h) if h >= HELD_ALL * w.attempted as f64 && w.every_connection_answered() => {
                match w.spread_of(figure::SERVER_BYTES_PER_IDLE_WS) {
                    Some(spread) => entries.push(entry(&m.model, w, spread, w.client_bound)),
                    None => unmeasured.push(m.model.clone()),
                }
            }
            Some(h) if h < HELD_ALL * w.attempted as f64 => limits.push(format!(
                "{} held {} of {} idle WebSockets",
                m.model,
                thousands(h.round() as u64),
                thousands(w.attempted)
            )),
            Some(_) => limits.push(format!(
                "{}: not every idle WebSocket answered a ping ({} pongs for {} upgrades, {} unanswered)",
                m.model,
                thousands(w.pongs_received),
                thousands(w.upgrades),
                thousands(w.ping_timeouts)
            )),
            None => unmeasured.push(m.model.clone()),
        }
    }
    if entries.is_empty() {
        return Err(missing_reason(
            results,
            "no model held every idle WebSocket, answered their pings and had its memory measured",
        ));
    }
    let setting = format!("idle WebSockets ({} upgraded, held and pinged)", thousands(attempted));
    let mut measured = finish(setting, rank(entries, Unit::BytesPerIdleWebSocket), None, unmeasured);
    measured.limits = limits;
    Ok(measured)
}

/// The workload as the verdict names a point of it.
fn workload_label(w: HttpWorkload) -> &'static str {
    match w {
        HttpWorkload::KeepAlive => "HTTP keep-alive",
        HttpWorkload::NewConnection => "HTTP new connection per request",
        HttpWorkload::TlsKeepAlive => "HTTPS keep-alive",
        HttpWorkload::TlsFullHandshake => "HTTPS full handshake per request",
        HttpWorkload::TlsResumed => "HTTPS resumed handshake per request",
        HttpWorkload::H2c => "h2c",
        HttpWorkload::H2Tls => "h2 over TLS",
        HttpWorkload::H3 => "HTTP/3",
    }
}

// ---------------------------------------------------------------------------------------------
// The machine

/// Every row and point (models and nginx) with a disturbed kept repetition.
fn disturbed_points(results: &Results) -> Vec<DisturbedPoint> {
    let mut out = Vec::new();
    let mut add = |name: String, point: &dyn Repeated| {
        let again =
            point.repeats().iter().filter(|r| r.replaced && r.interference.is_some_and(|i| i.disturbed)).count();
        let disturbed = point.disturbed_repeats();
        if disturbed > 0 || again > 0 {
            out.push(DisturbedPoint { name, disturbed, runs: point.kept().len(), measured_again: again });
        }
    };
    for m in results.models.iter().chain(&results.nginx) {
        for r in &m.rows {
            let kind = r.kind.map_or("echo", RowKind::label);
            add(format!("{} {kind}", m.model), r);
        }
        for p in &m.http {
            let name = format!("{} {} at {}", m.model, workload_label(p.workload()), thousands(p.concurrency));
            add(name, p);
        }
        for p in &m.ws {
            add(format!("{} WebSocket echo at {}", m.model, thousands(p.concurrency)), p);
        }
        if let Some(w) = &m.ws_idle {
            add(format!("{} idle WebSockets", m.model), w);
        }
        if let Some(u) = &m.udp {
            add(format!("{} UDP", m.model), u);
        }
    }
    out
}

/// The machine's limits that bear on the verdict.
fn machine_limits(results: &Results) -> Vec<String> {
    let m = &results.machine;
    let mut out = Vec::new();
    if m.open_files_limit > 0 {
        out.push(format!("open files: {} per process (RLIMIT_NOFILE)", thousands(m.open_files_limit)));
    }
    if let Some((name, n)) = m.thread_limits.iter().min_by_key(|(_, &n)| n) {
        out.push(format!("threads: {} (the smallest of the thread limits, {name})", thousands(*n)));
    }
    if results.models.iter().any(|r| r.model == "select") {
        if let Some(c) = "select".parse::<sockscale_server::Model>().ok().and_then(|m| m.capabilities().ceiling) {
            out.push(format!("select: {} {} descriptors per process", c.set_by, thousands(c.descriptors)));
        }
    }
    let (mut bound, mut all) = (0, 0);
    for model in results.models.iter().chain(&results.nginx) {
        for r in &model.rows {
            all += 1;
            bound += usize::from(client_bound(r, r.client_bound));
        }
        for p in &model.http {
            all += 1;
            bound += usize::from(client_bound(p, p.client_bound));
        }
    }
    if bound > 0 {
        out.push(format!(
            "the load generator: {bound} of {all} rows and points were client-bound (the load at 90% or more of its cores)"
        ));
    }
    out
}

fn client_bound<R: Repeated>(r: &R, own: bool) -> bool {
    if r.kept().is_empty() {
        own
    } else {
        r.client_bound_repeats() > 0
    }
}

// ---------------------------------------------------------------------------------------------
// The seeds

/// The sockscale model standing for the seed's model `seed_name` in Table 6-3.
fn counterpart(seed_name: &str) -> Option<&'static str> {
    crate::seed::TABLE_6_3.iter().find(|m| m.name == seed_name).map(|m| m.counterpart)
}

const COMPLETION_PORT: &str = "Overlapped (completion port)";
const EVENT_SELECT: &str = "WSAEventSelect";

/// The seed's row `index` for `seed_name`.
fn seed_row(seed_name: &str, index: usize) -> Option<&'static crate::seed::SeedRow> {
    crate::seed::TABLE_6_3.iter().find(|m| m.name == seed_name)?.rows.get(index)
}

/// What the seeds advise for `workload`, as accurately as their texts say it.
fn seed_advice(workload: Workload, measured: &Result<Measured, String>) -> SeedAdvice {
    let iocp = counterpart(COMPLETION_PORT);
    let n = |v: Option<u64>| v.map_or_else(|| "?".into(), thousands);
    match workload {
        Workload::IdleConnections => {
            let last = crate::seed::TABLE_6_3.iter().find(|m| m.name == COMPLETION_PORT).and_then(|m| m.rows.last());
            SeedAdvice {
                seeds: "000, 001, 002",
                says: format!(
                    "in Table 6-3's maximum row (seeds 000/001) the completion port held the most connections ({} of {}) at the least CPU ({}), and seed 002 calls it the most scalable",
                    n(last.map(|r| r.connected)),
                    n(last.map(|r| r.attempted)),
                    last.map_or("?", |r| r.cpu)
                ),
                short: format!("000/001: completion port ({}) held most", iocp.unwrap_or("?")),
                pick: iocp,
            }
        }
        Workload::EchoThroughput => {
            let (cp, es) = (seed_row(COMPLETION_PORT, 0), seed_row(EVENT_SELECT, 0));
            SeedAdvice {
                seeds: "000, 001",
                says: format!(
                    "in Table 6-3's flood row (seeds 000/001) the completion port echoed {} B/s at {} CPU, the most per CPU; WSAEventSelect echoed more in all ({} B/s) at {}",
                    n(cp.map(|r| r.received_per_s)),
                    cp.map_or("?", |r| r.cpu),
                    n(es.map(|r| r.received_per_s)),
                    es.map_or("?", |r| r.cpu)
                ),
                short: format!("000/001: completion port ({}) most per CPU", iocp.unwrap_or("?")),
                pick: iocp,
            }
        }
        Workload::HttpKeepAlive => SeedAdvice {
            seeds: "002, 003, 004",
            says: format!(
                "no seed measured a server model with keep-alive (seed 003 left it out; seed 004 found requests pipelined on one connection about 40% faster, a client setting); seed 002's general advice for a server with many I/O requests is the completion port ({})",
                iocp.unwrap_or("?")
            ),
            short: format!("not measured; 002 in general: completion port ({})", iocp.unwrap_or("?")),
            pick: iocp,
        },
        Workload::LatencyUnderLoad => {
            let cp = seed_row(COMPLETION_PORT, 1);
            SeedAdvice {
                seeds: "000, 001",
                says: format!(
                    "the seeds timed no latency; in Table 6-3's rate-limited row (seeds 000/001) the completion port held all {} connections and echoed the most ({} B/s at {} CPU)",
                    n(cp.map(|r| r.attempted)),
                    n(cp.map(|r| r.received_per_s)),
                    cp.map_or("?", |r| r.cpu)
                ),
                short: format!("no latency timed; rate-limited row: completion port ({})", iocp.unwrap_or("?")),
                pick: iocp,
            }
        }
        Workload::ConnectionChurn => {
            let concurrency = measured.as_ref().ok().and_then(|m| m.concurrency);
            let above = concurrency.is_some_and(|c| c >= 200);
            SeedAdvice {
                seeds: "003",
                says: format!(
                    "seed 003 (ab, a new connection per request): the IOCP server led below 200 concurrent users (about 12,600 responses/s near 100); above 200 all architectures were alike, ab itself being the limit{}",
                    if above { ", so at this concurrency it names no model" } else { "" }
                ),
                short: if above {
                    "003: all alike above 200 concurrent".into()
                } else {
                    format!("003: IOCP ({}) below 200 concurrent", iocp.unwrap_or("?"))
                },
                pick: if above { None } else { iocp },
            }
        }
        Workload::TlsHandshakes => SeedAdvice {
            seeds: "",
            says: "the seeds measured no TLS and say nothing about handshakes".into(),
            short: "nothing (no TLS measured)".into(),
            pick: None,
        },
        Workload::Http2Streams | Workload::Http2TlsStreams => SeedAdvice {
            seeds: "",
            says: "the seeds say nothing about HTTP/2".into(),
            short: "nothing (no HTTP/2)".into(),
            pick: None,
        },
        Workload::Http3Streams => SeedAdvice {
            seeds: "",
            says: "the seeds say nothing about HTTP/3 or QUIC".into(),
            short: "nothing (no HTTP/3)".into(),
            pick: None,
        },
        Workload::WebSocketMessages | Workload::IdleWebSockets => SeedAdvice {
            seeds: "",
            says: "the seeds say nothing about WebSocket".into(),
            short: "nothing (no WebSocket)".into(),
            pick: None,
        },
    }
}

fn agreement(results: &Results, seeds: &SeedAdvice, measured: &Result<Measured, String>) -> Agreement {
    let Ok(m) = measured else { return Agreement::NotMeasured };
    let Some(pick) = seeds.pick else { return Agreement::NoPick };
    let r = &m.ranking;
    if r.leader_names().contains(&pick) {
        return Agreement::Agrees;
    }
    if !r.entries.iter().any(|e| e.model == pick) {
        return Agreement::PickNotMeasured(pick);
    }
    let leaders: Vec<String> = r.leader_names().into_iter().map(str::to_owned).collect();
    // On idle connections the seeds judged by connections held: a pick that held all of them
    // matches the seeds on their own measure and lost only on memory.
    let detail = (r.unit == Unit::KibPerConnection).then(|| {
        let attempted = results.models.iter().find_map(|m| row_of(m, RowKind::Maximum)).map_or(0, |r| r.attempted);
        format!("{pick} held all {} too, with more server memory per connection", thousands(attempted))
    });
    let single_run = r.entries.iter().any(|e| e.spread.n <= 1);
    let detail = match (detail, single_run) {
        (Some(d), true) => Some(format!("{d}; on one run, spread not measured")),
        (None, true) => Some("on one run, spread not measured".into()),
        (d, false) => d,
    };
    Agreement::Differs { leaders, detail }
}

// ---------------------------------------------------------------------------------------------
// Words

/// "a", "a or b", "a, b or c".
fn join(names: &[&str], last: &str) -> String {
    match names {
        [] => String::new(),
        [one] => (*one).to_owned(),
        [init @ .., tail] => format!("{} {last} {tail}", init.join(", ")),
    }
}

/// A value in the unit's own scale, and the scale's name, so a range shares it.
fn scaled(unit: Unit, median: f64) -> (f64, &'static str, &'static str) {
    match unit {
        Unit::BytesPerCpuSecond => {
            let (d, u) = if median >= 1e9 {
                (1e9, "GB")
            } else if median >= 1e6 {
                (1e6, "MB")
            } else if median >= 1e3 {
                (1e3, "kB")
            } else {
                (1.0, "B")
            };
            (d, u, "per server CPU-second")
        }
        Unit::P99Us if median >= 1000.0 => (1000.0, "ms", "p99"),
        Unit::P99Us => (1.0, "µs", "p99"),
        Unit::KibPerConnection => (1.0, "KiB", "of server memory per connection"),
        Unit::ResponsesPerCpuSecond => (1.0, "responses", "per server CPU-second"),
        Unit::MessagesPerCpuSecond => (1.0, "messages", "per server CPU-second"),
        Unit::BytesPerIdleWebSocket => (1.0, "B", "of server memory per idle WebSocket"),
        Unit::ConnectionsHeld { .. } => (1.0, "", "connections held"),
    }
}

/// The median alone with its unit, where the spread was said already or is beside the point:
/// "1.21 GB per server CPU-second".
pub fn figure_value(unit: Unit, s: &Spread) -> String {
    let (d, scale, what) = scaled(unit, s.median);
    match unit {
        Unit::ConnectionsHeld { attempted } => {
            format!("{} of {} connections held", thousands(s.median.round() as u64), thousands(attempted))
        }
        Unit::P99Us => format!("{what} {} {scale}", decimal(s.median / d)),
        _ => format!("{} {scale} {what}", decimal(s.median / d)),
    }
}

/// The runs behind a spread, in words, with the disturbed ones marked.
fn runs_words(s: &Spread, range: &str, disturbed: usize) -> String {
    let busy = if disturbed > 0 { format!(", machine busy in {disturbed}") } else { String::new() };
    if s.n <= 1 {
        format!("1 run: spread not measured{busy}")
    } else if range.is_empty() {
        format!("{} runs alike{busy}", s.n)
    } else {
        format!("{range}, {} runs{busy}", s.n)
    }
}

/// "1.21 GB per server CPU-second (1.18–1.25, 3 runs)".
pub fn figure_long(unit: Unit, s: &Spread, disturbed: usize) -> String {
    let (d, scale, what) = scaled(unit, s.median);
    let (lo, mid, hi) = (decimal(s.min / d), decimal(s.median / d), decimal(s.max / d));
    let range = if lo == hi { String::new() } else { format!("{lo}–{hi}") };
    let runs = runs_words(s, &range, disturbed);
    match unit {
        Unit::ConnectionsHeld { attempted } => format!(
            "{} of {} connections held ({})",
            thousands(s.median.round() as u64),
            thousands(attempted),
            runs_words(
                s,
                &if s.min == s.max {
                    String::new()
                } else {
                    format!("{}–{}", thousands(s.min.round() as u64), thousands(s.max.round() as u64))
                },
                disturbed
            )
        ),
        Unit::P99Us => format!("{what} {mid} {scale} ({runs})"),
        _ => format!("{mid} {scale} {what} ({runs})"),
    }
}

/// Compact numbers for the HTML table's cells: 125,312 → "125k".
fn compact(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{}G", decimal(v / 1e9))
    } else if a >= 1e6 {
        format!("{}M", decimal(v / 1e6))
    } else if a >= 1e4 {
        format!("{}k", decimal(v / 1e3))
    } else {
        decimal(v)
    }
}

/// "1.21 GB/CPU-s (1.18–1.25, 3 runs)", for a table cell.
pub fn figure_short(unit: Unit, s: &Spread, disturbed: usize) -> String {
    let (d, scale, _) = scaled(unit, s.median);
    let f = |v: f64| match unit {
        Unit::BytesPerCpuSecond | Unit::P99Us | Unit::KibPerConnection => decimal(v / d),
        _ => compact(v),
    };
    let (lo, mid, hi) = (f(s.min), f(s.median), f(s.max));
    let range = if lo == hi { String::new() } else { format!("{lo}–{hi}") };
    let runs = if s.n <= 1 {
        "1 run".to_owned()
    } else if range.is_empty() {
        format!("{} runs alike", s.n)
    } else {
        format!("{range}, {} runs", s.n)
    };
    let busy = if disturbed > 0 { format!(", {disturbed} busy") } else { String::new() };
    let value = match unit {
        Unit::BytesPerCpuSecond => format!("{mid} {scale}/CPU-s"),
        Unit::ResponsesPerCpuSecond => format!("{mid} resp/CPU-s"),
        Unit::MessagesPerCpuSecond => format!("{mid} msg/CPU-s"),
        Unit::BytesPerIdleWebSocket => format!("{mid} B/idle ws"),
        Unit::P99Us => format!("p99 {mid} {scale}"),
        Unit::KibPerConnection => format!("{mid} KiB/conn"),
        Unit::ConnectionsHeld { attempted } => format!("{mid}/{} held", compact(attempted as f64)),
    };
    format!("{value} ({runs}{busy})")
}

fn ratio_words(by: Option<f64>) -> String {
    by.map_or_else(|| "a margin that is not a number (its figure is 0)".into(), |r| format!("{}×", decimal(r)))
}

/// How the leaders stand, in a sentence.
fn lead_long(r: &Ranking) -> String {
    let names = r.leader_names();
    let single_run = r.entries.iter().any(|e| e.spread.n <= 1);
    let next_figure = |next: &str| {
        r.entries
            .iter()
            .find(|e| e.model == next)
            .map_or_else(String::new, |e| format!(" ({})", figure_value(r.unit, &e.spread)))
    };
    match &r.lead {
        Lead::Alone => "the only model with this figure".into(),
        Lead::Ahead { next, by } => {
            format!("ahead of {next}{} by {}: their ranges do not overlap", next_figure(next), ratio_words(*by))
        }
        Lead::SpreadNotMeasured { next } => {
            format!("one run each, so no lead over {next}{} is claimed", next_figure(next))
        }
        Lead::Tie { clear_of } => {
            let why = if single_run { "within 1% on one run (spread not measured)" } else { "their ranges overlap" };
            let mut s = format!("tie: {} — {why}", names.join(", "));
            if let Some((next, by)) = clear_of {
                let _ = write!(s, "; together ahead of {next}{} by {}", next_figure(next), ratio_words(*by));
            }
            s
        }
    }
}

fn lead_short(r: &Ranking) -> String {
    match &r.lead {
        Lead::Alone => "only model measured".into(),
        Lead::Ahead { next, by } => format!("ahead of {next} by {}", ratio_words(*by)),
        Lead::SpreadNotMeasured { .. } => "1 run: spread not measured".into(),
        Lead::Tie { .. } if r.entries.iter().any(|e| e.spread.n <= 1) => "tie (within 1%, 1 run)".into(),
        Lead::Tie { .. } => "tie (ranges overlap)".into(),
    }
}

fn bottleneck_long(b: &Bottleneck, per_cpu: bool) -> String {
    let still = if per_cpu { " (per-CPU-second figures still compare)" } else { "" };
    let whose = if b.leaders > 1 { "the leaders'" } else { "the leader's" };
    let of = |k: usize| match b.runs {
        1 => format!("in {whose} one run"),
        n if k == n => format!("in all {n} of {whose} runs"),
        n => format!("in {k} of {whose} {n} runs"),
    };
    match (b.client_bound > 0, b.server_bound > 0) {
        (true, true) => format!(
            "both sides: the load used 90% or more of its cores {} and the server {}{still}",
            of(b.client_bound),
            of(b.server_bound)
        ),
        (true, false) => format!(
            "the client: the load used 90% or more of its cores {}, so the figures say what the load could drive{still}",
            of(b.client_bound)
        ),
        (false, true) => format!("the server: its cores were 90% or more busy {}", of(b.server_bound)),
        (false, false) if b.server_known => {
            let all = match b.runs {
                1 => format!("in {whose} one run"),
                n => format!("in all {n} of {whose} runs"),
            };
            format!("neither: the server and the load stayed below 90% of their cores {all}")
        }
        (false, false) => "not the client (below 90% of its cores); the server's share was not recorded (results from before repetitions)".into(),
    }
}

fn bottleneck_short(b: &Bottleneck) -> String {
    match (b.client_bound > 0, b.server_bound > 0) {
        (true, true) => format!("both (client {}/{n}, server {}/{n})", b.client_bound, b.server_bound, n = b.runs),
        (true, false) => format!("client ({}/{} runs)", b.client_bound, b.runs),
        (false, true) => format!("server ({}/{} runs)", b.server_bound, b.runs),
        (false, false) if b.server_known => "neither".into(),
        (false, false) => "not the client".into(),
    }
}

fn agreement_long(a: &Agreement) -> String {
    match a {
        Agreement::Agrees => "this machine agrees".into(),
        Agreement::Differs { leaders, detail } => {
            let names: Vec<&str> = leaders.iter().map(String::as_str).collect();
            let verb = if names.len() > 1 { "lead" } else { "leads" };
            let mut s = format!("this machine differs: here {} {verb}", join(&names, "and"));
            if let Some(d) = detail {
                let _ = write!(s, " ({d})");
            }
            s
        }
        Agreement::NoPick => "nothing to compare".into(),
        Agreement::PickNotMeasured(pick) => format!("{pick} was not measured here, so no comparison"),
        Agreement::NotMeasured => "not measured here".into(),
    }
}

fn agreement_short(a: &Agreement) -> String {
    match a {
        Agreement::Agrees => "agrees".into(),
        Agreement::Differs { leaders, .. } => {
            let names: Vec<&str> = leaders.iter().map(String::as_str).collect();
            format!("differs: here {} lead{}", join(&names, "and"), if names.len() > 1 { "" } else { "s" })
        }
        Agreement::NoPick => "—".into(),
        Agreement::PickNotMeasured(pick) => format!("{pick} not measured"),
        Agreement::NotMeasured => "not measured".into(),
    }
}

fn per_cpu(unit: Unit) -> bool {
    matches!(unit, Unit::BytesPerCpuSecond | Unit::ResponsesPerCpuSecond | Unit::MessagesPerCpuSecond)
}

/// The opening sentence about a busy machine, when it was; with the points named.
fn busy_sentence(v: &Verdict, named: usize) -> Option<String> {
    if v.disturbed.is_empty() {
        return None;
    }
    let marked: Vec<&DisturbedPoint> = v.disturbed.iter().filter(|p| p.disturbed > 0).collect();
    let again: Vec<&DisturbedPoint> = v.disturbed.iter().filter(|p| p.disturbed == 0).collect();
    let mut s = String::new();
    let n = marked.len();
    if n > 0 {
        let (points, their) = if n == 1 { ("point", "its") } else { ("points", "their") };
        let names: Vec<String> =
            marked.iter().take(named).map(|p| format!("{} ({} of {} runs)", p.name, p.disturbed, p.runs)).collect();
        let more = if n > named { format!(", and {} more", n - named) } else { String::new() };
        let _ = write!(
            s,
            "The machine was busy during {n} {points}; {their} figures are marked: {}{more}.",
            names.join(", ")
        );
    }
    if !again.is_empty() {
        let k = again.len();
        let names: Vec<String> = again
            .iter()
            .take(named)
            .map(|p| format!("{} ({} run{})", p.name, p.measured_again, if p.measured_again == 1 { "" } else { "s" }))
            .collect();
        let more = if k > named { format!(", and {} more", k - named) } else { String::new() };
        if !s.is_empty() {
            s.push(' ');
        }
        let _ = write!(
            s,
            "The machine was busy during {k} more point{}, measured again once it was quiet (the disturbed runs are kept in results.json, marked replaced): {}{more}.",
            if k == 1 { "" } else { "s" },
            names.join(", ")
        );
    }
    if let Some(cores) = v.disturbed_above_cores {
        let _ = write!(s, " Busy: other processes used more than {cores:.2} cores beside the bench");
        if let Some(r) = v.reruns {
            let _ = write!(s, "; {} of at most {} re-runs made", r.made, r.budget);
        }
        s.push('.');
    }
    Some(s)
}

fn heading_sentence(v: &Verdict) -> String {
    let runs = if v.rounds <= 1 {
        "one run of each row and point, so no spread was measured".to_owned()
    } else {
        format!("{} runs of each row and point, the models taken in turn", v.rounds)
    };
    let all = sockscale_server::Model::ALL.len();
    let models = if v.models.len() >= all {
        format!("all {} models", v.models.len())
    } else {
        format!("{} of the {all} models ({})", v.models.len(), v.models.join(", "))
    };
    format!("Which model for what, on this machine: {models}, {runs}.")
}

/// The paragraph of one workload, one line (the text wraps it).
fn workload_line(w: &WorkloadVerdict) -> String {
    let title = w.workload.title();
    let seeds = format!("The seeds: {} — {}.", w.seeds.says, agreement_long(&w.agreement));
    let m = match &w.measured {
        Err(why) => return format!("{title}: not measured — {why}. {seeds}"),
        Ok(m) => m,
    };
    let r = &m.ranking;
    let names = r.leader_names();
    let tie = if r.is_tie() { " (tie)" } else { "" };
    let leaders = &r.entries[..r.leaders];
    let figures = if let [one] = leaders {
        figure_long(r.unit, &one.spread, one.disturbed)
    } else {
        leaders
            .iter()
            .map(|e| format!("{} {}", e.model, figure_long(r.unit, &e.spread, e.disturbed)))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let mut s =
        format!("{title}: use {}{tie} — {figures}; {}. Measured on {}.", join(&names, "or"), lead_long(r), m.setting);
    for note in &m.notes {
        let _ = write!(s, " {note}.");
    }
    if let Some(n) = &m.reference {
        let _ = write!(
            s,
            " {} (a reference, not a model to use): {}.",
            n.model,
            figure_long(r.unit, &n.spread, n.disturbed)
        );
    }
    if !m.unmeasured.is_empty() {
        let _ = write!(s, " Not measured: {}.", m.unmeasured.join(", "));
    }
    let _ = write!(s, " Bottleneck: {}.", bottleneck_long(&m.bottleneck, per_cpu(r.unit)));
    if m.disturbed > 0 {
        let whose = if r.is_tie() { "the leaders'" } else { "the leader's" };
        let _ = write!(
            s,
            " The machine was busy during {} of {whose} {} runs: these figures include a disturbed run.",
            m.disturbed, m.bottleneck.runs
        );
    }
    if !m.limits.is_empty() {
        let _ = write!(s, " Limits: {}.", m.limits.join("; "));
    }
    let _ = write!(s, " {seeds}");
    s
}

/// Break `text` into lines of at most `width` columns at spaces (a word longer than that
/// stands on its own line).
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = 0;
    for word in text.split_whitespace() {
        let len = word.chars().count();
        if line > 0 && line + 1 + len > width {
            out.push('\n');
            line = 0;
        } else if line > 0 {
            out.push(' ');
            line += 1;
        }
        out.push_str(word);
        line += len;
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Renderings

/// The verdict as plain text: the end of `sockscale bench`'s stdout.
pub fn text(results: &Results) -> String {
    let v = verdict(results);
    let mut paragraphs = vec![heading_sentence(&v)];
    if let Some(note) = &v.partial {
        paragraphs.push(note.clone());
    }
    if let Some(busy) = busy_sentence(&v, usize::MAX) {
        paragraphs.push(busy);
    }
    if v.models.is_empty() {
        paragraphs.push("No model was measured, so there is no verdict.".into());
    } else {
        paragraphs.extend(v.workloads.iter().map(workload_line));
    }
    if !v.machine_limits.is_empty() {
        paragraphs.push(format!("Machine limits: {}.", v.machine_limits.join("; ")));
    }
    let mut s = String::from("Verdict\n=======\n\n");
    s.push_str(&paragraphs.iter().map(|p| wrap(p, TEXT_WIDTH)).collect::<Vec<_>>().join("\n\n"));
    s.push('\n');
    // The answer in a few lines, last: what a terminal shows when the run ends.
    if !v.models.is_empty() {
        s.push_str("\nAt a glance (the model to use; \"tie\": the numbers cannot tell them apart):\n");
        let width = v.workloads.iter().map(|w| w.workload.title().len()).max().unwrap_or(0);
        let indent = " ".repeat(width + 4);
        for (title, answer) in glance(&v) {
            // The answer wrapped under itself, so the lines stay within the text's width.
            let wrapped = wrap(&answer, TEXT_WIDTH - indent.len());
            for (i, line) in wrapped.lines().enumerate() {
                if i == 0 {
                    let _ = writeln!(s, "  {title:<width$}  {line}");
                } else {
                    let _ = writeln!(s, "{indent}{line}");
                }
            }
        }
    }
    s
}

/// Each workload's answer in a few words: the model(s) to use, and whether they lead or tie.
pub fn glance(v: &Verdict) -> Vec<(&'static str, String)> {
    v.workloads
        .iter()
        .map(|w| {
            let answer = match &w.measured {
                Err(_) => "not measured".to_owned(),
                Ok(m) => {
                    let r = &m.ranking;
                    let names = r.leader_names().join(", ");
                    let how = match &r.lead {
                        Lead::Alone => "the only model measured".to_owned(),
                        Lead::Ahead { next, by: Some(by) } => format!("ahead of {next} by {by:.2}×"),
                        Lead::Ahead { next, by: None } => format!("ahead of {next}"),
                        Lead::Tie { clear_of: Some((next, _)) } => format!("tie, ahead of {next}"),
                        Lead::Tie { clear_of: None } if r.leaders == r.entries.len() => "tie".to_owned(),
                        Lead::Tie { clear_of: None } => "tie; not told apart from the next either".to_owned(),
                        Lead::SpreadNotMeasured { next } => format!("before {next}, one run: spread not measured"),
                    };
                    let disturbed = if m.disturbed > 0 { "; machine busy in some runs" } else { "" };
                    format!("{names} ({how}{disturbed})")
                }
            };
            (w.workload.title(), answer)
        })
        .collect()
}

/// table.md: the verdict over all the tables (here, not in `tables`, which the verdict reads): a partial run's note first (it qualifies
/// everything under it), then the verdict, then the tables ([`crate::tables::tables_body_markdown`]).
pub fn table_md(results: &Results) -> String {
    let mut s = String::new();
    if let Some(note) = crate::tables::partial_note(results) {
        let _ = write!(s, "## Partial results\n\n{note}\n\n");
    }
    let verdict = markdown(results);
    if !verdict.trim().is_empty() {
        s.push_str(verdict.trim_end());
        s.push_str("\n\n");
    }
    s.push_str(&crate::tables::tables_body_markdown(results));
    s
}

/// The verdict as Markdown: the top of table.md.
pub fn markdown(results: &Results) -> String {
    let v = verdict(results);
    let mut s = String::from("## Verdict\n\n");
    let _ = writeln!(s, "{}\n", heading_sentence(&v));
    if let Some(note) = &v.partial {
        let _ = writeln!(s, "{note}\n");
    }
    if let Some(busy) = busy_sentence(&v, usize::MAX) {
        let _ = writeln!(s, "**{busy}**\n");
    }
    if v.models.is_empty() {
        s.push_str("No model was measured, so there is no verdict.\n\n");
    } else {
        s.push_str("| workload | use |\n|---|---|\n");
        for (title, answer) in glance(&v) {
            let _ = writeln!(s, "| {title} | {} |", answer.replace('|', "/"));
        }
        s.push('\n');
        for w in &v.workloads {
            let line = workload_line(w);
            // The workload's name in bold: "**Many idle connections**: use …".
            let line = match line.split_once(": ") {
                Some((title, rest)) => format!("**{title}**: {rest}"),
                None => line,
            };
            let _ = writeln!(s, "- {}", line.replace('|', "/"));
        }
        s.push('\n');
    }
    if !v.machine_limits.is_empty() {
        let _ = writeln!(s, "Machine limits: {}.\n", v.machine_limits.join("; "));
    }
    s
}

/// Escape text for HTML element content and attribute values.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

const HTML_STYLE: &str = "<style>#verdict{font-size:14px;margin:0 0 1em}#verdict h2{margin:.3em 0}#verdict p{margin:.3em 0}#verdict .busy{background:#fff3cd;border-left:4px solid #e0a800;padding:.4em .6em}#verdict table{border-collapse:collapse}#verdict th,#verdict td{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top;white-space:normal}#verdict td.tie{font-weight:bold}#verdict .limits{color:#444}</style>";

/// The verdict as HTML: the top of report.html.
pub fn html(results: &Results) -> String {
    let v = verdict(results);
    let mut s = String::from("<section id=\"verdict\">\n");
    s.push_str(HTML_STYLE);
    s.push_str("\n<h2>Verdict</h2>\n");
    let _ = writeln!(s, "<p>{}</p>", escape(&heading_sentence(&v)));
    if let Some(note) = &v.partial {
        let _ = writeln!(s, "<p class=\"busy\">{}</p>", escape(note));
    }
    if let Some(busy) = busy_sentence(&v, HTML_NAMED_POINTS) {
        let _ = writeln!(s, "<p class=\"busy\" role=\"note\">{}</p>", escape(&busy));
    }
    if v.models.is_empty() {
        s.push_str("<p>No model was measured, so there is no verdict.</p>\n</section>\n");
        return s;
    }
    s.push_str("<table>\n<thead><tr><th>Workload</th><th>Use</th><th>Figure and spread</th><th>Ahead by / tie</th><th>Bottleneck</th><th>Seeds say</th><th>Agrees?</th></tr></thead>\n<tbody>\n");
    for w in &v.workloads {
        let seeds = escape(&w.seeds.short);
        let agrees = escape(&agreement_short(&w.agreement));
        let title = escape(w.workload.title());
        match &w.measured {
            Err(why) => {
                let _ = writeln!(
                    s,
                    "<tr><td>{title}</td><td colspan=\"4\">not measured: {}</td><td>{seeds}</td><td>{agrees}</td></tr>",
                    escape(why)
                );
            }
            Ok(m) => {
                let r = &m.ranking;
                let top = &r.entries[0];
                let names = escape(&r.leader_names().join(", "));
                let class = if r.is_tie() { " class=\"tie\"" } else { "" };
                let mut figure = escape(&figure_short(r.unit, &top.spread, top.disturbed));
                if r.is_tie() {
                    figure = format!("{}: {figure}", escape(&top.model));
                }
                if let Some(n) = &m.reference {
                    let _ = write!(
                        figure,
                        "<br><small>{} (reference): {}</small>",
                        escape(&n.model),
                        escape(&figure_short(r.unit, &n.spread, n.disturbed))
                    );
                }
                let _ = writeln!(
                    s,
                    "<tr><td title=\"{}\">{title}</td><td{class}>{names}</td><td>{figure}</td><td>{}</td><td>{}</td><td title=\"{}\">{seeds}</td><td>{agrees}</td></tr>",
                    escape(&m.setting),
                    escape(&lead_short(r)),
                    escape(&bottleneck_short(&m.bottleneck)),
                    escape(&w.seeds.says),
                );
            }
        }
    }
    s.push_str("</tbody>\n</table>\n");
    let limits: Vec<String> = v
        .workloads
        .iter()
        .filter_map(|w| w.measured.as_ref().ok())
        .flat_map(|m| m.limits.iter().cloned())
        .chain(v.machine_limits.iter().cloned())
        .collect();
    if !limits.is_empty() {
        let _ = writeln!(s, "<p class=\"limits\">Limits: {}.</p>", escape(&limits.join("; ")));
    }
    s.push_str("</section>\n");
    s
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::results::{spreads_of, Interference, Machine, Repeat};

    /// One repetition with figure `name` at `value`.
    fn run(round: u32, figures: &[(&str, f64)]) -> Repeat {
        Repeat {
            round,
            figures: figures.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect(),
            interference: Some(Interference { seconds: 1.0, ..Interference::default() }),
            ..Repeat::default()
        }
    }

    /// Three repetitions of figure `name`, one value each.
    fn runs(name: &str, values: &[f64]) -> Vec<Repeat> {
        values.iter().enumerate().map(|(i, &v)| run(i as u32 + 1, &[(name, v)])).collect()
    }

    fn row(kind: RowKind, attempted: u64, repeats: Vec<Repeat>) -> Row {
        let spread = spreads_of(&repeats);
        let held = spread.get(figure::CONNECTIONS_HELD).map_or(attempted, |s| s.median as u64);
        Row { kind: Some(kind), attempted, connected: held, repeats, spread, ..Row::default() }
    }

    /// A maximum row: each run held `held[i]` with `rss[i]` KiB.
    fn maximum(attempted: u64, held: &[f64], rss: &[f64]) -> Row {
        let repeats = held
            .iter()
            .zip(rss)
            .enumerate()
            .map(|(i, (&h, &r))| run(i as u32 + 1, &[(figure::CONNECTIONS_HELD, h), (figure::SERVER_RSS_KIB, r)]))
            .collect();
        row(RowKind::Maximum, attempted, repeats)
    }

    fn point(w: HttpWorkload, concurrency: u64, values: &[f64]) -> HttpPoint {
        let repeats = runs(figure::RESPONSES_PER_CPU_SECOND, values);
        HttpPoint {
            concurrency,
            keepalive: w.keepalive(),
            tls: w.tls(),
            tls_resume: w.tls().then_some(false),
            http2: w.http2(),
            streams: w.http2().then_some(16),
            spread: spreads_of(&repeats),
            repeats,
            ..HttpPoint::default()
        }
    }

    fn model(name: &str, rows: Vec<Row>, http: Vec<HttpPoint>) -> ModelResult {
        ModelResult { model: name.into(), error: None, rows, http, udp: None, ..ModelResult::default() }
    }

    fn results(models: Vec<ModelResult>) -> Results {
        Results {
            schema: crate::results::SCHEMA,
            profile: "default".into(),
            machine: Machine {
                open_files_limit: 20_000,
                thread_limits: BTreeMap::from([("RLIMIT_NPROC".to_owned(), 96_365)]),
                ..Machine::default()
            },
            parameters: serde_json::json!({"rate_conns": 3000, "block": 1000, "block_rate": 200_000}),
            models,
            rounds: 3,
            ..Results::default()
        }
    }

    /// A WebSocket echo point at `c` with three runs of messages per server CPU-second.
    fn ws_point(c: u64, values: [f64; 3]) -> crate::results::WsPoint {
        let repeats = runs(figure::MESSAGES_PER_CPU_SECOND, &values);
        crate::results::WsPoint {
            concurrency: c,
            msg_len: 512,
            messages_per_s: values[1],
            server_cpu_pct: Some(100.0),
            spread: spreads_of(&repeats),
            repeats,
            ..Default::default()
        }
    }

    /// Idle WebSockets: all `attempted` held, `pongs` answered, three runs of server bytes each.
    fn ws_idle(attempted: u64, held: f64, pongs: u64, bytes: [f64; 3]) -> crate::results::WsIdle {
        let repeats: Vec<Repeat> = bytes
            .iter()
            .enumerate()
            .map(|(i, &b)| run(i as u32 + 1, &[(figure::WS_IDLE_HELD, held), (figure::SERVER_BYTES_PER_IDLE_WS, b)]))
            .collect();
        crate::results::WsIdle {
            attempted,
            upgrades: attempted,
            held: Some(held as u64),
            pongs_received: pongs,
            pings_sent: pongs,
            spread: spreads_of(&repeats),
            repeats,
            ..Default::default()
        }
    }

    /// WebSocket is a "what" of the verdict when measured: messages per server CPU-second at
    /// the verdict's concurrency (higher first), and bytes per idle WebSocket among the models
    /// that held all and answered every ping (lower first); a model that fell short is named
    /// with why. Results without WebSocket (before schema 3) list neither.
    #[test]
    fn websocket_is_judged_when_measured_and_left_out_of_older_results() {
        let older = three_models();
        let v = verdict(&older);
        assert!(
            v.workloads.iter().all(|w| !matches!(w.workload, Workload::WebSocketMessages | Workload::IdleWebSockets)),
            "no WebSocket in results without it"
        );
        let mut r = three_models();
        for m in &mut r.models {
            let (ws, idle) = match m.model.as_str() {
                // epoll clearly ahead on messages; uring least memory, but tokio did not answer
                // every ping.
                "epoll" => ([300e3, 310e3, 320e3], ws_idle(1000, 1000.0, 1000, [600.0, 610.0, 620.0])),
                "uring" => ([200e3, 210e3, 220e3], ws_idle(1000, 1000.0, 1000, [400.0, 410.0, 420.0])),
                _ => ([100e3, 110e3, 120e3], ws_idle(1000, 1000.0, 990, [100.0, 110.0, 120.0])),
            };
            m.ws = vec![ws_point(10, ws.map(|x| x * 2.0)), ws_point(100, ws)];
            m.ws_idle = Some(idle);
        }
        let v = verdict(&r);
        let find = |w: Workload| v.workloads.iter().find(|x| x.workload == w).expect("listed");
        let messages = find(Workload::WebSocketMessages).measured.as_ref().expect("measured");
        assert_eq!(messages.concurrency, Some(100), "judged at the verdict's concurrency");
        assert_eq!(messages.ranking.leader_names(), ["epoll"]);
        assert_eq!(messages.ranking.unit, Unit::MessagesPerCpuSecond);
        assert!(matches!(&messages.ranking.lead, Lead::Ahead { next, .. } if next == "uring"), "{messages:?}");
        let idle = find(Workload::IdleWebSockets).measured.as_ref().expect("measured");
        assert_eq!(idle.ranking.leader_names(), ["uring"], "lower is better, tokio left out: {idle:?}");
        assert!(
            idle.limits.iter().any(|l| l.starts_with("tokio: not every idle WebSocket answered a ping")),
            "{idle:?}"
        );
        assert_eq!(find(Workload::IdleWebSockets).seeds.pick, None, "the seeds name no WebSocket model");
        let text = text(&r);
        assert!(text.contains("WebSocket messages") && text.contains("Many idle WebSockets"), "{text}");
        assert!(text.contains("msg/CPU-s") || text.contains("messages per server CPU-second"), "{text}");
    }

    /// epoll, uring and tokio, three runs of each row and point: uring clearly ahead on the
    /// flood; uring and epoll tied on HTTP keep-alive at 100 (client-bound), tokio ahead at 10;
    /// tokio lowest in latency with one disturbed run; epoll and tokio tied on memory per
    /// connection, uring holding all with twice the memory.
    fn three_models() -> Results {
        let gb = 1e9;
        let flood = |v: [f64; 3]| row(RowKind::Flood, 1000, runs(figure::BYTES_PER_CPU_SECOND, &v.map(|x| x * gb)));
        let latency = |v: [f64; 3]| row(RowKind::RateLimited, 3000, runs(figure::P99_US, &v));
        let keep_alive = |c: u64, v: [f64; 3]| {
            let mut p = point(HttpWorkload::KeepAlive, c, &v);
            if c == 100 {
                p.repeats.iter_mut().for_each(|r| r.client_bound = true);
            }
            p
        };
        let mut tokio_latency = latency([900.0, 950.0, 1000.0]);
        if let Some(i) = tokio_latency.repeats[1].interference.as_mut() {
            i.server_cores = 0.6;
            i.disturbed = true;
        }
        results(vec![
            model(
                "epoll",
                vec![
                    flood([0.90, 0.95, 1.00]),
                    latency([1200.0, 1300.0, 1400.0]),
                    maximum(8000, &[8000.0; 3], &[8000.0, 8100.0, 8200.0]),
                ],
                vec![
                    keep_alive(10, [50e3, 51e3, 52e3]),
                    keep_alive(100, [100e3, 105e3, 110e3]),
                    point(HttpWorkload::NewConnection, 100, &[20e3, 21e3, 22e3]),
                    point(HttpWorkload::H2c, 100, &[300e3, 310e3, 320e3]),
                ],
            ),
            model(
                "uring",
                vec![
                    flood([1.18, 1.21, 1.25]),
                    latency([2000.0, 2100.0, 2200.0]),
                    maximum(8000, &[8000.0; 3], &[16_000.0, 16_400.0, 16_800.0]),
                ],
                vec![
                    keep_alive(10, [40e3, 41e3, 42e3]),
                    keep_alive(100, [104e3, 108e3, 112e3]),
                    point(HttpWorkload::NewConnection, 100, &[25e3, 26e3, 27e3]),
                    point(HttpWorkload::H2c, 100, &[200e3, 210e3, 220e3]),
                ],
            ),
            model(
                "tokio",
                vec![
                    flood([0.80, 0.85, 0.90]),
                    tokio_latency,
                    maximum(8000, &[7990.0, 8000.0, 8000.0], &[8100.0, 8150.0, 8300.0]),
                ],
                vec![
                    keep_alive(10, [90e3, 91e3, 92e3]),
                    keep_alive(100, [60e3, 62e3, 65e3]),
                    point(HttpWorkload::NewConnection, 100, &[19e3, 20.5e3, 21.5e3]),
                    point(HttpWorkload::H2c, 100, &[280e3, 290e3, 305e3]),
                ],
            ),
        ])
    }

    fn workload(v: &Verdict, w: Workload) -> &WorkloadVerdict {
        v.workloads.iter().find(|x| x.workload == w).unwrap_or_else(|| panic!("{w:?} missing"))
    }

    fn measured(v: &Verdict, w: Workload) -> &Measured {
        workload(v, w).measured.as_ref().unwrap_or_else(|why| panic!("{w:?} not measured: {why}"))
    }

    /// The paragraph of the text verdict that starts with `title`, unwrapped.
    fn paragraph(text: &str, title: &str) -> String {
        text.split("\n\n")
            .find(|p| p.starts_with(&format!("{title}:")))
            .unwrap_or_else(|| panic!("no paragraph {title} in\n{text}"))
            .replace('\n', " ")
    }

    fn entry_of(model: &str, values: &[f64]) -> Entry {
        Entry {
            model: model.into(),
            spread: Spread::of(values.iter().copied()).unwrap(),
            disturbed: 0,
            client_bound: 0,
            server_bound: 0,
            runs: values.len(),
            server_known: true,
        }
    }

    #[test]
    fn a_range_clear_of_the_rest_is_ahead_by_the_ratio_of_medians() {
        let r = rank(
            vec![entry_of("b", &[8.0, 9.0, 10.0]), entry_of("a", &[11.0, 12.0, 13.0]), entry_of("c", &[1.0, 2.0, 3.0])],
            Unit::ResponsesPerCpuSecond,
        );
        assert_eq!(r.leader_names(), ["a"]);
        assert_eq!(r.lead, Lead::Ahead { next: "b".into(), by: Some(12.0 / 9.0) });
        let order: Vec<&str> = r.entries.iter().map(|e| e.model.as_str()).collect();
        assert_eq!(order, ["a", "b", "c"]);

        // Lower is better: the ratio is the next's median over the leader's.
        let r = rank(vec![entry_of("slow", &[30.0, 40.0, 50.0]), entry_of("fast", &[8.0, 10.0, 12.0])], Unit::P99Us);
        assert_eq!(r.lead, Lead::Ahead { next: "slow".into(), by: Some(4.0) });
    }

    #[test]
    fn overlapping_ranges_are_a_tie_and_a_lead_only_when_the_group_is_clear() {
        // b overlaps a; c is below both: the tie is clear of c.
        let r = rank(
            vec![
                entry_of("a", &[10.0, 12.0, 14.0]),
                entry_of("b", &[9.0, 11.0, 13.0]),
                entry_of("c", &[1.0, 2.0, 3.0]),
            ],
            Unit::ResponsesPerCpuSecond,
        );
        assert_eq!(r.leader_names(), ["a", "b"]);
        assert_eq!(r.lead, Lead::Tie { clear_of: Some(("c".into(), Some(12.0 / 2.0))) });

        // c overlaps b but not a: not a leader, and the group is not clear of it.
        let r = rank(
            vec![
                entry_of("a", &[10.0, 12.0, 14.0]),
                entry_of("b", &[7.0, 11.0, 13.0]),
                entry_of("c", &[6.0, 8.0, 9.5]),
            ],
            Unit::ResponsesPerCpuSecond,
        );
        assert_eq!(r.leader_names(), ["a", "b"]);
        assert_eq!(r.lead, Lead::Tie { clear_of: None });

        // A wide range with a low median still overlaps the top one: it is in the group,
        // ahead of a narrow range with a higher median that does not.
        let r = rank(
            vec![
                entry_of("a", &[10.0, 12.0, 14.0]),
                entry_of("narrow", &[9.0, 9.2, 9.4]),
                entry_of("wide", &[2.0, 3.0, 10.5]),
            ],
            Unit::ResponsesPerCpuSecond,
        );
        assert_eq!(r.leader_names(), ["a", "wide"]);
        assert_eq!(r.entries[2].model, "narrow");
        assert_eq!(r.lead, Lead::Tie { clear_of: None });
    }

    #[test]
    fn one_run_each_ties_within_one_percent_and_claims_no_lead() {
        let one = |m: &str, v: f64| Entry { runs: 1, server_known: false, ..entry_of(m, &[v]) };
        let r = rank(vec![one("a", 100.0), one("b", 99.5), one("c", 50.0)], Unit::ResponsesPerCpuSecond);
        assert_eq!(r.leader_names(), ["a", "b"], "within 1%: tied");
        assert_eq!(r.lead, Lead::Tie { clear_of: None }, "no lead over c claimed on one run");
        let r = rank(vec![one("a", 100.0), one("b", 98.0)], Unit::ResponsesPerCpuSecond);
        assert_eq!(r.leader_names(), ["a"]);
        assert_eq!(r.lead, Lead::SpreadNotMeasured { next: "b".into() });
        let r = rank(vec![one("a", 100.0)], Unit::ResponsesPerCpuSecond);
        assert_eq!(r.lead, Lead::Alone);
        assert_eq!(rank(Vec::new(), Unit::P99Us).leaders, 0);
    }

    #[test]
    fn the_sweep_is_judged_at_100_else_the_largest_below_else_the_smallest() {
        assert_eq!(verdict_concurrency(&[10, 100, 1000]).map(|c| c.0), Some(100));
        assert_eq!(verdict_concurrency(&[10, 50, 1000]).map(|c| c.0), Some(50));
        assert_eq!(verdict_concurrency(&[1000, 10_000]).map(|c| c.0), Some(1000));
        assert_eq!(verdict_concurrency(&[]), None);
    }

    #[test]
    fn a_clear_winner_is_named_with_its_figure_spread_and_margin() {
        let r = three_models();
        let text = text(&r);
        let p = paragraph(&text, "Throughput per core (echo)");
        assert!(
            p.starts_with("Throughput per core (echo): use uring — 1.21 GB per server CPU-second (1.18–1.25, 3 runs); ahead of epoll (950 MB per server CPU-second) by 1.27×"),
            "{p}"
        );
        assert!(p.contains("this machine agrees"), "uring is the completion port's counterpart: {p}");
        assert!(p.contains("Table 6-3's flood row"), "{p}");
    }

    #[test]
    fn overlapping_models_are_named_as_a_tie() {
        let r = three_models();
        let v = verdict(&r);
        let m = measured(&v, Workload::HttpKeepAlive);
        assert_eq!(m.ranking.leader_names(), ["uring", "epoll"]);
        assert_eq!(m.concurrency, Some(100), "100 was measured: not 10, where tokio leads");
        let p = paragraph(&text(&r), "Throughput per core (HTTP keep-alive)");
        assert!(p.starts_with("Throughput per core (HTTP keep-alive): use uring or epoll (tie) — uring 108,000 responses per server CPU-second (104,000–112,000, 3 runs); epoll 105,000"), "{p}");
        assert!(p.contains("tie: uring, epoll — their ranges overlap; together ahead of tokio"), "{p}");
        assert!(!p.contains("ahead of epoll"), "{p}");
        assert!(
            p.contains("Measured on the HTTP keep-alive points at 100 connections (the verdict's concurrency)."),
            "{p}"
        );
    }

    #[test]
    fn a_client_bound_point_says_what_the_client_could_drive() {
        let v = verdict(&three_models());
        let b = measured(&v, Workload::HttpKeepAlive).bottleneck;
        assert_eq!((b.client_bound, b.server_bound, b.runs), (6, 0, 6));
        let p = paragraph(&text(&three_models()), "Throughput per core (HTTP keep-alive)");
        assert!(p.contains("Bottleneck: the client: the load used 90% or more of its cores in all 6 of the leaders' runs, so the figures say what the load could drive (per-CPU-second figures still compare)"), "{p}");
        let p = paragraph(&text(&three_models()), "Connection churn");
        assert!(p.contains("Bottleneck: neither"), "{p}");
        assert!(
            v.machine_limits
                .iter()
                .any(|l| l.starts_with("the load generator: 3 of 21 rows and points were client-bound")),
            "{:?}",
            v.machine_limits
        );
    }

    #[test]
    fn a_disturbed_run_opens_the_verdict_and_marks_its_figure() {
        let r = three_models();
        let text = text(&r);
        assert!(
            text.replace('\n', " ").contains(
                "The machine was busy during 1 point; its figures are marked: tokio rate-limited (1 of 3 runs)."
            ),
            "{text}"
        );
        let p = paragraph(&text, "Latency under load");
        assert!(p.starts_with("Latency under load: use tokio — p99 950 µs (900–1,000, 3 runs, machine busy in 1); ahead of epoll (p99 1.30 ms) by 1.37×"), "{p}");
        assert!(p.contains("The machine was busy during 1 of the leader's 3 runs"), "{p}");
        assert!(p.contains("Measured on the rate-limited row (3,000 connections in blocks of 1,000 at 200,000 B/s each, 600,000 B/s offered in all)."), "{p}");
        assert!(p.contains("the seeds timed no latency"), "{p}");
        assert!(p.contains("this machine differs: here tokio leads"), "{p}");
        assert!(markdown(&r).contains("**The machine was busy during 1 point;"));
        let mut with_threshold = r.clone();
        with_threshold.disturbed_above_cores = Some(0.25);
        with_threshold.reruns = Some(crate::results::Reruns { made: 2, budget: 6 });
        assert!(
            text_of(&with_threshold).replace('\n', " ").contains(
                "Busy: other processes used more than 0.25 cores beside the bench; 2 of at most 6 re-runs made."
            ),
            "{}",
            text_of(&with_threshold)
        );
        assert!(html(&r).contains("<p class=\"busy\" role=\"note\">The machine was busy during 1 point;"));

        let mut quiet = three_models();
        for m in &mut quiet.models {
            for row in &mut m.rows {
                row.repeats.iter_mut().filter_map(|r| r.interference.as_mut()).for_each(|i| i.disturbed = false);
            }
        }
        assert!(verdict(&quiet).disturbed.is_empty());
        assert!(!text_of(&quiet).contains("busy"));
    }

    fn text_of(r: &Results) -> String {
        text(r)
    }

    #[test]
    fn idle_connections_rank_those_that_held_all_by_memory_and_name_what_stopped_the_rest() {
        let mut r = three_models();
        let mut select = maximum(8000, &[1024.0; 3], &[2000.0; 3]);
        select.server_limits = Some(BTreeMap::from([("ceiling".to_owned(), 6976)]));
        r.models.push(model("select", vec![select], Vec::new()));
        let v = verdict(&r);
        let m = measured(&v, Workload::IdleConnections);
        assert_eq!(m.ranking.unit, Unit::KibPerConnection);
        assert_eq!(m.ranking.leader_names(), ["epoll", "tokio"], "1.0–1.03 and 1.01–1.04 KiB overlap");
        assert_eq!(m.limits, ["select held 1,024 of 8,000: stopped by the model's ceiling (FD_SETSIZE 1,024)"]);
        let p = paragraph(&text(&r), "Many idle connections");
        assert!(p.starts_with("Many idle connections: use epoll or tokio (tie) — epoll 1.01 KiB of server memory per connection (1.00–1.02, 3 runs)"), "{p}");
        assert!(p.contains("epoll, uring and tokio held all 8,000 (99% or more)"), "{p}");
        assert!(
            p.contains("Limits: select held 1,024 of 8,000: stopped by the model's ceiling (FD_SETSIZE 1,024)"),
            "{p}"
        );
        assert!(
            p.contains("this machine differs: here epoll and tokio lead (uring held all 8,000 too, with more server memory per connection)"),
            "{p}"
        );
        assert!(v.machine_limits.contains(&"select: FD_SETSIZE 1,024 descriptors per process".to_owned()));
        assert!(v.machine_limits.contains(&"open files: 20,000 per process (RLIMIT_NOFILE)".to_owned()));
        assert!(v.machine_limits.iter().any(|l| l.starts_with("threads: 96,365")));
    }

    #[test]
    fn when_none_held_all_the_most_held_leads() {
        let r = results(vec![
            model("select", vec![maximum(8000, &[1024.0; 3], &[2000.0; 3])], Vec::new()),
            model("blocking", vec![maximum(8000, &[3000.0, 3100.0, 3200.0], &[90_000.0; 3])], Vec::new()),
        ]);
        let v = verdict(&r);
        let m = measured(&v, Workload::IdleConnections);
        assert_eq!(m.ranking.unit, Unit::ConnectionsHeld { attempted: 8000 });
        assert_eq!(m.ranking.leader_names(), ["blocking"]);
        assert!(m.limits.iter().any(|l| l.starts_with("select held 1,024 of 8,000: stopped by a limit this run did not record (select's ceiling is FD_SETSIZE 1,024)")), "{:?}", m.limits);
        let p = paragraph(&text(&r), "Many idle connections");
        assert!(
            p.contains("use blocking — 3,100 of 8,000 connections held (3,000–3,200, 3 runs); ahead of select"),
            "{p}"
        );
        assert!(p.contains("uring was not measured here"), "{p}");
    }

    #[test]
    fn nginx_is_a_reference_never_the_model_to_use() {
        let mut r = three_models();
        r.nginx = Some(model("nginx", Vec::new(), vec![point(HttpWorkload::KeepAlive, 100, &[500e3, 510e3, 520e3])]));
        let v = verdict(&r);
        for w in &v.workloads {
            if let Ok(m) = &w.measured {
                assert!(!m.ranking.entries.iter().any(|e| e.model == "nginx"), "{:?}", w.workload);
            }
        }
        let text = text(&r);
        assert!(!text.contains("use nginx"), "{text}");
        let p = paragraph(&text, "Throughput per core (HTTP keep-alive)");
        assert!(p.contains("nginx (a reference, not a model to use): 510,000 responses per server CPU-second (500,000–520,000, 3 runs)"), "{p}");
        assert!(html(&r).contains("nginx (reference): 510k resp/CPU-s"), "{}", html(&r));
    }

    #[test]
    fn results_from_before_repetitions_say_the_spread_was_not_measured() {
        // Schema 1: no repeats, no spread; flood figures from the rows themselves.
        let flood = |received: f64| Row {
            kind: Some(RowKind::Flood),
            attempted: 1000,
            received_bytes_per_s: received,
            cpu_min_pct: 100.0,
            cpu_max_pct: 100.0,
            ..Row::default()
        };
        let mut r = results(vec![
            model("epoll", vec![flood(100e6)], Vec::new()),
            model("uring", vec![flood(99.5e6)], Vec::new()),
            model("tokio", vec![flood(60e6)], Vec::new()),
        ]);
        r.schema = 1;
        r.rounds = 1;
        let v = verdict(&r);
        let m = measured(&v, Workload::EchoThroughput);
        assert_eq!(m.ranking.leader_names(), ["epoll", "uring"], "within 1% on one run: tied");
        let text = text(&r);
        assert!(text.replace('\n', " ").contains("one run of each row and point, so no spread was measured"), "{text}");
        let p = paragraph(&text, "Throughput per core (echo)");
        assert!(
            p.contains("use epoll or uring (tie) — epoll 100 MB per server CPU-second (1 run: spread not measured)"),
            "{p}"
        );
        assert!(p.contains("tie: epoll, uring — within 1% on one run (spread not measured)"), "{p}");
        assert!(!p.contains("ahead"), "{p}");
        assert!(p.contains("the server's share was not recorded"), "{p}");

        r.models[1].rows[0].received_bytes_per_s = 90e6;
        let p = paragraph(&text_of(&r), "Throughput per core (echo)");
        assert!(p.contains("use epoll — 100 MB per server CPU-second (1 run: spread not measured); one run each, so no lead over uring (90.0 MB per server CPU-second) is claimed"), "{p}");
        assert!(p.contains("differs: here epoll leads (on one run, spread not measured)"), "{p}");
    }

    /// A schema-1 run (the README's default run of 2026-11-23, one run of each row and point).
    #[test]
    fn a_run_without_repetitions_renders_within_100_columns_and_claims_no_lead() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/default-2026-11-23-schema1.json");
        let r = Results::load(path).unwrap();
        let text = text(&r);
        assert!(text.starts_with("Verdict\n"), "{text}");
        for line in text.lines() {
            assert!(line.chars().count() <= 100, "{} columns: {line}", line.chars().count());
        }
        let flat = text.replace('\n', " ");
        assert!(!flat.contains("ahead of"), "one run each: {text}");
        assert!(flat.contains("Many idle connections: use epoll"), "{text}");
        assert!(flat.contains("select held 1,017 of 8,000"), "{text}");
    }

    /// HTTP/3 is judged when measured: Caddy beside as the reference (never the model to use),
    /// and a model that cannot serve HTTP/3 named with why, not as unmeasured.
    #[test]
    fn http3_is_judged_with_caddy_beside_and_a_model_that_cannot_named() {
        let h3 = |values: &[f64]| HttpPoint { http3: true, streams: Some(16), ..point(HttpWorkload::H3, 100, values) };
        let mut models = vec![
            model("epoll", Vec::new(), vec![h3(&[100e3, 110e3, 120e3])]),
            model("tokio", Vec::new(), vec![h3(&[50e3, 51e3, 52e3])]),
        ];
        let cannot = sockscale_server::Model::ALL.into_iter().find(|m| !m.serves_http3());
        if let Some(m) = cannot {
            models.push(model(m.name(), Vec::new(), Vec::new()));
        }
        let mut r = results(models);
        assert!(verdict(&r).workloads.iter().any(|w| w.workload == Workload::Http3Streams), "no caddy: still judged");
        r.caddy = Some(model("caddy", Vec::new(), vec![h3(&[9e3, 9.5e3, 10e3])]));
        let v = verdict(&r);
        let m = measured(&v, Workload::Http3Streams);
        assert_eq!(m.ranking.leader_names(), ["epoll"]);
        assert_eq!(m.reference.as_ref().map(|e| e.model.as_str()), Some("caddy"));
        assert!(m.unmeasured.is_empty(), "{:?}", m.unmeasured);
        let p = paragraph(&text(&r), "HTTP/3 streams");
        assert!(p.contains("Measured on the HTTP/3 points at 100 connections, 16 streams each"), "{p}");
        assert!(p.contains("caddy (a reference, not a model to use): 9,500 responses per server CPU-second"), "{p}");
        if let Some(c) = cannot {
            let why = c.limitation(sockscale_server::Policy::Http3).unwrap_or_default();
            assert!(m.notes.contains(&format!("{} cannot serve HTTP/3: {why}", c.name())), "{:?}", m.notes);
        }
    }

    /// The README's default run (three rounds): every line within 100 columns, the glance too.
    #[test]
    fn the_readme_run_renders_within_100_columns() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/images/bench-default-results.json");
        let r = Results::load(path).unwrap();
        let text = text(&r);
        for line in text.lines() {
            assert!(line.chars().count() <= 100, "{} columns: {line}", line.chars().count());
        }
        assert!(text.contains("At a glance"), "{text}");
        assert!(text.contains("3 runs of each row and point"), "{text}");
    }

    /// table.md opens with the verdict (after a partial run's note), then the tables.
    #[test]
    fn table_md_starts_with_the_verdict() {
        let mut r = results(Vec::new());
        assert!(table_md(&r).starts_with(markdown(&r).trim_end()), "{}", table_md(&r));
        r.interrupted = true;
        assert!(table_md(&r).starts_with("## Partial results\n\n"), "a partial run says so first");
    }

    #[test]
    fn an_empty_run_has_no_verdict_and_says_so() {
        let r = results(Vec::new());
        let v = verdict(&r);
        assert!(v.workloads.iter().all(|w| w.measured == Err("no model was measured".into())));
        assert!(v.workloads.iter().all(|w| w.agreement == Agreement::NotMeasured));
        assert!(text(&r).contains("No model was measured, so there is no verdict."));
        assert!(markdown(&r).starts_with("## Verdict\n"));
        let html = html(&r);
        assert!(html.starts_with("<section id=\"verdict\">") && html.trim_end().ends_with("</section>"), "{html}");
        assert!(!html.contains("<table>"));
    }

    #[test]
    fn unmeasured_workloads_say_why() {
        let mut r = three_models();
        r.interrupted = true;
        let v = verdict(&r);
        assert_eq!(
            workload(&v, Workload::TlsHandshakes).measured,
            Err("no HTTPS full handshake per request point in this run (the run was interrupted)".into())
        );
        assert!(!v.workloads.iter().any(|w| w.workload == Workload::Http2TlsStreams), "h2 over TLS only when measured");
        assert!(!v.workloads.iter().any(|w| w.workload == Workload::Http3Streams), "HTTP/3 only when measured");
        let p = paragraph(&text(&r), "TLS handshakes");
        assert!(p.contains("the seeds measured no TLS and say nothing about handshakes"), "{p}");
        let p = paragraph(&text(&r), "HTTP/2 streams");
        assert!(p.contains("Measured on the h2c points at 100 connections, 16 streams each"), "{p}");
        assert!(p.contains("the seeds say nothing about HTTP/2 — nothing to compare"), "{p}");
    }

    #[test]
    fn a_subset_of_models_is_said_and_the_seeds_pick_may_be_missing() {
        let mut r = three_models();
        r.models.retain(|m| m.model != "uring");
        let text = text(&r);
        assert!(text.contains("2 of the 9 models (epoll, tokio)"), "{text}");
        let p = paragraph(&text, "Throughput per core (echo)");
        assert!(p.contains("uring was not measured here, so no comparison"), "{p}");
    }

    #[test]
    fn the_seeds_picks_map_through_table_6_3() {
        assert_eq!(counterpart(COMPLETION_PORT), Some("uring"));
        assert_eq!(counterpart("Overlapped (events)"), Some("uring64"));
        assert_eq!(counterpart(EVENT_SELECT), Some("poll64"));
        assert_eq!(counterpart("WSAAsyncSelect"), Some("signal"));
        // Seed 003: the IOCP server led below 200 concurrent users only.
        let mut r = three_models();
        for m in &mut r.models {
            m.http.iter_mut().filter(|p| p.concurrency == 100).for_each(|p| p.concurrency = 1000);
        }
        let v = verdict(&r);
        let churn = workload(&v, Workload::ConnectionChurn);
        assert_eq!(churn.seeds.pick, None);
        assert_eq!(churn.agreement, Agreement::NoPick);
        assert!(churn.seeds.says.contains("at this concurrency it names no model"));
        assert_eq!(workload(&verdict(&three_models()), Workload::ConnectionChurn).agreement, Agreement::Agrees);
    }

    #[test]
    fn html_is_a_compact_escaped_table() {
        let mut r = three_models();
        r.models[2].model = "<b>tokio</b>".into();
        let html = html(&r);
        assert!(html.starts_with("<section id=\"verdict\">"));
        assert!(html.contains("<h2>Verdict</h2>"));
        assert!(html.contains("<th>Workload</th><th>Use</th><th>Figure and spread</th><th>Ahead by / tie</th><th>Bottleneck</th><th>Seeds say</th><th>Agrees?</th>"));
        assert!(!html.contains("<b>tokio"), "escaped: {html}");
        assert!(html.contains("&lt;b&gt;tokio&lt;/b&gt;"));
        assert!(html.contains("<td>1.21 GB/CPU-s (1.18–1.25, 3 runs)</td><td>ahead of epoll by 1.27×</td>"), "{html}");
        // Short cells: the longest text between tags stays a cell's worth.
        let table = html.split("<table>").nth(1).and_then(|t| t.split("</table>").next()).unwrap_or_default();
        let longest = table
            .split(['<', '>'])
            .enumerate()
            .filter(|(i, _)| i % 2 == 0)
            .map(|(_, t)| t.chars().count())
            .max()
            .unwrap_or(0);
        assert!(longest <= 160, "a cell of {longest} characters");
    }
}
