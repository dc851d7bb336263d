"""benchhost: the host core, the code of this project that runs on a benchmark host.

Standard library only (``pynvml`` when the sampler finds it), no Airflow and no third-party package: it is
shipped inside every payload as ``payload/benchhost/`` (beside the payload's scripts, which import it as a
package), and the runtime library (:mod:`benchflow`) imports it as an ordinary package, so both sides read the
host's files and decide a load search with the same code.

* ``loadsearch``: the load search's statistics and state machine (the sweep driver decides on the host);
* ``phaselog``: ``phases.jsonl``, one line per benchmark phase with its times and the host's load;
* ``sampler``: the GPU sampler (NVML, else ``nvidia-smi -lms``), run as ``python -m benchhost.sampler``;
* ``with_telemetry``: one command with the sampler beside it, then its telemetry per phase;
* ``telemetry``: reading the sampler's and the phase log's files, and the rules over them (energy, the
  steady window, host load, validity).
"""
