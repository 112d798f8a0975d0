"""``cuvil-dsl bench``: our pipelines side by side with the baselines installed, and the roofline.

One run measures everything it reports, on the machine it runs on:

* :mod:`~cuvil_dsl.bench.timing`: one timing method for every contender (CUDA events per sample
  on the contender's own stream, L2 flushed before each sample outside the timed region, queue kept
  full, median and IQR; host clock for host contenders), plus end-to-end latency;
* :mod:`~cuvil_dsl.bench.baselines`: which baselines exist for a spec (by its file's stem), which
  are installed, and the check that a baseline computes what our pipeline computes;
* :mod:`~cuvil_dsl.bench.roofline`: copy bandwidth and matrix rate measured in the same run, and
  the floor of each benchmark from its plan and IR;
* :mod:`~cuvil_dsl.bench.runner`: one benchmark from an opened spec to a :class:`BenchResult`;
* :mod:`~cuvil_dsl.bench.report`: the JSON document, the table and the plot.
"""
