"""``qvc verify`` and ``qvc signers``: signed history (docs/signing.md)."""

from __future__ import annotations

import click

from qvc.cli.app import EXIT_SIGNATURE, cli, complete_names, session
from qvc.cli.output import emit_json, out, page
from qvc.errors import InvalidInputError


@cli.command()
@click.argument("threads", nargs=-1, shell_complete=complete_names)
@click.option("--all", "all_refs", is_flag=True, help="Every ref of the repository (the default without THREADs).")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def verify(threads: tuple[str, ...], all_refs: bool, as_json: bool) -> None:
    """Check that history is what its signers wrote.

    Every commit reachable from the THREADs (their heads and superseded lines) or from every ref
    (--all, the default) must hash to its id, hold objects that do, and carry a good signature
    by a key the allowed signers (`qvc signers`) held at its time. Plain git agrees:
    `git -c gpg.ssh.allowedSignersFile=REPO/qvc/allowed_signers verify-commit SHA`.

    Prints one line per commit that does not verify (thread, checkpoint, commit, why) and exits
    with status 7 if there is any; nothing is changed.

    \b
    Example:
      qvc verify --all
      qvc verify run-7 --json
    """
    from qvc.readers.verify import verify as check  # deferred: start-up speed

    if threads and all_refs:
        raise click.UsageError("name THREADs or give --all, not both")
    report = check(session().store(), threads)
    if as_json:
        emit_json(report.to_json())
    else:
        for problem in report.problems:
            out(str(problem))
        who = ", ".join(f"{name} ({count})" for name, count in sorted(report.signed_by.items()))
        out(f"checked {report.commits} commit(s) on {report.refs} ref(s), {report.objects} object(s): "
            + (f"{len(report.problems)} problem(s)" if report.problems else "all verified")
            + (f"; signed by {who}" if who else ""))
    if report.problems:
        raise SystemExit(EXIT_SIGNATURE)


@cli.group()
def signers() -> None:
    """Who may sign this repository's checkpoints (its allowed signers file).

    The file is REPO/qvc/allowed_signers in ssh-keygen's format, read by `qvc verify` and by
    plain git (gpg.ssh.allowedSignersFile). Removing a signer ends their key's validity now:
    what they signed before still verifies.

    \b
    Example:
      qvc signers add alice ~/.ssh/qvc_ed25519.pub && qvc verify
    """


@signers.command("add")
@click.argument("principal")
@click.argument("public_key_file", type=click.Path(dir_okay=False))
@click.option("--valid-after", metavar="TIME", help="Valid from TIME (YYYYMMDD[HHMM[SS]], local; suffix Z for UTC).")
@click.option("--valid-before", metavar="TIME", help="Valid until TIME (same format).")
def signers_add(principal: str, public_key_file: str, valid_after: str | None, valid_before: str | None) -> None:
    """Allow PRINCIPAL to sign with the key in PUBLIC_KEY_FILE (an OpenSSH .pub file, Ed25519)."""
    from qvc.store.signers import Signers, describe  # deferred: start-up speed

    try:
        with open(public_key_file, encoding="utf-8") as f:
            text = f.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{public_key_file}: cannot read the public key: "
                                f"{getattr(exc, 'strerror', None) or exc}") from None
    if text.startswith("-----BEGIN"):
        raise InvalidInputError(f"{public_key_file} is a private key: give its .pub file")
    entry = Signers(session().store().path).add(principal, text, valid_after=valid_after, valid_before=valid_before)
    out(f"Added {principal} ({describe(entry)['fingerprint']})")


@signers.command("remove")
@click.argument("principal")
def signers_remove(principal: str) -> None:
    """End PRINCIPAL's right to sign, now; what they signed before stays verified."""
    from qvc.store.signers import Signers  # deferred: start-up speed

    count = Signers(session().store().path).remove(principal)
    out(f"Removed {principal}: {count} key(s) valid until now")


@signers.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def signers_list(as_json: bool) -> None:
    """List the allowed signers: principals, key fingerprint, validity."""
    from qvc.store.signers import Signers, describe  # deferred: start-up speed

    rows = [describe(entry) for entry in Signers(session().store().path).entries()]
    if as_json:
        emit_json(rows)
        return
    cells = []
    for row in rows:
        span = " ".join(x for x in (f"from {row['valid_after']}" if row["valid_after"] else "",
                                    f"until {row['valid_before']}" if row["valid_before"] else "") if x)
        cells.append((",".join(row["principals"]), row["fingerprint"],
                      (span or "always") + ("" if row["valid_now"] else " (not valid now)")))
    width = max((len(c[0]) for c in cells), default=0)
    lines = [f"{who:<{width}}  {key}  {span}" for who, key, span in cells]
    page(lines)

