"""Commit finished runs' per-question records beside the table a page cites, and print that table from them.

    python benchmarks/publish.py --runs-dir DIR --name NAME --command CMD --baseline METHOD-OPTIMIZER [RUN_ID ...]
    python benchmarks/publish.py --runs-dir DIR --name NAME --command CMD --baseline METHOD-OPTIMIZER --cells OUT_DIR
    python benchmarks/publish.py --name NAME --baseline METHOD-OPTIMIZER --table
    python benchmarks/publish.py --runs-dir DIR --name NAME --command CMD --sweep SWEEP_DIR

The first two forms copy the runs (by default the latest FINISHED run of each method, or oracle row, x optimizer in
the store; with ``--cells``, the runs of a methods benchmark's ``--out-dir``, in its table's order) to
``benchmarks/results/NAME/`` (``ragscale.published.runs.publish``: the records gzip-compressed, a manifest with
the command, machine, date and commit), add each run against the baseline to the folder's ``plan.json`` (the
family its stars come from, ``ragscale.published.plan``) and print the table; the third prints the table from the
committed folder alone. The fourth publishes a finished sweep (its folder, ``ragscale sweep`` says where: each
configuration's records, ``ragscale.published.sweeps``) and prints its report made again from them; a page cites
them through a directive (``ragscale.published.pages``), which ``python benchmarks/pages.py`` renders.
"""

from __future__ import annotations

import argparse
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_ids", nargs="*", help="runs to publish (default: the latest of each method x optimizer)")
    parser.add_argument("--runs-dir", type=Path, help="the store the runs are in (omit with --table)")
    parser.add_argument("--name", required=True, help="the folder under benchmarks/results/")
    parser.add_argument("--command", help="the command that made the runs, as the manifest records it")
    parser.add_argument("--baseline", help="the run every other is paired against: METHOD-OPTIMIZER")
    parser.add_argument("--sweep", type=Path, help="publish the sweep whose results are in this folder")
    parser.add_argument("--cells", type=Path, help="publish the runs of this folder of cells (methods.py --out-dir)")
    parser.add_argument("--table", action="store_true", help="print the table from the committed folder only")
    args = parser.parse_args(argv)

    from ragscale.process import prepare_process

    prepare_process()
    from ragscale.published.runs import plan_table, publish, table

    folder = RESULTS / args.name
    if args.sweep is not None:
        from ragscale.published import sweeps

        if args.runs_dir is None or args.command is None:
            parser.error("publishing a sweep needs --runs-dir and --command")
        sweeps.publish(args.sweep, args.runs_dir, folder, command=args.command)
        print("\n\n".join(sweeps.report(sweeps.load(folder)).values()))
        return 0
    if args.baseline is None:
        parser.error("a table needs --baseline")
    if not args.table:
        if args.runs_dir is None or args.command is None:
            parser.error("publishing needs --runs-dir and --command (or give --table)")
        if args.cells is not None:
            from ragscale.published.cells import load as load_cells

            args.run_ids = [cell["mlflow_run_id"] for cell in load_cells(args.cells).values()]
        publish(args.runs_dir, args.run_ids or latest_runs(args.runs_dir), folder, command=args.command)
        for a, b in plan_table(folder, args.baseline):
            print(f"planned: {a} - {b}")
    print(table(folder, args.baseline))
    return 0


def latest_runs(runs_dir: Path) -> list[str]:
    """The latest FINISHED run of each method (or oracle row) x optimizer in the store, oldest first."""
    from ragscale.experiments import tracking
    from ragscale.published.runs import row_of

    latest = {}
    for run in tracking.finished_runs(runs_dir):
        latest[row_of(run.data.params), run.data.params["optimizer"]] = run.info.run_id
    return list(latest.values())


if __name__ == "__main__":
    raise SystemExit(main())
