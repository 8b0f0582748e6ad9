"""GeoHash encoding, decoding and neighbours, and great-circle distance. Pure.

Armada's geo-proximity search reduces the precision of a user's GeoHash to cover a wider
area and adds the eight surrounding cells, so that a node just across a cell edge is not
missed. Cells are handled through their bounding boxes, which makes neighbours correct
across every edge (including the antimeridian, where longitudes wrap) without the lookup
tables of the classic implementation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

BASE32 = "0123456789bcdefghjkmnpqrstuvwxyz"
_INDEX = {c: i for i, c in enumerate(BASE32)}
EARTH_RADIUS_KM = 6371.0088  # mean radius (IUGG)
MAX_PRECISION = 12


@dataclass(frozen=True)
class Cell:
    """The bounding box of a GeoHash cell, degrees."""

    lat_min: float
    lat_max: float
    lon_min: float
    lon_max: float

    @property
    def center(self) -> tuple[float, float]:
        """``(lat, lon)`` of the cell's centre."""
        return (self.lat_min + self.lat_max) / 2, (self.lon_min + self.lon_max) / 2


def _check_point(lat: float, lon: float) -> None:
    if not (-90.0 <= lat <= 90.0 and -180.0 <= lon <= 180.0):
        raise ValueError(f"expected lat in [-90, 90] and lon in [-180, 180], found {lat}, {lon}")


@lru_cache(maxsize=1 << 16)
def encode(lat: float, lon: float, precision: int = 5) -> str:
    """The GeoHash of ``(lat, lon)`` with ``precision`` characters (1..12).

    Longitude 180 is the same meridian as -180 and encodes like it. Answers are cached:
    the Application Manager and the simulator encode the same few hundred places for
    every query.
    """
    _check_point(lat, lon)
    if not 1 <= precision <= MAX_PRECISION:
        raise ValueError(f"precision must be in 1..{MAX_PRECISION}, found {precision}")
    if lon == 180.0:
        lon = -180.0
    lat_lo, lat_hi, lon_lo, lon_hi = -90.0, 90.0, -180.0, 180.0
    chars = []
    bits = 0
    value = 0
    even = True  # bits alternate, longitude first
    while len(chars) < precision:
        if even:
            mid = (lon_lo + lon_hi) / 2
            bit = lon >= mid
            lon_lo, lon_hi = (mid, lon_hi) if bit else (lon_lo, mid)
        else:
            mid = (lat_lo + lat_hi) / 2
            bit = lat >= mid
            lat_lo, lat_hi = (mid, lat_hi) if bit else (lat_lo, mid)
        value = value * 2 + int(bit)
        bits += 1
        even = not even
        if bits == 5:
            chars.append(BASE32[value])
            bits = value = 0
    return "".join(chars)


def bounds(geohash: str) -> Cell:
    """The bounding box of ``geohash``; raises :class:`ValueError` for a bad hash."""
    if not 1 <= len(geohash) <= MAX_PRECISION:
        raise ValueError(f"geohash length must be in 1..{MAX_PRECISION}, found {geohash!r}")
    lat_lo, lat_hi, lon_lo, lon_hi = -90.0, 90.0, -180.0, 180.0
    even = True
    for char in geohash.lower():
        if char not in _INDEX:
            raise ValueError(f"not a geohash character: {char!r} in {geohash!r}")
        value = _INDEX[char]
        for shift in range(4, -1, -1):
            bit = (value >> shift) & 1
            if even:
                mid = (lon_lo + lon_hi) / 2
                lon_lo, lon_hi = (mid, lon_hi) if bit else (lon_lo, mid)
            else:
                mid = (lat_lo + lat_hi) / 2
                lat_lo, lat_hi = (mid, lat_hi) if bit else (lat_lo, mid)
            even = not even
    return Cell(lat_lo, lat_hi, lon_lo, lon_hi)


def decode(geohash: str) -> tuple[float, float]:
    """The centre ``(lat, lon)`` of ``geohash``'s cell."""
    return bounds(geohash).center


def neighbours(geohash: str) -> list[str]:
    """The cells around ``geohash`` (N, NE, E, SE, S, SW, W, NW order, same precision).

    Eight cells, except next to a pole, where the cells beyond the pole do not exist;
    longitudes wrap around the antimeridian. Duplicates (possible only at precision 1
    near the poles) are dropped.
    """
    cell = bounds(geohash)
    lat_c, lon_c = cell.center
    dlat = cell.lat_max - cell.lat_min
    dlon = cell.lon_max - cell.lon_min
    found: list[str] = []
    for dy, dx in ((1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0), (-1, -1), (0, -1), (1, -1)):
        lat = lat_c + dy * dlat
        if not -90.0 < lat < 90.0:
            continue
        lon = (lon_c + dx * dlon + 180.0) % 360.0 - 180.0
        code = encode(lat, lon, len(geohash))
        if code != geohash and code not in found:
            found.append(code)
    return found


@lru_cache(maxsize=1 << 16)
def block(lat: float, lon: float, precision: int) -> frozenset[str]:
    """The 3x3 block of cells at ``precision`` centred on the cell of ``(lat, lon)``
    (cached like :func:`encode`)."""
    centre = encode(lat, lon, precision)
    return frozenset((centre, *neighbours(centre)))


@lru_cache(maxsize=1 << 18)
def haversine_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance in km between two points (degrees); cached like :func:`encode`
    (every query measures the same users against the same replicas)."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp = p2 - p1
    dl = math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_KM * math.asin(min(1.0, math.sqrt(a)))
