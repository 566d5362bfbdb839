"""``QvcArtifactService``: Google ADK's artifact service (``BaseArtifactService``) over a qvc repository.

An artifact file is a thread (:func:`.layout.artifact_thread`: the session's, or the user's for a
``user:`` name, as ADK scopes them); each saved version is one checkpoint holding ``part`` (the
``types.Part``, its bytes kept as bytes) with the version's number as its step and ADK's version
metadata (``custom_metadata``, ``mime_type``, ``create_time``) in the checkpoint's metadata.
Deleting a file deletes its thread (the data stays until ``qvc purge``).
"""

from __future__ import annotations

import asyncio
import copy
import os
import uuid
from typing import Any, Optional

from google.adk.artifacts import artifact_util
from google.adk.artifacts.base_artifact_service import ArtifactVersion, BaseArtifactService, ensure_part
from google.adk.errors.input_validation_error import InputValidationError
from google.genai import types

from qvc.errors import CheckpointConflictError, InvalidInputError
from qvc.integrations.google_adk import layout
from qvc.store.git_store import GitCheckpointStore
from qvc.types import Checkpoint, CheckpointConfig, DurabilityMode

_RETRIES = 50
_MAX_REFERENCE_DEPTH = 5  # references followed by load_artifact, as ADK's own services do


class QvcArtifactService(BaseArtifactService):
    """Versioned ADK artifacts in a qvc repository (see the module docstring).

    ``path`` is the repository (created if missing); ``store`` an open store to share instead
    (with a :class:`~.sessions.QvcSessionService`, say: ``QvcArtifactService(store=sessions.store)``).
    """

    def __init__(self, path: str | os.PathLike | None = None, *, store: Optional[GitCheckpointStore] = None,
                 durability: DurabilityMode | str = DurabilityMode.SYNC) -> None:
        if (path is None) == (store is None):
            raise InvalidInputError("QvcArtifactService: give a repository path or an open store, not both")
        self._owned = store is None
        self.store: GitCheckpointStore = store if store is not None else GitCheckpointStore(path, durability=durability)

    async def close(self) -> None:
        """Close the store if this service opened it (idempotent)."""
        if self._owned:
            await asyncio.to_thread(self.store.close)

    def _thread(self, app_name: str, user_id: str, filename: str, session_id: Optional[str]) -> str:
        artifact_util.validate_path_segment(app_name, "app_name")
        artifact_util.validate_path_segment(user_id, "user_id")
        if not filename.startswith("user:"):
            if session_id is None:
                raise InputValidationError("Session ID must be provided for session-scoped artifacts.")
            artifact_util.validate_path_segment(session_id, "session_id")
        return layout.artifact_thread(app_name, user_id, filename, session_id)

    async def save_artifact(self, *, app_name: str, user_id: str, filename: str,
                            artifact: types.Part | dict[str, Any], session_id: Optional[str] = None,
                            custom_metadata: Optional[dict[str, Any]] = None) -> int:
        """Store a new version of the file; returns its number (0 for the first)."""
        thread = self._thread(app_name, user_id, filename, session_id)
        part = ensure_part(artifact)
        if part.inline_data is not None:
            mime = part.inline_data.mime_type
        elif part.text is not None:
            mime = "text/plain"
        elif part.file_data is not None:
            mime = None if artifact_util.is_artifact_ref(part) else part.file_data.mime_type
            if artifact_util.is_artifact_ref(part):
                parsed = artifact_util.parse_artifact_uri(part.file_data.file_uri or "")
                if not parsed:
                    raise InputValidationError(f"Invalid artifact reference URI: {part.file_data.file_uri}")
                artifact_util.validate_artifact_reference_scope(app_name=app_name, user_id=user_id,
                                                                session_id=session_id, parsed_uri=parsed)
        else:
            raise InputValidationError("Not supported artifact type.")
        stored = part.model_dump(exclude_none=True)
        scope = None if filename.startswith("user:") else session_id

        def save() -> int:
            for _ in range(_RETRIES):
                head = self.store.head(thread)
                version = self.store.commit_info(head).step + 1 if head is not None else 0
                made = ArtifactVersion(version=version, mime_type=mime,  # its create_time: ADK's clock
                                       canonical_uri=artifact_util.get_artifact_uri(app_name, user_id, filename,
                                                                                    version, scope),
                                       custom_metadata=copy.deepcopy(custom_metadata or {}))
                meta = {"source": layout.SOURCE, **made.model_dump(mode="json")}
                cp = Checkpoint(id=uuid.uuid4().hex, thread_id=thread, step=version, state_data={"part": stored})
                try:
                    self.store.put(CheckpointConfig(thread), cp, meta, expected_head=head,
                                   header={layout.HEADER_KEY: "artifact"})
                    return version
                except CheckpointConflictError:
                    continue
            raise CheckpointConflictError(f"artifact {filename!r}: too many concurrent writers")

        return await asyncio.to_thread(save)

    def _versions(self, thread: str) -> list[str]:
        """Commit of each version, oldest first."""
        head = self.store.head(thread)
        if head is None:
            return []
        return [info.hex for info in self.store.first_parents(head)][::-1]

    def _version_commit(self, thread: str, version: Optional[int]) -> Optional[str]:
        commits = self._versions(thread)
        if not commits:
            return None
        if version is None:
            return commits[-1]
        return commits[version] if 0 <= version < len(commits) else None

    async def load_artifact(self, *, app_name: str, user_id: str, filename: str, session_id: Optional[str] = None,
                            version: Optional[int] = None) -> Optional[types.Part]:
        """The version (the newest for ``None``), or ``None``; references to other artifacts are followed."""
        depth = _MAX_REFERENCE_DEPTH
        while True:
            thread = self._thread(app_name, user_id, filename, session_id)
            commit = await asyncio.to_thread(self._version_commit, thread, version)
            if commit is None:
                return None
            part = types.Part.model_validate(await asyncio.to_thread(self.store.field_value, commit, "part"))
            if artifact_util.is_artifact_ref(part):
                parsed = artifact_util.resolve_artifact_reference(
                    file_uri=part.file_data.file_uri or "", app_name=app_name, user_id=user_id,
                    session_id=session_id, remaining_depth=depth)
                app_name, user_id, filename = parsed.app_name, parsed.user_id, parsed.filename
                session_id, version, depth = parsed.session_id, parsed.version, depth - 1
                continue
            if part == types.Part() or _is_tombstone(part):
                return None
            return part

    async def list_artifact_keys(self, *, app_name: str, user_id: str, session_id: Optional[str] = None) -> list[str]:
        """The session's file names and the user's (``user:``) ones, sorted."""
        artifact_util.validate_path_segment(app_name, "app_name")
        artifact_util.validate_path_segment(user_id, "user_id")
        if session_id is not None:
            artifact_util.validate_path_segment(session_id, "session_id")
        prefixes = layout.artifact_prefixes(app_name, user_id, session_id)
        threads = await asyncio.to_thread(self.store.threads)
        return sorted(layout.unpart(t[len(p):]) for t in threads for p in prefixes if t.startswith(p)
                      and "/" not in t[len(p):])

    async def delete_artifact(self, *, app_name: str, user_id: str, filename: str,
                              session_id: Optional[str] = None) -> None:
        """Delete every version of the file (no-op when unknown)."""
        thread = self._thread(app_name, user_id, filename, session_id)

        def delete() -> None:
            if self.store.head(thread) is not None:
                self.store.delete_thread(thread)

        await asyncio.to_thread(delete)

    async def list_versions(self, *, app_name: str, user_id: str, filename: str,
                            session_id: Optional[str] = None) -> list[int]:
        """``[0, 1, ...]``, one per saved version (``[]`` when none)."""
        thread = self._thread(app_name, user_id, filename, session_id)
        return list(range(len(await asyncio.to_thread(self._versions, thread))))

    def _version_info(self, commit: str) -> ArtifactVersion:
        meta = self.store.header(commit)[1]
        return ArtifactVersion(version=meta["version"], canonical_uri=meta["canonical_uri"],
                               custom_metadata=copy.deepcopy(meta.get("custom_metadata") or {}),
                               create_time=meta["create_time"], mime_type=meta.get("mime_type"))

    async def list_artifact_versions(self, *, app_name: str, user_id: str, filename: str,
                                     session_id: Optional[str] = None) -> list[ArtifactVersion]:
        """Each version's number, URI, metadata, time and MIME type, oldest first."""
        thread = self._thread(app_name, user_id, filename, session_id)
        return await asyncio.to_thread(lambda: [self._version_info(c) for c in self._versions(thread)])

    async def get_artifact_version(self, *, app_name: str, user_id: str, filename: str,
                                   session_id: Optional[str] = None,
                                   version: Optional[int] = None) -> Optional[ArtifactVersion]:
        """One version's :class:`ArtifactVersion` (the newest for ``None``), or ``None``."""
        thread = self._thread(app_name, user_id, filename, session_id)

        def one() -> Optional[ArtifactVersion]:
            commit = self._version_commit(thread, version)
            return None if commit is None else self._version_info(commit)

        return await asyncio.to_thread(one)


def _is_tombstone(part: types.Part) -> bool:
    """Whether ``part`` is the marker ADK's rewind saves for a file that did not exist before (an empty
    ``application/octet-stream`` blob, which every ADK artifact service loads as absent)."""
    data = part.inline_data
    return bool(part.text is None and part.file_data is None and data is not None
                and data.mime_type == "application/octet-stream" and not data.data)
