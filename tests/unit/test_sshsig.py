"""qvc.plumbing.signing: SSH signatures on commits, checked against the real ssh-keygen, git and ssh-agent.

Ed25519 signatures are deterministic, so a signature qvc makes must equal, byte for byte, the one
``ssh-keygen -Y sign`` (and ``git commit -S``, and ssh-agent) makes with the same key.
"""

from __future__ import annotations

import base64
import calendar
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from helpers import run_git

from qvc.errors import CorruptionError, InvalidInputError
from qvc.plumbing.objects import commit_bytes
from qvc.plumbing.signing import (
    PASSPHRASE_ENV,
    AllowedSigner,
    SignatureStatus,
    allowed_principals,
    check_commit,
    commit_time,
    format_allowed_signers,
    format_ssh_time,
    insert_signature,
    load_allowed_signers,
    load_signer,
    parse_allowed_signers,
    sign_commit,
    split_signature,
    ssh_time,
    verify,
)

SSH_KEYGEN = shutil.which("ssh-keygen")
pytestmark = pytest.mark.skipif(SSH_KEYGEN is None, reason="ssh-keygen (OpenSSH) is not installed")

ALICE = "alice@example.com"


def _ssh_env(**extra: str) -> dict:
    """The environment for OpenSSH tools: no agent, no askpass, unless given."""
    env = {k: v for k, v in os.environ.items() if k not in ("SSH_AUTH_SOCK", "SSH_ASKPASS", "DISPLAY")}
    env.update(extra)
    return env


def _ssh(*args: str, input: bytes | None = None, check: bool = True, **env: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(args), input=input, stdin=None if input is not None else subprocess.DEVNULL,
                          capture_output=True, env=_ssh_env(**env), timeout=60)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}): {proc.stderr.decode()}")
    return proc


def _keygen(path: Path, kind: str = "ed25519", passphrase: str = "") -> Path:
    _ssh(SSH_KEYGEN, "-q", "-t", kind, "-N", passphrase, "-C", path.name, "-f", str(path))
    return path


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    """alice and bob (Ed25519, no passphrase), alice's key encrypted with passphrase "pw" and an
    ECDSA key."""
    d = tmp_path_factory.mktemp("keys")
    out = {name: _keygen(d / name) for name in ("alice", "bob")}
    shutil.copy(out["alice"], d / "alice_enc")
    _ssh(SSH_KEYGEN, "-q", "-p", "-P", "", "-N", "pw", "-f", str(d / "alice_enc"))
    out["alice_enc"] = d / "alice_enc"
    out["ecdsa"] = _keygen(d / "ecdsa", "ecdsa")
    return out


@pytest.fixture(autouse=True)
def _no_agent_nor_passphrase(monkeypatch):
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)


def _allowed_file(path: Path, *entries: AllowedSigner) -> Path:
    path.write_text(format_allowed_signers(entries))
    return path


def _keygen_sign(key: Path, data: bytes, tmp_path: Path, namespace: str = "git", *options: str) -> str:
    msg = tmp_path / "message"
    msg.write_bytes(data)
    sig = tmp_path / "message.sig"
    sig.unlink(missing_ok=True)
    _ssh(SSH_KEYGEN, "-q", "-Y", "sign", "-f", str(key), "-n", namespace, *options, str(msg))
    return sig.read_text()


def _keygen_verify(allowed: Path, principal: str, armored: str, data: bytes, tmp_path: Path,
                   **env: str) -> subprocess.CompletedProcess:
    sig = tmp_path / "to-verify.sig"
    sig.write_text(armored)
    return _ssh(SSH_KEYGEN, "-Y", "verify", "-f", str(allowed), "-I", principal, "-n", "git", "-s", str(sig),
                input=data, check=False, **env)


# -- keys and signatures -----------------------------------------------------------------------------


def test_signature_is_byte_for_byte_ssh_keygens(keys, tmp_path):
    signer = load_signer(keys["alice"])
    data = b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\n\nsome data\x00\xff" * 5
    for namespace in ("git", "file"):
        ours = signer.sign(data, namespace)
        assert ours == _keygen_sign(keys["alice"], data, tmp_path, namespace)
        assert ours.startswith("-----BEGIN SSH SIGNATURE-----\n") and ours.endswith("\n-----END SSH SIGNATURE-----\n")
        assert max(len(line) for line in ours.splitlines()) == 70
    allowed = _allowed_file(tmp_path / "allowed", AllowedSigner.for_key(ALICE, signer))
    proc = _keygen_verify(allowed, ALICE, signer.sign(data), data, tmp_path)
    assert proc.returncode == 0 and f'Good "git" signature for {ALICE}' in proc.stdout.decode(), proc.stderr
    assert _keygen_verify(allowed, ALICE, signer.sign(data), data + b"!", tmp_path).returncode != 0


def test_public_key_line_and_fingerprint_are_ssh_keygens(keys):
    signer = load_signer(keys["alice"])
    pub = Path(f"{keys['alice']}.pub").read_text().split()
    assert signer.public_key_line == f"{pub[0]} {pub[1]}"
    printed = _ssh(SSH_KEYGEN, "-l", "-E", "sha256", "-f", f"{keys['alice']}.pub").stdout.decode().split()
    assert signer.fingerprint == printed[1]
    assert signer.agent is None and str(keys["alice"]) in repr(signer)


def test_verify_reads_ssh_keygens_signatures(keys, tmp_path):
    line = load_signer(keys["alice"]).public_key_line
    data = b"payload\n"
    assert verify(data, _keygen_sign(keys["alice"], data, tmp_path)) == line
    sha256 = _keygen_sign(keys["alice"], data, tmp_path, "git", "-O", "hashalg=sha256")
    assert verify(data, sha256) == line
    assert verify(data, _keygen_sign(keys["alice"], data, tmp_path, "file"), namespace="file") == line


def test_verify_refuses(keys, tmp_path):
    signer = load_signer(keys["alice"])
    data = b"payload\n"
    armored = signer.sign(data)
    with pytest.raises(CorruptionError, match="does not match"):
        verify(data + b" ", armored)
    with pytest.raises(CorruptionError, match="namespace 'git', not 'file'"):
        verify(data, armored, namespace="file")
    with pytest.raises(CorruptionError, match="not an armored"):
        verify(data, "hello")
    lines = armored.splitlines()
    with pytest.raises(CorruptionError, match="base64"):
        verify(data, "\n".join([lines[0], lines[1][:-1] + "!", *lines[2:]]))
    blob = base64.b64decode("".join(lines[1:-1]))

    def armor(b: bytes) -> str:
        return f"{lines[0]}\n{base64.b64encode(b).decode()}\n{lines[-1]}\n"

    with pytest.raises(CorruptionError, match="version 2"):
        verify(data, armor(blob[:6] + b"\x00\x00\x00\x02" + blob[10:]))
    with pytest.raises(CorruptionError, match="malformed"):
        verify(data, armor(blob[:-3]))
    with pytest.raises(CorruptionError, match="SSHSIG"):
        verify(data, armor(b"XSHSIG" + blob[6:]))
    with pytest.raises(CorruptionError, match="hash algorithm 'sha384'"):
        verify(data, armor(blob.replace(b"\x00\x00\x00\x06sha512", b"\x00\x00\x00\x06sha384")))
    with pytest.raises(InvalidInputError, match="ecdsa-sha2-nistp256 key"):
        verify(data, _keygen_sign(keys["ecdsa"], data, tmp_path))


def test_load_signer_errors_name_the_file(keys, tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(InvalidInputError, match=f"{missing}: cannot read"):
        load_signer(missing)
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x00\x01 not a key")
    with pytest.raises(InvalidInputError, match=f"{garbage}: not an OpenSSH private key nor a public key"):
        load_signer(garbage)
    broken = tmp_path / "broken"
    broken.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n")
    with pytest.raises(InvalidInputError, match=f"{broken}: not a readable OpenSSH private key"):
        load_signer(broken)
    for path in (keys["ecdsa"], Path(f"{keys['ecdsa']}.pub")):
        with pytest.raises(InvalidInputError, match=f"{path}: the key is ecdsa-sha2-nistp256, not Ed25519"):
            load_signer(path)
    enc = keys["alice_enc"]
    with pytest.raises(InvalidInputError, match=f"{enc}: the key is encrypted: give its passphrase"):
        load_signer(enc)
    with pytest.raises(InvalidInputError, match="SSH_AUTH_SOCK is not set"):
        load_signer(f"{keys['alice']}.pub")


def test_encrypted_key_with_passphrase(keys, monkeypatch):
    pytest.importorskip("bcrypt", reason="cryptography decrypts OpenSSH keys only with the bcrypt package")
    plain = load_signer(keys["alice"])
    assert load_signer(keys["alice_enc"], b"pw").sign(b"x") == plain.sign(b"x")
    with pytest.raises(InvalidInputError, match=f"{keys['alice_enc']}: .*wrong passphrase"):
        load_signer(keys["alice_enc"], b"nope")
    monkeypatch.setenv(PASSPHRASE_ENV, "pw")
    assert load_signer(keys["alice_enc"]).sign(b"x") == plain.sign(b"x")


# -- commits in a real repository ----------------------------------------------------------------------


@pytest.fixture
def bare(tmp_path) -> Path:
    path = tmp_path / "bare.git"
    run_git(None, "init", "-q", "--bare", str(path))
    return path


def _empty_tree(repo: Path) -> str:
    return run_git(repo, "mktree", input=b"", text=False).stdout.decode().strip()


def _store(repo: Path, commit: bytes) -> str:
    proc = run_git(repo, "hash-object", "-t", "commit", "-w", "--stdin", input=commit, text=False)
    return proc.stdout.decode().strip()


def _git_letter(repo: Path, sha: str, allowed: Path) -> str:
    return run_git(repo, "-c", f"gpg.ssh.allowedSignersFile={allowed}", "log", "-1", "--format=%G?", sha).stdout.strip()


def test_signed_commit_verifies_with_git(keys, bare, tmp_path):
    signer = load_signer(keys["alice"])
    commit = commit_bytes(_empty_tree(bare), [], "a checkpoint\n\nwith a body\n")
    signed = sign_commit(commit, signer)
    head, _, message = signed.partition(b"\n\n")
    assert message == b"a checkpoint\n\nwith a body\n"
    assert head.split(b"\n")[3].startswith(b"gpgsig -----BEGIN SSH SIGNATURE-----")  # after the committer line
    assert split_signature(signed) == (commit, signer.sign(commit))
    sha = _store(bare, signed)
    assert run_git(bare, "cat-file", "commit", sha, text=False).stdout == signed
    allowed = _allowed_file(tmp_path / "allowed", AllowedSigner.for_key(ALICE, signer))
    proc = run_git(bare, "-c", f"gpg.ssh.allowedSignersFile={allowed}", "verify-commit", sha)
    assert f'Good "git" signature for {ALICE}' in proc.stderr
    assert _git_letter(bare, sha, allowed) == "G"
    state = check_commit(signed, load_allowed_signers(allowed))
    assert state.status is SignatureStatus.VERIFIED and state.principal == ALICE and state.letter == "G"
    assert state.fingerprint == signer.fingerprint and state.public_key == signer.public_key_line
    with pytest.raises(InvalidInputError, match="already has a gpgsig"):
        sign_commit(signed, signer)


def test_git_commit_S_round_trips(keys, tmp_path):
    work = tmp_path / "work"
    run_git(None, "init", "-q", str(work))
    run_git(None, "-C", str(work), "-c", "user.name=Alice", "-c", f"user.email={ALICE}", "-c", "gpg.format=ssh",
            "-c", f"user.signingkey={keys['alice']}", "commit", "-q", "-S", "--allow-empty", "-m", "msg\n\nbody")
    raw = run_git(None, "-C", str(work), "cat-file", "commit", "HEAD", text=False).stdout
    payload, armored = split_signature(raw)
    assert armored is not None and b"gpgsig" not in payload and payload.endswith(b"\n\nmsg\n\nbody\n")
    signer = load_signer(keys["alice"])
    assert verify(payload, armored) == signer.public_key_line
    assert insert_signature(payload, armored) == raw
    assert sign_commit(payload, signer) == raw  # deterministic Ed25519: the very same bytes
    allowed = [AllowedSigner.for_key(ALICE, signer)]
    assert check_commit(raw, allowed).principals == (ALICE,)
    assert commit_time(raw) == int(payload.split(b"\ncommitter ")[1].split(b"> ")[1].split()[0])


def test_signature_states_agree_with_git(keys, bare, tmp_path):
    alice, bob = load_signer(keys["alice"]), load_signer(keys["bob"])
    tree = _empty_tree(bare)
    when = 1_700_000_000
    commit = commit_bytes(tree, [], "state\n", when=when)
    good = sign_commit(commit, alice)
    tampered = good.replace(b"\n\nstate\n", b"\n\nstatE\n")
    by_bob = sign_commit(commit, bob)
    entries = [AllowedSigner.for_key(ALICE, alice)]
    allowed = _allowed_file(tmp_path / "allowed", *entries)
    cases = {"good": (good, SignatureStatus.VERIFIED), "tampered": (tampered, SignatureStatus.BAD),
             "stripped": (split_signature(good)[0], SignatureStatus.UNSIGNED),
             "by bob": (by_bob, SignatureStatus.UNKNOWN_KEY)}
    for name, (raw, status) in cases.items():
        state = check_commit(raw, entries)
        assert state.status is status, (name, state)
        assert _git_letter(bare, _store(bare, raw), allowed) == state.letter, name
    assert "not in the allowed signers" in check_commit(by_bob, entries).reason
    assert "does not match" in check_commit(tampered, entries).reason

    # valid-before the commit's time: a good signature by a key no longer valid then
    expired = [AllowedSigner.for_key(ALICE, alice, valid_before=format_ssh_time(when - 1))]
    state = check_commit(good, expired)
    assert state.status is SignatureStatus.UNKNOWN_KEY and "expired" in state.reason
    assert _git_letter(bare, _store(bare, good), _allowed_file(tmp_path / "expired", *expired)) == "U"
    assert check_commit(good, [AllowedSigner.for_key(ALICE, alice, valid_before=format_ssh_time(when))]).verified
    later = [AllowedSigner.for_key(ALICE, alice, valid_after=format_ssh_time(when + 1))]
    assert "not yet valid" in check_commit(good, later).reason
    other_ns = [AllowedSigner.for_key(ALICE, alice, namespaces="file")]
    assert "namespace 'git'" in check_commit(good, other_ns).reason


# -- allowed signers -----------------------------------------------------------------------------------


def test_allowed_signers_parse_and_format(keys, tmp_path):
    a, b = load_signer(keys["alice"]).public_key_line, load_signer(keys["bob"]).public_key_line
    text = (f"# team keys\n\n{ALICE},alice@work {a} alice's laptop\n"
            f'  bob@example.com NAMESPACES="git,file",valid-after="20240101",Valid-Before="20300101120000Z" {b}\n'
            f'"carol smith" cert-authority {a}\n')
    path = tmp_path / "allowed"
    path.write_text(text)
    entries = load_allowed_signers(path)
    assert [e.principals for e in entries] == [(ALICE, "alice@work"), ("bob@example.com",), ("carol smith",)]
    first, second, third = entries
    assert first.comment == "alice's laptop" and first.namespaces is None and first.public_key_line == a
    assert (second.namespaces, second.valid_after, second.valid_before) == ("git,file", "20240101", "20300101120000Z")
    assert second.valid_before_time() == calendar.timegm((2030, 1, 1, 12, 0, 0))
    assert third.cert_authority and not first.cert_authority
    assert parse_allowed_signers(format_allowed_signers(entries)) == entries
    assert second.line() == f'bob@example.com namespaces="git,file",valid-after="20240101",' \
                            f'valid-before="20300101120000Z" {b}'
    assert third.line() == f'"carol smith" cert-authority {a}'
    # what ssh-keygen finds for each key is what allowed_principals finds
    for signer, expected in ((load_signer(keys["alice"]), [ALICE, "alice@work"]),
                             (load_signer(keys["bob"]), ["bob@example.com"])):
        sig = signer.sign(b"x")
        found = _ssh(SSH_KEYGEN, "-Y", "find-principals", "-f", str(path), "-s", str(_write(tmp_path, sig)))
        assert found.stdout.decode().split() == expected  # one principal a line
        assert allowed_principals(entries, signer.public_key_line) == expected


def _write(tmp_path: Path, armored: str) -> Path:
    path = tmp_path / "find.sig"
    path.write_text(armored)
    return path


@pytest.mark.parametrize("line, why", [
    ("alice@x", "missing"),
    ("alice@x ssh-ed25519", "missing key"),
    ("alice@x ssh-ed25519 AAAA", "cannot read"),
    ('alice@x namespaces=git KEY', "missing start quote"),
    ('alice@x namespaces="git KEY', "missing end quote"),
    ('alice@x bogus KEY', "unknown option 'bogus'"),
    ('alice@x valid-after="2024010112" KEY', "invalid 'valid-after' time"),
    ('alice@x valid-before="20241301" KEY', "invalid 'valid-before' time"),
    ('alice@x valid-after="20240101",valid-after="20250101" KEY', "multiple 'valid-after'"),
    ('alice@x cert-authority="yes" KEY', "takes no value"),
    ('alice@x namespaces KEY', "needs a value"),
])
def test_allowed_signers_bad_lines_name_file_and_line(keys, tmp_path, line, why):
    key = load_signer(keys["alice"]).public_key_line
    path = tmp_path / "allowed"
    path.write_text(f"# comment\nbob@x {load_signer(keys['bob']).public_key_line}\n{line.replace('KEY', key)}\n")
    with pytest.raises(InvalidInputError, match=f"{path}:3: .*{why}"):
        load_allowed_signers(path)
    # ssh-keygen refuses the line too (it reports it and skips it), looking for alice's key
    proc = _ssh(SSH_KEYGEN, "-Y", "find-principals", "-f", str(path), "-s",
                str(_write(tmp_path, load_signer(keys["alice"]).sign(b"x"))), check=False)
    assert proc.returncode != 0 and f"{path}:3:" in proc.stderr.decode()


def test_load_allowed_signers_unreadable(tmp_path):
    with pytest.raises(InvalidInputError, match=f"{tmp_path / 'nope'}: cannot read the allowed signers file"):
        load_allowed_signers(tmp_path / "nope")


@pytest.fixture
def berlin(monkeypatch):
    """The process's time zone set to Europe/Berlin (summer time in July), restored after."""
    if not Path("/usr/share/zoneinfo/Europe/Berlin").exists():
        pytest.skip("no tz database (/usr/share/zoneinfo/Europe/Berlin)")
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_local_timestamps_are_read_as_ssh_keygen_reads_them(keys, tmp_path, berlin):
    signer = load_signer(keys["alice"])
    sig = _write(tmp_path, signer.sign(b"x"))
    path = tmp_path / "allowed"
    # ssh-keygen reads a local time with mktime(tm_isdst=0): in summer, 12:00 in Berlin is 11:00Z
    for local, utc in (("20240701120000", (2024, 7, 1, 11, 0, 0)), ("20240115", (2024, 1, 14, 23, 0, 0))):
        start = calendar.timegm(utc)
        assert ssh_time(local) == start
        entries = [AllowedSigner.for_key(ALICE, signer, valid_after=local)]
        _allowed_file(path, *entries)
        for when, allowed in ((start - 1, False), (start, True)):
            assert bool(allowed_principals(entries, signer.public_key_line, when)) is allowed
            found = _ssh(SSH_KEYGEN, "-Y", "find-principals", "-f", str(path), "-s", str(sig),
                         f"-Overify-time={format_ssh_time(when)}", check=False, TZ="Europe/Berlin")
            assert (found.returncode == 0) is allowed, (local, when, found.stderr)
    assert ssh_time("20240701120000Z") == ssh_time("20240701120000utc") == calendar.timegm((2024, 7, 1, 12, 0, 0))


def test_timestamps():
    assert ssh_time("19700101Z") == 0
    assert ssh_time("197001010001Z") == 60
    assert format_ssh_time(1_700_000_000) == "20231114221320Z"
    assert ssh_time(format_ssh_time(1_700_000_000)) == 1_700_000_000
    for bad in ("2024", "20241301", "202401011", "2024010125", "2024-01-01", "19691231Z", "２０２４０１０１"):
        with pytest.raises(InvalidInputError, match="bad timestamp"):
            ssh_time(bad)


# -- ssh-agent -----------------------------------------------------------------------------------------


@pytest.fixture
def agent(keys, monkeypatch):
    """A real ssh-agent on a fresh socket holding alice's key; ``SSH_AUTH_SOCK`` names it. Killed after."""
    exe, add = shutil.which("ssh-agent"), shutil.which("ssh-add")
    if exe is None or add is None:
        pytest.skip("ssh-agent / ssh-add (OpenSSH client) are not installed")
    folder = tempfile.mkdtemp(prefix="qvc-agent-", dir="/tmp")  # a unix socket's path must be short
    sock = os.path.join(folder, "agent.sock")
    proc = subprocess.Popen([exe, "-D", "-a", sock], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=_ssh_env())
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(sock):
            assert proc.poll() is None and time.monotonic() < deadline, "ssh-agent did not start"
            time.sleep(0.01)
        _ssh(add, "-q", str(keys["alice"]), SSH_AUTH_SOCK=sock)
        monkeypatch.setenv("SSH_AUTH_SOCK", sock)
        yield sock
    finally:
        proc.kill()
        proc.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


def test_agent_signs(keys, agent, bare, tmp_path):
    signer = load_signer(f"{keys['alice']}.pub")
    assert signer.agent == agent
    in_process = load_signer(keys["alice"])
    data = b"signed by the agent\n"
    assert signer.sign(data) == in_process.sign(data)
    allowed = _allowed_file(tmp_path / "allowed", AllowedSigner.for_key(ALICE, signer))
    proc = _keygen_verify(allowed, ALICE, signer.sign(data), data, tmp_path)
    assert proc.returncode == 0, proc.stderr
    signed = sign_commit(commit_bytes(_empty_tree(bare), [], "through the agent\n"), signer)
    sha = _store(bare, signed)
    verified = run_git(bare, "-c", f"gpg.ssh.allowedSignersFile={allowed}", "verify-commit", sha)
    assert f'Good "git" signature for {ALICE}' in verified.stderr

    # an encrypted key file whose key the agent holds signs through the agent, without a passphrase
    encrypted = load_signer(keys["alice_enc"])
    assert encrypted.agent == agent and encrypted.sign(data) == in_process.sign(data)

    with pytest.raises(InvalidInputError, match=f"{keys['bob']}.pub: ssh-agent at {agent} does not hold this key"):
        load_signer(f"{keys['bob']}.pub")
    _ssh(shutil.which("ssh-add"), "-q", "-D", SSH_AUTH_SOCK=agent)  # the agent forgets every key
    with pytest.raises(InvalidInputError, match="refused to sign"):
        signer.sign(data)
