//! A page opened in a real browser, headless Chromium: it must load with no script error, no
//! `console.error` and no image or resource missing, and a screenshot of it is kept.
//!
//! The page's own check hook (report.rs `CHECK_SCRIPT`, on only with `?check` in its address)
//! writes what went wrong into `<pre id="console-errors">` and, once loaded, a count of its
//! images, figures and tables and of those broken into `<pre id="resource-check">`; Chromium's
//! `--dump-dom` prints the page as it then stands.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Chromium on this machine, or why the browser checks are skipped (CI installs Debian's
/// `chromium`).
pub fn chromium() -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    for name in ["chromium", "chromium-browser", "google-chrome"] {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
    }
    Err("no chromium on PATH (apt-get install chromium)".to_owned())
}

/// What the page reported about itself.
#[derive(Debug)]
pub struct Checked {
    /// "images=N figures=N tables=N sorts=N broken=0".
    pub resources: String,
    pub screenshot: PathBuf,
}

/// Where screenshots are kept: next to the test binaries, under `target/`.
pub fn screenshot_dir() -> PathBuf {
    let dir = Path::new(super::BIN).parent().unwrap_or(Path::new(".")).join("browser-screenshots");
    let _ = std::fs::create_dir_all(&dir);
    dir
}

fn run(browser: &Path, profile: &Path, args: &[String]) -> Result<String, String> {
    let out = Command::new(browser)
        .args(["--headless=new", "--disable-gpu", "--no-sandbox", "--hide-scrollbars", "--no-first-run"])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--virtual-time-budget=5000", "--window-size=1280,2000"])
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", browser.display()))?;
    if !out.status.success() {
        return Err(format!("{} failed: {}", browser.display(), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The text of `<pre id="ID">` in a dumped DOM, unescaped; `None` when there is none.
fn pre(dom: &str, id: &str) -> Option<String> {
    let open = format!("<pre id=\"{id}\">");
    let start = dom.find(&open)? + open.len();
    let end = dom[start..].find("</pre>")? + start;
    Some(dom[start..end].replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&"))
}

/// Open `page` in `browser`: an error if the page raised any error or has a broken image or
/// figure, or its check hook did not run; else its resource count, with a screenshot written
/// to `screenshot`.
pub fn check_page(browser: &Path, page: &Path, screenshot: &Path) -> Result<Checked, String> {
    let page = page.canonicalize().map_err(|e| format!("{}: {e}", page.display()))?;
    let profile = tempfile_dir("sockscale-chromium-profile");
    let url = format!("file://{}?check", page.display());
    let dom = run(browser, &profile, &["--dump-dom".into(), url.clone()]);
    // The screenshot as a person sees the page: without the check, which sorts its tables.
    let plain = format!("file://{}", page.display());
    let shot = run(browser, &profile, &[format!("--screenshot={}", screenshot.display()), plain]);
    let _ = std::fs::remove_dir_all(&profile);
    let dom = dom?;
    shot?;
    let errors =
        pre(&dom, "console-errors").ok_or("the page's check hook did not run (no <pre id=\"console-errors\">)")?;
    let resources =
        pre(&dom, "resource-check").ok_or("the page did not finish loading (no <pre id=\"resource-check\">)")?;
    let mut failures = Vec::new();
    if !errors.trim().is_empty() {
        failures.push(format!("errors in the page:\n{}", errors.trim()));
    }
    if !resources.contains(" broken=0") {
        failures.push(format!("broken: {resources}"));
    }
    if !screenshot.metadata().is_ok_and(|m| m.len() > 0) {
        failures.push(format!("no screenshot written to {}", screenshot.display()));
    }
    if failures.is_empty() {
        Ok(Checked { resources, screenshot: screenshot.to_path_buf() })
    } else {
        Err(format!("{}: {}", page.display(), failures.join("\n")))
    }
}

fn tempfile_dir(prefix: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let dir =
        std::env::temp_dir().join(format!("{prefix}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    let _ = std::fs::create_dir_all(&dir);
    dir
}
