"""PS²Stream extended to kNN (docs/design.md §2.5): split rules, counting, home, LPT on hand-made
inputs whose expected values are worked out in the comments; plan invariants against
brute-force counts written here; the two-group greedy against a plain loop."""

from __future__ import annotations

import json
import math
from functools import lru_cache

import numpy as np
import pytest

from dkmsks.core.knn_init import StaticKnnIndex
from dkmsks.core.model import Objects, Rect, Subscriptions
from dkmsks.core.partition import MainServer, Method, PartitionPlan, SplitKind, partition
from dkmsks.core.partition.ps2 import ps2_partition, route_home, two_groups
from dkmsks.core.stats import ObjectStatistics
from partition_helpers import ball_box, random_world, space_of

pytestmark = pytest.mark.unit

INF = math.inf


def up(v: float) -> float:
    """The root's upper edges lie one ulp above the data space (decision 1)."""
    return math.nextafter(v, INF)


def world(objects: list[tuple[float, float, list[int]]],
          subs: list[tuple[float, float, list[int], float]] = ()):
    """Objects ``(x, y, keywords)`` and subscriptions ``(x, y, keywords, radius²)``."""
    o = Objects.build(np.arange(len(objects)), [p[0] for p in objects], [p[1] for p in objects],
                      [p[2] for p in objects], np.zeros(len(objects)))
    s = Subscriptions.build(np.arange(len(subs)) + 100, [p[0] for p in subs], [p[1] for p in subs],
                            [p[2] for p in subs], np.ones(len(subs)), np.zeros(len(subs)))
    r2 = np.array([p[3] for p in subs], dtype=np.float64)
    return o, s, r2, space_of(o, s)


def run(objects, subs=(), *, m: int = 1, theta: int = 2, **kw) -> PartitionPlan:
    o, s, r2, space = world(objects, subs)
    return ps2_partition(o, r2, s, space, m=m, theta=theta, **kw)


def terms_of(ss, j: int) -> np.ndarray | None:
    """The term set of subset ``j``: its keyword ids, or ``None`` for ALL."""
    return None if ss.all_terms[j] else ss.terms[ss.terms_ptr[j]:ss.terms_ptr[j + 1]]


def leaf_terms(plan: PartitionPlan) -> list[list[int] | None]:
    ss = plan.subsets
    return [None if t is None else t.tolist() for t in (terms_of(ss, j) for j in range(len(ss)))]


# ---------------------------------------------------------------------------- the split rule
def test_space_split_chosen_when_it_balances() -> None:
    # Root L = 4 objects + 2 subscriptions = 6. x values 1,2,8,9 (objects), 1,9 (centres):
    # cuts 2 / 8 / 9 leave 2 / 3 / 5 of weight 6 below; 8 is the half. Low [1,8): objects 1,2
    # and the subscription at 1 (radius 0) -> 3; high: objects 8,9 and the one at 9 -> 3;
    # ΔL = 0, max 3 <= 0.75·6. y: one value, no candidate. Text {0},{1}: every object holds
    # both terms -> 5 and 5, infeasible (> 4.5). Space wins.
    plan = run([(1, 5, [0, 1]), (2, 5, [0, 1]), (8, 5, [0, 1]), (9, 5, [0, 1])],
               [(1, 5, [0], 0.0), (9, 5, [1], 0.0)])
    ss = plan.subsets
    assert ss.region.tolist() == [[1.0, 5.0, 8.0, up(5)], [8.0, 5.0, up(9), up(5)]]
    assert ss.weight.tolist() == [3, 3]
    assert ss.kind.tolist() == [SplitKind.SPACE, SplitKind.SPACE]
    assert leaf_terms(plan) == [None, None]
    assert plan.subset.tolist() == [0, 1]
    assert plan.params["space_splits"] == 1 and plan.params["text_splits"] == 0


def test_text_split_chosen_when_it_duplicates_less() -> None:
    # Objects at x = 1..4 alternate terms 0 / 1; two infinite balls at 2.5 (terms 0 and 1).
    # L = 6. Space x: cut 2.5 (2 of 6 below: the half) gives 2 objects + both balls = 4 per
    # side, feasible (4 <= 4.5) but ΔL = 2. Text: term 0 weighs 2 objects + 1 ball = 3, term 1
    # also 3 -> {0} (3) and {1} (3), ΔL = 0: text wins.
    plan = run([(1, 5, [0]), (2, 5, [1]), (3, 5, [0]), (4, 5, [1])],
               [(2.5, 5, [0], INF), (2.5, 5, [1], INF)])
    ss = plan.subsets
    assert ss.kind.tolist() == [SplitKind.TEXT, SplitKind.TEXT]
    assert leaf_terms(plan) == [[0], [1]]
    assert ss.weight.tolist() == [3, 3]
    root = [1.0, 5.0, up(4), up(5)]
    assert ss.region.tolist() == [root, root]
    assert plan.subset.tolist() == [0, 1]


def test_no_feasible_candidate_takes_the_least_max() -> None:
    # 5 objects, one term, ρ = 0.5: feasible needs max <= 2.5, impossible. x: values
    # 1,1,1,1,2 -> cut 2 gives 4 | 1 (max 4). y: values 1,1,2,3,3 -> cuts 2 and 3 leave 2 and
    # 3 below, both 1 away from 2.5: the lower cut 2 -> 2 | 3 (max 3). Least max: y, although
    # x comes first in the tie order.
    plan = run([(1, 1, [0]), (1, 1, [0]), (1, 2, [0]), (1, 3, [0]), (2, 3, [0])], rho=0.5)
    ss = plan.subsets
    assert ss.region.tolist() == [[1.0, 1.0, up(2), 2.0], [1.0, 2.0, up(2), up(3)]]
    assert ss.weight.tolist() == [2, 3]


def test_a_leaf_that_cannot_split_is_final() -> None:
    # One location and one term: no candidate at all.
    plan = run([(5, 5, [0])] * 3, [(5, 5, [0], 0.0)], theta=5)
    assert len(plan.subsets) == 1 and plan.subsets.kind.tolist() == [SplitKind.ROOT]
    assert plan.subsets.weight.tolist() == [4] and plan.params["final_leaves"] == 1
    # One location, every object holds both terms: text gives {0} and {1} with all 3 objects
    # each, max 3 = L(p): no progress, final.
    plan = run([(5, 5, [0, 1])] * 3, theta=5)
    assert len(plan.subsets) == 1 and plan.subsets.weight.tolist() == [3]


def test_ties_space_before_text_and_x_before_y() -> None:
    # (1,1) and (2,2): x and y cuts at 2 both give 1 | 1, ΔL 0: x first.
    plan = run([(1, 1, [0]), (2, 2, [0])])
    assert plan.subsets.region.tolist() == [[1.0, 1.0, 2.0, up(2)], [2.0, 1.0, up(2), up(2)]]
    # (1,5) term 0, (2,5) term 1: the x cut and the text split both give 1 | 1, ΔL 0: space.
    plan = run([(1, 5, [0]), (2, 5, [1])])
    assert plan.subsets.kind.tolist() == [SplitKind.SPACE, SplitKind.SPACE]
    assert leaf_terms(plan) == [None, None]


def test_most_loaded_leaf_is_split_first_and_lpt_assigns_leaves() -> None:
    # Objects x = 1 (x3), 2 (x2), 3 (x2), one term. Root 7: cut 2 (3 below) -> 3 | 4. The 4
    # splits next at 3 -> 2 | 2. The 3 is one location (final), so are the 2s: 3 leaves,
    # depth-first [1,2) 3, [2,3) 2, [3,..) 2. LPT, m = 2: 3 -> w0, 2 -> w1, 2 -> w1 (2 < 3).
    plan = run([(1, 0, [0])] * 3 + [(2, 0, [0])] * 2 + [(3, 0, [0])] * 2, m=2)
    ss = plan.subsets
    assert [r[0] for r in ss.region.tolist()] == [1.0, 2.0, 3.0]
    assert ss.weight.tolist() == [3, 2, 2]
    assert ss.depth.tolist() == [1, 2, 2]
    assert ss.worker.tolist() == [0, 1, 1]
    assert plan.load_weight.tolist() == [3, 4]
    assert plan.params["final_leaves"] == 3


# ---------------------------------------------------------------------------- counting
COUNTING = ([(1, 0, [0]), (2, 0, [0]), (3, 0, [0]), (4, 0, [0])],
            [(2, 0, [0], 4.0), (1, 0, [0], 0.0), (4, 0, [0], INF)])


def test_subscription_counted_in_every_part_its_ball_meets() -> None:
    # x values: objects 1,2,3,4, centres 2,1,4 -> weight 7; cuts 2 / 3 / 4 leave 2 / 4 / 5
    # below: 3 is nearest the half. Low [1,3): objects 1,2; balls: at 2 (inside), at 1
    # (inside), infinite -> 2 + 3 = 5. High [3,4]: objects 3,4; the ball at 2 of radius 2
    # reaches 3 (distance 1); the ball at 1 of radius 0 does not; infinite -> 2 + 2 = 4.
    plan = run(*COUNTING, m=2, theta=1)
    ss = plan.subsets
    assert [r[2] for r in ss.region.tolist()][0] == 3.0
    assert ss.weight.tolist() == [5, 4]
    # Homes: centres 2 and 1 are low, 4 is high; LPT: 5 -> w0, 4 -> w1.
    assert plan.subset.tolist() == [0, 0, 1]
    assert plan.worker.tolist() == [0, 0, 1]
    assert ss.size.tolist() == [2, 1]
    assert plan.load_weight.tolist() == [5, 4]
    assert plan.weight.tolist() == [1, 1, 1]  # β each: counts, not costs


def test_weights_alpha_beta() -> None:
    # β = 2: x values weigh 1 (objects) and 2 (centres): 1:1+2, 2:1+2, 3:1, 4:1+2 = 10;
    # cuts 2 / 3 / 4 leave 3 / 6 / 7 below: 3 again. Low 2 + 2·3 = 8, high 2 + 2·2 = 6; max 8
    # > 0.75·10 so no candidate is feasible, but 8 < 10: the least max still splits.
    plan = run(*COUNTING, m=2, theta=1, beta=2)
    assert plan.subsets.weight.tolist() == [8, 6]
    assert plan.weight.tolist() == [2, 2, 2]
    # α = 0: only subscriptions count. Root 3; centres 1, 2, 4 weigh 1 each, objects 0: cuts
    # 2 / 3 / 4 leave 1 / 2 / 2 below, |2w - 3| = 1 for all: the lower cut 2. Mindist is to the
    # closed rectangle, so the ball centred on the cut meets both halves: low [1,2] holds the
    # balls at 1, 2 and the infinite one (3), high [2,4] the ball at 2 and the infinite one.
    # max 3 = L(p): no progress, the root stays the only leaf.
    plan = run(*COUNTING, alpha=0)
    assert len(plan.subsets) == 1 and plan.subsets.weight.tolist() == [3]


def test_term_set_filter_and_home_rule() -> None:
    # One location: only text splits. Objects: three with term 0, one each with 1 and 2.
    # s = {0,1,2}, s' = {0,1}, infinite balls. Term weights: 0 -> 3 + 2 = 5, 1 -> 1 + 2 = 3,
    # 2 -> 1 + 1 = 2. Greedy: 0 -> a (5), 1 -> b (3), 2 -> b (3 < 5) -> {0} | {1,2}.
    # Counted: a: objects with 0 (3), s and s' (share 0) -> 5; b: objects with 1 or 2 (2), s
    # and s' (share 1) -> 4. Root 7: max 5 <= 5.25.
    plan = run([(5, 5, [0])] * 3 + [(5, 5, [1]), (5, 5, [2])],
               [(5, 5, [0, 1, 2], INF), (5, 5, [0, 1], INF)])
    assert leaf_terms(plan) == [[0], [1, 2]]
    assert plan.subsets.weight.tolist() == [5, 4]
    # Home: s shares 1 term with leaf 0 and 2 with leaf 1 -> 1; s' shares 1 with each -> the
    # lower id, 0.
    assert plan.subset.tolist() == [1, 0]


def test_term_weights_pick_heaviest_first() -> None:
    # Co-located objects {0}, {0}, {1}, {2}, {2}: weights 2, 1, 2. Heaviest first with ties to
    # the lower id: 0 (a: 2), 2 (b: 2), 1 (tie -> a: 3) -> {0,1} | {2}: loads 3 | 2.
    plan = run([(0, 0, [0]), (0, 0, [0]), (0, 0, [1]), (0, 0, [2]), (0, 0, [2])])
    assert leaf_terms(plan) == [[0, 1], [2]]
    assert plan.subsets.weight.tolist() == [3, 2]


def test_two_groups_equals_a_plain_greedy_loop() -> None:
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(0, 60))
        w = np.sort(rng.choice([0, 1, 1, 2, 3, 5, 8, 40], n))[::-1]
        loads = [0, 0]
        expect = []
        for wi in w.tolist():
            g = 0 if loads[0] <= loads[1] else 1
            loads[g] += wi
            expect.append(g == 1)
        assert two_groups(w).tolist() == expect
    # 7 -> first (d = 7); 3, 3, 3 -> second (d = 4, 1, -2); 1, 1 -> first (d = -1, 0); 0 -> first.
    assert two_groups([7, 3, 3, 3, 1, 1, 0]).tolist() == [False, True, True, True, False, False, False]


# ---------------------------------------------------------------------------- parameters
@pytest.mark.parametrize("kw, match", [
    ({"ps2_theta": 0}, "ps2_theta must be"), ({"ps2_rho": 0.4}, "ps2_rho must be at least 0.5"),
    ({"ps2_rho": 1.0}, "ps2_rho must be below 1"), ({"ps2_rho": True}, "ps2_rho"),
    ({"ps2_alpha": -1}, "ps2_alpha must be"),
    ({"ps2_beta": 0.5}, "ps2_beta must be"), ({"ps2_alpha": 0, "ps2_beta": 0}, "cannot both be 0"),
])
def test_bad_parameters(kw, match) -> None:
    o, s, r2, space = world([(0, 0, [0])], [(0, 0, [0], 0.0)])
    with pytest.raises(ValueError, match=match):
        partition("ps2", None, r2[:, None], s, space, m=2, objects=o, **kw)


def test_method_names_and_missing_objects() -> None:
    for name in ("ps2", "PS2", "ps2stream", "PS²Stream", "ps2-stream", "ps²"):
        assert Method.from_str(name) is Method.PS2
    o, s, r2, space = world([(0, 0, [0])], [(0, 0, [0], 0.0)])
    with pytest.raises(ValueError, match="ps2 needs objects="):
        partition("ps2", None, r2[:, None], s, space, m=2)
    with pytest.raises(ValueError, match="ps2 needs the kNN"):
        partition("ps2", None, None, s, space, m=2, objects=o)
    # Only ps2 may go without statistics.
    with pytest.raises(ValueError, match="kop needs the ObjectStatistics"):
        partition("kop", None, None, s, space, m=2, objects=o)


# ---------------------------------------------------------------------------- invariants
@lru_cache(maxsize=8)
def random_plan(seed: int, m: int, theta: int):
    """Clustered objects and subscriptions on a lattice of step 4, so that many share a
    location and the split loop needs text splits and meets final leaves."""
    rng = np.random.default_rng(seed)
    objects, subs = random_world(rng, 400, 160, n_kw=6, k_max=5, clustered=True)
    objects = Objects(objects.ids, np.round(objects.x / 4) * 4, np.round(objects.y / 4) * 4,
                      objects.keywords, objects.t)
    subs = Subscriptions(subs.ids, np.round(subs.x / 4) * 4, np.round(subs.y / 4) * 4,
                         subs.keywords, subs.k, subs.t)
    knn = StaticKnnIndex.build(objects, 8, workers=2).query(subs, width=5)
    space = space_of(objects, subs)
    plan = partition("ps2", ObjectStatistics.build(objects, 8, workers=2), knn, subs, space, m=m,
                     objects=objects, ps2_theta=theta)
    r2 = knn[1][np.arange(len(subs)), subs.k - 1]
    return objects, subs, r2, space, plan


def brute_load(objects, subs, r2, region, terms) -> int:
    """L(p) by definition (§3.2), one item at a time (closed rectangle for mindist)."""
    x0, y0, x1, y1 = region
    share = (lambda kw: True) if terms is None else (lambda kw: bool(set(kw) & set(terms)))
    n_obj = sum(1 for i in range(len(objects))
                if x0 <= objects.x[i] < x1 and y0 <= objects.y[i] < y1
                and share(objects.keywords.row(i).tolist()))
    n_sub = 0
    for i in range(len(subs)):
        dx = max(x0 - subs.x[i], 0.0, subs.x[i] - x1)
        dy = max(y0 - subs.y[i], 0.0, subs.y[i] - y1)
        if dx * dx + dy * dy <= r2[i] and share(subs.keywords.row(i).tolist()):
            n_sub += 1
    return n_obj + n_sub


@pytest.mark.parametrize("seed, m, theta", [(1, 1, 4), (2, 3, 4), (3, 7, 3), (4, 20, 2), (5, 20, 20)])
def test_plan_invariants(seed: int, m: int, theta: int) -> None:
    objects, subs, r2, space, plan = random_plan(seed, m, theta)
    ss = plan.subsets
    n = len(subs)
    # Every subscription once, in input order, on its home leaf's worker, weighing β.
    assert np.array_equal(plan.sub_ids, subs.ids)
    assert plan.subset.min() >= 0 and plan.subset.max() < len(ss)
    assert np.array_equal(plan.worker, ss.worker[plan.subset])
    assert plan.weight.tolist() == [1] * n
    assert np.array_equal(np.bincount(plan.subset, minlength=len(ss)), ss.size)
    # At most θ·m leaves; worker loads are sums of leaf loads and add up to the total.
    assert len(ss) <= theta * m and len(ss) == plan.params["leaves"]
    assert np.array_equal(np.bincount(ss.worker, weights=ss.weight, minlength=m).astype(np.int64),
                          plan.load_weight)
    assert plan.load_weight.sum() == ss.weight.sum()
    assert plan.load_weight.max() <= ss.weight.sum() / m + ss.weight.max()  # LPT bound
    # L(p) by definition; every leaf is non-empty and no heavier than the root.
    root = len(objects) + n
    for j in range(len(ss)):
        assert ss.weight[j] == brute_load(objects, subs, r2, ss.region[j], terms_of(ss, j))
        assert 0 < ss.weight[j] <= root
    # Home: holds the centre, shares a term, and is the best such leaf (largest overlap, then
    # lowest id), found by a scan over all leaves.
    for i in range(n):
        psi = set(subs.keywords.row(i).tolist())
        best = None
        for j in range(len(ss)):
            x0, y0, x1, y1 = ss.region[j]
            if not (x0 <= subs.x[i] < x1 and y0 <= subs.y[i] < y1):
                continue
            t = terms_of(ss, j)
            ov = len(psi) if t is None else len(psi & set(t.tolist()))
            if ov and (best is None or ov > best[0]):
                best = (ov, j)
        assert best is not None and plan.subset[i] == best[1], i
    assert np.array_equal(route_home(ss, space, subs.x, subs.y, subs.keywords), plan.subset)
    # rect: the clipped MBR of the home balls.
    for j in range(len(ss)):
        rows = np.flatnonzero(plan.subset == j)
        if rows.shape[0]:
            boxes = np.array([ball_box(float(subs.x[i]), float(subs.y[i]), float(r2[i]), space) for i in rows])
            assert tuple(ss.rect[j]) == (boxes[:, 0].min(), boxes[:, 1].min(), boxes[:, 2].max(),
                                         boxes[:, 3].max())


def test_round_trips_and_determinism() -> None:
    objects, subs, r2, space, plan = random_plan(3, 7, 3)
    assert plan.params["text_splits"] > 0  # the term columns below are not all empty
    text = plan.to_json()
    assert PartitionPlan.from_json(text) == plan and PartitionPlan.from_json(text).to_json() == text
    meta, sub_cols, sets = plan.to_tables()
    json.dumps(meta)
    assert len({v.shape[0] for v in sets.values()}) == 1
    assert PartitionPlan.from_tables(meta, sub_cols, sets) == plan
    perm = np.random.default_rng(0).permutation(len(plan.subsets))
    assert PartitionPlan.from_tables(meta, sub_cols, {k: v[perm] for k, v in sets.items()}) == plan
    again = ps2_partition(objects, r2, subs, space, m=7, theta=3)
    assert again == plan and again.to_json() == text
    # A table without term columns (written before ps2) reads as ALL everywhere.
    legacy = {k: v for k, v in sets.items() if k not in ("terms", "all_terms")}
    back = PartitionPlan.from_tables(meta, sub_cols, legacy)
    assert back.subsets.all_terms.all() and back.subsets.terms.shape == (0,)


def test_no_subscriptions_and_no_objects() -> None:
    o, s, r2, _ = world([(0, 0, [0]), (1, 1, [1])])
    plan = ps2_partition(o, r2, s, Rect(0, 0, 1, 1), m=3, theta=2)
    assert len(plan) == 0 and plan.load_weight.sum() == plan.subsets.weight.sum() == 2
    empty = o.take(np.zeros(0, dtype=np.int64))
    plan = ps2_partition(empty, r2, s, Rect(0, 0, 1, 1), m=2, theta=2)
    assert len(plan.subsets) == 1 and plan.load_weight.tolist() == [0, 0]
    assert PartitionPlan.from_json(plan.to_json()) == plan


# ---------------------------------------------------------------------------- main server
def new_subs(rows: list[tuple[int, float, float, list[int]]]) -> Subscriptions:
    """New subscriptions ``(id, x, y, keywords)`` with k = 1."""
    return Subscriptions.build([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows],
                               [r[3] for r in rows], np.ones(len(rows)), np.ones(len(rows)))


def test_server_assigns_to_the_lowest_count_and_counts_beta() -> None:
    # COUNTING with β = 2 and m = 2: leaves 8 | 6 (test_weights_alpha_beta), L(w) = [8, 6].
    # Initial subscriptions 100, 101 live on w0 (homes in the low leaf), 102 on w1.
    plan = run(*COUNTING, m=2, theta=1, beta=2)
    server = MainServer(plan, None)
    assert server.load_weight.tolist() == [8, 6]
    # In input order, each to argmin C(w) and + β: 6 -> w1 (8, 8); tie -> w0 (10, 8); -> w1 (10, 10).
    got = server.assign(new_subs([(7, 0, 0, [0]), (8, 0, 0, [0]), (9, 0, 0, [0])]))
    assert got.tolist() == [1, 0, 1]
    assert server.load_weight.tolist() == [10, 10]
    assert server.lookup_weights([7, 100])[1].tolist() == [2, 2]
    # Deletions subtract β, for initial and new subscriptions alike.
    assert server.delete([102, 8]).tolist() == [1, 0]
    assert server.load_weight.tolist() == [8, 8]
    # Counts do not depend on balls: nothing to refresh, and the estimate is β.
    assert server.refresh([7, 9], [1.0, 0.0]) == 0
    assert server.estimate(new_subs([(11, 5, 5, [3])])).tolist() == [2 / 4]  # β / |O_init|
    assert server.load_weight.tolist() == [8, 8]


def test_server_ignores_new_cost_for_ps2() -> None:
    plan = run(*COUNTING, m=2, theta=1)
    live = MainServer(plan, None, new_cost="live")
    assert live.assign(new_subs([(7, 0, 0, [0]), (8, 0, 0, [0])])).tolist() == [1, 0]
    assert live.load_weight.tolist() == [6, 5]  # [5, 4] + 1 each
    assert live.refresh([7, 8], [INF, 1.0]) == 0 and live.load_weight.tolist() == [6, 5]


def test_server_route_option() -> None:
    # The text example: leaves {0} (w0) and {1} (w1), 3 and 3, so L(w) = [3, 3]. Routed: term
    # 1 -> leaf 1 -> w1 whatever the counts; term 0 -> w0; term 5 is in no leaf -> argmin of
    # [4, 4] -> w0.
    o, s, r2, space = world([(1, 5, [0]), (2, 5, [1]), (3, 5, [0]), (4, 5, [1])],
                            [(2.5, 5, [0], INF), (2.5, 5, [1], INF)])
    plan = ps2_partition(o, r2, s, space, m=2, theta=1)
    assert leaf_terms(plan) == [[0], [1]] and plan.subsets.worker.tolist() == [0, 1]
    server = MainServer(plan, None, ps2_new="route")
    got = server.assign(new_subs([(7, 3, 5, [1]), (8, 1, 5, [0, 9]), (9, 2, 5, [5])]))
    assert got.tolist() == [1, 0, 0]
    assert server.load_weight.tolist() == [5, 4]
    # A location outside the data space is clamped into it (docs/design.md §1).
    assert MainServer(plan, None, ps2_new="route").assign(new_subs([(7, 50, -9, [1])])).tolist() == [1]
    with pytest.raises(ValueError, match="ps2_new must be one of argmin, route"):
        MainServer(plan, None, ps2_new="home")


def test_an_empty_part_is_final() -> None:
    # α = 0 and no subscription: L(root) = 0, nothing to balance, although x could be cut.
    plan = run([(1, 0, [0]), (2, 0, [0])], alpha=0, theta=4)
    assert len(plan.subsets) == 1 and plan.subsets.weight.tolist() == [0]
