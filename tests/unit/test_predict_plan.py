"""The prediction pipeline's pure parts: roles on the command line, the wire format of a unit, and
the sizing of stages and credits from a profile."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hpcbench.predict import stages
from hpcbench.predict.config import PredictError, Roles, parse_args, parse_roles
from hpcbench.predict.plan import Layout, Profile, assign_ranks, candidates, make_plan


def profile(read=1e-4, prepare=3e-3, predict=1e-3, link=1e-5) -> Profile:
    return Profile(read, prepare, predict, 1e-6, link, link, link, 30e3, 12e3, 40.0)


# ---- roles ---------------------------------------------------------------------------------------
def test_roles_parse_with_an_implied_sink_and_a_fused_preprocess():
    assert parse_roles("auto") is None
    assert parse_roles("reader=1,preprocess=3,predict=5") == Roles(1, 3, 5)
    assert parse_roles(" predict=2 , reader=2 ") == Roles(2, 0, 2)
    assert parse_roles("reader=1,predict=1,sink=1").total == 3


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("reader=1,decode=2,predict=1", "expected 'auto' or NAME=COUNT"),
        ("reader=1,predict=x", "predict=x is not a whole number"),
        ("reader=1,predict=1,sink=2", "exactly one sink"),
        ("reader=0,predict=2", "at least one reader"),
        ("reader=1,reader=2,predict=1", "reader is given twice"),
        ("reader=1", "at least one predict"),
    ],
)
def test_bad_roles_are_one_line_naming_the_part(text, said):
    with pytest.raises(PredictError, match=said) as err:
        parse_roles(text)
    assert "\n" not in str(err.value) and text in str(err.value)


def test_bad_numbers_name_the_flag():
    with pytest.raises(PredictError, match="--batch-size must be at least 1, got 0"):
        parse_args(["--checkpoint", "c", "--input", "i", "--batch-size", "0"])
    with pytest.raises(PredictError, match="--stall-timeout"):
        parse_args(["--checkpoint", "c", "--input", "i", "--stall-timeout", "nan"])


# ---- the wire format -----------------------------------------------------------------------------
def test_a_unit_round_trips_every_dtype_and_shape_as_views_of_one_buffer():
    rng = np.random.default_rng(0)
    arrays = [
        np.arange(5, dtype=np.int64),
        np.array([0, 1, 0, 0, 1], dtype=np.int8),
        rng.integers(0, 255, (3, 1, 5, 7), dtype=np.uint8),
        rng.random((3, 4)).astype(np.float16),
        rng.random((3, 9)).astype(np.float32)[:, ::2],  # not contiguous: packed as a copy
        np.zeros(0, dtype=np.uint8),
    ]
    buf = stages.pack(stages.PREPARED, 17, arrays)
    assert buf.dtype == np.uint8 and buf.ndim == 1
    unit = stages.unpack(buf)
    assert (unit.kind, unit.number) == (stages.PREPARED, 17)
    for got, want in zip(unit.arrays, arrays, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        assert got.base is not None  # a view into the received buffer, not a copy
    assert stages.unpack(stages.end_marker()).kind == stages.END


def test_reasons_survive_newlines_in_them():
    blob = stages._reasons(["OSError: truncated", "bad\nheader"])
    assert stages.reasons_of(blob) == ["OSError: truncated", "bad header"]
    assert stages.reasons_of(stages._reasons([])) == []


# ---- sizing --------------------------------------------------------------------------------------
def test_every_split_has_one_sink_a_reader_and_a_predictor():
    splits = candidates(5)
    assert all(r.total == 5 and r.reader >= 1 and r.predict >= 1 for r in splits)
    assert Roles(1, 0, 3) in splits and Roles(1, 2, 1) in splits and len(set(splits)) == len(splits)


def test_auto_gives_the_ranks_in_proportion_to_the_stage_costs_when_cores_are_plenty():
    # decoding costs 3x predicting, reading is nearly free: of the 11 ranks beside the sink, 8
    # decode (readers that decode too: one link and one rank fewer than separate stages) and 3
    # predict
    plan = make_plan(profile(), Layout.one_node(12, 64), batch=32)
    assert plan.roles == Roles(8, 0, 3)
    best = plan.predicted_items_per_s
    for option in candidates(12):  # nothing does better
        other = make_plan(profile(), Layout.one_node(12, 64), batch=32, roles=option)
        assert other.predicted_items_per_s <= best * (1 + 1e-9)
    assert (
        plan.role_of_rank[0] == "sink" and plan.role_of_rank.count("predict") == plan.roles.predict
    )


def test_ranks_beyond_the_cores_share_them_in_the_prediction():
    # 4 ranks on 2 cores: whatever the split, 2 cores do (read + decode + predict) per item
    prof = profile(read=1e-4, prepare=2e-3, predict=2e-3, link=0.0)
    plan = make_plan(prof, Layout.one_node(4, 2), batch=32)
    work = prof.read_s + prof.prepare_s + prof.predict_s + prof.sink_s
    assert plan.predicted_items_per_s == pytest.approx(2 / work, rel=1e-6)
    assert "cores" in plan.bottleneck
    one_core = make_plan(prof, Layout.one_node(4, 1), batch=32, roles=plan.roles)
    assert one_core.predicted_items_per_s == pytest.approx(1 / work, rel=1e-6)


def test_stages_spread_over_the_nodes():
    layout = Layout([0, 0, 0, 0, 1, 1, 1, 1], {0: 4, 1: 4})
    placed = assign_ranks(Roles(2, 2, 3), layout)
    assert placed[0] == "sink"
    for stage in ("reader", "preprocess"):
        nodes = {layout.node_of_rank[r] for r, s in enumerate(placed) if s == stage}
        assert nodes == {0, 1}, (stage, placed)


def test_credits_follow_littles_law_and_bound_the_memory():
    slow_producer = profile(read=1e-4, prepare=8e-3, predict=1e-3)
    plan = make_plan(slow_producer, Layout.one_node(8, 64), batch=16, roles=Roles(1, 3, 3))
    # a predictor takes λ = X / (16 * 3) units/s; W = (2 * decode cost + transfer) * 16
    x = plan.predicted_items_per_s
    cost = plan.stage_cost_s["preprocess"]
    expected = math.ceil(x / 16 / 3 * (2 * cost + slow_producer.prepared_link_s) * 16) + 1
    assert plan.credits["preprocess->predict"] == max(1, math.ceil(expected / 3))
    assert all(1 <= c <= 16 for c in plan.credits.values())
    # bound: credits in x producers x unit in + credits out x consumers x unit out + 2 units
    c_in, c_out = plan.credits["reader->preprocess"], plan.credits["preprocess->predict"]
    unit_in, unit_out = 30e3 * 16, 12e3 * 16
    bound = c_in * 1 * unit_in + c_out * 3 * unit_out + unit_out + 30e3 * 16
    assert plan.memory_bound_bytes["preprocess"] == int(bound)
    fixed = make_plan(
        slow_producer, Layout.one_node(8, 64), batch=16, roles=Roles(1, 3, 3), credits=5
    )
    assert set(fixed.credits.values()) == {5}
    assert (
        fixed.memory_bound_bytes["preprocess"] > plan.memory_bound_bytes["preprocess"] or c_in >= 5
    )


# ---- results -------------------------------------------------------------------------------------
def collector_of(labels, predicted, names=None):
    from hpcbench.predict.inputs import Items
    from hpcbench.predict.outputs import Collector

    n = len(labels)
    items = Items("files", "t", names or [f"f{i}.jpg" for i in range(n)],
                  np.array(labels, dtype=np.int64), True, paths=[])  # fmt: skip
    c = Collector(items, 3)
    probs = np.full((n, 3), 0.1, dtype=np.float32)
    probs[np.arange(n), predicted] = 0.8
    c.add(stages.Unit(stages.RESULTS, 0, [np.arange(n), np.zeros(n, np.int8), probs,
                                          stages._reasons([])]))  # fmt: skip
    return c


def test_macro_f1_is_the_trainers_mean_over_the_classes_in_the_labels():
    from hpcbench.predict.outputs import metrics

    # class 2 never occurs but is predicted once: it lowers class 0's F1, it is not averaged in
    m = metrics(collector_of([0, 0, 1, 1], [0, 2, 1, 1]), ["a", "b", "c"])
    assert m["accuracy"] == 0.75
    assert m["macro_f1"] == pytest.approx((2 / 3 + 1.0) / 2)
    assert m["confusion"] == [[1, 0, 1], [0, 2, 0], [0, 0, 0]]


def test_a_file_name_that_is_not_utf8_is_written_escaped_not_fatal():
    from hpcbench.predict.outputs import predictions_csv

    name = b"caf\xe9,\n.jpg".decode("utf-8", "surrogateescape")  # as os.scandir returns it
    text = predictions_csv(collector_of([0], [0], [name]), ["a", "b", "c"], top_k=1)
    assert text.splitlines()[1].startswith('"caf\\xe9,')  # quoted (comma, newline) and escaped
    text.encode("utf-8")


def test_cells_a_spreadsheet_would_run_are_neutralised_and_read_back():
    """OWASP's CSV injection: a file or class name starting with = + - @, tab or CR gets a
    leading ', as does one starting with ' (so removing one leading ' always gives the name)."""
    import csv
    import io

    from hpcbench.predict.outputs import predictions_csv

    names = ["=HYPERLINK(\"http://x\",\"y\").jpg", "+1.jpg", "-2.jpg", "@SUM(A1).jpg",
             "\tcmd.jpg", "\rcr.jpg", "'quoted.jpg", "plain.jpg", "a=b.jpg"]  # fmt: skip
    classes = ["=cmd|' /C calc'!A0", "-b", "c"]
    labels = [0] * len(names)
    text = predictions_csv(collector_of(labels, [0] * len(names), names), classes, top_k=2)
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    for row in rows:
        for key in ("item", "label", "class", "class_2"):
            assert not row[key].startswith(("=", "+", "-", "@", "\t", "\r")), row
    restore = [r["item"][1:] if r["item"].startswith("'") else r["item"] for r in rows]
    assert restore == names
    assert rows[0]["label"] == rows[0]["class"] == "'" + classes[0]
    assert rows[0]["class_2"] == "'-b" and rows[7]["item"] == "plain.jpg"
    assert rows[8]["item"] == "a=b.jpg" and float(rows[0]["probability"]) == pytest.approx(0.8)


def test_predictors_sharing_one_gpu_are_counted_as_sharing_it():
    """Two predictors on a node with one GPU compute one at a time: the prediction is bound by
    the one GPU, not by two predictors (the H200 run predicted 17,971 images/s and ran 2,826)."""
    fast = profile(read=2e-5, prepare=2e-5, predict=1e-4, link=1e-6)
    roles = Roles(1, 0, 2)
    on_gpu = make_plan(fast, Layout.one_node(4, 16, gpus=1), batch=64, roles=roles)
    on_cpu = make_plan(fast, Layout.one_node(4, 16), batch=64, roles=roles)
    predict_cost = on_gpu.stage_cost_s["predict"]
    assert on_gpu.predicted_items_per_s == pytest.approx(1 / predict_cost, rel=1e-6)
    assert on_gpu.bottleneck == "predict (2 rank(s) sharing 1 GPU(s))"
    assert on_cpu.predicted_items_per_s == pytest.approx(2 / predict_cost, rel=1e-6)
    two_gpus = make_plan(fast, Layout.one_node(4, 16, gpus=2), batch=64, roles=roles)
    assert two_gpus.predicted_items_per_s == pytest.approx(2 / predict_cost, rel=1e-6)


def test_a_plan_the_calibration_says_is_slower_than_one_process_is_never_chosen():
    """Transfers that cost more than the split saves: rank 0 predicts alone."""
    costly_links = profile(read=1e-4, prepare=1e-4, predict=1e-4, link=5e-3)
    plan = make_plan(costly_links, Layout.one_node(4, 16), batch=32)
    one = 1 / (1e-4 + 1e-4 + 1e-4 + 1e-6)
    assert plan.one_process_items_per_s == pytest.approx(one)
    assert plan.predicted_items_per_s < one and plan.alone
    assert plan.as_dict()["alone"] is True
    cheap_links = profile(read=1e-3, prepare=3e-3, predict=3e-3, link=1e-6)
    assert not make_plan(cheap_links, Layout.one_node(4, 16), batch=32).alone
    # roles the user gave are run as given
    assert not make_plan(costly_links, Layout.one_node(4, 16), batch=32, roles=Roles(1, 0, 2)).alone


def test_a_gpu_unit_is_the_smallest_batch_within_a_tenth_of_the_best_per_image_cost():
    from hpcbench.predict.model import smallest_fast_enough

    # a GPU that 32 images leave idle: per image 4x dearer at 32 than at 512
    costs = {32: 4.0e-4, 64: 2.1e-4, 128: 1.15e-4, 256: 1.04e-4, 512: 1.0e-4}
    assert smallest_fast_enough(costs) == 256
    assert smallest_fast_enough({32: 1.0e-3, 64: 1.05e-3}) == 32  # a CPU-like curve: flat
    assert smallest_fast_enough({32: 2e-4}) == 32  # the memory refused 64


def test_the_unit_size_is_32_on_cpus_unless_given():
    from hpcbench.predict.config import parse_args

    assert parse_args(["--checkpoint", "x", "--input", "y"]).batch_size is None
    assert parse_args(["--checkpoint", "x", "--input", "y", "--batch-size", "8"]).batch_size == 8
