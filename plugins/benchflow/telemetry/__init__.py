"""A run's GPU telemetry as the library uses it: ``run`` reads what one run left (through the host core's readers,
:mod:`benchhost.telemetry`) and gives its result rows their columns; ``columns`` declares those columns as data
(types, units) for the warehouse tables. The rules themselves (phases cut from samples, energy, the steady
window, host load, validity) are the host core's, standard library only, so that a GPU host's
``python -m benchhost.with_telemetry`` prints the same figures. See docs/telemetry.md.
"""
