"""The data layer: where the rows of tall data come from and how they are read.

Every other layer reads data through these modules, and none of them imports the
likelihood engine, the bounds or the step methods (a test checks the import graph):

* :mod:`~pymc_minibatch_mh.data.blocks`: the number of rows handled at once by row-wise
  work, defined once;
* :mod:`~pymc_minibatch_mh.data.file_arrays`: memory-mapped arrays passed to worker
  processes as their file;
* :mod:`~pymc_minibatch_mh.data.row_source`: rows of a chunked array (zarr, Dask) read
  through a cache of chunks;
* :mod:`~pymc_minibatch_mh.data.chunked_data`: ``chunked_data``, which puts such an
  array into a PyMC model;
* :mod:`~pymc_minibatch_mh.data.tall_array`: ``tall_array``, a ``pm.Data``-like
  container that keeps a numpy, ``np.memmap``, zarr or Dask array as it is;
* :mod:`~pymc_minibatch_mh.data.row_design`: a design matrix kept as its factors, formed
  row block by row block;
* :mod:`~pymc_minibatch_mh.data.chunk_pass`: full-data passes over row blocks, as Dask
  tasks when the data are chunked;
* :mod:`~pymc_minibatch_mh.data.row_scan`: scans of data arrays by row chunks (non-finite
  entries, flagged rows);
* :mod:`~pymc_minibatch_mh.data.pass_tally`: the process-wide count of full-data passes.

Nothing is imported here, so that the pure-numpy kernels can read
:mod:`~pymc_minibatch_mh.data.blocks` without importing PyTensor.
"""
