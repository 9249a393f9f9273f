"""The tuning parameters of a partition plan: one frozen, validated value and its metadata.

Every layer derives its view of the parameters from here: the core's defaults
(:func:`dkmsks.core.partition.partition`, :class:`~dkmsks.core.partition.MainServer`,
:func:`~dkmsks.core.engine.build_engine`), the command-line flags of ``dkm`` and of the
``spark_apps`` (:mod:`dkmsks.flags`), the Airflow DAG Params (written as plain literals in
``dags/dkmsks_common.py`` so DAG parsing stays light; a DAG test checks them against
:data:`PARAMETERS`) and the ``params`` column of the plan table (:meth:`PartitionConfig.to_json`).

A parameter is declared once, in :data:`PARAMETERS`, with its type, default, bounds and help;
:class:`PartitionConfig` holds the values and refuses bad ones with a message that names the
parameter, the allowed values and what was given (STYLE "domain errors with fix-it messages").
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass, fields, replace
from enum import Enum
from typing import Any

__all__ = ["Method", "NewCost", "Ps2New", "Parameter", "PARAMETERS", "PartitionConfig", "DEFAULTS", "thread_count"]


class _Choice(str, Enum):  # noqa: UP042 (StrEnum would change str() and f-strings of members)
    """A string enum whose :meth:`from_str` lists the valid values when it refuses one."""

    @classmethod
    def _aliases(cls) -> dict[str, str]:
        return {}

    @classmethod
    def from_str(cls, text: Any) -> Any:
        if isinstance(text, cls):
            return text
        key = str(text).strip().lower().replace("_", "-")
        key = cls._aliases().get(key, key)
        try:
            return cls(key)
        except ValueError:
            valid = ", ".join(m.value for m in cls)
            raise ValueError(f"{cls._label()} must be one of {valid}, got {text!r}") from None

    @classmethod
    def _label(cls) -> str:
        return cls.__name__

    @classmethod
    def values(cls) -> list[str]:
        return [m.value for m in cls]


class Method(_Choice):
    """The partitioners (docs/design.md §2): KOP, SOP, DkM-SKS and PS²Stream extended to kNN (§2.5)."""

    KOP = "kop"
    SOP = "sop"
    DKM = "dkm"
    PS2 = "ps2"

    @classmethod
    def _aliases(cls) -> dict[str, str]:
        return {"dkm-sks": "dkm", "dkmsks": "dkm", "ps2stream": "ps2", "ps2-stream": "ps2", "ps²stream": "ps2",
                "ps²-stream": "ps2", "ps²": "ps2"}

    @classmethod
    def _label(cls) -> str:
        return "method"


class Ps2New(_Choice):
    """Where ``ps2`` puts a new subscription (docs/design.md §2.5): the worker with the lowest count
    (``argmin``, the method's rule) or its home leaf's worker (``route``, an option)."""

    ARGMIN = "argmin"
    ROUTE = "route"

    @classmethod
    def _label(cls) -> str:
        return "ps2_new"


class NewCost(_Choice):
    """How the main server costs a new subscription (docs/design.md §2, :mod:`~dkmsks.core.partition.server`).

    ``live``: over its actual ball (the whole space until it has ``k`` results), re-estimated
    as the ball shrinks — the project's default. ``paper``: the paper's estimate from its ball
    in ``O_init`` (Eq. 1 / Eq. 2 / Eq. 7 + Eq. 5).
    """

    LIVE = "live"
    PAPER = "paper"

    @classmethod
    def _label(cls) -> str:
        return "new_cost"


@dataclass(frozen=True)
class Parameter:
    """One tuning parameter: what the flag, the DAG Param and the validation are made from."""

    name: str
    kind: type  # int, float or a _Choice enum
    default: Any
    help: str
    minimum: float | None = None
    maximum: float | None = None
    below: float | None = None  # an exclusive maximum

    @property
    def flag(self) -> str:
        """The command-line flag of the parameter."""
        return "--" + self.name.replace("_", "-")

    @property
    def choices(self) -> list[str] | None:
        """The valid values of an enum parameter, ``None`` for the others."""
        return self.kind.values() if isinstance(self.kind, type) and issubclass(self.kind, _Choice) else None

    def check(self, value: Any) -> Any:
        """``value`` converted to this parameter's type, or a :class:`ValueError` naming it."""
        if isinstance(self.kind, type) and issubclass(self.kind, _Choice):  # as choices
            return self.kind.from_str(value)
        if isinstance(value, bool):
            raise ValueError(f"{self.name} must be a number, got {value!r}")
        if self.kind is int:
            try:
                number: float = int(value)
            except (TypeError, ValueError):
                raise ValueError(f"{self.name} must be an integer, got {value!r}") from None
            if number != value and not isinstance(value, str):
                raise ValueError(f"{self.name} must be an integer, got {value!r}")
        else:
            try:
                number = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"{self.name} must be a number, got {value!r}") from None
            if number != number or number in (float("inf"), float("-inf")):
                raise ValueError(f"{self.name} must be a finite number, got {value!r}")
        if self.minimum is not None and number < self.minimum:
            raise ValueError(f"{self.name} must be at least {_number(self.minimum)}, got {value!r}")
        if self.maximum is not None and number > self.maximum:
            raise ValueError(f"{self.name} must be at most {_number(self.maximum)}, got {value!r}")
        if self.below is not None and number >= self.below:
            raise ValueError(f"{self.name} must be below {_number(self.below)}, got {value!r}")
        return number


#: Every tuning parameter, in the order flags and forms list them. Paper defaults (§6):
#: ``m = 20``, ``θ = 20``, ``γ1 = 100,000``, ``γ2 = 20``.
PARAMETERS: tuple[Parameter, ...] = (
    Parameter("method", Method, Method.DKM, "partitioner: kop, sop or dkm (DkM-SKS)"),
    Parameter("workers", int, 20, "m, the number of workers", minimum=1, maximum=1024),
    Parameter("theta", int, 20, "SOP: split until theta * m regions", minimum=1),
    Parameter("gamma1", int, 100_000, "DkM-SKS: Algorithm 2 targets gamma1 * m subsets", minimum=1),
    Parameter("gamma2", int, 20, "DkM-SKS: subsets of at most gamma2 subscriptions also try Hybrid-Partition",
              minimum=0),
    # At most 32768: the worker index numbers its cells in 32 bits (dkmsks.core.worker_index.GridIndex).
    Parameter("grid", int, 16384, "DkM-SKS worker grid: G x G finest cells, plus coarser levels",
              minimum=1, maximum=32768),
    Parameter("t0", int, 0, "end of the initial phase T0: objects and insertions with t <= T0 are O_init and S"),
    Parameter("new_cost", NewCost, NewCost.LIVE,
              "cost of a new subscription: over its actual ball, re-estimated as it shrinks (live), "
              "or the paper's estimate from its ball in O_init (paper)"),
    Parameter("ps2_theta", int, 20, "ps2: split until ps2_theta * m leaves", minimum=1),
    Parameter("ps2_rho", float, 0.75,
              "ps2: a split is balanced when its larger child holds at most rho of the load (0.5 <= rho < 1)",
              minimum=0.5, below=1.0),
    Parameter("ps2_alpha", int, 1, "ps2: count weight of an object", minimum=0),
    Parameter("ps2_beta", int, 1, "ps2: count weight of a subscription", minimum=0),
    Parameter("ps2_new", Ps2New, Ps2New.ARGMIN,
              "ps2: a new subscription goes to the worker with the lowest count (argmin) or to its home "
              "leaf's worker (route)"),
)

_BY_NAME = {p.name: p for p in PARAMETERS}


@dataclass(frozen=True, kw_only=True)
class PartitionConfig:
    """The tuning parameters of one partition plan (docs/design.md §2), validated on construction.

    Values may be given as strings (from flags, forms or JSON); they are converted to the
    declared types, and a bad one raises :class:`ValueError` with the parameter's name.
    """

    method: Method = _BY_NAME["method"].default
    workers: int = _BY_NAME["workers"].default
    theta: int = _BY_NAME["theta"].default
    gamma1: int = _BY_NAME["gamma1"].default
    gamma2: int = _BY_NAME["gamma2"].default
    grid: int = _BY_NAME["grid"].default
    t0: int = _BY_NAME["t0"].default
    new_cost: NewCost = _BY_NAME["new_cost"].default
    ps2_theta: int = _BY_NAME["ps2_theta"].default
    ps2_rho: float = _BY_NAME["ps2_rho"].default
    ps2_alpha: int = _BY_NAME["ps2_alpha"].default
    ps2_beta: int = _BY_NAME["ps2_beta"].default
    ps2_new: Ps2New = _BY_NAME["ps2_new"].default

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, _BY_NAME[f.name].check(getattr(self, f.name)))
        if self.ps2_alpha == 0 and self.ps2_beta == 0:
            raise ValueError("ps2_alpha and ps2_beta cannot both be 0: every load would be 0")

    def partition_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :func:`dkmsks.core.partition.partition` after ``method``."""
        return {"m": self.workers, "theta": self.theta, "gamma1": self.gamma1, "gamma2": self.gamma2,
                "ps2_theta": self.ps2_theta, "ps2_rho": self.ps2_rho, "ps2_alpha": self.ps2_alpha,
                "ps2_beta": self.ps2_beta}

    def replace(self, **changes: Any) -> PartitionConfig:
        """A copy with ``changes`` applied (validated again)."""
        return replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-compatible values (enums as their strings)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    def to_json(self) -> str:
        """The configuration as sorted JSON."""
        return json.dumps(self.as_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> PartitionConfig:
        """From stored values; unknown keys are ignored and missing ones take their defaults
        (plans written before a parameter existed)."""
        return cls(**{k: v for k, v in values.items() if k in _BY_NAME})

    @classmethod
    def from_json(cls, text: str) -> PartitionConfig:
        """The configuration of :meth:`to_json`'s text, validated."""
        return cls.from_dict(json.loads(text))


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


#: The defaults, as one value (e.g. ``DEFAULTS.gamma1``).
DEFAULTS = PartitionConfig()


def thread_count(workers: int, name: str = "workers") -> int:
    """``workers`` (the argument ``name``), the threads a caller gives the core's initial-phase structures
    (:class:`~dkmsks.core.knn_init.StaticKnnIndex`, :class:`~dkmsks.core.stats.ObjectStatistics`,
    :func:`~dkmsks.core.engine.build_engine`), checked: at least 1.

    The core reads nothing of the machine (``tests/unit/test_core_purity.py``), so "one per
    usable core" is the caller's to count, with ``dkmsks.cores.usable_cores()`` (the CPU
    affinity and the cgroup's quota) — as the clock is the caller's to give."""
    try:
        count = None if isinstance(workers, bool) else operator.index(workers)
    except TypeError:
        count = None
    if count is None or count < 1:
        raise ValueError(f"{name} must be a number of threads, at least 1; got {workers!r} "
                         "(for one per usable core pass dkmsks.cores.usable_cores())")
    return count
