"""The emulator against ground truth captured on an H100 (tools/h100/tma_wgmma.py -> tests/data/)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from helpers.hopper import tensormap as tm
from helpers.hopper import tma
from helpers.hopper import wgmma as wg

DATA = Path(__file__).resolve().parents[1] / "data"


def _json(name: str) -> dict:
    p = DATA / name
    opener = gzip.open if name.endswith(".gz") else open
    with opener(p, "rt") as f:
        return json.load(f)


def global_pattern(nbytes: int, esize: int) -> np.ndarray:
    """The capture's global tensor bytes: element i of the allocation = i + 1 (little-endian, wrapped)."""
    dt = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[esize]
    return (np.arange(nbytes // esize, dtype=np.uint64) + 1).astype(dt).view(np.uint8)


def _alloc(c: dict) -> int:
    e = tm.element_size(c["dtype"])
    extent = c["dims"][0] * e if c["rank"] == 1 else c["strides"][-1] * c["dims"][-1]
    return ((extent + 255) // 256) * 256 + 256


@pytest.mark.parametrize("name", ["tensormap_verdicts.json.gz", "tensormap_box_limit.json", "tma_loads.json",
                                  "tma_loads_extra.json", "tma_stores.json", "wgmma.json", "wgmma_desc.json"])
def test_fixture_metadata(name):
    meta = _json(name)["meta"]
    assert "H100" in meta["gpu"] and meta["driver_version"] and meta["date_utc"] and meta["made_by"]


@pytest.mark.parametrize("name", ["tensormap_verdicts.json.gz", "tensormap_box_limit.json"])
def test_tensormap_verdicts_match_driver(name):
    doc = _json(name)
    disagree = []
    for c in doc["cases"]:
        r = c["rank"]
        try:
            tm.encode_tiled(c["dtype"], r, c["address"], c["dims"][:max(r, 0)], c["strides"][:max(r - 1, 0)],
                            c["box"][:max(r, 0)], c["estr"][:max(r, 0)], c["interleave"], c["swizzle"], c["l2"],
                            c["oob"])
            ok = True
        except tm.TensorMapError:
            ok = False
        if ok != (c["result"] == 0):
            disagree.append(c)
    assert len(doc["cases"]) >= (300 if name.endswith(".gz") else 30)
    assert not disagree, f"{len(disagree)} of {len(doc['cases'])} verdicts differ, e.g. {disagree[:3]}"


def _load_cases(name):
    doc = _json(name + ".json")
    z = np.load(DATA / (name + ".npz"))
    return [(i, c, z.get(f"case{i}")) for i, c in enumerate(doc["cases"])]


@pytest.mark.parametrize("name", ["tma_loads", "tma_loads_extra"])
def test_tma_load_images_bit_exact(name):
    n_images = 0
    for i, c, window in _load_cases(name):
        m = tm.encode_tiled(c["dtype"], c["rank"], 0, c["dims"], c["strides"], c["box"], c["estr"], 0,
                            c["swizzle"], 0, c["oob"])
        g = global_pattern(_alloc(c), m.element_size)
        if c.get("fault"):
            with pytest.raises(tma.TMAError):
                tma.load_tile(m, g, c["coords"], smem_address=c["dst_offset"])
            continue
        assert c["tx_complete"] == 1 and c["tx_exact"] == 1 and c["expect_bytes"] == tma.tx_bytes(m), (i, c)
        smem = np.full(window.size, 0xA5, np.uint8)  # the capture pre-filled shared memory with 0xA5
        tma.load_tile(m, g, c["coords"], smem_address=c["dst_offset"], smem=smem)
        assert np.array_equal(smem, window), (i, c)
        n_images += 1
    assert n_images >= 15


def test_tma_store_results_bit_exact():
    checked = 0
    for i, c, hw in _load_cases("tma_stores"):
        m = tm.encode_tiled(c["dtype"], c["rank"], 0, c["dims"], c["strides"], c["box"], c["estr"], 0,
                            c["swizzle"], 0, 0)
        nb = m.box_bytes
        if c.get("fault"):
            img = np.zeros(tma.smem_footprint(m), np.uint8)
            with pytest.raises(tma.TMAError):
                tma.store_tile(m, img, np.zeros(_alloc(c), np.uint8), c["coords"])
            continue
        # the capture wrote only the first box_bytes of shared memory; bytes beyond (read when rows are
        # narrower than the swizzle span) were whatever was there: compare what those cannot affect
        results = []
        for pad in (0x00, 0xFF):
            img = np.full(tma.smem_footprint(m), pad, np.uint8)
            img[:nb] = global_pattern(nb, m.element_size)
            g = np.full(_alloc(c), 0xEE, np.uint8)
            tma.store_tile(m, img, g, c["coords"])
            results.append(g)
        known = results[0] == results[1]
        assert np.array_equal(hw[known], results[0][known]), (i, c)
        assert (hw[~known] != 0xEE).all()
        checked += 1
    assert checked >= 10


def _wg_cases(name):
    doc = _json(name + ".json")
    z = np.load(DATA / (name + ".npz"))

    def arr(key):
        if key in z:
            return z[key]
        if key + "_i16" in z:
            return z[key + "_i16"].astype(np.float32)
        return None

    return [(c, z[c["img"]], arr(f"out{c['index']}"), arr(f"cin{c['index']}")) for c in doc["cases"]]


@pytest.mark.parametrize("name", ["wgmma", "wgmma_desc"])
def test_wgmma_fragments_bit_exact(name):
    cases = _wg_cases(name)
    for c, img, hw, cin in cases:
        out = wg.mma_async(img, int(c["desc_a"]), int(c["desc_b"]), c["n"], accum=cin, scale_d=c["scale_d"])
        assert out.shape == hw.shape == (128, c["n"] // 2)
        assert np.array_equal(out.view(np.uint32), hw.astype(np.float32).view(np.uint32)), c
    assert len(cases) >= 30


def test_wgmma_identifiable_fragments_match_layout():
    """D[r, c] = 256 r + c: every fragment names its own (row, col)."""
    for c, _img, hw, _cin in _wg_cases("wgmma"):
        if c["tag"] != "ident":
            continue
        n = c["n"]
        rows, cols = wg.fragment_maps(n)
        assert np.array_equal(hw, 256 * rows + cols)
