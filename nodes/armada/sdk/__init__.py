"""Armada's client SDK: what a user application or a task links against.

``client`` (discovery, probing, selection and failover for compute: ``ArmadaClient``,
``SyncArmadaClient``, ``deploy``, ``app_status``), ``storage`` (the Cargo client
``StorageClient``), ``streaming`` (the frame-streaming client every Armada user runs) and
``transport`` (the sessions both SDKs send through), and, pure, ``choice`` (how a user
picks and leaves its replica) and ``failover`` (the event log and failover loop both SDKs
share). It
lives under ``nodes/`` because it runs inside emulated hosts (users, tasks); it imports
nothing from the harness's upper layers. The HTTP contract is ``docs/armada.md``.
"""
