"""The device latency model (§4 and supplementary A): sample → profile → fit LUT → validate.

Inputs:  config.yaml (seed, space, sampling, devices, profiling, lut).
Outputs: results/latency/configs.parquet            configurations to time (train / lambda_val / test)
         results/latency/{device}.parquet           one row per timed network (drift-corrected)
         results/lut/{device}/lut.parquet           one row per latency variable
         results/lut/{device}/fit.parquet           the λ scan
         results/lut/{device}/validation.parquet    held-out metrics (LUT and FLOPs-proportional baseline)
         results/lut/{device}/predictions.parquet   predicted vs measured per held-out network
         results/lut/{device}/validation.pdf        the plot of that table (+ .png)
"""


rule sample_configs:
    input:
        model=model_source(),
    output:
        "results/latency/configs.parquet",
    log:
        "results/logs/sample_configs.log",
    benchmark:
        "results/benchmarks/sample_configs.tsv"
    conda:
        "../../envs/aows.yaml"
    params:
        cfg=settings("sample"),
        stamp=stamp("sample"),
    shell:
        "aows sample --config-json {params.cfg:q} --out {output:q} > {log:q} 2>&1"


# Timing claims every core the scheduler has, so nothing else runs beside it; and it runs before the supernet's
# training (priority above train_ows'), on a rested machine: right after minutes of training, timings on a 2-core
# VM were five times noisier (docs/method.md D27).
rule profile:
    input:
        "results/latency/configs.parquet",
    output:
        "results/latency/{device}.parquet",
    log:
        "results/logs/profile_{device}.log",
    benchmark:
        "results/benchmarks/profile_{device}.tsv"
    priority: 150
    conda:
        "../../envs/aows.yaml"
    threads: timing_threads
    resources:
        mem_mb=4000,
        runtime=60,
        gpu=device_gpus,
    params:
        cfg=settings("profile"),
        reach=reach(),
        stamp=stamp("profile"),
    shell:
        "aows profile --config-json {params.cfg:q} --device-reach {params.reach:q} --device {wildcards.device} "
        "--configs {input:q} --out {output:q} --resume-dir results/.resume > {log:q} 2>&1"


rule fit_lut:
    input:
        "results/latency/{device}.parquet",
    output:
        lut="results/lut/{device}/lut.parquet",
        report="results/lut/{device}/fit.parquet",
    log:
        "results/logs/fit_lut_{device}.log",
    benchmark:
        "results/benchmarks/fit_lut_{device}.tsv"
    conda:
        "../../envs/aows.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=20,
    params:
        cfg=settings("fit_lut"),
        stamp=stamp("fit_lut"),
    shell:
        "aows fit-lut --config-json {params.cfg:q} --device {wildcards.device} --latency {input:q} "
        "--out {output.lut:q} --report {output.report:q} > {log:q} 2>&1"


rule validate_lut:
    input:
        latency="results/latency/{device}.parquet",
        lut="results/lut/{device}/lut.parquet",
    output:
        metrics="results/lut/{device}/validation.parquet",
        predictions="results/lut/{device}/predictions.parquet",
        plot=report(
            "results/lut/{device}/validation.pdf",
            caption="../report/lut_validation.rst",
            category="Latency model",
        ),
    log:
        "results/logs/validate_lut_{device}.log",
    benchmark:
        "results/benchmarks/validate_lut_{device}.tsv"
    conda:
        "../../envs/aows.yaml"
    threads: 1
    params:
        cfg=settings("validate_lut"),
        stamp=stamp("validate_lut"),
    shell:
        "aows validate-lut --config-json {params.cfg:q} --device {wildcards.device} "
        "--latency {input.latency:q} --lut {input.lut:q} --out {output.metrics:q} "
        "--predictions {output.predictions:q} --plot {output.plot:q} > {log:q} 2>&1"
