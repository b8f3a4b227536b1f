"""bench/train_throughput.py: how a variant name becomes a recipe and TrainConfig overrides."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from conftest import REPO


def _load_script():
    spec = importlib.util.spec_from_file_location("bench_train_throughput", REPO / "bench" / "train_throughput.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


tt = _load_script()


def test_named_variants_and_their_overrides():
    assert tt.variant_config("reference") == (True, {})
    assert tt.variant_config("reference+micro_batch_size=8") == (True, {"micro_batch_size": 8})
    assert tt.variant_config("default") == (False, {})
    assert tt.variant_config("default+reduce_dtype=bfloat16+loss_chunk_size=16384") == (
        False,
        {"reduce_dtype": "bfloat16", "loss_chunk_size": 16384},
    )


def test_fsdp2_overrides_win_over_the_plain_recipe():
    is_ref, over = tt.variant_config("fsdp2+micro_batch_size=4+loss=chunked")
    assert not is_ref
    assert over == {**tt.PLAIN_FSDP2, "micro_batch_size": 4, "loss": "chunked"}
    assert tt.variant_config("fsdp2")[1] == tt.PLAIN_FSDP2


def test_free_form_variant_parses_booleans_and_numbers():
    assert tt.variant_config("compile=0+loss=full+seq_len=64") == (
        False,
        {"compile": False, "loss": "full", "seq_len": 64},
    )
    assert tt.variant_config("reshard_after_forward=yes")[1] == {"reshard_after_forward": True}


def test_unknown_field_is_refused_by_name():
    with pytest.raises(SystemExit, match="unknown TrainConfig field 'micro_batch'"):
        tt.variant_config("default+micro_batch=8")


def test_profile_step_counts_each_matmuls_flops_from_its_input_shapes():
    # The shapes as torch.profiler records them (record_shapes=True): addmm's bias comes first and its
    # beta and alpha are scalars; bmm's first dimension is the batch.
    spec = importlib.util.spec_from_file_location("bench_profile_step", REPO / "bench" / "profile_step.py")
    ps = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ps)
    assert ps.gemm_flops("aten::mm", [[16384, 1536], [1536, 17920]]) == 2 * 16384 * 1536 * 17920
    assert ps.gemm_flops("aten::addmm", [[256], [16384, 1536], [1536, 256], [], []]) == 2 * 16384 * 1536 * 256
    assert ps.gemm_flops("aten::bmm", [[12, 2048, 128], [12, 128, 2048]]) == 2 * 12 * 2048 * 128 * 2048
    assert ps.gemm_flops("aten::mm", [[], []]) == 0.0


def test_float8_options_are_read_from_the_variant_name_and_skipped_as_config_fields():
    name = "default+float8=tensorwise+f8opt=pow2.fastaccum"
    assert tt.float8_option_names(name) == ("fastaccum", "pow2")
    assert tt.variant_config(name) == (False, {"float8": "tensorwise"})


def test_unknown_float8_option_is_refused_by_name():
    with pytest.raises(SystemExit, match="unknown f8opt.*'fast'"):
        tt.float8_option_names("default+float8=tensorwise+f8opt=fast")
