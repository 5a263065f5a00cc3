"""Strictly parses each card JSON file as lf.a2a.v1.AgentCard.

Door reference, "Agent Card": the card parses as lf.a2a.v1.AgentCard, as
defined by a2a.proto at v1.0.1, under a strict protobuf JSON parser. Here the
parser is google.protobuf.json_format with ignore_unknown_fields=False over the
types of a2a-sdk (see requirements.txt).

Usage: check_card.py CARD.json [CARD.json ...]
Prints `ok <file>` per card that parses; for each that does not, prints the
file name and the error to stderr. Exits 1 when any card failed.
"""

import json
import sys

from a2a.types import AgentCard
from google.protobuf import json_format


def check(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    msg = json_format.Parse(text, AgentCard(), ignore_unknown_fields=False)
    if msg.DESCRIPTOR.full_name != "lf.a2a.v1.AgentCard":
        raise ValueError("parsed as %s" % msg.DESCRIPTOR.full_name)
    # Round trip sanity: what was parsed is what was sent.
    source = json.loads(text)
    back = json_format.MessageToDict(msg)
    if back.get("name") != source.get("name"):
        raise ValueError("name %r came back as %r" % (source.get("name"), back.get("name")))
    sent = len(source.get("capabilities", {}).get("extensions", []))
    got = len(back.get("capabilities", {}).get("extensions", []))
    if sent != got:
        raise ValueError("%d capabilities.extensions came back as %d" % (sent, got))


def main(paths):
    if not paths:
        print("usage: check_card.py CARD.json [CARD.json ...]", file=sys.stderr)
        return 2
    failed = 0
    for path in paths:
        try:
            check(path)
        except Exception as e:  # json_format.ParseError, ValueError, OSError
            print("FAIL %s: %s: %s" % (path, type(e).__name__, e), file=sys.stderr)
            failed += 1
            continue
        print("ok %s" % path)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
