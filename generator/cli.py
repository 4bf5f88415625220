"""The ``opgen`` command line. Exit codes: 0 ok, 1 check found differences or tests failed,
2 bad spec or usage. User errors print ``path:line:col: message``, never a traceback."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from .config import ProjectConfig, load_config
from .errors import OpgenError, SpecErrors

EXIT_OK, EXIT_DIFF, EXIT_USAGE = 0, 1, 2


def _load(config: ProjectConfig):
    from .pipeline import load_and_generate

    return load_and_generate(config)


def cmd_generate(args, config: ProjectConfig) -> int:
    from .writer import write_tree

    lib, files = _load(config)
    changes = write_tree(config.output_dir, files)
    if changes.recovered:
        print(f"opgen: rolled back an interrupted earlier run in {config.output}/ first", file=sys.stderr)
    for label, paths in (("wrote", changes.added + changes.changed), ("removed", changes.removed)):
        for p in sorted(paths):
            print(f"{label} {config.output}/{p}")
    from .dest import stubs

    for path in stubs.write_missing(config.root, lib):
        print(f"wrote {path} (a stub of a hand-written kernel: implement it; opgen never overwrites it)")
    print(f"opgen: {len(lib.ops)} ops, {len(changes.added) + len(changes.changed)} files written, "
          f"{len(changes.removed)} removed, {len(files) - len(changes.added) - len(changes.changed)} unchanged")
    return EXIT_OK


def cmd_check(args, config: ProjectConfig) -> int:
    from .writer import diff, interrupted

    if interrupted(config.output_dir):
        print(f"opgen check: {config.output}/ holds a run that was killed halfway; run `opgen generate`", file=sys.stderr)
        return EXIT_DIFF
    lib, files = _load(config)
    changes, text = diff(config.output_dir, files, config.output)
    from .dest import stubs

    missing = stubs.missing(config.root, lib)
    for path in missing:
        print(f"opgen check: missing hand-written kernel {path}; run `opgen generate` to write a stub", file=sys.stderr)
    if missing and not changes:
        return EXIT_DIFF
    if not changes:
        print(f"opgen check: {config.output}/ is up to date ({len(files)} files)")
        return EXIT_OK
    sys.stdout.write(text)
    for label, paths in (("missing", changes.added), ("stale", changes.changed), ("leftover", changes.removed)):
        for p in paths:
            print(f"opgen check: {label}: {config.output}/{p}", file=sys.stderr)
    print(f"opgen check: {config.output}/ is out of date; run `opgen generate`", file=sys.stderr)
    return EXIT_DIFF


def cmd_build(args, config: ProjectConfig) -> int:
    from .build import build, cuda_unavailable

    start = time.perf_counter()
    cuda = args.cuda == "on"
    if args.cuda == "auto" and not (args.debug or args.sanitize):
        reason = cuda_unavailable()
        cuda = reason is None
        if reason:
            print(f"opgen build: CPU only: {reason}")
    result = build(config, jobs=args.jobs, verbose=args.verbose, debug=args.debug, sanitize=args.sanitize,
                   cuda=cuda)
    status = f"built ({result.summary()})" if result.ran else "up to date"
    print(f"opgen build: {result.library.relative_to(config.root)} {status} in {time.perf_counter() - start:.1f} s")
    if args.timings:
        from .build import timings

        steps = timings(config, debug=args.debug, sanitize=args.sanitize, cuda=cuda)
        print(f"opgen build: seconds per step of the last build of each ({sum(t for t, _ in steps):.1f} s in all, before parallelism):")
        for seconds, output in steps:
            print(f"  {seconds:7.1f}  {output}")
    return EXIT_OK


def cmd_test(args, config: ProjectConfig) -> int:
    """The generic suite and the generated property tests on every spec, then the project's own tests/."""
    targets = ["--pyargs", "opgen.op_suite"]
    for folder in (config.output_dir / "tests", config.root / "tests"):
        if folder.is_dir():
            targets.append(str(folder))
    env = dict(os.environ, OPGEN_PROJECT=str(config.root))
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *targets, *args.pytest_args],
                          cwd=config.root, env=env)
    return EXIT_OK if proc.returncode == 0 else EXIT_DIFF


def cmd_list(args, config: ProjectConfig) -> int:
    from .dest.op_cpp import registered_schemas
    from .library import load_library

    for op in load_library(config).ops:
        first, *derived = registered_schemas(op)
        print(f"{config.namespace}.{first}")
        for schema in derived:  # its out= and in-place overloads, its backward op
            print(f"    {config.namespace}.{schema}")
    return EXIT_OK


def cmd_new(args, config: ProjectConfig) -> int:
    from .scaffold import new_spec

    path = new_spec(config, args.name)
    print(f"wrote {path.relative_to(config.root)}; edit it, then run `opgen generate`")
    return EXIT_OK


def cmd_schema(args) -> int:
    import json

    from .json_schema import spec_schema

    print(json.dumps(spec_schema(), indent=2, sort_keys=True))
    return EXIT_OK


def cmd_init(args) -> int:
    from .scaffold import init_project

    root = init_project(Path(args.dir), args.namespace)
    print(f"created an opgen project in {root}; next: opgen --project {args.dir} generate && opgen --project {args.dir} build")
    return EXIT_OK


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="opgen", description="Generate PyTorch operators from YAML specs.")
    p.add_argument("--project", metavar="DIR", default=".", help="project folder holding pyproject.toml (default: .)")
    p.add_argument("--error-format", choices=("text", "github"), default="text",
                   help="'github' prints spec errors as GitHub Actions annotations on the spec line")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("generate", help="write generated/ from specs/ (only changed files)")
    sub.add_parser("check", help="exit 1 with a diff when generated/ is stale")
    b = sub.add_parser("build", help="compile the extension with ninja (incremental)")
    b.add_argument("-j", "--jobs", type=int, default=None)
    b.add_argument("-v", "--verbose", action="store_true")
    b.add_argument("--debug", action="store_true", help="-O0 -g")
    b.add_argument("--sanitize", metavar="LIST", default=None, help="e.g. address,undefined")
    b.add_argument("--timings", action="store_true", help="print the seconds each compile and link step took")
    b.add_argument("--cuda", choices=("auto", "on", "off"), default="auto",
                   help="CUDA kernels: 'on' fails saying why when they cannot be built; 'auto' (default) builds "
                        "them with a CUDA build of torch and nvcc, else says why not")
    w = sub.add_parser("watch", help="regenerate whenever a spec, a template or pyproject.toml changes")
    w.add_argument("--build", action="store_true", help="rebuild after each successful generation")
    w.add_argument("--debounce-ms", type=int, default=200, help="wait this long for more changes before regenerating")
    w.set_defaults(jobs=None, verbose=False, debug=False, sanitize=None, timings=False, cuda="auto")  # build's, for --build
    sub.add_parser("test", help="run the generic op suite and the project's tests/ (other arguments go to pytest)")
    sub.add_parser("list", help="list the ops and their schemas")
    n = sub.add_parser("new", help="write a commented spec to start from")
    n.add_argument("name")
    sub.add_parser("schema", help="print the JSON Schema of the spec format (for editors)")
    i = sub.add_parser("init", help="create a new opgen project")
    i.add_argument("dir")
    i.add_argument("--namespace", default=None, help="op namespace (default: from the folder name)")
    return p


def _one_line(message: str) -> str:
    """The message on one line: control and format characters it quotes from a spec, escaped."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)


def report_spec_errors(e: SpecErrors, error_format: str) -> None:
    for err in e.errors:
        if error_format == "github":
            loc = err.location
            message = err.message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
            print(f"::error file={loc.path},line={loc.line},col={loc.col}::{message}", file=sys.stderr)
        else:
            print(f"{err.location}: error: {_one_line(err.message)}", file=sys.stderr)
    n = len(e.errors)
    print(f"opgen: {n} error{'s' if n > 1 else ''}; nothing was written", file=sys.stderr)


def cmd_watch(args, config: ProjectConfig) -> int:
    """Regenerates (and with --build rebuilds) whenever a spec, a template or pyproject.toml
    changes; a bad spec prints its located errors and the watch goes on."""
    from watchfiles import watch

    from .render import templates_dir

    paths = [config.specs_dir, templates_dir(), config.root / "pyproject.toml"]

    def run_once() -> None:
        nonlocal config
        try:
            config = load_config(args.project)
            cmd_generate(args, config)
            if args.build:
                cmd_build(args, config)
        except SpecErrors as e:
            report_spec_errors(e, args.error_format)
        except OpgenError as e:
            print(f"opgen: error: {e}", file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()

    run_once()
    watching = False
    # yield_on_timeout: the first (empty) yield says the watcher is running, so the line below
    # promises that an edit from now on is seen
    for changes in watch(*[p for p in paths if p.exists()], debounce=args.debounce_ms, rust_timeout=500,
                         yield_on_timeout=True):
        if not watching:
            print(f"opgen watch: watching {', '.join(_shown(config, p) for p in paths)} (Ctrl-C stops)", flush=True)
            watching = True
        if not changes:
            continue
        for _, changed in sorted(changes):
            print(f"opgen watch: changed {_shown(config, Path(changed))}", flush=True)
        run_once()
    return EXIT_OK


def _shown(config: ProjectConfig, path: Path) -> str:
    try:
        return str(path.resolve().relative_to(config.root.resolve()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args, extra = p.parse_known_args(argv)
    if extra and args.command != "test":
        p.error(f"unrecognized arguments: {' '.join(extra)}")
    args.pytest_args = [a for a in extra if a != "--"]
    try:
        if args.command == "init":
            return cmd_init(args)
        if args.command == "schema":
            return cmd_schema(args)
        config = load_config(args.project)
        handler = {"generate": cmd_generate, "check": cmd_check, "build": cmd_build, "test": cmd_test,
                   "list": cmd_list, "new": cmd_new, "watch": cmd_watch}[args.command]
        return handler(args, config)
    except SpecErrors as e:
        report_spec_errors(e, args.error_format)
        return EXIT_USAGE
    except OpgenError as e:
        print(f"opgen: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("opgen: interrupted", file=sys.stderr)
        return 130


def run() -> None:
    """The console script: main(), then exit without tearing the interpreter down. Freeing a large
    generated tree object by object takes longer than anything after it (0.5 s for 1,000 specs),
    and nothing is left to clean up: files are closed and worker pools joined by then."""
    try:
        code = main()
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:  # the reader went away (`opgen check | head`): exit 1, as Python advises
        code = EXIT_DIFF
    os._exit(code)


if __name__ == "__main__":
    run()
