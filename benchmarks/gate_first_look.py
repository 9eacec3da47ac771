"""The first look against its targets: one comparison of 4 processes a side against a fresh
baseline (no variance history), as ``gemmperf compare`` gives it. Pytest confirms a suspicious
point with re-runs; the CLI gates on this look alone.

Same noise model and regimes as ``benchmarks/gate_regimes.py`` (real 908 trace resampled by
whole steps, 1 % per-process factor; synthetic "heavy" and "bimodal"), first look only:

* every A/A regime of ``gate_regimes.py`` (2/3/4/8/16 processes per side, 8/16/23/32/64
  iterations per process, a candidate with 30 % fewer / 50 % more iterations) in every
  scenario: the fraction of tests with any ``regression`` (the shorter/longer candidates: any
  kernel ``regression`` or ``improvement``), at the default rule and at threshold 0; target
  <= 1 % in both;
* real trace, every GEMM 7 % slower in a test that gates GEMMs only, default rule: the mean
  fraction of GEMM rows that are ``regression`` (target >= 80 %);
* real trace, every GEMM 4 % slower, GEMMs only, threshold 0: tests that fail (>= 80 %);
* real trace, the top GEMM (largest total time) 5 % slower, all kernels gated, threshold 0:
  tests whose top-GEMM row is ``regression`` (>= 80 %).

One table: scenario, row, replicates, the measure at the default rule and at threshold 0, the
target, its 95 % interval (A/A rows: the one-sided Clopper-Pearson upper bound of the larger of
the two rates; effect rows: the two-sided interval of the measure the target names, Clopper-Pearson
for a fraction of tests, mean +- 1.96 standard errors for a mean fraction of rows) and whether the
target is met. Every row draws from its own seed (scenario, row), so rows run in parallel
(``--jobs``) and any selection gives the same numbers.

Run: ``python benchmarks/gate_first_look.py [--quick] [--reps-aa 300 --reps-eff 120]
[--scenarios ...] [--only LABEL,...] [--jobs N] [--progress N] [--shared-alpha A] [--seed-offset K] [--oracle]``
(``--shared-alpha``: another level for the ``*`` rows; ``--seed-offset``: another set of
replicates, to check that a choice is not tuned to one; ``--oracle``: the family rows and the top-GEMM
row with the simulation's true standard errors plugged in, what any valid test could reach: ``oracle``,
``top_oracle``); rows are printed to stderr as they finish (``--progress N``: and every N replicates, with
the counts so far). The table, its command and date are in
``docs/statistics.md`` ("First look").
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))

import gate_regimes as gr  # noqa: E402
from pytest_gemmperf.gate.compare import CV, SHARED  # noqa: E402

DEFAULT, ZERO = "default", "threshold 0"
DUR = "dur_ns"  # the duration rows of a compare_stats frame


@dataclass(frozen=True)
class Target:
    """What a regime's row must show: ``measure`` of ``rule`` compared with ``bound``."""

    regime: gr.Regime
    label: str
    measure: str  # a key of gate_regimes.one_test's per-rule dict
    rule: str | None  # None: both rules (A/A)
    at_most: bool
    bound: float

    def text(self) -> str:
        return f"{'<=' if self.at_most else '>='} {100 * self.bound:g} %"

    def met(self, value: float) -> bool:
        return value <= self.bound if self.at_most else value >= self.bound


def targets(scenario: str) -> list[Target]:
    aa = [Target(r, r.label, "alarm", None, True, 0.01) for r in gr.regimes() if r.kind == "aa"]
    if not scenario.startswith("real"):
        return aa
    fam7 = gr.Regime("family 7 % (GEMM-only test)", kind="family", effect=0.07)
    fam4 = gr.Regime("family 4 % (GEMM-only test)", kind="family", effect=0.04)
    top = gr.Regime("top GEMM 5 %", kind="top", effect=0.05)
    return aa + [Target(fam7, "GEMM family 7 %: GEMM rows `regression`", "GEMM rows", DEFAULT, False, 0.83),
                 Target(fam4, "GEMM family 4 %: test fails", "fails", ZERO, False, 0.9),
                 Target(top, "top GEMM 5 % (1 % process factor): its row `regression`", "detected", ZERO,
                        False, 0.9),
                 Target(fam7, "GEMM family 7 %: test fails", "fails", DEFAULT, False, 0.95),
                 Target(fam4, "GEMM family 4 % (0.8 x the threshold): test fails at the default", "fails",
                        DEFAULT, True, 0.10)]


@dataclass(frozen=True)
class Row:
    """One measured row of the table."""

    scenario: str
    target: Target
    reps: int
    value: dict[str, float]  # rule -> mean of the measure
    interval: tuple[float, float]  # 95 %: (lower, upper) of the judged value

    def met(self) -> bool:
        judged = [self.value[DEFAULT], self.value[ZERO]] if self.target.rule is None else [self.value[self.target.rule]]
        return all(self.target.met(x) for x in judged)

    def cells(self) -> list[str]:
        cells = {rule: f"{100 * v:.1f} %" for rule, v in self.value.items()}
        if self.target.rule is not None:
            cells[self.target.rule] = f"**{cells[self.target.rule]}**"
        lo, hi = self.interval
        ci = f"<= {100 * hi:.1f} %" if self.target.at_most else f"{100 * lo:.1f}-{100 * hi:.1f} %"
        return [self.scenario, self.target.label, str(self.reps), cells[DEFAULT], cells[ZERO], self.target.text(),
                ci, "yes" if self.met() else "NO"]


HEAD = ["scenario", "row", "reps", "default (5 %)", "threshold 0", "target", "95 % interval", "met"]


def interval(x: np.ndarray, at_most: bool) -> tuple[float, float]:
    """95 % interval of the mean of ``x``: Clopper-Pearson for 0/1 outcomes (one-sided upper
    bound when the target is an upper bound), else mean +- 1.96 standard errors."""
    n, k = len(x), float(np.sum(x))
    if np.isin(x, (0.0, 1.0)).all():
        if at_most:
            return 0.0, float(stats.beta.ppf(0.95, k + 1, n - k)) if k < n else 1.0
        lo = float(stats.beta.ppf(0.025, k, n - k + 1)) if k > 0 else 0.0
        hi = float(stats.beta.ppf(0.975, k + 1, n - k)) if k < n else 1.0
        return lo, hi
    m, se = float(np.mean(x)), float(np.std(x, ddof=1) / np.sqrt(n)) if n > 1 else 0.0
    return max(m - 1.96 * se, 0.0), min(m + 1.96 * se, 1.0)


_POOLS: dict[str, gr.ga.StepPool | None] = {}


def _pool(scenario: str) -> gr.ga.StepPool | None:
    if scenario not in _POOLS:  # once per worker process
        _POOLS[scenario] = gr.load_pool(scenario)
    return _POOLS[scenario]


@dataclass(frozen=True)
class Job:
    """One row to measure: the row ``index`` of ``targets(scenario)``, its replicate counts,
    the gate's ``shared_alpha`` (None: the default) and an offset of the row's seed."""

    scenario: str
    index: int
    reps_aa: int
    reps_eff: int
    shared_alpha: float | None = None
    seed_offset: int = 0
    #: further rows of the same regime, measured on the same replicates
    also: tuple[int, ...] = ()
    #: print the rows' counts so far every this many replicates (0: only the finished rows)
    progress: int = 0


def measure(job: Job) -> list[Row] | None:
    """The job's rows over its replicates of first looks (None: no real trace): the row
    ``index`` and the rows ``also`` of the same regime, on the same replicates."""
    pool = _pool(job.scenario)
    if pool is None:
        return None
    ts = [targets(job.scenario)[i] for i in (job.index, *job.also)]
    rng = np.random.default_rng([3000 + gr.ga.SCENARIO_SEEDS[job.scenario] + job.seed_offset, job.index])
    rules = gr.rules_at() if job.shared_alpha is None else gr.rules_at(shared_alpha=job.shared_alpha)
    gemm, top = gr.gemms(pool)
    n = job.reps_aa if ts[0].regime.kind == "aa" else job.reps_eff
    acc = [{DEFAULT: [], ZERO: []} for _ in ts]
    for i in range(n):
        out = gr.one_test(pool, rng, ts[0].regime, gemm, top, confirm=False, rules=rules)
        for t, a in zip(ts, acc):
            for rule in a:
                a[rule].append(out[rule][t.measure])
        if job.progress and (i + 1) % job.progress == 0 and i + 1 < n:
            # a run cut short still says how far each row got: its first i + 1 replicates
            for t, a in zip(ts, acc):
                print(f"  {job.scenario} | {t.label} | {i + 1} of {n} replicates so far: "
                      + ", ".join(f"{rule} {float(np.sum(v)):g}" for rule, v in a.items()), file=sys.stderr, flush=True)
    rows = []
    for t, a in zip(ts, acc):
        value = {rule: float(np.mean(v)) for rule, v in a.items()}
        # A/A: the bound of the worse rule
        judged = np.asarray(max(a.values(), key=np.mean)) if t.rule is None else np.asarray(a[t.rule])
        rows.append(Row(job.scenario, t, n, value, interval(judged, t.at_most)))
    return rows


def _log_se(d, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Log ratio and standard error (from the two-sided ``level`` t interval) of rows ``d``."""
    t = stats.t.ppf(0.5 + level / 2, d["df_t"].to_numpy(float))
    lo, hi = np.log(d["ci_low"].to_numpy(float)), np.log(d["ci_high"].to_numpy(float))
    return np.log(d["ratio"].to_numpy(float)), (hi - lo) / (2 * t)


def oracle(job: Job) -> str | None:
    """A family row's replicates with the simulation's truth plugged in where the gate must
    estimate it: what any valid test could reach (``--oracle``). The true standard error of an
    estimate is its spread over the replicates (every GEMM is slowed alike, so each kernel's
    estimates share one mean). For the ``*`` row: its rejection rate at three levels by the
    gate's t, by a z test with the true SE, and the power of a t on the same df with the true
    SE (noncentral t: the best a test that estimates the variance can do); for the GEMM rows:
    the fraction whose 80 % one-sided bound clears the threshold with the true SE (normal and t
    on 6 df quantiles) and with the gate's own SE and df (significance aside)."""
    pool = _pool(job.scenario)
    t = targets(job.scenario)[job.index]
    if pool is None or t.regime.kind not in ("family", "top"):
        return None
    rng = np.random.default_rng([3000 + gr.ga.SCENARIO_SEEDS[job.scenario] + job.seed_offset, job.index])
    rules = gr.rules_at() if job.shared_alpha is None else gr.rules_at(shared_alpha=job.shared_alpha)
    if t.regime.kind == "top":
        return top_oracle(job, pool, t, rules, rng)
    cfg = rules[DEFAULT]
    gemm, top = gr.gemms(pool)
    frames: list = []
    gate = [gr.one_test(pool, rng, t.regime, gemm, top, confirm=False, rules=rules, stats_out=frames)[t.rule][t.measure]
            for _ in range(job.reps_eff)]
    star, kern = [], []
    for i, st in enumerate(frames):
        d = st[st["metric"] == DUR]
        s = d[d["kernel"] == "*"]
        star.append((*[x[0] for x in _log_se(s, cfg.level)], float(s["df_t"].iloc[0]), float(s["p_value"].iloc[0])))
        k = d[(d["kernel"] != "*") & d["ratio"].notna()]
        est, se = _log_se(k, cfg.level)
        kern += list(zip([i] * len(k), k["kernel"].astype(str), est, se, k["df_t"].to_numpy(float)))
    sh = np.array(star, float)
    sd_star, df_star = float(np.std(sh[:, 0], ddof=1)), float(np.median(sh[:, 2]))
    effect = np.log1p(t.regime.effect)
    lines = [f"{job.scenario} | {t.label} | {job.reps_eff} replicates (seed offset {job.seed_offset}) | "
             f"gate: {100 * np.mean(gate):.1f} %",
             f"  '*' row: true SE {100 * sd_star:.3f} %, the gate's (median) {100 * np.median(sh[:, 1]):.3f} % "
             f"on {df_star:g} df"]
    for share in (0.5, 0.75, 1.0):
        a = share * cfg.fdr
        z = np.mean(np.abs(sh[:, 0]) / sd_star > stats.norm.ppf(1 - a / 2))
        nct = stats.nct.sf(stats.t.ppf(1 - a / 2, df_star), df_star, effect / sd_star)
        lines.append(f"    level {a:g}: gate's t {100 * np.mean(sh[:, 3] <= a):.1f} %; t with the true SE "
                     f"(noncentral t) {100 * nct:.1f} %; z with the true SE {100 * z:.1f} %")
    rep = np.array([k[0] for k in kern])
    name = np.array([k[1] for k in kern])
    est = np.array([k[2] for k in kern])
    se = np.array([k[3] for k in kern])
    true_se = np.empty(len(est))
    for n in np.unique(name):
        true_se[name == n] = np.std(est[name == n], ddof=1) if (name == n).sum() > 1 else np.nan
    thr = np.log1p(cfg.threshold)
    gate_df = np.array([k[4] for k in kern])

    def rows_clear(bound: np.ndarray) -> float:  # mean over replicates of the fraction of rows
        return float(np.mean([np.mean(bound[rep == i] > thr) for i in np.unique(rep)]))

    lines.append(f"  GEMM rows, 80 % bound > {100 * cfg.threshold:g} %: true SE, normal "
                 f"{100 * rows_clear(est - stats.norm.ppf(0.8) * true_se):.1f} %, t on 6 df "
                 f"{100 * rows_clear(est - stats.t.ppf(0.8, 6) * true_se):.1f} %; the gate's SE and df "
                 f"{100 * rows_clear(est - stats.t.ppf(0.8, gate_df) * se):.1f} %; true SE (median) "
                 f"{100 * np.nanmedian(true_se):.3f} %, the gate's {100 * np.median(se):.3f} %")
    return "\n".join(lines)


def top_oracle(job: Job, pool: gr.ga.StepPool, t: Target, rules: dict, rng: np.random.Generator) -> str:
    """The top-GEMM row's replicates with the simulation's truth plugged in (``--oracle``).

    Its evidence is the top GEMM's change relative to the other kernels of its processes (the
    test gates every kernel: no controls). A valid test of that one row among the ``m`` rows
    of its family rejects at about ``a / m`` (Bonferroni; Benjamini-Hochberg with one changed
    row is the same), ``a`` the whole budget ``fdr`` (the best any rule can give this row) or
    the gate's share of it ``(1 - shared_alpha) fdr``. At each level: a z test with the true
    standard error (the estimates' spread over the replicates), the power of a t whose
    variance is estimated without bias on the kernel's own ``n_b + n_c - 2`` df or on the
    gate's df (noncentral t, the best a test that estimates the variance on that many df can
    do), the classic t on the kernel's own variance (the same data), and the gate's own
    standard error and df (the gate's variance, a Bonferroni level instead of its BH); then
    the gate's standard error against the true one, part by part (per process)."""
    cfg = rules[DEFAULT]
    gemm, top = gr.gemms(pool)
    name = str(pool.names[top])
    frames: list = []
    gate = np.array([gr.one_test(pool, rng, t.regime, gemm, top, confirm=False, rules=rules,
                                 stats_out=frames)[t.rule][t.measure] for _ in range(job.reps_eff)])
    cols = ("rel", "se", "df", "m", "own_var", "prior_var", "floor_var", "resolution_var", "n_base", "n_cand")
    rec = {c: [] for c in cols}
    for st in frames:
        metric, kern = st["metric"].astype(str), st["kernel"].astype(str)
        fam = np.isfinite(st["p_value"].to_numpy(float)) & (metric != CV).to_numpy() \
            & ~((metric == DUR) & (kern == SHARED)).to_numpy()
        r = st[(metric == DUR) & (kern == name)].iloc[0]
        tq = stats.t.ppf(0.5 + cfg.level / 2, float(r["df_rel"]))
        rec["rel"].append(np.log(r["rel_ratio"]))
        rec["se"].append((np.log(r["rel_ci_high"]) - np.log(r["rel_ci_low"])) / (2 * tq))
        rec["df"].append(float(r["df_rel"]))
        rec["m"].append(int(fam.sum()))
        for c in cols[4:]:
            rec[c].append(float(r[c]))
    x = {c: np.asarray(v, float) for c, v in rec.items()}
    scale = np.sqrt(1 / x["n_base"] + 1 / x["n_cand"])  # per-process variance -> the change's SE
    true_se = float(np.std(x["rel"], ddof=1))
    effect = float(np.mean(x["rel"]))
    m = float(np.median(x["m"]))
    own_df = float(np.median(x["n_base"] + x["n_cand"] - 2))
    gate_df = float(np.median(x["df"]))
    se_own = np.sqrt(x["own_var"]) * scale
    share = 1 - cfg.shared_alpha
    lines = [f"{job.scenario} | {t.label} | {job.reps_eff} replicates (seed offset {job.seed_offset}) | gate: "
             f"{100 * np.mean(gate):.1f} %",
             f"  relative change {100 * np.expm1(effect):+.2f} % (mean), true SE {100 * true_se:.3f} %, the gate's "
             f"(median) {100 * np.median(x['se']):.3f} % on {gate_df:g} df; {m:g} rows in its family"]
    best = {}
    for label, a in (("whole budget", cfg.fdr), ("the gate's share", share * cfg.fdr)):
        lvl = a / m / 2  # two-sided, per row
        z = np.mean(np.abs(x["rel"]) / true_se > stats.norm.ppf(1 - lvl))
        nct = {d: float(stats.nct.sf(stats.t.ppf(1 - lvl, d), d, effect / true_se)) for d in (own_df, gate_df)}
        own = np.mean(np.abs(x["rel"]) / se_own > stats.t.ppf(1 - lvl, x["n_base"] + x["n_cand"] - 2))
        mine = np.mean(np.abs(x["rel"]) / x["se"] > stats.t.ppf(1 - lvl, x["df"]))
        best[label] = nct[gate_df]
        lines.append(f"    {label}, {a:g} / {m:g} rows: z with the true SE {100 * z:.1f} %; t with the true SE on "
                     f"{own_df:g} df {100 * nct[own_df]:.1f} %, on {gate_df:g} df {100 * nct[gate_df]:.1f} % "
                     f"(noncentral t); the kernel's own variance (t on {own_df:g} df) {100 * own:.1f} %; the gate's "
                     f"SE and df {100 * mine:.1f} %")
    per = true_se / float(np.median(scale))
    s2m = (x["se"] ** 2 - x["resolution_var"]) / scale ** 2
    lines.append(f"  per process (sd): true {100 * per:.3f} %; the gate's (median) "
                 f"{100 * np.median(np.sqrt(s2m)):.3f} %: the larger of the kernel's own "
                 f"{100 * np.median(np.sqrt(x['own_var'])):.3f} % moderated towards the prior's "
                 f"{100 * np.median(np.sqrt(x['prior_var'])):.3f} % and the sampling floor "
                 f"{100 * np.nanmedian(np.sqrt(x['floor_var'])):.3f} %; plus the timer's term (in the SE) "
                 f"{100 * np.median(np.sqrt(x['resolution_var'])):.3f} %")
    g = float(np.mean(gate))
    lines.append("  gate / oracle (t with the true SE on the gate's df): " + ", ".join(
        f"{label} {g / b:.3f}" for label, b in best.items() if b > 0))
    return "\n".join(lines)


def table(rows: list[Row]) -> str:
    cells = [HEAD] + [r.cells() for r in rows]
    w = [max(len(r[i]) for r in cells) for i in range(len(HEAD))]
    fmt = lambda r: "| " + " | ".join(c.ljust(k) for c, k in zip(r, w)) + " |"  # noqa: E731
    return "\n".join([fmt(cells[0]), "|" + "|".join("-" * (k + 2) for k in w) + "|"] + [fmt(r) for r in cells[1:]])


def jobs(scenarios: list[str], reps_aa: int, reps_eff: int, only: list[str], shared_alpha: float | None = None,
         seed_offset: int = 0, progress: int = 0) -> list[Job]:
    """Every selected row, the effect rows and the candidates with other iteration counts
    first (the slowest rows and the ones most worth seeing early)."""
    out = []
    for name in scenarios:
        first: dict[gr.Regime, list[int]] = {}  # rows of one regime share its replicates
        for i, t in enumerate(targets(name)):
            if not only or any(o in t.label for o in only):
                first.setdefault(t.regime, []).append(i)
        for i, *rest in first.values():
            out.append(Job(name, i, reps_aa, reps_eff, shared_alpha, seed_offset, tuple(rest), progress))

    def later(job: Job) -> bool:
        r = targets(job.scenario)[job.index].regime
        return r.kind == "aa" and r.cand_factor == 1.0

    return sorted(out, key=later)


def _completed(ex: ProcessPoolExecutor, todo: list[Job]):
    """(job, future) of every job, in the order they finish."""
    futures = {ex.submit(measure, job): job for job in todo}
    for f in as_completed(futures):
        yield futures[f], f


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps-aa", type=int, default=300)
    ap.add_argument("--reps-eff", type=int, default=120)
    ap.add_argument("--quick", action="store_true", help="40 A/A and 15 effect replicates")
    ap.add_argument("--scenarios", default="real-resampled,heavy,bimodal")
    ap.add_argument("--only", default="", help="comma-separated substrings of the row labels to run")
    ap.add_argument("--jobs", type=int, default=1, help="rows measured in parallel (processes)")
    ap.add_argument("--shared-alpha", type=float, default=None,
                    help="GateConfig.shared_alpha of both rules (default: the gate's)")
    ap.add_argument("--oracle", action="store_true",
                    help="family and top-GEMM rows only: the same replicates with the true standard errors "
                         "plugged in")
    ap.add_argument("--progress", type=int, default=0, metavar="N",
                    help="print each row's counts so far every N replicates (stderr; a run cut short keeps them)")
    ap.add_argument("--seed-offset", type=int, default=0,
                    help="added to every row's seed: another set of replicates (0: the documented table)")
    args = ap.parse_args(argv)
    if args.quick:
        args.reps_aa, args.reps_eff = 40, 15
    only = [o for o in args.only.split(",") if o]
    scenarios = args.scenarios.split(",")
    todo = jobs(scenarios, args.reps_aa, args.reps_eff, only, args.shared_alpha, args.seed_offset, args.progress)
    if args.oracle:
        for job in todo:
            text = oracle(job)
            if text:
                print(text, flush=True)
        return 0
    t0 = time.perf_counter()
    done: dict[tuple[str, int], Row | None] = {}
    with ProcessPoolExecutor(max_workers=args.jobs) if args.jobs > 1 else nullcontext() as ex:
        # each row is printed as soon as it is measured: a run cut short keeps what it finished
        results = ((job, f.result()) for job, f in _completed(ex, todo)) if ex is not None \
            else ((job, measure(job)) for job in todo)
        for job, got in results:
            for i, row in zip((job.index, *job.also), got or [None]):
                done[job.scenario, i] = row
                if row is not None:
                    print(" | ".join(row.cells()), file=sys.stderr, flush=True)
    rows = [done[k] for k in sorted(done, key=lambda k: (scenarios.index(k[0]), k[1])) if done[k] is not None]
    skipped = sorted({k[0] for k, r in done.items() if r is None})
    print(f"python benchmarks/gate_first_look.py {' '.join(argv if argv is not None else sys.argv[1:])}".rstrip()
          + f"  ({datetime.now(timezone.utc):%Y-%m-%d}, {time.perf_counter() - t0:.0f} s, {args.jobs} job(s))")
    print(f"first look, 4 + 4 processes, fresh baseline; A/A: any `regression` (other iteration counts: any "
          f"kernel `regression` or `improvement`) at either rule; effect rows: the measure in bold")
    print()
    print(table(rows))
    for name in skipped:
        print(f"scenario {name}: skipped (real trace absent)")
    return 0 if all(r.met() for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
