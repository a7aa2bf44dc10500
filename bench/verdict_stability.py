#!/usr/bin/env python3
"""Does `sockscale bench` give the same verdict twice, and keep it under a CPU hog?

Runs the bench's default profile (or --profile) `--quiet` times on a quiet machine, then once
more with a CPU hog (`sh -c 'while :; do :; done'`) pinned to the server's core 0 from
--hog-after seconds into the run for --hog-for seconds. Each run's verdict is read back with
`sockscale report RESULTS --verdict-json` (drawn from results.json alone), and the script
prints, per workload, the models each run says to use, whether they were told apart (ahead) or
tied, and whether the runs agree; then each run's wall time, disturbed points and re-runs.
Raw: bench-results/verdict-stability-<stamp>/summary.json, beside each run's own directory.

    python3 bench/verdict_stability.py                      # 2 quiet runs + 1 with a hog
    python3 bench/verdict_stability.py --quiet 1 --hog-after 60 --hog-for 120
"""
import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, build_sockscale  # noqa: E402


def run_bench(binary, profile, out, hog_after=None, hog_for=None, models=None):
    cmd = [binary, "bench", "--profile", profile, "--out", str(out)]
    if models:
        cmd += ["--models", models]
    started = time.monotonic()
    bench = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    hog = None
    hog_window = None
    if hog_after is not None:
        deadline = started + hog_after
        while bench.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if bench.poll() is None:
            hog = subprocess.Popen(["taskset", "-c", "0", "sh", "-c", "while :; do :; done"])
            hog_began = time.monotonic() - started
            end = time.monotonic() + hog_for
            while bench.poll() is None and time.monotonic() < end:
                time.sleep(0.2)
            hog.send_signal(signal.SIGKILL)
            hog.wait()
            hog_window = (round(hog_began, 1), round(time.monotonic() - started, 1))
    stdout, stderr = bench.communicate()
    wall = time.monotonic() - started
    if bench.returncode != 0:
        sys.exit(f"bench failed ({bench.returncode}): {stderr.strip().splitlines()[-1:]}")
    verdict = json.loads(
        subprocess.run(
            [binary, "report", str(out / "results.json"), "--verdict-json"], check=True, capture_output=True, text=True
        ).stdout
    )
    results = json.loads((out / "results.json").read_text())
    return {
        "out": str(out),
        "wall_s": round(wall, 1),
        "hog_window_s": hog_window,
        "reruns": results.get("reruns"),
        "verdict": verdict,
        "stdout_tail": stdout.strip().splitlines()[-40:],
    }


def leaders(run):
    """workload -> (sorted leaders, separated?)"""
    out = {}
    for w in run["verdict"]["workloads"]:
        out[w["workload"]] = (sorted(w.get("use_models") or []), bool(w.get("separated")))
    return out


def table(runs):
    """The comparison, from each run's verdict."""
    names = list(runs)
    per = {n: leaders(r) for n, r in runs.items()}
    workloads = []
    for n in names:
        for w in per[n]:
            if w not in workloads:
                workloads.append(w)
    quiet_names = [n for n in names if n.startswith("quiet")]
    lines = [
        f"| workload | {' | '.join(names)} | quiet runs name the same models | in every quiet run's answer | under the hog, where the quiet runs told the models apart |",
        f"|---|{'---|' * len(names)}---|---|---|",
    ]
    for w in workloads:
        cells = []
        for n in names:
            models, separated = per[n].get(w, ([], False))
            if not models:
                cells.append("not measured")
            elif len(models) == 1:
                cells.append(f"{models[0]}" + (" (ahead)" if separated else " (not told apart)"))
            else:
                cells.append(f"tie: {', '.join(models)}" + (" (clear of the rest)" if separated else ""))
        quiet = [per[n].get(w, ([], False)) for n in quiet_names]
        same = all(q[0] == quiet[0][0] for q in quiet) if quiet else None
        common = sorted(set.intersection(*(set(q[0]) for q in quiet))) if quiet else []
        apart = [q for q in quiet if q[1] and len(q[0]) == 1]
        if "hog" in per and apart and all(a[0] == apart[0][0] for a in apart):
            hog = per["hog"].get(w, ([], False))[0]
            verdict = "same" if hog == apart[0][0] else f"differs: {', '.join(hog)}"
        else:
            verdict = "n/a (no single model told apart in every quiet run)"
        lines.append(
            f"| {w} | {' | '.join(cells)} | {'yes' if same else 'no'} | {', '.join(common) or 'none'} | {verdict} |"
        )
    lines.append("")
    for n, r in runs.items():
        v = r["verdict"]
        lines.append(
            f"{n}: {r['wall_s']} s wall; points still marked disturbed {v.get('disturbed_points')}, measured again {v.get('measured_again_points')}; re-runs {r['reruns']}; hog window {r['hog_window_s']} s; {r['out']}"
        )
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="default")
    ap.add_argument("--models", help="comma-separated subset (default: all)")
    ap.add_argument("--quiet", type=int, default=2, help="quiet runs")
    ap.add_argument("--hog-after", type=float, default=60.0, help="seconds into the hog run the hog starts")
    ap.add_argument("--hog-for", type=float, default=120.0, help="seconds the hog runs")
    ap.add_argument("--no-hog", action="store_true")
    ap.add_argument("--summarize", metavar="SUMMARY_JSON", help="print the comparison of an earlier run's summary.json")
    args = ap.parse_args()
    if args.summarize:
        print(table(json.loads(Path(args.summarize).read_text())))
        return
    binary = build_sockscale()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    base = ROOT / "bench-results" / f"verdict-stability-{stamp}"
    base.mkdir(parents=True)
    runs = {}
    for i in range(args.quiet):
        name = f"quiet-{i + 1}"
        print(f"{name}: running", file=sys.stderr)
        runs[name] = run_bench(binary, args.profile, base / name, models=args.models)
    if not args.no_hog:
        print("hog: running", file=sys.stderr)
        runs["hog"] = run_bench(binary, args.profile, base / "hog", args.hog_after, args.hog_for, args.models)
    (base / "summary.json").write_text(json.dumps(runs, indent=2) + "\n")

    print(table(runs))
    print(f"raw: {base / 'summary.json'}")


if __name__ == "__main__":
    main()
