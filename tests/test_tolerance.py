"""The pass/fail policy on hand-made arrays."""
import math

import pytest
import torch

from attnsuite import tolerance

U16 = 2.0**-11


def t(*values):
    return torch.tensor(values, dtype=torch.float64)


def test_unit_roundoff_per_dtype():
    assert tolerance.unit_roundoff(torch.float16) == 2.0**-11
    assert tolerance.unit_roundoff(torch.bfloat16) == 2.0**-8
    assert tolerance.unit_roundoff(torch.float32) == 2.0**-24
    with pytest.raises(ValueError):
        tolerance.unit_roundoff(torch.int32)


def test_exact_output_has_infinite_headroom():
    ref = t(0.5, -1.0, 2.0)
    c = tolerance.compare("o", ref.clone(), ref, ref + 1e-3, torch.float16)
    assert c.ok and c.max_abs_err == 0.0 and math.isinf(c.headroom)


def test_allowed_is_twice_baseline_plus_dtype_floor():
    ref = t(0.0, 4.0)  # max |ref| = 4 -> floor = u * 4
    base = ref + t(0.0, 0.01)
    c = tolerance.compare("o", ref + t(0.0, 0.015), ref, base, torch.float16)
    assert c.floor == pytest.approx(4 * U16)
    assert c.allowed == pytest.approx(2 * 0.01 + 4 * U16)
    assert c.ok
    assert c.headroom == pytest.approx(c.allowed / 0.015)


def test_error_beyond_allowance_fails_and_names_the_element():
    ref = t(0.0, 1.0, 0.0)
    base = ref + t(0.0, 1e-3, 0.0)
    c = tolerance.compare("o", ref + t(0.0, 0.0, 0.01), ref, base, torch.float16)
    assert not c.ok
    assert c.headroom < 1
    assert "max abs err 1.000e-02" in c.reason and "(2,)" in c.reason


def test_floor_applies_when_the_baseline_is_exact():
    ref = t(0.25, 0.5)
    c_ok = tolerance.compare("o", ref + 0.5 * U16, ref, ref, torch.float16)
    c_bad = tolerance.compare("o", ref + 2 * U16, ref, ref, torch.float16)
    assert c_ok.ok and not c_bad.ok


def test_nan_where_reference_is_finite_fails():
    ref = t(1.0, 2.0)
    c = tolerance.compare("o", t(1.0, float("nan")), ref, ref, torch.float16)
    assert not c.ok and "NaN" in c.reason and "never wrote" in c.reason
    assert math.isinf(c.max_abs_err)


def test_inf_where_reference_is_finite_fails():
    ref = t(1.0, 2.0)
    c = tolerance.compare("o", t(float("inf"), 2.0), ref, ref, torch.float16)
    assert not c.ok and "Inf" in c.reason


def test_matching_infinities_pass_and_mismatched_ones_fail():
    ref = t(float("-inf"), 1.0)  # e.g. the LSE of an empty row
    assert tolerance.compare("lse", t(float("-inf"), 1.0), ref, ref, torch.float16).ok
    bad = tolerance.compare("lse", t(0.0, 1.0), ref, ref, torch.float16)
    assert not bad.ok and "-inf" in bad.reason


def test_shape_mismatch_fails():
    c = tolerance.compare("o", t(1.0), t(1.0, 2.0), t(1.0, 2.0), torch.float16)
    assert not c.ok and "shape" in c.reason


def test_low_precision_tensors_are_compared_in_float64():
    ref = torch.rand(64, dtype=torch.float64)
    out = ref.to(torch.bfloat16)  # rounding only: within one bf16 unit roundoff of |ref| <= 1
    c = tolerance.compare("o", out, ref, out, torch.bfloat16)
    assert c.ok and c.max_abs_err <= 2.0**-8


def test_headroom_helper():
    assert tolerance.headroom(2.0, 1.0) == 2.0
    assert math.isinf(tolerance.headroom(1.0, 0.0))


def test_scores_beyond_the_input_dtype_allow_what_fp32_scores_of_that_size_cost():
    """The MagicPIG fuzz finds (seed 31337): scores ~65536, the fp16 baseline NaN everywhere (b = 0),
    the kernel's fp32 split merge off by ~1e-3. The baseline error used is at least
    u32 * score_bound * max(1, max|ref|); with scores of ordinary size that changes nothing."""
    ref = t(0.25, -0.75)
    base = t(float("nan"), float("nan"))           # the fp16 baseline overflowed
    out = ref + t(0.0, 1.1e-3)
    strict = tolerance.compare("o", out, ref, base, torch.float16)
    assert not strict.ok and strict.baseline_err == 0.0 and strict.score_err == 0.0
    wide = tolerance.compare("o", out, ref, base, torch.float16, score_bound=65536.0)
    assert wide.ok and wide.score_err == pytest.approx(2.0**-24 * 65536)
    assert wide.allowed == pytest.approx(2 * 2.0**-24 * 65536 + U16)
    ordinary = tolerance.compare("o", out, ref, base, torch.float16, score_bound=30.0)
    assert not ordinary.ok and ordinary.allowed == pytest.approx(2 * 2.0**-24 * 30 + U16)
    # A baseline larger than the score term is used as it is.
    noisy = tolerance.compare("o", out, ref, ref + 1e-3, torch.float16, score_bound=30.0)
    assert noisy.allowed == pytest.approx(2 * 1e-3 + U16)


def test_every_figure_is_taken_over_the_finite_elements_only():
    inf, nan = math.inf, math.nan
    ref = t(1.0, -4.0, inf, nan, 2.0)
    out = t(1.5, -4.0, inf, nan, 2.0)
    base = t(1.0, nan, inf, nan, 2.25)  # its NaN where the reference is finite is not its error
    c = tolerance.compare("o", out, ref, base, torch.float16)
    assert (c.max_abs_err, c.baseline_err, c.floor) == (0.5, 0.25, U16 * 4.0)
    assert c.max_rel_err == 0.5 / (1.0 + 1e-8)
    assert c.ok and c.allowed == tolerance.FACTOR * 0.25 + U16 * 4.0


def test_an_empty_output_passes_with_nothing_to_measure():
    c = tolerance.compare("lse", t(), t(), t(), torch.float16)
    assert c.ok and (c.max_abs_err, c.baseline_err, c.max_rel_err, c.floor) == (0.0, 0.0, 0.0, U16)
