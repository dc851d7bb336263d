"""GPU telemetry per phase, energy per unit of work, and results that judge their own validity.

Pure functions over what the host side writes (:mod:`benchhost.sampler`: ``samples.csv`` and ``telemetry.json``;
the benchmarks through :mod:`benchhost.phaselog`: ``phases.jsonl``, and the sweep driver's per-request times in
``requests.jsonl``). Standard library only. See docs/telemetry.md.

* ``files``: the files' schemas (the sample columns, the sampler's note, a phase) and their readers;
* ``reasons``: clock-event (throttle) reason bits → names;
* ``energy``: samples cut per phase, per-GPU statistics, energy from the counter or the power integral;
* ``window``: the steady-state window of a serving phase, tokens in it, joules per output token;
* ``hostload``: the host's load over a phase from its two boundary snapshots;
* ``validity``: the rules (``Limits``) and the verdicts ok / noisy / throttled / contended;
* ``summary``: what they add up to: per-phase, per-GPU rows and the columns each result row gains.
"""
