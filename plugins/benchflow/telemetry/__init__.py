"""GPU telemetry per phase, energy per unit of work, and results that judge their own validity.

Pure functions over what the host side writes (``kernels/telemetry/sampler.py``: ``samples.csv`` and
``telemetry.json``; ``kernels/moe/bench_moe.py`` and ``kernels/serving/sweep.py``: ``phases.jsonl`` and the
per-request times in ``requests.jsonl``). Standard library only, no Airflow: the GPU host's wrapper
(``kernels/telemetry/with_telemetry.py``) imports it too. See docs/telemetry.md.

* ``files``: read the three files (text in, typed records out);
* ``reasons``: clock-event (throttle) reason bits → names;
* ``energy``: samples cut per phase, per-GPU statistics, energy from the counter or the power integral;
* ``window``: the steady-state window of a serving phase, tokens in it, joules per output token;
* ``hostload``: the host's load over a phase from its two boundary snapshots;
* ``validity``: the rules (``Limits``) and the verdicts ok / noisy / throttled / contended;
* ``summary``: what they add up to: per-phase, per-GPU rows and the columns each result row gains;
* ``columns``: those columns as data (types, units), for the warehouse tables;
* ``host``: the shell commands that start the sampler on a host and wait for its first samples.
"""
