"""python -m fusebench judge MODULE:FACTORY [--dtype bf16] [--sets N] [--backend NAME] [--option NAME=VALUE]
                         [--seed S] [--loss MODULE:FUNCTION] [--explain] [--out DIR]

FACTORY (a function in MODULE, which is imported by name or from a .py path) returns (model,
sample): the model (an nn.Module or a callable) and its example inputs (a tensor, a tuple of
arguments, a dict of keyword arguments, fusebench.Inputs, or a sampler). The judgment is printed;
with --out DIR, DIR gets judgment.md, judgment.html and judgment.json. With --loss, FUNCTION(output,
sample) returns a scalar and the training step is judged: the loss and every gradient beside the outputs
(--explain then localises a gradient's difference in the backward, named by its forward node).

Exit status: 0 SUPPORTED, 1 CONTRADICTED, 3 INCONCLUSIVE, 2 bad input (the reason on stderr), 4 a
failure inside the model (it raised in its eager, compiled or float64 run) or inside the judge
(the traceback on stderr).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import os
import sys

EXIT_BAD_INPUT = 2
EXIT_FAILURE = 4  # the model or the judge failed: distinct from the verdicts (0, 1, 3) and bad input (2)


class BadInput(Exception):
    pass


def load_factory(spec: str):
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise BadInput(f"{spec!r}: expected MODULE:FACTORY (a module name or a .py file, and a function in it)")
    try:
        if module_name.endswith(".py") or os.sep in module_name:
            if not os.path.isfile(module_name):
                raise BadInput(f"{module_name}: no such file")
            loader_spec = importlib.util.spec_from_file_location(
                os.path.splitext(os.path.basename(module_name))[0], module_name
            )
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[loader_spec.name] = module
            loader_spec.loader.exec_module(module)
        else:
            sys.path.insert(0, os.getcwd())
            module = importlib.import_module(module_name)
    except BadInput:
        raise
    except Exception as error:
        raise BadInput(f"cannot import {module_name}: {type(error).__name__}: {error}") from None
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        raise BadInput(f"{module_name} has no callable {attr!r}")
    return factory


def _option(text: str) -> tuple[str, object]:
    name, sep, value = text.partition("=")
    if not sep:
        raise BadInput(f"--option {text!r}: expected NAME=VALUE (an Inductor option, e.g. cpp.simdlen=1)")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return name, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fusebench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command")
    j = sub.add_parser("judge", help="judge a model's compiled form against eager and fp64")
    j.add_argument("factory", help="MODULE:FACTORY returning (model, sample)")
    j.add_argument("--dtype", default=None, help="bf16, f16 or f32: judge the model and sample cast to it")
    j.add_argument("--sets", type=int, default=32, help="input sets (default 32)")
    j.add_argument("--backend", default="inductor", help="torch.compile backend (default inductor)")
    j.add_argument("--option", action="append", default=[], help="an Inductor option NAME=VALUE (repeatable)")
    j.add_argument("--seed", type=int, default=0, help="seed of the input sets (default 0)")
    j.add_argument("--speed-rounds", type=int, default=15, help="interleaved rounds for the speed (0: none)")
    j.add_argument(
        "--loss", default=None, help="MODULE:FUNCTION, FUNCTION(output, sample) a scalar: judge the training step"
    )
    j.add_argument("--explain", action="store_true", help="explain what differs (Inductor only)")
    j.add_argument("--budget", type=int, default=12, help="explain: switch sets compiled at most (default 12)")
    j.add_argument("--out", default=None, help="write judgment.md / .html / .json there")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return EXIT_BAD_INPUT if exit_.code else 0
    if args.command != "judge":
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT

    import traceback

    import fusebench
    from fusebench._explain import check_judgment_fits
    from fusebench._judge import JudgeError, ModelError

    try:
        options = dict(_option(o) for o in args.option) or None
        if options and args.backend != "inductor":
            raise BadInput(f"--option is Inductor's; --backend {args.backend} takes none")
        if args.explain and args.backend != "inductor":
            raise BadInput(
                f"--explain attributes Inductor's mechanisms; --backend {args.backend} has none to attribute"
            )
        factory = load_factory(args.factory)
        try:
            made = factory()
        except Exception as error:
            raise BadInput(f"{args.factory}() raised {type(error).__name__}: {error}") from None
        if not (isinstance(made, (tuple, list)) and len(made) == 2):
            raise BadInput(f"{args.factory}() returned {type(made).__name__}; expected (model, sample)")
        model, sample = made
        loss = load_factory(args.loss) if args.loss else None
        judgment = fusebench.judge(
            model,
            sample,
            sets=args.sets,
            compile=args.backend,
            options=options,
            seed=args.seed,
            dtype=args.dtype,
            speed_rounds=args.speed_rounds,
            loss=loss,
            name=args.factory.rpartition(":")[2],
        )
        if args.explain:
            try:
                check_judgment_fits(judgment, args.backend)
            except JudgeError as why:  # the verdict stands; only its explanation cannot be had
                print(f"fusebench judge: no explanation: {why}", file=sys.stderr)
            else:
                fusebench.explain(
                    model, sample, judgment=judgment, dtype=args.dtype, options=options, budget=args.budget, loss=loss
                )
    except (BadInput, JudgeError) as error:
        print(f"fusebench judge: bad input: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except ModelError as error:
        cause = error.__cause__
        if cause is not None:
            traceback.print_exception(cause, file=sys.stderr)
        print(f"fusebench judge: the model failed: {error}", file=sys.stderr)
        return EXIT_FAILURE
    except Exception as error:  # the judge's own failure: never read as a verdict or as bad input
        traceback.print_exc(file=sys.stderr)
        print(f"fusebench judge: the judge failed: {type(error).__name__}: {error}", file=sys.stderr)
        return EXIT_FAILURE
    print(judgment)
    if args.out:
        path = judgment.report(args.out)
        print(f"\nreport: {path}")
    return judgment.exit_status


if __name__ == "__main__":
    sys.exit(main())
