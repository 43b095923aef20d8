"""Timing the finalists on their device (§7): every decision of a device, with the profiling protocol.

Inputs:  results/latency/{device}.parquet                           reference baseline and fingerprint
         results/lut/{device}/lut.parquet                           the predicted latencies
         results/decisions/{device}/{method}/{target}.parquet       every finalist of the device
Outputs: results/measure/{device}.parquet                           one row per finalist: predicted vs measured
"""


# Timing claims every core the scheduler has, so nothing else runs beside it.
rule measure:
    input:
        latency="results/latency/{device}.parquet",
        lut="results/lut/{device}/lut.parquet",
        decisions=finalist_files("results/decisions/{device}/{method}/{target}.parquet"),
    output:
        "results/measure/{device}.parquet",
    log:
        "results/logs/measure_{device}.log",
    benchmark:
        "results/benchmarks/measure_{device}.tsv"
    conda:
        "../../envs/aows.yaml"
    threads: timing_threads
    resources:
        mem_mb=4000,
        runtime=60,
        gpu=device_gpus,
    params:
        cfg=settings("measure"),
        reach=reach(),
        stamp=stamp("measure"),
    shell:
        "aows measure --config-json {params.cfg:q} --device-reach {params.reach:q} --device {wildcards.device} "
        "--decisions {input.decisions:q} --latency {input.latency:q} --lut {input.lut:q} "
        "--out {output:q} --quiet > {log:q} 2>&1"
