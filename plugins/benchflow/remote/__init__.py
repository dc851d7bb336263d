"""What runs on a benchmark host, as pure builders of shell commands paired with the parsers of their output:
``layout`` (where a run lives), ``jobs`` (detached launch, status, tail, kill), ``lease`` (one campaign per
host), ``preflight`` (host facts) and ``gpus`` (are the GPUs free). Operators, the trigger and the clean-up
functions call these; the only shell text they pass on unbuilt is the campaign author's (service and server
commands)."""
