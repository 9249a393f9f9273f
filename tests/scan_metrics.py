"""Rows a Spark query's file scans produced, from the executed plan's own metrics: what Delta's
file skipping and Parquet's page skipping left to read (tests in ``tests/spark``)."""

from __future__ import annotations


def rows_scanned(df, table: str | None = None) -> int:
    """Rows output by the executed ``df``'s Parquet scans, of ``table`` only when given.

    Walks into adaptive execution's final plan and into its query stages (a shuffle's stage
    holds its plan as a leaf). Fails when ``table`` is given and no scan of it is found, so a
    count of 0 always means nothing was read.
    """
    rows, scans = 0, []

    def walk(node) -> None:
        nonlocal rows
        kind = node.getClass().getSimpleName()
        if kind == "AdaptiveSparkPlanExec":
            walk(node.executedPlan())
            return
        if kind.endswith("QueryStageExec"):
            walk(node.plan())
            return
        if node.nodeName().startswith("Scan parquet"):
            scans.append(node.nodeName())
            name = node.tableIdentifier()
            if table is None or (name.isDefined() and name.get().table() == table):
                rows += node.metrics().apply("numOutputRows").value()
        children = node.children().iterator()
        while children.hasNext():
            walk(children.next())

    walk(df._jdf.queryExecution().executedPlan())
    if table is not None:
        assert any(name.endswith("." + table) for name in scans), f"no scan of {table} in {scans}"
    return rows
