"""`aows decode`: optimal widths under latency targets (§5 eq. lagrange / eq. viterbi)."""

from __future__ import annotations

import argparse
from typing import Any, Mapping

from . import add_config

COMMAND = "decode"
HELP = "optimal widths under latency targets (§5 eq. lagrange / viterbi)"
PARSER_KWARGS: dict[str, Any] = {}
INPUTS = ("unaries", "lut", "latency")
OUTPUTS = ("out",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_config(p, timing=True)
    p.add_argument("--device", required=True)
    p.add_argument("--method", required=True, help="label written in the decisions (e.g. ows, aows)")
    p.add_argument("--unaries", required=True)
    p.add_argument("--lut", required=True)
    p.add_argument("--latency", help="the latency file the LUT was fitted on: each decision is verified on the device "
                   "(docs/method.md D36); without it, decided on the LUT alone")
    p.add_argument("--target", action="append", required=True, help="'4.5ms', '325mflops' or 'range:0.3'; repeatable")
    p.add_argument("--epoch", type=int, default=None, help="which epoch's unaries (default: the last)")
    p.add_argument("--out", required=True)


def run(config: Mapping[str, Any], inputs: Mapping[str, Any], outputs: Mapping[str, Any], *, device: str, method: str,
        target: list[str], epoch: int | None = None) -> list[dict[str, Any]]:
    """Decisions of `method` for each target from a unaries artifact and a device's LUT (§5 eq. lagrange), each
    verified on the device when the latency file is given (D36)."""
    from .. import artifacts
    from ..config import resolve
    from ..search.decisions import decide, width_signal_note
    from ._verify import LutFile, decide_verified

    settings = resolve(config)
    space, d = settings.space, settings.decode
    lut = LutFile.read(inputs["lut"], space, device)
    tmeta = lut.meta
    u, umeta, chosen = artifacts.read_unaries(inputs["unaries"], space, epoch)
    rows, verification = decide_verified(
        settings, lut, inputs.get("latency"),
        lambda table, t: decide(space, u, table, [t], method=method, decode=d, epoch=chosen)[0], target)
    z = umeta.get("width_signal_z")
    for r in rows:
        r["width_signal_z"] = z
    artifacts.write_decisions(rows, outputs["out"], {
        "space_name": space.name, "space_hash": space.hash, "device": device, "fingerprint": tmeta.get("fingerprint"),
        "unit": tmeta.get("unit"), "lut_lambda": tmeta.get("lam"), "unaries_meta": umeta, "decode": d.to_dict(),
        "width_signal_note": width_signal_note(z), "verification": verification,
    })
    return rows


def report(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    from ..search.decisions import width_signal_note
    from ._verify import print_verification

    note = width_signal_note(rows[0]["width_signal_z"]) if rows else None
    if note:
        print(note)
    for r in rows:
        print(f"{r['method']} @ {r['target']} ({r['target_ms']:.4g} {r['unit']}): {r['channels']} predicted "
              f"{r['predicted_latency_ms']:.4g}, Σδ {r['objective']:.4g}, γ {r['gamma']:.3g}, gap {r['gap']:.3g}"
              f"{' (exact)' if r['exact'] else ''}")
        if r["gamma"] == 0:
            print(f"  {r['target']} does not bind (γ = 0): the network of least Σδ the supernet knows runs at "
                  f"{r['predicted_latency_ms']:.4g} {r['unit']}, under the target, so every looser target decides it "
                  f"too; targets that tell networks apart lie below it")
    print_verification(getattr(args, "out", None))
