//! What `sockscale bench` writes is what it measured: kernel socket memory from sockstat and
//! slabinfo as raw snapshots, and HTTP latency percentiles from the load's histogram.

mod support;

use std::process::Command;

use support::BIN;

#[test]
fn a_tiny_bench_keeps_kernel_snapshots_and_http_latency() {
    let dir = std::env::temp_dir().join(format!("sockscale-bench-measures-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = Command::new(BIN)
        .args(["bench", "--profile", "tiny", "--rounds", "1", "--models", "epoll", "--out"])
        .arg(&dir)
        .output()
        .expect("run bench");
    assert!(out.status.success(), "bench failed: {}", String::from_utf8_lossy(&out.stderr));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).expect("results.json")).expect("JSON");
    let epoll = &r["models"][0];
    let rows = epoll["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 3, "{epoll}");
    let sockstat_readable = std::fs::read_to_string("/proc/net/sockstat").is_ok();
    let slabinfo_readable = std::fs::read_to_string("/proc/slabinfo").is_ok();
    for row in rows {
        let k = &row["kernel"];
        assert!(k.is_object(), "every row has its kernel measurement: {row}");
        if sockstat_readable {
            let alloc = |s: &str| k[s]["alloc"].as_u64().unwrap_or_else(|| panic!("{s} in {k}"));
            // Both ends of every connection the server held were TCP sockets at once.
            let held = row["connected"].as_u64().unwrap_or(0);
            assert!(alloc("sockstat_peak") - alloc("sockstat_baseline") >= held, "{k}");
        } else {
            assert!(k["sockstat_peak"].is_null(), "unreadable sockstat is not measured, not 0");
        }
        if slabinfo_readable {
            assert!(k["slab_peak"]["TCP"]["num_slabs"].as_u64().is_some(), "{k}");
            assert!(k["slab_unmeasured"].is_null(), "{k}");
        } else {
            assert!(k["slab_peak"].is_null() && k["slab_unmeasured"].is_string(), "{k}");
        }
    }
    let http = epoll["http"].as_array().expect("http");
    assert!(!http.is_empty());
    for p in http {
        let l = &p["latency"];
        let ms = |f: &str| l[f].as_f64().unwrap_or_else(|| panic!("{f} in {p}"));
        assert!(l["count"].as_u64().unwrap_or(0) > 0, "{p}");
        assert!(0.0 < ms("p50_ms") && ms("p50_ms") <= ms("p99_ms") && ms("p99_ms") <= ms("max_ms"), "{p}");
    }
    let table = std::fs::read_to_string(dir.join("table.md")).expect("table.md");
    assert!(table.contains("### Request latency, ms: p50 / p99 (mean)"), "{table}");
    let _ = std::fs::remove_dir_all(&dir);
}
