"""HF_TOKEN reaches a prepare process (it is inherited from milabench's environment) and
never reaches what milabench writes: the run files of a prepare step hold neither the
token nor any other Hugging Face token the process printed (milabench.events.redact_text).
"""

from __future__ import annotations

import hashlib
import sys

from milabench.envs.install import LogFolder
from milabench.envs.steps import run_step
from milabench.events import REDACTED, redact_text, secret_values
from milabench.plan.spec import ProcessSpec

TOKEN = "hf_PrepareToken0123456789abcdefghijklmn"
UPSTREAM = "a-token-set-the-upstream-way-42"

PROGRAM = """
import hashlib, os
token = os.environ["HF_TOKEN"]
print("token sha256", hashlib.sha256(token.encode()).hexdigest())
print("+ Full environment:", dict(os.environ))  # as upstream's recursiongfn prepare does
print(f"401 Client Error: Authorization: Bearer {token}")
print("upstream variable:", os.environ["MILABENCH_HF_TOKEN"])
print("a token seen elsewhere: hf_OtherToken0123456789abcdefghijklmnop")
"""


def test_prepare_gets_hf_token_and_the_run_files_never_hold_it(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("MILABENCH_HF_TOKEN", UPSTREAM)
    logs = LogFolder(tmp_path / "runs", "prepare")
    try:
        spec = ProcessSpec(tag=["llama"], argv=[sys.executable, "-c", PROGRAM], cwd=str(tmp_path))
        result = run_step(spec, logs.sinks())
    finally:
        logs.close()
    assert result.ok, result.error

    written = "".join(p.read_text() for p in logs.path.iterdir() if p.is_file())
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    assert f"token sha256 {digest}" in written  # the process had the token
    for secret in (TOKEN, UPSTREAM, "hf_OtherToken0123456789abcdefghijklmnop"):
        assert secret not in written
    assert written.count(REDACTED) >= 5


def test_redact_text_hides_hub_tokens_and_the_secret_variables(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "short")  # under 8 characters: not a secret value
    monkeypatch.setenv("MILABENCH_HF_TOKEN", UPSTREAM)
    assert secret_values() == [UPSTREAM]
    assert redact_text(f"HF_TOKEN={TOKEN}") == f"HF_TOKEN={REDACTED}"
    assert redact_text(f"'MILABENCH_HF_TOKEN': '{UPSTREAM}'") == (
        f"'MILABENCH_HF_TOKEN': '{REDACTED}'"
    )
    kept = "shf_abcdefghijklmnopqrstuvwxyz0123456789 hf_short max_tokens=5 short"
    assert redact_text(kept) == kept
