"""`aows relabel`: a network's retraining, as the result of one finalist that decided that network (§7)."""

from __future__ import annotations

import argparse
from typing import Any, Mapping

from . import add_config

COMMAND = "relabel"
HELP = "a retrained network's result and model as one finalist's (finalists that agree share one training)"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS = ("decision", "result", "model")
OUTPUTS = ("out_dir",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config(p)
    p.add_argument("--decision", required=True, help="the finalist's decisions parquet (one row)")
    p.add_argument("--result", required=True, help="result.parquet of `aows retrain` of the decision's channels")
    p.add_argument("--model", required=True, help="model.pt of that retraining")
    p.add_argument("--out-dir", required=True, help="where the finalist's result.parquet and model.pt go")


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any]) -> dict[str, Any]:
    """Write the retraining `result`/`model` of the decision's network as the decision's own: the same row with
    the finalist's method, device and target, and the same model file. Refused unless the decision, the
    result are of the configured space and of the same channels (the model is the result's own file)."""
    from pathlib import Path

    from .. import artifacts
    from ..config import resolve

    space = resolve(config).space
    row, _ = artifacts.read_decision(inputs["decision"], space)
    table, meta = artifacts.read_table(inputs["result"], "retrain")
    artifacts.require_space(meta, space, inputs["result"], "network")
    (trained,) = table.to_pylist()  # the model is the file written beside it by the same retraining
    if [int(c) for c in trained["channels"]] != [int(c) for c in row["channels"]]:
        raise artifacts.ArtifactError(f"{inputs['result']} holds a network of channels {trained['channels']}, but "
                                      f"{inputs['decision']} decided {row['channels']}")
    result = {**trained, "method": row["method"], "device": row["device"], "target": row["target"]}
    out_dir = Path(outputs["out_dir"])
    meta = {k: v for k, v in meta.items() if k != "kind"}
    meta.update(decision=str(inputs["decision"]), trained=str(inputs["result"]))
    artifacts.write_records([result], out_dir / "result.parquet", "retrain", meta)
    artifacts.copy_file(inputs["model"], out_dir / "model.pt")
    return result


def report(r: dict[str, Any], args: argparse.Namespace) -> None:
    print(f"{r['method']} @ {r['target']} on {r['device']}: seed {r['seed']}, test top-1 {100 * r['test_acc']:.2f} % "
          f"(trained once for its channels: {args.result})")
