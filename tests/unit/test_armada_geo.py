"""GeoHash and distance helpers of Armada (``nodes.armada.geo``), against known values."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodes.armada import geo


@pytest.mark.parametrize(
    ("lat", "lon", "precision", "expected"),
    [
        (57.64911, 10.40744, 11, "u4pruydqqvj"),  # the classic example
        (42.6, -5.6, 5, "ezs42"),
        (0.0, 0.0, 4, "s000"),
        (-90.0, -180.0, 3, "000"),
        (90.0, 179.999999, 3, "zzz"),
    ],
)
def test_encode_known_values(lat: float, lon: float, precision: int, expected: str) -> None:
    assert geo.encode(lat, lon, precision) == expected


def test_decode_known_value_and_bounds() -> None:
    lat, lon = geo.decode("ezs42")
    assert lat == pytest.approx(42.605, abs=0.001) and lon == pytest.approx(-5.603, abs=0.001)
    cell = geo.bounds("ezs42")
    assert cell.lat_min <= 42.6 <= cell.lat_max and cell.lon_min <= -5.6 <= cell.lon_max


def test_longitude_180_is_the_antimeridian() -> None:
    assert geo.encode(10.0, 180.0, 6) == geo.encode(10.0, -180.0, 6)


@pytest.mark.parametrize("bad", [(91.0, 0.0), (0.0, -180.5), (float("nan"), 0.0)])
def test_encode_refuses_points_off_the_globe(bad: tuple[float, float]) -> None:
    with pytest.raises(ValueError):
        geo.encode(*bad)


@pytest.mark.parametrize("bad", ["", "abc", "u4pruydqqvj00", "ezs4!"])
def test_bad_geohash_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        geo.bounds(bad)


def test_neighbours_of_a_known_cell() -> None:
    assert geo.neighbours("dqcjq") == [
        "dqcjw", "dqcjx", "dqcjr", "dqcjp", "dqcjn", "dqcjj", "dqcjm", "dqcjt",
    ]


def test_neighbours_cross_a_parent_cell_edge() -> None:
    # Two points 130 m apart on both sides of a precision-4 cell edge: their
    # precision-5 cells have different parents, yet each is the other's neighbour.
    west = geo.encode(42.6, -5.6265, 5)
    east = geo.encode(42.6, -5.6250, 5)
    assert west != east and west[:4] != east[:4]
    assert east in geo.neighbours(west) and west in geo.neighbours(east)


def test_neighbours_wrap_around_the_antimeridian() -> None:
    west_side = geo.encode(0.1, 179.99, 3)
    east_side = geo.encode(0.1, -179.99, 3)
    assert west_side == "xbp" and east_side == "800"
    assert east_side in geo.neighbours(west_side)
    assert west_side in geo.neighbours(east_side)


def test_no_neighbours_beyond_a_pole() -> None:
    found = geo.neighbours(geo.encode(89.99, 0.0, 2))
    assert len(found) == 5 and len(set(found)) == 5


@given(
    st.floats(-89.9, 89.9), st.floats(-180.0, 179.999), st.integers(1, 8)
)
def test_round_trip_and_eight_adjacent_neighbours(lat: float, lon: float, p: int) -> None:
    code = geo.encode(lat, lon, p)
    cell = geo.bounds(code)
    assert cell.lat_min <= lat <= cell.lat_max and cell.lon_min <= lon <= cell.lon_max
    assert geo.encode(*geo.decode(code), p) == code
    around = geo.neighbours(code)
    assert code not in around and len(around) == len(set(around))
    if cell.lat_min > -90 + 1e-9 and cell.lat_max < 90 - 1e-9:
        assert len(around) == 8


def test_block_is_the_cell_and_its_neighbours() -> None:
    assert geo.block(42.6, -5.6, 5) == {"ezs42", *geo.neighbours("ezs42")}


def test_haversine_known_distance() -> None:
    # Big Ben to the Statue of Liberty, about 5575 km.
    assert geo.haversine_km(51.5007, -0.1246, 40.6892, -74.0445) == pytest.approx(5575, abs=5)
    assert geo.haversine_km(10, 20, 10, 20) == 0.0
    assert geo.haversine_km(0, 179.5, 0, -179.5) == pytest.approx(111.2, abs=0.5)
