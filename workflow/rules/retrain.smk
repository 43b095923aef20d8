"""Retraining the finalists from scratch (§7): one job per distinct network trains it once per seed, or one job
per network and seed (retrain.seeds_in_one_job, D52).

Inputs:  results/decisions/{device}/{method}/{target}.parquet (checkpoints: the network is read from it);
         space.weights when retrain.init is weights (D48)
Outputs: results/retrain/nets/{net}/seed{seed}/{result.parquet,model.pt}, {net} = the widths (16-32-64):
         trained once per retrain seed for every finalist, of any method, target or device, that decided them
         results/retrain/{device}/{method}/{target}/seed{seed}/{result.parquet,model.pt}: the finalist's copy
         results/export/{device}/{method}/{target}/seed{seed}/{model.onnx,state_dict.pt,export.json}
"""


rule retrain_net:
    input:
        weights=trained_weights("retrain"),
    output:
        result=net_outputs("results/retrain/nets/{net}/seed{seed}/result.parquet"),
        model=net_outputs("results/retrain/nets/{net}/seed{seed}/model.pt"),
    log:
        f"results/logs/retrain_net_{NET_JOB}.log",
    benchmark:
        f"results/benchmarks/retrain_net_{NET_JOB}.tsv"
    wildcard_constraints:
        net=r"\d+(?:-\d+)*",
        seed=r"\d+",
    conda:
        "../../envs/aows.yaml"
    threads: node_threads("retrain")  # per node; torchrun starts one process per GPU
    resources:
        mem_mb=4000,
        runtime=600,
        gpu=0,
    params:
        cfg=settings("retrain"),
        stamp=stamp("retrain"),
        out=net_dir("results/retrain/nets"),
        resume=net_dir("results/.resume/retrain/nets"),
        seeds=net_seeds,
    shell:
        "aows retrain --config-json {params.cfg:q} --channels {wildcards.net} --out-dir {params.out:q} "
        "--seed {params.seeds} --resume-dir {params.resume:q} --quiet > {log:q} 2>&1"


# A finalist's result is its network's, relabelled with its method, device and target (model.pt copied):
# a local job of a second.
rule retrain:
    input:
        decision="results/decisions/{device}/{method}/{target}.parquet",
        result=trained_network("result.parquet"),
        model=trained_network("model.pt"),
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
    localrule: True
    conda:
        "../../envs/aows.yaml"
    params:
        cfg=settings("relabel"),
        stamp=stamp("relabel"),
        out="results/retrain/{device}/{method}/{target}/seed{seed}",
    shell:
        "aows relabel --config-json {params.cfg:q} --decision {input.decision:q} --result {input.result:q} "
        "--model {input.model:q} --out-dir {params.out:q} > {log:q} 2>&1"


rule export:
    input:
        model="results/retrain/{device}/{method}/{target}/seed{seed}/model.pt",
    output:
        onnx="results/export/{device}/{method}/{target}/seed{seed}/model.onnx",
        state="results/export/{device}/{method}/{target}/seed{seed}/state_dict.pt",
        report="results/export/{device}/{method}/{target}/seed{seed}/export.json",
    log:
        "results/logs/export_{device}_{method}_{target}_seed{seed}.log",
    benchmark:
        "results/benchmarks/export_{device}_{method}_{target}_seed{seed}.tsv"
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
