"""The gate's readers on their own: what they accept (merge keys, bounded aliases, a BOM) as well as what they
refuse, with the exact position."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.slurm.hostlist import count, expand
from fleet.input import InputError, parse_json, parse_yaml, read_text


def refused(fn, *args, **kwargs) -> InputError:
    with pytest.raises(InputError) as info:
        fn(*args, **kwargs)
    return info.value


def test_merge_keys_and_small_aliases_still_work() -> None:
    doc = parse_yaml("base: &b {a: 1, b: 2}\nuse:\n  <<: *b\n  b: 3\nlist: &l [x, y]\nagain: *l\n", "f.yaml")
    assert doc["use"] == {"a": 1, "b": 3} and doc["again"] == ["x", "y"]


def test_duplicate_key_names_both_lines() -> None:
    err = refused(parse_yaml, "a: 1\nb:\n  c: 1\n  c: 2\n", "f.yaml")
    assert err.lines() == ["f.yaml:4:3: duplicate key 'c' (first given on line 3)"]


def test_a_long_scalar_and_a_wide_alias_fan_out_are_bounded() -> None:
    assert "at most 65,536" in str(refused(parse_yaml, "a: " + "x" * 70_000 + "\n", "f.yaml"))
    text = "a: &a " + "y" * 60_000 + "\nb: [" + ", ".join(["*a"] * 200) + "]\n"
    assert "characters (aliases included)" in str(refused(parse_yaml, text, "f.yaml"))


def test_utf8_bom_is_dropped_and_a_bad_byte_has_its_position(tmp_path: Path) -> None:
    f = tmp_path / "x.yaml"
    f.write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert parse_yaml(read_text(f, what="file", max_bytes=100), str(f)) == {"a": 1}
    f.write_bytes(b"a: 1\nb: \xc3\x28\n")
    assert refused(read_text, f, what="file", max_bytes=100).lines() == [f"{f}:2:4: not valid UTF-8 (byte 0xc3)"]


def test_json_duplicates_nan_and_syntax() -> None:
    assert parse_json('{"a": [1, 2.5, "x"]}', "i.json") == {"a": [1, 2.5, "x"]}
    assert refused(parse_json, '{"a": 1,\n "a": 2}', "i.json").lines() == ["i.json:2:2: duplicate key 'a'"]
    assert "Infinity is not a finite number" in str(refused(parse_json, '{"a": Infinity}', "i.json"))
    assert refused(parse_json, '{"a": 1e999}', "i.json").errors[0][1] == "1e999 is not a finite number"
    assert refused(parse_json, '{"a" 1}', "i.json").errors[0][0] == "1:6"


def test_hostlist_count_is_the_product_summed_without_expanding() -> None:
    assert count("a[0-999]b[0-999]c[0-999],d-1") == 1_000_000_001
    assert count("r[1-2]n[1-2],x-[0-3,7]") == 9
    assert len(expand("n-[0-65535]")) == 65_536  # exactly the limit is fine


def test_the_policy_schema_follows_the_planner_policy_fields() -> None:
    import dataclasses

    from autoscaler.model.policy import Policy, policy_from_mapping
    from fleet.input.policy import policy_model

    assert set(policy_model().model_fields) == {f.name for f in dataclasses.fields(Policy)}
    raw = {"max_nodes": 8, "budget_usd_per_hour": 12.5, "spot_queues": ["a"], "pool_max_nodes": {"p": 2}}
    policy_model().model_validate(raw)  # what the gate accepts, the planner builds
    assert policy_from_mapping(raw).spot_queues == frozenset({"a"})
