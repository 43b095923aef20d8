"""Optimal width decoding (§5 eq. lagrange / viterbi): unaries + a device's LUT + a target → a decision.

Inputs:  results/supernet/ows/unaries.parquet (OWS: one supernet for every device and target),
         results/supernet/aows/{device}/{target}/unaries.parquet (AOWS: one per device and target),
         results/lut/{device}/lut.parquet, results/latency/{device}.parquet (the timings it was fitted on)
Outputs: results/decisions/{device}/{method}/{target}.parquet (the decisions contract)

Every decision is verified on its device (docs/method.md D36): the decided network is timed and the table refitted
until its timing confirms its prediction, so decode and decide_baseline are timing rules (all cores, alone) on
a timed device.

decode and decide_baseline are checkpoints: a finalist's retraining is that of the network its decision
names (rules/retrain.smk), known only once the decision exists.
"""


checkpoint decode:
    input:
        unaries=unaries_of,
        lut="results/lut/{device}/lut.parquet",
        latency="results/latency/{device}.parquet",
        ok="results/targets/{device}/{target}.json",
    output:
        "results/decisions/{device}/{method}/{target}.parquet",
    log:
        "results/logs/decode_{device}_{method}_{target}.log",
    benchmark:
        "results/benchmarks/decode_{device}_{method}_{target}.tsv"
    wildcard_constraints:
        method="ows|aows",
    priority: 50  # a verified decision times alone: take both cores when they free, before retraining
    conda:
        "../../envs/aows.yaml"
    threads: decision_threads
    resources:
        gpu=device_gpus,
    params:
        cfg=settings("decode"),
        reach=reach(),
        stamp=stamp("decode"),
    shell:
        "aows decode --config-json {params.cfg:q} --device-reach {params.reach:q} --device {wildcards.device} --method {wildcards.method} "
        "--unaries {input.unaries:q} --lut {input.lut:q} --latency {input.latency:q} --target {wildcards.target:q} --out {output:q} > {log:q} 2>&1"


# The greedy trajectory depends on the OWS supernet only: computed once, for every device and target.
rule greedy_trajectory:
    input:
        model="results/supernet/ows/model.pt",
    output:
        "results/supernet/ows/greedy_trajectory.parquet",
    log:
        "results/logs/greedy_trajectory.log",
    benchmark:
        "results/benchmarks/greedy_trajectory.tsv"
    conda:
        "../../envs/aows.yaml"
    threads: scoring_threads()
    resources:
        mem_mb=4000,
        runtime=120,
    params:
        cfg=settings("greedy"),
        stamp=stamp("greedy"),
    shell:
        "aows greedy --config-json {params.cfg:q} --model {input.model:q} --out {output:q} --quiet > {log:q} 2>&1"


checkpoint decide_baseline:
    input:
        unpack(baseline_inputs),
        lut="results/lut/{device}/lut.parquet",
        latency="results/latency/{device}.parquet",
        ok="results/targets/{device}/{target}.json",
    output:
        "results/decisions/{device}/{method}/{target}.parquet",
    log:
        "results/logs/decide_{device}_{method}_{target}.log",
    benchmark:
        "results/benchmarks/decide_baseline_{device}_{method}_{target}.tsv"
    wildcard_constraints:
        method="greedy|uniform",
    priority: 50  # a verified decision times alone: take both cores when they free, before retraining
    conda:
        "../../envs/aows.yaml"
    threads: decision_threads
    resources:
        gpu=device_gpus,
    params:
        cfg=settings("decide_baseline"),
        reach=reach(),
        stamp=stamp("decide_baseline"),
        trajectory=lambda wc, input: (
            f"--trajectory {input.trajectory}" if wc.method == "greedy" else ""
        ),
    shell:
        "aows decide-baseline --config-json {params.cfg:q} --device-reach {params.reach:q} --device {wildcards.device} --method {wildcards.method} "
        "--lut {input.lut:q} --latency {input.latency:q} {params.trajectory} --target {wildcards.target:q} --out {output:q} > {log:q} 2>&1"
