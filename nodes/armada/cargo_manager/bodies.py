"""The Cargo Manager's request bodies: the fields each of its HTTP requests accepts.

Kept apart from the service because the state file (:mod:`nodes.armada.cargo_manager.state`)
stores the same values and checks them with the same fields.
"""

from __future__ import annotations

from nodes.armada.configs import NODE_TYPES
from nodes.armada.fields import (
    CONSISTENCIES,
    MAX_DIM,
    NAME_RE,
    STRATEGIES,
    enum_field,
    lat_field,
    locations_field,
    lon_field,
    pattern_field,
    source_field,
    tags_field,
    url_field,
)
from nodes.common import Field, int_field, str_field

REGISTER_FIELDS = {
    "cargo_id": str_field(),
    "url": url_field(),
    "lat": lat_field(),
    "lon": lon_field(),
    "capacity_bytes": int_field(1),
    "node_type": enum_field(NODE_TYPES, required=False),
    "tags": tags_field(),
    "apps": Field("array of application names",
                  lambda v: isinstance(v, list) and all(isinstance(a, str) for a in v),
                  required=False),
}
STORAGE_FIELDS = {
    "app": pattern_field(NAME_RE, "name of 1-40 characters a-z, 0-9, '-'"),
    "locations": locations_field(),
    "replication": int_field(1, 10, required=False),
    "consistency": enum_field(CONSISTENCIES, required=False),
    "strategy": enum_field(STRATEGIES, required=False),
    "quota_bytes": int_field(1, required=False),
    "dim": int_field(1, MAX_DIM, required=False),
    "source": source_field(("inline", "url", "file")),
}
QUERY_FIELDS = {
    "app": str_field(),
    "lat": lat_field(),
    "lon": lon_field(),
    "topn": int_field(1, 10, required=False),
}
