"""Batch inference on engines people already run (Dask, Ray), and the pieces they share.

Nothing here is imported by `import onemodel`: each engine's module imports the engine itself,
and tqdm is imported only when a bar is made, so onemodel installs and imports without them.
"""
