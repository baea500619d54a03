"""Child process for the crash test: applies a stream of forgets and inserts to a store and
prints an ACK line after each one returns (i.e. after it is durable). Killed at random."""

from __future__ import annotations

import json
import sys

import numpy as np

from forgetting.store import DurableModel


def main() -> None:
    location, plan_path = sys.argv[1], sys.argv[2]
    plan = json.loads(open(plan_path).read())
    model = DurableModel.open(location)
    print("READY", flush=True)
    for op in plan:
        if op["op"] == "forget":
            model.forget(op["ids"])
        else:
            model.insert(np.array(op["X"]), np.array(op["y"]), op["ids"])
        print("ACK " + json.dumps(op["seq"]), flush=True)
    model.wait_for_rebuilds()
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
