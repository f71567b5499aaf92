"""``dotformer explain attention``: the lesson's worked example of scaled dot-product attention, step by step."""

from __future__ import annotations

import argparse

EPILOG = """\
examples:
  dotformer explain attention
  dotformer explain attention --json '{"Q": [[1, 0]], "K": [[1, 0], [0, 1]], "V": [[1, 2], [3, 4]]}'
  dotformer explain attention --json problem.json     # {"Q": .., "K": .., "V": .., "mask": [[true, false]]}
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``attention`` with an optional --json problem."""
    parser.epilog = EPILOG
    topics = parser.add_subparsers(dest="topic", metavar="TOPIC", required=True)
    attention = topics.add_parser("attention", help="scores, scaling, softmax and output, with numbers")
    attention.add_argument(
        "--json",
        metavar="FILE_OR_STRING",
        help='your own {"Q": [[..]], "K": [[..]], "V": [[..]], "mask": [[..]] (optional)} as JSON text or a file',
    )


def run(args: argparse.Namespace) -> int:
    """Print the explanation."""
    from dotformer.explore.explain import explain_json, explain_lesson

    print(explain_json(args.json) if args.json else explain_lesson())
    return 0
