"""Device placement of a ClientApp (issue 39 item 4), decided from CUDA_VISIBLE_DEVICES and
what torch reports; checked without a GPU. Each case is what Ray does to an actor:
``num-gpus`` 0 hides every GPU (``CUDA_VISIBLE_DEVICES=""``), ``num-gpus`` 0.25 shares
the GPU it names ("1"), renumbered as ``cuda:0`` inside the process."""

from __future__ import annotations

import pytest

from fairfl.client.placement import place


def test_auto_takes_the_gpu_ray_assigned_renumbered_from_zero():
    placed = place("auto", visible="1", cuda_available=True, device_count=1)
    assert (placed.device, placed.on_gpu) == ("cuda:0", True)
    assert "CUDA_VISIBLE_DEVICES='1'" in placed.reason


def test_auto_falls_back_to_the_cpu_with_its_reason():
    hidden = place("auto", visible="", cuda_available=False, device_count=0)
    assert (hidden.device, hidden.on_gpu) == ("cpu", False)
    assert "client-resources-num-gpus is above 0" in hidden.reason
    # no GPU on the machine (or a CPU-only torch), nothing hidden
    none = place("auto", visible=None, cuda_available=False, device_count=0)
    assert none.device == "cpu" and "CUDA is not available" in none.reason
    # hidden even where torch was told of a GPU before the variable was set
    assert place("auto", visible="-1", cuda_available=True, device_count=1).device == "cpu"


def test_auto_without_the_variable_uses_the_first_gpu_of_the_machine():
    placed = place("auto", visible=None, cuda_available=True, device_count=4)
    assert placed.device == "cuda:0" and "unset" in placed.reason


def test_an_explicit_device_is_kept_or_refused_never_moved():
    assert place("cpu", visible="0", cuda_available=True, device_count=1).device == "cpu"
    assert place("cuda:1", visible="2,3", cuda_available=True, device_count=2).device == "cuda:1"
    assert place("cuda", visible="3", cuda_available=True, device_count=1).device == "cuda:0"
    with pytest.raises(ValueError, match=r"'cuda:1' was requested but only 1 CUDA devices"):
        place("cuda:1", visible="3", cuda_available=True, device_count=1)
    with pytest.raises(ValueError, match=r"CUDA_VISIBLE_DEVICES=''"):
        place("cuda", visible="", cuda_available=False, device_count=0)
    for bad in ("gpu", "cuda:x", "mps"):
        with pytest.raises(ValueError, match="device must be 'auto', 'cpu' or 'cuda"):
            place(bad, visible=None, cuda_available=False, device_count=0)


def test_the_clientapp_device_follows_the_placement_and_logs_a_fallback_once(monkeypatch, caplog):
    import logging

    import torch

    from fairfl.client import training

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # a Ray actor with num-gpus 0
    training._log_fallback.cache_clear()
    with caplog.at_level(logging.INFO, logger="fairfl.client.training"):
        assert training.pick_device("auto") == torch.device("cpu")
        assert training.pick_device("auto") == torch.device("cpu")
    said = [r.getMessage() for r in caplog.records if "trains on the CPU" in r.getMessage()]
    assert len(said) == 1 and "client-resources-num-gpus is above 0" in said[0]
    # a quarter of GPU 2, as Ray shows it: renumbered cuda:0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert training.pick_device("auto") == torch.device("cuda:0")


def test_the_device_travels_in_the_evaluate_reply_into_the_clients_record():
    from fairfl.contract import keys, read_evaluate_reply, write_evaluate_reply
    from fairfl.contract.replies import ReplyError
    from fairfl.server.results import _client_entry
    from tests.conftest import make_reply

    for index, shown in ((-1, "cpu"), (0, "cuda:0"), (3, "cuda:3")):
        content = write_evaluate_reply(
            num_examples=4, eval_loss=0.3, eval_acc=0.5, partition_id=1, device_index=index
        )
        reply = read_evaluate_reply(make_reply(7, content=content))
        assert reply.device_index == index and _client_entry(reply)["device"] == shown
    old = write_evaluate_reply(num_examples=4, eval_loss=0.3, eval_acc=0.5)  # an older client
    assert "device" not in _client_entry(read_evaluate_reply(make_reply(7, content=old)))
    bad = {keys.NUM_EXAMPLES: 4, keys.EVAL_LOSS: 0.3, keys.EVAL_ACC: 0.5, keys.DEVICE_INDEX: -2}
    with pytest.raises(ReplyError, match=r"node 7.*metrics\['device-index'\] must be >= -1"):
        read_evaluate_reply(make_reply(7, None, bad))
