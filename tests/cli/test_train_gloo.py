"""`torchrun --nproc-per-node 2 -m tfplus train --distributed` (gloo): two ranks at half the batch end where one process
at the whole batch does, rank 0 alone logging and writing checkpoints."""
import json
import os
import sys

import pytest

pytest.importorskip("torch", reason="the gloo extra is not installed: pip install -e '.[gloo]'")

from modelcheck import assert_variables_close, checkpoint_variables  # noqa: E402
from ranks import train_gloo, trained_alone  # noqa: E402

# One thread and no forked workers per process (two ranks share the CI's two cores), in both runs compared.
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), TFPLUS_NUM_THREADS="1",
           TFPLUS_WORKERS="1", OMP_NUM_THREADS="1")


def test_two_gloo_ranks_train_as_one_process_and_rank_0_alone_logs(tmp_path):
    run = train_gloo(["--checkpoint-dir", tmp_path / "ckpt", "--log", tmp_path / "log.jsonl"], ENV)
    assert run.returncode == 0, run.stderr
    alone = trained_alone(tmp_path / "one", ENV)
    assert_variables_close(checkpoint_variables(tmp_path / "ckpt" / "model.ckpt-8"), alone)
    rows = [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in rows].count("start") == 1  # rank 1 wrote nothing there
    assert run.stdout.count("done: 8 steps") == 1
    saved = sorted(p.name for p in (tmp_path / "ckpt").glob("*.index"))
    assert saved == [f"model.ckpt-{s}.index" for s in (4, 6, 8)], saved  # the last 3 kept
