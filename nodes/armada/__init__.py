"""Armada, the edge cloud of the first seed: what runs inside the emulated hosts.

The services (Beacon, Application Manager, Spinner, Captain, Cargo Manager, Cargo), each
runnable as ``python -m nodes.armada.<name>`` with its parameters in ``configs.py``; the
tasks a Captain starts (``detect_task``, ``face_task``, ``echo_task``); the client SDK
(``sdk/``) and the in-host user agent (``user.py``). The pure parts (GeoHash, the
candidate-list algorithm, the placement scheduler, the auto-scaling rule in
``scaling.py``, the baselines' selection rules in ``baselines.py``, the SDK's choice and
failover rules in ``sdk/choice.py`` and ``sdk/failover.py``) import no HTTP library (the
layer test checks it), so they can be unit tested on their own and reused by a simulator
(Armada has none yet). The contract is ``docs/armada.md``; the
harness side (builders, driver, experiments) is ``testbed/systems/armada/``.
"""
