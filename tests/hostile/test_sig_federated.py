"""`tfplus federated simulate` signalled while Ray starts (the sig sweep): ray.init sets a SIGTERM handler of its
own as it begins (sys.exit(15)), so a SIGTERM then ended the process silently with status 15; now the run stops
there, before its first round, with one line and 143, and a signal noted before Ray's handler does the same."""
import os
import signal
import sys

import pytest

pytest.importorskip("flwr", reason="Flower is not installed: pip install \"tfplus[federated]\"")
from tfplus.cli import main  # noqa: E402
from tfplus.federated import flower  # noqa: E402


def _rays_start(monkeypatch, with_rays_handler: bool) -> None:
    """_start_ray as Ray's: a SIGTERM to this process as it starts, after setting Ray's handler (or before);
    the simulation must not run after it."""
    def start(fed):
        if with_rays_handler:
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))  # ray.init's sigterm_handler
        os.kill(os.getpid(), signal.SIGTERM)
        return 1

    def never(*args, **kwargs):
        raise AssertionError("the simulation ran after a stop")
    monkeypatch.setattr(flower, "_start_ray", start)
    monkeypatch.setattr(flower, "_run_simulation", lambda: never)


@pytest.mark.parametrize("with_rays_handler", [True, False])
def test_sigterm_while_ray_starts_is_one_line_and_143_and_the_handler_is_back(with_rays_handler, monkeypatch,
                                                                                capsys, tmp_path):
    _rays_start(monkeypatch, with_rays_handler)
    before = signal.getsignal(signal.SIGTERM)
    code = main(["federated", "simulate", "--synthetic", "--model", "lenet", "--clients", "2", "--rounds", "2",
                 "--out", str(tmp_path / "fl")])
    assert code == 143
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "tfplus federated simulate: SIGTERM: stopped while Ray started, before this run's first round; nothing new "
        "was saved")
    assert signal.getsignal(signal.SIGTERM) == before
