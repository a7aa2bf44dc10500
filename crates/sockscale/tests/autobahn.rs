//! Autobahn|Testsuite (`wstest -m fuzzingclient`) against `serve --proto ws` on every model:
//! fails on any case FAILED or UNIMPLEMENTED, naming the case and Autobahn's reason. Skipped,
//! saying why, where `wstest` is not installed (`.ci/run` installs it under Python 2.7).
//!
//! Which cases, to fit CI's time (measured on epoll, debug build: 1-11 take about 12 s, 12-13
//! about 570 s): 1-11 on every model; permessage-deflate's 12.1 and 13.1-13.2 and 13.4
//! (context takeover, and window bits) on epoll; every case 1-13 with `SOCKSCALE_AUTOBAHN_FULL=1`.

mod support;

use std::process::Command;
use std::time::Duration;

use support::ServerProc;

fn cases(model: &str) -> Vec<&'static str> {
    if std::env::var_os("SOCKSCALE_AUTOBAHN_FULL").is_some() {
        return vec!["1.*", "2.*", "3.*", "4.*", "5.*", "6.*", "7.*", "9.*", "10.*", "11.*", "12.*", "13.*"];
    }
    let mut cases = vec!["1.*", "2.*", "3.*", "4.*", "5.*", "6.*", "7.*", "9.*", "10.*", "11.*"];
    if model == "epoll" {
        cases.extend(["12.1.*", "13.1.*", "13.2.*", "13.4.*"]);
    }
    cases
}

fn autobahn_passes(model: &str) {
    let wstest = match support::ws::wstest() {
        Ok(path) => path,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let server = ServerProc::start(model, &["--proto", "ws"]);
    let dir = std::env::temp_dir().join(format!("sockscale-autobahn-{model}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("report dir");
    let spec = serde_json::json!({
        "outdir": dir.join("reports"),
        "servers": [{"agent": "sockscale", "url": format!("ws://{}", server.addr)}],
        "cases": cases(model),
        "exclude-cases": [],
        "exclude-agent-cases": {},
    });
    let spec_file = dir.join("fuzzingclient.json");
    std::fs::write(&spec_file, spec.to_string()).expect("write the spec");
    let out = Command::new(&wstest)
        .args(["-m", "fuzzingclient", "-s"])
        .arg(&spec_file)
        .current_dir(&dir)
        .output()
        .expect("run wstest");
    assert!(out.status.success(), "wstest: {}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let index = std::fs::read(dir.join("reports/index.json")).expect("Autobahn's index.json");
    let index: serde_json::Value = serde_json::from_slice(&index).expect("JSON");
    let results = index["sockscale"].as_object().expect("the agent's results");
    let mut counts = std::collections::BTreeMap::new();
    let mut bad = Vec::new();
    for (case, result) in results {
        let behavior = result["behavior"].as_str().unwrap_or("?").to_owned();
        if behavior == "FAILED" || behavior == "UNIMPLEMENTED" {
            let detail = result["reportfile"]
                .as_str()
                .and_then(|f| std::fs::read(dir.join("reports").join(f)).ok())
                .and_then(|r| serde_json::from_slice::<serde_json::Value>(&r).ok())
                .map(|r| r["result"].as_str().unwrap_or_default().to_owned())
                .unwrap_or_default();
            bad.push(format!("{case} {behavior}: {detail}"));
        }
        *counts.entry(behavior).or_insert(0) += 1;
    }
    eprintln!("autobahn against {model}: {counts:?}");
    assert!(!results.is_empty(), "no case ran");
    assert!(bad.is_empty(), "autobahn against {model}: {counts:?}\n{}", bad.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
    drop(server.stop_within(Duration::from_secs(10)));
}

macro_rules! autobahn {
    ($($model:ident),* $(,)?) => {
    $(
        mod $model {
            #[test] fn autobahn_fuzzingclient_passes() { if !super::support::unavailable(stringify!($model)) { super::autobahn_passes(stringify!($model)) } }
        }
    )*};
}

support::for_every_model!(autobahn);
