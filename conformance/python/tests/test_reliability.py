"""Bad calls into the Python package end in a clear error: a list of inputs, a huge broadcast
view (refused before it is copied), and two threads sharing one Session."""

import threading

import numpy as np
import pytest
import trnsim

COPY = {
    "target": "trn2",
    "hbm": [
        {"name": "x", "dtype": "f32", "shape": [4, 5], "role": "input"},
        {"name": "y", "dtype": "f32", "shape": [4, 5], "role": "output"},
    ],
    "instructions": [
        {
            "engine": "dma",
            "op": {
                "dma_copy": {
                    "dst": {"mem": "sbuf", "dtype": "f32", "partitions": 4, "free": [[1, 5]]},
                    "src": {
                        "mem": {"hbm": "x"},
                        "dtype": "f32",
                        "partitions": 4,
                        "partition_step": 5,
                        "free": [[1, 5]],
                    },
                }
            },
        },
        {
            "engine": "dma",
            "op": {
                "dma_copy": {
                    "dst": {
                        "mem": {"hbm": "y"},
                        "dtype": "f32",
                        "partitions": 4,
                        "partition_step": 5,
                        "free": [[1, 5]],
                    },
                    "src": {"mem": "sbuf", "dtype": "f32", "partitions": 4, "free": [[1, 5]]},
                }
            },
        },
    ],
}


def _prog():
    import json

    return trnsim.Program.from_json(json.dumps(COPY))


def test_run_with_a_list_of_inputs_is_a_type_error_that_says_what_it_wants():
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    with pytest.raises(TypeError, match=r"inputs must map .* not a list"):
        trnsim.run(_prog(), [x])
    assert np.array_equal(trnsim.run(_prog(), {"x": x}).outputs["y"], x)


def test_a_huge_broadcast_view_is_refused_before_it_is_copied():
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    view = np.broadcast_to(np.uint8(1), (4600 << 20,))  # 4.6 GiB of logical bytes, 1 stored
    s = trnsim.Session()
    with pytest.raises(MemoryError, match=r"'x'.*more than the simulated device's"):
        s.put("x", view)
    with pytest.raises(MemoryError, match="refused before copying"):
        trnsim.run(_prog(), {"x": np.broadcast_to(np.float32(1), (2 << 30,))})
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < (256 << 10), f"peak memory grew by {grown_kib} KiB"
    assert "x" not in s


def test_two_threads_on_one_session_get_an_error_naming_the_rule():
    s = trnsim.Session()
    x = np.ones((4, 5), np.float32)
    s.put("x", x)
    errors, stop = [], threading.Event()

    def hammer():
        while not stop.is_set():
            try:
                s.run(_prog(), {"x": "x", "y": "y"})
            except RuntimeError as e:
                errors.append(str(e))

    threads = [threading.Thread(target=hammer) for _ in range(2)]
    for t in threads:
        t.start()
    for _ in range(200):
        try:
            s.names()
        except RuntimeError as e:
            errors.append(str(e))
    stop.set()
    for t in threads:
        t.join()
    for e in errors:
        assert "in use by another thread" in e and "one thread at a time" in e, e
    assert np.array_equal(s.get("y"), x)
