"""Write the results a page cites from the committed files: every directive of every page, rendered in place.

    python benchmarks/pages.py [--check] [PAGE ...]

Rewrites the directives (``ragscale.published.pages``) of ``PAGES`` (or the pages given) from the folders under
``benchmarks/results/``. ``--check`` writes nothing: it prints each page that differs from what its files give and
exits 1, as ``tests/published/test_pages.py`` fails.
"""

from __future__ import annotations

import argparse
import difflib


def main(argv: list[str] | None = None) -> int:
    from ragscale.published.directives import REPO
    from ragscale.published.pages import PAGES, render

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("pages", nargs="*", default=list(PAGES), help=f"default: {' '.join(PAGES)}")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page differs")
    args = parser.parse_args(argv)

    from ragscale.process import prepare_process

    prepare_process()
    differ = []
    for page in args.pages:
        path = REPO / page
        text = path.read_text(encoding="utf-8")
        written = render(text, page)
        if written == text:
            continue
        differ.append(page)
        if args.check:
            print("".join(difflib.unified_diff(text.splitlines(True), written.splitlines(True), page, "rendered")))
        else:
            path.write_text(written, encoding="utf-8")
            print(f"wrote {page}")
    return 1 if args.check and differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
