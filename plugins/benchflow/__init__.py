"""benchflow: GPU inference benchmark campaigns as Airflow DAGs.

Modules are small and pure where they can be: ``spec`` (campaign specs), ``remote`` (shell command
builders), ``hosts`` (where commands run), ``manifest`` (payload hashing), ``parsers`` (text to
tidy rows), ``expectations`` (GX suites), ``warehouse`` (DuckDB tables), ``factory`` (spec to DAG).
Heavy libraries (pandas, GX, duckdb, torch) are imported inside functions, never at module level,
so that parsing the DAG folder stays cheap.
"""
