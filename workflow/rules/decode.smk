"""Optimal width decoding (§5 eq. lagrange / viterbi): unaries + a device's LUT + a target → a decision.

Inputs:  results/supernet/ows/unaries.parquet (OWS: one supernet for every device and target),
         results/supernet/aows/{device}/{target}/unaries.parquet (AOWS: one per device and target),
         results/lut/{device}/lut.parquet
Outputs: results/decisions/{device}/{method}/{target}.parquet (the decisions contract)
"""


rule decode:
    input:
        unaries=unaries_of,
        lut="results/lut/{device}/lut.parquet",
        ok="results/targets/{device}/{target}.json",
    output:
        "results/decisions/{device}/{method}/{target}.parquet",
    log:
        "results/logs/decode_{device}_{method}_{target}.log",
    benchmark:
        "results/benchmarks/decode_{device}_{method}_{target}.tsv"
    wildcard_constraints:
        method="ows|aows",
    conda:
        "../../envs/aows.yaml"
    params:
        cfg=settings("decode"),
        stamp=stamp("decode"),
    shell:
        "aows decode --config-json {params.cfg:q} --device {wildcards.device} --method {wildcards.method} "
        "--unaries {input.unaries:q} --lut {input.lut:q} --target {wildcards.target:q} --out {output:q} > {log:q} 2>&1"
