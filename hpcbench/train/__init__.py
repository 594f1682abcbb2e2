"""The run side: what executes inside the allocation, one process per rank.

Nothing in :mod:`hpcbench` outside this package imports it, so the submit side stays free of torch.
"""
