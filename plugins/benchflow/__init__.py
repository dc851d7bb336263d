"""benchflow: GPU inference benchmark campaigns as Airflow DAGs; the runtime library that Airflow's scheduler,
dag-processor, workers, triggerer and api-server import. The operator's tools (the ``bench`` CLI, ``bench run``,
``bench up``) are :mod:`benchtools`; the code that runs on a benchmark host is :mod:`benchhost`, which this package
imports as an ordinary package.

The package by concern (the README's Layout table has one line each): ``spec`` and ``params`` (campaign specs and
the trigger form), ``kinds`` (each result kind declared as data: formats, columns, key, trends, suite),
``hosts`` and ``remote`` (where commands run, the commands), ``cleanup`` (undoing a run on its host),
``operators``/``triggers`` (behaviour), ``factory`` (spec to DAG), ``pipeline`` and ``artifacts`` (the steps after
the host work, the run's files), ``records`` (what a run produced), ``expectations`` (GX), ``warehouse`` (every
SQL statement: schema, loads, named queries), ``analysis`` and ``stats`` (regressions, comparisons, plots),
``searches`` (one engine for every search over campaign runs: bisection, config search), ``ui`` (the Benchmarks
view).
Heavy libraries (pandas, GX, duckdb, torch) are imported inside functions, never at module level, so that
parsing the DAG folder stays cheap.
"""
