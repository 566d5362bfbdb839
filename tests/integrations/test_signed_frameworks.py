"""A user sets one key and every framework's runs are signed: each integration's sample (LangGraph's
``QvcSaver``, agno's ``QvcDb``, the OpenAI Agents SDK's ``QvcSession``, pydantic-ai's
``QvcConversationStore``, Google ADK's ``QvcSessionService``, Strands' ``QvcStorage`` and
``QvcSessionManager``) and the samples of the store and of ``qvc.runs`` run offline as a user runs
them, in their own process (and the worker processes they start and kill), with nothing but
``QVC_SIGNING_KEY`` set; once the key is an allowed signer, ``qvc verify`` and plain git find every
commit of the repository signed by it. Real ``ssh-keygen``, ``git``, frameworks and ``qvc`` command;
no mocks."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, env, qvc, qvc_json, run_git, slow_enabled

from qvc import GitCheckpointStore
from qvc.readers.verify import verify

pytestmark = pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen is not installed")

SAMPLES = ROOT / "samples"
PRINCIPAL = "alice"


def case(sample: str, framework: str | None, *threads: str, args: tuple[str, ...] = (), slow: bool = True):
    """A sample, the module its framework needs (``None``: qvc alone), the threads (or their
    prefixes) its run must leave (so the commits checked are the adapter's), its extra arguments.
    The default run signs a run recorder's run (and the control without a key); the frameworks'
    run with the slow tier (``-m slow``: about 25 s), so the default run stays within its ten
    minutes (every commit a framework writes goes through the same signing write path)."""
    return pytest.param(sample, framework, threads, args, id=sample.removesuffix(".py"),
                        marks=[pytest.mark.slow] if slow else [])


CASES = [
    case("langgraph_agent.py", "langgraph.prebuilt", "cities"),
    # a run, a worker SIGKILLed mid-run, acontinue_run, a fork
    case("agno_agent.py", "agno.agent", "agno/session/agno-demo", "run/agno-demo/first", "run/agno-demo/crashed",
         args=("--delay", "0.4")),
    # a paused run saved by a worker that is killed, resumed, a fork
    case("openai_agents_session.py", "agents", "openai/session/chat", "openai/session/chat-retry",
         "openai/session/mail"),
    # saves, a branch (time travel), a fork, a pause resumed by a second store
    case("pydantic_ai_conversation.py", "pydantic_ai", "pydantic-ai/trip", "pydantic-ai/trip-b"),
    # sessions, user and app state, artifacts, a fork
    case("google_adk_session.py", "google.adk", "adk/session/calc/ada/s1", "adk/session/calc/ada/s1-again",
         "adk/user/calc/ada", "adk/app/calc", "adk/artifact/"),
    # the Claude Agent SDK's real loop (its program on a scripted model server): tool steps, a subagent, a
    # resume from qvc alone, rename, tag, a fork
    case("claude_agent_sdk_session.py", "claude_agent_sdk", "claude/session/"),
    # Microsoft Agent Framework's workflow loop: supersteps, a resume from an older checkpoint and a review
    # answered by new processes, a fork into another workflow name
    case("agent_framework_workflow.py", "agent_framework", "maf/workflow/lookups", "maf/workflow/lookups-retry"),
    # Strands' Agent loop through SnapshotSessionManager and QvcSessionManager: tool steps, a resume,
    # time travel to an immutable snapshot, a fork
    case("strands_session.py", "strands", "strands/session/trip/agent/assistant",
         "strands/session/trip-b/agent/assistant", "strands/repository/notes"),
    # the store itself: puts, fork_checkpoint, time travel, push and clone
    case("quickstart.py", None, "france", "france/metropolitan"),
    # qvc.runs: a worker SIGKILLed mid-run and the run continued in place by another process
    case("crash_recovery.py", None, "run/crash-demo/research-1", args=("--delay", "0.3")),
    # qvc.runs: an ERROR run continued in place
    case("tool_error.py", None, "run/errors/", slow=False),
]


@pytest.fixture(autouse=True)
def _no_key_of_the_callers(monkeypatch):
    """Only the key a test sets signs: none from the environment pytest runs in."""
    for var in ("QVC_SIGNING_KEY", "QVC_SIGNING_PASSPHRASE", "SSH_AUTH_SOCK"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def key(tmp_path) -> Path:
    """A fresh Ed25519 key made by the real ssh-keygen (no passphrase)."""
    path = tmp_path / "keys" / "qvc_ed25519"
    path.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", PRINCIPAL, "-f", str(path)], check=True,
                   stdin=subprocess.DEVNULL, timeout=60)
    return path


def run_sample(name: str, repo: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    """``python samples/NAME --repo REPO ARGS`` as a user runs it, with ``extra`` in its environment."""
    proc = subprocess.run([sys.executable, str(SAMPLES / name), "--repo", str(repo), *args], cwd=repo.parent,
                          env=env(**extra), capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"{name} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "FAIL" not in proc.stdout and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    return proc


def git_letters(git_dir: Path, allowed: Path) -> list[str]:
    """``%G?`` of every commit plain git reaches from every ref of ``git_dir``, checked against ``allowed``."""
    return run_git(git_dir, "-c", f"gpg.ssh.allowedSignersFile={allowed}", "log", "--all",
                   "--format=%G?").stdout.split()


@pytest.mark.parametrize("sample, framework, threads, args", CASES)
def test_one_key_in_the_environment_signs_every_commit_of_the_run(sample, framework, threads, args, tmp_path, key,
                                                                  request):
    if request.node.get_closest_marker("slow") and not slow_enabled(request.config):
        pytest.skip("slow: run with -m slow or QVC_SLOW=1")
    if framework is not None:
        pytest.importorskip(framework)
    repo = tmp_path / "runs.qvc"
    run_sample(sample, repo, *args, QVC_SIGNING_KEY=str(key))

    qvc("--repo", str(repo), "signers", "add", PRINCIPAL, f"{key}.pub")
    allowed = repo / "qvc" / "allowed_signers"
    assert allowed.is_file()
    proc = qvc("--repo", str(repo), "verify", "--all")  # exit 0 asserted
    assert "all verified" in proc.stdout, proc.stdout
    shown = qvc_json("--repo", str(repo), "verify", "--all")
    assert shown["ok"] and shown["problems"] == [] and shown["signed_by"] == {PRINCIPAL: shown["commits"]}

    with GitCheckpointStore(repo, readonly=True) as store:
        stored = store.threads()
        report = verify(store)
    for thread in threads:  # the framework's own threads are among those checked
        assert any(t.startswith(thread) for t in stored), (thread, stored)
    assert report, report.problems
    assert report.commits > 0 and report.signed_by == {PRINCIPAL: report.commits}
    assert report.commits == shown["commits"]

    letters = git_letters(repo, allowed)  # plain git agrees, on every commit of every ref
    assert letters and set(letters) == {"G"}, letters
    assert len(letters) == report.commits
    heads = run_git(repo, "for-each-ref", "--format=%(objectname)", "refs/heads/").stdout.split()
    for head in heads:
        out = run_git(repo, "-c", f"gpg.ssh.allowedSignersFile={allowed}", "verify-commit", head).stderr
        assert f'Good "git" signature for {PRINCIPAL} with ED25519 key' in out, out

    remote = Path(f"{repo}-remote.git")  # quickstart pushes: the signatures travel to a plain git server
    if remote.is_dir():
        pushed = git_letters(remote, allowed)
        assert pushed and set(pushed) == {"G"}, pushed


def test_without_the_key_the_same_run_is_unsigned_and_verify_says_so(tmp_path, key):
    """The control: the same sample with no key leaves unsigned commits, which ``qvc verify`` and
    git report (so the test above sees the key's effect, not a repository that is always clean)."""
    repo = tmp_path / "runs.qvc"
    run_sample("tool_error.py", repo)
    qvc("--repo", str(repo), "signers", "add", PRINCIPAL, f"{key}.pub")
    proc = qvc("--repo", str(repo), "verify", "--all", check=7)
    assert "unsigned" in proc.stdout, proc.stdout
    with GitCheckpointStore(repo, readonly=True) as store:
        report = verify(store)
    assert not report and report.signed_by == {} and report.commits > 0
    assert {p.status for p in report.problems} == {"unsigned"}
    assert set(git_letters(repo, repo / "qvc" / "allowed_signers")) == {"N"}
