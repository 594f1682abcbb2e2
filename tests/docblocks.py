"""The command blocks of README.md and docs/*.md: finding them with their doc-test markers, and
running them as tests/integration/test_doc_blocks.py does. Run as a script (``python
tests/docblocks.py submit ARGS``) it is what ``hpcbench submit`` means inside a dry-run block.

The convention, for writers, is in docs/contributing-docs.md. In short: the line right before
every fenced ``bash``, ``sh``, ``console`` or ``python`` block is one of

- ``<!-- doc-test: run -->``: run as written, as on a laptop (no batch system on PATH, so
  ``hpcbench submit`` uses the local scheduler), in the page's own directory;
- ``<!-- doc-test: dry-run -->``: for what needs a cluster: ``hpcbench submit ARGS`` renders the
  script (``hpcbench submit --dry-run ARGS``), then, where a SLURM controller answers, checks the
  request against the partition (hpcbench's preflight) and asks ``sbatch --test-only``;
  ``srun``, ``sbatch`` and ``salloc`` get ``--test-only``; everything else runs as written;
- ``<!-- doc-test: skip: REASON -->``: never run; the reason says why.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: fenced block languages that must carry a marker
CHECKED_LANGUAGES = frozenset({"bash", "sh", "shell", "console", "python", "py"})
SHELL_LANGUAGES = frozenset({"bash", "sh", "shell"})
MODES = ("run", "dry-run", "skip")
MARKER = re.compile(r"<!--\s*doc-test:\s*(?P<mode>[\w-]*)\s*(?::\s*(?P<reason>.*?))?\s*-->")
#: the commands a laptop does not have: hiding them makes hpcbench pick its local scheduler
BATCH_COMMANDS = frozenset(
    "sbatch srun salloc squeue scancel scontrol sinfo sacct sacctmgr sattach sbcast scrontab "
    "sdiag sprio sreport sshare sstat strigger "
    "qsub qstat qdel qacct qconf qhost qmod qalter qhold qrls qrsh qlogin qsh qmake qping "
    "qselect qsig tracejob pbsnodes "
    "bsub bjobs bkill blaunch bqueues bhosts bmod bpeek brequeue bresume bstop bacct".split()
)
#: the variables a job or a launcher sets: a block runs as if typed at a fresh prompt
JOB_VARIABLE_PREFIXES = (
    "SLURM_",
    "SBATCH_",
    "SRUN_",
    "PBS_",
    "SGE_",
    "LSB_",
    "LSF_",
    "OMPI_",
    "PMI_",
    "PMIX_",
    "HYDRA_",
    "HPCBENCH_",
    "MASTER_",
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "TORCHELASTIC_",
    "PET_",
)
UNCHECKED = "doc-test: unchecked:"


@dataclass(frozen=True)
class Block:
    """One fenced block of a page, with the marker on the line before it."""

    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    mode: str  # "run", "dry-run", "skip", or "" without a marker
    reason: str

    @property
    def where(self) -> str:
        return f"{relative(self.page)}:{self.line}"


def relative(path: Path) -> str:
    try:
        return path.resolve().relative_to(REPO).as_posix()
    except ValueError:
        return str(path)


def pages() -> list[Path]:
    """README.md and every page of docs/, in a stable order."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def read_blocks(page: Path) -> tuple[list[Block], list[str]]:
    """The fenced blocks of ``page`` in a checked language, each with its marker (mode "" when
    it has none), and the problems with markers: an unknown mode, a skip without a reason, a
    marker before a block that is never run, a marker that no block follows, an indented code
    block (which has no language, so a command in it would escape the markers)."""
    from markdown_it import MarkdownIt

    text = page.read_text(encoding="utf-8")
    lines = text.splitlines()
    tokens = MarkdownIt("commonmark").parse(text)
    fences = [t for t in tokens if t.type == "fence" and t.map]
    inside = {i for t in fences for i in range(t.map[0], t.map[1])}
    blocks: list[Block] = []
    problems = [
        f"{relative(page)}:{t.map[0] + 1}: an indented code block: write it as a fenced block "
        "with its language (```bash, ```text …), so a command in it gets a marker"
        for t in tokens
        if t.type == "code_block" and t.map
    ]
    used: set[int] = set()
    for token in fences:
        start = token.map[0]
        words = token.info.split()
        language = words[0].lower() if words else ""
        marker = MARKER.fullmatch(lines[start - 1].strip()) if start > 0 else None
        where = f"{relative(page)}:{start + 1}"
        if marker:
            used.add(start - 1)
        if language not in CHECKED_LANGUAGES:
            if marker:
                problems.append(
                    f"{where}: a doc-test marker before a ```{language} block, which is never run"
                )
            continue
        mode = marker["mode"] if marker else ""
        reason = (marker["reason"] or "").strip() if marker else ""
        if marker and mode not in MODES:
            problems.append(
                f"{where}: unknown doc-test mode {mode!r} (use one of {', '.join(MODES)})"
            )
        elif mode == "skip" and not reason:
            problems.append(
                f"{where}: 'doc-test: skip' needs a reason: <!-- doc-test: skip: why -->"
            )
        elif mode != "skip" and reason:
            problems.append(f"{where}: only 'doc-test: skip' takes a reason")
        elif mode == "dry-run" and language in ("python", "py"):
            problems.append(
                f"{where}: 'doc-test: dry-run' is for shell blocks; a Python block "
                "runs or is skipped"
            )
        blocks.append(Block(page, start + 1, language, token.content, mode, reason))
    for i, line in enumerate(lines):
        if i not in inside and i not in used and MARKER.fullmatch(line.strip()):
            problems.append(
                f"{relative(page)}:{i + 1}: a doc-test marker must stand alone on "
                "the line right before a fenced block"
            )
    return blocks, problems


def console_parts(code: str) -> tuple[str, str]:
    """(the commands, the expected output) of a console block: commands are the lines that
    start with ``$ `` (and the lines a trailing backslash continues), the rest is output."""
    commands, output = [], []
    continued = False
    for line in code.splitlines():
        if continued or line.startswith("$ "):
            commands.append(line if continued else line[2:])
            continued = line.rstrip().endswith("\\")
        else:
            output.append(line)
    return "\n".join(commands) + "\n", "\n".join(output)


def output_matches(expected: str, actual: str) -> bool:
    """Whether ``actual`` is ``expected``, where ``...`` stands for any text (several lines
    too) and runs of blanks compare equal, as doctest's ELLIPSIS and NORMALIZE_WHITESPACE do."""

    def lines(text: str) -> list[str]:
        return [" ".join(line.split()) for line in text.strip().splitlines()]

    pattern = "\n".join(
        ".*?".join(re.escape(part) for part in line.split("...")) for line in lines(expected)
    )
    return re.fullmatch(pattern, "\n".join(lines(actual)), re.DOTALL) is not None


DRY_RUN_PREAMBLE = r"""
hpcbench() {  # doc-test dry run: render and check, never submit
  if [ "${1-}" = submit ]; then shift; "$DOCTEST_PYTHON" "$DOCTEST_HELPER" submit "$@"
  else command hpcbench "$@"; fi
}
doctest_test_only() {  # srun, sbatch, salloc: the scheduler's own dry run
  local tool=$1; shift
  if [ "${DOCTEST_SLURM:-0}" = 1 ]; then command "$tool" --test-only "$@"
  else echo "doc-test: unchecked: $tool --test-only $* (no SLURM controller answers here)" >&2; fi
}
srun() { doctest_test_only srun "$@"; }
sbatch() { doctest_test_only sbatch "$@"; }
salloc() { doctest_test_only salloc "$@"; }
"""


def script_for(block: Block) -> tuple[str, str]:
    """(the interpreter, the source to give it as a file) of a shell, console or Python block;
    dry-run shell blocks get the functions above first."""
    if block.language in ("python", "py"):
        return sys.executable, block.code
    code = console_parts(block.code)[0] if block.language == "console" else block.code
    preamble = DRY_RUN_PREAMBLE if block.mode == "dry-run" else ""
    return "bash", f"set -euo pipefail\n{preamble}\n{code}"


def slurm_answers() -> bool:
    """Whether a SLURM controller answers here (``scontrol ping``)."""
    if shutil.which("scontrol") is None:
        return False
    try:
        ping = subprocess.run(
            ["scontrol", "ping"],
            capture_output=True,
            text=True,
            timeout=20,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return ping.returncode == 0 and "UP" in ping.stdout


def laptop_path(bindir: Path) -> str:
    """A PATH with the venv's programs first and every other program of this PATH linked into
    ``bindir``, except a batch system's: what a laptop has, so hpcbench uses its local
    scheduler."""
    bindir.mkdir(parents=True, exist_ok=True)
    venv_bin = Path(sys.executable).parent
    seen: set[str] = set()
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not directory or Path(directory) == venv_bin:
            continue
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            if name in seen or name in BATCH_COMMANDS:
                continue
            try:
                if not entry.is_file() or not os.access(entry.path, os.X_OK):
                    continue
            except OSError:
                continue
            seen.add(name)
            (bindir / name).symlink_to(entry.path)
    return f"{venv_bin}{os.pathsep}{bindir}"


def block_environment(mode: str, base: dict[str, str], laptop: str, **extra: str) -> dict:
    """The environment a block runs in: this one without any job's or launcher's variables,
    the laptop PATH for run blocks, this machine's PATH (venv first) for dry-run blocks."""
    env = {k: v for k, v in base.items() if not k.startswith(JOB_VARIABLE_PREFIXES)}
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = laptop if mode == "run" else f"{venv_bin}{os.pathsep}{base.get('PATH', '')}"
    env["DOCTEST_PYTHON"] = sys.executable
    env["DOCTEST_HELPER"] = str(Path(__file__).resolve())
    env.update(extra)
    return env


# --- the stand-in for `hpcbench submit` in dry-run blocks ------------------------------------


def _spec_from(argv: list[str]):
    """The job spec ``hpcbench submit ARGV`` would submit, read as the CLI reads it."""
    from hpcbench.cli import build_parser
    from hpcbench.cli.options import overrides_from
    from hpcbench.jobs.spec_load import load_spec

    own, program = (
        (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    )
    args = build_parser().parse_args(["submit", *own])
    return load_spec(args.spec, overrides_from(args, program))


def dry_submit(argv: list[str]) -> int:
    """``hpcbench submit ARGV`` without submitting: the script from ``--dry-run``, then, for
    SLURM, hpcbench's preflight against the partition and ``sbatch --test-only``."""
    cmd = ["hpcbench", "submit", "--dry-run", *argv]
    print(f"doc-test: {shlex.join(cmd)}", flush=True)
    rendered = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    sys.stderr.write(rendered.stderr)
    if rendered.returncode != 0:
        sys.stdout.write(rendered.stdout)
        return rendered.returncode
    script = rendered.stdout
    found = re.search(r"^hpcbench: scheduler (\S+) ", rendered.stderr, re.MULTILINE)
    scheduler = found.group(1) if found else "?"
    print(f"doc-test: a {scheduler} script of {len(script.splitlines())} lines, not submitted")
    if scheduler == "local":
        print(
            f"{UNCHECKED} no batch system here: the script was rendered for the local "
            "scheduler, not for a cluster",
            file=sys.stderr,
        )
        return 0
    if scheduler != "slurm":  # hpcbench's preflight reads SLURM partitions only
        return 0
    if not slurm_answers():
        print(
            f"{UNCHECKED} no SLURM controller answers: neither preflight nor "
            "sbatch --test-only ran",
            file=sys.stderr,
        )
        return 0
    from hpcbench.jobs import schedulers

    try:
        schedulers.get("slurm").preflight(_spec_from(argv))
    except schedulers.SchedulerError as err:
        print(f"hpcbench: error: {err}", file=sys.stderr)
        return 1
    print("doc-test: preflight: the partition can run it")
    with tempfile.NamedTemporaryFile("w", suffix=".sbatch", delete=False) as f:
        f.write(script)
    try:
        test = subprocess.run(
            ["sbatch", "--test-only", f"--chdir={os.getcwd()}", f.name],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
    finally:
        os.unlink(f.name)
    print(f"doc-test: sbatch --test-only: {(test.stderr or test.stdout).strip()}")
    return test.returncode


def main(argv: list[str]) -> int:
    if argv[:1] == ["submit"]:
        return dry_submit(argv[1:])
    print("usage: python tests/docblocks.py submit [hpcbench submit arguments]", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
