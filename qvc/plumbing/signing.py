"""SSH signatures on git commit objects: signing, verifying and allowed signers, in process.

What ``git commit -S`` writes with ``gpg.format=ssh`` and what ``git verify-commit`` checks,
without running ``ssh-keygen``:

* :class:`Signer` (from :func:`load_signer`) signs with an OpenSSH Ed25519 private key file, or
  through ssh-agent (``SSH_AUTH_SOCK``) given the key's ``.pub`` file. :meth:`Signer.sign` writes
  the armored SSHSIG text (OpenSSH's PROTOCOL.sshsig, hash ``sha512``) byte for byte as
  ``ssh-keygen -Y sign`` does.
* :func:`sign_commit`, :func:`insert_signature` and :func:`split_signature` put the signature in,
  and take it out of, a commit object's ``gpgsig`` header as git does.
* :func:`verify` checks an armored signature over data (SSHSIG structure, namespace, Ed25519).
* :func:`parse_allowed_signers` / :func:`load_allowed_signers` read ssh-keygen(1)'s ALLOWED
  SIGNERS format, :meth:`AllowedSigner.line` writes it, :func:`allowed_principals` answers who
  may sign with a key at a time.
* :func:`check_commit` combines them into a :class:`SignatureState` (verified, unsigned, bad,
  unknown key) for ``qvc verify`` and ``qvc log``.

Only Ed25519 keys are supported (signing and verifying); a signature by another key type or by
an SSH certificate is reported as "unknown key" with the reason. ``cryptography`` is imported
only when a key is loaded or a signature checked, so importing this module stays cheap.
Nothing here imports the rest of qvc except :mod:`qvc.errors`.

Errors: a key, key file, allowed signers file or argument qvc cannot use raises
:class:`~qvc.errors.InvalidInputError` naming the file (and line); a signature that is
malformed or does not verify raises :class:`~qvc.errors.CorruptionError`.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import os
import re
import struct
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from qvc.errors import CorruptionError, InvalidInputError

#: the namespace git signs commits and tags in
NAMESPACE = "git"
#: the environment variable a passphrase for an encrypted key file is taken from
PASSPHRASE_ENV = "QVC_SIGNING_PASSPHRASE"
#: the commit header git keeps an SSH (or GPG) signature in, in a SHA-1 repository
SIGNATURE_HEADER = b"gpgsig"

KEY_TYPE = "ssh-ed25519"
BEGIN = "-----BEGIN SSH SIGNATURE-----"
END = "-----END SSH SIGNATURE-----"
_MAGIC = b"SSHSIG"
_VERSION = 1
_HASHES = {"sha512": hashlib.sha512, "sha256": hashlib.sha256}
_SIGN_HASH = "sha512"
_LINE = 70  # ssh-keygen wraps the base64 at 70 columns

_PRIVATE_BEGIN = b"-----BEGIN OPENSSH PRIVATE KEY-----"
_PRIVATE_END = b"-----END OPENSSH PRIVATE KEY-----"
_PRIVATE_MAGIC = b"openssh-key-v1\x00"

# draft-miller-ssh-agent message numbers
_AGENT_FAILURE = 5
_AGENTC_REQUEST_IDENTITIES = 11
_AGENT_IDENTITIES_ANSWER = 12
_AGENTC_SIGN_REQUEST = 13
_AGENT_SIGN_RESPONSE = 14
_AGENT_MAX_REPLY = 256 * 1024
_AGENT_TIMEOUT = 60.0  # an agent may ask its user to confirm (ssh-add -c)


# -- SSH wire format ----------------------------------------------------------------------------------


def _string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


class _Reader:
    """Reads SSH wire-format fields; a short or malformed buffer raises ``ValueError``."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError("truncated")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def uint32(self) -> int:
        return struct.unpack(">I", self.take(4))[0]

    def string(self) -> bytes:
        return self.take(self.uint32())

    def text(self) -> str:
        return self.string().decode("ascii")

    def end(self) -> None:
        if self.pos != len(self.data):
            raise ValueError("trailing data")


def _ed25519_blob(raw: bytes) -> bytes:
    return _string(KEY_TYPE.encode()) + _string(raw)


def _ed25519_raw(blob: bytes) -> bytes | None:
    """The 32-byte Ed25519 public key in an SSH public key blob, or ``None`` when it is not one."""
    try:
        r = _Reader(blob)
        if r.string() != KEY_TYPE.encode():
            return None
        raw = r.string()
        r.end()
    except ValueError:
        return None
    return raw if len(raw) == 32 else None


def _blob_type(blob: bytes) -> str:
    try:
        return _Reader(blob).text()
    except (ValueError, UnicodeDecodeError):
        return "?"


def key_line(blob: bytes) -> str:
    """The OpenSSH public key line (``"ssh-ed25519 AAAA..."``, no comment) of a public key blob."""
    return f"{_blob_type(blob)} {base64.b64encode(blob).decode()}"


def fingerprint(blob: bytes) -> str:
    """The key's fingerprint as ``ssh-keygen -l`` prints it: ``SHA256:`` and unpadded base64."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def parse_public_key(text: str) -> bytes:
    """The key blob of an OpenSSH public key line ``keytype base64 [comment]``.

    Raises ``InvalidInputError`` when it is not one (the blob's own type must be ``keytype``).
    """
    fields = text.split()
    blob = _key_fields(fields[0], fields[1]) if len(fields) >= 2 else None
    if blob is None:
        raise InvalidInputError(f"not an SSH public key: {text.strip()[:80]!r}")
    return blob


def _key_fields(kind: str, b64: str) -> bytes | None:
    """The blob of ``kind b64`` when b64 is base64 of a key blob of type ``kind``, else ``None``."""
    try:
        blob = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError):
        return None
    return blob if blob and _blob_type(blob) == kind else None


def _signed_data(data: bytes, namespace: str, hash_name: str) -> bytes:
    """What the key actually signs (PROTOCOL.sshsig): the preamble, namespace, reserved, hash
    algorithm and the hash of the message."""
    digest = _HASHES[hash_name](data).digest()
    return (_MAGIC + _string(namespace.encode()) + _string(b"") + _string(hash_name.encode())
            + _string(digest))


def _armor(blob: bytes) -> str:
    b64 = base64.b64encode(blob).decode()
    lines = [b64[i : i + _LINE] for i in range(0, len(b64), _LINE)]
    return "\n".join([BEGIN, *lines, END]) + "\n"


def _check_namespace(namespace: str) -> None:
    if not isinstance(namespace, str) or not namespace:
        raise InvalidInputError(f"a signature namespace must be a non-empty string, not {namespace!r}")


# -- signing ------------------------------------------------------------------------------------------


class Signer:
    """Makes SSH signatures with one Ed25519 key: a private key in process, or a key in ssh-agent.

    Build one with :func:`load_signer`. ``public_key_line`` is the key as an OpenSSH public key
    line (no comment), ``fingerprint`` is its ``SHA256:...`` fingerprint, ``source`` the file it
    was loaded from and ``agent`` the agent socket it signs through (``None``: in process).
    Safe to share between threads.
    """

    def __init__(self, public_key: bytes, sign_raw: Callable[[bytes], bytes], source: str,
                 agent: str | None = None):
        """``sign_raw`` signs bytes and returns the SSH signature blob (``string "ssh-ed25519"``,
        ``string signature``); most callers want :func:`load_signer` instead."""
        self.public_key = public_key
        self._sign_raw = sign_raw
        self.source = source
        self.agent = agent

    @property
    def public_key_line(self) -> str:
        return key_line(self.public_key)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public_key)

    def sign(self, data: bytes, namespace: str = NAMESPACE) -> str:
        """The armored signature of ``data`` in ``namespace``, as ``ssh-keygen -Y sign -n
        NAMESPACE`` writes it: ``-----BEGIN SSH SIGNATURE-----``, base64 wrapped at 70 columns,
        ``-----END SSH SIGNATURE-----`` and a newline. Hash ``sha512``."""
        _check_namespace(namespace)
        signature = self._sign_raw(_signed_data(data, namespace, _SIGN_HASH))
        blob = (_MAGIC + struct.pack(">I", _VERSION) + _string(self.public_key) + _string(namespace.encode())
                + _string(b"") + _string(_SIGN_HASH.encode()) + _string(signature))
        return _armor(blob)

    def __repr__(self) -> str:
        how = f"agent {self.agent}" if self.agent else "in process"
        return f"<Signer {self.fingerprint} from {self.source} ({how})>"


def load_signer(path: str | os.PathLike, passphrase: bytes | None = None) -> Signer:
    """A :class:`Signer` for the Ed25519 key at ``path``.

    ``path`` is an OpenSSH private key file (what ``ssh-keygen -t ed25519`` writes), or a public
    key file (``.pub``) whose key ssh-agent holds (``SSH_AUTH_SOCK``); then every signature is
    made by the agent. An encrypted private key is decrypted with ``passphrase``, else with
    ``$QVC_SIGNING_PASSPHRASE``; with neither, the agent signs if it holds the key. Decrypting
    needs the ``bcrypt`` package (as ``cryptography`` does for OpenSSH keys).

    Raises ``InvalidInputError`` naming the file when it cannot be read, is not an SSH key, is
    not Ed25519, is encrypted without a passphrase (or the passphrase is wrong), or names a
    public key that no reachable agent holds.
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise InvalidInputError(f"{name}: cannot read the signing key: {exc.strerror or exc}") from None
    if _PRIVATE_BEGIN in data:
        return _load_private(name, data, passphrase)
    blob = _public_key_in(data)
    if blob is None:
        raise InvalidInputError(f"{name}: not an OpenSSH private key nor a public key "
                                "(`ssh-keygen -t ed25519` writes both)")
    _require_ed25519(name, blob)
    return _agent_signer(name, blob)


def _require_ed25519(name: str, blob: bytes) -> None:
    if _ed25519_raw(blob) is None:
        raise InvalidInputError(f"{name}: the key is {_blob_type(blob)}, not Ed25519 ({KEY_TYPE}); "
                                "qvc signs with Ed25519 keys only (`ssh-keygen -t ed25519`)")


def _public_key_in(data: bytes) -> bytes | None:
    """The key blob of the first public key line in a ``.pub`` file's bytes, or ``None``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    for line in text.splitlines():
        fields = line.split()
        if fields and not fields[0].startswith("#"):
            return _key_fields(fields[0], fields[1]) if len(fields) >= 2 else None
    return None


def _load_private(name: str, data: bytes, passphrase: bytes | None) -> Signer:
    # The container (openssh-key-v1) keeps the public key and the cipher in the clear: read them
    # first, so a key of another type or an encrypted key is named without decrypting anything.
    try:
        start = data.index(_PRIVATE_BEGIN) + len(_PRIVATE_BEGIN)
        body = base64.b64decode(b"".join(data[start : data.index(_PRIVATE_END, start)].split()), validate=True)
        if not body.startswith(_PRIVATE_MAGIC):
            raise ValueError("bad magic")
        r = _Reader(body[len(_PRIVATE_MAGIC):])
        cipher, _kdf, _kdf_options, count = r.text(), r.text(), r.string(), r.uint32()
        if count != 1:
            raise ValueError(f"{count} keys")
        blob = r.string()
    except (ValueError, binascii.Error, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{name}: not a readable OpenSSH private key ({exc})") from None
    _require_ed25519(name, blob)
    if cipher != "none" and passphrase is None:
        env = os.environ.get(PASSPHRASE_ENV)
        passphrase = os.fsencode(env) if env else None
        if passphrase is None:
            if os.environ.get("SSH_AUTH_SOCK"):
                try:
                    return _agent_signer(name, blob)
                except InvalidInputError:
                    pass
            raise InvalidInputError(f"{name}: the key is encrypted: give its passphrase (or set "
                                    f"{PASSPHRASE_ENV}), or add it to ssh-agent (`ssh-add {name}`)")
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key

    try:
        key = load_ssh_private_key(data, passphrase if cipher != "none" else None)
    except UnsupportedAlgorithm as exc:
        raise InvalidInputError(f"{name}: cannot decrypt the key: {exc} (decrypting OpenSSH keys needs the "
                                "`bcrypt` package: pip install bcrypt; or add the key to ssh-agent)") from None
    except (ValueError, TypeError) as exc:
        why = "wrong passphrase, or the file is damaged" if cipher != "none" else str(exc)
        raise InvalidInputError(f"{name}: cannot load the private key: {why}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise InvalidInputError(f"{name}: not an Ed25519 private key")
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    if _ed25519_blob(key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)) != blob:
        raise InvalidInputError(f"{name}: the private key does not match the public key stored with it")
    kind = _string(KEY_TYPE.encode())
    return Signer(blob, lambda message: kind + _string(key.sign(message)), name)


# -- ssh-agent ----------------------------------------------------------------------------------------


def _agent_call(sock: str, request: bytes) -> tuple[int, bytes]:
    """Send one agent request (message type and contents) and return the reply's type and contents."""
    import socket

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(_AGENT_TIMEOUT)
        s.connect(sock)
        s.sendall(_string(request))
        size = struct.unpack(">I", _recv(s, 4))[0]
        if not 1 <= size <= _AGENT_MAX_REPLY:
            raise OSError(f"the agent sent a reply of {size} bytes")
        reply = _recv(s, size)
    return reply[0], reply[1:]


def _recv(s, n: int) -> bytes:
    parts, left = [], n
    while left:
        chunk = s.recv(left)
        if not chunk:
            raise OSError("the agent closed the connection")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def agent_keys(sock: str | None = None) -> list[tuple[bytes, str]]:
    """The keys ssh-agent holds, as ``(public key blob, comment)``; ``sock`` defaults to
    ``$SSH_AUTH_SOCK``. Raises ``InvalidInputError`` when no agent answers."""
    sock = sock or os.environ.get("SSH_AUTH_SOCK")
    if not sock:
        raise InvalidInputError("no ssh-agent: SSH_AUTH_SOCK is not set")
    try:
        kind, body = _agent_call(sock, bytes([_AGENTC_REQUEST_IDENTITIES]))
        if kind != _AGENT_IDENTITIES_ANSWER:
            raise OSError(f"the agent answered message {kind} to a request for its keys")
        r = _Reader(body)
        keys = []
        for _ in range(r.uint32()):
            blob = r.string()
            keys.append((blob, r.string().decode("utf-8", "replace")))
        return keys
    except (OSError, ValueError) as exc:
        raise InvalidInputError(f"ssh-agent at {sock}: {exc}") from None


def _agent_signer(name: str, blob: bytes) -> Signer:
    sock = os.environ.get("SSH_AUTH_SOCK")
    if not sock:
        raise InvalidInputError(f"{name} is a public key: signing with it needs ssh-agent holding the key, "
                                "and SSH_AUTH_SOCK is not set")
    if blob not in {b for b, _ in agent_keys(sock)}:
        raise InvalidInputError(f"{name}: ssh-agent at {sock} does not hold this key ({fingerprint(blob)}): "
                                "`ssh-add` its private key")

    def sign_raw(message: bytes) -> bytes:
        try:
            kind, body = _agent_call(sock, bytes([_AGENTC_SIGN_REQUEST]) + _string(blob) + _string(message)
                                     + struct.pack(">I", 0))
            if kind == _AGENT_FAILURE:
                raise OSError("the agent refused to sign (is the key still added? was confirmation denied?)")
            if kind != _AGENT_SIGN_RESPONSE:
                raise OSError(f"the agent answered message {kind} to a sign request")
            r = _Reader(body)
            signature = r.string()
            r.end()
            s = _Reader(signature)
            if s.text() != KEY_TYPE or len(s.string()) != 64:
                raise ValueError("the agent's signature is not an Ed25519 signature")
            s.end()
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise InvalidInputError(f"signing with {name} through ssh-agent at {sock}: {exc}") from None
        return signature

    return Signer(blob, sign_raw, name, agent=sock)


# -- commits ------------------------------------------------------------------------------------------


def split_signature(commit: bytes, header: bytes = SIGNATURE_HEADER) -> tuple[bytes, str | None]:
    """A commit object's signed payload and its armored signature (``None`` when unsigned).

    As git reads it: the payload is the commit without the ``header`` lines (``gpgsig`` and its
    continuation lines, which start with a space); the signature is their values, the leading
    space of each continuation line removed, each line ending in a newline. Only the header
    part is searched (the message may contain anything).
    """
    payload, signature = [], []
    pos, end, inside = 0, len(commit), False
    prefix = header + b" "
    while pos < end:
        nl = commit.find(b"\n", pos)
        nxt = end if nl < 0 else nl + 1
        line = commit[pos:nxt]
        if inside and line.startswith(b" "):
            signature.append(line[1:])
        elif line.startswith(prefix):
            signature.append(line[len(prefix):])
            inside = True
        else:
            if line == b"\n":  # the end of the headers: the message is payload as it is
                nxt = end
                line = commit[pos:]
            payload.append(line)
            inside = False
        pos = nxt
    if not signature:
        return commit, None
    return b"".join(payload), b"".join(signature).decode("utf-8", "surrogateescape")


def insert_signature(commit: bytes, armored: str, header: bytes = SIGNATURE_HEADER) -> bytes:
    """The commit object with ``armored`` in a ``header`` header after its last header line, as
    git writes it: the first line after ``gpgsig ``, each further line after a space.

    Raises ``InvalidInputError`` when the commit already has that header.
    """
    if split_signature(commit, header)[1] is not None:
        raise InvalidInputError(f"the commit already has a {header.decode()} header")
    text = armored.encode("utf-8", "surrogateescape")
    if not text.endswith(b"\n"):
        text += b"\n"
    lines = text.splitlines(keepends=True)
    value = header + b" " + lines[0] + b"".join(b" " + line for line in lines[1:])
    end = commit.find(b"\n\n")
    at = len(commit) if end < 0 else end + 1
    return commit[:at] + value + commit[at:]


def sign_commit(commit: bytes, signer: Signer) -> bytes:
    """The commit object signed by ``signer`` in namespace ``git``, as ``git commit -S`` with
    ``gpg.format=ssh`` writes it (see :func:`insert_signature`)."""
    return insert_signature(commit, signer.sign(commit, NAMESPACE))


def commit_time(commit: bytes) -> int | None:
    """The committer timestamp (epoch seconds) of a commit object, or ``None`` without one."""
    head = commit.split(b"\n\n", 1)[0]
    for line in head.split(b"\n"):
        if line.startswith(b"committer "):
            fields = line[line.rfind(b">") + 1 :].split()
            try:
                return int(fields[0])
            except (IndexError, ValueError):
                return None
    return None


# -- verifying ----------------------------------------------------------------------------------------


def _dearmor(armored: str) -> bytes:
    lines = [line.strip() for line in armored.strip().splitlines()]
    if len(lines) < 3 or lines[0] != BEGIN or lines[-1] != END:
        raise CorruptionError("not an armored SSH signature (no BEGIN/END SSH SIGNATURE lines)")
    try:
        return base64.b64decode("".join(lines[1:-1]), validate=True)
    except (binascii.Error, ValueError):
        raise CorruptionError("the SSH signature is not valid base64") from None


def verify(data: bytes, armored: str, namespace: str = NAMESPACE) -> str:
    """Check an armored SSH signature (PROTOCOL.sshsig) over ``data`` and return the signing
    key's public key line (``"ssh-ed25519 AAAA..."``); who may sign with that key is for
    :func:`allowed_principals` to say.

    Checks the magic, version 1, that the namespace is ``namespace``, that the hash is sha512 or
    sha256, and the Ed25519 signature. Raises ``CorruptionError`` when the signature is malformed
    or does not verify, ``InvalidInputError`` when it is by a key type qvc cannot check (not
    Ed25519, an SSH certificate).
    """
    _check_namespace(namespace)
    blob = _dearmor(armored)
    try:
        r = _Reader(blob)
        if r.take(len(_MAGIC)) != _MAGIC:
            raise CorruptionError("the SSH signature does not start with SSHSIG")
        version = r.uint32()
        if version != _VERSION:
            raise CorruptionError(f"SSH signature version {version} is not supported (only {_VERSION})")
        public_key, sig_namespace, _reserved = r.string(), r.string(), r.string()
        hash_name, signature = r.text(), r.string()
        r.end()
        s = _Reader(signature)
        sig_type, sig = s.text(), s.string()
        s.end()
    except (ValueError, UnicodeDecodeError):
        raise CorruptionError("the SSH signature is malformed (truncated or extra fields)") from None
    if sig_namespace != namespace.encode():
        raise CorruptionError(f"the signature is for namespace {sig_namespace.decode('utf-8', 'replace')!r}, "
                              f"not {namespace!r}")
    if hash_name not in _HASHES:
        raise CorruptionError(f"the signature's hash algorithm {hash_name!r} is not sha512 or sha256")
    raw = _ed25519_raw(public_key)
    if raw is None:
        raise InvalidInputError(f"the signature is by a {_blob_type(public_key)} key; qvc checks Ed25519 "
                                f"({KEY_TYPE}) signatures only")
    if sig_type != KEY_TYPE or len(sig) != 64:
        raise CorruptionError(f"the signature is of type {sig_type!r}, not an {KEY_TYPE} signature")
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(sig, _signed_data(data, namespace, hash_name))
    except InvalidSignature:
        raise CorruptionError(f"the signature by {fingerprint(public_key)} does not match the data") from None
    return key_line(public_key)


# -- allowed signers ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class AllowedSigner:
    """One line of an allowed signers file (ssh-keygen(1), ALLOWED SIGNERS).

    ``principals`` are the line's comma-separated principal patterns; ``key`` is the public key
    blob (its type is ``key_type``). The options, ``None``/``False`` when absent:
    ``namespaces`` (a pattern list, e.g. ``"git"``), ``valid_after`` and ``valid_before``
    (timestamps as written: ``YYYYMMDD[Z]`` or ``YYYYMMDDHHMM[SS][Z]``, local time unless
    suffixed ``Z``), ``cert_authority``. ``comment`` is what follows the key.
    """

    principals: tuple[str, ...]
    key_type: str
    key: bytes
    namespaces: str | None = None
    valid_after: str | None = None
    valid_before: str | None = None
    cert_authority: bool = False
    comment: str = ""

    def __post_init__(self) -> None:
        if not self.principals or any(not p or "," in p or "\n" in p for p in self.principals):
            raise InvalidInputError(f"allowed signer principals must be non-empty names without commas: "
                                    f"{self.principals!r}")
        if _blob_type(self.key) != self.key_type:
            raise InvalidInputError(f"the allowed signer's key is not a {self.key_type} key")
        for name in ("valid_after", "valid_before"):
            value = getattr(self, name)
            if value is not None:
                ssh_time(value)
        if self.namespaces is not None and (not self.namespaces or any(c in self.namespaces for c in ' "\n')):
            raise InvalidInputError(f"bad namespaces pattern list {self.namespaces!r}")

    @classmethod
    def for_key(cls, principals: str | Sequence[str], public_key: str | Signer, *,
                namespaces: str | None = NAMESPACE, valid_after: str | None = None,
                valid_before: str | None = None, comment: str = "") -> AllowedSigner:
        """The entry allowing ``principals`` to sign with ``public_key`` (a public key line, or a
        :class:`Signer`'s key), by default in namespace ``git`` only."""
        blob = public_key.public_key if isinstance(public_key, Signer) else parse_public_key(public_key)
        names = (principals,) if isinstance(principals, str) else tuple(principals)
        return cls(names, _blob_type(blob), blob, namespaces, valid_after, valid_before, False, comment)

    @property
    def public_key_line(self) -> str:
        return key_line(self.key)

    def valid_after_time(self) -> int | None:
        """``valid_after`` in epoch seconds (interpreted now, in the current time zone)."""
        return None if self.valid_after is None else ssh_time(self.valid_after)

    def valid_before_time(self) -> int | None:
        """``valid_before`` in epoch seconds (interpreted now, in the current time zone)."""
        return None if self.valid_before is None else ssh_time(self.valid_before)

    def line(self) -> str:
        """The entry as one allowed signers line (no newline), which :func:`parse_allowed_signers`
        reads back as an equal entry."""
        principals = ",".join(self.principals)
        if any(c.isspace() or c == '"' for c in principals):
            principals = '"' + principals.replace('"', '\\"') + '"'
        options = []
        if self.cert_authority:
            options.append("cert-authority")
        for name, value in (("namespaces", self.namespaces), ("valid-after", self.valid_after),
                            ("valid-before", self.valid_before)):
            if value is not None:
                options.append(f'{name}="{value}"')
        fields = [principals, *([",".join(options)] if options else []), self.key_type,
                  base64.b64encode(self.key).decode()]
        if self.comment:
            fields.append(" ".join(self.comment.split()))
        return " ".join(fields)


def ssh_time(text: str) -> int:
    """Epoch seconds of an allowed signers timestamp, as ssh-keygen reads it: ``YYYYMMDD``,
    ``YYYYMMDDHHMM`` or ``YYYYMMDDHHMMSS``, in UTC when suffixed ``Z`` (or ``UTC``), else in the
    current time zone as C's ``mktime`` with ``tm_isdst=0`` does (during summer time a local
    timestamp is read as standard time, an hour later, exactly as ssh-keygen reads it).
    Raises ``InvalidInputError`` for anything else, or a time before 1970."""
    s, utc = text, False
    if len(s) > 1 and s[-1] in "Zz":
        s, utc = s[:-1], True
    elif len(s) > 3 and s[-3:].upper() == "UTC":
        s, utc = s[:-3], True
    if len(s) not in (8, 12, 14) or not s.isascii() or not s.isdigit():
        raise InvalidInputError(f"bad timestamp {text!r}: not YYYYMMDD[Z] or YYYYMMDDHHMM[SS][Z]")
    parts = [int(s[0:4]), int(s[4:6]), int(s[6:8]), int(s[8:10] or 0), int(s[10:12] or 0), int(s[12:14] or 0)]
    year, month, day, hour, minute, second = parts
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour <= 23 and minute <= 59 and second <= 60):
        raise InvalidInputError(f"bad timestamp {text!r}: a field is out of range")
    import calendar

    try:
        when = (calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)) if utc
                else int(time.mktime((year, month, day, hour, minute, second, 0, 0, 0))))
    except (OverflowError, ValueError):
        when = -1
    if when < 0:
        raise InvalidInputError(f"bad timestamp {text!r}: before 1970")
    return when


def format_ssh_time(when: float) -> str:
    """An allowed signers timestamp for epoch seconds ``when``: ``YYYYMMDDHHMMSSZ`` (UTC)."""
    return time.strftime("%Y%m%d%H%M%SZ", time.gmtime(int(when)))


def _token(rest: str, what: str) -> tuple[str, str]:
    """The first whitespace-delimited token of ``rest`` (a ``"quoted"`` token has its quotes
    removed) and what follows it."""
    rest = rest.lstrip()
    if rest.startswith('"'):
        out, i = [], 1
        while i < len(rest) and rest[i] != '"':
            if rest[i] == "\\" and rest[i + 1 : i + 2] == '"':
                i += 1
            out.append(rest[i])
            i += 1
        if i >= len(rest):
            raise ValueError(f"unterminated quote in {what}")
        return "".join(out), rest[i + 1 :]
    m = re.match(r"\S+", rest)
    if not m:
        raise ValueError(f"missing {what}")
    return m.group(), rest[m.end() :]


_OPTION_NAME = re.compile(r"[A-Za-z-]+")
_OPTIONS = ("cert-authority", "namespaces", "valid-after", "valid-before")


def _options(rest: str) -> tuple[dict[str, str | bool], str]:
    """Parse the options field (``name`` or ``name="value"``, comma-separated, no unquoted
    spaces) at the start of ``rest``; return the options by lower-cased name and what follows."""
    options: dict[str, str | bool] = {}
    i, n = 0, len(rest)
    while True:
        m = _OPTION_NAME.match(rest, i)
        if not m:
            raise ValueError("bad options")
        name, i = m.group().lower(), m.end()
        value: str | bool = True
        if rest[i : i + 1] == "=":
            if rest[i + 1 : i + 2] != '"':
                raise ValueError(f"bad options: missing start quote for {name!r}")
            out, i = [], i + 2
            while i < n and rest[i] != '"':
                if rest[i] == "\\" and rest[i + 1 : i + 2] == '"':
                    i += 1
                out.append(rest[i])
                i += 1
            if i >= n:
                raise ValueError(f"bad options: missing end quote for {name!r}")
            value, i = "".join(out), i + 1
        if name not in _OPTIONS:
            raise ValueError(f"unknown option {name!r}")
        if (name == "cert-authority") != (value is True):
            raise ValueError(f"bad options: {name!r} " + ("takes no value" if value is not True else "needs a value"))
        if name in options:
            raise ValueError(f"bad options: multiple {name!r} clauses")
        options[name] = value
        if i < n and rest[i] == ",":
            i += 1
            continue
        if i < n and not rest[i].isspace():
            raise ValueError("bad options: spaces are allowed only within quotes")
        return options, rest[i:]


def _parse_line(line: str) -> AllowedSigner:
    principals, rest = _token(line, "principals")
    fields = rest.split(None, 2)
    blob = _key_fields(fields[0], fields[1]) if len(fields) >= 2 else None
    options: dict[str, str | bool] = {}
    if blob is None:  # not "keytype base64": options come first, unless this is a key qvc cannot read
        follows_key = len(fields) >= 3 and _key_fields(*fields[1:3]) is not None
        if not fields:
            raise ValueError("missing key")
        if not follows_key and "=" not in fields[0] and fields[0].lower() not in _OPTIONS:
            raise ValueError(f"cannot read the {fields[0]!r} key" if len(fields) >= 2 else "missing key")
        options, rest = _options(rest.lstrip())
        fields = rest.split(None, 2)
        if len(fields) < 2:
            raise ValueError("missing key")
        blob = _key_fields(fields[0], fields[1])
        if blob is None:
            raise ValueError(f"cannot read the {fields[0]!r} key")
    names = tuple(principals.split(","))
    if not all(names):
        raise ValueError(f"empty principal in {principals!r}")
    for name in ("valid-after", "valid-before"):
        if name in options:
            try:
                ssh_time(str(options[name]))
            except InvalidInputError as exc:
                raise ValueError(f"invalid {name!r} time: {exc}") from None
    if options.get("namespaces") == "":
        raise ValueError("empty namespaces")

    def text(name: str) -> str | None:
        value = options.get(name)
        return value if isinstance(value, str) else None

    return AllowedSigner(names, fields[0], blob, text("namespaces"), text("valid-after"), text("valid-before"),
                         "cert-authority" in options, fields[2].strip() if len(fields) > 2 else "")


def parse_allowed_signers(text: str, source: str = "<allowed signers>") -> list[AllowedSigner]:
    """The entries of an allowed signers file's text, in order. Blank lines and lines starting
    with ``#`` are skipped; any other line that is not ``principals [options] keytype base64
    [comment]`` raises ``InvalidInputError`` naming ``source`` and the line number."""
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            entries.append(_parse_line(line))
        except (ValueError, InvalidInputError) as exc:
            raise InvalidInputError(f"{source}:{number}: {exc}") from None
    return entries


def load_allowed_signers(path: str | os.PathLike) -> list[AllowedSigner]:
    """The entries of the allowed signers file at ``path`` (see :func:`parse_allowed_signers`);
    raises ``InvalidInputError`` naming the file when it cannot be read."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{name}: cannot read the allowed signers file: "
                                f"{getattr(exc, 'strerror', None) or exc}") from None
    return parse_allowed_signers(text, name)


def format_allowed_signers(entries: Iterable[AllowedSigner]) -> str:
    """An allowed signers file's text: each entry's :meth:`~AllowedSigner.line` and a newline."""
    return "".join(entry.line() + "\n" for entry in entries)


def _pattern_match(pattern: str, text: str) -> bool:
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, text, re.DOTALL) is not None


def match_pattern_list(text: str, patterns: str) -> bool:
    """Whether ``text`` matches the comma-separated pattern list (``*`` and ``?`` wildcards; a
    ``!pattern`` that matches excludes it), as ssh_config(5) PATTERNS describes."""
    matched = False
    for pattern in patterns.split(","):
        negated = pattern.startswith("!")
        if _pattern_match(pattern[1:] if negated else pattern, text):
            if negated:
                return False
            matched = True
    return matched


def _key_blob(public_key: str | bytes) -> bytes:
    return public_key if isinstance(public_key, bytes) else parse_public_key(public_key)


def _match(entries: Iterable[AllowedSigner], blob: bytes, when: int,
           namespace: str) -> tuple[list[str], list[str]]:
    """The principals allowed to sign with ``blob`` at ``when`` in ``namespace``, and why each
    other entry with that key did not allow it."""
    principals: list[str] = []
    refused: list[str] = []
    for entry in entries:
        if entry.key != blob:
            continue
        who = ",".join(entry.principals)
        if entry.cert_authority:
            refused.append(f"{who}: the key is a certificate authority (qvc does not check certificates)")
            continue
        if entry.namespaces is not None and not match_pattern_list(namespace, entry.namespaces):
            refused.append(f"{who}: not allowed in namespace {namespace!r} (namespaces={entry.namespaces!r})")
            continue
        after, before = entry.valid_after_time(), entry.valid_before_time()
        if after is not None and when < after:
            refused.append(f"{who}: key not yet valid at {format_ssh_time(when)} (valid-after={entry.valid_after})")
            continue
        if before is not None and when > before:
            refused.append(f"{who}: key expired at {format_ssh_time(when)} (valid-before={entry.valid_before})")
            continue
        principals += [p for p in entry.principals if not p.startswith("!") and p not in principals]
    return principals, refused


def allowed_principals(entries: Iterable[AllowedSigner], public_key: str | bytes, when: float | None = None,
                       namespace: str = NAMESPACE) -> list[str]:
    """The principals the entries allow to sign in ``namespace`` with ``public_key`` (a public
    key line or blob) at ``when`` (epoch seconds; ``None``: now), in file order, without
    duplicates; empty when none.

    An entry counts as ``ssh-keygen -Y find-principals`` decides: its key is the key, its
    ``namespaces`` (if any) match ``namespace``, and ``valid-after <= when <= valid-before``.
    ssh-keygen prints the principals of the first entry that counts only; this returns those of
    every entry that counts, so the first one is the principal git reports. ``cert-authority``
    entries never count (qvc does not check certificates). Negated (``!``) principal patterns
    are left out; others are returned as written.
    """
    at = int(time.time() if when is None else when)
    return _match(entries, _key_blob(public_key), at, namespace)[0]


# -- a commit's signature state -----------------------------------------------------------------------


class SignatureStatus(str, enum.Enum):
    """What :func:`check_commit` found."""

    #: a good signature by a key an allowed signer held at the commit's time
    VERIFIED = "verified"
    #: no signature
    UNSIGNED = "unsigned"
    #: a signature that is malformed or does not verify (the commit or signature was altered)
    BAD = "bad"
    #: a good signature by a key no allowed signer held at the commit's time (not listed,
    #: not yet valid, expired, not for this namespace), or one qvc cannot check (not Ed25519)
    UNKNOWN_KEY = "unknown-key"


@dataclass(frozen=True)
class SignatureState:
    """A commit's signature state: ``status``; ``principals`` who signed (when verified);
    ``public_key`` (line) and ``fingerprint`` of the signing key when the signature was read;
    ``reason``, one line for people when not verified."""

    status: SignatureStatus
    principals: tuple[str, ...] = ()
    public_key: str | None = None
    fingerprint: str | None = None
    reason: str = ""

    @property
    def verified(self) -> bool:
        return self.status is SignatureStatus.VERIFIED

    @property
    def principal(self) -> str | None:
        """The first principal, or ``None``."""
        return self.principals[0] if self.principals else None

    @property
    def letter(self) -> str:
        """The state as git's ``%G?`` spells it: ``G`` verified, ``N`` unsigned, ``B`` bad,
        ``U`` unknown key (what git shows for a good signature by a key not allowed)."""
        return _LETTERS[self.status]

    def __str__(self) -> str:
        if self.verified:
            return f"verified: {', '.join(self.principals)} ({self.fingerprint})"
        return f"{self.status.value}: {self.reason}" if self.reason else self.status.value


_LETTERS = {SignatureStatus.VERIFIED: "G", SignatureStatus.UNSIGNED: "N", SignatureStatus.BAD: "B",
            SignatureStatus.UNKNOWN_KEY: "U"}


def check_commit(commit: bytes, allowed: Iterable[AllowedSigner], namespace: str = NAMESPACE) -> SignatureState:
    """The signature state of a commit object (its bytes as git stores them, without the
    ``commit <size>`` object header), checked against the allowed signers at the commit's
    committer time, as ``git verify-commit`` with ``gpg.ssh.allowedSignersFile`` does.

    Never raises for a bad or foreign signature: that is the state's ``status``.
    """
    payload, armored = split_signature(commit)
    if armored is None:
        return SignatureState(SignatureStatus.UNSIGNED, reason="the commit has no signature")
    try:
        line = verify(payload, armored, namespace)
    except CorruptionError as exc:
        return SignatureState(SignatureStatus.BAD, reason=str(exc))
    except InvalidInputError as exc:
        return SignatureState(SignatureStatus.UNKNOWN_KEY, reason=str(exc))
    blob = parse_public_key(line)
    print_ = fingerprint(blob)
    when = commit_time(payload)
    if when is None:
        return SignatureState(SignatureStatus.BAD, public_key=line, fingerprint=print_,
                              reason="the commit has no committer time")
    principals, refused = _match(allowed, blob, when, namespace)
    if principals:
        return SignatureState(SignatureStatus.VERIFIED, tuple(principals), line, print_)
    why = "; ".join(refused) if refused else "the key is not in the allowed signers"
    return SignatureState(SignatureStatus.UNKNOWN_KEY, (), line, print_, f"good signature by {print_}, but {why}")
