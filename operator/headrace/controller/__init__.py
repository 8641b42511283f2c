"""The control loop: observe -> decide -> record intent in status -> act -> (next loop) record outcome.

Owns: reading what exists, calling the pure planner, the status recorder (the only writer of
.status), carrying out actions through the adapters, the work queue, and operator metrics.
Never: importing kopf, building manifests by hand (that is `headrace.render`), deciding.
"""
