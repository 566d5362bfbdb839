"""``qvc tag``: lightweight tags (``refs/tags/<name>``) on checkpoints, as ``git tag`` makes them."""

from __future__ import annotations

import fnmatch

import click

from qvc.cli.app import cli, complete_names, revision, session
from qvc.cli.output import emit_json, out, page, short
from qvc.errors import CorruptionError, UnknownCheckpointError


@cli.command()
@click.argument("args", nargs=-1, shell_complete=complete_names)
@click.option("-l", "--list", "listing", is_flag=True, help="List tags (those matching the PATTERNs given).")
@click.option("-d", "--delete", "delete", is_flag=True, help="Delete the tags named.")
@click.option("-f", "--force", is_flag=True, help="Move an existing tag instead of refusing.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def tag(args: tuple[str, ...], listing: bool, delete: bool, force: bool, as_json: bool) -> None:
    """Create, list or delete tags: names for checkpoints that stay where they are put.

    \b
    qvc tag                         list tags
    qvc tag -l [PATTERN...]         list tags matching a glob (`qvc tag -l 'v1.*'`)
    qvc tag NAME [CHECKPOINT]       tag a checkpoint (default HEAD); refuses an existing
                                    NAME unless -f
    qvc tag -d NAME...              delete tags (the checkpoints stay)

    A tag is a lightweight git tag (`refs/tags/NAME`): `qvc show NAME`, `qvc diff NAME HEAD`
    and plain git read it; a thread of the same name wins. qvc's push and fetch do not carry
    tags (`git push REMOTE 'refs/tags/*'` does).

    \b
    Example:
      qvc tag good-plan run-7~2 && qvc show good-plan
    """
    if sum((listing, delete)) > 1:
        raise click.UsageError("choose one of -l and -d")
    if delete:
        if not args:
            raise click.UsageError("name the tag(s) to delete")
        store = session().store(write=True)
        missing = [name for name in args if store.tag(name) is None]
        if missing:  # nothing is deleted unless every tag named exists
            raise UnknownCheckpointError(f"tag {missing[0]!r} not found")
        for name in args:
            was = store.delete_tag(name)
            out(f"Deleted tag {name!r} (was {was[:7]})")
        return
    if listing or not args:
        store = session().store()
        rows = [(name, tip) for name, tip in store.tags()
                if not args or any(fnmatch.fnmatchcase(name, pattern) for pattern in args)]
        if as_json:
            emit_json([{"tag": name, "commit": tip, "id": _checkpoint_id(store, tip)} for name, tip in rows])
        else:
            page([name for name, _ in rows])
        return
    if len(args) > 2:
        raise click.UsageError("usage: qvc tag NAME [CHECKPOINT]")
    store = session().store(write=True)
    rev = revision(store, args[1] if len(args) == 2 else None)
    was = store.set_tag(args[0], rev.commit, force=force)
    cid = store.commit_info(rev.commit).checkpoint_id
    if as_json:
        emit_json({"tag": args[0], "commit": rev.commit, "id": cid, "was": was})
    elif was is not None and was != rev.commit:
        old = _checkpoint_id(store, was)  # both checkpoint ids, labelled (a tag plain git made: its commit)
        out(f"Updated tag {args[0]!r} to checkpoint {short(cid)} "
            f"(was {f'checkpoint {short(old)}' if old is not None else f'commit {was[:7]}'})")
    else:
        out(f"Tagged checkpoint {short(cid)} as {args[0]!r}")


def _checkpoint_id(store, commit: str) -> str | None:
    """The checkpoint id of a tagged commit, ``None`` when it does not read (a tag plain git made)."""
    try:
        return store.commit_info(commit).checkpoint_id
    except CorruptionError:
        return None
