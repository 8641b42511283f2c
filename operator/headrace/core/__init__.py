"""Pure decisions: validation, change classification, restart policy, conditions and the planner.

Owns: every choice the operator makes, as functions of (spec, status, observation, now).
Never: I/O, kopf, the kubernetes client, reading the clock, randomness.
"""
