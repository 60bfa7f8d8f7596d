# Horovod's first lines: who am I, how many are we.
import os
import sys

import numpy as np

import tfplus.distributed as hvd

hvd.init()
hvd.init()  # a second init does nothing, as Horovod's
facts = dict(rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(), local_size=hvd.local_size(),
             initialized=hvd.is_initialized(), mpi_built=hvd.mpi_built(), nccl_built=hvd.nccl_built(),
             cross_size=hvd.cross_size(), cross_rank=hvd.cross_rank(), homogeneous=hvd.is_homogeneous())
np.savez(os.path.join(sys.argv[1], f"basics-rank{hvd.rank()}.npz"), **facts)
