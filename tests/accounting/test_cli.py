"""``gdpfed account``: answers, JSON, and one-line errors with exit code 2 (docs §10)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from accounting.requests import EpsilonRequest, NoiseMultiplierRequest, answer
from accounting.results import Calibration
from app.cli import run


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = run(["account", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_epsilon_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "epsilon", "--sampling-rate", "0.05", "--noise-multiplier", "1.5", "--rounds", "500", "--delta", "1e-4")
    assert code == 0 and "epsilon = 3.23" in out and "(accountant pld)" in out  # the default since issue 26
    code, out, _ = _run(
        capsys, "--json", "epsilon", "--sampling-rate", "0.05", "--noise-multiplier", "1.5", "--rounds", "500", "--delta", "1e-4"
    )
    data = json.loads(out)
    assert code == 0 and data["epsilon"] == pytest.approx(3.2389, abs=1e-3) and data["accountant"] == "pld"
    code, out, _ = _run(
        capsys, "--json", "epsilon", "--sampling-rate", "0.05", "--noise-multiplier", "1.5", "--rounds", "500", "--delta", "1e-4",
        "--accountant", "rdp",
    )
    data = json.loads(out)
    assert code == 0 and data["epsilon"] == pytest.approx(3.608, abs=1e-3) and data["accountant"] == "rdp"


def test_json_flag_after_the_question(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "rounds", "--sampling-rate", "0.01", "--noise-multiplier", "1", "--epsilon", "2", "--delta", "1e-5", "--json",
                        "--accountant", "rdp")
    data = json.loads(out)
    assert code == 0 and data["rounds"] == 881 and data["sound"] is True and data["fallback"] is False


def test_noise_multiplier_closed_form_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--json", "noise-multiplier", "--sampling-rate", "0.1", "--rounds", "1", "--epsilon", "2", "--delta", "1e-3", "--accountant", "closed_form"]
    code, out, _ = _run(capsys, *argv)
    data = json.loads(out)
    assert code == 0 and data["sound"] is True and data["replaced"] is True
    assert data["epsilon"] <= 2.0 and data["accountant_used"] == "rdp"
    code, out, _ = _run(capsys, *argv, "--raw")
    data = json.loads(out)
    assert data["noise_multiplier"] == pytest.approx(0.526, abs=1e-3) and data["sound"] is False


def test_sampling_rate_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "sampling-rate", "--noise-multiplier", "1", "--rounds", "1000", "--epsilon", "2", "--delta", "1e-5",
                        "--accountant", "rdp")
    assert code == 0 and out.startswith("sampling_rate = 0.0094")


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["noise-multiplier", "--sampling-rate", "0.1", "--rounds", "10", "--epsilon", "nan", "--delta", "1e-5"], "epsilon"),
        (["noise-multiplier", "--sampling-rate", "0.1", "--rounds", "10", "--epsilon", "abc", "--delta", "1e-5"], "epsilon"),
        (["noise-multiplier", "--sampling-rate", "1.5", "--rounds", "10", "--epsilon", "1", "--delta", "1e-5"], "sampling_rate"),
        (["epsilon", "--sampling-rate", "0.1", "--noise-multiplier", "inf", "--rounds", "10", "--delta", "1e-5"], "noise_multiplier"),
        (["epsilon", "--sampling-rate", "0.1", "--noise-multiplier", "1", "--rounds", "0", "--delta", "1e-5"], "rounds"),
        # out of [1e-100, 1e100]: ZeroDivisionError / OverflowError tracebacks before (closed_form, every sampling-rate)
        (["epsilon", "--sampling-rate", "0.1", "--noise-multiplier", "1e-300", "--rounds", "3", "--delta", "1e-5",
          "--accountant", "closed_form"], "noise_multiplier"),
        (["sampling-rate", "--noise-multiplier", "1e200", "--rounds", "10", "--epsilon", "1", "--delta", "1e-5"],
         "noise_multiplier"),
        (["rounds", "--sampling-rate", "0.1", "--noise-multiplier", "1", "--epsilon", "1", "--delta", "1"], "delta"),
    ],
)
def test_bad_values_are_one_line_naming_the_field(capsys: pytest.CaptureFixture[str], argv: list[str], field: str) -> None:
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and f"{field}:" in err and "Traceback" not in err


def test_infeasible_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "noise-multiplier", "--sampling-rate", "1", "--rounds", "1000000", "--epsilon", "0.0001", "--delta", "1e-5")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "noise_multiplier" in err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        # a valid epsilon at the edge of its domain drives closed_form out of float range
        (["rounds", "--sampling-rate", "0.01", "--noise-multiplier", "1", "--epsilon", "1e300", "--delta", "1e-5",
          "--accountant", "closed_form"], "left the floating-point range for these inputs"),
        # a noise multiplier of 1e300 did too; it is now outside noise_multiplier's own domain
        # [1e-100, 1e100] (accounting/validation.py), refused naming the field
        (["rounds", "--sampling-rate", "1", "--noise-multiplier", "1e300", "--epsilon", "1", "--delta", "1e-5"],
         "noise_multiplier: must be in [1e-100, 1e+100]"),
        (["sampling-rate", "--noise-multiplier", "1e300", "--rounds", "1", "--epsilon", "1", "--delta", "1e-5",
          "--accountant", "rdp"], "noise_multiplier: must be in [1e-100, 1e+100]"),
    ],
)
def test_out_of_float_range_is_one_line_not_a_traceback(
    capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    """What the service answers 422 (app/compute.py) is exit 2 and one line here, the same words."""
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert words in err and "Traceback" not in err


def test_subprocess_gdpfed_bad_epsilon() -> None:
    for value in ("nan", "abc"):
        completed = subprocess.run(
            [sys.executable, "-m", "app.cli", "account", "noise-multiplier", "--sampling-rate", "0.1", "--rounds", "10",
             "--epsilon", value, "--delta", "1e-5"],
            capture_output=True, text=True, timeout=60,
        )
        assert completed.returncode == 2
        lines = completed.stderr.strip().splitlines()
        assert len(lines) == 1 and "epsilon" in lines[0] and "Traceback" not in completed.stderr


@pytest.mark.parametrize(
    "argv",
    [
        # closed_form's sigma for epsilon 1e-300 is out of range; rdp's check meets inf * 0
        ["noise-multiplier", "--sampling-rate", "1e-12", "--rounds", "10000000", "--epsilon", "1e-300",
         "--delta", "1e-300", "--accountant", "closed_form"],
        # closed_form's sigma underflows to 0 at q = 1e-300 (log 0, 1 / 0 in rdp's check)
        ["noise-multiplier", "--sampling-rate", "1e-300", "--rounds", "10000000", "--epsilon", "1e-8",
         "--delta", "0.999999", "--accountant", "closed_form"],
        # sigma_guess meets 0 / 0 (rho and q * q both underflow)
        ["noise-multiplier", "--sampling-rate", "1e-300", "--rounds", "1", "--epsilon", "1e-300",
         "--delta", "1e-300", "--accountant", "rdp"],
        # closed_form's q underflows to 0 (log 0 in rdp's check)
        ["sampling-rate", "--noise-multiplier", "1e-100", "--rounds", "1", "--epsilon", "1e-300",
         "--delta", "1e-300", "--accountant", "closed_form"],
    ],
)
def test_extreme_inputs_print_no_numpy_warnings(argv: list[str]) -> None:
    """stderr is at most the one error line: numpy's RuntimeWarnings at inputs that give inf/nan
    on purpose came first. A subprocess, since pytest records warnings instead of printing them."""
    completed = subprocess.run(
        [sys.executable, "-m", "app.cli", "account", *argv], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode in (0, 2), completed.stderr
    assert len(completed.stderr.splitlines()) == (completed.returncode == 2), completed.stderr
    assert "Warning" not in completed.stderr


def test_subprocess_gdpfed_entry_point() -> None:
    # the console script of *this* interpreter's install (a ``gdpfed`` elsewhere on PATH
    # may belong to another checkout or environment)
    script = Path(sys.executable).parent / ("gdpfed.exe" if sys.platform == "win32" else "gdpfed")
    assert script.exists(), f"the gdpfed entry point is not installed next to {sys.executable}"
    completed = subprocess.run(
        [str(script), "account", "--json", "epsilon", "--sampling-rate", "0.03", "--noise-multiplier", "4", "--rounds", "500", "--delta", "1e-4",
         "--accountant", "rdp"],
        capture_output=True, text=True, timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout)["epsilon"] == pytest.approx(0.576, abs=1e-3)


def test_request_models_for_the_service() -> None:
    report = answer(EpsilonRequest(sampling_rate=0.05, noise_multiplier=1.5, rounds=500, delta=1e-4, accountant="rdp"))
    assert report.epsilon == pytest.approx(3.608, abs=1e-3)
    request = NoiseMultiplierRequest.model_validate(
        {"sampling_rate": 0.02, "rounds": 100, "epsilon": 3.0, "delta": 1e-5,
         "spent": [{"sampling_rate": 0.02, "noise_multiplier": 1.0, "steps": 200}]}
    )
    result = answer(request)
    assert isinstance(result, Calibration) and result.spent_epsilon is not None and result.epsilon <= 3.0
    import pydantic

    with pytest.raises(pydantic.ValidationError) as error:
        NoiseMultiplierRequest.model_validate({"sampling_rate": 0.02, "rounds": 100, "epsilon": 3.0, "delta": 1e-5, "raw": 1})
    assert error.value.errors()[0]["loc"] == ("raw",)
    with pytest.raises(pydantic.ValidationError):
        EpsilonRequest.model_validate({"sampling_rate": 0.05, "noise_multiplier": 1.5, "rounds": 500, "delta": 1e-4, "oops": 1})


# What a subprocess imported, as the last line of its stdout (the import graph, not a timing).
_MODULES_AFTER = """
import json, sys
from app.cli import run
try:
    code = run(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "scipy": sorted(m for m in sys.modules if m.split(".")[0] == "scipy")}))
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["account", "--help"],
        ["account", "epsilon", "--sampling-rate", "abc", "--noise-multiplier", "1", "--rounds", "10", "--delta", "1e-5"],
    ],
)
def test_account_without_a_computation_imports_no_scipy(argv: list[str]) -> None:
    """Issue 26 §3 start-up: scipy.special (about 0.1 s, its array-API layer) is not imported by
    importing the accountants and events; the help and a question refused before any
    computation never load it (nor does any pld, rdp or closed_form answer since
    accounting/normal.py and accounting/special.py: tests/foundation/test_cli_imports.py)."""
    completed = subprocess.run([sys.executable, "-c", _MODULES_AFTER, *argv], capture_output=True, text=True, timeout=60)
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["code"] in (0, 2) and result["scipy"] == [], result


def test_readme_account_example_is_what_the_commands_print(capsys: pytest.CaptureFixture[str]) -> None:
    """The README's `gdpfed account` console block, command by command (as
    tests/planner/test_silo_sample.py pins the silo block): a text answer's lines are printed
    whole; a ``--json`` answer shown on one line (``...`` eliding the rest) states each field it
    shows with the printed value, bit for bit."""
    import shlex

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    [block] = [b.split("```")[0] for b in readme.split("```console\n")[1:] if b.startswith("$ gdpfed account ")]
    commands: list[tuple[list[str], list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            commands.append((shlex.split(line[2:])[2:], []))
        elif line.strip():
            commands[-1][1].append(line.rstrip())
    assert [argv[0] for argv, _ in commands] == ["noise-multiplier", "epsilon"]
    for argv, shown in commands:
        code, out, _ = _run(capsys, *argv)
        assert code == 0
        if "--json" not in argv:
            assert [line.rstrip() for line in out.splitlines()] == shown
            continue
        [line] = shown
        stated = json.loads(line.replace(", ...}", "}"))
        printed = json.loads(out)
        assert stated == {key: printed[key] for key in stated}, f"README's `gdpfed account {' '.join(argv)}`"


@pytest.mark.parametrize(("accountant", "sampling_rate", "noise_multiplier", "internal"), [
    ("pld", "0.5", "0.01", "negative dimensions"),
    ("prv", "0.5", "0.1", "Discrete mean differs"),
])
def test_a_fallback_note_is_a_sentence_not_an_exception(
    capsys: pytest.CaptureFixture[str], accountant: str, sampling_rate: str, noise_multiplier: str, internal: str
) -> None:
    """The fallback's note said ``pld failed numerically (ValueError: negative dimensions are not
    allowed)`` and ``prv failed: RuntimeError: Discrete mean differs from continuous mean
    significantly.``: Python's exception text. It states what could not be represented and what
    answered instead (docs/accounting.md §5.3, §13.4), in the text and in the JSON's reason."""
    argv = ["epsilon", "--sampling-rate", sampling_rate, "--noise-multiplier", noise_multiplier, "--rounds", "10",
            "--delta", "1e-5", "--accountant", accountant]
    code, out, _ = _run(capsys, *argv)
    note = next(line for line in out.splitlines() if line.startswith("note: "))
    assert code == 0 and "answered by rdp after a fallback" in out
    assert f"{accountant}'s" in note and "cannot represent this history" in note and "rdp" in note
    assert "Error" not in out and internal not in out
    code, out, _ = _run(capsys, "--json", *argv)
    reason = json.loads(out)["reason"]
    assert code == 0 and reason == note.removeprefix("note: ") and internal not in reason
