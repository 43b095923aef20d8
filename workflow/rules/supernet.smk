"""Supernet training (§3, §5, §6) and the feasibility of every latency target.

Inputs:  config.yaml (data, supernet, aows), results/lut/{device}/lut.parquet, space.weights (D48) when set
Outputs: results/targets/{device}/{target}.json            the target resolved (fails if no network meets it)
         results/targets/feasible.txt                       every absolute target checked: training waits for it
         results/supernet/ows/{unaries,metrics}.parquet     OWS: one supernet for every device and target
         results/supernet/ows/checkpoints/after_{n}.pt      after n epochs (AOWS starts from n = W)
         results/supernet/aows/{device}/{target}/...        AOWS: one supernet per (device, target)
"""


# Cheap, and first: an infeasible target stops the run before any AOWS training starts.
rule check_target:
    input:
        lut="results/lut/{device}/lut.parquet",
    output:
        "results/targets/{device}/{target}.json",
    log:
        "results/logs/check_target_{device}_{target}.log",
    benchmark:
        "results/benchmarks/check_target_{device}_{target}.tsv"
    priority: 100
    conda:
        "../../envs/aows.yaml"
    params:
        cfg=settings("check_target"),
    shell:
        "aows check-target --config-json {params.cfg:q} --device {wildcards.device} --lut {input.lut:q} "
        "--target {wildcards.target:q} --out {output:q} > {log:q} 2>&1"


# The gate of every training job: an infeasible absolute target stops the run before any training starts
# (relative targets are always feasible). Training reads the gate as ancient and its path never changes,
# so adding a target reruns the gate and the new checks, never the OWS supernet or the greedy trajectory.
rule targets_feasible:
    input:
        absolute_target_checks,
    output:
        "results/targets/feasible.txt",
    log:
        "results/logs/targets_feasible.log",
    priority: 100
    localrule: True
    conda:
        "../../envs/aows.yaml"
    shell:
        "printf '%s\\n' {input:q} > {output:q} 2> {log:q}"


# The OWS supernet reads no LUT and no target.
rule train_ows:
    input:
        feasible=ancient("results/targets/feasible.txt"),
        weights=trained_weights("supernet"),
        model=model_source(),
    output:
        unaries="results/supernet/ows/unaries.parquet",
        metrics="results/supernet/ows/metrics.parquet",
        model="results/supernet/ows/model.pt",
        warm=f"results/supernet/ows/checkpoints/after_{config['aows']['warmup_epochs']}.pt",
    log:
        "results/logs/train_ows.log",
    benchmark:
        "results/benchmarks/train_ows.tsv"
    conda:
        "../../envs/aows.yaml"
    threads: node_threads("supernet")  # per node; torchrun starts one process per GPU
    resources:
        mem_mb=8000,
        runtime=600,
        gpu=0,
    params:
        cfg=settings("train_ows"),
        stamp=stamp("train_ows"),
    shell:
        "aows train-supernet --config-json {params.cfg:q} --method ows --out-dir results/supernet/ows "
        "--resume-dir results/.resume/supernet/ows > {log:q} 2>&1"


rule train_aows:
    input:
        lut="results/lut/{device}/lut.parquet",
        init=f"results/supernet/ows/checkpoints/after_{config['aows']['warmup_epochs']}.pt",
        ok="results/targets/{device}/{target}.json",
    output:
        unaries="results/supernet/aows/{device}/{target}/unaries.parquet",
        metrics="results/supernet/aows/{device}/{target}/metrics.parquet",
        model="results/supernet/aows/{device}/{target}/model.pt",
    log:
        "results/logs/train_aows_{device}_{target}.log",
    benchmark:
        "results/benchmarks/train_aows_{device}_{target}.tsv"
    # Before any retraining: the AOWS runs are on the critical path; retraining jobs fill the cores beside them.
    priority: 50
    conda:
        "../../envs/aows.yaml"
    threads: aows_threads()  # per node; torchrun starts one process per GPU
    resources:
        mem_mb=8000,
        runtime=600,
        gpu=0,
    params:
        cfg=settings("train_aows"),
        stamp=stamp("train_aows"),
        out="results/supernet/aows/{device}/{target}",
    shell:
        "aows train-supernet --config-json {params.cfg:q} --method aows --device {wildcards.device} "
        "--target {wildcards.target:q} --lut {input.lut:q} --init-from {input.init:q} --out-dir {params.out:q} "
        "--resume-dir results/.resume/supernet/aows/{wildcards.device}/{wildcards.target} > {log:q} 2>&1"
