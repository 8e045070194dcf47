"""The device plan across loans: which of tools/device_run.py's GPU steps are done, partial or pending,
where their results are and which commit ran them (results/device-plan/state.json, committed), and
which call of which loan the pending ones fit in.

  record OUT      what a loan brought back (OUT/summary.json, OUT/results.tar.gz) becomes
                  results/device-plan/loan-NN/ and the state is updated from its steps
  status          every step: its state, its estimate, the loan that did it
  schedule        the pending steps by loan and call, from their estimates (or the seconds a loan
                  measured for them), with the loan's limits below

A loan: at most LOAN_S seconds of device time with the machine's start included, one command at
most CALL_LIMIT_S; the plan's command stops itself after CALL_BUDGET_S. A second call on the same
machine keeps the build. Standard library only.

Usage: python -m tools.device_plan record OUT [--plan-dir results/device-plan]
       python -m tools.device_plan status|schedule [--plan-dir DIR] [--loans N]
Exit status 2 on bad input (no summary, a summary without the tree's stamp, an unknown step)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import pathlib
import sys

from tools import device_run

ROOT = pathlib.Path(__file__).resolve().parent.parent

PLAN_DIR = ROOT / "results" / "device-plan"
LOAN_S = 900  # a lent device's time, its start included
START_S = 180  # the machine's start ("a few minutes"), counted in the loan
CALL_LIMIT_S = 600  # the device tool's limit on one command
CALL_BUDGET_S = 530  # the plan's own budget for one command: stopped well inside the limit
CALL_OVERHEAD_S = 40  # a call's copy of the tree and return of $OUT, outside the plan's budget
# Setup seconds on the device (from the first H200 run's calls, the cold build unmeasured there: its
# first call's build failed, and 16 cores build the GPU plan's targets in minutes)
SETUP_S = {"unpack": 2, "environment": 10}
COLD_BUILD_S = 260  # configure and build on a fresh machine, 16 cores (an estimate)
WARM_BUILD_S = 10  # a later call on the same machine: ninja finds nothing to do


class PlanError(Exception):
    pass


@dataclasses.dataclass
class PlanStep:
    name: str
    priority: int
    estimate_s: float
    what: str
    needs_build: bool


def plan_steps() -> list[PlanStep]:
    """The GPU plan's measurement steps in its order (setup steps run in every call)."""
    settings = device_run.Settings(
        pathlib.Path("device-bundle"), ROOT / "build" / "release", "python3", 16, "ON", "90", []
    )
    return [
        PlanStep(s.name, s.priority, s.estimate_s, s.what, "build" in s.needs)
        for s in device_run.gpu_plan(settings)
        if s.name not in device_run.SETUP_STEPS
    ]


def load_state(plan_dir: pathlib.Path) -> dict:
    path = plan_dir / "state.json"
    if not path.exists():
        return {"steps": {}, "loans": []}
    try:
        state = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise PlanError(f"{path}: not JSON ({e})") from e
    if not isinstance(state.get("steps"), dict) or not isinstance(state.get("loans"), list):
        raise PlanError(f"{path}: needs 'steps' (an object) and 'loans' (a list)")
    return state


def save_state(plan_dir: pathlib.Path, state: dict) -> None:
    plan_dir.mkdir(parents=True, exist_ok=True)
    device_run.write_atomically(plan_dir / "state.json", json.dumps(state, indent=1, sort_keys=True) + "\n")


STATUS_OF_OUTCOME = {"ok": "done", "timed_out": "partial", "failed": "failed"}


def record(out: pathlib.Path, plan_dir: pathlib.Path) -> tuple[str, dict]:
    """OUT of one loan (its last call's summary names every step of the loan) as loan-NN/ under
    plan_dir, and the state updated: a step done stays done; a step cut by the budget is partial
    (what it finished is in the loan's device/ folder) and runs again; a step skipped is unchanged."""
    summary_path = out / "summary.json"
    if not summary_path.is_file() or not (out / "results.tar.gz").is_file():
        raise PlanError(f"{out}: no summary.json and results.tar.gz (the device run's OUT folder?)")
    summary = json.loads(summary_path.read_text())
    revision = summary.get("revision", "unknown")
    if revision in ("", "unknown"):
        raise PlanError(f"{summary_path}: the run names no revision (a bundle without its stamp: tools/device-bundle)")
    if summary.get("machine", {}).get("stand_in") and plan_dir.resolve() == PLAN_DIR.resolve():
        raise PlanError(f"{summary_path}: a rehearsal's stand-in run, not a GPU loan: not recorded in {PLAN_DIR}")
    known = {s.name for s in plan_steps()} | set(device_run.SETUP_STEPS)
    unknown = [s["step"] for s in summary.get("steps", []) if s["step"] not in known]
    if unknown:
        raise PlanError(f"{summary_path}: steps the plan does not have: {', '.join(unknown)}")
    state = load_state(plan_dir)
    loan = f"loan-{len(state['loans']) + 1:02d}"
    from tools import device_results

    device_results.unpack(out, plan_dir / loan, keep_dumps=False)
    for step in summary.get("steps", []):
        name = step["step"]
        status = STATUS_OF_OUTCOME.get(step["status"])
        if name in device_run.SETUP_STEPS or state["steps"].get(name, {}).get("status") == "done":
            continue
        if status is None:  # skipped: still pending, with the loan's reason
            previous = state["steps"].get(name, {"status": "pending"})
            state["steps"][name] = {**previous, "skipped_in": loan, "reason": step.get("reason", "")}
            continue
        state["steps"][name] = {
            "status": status,
            "loan": loan,
            "revision": revision,
            "results": str(
                (plan_dir / loan).relative_to(ROOT) if (plan_dir / loan).is_relative_to(ROOT) else plan_dir / loan
            ),
            **({"seconds": step["seconds"]} if "seconds" in step else {}),
            **({"reason": step["reason"]} if step.get("reason") else {}),
        }
    machine = summary.get("machine", {})
    state["loans"].append({
        "loan": loan,
        "revision": revision,
        "recorded": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "gpu": (machine.get("versions") or {}).get("gpu") or machine.get("nvidia_smi") or "?",
        "stand_in": bool(machine.get("stand_in")),
        "seconds": summary.get("elapsed_s"),
    })  # fmt: skip
    save_state(plan_dir, state)
    return loan, state


def seconds_of(step: PlanStep, state: dict) -> float:
    """What the step is expected to take: the seconds a loan measured for it where one ran it to
    its end or its cut (a cut's seconds are a floor), else its estimate."""
    measured = state["steps"].get(step.name, {}).get("seconds")
    return max(step.estimate_s, measured) if measured else step.estimate_s


def schedule(state: dict, loans: int = 4) -> dict[str, str]:
    """Each pending step's place: 'loan N call C', or why it fits no call. The runner's own rule:
    in the plan's order, a step starts when its seconds fit what is left of the call's budget;
    setup runs first in every call (the build cold in a loan's first call that needs it)."""
    second_call = LOAN_S - START_S - CALL_BUDGET_S - 2 * CALL_OVERHEAD_S
    calls = [CALL_BUDGET_S] + ([second_call] if second_call > 60 else [])
    pending = [s for s in plan_steps() if state["steps"].get(s.name, {}).get("status") != "done"]
    place: dict[str, str] = {}
    usable = CALL_BUDGET_S - device_run.PACK_RESERVE_S - sum(SETUP_S.values())
    for s in pending:
        build = COLD_BUILD_S if s.needs_build else 0
        if seconds_of(s, state) + build > usable:
            with_build = f" + {build} s build" if build else ""
            place[s.name] = f"no call: {seconds_of(s, state):.0f} s{with_build} > {usable:.0f} s"
    for loan in range(1, loans + 1):
        built = False
        for call, budget in enumerate(calls, start=1):
            built_in_call = False
            left = budget - device_run.PACK_RESERVE_S - sum(SETUP_S.values())
            for s in pending:
                if s.name in place:
                    continue
                cost = seconds_of(s, state)
                if s.needs_build and not built_in_call:
                    cost += WARM_BUILD_S if built else COLD_BUILD_S  # the machine keeps a build for the loan
                if cost <= left:
                    left -= cost
                    if s.needs_build:
                        built = built_in_call = True
                    place[s.name] = f"loan {loan} call {call}"
    for s in pending:
        place.setdefault(s.name, f"after {loans} loans")
    return place


def status_rows(state: dict) -> list[tuple[str, str, str, str]]:
    rows = []
    for s in plan_steps():
        entry = state["steps"].get(s.name, {})
        where = f"{entry.get('loan', '')} {entry.get('revision', '')}".strip()
        rows.append((s.name, entry.get("status", "pending"), f"{s.estimate_s:.0f}", where))
    return rows


def group_status(state: dict) -> dict[str, str]:
    """A task split into units (E's runs, A's devices) is done, partial or pending as a whole."""
    groups: dict[str, list[str]] = {}
    for s in plan_steps():
        groups.setdefault(s.name.split("/")[0].split("@")[0], []).append(
            state["steps"].get(s.name, {}).get("status", "pending")
        )
    return {
        g: "done" if all(x == "done" for x in xs) else "pending" if all(x == "pending" for x in xs) else "partial"
        for g, xs in groups.items()
    }


def rehearsal_table(state: dict) -> tuple[list[str], list[str]]:
    """The rehearsal's table (step, GPU estimate, seconds rehearsed here, the call of a loan it fits in
    on a fresh plan) and what is wrong: the steps that failed, or no step done at all."""
    place = schedule({"steps": {}, "loans": []}, loans=8)
    lines = [f"{'step':<24}{'est. s (GPU)':>13}{'rehearsed s (CPU)':>19}  {'loan/call (estimates)':<38}rehearsal"]
    wrong = []
    for s in plan_steps():
        entry = state["steps"].get(s.name, {})
        status = entry.get("status", "pending")
        rehearsed = f"{entry['seconds']:.1f}" if "seconds" in entry else "-"
        note = f"{status} in {entry.get('loan', '?')}" if status != "pending" else "pending"
        if entry.get("reason"):
            note += f": {entry['reason'][:70]}"
        if status == "failed":  # a step cut or left for later by the budget is the plan working
            wrong.append(s.name)
        lines.append(f"{s.name:<24}{s.estimate_s:>13.0f}{rehearsed:>19}  {place.get(s.name, '-'):<38}{note[:60]}")
    if not any(e.get("status") == "done" for e in state["steps"].values()):
        wrong.append("(no step done)")
    return lines, wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tools/device-plan", description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["record", "status", "schedule", "rehearsal-table"])
    parser.add_argument("out", nargs="?", type=pathlib.Path, help="record: the device run's OUT folder")
    parser.add_argument("--plan-dir", type=pathlib.Path, default=PLAN_DIR)
    parser.add_argument("--loans", type=int, default=4, help="schedule: loans to place the steps in")
    args = parser.parse_args(argv)
    try:
        if args.command == "record":
            if args.out is None:
                parser.error("record needs the device run's OUT folder")
            loan, state = record(args.out, args.plan_dir)
            print(f"device-plan: recorded {loan} in {args.plan_dir}")
        else:
            state = load_state(args.plan_dir)
    except PlanError as e:
        print(f"device-plan: error: {e}", file=sys.stderr)
        return 2
    if args.command == "rehearsal-table":
        lines, wrong = rehearsal_table(state)
        print("\n".join(lines))
        if wrong:
            print(f"device-plan: the rehearsal did not finish: {', '.join(wrong)}", file=sys.stderr)
            return 1
        return 0
    if args.command == "schedule":
        place = schedule(state, args.loans)
        for s in plan_steps():
            if s.name in place:
                print(f"{s.name:<24} ~{seconds_of(s, state):>4.0f} s  {place[s.name]}")
        return 0
    print(f"{'step':<24}{'state':<9}{'est. s':>7}  done in")
    for name, status, estimate, where in status_rows(state):
        print(f"{name:<24}{status:<9}{estimate:>7}  {where}")
    print("tasks: " + ", ".join(f"{g} {s}" for g, s in group_status(state).items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
