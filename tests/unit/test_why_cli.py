"""``kubectl lws-gatekeeper why``'s contract with a user's shell: exit 0 when every group is
admitted (a pool: none waits), 1 when one waits, 2 when the answer could not be read, with a
sentence and never a traceback; ``-o text|yaml|json``; the plugin has the user's commands only.
The answers themselves are ``test_explain.py``'s and, against a cluster, ``tests/e2e/test_why.py``'s."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import yaml
from click.testing import CliRunner

from gatekeeper import cli, why, why_cli
from gatekeeper.core.plugin.explain import GroupView, LwsAnswer, PoolView


def _group(index: int, state: str) -> GroupView:
    return GroupView(index, state, "", "", "2 nvidia.com/gpu", "", {"running": 2})


def _answer(*states: str, not_shown: tuple[str, ...] = ()) -> LwsAnswer:
    groups = tuple(_group(i, s) for i, s in enumerate(states))
    return LwsAnswer("team-a", "vllm", "gpus", len(states), 2, groups, None, "", not_shown)


def _run(monkeypatch: pytest.MonkeyPatch, answer: Any, *args: str) -> Any:
    async def fake(*_: Any) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer

    monkeypatch.setattr(why_cli, "_why", fake)
    return CliRunner().invoke(cli.plugin, ["why", *args])


@pytest.mark.parametrize(
    ("answer", "code"),
    [
        (_answer("admitted", "admitted"), 0),
        (_answer("admitted", "waiting"), 1),
        (_answer("unrecorded"), 1),
        (PoolView("gpus", "Pool"), 0),
    ],
)
def test_the_exit_code_says_whether_a_group_waits(
    monkeypatch: pytest.MonkeyPatch, answer: Any, code: int
) -> None:
    assert _run(monkeypatch, answer, "vllm").exit_code == code


def test_a_pool_with_a_group_waiting_exits_1(monkeypatch: pytest.MonkeyPatch) -> None:
    from gatekeeper.core.plugin.explain import Holder

    waiting = PoolView("gpus", "Pool", waiting=(Holder("team-a", "vllm", 1, "2 nvidia.com/gpu"),))
    assert _run(monkeypatch, waiting, "pool/gpus").exit_code == 1


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (
            why.Forbidden('User "dev" cannot list resource "pods" in the namespace "team-a"'),
            "not allowed: User",
        ),
        (why.NotFound("LeaderWorkerSet team-a/vllm not found"), "LeaderWorkerSet team-a/vllm not found"),
        (httpx.ConnectError("[Errno 111] Connection refused"), "cannot reach the API server: "),
        (FileNotFoundError(2, "No such file or directory"), "cannot reach the API server: "),
        (ValueError("Unable to find valid credentials"), "no kubeconfig to use (--kubeconfig, $KUBECONFIG"),
        (RuntimeError("something else"), "RuntimeError: something else"),
    ],
)
def test_an_answer_that_cannot_be_read_exits_2_with_a_sentence(
    monkeypatch: pytest.MonkeyPatch, error: Exception, said: str
) -> None:
    res = _run(monkeypatch, error, "vllm")
    assert res.exit_code == 2
    assert res.stderr.startswith(f"error: {said}"), res.stderr
    assert "Traceback" not in res.output + res.stderr


def test_text_yaml_and_json_say_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    answer = _answer("waiting", not_shown=("pools.lws-gatekeeper.io gpus: forbidden",))
    text = _run(monkeypatch, answer, "vllm").stdout
    assert "not shown: pools.lws-gatekeeper.io gpus: forbidden" in text.splitlines()
    as_yaml = yaml.safe_load(_run(monkeypatch, answer, "vllm", "-o", "yaml").stdout)
    as_json = json.loads(_run(monkeypatch, answer, "vllm", "-o", "json").stdout)
    assert as_yaml == as_json == json.loads(json.dumps(why.as_json(answer)))
    assert as_json["not_shown"] == ["pools.lws-gatekeeper.io gpus: forbidden"]


def test_the_plugin_has_the_users_commands_only() -> None:
    assert sorted(cli.plugin.commands) == ["why"]
    res = CliRunner().invoke(cli.plugin, ["why", "--help"])
    assert res.exit_code == 0 and "--context" in res.output and "text|yaml|json" in res.output
    assert CliRunner().invoke(cli.plugin, ["run"]).exit_code == 2, "no controller in the plugin"
