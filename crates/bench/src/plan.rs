//! `sockscale plan`: capacity arithmetic in the style of seed 004's Tables 14-1 and 14-2, and
//! predictions from measured results.
//!
//! Table 14-1: memory for asynchronous I/O is connections × operations outstanding per
//! connection × (buffer size + per-operation context); the seed's example uses 16 KiB buffers
//! and a 200-byte context, 16,584 bytes an operation. Table 14-2: the bandwidth each connection
//! gets is the link's bytes per second divided among the connections.
//!
//! With measured results the same question is answered from what this machine did: the growth
//! of server memory, kernel TCP memory and CPU per connection between the measured rows is
//! extrapolated to the target connection count.

use std::fmt::Write as _;

use crate::results::{thousands, Results, RowKind};

/// One line of Table 14-1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryLine {
    pub connections: u64,
    pub operations: u64,
    pub bytes: u64,
}

/// Memory for `connections` × `operations` outstanding, each a buffer plus a context.
pub fn memory(connections: u64, operations: u64, buffer: u64, context: u64) -> MemoryLine {
    MemoryLine {
        connections,
        operations,
        bytes: connections.saturating_mul(operations).saturating_mul(buffer + context),
    }
}

/// One line of Table 14-2.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BandwidthLine {
    pub connections: u64,
    pub megabits: f64,
    pub bytes_per_s_per_connection: f64,
}

/// The share of a `megabits` link each of `connections` gets, in bytes per second.
pub fn bandwidth(connections: u64, megabits: f64) -> BandwidthLine {
    BandwidthLine {
        connections,
        megabits,
        bytes_per_s_per_connection: megabits * 1e6 / 8.0 / connections.max(1) as f64,
    }
}

pub fn memory_table(connections: &[u64], operations: &[u64], buffer: u64, context: u64) -> String {
    let mut s = format!(
        "Memory for asynchronous I/O: {} bytes per operation ({} buffer + {} context)\n\n| Total Connections | Operations Per Connection | Total Memory (Bytes) |\n|---|---|---|\n",
        thousands(buffer + context),
        thousands(buffer),
        thousands(context)
    );
    for &ops in operations {
        for &c in connections {
            let line = memory(c, ops, buffer, context);
            let _ =
                writeln!(s, "| {} | {} | {} |", thousands(line.connections), line.operations, thousands(line.bytes));
        }
    }
    s
}

pub fn bandwidth_table(connections: &[u64], megabits: &[f64]) -> String {
    let mut s = String::from("Bandwidth per connection\n\n| Total Connections | Network Bandwidth (megabits) | Bytes/Second per Connection |\n|---|---|---|\n");
    for &mb in megabits {
        for &c in connections {
            let line = bandwidth(c, mb);
            let _ = writeln!(
                s,
                "| {} | {} | {} |",
                thousands(c),
                mb,
                thousands(line.bytes_per_s_per_connection.round() as u64)
            );
        }
    }
    s
}

/// What one connection costs a model, from measured rows.
#[derive(Debug, Clone, PartialEq)]
pub struct PerConnection {
    pub model: String,
    pub rss_bytes: f64,
    pub kernel_bytes: f64,
    /// Percent of one core per connection, at the rate-limited row's traffic.
    pub cpu_pct: f64,
    pub threads: f64,
    /// Largest number of connections measured.
    pub measured: u64,
}

/// Per-connection costs of `model`: the slope between its smallest and largest measured rows
/// (so fixed costs cancel out), or the ratio when only one row was measured.
pub fn per_connection(results: &Results, model: &str) -> Option<PerConnection> {
    let m = results.models.iter().find(|m| m.model == model)?;
    let mut rows: Vec<_> = m.rows.iter().filter(|r| r.connected > 0).collect();
    rows.sort_by_key(|r| r.connected);
    let (first, last) = (*rows.first()?, *rows.last()?);
    let n = |r: &crate::results::Row| r.connected as f64;
    let slope = |a: f64, b: f64| if n(last) > n(first) { (b - a) / (n(last) - n(first)) } else { b / n(last) };
    let rate = m.rows.iter().find(|r| r.kind == Some(RowKind::RateLimited)).unwrap_or(last);
    Some(PerConnection {
        model: model.into(),
        rss_bytes: slope(first.server_rss_kib as f64, last.server_rss_kib as f64).max(0.0) * 1024.0,
        kernel_bytes: slope(first.kernel_tcp_kib as f64, last.kernel_tcp_kib as f64).max(0.0) * 1024.0,
        cpu_pct: rate.cpu_max_pct / n(rate).max(1.0),
        threads: slope(first.threads as f64, last.threads as f64).max(0.0),
        measured: n(last) as u64,
    })
}

/// Predict what `target` connections need, for every model with measured rows.
pub fn predict(results: &Results, target: u64) -> String {
    let mut s = format!(
        "Predicted needs for {} connections, from the run of {} on {} ({} cores)\n\n| model | server memory | kernel TCP memory | CPU (cores, at the rate-limited traffic) | threads | measured up to |\n|---|---|---|---|---|---|\n",
        thousands(target),
        results.started,
        results.machine.cpu_model,
        results.machine.cores
    );
    for m in &results.models {
        let Some(p) = per_connection(results, &m.model) else {
            let _ = writeln!(s, "| {} | no measured rows | | | | |", m.model);
            continue;
        };
        let t = target as f64;
        let _ = writeln!(
            s,
            "| {} | {} MiB | {} MiB | {:.2} | {} | {} |",
            p.model,
            thousands((p.rss_bytes * t / 1_048_576.0).round() as u64),
            thousands((p.kernel_bytes * t / 1_048_576.0).round() as u64),
            p.cpu_pct * t / 100.0,
            thousands((p.threads * t).round() as u64),
            thousands(p.measured),
        );
    }
    s.push_str("\nExtrapolated linearly from the slope between the smallest and largest measured rows; beyond the measured range the server may meet limits (descriptors, threads, memory) that the extrapolation cannot see.\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every figure of seed 004's Table 14-1 (16 KiB buffers, a 200-byte context).
    #[test]
    fn memory_matches_table_14_1() {
        let per_op = (16384, 200);
        for (connections, ops, total) in [
            (10, 10, 1_658_400u64),
            (1_000, 10, 165_840_000),
            (50_000, 10, 8_292_000_000),
            (10, 2, 331_680),
            (1_000, 2, 33_168_000),
            (50_000, 2, 1_658_400_000),
        ] {
            assert_eq!(memory(connections, ops, per_op.0, per_op.1).bytes, total, "{connections} x {ops}");
        }
        let table = memory_table(&[10, 1000, 50000], &[10, 2], 16384, 200);
        assert!(table.contains("| 50,000 | 10 | 8,292,000,000 |"), "{table}");
        assert!(table.contains("16,584 bytes per operation"), "{table}");
    }

    /// Every figure of seed 004's Table 14-2.
    #[test]
    fn bandwidth_matches_table_14_2() {
        for (connections, megabits, per_connection) in [
            (100, 10.0, 12_500.0),
            (1_000, 10.0, 1_250.0),
            (50_000, 10.0, 25.0),
            (100, 100.0, 125_000.0),
            (1_000, 100.0, 12_500.0),
            (50_000, 100.0, 250.0),
        ] {
            assert_eq!(bandwidth(connections, megabits).bytes_per_s_per_connection, per_connection);
        }
    }

    #[test]
    fn prediction_uses_the_slope_between_rows() {
        use crate::results::{ModelResult, Row};
        let results = Results {
            models: vec![ModelResult {
                model: "epoll".into(),
                rows: vec![
                    Row {
                        kind: Some(RowKind::Flood),
                        connected: 1000,
                        server_rss_kib: 4000,
                        threads: 3,
                        cpu_max_pct: 50.0,
                        ..Row::default()
                    },
                    Row {
                        kind: Some(RowKind::RateLimited),
                        connected: 3000,
                        server_rss_kib: 6000,
                        threads: 3,
                        cpu_max_pct: 30.0,
                        ..Row::default()
                    },
                ],
                ..ModelResult::default()
            }],
            ..Results::default()
        };
        let p = per_connection(&results, "epoll").unwrap();
        assert_eq!(p.rss_bytes, 1024.0, "2000 KiB over 2000 connections");
        assert_eq!(p.threads, 0.0);
        assert_eq!(p.cpu_pct, 0.01);
        let table = predict(&results, 100_000);
        assert!(table.contains("| epoll | 98 MiB |"), "{table}");
    }
}
