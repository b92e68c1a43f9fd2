"""``fairfl rules`` lists the client steps with the train-config key of each (issue 51).

fairfl's own steps and a plug-in's (entry-point group ``fairfl.client_steps``) are listed
with their phase, the metrics they add and where they come from; ``fairfl rules RULE``
names the steps the rule's train config switches on, per-client keys included.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint

from fairfl.cli import main
from fairfl.client import steps as steps_module
from fairfl.client.steps import CLIENT_STEPS, ClientRound, ClientStep
from fairfl.contract.replies import FieldSpec


def _my_report(round_: ClientRound) -> dict[str, int]:
    return {"my-report": 1}


MY_STEP = ClientStep("want-my-report", _my_report, {"my-report": FieldSpec("int", lower=0)})


def _step_lines(out: str) -> dict[str, list[str]]:
    section = out.split("client steps (", 1)[1].split("\n\n", 1)[0]
    return {line.split()[0]: line.split()[1:] for line in section.splitlines()[1:]}


def test_rules_lists_every_step_with_its_key_and_phase_and_a_plugins(monkeypatch, capsys):
    monkeypatch.setattr(CLIENT_STEPS, "_steps", dict(CLIENT_STEPS._steps))
    monkeypatch.setattr(CLIENT_STEPS, "plugins", {})
    monkeypatch.setattr(CLIENT_STEPS, "_plugins_loaded", False)
    plugin = EntryPoint("want-my-report", f"{__name__}:MY_STEP", steps_module.ENTRY_POINT_GROUP)
    monkeypatch.setattr(steps_module, "entry_points", lambda group: [plugin])
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100
    lines = _step_lines(out)
    assert lines["proximal-mu"][:2] == ["objective", "-;"]
    assert lines["propfair-m"][0] == "objective"
    assert lines["rcfl-alpha"] == ["train", "rcfl-eta,", "train_loss;", "fairfl"]
    assert lines["want-my-report"] == ["before", "my-report;", "plug-in", f"{__name__}:MY_STEP"]


def test_one_rule_names_the_steps_its_train_config_switches_on(capsys):
    expected = {
        "fedprox": "client steps: proximal-mu",
        "rcfl": "client steps: rcfl-alpha",  # sent per client, in each message
        "equitable": "client steps: want-activation, proximal-mu",
        "term": "client steps: none",
    }
    for rule, line in expected.items():
        assert main(["rules", rule]) == 0
        assert line in capsys.readouterr().out.splitlines()
