"""One kernel, the student's, carried from lab to lab.

Each lab from Lab 5 on opens with the student's own kernel of the previous lab, read from the saved notebook beside
this one (or nbgrader's one folder per assignment), checked quickly with the previous lab's own grader. Where it is
missing, still a stub, or fails that check, the course's kernel of that lab stands in, and one line says so and why.

The kernel that is graded is a three-way merge (:func:`merge`) of

* **base**: the course's kernel of the previous lab (its solution, as ``helpers/course/data/labs.json`` holds it);
* **yours**: the student's kernel of the previous lab (their region bodies and any other edit they made);
* **lab**: this lab's kernel as the notebook cell holds it (the course's change, with the student's regions of
  this lab).

The student's edits are kept wherever this lab leaves that code alone; where this lab rewrites code the student
had changed, the lab's version wins and the merge names those lines. The merge is line by line (``difflib``),
deterministic, and blind to whitespace when it compares lines.

A lab uses it through a :class:`Previous` (the previous notebook, its variable, the course's previous kernel, the
previous lab's check): :func:`your_previous_kernel`, then :func:`carried` for the source to grade and the diff to
show. From Lab 6 on, the previous lab's cell is itself carried: ``Previous.whole`` puts the student's whole kernel
of that lab together (their cell merged with their kernel of the lab before, and so on back to Lab 4) before it is
checked, so each lab builds on everything the student wrote since Lab 4.

Within one lab, a step can carry the step before it the same way (:func:`assemble`): its cell holds the course's
change and the new regions, and one ``// carried: ...`` line where a region of the previous step stands unchanged;
the student's code of that region is found in their previous kernel (between the lines the course's kernel has
around it) and put in its place, and their other edits of the previous kernel are merged in.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from difflib import SequenceMatcher
from pathlib import Path

__all__ = [
    "Conflict",
    "Merge",
    "Previous",
    "PreviousKernel",
    "Carried",
    "code_lines",
    "merge",
    "renames",
    "carry_names",
    "region_lines",
    "outside_regions",
    "your_previous_kernel",
    "carried",
    "CARRIED",
    "Assembled",
    "NotCarried",
    "assemble",
]

_MARKERS = ("### BEGIN SOLUTION", "### END SOLUTION")
_PLACEHOLDER = "// YOUR CODE HERE"


def code_lines(source: str) -> str:
    """A kernel as code: an instructor's solution markers and ``// HINT`` lines, and the ``// YOUR CODE HERE`` line
    the student's copy has at each region, left out (they are not code either side of a merge)."""
    from helpers.course.hints import parse_hint

    keep = [ln for ln in source.split("\n") if not any(m in ln for m in _MARKERS) and parse_hint(ln) is None
            and ln.strip() != _PLACEHOLDER]
    return "\n".join(keep).strip("\n") + "\n"


# ---------------------------------------------------------------------------------------------------------
# the merge
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Conflict:
    """Where the lab rewrote code the student had changed: the student's lines (1-based, in *yours*) and text, and
    the lab's lines that were used instead (1-based, in the merged text)."""

    yours_lines: tuple[int, int]  # first, last (last < first: the student's change was a deletion there)
    yours: tuple[str, ...]
    lab: tuple[str, ...]
    merged_lines: tuple[int, int]

    def describe(self) -> str:
        first, last = self.yours_lines
        where = (f"line {first}" if first == last else f"lines {first}–{last}") if last >= first else \
            f"the lines you removed before line {first}"
        shown = "; ".join(s.strip() for s in self.yours if s.strip())[:100]
        return f"{where} of your kernel ({shown or 'blank'}): this lab rewrites that code; its version is used"


@dataclass(frozen=True)
class Merge:
    """The merged text, the student's edits kept (as yours-line ranges), and the conflicts the lab won."""

    text: str
    kept: tuple[tuple[int, int], ...] = ()
    conflicts: tuple[Conflict, ...] = ()
    both: tuple[tuple[int, int], ...] = ()  # insertions at one place by both: the student's lines, kept first
    #: names the student renamed, carried into this lab's lines ((old, new)), and renames that could not be
    #: carried, in words (what to rename)
    renamed: tuple[tuple[str, str], ...] = ()
    unrenamed: tuple[str, ...] = ()
    #: the student's edits of the course's code outside the regions, in words
    outside: tuple[str, ...] = ()

    def report(self) -> list[str]:
        """One line per conflict (the lines of yours the lab replaced), per rename and per edit outside the regions,
        for the student."""
        return ([c.describe() for c in self.conflicts]
                + [f"you renamed {a} to {b} in your kernel: this lab's lines that name {a} use your {b}"
                   for a, b in self.renamed] + list(self.unrenamed) + list(self.outside))


def _key(line: str) -> str:
    return " ".join(line.split())


def _matches(base: list[str], other: list[str]) -> dict[int, int]:
    sm = SequenceMatcher(None, [_key(x) for x in base], [_key(x) for x in other], autojunk=False)
    out: dict[int, int] = {}
    for a, b, size in sm.get_matching_blocks():
        for k in range(size):
            out[a + k] = b + k
    return out


def _same(x: list[str], y: list[str]) -> bool:
    return [_key(s) for s in x] == [_key(s) for s in y]


def merge(base: str, yours: str, lab: str) -> Merge:
    """Three-way merge of kernel texts, line by line (the diff3 rule on ``difflib`` matches, lines compared with
    their whitespace collapsed). ``base``: the course's previous kernel; ``yours``: the student's previous kernel;
    ``lab``: this lab's kernel. In each stretch where the three differ:

    * only the student changed it → the student's lines;
    * only the lab changed it, or both the same way → the lab's lines;
    * both inserted lines at the same place (nothing of base between) → both, the student's first;
    * both changed it differently → the lab's lines, and a :class:`Conflict` naming the student's.

    Where no one changed a line, the student's copy of it is used (their whitespace), or the lab's where the student's
    is the course's exactly. Pure and deterministic; ``merge(base, base, lab).text == lab``.
    """
    b, y, lb = base.split("\n"), yours.split("\n"), lab.split("\n")
    my, ml = _matches(b, y), _matches(b, lb)
    both_matched = [i for i in range(len(b)) if i in my and i in ml]
    out: list[str] = []
    kept: list[tuple[int, int]] = []
    both: list[tuple[int, int]] = []
    conflicts: list[Conflict] = []
    i = jy = jl = 0
    nxt = 0  # index into both_matched

    def resolve(cb: list[str], cy: list[str], cl: list[str], y0: int) -> None:
        if _same(cy, cb):
            out.extend(cl)
        elif _same(cl, cb):
            if cy or cb:
                kept.append((y0 + 1, y0 + len(cy)))
            out.extend(cy)
        elif _same(cy, cl):
            out.extend(cl)
        elif not cb:
            both.append((y0 + 1, y0 + len(cy)))
            out.extend(cy)
            out.extend(cl)
        else:
            start = len(out)
            out.extend(cl)
            conflicts.append(Conflict((y0 + 1, y0 + len(cy)), tuple(cy), tuple(cl), (start + 1, len(out))))

    while True:
        k = 0
        while i + k < len(b) and my.get(i + k) == jy + k and ml.get(i + k) == jl + k:
            k += 1
        if k:
            for d in range(k):
                out.append(lb[jl + d] if y[jy + d] == b[i + d] else y[jy + d])
            i, jy, jl = i + k, jy + k, jl + k
            continue
        while nxt < len(both_matched) and both_matched[nxt] < i:
            nxt += 1
        if nxt == len(both_matched):
            if i < len(b) or jy < len(y) or jl < len(lb):
                resolve(b[i:], y[jy:], lb[jl:], jy)
            break
        o = both_matched[nxt]
        resolve(b[i:o], y[jy:my[o]], lb[jl:ml[o]], jy)
        i, jy, jl = o, my[o], ml[o]
    return Merge("\n".join(out), tuple(kept), tuple(conflicts), tuple(both))


# ---------------------------------------------------------------------------------------------------------
# the student's previous kernel
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Previous:
    """What a lab gives to carry the previous lab's kernel: the previous notebook and the variable its kernel cell
    assigns, the previous lab's name, the course's kernel of that lab (solution text), and that lab's check
    (``check(kernel)`` raises ``grading.CheckFailed``; it gets the kernel as the cell holds it)."""

    lab: str  # "Lab 4"
    notebook: str  # "lab4_pipeline.ipynb"
    variable: str  # "LAB4_KERNEL"
    course: Callable[[], str]  # the course's kernel of that lab
    check: Callable[[str], None]
    depends: str = ""  # what else the check's verdict depends on (the wrappers it compiles with): part of the memo
    #: the saved cell's text and the folder it was read from → the whole kernel that lab graded (code only), for a
    #: lab whose cell is itself carried (Lab 6 on: the cell is merged with the student's kernel of the lab before);
    #: None: the cell is the whole kernel
    whole: Callable[[str, Path | None], str] | None = None


@dataclass(frozen=True)
class PreviousKernel:
    """The previous lab's kernel this lab builds on: the text (code only), whether it is the student's, and the one
    line that says whose it is and why."""

    text: str
    yours: bool
    line: str
    why: str = ""  # why the course's stands in (empty when it is the student's)
    saved: str = ""  # the student's whole kernel as saved (code only), even when it does not stand


_CACHE: dict[tuple, PreviousKernel] = {}


@functools.lru_cache(maxsize=1)
def _course_code() -> str:
    """A digest of the course's code (every module and header under helpers/): a verdict kept on disk holds only for
    the code that reached it."""
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in (".py", ".cuh", ".json") and p.is_file()):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _kept(key: tuple) -> Path | None:
    """Where the verdict for ``key`` is kept across kernels (beside the compiled-kernel cache; none when that cache
    is off): a lab's opening re-checked the previous lab's kernel in every new kernel, 50-80 s under load."""
    from helpers import gpu
    from helpers.gpu import compiler

    folder = compiler.cache_dir()
    if folder is None:
        return None
    digest = hashlib.sha256(repr((key, _course_code(), gpu.hopper_available())).encode()).hexdigest()
    return folder / "verdicts" / f"{digest[:32]}.json"


def _load_verdict(key: tuple) -> PreviousKernel | None:
    path = _kept(key)
    try:
        return PreviousKernel(**json.loads(path.read_text())) if path is not None and path.exists() else None
    except (OSError, ValueError, TypeError):
        return None


def _keep_verdict(key: tuple, got: PreviousKernel) -> None:
    path = _kept(key)
    if path is None:
        return
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(got)))
        tmp.replace(path)


def _read(prev: Previous, here: Path) -> tuple[Path | None, str | None, str]:
    from helpers.course.checks._common import saved_variable

    return saved_variable(prev.notebook, prev.variable, here)


def your_previous_kernel(prev: Previous, *, here: Path | None = None, quiet: bool = False) -> PreviousKernel:
    """The student's kernel of ``prev.lab`` as they saved it (put together with the labs before it where that lab's
    cell is carried too), checked with that lab's check (its output kept quiet); the course's kernel of that lab where
    theirs is missing, a stub or fails the check. Prints the one line that says which (unless ``quiet``). The verdict
    is remembered for the same whole kernel."""
    here = Path.cwd() if here is None else here
    path, text, problem = _read(prev, here)
    unreadable = ""
    if text is not None and "#error" not in text and prev.whole is not None:
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                text = prev.whole(text, here)
        except Exception as exc:  # noqa: BLE001 - the course's stands in, said why
            why = str(exc) if isinstance(exc, NotCarried) else f"{type(exc).__name__}: {exc}"
            unreadable = f"{prev.lab}'s kernel could not be put together: {why}"
    key = (prev.lab, prev.notebook, str(path), hashlib.sha256((text or problem).encode()).hexdigest(),
           hashlib.sha256(prev.depends.encode()).hexdigest(), unreadable)
    if key not in _CACHE:
        got = _load_verdict(key)
        if got is None:
            got = _judge(prev, path, text, problem, unreadable)
            if "could not be checked" not in got.line:  # a check that could not run may run another time
                _keep_verdict(key, got)
        _CACHE[key] = got
    got = _CACHE[key]
    if not quiet:
        print(got.line)
    return got


def _judge(prev: Previous, path: Path | None, text: str | None, problem: str, unreadable: str) -> PreviousKernel:
    from helpers.course import grading

    course = code_lines(prev.course())
    stands = f"the course's {prev.lab} kernel stands in until it does"
    if text is None:
        why = problem
        return PreviousKernel(course, False, f"⚠ your {prev.lab} kernel was not found ({why}); the course's {prev.lab} "
                                             "kernel stands in until it is", why)
    if "#error" in text:
        why = f"{prev.variable} in {path.name if path else prev.notebook} is still a stub"
        return PreviousKernel(course, False, f"⚠ your {prev.lab} kernel is not written yet ({why}); {stands}", why,
                              code_lines(text))
    if unreadable:
        return PreviousKernel(course, False, f"⚠ your {prev.lab} kernel could not be read ({unreadable}); {stands}",
                              unreadable)
    from helpers.course import progress

    with contextlib.redirect_stdout(io.StringIO()), \
            progress.step(f"checking your {prev.lab} kernel with {prev.lab}'s check (this lab builds on it)",
                          slow=True):
        try:
            prev.check(text)
        except grading.CheckFailed as exc:
            why = (str(exc).strip().splitlines() or ["failed"])[0].strip().lstrip("✗❌ ")
            return PreviousKernel(course, False, f"⚠ your {prev.lab} kernel does not pass {prev.lab}'s check yet "
                                                 f"({why}); {stands}", why, code_lines(text))
        except Exception as exc:  # noqa: BLE001 - a check that could not run it: the course's stands in, said why
            why = f"{prev.lab}'s check could not run it: {type(exc).__name__}: {exc}"
            return PreviousKernel(course, False, f"⚠ your {prev.lab} kernel could not be checked ({why}); {stands}",
                                  why, code_lines(text))
    name = path.name if path else prev.notebook
    return PreviousKernel(code_lines(text), True, f"✓ your {prev.lab} kernel ({prev.variable} from {name}) passes "
                                                  f"{prev.lab}'s check: this lab builds on it", "", code_lines(text))


# ---------------------------------------------------------------------------------------------------------
# the kernel a lab grades
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Carried:
    """What a lab grades: the previous kernel it builds on (the student's or the course's), and its merge with this
    lab's cell; ``kernel`` is the merged kernel, code only."""

    previous: PreviousKernel
    merge: Merge
    prev_lab: str

    @property
    def kernel(self) -> str:
        return self.merge.text

    def whose(self, this_lab: str, part: str = "kernel") -> str:
        """In words, for a check's ✓ line: what the graded kernel is made of (``part``: what the previous lab's
        kernel gives it, e.g. "mainloop")."""
        if self.previous.yours:
            return f"your kernel (your {self.prev_lab} {part} + {this_lab}'s change + your {this_lab} regions)"
        return (f"the course's {self.prev_lab} kernel + {this_lab}'s change + your {this_lab} regions (the course's "
                f"{self.prev_lab} kernel stood in: {self.previous.why})")


def carried(prev: Previous, lab_source: str, *, here: Path | None = None, quiet: bool = False) -> Carried:
    """The kernel to grade: the previous lab's kernel (the student's, or the course's standing in) merged with this
    lab's cell ``lab_source`` on the course's previous kernel, with the names the student renamed carried into this
    lab's lines (:func:`carry_names`)."""
    previous = your_previous_kernel(prev, here=here, quiet=quiet)
    base = code_lines(prev.course())
    lab = code_lines(lab_source)
    made = carry_names(base, previous.text, lab, merge(base, previous.text, lab))
    if previous.yours:
        notes = outside_regions(base, previous.text, region_lines(base, _labs_through(prev.lab)), made)
        made = replace(made, outside=tuple(notes))
    return Carried(previous, made, prev.lab)


def _labs_through(lab: str) -> list[str]:
    """The kernel labs whose regions the student has written by the end of ``lab`` ("Lab 7" -> lab4 … lab7)."""
    try:
        last = int(lab.split()[-1])
    except ValueError:
        return []
    return [f"lab{k}" for k in range(4, last + 1)]


def region_lines(base: str, labs: list[str]) -> set[int]:
    """The lines of ``base`` (0-based) that are the student's to write: the regions of each lab of ``labs`` (its
    solved kernel's lines that its skeleton holds as a ``// ✎`` line), found in ``base`` where they stand unchanged."""
    from helpers.course.checks._common import _kernels
    from helpers.course.hints import decode

    kernels = _kernels()
    b = [_key(x) for x in base.split("\n")]
    out: set[int] = set()
    for key in labs:
        data = kernels.get(key)
        if not data or not data.get("solved"):
            continue
        solved = code_lines(decode(data["solved"])).split("\n")
        skeleton = [ln for ln in code_lines(data["source"]).split("\n") if _HOLE not in ln]
        fixed = set(_matches([_key(x) for x in solved], [_key(x) for x in skeleton]))  # solved lines the skeleton has
        mine = {i for i in range(len(solved)) if i not in fixed and solved[i].strip()}
        for i, j in _matches([_key(x) for x in solved], b).items():
            if i in mine:
                out.add(j)
    return out


def outside_regions(base: str, yours: str, regions: set[int], made: Merge) -> list[str]:
    """One line per edit of the student's previous kernel outside the regions (a line of the course's code they
    changed, removed or wrote between): where it is and whether it is kept or this lab rewrote it."""
    b, y = base.split("\n"), yours.split("\n")
    sm = SequenceMatcher(None, [_key(x) for x in b], [_key(x) for x in y], autojunk=False)
    lost = {c.yours_lines for c in made.conflicts}
    out = []
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag == "equal":
            continue
        if i1 == i2:  # lines inserted: inside a region where a region line is next to them
            if (i1 - 1) in regions or i1 in regions:
                continue
        elif all(i in regions for i in range(i1, i2)):
            continue
        if not any(x.strip() for x in b[i1:i2] + y[j1:j2]):
            continue  # blank lines only
        shown = "; ".join(x.strip() for x in y[j1:j2] if x.strip())[:80] or \
            "removed: " + "; ".join(x.strip() for x in b[i1:i2] if x.strip())[:70]
        where = f"line {j1 + 1}" if j2 - j1 <= 1 else f"lines {j1 + 1}–{j2}"
        fate = "this lab rewrites that code (its version is used)" if (j1 + 1, j2) in lost else "kept as you wrote it"
        out.append(f"{where} of your kernel ({shown}) changes the course's code outside the regions: {fate}")
    return out


_WORD = re.compile(r"[A-Za-z_]\w*")
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d\w*|\S")


def _code(line: str) -> str:
    return line.split("//", 1)[0]


def renames(base: str, yours: str) -> dict[str, str]:
    """The names the student renamed everywhere: ``{old: new}`` where each line of ``base`` the student changed is,
    token by token, the same line with ``new`` for ``old`` (and nothing else changed on it), ``old`` is left nowhere
    in their code, and ``new`` is no name of ``base``."""
    b, y = base.split("\n"), yours.split("\n")
    sm = SequenceMatcher(None, [_key(x) for x in b], [_key(x) for x in y], autojunk=False)
    found: dict[str, set[str]] = {}
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag != "replace" or i2 - i1 != j2 - j1:
            continue
        for bl, yl in zip(b[i1:i2], y[j1:j2], strict=True):
            tb, ty = _TOKEN.findall(_code(bl)), _TOKEN.findall(_code(yl))
            if len(tb) != len(ty):
                continue
            pairs = {(p, q) for p, q in zip(tb, ty, strict=True) if p != q}
            if pairs and all(_WORD.fullmatch(p) and _WORD.fullmatch(q) for p, q in pairs):
                for p, q in pairs:
                    found.setdefault(p, set()).add(q)
    left = {w for ln in y for w in _WORD.findall(_code(ln))}
    names = {w for ln in b for w in _WORD.findall(_code(ln))}
    return {old: next(iter(new)) for old, new in found.items()
            if len(new) == 1 and old not in left and next(iter(new)) not in names}


def carry_names(base: str, yours: str, lab: str, made: Merge) -> Merge:
    """``made`` (the merge of ``yours`` and ``lab`` on ``base``) with every name the student renamed (:func:`renames`)
    renamed in the merged code too, so this lab's lines use the student's names; where this lab's own new lines
    already use the student's new name for something else, the name is left and the report says plainly what to
    rename."""
    found = renames(base, yours)
    if not found:
        return made
    lab_names = {w for ln in lab.split("\n") for w in _WORD.findall(_code(ln))}
    text = made.text.split("\n")
    done: list[tuple[str, str]] = []
    refused: list[str] = []
    for old, new in sorted(found.items()):
        if not any(re.search(rf"\b{re.escape(old)}\b", _code(ln)) for ln in text):
            continue  # no line of the merge names it: nothing to carry
        if new in lab_names:
            refused.append(f"you renamed {old} to {new} in your kernel, and this lab's lines name both {old} and {new} "
                           f"(its own): rename {new} back to {old} in your kernel of the previous lab, or this lab's "
                           f"lines will not find {old}")
            continue
        pattern = re.compile(rf"\b{re.escape(old)}\b")
        text = [pattern.sub(new, _code(ln)) + ln[len(_code(ln)):] for ln in text]
        done.append((old, new))
    return replace(made, text="\n".join(text), renamed=tuple(done), unrenamed=tuple(refused))


# ---------------------------------------------------------------------------------------------------------
# one step of a lab carried into the next: its regions, the student's code, put where the next step's cell says
# ---------------------------------------------------------------------------------------------------------
#: the start of a line (after its indentation) that stands for the student's code of one region of the step before
CARRIED = "// carried:"
_HOLE = "// ✎"  # how a region of the course's kernel reads in its skeleton (labgen's collapsed form)


class NotCarried(ValueError):
    """The student's previous step could not be carried: a region still a stub, or not found in their kernel."""


@dataclass(frozen=True)
class Assembled:
    """A step's whole kernel (code only): each ``// carried`` line of its cell with the student's code of that region
    of the previous step (``regions``: (the carried line, their code)), their other edits merged in; ``report``:
    one line per edit of theirs that this step rewrote (its version used)."""

    text: str
    regions: tuple[tuple[str, str], ...] = ()
    report: tuple[str, ...] = ()


def _is_carried(line: str) -> bool:
    return line.strip().startswith(CARRIED)


def _holes(skeleton: str) -> list[str]:
    """The course's previous kernel as lines, each region one unique line (it matches nothing the student wrote)."""
    lines = code_lines(skeleton).split("\n")
    k = 0
    for i, line in enumerate(lines):
        if line.strip().startswith(_HOLE):
            lines[i] = f"\x00region {k}"
            k += 1
    return lines


def _between(base: list[str], other: list[str], at: int) -> tuple[int, int] | None:
    """The stretch of ``other`` that stands where ``base[at]`` (a hole) is: between the nearest lines of base either
    side of it that are matched in ``other`` with no other hole between; None when that is not clear."""
    found = _matches(base, other)
    before = next((i for i in range(at - 1, -1, -1) if i in found or base[i].startswith("\x00")), None)
    after = next((i for i in range(at + 1, len(base)) if i in found or base[i].startswith("\x00")), None)
    if before is None or after is None or before not in found or after not in found:
        return None
    if found[before] >= found[after]:
        return None
    return found[before] + 1, found[after]


def assemble(skeleton: str, yours: str, cell: str, *, step: str = "step 7") -> Assembled:
    """The whole kernel of a step whose ``cell`` carries regions of the previous ``step``: ``skeleton`` is the course's
    kernel of that step with each region one ``// ✎`` line, ``yours`` the student's kernel of it. Each region the
    cell marks with a ``// carried:`` line gets the student's code of that region, found between the lines the
    course's kernel has around it; the student's edits elsewhere in their kernel are merged in as :func:`merge` does.
    Raises :class:`NotCarried` (saying which region) where that code is still a stub or cannot be found."""
    base = _holes(skeleton)
    mine = code_lines(yours).split("\n")
    lab = code_lines(cell).split("\n")
    holes = [i for i, line in enumerate(base) if line.startswith("\x00")]
    # which region each carried line of the cell stands for: the hole between the same neighbours in the course's kernel
    marked: dict[int, str] = {}
    in_cell = _matches(base, lab)
    back = {v: k for k, v in in_cell.items()}
    for j, line in enumerate(lab):
        if not _is_carried(line):
            continue
        jb = next((x for x in range(j - 1, -1, -1) if x in back), None)
        ja = next((x for x in range(j + 1, len(lab)) if x in back), None)
        before = -1 if jb is None else back[jb]
        after = len(base) if ja is None else back[ja]
        inside = [h for h in holes if before < h < after and h not in marked]
        if len(inside) > 1:  # several regions between the same unchanged lines: the one as far from them as the line
            inside = [h for h in inside if (jb is not None and h - before == j - jb)
                      or (ja is not None and after - h == ja - j)][:1]
        if len(inside) != 1:
            raise NotCarried(f"could not tell which part of your {step} kernel the line '{line.strip()}' stands for "
                             "(the lines around it were changed): put the lines around it back as they were")
        marked[inside[0]] = line
    # the student's code of every region, found between the course's lines around it
    spans: dict[int, tuple[int, int]] = {}
    for h in holes:
        span = _between(base, mine, h)
        if span is None and h in marked:
            raise NotCarried(f"could not find {_what(marked[h])} in your {step} kernel: the lines around it differ "
                             f"from the course's kernel of {step}; put them back as they were")
        if span is not None:
            spans[h] = span
    taken = sorted(spans.values())
    if any(a[1] > b[0] for a, b in zip(taken, taken[1:], strict=False)):
        raise NotCarried(f"could not tell your {step} regions apart: put the lines between them back as they were")
    code: dict[int, list[str]] = {h: mine[a:b] for h, (a, b) in spans.items()}
    for h, line in marked.items():
        if any("#error" in x for x in code[h]) or not any(x.strip() for x in code[h]):
            raise NotCarried(f"{_what(line)} is not written yet in your {step} kernel: {step} must pass its check "
                             "first")
    # the student's kernel with each region one line again, then merged with this step's cell
    hole_line = {h: marked.get(h, base[h]) for h in holes}
    shaped: list[str] = []
    pos = 0
    for h, (a, b) in sorted(spans.items(), key=lambda x: x[1]):
        shaped.extend(mine[pos:a])
        shaped.append(hole_line[h])
        pos = b
    shaped.extend(mine[pos:])
    shaped_base = [hole_line.get(i, line) for i, line in enumerate(base)]
    merged = merge("\n".join(shaped_base), "\n".join(shaped), "\n".join(lab))
    out: list[str] = []
    by_line = {_key(line): code[h] for h, line in marked.items()}
    for line in merged.text.split("\n"):
        out.extend(by_line.get(_key(line), [line]) if _is_carried(line) else [line])
    report = tuple(f"your {step} code ({'; '.join(s.strip() for s in c.yours if s.strip())[:100] or 'blank'}): this "
                   "step rewrites it; its version is used" for c in merged.conflicts)
    return Assembled("\n".join(out).strip("\n") + "\n",
                     tuple((line, "\n".join(code[h])) for h, line in sorted(marked.items())), report)


def _what(line: str) -> str:
    """The words of a carried line: "your barrier initialisation"."""
    words = line.strip()[len(CARRIED):].strip()
    return words.split(", as ")[0] if words else "a region"
