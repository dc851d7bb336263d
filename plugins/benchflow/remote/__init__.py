"""What runs on a benchmark host, as pure builders of shell commands paired with the parsers of their output:
``layout`` (where a run lives), ``jobs`` (detached launch, status, tail, kill), ``lease`` (one campaign per
host) and ``preflight`` (host facts). Operators and the trigger call these and hold no shell text."""
