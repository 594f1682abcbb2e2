"""Converters from users' data layouts (image folder, metadata JSON, CSV, arrays) to HDF5 shards.

Driven by ``hpcbench prep``. The converters and the shard format arrive with the data issue; this
package exists now so that the installed layout (hpcbench, hpcbench.templates, data_prep) is final.
"""
