import random

import pytest
import torch

from neuron_inductor.bucketing import (BucketingCollator, bucket, pad_to_bucket,
                                       recommended_recompile_limit)


@pytest.mark.parametrize("n,expected", [(0, 128), (1, 128), (127, 128), (128, 128), (129, 256),
                                        (1000, 1024), (1024, 1024)])
def test_bucket_rounds_up_to_multiple(n, expected):
    assert bucket(n) == expected


def test_bucket_other_multiple_and_cap():
    assert bucket(65, multiple=64) == 128
    assert bucket(900, max_len=1000) == 1000  # cap wins over the next multiple
    with pytest.raises(ValueError, match="exceeds max_len"):
        bucket(1001, max_len=1000)
    with pytest.raises(ValueError):
        bucket(-1)


def test_64_random_lengths_give_at_most_8_buckets():
    rng = random.Random(0)
    lengths = [rng.randint(1, 1024) for _ in range(64)]
    buckets = {bucket(n) for n in lengths}
    assert len(buckets) <= 8 == recommended_recompile_limit(1024)
    assert all(b % 128 == 0 and b >= n for b, n in zip(map(bucket, lengths), lengths))


def test_pad_to_bucket_right_pads_with_value():
    t = torch.arange(6).reshape(2, 3)
    out = pad_to_bucket(t, dim=1, multiple=4, value=-7)
    assert out.shape == (2, 4)
    assert torch.equal(out[:, :3], t) and (out[:, 3] == -7).all()
    assert pad_to_bucket(out, dim=1, multiple=4) is out  # already a bucket: untouched
    out0 = pad_to_bucket(t, dim=0, multiple=3)
    assert out0.shape == (3, 3) and (out0[2] == 0).all()


def _features(lengths):
    return [{"input_ids": list(range(1, n + 1)), "attention_mask": [1] * n,
             "labels": list(range(1, n + 1))} for n in lengths]


def test_collator_pads_each_field_with_its_neutral_value():
    coll = BucketingCollator(multiple=8, pad_token_id=99)
    batch = coll(_features([3, 5]))
    assert batch["input_ids"].shape == (2, 8)
    assert batch["input_ids"][0].tolist() == [1, 2, 3] + [99] * 5
    assert batch["attention_mask"][1].tolist() == [1] * 5 + [0] * 3  # real tokens first (right pad)
    assert batch["labels"][0].tolist() == [1, 2, 3] + [-100] * 5


def test_collator_wraps_an_existing_collator():
    def inner(features):
        n = max(len(f["input_ids"]) for f in features)
        ids = torch.tensor([f["input_ids"] + [0] * (n - len(f["input_ids"])) for f in features])
        return {"input_ids": ids, "attention_mask": (ids != 0).long(), "labels": ids.clone(),
                "extra": "kept"}

    batch = BucketingCollator(inner, multiple=128, pad_token_id=0)(_features([200, 7]))
    assert batch["input_ids"].shape == (2, 256) and batch["labels"][0, 200:].eq(-100).all()
    assert batch["attention_mask"].sum().item() == 207 and batch["extra"] == "kept"


def test_collator_with_hugging_face_padding_collator():
    transformers = pytest.importorskip("transformers")

    class Tok:  # the minimum DataCollatorWithPadding needs, without downloading a tokenizer
        padding_side = "right"
        pad_token_id = 0
        model_input_names = ["input_ids", "attention_mask"]

        def pad(self, features, **kw):
            n = max(len(f["input_ids"]) for f in features)
            return {k: torch.tensor([f[k] + [0] * (n - len(f[k])) for f in features])
                    for k in features[0]}

    inner = transformers.DataCollatorWithPadding(Tok(), return_tensors="pt")
    batch = BucketingCollator(inner, pad_token_id=0)([{"input_ids": [5] * 3, "attention_mask": [1] * 3}])
    assert batch["input_ids"].shape == (1, 128) and batch["attention_mask"].sum() == 3


def test_collator_refuses_left_padding_tokenizer():
    class C:
        class tokenizer:
            padding_side = "left"

        def __call__(self, f):
            return f

    with pytest.raises(ValueError, match="right"):
        BucketingCollator(C())
