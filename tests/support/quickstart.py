"""The README's quickstart ("Run it on your cluster") as steps a story can run.

`steps()` reads README.md's shell blocks between the quickstart markers, one command per line
(comments dropped), and says for each what the test world does with it:

- it **runs** the command as the README shows it, with the test world's rewrites, each named
  in REWRITES with its reason (the world is Kubernetes 1.20; no Service routes the API server to
  a reconciler running as a local process);
- or it **cannot run it here**, for the reason NOT_HERE gives, and the story does what that
  entry's `stand_in` names in its place.

A command in neither is refused (`UnknownCommand`), so the README cannot show a command no test
runs. Used by the quickstart story (tests/world_stories/runtime/test_quickstart.py) and by the
fast test that checks every command is known (tests/unit/test_readme_quickstart.py).
`python -m tests.support.quickstart route-webhook URL` is the filter the webhook rewrite puts
into the install pipeline.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.support.bundle import route_webhook
from tests.support.harness import REPO

BEGIN = "<!-- quickstart:"
END = "<!-- end of quickstart -->"
FENCE = re.compile(r"^```sh\n(.*?)^```", re.MULTILINE | re.DOTALL)

# What the story does where a command cannot run.
START_RECONCILER = "start the reconciler as its Deployment would, wait for its webhook"
NO_STAND_IN = ""


@dataclass(frozen=True)
class NotHere:
    """Commands (matched by `pattern`) the test world cannot run: why, and what stands in."""

    pattern: str
    why: str
    stand_in: str = NO_STAND_IN


NOT_HERE: tuple[NotHere, ...] = (
    NotHere(r"^pipx install \.$",
            "the story runs this checkout's kaiwu; tests/packaging installs the checkout's wheel "
            "into a fresh venv and runs it from another directory"),
    NotHere(r"^make image$",
            "tests/world_stories/runtime/test_image.py builds the image with podman and runs it"),
    NotHere(r"^(podman save|kind load|k3d image import) ",
            "no kind or k3d here, and no kubelet of the test world pulls or runs an image "
            "(issue 30)"),
    NotHere(r"^make push IMAGE=", "no registry is reachable from this machine (the image story "
            "pushes to an oci-archive: file)"),
    NotHere(r"^kubectl -n kaiwu-system rollout status deployment/kaiwu-reconciler --timeout=5m$",
            "no kubelet of the test world runs the reconciler's image (issue 30; the simulated "
            "kubelet calls any other image's container ready, so a rollout would pass with "
            "nothing running)", START_RECONCILER),
)


@dataclass(frozen=True)
class Rewrite:
    """One change the test world makes to a command the README shows, and why."""

    pattern: str
    replacement: str
    why: str


REWRITES: tuple[Rewrite, ...] = (
    # Only where the world runs a release before the bundle's default (the 1.20 tier; the 1.36
    # tier runs the command as written): `kube_version` is "" otherwise.
    Rewrite(r"^kaiwu (install|uninstall)\b", r"kaiwu \1 --kube-version {kube_version}",
            "the test world runs Kubernetes {kube_version}; the README says a release before "
            "1.28 must give --kube-version"),
    Rewrite(r"^(kaiwu install\b[^|]*)\| kubectl apply",
            r"\1| {python} -m tests.support.quickstart route-webhook {webhook_url} | kubectl apply",
            "no Service routes the API server to a reconciler running as a local process: the "
            "registration names the URL the reconciler serves, as it registered it"),
)


@dataclass(frozen=True)
class Step:
    """One command of the quickstart: as the README shows it, and what the story does."""

    shown: str
    not_here: NotHere | None

    def command(self, **values: str) -> str:
        """The command the story runs: the README's, rewritten for the test world."""
        assert self.not_here is None, f"{self.shown!r} does not run here"
        command = self.shown
        for rewrite in REWRITES:
            if "{kube_version}" in rewrite.replacement and not values.get("kube_version"):
                continue
            command = re.sub(rewrite.pattern, rewrite.replacement.format(**values), command)
        return command


class UnknownCommand(ValueError):
    """The README shows a command the quickstart story neither runs nor explains."""


def _shown_commands(readme: str, where: Path) -> list[str]:
    begin = readme.index(BEGIN)
    section = readme[begin:readme.index(END, begin)]
    others = [fence for fence in re.findall(r"^```(\S*)$", section, flags=re.MULTILINE)
              if fence not in ("sh", "")]
    if others:
        raise UnknownCommand(f"{where}: the quickstart has a ```{others[0]} block: write its "
                             f"commands in ```sh blocks, which the quickstart story runs")
    commands = []
    for block in FENCE.findall(section):
        for line in block.splitlines():
            command = re.sub(r"\s+#.*$", "", line).strip()
            if command and not command.startswith("#"):
                commands.append(command)
    return commands


def steps(readme_path: Path = REPO / "README.md") -> list[Step]:
    """Every command of the README's quickstart, in order, each known to run or not."""
    result = []
    for shown in _shown_commands(readme_path.read_text(encoding="utf-8"), readme_path):
        not_here = next((n for n in NOT_HERE if re.search(n.pattern, shown)), None)
        if not_here is None and not re.match(r"^(kaiwu|kubectl) ", shown):
            raise UnknownCommand(
                f"{readme_path}: the quickstart shows {shown!r}, which the quickstart story "
                f"neither runs (kaiwu and kubectl commands) nor lists in NOT_HERE with why "
                f"(tests/support/quickstart.py): add it there, or change the README")
        result.append(Step(shown, not_here))
    return result


def _route_webhook_filter(url: str) -> int:
    docs = [doc for doc in yaml.safe_load_all(sys.stdin) if doc]
    yaml.safe_dump_all([route_webhook(doc, url) for doc in docs], sys.stdout, sort_keys=False)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 2 or args[0] != "route-webhook":
        print("usage: python -m tests.support.quickstart route-webhook URL", file=sys.stderr)
        return 2
    return _route_webhook_filter(args[1])


if __name__ == "__main__":
    sys.exit(main())
