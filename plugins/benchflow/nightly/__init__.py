"""The nightly loop, one door: a night's verdict against its baseline (:mod:`.regressions`), the change points of
each series (:mod:`.changepoints`), which bisections a night starts by itself (:mod:`.auto_bisect`), and what a run
that missed its deadline does (:mod:`.deadline_alert`). The decision a person takes after a regressed night is
Airflow's HITL task, wired by :mod:`benchflow.pipeline`."""
