"""The paper's experiments as data: what a point is (:class:`Point`), what a run measures
(:class:`PaperConfig`: the figures, their settings and the points they need) and where finished
points are kept (:class:`Store`, one JSON line per point with its commit, machine and date).

The runner (:mod:`dkmsks.bench.paper`), the Spark points (:mod:`dkmsks.bench.paper_spark`)
and the report (:mod:`dkmsks.bench.paper_results`, :mod:`dkmsks.bench.paper_report`) all read
these; none of them is imported here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from dkmsks.bench.common import REPO, provenance
from dkmsks.core.config import DEFAULTS, Method, NewCost, PartitionConfig, Ps2New

#: Methods with the new-subscription estimate of their main server (docs/design.md §2): ours
#: (``live``) for KOP, SOP and DkM-SKS, and the paper's Eq. 7 / Eq. 2 estimate for DkM-SKS and
#: SOP; PS²Stream (§2.5) estimates nothing (a new subscription counts ``β``), so it has one
#: variant, stored as ``live``.
VARIANTS_SERIES: tuple[tuple[str, str], ...] = (
    ("dkm", "live"), ("ps2", "live"), ("kop", "live"), ("sop", "live"), ("dkm", "paper"), ("sop", "paper"),
)
VARIANTS_SWEEP: tuple[tuple[str, str], ...] = (
    ("dkm", "live"), ("dkm", "paper"), ("ps2", "live"), ("kop", "live"), ("sop", "live"),
)
#: The experiments. ``ps2long``: PS²Stream alone at the default setting of Tables 2-3 over the
#: Figure 7 run's timestamps, when those are different streams (the paper's observation on
#: PS²Stream is about its workers over time at the default setting).
FIGURES = ("tables", "fig7", "ps2long", "fig8", "fig9", "fig10")

# Rough seconds per timestamp at |S| = 1M, relative to each other: they only weight the progress
# bar so that its ETA means something.
_EST_TS_S = {"kop": 2.0, "sop": 1.9, "dkm": 0.12, "ps2": 2.0}
_EST_DATASET = {"place": 1.0, "twitter": 1.6}


@dataclass(frozen=True)
class Point:
    """One measured stream: the workload, the engine and how many timestamps."""

    dataset: str
    o_init: int
    subs: int
    k_max: int
    m: int
    method: str
    new_cost: str
    T: int
    seed: int = 7
    theta: int = 20
    gamma1: int = 100_000
    gamma2: int = 20
    grid: int = 16384
    run: int = 0
    ps2_theta: int = DEFAULTS.ps2_theta
    ps2_rho: float = DEFAULTS.ps2_rho
    ps2_alpha: int = DEFAULTS.ps2_alpha
    ps2_beta: int = DEFAULTS.ps2_beta
    ps2_new: str = DEFAULTS.ps2_new.value

    def key(self) -> str:
        """The point's identity in the store. The ``ps2_*`` parameters only enter the key of a
        PS²Stream point (the other methods ignore them, and their keys stay those of stores
        written before PS²Stream was measured)."""
        fields_ = asdict(self)
        if self.method != "ps2":
            fields_ = {k: v for k, v in fields_.items() if not k.startswith("ps2_")}
        return json.dumps(fields_, sort_keys=True)

    def config(self) -> PartitionConfig:
        """The core's parameters of this point (validated)."""
        return PartitionConfig(method=Method.from_str(self.method), workers=self.m, theta=self.theta,
                               gamma1=self.gamma1, gamma2=self.gamma2, grid=self.grid,
                               new_cost=NewCost.from_str(self.new_cost), ps2_theta=self.ps2_theta,
                               ps2_rho=self.ps2_rho, ps2_alpha=self.ps2_alpha, ps2_beta=self.ps2_beta,
                               ps2_new=Ps2New.from_str(self.ps2_new))

    def workload(self) -> tuple[str, int, int, int, int]:
        """The workload's identity: points with the same tuple share the generated workload."""
        return (self.dataset, self.o_init, self.subs, self.k_max, self.seed)

    def est_seconds(self) -> float:
        """A rough run time of the point in seconds, to order and report progress."""
        scale = max(self.subs, 1) / 1e6 * _EST_DATASET.get(self.dataset, 1.0)
        return 2.0 + self.T * _EST_TS_S[self.method] * scale


@dataclass
class PaperConfig:
    """What ``dkm bench paper`` measures (defaults: the issue's full run)."""

    datasets: tuple[str, ...] = ("place", "twitter")
    figures: tuple[str, ...] = FIGURES
    o_init: int = 1_000_000
    subs: int = 1_000_000
    m: int = 20
    k_max: int = 10
    t_series: int = 100
    t_sweep: int = 10
    series_subs: dict[str, int] = field(default_factory=dict)  # |S| of Figure 7 per data set
    t_table: int | None = None  # timestamps of the Tables 2-3 points (default: the Figure 7 run)
    table_subs: dict[str, int] = field(default_factory=dict)  # |S| of Tables 2-3 (default: subs)
    sweep_subs: int | None = None  # |S| of the m and k_max sweeps (default: subs)
    runs: int = 1  # repeats of every engine point (per-timestamp time medians over runs)
    ms: tuple[int, ...] = (5, 10, 20, 40)
    subs_values: tuple[int, ...] = (250_000, 500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000)
    subs_values_by_dataset: dict[str, tuple[int, ...]] = field(default_factory=dict)
    k_values: tuple[int, ...] = (5, 10, 20, 40)
    seed: int = 7
    theta: int = 20
    gamma1: int = 100_000
    gamma2: int = 20
    grid: int = 16384
    ps2_theta: int = DEFAULTS.ps2_theta
    ps2_rho: float = DEFAULTS.ps2_rho
    ps2_alpha: int = DEFAULTS.ps2_alpha
    ps2_beta: int = DEFAULTS.ps2_beta
    ps2_new: str = DEFAULTS.ps2_new.value
    variants_series: tuple[tuple[str, str], ...] = VARIANTS_SERIES
    variants_sweep: tuple[tuple[str, str], ...] = VARIANTS_SWEEP
    quick: bool = False

    @classmethod
    def quick_config(cls) -> PaperConfig:
        """Small sizes: the whole protocol on a small workload (the test uses it)."""
        return cls(o_init=20_000, subs=20_000, m=5, t_series=10, t_sweep=3, ms=(2, 5),
                   subs_values=(10_000, 20_000), k_values=(5, 10), grid=1024, quick=True)

    def subs_of(self, dataset: str, series: bool) -> int:
        """``|S|`` on ``dataset`` for the Figure 7 series (``series``) or the sweeps."""
        if series:
            return self.series_subs.get(dataset, self.subs)
        return self.sweep_subs if self.sweep_subs is not None else self.subs

    def base(self, dataset: str, *, series: bool = True, **over: Any) -> Point:
        """The default point on ``dataset`` with the fields of ``over`` replaced."""
        p = Point(dataset=dataset, o_init=self.o_init, subs=self.subs_of(dataset, series), k_max=self.k_max, m=self.m,
                  method="dkm", new_cost="live", T=self.t_series, seed=self.seed, theta=self.theta,
                  gamma1=self.gamma1, gamma2=self.gamma2, grid=self.grid, ps2_theta=self.ps2_theta,
                  ps2_rho=self.ps2_rho, ps2_alpha=self.ps2_alpha, ps2_beta=self.ps2_beta, ps2_new=self.ps2_new)
        return replace(p, **over)

    def sweep_values(self, fig: str, dataset: str) -> tuple[str, tuple[int, ...]]:
        """The parameter a sweep figure varies and its values on ``dataset``."""
        if fig == "fig8":
            return "m", self.ms
        if fig == "fig9":
            return "subs", self.subs_values_by_dataset.get(dataset, self.subs_values)
        if fig == "fig10":
            return "k_max", self.k_values
        raise ValueError(f"{fig} is not a sweep")

    def series_point(self, dataset: str, method: str, new_cost: str, run: int = 0) -> Point:
        """The Figure 7 point of a variant."""
        return self.base(dataset, method=method, new_cost=new_cost, run=run)

    def table_point(self, dataset: str, method: str, new_cost: str, run: int = 0) -> Point:
        """The default setting of Tables 2-3 and the issue's targets (``|S| = subs``)."""
        return self.base(dataset, method=method, new_cost=new_cost,
                         subs=self.table_subs.get(dataset, self.subs),
                         T=self.t_table if self.t_table is not None else self.t_series, run=run)

    def ps2_long_point(self, dataset: str, run: int = 0) -> Point:
        """PS²Stream at the default setting of Tables 2-3 over ``T_series`` timestamps."""
        return replace(self.table_point(dataset, "ps2", "live", run), T=self.t_series)

    def sweep_point(self, fig: str, dataset: str, value: int, method: str, new_cost: str,
                    run: int = 0) -> Point:
        """The point of sweep ``fig`` at ``value`` for a variant."""
        name, _ = self.sweep_values(fig, dataset)
        return self.base(dataset, series=False, method=method, new_cost=new_cost, T=self.t_sweep,
                         run=run, **{name: value})

    def series_twin(self, p: Point) -> Point:
        """The Figure 7 point (same run) whose first ``T_sweep`` timestamps are the same stream
        as ``p``."""
        return replace(p, T=self.t_series)

    def covered_by_series(self, p: Point) -> bool:
        """Whether the Figure 7 run of the same variant measures ``p`` too (its first ``p.T`` timestamps)."""
        twin = self.series_twin(p)
        return (self.t_series >= p.T and any(
            twin == self.series_point(p.dataset, me, nc, p.run) for me, nc in self.variants_series))

    def plan(self) -> list[Point]:
        """Every point to measure, in the order they run (cheap settings first)."""
        pts: list[Point] = []
        for ds in self.datasets:
            if "tables" in self.figures:
                for r in range(self.runs):
                    for me, nc in self.variants_series:
                        p = self.table_point(ds, me, nc, r)
                        if not self.covered_by_series(p):
                            pts.append(p)
            if "fig7" in self.figures:
                for r in range(self.runs):
                    pts += [self.series_point(ds, me, nc, r) for me, nc in self.variants_series]
            if "ps2long" in self.figures:
                for r in range(self.runs):
                    p = self.ps2_long_point(ds, r)
                    if p not in (self.series_point(ds, "ps2", "live", r), self.table_point(ds, "ps2", "live", r)):
                        pts.append(p)
            for fig in ("fig8", "fig10", "fig9"):
                if fig not in self.figures:
                    continue
                _, values = self.sweep_values(fig, ds)
                for r in range(self.runs):
                    for v in values:
                        for me, nc in self.variants_sweep:
                            p = self.sweep_point(fig, ds, v, me, nc, r)
                            if self.covered_by_series(p):
                                continue  # the Figure 7 run, cut to T_sweep timestamps
                            pts.append(p)
        seen: set[str] = set()
        out = []
        for p in pts:
            if p.key() not in seen:
                seen.add(p.key())
                out.append(p)
        return out


# --------------------------------------------------------------------------- results store
class Keyed(Protocol):
    """A point the store can hold: a :class:`Point` or a Spark point."""

    def key(self) -> str:
        """The point's identity in the store."""
        ...


class Store:
    """``DIR/results-<dataset>.jsonl``: one JSON object per finished (or failed) point,
    appended (one file per data set, so two processes may measure two data sets at once)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.records: dict[str, dict[str, Any]] = {}
        for path in sorted(directory.glob("results*.jsonl")) if directory.exists() else []:
            for line in path.read_text().splitlines():
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by an interruption
                self.records[rec["key"]] = rec  # a later line wins

    def done(self, p: Keyed) -> bool:
        """Whether ``p`` was measured successfully."""
        rec = self.records.get(p.key())
        return rec is not None and rec.get("status") == "ok"

    def get(self, p: Keyed) -> dict[str, Any] | None:
        """The record of ``p``, or ``None``."""
        return self.records.get(p.key())

    def add(self, rec: dict[str, Any]) -> None:
        """Append a record to its data set's file and keep it."""
        self.dir.mkdir(parents=True, exist_ok=True)
        with (self.dir / f"results-{rec['point']['dataset']}.jsonl").open("a") as fh:
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
            fh.flush()
        self.records[rec["key"]] = rec

    def find(self, **fields: Any) -> list[dict[str, Any]]:
        """Records whose point has every given field value."""
        return [r for r in self.records.values() if all(r["point"].get(k) == v for k, v in fields.items())]


def point_record(p: Any, status: str, *, code: Path = REPO, error: str = "") -> dict[str, Any]:
    """A store line for point ``p`` (a :class:`Point` or a Spark point): its key and fields, the
    status, the commit of the code that measured it, the machine and the date."""
    rec: dict[str, Any] = {"key": p.key(), "point": asdict(p), "status": status, **provenance(code=code)}
    if error:
        rec["error"] = error
    return rec
