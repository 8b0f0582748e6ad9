"""Spinner placement (``nodes.armada.scheduler``): filters, then sort."""

from __future__ import annotations

from nodes.armada.scheduler import NodeView, TaskRequest, rank_nodes

HERE = (40.10, -88.20)


def node(name: str, lat: float = 40.10, lon: float = -88.20, *, cpu: float = 1.0,
         free_cpu: float | None = None, memory: int = 1024, free_memory: int | None = None,
         tags: tuple[str, ...] = (), alive: bool = True, apps: tuple[str, ...] = ()
         ) -> NodeView:
    return NodeView(name, lat, lon, cpu, memory, cpu if free_cpu is None else free_cpu,
                    memory if free_memory is None else free_memory, frozenset(tags), alive,
                    frozenset(apps))


def request(cpu: float = 0.5, memory: int = 256, tags: tuple[str, ...] = (),
            app: str = "det") -> TaskRequest:
    return TaskRequest(app, cpu, memory, *HERE, frozenset(tags))


def names(ranking) -> list[str]:
    return [n.node_id for n in ranking.nodes]


def test_filters_resources_liveness_and_tags() -> None:
    nodes = [
        node("small", free_cpu=0.25),
        node("full-mem", free_memory=100),
        node("dead", alive=False),
        node("untagged"),
        node("ok", tags=("gpu",)),
    ]
    ranking = rank_nodes(nodes, request(tags=("gpu",)))
    assert names(ranking) == ["ok"]
    none = rank_nodes(nodes[:3], request())
    assert none.nodes == [] and "no node can host 0.5 CPU / 256 MB" in none.reason
    assert "1 too little free CPU" in none.reason and "1 not alive" in none.reason
    assert "1 too little free memory" in none.reason


def test_exact_fit_is_accepted_despite_float_sums() -> None:
    assert names(rank_nodes([node("n", free_cpu=0.1 + 0.2)], request(cpu=0.3))) == ["n"]


def test_near_nodes_first_least_loaded_among_them() -> None:
    nodes = [
        node("far-idle", 41.5, -87.6),
        node("near-busy", 40.101, -88.201, free_cpu=0.6),
        node("near-idle", 40.12, -88.17),
        node("farther-idle", 45.0, -93.0),
    ]
    assert names(rank_nodes(nodes, request())) == [
        "near-idle", "near-busy", "far-idle", "farther-idle",
    ]


def test_replicas_spread_unless_no_other_node_fits() -> None:
    nodes = [node("a", apps=("det",)), node("b", 41.5, -87.6)]
    spread = rank_nodes(nodes, request())
    assert names(spread) == ["b"] and not spread.colocated
    alone = rank_nodes([node("a", apps=("det",))], request())
    assert names(alone) == ["a"] and alone.colocated
    assert names(rank_nodes(nodes, request(app="other")))[0] == "a"
