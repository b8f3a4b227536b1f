"""Synthetic batches are reproducible; real data is packed so every token is trained on once per epoch."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch

from workloads.config import TrainConfig
from workloads.data import ByteTokenizer, MicroBatches, encode, load_tokenizer, pack, read_documents, synthetic_batch
from workloads.loss import IGNORE_INDEX

DOCS = [f"document {i}: " + "lorem ipsum " * (i % 7) for i in range(23)]


def _write_corpus(tmp_path):
    txt = tmp_path / "corpus.txt"
    txt.write_text("\n".join(DOCS) + "\n\n")  # a blank line is no document
    return txt


def _trained_tokens(seqs):
    """Tokens whose label counts (not padding)."""
    return Counter(t for ids, labels in seqs for t, label in zip(ids, labels, strict=True) if label != IGNORE_INDEX)


def test_pack_covers_every_token_once_and_pads_the_tail():
    docs = [[5, 6, 7], [8], [9, 10, 11, 12]]  # 11 tokens with EOS: a tail of 3
    seqs = list(pack(docs, seq_len=4, eos=1))
    assert all(len(ids) == 4 and len(labels) == 4 for ids, labels in seqs)
    flat = [t for d in docs for t in d + [1]]
    assert _trained_tokens(seqs) == Counter(flat)
    assert seqs[-1][1][-1] == IGNORE_INDEX, "the padded tail must be ignored by the loss"


def test_text_corpus_is_packed_and_each_token_seen_once_per_epoch_over_two_ranks(tmp_path):
    txt = _write_corpus(tmp_path)
    tok = ByteTokenizer()
    expected = Counter(t for d in DOCS for t in encode(tok, d) + [tok.eos_token_id])
    cfg = TrainConfig(preset="tiny", data=str(txt), seq_len=16, global_batch_size=2, num_workers=2)
    seen = Counter()
    for rank in range(2):
        stream = MicroBatches(cfg, 512, rank, 2).iterate(0)
        epoch = []
        while not epoch or epoch[-1][1][-1] != IGNORE_INDEX:  # the padded tail ends this rank's epoch
            ids, labels = next(stream)
            assert ids.shape == (1, 16), f"micro-batch shape {tuple(ids.shape)}"
            epoch.append((ids[0].tolist(), labels[0].tolist()))
        seen += _trained_tokens(epoch)
    assert seen == expected


def test_jsonl_and_parquet_read_the_same_documents(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in DOCS))
    pq.write_table(pa.table({"text": DOCS}), tmp_path / "b.parquet")
    assert list(read_documents(str(tmp_path / "a.jsonl"))) == DOCS
    assert list(read_documents(str(tmp_path / "b.parquet"))) == DOCS


def test_resumed_stream_continues_at_the_same_position(tmp_path):
    txt = _write_corpus(tmp_path)
    cfg = TrainConfig(preset="tiny", data=str(txt), seq_len=8, global_batch_size=2, num_workers=1, micro_batch_size=1)
    it = MicroBatches(cfg, 512, 0, 1).iterate(0)
    full = [next(it)[0] for _ in range(6)]
    resumed = MicroBatches(cfg, 512, 0, 1).iterate(1)  # step 1 = after 2 micro-batches
    assert torch.equal(next(resumed)[0], full[2])


def test_synthetic_batches_depend_only_on_seed_step_rank():
    a = synthetic_batch("random", 100, 2, 8, seed=1, step=3, rank=1, micro=0)[0]
    b = synthetic_batch("random", 100, 2, 8, seed=1, step=3, rank=1, micro=0)[0]
    c = synthetic_batch("random", 100, 2, 8, seed=1, step=3, rank=0, micro=0)[0]
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_learnable_task_follows_one_permutation():
    ids, labels = synthetic_batch("learnable", 50, 4, 12, seed=0, step=0, rank=0, micro=0)
    nxt = {}
    for row in ids.tolist():
        for a, b in zip(row, row[1:], strict=False):  # each token beside its successor
            assert nxt.setdefault(a, b) == b, f"token {a} is followed by both {nxt[a]} and {b}"
    assert torch.equal(ids, labels)


def test_local_tokenizer_directory_loads_offline(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"[UNK]": 0, "</s>": 1, "lorem": 2, "ipsum": 3}
    t = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    t.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=t, unk_token="[UNK]", eos_token="</s>").save_pretrained(tmp_path / "tok")
    tok = load_tokenizer(str(tmp_path / "tok"))
    assert encode(tok, "lorem ipsum lorem") == [2, 3, 2]
    assert tok.eos_token_id == 1


def test_resume_from_a_saved_position_gives_the_uninterrupted_batches_over_an_epoch_end(tmp_path):
    txt = _write_corpus(tmp_path)
    cfg = TrainConfig(preset="tiny", data=str(txt), seq_len=8, global_batch_size=2, num_workers=2, micro_batch_size=1)
    stream = MicroBatches(cfg, 512, 1, 2)
    it = stream.iterate(0)
    full = [next(it)[0] for _ in range(40)]  # rank 1 has about 25 sequences an epoch: 40 crosses into the next
    for cut in (3, 31):
        stream = MicroBatches(cfg, 512, 1, 2)
        it = stream.iterate(0)
        for _ in range(cut):
            next(it)
        resumed = MicroBatches(cfg, 512, 1, 2).iterate(cut, stream.position())
        got = [next(resumed)[0] for _ in range(40 - cut)]
        first_bad = next(
            (i for i, (a, b) in enumerate(zip(got, full[cut:], strict=True)) if not torch.equal(a, b)), None
        )
        assert first_bad is None, f"resumed after {cut} micro-batches: micro-batch {cut + first_bad} differs"


def test_resume_tokenises_no_document_trained_on_before(tmp_path, monkeypatch):
    import workloads.data as data

    txt = _write_corpus(tmp_path)
    cfg = TrainConfig(preset="tiny", data=str(txt), seq_len=8, global_batch_size=1, num_workers=1)
    stream = MicroBatches(cfg, 512, 0, 1)
    it = stream.iterate(0)
    for _ in range(10):
        next(it)
    position = stream.position()
    seen: list[str] = []
    real_encode = data.encode
    monkeypatch.setattr(data, "encode", lambda tok, text: seen.append(text) or real_encode(tok, text))
    next(MicroBatches(cfg, 512, 0, 1).iterate(10, position))
    already = DOCS[: position["docs"]]
    again = [t for t in seen if t in already]
    assert not again, f"resume tokenised {len(again)} document(s) trained on before the checkpoint: {again[:2]}"


def test_malformed_s3_uri_is_refused_naming_flag_and_fix():
    import pytest

    from workloads.config import TrainConfigError
    from workloads.data import list_data

    with pytest.raises(TrainConfigError) as err:
        list_data("s3://Bad_Bucket/prefix/")
    expected = "--data 's3://Bad_Bucket/prefix/' has no valid bucket name ('Bad_Bucket'"
    assert expected in str(err.value) and "s3://bucket/prefix" in str(err.value), str(err.value)


def test_local_directory_of_unknown_format_is_refused(tmp_path):
    import pytest

    from workloads.config import TrainConfigError
    from workloads.data import list_data

    (tmp_path / "a.csv").write_text("text\nx\n")
    with pytest.raises(TrainConfigError, match=r"holds no file of a known format \(a.csv\)"):
        list_data(str(tmp_path))


# ---- Synthetic data resumes at the right step: a rank's stream started at step k (as the loop starts it
# after restoring a step-k checkpoint) yields what the uninterrupted stream yields from step k on, with
# gradient accumulation and past step 9. The real runs that show the same (a killed worker ends at the
# uninterrupted loss) are slow: tests/workloads/test_loop_resume_schedule.py and the drill.

# 2 ranks x 1 sequence x 2 micro-steps = a global batch of 4: two micro-batches per step and rank.
CFG = TrainConfig(preset="tiny", task="learnable", seq_len=8, global_batch_size=4, num_workers=2, micro_batch_size=1)
MICRO_PER_STEP = 2


def micro_batches(rank: int, start_step: int, n: int) -> list[torch.Tensor]:
    it = MicroBatches(CFG, 512, rank, 2).iterate(start_step)
    return [next(it)[0] for _ in range(n)]


@pytest.mark.parametrize("rank", [0, 1])
@pytest.mark.parametrize("step", [1, 4, 11])
def test_stream_resumed_at_a_step_yields_the_uninterrupted_streams_batches_from_that_step(rank, step):
    assert CFG.grad_accum == MICRO_PER_STEP, f"expected {MICRO_PER_STEP} micro-batches a step, got {CFG.grad_accum}"
    uninterrupted = micro_batches(rank, 0, (step + 2) * MICRO_PER_STEP)[step * MICRO_PER_STEP :]
    resumed = micro_batches(rank, step, 2 * MICRO_PER_STEP)
    same = [torch.equal(a, b) for a, b in zip(resumed, uninterrupted, strict=True)]
    assert all(same), f"rank {rank} resumed at step {step}: micro-batches equal to the uninterrupted ones: {same}"


def test_neighbouring_steps_give_other_batches():
    """So the test above can tell a resume one step early or late from the right one."""
    first = [micro_batches(0, s, 1)[0] for s in (3, 4, 5)]
    assert not torch.equal(first[0], first[1]) and not torch.equal(first[1], first[2]), (
        "expected steps 3, 4 and 5 to start with different micro-batches"
    )
