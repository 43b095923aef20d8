"""Retraining the finalists from scratch (§7): one fixed-width network per decision.

Inputs:  results/decisions/{device}/{method}/{target}.parquet
Outputs: results/retrain/{device}/{method}/{target}/seed{seed}/{result.parquet,model.pt}, one per retrain seed
         results/export/{device}/{method}/{target}/seed{seed}/{model.onnx,state_dict.pt,export.json}
"""


rule retrain:
    input:
        decision="results/decisions/{device}/{method}/{target}.parquet",
    output:
        result="results/retrain/{device}/{method}/{target}/seed{seed}/result.parquet",
        model="results/retrain/{device}/{method}/{target}/seed{seed}/model.pt",
    log:
        "results/logs/retrain_{device}_{method}_{target}_seed{seed}.log",
    benchmark:
        "results/benchmarks/retrain_{device}_{method}_{target}_seed{seed}.tsv"
    wildcard_constraints:
        method="aows|ows|greedy|uniform",
        seed=r"\d+",
    conda:
        "../../envs/aows.yaml"
    threads: config["retrain"]["threads"]
    resources:
        mem_mb=4000,
        runtime=600,
        gpu=0,
    params:
        cfg=settings("retrain"),
        stamp=stamp("retrain"),
        out="results/retrain/{device}/{method}/{target}/seed{seed}",
    shell:
        "aows retrain --config-json {params.cfg:q} --decision {input.decision:q} --out-dir {params.out:q} "
        "--seed {wildcards.seed} --resume-dir results/.resume/retrain/{wildcards.device}/{wildcards.method}/{wildcards.target}/seed{wildcards.seed} --quiet "
        "> {log:q} 2>&1"


rule export:
    input:
        model="results/retrain/{device}/{method}/{target}/seed{seed}/model.pt",
    output:
        onnx="results/export/{device}/{method}/{target}/seed{seed}/model.onnx",
        state="results/export/{device}/{method}/{target}/seed{seed}/state_dict.pt",
        report="results/export/{device}/{method}/{target}/seed{seed}/export.json",
    log:
        "results/logs/export_{device}_{method}_{target}_seed{seed}.log",
    wildcard_constraints:
        method="aows|ows|greedy|uniform",
        seed=r"\d+",
    conda:
        "../../envs/aows.yaml"
    params:
        cfg=settings("export"),
        stamp=stamp("export"),
        out="results/export/{device}/{method}/{target}/seed{seed}",
    shell:
        "aows export --config-json {params.cfg:q} --model {input.model:q} --out-dir {params.out:q} > {log:q} 2>&1"
