"""Converters from the layouts users arrive with to hpcbench's sharded HDF5 datasets.

One module per source layout (``image_folder``, ``metadata_json``, ``csv_table``, ``arrays``,
``synthetic``), each returning a :class:`hpcbench.data_prep.source.Source`; :func:`hpcbench.data_prep.convert.convert`
turns any source into a dataset directory; :func:`hpcbench.data_prep.unlabeled.with_unlabeled_test` adds a
test set that has no labels (Herbarium's test metadata) as an unlabeled test split. From Python::

    from hpcbench.data_prep import convert, ConvertOptions, image_folder
    convert(image_folder("photos/"), "data/photos", ConvertOptions(size=(224, 224)))

From the shell: ``hpcbench prep folder photos/ data/photos --size 224x224`` (docs/data.md).
"""

from hpcbench.data_prep.arrays import from_arrays
from hpcbench.data_prep.convert import ConvertOptions, convert
from hpcbench.data_prep.csv_table import csv_table
from hpcbench.data_prep.image_folder import image_folder
from hpcbench.data_prep.metadata_json import metadata_json
from hpcbench.data_prep.split import thin_splits
from hpcbench.data_prep.synthetic import synthetic
from hpcbench.data_prep.unlabeled import unlabeled_listing, with_unlabeled_test

__all__ = [
    "ConvertOptions",
    "convert",
    "csv_table",
    "from_arrays",
    "image_folder",
    "metadata_json",
    "synthetic",
    "thin_splits",
    "unlabeled_listing",
    "with_unlabeled_test",
]
