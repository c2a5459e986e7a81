"""The admission policies of ``policies/`` as objects: well-formed, bound, identity filled in.

What the policies *do* is proved against the real API server in tests/e2e/test_policies.py;
here: every file parses, every policy has its binding, the contract names are spelt
right, and ``load_policies(allowed_usernames=...)`` writes a CEL list the API server reads.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from gatekeeper.core.kube.keys import CHARGE_KEY, GATEKEEPER_API_VERSION, POOL_LABEL, SCHEDULING_GATE
from gatekeeper.render.admission import (
    ALLOWED_USERNAMES_VARIABLE,
    HUB_POLICY_FILES,
    POLICY_FILES,
    cel_string_list,
    load_policies,
    service_account_username,
)

ROOT = Path(__file__).resolve().parents[2]

ADMISSION = "admissionregistration.k8s.io/v1"
POLICY_KINDS = {"ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"}


def test_policy_files_are_exactly_those_in_the_folder() -> None:
    on_disk = {p.stem for p in (ROOT / "policies").glob("*.yaml")}
    assert on_disk == set(POLICY_FILES) | set(HUB_POLICY_FILES)


@pytest.mark.parametrize("name", POLICY_FILES + HUB_POLICY_FILES)
def test_every_policy_is_bound_and_every_binding_names_a_policy(name: str) -> None:
    objects = load_policies([name])
    policies = {o["metadata"]["name"]: o["kind"] for o in objects if o["kind"] in POLICY_KINDS}
    bindings = [o for o in objects if o["kind"].endswith("Binding")]
    assert policies, f"{name}.yaml holds no policy"
    assert {o["apiVersion"] for o in objects} == {ADMISSION}
    assert sorted(b["spec"]["policyName"] for b in bindings) == sorted(policies)
    for binding in bindings:
        assert binding["kind"] == policies[binding["spec"]["policyName"]] + "Binding"
        if binding["kind"] == "ValidatingAdmissionPolicyBinding":
            assert binding["spec"]["validationActions"] == ["Deny"]


def test_names_are_unique_and_prefixed() -> None:
    objects = load_policies()
    counts = Counter((o["kind"], o["metadata"]["name"]) for o in objects)
    assert all(n == 1 for n in counts.values()), counts
    assert all(o["metadata"]["name"].startswith("lws-gatekeeper-") for o in objects)


def test_every_policy_fails_closed() -> None:
    for obj in load_policies():
        if obj["kind"] in POLICY_KINDS:
            assert obj["spec"]["failurePolicy"] == "Fail", obj["metadata"]["name"]


def test_the_contract_names_are_spelt_right() -> None:
    text = {name: (ROOT / "policies" / f"{name}.yaml").read_text() for name in POLICY_FILES}
    assert SCHEDULING_GATE in text["gate-protection"]
    assert SCHEDULING_GATE in text["gate-injection"]
    assert POOL_LABEL in text["gate-injection"]
    assert POOL_LABEL in text["pool-label"]
    assert CHARGE_KEY in text["member-labels"]
    # Nothing that looks like the contract names but is not (a typo disables the policy).
    assert GATEKEEPER_API_VERSION in text["priority-classes"]
    for body in text.values():
        body = body.replace(f"apiVersion: {GATEKEEPER_API_VERSION}", "")
        assert set(re.findall(r"lws-gatekeeper\.io/[a-z-]*[a-z]", body)) <= {
            SCHEDULING_GATE,
            POOL_LABEL,
            CHARGE_KEY,
        }


def test_allowed_usernames_default_is_the_charts_service_account() -> None:
    (policy,) = [o for o in load_policies(["gate-protection"]) if o["kind"] == "ValidatingAdmissionPolicy"]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    expected = service_account_username("lws-gatekeeper-system", "lws-gatekeeper")
    assert variables[ALLOWED_USERNAMES_VARIABLE] == cel_string_list([expected])


def test_allowed_usernames_are_written_into_the_policy() -> None:
    objects = load_policies(allowed_usernames=["sandbox-admin", "system:serviceaccount:gk:gk"])
    policy = next(
        o
        for o in objects
        if o["kind"] == "ValidatingAdmissionPolicy"
        and o["metadata"]["name"] == "lws-gatekeeper-gate-protection"
    )
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert variables[ALLOWED_USERNAMES_VARIABLE] == "['sandbox-admin', 'system:serviceaccount:gk:gk']"
    # The other files are untouched.
    assert load_policies(["pool-label"]) == [o for o in objects if "pool-label" in o["metadata"]["name"]]


@pytest.mark.parametrize("usernames", [[], [""], [" admin"]])
def test_allowed_usernames_must_be_real_names(usernames: list[str]) -> None:
    with pytest.raises(ValueError, match="give at least one username"):
        load_policies(allowed_usernames=usernames)


def test_allowed_usernames_need_the_gate_protection_file() -> None:
    with pytest.raises(ValueError, match="include 'gate-protection'"):
        load_policies(["pool-label"], allowed_usernames=["x"])


def test_unknown_policy_file() -> None:
    with pytest.raises(ValueError, match="unknown policy file 'gate'"):
        load_policies(["gate"])


def test_cel_string_list_escapes_quotes_and_backslashes() -> None:
    assert cel_string_list(["a'b", "c\\d"]) == "['a\\'b', 'c\\\\d']"
