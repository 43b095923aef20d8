"""The results of a device (§7): proxies of the finalists, the results table and every plot.

Inputs:  results/decisions/{device}/*/*.parquet, results/retrain/{device}/*/*/result.parquet,
         results/measure/{device}.parquet, the OWS supernet (unaries, model, metrics), the AOWS metrics
Outputs: results/proxy/{device}.parquet                 Σδ and BN-recalibrated supernet accuracy per finalist
         results/pareto_{device}.{pdf,png,parquet}      accuracy vs measured latency, and its table
         results/plots/{device}/{latency,configurations,training,proxy}.{pdf,png,parquet}
"""


rule proxy:
    input:
        decisions=finalist_files("results/decisions/{device}/{method}/{target}.parquet"),
        unaries="results/supernet/ows/unaries.parquet",
        model="results/supernet/ows/model.pt",
    output:
        "results/proxy/{device}.parquet",
    log:
        "results/logs/proxy_{device}.log",
    benchmark:
        "results/benchmarks/proxy_{device}.tsv"
    conda:
        "../../envs/aows.yaml"
    threads: scoring_threads()
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        cfg=settings("proxy"),
        stamp=stamp("proxy"),
    shell:
        "aows proxy --config-json {params.cfg:q} --device {wildcards.device} --decisions {input.decisions:q} "
        "--unaries {input.unaries:q} --model {input.model:q} --out {output:q} > {log:q} 2>&1"


rule pareto:
    input:
        measure="results/measure/{device}.parquet",
        proxy="results/proxy/{device}.parquet",
        validation="results/lut/{device}/validation.parquet",
        retrain=finalist_files(
            "results/retrain/{device}/{method}/{target}/seed{seed}/result.parquet"
        ),
        metrics=lambda wildcards: [
            r.split("=", 1)[1] for r in supernet_runs(wildcards.device)
        ],
    output:
        pdf=report(
            "results/pareto_{device}.pdf",
            caption="../report/pareto.rst",
            category="Results",
            subcategory="{device}",
        ),
        png="results/pareto_{device}.png",
        table="results/pareto_{device}.parquet",
        latency=plot_output("latency", "latency"),
        configurations=plot_output("configurations", "configurations"),
        training=plot_output("training", "training"),
        proxy=plot_output("proxy", "proxy"),
        tables=multiext(
            "results/plots/{device}/",
            "latency.parquet",
            "configurations.parquet",
            "training.parquet",
            "proxy.parquet",
        ),
    log:
        "results/logs/pareto_{device}.log",
    benchmark:
        "results/benchmarks/pareto_{device}.tsv"
    conda:
        "../../envs/aows.yaml"
    params:
        cfg=settings("pareto"),
        stamp=stamp("pareto"),
        runs=lambda wildcards: supernet_runs(wildcards.device),
    shell:
        "aows pareto --config-json {params.cfg:q} --device {wildcards.device} --measure {input.measure:q} "
        "--retrain {input.retrain:q} --proxy {input.proxy:q} --lut-validation {input.validation:q} "
        "--metrics {params.runs:q} "
        "--out {output.pdf:q} --plots-dir results/plots/{wildcards.device} > {log:q} 2>&1"
