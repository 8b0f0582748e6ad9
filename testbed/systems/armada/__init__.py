"""Armada (seed 000): an edge cloud over volunteer nodes, with its storage layer.

Services under ``nodes/armada/`` (Beacon, Application Manager, Spinner, Captain, Cargo
Manager, Cargo, the tasks), the client SDK, and the experiments of this package. Armada
has no simulator yet: its scenarios run in emulation only.
"""

from testbed.systems import Program, System

SYSTEM = System(
    name="armada",
    description="edge cloud over volunteer nodes with performance-aware selection and "
                "storage (seed 000)",
    programs=(
        Program("armada.beacon", "nodes.armada.beacon",
                "entry point: forwards users to the Application Manager and Captains to the "
                "Spinner", self_contained=True),
        Program("armada.app_manager", "nodes.armada.app_manager",
                "keeps each application's replicas and users' candidate lists"),
        Program("armada.spinner", "nodes.armada.spinner",
                "registry of Captains with health checks; places replicas"),
        Program("armada.captain", "nodes.armada.captain",
                "node agent: runs task replicas on its node"),
        Program("armada.cargo_manager", "nodes.armada.cargo_manager",
                "storage control: allocates Cargos, re-replicates on a loss"),
        Program("armada.cargo", "nodes.armada.cargo",
                "storage node: durable records and vector search"),
    ),
    generators={"frame-stream": "workloads.frame_stream:FrameStream",
                "face-recognition": "workloads.faces:FaceRecognition"},
    policies={
        "armada": "the SDK probes its TopN candidates with a frame and streams to the fastest",
        "armada-light": "the SDK probes its TopN candidates with a small request",
        "geo-nearest": "the geographically nearest replica",
        "random": "a uniformly random replica",
        "edge-to-cloud": "the nearest edge replica, the cloud when none answers",
        "reconnect": "one server; on failure reconnect to the next server",
    },
    experiments=(),
)
