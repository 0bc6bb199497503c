"""remat's benchmarks: ``python -m benchmarks [--quick] [--write] [names...]``.

Each ``bench_*`` module measures one thing and returns markdown from
``run(quick=False)``; :mod:`benchmarks.__main__` runs them and can rewrite
RESULTS.md.  :mod:`benchmarks.common` pins BLAS to one thread and must be
imported before NumPy.  See README.md in this folder.
"""
