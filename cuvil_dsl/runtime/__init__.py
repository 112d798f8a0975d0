"""Runtimes: arenas with guard bands, kernel launches, CUDA Graphs, snapshots, executors.

Nothing here imports CuPy at module load: GPU modules import it inside the functions that need a
device, so every module imports (and the CPU and reference backends run) on machines without one.

=========================  ==================================================================
``base``                   the Executor interface, Target, Timing, Snapshot
``layout``                 where buffers and guard bands sit in an arena
``host_arena`` / ``arena`` the arena in host memory / in one device allocation
``binding``                sizes from arrays, scalar values, uniforms from ``plan.host_ops``
``modules``                CUBINs loaded, kernels launched from prebuilt argument arrays
``graphs``                 capture, replay and in-place update of declared graphs
``faults``                 CUDA errors named by kernel, graph and pipeline line
``cuda_executor``          the GPU backend
``reference_executor``     the float64 reference behind the same interface
``interop``                NumPy / CuPy / PyTorch arrays in and out
``sanitize``               re-running a command under compute-sanitizer
``device``                 GPU presence, arch and size
=========================  ==================================================================
"""
