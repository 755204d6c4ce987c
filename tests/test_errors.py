"""Every error meant for the user derives from UserError, the one class the command line catches (one line,
exit 2): a new exception class anywhere in sentcl (or in the study harness, whose command the CLI runs)
either derives from it or is named here as internal."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import sentcl
import sentcl_reproduction
from sentcl.errors import UserError

#: exceptions that never reach a user as such, and why
INTERNAL = {
    "sentcl.serving.admission.BusyError": "the server answers it with 503 and Retry-After",
    "sentcl.serving.server.APIError": "the server answers it as a JSON error response",
    "sentcl.serving.server._TooLarge": "the server answers it with 413",
    "sentcl_reproduction.pipeline.StageNotDoneError": "--report-only names the stages not run yet",
    "sentcl_reproduction.domain_study.NotRunError": "domain_study --report-only lists runs not done",
}


def exception_classes() -> dict[str, type]:
    found = {}
    packages = [(sentcl, "sentcl."), (sentcl_reproduction, "sentcl_reproduction.")]  # the CLI runs both
    for module in (
        m for package, prefix in packages for m in pkgutil.walk_packages(package.__path__, prefix)
    ):
        try:
            loaded = importlib.import_module(module.name)
        except ImportError as exc:  # an optional extra's module: it must still be checked, so say which
            raise AssertionError(f"{module.name} does not import: {exc}") from None
        for name, value in vars(loaded).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.name
            ):
                found[f"{module.name}.{name}"] = value
    return found


def test_every_user_facing_error_derives_from_user_error():
    classes = exception_classes()
    assert len(classes) >= 20  # the walk found the package's errors
    stray = sorted(
        name for name, cls in classes.items() if not issubclass(cls, UserError) and name not in INTERNAL
    )
    assert not stray, f"derive these from sentcl.errors.UserError, or list them in INTERNAL with why: {stray}"
    assert set(INTERNAL) <= set(classes), (
        f"INTERNAL names classes that are gone: {set(INTERNAL) - set(classes)}"
    )


def test_the_command_line_catches_the_base_class(tmp_path, capsys):
    from sentcl.cli.main import main
    from sentcl.hub_files import HubFileError

    assert issubclass(HubFileError, UserError)  # it was in no hand-kept list before
    assert main(["card", str(tmp_path), "--add", str(tmp_path / "absent.json")]) == 2
    assert capsys.readouterr().err.strip() == f"sentcl card: error: {tmp_path / 'absent.json'}: no such file"
