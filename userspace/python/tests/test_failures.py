"""A killed rank, bad configuration and unsupported calls: typed, clear errors."""

import causeway
import workers
import world

TIMEOUT_S = 15.0


def test_a_killed_rank_makes_the_others_raise_peer_error_within_the_timeout():
    out = world.run_raw(workers.killed_rank, 3, 2, TIMEOUT_S, timeout=120, expect=2)
    assert sorted(out) == [0, 1], out
    for rank, (status, o) in out.items():
        assert status == "ok", f"rank {rank}: {o}"
        assert o["first"] is not None, f"rank {rank} never noticed the dead rank"
        name, peer, kind, text = o["first"]
        assert peer == 2, f"rank {rank} blamed {peer}: {text}"
        assert "2" in text, text
        # Detected from the closed connections, well inside the timeout.
        assert o["elapsed"] < TIMEOUT_S + 5, o
        assert o["later"] is not None, "a later call on the broken group succeeded"
        assert "CausewayError" in o["mro"] and "RuntimeError" in o["mro"], o["mro"]
        assert o["later_elapsed"] < TIMEOUT_S + 5, o


def _refused(per_rank_env, world_size=2, env=None):
    out = world.run(workers.bad_config, world_size, per_rank_env=per_rank_env, env=env, timeout=90)
    for rank, o in out.items():
        assert o is not None, f"rank {rank} started with a bad configuration"
    return out


def test_an_invalid_variable_is_a_config_error_naming_it():
    out = _refused({0: {"CAUSEWAY_STREAMS_WAN": "many"}, 1: {"CAUSEWAY_STREAMS_WAN": "many"}})
    for mro, text, kind in out.values():
        assert "ConfigError" in mro and "ValueError" in mro, mro
        assert "CAUSEWAY_STREAMS_WAN" in text and "many" in text, text


def test_an_out_of_range_option_is_a_config_error():
    out = _refused({0: {"CAUSEWAY_CHUNK_BYTES": "1"}, 1: {"CAUSEWAY_CHUNK_BYTES": "1"}})
    for mro, text, kind in out.values():
        assert "ConfigError" in mro, mro
        assert "chunk size" in text, text


def test_ranks_that_disagree_on_a_wire_option_are_refused_on_every_rank():
    out = _refused({1: {"CAUSEWAY_WINDOW": "8"}})
    for mro, text, kind in out.values():
        assert "ConfigError" in mro, (mro, text)
        assert kind == "ConfigMismatch", (kind, text)
        assert "window" in text.lower(), text


def test_a_domain_named_by_some_ranks_only_is_refused():
    out = _refused({0: {"CAUSEWAY_DOMAIN": "east"}})
    for mro, text, kind in out.values():
        assert kind == "DomainUnset", (kind, text)
        assert "CAUSEWAY_DOMAIN" in text, text


def test_unsupported_calls_raise_not_implemented_naming_them():
    out = world.run(workers.unsupported, 2, timeout=90)
    for rank, o in out.items():
        for name in ("BAND", "BXOR", "int8", "bool", "send", "all_to_all_single", "gather"):
            assert o[name] is not None, f"rank {rank}: {name} did not raise NotImplementedError"
        assert "BAND" in o["BAND"] and "int8" in o["int8"] and "send" in o["send"], o
        assert o["after"] == [2.0] * 4


def test_contiguous_cpu_tensors_are_passed_without_a_copy():
    out = world.run(workers.zero_copy, 2, timeout=90)
    for rank, o in out.items():
        for name in workers.DTYPES:
            assert o[name] == (True, True, True), (rank, name, o[name])
        assert o["noncontiguous_staged"]


def test_exception_classes():
    assert issubclass(causeway.CausewayTimeoutError, causeway.PeerError)
    assert issubclass(causeway.CausewayTimeoutError, TimeoutError)
    assert issubclass(causeway.ConfigError, ValueError)
    assert issubclass(causeway.PeerError, causeway.CausewayError)
    assert issubclass(causeway.CausewayError, RuntimeError)


def test_work_wait_with_a_timeout_raises_then_the_operation_still_completes():
    out = world.run(workers.wait_timeout, 2, 2.0, timeout=90)
    o = out[0]
    assert o["timed_out"] is not None, "wait(timeout=0.3 s) returned before the late rank called"
    text, mro = o["timed_out"]
    assert "TimeoutError" in mro and "0.3" in text, o
    assert 0.25 < o["timeout_elapsed"] < 1.5, o
    assert all(r["sum_ok"] for r in out.values()), out
